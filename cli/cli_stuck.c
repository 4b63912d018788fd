/*
 * cli_stuck - `steward stuck`: every open alert, grouped by process and
 * state, oldest first: what is stuck, for how long, and whose it is.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "formats/decode.h"
#include "manager/operator/query.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char stuck_usage[] =
    "usage: steward stuck [--process NAME] [--json] [--config FILE] [--database CONNINFO]\n"
    "\n"
    "Lists the open alerts grouped by process and state, oldest first: for\n"
    "each, how long its instance has been in its state (at the process's\n"
    "watermark), how long the alert has been open, and who owns it. Exits 1\n"
    "when --process names a process the database has no definition of.\n"
    "\n"
    "  --process NAME        only this process\n" CLI_COMMON_USAGE;

static void print_text(json_t *doc)
{
    decode_json_printable(doc); /* keys and summaries came from producers */
    json_t *groups = json_object_get(doc, "groups");
    if (json_array_size(groups) == 0) {
        printf("nothing stuck: no open alerts\n");
        return;
    }
    size_t i, j;
    json_t *group, *alert;
    json_array_foreach(groups, i, group)
    {
        const char *process = json_string_value(json_object_get(group, "process"));
        const char *state = json_string_value(json_object_get(group, "state"));
        printf("%s%s%s (owner %s): %lld open\n", *process ? process : "steward",
               *state ? " / " : "", state, json_string_value(json_object_get(group, "owner")),
               (long long) json_integer_value(json_object_get(group, "open")));
        json_array_foreach(json_object_get(group, "alerts"), j, alert)
        {
            char age[32], stuck[64];
            duration_format_rounded(json_integer_value(json_object_get(alert, "age_ms")), age,
                                    sizeof age);
            /* How long the instance has been stuck leads: the alert may be
             * younger (opened at the deadline, or a sequence alert). */
            json_t *in_state = json_object_get(alert, "ms_in_state");
            const char *at = json_string_value(json_object_get(alert, "instance_state"));
            if (json_is_integer(in_state))
                duration_format_rounded(json_integer_value(in_state), stuck, sizeof stuck);
            else
                snprintf(stuck, sizeof stuck, "%s", at != NULL ? "?" : "-");
            const char *key = json_string_value(json_object_get(alert, "key"));
            printf("  %-16s in state %-7s %-17s alert open %-7s %s  [alert %lld",
                   key != NULL ? key : "-", stuck,
                   json_string_value(json_object_get(alert, "kind")), age,
                   json_string_value(json_object_get(alert, "summary")),
                   (long long) json_integer_value(json_object_get(alert, "id")));
            if (at != NULL && strcmp(at, json_string_value(json_object_get(group, "state"))) != 0)
                printf("; now in %s", at);
            /* Who is on it, so a second person does not start the same work. */
            const char *acked = json_string_value(json_object_get(alert, "acked_by"));
            const char *claimed = json_string_value(json_object_get(alert, "claimed_by"));
            if (acked != NULL)
                printf("; acknowledged by %s", acked);
            if (claimed != NULL)
                printf("; claimed by %s", claimed);
            const char *silenced = json_string_value(json_object_get(alert, "silenced_until"));
            if (silenced != NULL)
                printf("; silenced until %s", silenced);
            printf("]\n");
        }
    }
}

/* True when the database has recorded a definition of process. */
static err_class_t process_known(PGconn *conn, const char *process, bool *known, char *errstr,
                                 size_t errstr_size)
{
    const char *params[1] = {process};
    PGresult *res =
        PQexecParams(conn, "SELECT 1 FROM steward.definitions WHERE process = $1 LIMIT 1", 1, NULL,
                     params, NULL, NULL, 0);
    err_class_t cls = db_result_class(res, conn);
    if (cls != ERR_OK)
        err_set(cls, errstr, errstr_size, "reading the definitions: %s", PQerrorMessage(conn));
    *known = cls == ERR_OK && PQntuples(res) > 0;
    PQclear(res);
    return cls;
}

int cli_stuck(int argc, char **argv)
{
    static const struct option options[] = {
        {"process", required_argument, NULL, 'p'},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    const char *process = NULL;
    int opt, rc = EXIT_OK;
    char errstr[1024];
    cli_opts_t o;

    if (!cli_opts_init(&o, "steward stuck", stuck_usage, argc, argv))
        return EXIT_RUNTIME;
    while ((opt = cli_opts_next(&o, argc, argv, options, false, &rc)) != -1)
        if (opt == 'p')
            process = optarg;
    PGconn *conn = NULL;
    if (rc >= 0 || (conn = cli_opts_connect(&o, true, &rc)) == NULL) {
        cli_opts_free(&o);
        return rc;
    }
    json_t *doc = NULL;
    bool known = true;
    if (process != NULL && process_known(conn, process, &known, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward stuck: %s\n", errstr);
        rc = EXIT_RUNTIME;
    } else if (!known) {
        fprintf(stderr, "steward stuck: no process %s in steward.definitions\n", process);
        rc = EXIT_RUNTIME;
    } else if (query_stuck(conn, process, &doc, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward stuck: %s\n", errstr);
        rc = EXIT_RUNTIME;
    } else if (o.json) {
        cli_print_json(doc);
    } else {
        print_text(doc);
    }
    json_decref(doc);
    PQfinish(conn);
    cli_opts_free(&o);
    return rc;
}
