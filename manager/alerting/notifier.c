/*
 * notifier - outbox delivery over HTTP with libcurl; see notifier.h.
 */
#include "manager/alerting/notifier.h"

#include "common/backoff.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/pgarr.h"
#include "common/utf8.h"
#include "formats/decode.h"
#include "manager/alerting/alerts.h"
#include "manager/runtime/metrics.h"
#include "manager/sinks/payload.h"
#include "manager/sinks/sink.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOTIFIER_BATCH  20 /* rows claimed per sink per look */
#define SINK_IN_FLIGHT  8  /* concurrent transfers per sink */
#define LEASE_MARGIN_MS 5000

typedef notifier_verdict_t verdict_t;
#define VERDICT_DELIVERED NOTIFIER_DELIVERED
#define VERDICT_RETRY     NOTIFIER_RETRY
#define VERDICT_FAILED    NOTIFIER_FAILED

/* The log sink is written at once; every other type is posted. */
static bool posted(const sink_t *sink)
{
    return sink_ops(sink->type)->judge != NULL;
}

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
    int64_t last_resend_ms, last_claim_ms;
    unsigned int seed;     /* jitter */
    transfer_t *in_flight; /* every transfer added to multi */
};

notifier_t *notifier_new(const notifier_config_t *cfg, route_table_t *routes, char *errstr,
                         size_t errstr_size)
{
    notifier_t *n = calloc(1, sizeof *n);
    if (n == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    n->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    n->routes = routes;
    n->interval_ms = cfg->interval_ms;
    n->timeout_ms = cfg->timeout_ms;
    n->max_backoff_ms = cfg->max_backoff_ms;
    n->resend_ms = cfg->alertmanager_resend_ms;
    n->max_retry_after_ms =
        cfg->max_retry_after_ms > 0 ? cfg->max_retry_after_ms : NOTIFIER_MAX_RETRY_AFTER_MS;
    n->group_window_ms = cfg->group_window_ms;
    n->last_claim_ms = INT64_MIN / 2;
    n->seed = (unsigned int) clock_wall_ms() ^ (unsigned int) getpid();
    n->multi = curl_multi_init();
    if (n->conninfo == NULL || n->multi == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "cannot set up the HTTP client");
        notifier_free(n);
        return NULL;
    }
    n->conn = db_connect(n->conninfo, "steward notifier", errstr, errstr_size);
    if (n->conn == NULL) {
        notifier_free(n);
        return NULL;
    }
    return n;
}

static void transfer_free(notifier_t *n, transfer_t *t)
{
    if (t->easy != NULL) {
        curl_multi_remove_handle(n->multi, t->easy);
        curl_easy_cleanup(t->easy);
    }
    curl_slist_free_all(t->headers);
    for (size_t i = 0; i < t->n_group; i++)
        free(t->group_rows[i]);
    free(t->group_rows);
    free(t->group_attempts);
    free(t->group_key);
    free(t->body);
    free(t->sink);
    free(t);
}

void notifier_free(notifier_t *n)
{
    if (n == NULL)
        return;
    /* Transfers cut short here were never recorded: their lease runs out
     * and the rows are sent again (at least once). */
    while (n->in_flight != NULL) {
        transfer_t *t = n->in_flight;
        n->in_flight = t->next;
        transfer_free(n, t);
    }
    if (n->conn != NULL)
        PQfinish(n->conn);
    if (n->multi != NULL)
        curl_multi_cleanup(n->multi);
    free(n->conninfo);
    free(n);
}

void notifier_set_routes(notifier_t *n, route_table_t *routes)
{
    n->routes = routes;
}

size_t notifier_in_flight(const notifier_t *n)
{
    size_t count = 0;
    for (const transfer_t *t = n->in_flight; t != NULL; t = t->next)
        count++;
    return count;
}

/* ---- Retry-After ---------------------------------------------------------------- */

int64_t notifier_parse_retry_after(const char *value, int64_t now_ms, int64_t cap_ms)
{
    char text[128];
    size_t len;

    if (value == NULL || cap_ms < 0)
        return -1;
    while (*value == ' ' || *value == '\t')
        value++;
    len = strcspn(value, "\r\n");
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= sizeof text)
        return -1;
    memcpy(text, value, len);
    text[len] = '\0';

    if (strspn(text, "0123456789") == len) {
        /* delta-seconds: any number of digits; past the cap is the cap. */
        int64_t secs = 0;
        for (size_t i = 0; i < len; i++) {
            secs = secs * 10 + (text[i] - '0');
            if (secs > cap_ms / 1000) /* then secs * 1000 cannot overflow below */
                return cap_ms;
        }
        return secs * 1000 < cap_ms ? secs * 1000 : cap_ms;
    }
    time_t when = curl_getdate(text, NULL); /* RFC 7231 HTTP-date, and its older forms */
    if (when == (time_t) -1)
        return -1;
    if ((int64_t) when > (INT64_MAX - 999) / 1000)
        return cap_ms;
    int64_t delay = (int64_t) when * 1000 - now_ms;
    if (delay < 0)
        return 0;
    return delay < cap_ms ? delay : cap_ms;
}

/* ---- HTTP ------------------------------------------------------------------- */

void notifier_response_init(notifier_response_t *r, int64_t max_retry_after_ms)
{
    memset(r, 0, sizeof *r);
    r->retry_after_ms = -1;
    r->max_retry_after_ms = max_retry_after_ms;
}

size_t notifier_response_body(char *data, size_t size, size_t nmemb, void *arg)
{
    notifier_response_t *r = arg;
    size_t n = size * nmemb, room = NOTIFIER_RESPONSE_KEEP - r->len;
    memcpy(r->body + r->len, data, n < room ? n : room);
    r->len += n < room ? n : room;
    r->body[r->len] = '\0';
    return size * nmemb; /* read it all; keep the start */
}

size_t notifier_response_header(char *data, size_t size, size_t nmemb, void *arg)
{
    notifier_response_t *r = arg;
    size_t n = size * nmemb;
    if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        char value[128];
        size_t len = n - 12 < sizeof value - 1 ? n - 12 : sizeof value - 1;
        memcpy(value, data + 12, len);
        value[len] = '\0';
        r->retry_after_ms =
            notifier_parse_retry_after(value, clock_wall_ms(), r->max_retry_after_ms);
    }
    return n;
}

/*
 * The body becomes last_error, a text column: PostgreSQL refuses bytes that
 * are not UTF-8 (a proxy's Latin-1 page, a character cut at the kept
 * length) and a NUL would end the string, so each such byte is written as
 * U+FFFD instead of failing the record of the attempt.
 */
char *notifier_response_error(long status, const notifier_response_t *r, char *buf, size_t buf_size)
{
    static const char replacement[] = "\xEF\xBF\xBD";
    int head = snprintf(buf, buf_size, "HTTP %ld: ", status);
    size_t o = head > 0 && (size_t) head < buf_size ? (size_t) head : 0;
    const unsigned char *b = (const unsigned char *) r->body;

    for (size_t i = 0; i < r->len;) {
        size_t n = b[i] == 0 ? 0 : b[i] < 0x80 ? 1 : b[i] < 0xE0 ? 2 : b[i] < 0xF0 ? 3 : 4;
        const char *piece = (const char *) b + i;
        if (n == 0 || i + n > r->len || !utf8_valid(b + i, n)) {
            piece = replacement;
            n = sizeof replacement - 1;
            i++;
        } else {
            i += n;
        }
        if (o + n >= buf_size)
            break; /* whole characters only */
        memcpy(buf + o, piece, n);
        o += n;
    }
    buf[o] = '\0';
    return buf;
}

/*
 * Starts a POST of body (taken) to url on the multi handle. The URL is a
 * secret: it never reaches a message. Returns the transfer, or NULL when
 * out of memory (body freed).
 */
static transfer_t *post_start(notifier_t *n, const char *url, char *body, const char *sink,
                              sink_type_t type)
{
    transfer_t *t = calloc(1, sizeof *t);
    if (t == NULL) {
        free(body);
        return NULL;
    }
    t->body = body;
    t->sink = strdup(sink);
    t->type = type;
    notifier_response_init(&t->response, n->max_retry_after_ms);
    t->headers = curl_slist_append(NULL, "Content-Type: application/json");
    t->easy = curl_easy_init();
    if (t->sink == NULL || t->headers == NULL || t->easy == NULL) {
        transfer_free(n, t);
        return NULL;
    }
    curl_easy_setopt(t->easy, CURLOPT_URL, url);
    /* Routes accept only http(s) URLs; this holds it for redirects and for
     * any URL that reaches here another way, so no sink reads a file. */
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(t->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(t->easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(t->easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(t->easy, CURLOPT_REDIR_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, t->body);
    curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, (long) n->timeout_ms);
    curl_easy_setopt(t->easy, CURLOPT_CONNECTTIMEOUT_MS, (long) n->timeout_ms);
    curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, notifier_response_body);
    curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, &t->response);
    curl_easy_setopt(t->easy, CURLOPT_HEADERFUNCTION, notifier_response_header);
    curl_easy_setopt(t->easy, CURLOPT_HEADERDATA, &t->response);
    curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->curl_error);
    curl_easy_setopt(t->easy, CURLOPT_USERAGENT, "steward/" STEWARD_VERSION);
    curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t);
    if (curl_multi_add_handle(n->multi, t->easy) != CURLM_OK) {
        curl_easy_cleanup(t->easy);
        t->easy = NULL;
        transfer_free(n, t);
        return NULL;
    }
    t->next = n->in_flight;
    n->in_flight = t;
    return t;
}

/* What a finished transfer came to. */
static attempt_t post_result(transfer_t *t, CURLcode rc)
{
    attempt_t a = {.verdict = VERDICT_RETRY, .retry_after_ms = -1};
    if (rc != CURLE_OK) {
        /* curl_easy_strerror, not the error buffer: the latter may quote the URL. */
        snprintf(a.error, sizeof a.error, "network: %s", curl_easy_strerror(rc));
        return a;
    }
    const sink_ops_t *ops = sink_ops(t->type);
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &a.status);
    a.retry_after_ms = ops->retry_after ? t->response.retry_after_ms : -1;
    a.verdict = ops->judge(a.status);
    if (a.verdict != VERDICT_DELIVERED)
        notifier_response_error(a.status, &t->response, a.error, sizeof a.error);
    return a;
}

notifier_verdict_t notifier_verdict(long status)
{
    return sink_http_verdict(status);
}

/* ---- delivery ----------------------------------------------------------------- */

/* An alert's details as sent: the stored ones, plus who acknowledged it
 * and who owns the investigation of its instance (steward ack, claim), as
 * they are at sending time. */
#define ALERT_DETAILS_SQL(a)                                                                       \
    "(" a ".details || jsonb_strip_nulls(jsonb_build_object('acknowledged_by', " a ".acked_by, "   \
    "'claimed_by', (SELECT i.claimed_by FROM steward.instances i WHERE i.process = " a ".process " \
    "AND i.key = " a ".key))))::text"

/* What a claimed outbox row comes back with, in claim_sql and group_sql
 * alike: columns read by position in start_row() and read_alert(). */
#define CLAIMED_COLUMNS                                                                            \
    "RETURNING o.id, o.destination, o.payload->>'event', o.attempts, a.id, a.kind, a.process, "    \
    "  a.key, a.state, a.owner, a.summary, " ALERT_DETAILS_SQL(                                    \
        "a") ", a.dedup_key, "                                                                     \
             "  steward.rfc3339(a.opened_at), steward.rfc3339(a.resolved_at), a.resolution, "      \
             "  steward.rfc3339(a.deadline_at)"

static const char claim_sql[] =
    "UPDATE steward.outbox o SET next_attempt_at = now() + steward.ms_interval($1::bigint) "
    "FROM steward.alerts a "
    "WHERE a.id = o.alert_id AND o.id IN ("
    "  SELECT c.id FROM steward.outbox c "
    "  WHERE c.kind = 'notification' AND c.delivered_at IS NULL AND c.failed_at IS NULL "
    "    AND c.next_attempt_at <= now() "
    "    AND (CASE WHEN $4::bool THEN c.destination <> ALL($2::text[]) "
    "         ELSE c.destination = ANY($2::text[]) END) "
    /* with a group window, sequence triggers go out as groups (group_sql) */
    "    AND NOT ($5::bigint > 0 AND c.payload->>'event' = 'trigger' AND EXISTS ("
    "      SELECT 1 FROM steward.alerts g WHERE g.id = c.alert_id AND g.kind = 'sequence')) "
    "    AND NOT EXISTS (SELECT 1 FROM steward.outbox e "
    "      WHERE e.alert_id = c.alert_id AND e.destination = c.destination AND e.id < c.id "
    "        AND e.delivered_at IS NULL AND e.failed_at IS NULL) "
    /* a silenced alert pages nobody until its silence ends */
    "    AND NOT (c.payload->>'event' IN ('trigger', 'acknowledge') AND EXISTS ("
    "      SELECT 1 FROM steward.alerts sa WHERE sa.id = c.alert_id AND " ALERT_SILENCED_SQL(
        "sa") ")) "
              "  ORDER BY c.id LIMIT $3::int FOR UPDATE SKIP LOCKED) " CLAIMED_COLUMNS;

/*
 * The sequence triggers of one (process, state) pending for one sink, once
 * the oldest of them has waited the group window: the storm so far, sent
 * as one page. Same columns as claim_sql.
 */
static const char group_sql[] =
    "WITH due AS ("
    "  SELECT a.process, a.state FROM steward.outbox c JOIN steward.alerts a ON a.id = c.alert_id "
    "  WHERE c.kind = 'notification' AND c.destination = $2 AND c.delivered_at IS NULL "
    "    AND c.failed_at IS NULL AND c.next_attempt_at <= now() "
    "    AND c.payload->>'event' = 'trigger' AND a.kind = 'sequence' "
    "    AND NOT " ALERT_SILENCED_SQL(
        "a") " "
             "  GROUP BY a.process, a.state "
             "  HAVING min(c.created_at) <= now() - steward.ms_interval($3::bigint) "
             "  ORDER BY min(c.id) LIMIT 1) "
             "UPDATE steward.outbox o SET next_attempt_at = now() + "
             "steward.ms_interval($1::bigint) "
             "FROM steward.alerts a "
             "WHERE a.id = o.alert_id AND o.id IN ("
             "  SELECT c.id FROM steward.outbox c JOIN steward.alerts ca ON ca.id = c.alert_id "
             "  JOIN due d ON d.process = ca.process AND d.state IS NOT DISTINCT FROM ca.state "
             "  WHERE c.kind = 'notification' AND c.destination = $2 AND c.delivered_at IS NULL "
             "    AND c.failed_at IS NULL AND c.next_attempt_at <= now() "
             "    AND c.payload->>'event' = 'trigger' AND ca.kind = 'sequence' "
             "    AND NOT " ALERT_SILENCED_SQL("ca") " "
                                                     "  ORDER BY c.id LIMIT $4::int FOR UPDATE OF "
                                                     "c SKIP LOCKED) " CLAIMED_COLUMNS;

/*
 * For a sequence alert's resolve (row $3): the group its trigger went out
 * in, and how many reasons there are to stay quiet: alerts of the group
 * still open, and later resolves of the group (the last one speaks, so
 * alerts resolved together resolve the page once).
 */
static const char group_of_sql[] =
    "SELECT t.payload->>'group', "
    "  (SELECT count(*) FROM steward.outbox m JOIN steward.alerts ma ON ma.id = m.alert_id "
    "   WHERE m.destination = t.destination AND m.payload->>'event' = 'trigger' "
    "     AND m.payload ? 'group' AND m.payload->>'group' = t.payload->>'group' "
    "     AND ma.resolved_at IS NULL) + "
    "  (SELECT count(*) FROM steward.outbox r JOIN steward.outbox m ON m.alert_id = r.alert_id "
    "     AND m.destination = r.destination AND m.payload->>'event' = 'trigger' "
    "     AND m.payload ? 'group' AND m.payload->>'group' = t.payload->>'group' "
    "   WHERE r.destination = t.destination AND r.payload->>'event' = 'resolve' "
    "     AND r.id > $3::bigint) "
    "FROM steward.outbox t WHERE t.alert_id = $1 AND t.destination = $2 "
    "  AND t.payload->>'event' = 'trigger' AND t.payload ? 'group' "
    "ORDER BY t.id DESC LIMIT 1";

static const char *nullable(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/* Reads an alert from columns first..first+12 of a row; details is new. */
static payload_alert_t read_alert(const PGresult *res, int row, int first, json_t **details)
{
    json_error_t jerr;
    *details = json_loads(PQgetvalue(res, row, first + 7), 0, &jerr);
    return (payload_alert_t){
        .id = strtoll(PQgetvalue(res, row, first), NULL, 10),
        .kind = nullable(res, row, first + 1),
        .process = nullable(res, row, first + 2),
        .key = nullable(res, row, first + 3),
        .state = nullable(res, row, first + 4),
        .owner = nullable(res, row, first + 5),
        .summary = nullable(res, row, first + 6),
        .dedup_key = nullable(res, row, first + 8),
        .opened_at = nullable(res, row, first + 9),
        .resolved_at = nullable(res, row, first + 10),
        .resolution = nullable(res, row, first + 11),
        .deadline_at = nullable(res, row, first + 12),
        .details = *details,
    };
}

/*
 * The log sink: its line (taken; NULL when it could not be built) on
 * stderr, written whatever log_level says (a page is not a diagnostic),
 * with one write(2) so it never interleaves with the logger's lines.
 * Delivered only once the whole line is written.
 */
static attempt_t deliver_log(char *text)
{
    attempt_t result = {.verdict = VERDICT_DELIVERED, .retry_after_ms = -1};
    char *out = NULL;
    if (text == NULL || asprintf(&out, "%s\n", text) < 0)
        out = NULL;
    free(text);
    if (out == NULL) {
        result.verdict = VERDICT_RETRY;
        snprintf(result.error, sizeof result.error, "out of memory building the log line");
        return result;
    }
    size_t len = strlen(out), done = 0;
    while (done < len) {
        ssize_t w = write(STDERR_FILENO, out + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            result.verdict = VERDICT_RETRY;
            snprintf(result.error, sizeof result.error, "writing to stderr: %s",
                     w < 0 ? strerror(errno) : "nothing written");
            break;
        }
        done += (size_t) w;
    }
    free(out);
    return result;
}

int64_t notifier_backoff_ms(int attempts, int64_t max_backoff_ms, unsigned int *seed)
{
    int64_t step = backoff_doubling_ms(attempts, 1000, max_backoff_ms);
    return step / 2 + (int64_t) (rand_r(seed) % (unsigned int) (step / 2 + 1));
}

static int64_t backoff_ms(notifier_t *n, int attempts)
{
    return notifier_backoff_ms(attempts, n->max_backoff_ms, &n->seed);
}

static err_class_t record(notifier_t *n, const char *id, const attempt_t *a, int attempts,
                          char *errstr, size_t errstr_size)
{
    char wait[24];
    const char *sql;
    int64_t delay = a->retry_after_ms >= 0 ? a->retry_after_ms : backoff_ms(n, attempts);
    snprintf(wait, sizeof wait, "%" PRId64, delay);

    switch (a->verdict) {
    case VERDICT_DELIVERED:
        sql = "UPDATE steward.outbox SET delivered_at = now(), attempts = attempts + 1, "
              "  last_error = NULL WHERE id = $1";
        break;
    case VERDICT_FAILED:
        sql = "UPDATE steward.outbox SET failed_at = now(), attempts = attempts + 1, "
              "  last_error = $2 WHERE id = $1";
        break;
    default:
        sql = "UPDATE steward.outbox SET attempts = attempts + 1, last_error = $2, "
              "  next_attempt_at = now() + steward.ms_interval($3::bigint) WHERE id = $1";
        break;
    }
    const char *params[3] = {id, a->error, wait};
    int nparams = a->verdict == VERDICT_DELIVERED ? 1 : a->verdict == VERDICT_FAILED ? 2 : 3;
    err_class_t cls = FAILPOINT_ERROR("notifier.before_record", errstr, errstr_size);
    if (cls == ERR_OK && (cls = db_exec(n->conn, "recording a delivery", sql, nparams, params,
                                        errstr, errstr_size)) == ERR_OK)
        FAILPOINT("notifier.after_record");
    return cls;
}

/* Logs, counts and records the outcome of one row's attempt. */
static err_class_t finish(notifier_t *n, notifier_stats_t *stats, const char *row_id,
                          const char *destination, sink_type_t type, const char *event,
                          const char *alert_id, int attempts, const attempt_t *a, char *errstr,
                          size_t errstr_size)
{
    char attempt_text[16];
    snprintf(attempt_text, sizeof attempt_text, "%d", attempts);
    switch (a->verdict) {
    case VERDICT_DELIVERED:
        stats->delivered++;
        LOG_DEBUG("notification delivered", "sink", destination, "event", event, "alert", alert_id,
                  "attempts", attempt_text);
        break;
    case VERDICT_RETRY:
        stats->retried++;
        LOG_LIMITED(LOG_LEVEL_WARN, "notify-retry", 10000, "notification not delivered; will retry",
                    "sink", destination, "event", event, "attempts", attempt_text, "error",
                    a->error);
        break;
    case VERDICT_FAILED:
        stats->failed++;
        LOG_ERROR("notification refused; not retried", "sink", destination, "event", event, "alert",
                  alert_id, "error", a->error);
        break;
    case SINK_N_VERDICTS: /* a count, never a verdict */
        break;
    }
    metrics_add(&metrics.notifications[type][a->verdict], 1);
    return record(n, row_id, a, attempts, errstr, errstr_size);
}

static bool sink_groups(const notifier_t *n, const sink_t *sink)
{
    return n->group_window_ms > 0 && sink_ops(sink->type)->group != NULL;
}

/*
 * For the resolve (row row_id) of a sequence alert whose trigger went out
 * in a group: *group_key (new) is the group's dedup key and *open > 0 when
 * this resolve is not the one to send (see group_of_sql). *group_key NULL
 * when the trigger went out alone.
 */
static err_class_t group_of(notifier_t *n, const char *row_id, const char *alert_id,
                            const char *destination, char **group_key, long *open, char *errstr,
                            size_t errstr_size)
{
    const char *params[3] = {alert_id, destination, row_id};
    err_class_t cls;
    *group_key = NULL;
    *open = 0;
    PGresult *res = db_query(n->conn, "finding a page's group", group_of_sql, 3, params, &cls,
                             errstr, errstr_size);
    if (res == NULL)
        return cls;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        *group_key = strdup(PQgetvalue(res, 0, 0));
        *open = atol(PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return ERR_OK;
}

/* Starts (or, for the log sink, delivers) the claimed row `row` of res. */
static err_class_t start_row(notifier_t *n, PGresult *res, int row, int64_t now,
                             notifier_stats_t *stats, char *errstr, size_t errstr_size)
{
    const char *id = PQgetvalue(res, row, 0), *destination = PQgetvalue(res, row, 1);
    const char *event = PQgetvalue(res, row, 2), *alert_id = PQgetvalue(res, row, 4);
    int attempts = atoi(PQgetvalue(res, row, 3)) + 1;
    bool resolve = strcmp(event, "resolve") == 0;
    bool acknowledge = strcmp(event, "acknowledge") == 0;
    json_t *details;
    payload_alert_t alert = read_alert(res, row, 4, &details);
    const sink_t *sink = route_find_sink(n->routes, destination);
    const sink_ops_t *ops = sink != NULL ? sink_ops(sink->type) : NULL;
    sink_event_t ev = resolve ? SINK_RESOLVE : acknowledge ? SINK_ACKNOWLEDGE : SINK_TRIGGER;
    attempt_t a = {.verdict = VERDICT_RETRY, .retry_after_ms = -1};
    char *body = NULL, url[2048], *group_key = NULL;
    err_class_t cls = ERR_OK;

    if (sink == NULL) {
        a.verdict = VERDICT_FAILED;
        snprintf(a.error, sizeof a.error,
                 "no sink named %s in the current routes (the config changed)", destination);
    } else if (acknowledge && !ops->acknowledges) {
        /* The alert stays open there, as it is. */
        a.verdict = VERDICT_DELIVERED;
    } else if (!posted(sink)) {
        a = deliver_log(ops->body(sink, &alert, ev, now, n->resend_ms));
    } else {
        long open = 0;
        if (resolve && alert.kind != NULL && strcmp(alert.kind, "sequence") == 0 &&
            (cls = group_of(n, id, alert_id, destination, &group_key, &open, errstr,
                            errstr_size)) != ERR_OK) {
            json_decref(details);
            return cls;
        }
        if (group_key != NULL && open > 0) {
            /* The group's page stays open while any of its alerts is. */
            json_decref(details);
            free(group_key);
            a.verdict = VERDICT_DELIVERED;
            return finish(n, stats, id, destination, sink->type, event, alert_id, attempts, &a,
                          errstr, errstr_size);
        }
        if (group_key != NULL)
            alert.dedup_key = group_key;
        body = ops->body(sink, &alert, ev, now, n->resend_ms);
        snprintf(url, sizeof url, "%s%s", sink->url, ops->path);
        free(group_key);
        transfer_t *t = body != NULL ? post_start(n, url, body, sink->name, sink->type) : NULL;
        if (t != NULL) {
            snprintf(t->row_id, sizeof t->row_id, "%s", id);
            snprintf(t->alert_id, sizeof t->alert_id, "%s", alert_id);
            snprintf(t->event, sizeof t->event, "%s", event);
            t->attempts = attempts;
            json_decref(details);
            return ERR_OK; /* recorded when it completes */
        }
        snprintf(a.error, sizeof a.error, "out of memory starting the request");
    }
    json_decref(details);
    return finish(n, stats, id, destination, sink != NULL ? sink->type : SINK_LOG, event, alert_id,
                  attempts, &a, errstr, errstr_size);
}

/*
 * Claims up to `limit` due rows (for the sinks named in `names`, or with
 * `others` for every destination not named) and starts each: the log sink
 * at once, HTTP sinks as transfers. window_ms > 0 leaves sequence triggers
 * to claim_group(). *claimed receives how many.
 */
static err_class_t claim_and_start(notifier_t *n, pgarr_t *names, bool others, int limit,
                                   int64_t window_ms, notifier_stats_t *stats, int *claimed,
                                   char *errstr, size_t errstr_size)
{
    char lease[24], limit_text[16], window[24];
    /* One attempt long, with a margin: no other replica takes a row up
     * while this one is still posting it. */
    snprintf(lease, sizeof lease, "%" PRId64, n->timeout_ms + LEASE_MARGIN_MS);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    snprintf(window, sizeof window, "%" PRId64, window_ms);
    const char *params[5] = {lease, pgarr_text(names), limit_text, others ? "t" : "f", window};
    err_class_t cls;
    *claimed = 0;
    if (params[1] == NULL)
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "claiming notifications: out of memory");
    PGresult *res = db_query(n->conn, "claiming notifications", claim_sql, 5, params, &cls, errstr,
                             errstr_size);
    if (res == NULL)
        return cls;
    *claimed = PQntuples(res);
    int64_t now = clock_wall_ms();
    for (int row = 0; row < *claimed && cls == ERR_OK; row++)
        cls = start_row(n, res, row, now, stats, errstr, errstr_size);
    PQclear(res);
    return cls;
}

/*
 * Claims the next due group of sequence triggers for `sink` and starts it
 * as one page (a group of one as a plain page). *claimed: rows claimed.
 */
static err_class_t claim_group(notifier_t *n, const sink_t *sink, notifier_stats_t *stats,
                               int *claimed, char *errstr, size_t errstr_size)
{
    char lease[24], window[24], limit[16];
    snprintf(lease, sizeof lease, "%" PRId64, n->timeout_ms + LEASE_MARGIN_MS);
    snprintf(window, sizeof window, "%" PRId64, n->group_window_ms);
    snprintf(limit, sizeof limit, "%d", PAYLOAD_GROUP_KEYS);
    const char *params[4] = {lease, sink->name, window, limit};
    err_class_t cls;
    *claimed = 0;
    PGresult *res = db_query(n->conn, "claiming a group of notifications", group_sql, 4, params,
                             &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    int rows = *claimed = PQntuples(res);
    int64_t now = clock_wall_ms();
    if (rows == 1) {
        cls = start_row(n, res, 0, now, stats, errstr, errstr_size);
        PQclear(res);
        return cls;
    }
    if (rows == 0) {
        PQclear(res);
        return ERR_OK;
    }
    payload_alert_t *alerts = calloc((size_t) rows, sizeof *alerts);
    json_t **details = calloc((size_t) rows, sizeof *details);
    char **ids = calloc((size_t) rows, sizeof *ids);
    int *attempts = calloc((size_t) rows, sizeof *attempts);
    char *identity = NULL, group_key[ALERT_DEDUP_SIZE];
    transfer_t *t = NULL;
    if (alerts != NULL && details != NULL && ids != NULL && attempts != NULL) {
        for (int row = 0; row < rows; row++) {
            alerts[row] = read_alert(res, row, 4, &details[row]);
            ids[row] = strdup(PQgetvalue(res, row, 0));
            attempts[row] = atoi(PQgetvalue(res, row, 3)) + 1;
        }
        /* Named by its first alert: a retry of the same storm keeps it. */
        if (asprintf(&identity, "steward:sequence_group:%s:%s:%lld",
                     alerts[0].process ? alerts[0].process : "",
                     alerts[0].state ? alerts[0].state : "", alerts[0].id) < 0)
            identity = NULL;
        if (identity != NULL) {
            alert_dedup_key(ALERT_SEQUENCE, identity, group_key, sizeof group_key);
            const sink_ops_t *ops = sink_ops(sink->type);
            char *body = ops->group(sink, alerts, (size_t) rows, group_key, now);
            char url[2048];
            snprintf(url, sizeof url, "%s%s", sink->url, ops->path);
            t = body != NULL ? post_start(n, url, body, sink->name, sink->type) : NULL;
        }
    }
    if (t != NULL) {
        snprintf(t->row_id, sizeof t->row_id, "%s", PQgetvalue(res, 0, 0));
        snprintf(t->alert_id, sizeof t->alert_id, "%s", PQgetvalue(res, 0, 4));
        snprintf(t->event, sizeof t->event, "trigger");
        t->attempts = attempts[0];
        t->group_rows = ids;
        t->group_attempts = attempts;
        t->n_group = (size_t) rows;
        t->group_key = strdup(group_key);
        ids = NULL; /* now owned by t */
        attempts = NULL;
        char count[16];
        snprintf(count, sizeof count, "%d", rows);
        LOG_INFO("sequence alerts grouped into one page", "sink", sink->name, "process",
                 alerts[0].process, "state", alerts[0].state, "alerts", count);
    } else {
        /* Out of memory: the lease runs out and the rows are claimed again. */
        cls = err_set(ERR_TRANSIENT, errstr, errstr_size, "grouping notifications: out of memory");
    }
    for (int row = 0; row < rows; row++) {
        if (details != NULL)
            json_decref(details[row]);
        if (ids != NULL)
            free(ids[row]);
    }
    free(identity);
    free(alerts);
    free(details);
    free(ids);
    free(attempts);
    PQclear(res);
    return cls;
}

/*
 * Looks for due rows, sink by sink: a sink with SINK_IN_FLIGHT transfers
 * open is not given more, so a sink that hangs holds only its own rows.
 * Rows naming a sink the routes no longer have are claimed too, and failed.
 */
/*
 * An alert that resolved while silenced, before any page about it reached
 * a sink, is news to nobody there: its pending rows for that sink are
 * closed unsent rather than paging and resolving at once when the silence
 * ends.
 */
static const char silenced_resolved_sql[] =
    "UPDATE steward.outbox o SET delivered_at = now(), "
    "  last_error = 'not sent: the alert resolved while silenced' "
    "FROM steward.alerts a "
    "WHERE a.id = o.alert_id AND a.resolved_at IS NOT NULL AND o.kind = 'notification' "
    "  AND o.delivered_at IS NULL AND o.failed_at IS NULL "
    "  AND NOT EXISTS (SELECT 1 FROM steward.outbox d WHERE d.alert_id = o.alert_id "
    "    AND d.destination = o.destination AND d.payload->>'event' = 'trigger' "
    "    AND d.delivered_at IS NOT NULL "
    "    AND d.last_error IS DISTINCT FROM 'not sent: the alert resolved while silenced') "
    "  AND EXISTS (SELECT 1 FROM steward.silences s WHERE s.process = a.process "
    "    AND (s.state IS NULL OR s.state = a.state) AND (s.team IS NULL OR s.team = a.owner) "
    "    AND s.starts_at <= a.resolved_at AND coalesce(s.lifted_at, s.ends_at) > a.resolved_at)";

static err_class_t claim_due(notifier_t *n, notifier_stats_t *stats, char *errstr,
                             size_t errstr_size)
{
    size_t n_sinks = route_sink_count(n->routes);
    pgarr_t all = {0};
    err_class_t cls = db_exec(n->conn, "closing the pages of alerts resolved while silenced",
                              silenced_resolved_sql, 0, NULL, errstr, errstr_size);
    if (cls != ERR_OK)
        return cls;
    int claimed;

    for (size_t s = 0; s < n_sinks && cls == ERR_OK; s++) {
        const sink_t *sink = route_sink_at(n->routes, s);
        bool groups = sink_groups(n, sink);
        pgarr_add(&all, sink->name);
        int passes = 0; /* bounded, so a log backlog does not stall the transfers */
        do {
            int busy = 0;
            for (const transfer_t *t = n->in_flight; t != NULL; t = t->next)
                busy += t->row_id[0] != '\0' && strcmp(t->sink, sink->name) == 0;
            int room = !posted(sink) ? NOTIFIER_BATCH : SINK_IN_FLIGHT - busy;
            if (room <= 0)
                break;
            if (groups) {
                cls = claim_group(n, sink, stats, &claimed, errstr, errstr_size);
                if (cls != ERR_OK || claimed > 0)
                    continue; /* one transfer more: look at the room again */
            }
            pgarr_t one = {0};
            pgarr_add(&one, sink->name);
            cls = claim_and_start(n, &one, false, room < NOTIFIER_BATCH ? room : NOTIFIER_BATCH,
                                  groups ? n->group_window_ms : 0, stats, &claimed, errstr,
                                  errstr_size);
            pgarr_free(&one);
            if (posted(sink))
                break;
        } while (cls == ERR_OK && claimed > 0 && ++passes < 10);
    }
    if (cls == ERR_OK)
        cls =
            claim_and_start(n, &all, true, NOTIFIER_BATCH, 0, stats, &claimed, errstr, errstr_size);
    pgarr_free(&all);
    return cls;
}

/* Marks the rows of a delivered group with its dedup key, for their resolves. */
static err_class_t tag_group(notifier_t *n, const transfer_t *t, char *errstr, size_t errstr_size)
{
    pgarr_t ids = {0};
    for (size_t i = 0; i < t->n_group; i++)
        pgarr_add(&ids, t->group_rows[i]);
    const char *params[2] = {pgarr_text(&ids), t->group_key};
    err_class_t cls =
        params[0] == NULL
            ? err_set(ERR_TRANSIENT, errstr, errstr_size, "recording a group: out of memory")
            : db_exec(n->conn, "recording a group",
                      "UPDATE steward.outbox SET payload = payload || jsonb_build_object('group', "
                      "$2::text) WHERE id = ANY($1::bigint[])",
                      2, params, errstr, errstr_size);
    pgarr_free(&ids);
    return cls;
}

/* Records every transfer that finished; refreshes are only logged. */
static err_class_t reap(notifier_t *n, notifier_stats_t *stats, char *errstr, size_t errstr_size)
{
    CURLMsg *msg;
    int left;
    err_class_t cls = ERR_OK;
    while ((msg = curl_multi_info_read(n->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        transfer_t *t = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t);
        attempt_t a = post_result(t, msg->data.result);
        for (transfer_t **p = &n->in_flight; *p != NULL; p = &(*p)->next) {
            if (*p == t) {
                *p = t->next;
                break;
            }
        }
        if (t->n_group > 0) {
            for (size_t i = 0; i < t->n_group; i++) {
                err_class_t c = finish(n, stats, t->group_rows[i], t->sink, t->type, t->event,
                                       t->alert_id, t->group_attempts[i], &a, errstr, errstr_size);
                if (cls == ERR_OK)
                    cls = c;
            }
            if (a.verdict == VERDICT_DELIVERED) {
                err_class_t c = tag_group(n, t, errstr, errstr_size);
                if (cls == ERR_OK)
                    cls = c;
            }
        } else if (t->row_id[0] != '\0') {
            err_class_t c = finish(n, stats, t->row_id, t->sink, t->type, t->event, t->alert_id,
                                   t->attempts, &a, errstr, errstr_size);
            if (cls == ERR_OK)
                cls = c;
        } else if (a.verdict != VERDICT_DELIVERED) {
            LOG_LIMITED(LOG_LEVEL_WARN, "am-resend", 60000,
                        "could not refresh open alerts in Alertmanager", "sink", t->sink, "error",
                        a.error);
        }
        transfer_free(n, t);
    }
    return cls;
}

static const char open_alerts_sql[] =
    "SELECT a.id, a.kind, a.process, a.key, a.state, a.owner, a.summary, " ALERT_DETAILS_SQL(
        "a") ", "
             "  a.dedup_key, "
             "  steward.rfc3339(a.opened_at), NULL, NULL, "
             "  steward.rfc3339(a.deadline_at) "
             "FROM steward.alerts a WHERE a.resolved_at IS NULL AND NOT " ALERT_SILENCED_SQL(
                 "a") " "
                      "ORDER BY a.id";

/*
 * Alertmanager forgets an alert that is not re-sent before its endsAt:
 * post every open alert to every Alertmanager sink its owner routes to.
 */
static err_class_t resend_open(notifier_t *n, char *errstr, size_t errstr_size)
{
    size_t n_sinks = route_sink_count(n->routes);
    bool any = false;
    for (size_t s = 0; s < n_sinks; s++)
        any = any || sink_ops(route_sink_at(n->routes, s)->type)->refresh != NULL;
    if (!any)
        return ERR_OK;

    PGresult *res = PQexec(n->conn, open_alerts_sql);
    err_class_t cls = db_result_class(res, n->conn);
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "reading open alerts: %s", PQerrorMessage(n->conn));
        PQclear(res);
        return cls;
    }
    int rows = PQntuples(res);
    payload_alert_t *alerts = calloc((size_t) rows + 1, sizeof *alerts);
    json_t **details = calloc((size_t) rows + 1, sizeof *details);
    for (size_t s = 0; s < n_sinks && alerts != NULL && details != NULL; s++) {
        const sink_t *sink = route_sink_at(n->routes, s);
        size_t count = 0;
        const sink_ops_t *ops = sink_ops(sink->type);
        if (ops->refresh == NULL)
            continue;
        for (int row = 0; row < rows; row++) {
            size_t k;
            const sink_t *const *sinks = route_sinks(n->routes, PQgetvalue(res, row, 5), &k);
            for (size_t i = 0; i < k; i++) {
                if (sinks[i] == sink) {
                    json_decref(details[count]);
                    alerts[count] = read_alert(res, row, 0, &details[count]);
                    count++;
                    break;
                }
            }
        }
        if (count == 0)
            continue;
        char url[2048];
        char *body = ops->refresh(sink, alerts, count, clock_wall_ms(), n->resend_ms);
        snprintf(url, sizeof url, "%s%s", sink->url, ops->path);
        /* A transfer like any other: an Alertmanager that hangs holds no page. */
        if (body == NULL || post_start(n, url, body, sink->name, sink->type) == NULL)
            LOG_LIMITED(LOG_LEVEL_WARN, "am-resend", 60000,
                        "could not refresh open alerts in Alertmanager", "sink", sink->name,
                        "error", "out of memory");
    }
    for (int row = 0; row < rows && details != NULL; row++)
        json_decref(details[row]);
    free(details);
    free(alerts);
    PQclear(res);
    return ERR_OK;
}

err_class_t notifier_tick(notifier_t *n, int64_t wait_ms, notifier_stats_t *stats, char *errstr,
                          size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    int running;

    memset(stats, 0, sizeof *stats);
    if (PQstatus(n->conn) != CONNECTION_OK) {
        PQfinish(n->conn);
        if ((n->conn = db_connect(n->conninfo, "steward notifier", errstr, errstr_size)) == NULL)
            return ERR_TRANSIENT;
    }
    int64_t now = clock_wall_ms();
    if (now - n->last_claim_ms >= n->interval_ms) {
        n->last_claim_ms = now;
        cls = claim_due(n, stats, errstr, errstr_size);
    }
    if (cls == ERR_OK && now - n->last_resend_ms >= n->resend_ms) {
        n->last_resend_ms = now;
        bool refreshing = false;
        for (const transfer_t *t = n->in_flight; t != NULL && !refreshing; t = t->next)
            refreshing = t->row_id[0] == '\0';
        if (!refreshing) /* one refresh at a time per sink is plenty */
            cls = resend_open(n, errstr, errstr_size);
    }
    curl_multi_perform(n->multi, &running);
    if (wait_ms > 0)
        curl_multi_poll(n->multi, NULL, 0, (int) wait_ms, NULL);
    curl_multi_perform(n->multi, &running);
    err_class_t reaped = reap(n, stats, errstr, errstr_size);
    return cls != ERR_OK ? cls : reaped;
}

void notifier_run(notifier_t *n, volatile sig_atomic_t *stop, int64_t drain_ms, gen_current_t *cur)
{
    char errstr[1024];
    int64_t drain_until = -1;
    gen_t *held = gen_acquire(cur);

    notifier_set_routes(n, held->routes);
    for (;;) {
        notifier_stats_t stats;
        metrics_beat(METRICS_NOTIFIER); /* /healthz: this thread is not stuck */
        if (gen_refresh(cur, &held))
            notifier_set_routes(n, held->routes);
        /* Transfers in flight carry their own copies, so the old routes may go. */
        err_class_t cls = notifier_tick(n, 50, &stats, errstr, sizeof errstr);
        if (cls != ERR_OK)
            LOG_LIMITED(LOG_LEVEL_WARN, "notifier-tick", 10000, "notifier pass failed; retrying",
                        "error", errstr, "class", err_class_name(cls));
        if (*stop) {
            /* One more look at the outbox after the stop; then keep going
             * while something is in flight or was just delivered, within
             * the bound. */
            if (drain_until < 0) {
                drain_until = clock_wall_ms() + drain_ms;
                n->last_claim_ms = INT64_MIN / 2;
                continue;
            }
            if ((stats.delivered == 0 && notifier_in_flight(n) == 0) ||
                clock_wall_ms() >= drain_until)
                break;
            n->last_claim_ms = INT64_MIN / 2; /* while draining, look every step */
        }
    }
    gen_release(held);
}
