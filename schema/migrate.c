/*
 * migrate - the migration runner; see migrate.h.
 */
#include "schema/migrate.h"

#include "common/db.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int migrate_latest(void)
{
    return migrate_n_scripts > 0 ? migrate_scripts[migrate_n_scripts - 1].version : 0;
}

/* Runs fixed SQL that must succeed. PQexec, not PQexecParams: a migration
 * holds several statements, and none of it is input. */
static err_class_t run(PGconn *conn, const char *what, const char *sql, char *errstr,
                       size_t errstr_size)
{
    PGresult *res = PQexec(conn, sql);
    err_class_t cls = db_result_class(res, conn);

    if (cls != ERR_OK) {
        const char *msg = PQerrorMessage(conn);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        /* 42501 insufficient_privilege: no retry helps; the role is wrong. */
        bool denied = state != NULL && strcmp(state, "42501") == 0;
        if (denied)
            cls = ERR_INVALID;
        err_set(cls, errstr, errstr_size, "%s: %.*s%s", what, (int) strcspn(msg, "\n"), msg,
                denied ? "; this role may not change the schema: run steward migrate as its "
                         "owner, and steward run with --no-migrate (migrate_on_start=false)"
                       : "");
    }
    PQclear(res);
    return cls;
}

/*
 * Compares what the database recorded with the embedded scripts. Fills
 * *current with the highest applied version, and returns ERR_FATAL when the
 * database knows a version this binary does not or a checksum differs.
 */
static err_class_t check_applied(PGconn *conn, int *current, bool *applied_flags, char *errstr,
                                 size_t errstr_size)
{
    PGresult *res = PQexec(conn, "SELECT version, name, checksum FROM steward.schema_versions "
                                 "ORDER BY version");
    err_class_t cls = db_result_class(res, conn);

    *current = 0;
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "reading steward.schema_versions: %s",
                PQerrorMessage(conn));
        goto done;
    }
    for (int row = 0; row < PQntuples(res); row++) {
        int version = atoi(PQgetvalue(res, row, 0));
        const migrate_script_t *script = NULL;
        size_t idx = 0;

        for (idx = 0; idx < migrate_n_scripts; idx++) {
            if (migrate_scripts[idx].version == version) {
                script = &migrate_scripts[idx];
                break;
            }
        }
        if (script == NULL) {
            cls = err_set(ERR_FATAL, errstr, errstr_size,
                          "the database has schema version %d (%s), which this steward (schema "
                          "%d) does not know: upgrade steward",
                          version, PQgetvalue(res, row, 1), migrate_latest());
            goto done;
        }
        applied_flags[idx] = true;
        if (version > *current)
            *current = version;
    }

    /* Checksums are compared in SQL so both sides hash the same bytes. */
    for (size_t idx = 0; idx < migrate_n_scripts; idx++) {
        if (!applied_flags[idx])
            continue;
        char version[16];
        snprintf(version, sizeof version, "%d", migrate_scripts[idx].version);
        const char *params[2] = {version, migrate_scripts[idx].sql};
        PGresult *cmp = PQexecParams(conn,
                                     "SELECT checksum = md5($2) FROM steward.schema_versions "
                                     "WHERE version = $1::int",
                                     2, NULL, params, NULL, NULL, 0);
        cls = db_result_class(cmp, conn);
        if (cls != ERR_OK) {
            err_set(cls, errstr, errstr_size, "comparing checksums: %s", PQerrorMessage(conn));
        } else if (strcmp(PQgetvalue(cmp, 0, 0), "t") != 0) {
            cls = err_set(ERR_FATAL, errstr, errstr_size,
                          "migration %s was changed after it was applied to this database: "
                          "restore its original text and add a new migration instead",
                          migrate_scripts[idx].name);
        }
        PQclear(cmp);
        if (cls != ERR_OK)
            goto done;
    }
done:
    PQclear(res);
    return cls;
}

err_class_t migrate_apply(PGconn *conn, migrate_result_t *result, char *errstr, size_t errstr_size)
{
    bool *applied_flags = calloc(migrate_n_scripts + 1, sizeof *applied_flags);
    int current = 0, applied = 0;
    char lock_sql[96];
    err_class_t cls;

    if (applied_flags == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    snprintf(lock_sql, sizeof lock_sql, "SELECT pg_advisory_xact_lock(%lld)", MIGRATE_LOCK_KEY);

    /* The lock comes first: a second runner waits here and then sees the
     * first one's committed work, including the schema itself. */
    if ((cls = run(conn, "starting the migration", "BEGIN", errstr, errstr_size)) != ERR_OK ||
        (cls = run(conn, "taking the migration lock", lock_sql, errstr, errstr_size)) != ERR_OK ||
        (cls = run(conn, "creating the steward schema",
                   "CREATE SCHEMA IF NOT EXISTS steward;"
                   "CREATE TABLE IF NOT EXISTS steward.schema_versions ("
                   "  version    integer PRIMARY KEY,"
                   "  name       text NOT NULL,"
                   "  checksum   text NOT NULL,"
                   "  applied_at timestamptz NOT NULL DEFAULT now())",
                   errstr, errstr_size)) != ERR_OK ||
        (cls = check_applied(conn, &current, applied_flags, errstr, errstr_size)) != ERR_OK)
        goto fail;

    for (size_t idx = 0; idx < migrate_n_scripts; idx++) {
        const migrate_script_t *script = &migrate_scripts[idx];
        char what[128], version[16];

        if (applied_flags[idx])
            continue;
        snprintf(what, sizeof what, "applying migration %s", script->name);
        /* Migration text is fixed SQL shipped in the binary, never input. */
        if ((cls = run(conn, what, script->sql, errstr, errstr_size)) != ERR_OK)
            goto fail;
        snprintf(version, sizeof version, "%d", script->version);
        const char *params[3] = {version, script->name, script->sql};
        cls = db_exec(conn, "recording the migration",
                      "INSERT INTO steward.schema_versions (version, name, checksum) "
                      "VALUES ($1::int, $2, md5($3))",
                      3, params, errstr, errstr_size);
        if (cls != ERR_OK)
            goto fail;
        applied++;
    }
    if ((cls = run(conn, "committing the migration", "COMMIT", errstr, errstr_size)) != ERR_OK)
        goto fail;

    result->from_version = current;
    result->to_version = applied > 0 ? migrate_latest() : current;
    result->applied = applied;
    free(applied_flags);
    return ERR_OK;

fail:
    if (PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) != PQTRANS_IDLE)
        PQclear(PQexec(conn, "ROLLBACK"));
    free(applied_flags);
    return cls;
}

err_class_t migrate_current(PGconn *conn, int *version, char *errstr, size_t errstr_size)
{
    /* Two statements: a query naming a missing table fails at parse time,
     * whatever CASE guards it. */
    PGresult *res = PQexec(conn, "SELECT to_regclass('steward.schema_versions') IS NOT NULL");
    err_class_t cls = db_result_class(res, conn);
    bool exists = cls == ERR_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0;

    PQclear(res);
    *version = 0;
    if (cls == ERR_OK && exists) {
        res = PQexec(conn, "SELECT coalesce(max(version), 0) FROM steward.schema_versions");
        cls = db_result_class(res, conn);
        if (cls == ERR_OK)
            *version = atoi(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    if (cls != ERR_OK)
        err_set(cls, errstr, errstr_size, "reading the schema version: %s", PQerrorMessage(conn));
    return cls;
}

err_class_t migrate_require(PGconn *conn, char *errstr, size_t errstr_size)
{
    int version = 0;
    err_class_t cls = migrate_current(conn, &version, errstr, errstr_size);
    const char *db = PQdb(conn);

    if (cls != ERR_OK)
        return cls;
    if (version == 0)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "no steward schema in database %s; run steward migrate", db);
    if (version < migrate_latest())
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "schema in database %s at version %d, this steward needs %d: run steward "
                       "migrate as the owner",
                       db, version, migrate_latest());
    if (version > migrate_latest())
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "schema in database %s at version %d is newer than this steward (%d): "
                       "upgrade steward",
                       db, version, migrate_latest());

    /* At the newest version, a migration numbered below it may still be
     * missing (branches merged out of order): count every one. */
    size_t cap = migrate_n_scripts * 12 + 3, len = 0;
    char *versions = malloc(cap);
    if (versions == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    len += (size_t) snprintf(versions + len, cap - len, "{");
    for (size_t i = 0; i < migrate_n_scripts; i++)
        len += (size_t) snprintf(versions + len, cap - len, "%s%d", i > 0 ? "," : "",
                                 migrate_scripts[i].version);
    snprintf(versions + len, cap - len, "}");
    const char *params[1] = {versions};
    PGresult *res = PQexecParams(conn,
                                 "SELECT count(*) FROM unnest($1::int[]) AS v(version) "
                                 "WHERE NOT EXISTS (SELECT FROM steward.schema_versions s "
                                 "                  WHERE s.version = v.version)",
                                 1, NULL, params, NULL, NULL, 0);
    free(versions);
    cls = db_result_class(res, conn);
    if (cls != ERR_OK)
        err_set(cls, errstr, errstr_size, "reading the applied migrations: %s",
                PQerrorMessage(conn));
    else if (atoi(PQgetvalue(res, 0, 0)) > 0)
        cls = err_set(ERR_INVALID, errstr, errstr_size,
                      "schema in database %s lacks %s migration(s) of this steward: run steward "
                      "migrate as the owner",
                      db, PQgetvalue(res, 0, 0));
    PQclear(res);
    return cls;
}

char *migrate_roles_sql(PGconn *conn, const migrate_roles_t *roles, char *errstr,
                        size_t errstr_size)
{
    const char *names[4] = {roles->owner, roles->runtime, roles->reader, roles->operator};
    char *ident[4] = {NULL}, *lit[4] = {NULL};
    char *sql = NULL;
    bool quoted = true;

    for (size_t i = 0; i < 4; i++) {
        ident[i] = PQescapeIdentifier(conn, names[i], strlen(names[i]));
        lit[i] = PQescapeLiteral(conn, names[i], strlen(names[i]));
        quoted = quoted && ident[i] != NULL && lit[i] != NULL;
    }
    if (!quoted) {
        err_set(ERR_INVALID, errstr, errstr_size, "quoting the role names: %s",
                PQerrorMessage(conn));
        goto done;
    }
    /* Group roles without LOGIN: people and services log in as themselves
     * and are granted into one (GRANT steward_runtime TO svc_steward), so a
     * password never lives in this SQL and each login shows in pg_stat_activity.
     * Ownership moves object by object: ALTER SCHEMA alone leaves the tables
     * with whoever created them; a table carries its owned sequences.
     * Functions by name: steward.action_* are the actions (runtime and
     * operator), steward.audit_* their helpers (the owner's alone), and the
     * history_* ones retention's (runtime). */
    if (asprintf(&sql,
                 "DO $roles$ BEGIN\n"
                 "  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %5$s) THEN\n"
                 "    CREATE ROLE %1$s NOLOGIN; END IF;\n"
                 "END $roles$;\n"
                 "DO $roles$ BEGIN\n"
                 "  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %6$s) THEN\n"
                 "    CREATE ROLE %2$s NOLOGIN; END IF;\n"
                 "  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %7$s) THEN\n"
                 "    CREATE ROLE %3$s NOLOGIN; END IF;\n"
                 "  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %8$s) THEN\n"
                 "    CREATE ROLE %4$s NOLOGIN; END IF;\n"
                 "END $roles$;\n"
                 "ALTER SCHEMA steward OWNER TO %1$s;\n"
                 "DO $roles$ DECLARE r record; BEGIN\n"
                 "  FOR r IN SELECT c.oid::regclass AS name FROM pg_class c\n"
                 "    JOIN pg_namespace n ON n.oid = c.relnamespace\n"
                 "    WHERE n.nspname = 'steward' AND c.relkind IN ('r', 'p', 'v', 'm') LOOP\n"
                 "    EXECUTE format('ALTER TABLE %%s OWNER TO %%I', r.name, %5$s);\n"
                 "  END LOOP;\n"
                 "  FOR r IN SELECT p.oid::regprocedure AS name FROM pg_proc p\n"
                 "    JOIN pg_namespace n ON n.oid = p.pronamespace\n"
                 "    WHERE n.nspname = 'steward' LOOP\n"
                 "    EXECUTE format('ALTER ROUTINE %%s OWNER TO %%I', r.name, %5$s);\n"
                 "  END LOOP;\n"
                 "END $roles$;\n"
                 "REVOKE ALL ON SCHEMA steward FROM PUBLIC;\n"
                 "GRANT USAGE ON SCHEMA steward TO %2$s, %3$s, %4$s;\n"
                 "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA steward TO %2$s;\n"
                 "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA steward TO %2$s;\n"
                 "GRANT SELECT ON ALL TABLES IN SCHEMA steward TO %3$s, %4$s;\n"
                 "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA steward TO %2$s, %3$s, %4$s;\n"
                 /* History is append-only for the runtime role; each
                  * partition has grants of its own. */
                 "REVOKE UPDATE, DELETE ON steward.history FROM %2$s;\n"
                 "DO $roles$ DECLARE r record; BEGIN\n"
                 "  FOR r IN SELECT i.inhrelid::regclass AS name FROM pg_inherits i\n"
                 "    WHERE i.inhparent = 'steward.history'::regclass LOOP\n"
                 "    EXECUTE format('REVOKE UPDATE, DELETE ON %%s FROM %%I', r.name, %6$s);\n"
                 "  END LOOP;\n"
                 "  FOR r IN SELECT p.oid::regprocedure AS name, p.proname FROM pg_proc p\n"
                 "    JOIN pg_namespace n ON n.oid = p.pronamespace\n"
                 "    WHERE n.nspname = 'steward' AND (p.proname LIKE 'action\\_%%'\n"
                 "      OR p.proname LIKE 'audit\\_%%' OR p.proname LIKE 'history\\_%%') LOOP\n"
                 "    EXECUTE format('REVOKE EXECUTE ON FUNCTION %%s FROM %%I', r.name, %7$s);\n"
                 "    IF r.proname NOT LIKE 'action\\_%%' THEN\n"
                 "      EXECUTE format('REVOKE EXECUTE ON FUNCTION %%s FROM %%I', r.name, %8$s);\n"
                 "    END IF;\n"
                 "    IF r.proname LIKE 'audit\\_%%' THEN\n"
                 "      EXECUTE format('REVOKE EXECUTE ON FUNCTION %%s FROM %%I', r.name, %6$s);\n"
                 "    END IF;\n"
                 "  END LOOP;\n"
                 "END $roles$;\n"
                 /* Instance locks (0008, 0018) are for Steward's writers: a
                  * reader holding one would stop intake of the instance.
                  * PUBLIC too, or the reader keeps EXECUTE through it. */
                 "REVOKE EXECUTE ON FUNCTION\n"
                 "  steward.instance_lock_key(text, text),\n"
                 "  steward.instance_lock_objid(text, text),\n"
                 "  steward.lock_instance(text, text),\n"
                 "  steward.try_lock_instance(text, text),\n"
                 "  steward.lock_instances(text[], text[], int) FROM %3$s, PUBLIC;\n"
                 "ALTER DEFAULT PRIVILEGES FOR ROLE %1$s IN SCHEMA steward\n"
                 "  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %2$s;\n"
                 "ALTER DEFAULT PRIVILEGES FOR ROLE %1$s IN SCHEMA steward\n"
                 "  GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO %2$s;\n"
                 "ALTER DEFAULT PRIVILEGES FOR ROLE %1$s IN SCHEMA steward\n"
                 "  GRANT SELECT ON TABLES TO %3$s, %4$s;\n",
                 ident[0], ident[1], ident[2], ident[3], lit[0], lit[1], lit[2], lit[3]) < 0) {
        sql = NULL;
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
done:
    for (size_t i = 0; i < 4; i++) {
        PQfreemem(ident[i]);
        PQfreemem(lit[i]);
    }
    return sql;
}
