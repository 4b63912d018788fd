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
        err_set(cls, errstr, errstr_size, "%s: %.*s", what, (int) strcspn(msg, "\n"), msg);
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
