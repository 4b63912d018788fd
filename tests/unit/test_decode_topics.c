/*
 * test_decode_topics - decoding by the envelope of the message's topic:
 * four topics of one process, each kept by a team with its conventions
 * (the process's default, a type header, the message key and a time in
 * epoch seconds, an id field of its own), and one topic where two
 * producers name the type in two places. The other topics keep the
 * process's envelope whatever one topic declares.
 */
#include "formats/decode.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static def_t *def;
static decode_message_t msg;
static decode_envelope_t env;
static char detail[256];
static const decode_limits_t limits = {4096, 16};

static const char claims_def[] =
    "{\"process\":\"claim\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"claims\","
    " \"key\":\"/claimId\","
    " \"envelope\":{\"time\":{\"pointer\":\"/occurredAt\",\"format\":\"rfc3339\"}},"
    " \"topics\":{"
    "   \"assessments\":{\"envelope\":{\"type\":{\"header\":\"x-event-type\"}}},"
    "   \"payments\":{\"key\":{\"from\":\"message_key\"},"
    "                 \"envelope\":{\"time\":{\"pointer\":\"/ts\",\"format\":\"epoch_seconds\"}}},"
    "   \"letters\":{\"envelope\":{\"id\":\"/eventId\"}}},"
    " \"events\":{\"ClaimFiled\":{\"topic\":\"claims\"},"
    "   \"ClaimAssessed\":{\"topic\":\"assessments\"},"
    "   \"ClaimPaid\":{\"topic\":\"payments\"},"
    "   \"LetterSent\":{\"topic\":\"letters\"},"
    "   \"LetterReturned\":{\"topic\":\"letters\","
    "                      \"envelope\":{\"type\":{\"header\":\"legacy-kind\"}}}},"
    " \"start\":{\"on\":\"ClaimFiled\",\"to\":\"filed\"},"
    " \"states\":{\"filed\":{\"deadline\":\"1d\",\"on\":{\"ClaimAssessed\":\"assessed\"}},"
    "   \"assessed\":{\"deadline\":\"1d\",\"on\":{\"ClaimPaid\":\"paid\"}},"
    "   "
    "\"paid\":{\"deadline\":\"1d\",\"on\":{\"LetterSent\":\"done\",\"LetterReturned\":\"done\"}},"
    "   \"done\":{\"terminal\":\"success\"}}}";

static void setup(void)
{
    def_problems_t problems = {0};
    def = def_load_json(claims_def, strlen(claims_def), "claims.json", &problems);
    ck_assert_msg(def != NULL, "definition: %s: %s", problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "?");
    def_problems_clear(&problems);
    memset(&msg, 0, sizeof msg);
    memset(&env, 0, sizeof env);
}

static void teardown(void)
{
    decode_message_clear(&msg);
    decode_envelope_clear(&env);
    def_free(def);
}

static decode_input_t input(const char *topic, const char *value)
{
    return (decode_input_t){.topic = topic,
                            .partition = 0,
                            .offset = 9,
                            .value = value,
                            .value_len = strlen(value),
                            .timestamp_ms = 1795000000000LL};
}

/* Decodes `in` and reads it as the event its topic's rules find. */
static decode_reason_t read_as(const decode_input_t *in, const char **type)
{
    decode_message_clear(&msg);
    decode_envelope_clear(&env);
    ck_assert_int_eq(decode_message(in, &limits, &msg, detail, sizeof detail), DECODE_OK);
    *type = decode_event_type(&msg, in, def);
    if (*type == NULL)
        return DECODE_MISSING_TYPE;
    long e = def_find_event(def, *type);
    ck_assert_msg(e >= 0, "type %s is not declared", *type);
    return decode_envelope(&msg, in, def, (size_t) e, &env, detail, sizeof detail);
}

START_TEST(each_topic_is_read_by_its_own_envelope)
{
    const char *type;
    /* claims: the process's envelope */
    decode_input_t in =
        input("claims", "{\"type\":\"ClaimFiled\",\"claimId\":\"C-1\",\"id\":\"e1\","
                        "\"occurredAt\":\"2026-11-29T10:00:00Z\"}");
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "ClaimFiled");
    ck_assert_str_eq(env.key, "C-1");
    ck_assert_str_eq(env.id, "e1");
    ck_assert_int_eq(env.time_ms, 1795946400000LL);

    /* assessments: the type in the team's own header; the payload's is ignored */
    decode_header_t h[] = {{"X-Event-Type", "ClaimAssessed", 13}};
    in = input("assessments", "{\"type\":\"Ignored\",\"claimId\":\"C-1\","
                              "\"occurredAt\":\"2026-11-29T11:00:00Z\"}");
    in.headers = h;
    in.n_headers = 1;
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "ClaimAssessed");
    ck_assert_str_eq(env.key, "C-1");
    ck_assert_int_eq(env.time_ms, 1795950000000LL);

    /* payments: the message key, a time in epoch seconds */
    in = input("payments", "{\"type\":\"ClaimPaid\",\"ts\":1795953600}");
    in.key = "C-1";
    in.key_len = 3;
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "ClaimPaid");
    ck_assert_str_eq(env.key, "C-1");
    ck_assert_int_eq(env.time_ms, 1795953600000LL);

    /* letters: an id field of its own */
    in = input("letters", "{\"type\":\"LetterSent\",\"claimId\":\"C-1\",\"eventId\":\"L-7\","
                          "\"id\":\"not-this\",\"occurredAt\":\"2026-11-29T13:00:00Z\"}");
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "LetterSent");
    ck_assert_str_eq(env.id, "L-7");
}
END_TEST

START_TEST(one_topics_rules_do_not_reach_the_others)
{
    const char *type;
    /* The header that types assessments means nothing on claims. */
    decode_header_t h[] = {{"x-event-type", "ClaimAssessed", 13}};
    decode_input_t in = input("claims", "{\"type\":\"ClaimFiled\",\"claimId\":\"C-2\","
                                        "\"occurredAt\":\"2026-11-29T10:00:00Z\"}");
    in.headers = h;
    in.n_headers = 1;
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "ClaimFiled");
    ck_assert_str_eq(env.key, "C-2");

    /* On assessments the payload's type is not read: missing_type names the topic. */
    in = input("assessments", "{\"type\":\"ClaimAssessed\",\"claimId\":\"C-2\"}");
    ck_assert_int_eq(read_as(&in, &type), DECODE_MISSING_TYPE);
    decode_type_source(def, "assessments", detail, sizeof detail);
    ck_assert_msg(strstr(detail, "header 'x-event-type'") != NULL &&
                      strstr(detail, "the envelope.type of topic assessments") != NULL,
                  "detail: %s", detail);
    decode_type_source(def, "claims", detail, sizeof detail);
    ck_assert_msg(strstr(detail, "at /type (the definition's envelope.type)") != NULL, "detail: %s",
                  detail);

    /* payments' message key is not the key of claims. */
    in = input("claims", "{\"type\":\"ClaimFiled\",\"occurredAt\":\"2026-11-29T10:00:00Z\"}");
    in.key = "C-3";
    in.key_len = 3;
    ck_assert_int_eq(read_as(&in, &type), DECODE_MISSING_KEY);
    ck_assert_msg(strstr(detail, "no correlation key at /claimId") != NULL, "detail: %s", detail);

    /* payments' epoch seconds: a text time there is refused, naming its pointer. */
    in = input("payments", "{\"type\":\"ClaimPaid\",\"ts\":\"2026-11-29T10:00:00Z\"}");
    in.key = "C-3";
    in.key_len = 3;
    ck_assert_int_eq(read_as(&in, &type), DECODE_INVALID_TIME);
    ck_assert_msg(strstr(detail, "at /ts") != NULL && strstr(detail, "epoch seconds") != NULL,
                  "detail: %s", detail);
}
END_TEST

START_TEST(two_conventions_on_one_topic)
{
    const char *type;
    /* The new producer: the payload's type. */
    decode_input_t in = input("letters", "{\"type\":\"LetterSent\",\"claimId\":\"C-4\","
                                         "\"occurredAt\":\"2026-11-29T13:00:00Z\"}");
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "LetterSent");

    /* The legacy producer: its own header, no type in the payload. */
    decode_header_t h[] = {{"legacy-kind", "LetterReturned", 14}};
    in = input("letters",
               "{\"claimId\":\"C-4\",\"eventId\":\"L-8\",\"occurredAt\":\"2026-11-29T14:00:00Z\"}");
    in.headers = h;
    in.n_headers = 1;
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "LetterReturned");
    ck_assert_str_eq(env.id, "L-8"); /* the topic's id field still applies */

    /* The legacy header naming another event is not that event's rule. */
    decode_header_t other[] = {{"legacy-kind", "LetterSent", 10}};
    in = input("letters", "{\"claimId\":\"C-4\",\"occurredAt\":\"2026-11-29T14:00:00Z\"}");
    in.headers = other;
    in.n_headers = 1;
    ck_assert_int_eq(read_as(&in, &type), DECODE_MISSING_TYPE);
}
END_TEST

START_TEST(mapped_topics_are_read_by_their_envelopes)
{
    def_problems_t problems = {0};
    ck_assert(def_map_topics(def, "prod.", NULL, &problems));
    const char *type;
    decode_header_t h[] = {{"x-event-type", "ClaimAssessed", 13}};
    decode_input_t in = input("prod.assessments", "{\"claimId\":\"C-5\","
                                                  "\"occurredAt\":\"2026-11-29T11:00:00Z\"}");
    in.headers = h;
    in.n_headers = 1;
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(type, "ClaimAssessed");
    in = input("prod.payments", "{\"type\":\"ClaimPaid\",\"ts\":1795953600}");
    in.key = "C-5";
    in.key_len = 3;
    ck_assert_int_eq(read_as(&in, &type), DECODE_OK);
    ck_assert_str_eq(env.key, "C-5");
    def_problems_clear(&problems);
}
END_TEST

Suite *decode_topics_suite(void)
{
    Suite *s = suite_create("decode_topics");
    TCase *tc = tcase_create("decode_topics");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, each_topic_is_read_by_its_own_envelope);
    tcase_add_test(tc, one_topics_rules_do_not_reach_the_others);
    tcase_add_test(tc, two_conventions_on_one_topic);
    tcase_add_test(tc, mapped_topics_are_read_by_their_envelopes);
    suite_add_tcase(s, tc);
    return s;
}
