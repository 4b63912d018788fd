/*
 * test_jsonptr - RFC 6901 JSON pointers: syntax, lookup and escaping.
 */
#include "definitions/jsonptr.h"

#include <check.h>
#include <string.h>

static json_t *doc;

static void setup(void)
{
    json_error_t jerr;
    doc = json_loads("{\"a/b\": 1, \"m~n\": 2, \"\": 3, \"~1\": 4, \"01\": 5,"
                     " \"arr\": [10, 20, {\"x\": 6}], \"nested\": {\"k\": {\"z\": true}}}",
                     0, &jerr);
    ck_assert_msg(doc != NULL, "%s", jerr.text);
}

static void teardown(void)
{
    json_decref(doc);
}

static void invalid(const char *ptr, const char *words)
{
    char err[256] = "";
    ck_assert_msg(!jsonptr_valid(ptr, err, sizeof err), "'%s' accepted", ptr);
    ck_assert_msg(strstr(err, words) != NULL, "'%s': \"%s\" lacks \"%s\"", ptr, err, words);
    ck_assert_ptr_null(jsonptr_get(doc, ptr));
}

/* The integer at ptr; -1 when it names nothing. */
static json_int_t int_at(const char *ptr)
{
    json_t *v = jsonptr_get(doc, ptr);
    return v == NULL ? -1 : json_integer_value(v);
}

START_TEST(test_valid)
{
    static const char *const ok[] = {"",      "/",    "/a", "/a/b/c", "/a~0b",
                                     "/a~1b", "/~01", "//", "/arr/-", "/01"};
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        ck_assert_msg(jsonptr_valid(ok[i], err, sizeof err), "'%s': %s", ok[i], err);
}
END_TEST

START_TEST(test_invalid)
{
    invalid("order_id", "starts with '/'");
    invalid("order_id", "did you mean '/order_id'");
    invalid("#/a", "starts with '/'"); /* the URI fragment form is not a pointer */
    invalid("/a~2", "'~' at offset 2");
    invalid("/a~2", "'0'");
    invalid("/a~", "must be followed by");
    invalid("/~x/b", "offset 1");
    ck_assert(!jsonptr_valid(NULL, NULL, 0));
}
END_TEST

START_TEST(test_get_escapes)
{
    ck_assert_int_eq(int_at("/a~1b"), 1);
    ck_assert_int_eq(int_at("/m~0n"), 2);
    ck_assert_int_eq(int_at("/"), 3);    /* the key "" */
    ck_assert_int_eq(int_at("/~01"), 4); /* "~01" is "~1", not "/" */
    ck_assert_int_eq(int_at("/a/b"), -1);
    ck_assert_ptr_eq(jsonptr_get(doc, ""), doc);
    ck_assert(json_is_true(jsonptr_get(doc, "/nested/k/z")));
}
END_TEST

START_TEST(test_get_arrays)
{
    ck_assert_int_eq(int_at("/arr/0"), 10);
    ck_assert_int_eq(int_at("/arr/1"), 20);
    ck_assert_int_eq(int_at("/arr/2/x"), 6);
    ck_assert_int_eq(int_at("/arr/3"), -1);  /* past the end */
    ck_assert_int_eq(int_at("/arr/-"), -1);  /* the element after the last: nothing yet */
    ck_assert_int_eq(int_at("/arr/01"), -1); /* leading zero: not an index */
    ck_assert_int_eq(int_at("/arr/00"), -1);
    ck_assert_int_eq(int_at("/arr/+1"), -1);
    ck_assert_int_eq(int_at("/arr/1x"), -1);
    ck_assert_int_eq(int_at("/arr/"), -1);
    ck_assert_int_eq(int_at("/arr/99999999999999999999999"), -1);
    ck_assert_int_eq(int_at("/01"), 5);       /* in an object "01" is just a key */
    ck_assert_int_eq(int_at("/arr/0/x"), -1); /* a number has no members */
    ck_assert_ptr_null(jsonptr_get(NULL, "/a"));
}
END_TEST

START_TEST(test_append)
{
    char buf[64] = "/events";
    ck_assert_str_eq(jsonptr_append(buf, sizeof buf, "a/b"), "/events/a~1b");
    ck_assert_str_eq(jsonptr_append(buf, sizeof buf, "m~n"), "/events/a~1b/m~0n");
    ck_assert_str_eq(jsonptr_append(buf, sizeof buf, ""), "/events/a~1b/m~0n/");

    /* What append builds, get finds. */
    char p[64] = "";
    jsonptr_append(p, sizeof p, "a/b");
    ck_assert_int_eq(int_at(p), 1);
    p[0] = '\0';
    jsonptr_append(p, sizeof p, "~1");
    ck_assert_str_eq(p, "/~01");
    ck_assert_int_eq(int_at(p), 4);
}
END_TEST

START_TEST(test_append_truncates)
{
    char buf[6] = "/ab";
    /* "/ab" + "/x~1" would need 8 bytes: the escape is not cut in half. */
    ck_assert_str_eq(jsonptr_append(buf, sizeof buf, "x/"), "/ab/x");
    char full[4] = "/ab";
    ck_assert_str_eq(jsonptr_append(full, sizeof full, "c"), "/ab");

    /* One byte short for the final escape: shorter than the buffer, yet cut. */
    char tight[8] = "";
    ck_assert_str_eq(jsonptr_append(tight, sizeof tight, "abcde~"), "/abcde");

    /* "é" is two bytes; only one is left, so it stays out whole. */
    char accent[7] = "";
    ck_assert_str_eq(jsonptr_append(accent, sizeof accent, "abcd\xc3\xa9"), "/abcd");
    char room[8] = "";
    ck_assert_str_eq(jsonptr_append(room, sizeof room, "abcd\xc3\xa9"), "/abcd\xc3\xa9");
}
END_TEST

Suite *jsonptr_suite(void);
Suite *jsonptr_suite(void)
{
    Suite *s = suite_create("jsonptr");
    TCase *tc = tcase_create("jsonptr");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_valid);
    tcase_add_test(tc, test_invalid);
    tcase_add_test(tc, test_get_escapes);
    tcase_add_test(tc, test_get_arrays);
    tcase_add_test(tc, test_append);
    tcase_add_test(tc, test_append_truncates);
    suite_add_tcase(s, tc);
    return s;
}
