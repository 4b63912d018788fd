/*
 * test_template - rendering command payloads: JSON types kept for a whole
 * variable, text forms inside longer strings, a missing variable refused.
 */
#include "definitions/def.h"
#include "engine/template.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static json_t *render(const char *tmpl_text, char *err, size_t err_size)
{
    json_error_t jerr;
    json_t *tmpl = json_loads(tmpl_text, 0, &jerr);
    ck_assert_msg(tmpl != NULL, "%s", jerr.text);
    json_t *vars = json_pack("{s:f, s:s, s:b, s:{s:i}}", "total", 11.5, "sku", "A-1", "gift", 1,
                             "addr", "zip", 75001);
    template_ctx_t ctx = {"order-7", "order_fulfilment", "reserving", 2, 5, vars, "ab12"};
    json_t *out = template_render(tmpl, &ctx, err, err_size);
    json_decref(tmpl);
    json_decref(vars);
    return out;
}

static void expect(const char *tmpl, const char *want)
{
    char err[256] = "";
    json_t *out = render(tmpl, err, sizeof err);
    ck_assert_msg(out != NULL, "%s: %s", tmpl, err);
    char *got = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_msg(strcmp(got, want) == 0, "%s: got %s, want %s", tmpl, got, want);
    free(got);
    json_decref(out);
}

START_TEST(test_whole_variable_keeps_type)
{
    expect("{\"a\": \"${vars.total}\", \"b\": \"${vars.gift}\", \"c\": \"${vars.addr}\", "
           "\"d\": \"${attempt}\", \"e\": \"${token}\", \"f\": \"${key}\"}",
           "{\"a\":11.5,\"b\":true,\"c\":{\"zip\":75001},\"d\":2,\"e\":5,\"f\":\"order-7\"}");
}
END_TEST

START_TEST(test_embedded_variable_is_text)
{
    expect("{\"note\": \"${process}/${state}: ${vars.sku} x ${vars.total} try ${attempt} "
           "tok ${token} ${vars.addr} $5\"}",
           "{\"note\":\"order_fulfilment/reserving: A-1 x 11.5 try 2 tok 5 {\\\"zip\\\":75001} "
           "$5\"}");
    /* Arrays, nested objects and non-string values pass through. */
    expect("{\"lines\": [{\"sku\": \"${vars.sku}\", \"n\": 3}, null, false]}",
           "{\"lines\":[{\"n\":3,\"sku\":\"A-1\"},null,false]}");
}
END_TEST

START_TEST(test_missing_variable_is_refused)
{
    char err[256] = "";
    json_t *out = render("{\"ok\": \"${key}\", \"deep\": [{\"x\": \"id ${vars.payment_id}\"}]}",
                         err, sizeof err);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err, "${vars.payment_id} was never captured") != NULL, "%s", err);
    out = render("{\"x\": \"${vars.nope}\"}", err, sizeof err);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err, "${vars.nope}") != NULL, "%s", err);
}
END_TEST

START_TEST(test_idempotency_key)
{
    expect("{\"k\": \"${idempotency_key}\", \"h\": \"pay-${idempotency_key}\"}",
           "{\"h\":\"pay-ab12\",\"k\":\"ab12\"}");
    /* Where no step entry is known, a template that uses it is refused. */
    json_t *tmpl = json_pack("{s:s}", "k", "${idempotency_key}");
    template_ctx_t ctx = {"order-7", "p", "s", 0, 1, NULL, NULL};
    char err[256] = "";
    ck_assert_ptr_null(template_render(tmpl, &ctx, err, sizeof err));
    ck_assert_msg(strstr(err, "${idempotency_key}") != NULL, "%s", err);
    json_decref(tmpl);
}
END_TEST

/* A definition may use it: the check knows the variable. */
START_TEST(test_idempotency_key_passes_the_definition_check)
{
    json_t *tmpl = json_pack("{s:s, s:s}", "k", "${idempotency_key}", "n", "x ${idempotency_key}");
    def_problems_t problems = {0};
    ck_assert_int_eq(def_check_template(tmpl, NULL, 0, "d.json", "/payload", &problems), 0);
    def_problems_clear(&problems);
    json_decref(tmpl);
}
END_TEST

Suite *template_suite(void);
Suite *template_suite(void)
{
    Suite *s = suite_create("template");
    TCase *tc = tcase_create("template");
    tcase_add_test(tc, test_whole_variable_keeps_type);
    tcase_add_test(tc, test_embedded_variable_is_text);
    tcase_add_test(tc, test_missing_variable_is_refused);
    tcase_add_test(tc, test_idempotency_key);
    tcase_add_test(tc, test_idempotency_key_passes_the_definition_check);
    suite_add_tcase(s, tc);
    return s;
}
