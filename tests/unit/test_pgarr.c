/*
 * test_pgarr - array literals: the quoting that keeps any text a value; and
 * the row builder (manager/intake/rows.h) that keeps a table's columns in step.
 */
#include "common/pgarr.h"
#include "manager/intake/rows.h"
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

/* A history row lands in every column, NULLs where the row says so. */
START_TEST(rows_fill_every_column_of_a_table)
{
    rows_t rows;
    const char *params[ROWS_MAX_COLUMNS];
    char errstr[256];
    rows_init(&rows, "history", ROWS_HISTORY_COLUMNS);
    rows_add_history(&rows, &(rows_history_row_t){.process = "p",
                                                  .key = "k",
                                                  .version = 3,
                                                  .event_id = "e1",
                                                  .offset = 7,
                                                  .replayed = true,
                                                  .late_by_ms = ROWS_NULL});
    rows_add_history(&rows, &(rows_history_row_t){.process = "p", .key = "k2", .late_by_ms = 5});
    ck_assert_uint_eq(rows.n, 2);
    ck_assert_int_eq(rows_params(&rows, params, errstr, sizeof errstr), ERR_OK);
    ck_assert_str_eq(params[0], "{\"p\",\"p\"}");
    ck_assert_str_eq(params[1], "{\"k\",\"k2\"}");
    ck_assert_str_eq(params[2], "{3,0}");
    ck_assert_str_eq(params[4], "{NULL,NULL}"); /* event_type unset: NULL text */
    ck_assert_str_eq(params[7], "{7,0}");
    ck_assert_str_eq(params[12], "{t,f}");
    ck_assert_str_eq(params[15], "{NULL,5}");
    rows_clear(&rows);

    rows_init(&rows, "rejected", ROWS_REJECTED_COLUMNS);
    rows_add_rejected(&rows, &(rows_rejected_row_t){.topic = "t",
                                                    .value = {"\x01\xff", 2},
                                                    .message_key = {NULL, 0},
                                                    .kafka_ms = ROWS_NULL});
    ck_assert_int_eq(rows_params(&rows, params, errstr, sizeof errstr), ERR_OK);
    ck_assert_str_eq(params[6], "{\"01ff\"}");
    ck_assert_str_eq(params[10], "{NULL}");
    ck_assert_str_eq(params[8], "{NULL}");
    rows_clear(&rows);
}
END_TEST

/* A column out of step with the others is refused, never sent. */
START_TEST(rows_refuse_columns_of_different_lengths)
{
    rows_t rows;
    const char *params[ROWS_MAX_COLUMNS];
    char errstr[256];
    rows_init(&rows, "offsets", ROWS_OFFSETS_COLUMNS);
    rows_add_offsets(&rows, &(rows_offsets_row_t){.topic = "t", .partition = 1});
    pgarr_add(&rows.column[2], "9"); /* what a broken adder would leave */
    ck_assert_int_eq(rows_params(&rows, params, errstr, sizeof errstr), ERR_FATAL);
    ck_assert_msg(strstr(errstr, "column 3 of the offsets rows has 2 values for 1 rows") != NULL,
                  "got: %s", errstr);
    rows_clear(&rows);
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
    TCase *rows = tcase_create("rows");
    tcase_add_test(rows, rows_fill_every_column_of_a_table);
    tcase_add_test(rows, rows_refuse_columns_of_different_lengths);
    suite_add_tcase(s, rows);
    return s;
}
