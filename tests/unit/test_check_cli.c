/*
 * test_check_cli - `steward check`, run as a separate process: exit codes,
 * where problems are printed and what they say.
 */
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* Runs `steward check` with up to three arguments (NULL-terminated). */
static tl_output_t check(const char *a, const char *b, const char *c)
{
    const char *argv[] = {NULL, "check", a, b, c, NULL};
    return tl_steward(argv, NULL);
}

/* The order_fulfilment example with `from` replaced by `to`, written to a new directory. */
static char *example_with(const char *from, const char *to)
{
    char *path = tl_source_path("definitions/examples/order_fulfilment.json");
    char *text = tl_read_file(path);
    free(path);
    char *at = strstr(text, from);
    ck_assert_msg(at != NULL, "the example no longer contains %s", from);

    size_t head = (size_t) (at - text);
    char *edited = malloc(strlen(text) - strlen(from) + strlen(to) + 1);
    ck_assert_ptr_nonnull(edited);
    memcpy(edited, text, head);
    strcpy(edited + head, to);
    strcat(edited, at + strlen(from));
    char *out = tl_write_file(tl_tmpdir(), "order_fulfilment.json", edited);
    free(text);
    free(edited);
    return out;
}

START_TEST(test_examples_valid)
{
    char *dir = tl_source_path("definitions/examples");
    tl_output_t o = check(dir, NULL, NULL);
    ck_assert_msg(o.status == 0, "exit %d; stderr:\n%s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out, "checked 2 files: all valid"), "stdout:\n%s", o.out);
    ck_assert_msg(tl_contains(o.out, "order_fulfilment version 1 (shadow)"), "stdout:\n%s", o.out);
    ck_assert_str_eq(o.err, "");
    tl_output_free(&o);
    free(dir);
}
END_TEST

START_TEST(test_typo_in_transition)
{
    char *file =
        example_with("\"ShipmentDispatched\": \"shipped\"", "\"ShipmentDispatched\": \"shiped\"");
    tl_output_t o = check(file, NULL, NULL);
    ck_assert_int_eq(o.status, 2);

    char line[1024];
    snprintf(line, sizeof line,
             "%s: /states/awaiting_dispatch/on/ShipmentDispatched: transition on "
             "ShipmentDispatched goes to unknown state 'shiped' (did you mean 'shipped'?)\n",
             file);
    ck_assert_msg(tl_contains(o.err, line), "stderr:\n%s", o.err);
    ck_assert_msg(tl_contains(o.err, "1 problem in 1 file"), "stderr:\n%s", o.err);
    ck_assert_msg(!tl_contains(o.out, "all valid"), "stdout:\n%s", o.out);
    tl_output_free(&o);
    free(file);
}
END_TEST

START_TEST(test_problems_in_several_files)
{
    char *examples = tl_source_path("definitions/examples");
    char *bad = example_with("\"deadline\": \"15m\"", "\"deadline\": \"15 minutes\"");
    tl_output_t o = check(examples, bad, "/nonexistent/steward.json");
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "/states/awaiting_payment/deadline: bad duration "
                                     "'15 minutes'"),
                  "stderr:\n%s", o.err);
    ck_assert_msg(tl_contains(o.err, "/nonexistent/steward.json: : no such file or directory"),
                  "stderr:\n%s", o.err);
    ck_assert_msg(tl_contains(o.err, "2 problems in 2 files"), "stderr:\n%s", o.err);
    tl_output_free(&o);
    free(bad);
    free(examples);
}
END_TEST

START_TEST(test_usage)
{
    tl_output_t o = check(NULL, NULL, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert(tl_contains(o.err, "usage: steward check"));
    tl_output_free(&o);

    o = check("--strict", "definitions", NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert(tl_contains(o.err, "unknown option '--strict'"));
    ck_assert(tl_contains(o.err, "usage: steward check"));
    tl_output_free(&o);

    o = check("--help", NULL, NULL);
    ck_assert_int_eq(o.status, 0);
    ck_assert(tl_contains(o.out, "usage: steward check"));
    ck_assert_str_eq(o.err, "");
    tl_output_free(&o);

    /* After "--" a name that looks like an option is a path. */
    o = check("--", "--help", NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "--help: : no such file or directory"), "stderr:\n%s", o.err);
    tl_output_free(&o);
}
END_TEST

/* Deadlines the daemon could not store (timestamp out of range) or add
 * (int64 overflow) are refused by check, with the JSON path named. */
START_TEST(test_deadlines_the_daemon_cannot_run)
{
    static const char *const too_long[] = {"200000000d", "106751991167d", "36526d"};
    for (size_t i = 0; i < sizeof too_long / sizeof too_long[0]; i++) {
        char to[64], line[256];
        snprintf(to, sizeof to, "\"deadline\": \"%s\"", too_long[i]);
        char *file = example_with("\"deadline\": \"15m\"", to);
        tl_output_t o = check(file, NULL, NULL);
        ck_assert_msg(o.status == 2, "%s: exit %d", too_long[i], o.status);
        snprintf(line, sizeof line,
                 "%s: /states/awaiting_payment/deadline: bad duration '%s': deadline may be at "
                 "most 36525d (100 years)",
                 file, too_long[i]);
        ck_assert_msg(tl_contains(o.err, line), "stderr:\n%s", o.err);
        tl_output_free(&o);
        free(file);
    }
    /* The process deadline too; 100 years itself passes. */
    char *file = example_with("\"deadline\": \"10d\"", "\"deadline\": \"106751991167d\"");
    tl_output_t o = check(file, NULL, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "/deadline: bad duration '106751991167d'"), "stderr:\n%s",
                  o.err);
    tl_output_free(&o);
    free(file);
    file = example_with("\"deadline\": \"10d\"", "\"deadline\": \"36525d\"");
    o = check(file, NULL, NULL);
    ck_assert_msg(o.status == 0, "exit %d; stderr:\n%s", o.status, o.err);
    tl_output_free(&o);
    free(file);
}
END_TEST

/* The active-mode problems `steward check` names, each at its path, in the
 * test definitions under tests/data/definitions/invalid/. */
START_TEST(test_active_mode_problems)
{
    static const struct {
        const char *file, *line;
    } cases[] = {
        {"invalid/check-only/template_variable_not_on_path.json",
         "/states/picking/command/payload/why: ${vars.reason} is never captured on a path that "
         "reaches state 'picking'"},
        {"invalid/check-only/on_timeout_unknown_state.json",
         "/states/reserving/on_timeout: on_timeout goes to unknown state 'refundin' (did you mean "
         "'refunding'?)"},
        {"invalid/check-only/lease_event_undeclared.json",
         "/states/picking/lease/renew/0: lease event 'PickHeartbeet' is not declared in "
         "'events'"},
        {"invalid/retry_backoff_without_max.json",
         "/states/reserving/retry: retry.backoff is the wait between re-sends, and retry has no "
         "'max'"},
        {"invalid/lease_without_deadline.json",
         "/states/picking/lease: a lease needs the state's own 'deadline'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/definitions/%s", cases[i].file);
        char *path = tl_source_path(rel);
        tl_output_t o = check(path, NULL, NULL);
        ck_assert_msg(o.status == 2, "%s: exit %d", cases[i].file, o.status);
        ck_assert_msg(tl_contains(o.err, cases[i].line), "%s: stderr:\n%s", cases[i].file, o.err);
        tl_output_free(&o);
        free(path);
    }
    char *valid = tl_source_path("tests/data/definitions/valid/active_lease.json");
    tl_output_t o = check(valid, NULL, NULL);
    ck_assert_msg(o.status == 0, "exit %d; stderr:\n%s", o.status, o.err);
    tl_output_free(&o);
    free(valid);
}
END_TEST

Suite *check_cli_suite(void);
Suite *check_cli_suite(void)
{
    Suite *s = suite_create("check_cli");
    TCase *tc = tcase_create("check_cli");
    tcase_add_test(tc, test_examples_valid);
    tcase_add_test(tc, test_typo_in_transition);
    tcase_add_test(tc, test_problems_in_several_files);
    tcase_add_test(tc, test_usage);
    tcase_add_test(tc, test_deadlines_the_daemon_cannot_run);
    tcase_add_test(tc, test_active_mode_problems);
    suite_add_tcase(s, tc);
    return s;
}
