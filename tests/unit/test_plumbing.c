/*
 * test_plumbing - the pure rules of the daemon's plumbing: the notifier's
 * verdicts and backoff, the HTTP server's percent-decoding and listen
 * parsing, the log's JSON escaping, and rewriting a connection string for
 * another database. None needs a socket, a sink or a database.
 */
#include "common/db.h"
#include "common/log.h"
#include "common/namelist.h"
#include "manager/api/http.h"
#include "manager/alerting/notifier.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

START_TEST(http_statuses_come_to_a_verdict)
{
    ck_assert_int_eq(notifier_verdict(200), NOTIFIER_DELIVERED);
    ck_assert_int_eq(notifier_verdict(202), NOTIFIER_DELIVERED);
    ck_assert_int_eq(notifier_verdict(299), NOTIFIER_DELIVERED);
    ck_assert_int_eq(notifier_verdict(0), NOTIFIER_RETRY); /* no response */
    ck_assert_int_eq(notifier_verdict(408), NOTIFIER_RETRY);
    ck_assert_int_eq(notifier_verdict(429), NOTIFIER_RETRY);
    ck_assert_int_eq(notifier_verdict(500), NOTIFIER_RETRY);
    ck_assert_int_eq(notifier_verdict(503), NOTIFIER_RETRY);
    ck_assert_int_eq(notifier_verdict(301), NOTIFIER_FAILED);
    ck_assert_int_eq(notifier_verdict(400), NOTIFIER_FAILED);
    ck_assert_int_eq(notifier_verdict(404), NOTIFIER_FAILED);
}
END_TEST

START_TEST(backoff_doubles_with_jitter_up_to_the_cap)
{
    unsigned int seed = 7;
    for (int round = 0; round < 200; round++) {
        int64_t first = notifier_backoff_ms(1, 60000, &seed);
        ck_assert(first >= 500 && first <= 1000);
        int64_t third = notifier_backoff_ms(3, 60000, &seed);
        ck_assert(third >= 2000 && third <= 4000);
        int64_t late = notifier_backoff_ms(30, 60000, &seed);
        ck_assert(late >= 30000 && late <= 60000);
        int64_t huge = notifier_backoff_ms(1000000, 60000, &seed); /* no overflow */
        ck_assert(huge >= 30000 && huge <= 60000);
    }
    /* A cap below the first step caps it. */
    int64_t capped = notifier_backoff_ms(1, 400, &seed);
    ck_assert(capped >= 200 && capped <= 400);
}
END_TEST

START_TEST(percent_decoding)
{
    char a[] = "order%2F1%20x";
    ck_assert_ptr_null(http_percent_decode(a));
    ck_assert_str_eq(a, "order/1 x");
    char utf8[] = "caf%C3%A9";
    ck_assert_ptr_null(http_percent_decode(utf8));
    ck_assert_str_eq(utf8, "caf\xc3\xa9");
    char plain[] = "plain";
    ck_assert_ptr_null(http_percent_decode(plain));
    ck_assert_str_eq(plain, "plain");

    char short1[] = "a%2", short2[] = "a%", bad_hex[] = "%zz", nul[] = "a%00b";
    ck_assert_ptr_nonnull(http_percent_decode(short1));
    ck_assert_ptr_nonnull(http_percent_decode(short2));
    ck_assert_ptr_nonnull(http_percent_decode(bad_hex));
    ck_assert_str_eq(http_percent_decode(nul), "a NUL byte (%00)");
    char latin1[] = "caf%E9", overlong[] = "%C0%AF", surrogate[] = "%ED%A0%80";
    ck_assert_str_eq(http_percent_decode(latin1), "not valid UTF-8");
    ck_assert_str_eq(http_percent_decode(overlong), "not valid UTF-8");
    ck_assert_str_eq(http_percent_decode(surrogate), "not valid UTF-8");
}
END_TEST

START_TEST(listen_addresses)
{
    char host[64], port[8], errstr[256];
    ck_assert_int_eq(http_parse_listen("127.0.0.1:9464", host, sizeof host, port, sizeof port,
                                       errstr, sizeof errstr),
                     ERR_OK);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_str_eq(port, "9464");
    ck_assert_int_eq(
        http_parse_listen(":0", host, sizeof host, port, sizeof port, errstr, sizeof errstr),
        ERR_OK);
    ck_assert_str_eq(host, "");
    ck_assert_str_eq(port, "0");
    ck_assert_int_eq(
        http_parse_listen("[::1]:80", host, sizeof host, port, sizeof port, errstr, sizeof errstr),
        ERR_OK);
    ck_assert_str_eq(host, "::1");
    ck_assert_str_eq(port, "80");

    const char *bad[] = {"9464",  "::1:80",   "[::1]80",    "host:65536",
                         "host:", "host:12a", "host:123456"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errstr[0] = '\0';
        ck_assert_msg(http_parse_listen(bad[i], host, sizeof host, port, sizeof port, errstr,
                                        sizeof errstr) == ERR_INVALID,
                      "%s accepted", bad[i]);
        ck_assert_msg(strstr(errstr, bad[i]) != NULL, "%s: %s", bad[i], errstr);
    }
    char long_host[200];
    memset(long_host, 'h', 100);
    strcpy(long_host + 100, ":80");
    ck_assert_int_eq(
        http_parse_listen(long_host, host, sizeof host, port, sizeof port, errstr, sizeof errstr),
        ERR_INVALID);
}
END_TEST

START_TEST(log_strings_are_json_escaped)
{
    char buf[128];
    size_t n = log_escape(buf, 0, sizeof buf,
                          "a\"b\\c\nd\te\x01\x1f"
                          "f");
    buf[n] = '\0';
    ck_assert_str_eq(buf, "a\\\"b\\\\c\\nd\\te\\u0001\\u001ff");
    /* UTF-8 passes through. */
    n = log_escape(buf, 0, sizeof buf, "caf\xc3\xa9");
    buf[n] = '\0';
    ck_assert_str_eq(buf, "caf\xc3\xa9");
    /* Appends at pos; a small buffer stops early, never past cap. */
    memcpy(buf, "xy", 2);
    n = log_escape(buf, 2, 12, "0123456789");
    ck_assert_uint_le(n, 12 - 7);
    buf[n] = '\0';
    ck_assert_str_eq(buf, "xy012");
}
END_TEST

START_TEST(connection_strings_for_another_database)
{
    char *s = db_with_dbname("host=127.0.0.1 port=5432 user=u dbname=live", "scratch_1");
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(strstr(s, "scratch_1"));
    ck_assert_ptr_null(strstr(s, "live"));
    ck_assert_ptr_nonnull(strstr(s, "127.0.0.1"));
    ck_assert_ptr_nonnull(strstr(s, "5432"));
    free(s);
    s = db_with_dbname("postgresql://u@db.example:6543/live?sslmode=disable", "x");
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_null(strstr(s, "live"));
    ck_assert_ptr_nonnull(strstr(s, "db.example"));
    ck_assert_ptr_nonnull(strstr(s, "6543"));
    ck_assert_ptr_nonnull(strstr(s, "disable"));
    free(s);
    ck_assert_ptr_null(db_with_dbname("host='unterminated", "x"));

    char shown[256];
    db_redact("host=h password=s3cret dbname=d", shown, sizeof shown);
    ck_assert_ptr_null(strstr(shown, "s3cret"));
    ck_assert_ptr_nonnull(strstr(shown, "dbname"));
}
END_TEST

/* Collects the names namelist_each() calls with, as "a|b|". */
static void collect_name(const char *name, void *arg)
{
    strcat(arg, name);
    strcat(arg, "|");
}

START_TEST(name_lists_are_trimmed_deduplicated_and_star_is_all)
{
    char seen[128] = "";
    ck_assert(!namelist_each(" a ,\tb,,c\t", collect_name, seen));
    ck_assert_str_eq(seen, "a|b|c|");
    seen[0] = '\0';
    ck_assert(namelist_each("a, * ,b", collect_name, seen));
    ck_assert_str_eq(seen, "a|b|");
    ck_assert(!namelist_each(NULL, NULL, NULL));
    ck_assert(!namelist_each(" , ,", NULL, NULL));

    char *n = namelist_normalize("a, b,a ,ab,b");
    ck_assert_str_eq(n, "a,b,ab");
    free(n);
    n = namelist_normalize("a, *");
    ck_assert_str_eq(n, "*");
    free(n);
    n = namelist_normalize(" , ");
    ck_assert_str_eq(n, "");
    free(n);
}
END_TEST

Suite *plumbing_suite(void)
{
    Suite *s = suite_create("plumbing");
    TCase *tc = tcase_create("plumbing");
    tcase_add_test(tc, http_statuses_come_to_a_verdict);
    tcase_add_test(tc, backoff_doubles_with_jitter_up_to_the_cap);
    tcase_add_test(tc, percent_decoding);
    tcase_add_test(tc, listen_addresses);
    tcase_add_test(tc, log_strings_are_json_escaped);
    tcase_add_test(tc, connection_strings_for_another_database);
    tcase_add_test(tc, name_lists_are_trimmed_deduplicated_and_star_is_all);
    suite_add_tcase(s, tc);
    return s;
}
