/*
 * notifier_int - what the files of the notifier share; private to
 * manager/alerting/ (the interface is notifier.h).
 *
 * The notifier is one module, notifier_, in four files, one per concern:
 *   notifier.c          its life, the delivery loop (notifier_tick,
 *                       notifier_run): starting each claimed row, the log
 *                       sink, and recording the transfers that finished
 *   notifier_http.c     HTTP over the libcurl multi handle: transfers, the
 *                       response kept of each, Retry-After, the verdict
 *   notifier_outbox.c   the outbox in SQL: the claims (sink by sink, groups
 *                       of sequence triggers), the marks after an attempt,
 *                       the backoff between attempts
 *   notifier_refresh.c  Alertmanager's view of open alerts, re-sent
 *
 * Everything here runs on the notifier's thread and its one connection.
 */
#ifndef STEWARD_NOTIFIER_INT_H
#define STEWARD_NOTIFIER_INT_H

#include "manager/alerting/notifier.h"

#include "common/db.h"
#include "manager/sinks/payload.h"
#include "manager/sinks/sink.h"

#include <curl/curl.h>

typedef notifier_verdict_t verdict_t;
#define VERDICT_DELIVERED NOTIFIER_DELIVERED
#define VERDICT_RETRY     NOTIFIER_RETRY
#define VERDICT_FAILED    NOTIFIER_FAILED

/* What one HTTP attempt came to. */
typedef struct attempt {
    verdict_t verdict;
    long status;            /* 0 when no response */
    int64_t retry_after_ms; /* from a Retry-After header, capped; -1 when none */
    char error[NOTIFIER_ERROR_SIZE];
} attempt_t;

/*
 * One HTTP request in flight: an outbox row's attempt, or (row_id empty)
 * an Alertmanager refresh. It owns copies of everything it needs, so a
 * reload that frees the routes mid-flight does not pull them away.
 */
typedef struct transfer {
    struct transfer *next;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    char *sink;       /* its name */
    sink_type_t type; /* for the metrics */
    char row_id[24];  /* "" for a refresh */
    char alert_id[24];
    char event[16];
    int attempts;
    char **group_rows; /* a grouped page: every row it carries (row_id is the first) */
    int *group_attempts;
    size_t n_group;
    char *group_key;
    notifier_response_t response;
    char curl_error[CURL_ERROR_SIZE];
} transfer_t;

struct notifier {
    PGconn *conn;
    char *conninfo;
    CURLM *multi;
    route_table_t *routes; /* borrowed */
    int64_t interval_ms, timeout_ms, max_backoff_ms, resend_ms, max_retry_after_ms;
    int64_t group_window_ms;
    char *tracing_link; /* the tracing.link template; "" none */
    int64_t last_resend_ms, last_claim_ms;
    unsigned int seed;     /* jitter */
    transfer_t *in_flight; /* every transfer added to multi */
};

/* An alert's details as sent: the stored ones, plus who acknowledged it
 * and who owns the investigation of its instance (steward ack, claim), as
 * they are at sending time. */
#define ALERT_DETAILS_SQL(a)                                                                       \
    "(" a ".details || jsonb_strip_nulls(jsonb_build_object('acknowledged_by', " a ".acked_by, "   \
    "'claimed_by', (SELECT i.claimed_by FROM steward.instances i WHERE i.process = " a ".process " \
    "AND i.key = " a ".key))))::text"

/* The trace id of the last event of an alert's instance that carried a W3C
 * traceparent (history.traceparent, "00-<trace id>-..."); NULL: none. */
#define ALERT_TRACE_SQL(a)                                                                         \
    "(SELECT substr(h.traceparent, 4, 32) FROM steward.history h WHERE h.process = " a             \
    ".process AND h.key = " a ".key AND h.traceparent IS NOT NULL ORDER BY h.id DESC LIMIT 1)"

/* notifier.c: whether `sink` is posted (every type but the log sink, which
 * is written at once). */
bool notifier_posted(const sink_t *sink);

/* notifier.c: starts (or, for the log sink, delivers) the claimed row `row`
 * of res (the columns of CLAIMED_COLUMNS, notifier_outbox.c). */
err_class_t notifier_start_row(notifier_t *n, PGresult *res, int row, int64_t now,
                               notifier_stats_t *stats, char *errstr, size_t errstr_size);

/* notifier_http.c: starts a POST of body (taken; NULL is out of memory) to
 * the sink's URL on the multi handle. The URL is a secret: it never
 * reaches a message. Returns the transfer, or NULL when out of memory
 * (body freed). */
transfer_t *notifier_post(notifier_t *n, const sink_t *sink, char *body);

/* notifier_http.c: what a finished transfer came to. */
attempt_t notifier_post_result(transfer_t *t, CURLcode rc);

/* notifier_http.c: frees t, taking it off the multi handle first. */
void notifier_transfer_free(notifier_t *n, transfer_t *t);

/* notifier_outbox.c: reads an alert from columns first..first+13 of a row
 * (ALERT_DETAILS_SQL's the eighth, ALERT_TRACE_SQL's the last); *details
 * is new, and the alert borrows from res, *details and n. */
payload_alert_t notifier_read_alert(const notifier_t *n, const PGresult *res, int row, int first,
                                    json_t **details);

/* notifier_outbox.c: claims the due rows, sink by sink, and starts each. */
err_class_t notifier_claim_due(notifier_t *n, notifier_stats_t *stats, char *errstr,
                               size_t errstr_size);

/* notifier_outbox.c: marks row `id` after attempt number `attempts`:
 * delivered, failed, or due again after a backoff (or the Retry-After). */
err_class_t notifier_record(notifier_t *n, const char *id, const attempt_t *a, int attempts,
                            char *errstr, size_t errstr_size);

/* notifier_outbox.c: for the resolve (row row_id) of a sequence alert, the
 * group its trigger went out in (*group_key, new; NULL when alone) and
 * *open > 0 when this resolve is not the one to send. */
err_class_t notifier_group_of(notifier_t *n, const char *row_id, const char *alert_id,
                              const char *destination, char **group_key, long *open, char *errstr,
                              size_t errstr_size);

/* notifier_outbox.c: marks the rows of a delivered group with its dedup
 * key, for their resolves. */
err_class_t notifier_tag_group(notifier_t *n, const transfer_t *t, char *errstr,
                               size_t errstr_size);

/* notifier_refresh.c: posts every open alert to every Alertmanager sink
 * its owner routes to. */
err_class_t notifier_resend_open(notifier_t *n, char *errstr, size_t errstr_size);

#endif
