/*
 * backtest - what `steward backtest` concludes from a replay: the scratch
 * database the replay writes into, and the alerts a candidate definition
 * would have raised there.
 *
 * The replay itself (Kafka through intake, then one scheduler pass at the
 * window's end) is the daemon's own threads, wired by cli/cli_backtest.c;
 * this module owns everything before and after it. The report of the
 * scratch database is report_build() (shadow/report.h).
 *
 * One thread; each function uses only the connections it is given.
 */
#ifndef STEWARD_BACKTEST_H
#define STEWARD_BACKTEST_H

#include "common/err.h"
#include "definitions/def.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

typedef struct backtest_scratch {
    char name[64]; /* the database's name: steward_backtest_<pid>_<n> */
    char *url;     /* its connection string (owned); NULL until created */
    PGconn *admin; /* on the server's own database, to drop the scratch one */
    PGconn *conn;  /* on the scratch database, migrated */
} backtest_scratch_t;

/*
 * Creates a scratch database on the server `server` names (its user needs
 * CREATEDB), connects to it and migrates it. On failure the parts made so
 * far are in *s: backtest_scratch_close() it all the same.
 */
err_class_t backtest_scratch_open(backtest_scratch_t *s, const char *server, char *errstr,
                                  size_t errstr_size);

/* Closes the connections and, unless keep, drops the scratch database. */
err_class_t backtest_scratch_close(backtest_scratch_t *s, bool keep, char *errstr,
                                   size_t errstr_size);

/*
 * The alerts `def` would have raised in the replayed window, into *out (a
 * new JSON array; each {kind, key, state, owner, summary, open_at_end}):
 * those still open at the window's end (open_at_end true), then the steps
 * that finished late within it (false): a running steward would have paged
 * for each and resolved the page when the event came.
 */
err_class_t backtest_alerts(PGconn *conn, const def_t *def, json_t **out, char *errstr,
                            size_t errstr_size);

#endif
