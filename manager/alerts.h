/*
 * alerts - opening and resolving alerts, and queueing their notifications
 * in the outbox, inside the caller's transaction.
 *
 * An alert is one episode of something a team must hear about: a step past
 * its deadline (deadline), a process past its own (process_deadline), an
 * event out of sequence (sequence), or intake unable to read (blind). Its
 * dedup key names the episode, so a second opening of the same episode is
 * a no-op and PagerDuty sees one incident from trigger to resolve.
 *
 * Callers collect changes in an alert_batch_t and write them with
 * alert_batch_write() in the same transaction as the state change that
 * caused them: an alert and its notifications commit together or not at
 * all. The notifier delivers the outbox rows later.
 */
#ifndef STEWARD_ALERTS_H
#define STEWARD_ALERTS_H

#include "manager/err.h"
#include "manager/pgarr.h"
#include "manager/routes.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

typedef enum alert_kind {
    ALERT_DEADLINE = 0,
    ALERT_PROCESS_DEADLINE,
    ALERT_SEQUENCE,
    ALERT_BLIND,
} alert_kind_t;

const char *alert_kind_name(alert_kind_t kind);

/* A zeroed alert_batch_t is empty; alert_batch_clear() releases it. */
typedef struct alert_batch {
    pgarr_t o_kind, o_process, o_key, o_state, o_owner, o_summary, o_details, o_dedup, o_deadline;
    pgarr_t r_process, r_key, r_kind, r_state, r_resolution;
    pgarr_t k_dedup, k_resolution;
} alert_batch_t;

/*
 * Queues an alert to open. process, key and state may be NULL (a blind
 * alert has none); details (borrowed) may be NULL; deadline_ms < 0: none.
 */
void alert_batch_open(alert_batch_t *b, alert_kind_t kind, const char *process, const char *key,
                      const char *state, const char *owner, const char *summary,
                      const json_t *details, const char *dedup_key, int64_t deadline_ms);

/* Queues the resolve of the open alerts of `kind` for an instance; state
 * NULL matches any state. */
void alert_batch_resolve(alert_batch_t *b, alert_kind_t kind, const char *process, const char *key,
                         const char *state, const char *resolution);

/* Queues the resolve of the open alert with this dedup key. */
void alert_batch_resolve_key(alert_batch_t *b, const char *dedup_key, const char *resolution);

bool alert_batch_empty(const alert_batch_t *b);

typedef struct alert_counts {
    size_t opened;
    size_t resolved;
    size_t notifications;
} alert_counts_t;

/*
 * Writes the queued changes on conn (inside the caller's transaction) and
 * one outbox row per sink that reaches each alert's owner (routes
 * borrowed; NULL records the alerts without notifying anyone). Adds to *counts. On failure the
 * caller rolls back.
 */
err_class_t alert_batch_write(PGconn *conn, alert_batch_t *b, route_table_t *routes,
                              alert_counts_t *counts, char *errstr, size_t errstr_size);

void alert_batch_clear(alert_batch_t *b);

#endif
