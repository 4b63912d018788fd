/*
 * cli_stuck - `steward stuck`: every open alert, grouped by process and
 * state, oldest first: what is stuck, for how long, and whose it is.
 */
#include "cli/cli.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "engine/decode.h"
#include "manager/query.h"

#include <getopt.h>
#include <stdio.h>

static const char stuck_usage[] =
    "usage: steward stuck [--process NAME] [--json] [--database CONNINFO]\n"
    "\n"
    "Lists the open alerts grouped by process and state, oldest first, with\n"
    "their age and owning team.\n"
    "\n"
    "  --process NAME        only this process\n"
    "  --json                the same as one JSON object\n"
    "  --database CONNINFO   libpq connection string ($STEWARD_DATABASE_URL)\n";

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
            char age[32];
            duration_format(json_integer_value(json_object_get(alert, "age_ms")), age, sizeof age);
            const char *key = json_string_value(json_object_get(alert, "key"));
            printf("  %-16s %-17s open %-8s %s  [alert %lld", key != NULL ? key : "-",
                   json_string_value(json_object_get(alert, "kind")), age,
                   json_string_value(json_object_get(alert, "summary")),
                   (long long) json_integer_value(json_object_get(alert, "id")));
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

int cli_stuck(int argc, char **argv)
{
    static const struct option options[] = {
        {"process", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        {"database", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *database = NULL, *process = NULL;
    int as_json = 0, opt;
    char errstr[1024];

    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            process = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'd':
            database = optarg;
            break;
        default:
            return cli_help_or_usage(opt, stuck_usage);
        }
    }
    if (cli_extra_args(argc, argv, "steward stuck", stuck_usage))
        return EXIT_USAGE;
    PGconn *conn = cli_connect(database, "steward stuck");
    if (conn == NULL)
        return EXIT_RUNTIME;
    json_t *doc = NULL;
    int rc = EXIT_OK;
    if (query_stuck(conn, process, &doc, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward stuck: %s\n", errstr);
        rc = EXIT_RUNTIME;
    } else if (as_json) {
        cli_print_json(doc);
    } else {
        print_text(doc);
    }
    json_decref(doc);
    PQfinish(conn);
    return rc;
}
