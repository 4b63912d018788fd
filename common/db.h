/*
 * db - what every PostgreSQL user in Steward shares: connecting, turning a
 * failed result into an error class, and printing a connection string
 * without its secrets.
 *
 * Each thread owns its own PGconn; nothing here keeps state.
 */
#ifndef STEWARD_DB_H
#define STEWARD_DB_H

#include "common/err.h"

#include <libpq-fe.h>
#include <stddef.h>

/*
 * Connects with `conninfo` (a libpq keyword/value string or URI; "" leaves
 * everything to the PG* variables) and sets application_name to `app`.
 * TCP keepalives are on (idle 10 s, then 3 probes 5 s apart) and
 * tcp_user_timeout is 25 s unless conninfo says otherwise, so a server
 * that vanished without closing the connection is noticed in about 25 s,
 * waiting for an answer or for an acknowledgement, rather than after the
 * kernel's minutes or hours.
 * Returns the connection (PQfinish() it), or NULL with the reason in
 * errstr (never the password: see db_scrub()).
 */
PGconn *db_connect(const char *conninfo, const char *app, char *errstr, size_t errstr_size);

/*
 * db_connect(), also saying whether trying again can help: *cls is
 * ERR_INVALID when it cannot (see db_connect_class()), ERR_TRANSIENT when
 * it may, ERR_FATAL when out of memory.
 */
PGconn *db_connect_classified(const char *conninfo, const char *app, err_class_t *cls, char *errstr,
                              size_t errstr_size);

/*
 * Whether a failed connection attempt is worth repeating, from what libpq
 * said: ERR_INVALID for a connection string libpq refuses (an option value
 * it does not know: the message starts "invalid " or "could not match "),
 * a password that is required but missing (`needs_password`, from
 * PQconnectionNeedsPassword()), and a server that refuses who we are or
 * what we ask for ("... authentication failed", "no pg_hba.conf entry",
 * "... does not exist", "not permitted to log in"). ERR_TRANSIENT for
 * everything else: refused or timed-out connections, unresolvable host
 * names (a Service may not exist yet), a server starting up, shutting
 * down or out of connection slots. The server's part of the message is in
 * its lc_messages: a server speaking another language than English makes
 * every failure transient, retried and logged, never a silent stop. Pure.
 */
err_class_t db_connect_class(int needs_password, const char *message);

/*
 * The class of a failed result: ERR_CONFLICT for serialization failures and
 * deadlocks (retry the transaction), ERR_TRANSIENT for a lost or refused
 * connection or a server shutting down, ERR_INVALID for content the server
 * refuses (SQLSTATE class 22, data exception: a value out of range, a bad
 * encoding; class 54, program limit exceeded: an index row too large) and
 * for a statement too big for the server's resources (class 53 except
 * 53300, too_many_connections, which is transient: out of memory, out of
 * shared memory such as lock slots), so a caller can find the input that
 * caused it or try a smaller statement; ERR_FATAL otherwise. ERR_OK for a
 * successful result.
 */
err_class_t db_result_class(const PGresult *res, const PGconn *conn);

/*
 * Runs one statement with text parameters. Returns its result (PQclear()
 * it), or NULL with the class in *cls and "what: server message (SQLSTATE
 * xxxxx)" in errstr.
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

/*
 * Copies libpq's `message` about `conninfo` into buf without the password.
 * libpq quotes the text it cannot parse, so when conninfo does not parse
 * (a URI password with a '%' not followed by two hex digits, an unquoted
 * space in a keyword/value password) every quoted part is replaced by
 * "..." (except the option name of "invalid connection option" and
 * "invalid URI query parameter"); when it parses, every occurrence of the
 * password is replaced by "********". Returns buf. Pure.
 */
char *db_scrub(const char *conninfo, const char *message, char *buf, size_t buf_size);

/*
 * Checks that conninfo parses as libpq reads it. ERR_INVALID with "the
 * database connection string cannot be parsed: why" (scrubbed) otherwise.
 */
err_class_t db_check_conninfo(const char *conninfo, char *errstr, size_t errstr_size);

#endif
