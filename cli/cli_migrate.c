/*
 * cli_migrate - `steward migrate`: bring the steward schema up to date.
 */
#include "cli/cli.h"
#include "common/db.h"
#include "common/err.h"
#include "schema/migrate.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static const char migrate_usage[] =
    "usage: steward migrate [--database CONNINFO] [--status]\n"
    "\n"
    "Applies every pending schema migration to the database, in one\n"
    "transaction under an advisory lock (safe to run from several processes\n"
    "at once). Running it again when nothing is pending changes nothing.\n"
    "\n"
    "  --database CONNINFO  libpq connection string or URI (default:\n"
    "                       $STEWARD_DATABASE_URL, else the PG* variables)\n"
    "  --status             print the schema's version and change nothing\n";

int cli_migrate(int argc, char **argv)
{
    static const struct option options[] = {
        {"database", required_argument, NULL, 'd'},
        {"status", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *database = NULL;
    int status_only = 0, opt;
    char errstr[1024];

    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'd':
            database = optarg;
            break;
        case 's':
            status_only = 1;
            break;
        default:
            return cli_help_or_usage(opt, migrate_usage);
        }
    }
    if (cli_extra_args(argc, argv, "steward migrate", migrate_usage))
        return EXIT_USAGE;

    PGconn *conn = cli_connect(database, "steward migrate");
    if (conn == NULL)
        return EXIT_RUNTIME;

    int rc = EXIT_OK;
    if (status_only) {
        int version;
        if (migrate_current(conn, &version, errstr, sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward migrate: %s\n", errstr);
            rc = EXIT_RUNTIME;
        } else {
            printf("schema steward at version %d; this steward knows version %d%s\n", version,
                   migrate_latest(), version < migrate_latest() ? " (migrations pending)" : "");
        }
    } else {
        migrate_result_t result;
        if (migrate_apply(conn, &result, errstr, sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward migrate: %s\n", errstr);
            rc = EXIT_RUNTIME;
        } else if (result.applied == 0) {
            printf("schema steward is up to date at version %d: nothing to do\n",
                   result.to_version);
        } else {
            printf("schema steward migrated from version %d to %d (%d migration%s applied)\n",
                   result.from_version, result.to_version, result.applied,
                   result.applied == 1 ? "" : "s");
        }
    }
    PQfinish(conn);
    return rc;
}
