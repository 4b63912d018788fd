/*
 * migrate - the versioned SQL migrations of the steward schema, and their
 * runner.
 *
 * A migration is one file schema/migrations/NNNN_name.sql, compiled into
 * the binary. Applied versions are recorded in steward.schema_versions with
 * a checksum of their text, so a migration edited after it was applied is
 * caught instead of silently diverging. The whole run is one transaction
 * under a transaction-scoped advisory lock: two processes migrating at
 * once serialize, and the second finds nothing left to do.
 */
#ifndef STEWARD_MIGRATE_H
#define STEWARD_MIGRATE_H

#include "common/err.h"

#include <libpq-fe.h>
#include <stddef.h>

typedef struct migrate_script {
    int version;
    const char *name; /* "0001_init" */
    const char *sql;
} migrate_script_t;

/* Every migration, ascending by version (generated at build time). */
extern const migrate_script_t migrate_scripts[];
extern const size_t migrate_n_scripts;

/* The lock key; any process that changes the schema takes it. */
#define MIGRATE_LOCK_KEY 0x5354455741524400LL /* "STEWARD\0" */

typedef struct migrate_result {
    int from_version; /* the schema's version before the run; 0 for none */
    int to_version;   /* after it */
    int applied;      /* migrations applied by this run */
} migrate_result_t;

/*
 * Applies every pending migration on `conn` (borrowed; must not be inside a
 * transaction). On failure nothing is applied, *result is untouched and the
 * class says why: ERR_TRANSIENT for a lost connection, ERR_FATAL for a
 * database whose schema is newer than this binary or whose applied
 * migrations differ from the embedded ones, ERR_INVALID when the role may
 * not change the schema (SQLSTATE 42501: waiting cannot help; the message
 * says to migrate as the owner), ERR_FATAL for other SQL errors.
 */
err_class_t migrate_apply(PGconn *conn, migrate_result_t *result, char *errstr, size_t errstr_size);

/*
 * Reads the schema's current version into *version (0 when the schema is
 * absent) without changing anything.
 */
err_class_t migrate_current(PGconn *conn, int *version, char *errstr, size_t errstr_size);

/*
 * Checks, changing nothing, that the steward schema is on `conn` at exactly
 * this binary's version: what a command that only reads or writes rows
 * (and so may run as a role that cannot migrate) needs before it starts.
 * ERR_INVALID with a sentence naming the database and what to do: "no
 * steward schema in database X; run steward migrate", "schema at version
 * N, this steward needs M: run steward migrate as the owner", or "...
 * newer than this steward: upgrade steward". Other classes for a failed
 * query.
 */
err_class_t migrate_require(PGconn *conn, char *errstr, size_t errstr_size);

/* The four database roles of a least-privilege deployment. */
typedef struct migrate_roles {
    const char *owner;    /* owns the schema; `steward migrate` and `steward prune` */
    const char *runtime;  /* `steward run`: DML on the tables (history append-only), no DDL */
    const char *reader;   /* inspect, stuck, report, the HTTP reads: SELECT */
    const char *operator; /* the action verbs: SELECT, and EXECUTE on steward.action_* only */
} migrate_roles_t;

#define MIGRATE_DEFAULT_OWNER    "steward_owner"
#define MIGRATE_DEFAULT_RUNTIME  "steward_runtime"
#define MIGRATE_DEFAULT_READER   "steward_reader"
#define MIGRATE_DEFAULT_OPERATOR "steward_operator"

/*
 * The SQL that creates the roles (NOLOGIN groups, created when missing),
 * hands the steward schema and everything in it to the owner, and grants
 * the runtime, reader and operator roles what they need on what exists now
 * and on what the owner creates later. No role but the owner may change or
 * delete history or write the audit (migration 0019's triggers): the
 * runtime role loses UPDATE and DELETE on history, the operator role
 * writes nothing but through the steward.action_* functions, the reader
 * runs none of them. Needs a migrated schema when run. Returns
 * a new string (free it), or NULL with the reason in errstr (a role name
 * libpq cannot quote, out of memory).
 */
char *migrate_roles_sql(PGconn *conn, const migrate_roles_t *roles, char *errstr,
                        size_t errstr_size);

/* The newest version this binary knows. */
int migrate_latest(void);

#endif
