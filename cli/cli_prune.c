/*
 * cli_prune - `steward prune`: the retention pass of `steward run`, on
 * demand, printing per table what it removed (or, with --dry-run, what it
 * would remove). See manager/retention.h for what goes and what stays.
 */
#include "cli/cli.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "manager/config.h"
#include "manager/retention.h"

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
    "resolved alerts and the ownership log; creates the coming weeks' history\n"
    "partitions. Undelivered outbox rows and open alerts are never removed.\n"
    "\n"
    "  --dry-run             change nothing; print what would be removed\n"
    "  --json                the same as one JSON object\n"
    "  --config FILE         read retention.* from this config file\n"
    "                        ($STEWARD_CONFIG)\n"
    "  --set KEY=VALUE       a retention key, e.g. retention.history=60d or\n"
    "                        retention.rejected=off\n"
    "  --database CONNINFO   libpq connection string ($STEWARD_DATABASE_URL)\n";

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
        {"json", no_argument, NULL, 'j'},
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 's'},
        {"database", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *database = NULL, *config_path = getenv("STEWARD_CONFIG");
    config_flag_t *sets = calloc((size_t) argc + 1, sizeof *sets);
    size_t n_sets = 0;
    bool dry_run = false, as_json = false;
    char errstr[1024];
    int opt, rc = EXIT_OK;

    if (sets == NULL)
        return EXIT_RUNTIME;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'n':
            dry_run = true;
            break;
        case 'j':
            as_json = true;
            break;
        case 'c':
            config_path = optarg;
            break;
        case 's':
            sets[n_sets++] = (config_flag_t){"set", optarg};
            break;
        case 'd':
            database = optarg;
            break;
        default:
            free(sets);
            return cli_help_or_usage(opt, prune_usage);
        }
    }
    if (cli_extra_args(argc, argv, "steward prune", prune_usage)) {
        free(sets);
        return EXIT_USAGE;
    }

    /* The same settings `steward run` would use: file, environment, flags. */
    err_class_t cls;
    config_t *cfg = config_build(config_path, sets, n_sets, &cls, errstr, sizeof errstr);
    free(sets);
    if (cfg == NULL) {
        fprintf(stderr, "steward prune: config: %s\n", cls == ERR_FATAL ? "out of memory" : errstr);
        return cls == ERR_FATAL ? EXIT_RUNTIME : EXIT_USAGE;
    }
    retention_config_t rcfg;
    retention_config_from(cfg, &rcfg);
    const char *url = database != NULL ? database : cfg->database;
    PGconn *conn = cli_connect(url != NULL && *url != '\0' ? url : NULL, "steward prune");
    config_free(cfg);
    if (conn == NULL)
        return EXIT_RUNTIME;

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
    return rc;
}
