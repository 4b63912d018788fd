/*
 * test_payload - the bodies sent to each sink, field by field against the
 * PagerDuty Events API v2 and Alertmanager API v2 formats, and the
 * generic webhook's documented shape; the trace of the instance's last
 * traced event in each (trace id, and the link tracing.link builds).
 */
#include "manager/sinks/payload.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define NOW 1795953600000LL /* 2026-11-29T12:00:00Z */

static sink_t pd = {.name = "pd",
                    .type = SINK_PAGERDUTY,
                    .url = "http://x",
                    .routing_key = "R0UTING",
                    .severity = "critical"};
static sink_t am = {
    .name = "am", .type = SINK_ALERTMANAGER, .url = "http://am", .severity = "warning"};

static payload_alert_t alert(json_t *details)
{
    return (payload_alert_t){
        .id = 42,
        .kind = "deadline",
        .process = "order_fulfilment",
        .key = "ORD-1042",
        .state = "awaiting_dispatch",
        .owner = "shipping",
        .summary = "order_fulfilment ORD-1042 stalled in awaiting_dispatch for 2d3h (deadline 2d): "
                   "expected ShipmentDispatched; owner shipping",
        .dedup_key = "steward:deadline:order_fulfilment:ORD-1042:awaiting_dispatch:1",
        .opened_at = "2026-11-29T10:00:00.000Z",
        .deadline_at = "2026-11-29T09:00:00.000Z",
        .details = details,
    };
}

static json_t *parse(char *text)
{
    ck_assert_ptr_nonnull(text);
    json_t *doc = json_loads(text, 0, NULL);
    ck_assert_msg(doc != NULL, "not JSON: %s", text);
    free(text);
    return doc;
}

static const char *str(const json_t *obj, const char *path)
{
    /* "a.b" walks one level down */
    const char *dot = strchr(path, '.');
    if (dot == NULL)
        return json_string_value(json_object_get(obj, path));
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int) (dot - path), path);
    return str(json_object_get(obj, head), dot + 1);
}

START_TEST(pagerduty_trigger_and_resolve)
{
    json_t *details = json_pack("{s:s}", "expected", "ShipmentDispatched");
    payload_alert_t a = alert(details);
    json_t *t = parse(payload_pagerduty(&pd, &a, false, NOW));
    /* Events API v2: routing_key, event_action, dedup_key, payload{summary,
     * source, severity, timestamp, component, group, class, custom_details} */
    ck_assert_str_eq(str(t, "routing_key"), "R0UTING");
    ck_assert_str_eq(str(t, "event_action"), "trigger");
    ck_assert_str_eq(str(t, "dedup_key"), a.dedup_key);
    ck_assert_str_eq(str(t, "payload.summary"), a.summary);
    ck_assert_str_eq(str(t, "payload.source"), "steward/order_fulfilment");
    ck_assert_str_eq(str(t, "payload.severity"), "critical");
    ck_assert_str_eq(str(t, "payload.timestamp"), "2026-11-29T10:00:00.000Z");
    ck_assert_str_eq(str(t, "payload.component"), "order_fulfilment");
    ck_assert_str_eq(str(t, "payload.group"), "awaiting_dispatch");
    ck_assert_str_eq(str(t, "payload.class"), "deadline");
    json_t *custom = json_object_get(json_object_get(t, "payload"), "custom_details");
    ck_assert_str_eq(str(custom, "key"), "ORD-1042");
    ck_assert_str_eq(str(custom, "state"), "awaiting_dispatch");
    ck_assert_str_eq(str(custom, "deadline_at"), "2026-11-29T09:00:00.000Z");
    ck_assert_str_eq(str(custom, "details.expected"), "ShipmentDispatched");
    ck_assert_int_eq(json_object_size(t), 4);
    json_decref(t);

    json_t *r = parse(payload_pagerduty(&pd, &a, true, NOW));
    ck_assert_str_eq(str(r, "event_action"), "resolve");
    ck_assert_str_eq(str(r, "dedup_key"), a.dedup_key);
    ck_assert_str_eq(str(r, "routing_key"), "R0UTING");
    ck_assert_ptr_null(json_object_get(r, "payload")); /* a resolve carries none */
    json_decref(r);
    json_decref(details);
}
END_TEST

START_TEST(pagerduty_summary_is_cut_at_1024)
{
    char long_summary[3000];
    memset(long_summary, 'x', sizeof long_summary - 1);
    long_summary[sizeof long_summary - 1] = '\0';
    payload_alert_t a = alert(NULL);
    a.summary = long_summary;
    json_t *t = parse(payload_pagerduty(&pd, &a, false, NOW));
    ck_assert_uint_eq(strlen(str(t, "payload.summary")), 1024);
    json_decref(t);
}
END_TEST

/* A summary whose 1,024th byte falls inside a multibyte character. */
START_TEST(pagerduty_summary_is_cut_on_a_character_boundary)
{
    for (size_t pad = 1015; pad < 1024; pad++) {
        char text[2048];
        memset(text, 'x', pad);
        text[pad] = '\0';
        strcat(text, "\xe2\x82\xac\xf0\x9f\x93\xa6 stalled \xc3\xa9\xc3\xa9\xc3\xa9");
        payload_alert_t a = alert(NULL);
        a.summary = text;
        json_t *t = parse(payload_pagerduty(&pd, &a, false, NOW));
        const char *summary = str(t, "payload.summary");
        /* json_string() refuses invalid UTF-8: a split character left no summary at all. */
        ck_assert_msg(summary != NULL, "pad %zu: no summary", pad);
        ck_assert_uint_le(strlen(summary), PAYLOAD_PD_SUMMARY_MAX);
        ck_assert_uint_ge(strlen(summary), PAYLOAD_PD_SUMMARY_MAX - 3 - 3);
        ck_assert_msg(strncmp(summary + strlen(summary) - 3, "...", 3) == 0, "pad %zu: %s", pad,
                      summary + pad - 2);
        /* the whole text is in custom_details */
        ck_assert_str_eq(
            str(json_object_get(json_object_get(t, "payload"), "custom_details"), "summary"), text);
        json_decref(t);
    }
}
END_TEST

/* The page says since when, and for how long as of the send. */
START_TEST(summary_duration_is_computed_at_send_time)
{
    const char *since = "2026-11-29T10:57:57.000Z";
    json_t *details = json_pack("{s:s, s:I}", "since", since, "since_ms",
                                (json_int_t) (NOW - (3600000 + 2 * 60000 + 3212)));
    payload_alert_t a = alert(details);
    a.summary = "order_fulfilment ORD-1042 stalled in awaiting_dispatch since "
                "2026-11-29T10:57:57.000Z, deadline 2d: expected ShipmentDispatched";
    char *text = payload_summary(&a, NOW);
    ck_assert_str_eq(text, "order_fulfilment ORD-1042 stalled in awaiting_dispatch since "
                           "2026-11-29T10:57:57.000Z (1h2m ago), deadline 2d: expected "
                           "ShipmentDispatched");
    free(text);
    /* re-sent three days later: recomputed, not frozen */
    text = payload_summary(&a, NOW + 3 * 86400000LL);
    ck_assert_msg(strstr(text, "(3d1h ago)") != NULL, "%s", text);
    free(text);
    json_t *t = parse(payload_pagerduty(&pd, &a, false, NOW));
    ck_assert_msg(strstr(str(t, "payload.summary"), "(1h2m ago)") != NULL, "%s",
                  str(t, "payload.summary"));
    json_decref(t);
    t = parse(payload_webhook(&a, false, NOW));
    ck_assert_msg(strstr(str(t, "alert.summary"), "(1h2m ago)") != NULL, "%s",
                  str(t, "alert.summary"));
    json_decref(t);
    /* without a since, the stored text as it is */
    payload_alert_t plain = alert(NULL);
    text = payload_summary(&plain, NOW);
    ck_assert_str_eq(text, plain.summary);
    free(text);
    json_decref(details);
}
END_TEST

/* A storm as one page: every key counted, the summary within PagerDuty's limit. */
START_TEST(group_page_lists_the_keys)
{
    enum { N = 150 };
    payload_alert_t a[N];
    char keys[N][64];
    for (int i = 0; i < N; i++) {
        a[i] = alert(NULL);
        a[i].kind = "sequence";
        a[i].id = 1000 + i;
        snprintf(keys[i], sizeof keys[i], "ORD-\xc3\xa9%03d", i);
        a[i].key = keys[i];
    }
    json_t *t = parse(payload_group(&pd, a, N, "steward:sequence:g:abc", NOW));
    ck_assert_str_eq(str(t, "dedup_key"), "steward:sequence:g:abc");
    ck_assert_str_eq(str(t, "event_action"), "trigger");
    const char *summary = str(t, "payload.summary");
    ck_assert_ptr_nonnull(summary);
    ck_assert_uint_le(strlen(summary), PAYLOAD_PD_SUMMARY_MAX);
    ck_assert_msg(strncmp(summary,
                          "150 events out of sequence: order_fulfilment in "
                          "awaiting_dispatch: ORD-\xc3\xa9"
                          "000, ORD-\xc3\xa9"
                          "001",
                          80) == 0,
                  "%s", summary);
    json_t *details = json_object_get(
        json_object_get(json_object_get(t, "payload"), "custom_details"), "details");
    ck_assert_int_eq(json_integer_value(json_object_get(details, "count")), N);
    ck_assert_int_eq(json_array_size(json_object_get(details, "keys")), PAYLOAD_GROUP_KEYS);
    ck_assert_int_eq(json_array_size(json_object_get(details, "alert_ids")), N);
    json_decref(t);

    sink_t hook = {.name = "hook", .type = SINK_WEBHOOK, .url = "http://h", .severity = "error"};
    t = parse(payload_group(&hook, a, 3, "steward:sequence:g:abc", NOW));
    ck_assert_str_eq(str(t, "event"), "trigger");
    ck_assert_str_eq(str(t, "alert.dedup_key"), "steward:sequence:g:abc");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(t, "group"), "count")), 3);
    ck_assert_int_eq(json_array_size(json_object_get(json_object_get(t, "group"), "keys")), 3);
    json_decref(t);
}
END_TEST

START_TEST(alertmanager_open_and_resolved)
{
    payload_alert_t a[2] = {alert(NULL), alert(NULL)};
    a[1].key = "ORD-7";
    a[1].resolved_at = "2026-11-29T11:00:00.000Z";
    a[1].resolution = "ShipmentDispatched arrived";
    /* now 2026-11-29T12:00:00Z, resend every minute */
    json_t *list = parse(payload_alertmanager(&am, a, 2, 1795953600000LL, 60000));
    ck_assert(json_is_array(list));
    ck_assert_int_eq(json_array_size(list), 2);
    json_t *open = json_array_get(list, 0), *done = json_array_get(list, 1);
    /* API v2 postable alert: labels, annotations, startsAt, endsAt */
    ck_assert_str_eq(str(open, "labels.alertname"), "StewardStalledStep");
    ck_assert_str_eq(str(open, "labels.process"), "order_fulfilment");
    ck_assert_str_eq(str(open, "labels.state"), "awaiting_dispatch");
    ck_assert_str_eq(str(open, "labels.team"), "shipping");
    ck_assert_str_eq(str(open, "labels.severity"), "warning");
    ck_assert_str_eq(str(open, "labels.key"), "ORD-1042");
    ck_assert_str_eq(str(open, "annotations.summary"), a[0].summary);
    ck_assert_str_eq(str(open, "startsAt"), "2026-11-29T10:00:00.000Z");
    /* open: ends four resend intervals ahead, so it lapses only if not re-sent */
    ck_assert_str_eq(str(open, "endsAt"), "2026-11-29T12:04:00.000Z");
    ck_assert_str_eq(str(done, "endsAt"), "2026-11-29T11:00:00.000Z");
    ck_assert_str_eq(str(done, "annotations.resolution"), "ShipmentDispatched arrived");
    json_decref(list);

    ck_assert_str_eq(payload_alertname("blind"), "StewardBlind");
    ck_assert_str_eq(payload_alertname("unloadable"), "StewardUnloadableVersion");
    ck_assert_str_eq(payload_alertname("sequence"), "StewardSequenceViolation");
    ck_assert_str_eq(payload_alertname("process_deadline"), "StewardProcessDeadline");
}
END_TEST

START_TEST(webhook_shape)
{
    payload_alert_t a = alert(NULL);
    json_t *t = parse(payload_webhook(&a, false, NOW));
    ck_assert_int_eq(json_integer_value(json_object_get(t, "version")), 1);
    ck_assert_str_eq(str(t, "event"), "trigger");
    json_t *body = json_object_get(t, "alert");
    const char *fields[] = {"id",          "kind",       "process",   "key",         "state",
                            "owner",       "summary",    "dedup_key", "deadline_at", "opened_at",
                            "resolved_at", "resolution", "details"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        ck_assert_msg(json_object_get(body, fields[i]) != NULL, "no %s", fields[i]);
    ck_assert(json_is_null(json_object_get(body, "resolved_at")));
    json_decref(t);
    t = parse(payload_webhook(&a, true, NOW));
    ck_assert_str_eq(str(t, "event"), "resolve");
    json_decref(t);
}
END_TEST

START_TEST(acknowledge_by_the_same_dedup_key)
{
    payload_alert_t a = alert(NULL);
    json_t *t = parse(payload_acknowledge(&pd, &a, NOW));
    ck_assert_str_eq(str(t, "event_action"), "acknowledge");
    ck_assert_str_eq(str(t, "dedup_key"), a.dedup_key);
    ck_assert_str_eq(str(t, "routing_key"), pd.routing_key);
    ck_assert_ptr_null(json_object_get(t, "payload"));
    json_decref(t);

    sink_t hook = {.name = "hook", .type = SINK_WEBHOOK, .url = "http://x/hook"};
    json_t *w = parse(payload_acknowledge(&hook, &a, NOW));
    ck_assert_str_eq(str(w, "event"), "acknowledge");
    ck_assert_str_eq(str(w, "alert.dedup_key"), a.dedup_key);
    json_decref(w);
}
END_TEST

/* The log sink's line: the alert's fields, the resolution only on a resolve. */
START_TEST(log_line_shape)
{
    payload_alert_t a = alert(NULL);
    sink_t log = {.name = "ops-log", .type = SINK_LOG};
    json_t *t = parse(payload_log(&log, &a, false, NOW));
    ck_assert_str_eq(str(t, "ts"), "2026-11-29T12:00:00.000Z");
    ck_assert_str_eq(str(t, "level"), "alert");
    ck_assert_str_eq(str(t, "msg"), "alert");
    ck_assert_str_eq(str(t, "sink"), "ops-log");
    ck_assert_str_eq(str(t, "key"), "ORD-1042");
    ck_assert_str_eq(str(t, "owner"), "shipping");
    ck_assert_str_eq(str(t, "dedup_key"), a.dedup_key);
    ck_assert_ptr_null(json_object_get(t, "resolution"));
    json_decref(t);

    a.resolution = "event";
    json_t *r = parse(payload_log(&log, &a, true, NOW));
    ck_assert_str_eq(str(r, "msg"), "alert resolved");
    ck_assert_str_eq(str(r, "resolution"), "event");
    json_decref(r);
}
END_TEST

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define LINK  "https://tempo.example/trace/" TRACE

START_TEST(the_trace_link_is_built_from_its_template)
{
    char *l = payload_trace_link("https://t.example/${trace_id}?q=${trace_id}", TRACE);
    ck_assert_str_eq(l, "https://t.example/" TRACE "?q=" TRACE);
    free(l);
    ck_assert_ptr_null(payload_trace_link("", TRACE));
    ck_assert_ptr_null(payload_trace_link(NULL, TRACE));
    ck_assert_ptr_null(payload_trace_link("https://t.example/${trace_id}", NULL));
}
END_TEST

START_TEST(pages_carry_the_trace)
{
    payload_alert_t a = alert(NULL);
    a.trace_id = TRACE;
    a.tracing_link = "https://tempo.example/trace/${trace_id}";

    json_t *w = parse(payload_webhook(&a, false, NOW));
    ck_assert_str_eq(str(w, "alert.trace_id"), TRACE);
    ck_assert_str_eq(str(w, "alert.trace_link"), LINK);
    json_decref(w);

    json_t *t = parse(payload_pagerduty(&pd, &a, false, NOW));
    json_t *links = json_object_get(t, "links");
    ck_assert_uint_eq(json_array_size(links), 1);
    ck_assert_str_eq(str(json_array_get(links, 0), "href"), LINK);
    ck_assert_str_eq(str(t, "payload.custom_details.trace_id"), TRACE);
    json_decref(t);

    json_t *list = parse(payload_alertmanager(&am, &a, 1, NOW, 60000));
    ck_assert_str_eq(str(json_array_get(list, 0), "annotations.trace_id"), TRACE);
    ck_assert_str_eq(str(json_array_get(list, 0), "annotations.trace_link"), LINK);
    json_decref(list);

    /* a trace id without a template: the id alone */
    a.tracing_link = "";
    w = parse(payload_webhook(&a, false, NOW));
    ck_assert_str_eq(str(w, "alert.trace_id"), TRACE);
    ck_assert(json_is_null(json_object_get(json_object_get(w, "alert"), "trace_link")));
    json_decref(w);
    t = parse(payload_pagerduty(&pd, &a, false, NOW));
    ck_assert_ptr_null(json_object_get(t, "links"));
    json_decref(t);
    list = parse(payload_alertmanager(&am, &a, 1, NOW, 60000));
    ck_assert_str_eq(str(json_array_get(list, 0), "annotations.trace_id"), TRACE);
    ck_assert_ptr_null(
        json_object_get(json_object_get(json_array_get(list, 0), "annotations"), "trace_link"));
    json_decref(list);

    /* no trace: null in the webhook, absent elsewhere */
    a.trace_id = NULL;
    a.tracing_link = "https://tempo.example/trace/${trace_id}";
    w = parse(payload_webhook(&a, false, NOW));
    ck_assert(json_is_null(json_object_get(json_object_get(w, "alert"), "trace_id")));
    ck_assert(json_is_null(json_object_get(json_object_get(w, "alert"), "trace_link")));
    json_decref(w);
    list = parse(payload_alertmanager(&am, &a, 1, NOW, 60000));
    ck_assert_ptr_null(
        json_object_get(json_object_get(json_array_get(list, 0), "annotations"), "trace_id"));
    json_decref(list);
}
END_TEST

Suite *payload_suite(void)
{
    Suite *s = suite_create("payload");
    TCase *tc = tcase_create("payload");
    tcase_add_test(tc, pagerduty_trigger_and_resolve);
    tcase_add_test(tc, pagerduty_summary_is_cut_at_1024);
    tcase_add_test(tc, pagerduty_summary_is_cut_on_a_character_boundary);
    tcase_add_test(tc, summary_duration_is_computed_at_send_time);
    tcase_add_test(tc, group_page_lists_the_keys);
    tcase_add_test(tc, alertmanager_open_and_resolved);
    tcase_add_test(tc, webhook_shape);
    tcase_add_test(tc, acknowledge_by_the_same_dedup_key);
    tcase_add_test(tc, log_line_shape);
    tcase_add_test(tc, the_trace_link_is_built_from_its_template);
    tcase_add_test(tc, pages_carry_the_trace);
    suite_add_tcase(s, tc);
    return s;
}
