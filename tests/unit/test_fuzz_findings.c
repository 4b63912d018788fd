/*
 * test_fuzz_findings - one test per defect the fuzz targets (tests/fuzz/)
 * found, each on the input that found it (also kept in the target's
 * corpus, tests/fuzz/corpus/<target>/), so the fix stays fixed in builds
 * without clang too. docs/reliability.md, "Fuzzing", lists them.
 */
#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/def.h"
#include "formats/decode.h"
#include "engine/engine.h"
#include "engine/template.h"
#include "manager/api/http.h"
#include "manager/alerting/notifier.h"
#include "testlib.h"

#include <check.h>
#include <stdint.h>
#include <string.h>

/* fuzz_time and fuzz_message: strftime's %Y writes the year 1 as "1", so a
 * time Steward accepts (0001-01-01) formatted as "1-01-01T..." in alert
 * details, which is not RFC 3339 and does not parse back. */
START_TEST(the_earliest_time_formats_as_rfc3339)
{
    char buf[40];
    int64_t ms;

    ck_assert(rfc3339_parse("0001-01-01T00:00:00Z", &ms));
    ck_assert_int_eq(ms, DECODE_MIN_TIME_MS);
    ck_assert_str_eq(rfc3339_format(ms, buf, sizeof buf), "0001-01-01T00:00:00.000Z");
    ck_assert_str_eq(rfc3339_format(-59042995200000LL, buf, sizeof buf),
                     "0099-01-01T00:00:00.000Z");
    ck_assert(rfc3339_parse(buf, &ms));
    ck_assert_int_eq(ms, -59042995200000LL);
    ck_assert_str_eq(rfc3339_format(DECODE_MAX_TIME_MS, buf, sizeof buf),
                     "9999-12-31T23:59:59.999Z");
}
END_TEST

static void answer(notifier_response_t *r, const char *body, size_t len)
{
    notifier_response_init(r, NOTIFIER_MAX_RETRY_AFTER_MS);
    char copy[1024];
    memcpy(copy, body, len);
    notifier_response_body(copy, 1, len, r);
}

/* fuzz_sink_response: a sink's body went into outbox.last_error as it came;
 * PostgreSQL refuses text that is not UTF-8 and with it the record of the
 * attempt, so the row was sent again at every lease. */
START_TEST(a_sink_answer_that_is_not_utf8_is_recorded_as_utf8)
{
    notifier_response_t r;
    char error[NOTIFIER_ERROR_SIZE];

    /* A proxy's Latin-1 page. */
    answer(&r, "Bad gateway \xe9t\xe9", 15);
    notifier_response_error(502, &r, error, sizeof error);
    ck_assert_str_eq(error, "HTTP 502: Bad gateway \xef\xbf\xbdt\xef\xbf\xbd");
    ck_assert(utf8_valid((const unsigned char *) error, strlen(error)));

    /* UTF-8 cut inside a character at the kept length: 300 "é" is 600 bytes. */
    char accents[600];
    for (size_t i = 0; i < sizeof accents; i += 2)
        memcpy(accents + i, "\xc3\xa9", 2);
    answer(&r, accents, sizeof accents);
    ck_assert_uint_eq(r.len, NOTIFIER_RESPONSE_KEEP);
    notifier_response_error(500, &r, error, sizeof error);
    ck_assert(utf8_valid((const unsigned char *) error, strlen(error)));
    ck_assert_ptr_nonnull(strstr(error, "\xc3\xa9\xc3\xa9"));

    /* A NUL does not end the text early; surrogates and overlongs go too. */
    answer(&r, "not\0found \xed\xa0\x80 \xc0\x80", 16);
    notifier_response_error(404, &r, error, sizeof error);
    ck_assert_str_eq(error, "HTTP 404: not\xef\xbf\xbd"
                            "found \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd");

    /* Text that is fine stays as it is. */
    answer(&r, "{\"status\":\"invalid event\"}", 26);
    notifier_response_error(400, &r, error, sizeof error);
    ck_assert_str_eq(error, "HTTP 400: {\"status\":\"invalid event\"}");
}
END_TEST

/* fuzz_http_route: the 404 message quoted the path as sent; segments that
 * decode to UTF-8 may still hold raw bytes that are not ("%ca" then a raw
 * 0x93 decode to U+0293), and the JSON body could not be made of it. */
START_TEST(a_404_quotes_the_path_as_utf8)
{
    http_route_t rt;

    http_route("GET", "/a%ca\x93", &rt);
    ck_assert_uint_eq(rt.status, 404);
    ck_assert_str_eq(rt.error, "no such endpoint: /a%ca%93");
    http_route("GET", "/v2/\xc3\xa9t\xc3\xa9", &rt);
    ck_assert_uint_eq(rt.status, 404);
    ck_assert_str_eq(rt.error, "no such endpoint: /v2/%C3%A9t%C3%A9");
    http_route("GET", "/v1/instances/order/%C3%A9", &rt);
    ck_assert_uint_eq(rt.status, 0);
    ck_assert_str_eq(rt.key, "\xc3\xa9");
    /* The 405 quoted the path as sent too. */
    http_route("POST", "/v1/instances/order/%ca\x93", &rt);
    ck_assert_uint_eq(rt.status, 405);
    ck_assert_str_eq(rt.error, "/v1/instances/order/%ca%93 answers GET and HEAD only");
    /* And so does the 405 of an action asked for with GET. */
    http_route("GET", "/v1/instances/order/%ca\x93/close", &rt);
    ck_assert_uint_eq(rt.status, 405);
    ck_assert(rt.allow_post);
    ck_assert_str_eq(rt.error, "/v1/instances/order/%ca%93/close answers POST only");
}
END_TEST

/* fuzz_message: a rejection's detail quoted jansson's error, whose
 * excerpt of the message ("near '...'") may end inside a character; the
 * detail is steward.rejected.detail, a text column, and PostgreSQL refused
 * the row that records the rejection. */
START_TEST(a_rejection_detail_is_utf8)
{
    /* The input fuzz_message found: an escape cut by a two-byte character. */
    static const char value[] = "{\"\\u1\xcb\x9e"
                                "9\":1}";
    decode_input_t in = {.topic = "orders",
                         .offset = 1,
                         .value = value,
                         .value_len = sizeof value - 1,
                         .timestamp_ms = -1};
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    decode_message_t msg;
    char detail[256];

    ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail),
                     DECODE_INVALID_JSON);
    ck_assert_msg(utf8_valid((const unsigned char *) detail, strlen(detail)),
                  "detail not UTF-8: %s", detail);
    ck_assert_ptr_nonnull(strstr(detail, "invalid escape"));
}
END_TEST

/* The same for history.detail: a duplicate's detail names its id, which
 * the 256-byte detail may cut inside a character. */
START_TEST(a_history_detail_is_utf8)
{
    static const char doc[] =
        "{\"process\": \"p\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"t\","
        " \"key\": \"/k\", \"events\": {\"A\": {\"topic\": \"t\"}, \"B\": {\"topic\": \"t\"}},"
        " \"start\": {\"on\": \"A\", \"to\": \"waiting\"},"
        " \"states\": {\"waiting\": {\"deadline\": \"1h\", \"on\": {\"B\": \"done\"}},"
        " \"done\": {\"terminal\": \"success\"}}}";
    def_problems_t problems = {0};
    def_t *def = def_load_json(doc, sizeof doc - 1, "p.json", &problems);
    ck_assert_ptr_nonnull(def);

    char id[601];
    for (size_t i = 0; i < 600; i += 2)
        memcpy(id + i, "\xc3\xa9", 2);
    id[600] = '\0';
    engine_instance_t inst;
    engine_instance_init(&inst);
    engine_event_t ev = {0, id, 0, NULL};
    engine_result_t r = engine_apply(def, &inst, &ev, true);
    ck_assert_int_eq(r.outcome, ENGINE_DUPLICATE);
    ck_assert_msg(utf8_valid((const unsigned char *) r.detail, strlen(r.detail)),
                  "detail not UTF-8: %s", r.detail);
    ck_assert_ptr_nonnull(strstr(r.detail, "event \xc3\xa9\xc3\xa9"));
    engine_instance_clear(&inst);
    def_free(def);
}
END_TEST

/* fuzz_template (a seed of its corpus): the reason a rendering is refused
 * quotes the variable, and a long one was cut inside a character; the
 * reason goes into the command_failed alert's summary (a text column) and
 * its JSON details, which could not be made of it. */
START_TEST(a_template_refusal_is_utf8)
{
    char text[2 + 300 * 2 + 2];
    size_t o = 0;
    text[o++] = '$';
    text[o++] = '{';
    for (int i = 0; i < 300; i++, o += 2)
        memcpy(text + o, "\xc3\xa9", 2);
    text[o++] = '}';
    text[o] = '\0';
    json_t *tmpl = json_string(text);
    template_ctx_t ctx = {"O-1", "p", "waiting", 1, 0, NULL};
    char err[512]; /* cmdqueue.c's */

    ck_assert_ptr_null(template_render(tmpl, &ctx, err, sizeof err));
    ck_assert_msg(utf8_valid((const unsigned char *) err, strlen(err)), "reason not UTF-8: %s",
                  err);
    ck_assert_ptr_nonnull(strstr(err, "unknown template variable ${\xc3\xa9"));
    json_decref(tmpl);
}
END_TEST

/* fuzz_definition (a seed from the unit tier's definition tests): a capture whose name is not
 * valid keeps no name, and the check that a command's ${vars.X} is
 * captured on a path to its state compared that NULL name: a definition
 * with both crashed `steward check` instead of listing its problems. */
START_TEST(an_invalid_capture_name_beside_a_command_is_a_problem)
{
    static const char doc[] =
        "{\"process\": \"p\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"t\","
        " \"key\": \"/k\", \"events\": {\"A\": {\"topic\": \"t\"}, \"B\": {\"topic\": \"t\"}},"
        " \"start\": {\"on\": \"A\", \"to\": \"waiting\", \"capture\": {\"1total\": \"/total\"}},"
        " \"states\": {\"waiting\": {\"deadline\": \"1h\", \"on\": {\"B\": \"done\"},"
        "   \"command\": {\"topic\": \"c\", \"type\": \"C\","
        "                 \"payload\": {\"amount\": \"${vars.total}\"}}},"
        " \"done\": {\"terminal\": \"success\"}}}";
    def_problems_t problems = {0};
    def_t *def = def_load_json(doc, sizeof doc - 1, "p.json", &problems);
    ck_assert_ptr_null(def);
    bool named = false;
    for (size_t i = 0; i < problems.n; i++)
        named = named || strstr(problems.items[i].message, "'1total' is not valid") != NULL;
    ck_assert_msg(named, "the invalid name is not among the %zu problems", problems.n);
    def_problems_clear(&problems);
}
END_TEST

/* fuzz_definition (a 10 min run on the merged tree): when the captures
 * could not be read, the template check is told "any name" (vars NULL) but
 * kept the count; an empty ${vars.} then walked a NULL list. */
START_TEST(an_empty_variable_name_with_unknown_captures_is_a_problem)
{
    json_t *payload = json_pack("{s:s}", "amount", "${vars.}");
    def_problems_t problems = {0};
    ck_assert_uint_eq(def_check_template(payload, NULL, 3, "p.json", "/payload", &problems), 1);
    ck_assert_msg(strstr(problems.items[0].message, "${vars.}") != NULL, "%s",
                  problems.items[0].message);
    def_problems_clear(&problems);
    json_decref(payload);
}
END_TEST

/* fuzz_message (a 5 s run of the suite's fuzz step, on a definition that
 * takes the time from the Kafka timestamp): that time was never checked
 * against the years Steward accepts, so a producer's timestamp in the year
 * 448000 reached the engine and PostgreSQL. It is refused like any other
 * time out of range. */
START_TEST(a_kafka_timestamp_out_of_range_is_refused)
{
    static const char doc[] =
        "{\"process\": \"p\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"t\","
        " \"key\": \"/sku\", \"envelope\": {\"time\": {\"from\": \"kafka_timestamp\"}},"
        " \"events\": {\"A\": {\"topic\": \"t\", \"type_from_topic\": true},"
        "             \"B\": {\"topic\": \"u\"}},"
        " \"start\": {\"on\": \"A\", \"to\": \"waiting\"},"
        " \"states\": {\"waiting\": {\"deadline\": \"1h\", \"on\": {\"B\": \"done\"}},"
        " \"done\": {\"terminal\": \"success\"}}}";
    static const char value[] = "{\"sku\": \"A-1\"}";
    def_problems_t problems = {0};
    def_t *def = def_load_json(doc, sizeof doc - 1, "p.json", &problems);
    ck_assert_ptr_nonnull(def);
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    int64_t stamps[] = {14075513335532800LL, DECODE_MAX_TIME_MS + 1, DECODE_MAX_TIME_MS};
    for (size_t i = 0; i < 3; i++) {
        decode_input_t in = {.topic = "t",
                             .offset = 1,
                             .value = value,
                             .value_len = sizeof value - 1,
                             .timestamp_ms = stamps[i]};
        decode_message_t msg;
        decode_envelope_t env;
        char detail[256];
        ck_assert_int_eq(decode_message(&in, &limits, &msg, detail, sizeof detail), DECODE_OK);
        decode_reason_t reason = decode_envelope(&msg, &in, def, 0, &env, detail, sizeof detail);
        if (i < 2) {
            ck_assert_int_eq(reason, DECODE_INVALID_TIME);
            ck_assert_ptr_nonnull(strstr(detail, "Kafka timestamp"));
        } else {
            ck_assert_int_eq(reason, DECODE_OK);
            ck_assert_int_eq(env.time_ms, DECODE_MAX_TIME_MS);
            decode_envelope_clear(&env);
        }
        decode_message_clear(&msg);
    }
    def_free(def);
}
END_TEST

/* fuzz_retry_after (a seed at the top of the cap's range): delta-seconds
 * just over the cap stopped the loop only one second past it, and their
 * product with 1000 overflowed for a cap near INT64_MAX. */
START_TEST(retry_after_cannot_overflow_at_any_cap)
{
    ck_assert_int_eq(notifier_parse_retry_after("9223372036854776", 0, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(notifier_parse_retry_after("9223372036854775", 0, INT64_MAX),
                     9223372036854775000LL);
    ck_assert_int_eq(notifier_parse_retry_after("301", 0, 300000), 300000);
    ck_assert_int_eq(notifier_parse_retry_after("300", 0, 300000), 300000);
    ck_assert_int_eq(notifier_parse_retry_after("299", 0, 300000), 299000);
    ck_assert_int_eq(notifier_parse_retry_after("1", 0, 999), 999);
}
END_TEST

Suite *fuzz_findings_suite(void)
{
    Suite *s = suite_create("fuzz_findings");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, the_earliest_time_formats_as_rfc3339);
    tcase_add_test(tc, a_sink_answer_that_is_not_utf8_is_recorded_as_utf8);
    tcase_add_test(tc, a_404_quotes_the_path_as_utf8);
    tcase_add_test(tc, a_rejection_detail_is_utf8);
    tcase_add_test(tc, a_history_detail_is_utf8);
    tcase_add_test(tc, retry_after_cannot_overflow_at_any_cap);
    tcase_add_test(tc, a_template_refusal_is_utf8);
    tcase_add_test(tc, an_invalid_capture_name_beside_a_command_is_a_problem);
    tcase_add_test(tc, a_kafka_timestamp_out_of_range_is_refused);
    tcase_add_test(tc, an_empty_variable_name_with_unknown_captures_is_a_problem);
    suite_add_tcase(s, tc);
    return s;
}
