/*
 * test_duration - parsing and formatting "1h30m" durations.
 */
#include "definitions/duration.h"

#include <check.h>
#include <stdint.h>
#include <string.h>

/* Parses text, which must be valid, and returns the milliseconds. */
static int64_t parse_ok(const char *text)
{
    char err[256] = "";
    int64_t ms = -42;
    ck_assert_msg(duration_parse(text, &ms, err, sizeof err), "'%s' rejected: %s", text, err);
    return ms;
}

/* Parses text, which must be invalid, and checks the reason mentions `words`. */
static void parse_fails(const char *text, const char *words)
{
    char err[256] = "";
    int64_t ms = -42;
    ck_assert_msg(!duration_parse(text, &ms, err, sizeof err), "'%s' accepted", text);
    ck_assert_msg(strstr(err, words) != NULL, "'%s': reason \"%s\" lacks \"%s\"", text, err, words);
    ck_assert_msg(ms == -42, "'%s': output written on failure", text);
}

START_TEST(test_single_units)
{
    ck_assert_int_eq(parse_ok("500ms"), 500);
    ck_assert_int_eq(parse_ok("30s"), 30000);
    ck_assert_int_eq(parse_ok("15m"), 15 * 60000);
    ck_assert_int_eq(parse_ok("2h"), 2 * 3600000);
    ck_assert_int_eq(parse_ok("7d"), 7 * 86400000LL);
    ck_assert_int_eq(parse_ok("0s"), 0);
    ck_assert_int_eq(parse_ok("90m"), 90 * 60000); /* no carrying rule: 90m is fine */
}
END_TEST

START_TEST(test_combinations)
{
    ck_assert_int_eq(parse_ok("1h30m"), 90 * 60000);
    ck_assert_int_eq(parse_ok("2d12h"), 60 * 3600000LL);
    ck_assert_int_eq(parse_ok("1m30s"), 90000);
    ck_assert_int_eq(parse_ok("1s500ms"), 1500);
    ck_assert_int_eq(parse_ok("1d5m"), 86400000LL + 5 * 60000); /* units may be skipped */
    ck_assert_int_eq(parse_ok("1d2h3m4s5ms"), 86400000LL + 2 * 3600000 + 3 * 60000 + 4000 + 5);
}
END_TEST

START_TEST(test_errors)
{
    char err[256];
    int64_t ms;
    ck_assert(!duration_parse(NULL, &ms, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "empty"));

    parse_fails("", "empty");
    parse_fails("15", "no unit");
    parse_fails("1h30", "no unit");
    parse_fails("15x", "unknown unit 'x'");
    parse_fails("15min", "unknown unit 'min'");
    parse_fails("2H", "unknown unit 'H'"); /* units are lowercase */
    parse_fails("30m1h", "unit 'h' comes after 'm'");
    parse_fails("1s1m", "largest to the smallest");
    parse_fails("1h1h", "unit 'h' appears twice");
    parse_fails("m", "expected a number");
    parse_fails("-5m", "expected a number");
    parse_fails(" 5m", "expected a number");
    parse_fails("5m ", "expected a number at ' '");
    parse_fails("1.5h", "fractions are not allowed");
    parse_fails("1,5h", "'1h30m'");
    parse_fails("99999999999999999999ms", "too large");
    parse_fails("106751991168d", "too long"); /* over INT64_MAX milliseconds */
    parse_fails("106751991167d8h", "too long");
}
END_TEST

START_TEST(test_largest)
{
    /* INT64_MAX ms is 106751991167d7h12m55s807ms. */
    ck_assert(parse_ok("106751991167d7h12m55s807ms") == INT64_MAX);
    parse_fails("106751991167d7h12m55s808ms", "too long");
}
END_TEST

START_TEST(test_format)
{
    char buf[32];
    ck_assert_str_eq(duration_format(0, buf, sizeof buf), "0s");
    ck_assert_str_eq(duration_format(250, buf, sizeof buf), "250ms");
    ck_assert_str_eq(duration_format(1000, buf, sizeof buf), "1s");
    ck_assert_str_eq(duration_format(90000, buf, sizeof buf), "1m30s");
    ck_assert_str_eq(duration_format(15 * 60000, buf, sizeof buf), "15m");
    ck_assert_str_eq(duration_format(2 * 86400000LL + 3 * 3600000, buf, sizeof buf), "2d3h");
    ck_assert_str_eq(duration_format(86400000LL + 5 * 60000, buf, sizeof buf), "1d5m");
    /* At most two units: the rest is dropped, not rounded. */
    ck_assert_str_eq(duration_format(86400000LL + 3600000 + 60000 + 1, buf, sizeof buf), "1d1h");
    ck_assert_str_eq(duration_format(-1500, buf, sizeof buf), "-1s500ms");
    ck_assert_str_eq(duration_format(INT64_MIN, buf, sizeof buf), "-106751991167d7h");
}
END_TEST

START_TEST(test_format_truncates)
{
    char small[4];
    memset(small, 'x', sizeof small);
    duration_format(90000, small, sizeof small); /* "1m30s" does not fit */
    ck_assert_int_lt(strlen(small), sizeof small);
    ck_assert_str_eq(small, "1m3"); /* snprintf-style: cut, terminated */
}
END_TEST

START_TEST(test_round_trip)
{
    /* Canonical texts come back unchanged through parse and format. */
    static const char *const texts[] = {"500ms", "30s",   "15m",     "2h",   "7d", "1h30m",
                                        "2d12h", "1m30s", "1s500ms", "1d5m", "0s"};
    char buf[32];
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        ck_assert_str_eq(duration_format(parse_ok(texts[i]), buf, sizeof buf), texts[i]);

    /* Any value of at most two units survives format then parse. */
    static const int64_t values[] = {1, 999, 61000, 3600001 - 1, 86400000LL * 365, 7200500};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        ck_assert(parse_ok(duration_format(values[i], buf, sizeof buf)) == values[i]);
}
END_TEST

Suite *duration_suite(void);
Suite *duration_suite(void)
{
    Suite *s = suite_create("duration");
    TCase *tc = tcase_create("duration");
    tcase_add_test(tc, test_single_units);
    tcase_add_test(tc, test_combinations);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_largest);
    tcase_add_test(tc, test_format);
    tcase_add_test(tc, test_format_truncates);
    tcase_add_test(tc, test_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
