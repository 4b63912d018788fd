/*
 * test_demo - the demo's own check, as a test: steward demo runs the
 * simulator's six-service traffic with stalls through steward and compares
 * every alert with the ground truth, on the embedded mock cluster and on
 * the real broker.
 */
#include "testlib.h"

#include <check.h>
#include <stdlib.h>

static void run_demo(const char *brokers)
{
    const char *url = tl_db_create(brokers != NULL ? "demo_broker" : "demo_mock");
    /* Seed 7 stalls a handful of the 120 orders, at several steps. */
    const char *argv[] = {NULL,
                          "demo",
                          "--database",
                          url,
                          "--orders",
                          "120",
                          "--rate",
                          "40",
                          "--seed",
                          "7",
                          "--stall-rate",
                          "0.05",
                          brokers != NULL ? "--brokers" : NULL,
                          brokers,
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "steward demo exited %d\nstdout:\n%s\nstderr:\n%s", o.status,
                  o.out, o.err);
    ck_assert_msg(tl_contains(o.out, "0 missed; 0 alerts for orders that did not stall") &&
                      tl_contains(o.out, "every stalled order was alerted at the right step"),
                  "stdout:\n%s", o.out);
    ck_assert_msg(!tl_contains(o.out, "ground truth: 0 orders stalled"),
                  "no order stalled: the check proved nothing\n%s", o.out);
    ck_assert_msg(tl_contains(o.out, "ALERT  order_fulfilment"), "no alert printed:\n%s", o.out);
    tl_output_free(&o);
}

START_TEST(demo_on_the_mock_cluster_matches_its_ground_truth)
{
    run_demo(NULL);
}
END_TEST

START_TEST(demo_on_the_real_broker_matches_its_ground_truth)
{
    run_demo(tl_kafka_brokers());
}
END_TEST

Suite *demo_suite(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("demo");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, demo_on_the_mock_cluster_matches_its_ground_truth);
    tcase_add_test(tc, demo_on_the_real_broker_matches_its_ground_truth);
    suite_add_tcase(s, tc);
    return s;
}
