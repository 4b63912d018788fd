/*
 * test_tokens - the HTTP tokens file: what it accepts, and that a line in
 * error is named by number, never quoted (it may hold a pasted secret).
 */
#include "common/sha256.h"
#include "manager/api/http.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

START_TEST(tokens_are_names_scopes_and_hashes)
{
    char hex[SHA256_HEX_SIZE], text[512], errstr[256];
    sha256_hex("s3cret", 6, hex);
    snprintf(text, sizeof text, "# who scope sha256\n\nalice operate %s\n  reader\tread %s  \r\n",
             hex, hex);
    http_tokens_t *t = http_tokens_parse(text, errstr, sizeof errstr);
    ck_assert_msg(t != NULL, "%s", errstr);
    ck_assert_uint_eq(http_tokens_count(t), 2);
    http_tokens_free(t);

    t = http_tokens_parse("# nobody\n", errstr, sizeof errstr);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(http_tokens_count(t), 0);
    http_tokens_free(t);
    http_tokens_free(NULL);
}
END_TEST

START_TEST(a_bad_line_is_named_never_quoted)
{
    char hex[SHA256_HEX_SIZE], text[512], errstr[256];
    sha256_hex("s3cret", 6, hex);

    /* The secret where its hash belongs. */
    snprintf(text, sizeof text, "alice operate %s\nbob operate Pa55w0rdPa55w0rd\n", hex);
    ck_assert_ptr_null(http_tokens_parse(text, errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "line 2") != NULL && strstr(errstr, "SHA-256") != NULL,
                  "errstr: %s", errstr);
    ck_assert_msg(strstr(errstr, "Pa55w0rd") == NULL, "the secret was quoted: %s", errstr);

    snprintf(text, sizeof text, "alice admin %s\n", hex);
    ck_assert_ptr_null(http_tokens_parse(text, errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "read or operate") != NULL, "errstr: %s", errstr);

    ck_assert_ptr_null(http_tokens_parse("alice operate\n", errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "line 1") != NULL, "errstr: %s", errstr);

    snprintf(text, sizeof text, "alice operate %s extra\n", hex);
    ck_assert_ptr_null(http_tokens_parse(text, errstr, sizeof errstr));
}
END_TEST

Suite *tokens_suite(void)
{
    Suite *s = suite_create("tokens");
    TCase *tc = tcase_create("tokens");
    tcase_add_test(tc, tokens_are_names_scopes_and_hashes);
    tcase_add_test(tc, a_bad_line_is_named_never_quoted);
    suite_add_tcase(s, tc);
    return s;
}
