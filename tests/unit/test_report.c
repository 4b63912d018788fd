/*
 * test_report - the pure arithmetic of `steward report`: the ladder of nice
 * durations, the suggestion policy, the period and per-day rates, and how
 * rates print.
 */
#include "shadow/report.h"
#include "testlib.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S 1000LL
#define M (60 * S)
#define H (60 * M)
#define D (24 * H)

START_TEST(ladder_is_ascending_and_nice)
{
    const int64_t *steps;
    size_t n = report_ladder(&steps);
    ck_assert_uint_gt(n, 20);
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(steps[i] > steps[i - 1], "step %zu not ascending", i);
    ck_assert_int_eq(steps[0], 1);
    ck_assert_int_eq(steps[n - 1], 365 * D);

    /* every step of the brief is there */
    const int64_t wanted[] = {1 * S, 2 * S,  5 * S,  10 * S, 15 * S, 30 * S, 1 * M, 2 * M,
                              5 * M, 10 * M, 15 * M, 30 * M, 1 * H,  2 * H,  1 * D, 7 * D};
    for (size_t w = 0; w < sizeof wanted / sizeof wanted[0]; w++) {
        long i = report_ladder_index(wanted[w]);
        ck_assert_msg(i >= 0 && steps[i] == wanted[w], "%lld is not a step", (long long) wanted[w]);
    }
}
END_TEST

START_TEST(ladder_rounds_up)
{
    const int64_t *steps;
    report_ladder(&steps);
    ck_assert_int_eq(steps[report_ladder_index(0)], 1);
    ck_assert_int_eq(steps[report_ladder_index(148500)], 5 * M);
    ck_assert_int_eq(steps[report_ladder_index(2 * M)], 2 * M); /* exact stays */
    ck_assert_int_eq(steps[report_ladder_index(2 * M + 1)], 5 * M);
    ck_assert_int_eq(steps[report_ladder_index(16 * M)], 30 * M);
    ck_assert_int_eq(steps[report_ladder_index(13 * H)], 1 * D);
    ck_assert_int_eq(report_ladder_index(365 * D + 1), -1);
}
END_TEST

START_TEST(suggestion_policy)
{
    report_suggestion_t few = report_suggest(19, 99 * S, 100 * S);
    ck_assert(!few.enough);
    ck_assert_int_eq(few.deadline_ms, -1);

    /* 20..999 samples: p99 times 1.5, rounded up */
    report_suggestion_t p99 = report_suggest(20, 99 * S, 100 * S);
    ck_assert(p99.enough);
    ck_assert_str_eq(p99.basis, "p99");
    ck_assert_int_eq(p99.basis_ms, 99 * S);
    ck_assert_int_eq(p99.target_ms, 148500);
    ck_assert_int_eq(p99.deadline_ms, 5 * M);

    report_suggestion_t ten = report_suggest(999, 10 * M, 20 * M);
    ck_assert_str_eq(ten.basis, "p99");
    ck_assert_int_eq(ten.deadline_ms, 15 * M); /* 15m exactly is a step */

    /* from 1000 samples: p99.9 */
    report_suggestion_t tail = report_suggest(1000, 10 * M, 20 * M);
    ck_assert_str_eq(tail.basis, "p99.9");
    ck_assert_int_eq(tail.target_ms, 30 * M);
    ck_assert_int_eq(tail.deadline_ms, 30 * M);

    /* an odd margin product rounds up: 1ms * 1.5 = 2ms */
    ck_assert_int_eq(report_suggest(50, 1, 1).target_ms, 2);
    ck_assert_int_eq(report_suggest(50, 0, 0).deadline_ms, 1);

    report_suggestion_t beyond = report_suggest(50, 300 * D, 300 * D);
    ck_assert(beyond.enough);
    ck_assert_int_eq(beyond.step, -1);
    ck_assert_int_eq(beyond.deadline_ms, -1);
}
END_TEST

START_TEST(period_and_rates)
{
    /* n evenly spaced starts cover n gaps */
    ck_assert(fabs(report_period_ms(101, 0, 100 * 864000) - 101 * 864000.0) < 1e-6);
    ck_assert(fabs(report_per_day(101, report_period_ms(101, 0, 100 * 864000)) - 100) < 1e-9);
    ck_assert(fabs(report_per_day(5, report_period_ms(5, 0, 4 * H)) - 24) < 1e-9);
    /* unknown: fewer than two starts, or all at once */
    ck_assert(report_period_ms(1, 0, 0) == 0);
    ck_assert(report_period_ms(0, 0, 0) == 0);
    ck_assert(report_period_ms(7, 1000, 1000) == 0);
    ck_assert(report_per_day(10, 0) < 0);
}
END_TEST

START_TEST(rates_print)
{
    char buf[32];
    ck_assert_str_eq(report_format_rate(-1, buf, sizeof buf), "-");
    ck_assert_str_eq(report_format_rate(0, buf, sizeof buf), "0.00");
    ck_assert_str_eq(report_format_rate(0.990099, buf, sizeof buf), "0.99");
    ck_assert_str_eq(report_format_rate(9.90099, buf, sizeof buf), "9.90");
    ck_assert_str_eq(report_format_rate(10.891089, buf, sizeof buf), "10.9");
    ck_assert_str_eq(report_format_rate(100, buf, sizeof buf), "100");
    ck_assert_str_eq(report_format_rate(999.6, buf, sizeof buf), "1,000");
    ck_assert_str_eq(report_format_rate(10000, buf, sizeof buf), "10,000");
    ck_assert_str_eq(report_format_rate(1234567.4, buf, sizeof buf), "1,234,567");
}
END_TEST

START_TEST(states_in_flow_order)
{
    /* Written out of order, as jsonb would hand them back. */
    static const char text[] =
        "{\"process\": \"p\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"o\","
        " \"key\": \"/k\","
        " \"events\": {\"E1\": {\"topic\": \"t\"}, \"E2\": {\"topic\": \"t\"},"
        "   \"E3\": {\"topic\": \"t\"}},"
        " \"start\": {\"on\": \"E1\", \"to\": \"first\"},"
        " \"states\": {\"done\": {\"terminal\": \"success\"},"
        "   \"third\": {\"deadline\": \"1m\", \"on\": {\"E3\": \"done\"}},"
        "   \"failed\": {\"terminal\": \"failed\"},"
        "   \"second\": {\"deadline\": \"1m\", \"on\": {\"E2\": \"third\", \"E3\": "
        "\"failed\"}},"
        "   \"first\": {\"deadline\": \"1m\", \"on\": {\"E2\": \"second\"}}}}";
    def_problems_t problems = {0};
    def_t *def = def_load_json(text, strlen(text), "test", &problems);
    ck_assert_msg(def != NULL, "%s", problems.n ? problems.items[0].message : "?");

    size_t order[5];
    report_state_order(def, order);
    const char *const want[] = {"first", "second", "third", "done", "failed"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_str_eq(def->states[order[i]].name, want[i]);
    def_free(def);
    def_problems_clear(&problems);
}
END_TEST

/* The exact shape the console draws: per-bucket counts from the first
 * non-empty ladder bucket to the last, then the +Inf entry. */
START_TEST(histogram_shape)
{
    const int64_t *steps;
    size_t n = report_ladder(&steps);
    int64_t *counts = calloc(n + 1, sizeof *counts);
    long at1s = report_ladder_index(1000), at5s = report_ladder_index(5000);
    ck_assert_int_eq(at5s - at1s, 2); /* 1s, 2s, 5s */
    counts[at1s] = 3;
    counts[at5s] = 7;
    counts[n] = 1;
    json_t *h = report_histogram(counts, n);
    char *text = json_dumps(h, JSON_COMPACT);
    ck_assert_str_eq(text, "[{\"le_ms\":1000,\"count\":3},{\"le_ms\":2000,\"count\":0},"
                           "{\"le_ms\":5000,\"count\":7},{\"le_ms\":null,\"count\":1}]");
    free(text);
    json_decref(h);

    memset(counts, 0, (n + 1) * sizeof *counts);
    h = report_histogram(counts, n);
    text = json_dumps(h, JSON_COMPACT);
    ck_assert_str_eq(text, "[{\"le_ms\":null,\"count\":0}]");
    free(text);
    json_decref(h);
    free(counts);
}
END_TEST

Suite *report_math_suite(void)
{
    Suite *s = suite_create("report_math");
    TCase *tc = tcase_create("report_math");
    tcase_add_test(tc, ladder_is_ascending_and_nice);
    tcase_add_test(tc, ladder_rounds_up);
    tcase_add_test(tc, suggestion_policy);
    tcase_add_test(tc, period_and_rates);
    tcase_add_test(tc, rates_print);
    tcase_add_test(tc, states_in_flow_order);
    tcase_add_test(tc, histogram_shape);
    suite_add_tcase(s, tc);
    return s;
}
