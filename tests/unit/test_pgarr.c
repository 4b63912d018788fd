/*
 * test_pgarr - array literals: the quoting that keeps any text a value.
 */
#include "common/pgarr.h"
#include "testlib.h"

#include <check.h>

START_TEST(quotes_and_escapes_every_element)
{
    pgarr_t arr = {0};
    ck_assert_str_eq(pgarr_text(&arr), "{}");
    pgarr_add(&arr, "plain");
    pgarr_add(&arr, "with \"quotes\", commas} and \\ backslash");
    pgarr_add(&arr, NULL);
    pgarr_add(&arr, "NULL");
    pgarr_add(&arr, "");
    ck_assert_str_eq(pgarr_text(&arr),
                     "{\"plain\",\"with \\\"quotes\\\", commas} and \\\\ backslash\",NULL,"
                     "\"NULL\",\"\"}");
    ck_assert_int_eq(arr.n, 5);
    pgarr_reset(&arr);
    ck_assert_str_eq(pgarr_text(&arr), "{}");
    pgarr_free(&arr);
}
END_TEST

START_TEST(numbers_booleans_and_hex)
{
    pgarr_t arr = {0};
    pgarr_add_int(&arr, -9223372036854775807LL - 1);
    pgarr_add_int(&arr, 42);
    pgarr_add_bool(&arr, true);
    pgarr_add_bool(&arr, false);
    pgarr_add_hex(&arr, "\x00\xff\x10", 3);
    pgarr_add_hex(&arr, NULL, 0);
    ck_assert_str_eq(pgarr_text(&arr), "{-9223372036854775808,42,t,f,\"00ff10\",NULL}");
    pgarr_free(&arr);
}
END_TEST

START_TEST(grows_past_its_first_buffer)
{
    pgarr_t arr = {0};
    for (int i = 0; i < 10000; i++)
        pgarr_add(&arr, "0123456789");
    const char *text = pgarr_text(&arr);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(strlen(text), 2 + 10000 * 12 + 9999);
    pgarr_free(&arr);
}
END_TEST

Suite *pgarr_suite(void)
{
    Suite *s = suite_create("pgarr");
    TCase *tc = tcase_create("pgarr");
    tcase_add_test(tc, quotes_and_escapes_every_element);
    tcase_add_test(tc, numbers_booleans_and_hex);
    tcase_add_test(tc, grows_past_its_first_buffer);
    suite_add_tcase(s, tc);
    return s;
}
