/*
 * sink - the kinds of sink, and one table of what each kind does.
 *
 * A sink is one destination of one kind (its type): log (JSON lines on
 * stderr), webhook (a JSON POST), pagerduty (Events API v2) or
 * alertmanager (API v2). Everything that differs by type is in that
 * type's row of the operations table: its name in the config, how its
 * config is checked and completed, the body it is sent for each event,
 * whether it takes acknowledges, groups page storms or wants its open
 * alerts re-sent, and how its answer is judged. The routes (routes.h)
 * parse sinks, the payloads (payload.h) build the bodies the rows hand
 * out, and the notifier (notifier.h) only asks the table.
 *
 * Each type's row lives in its own file, manager/sink_TYPE.c. A new type
 * is its value in sink_type_t (before SINK_N_TYPES), its file, its entry
 * in sink.c's table and its test; every array by type is sized
 * SINK_N_TYPES, never by a literal.
 *
 * The table is constant: any thread may read it.
 */
#ifndef STEWARD_SINK_H
#define STEWARD_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sink_type {
    SINK_LOG,
    SINK_WEBHOOK,
    SINK_PAGERDUTY,
    SINK_ALERTMANAGER,
    SINK_N_TYPES /* the count: sizes every array by type */
} sink_type_t;

typedef struct sink {
    char *name; /* unique; what the outbox and logs name it by; stable across reloads */
    sink_type_t type;
    char *url;         /* webhook: required; pagerduty: the Events API endpoint;
                          alertmanager: its base URL */
    char *routing_key; /* pagerduty only; secret */
    char *severity;    /* pagerduty's and alertmanager's severity; default "error" */
} sink_t;

/* What an outbox row asks a sink to hear. */
typedef enum sink_event {
    SINK_TRIGGER,
    SINK_RESOLVE,
    SINK_ACKNOWLEDGE,
} sink_event_t;

/* What one delivery attempt came to. */
typedef enum sink_verdict {
    SINK_DELIVERED, /* 2xx, or written */
    SINK_RETRY,     /* no response, 408, 429 or 5xx: try again after a backoff */
    SINK_FAILED,    /* any other status: the sink refuses it for good */
    SINK_N_VERDICTS
} sink_verdict_t;

struct payload_alert; /* payload.h */

typedef struct sink_ops {
    const char *name; /* the config's "type" */

    /*
     * Checks what this type needs of a sink whose common keys routes.c has
     * read (name, url, routing_key, severity), and fills this type's
     * defaults. where is "routes.TEAM[i]". Returns false with
     * "WHERE.KEY: problem" in errstr.
     */
    bool (*validate)(sink_t *sink, const char *where, char *errstr, size_t errstr_size);

    /*
     * The body for one event of one alert: a new string, or NULL when out
     * of memory. Asked for an acknowledge only when `acknowledges`.
     * resend_ms is the refresh interval (alertmanager's endsAt).
     */
    char *(*body)(const sink_t *sink, const struct payload_alert *alert, sink_event_t event,
                  int64_t now_ms, int64_t resend_ms);

    /*
     * One page for a storm of n (>= 1) sequence triggers under group_key,
     * as payload_group(); NULL when the type is not grouped (it groups by
     * itself, or writes every alert).
     */
    char *(*group)(const sink_t *sink, const struct payload_alert *alerts, size_t n,
                   const char *group_key, int64_t now_ms);

    /*
     * Every open alert routed to the sink in one body, re-sent each resend
     * interval so that the sink does not forget them; NULL when the type
     * needs no refresh.
     */
    char *(*refresh)(const sink_t *sink, const struct payload_alert *alerts, size_t n,
                     int64_t now_ms, int64_t resend_ms);

    /* The verdict on an HTTP answer of `status` (0: none); NULL when the
     * type is not posted but written at once (the log). */
    sink_verdict_t (*judge)(long status);

    const char *path;  /* appended to the sink's url for a POST */
    bool acknowledges; /* else an acknowledge is recorded delivered, unsent */
    bool retry_after;  /* a Retry-After in a refusal sets the wait */
} sink_ops_t;

/* The rows, one file each (sink_log.c, ...); use sink_ops(). */
extern const sink_ops_t sink_log_ops;
extern const sink_ops_t sink_webhook_ops;
extern const sink_ops_t sink_pagerduty_ops;
extern const sink_ops_t sink_alertmanager_ops;

/* The row of `type`, borrowed from the constant table; NULL when out of range. */
const sink_ops_t *sink_ops(sink_type_t type);

/* The config's name of `type`; "?" when out of range. */
const char *sink_type_name(sink_type_t type);

/* The type called `name`; SINK_N_TYPES when none is (or name is NULL). */
sink_type_t sink_type_from_name(const char *name);

/* Every type's name, as "log, webhook, pagerduty or alertmanager", into
 * buf (cut to buf_size). Returns buf. */
char *sink_type_list(char *buf, size_t buf_size);

/* The metrics' name of a verdict: "delivered", "retried" or "failed"; "?"
 * when out of range. */
const char *sink_verdict_name(sink_verdict_t verdict);

/* The HTTP rule every posted type uses: 2xx delivered; no response, 408,
 * 429 or 5xx retried; anything else failed. */
sink_verdict_t sink_http_verdict(long status);

#endif
