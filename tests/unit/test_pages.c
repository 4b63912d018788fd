/*
 * test_pages - the pure parts that decide whether a page arrives: dedup
 * keys (SHA-256 of the whole identity), cuts on character boundaries,
 * rounded durations, Retry-After, and stable sink names.
 */
#include "common/sha256.h"
#include "common/utf8.h"
#include "definitions/duration.h"
#include "manager/alerting/alerts.h"
#include "manager/alerting/notifier.h"
#include "manager/sinks/routes.h"
#include "testlib.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

START_TEST(sha256_test_vectors)
{
    char hex[SHA256_HEX_SIZE];
    /* FIPS 180-4 examples, and the padding edges around one block */
    sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(two, strlen(two), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    sha256_hex(million, 1000000, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    char a64[64];
    memset(a64, 'a', sizeof a64);
    sha256_hex(a64, 55, hex); /* the longest message with its length in one block */
    ck_assert_str_eq(hex, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    sha256_hex(a64, 56, hex); /* the shortest that needs a second block */
    ck_assert_str_eq(hex, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    sha256_hex(a64, 64, hex);
    ck_assert_str_eq(hex, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}
END_TEST

/* Two identities with a 600-character common prefix: two keys, each short. */
START_TEST(dedup_keys_hash_the_whole_identity)
{
    char a[700], b[700], ka[ALERT_DEDUP_SIZE], kb[ALERT_DEDUP_SIZE];
    char prefix[601];
    memset(prefix, 'K', 600);
    prefix[600] = '\0';
    snprintf(a, sizeof a, "steward:sequence:order:%s:evt-1", prefix);
    snprintf(b, sizeof b, "steward:sequence:order:%s:evt-2", prefix);
    alert_dedup_key(ALERT_SEQUENCE, a, ka, sizeof ka);
    alert_dedup_key(ALERT_SEQUENCE, b, kb, sizeof kb);
    ck_assert_str_ne(ka, kb);
    ck_assert_uint_le(strlen(ka), 255); /* PagerDuty's dedup_key limit */
    ck_assert_uint_eq(strlen(ka), strlen("steward:sequence::") + 40 + 64);
    ck_assert_msg(strncmp(ka, "steward:sequence:order:KKKK", 27) == 0, "%s", ka);
    /* the same identity, the same key */
    alert_dedup_key(ALERT_SEQUENCE, a, kb, sizeof kb);
    ck_assert_str_eq(ka, kb);
    /* one mark per character, not per byte; nothing outside ASCII */
    alert_dedup_key(ALERT_DEADLINE, "steward:deadline:p:\xc3\xa9t\xc3\xa9 1:s:5", ka, sizeof ka);
    ck_assert_msg(strncmp(ka, "steward:deadline:p:_t__1:s:5:", 29) == 0, "%s", ka);
    for (const char *p = ka; *p; p++)
        ck_assert_int_lt((unsigned char) *p, 0x80);
    /* a kind is part of the key */
    alert_dedup_key(ALERT_BLIND, "g", ka, sizeof ka);
    alert_dedup_key(ALERT_SEQUENCE, "g", kb, sizeof kb);
    ck_assert_str_ne(ka, kb);
}
END_TEST

START_TEST(utf8_cuts_between_characters)
{
    const char *euro = "ab\xe2\x82\xac"; /* a, b, then a 3-byte character */
    ck_assert_uint_eq(utf8_prefix_len(euro, 5), 5);
    ck_assert_uint_eq(utf8_prefix_len(euro, 4), 2);
    ck_assert_uint_eq(utf8_prefix_len(euro, 3), 2);
    ck_assert_uint_eq(utf8_prefix_len(euro, 2), 2);
    ck_assert_uint_eq(utf8_prefix_len("\xf0\x9f\x93\xa6x", 3), 0);
    ck_assert_uint_eq(utf8_prefix_len("\xf0\x9f\x93\xa6x", 4), 4);
    /* a stray byte counts as one */
    ck_assert_uint_eq(utf8_prefix_len("a\xffz", 2), 2);
    char buf[16];
    ck_assert_str_eq(utf8_cut("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 7, "...", buf, sizeof buf),
                     "\xc3\xa9\xc3\xa9...");
    ck_assert_str_eq(utf8_cut("short", 7, "...", buf, sizeof buf), "short");
    ck_assert_str_eq(utf8_cut("exactly", 7, "...", buf, sizeof buf), "exactly");
    /* what snprintf() into a short buffer leaves: the partial character goes */
    ck_assert_uint_eq(utf8_whole_len("ab\xe2\x82"), 2);
    ck_assert_uint_eq(utf8_whole_len("ab\xe2\x82\xac"), 5);
    ck_assert_uint_eq(utf8_whole_len("\xc3"), 0);
    ck_assert_uint_eq(utf8_whole_len("\xf0\x9f\x93"), 0);
    ck_assert_uint_eq(utf8_whole_len("x\xf0\x9f\x93\xa6"), 5);
    ck_assert_uint_eq(utf8_whole_len("abc"), 3);
    ck_assert_uint_eq(utf8_whole_len(""), 0);
}
END_TEST

START_TEST(durations_are_rounded_for_people)
{
    static const struct {
        int64_t ms;
        const char *text;
    } cases[] = {
        {0, "0s"},
        {250, "250ms"},
        {999, "999ms"},
        {1000, "1s"},
        {1004, "1s"},
        {1005, "1.01s"},
        {1500, "1.5s"},
        {9010, "9.01s"},
        {9994, "9.99s"},
        {9996, "10s"},
        {-2500, "-2.5s"},
        {45400, "45s"},
        {45600, "46s"},
        {59600, "1m"},
        {60212, "1m"},
        {28137, "28s"},
        {3723000, "1h2m"},
        {7 * 60000 + 30600, "7m31s"},
        {5 * 3600000 + 28 * 60000 + 10000, "5h28m"},
        {3600000 + 59 * 60000 + 45000, "2h"},
        {3 * 86400000LL + 4 * 3600000 + 31 * 60000, "3d5h"},
        {86400000LL + 5 * 60000, "1d"},
        {-90500, "-1m31s"},
        {INT64_MAX, "106751991167d7h"},
        {INT64_MIN, "-106751991167d7h"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[48];
        ck_assert_str_eq(duration_format_rounded(cases[i].ms, buf, sizeof buf), cases[i].text);
    }
}
END_TEST

START_TEST(retry_after_is_honoured_up_to_a_cap)
{
    const int64_t now = 1795953600000LL; /* Sun, 29 Nov 2026 12:00:00 GMT */
    const int64_t cap = 300000;
    ck_assert_int_eq(notifier_parse_retry_after("1", now, cap), 1000);
    ck_assert_int_eq(notifier_parse_retry_after(" 120\r\n", now, cap), 120000);
    ck_assert_int_eq(notifier_parse_retry_after("0", now, cap), 0);
    ck_assert_int_eq(notifier_parse_retry_after("86400", now, cap), cap);
    ck_assert_int_eq(notifier_parse_retry_after("99999999999999999999", now, cap), cap);
    ck_assert_int_eq(
        notifier_parse_retry_after("999999999999999999999999999999999999999999", now, cap), cap);
    ck_assert_int_eq(notifier_parse_retry_after("Sun, 29 Nov 2026 12:01:30 GMT", now, cap), 90000);
    ck_assert_int_eq(notifier_parse_retry_after("Sun, 29 Nov 2026 11:00:00 GMT", now, cap), 0);
    ck_assert_int_eq(notifier_parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now, cap), cap);
    ck_assert_int_eq(notifier_parse_retry_after("-5", now, cap), -1);
    ck_assert_int_eq(notifier_parse_retry_after("soon", now, cap), -1);
    ck_assert_int_eq(notifier_parse_retry_after("", now, cap), -1);
    ck_assert_int_eq(notifier_parse_retry_after(NULL, now, cap), -1);
}
END_TEST

static route_table_t *table(const char *text, char *err, size_t err_size)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    ck_assert_msg(doc != NULL, "%s", jerr.text);
    route_table_t *t = route_table_new(doc, err, err_size);
    json_decref(doc);
    return t;
}

/* Inserting a sink renames no other: outbox rows keep finding theirs. */
START_TEST(sink_names_do_not_depend_on_position)
{
    char err[512] = "";
    route_table_t *before = table("{\"ops\":[{\"type\":\"webhook\",\"url\":\"http://a/1\"}],"
                                  "\"default\":[{\"type\":\"log\"}]}",
                                  err, sizeof err);
    ck_assert_msg(before != NULL, "%s", err);
    route_table_t *after = table("{\"ops\":[{\"type\":\"webhook\",\"url\":\"http://b/0\"},"
                                 "{\"type\":\"webhook\",\"url\":\"http://a/1\"}],"
                                 "\"default\":[{\"type\":\"log\"}]}",
                                 err, sizeof err);
    ck_assert_msg(after != NULL, "%s", err);
    size_t n;
    const sink_t *const *old_sinks = route_sinks(before, "ops", &n);
    const char *old_name = old_sinks[0]->name;
    const sink_t *found = route_find_sink(after, old_name);
    ck_assert_ptr_nonnull(found);
    ck_assert_str_eq(found->url, "http://a/1");
    ck_assert_msg(strncmp(old_name, "webhook-", 8) == 0 && strlen(old_name) == 20, "%s", old_name);
    ck_assert_ptr_null(strstr(old_name, "http"));
    /* rows queued by an older Steward name the sink by position */
    found = route_find_sink(before, "ops.webhook.0");
    ck_assert_ptr_nonnull(found);
    ck_assert_str_eq(found->url, "http://a/1");
    ck_assert_ptr_null(route_find_sink(before, "ops.webhook.1"));
    route_table_free(before);
    route_table_free(after);

    /* the same sink for two teams is one sink */
    route_table_t *shared =
        table("{\"a\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"http://x\"}],"
              "\"b\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"http://x\"}],"
              "\"default\":[{\"type\":\"log\"},{\"type\":\"webhook\",\"url\":\"http://x\"}]}",
              err, sizeof err);
    ck_assert_msg(shared != NULL, "%s", err);
    ck_assert_uint_eq(route_sink_count(shared), 3);
    route_table_free(shared);

    /* one name for two different sinks, a sink twice in a route, a bad name */
    ck_assert_ptr_null(
        table("{\"a\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"http://x\"}],"
              "\"default\":[{\"type\":\"webhook\",\"name\":\"hook\",\"url\":\"http://y\"}]}",
              err, sizeof err));
    ck_assert_msg(strstr(err, "'hook' names another sink too") != NULL, "%s", err);
    ck_assert_ptr_null(
        table("{\"default\":[{\"type\":\"log\"},{\"type\":\"log\"}]}", err, sizeof err));
    ck_assert_msg(strstr(err, "listed twice") != NULL, "%s", err);
    ck_assert_ptr_null(
        table("{\"default\":[{\"type\":\"log\",\"name\":\"a b\"}]}", err, sizeof err));
    ck_assert_msg(strstr(err, "routes.default[0].name") != NULL, "%s", err);
}
END_TEST

Suite *pages_suite(void)
{
    Suite *s = suite_create("pages");
    TCase *tc = tcase_create("pages");
    tcase_add_test(tc, sha256_test_vectors);
    tcase_add_test(tc, dedup_keys_hash_the_whole_identity);
    tcase_add_test(tc, utf8_cuts_between_characters);
    tcase_add_test(tc, durations_are_rounded_for_people);
    tcase_add_test(tc, retry_after_is_honoured_up_to_a_cap);
    tcase_add_test(tc, sink_names_do_not_depend_on_position);
    suite_add_tcase(s, tc);
    return s;
}
