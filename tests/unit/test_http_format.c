/*
 * test_http_format - the Prometheus text that GET /metrics answers (prom.c):
 * escaping, value spelling, histograms, and names refused.
 */
#include "common/prom.h"
#include "manager/runtime/metrics.h"
#include "testlib.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The text of a finished writer, which must have succeeded. */
static char *finish(prom_t *p)
{
    char errstr[256];
    size_t len;
    char *text = prom_finish(p, &len, errstr, sizeof errstr);
    ck_assert_msg(text != NULL, "prom_finish: %s", errstr);
    ck_assert_uint_eq(len, strlen(text));
    return text;
}

START_TEST(families_and_labels_are_written_and_escaped)
{
    prom_t *p = prom_new();
    prom_family(p, "steward_events_judged_total", "counter", "Events judged\nby outcome, C:\\path");
    prom_sample_int(p, "steward_events_judged_total",
                    (const char *const[]){"outcome", "started", NULL}, 3);
    prom_sample_int(p, "steward_events_judged_total",
                    (const char *const[]){"process", "a\"b\\c\nd", "state", "", NULL},
                    9223372036854775807LL);
    prom_family(p, "steward_up", "gauge", "plain");
    prom_sample(p, "steward_up", NULL, 1);
    char *text = finish(p);
    ck_assert_str_eq(text, "# HELP steward_events_judged_total Events judged\\nby outcome, "
                           "C:\\\\path\n"
                           "# TYPE steward_events_judged_total counter\n"
                           "steward_events_judged_total{outcome=\"started\"} 3\n"
                           "steward_events_judged_total{process=\"a\\\"b\\\\c\\nd\",state=\"\"} "
                           "9223372036854775807\n"
                           "# HELP steward_up plain\n"
                           "# TYPE steward_up gauge\n"
                           "steward_up 1\n");
    free(text);
}
END_TEST

START_TEST(values_are_spelled_as_the_format_wants)
{
    char buf[64];
    ck_assert_str_eq(prom_format_value(0, buf, sizeof buf), "0");
    ck_assert_str_eq(prom_format_value(42, buf, sizeof buf), "42");
    ck_assert_str_eq(prom_format_value(-7, buf, sizeof buf), "-7");
    ck_assert_str_eq(prom_format_value(0.1, buf, sizeof buf), "0.1");
    ck_assert_str_eq(prom_format_value(0.005, buf, sizeof buf), "0.005");
    ck_assert_str_eq(prom_format_value(2.5, buf, sizeof buf), "2.5");
    ck_assert_str_eq(prom_format_value(1e20, buf, sizeof buf), "1e+20");
    ck_assert_str_eq(prom_format_value(INFINITY, buf, sizeof buf), "+Inf");
    ck_assert_str_eq(prom_format_value(-INFINITY, buf, sizeof buf), "-Inf");
    ck_assert_str_eq(prom_format_value(NAN, buf, sizeof buf), "NaN");
    /* Every double reads back as itself. */
    double third = 1.0 / 3.0;
    ck_assert(strtod(prom_format_value(third, buf, sizeof buf), NULL) == third);
    ck_assert(strtod(prom_format_value(1795989441.6565254, buf, sizeof buf), NULL) ==
              1795989441.6565254);
}
END_TEST

START_TEST(histograms_are_cumulative_and_end_at_count)
{
    const double bounds[3] = {0.005, 0.5, 10};
    const long long counts[4] = {2, 0, 3, 1}; /* per bucket; the last above 10 */
    prom_t *p = prom_new();
    prom_histogram(p, "steward_batch_duration_seconds", "Batch time.", bounds, counts, 3, 12.25);
    char *text = finish(p);
    ck_assert_str_eq(text, "# HELP steward_batch_duration_seconds Batch time.\n"
                           "# TYPE steward_batch_duration_seconds histogram\n"
                           "steward_batch_duration_seconds_bucket{le=\"0.005\"} 2\n"
                           "steward_batch_duration_seconds_bucket{le=\"0.5\"} 2\n"
                           "steward_batch_duration_seconds_bucket{le=\"10\"} 5\n"
                           "steward_batch_duration_seconds_bucket{le=\"+Inf\"} 6\n"
                           "steward_batch_duration_seconds_sum 12.25\n"
                           "steward_batch_duration_seconds_count 6\n");
    free(text);
}
END_TEST

START_TEST(batch_observations_land_in_their_bucket)
{
    /* The bound itself belongs to its bucket (le: less or equal). */
    long long before[METRICS_BATCH_BUCKETS + 1];
    for (int i = 0; i <= METRICS_BATCH_BUCKETS; i++)
        before[i] = metrics_get(&metrics.batch_buckets[i]);
    long long sum = metrics_get(&metrics.batch_ms_sum);
    metrics_observe_batch(0);
    metrics_observe_batch(metrics_batch_bounds_ms[0]);
    metrics_observe_batch(metrics_batch_bounds_ms[0] + 1);
    metrics_observe_batch(metrics_batch_bounds_ms[METRICS_BATCH_BUCKETS - 1] + 1);
    ck_assert_int_eq(metrics_get(&metrics.batch_buckets[0]) - before[0], 2);
    ck_assert_int_eq(metrics_get(&metrics.batch_buckets[1]) - before[1], 1);
    ck_assert_int_eq(metrics_get(&metrics.batch_buckets[METRICS_BATCH_BUCKETS]) -
                         before[METRICS_BATCH_BUCKETS],
                     1);
    ck_assert_int_eq(metrics_get(&metrics.batch_ms_sum) - sum,
                     2 * metrics_batch_bounds_ms[0] + 1 +
                         metrics_batch_bounds_ms[METRICS_BATCH_BUCKETS - 1] + 1);
}
END_TEST

START_TEST(partition_lags_are_a_table_updated_in_place)
{
    metrics_lag_t *lags;
    metrics_clear_partitions();
    ck_assert_uint_eq(metrics_partition_lags(&lags), 0);
    ck_assert_ptr_null(lags);
    metrics_set_partition_lag("orders", 0, 5);
    metrics_set_partition_lag("orders", 1, -3); /* a stale watermark: 0, never negative */
    metrics_set_partition_lag("orders", 0, 2);
    ck_assert_uint_eq(metrics_partition_lags(&lags), 2);
    ck_assert_str_eq(lags[0].topic, "orders");
    ck_assert_int_eq(lags[0].partition, 0);
    ck_assert_int_eq(lags[0].lag, 2);
    ck_assert_int_eq(lags[1].partition, 1);
    ck_assert_int_eq(lags[1].lag, 0);
    free(lags);
    metrics_clear_partitions();
    ck_assert_uint_eq(metrics_partition_lags(&lags), 0);
}
END_TEST

START_TEST(invalid_names_are_refused)
{
    ck_assert(prom_valid_name("steward_events_total"));
    ck_assert(prom_valid_name("a:b_c9"));
    ck_assert(!prom_valid_name("9lives"));
    ck_assert(!prom_valid_name("steward-events"));
    ck_assert(!prom_valid_name(""));
    ck_assert(prom_valid_label_name("outcome"));
    ck_assert(!prom_valid_label_name("__name__"));
    ck_assert(!prom_valid_label_name("a:b"));

    char errstr[256];
    size_t len;
    prom_t *p = prom_new();
    prom_family(p, "steward_up", "gauge", "fine");
    prom_sample_int(p, "steward_up", (const char *const[]){"bad-label", "x", NULL}, 1);
    ck_assert_ptr_null(prom_finish(p, &len, errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "bad-label") != NULL, "errstr: %s", errstr);
    ck_assert_uint_eq(len, 0);
}
END_TEST

Suite *http_format_suite(void)
{
    Suite *s = suite_create("http_format");
    TCase *tc = tcase_create("http_format");
    tcase_add_test(tc, families_and_labels_are_written_and_escaped);
    tcase_add_test(tc, values_are_spelled_as_the_format_wants);
    tcase_add_test(tc, histograms_are_cumulative_and_end_at_count);
    tcase_add_test(tc, batch_observations_land_in_their_bucket);
    tcase_add_test(tc, partition_lags_are_a_table_updated_in_place);
    tcase_add_test(tc, invalid_names_are_refused);
    suite_add_tcase(s, tc);
    return s;
}
