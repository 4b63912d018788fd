/*
 * test_demo - the demo's own check, as a test: steward demo runs the
 * simulator's six-service traffic with stalls through steward and compares
 * every alert with the ground truth, on the embedded mock cluster and on
 * the real broker; and in active mode, where the simulator's services
 * answer steward's commands with faults and the check compares steward's
 * record (instances, pages, the command outbox, stale replies) with the
 * simulator's ground truth.
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

/*
 * 48 orders: every 4th has a fault, and the 12 faulty ones cover the whole
 * rotation of the active demo definition once (a dropped first command on
 * each retried step, a silent service on each commanded step, the zombie
 * picker), so the run shows a retry winning, on_timeout into compensation,
 * pages where nothing is left to try, and one stale reply.
 */
static void run_active_demo(const char *brokers)
{
    const char *url = tl_db_create(brokers != NULL ? "demo_active_broker" : "demo_active_mock");
    const char *argv[] = {NULL,    "demo",     "--active", "--database",
                          url,     "--orders", "48",       "--rate",
                          "24",    "--seed",   "11",       brokers != NULL ? "--brokers" : NULL,
                          brokers, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "steward demo --active exited %d\nstdout:\n%s\nstderr:\n%s",
                  o.status, o.out, o.err);
    ck_assert_msg(tl_contains(o.out, "every order ended where its faults lead or paged the step "
                                     "that never answered"),
                  "stdout:\n%s", o.out);
    ck_assert_msg(tl_contains(o.out, "ground truth (active): 48 orders") &&
                      tl_contains(o.out, "0 ended elsewhere, 0 pages missed, 0 paged needlessly") &&
                      tl_contains(o.out, " 0 under two ids, 0 not under the derived id") &&
                      tl_contains(o.out, "0 not recorded as stale"),
                  "stdout:\n%s", o.out);
    /* The faults were reached: the check proved something. */
    ck_assert_msg(!tl_contains(o.out, " 0 paged at the step") &&
                      !tl_contains(o.out, "stale replies: 0 sent") &&
                      tl_contains(o.out, "1 zombie pickers"),
                  "a fault never fired:\n%s", o.out);
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

START_TEST(active_demo_on_the_mock_cluster_matches_its_ground_truth)
{
    run_active_demo(NULL);
}
END_TEST

START_TEST(active_demo_on_the_real_broker_matches_its_ground_truth)
{
    run_active_demo(tl_kafka_brokers());
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
    /* Active mode in a case of its own: CK_RUN_CASE=demo or =active picks one. */
    TCase *active = tcase_create("active");
    tcase_set_timeout(active, 300);
    tcase_add_test(active, active_demo_on_the_mock_cluster_matches_its_ground_truth);
    tcase_add_test(active, active_demo_on_the_real_broker_matches_its_ground_truth);
    suite_add_tcase(s, active);
    return s;
}
