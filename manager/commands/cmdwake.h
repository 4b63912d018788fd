/*
 * cmdwake - what wakes the dispatcher: a transaction that queued commands,
 * or a delivery report waiting to be served, in one wait.
 *
 * Every INSERT into steward.commands notifies the channel steward_commands
 * (migration 0022's trigger). NOTIFY is transactional: the notification
 * reaches a listening connection once the queuing transaction commits, so
 * the dispatcher looks at the outbox when there is something to claim, not
 * at its next timer. A notification carries nothing; the rows stay the
 * record, and a notification lost (no connection, LISTEN not yet issued)
 * only delays a look until the dispatcher's timer.
 *
 * librdkafka writes a byte to a pipe whose write end is cmdwake_fd() when
 * its queue of delivery reports stops being empty
 * (rd_kafka_queue_io_event_enable()), so one poll() covers both.
 *
 * A cmdwake_t belongs to the dispatcher's thread, as does the connection it
 * is given.
 */
#ifndef STEWARD_CMDWAKE_H
#define STEWARD_CMDWAKE_H

#include "common/err.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cmdwake cmdwake_t;

/* Returns a new waker (free with cmdwake_free()), or NULL with the reason
 * in errstr (out of memory or of file descriptors). */
cmdwake_t *cmdwake_new(char *errstr, size_t errstr_size);

/* NULL is a no-op. */
void cmdwake_free(cmdwake_t *w);

/* The pipe's write end, non-blocking, for librdkafka. Owned by w. */
int cmdwake_fd(const cmdwake_t *w);

/*
 * LISTENs on conn, unless it already does (a new connection must be given
 * again: see cmdwake_lost()). Returns ERR_OK, or the class of the failure
 * with the reason in errstr. *fresh is set when conn just began listening:
 * what was queued before may not have been notified.
 */
err_class_t cmdwake_listen(cmdwake_t *w, PGconn *conn, bool *fresh, char *errstr,
                           size_t errstr_size);

/* The connection given to cmdwake_listen() is gone: the next one must
 * LISTEN again. */
void cmdwake_lost(cmdwake_t *w);

/* Takes the notifications conn has received meanwhile; whether there was
 * one. Never waits. */
bool cmdwake_take(cmdwake_t *w, PGconn *conn);

/*
 * Waits at most wait_ms (nothing when it is 0 or less) for a notification
 * on conn or a byte from librdkafka; whether a notification came (a
 * report only ends the wait: serve them with rd_kafka_poll()).
 */
bool cmdwake_wait(cmdwake_t *w, PGconn *conn, int64_t wait_ms);

#endif
