/*
 * test_failpoint - the STEWARD_FAILPOINTS parser and the hit counting of
 * common/failpoint.c: crash, error and pause, every hit or the Nth only,
 * and refusals that name what is wrong (an unknown name lists the known).
 */
#include "common/failpoint.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void init_ok(const char *spec)
{
    char err[2048] = "";
    ck_assert_msg(fp_init(spec, err, sizeof err) == ERR_OK, "'%s' refused: %s", spec, err);
}

static void init_fails(const char *spec, const char *words)
{
    char err[2048] = "";
    ck_assert_msg(fp_init(spec, err, sizeof err) == ERR_INVALID, "'%s' accepted", spec);
    ck_assert_msg(strstr(err, words) != NULL, "'%s': \"%s\" lacks \"%s\"", spec, err, words);
}

START_TEST(test_table)
{
    if (!fp_enabled()) {
        ck_assert_int_eq(fp_count(), 0);
        return;
    }
    ck_assert_int_ge(fp_count(), 13);
    for (size_t i = 0; i < fp_count(); i++) {
        const char *n = fp_name(i);
        ck_assert_ptr_nonnull(n);
        ck_assert_ptr_nonnull(strchr(n, '.'));
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(strcmp(n, fp_name(j)) != 0, "%s twice in FP_LIST", n);
        ck_assert_int_eq(fp_hits(n), 0);
    }
    ck_assert_ptr_null(fp_name(fp_count()));
    ck_assert_int_eq(fp_hits("no.such_point"), -1);
}
END_TEST

START_TEST(test_refusals)
{
    if (!fp_enabled()) {
        init_fails("intake.before_commit=crash", "this build has no failpoints");
        init_ok("");
        init_ok(NULL);
        return;
    }
    init_ok(NULL);
    init_ok("");
    init_ok(" ; ;");
    /* A typo names every point, so the test that made it sees the right one. */
    init_fails("dispatch.after_produce=crash", "no failpoint is named \"dispatch.after_produce\"");
    init_fails("dispatch.after_produce=crash", "dispatcher.after_produce");
    init_fails("dispatch.after_produce=crash", "actions.before_commit");
    init_fails("intake.before_commit", "is not NAME=ACTION");
    init_fails("intake.before_commit=explode", "the action is crash, error or pause(MS)");
    init_fails("intake.before_commit=pause(x)", "the action is crash, error or pause(MS)");
    init_fails("intake.before_commit=pause()", "the action is crash, error or pause(MS)");
    init_fails("intake.before_commit=crash@0", "a number from 1");
    init_fails("intake.before_commit=crash@", "a number from 1");
    init_fails("intake.before_commit=crash@2x", "a number from 1");
    init_fails("intake.after_commit=error", "has no error path");
    /* A refused list sets nothing, not even its good entries. */
    init_fails("intake.before_commit=error;bogus=crash", "bogus");
    ck_assert(!fp_hit("intake.before_commit"));
}
END_TEST

START_TEST(test_error_every_and_nth)
{
    if (!fp_enabled())
        return;
    init_ok("intake.before_commit=error; scheduler.before_commit=error@3");
    char err[256] = "";
    for (int i = 1; i <= 4; i++) {
        ck_assert(fp_hit("intake.before_commit"));
        ck_assert_int_eq(fp_hit("scheduler.before_commit"), i == 3);
    }
    ck_assert_int_eq(fp_hits("intake.before_commit"), 4);
    ck_assert_int_eq(fp_hits("scheduler.before_commit"), 4);
    ck_assert_int_eq(fp_hit_error("intake.before_commit", err, sizeof err), ERR_TRANSIENT);
    ck_assert_ptr_nonnull(strstr(err, "failpoint intake.before_commit"));
    ck_assert_int_eq(fp_hit_error("scheduler.before_commit", err, sizeof err), ERR_OK);
    /* Points not named count their hits and do nothing. */
    ck_assert(!fp_hit("notifier.after_record"));
    ck_assert_int_eq(fp_hits("notifier.after_record"), 1);
    /* A new list starts the counts again. */
    init_ok("");
    ck_assert_int_eq(fp_hits("intake.before_commit"), 0);
    ck_assert(!fp_hit("intake.before_commit"));
}
END_TEST

START_TEST(test_pause)
{
    if (!fp_enabled())
        return;
    init_ok("dispatcher.after_claim=pause(150)@2");
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    ck_assert(!fp_hit("dispatcher.after_claim"));
    clock_gettime(CLOCK_MONOTONIC, &b);
    long first = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    ck_assert(!fp_hit("dispatcher.after_claim"));
    clock_gettime(CLOCK_MONOTONIC, &a);
    long second = (a.tv_sec - b.tv_sec) * 1000 + (a.tv_nsec - b.tv_nsec) / 1000000;
    ck_assert_msg(first < 100 && second >= 150, "pauses %ld ms then %ld ms", first, second);
}
END_TEST

/* The child passes `name` `hits` times; returns its wait status. */
static int run_child(const char *spec, const char *name, int hits)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char err[2048];
        if (fp_init(spec, err, sizeof err) != ERR_OK)
            _exit(3);
        for (int i = 0; i < hits; i++)
            fp_hit(name);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

START_TEST(test_crash_is_a_kill_on_the_nth_hit)
{
    if (!fp_enabled())
        return;
    int st = run_child("dispatcher.after_produce=crash@3", "dispatcher.after_produce", 2);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "crashed before the third hit");
    st = run_child("dispatcher.after_produce=crash@3", "dispatcher.after_produce", 3);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "not killed on the third hit: %d",
                  st);
    st = run_child("dispatcher.after_produce=crash", "dispatcher.after_produce", 1);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "not killed on the first hit");
}
END_TEST

Suite *failpoint_suite(void);
Suite *failpoint_suite(void)
{
    Suite *s = suite_create("failpoint");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_table);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_error_every_and_nth);
    tcase_add_test(tc, test_pause);
    tcase_add_test(tc, test_crash_is_a_kill_on_the_nth_hit);
    suite_add_tcase(s, tc);
    return s;
}
