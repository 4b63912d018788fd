/*
 * payload - the bodies each kind of sink is sent for an alert. Pure: no
 * I/O, the time is an argument.
 *
 *   webhook       {"version":1, "event":"trigger"|"resolve", "alert":{...}}
 *                 (docs/operations.md documents every field)
 *   pagerduty     Events API v2: trigger with summary, severity and
 *                 custom_details; resolve by the same dedup_key
 *   alertmanager  API v2: a list of alerts with labels, annotations,
 *                 startsAt and endsAt
 *
 * Each function returns a new string (free it), or NULL when out of memory.
 */
#ifndef STEWARD_PAYLOAD_H
#define STEWARD_PAYLOAD_H

#include "manager/routes.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* An alert as the notifier read it; every pointer borrowed. NULL where the
 * alert has no such field (a blind alert has no process). */
typedef struct payload_alert {
    long long id;
    const char *kind;
    const char *process;
    const char *key;
    const char *state;
    const char *owner;
    const char *summary;
    const char *dedup_key;
    const char *opened_at;   /* RFC 3339 */
    const char *resolved_at; /* NULL while open */
    const char *resolution;
    const char *deadline_at;
    const json_t *details; /* may be NULL */
} payload_alert_t;

char *payload_webhook(const payload_alert_t *alert, bool resolve);
char *payload_pagerduty(const sink_t *sink, const payload_alert_t *alert, bool resolve);

/*
 * Alertmanager alerts: an open one ends at now + 4 resend intervals (so it
 * resolves by itself if Steward stops re-sending it), a resolved one at its
 * resolution time.
 */
char *payload_alertmanager(const sink_t *sink, const payload_alert_t *alerts, size_t n,
                           int64_t now_ms, int64_t resend_ms);

/* The alertname label for a kind ("StewardStalledStep", ...). */
const char *payload_alertname(const char *kind);

#endif
