/*
 * alerts - opening and resolving alerts, and queueing their notifications
 * in the outbox, inside the caller's transaction.
 *
 * An alert is one episode of something a team must hear about: a step past
 * its deadline (deadline), a process past its own (process_deadline), an
 * event out of sequence (sequence), or intake unable to read (blind). Its
 * identity names the episode ("steward:deadline:PROCESS:KEY:STATE:ENTERED"),
 * of any length; the dedup key stored and sent to the sinks is derived from
 * it (alert_dedup_key()): short enough for every sink (PagerDuty takes 255
 * characters) and different for any two identities, however long their
 * common prefix. A second opening of the same episode is a no-op and
 * PagerDuty sees one incident from trigger to resolve.
 *
 * Callers collect changes in an alert_batch_t and write them with
 * alert_batch_write() in the same transaction as the state change that
 * caused them: an alert and its notifications commit together or not at
 * all (alert_batch_write() refuses a connection outside a transaction).
 * The notifier delivers the outbox rows later.
 */
#ifndef STEWARD_ALERTS_H
#define STEWARD_ALERTS_H

#include "common/err.h"
#include "common/pgarr.h"
#include "manager/sinks/routes.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

typedef enum alert_kind {
    ALERT_DEADLINE = 0,
    ALERT_PROCESS_DEADLINE,
    ALERT_SEQUENCE,
    ALERT_BLIND,
    ALERT_UNLOADABLE,      /* instances on a definition version that no longer loads */
    ALERT_COMMAND_FAILED,  /* a command that cannot be rendered */
    ALERT_DISPATCH_FAILED, /* commands of a process that cannot be delivered to a topic */
    ALERT_LEASE_EXPIRED,   /* a step's lease ran out (shadow mode) */
} alert_kind_t;

const char *alert_kind_name(alert_kind_t kind);

/* Room for any dedup key alert_dedup_key() makes, NUL included. */
#define ALERT_DEDUP_SIZE 136

/*
 * The dedup key of an identity: "steward:KIND:READABLE:SHA256" where
 * READABLE is the identity's first 40 characters after its own
 * "steward:KIND:" prefix, each outside [A-Za-z0-9._:-] shown as '_', and
 * SHA256 the hex digest of the whole identity. At most 130 bytes, ASCII.
 * Returns out (out_size >= ALERT_DEDUP_SIZE).
 */
char *alert_dedup_key(alert_kind_t kind, const char *identity, char *out, size_t out_size);

/* A zeroed alert_batch_t is empty; alert_batch_clear() releases it. */
typedef struct alert_batch {
    pgarr_t o_kind, o_process, o_key, o_state, o_owner, o_summary, o_details, o_dedup, o_deadline;
    pgarr_t r_process, r_key, r_kind, r_state, r_resolution;
    pgarr_t k_dedup, k_legacy, k_resolution;
} alert_batch_t;

/*
 * Queues an alert to open. process, key and state may be NULL (a blind
 * alert has none); details (borrowed) may be NULL; deadline_ms < 0: none.
 * identity names the episode, whole (never cut to a buffer): the stored
 * dedup key is alert_dedup_key(kind, identity).
 */
void alert_batch_open(alert_batch_t *b, alert_kind_t kind, const char *process, const char *key,
                      const char *state, const char *owner, const char *summary,
                      const json_t *details, const char *identity, int64_t deadline_ms);

/* Queues the resolve of the open alerts of `kind` for an instance; state
 * NULL matches any state. */
void alert_batch_resolve(alert_batch_t *b, alert_kind_t kind, const char *process, const char *key,
                         const char *state, const char *resolution);

/*
 * Queues the resolve of the open alert of this identity (as given to
 * alert_batch_open()). An alert opened before dedup keys were derived,
 * whose key is the identity itself, is resolved too.
 */
void alert_batch_resolve_key(alert_batch_t *b, alert_kind_t kind, const char *identity,
                             const char *resolution);

bool alert_batch_empty(const alert_batch_t *b);

typedef struct alert_counts {
    size_t opened;
    size_t resolved;
    size_t notifications;
} alert_counts_t;

/*
 * Writes the queued changes on conn (inside the caller's transaction) and
 * one outbox row per sink that reaches each alert's owner (routes
 * borrowed; NULL records the alerts without notifying anyone). Adds to
 * *counts. On failure the caller rolls back. A non-empty batch on a
 * connection that is not inside a transaction is refused with ERR_FATAL
 * and nothing written: an alert without its outbox rows is a lost page.
 */
err_class_t alert_batch_write(PGconn *conn, alert_batch_t *b, route_table_t *routes,
                              alert_counts_t *counts, char *errstr, size_t errstr_size);

void alert_batch_clear(alert_batch_t *b);

/*
 * SQL: whether the alert aliased `a` is silenced now: a silence (steward
 * silence) live at now() names its process and, when it names them, its
 * state and its owning team. The notifier holds such an alert's triggers
 * and acknowledges until no silence covers it; views show it as silenced.
 */
#define ALERT_SILENCED_SQL(a)                                                                      \
    "EXISTS (SELECT 1 FROM steward.silences s WHERE s.process = " a ".process "                    \
    "AND s.lifted_at IS NULL AND s.starts_at <= now() AND s.ends_at > now() "                      \
    "AND (s.state IS NULL OR s.state = " a ".state) AND (s.team IS NULL OR s.team = " a ".owner))"

#endif
