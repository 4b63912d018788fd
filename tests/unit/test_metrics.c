/*
 * test_metrics - the undeclared-type table: counted per (topic, type),
 * bounded, and each pair reported for logging once per interval.
 */
#include "manager/metrics.h"
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

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, undeclared_types_counted_and_logged_once_per_interval);
    suite_add_tcase(s, tc);
    return s;
}
