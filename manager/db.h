/*
 * db - what every PostgreSQL user in Steward shares: connecting, turning a
 * failed result into an error class, and printing a connection string
 * without its secrets.
 *
 * Each thread owns its own PGconn; nothing here keeps state.
 */
#ifndef STEWARD_DB_H
#define STEWARD_DB_H

#include "manager/err.h"

#include <libpq-fe.h>
#include <stddef.h>

/*
 * Connects with `conninfo` (a libpq keyword/value string or URI; "" leaves
 * everything to the PG* variables) and sets application_name to `app`.
 * Returns the connection (PQfinish() it), or NULL with the reason in errstr.
 */
PGconn *db_connect(const char *conninfo, const char *app, char *errstr, size_t errstr_size);

/*
 * The class of a failed result: ERR_CONFLICT for serialization failures and
 * deadlocks (retry the transaction), ERR_TRANSIENT for a lost or refused
 * connection or a server shutting down, ERR_FATAL otherwise. ERR_OK for a
 * successful result.
 */
err_class_t db_result_class(const PGresult *res, const PGconn *conn);

/*
 * Runs one statement with text parameters. Returns its result (PQclear()
 * it), or NULL with the class in *cls and "what: server message" in errstr.
 */
PGresult *db_query(PGconn *conn, const char *what, const char *sql, int nparams,
                   const char *const *params, err_class_t *cls, char *errstr, size_t errstr_size);

/* Rolls back the open transaction, if any, on a connection that still works. */
void db_rollback(PGconn *conn);

/*
 * Runs one statement with text parameters and discards its rows. On failure
 * returns the class with "what: server message" in errstr.
 */
err_class_t db_exec(PGconn *conn, const char *what, const char *sql, int nparams,
                    const char *const *params, char *errstr, size_t errstr_size);

/*
 * The connection string of database `dbname` on the server `conninfo`
 * names (keyword/value form, every other setting kept). A new string (free
 * it); NULL when conninfo cannot be parsed.
 */
char *db_with_dbname(const char *conninfo, const char *dbname);

/*
 * Copies conninfo into buf with any password replaced by "********", for
 * logs and messages. Returns buf.
 */
char *db_redact(const char *conninfo, char *buf, size_t buf_size);

#endif
