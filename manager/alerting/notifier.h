/*
 * notifier - delivers the notification outbox to the sinks, and keeps
 * Alertmanager's view of open alerts fresh.
 *
 * A notification is one outbox row: an alert's trigger or resolve, for one
 * sink. The notifier leases due rows (FOR UPDATE SKIP LOCKED, so replicas
 * never send the same row at once), posts them, and records the outcome:
 * delivered; retried with exponential backoff and jitter after a network
 * error, a 429 or a 5xx (a Retry-After, in seconds or as an HTTP date, is
 * honoured up to max_retry_after); failed, with the response body, after
 * any other 4xx. Rows are never deleted, delivered or not. The
 * notifications of one alert to one sink go in order: a resolve never
 * overtakes its trigger.
 *
 * Sinks are delivered independently: every HTTP attempt is a transfer on
 * one libcurl multi handle, claimed sink by sink with at most a few in
 * flight per sink, so a sink that hangs until the timeout holds only its
 * own rows. The log sink writes at once, whatever the log level.
 *
 * Page storms are grouped: with a group window, the sequence triggers of
 * one process and state bound for one pagerduty or webhook sink wait until
 * the oldest has waited the window, then go out as one page listing the
 * keys (every alert and outbox row still exists; each row is marked
 * delivered with the group's dedup key). The group's page is resolved with
 * the last of its alerts. Alertmanager groups by itself and the log sink
 * writes every alert, so neither is grouped here.
 *
 * Delivery is at least once: a crash between the POST and its record sends
 * it again, which PagerDuty's dedup_key and Alertmanager's label identity
 * absorb. One notifier per process, on its own thread and connection.
 */
#ifndef STEWARD_NOTIFIER_H
#define STEWARD_NOTIFIER_H

#include "common/err.h"
#include "manager/runtime/generation.h"
#include "manager/sinks/routes.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct notifier notifier_t;

typedef struct notifier_config {
    const char *conninfo;
    int64_t interval_ms; /* between looks at the outbox */
    int64_t timeout_ms;  /* one HTTP attempt */
    int64_t max_backoff_ms;
    int64_t alertmanager_resend_ms;
    int64_t max_retry_after_ms; /* the longest Retry-After honoured; 0: the default */
    int64_t group_window_ms;    /* sequence triggers grouped over this long; 0: never */
    const char *tracing_link;   /* tracing.link: a page's link to its trace; NULL or "": none */
} notifier_config_t;

#define NOTIFIER_MAX_RETRY_AFTER_MS 300000

typedef struct notifier_stats {
    size_t delivered;
    size_t retried;
    size_t failed;
} notifier_stats_t;

/* routes is borrowed and must outlive the notifier (or be replaced first). */
notifier_t *notifier_new(const notifier_config_t *cfg, route_table_t *routes, char *errstr,
                         size_t errstr_size);
void notifier_free(notifier_t *n); /* NULL is a no-op */

void notifier_set_routes(notifier_t *n, route_table_t *routes);

/*
 * One step: claims and starts the due outbox rows when an interval has
 * passed since the last look (and the Alertmanager refresh when due),
 * waits up to wait_ms for transfers, and records those that finished.
 * stats counts what was recorded in this step. Runs on the notifier's
 * thread only.
 */
err_class_t notifier_tick(notifier_t *n, int64_t wait_ms, notifier_stats_t *stats, char *errstr,
                          size_t errstr_size);

/* How many HTTP transfers are open. */
size_t notifier_in_flight(const notifier_t *n);

/*
 * The wait a Retry-After header value asks for, in ms: delta-seconds (any
 * number of digits) or an HTTP-date (a past date is 0), capped at cap_ms.
 * -1 when the value is neither. Pure; now_ms is the current wall time.
 */
int64_t notifier_parse_retry_after(const char *value, int64_t now_ms, int64_t cap_ms);

/*
 * The rules below are pure; they are public so that unit tests can check
 * them without a sink (tests/unit/test_notifier.c).
 */

/* What one delivery attempt came to: a sink's verdict (sink.h). */
typedef sink_verdict_t notifier_verdict_t;
#define NOTIFIER_DELIVERED SINK_DELIVERED /* 2xx */
#define NOTIFIER_RETRY     SINK_RETRY     /* no response, 408, 429 or 5xx: after a backoff */
#define NOTIFIER_FAILED    SINK_FAILED    /* any other status: refused for good */

/* The verdict on an HTTP response with `status` (0: no response at all),
 * by the rule every posted sink type uses, sink_http_verdict(). */
notifier_verdict_t notifier_verdict(long status);

/*
 * The wait before retry number `attempts` (1 for the first): exponential
 * from 1s, capped at max_backoff_ms, with equal jitter (between half and
 * all of the step) drawn from *seed.
 */
int64_t notifier_backoff_ms(int attempts, int64_t max_backoff_ms, unsigned int *seed);

/*
 * A sink's answer to one attempt as the notifier keeps it: the start of
 * the body (the error recorded in steward.outbox.last_error when the
 * answer is not 2xx) and the Retry-After asked for. The two callbacks are
 * libcurl's CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION with the
 * response as their data; they and the error text are public so that the
 * fuzz target (tests/fuzz/) and unit tests can feed them any bytes. Pure
 * apart from the header callback reading the wall clock.
 */
#define NOTIFIER_RESPONSE_KEEP 512 /* bytes of a response body kept */
#define NOTIFIER_ERROR_SIZE    (NOTIFIER_RESPONSE_KEEP + 128)

typedef struct notifier_response {
    char body[NOTIFIER_RESPONSE_KEEP + 1];
    size_t len;
    int64_t retry_after_ms; /* -1 when the answer had none */
    int64_t max_retry_after_ms;
} notifier_response_t;

void notifier_response_init(notifier_response_t *r, int64_t max_retry_after_ms);
size_t notifier_response_body(char *data, size_t size, size_t nmemb, void *arg);
size_t notifier_response_header(char *data, size_t size, size_t nmemb, void *arg);

/* The error recorded for an answer of `status` that was not 2xx, from the
 * kept body; buf_size at least NOTIFIER_ERROR_SIZE. Returns buf. */
char *notifier_response_error(long status, const notifier_response_t *r, char *buf,
                              size_t buf_size);

/*
 * Passes every interval until *stop is set; then keeps delivering for at
 * most drain_ms while anything is due, so a clean stop flushes what it can.
 * Takes up reloaded routes from `cur` between passes.
 */
void notifier_run(notifier_t *n, volatile sig_atomic_t *stop, int64_t drain_ms, gen_current_t *cur);

#endif
