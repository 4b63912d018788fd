/*
 * cli_prune - `steward prune`: the retention pass of `steward run`, on
 * demand, printing per table what it removed (or, with --dry-run, what it
 * would remove). See manager/timing/retention.h for what goes and what stays.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "manager/config/config.h"
#include "manager/timing/retention.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char prune_usage[] =
    "usage: steward prune [--dry-run] [--json] [--config FILE] [--set KEY=VALUE]\n"
    "                     [--database CONNINFO]\n"
    "\n"
    "Removes what the retention settings say is old: history partitions\n"
    "(dropped whole), rejected messages, delivered or failed outbox rows,\n"
    "resolved alerts, the ownership log, sent or cancelled commands and, with\n"
    "retention.instances set, finished instances; creates the coming weeks'\n"
    "history partitions. Undelivered outbox rows, unsent commands, open alerts\n"
    "and unfinished instances are never removed.\n"
    "\n"
    "  --dry-run             change nothing; print what would be removed\n"
    "(--set takes a retention key too, e.g. retention.history=60d or\n"
    "retention.rejected=off)\n" CLI_COMMON_USAGE;

static void print_text(const json_t *doc)
{
    bool dry = json_is_true(json_object_get(doc, "dry_run"));
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(doc, "tables"), i, row)
    {
        const char *keep = json_string_value(json_object_get(row, "keep"));
        long long rows = (long long) json_integer_value(json_object_get(row, "rows"));
        printf("%-14s keep %-6s %s %lld rows", json_string_value(json_object_get(row, "table")),
               keep != NULL ? keep : "always", dry ? "would remove" : "removed", rows);
        json_t *dropped = json_object_get(row, "partitions_dropped");
        if (json_array_size(dropped) > 0) {
            printf(" (%s %zu partition%s:", dry ? "dropping" : "dropped", json_array_size(dropped),
                   json_array_size(dropped) == 1 ? "" : "s");
            size_t j;
            json_t *name;
            json_array_foreach(dropped, j, name) printf(" %s", json_string_value(name));
            printf(")");
        }
        printf("\n");
        json_t *created = json_object_get(row, "partitions_created");
        if (json_array_size(created) > 0) {
            printf("%-14s %s %zu partition%s:", "", dry ? "would create" : "created",
                   json_array_size(created), json_array_size(created) == 1 ? "" : "s");
            size_t j;
            json_t *name;
            json_array_foreach(created, j, name) printf(" %s", json_string_value(name));
            printf("\n");
        }
    }
}

int cli_prune(int argc, char **argv)
{
    static const struct option options[] = {
        {"dry-run", no_argument, NULL, 'n'},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    bool dry_run = false;
    char errstr[1024];
    int opt, rc;
    cli_opts_t o;

    if (!cli_opts_init(&o, "steward prune", prune_usage, argc, argv))
        return EXIT_RUNTIME;
    while ((opt = cli_opts_next(&o, argc, argv, options, false, &rc)) != -1)
        if (opt == 'n')
            dry_run = true;
    /* The same settings `steward run` would use: file, environment, flags. */
    PGconn *conn = NULL;
    if (rc >= 0 || (conn = cli_opts_connect(&o, true, &rc)) == NULL) {
        cli_opts_free(&o);
        return rc;
    }
    retention_config_t rcfg;
    config_retention(o.cfg, &rcfg);
    bool as_json = o.json;
    err_class_t cls;
    rc = EXIT_OK;

    retention_result_t result;
    bool skipped;
    cls = retention_pass(conn, &rcfg, clock_wall_ms(), dry_run, true, NULL, &skipped, &result,
                         errstr, sizeof errstr);
    json_t *doc = retention_result_json(&result, &rcfg);
    if (cls != ERR_OK) {
        /* What was removed before the failure is gone: say so too. */
        if (!dry_run)
            print_text(doc);
        fprintf(stderr, "steward prune: %s\n", errstr);
        rc = EXIT_RUNTIME;
    } else if (as_json) {
        cli_print_json(doc);
    } else {
        print_text(doc);
    }
    json_decref(doc);
    retention_result_clear(&result);
    PQfinish(conn);
    cli_opts_free(&o);
    return rc;
}
