/*
 * test_metrics - the undeclared-type table: counted per (topic, type),
 * bounded, and each pair reported for logging once per interval.
 */
#include "common/clock.h"
#include "manager/runtime/metrics.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long count_of(const char *topic, const char *type)
{
    metrics_unknown_t *all = NULL;
    size_t n = metrics_unknown_types(&all);
    long long count = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(all[i].topic, topic) == 0 && strcmp(all[i].type, type) == 0)
            count = all[i].count;
    }
    free(all);
    return count;
}

START_TEST(undeclared_types_counted_and_logged_once_per_interval)
{
    /* First sight: report it; again within the interval: count only. */
    ck_assert(metrics_count_unknown("orders", "OrderCancelled", 1000, 60000));
    ck_assert(!metrics_count_unknown("orders", "OrderCancelled", 2000, 60000));
    ck_assert(metrics_count_unknown("orders", "OrderRefunded", 2000, 60000));
    ck_assert(metrics_count_unknown("orders", NULL, 2000, 60000));
    ck_assert(metrics_count_unknown("orders", "OrderCancelled", 61000, 60000));
    ck_assert_int_eq(count_of("orders", "OrderCancelled"), 3);
    ck_assert_int_eq(count_of("orders", "(none)"), 1);

    /* A producer inventing types fills the table once, then "other". */
    char type[32];
    for (int i = 0; i < METRICS_MAX_UNKNOWN + 50; i++) {
        snprintf(type, sizeof type, "Invented%d", i);
        metrics_count_unknown("noise", type, 3000, 60000);
    }
    metrics_unknown_t *all = NULL;
    size_t n = metrics_unknown_types(&all);
    free(all);
    ck_assert_uint_eq(n, METRICS_MAX_UNKNOWN + 1);
    ck_assert_int_eq(count_of("other", "other"), 53);
    ck_assert_int_eq(count_of("orders", "OrderCancelled"), 3);
}
END_TEST

/* Stays fall in the bucket whose bound is the first not below them; the
 * table comes back sorted by process, then state. */
START_TEST(step_durations_by_process_and_state)
{
    metrics_observe_step("zeta", "waiting", 50);                 /* <= 0.1 s */
    metrics_observe_step("alpha", "paying", 100);                /* <= 0.1 s, on the bound */
    metrics_observe_step("alpha", "paying", 100001);             /* <= 300 s */
    metrics_observe_step("alpha", "paying", 9 * 86400 * 1000LL); /* above a week */
    metrics_step_t *steps;
    size_t n = metrics_steps(&steps);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(steps[0].process, "alpha");
    ck_assert_str_eq(steps[0].state, "paying");
    ck_assert_int_eq(steps[0].counts[0], 1);
    ck_assert_int_eq(steps[0].counts[7], 1); /* 300 s */
    ck_assert_double_eq(metrics_step_bounds_s[7], 300);
    ck_assert_int_eq(steps[0].counts[METRICS_STEP_BUCKETS], 1);
    ck_assert_int_eq(steps[0].sum_ms, 100 + 100001 + 9 * 86400 * 1000LL);
    ck_assert_str_eq(steps[1].process, "zeta");
    ck_assert_int_eq(steps[1].counts[0], 1);
    free(steps);
}
END_TEST

/* The liveness rule /healthz and the systemd watchdog share: a thread
 * that beat and then went quiet for longer than the bound is stuck; one
 * that stopped on purpose, or never started, is not. */
START_TEST(stalled_threads)
{
    for (int t = 0; t < METRICS_N_THREADS; t++)
        metrics_beat_stop((metrics_thread_t) t);
    int64_t now = clock_monotonic_ms();
    ck_assert_int_eq(metrics_stalled(now + 60000, 5000, NULL), -1);
    metrics_beat(METRICS_NOTIFIER);
    int64_t for_ms = 0;
    ck_assert_int_eq(metrics_stalled(clock_monotonic_ms() + 1000, 5000, NULL), -1);
    ck_assert_int_eq(metrics_stalled(clock_monotonic_ms() + 10000, 5000, &for_ms),
                     METRICS_NOTIFIER);
    ck_assert_int_ge(for_ms, 10000);
    metrics_beat_stop(METRICS_NOTIFIER);
    ck_assert_int_eq(metrics_stalled(clock_monotonic_ms() + 10000, 5000, NULL), -1);
}
END_TEST

START_TEST(proc_files_parsed)
{
    double v = 0;
    /* a command name with a space and a parenthesis */
    ck_assert(metrics_parse_proc_stat("4242 (stew ard)) S 1 4242 4242 0 -1 4194560 900 0 0 0 "
                                      "250 130 0 0 20 0 6 0 1234 1000000 500",
                                      100, &v));
    ck_assert_double_eq_tol(v, 3.8, 1e-9);
    ck_assert(!metrics_parse_proc_stat("garbage", 100, &v));
    ck_assert(metrics_parse_statm("10000 2500 300 20 0 900 0\n", 4096, &v));
    ck_assert_double_eq(v, 2500.0 * 4096);
    ck_assert(!metrics_parse_statm("", 4096, &v));
}
END_TEST

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, undeclared_types_counted_and_logged_once_per_interval);
    tcase_add_test(tc, step_durations_by_process_and_state);
    tcase_add_test(tc, proc_files_parsed);
    tcase_add_test(tc, stalled_threads);
    suite_add_tcase(s, tc);
    return s;
}
