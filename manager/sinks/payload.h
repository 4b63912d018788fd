/*
 * payload - the bodies each kind of sink is sent for an alert. Pure: no
 * I/O, the time is an argument.
 *
 *   webhook       {"version":1, "event":"trigger"|"resolve"|"acknowledge",
 *                 "alert":{...}}
 *                 (docs/operations.md documents every field)
 *   pagerduty     Events API v2: trigger with summary, severity and
 *                 custom_details; resolve by the same dedup_key
 *   alertmanager  API v2: a list of alerts with labels, annotations,
 *                 startsAt and endsAt
 *   log           one JSON line (without its newline) as the log sink
 *                 writes it
 *
 * The summary a sink gets is payload_summary(): the stored text with the
 * time the step has been stalled, recomputed at `now_ms`, so a page sent
 * or re-sent an hour late says an hour. Fields with a size limit at the
 * sink are cut on a UTF-8 character boundary.
 *
 * The trace of an alert's instance (W3C Trace Context): the trace id of
 * its last event that carried one, and the link to it built from
 * tracing.link, go in the webhook's alert (trace_id, trace_link: null when
 * none), PagerDuty's links and Alertmanager's annotations (trace_id,
 * trace_link: absent when none).
 *
 * Each function returns a new string (free it), or NULL when out of memory.
 */
#ifndef STEWARD_PAYLOAD_H
#define STEWARD_PAYLOAD_H

#include "manager/sinks/sink.h"

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
    const json_t *details;    /* may be NULL */
    const char *trace_id;     /* 32 hex digits; NULL: no event of the instance carried one */
    const char *tracing_link; /* the tracing.link template; NULL or "": no link */
} payload_alert_t;

/* The link to trace_id by `tmpl` (tracing.link: every "${trace_id}"
 * replaced), a new string; NULL when either is NULL or "" (or out of
 * memory). */
char *payload_trace_link(const char *tmpl, const char *trace_id);

/* PagerDuty's limits (Events API v2), in bytes. */
#define PAYLOAD_PD_SUMMARY_MAX 1024
#define PAYLOAD_PD_FIELD_MAX   255

/*
 * The alert's summary as sent at now_ms: when details carry "since" (the
 * RFC 3339 time the step was entered, as the stored summary quotes it) and
 * "since_ms", " (DURATION ago)" follows that time in the text, DURATION
 * rounded by duration_format_rounded(); otherwise the stored summary.
 */
char *payload_summary(const payload_alert_t *alert, int64_t now_ms);

char *payload_webhook(const payload_alert_t *alert, bool resolve, int64_t now_ms);
char *payload_pagerduty(const sink_t *sink, const payload_alert_t *alert, bool resolve,
                        int64_t now_ms);

/*
 * The acknowledge of an open alert (steward ack): PagerDuty's
 * event_action "acknowledge" by the alert's dedup_key, or the webhook body
 * with event "acknowledge". Alertmanager has no acknowledge: the notifier
 * sends it nothing, the alert keeps firing until it is resolved.
 */
char *payload_acknowledge(const sink_t *sink, const payload_alert_t *alert, int64_t now_ms);

/* Keys listed by name in a grouped page; the rest are counted. */
#define PAYLOAD_GROUP_KEYS 100

/*
 * One page for a storm: n (>= 1) sequence alerts of one process and state,
 * sent to a pagerduty or webhook sink as one trigger under group_key (the
 * dedup key of the group). The summary counts them and lists the keys that
 * fit; the body lists up to PAYLOAD_GROUP_KEYS keys and every alert id.
 * Webhook: the usual body whose "alert" is the group (dedup_key group_key,
 * details.keys, details.alert_ids) plus "group": {"count", "keys"}.
 */
char *payload_group(const sink_t *sink, const payload_alert_t *alerts, size_t n,
                    const char *group_key, int64_t now_ms);

/*
 * Alertmanager alerts: an open one ends at now + 4 resend intervals (so it
 * resolves by itself if Steward stops re-sending it), a resolved one at its
 * resolution time.
 */
char *payload_alertmanager(const sink_t *sink, const payload_alert_t *alerts, size_t n,
                           int64_t now_ms, int64_t resend_ms);

/*
 * The log sink's line for an alert: ts (now_ms), level "alert", msg, the
 * sink's name, and the alert's kind, process, key, state, owner, summary
 * and dedup_key; a resolve adds its resolution.
 */
char *payload_log(const sink_t *sink, const payload_alert_t *alert, bool resolve, int64_t now_ms);

/* The alertname label for a kind ("StewardStalledStep", ...). */
const char *payload_alertname(const char *kind);

#endif
