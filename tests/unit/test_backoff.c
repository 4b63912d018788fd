/*
 * test_backoff - the one exponential backoff (common/backoff.h) at its
 * edges: the first attempts, attempts below one, the cap, and attempts and
 * bases large enough to overflow a naive doubling (the sanitizers would
 * catch one). The three callers keep their figures.
 */
#include "common/backoff.h"
#include "manager/commands/dispatcher.h"
#include "manager/alerting/notifier.h"
#include "testlib.h"

#include <check.h>
#include <limits.h>
#include <stdint.h>

START_TEST(doubles_from_the_base)
{
    ck_assert_int_eq(backoff_doubling_ms(1, 1000, 300000), 1000);
    ck_assert_int_eq(backoff_doubling_ms(2, 1000, 300000), 2000);
    ck_assert_int_eq(backoff_doubling_ms(3, 1000, 300000), 4000);
    ck_assert_int_eq(backoff_doubling_ms(9, 1000, 300000), 256000);
    ck_assert_int_eq(backoff_doubling_ms(10, 1000, 300000), 300000);
    ck_assert_int_eq(backoff_doubling_ms(3, 7, 1000), 28);
}
END_TEST

START_TEST(attempts_below_one_are_the_first)
{
    ck_assert_int_eq(backoff_doubling_ms(0, 1000, 300000), 1000);
    ck_assert_int_eq(backoff_doubling_ms(-1, 1000, 300000), 1000);
    ck_assert_int_eq(backoff_doubling_ms(INT_MIN, 1000, 300000), 1000);
}
END_TEST

START_TEST(the_cap_holds)
{
    ck_assert_int_eq(backoff_doubling_ms(1, 1000, 400), 400); /* a cap below the base */
    ck_assert_int_eq(backoff_doubling_ms(2, 3, 5), 5);        /* an odd cap: 6 capped */
    ck_assert_int_eq(backoff_doubling_ms(2, 2, 5), 4);
    ck_assert_int_eq(backoff_doubling_ms(3, 1000, 4000), 4000); /* exactly the cap */
    for (int a = 1; a < 200; a++)
        ck_assert_int_le(backoff_doubling_ms(a, 1000, 300000), 300000);
}
END_TEST

START_TEST(no_overflow_for_any_attempt)
{
    ck_assert_int_eq(backoff_doubling_ms(INT_MAX, 1000, 300000), 300000);
    ck_assert_int_eq(backoff_doubling_ms(1000000, 1000, 300000), 300000);
    /* The cap at int64_t's top: the doubling saturates rather than wraps. */
    ck_assert_int_eq(backoff_doubling_ms(INT_MAX, 1000, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(backoff_doubling_ms(63, 1, INT64_MAX), INT64_C(1) << 62);
    ck_assert_int_eq(backoff_doubling_ms(64, 1, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(backoff_doubling_ms(2, INT64_MAX, INT64_MAX), INT64_MAX);
    ck_assert_int_eq(backoff_doubling_ms(2, INT64_MAX / 2 + 1, INT64_MAX), INT64_MAX);
    for (int a = 1; a < 100; a++)
        ck_assert_int_gt(backoff_doubling_ms(a, 1, INT64_MAX), 0);
}
END_TEST

START_TEST(never_negative)
{
    ck_assert_int_eq(backoff_doubling_ms(1, 0, 300000), 0);
    ck_assert_int_eq(backoff_doubling_ms(5, -1000, 300000), 0);
    ck_assert_int_eq(backoff_doubling_ms(5, 1000, 0), 0);
    ck_assert_int_eq(backoff_doubling_ms(5, 1000, -1), 0);
    ck_assert_int_eq(backoff_doubling_ms(5, INT64_MIN, INT64_MIN), 0);
}
END_TEST

/* The dispatcher's and the notifier's figures: 1 s doubling to their cap
 * (the notifier then takes between half and all of it). */
START_TEST(callers_keep_their_figures)
{
    for (int a = -2; a < 70; a++) {
        ck_assert_int_eq(dispatcher_backoff_ms(a, 300000), backoff_doubling_ms(a, 1000, 300000));
        unsigned int seed = (unsigned int) (a + 100);
        int64_t step = backoff_doubling_ms(a, 1000, 60000);
        int64_t n = notifier_backoff_ms(a, 60000, &seed);
        ck_assert(n >= step / 2 && n <= step);
    }
}
END_TEST

Suite *backoff_suite(void)
{
    Suite *s = suite_create("backoff");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, doubles_from_the_base);
    tcase_add_test(tc, attempts_below_one_are_the_first);
    tcase_add_test(tc, the_cap_holds);
    tcase_add_test(tc, no_overflow_for_any_attempt);
    tcase_add_test(tc, never_negative);
    tcase_add_test(tc, callers_keep_their_figures);
    suite_add_tcase(s, tc);
    return s;
}
