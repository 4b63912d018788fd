/*
 * cli_migrate - `steward migrate`: bring the steward schema up to date,
 * report its version, or set up the least-privilege database roles.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/db.h"
#include "common/err.h"
#include "schema/migrate.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char migrate_usage[] =
    "usage: steward migrate [--status] [--create-roles [--print]] [--config FILE]\n"
    "                       [--database CONNINFO] [--set KEY=VALUE] [--json]\n"
    "\n"
    "Applies every pending schema migration to the database, in one\n"
    "transaction under an advisory lock (safe to run from several processes\n"
    "at once). Running it again when nothing is pending changes nothing.\n"
    "When the role roles.owner exists and the user may act as it, the\n"
    "migration runs as that role, so the owner owns what it creates.\n"
    "\n"
    "  --status              print the schema's version and change nothing;\n"
    "                        exits 1 when migrations are pending\n"
    "  --create-roles        migrate, then create the roles roles.owner,\n"
    "                        roles.runtime, roles.reader and roles.operator\n"
    "                        (NOLOGIN groups; defaults steward_owner,\n"
    "                        steward_runtime, steward_reader,\n"
    "                        steward_operator), give the schema to the owner\n"
    "                        and grant the others what they need (needs a\n"
    "                        superuser or CREATEROLE and the schema's owner)\n"
    "  --print               with --create-roles: print that SQL, change "
    "nothing\n" CLI_COMMON_USAGE;

/* Acts as the owner role for the rest of the session when it exists and
 * the user is a member: objects a migration creates then belong to it. */
static err_class_t become_owner(PGconn *conn, const char *owner, bool *became, char *errstr,
                                size_t errstr_size)
{
    const char *params[1] = {owner};
    PGresult *res = PQexecParams(conn,
                                 "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1) "
                                 "   AND current_user <> $1 "
                                 "   AND pg_has_role(current_user, $1, 'MEMBER')",
                                 1, NULL, params, NULL, NULL, 0);
    err_class_t cls = db_result_class(res, conn);
    *became = false;
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "looking up role %s: %s", owner, PQerrorMessage(conn));
    } else if (strcmp(PQgetvalue(res, 0, 0), "t") == 0) {
        PQclear(res);
        res = PQexecParams(conn, "SELECT set_config('role', $1, false)", 1, NULL, params, NULL,
                           NULL, 0);
        cls = db_result_class(res, conn);
        if (cls != ERR_OK)
            err_set(cls, errstr, errstr_size, "acting as role %s: %s", owner, PQerrorMessage(conn));
        *became = cls == ERR_OK;
    }
    PQclear(res);
    return cls;
}

static int status(PGconn *conn, bool as_json)
{
    char errstr[1024];
    int version;
    if (migrate_current(conn, &version, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward migrate: %s\n", errstr);
        return EXIT_RUNTIME;
    }
    /* migrate_require() also counts a migration missing below the newest. */
    char why[1024];
    bool pending =
        version <= migrate_latest() && migrate_require(conn, why, sizeof why) == ERR_INVALID;
    if (as_json) {
        json_t *doc = json_pack("{s:s, s:i, s:i, s:b}", "database", PQdb(conn), "version", version,
                                "latest", migrate_latest(), "pending", pending);
        cli_print_json(doc);
        json_decref(doc);
    } else {
        printf("schema steward at version %d; this steward knows version %d%s\n", version,
               migrate_latest(), pending ? " (migrations pending)" : "");
    }
    /* Non-zero when pending, so a deployment script can gate on it. */
    return pending ? EXIT_RUNTIME : EXIT_OK;
}

static int create_roles(PGconn *conn, const config_t *cfg, bool print_only)
{
    char errstr[1024];
    migrate_roles_t roles = {cfg->roles_owner, cfg->roles_runtime, cfg->roles_reader,
                             cfg->roles_operator};
    char *sql = migrate_roles_sql(conn, &roles, errstr, sizeof errstr);
    if (sql == NULL) {
        fprintf(stderr, "steward migrate: %s\n", errstr);
        return EXIT_RUNTIME;
    }
    int rc = EXIT_OK;
    if (print_only) {
        fputs(sql, stdout);
    } else {
        /* One transaction: the roles and their grants land together or not at all. */
        PGresult *res = PQexec(conn, "BEGIN");
        PQclear(res);
        res = PQexec(conn, sql);
        if (db_result_class(res, conn) != ERR_OK) {
            const char *msg = PQerrorMessage(conn);
            fprintf(stderr, "steward migrate: creating the roles: %.*s\n", (int) strcspn(msg, "\n"),
                    msg);
            PQclear(PQexec(conn, "ROLLBACK"));
            rc = EXIT_RUNTIME;
        } else {
            PQclear(PQexec(conn, "COMMIT"));
            printf("roles %s (owner), %s (runtime), %s (reader), %s (operator) ready in "
                   "database %s\n",
                   roles.owner, roles.runtime, roles.reader, roles.operator, PQdb(conn));
        }
        PQclear(res);
    }
    free(sql);
    return rc;
}

int cli_migrate(int argc, char **argv)
{
    static const struct option options[] = {
        {"status", no_argument, NULL, 's'},
        {"create-roles", no_argument, NULL, 'R'},
        {"print", no_argument, NULL, 'P'},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    bool status_only = false, roles = false, print_only = false;
    int opt, rc;
    char errstr[1024];
    cli_opts_t o;

    if (!cli_opts_init(&o, "steward migrate", migrate_usage, argc, argv))
        return EXIT_RUNTIME;
    while ((opt = cli_opts_next(&o, argc, argv, options, true, &rc)) != -1) {
        if (opt == 's')
            status_only = true;
        else if (opt == 'R')
            roles = true;
        else if (opt == 'P')
            print_only = true;
    }
    if (rc >= 0) {
        cli_opts_free(&o);
        return rc;
    }
    if (cli_extra_args(argc, argv, o.cmd, migrate_usage) || (print_only && !roles) ||
        (status_only && roles)) {
        if (print_only && !roles)
            fprintf(stderr, "steward migrate: --print goes with --create-roles\n%s", migrate_usage);
        else if (status_only && roles)
            fprintf(stderr, "steward migrate: --status and --create-roles exclude each other\n%s",
                    migrate_usage);
        cli_opts_free(&o);
        return EXIT_USAGE;
    }

    PGconn *conn = cli_opts_connect(&o, false, &rc);
    if (conn == NULL) {
        cli_opts_free(&o);
        return rc;
    }
    const config_t *cfg = o.cfg;
    bool became = false;
    rc = EXIT_OK;
    if (status_only) {
        rc = status(conn, o.json);
    } else if (roles && print_only) {
        rc = create_roles(conn, cfg, true);
    } else if (become_owner(conn, cfg->roles_owner, &became, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward migrate: %s\n", errstr);
        rc = EXIT_RUNTIME;
    } else {
        migrate_result_t result;
        if (migrate_apply(conn, &result, errstr, sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward migrate: %s\n", errstr);
            rc = EXIT_RUNTIME;
        } else if (o.json) {
            json_t *doc = json_pack("{s:s, s:i, s:i, s:i, s:s?}", "database", PQdb(conn), "from",
                                    result.from_version, "to", result.to_version, "applied",
                                    result.applied, "as_role", became ? cfg->roles_owner : NULL);
            cli_print_json(doc);
            json_decref(doc);
        } else if (result.applied == 0) {
            printf("schema steward is up to date at version %d: nothing to do\n",
                   result.to_version);
        } else {
            printf("schema steward migrated from version %d to %d (%d migration%s applied%s%s)\n",
                   result.from_version, result.to_version, result.applied,
                   result.applied == 1 ? "" : "s", became ? " as role " : "",
                   became ? cfg->roles_owner : "");
        }
        if (rc == EXIT_OK && roles) {
            /* Creating roles and reassigning needs the session's own rights. */
            if (became)
                PQclear(PQexec(conn, "RESET ROLE"));
            rc = create_roles(conn, cfg, false);
        }
    }
    PQfinish(conn);
    cli_opts_free(&o);
    return rc;
}
