/*
 * test_trace_commands - commands continue the W3C trace of the event that
 * entered their state, on the real broker and PostgreSQL with the
 * dispatcher running (active_order: reserving re-sent twice, then
 * on_timeout into refunding, which sends Refund).
 *
 *   continued    an event with a traceparent header and a tracestate: each
 *                ReserveStock attempt on the topic has header traceparent
 *                (and ce_traceparent) with the event's trace id and flags,
 *                a span id of its own per attempt, none the event's, the
 *                value of its row; tracestate forwarded unchanged; the
 *                Refund on_timeout sends continues the same trace. The
 *                CloudEvents extension (ce_traceparent, ce_tracestate)
 *                likewise. An event without a trace: no trace header on
 *                any of its commands, re-sends and Refund included. A
 *                malformed tracestate: dropped and counted
 *                (steward_tracestate_ignored_total), the event judged, the
 *                command traced without one. inspect, --json and the HTTP
 *                view show the commands' traceparents and trace links.
 *   crash_resend SIGKILL (failpoint dispatcher.after_claim) once the row
 *                is claimed, before it is produced: after the restart the
 *                message carries the row's traceparent, the same one; then
 *                a second definition version loaded on SIGHUP commands a
 *                traced event's instance with its trace
 */
#include "test_dispatch.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TRACE_A "4bf92f3577b34da6a3ce929d0e0e4736"
#define TRACE_B "0af7651916cd43dd8448eb211c80319c"
#define TRACE_E "5c6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
#define SPAN_A  "00f067aa0ba902b7"
#define TP_A    "00-" TRACE_A "-" SPAN_A "-01"
#define TP_B    "00-" TRACE_B "-b7ad6b7169203331-00"
#define TP_E    "00-" TRACE_E "-1111111111111111-01"
#define TS_A    "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
#define TS_B    "vendor@tenant=x1"
#define LINK    "https://tempo.example/trace/"

static tw_world_t w;

static void teardown(void)
{
    tw_teardown(&w);
}

static void world_init(const char *name)
{
    tw_init(&w, name);
    tw_create_topics(&w,
                     TW_LIST("orders", "stock", "picking", "payments", "stock-commands",
                             "pick-commands", "payment-commands"),
                     1);
    tw_migrate(&w);
}

/* Definition version `version` (active, reserving's deadline d1) in the
 * definitions directory, and the config: the dispatcher runs, the HTTP
 * server listens, tracing.link set. */
static void world_definition(const char *version, const char *d1)
{
    char defs[1024], file[64];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    mkdir(defs, 0755);
    snprintf(file, sizeof file, "defs/v%s.json", version);
    free(tw_write_template(&w, "tests/data/definitions/active_order.json.in", file,
                           TW_LIST("@V@", version, "@MODE@", "active", "@D1@", d1)));
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts = json_pack(
        "{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}, s:{s:s, s:s}, s:{s:s}}", "scheduler",
        "interval", "200ms", "grace", "0s", "blind_after", "10m", "http", "listen", "127.0.0.1:0",
        "routes", "default", "type", "log", "kafka", "topic.metadata.refresh.interval.ms", "1000",
        "dispatch", "paused", "", "lease", "2s", "tracing", "link", LINK "${trace_id}");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
}

static void order(tl_producer_t *p, const char *key, const char *const *headers)
{
    char value[256], *topic = tw_topic(&w, "orders");
    snprintf(value, sizeof value,
             "{\"type\":\"OrderPlaced\",\"id\":\"p-%s\",\"order_id\":\"%s\",\"total\":10}", key,
             key);
    tl_produce(p, topic, -1, value, -1, headers, 0);
    free(topic);
}

/* A binary-mode CloudEvent OrderPlaced with the distributed-tracing
 * extension. */
static void order_ce(tl_producer_t *p, const char *key, const char *tp, const char *ts)
{
    char value[256], id[128], *topic = tw_topic(&w, "orders");
    snprintf(value, sizeof value, "{\"order_id\":\"%s\",\"total\":10}", key);
    snprintf(id, sizeof id, "p-%s", key);
    tl_produce(p, topic, -1, value, -1,
               TW_LIST("ce_specversion", "1.0", "ce_type", "OrderPlaced", "ce_id", id, "ce_source",
                       "shop", "ce_traceparent", tp, "ce_tracestate", ts),
               0);
    free(topic);
}

/* The value of header `name` in `headers` ("name=value\n..."), malloc'd;
 * NULL when absent. */
static char *header(const char *headers, const char *name)
{
    size_t n = strlen(name);
    for (const char *line = headers; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t) (end - line) : strlen(line);
        if (len > n && strncmp(line, name, n) == 0 && line[n] == '=')
            return strndup(line + n + 1, len - n - 1);
        line = end != NULL ? end + 1 : NULL;
    }
    return NULL;
}

/* Checks the messages of `key` on `topic` (command topic name) against
 * their rows: as many as rows; each message's traceparent and
 * ce_traceparent are its row's (by ce_id); with a trace, the trace id is
 * `trace`, the flags `flags`, the span ids all different and none
 * `parent_span`, and tracestate (and ce_tracestate) is `ts` (NULL: none).
 * trace NULL: no trace header at all. Returns how many messages. */
static size_t check_messages(const char *topic, const char *key, const char *trace,
                             const char *flags, const char *parent_span, const char *ts)
{
    char *full = tw_topic(&w, topic);
    dt_seen_list_t got = dt_read_topic(full, 1);
    free(full);
    size_t n = 0;
    char spans[8][17];
    for (size_t i = 0; i < got.n; i++) {
        const dt_seen_t *m = &got.items[i];
        if (strcmp(m->key, key) != 0)
            continue;
        ck_assert_ptr_nonnull(m->ce_id);
        char *tp = header(m->headers, "traceparent"), *ce_tp = header(m->headers, "ce_traceparent");
        char *state = header(m->headers, "tracestate"),
             *ce_state = header(m->headers, "ce_tracestate");
        char *row = tw_scalar(&w,
                              "SELECT coalesce(traceparent, '-') FROM steward.commands "
                              "WHERE ce_id = $1",
                              TW_LIST(m->ce_id));
        if (trace == NULL) {
            ck_assert_msg(tp == NULL && ce_tp == NULL && state == NULL && ce_state == NULL,
                          "%s: an untraced command carries trace headers:\n%s", key, m->headers);
            ck_assert_str_eq(row, "-");
        } else {
            ck_assert_msg(tp != NULL, "%s: no traceparent header:\n%s", key, m->headers);
            ck_assert_str_eq(tp, row);
            ck_assert_str_eq(ce_tp, tp);
            ck_assert_uint_eq(strlen(tp), 55);
            ck_assert_int_eq(strncmp(tp, "00-", 3), 0);
            ck_assert_int_eq(strncmp(tp + 3, trace, 32), 0);
            ck_assert_str_eq(tp + 53, flags);
            char span[17];
            memcpy(span, tp + 36, 16);
            span[16] = '\0';
            ck_assert_str_ne(span, "0000000000000000");
            ck_assert_str_ne(span, parent_span);
            for (size_t j = 0; j < n && j < 8; j++)
                ck_assert_msg(strcmp(spans[j], span) != 0, "%s: span %s used twice", key, span);
            if (n < 8)
                memcpy(spans[n], span, 17);
            if (ts == NULL) {
                ck_assert_ptr_null(state);
                ck_assert_ptr_null(ce_state);
            } else {
                ck_assert_msg(state != NULL && strcmp(state, ts) == 0, "%s: tracestate %s", key,
                              state != NULL ? state : "(none)");
                ck_assert_str_eq(ce_state, ts);
            }
        }
        n++;
        free(tp);
        free(ce_tp);
        free(state);
        free(ce_state);
        free(row);
    }
    dt_seen_free(&got);
    return n;
}

/* Until `key` has `n` commands sent to `type`. */
static void wait_sent(const char *key, const char *type, const char *n, int timeout_s)
{
    char what[128];
    snprintf(what, sizeof what, "%s %s commands of %s sent", n, type, key);
    tw_wait(&w,
            "SELECT count(*) FROM steward.commands WHERE key = $1 AND type = $2 "
            "AND sent_at IS NOT NULL",
            TW_LIST(key, type), n, timeout_s, what);
}

START_TEST(commands_continue_the_trace)
{
    world_init("trace_cmd");
    world_definition("1", "2s");
    tw_start(&w, NULL, true);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w.group),
            "4", 60, "partitions claimed");

    char *a = tl_unique("A-"), *b = tl_unique("B-"), *c = tl_unique("C-"), *e = tl_unique("E-");
    tl_producer_t *p = tl_producer_new();
    order(p, a, TW_LIST("traceparent", TP_A, "tracestate", TS_A));
    order_ce(p, b, TP_B, TS_B);
    order(p, c, NULL);
    order(p, e, TW_LIST("traceparent", TP_E, "tracestate", "Bad Key=1"));
    tl_producer_free(p);

    /* reserving: three attempts (retry.max 2) each a deadline apart, then
     * on_timeout's refunding and its Refund. */
    wait_sent(a, "ReserveStock", "3", 60);
    wait_sent(a, "Refund", "1", 30);
    wait_sent(c, "ReserveStock", "3", 30);
    wait_sent(c, "Refund", "1", 30);
    wait_sent(b, "ReserveStock", "3", 30);
    wait_sent(e, "ReserveStock", "3", 30);

    ck_assert_uint_eq(check_messages("stock-commands", a, TRACE_A, "01", SPAN_A, TS_A), 3);
    /* on_timeout entered refunding: the last traced event's trace. */
    ck_assert_uint_eq(check_messages("payment-commands", a, TRACE_A, "01", SPAN_A, TS_A), 1);
    ck_assert_uint_ge(check_messages("stock-commands", b, TRACE_B, "00", "b7ad6b7169203331", TS_B),
                      3);
    ck_assert_uint_eq(check_messages("stock-commands", c, NULL, NULL, NULL, NULL), 3);
    ck_assert_uint_eq(check_messages("payment-commands", c, NULL, NULL, NULL, NULL), 1);
    ck_assert_uint_ge(check_messages("stock-commands", e, TRACE_E, "01", "1111111111111111", NULL),
                      1);

    /* The event with the malformed tracestate: judged, its traceparent
     * kept, the tracestate dropped and counted. */
    tw_expect(&w,
              "SELECT traceparent || ' ' || coalesce(tracestate, '-') FROM steward.history "
              "WHERE key = $1 AND outcome = 'started'",
              TW_LIST(e), TP_E " -");
    tw_expect(&w, "SELECT tracestate FROM steward.history WHERE key = $1 AND outcome = 'started'",
              TW_LIST(a), TS_A);
    tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "0");
    tl_wait_metric(w.base, "steward_tracestate_ignored_total{reason=\"bad_format\"} 1", 10);

    /* inspect: each command's traceparent with the trace link */
    char *first = tw_scalar(&w,
                            "SELECT traceparent FROM steward.commands WHERE key = $1 "
                            "ORDER BY id LIMIT 1",
                            TW_LIST(a));
    char want[256];
    snprintf(want, sizeof want, "traceparent %s  " LINK TRACE_A, first);
    tl_output_t o =
        tl_steward(TW_LIST(NULL, "inspect", "--config", w.config, "active_order", a), NULL);
    ck_assert_msg(o.status == 0, "inspect exit %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out, want), "inspect lacks %s:\n%s", want, o.out);
    ck_assert_msg(tl_contains(o.out, "trace " TRACE_A "  " LINK TRACE_A), "inspect:\n%s", o.out);
    tl_output_free(&o);
    o = tl_steward(TW_LIST(NULL, "inspect", "--json", "--config", w.config, "active_order", a),
                   NULL);
    ck_assert_msg(o.status == 0, "inspect --json exit %d: %s", o.status, o.err);
    json_t *inst = json_loads(o.out, 0, NULL);
    ck_assert_ptr_nonnull(inst);
    json_t *cmd0 = json_array_get(json_object_get(inst, "commands"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(cmd0, "traceparent")), first);
    ck_assert_str_eq(json_string_value(json_object_get(cmd0, "trace_id")), TRACE_A);
    ck_assert_str_eq(json_string_value(json_object_get(cmd0, "trace_link")), LINK TRACE_A);
    ck_assert_str_eq(json_string_value(json_object_get(cmd0, "tracestate")), TS_A);
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(inst, "history"), 0), "trace_link")),
                     LINK TRACE_A);
    json_decref(inst);
    tl_output_free(&o);

    /* The HTTP view (the console's source) says the same. */
    char url[512];
    long status = 0;
    snprintf(url, sizeof url, "%s/v1/instances/active_order/%s", w.base, a);
    char *body = tl_http_get(url, &status);
    ck_assert_msg(status == 200, "%s: %ld %s", url, status, body);
    inst = json_loads(body, 0, NULL);
    free(body);
    cmd0 = json_array_get(json_object_get(inst, "commands"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(cmd0, "trace_link")), LINK TRACE_A);
    json_decref(inst);
    free(first);

    tw_stop(&w, 30);
    free(a);
    free(b);
    free(c);
    free(e);
}
END_TEST

START_TEST(a_crash_before_the_send_keeps_the_traceparent)
{
    world_init("trace_crash");
    world_definition("1", "1h");
    const char *argv[] = {NULL, "run", "--config", w.config, NULL};
    int pid =
        tl_steward_spawn(argv, TW_LIST("STEWARD_FAILPOINTS=dispatcher.after_claim=crash"), w.log);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w.group),
            "4", 60, "partitions claimed");
    char *a = tl_unique("A-");
    tl_producer_t *p = tl_producer_new();
    order(p, a, TW_LIST("traceparent", TP_A, "tracestate", TS_A));
    tl_producer_free(p);
    /* Claimed (its lease written), never produced: the daemon died there. */
    tw_wait(&w,
            "SELECT count(*) FROM steward.commands WHERE key = $1 AND sent_at IS NULL "
            "AND next_attempt_at > created_at",
            TW_LIST(a), "1", 30, "the command claimed");
    ck_assert_int_eq(tl_stop(pid, SIGKILL, 10), 128 + SIGKILL);
    char *row =
        tw_scalar(&w, "SELECT traceparent FROM steward.commands WHERE key = $1", TW_LIST(a));
    ck_assert_int_eq(strncmp(row, "00-" TRACE_A "-", 36), 0);

    tw_start(&w, NULL, true);
    wait_sent(a, "ReserveStock", "1", 30);
    tw_expect(&w, "SELECT traceparent FROM steward.commands WHERE key = $1", TW_LIST(a), row);
    ck_assert_uint_eq(check_messages("stock-commands", a, TRACE_A, "01", SPAN_A, TS_A), 1);

    /* A second version, loaded on SIGHUP: its instances' commands are
     * traced the same way. */
    world_definition("2", "1h");
    ck_assert_int_eq(kill(w.pids[0], SIGHUP), 0);
    tw_wait(&w, "SELECT max(version) FROM steward.definitions WHERE process = 'active_order'", NULL,
            "2", 30, "version 2 loaded");
    char *b = tl_unique("B-");
    p = tl_producer_new();
    order_ce(p, b, TP_B, TS_B);
    tl_producer_free(p);
    wait_sent(b, "ReserveStock", "1", 30);
    tw_expect(&w, "SELECT version FROM steward.instances WHERE key = $1", TW_LIST(b), "2");
    ck_assert_uint_eq(check_messages("stock-commands", b, TRACE_B, "00", "b7ad6b7169203331", TS_B),
                      1);
    tw_stop(&w, 30);
    free(row);
    free(a);
    free(b);
}
END_TEST

Suite *trace_commands_suite(void)
{
    Suite *s = suite_create("trace_commands");
    TCase *tc = tcase_create("trace_commands");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, commands_continue_the_trace);
    tcase_add_test(tc, a_crash_before_the_send_keeps_the_traceparent);
    suite_add_tcase(s, tc);
    return s;
}
