/*
 * test_failpoints - steward killed at every failpoint of the owning half
 * (common/failpoint.h), restarted without it, and held to the simulator's
 * ground truth and to an uninterrupted run.
 *
 * Each run is the simulator's active flow (failpoints_flow.h): steward-sim
 * --active answers steward's commands for 26 orders, half of them with a
 * fault (dropped first commands, silent services into on_timeout and
 * compensation or a page, duplicate replies under new event ids, a zombie
 * picker answering with its old token at the hand-off, another answering
 * after the step was left), every picker claiming its lease and
 * heartbeating.
 *
 *   reference      the flow uninterrupted: every order where the ground
 *                  truth says and every invariant (ff_check()); its final
 *                  states are kept in the shared world for the crash runs.
 *                  Then the operators' commands at their failpoints:
 *                  actions.before_commit, a `steward retry` of the order
 *                  paged at `delivered` killed before its COMMIT, leaves
 *                  nothing, and done again queues one command, which
 *                  reaches the service; upgrade.between_batches, a
 *                  `steward upgrade` of the open instances to a second
 *                  version killed after its first batch, moves every one
 *                  once when run again
 *   crash_at       for each daemon failpoint in turn: the flow with
 *                  NAME=crash@N; steward must die by SIGKILL there (a
 *                  point the flow never reaches fails the test); restarted
 *                  without it, the flow ends within 30 s, with the
 *                  reference's final states and every invariant
 *   clock_jump     while the first commands are in flight, steward is
 *                  stopped (SIGSTOP) for longer than the first steps'
 *                  deadlines, so that the backlog read when it resumes
 *                  moves the watermark past them, and a producer's clock
 *                  jumps: an event an hour ahead on every event topic,
 *                  which must move no watermark; the flow still ends as
 *                  the reference did, with every invariant
 *
 * STEWARD_TEST_FAILPOINT=NAME runs crash_at for that failpoint alone (the
 * reference runs first when no reference is kept yet).
 */
#include "failpoints_flow.h"
#include "testlib.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/failpoint.h"

/* How long the flow may take after a restart to end. */
#define RESTART_BOUND_S 30

/* How long clock_jump holds steward stopped: past the first step's
 * deadline (1.5 s), within the consumer's session (6 s). */
#define FF_PAUSE_MS 2500

static ff_run_t run;

static void teardown(void)
{
    ff_teardown(&run);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* `steward retry order_fulfilment KEY`, with STEWARD_FAILPOINTS = spec. */
static tl_output_t operator_retry(const char *key, const char *spec)
{
    char env[256];
    snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", spec != NULL ? spec : "");
    const char *argv[] = {
        NULL,      "retry", "order_fulfilment", key,          "--database", run.w.db_url,
        "--actor", "alice", "--reason",         "failpoints", NULL};
    return tl_steward(argv, TW_LIST(env));
}

/* How many lines of the ground truth are commands for `key` at `state`
 * with attempt `attempt`. */
static int commands_read(const char *key, const char *state, long attempt)
{
    int n = 0;
    for (size_t i = 0; i < run.truth.n_commands; i++) {
        const ff_command_t *c = &run.truth.commands[i];
        n += strcmp(c->key, key) == 0 && strcmp(c->state, state) == 0 && c->attempt == attempt;
    }
    return n;
}

/*
 * actions.before_commit: the operator re-sends the step of the order whose
 * notification service never answered. Killed before its COMMIT, the retry
 * leaves no command and no history row; done again, it queues one command
 * (attempt 1: the operator's, one past retry.max 0), which the service
 * reads.
 */
static void crash_in_action(void)
{
    const ff_order_t *o = ff_order_with(&run, "silent", "delivered");
    ck_assert_msg(o != NULL, "no order of the ground truth is silent at delivered");
    char key[64];
    snprintf(key, sizeof key, "%s", o->key);
    const char *const *params = TW_LIST(key);
    const char *commands = "SELECT count(*) FROM steward.commands WHERE key = $1";
    const char *history = "SELECT count(*) FROM steward.history WHERE key = $1";
    char *before = tw_scalar(&run.w, commands, params), *rows = tw_scalar(&run.w, history, params);

    tl_output_t out = operator_retry(key, "actions.before_commit=crash");
    ck_assert_msg(out.status == 128 + SIGKILL, "steward retry under the failpoint: status %d: %s",
                  out.status, out.err);
    tl_output_free(&out);
    tw_expect(&run.w, commands, params, before);
    tw_expect(&run.w, history, params, rows);

    snprintf(run.retried_key, sizeof run.retried_key, "%s", key);
    snprintf(run.retried_state, sizeof run.retried_state, "delivered");
    out = operator_retry(key, NULL);
    ck_assert_msg(out.status == 0, "steward retry: status %d: %s", out.status, out.err);
    tl_output_free(&out);
    char want[24];
    snprintf(want, sizeof want, "%ld", atol(before) + 1);
    tw_expect(&run.w, commands, params, want);
    /* The service reads it (and stays silent). */
    ff_wait_done(&run, 30);
    ck_assert_int_eq(commands_read(key, "delivered", 1), 1);
    free(before);
    free(rows);
}

/* `steward upgrade order_fulfilment --to 2 --batch 1`, with STEWARD_FAILPOINTS = spec. */
static tl_output_t operator_upgrade(const char *spec)
{
    char env[256];
    snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", spec != NULL ? spec : "");
    const char *argv[] = {NULL,      "upgrade",  "order_fulfilment", "--to",       "2",
                          "--batch", "1",        "--database",       run.w.db_url, "--actor",
                          "alice",   "--reason", "failpoints",       NULL};
    return tl_steward(argv, TW_LIST(env));
}

/*
 * upgrade.between_batches: the open instances (the two orders paged and
 * left open) moved to a second version of the definition, one per batch.
 * Killed once its first batch committed, that batch's instance has moved,
 * once; run again, it moves the rest and none twice.
 */
static void crash_in_upgrade(void)
{
    tl_db_exec(run.w.conn, "INSERT INTO steward.definitions (process, version, mode, document, "
                           "  checksum, topic_mapping) "
                           "SELECT process, 2, mode, jsonb_set(document, '{version}', '2'), 'v2', "
                           "  topic_mapping FROM steward.definitions "
                           "WHERE process = 'order_fulfilment' AND version = 1");
    const char *open_sql = "SELECT count(*) FROM steward.instances WHERE status = 'active'";
    long open = tw_scalar_long(&run.w, open_sql, NULL);
    ck_assert_int_ge(open, 2);
    tl_output_t out = operator_upgrade("upgrade.between_batches=crash@1");
    ck_assert_msg(out.status == 128 + SIGKILL, "steward upgrade under the failpoint: status %d: %s",
                  out.status, out.err);
    tl_output_free(&out);
    const char *moved =
        "SELECT count(*) FROM steward.history WHERE event_type = 'operator:upgrade'";
    ck_assert_int_eq(tw_scalar_long(&run.w, moved, NULL), 1);
    out = operator_upgrade(NULL);
    ck_assert_msg(out.status == 0, "steward upgrade: status %d: %s", out.status, out.err);
    tl_output_free(&out);
    ck_assert_int_eq(tw_scalar_long(&run.w, moved, NULL), open);
    ck_assert_int_eq(tw_scalar_long(&run.w,
                                    "SELECT count(DISTINCT key) FROM steward.history WHERE "
                                    "event_type = 'operator:upgrade'",
                                    NULL),
                     open);
    ck_assert_int_eq(tw_scalar_long(&run.w,
                                    "SELECT count(*) FROM steward.instances WHERE status = "
                                    "'active' AND version = 2",
                                    NULL),
                     open);
}

/* The reference flow in `run`, its checks, and its states kept; with
 * `operators`, the operators' commands crashed at their failpoints after
 * the flow. */
static void reference_run(bool operators)
{
    ff_run_init(&run, "fp_reference", 0);
    ff_start(&run, NULL);
    ff_wait_done(&run, 90);
    if (operators) {
        crash_in_action();
        crash_in_upgrade();
    }
    ff_finish(&run);
    ff_check(&run, NULL);
    char *states = ff_states(&run);
    ff_save_reference(&run, states);
    free(states);
}

START_TEST(reference)
{
    reference_run(true);
}
END_TEST

/* The reference's final states (malloc'd), running it first (in the
 * shared world, then emptied) when this process has none yet. */
static char *reference_states(void)
{
    char *states = ff_reference();
    if (states == NULL) {
        reference_run(false);
        ff_teardown(&run);
        states = ff_reference();
    }
    ck_assert_ptr_nonnull(states);
    return states;
}

/* How often the flow passes a point before the Nth hit crashes: later
 * hits where the first one comes before anything interesting. */
static int crash_hit(const char *name)
{
    if (strcmp(name, "intake.after_commit") == 0 || strcmp(name, "intake.before_commit") == 0)
        return 3;
    if (strncmp(name, "dispatcher.", 11) == 0)
        return 2;
    return 1;
}

START_TEST(crash_at)
{
    const char *name = fp_name((size_t) _i);
    ck_assert_msg(name != NULL, "this build has no failpoints (configure with "
                                "-DSTEWARD_FAILPOINTS=ON; the sanitizer build has them)");
    const char *only = getenv("STEWARD_TEST_FAILPOINT");
    if (only != NULL && only[0] != '\0' && strcmp(only, name) != 0)
        return;
    if (strcmp(name, "actions.before_commit") == 0 ||
        strcmp(name, "upgrade.between_batches") == 0) {
        /* Operators' commands, not the daemon: the reference run crashes them. */
        printf("failpoint %s: in the reference run\n", name);
        return;
    }
    printf("failpoint %s\n", name);
    char *ref_states = reference_states();
    char world[64];
    snprintf(world, sizeof world, "fp_%d", _i);
    ff_run_init(&run, world, 0);
    char spec[128];
    snprintf(spec, sizeof spec, "%s=crash@%d", name, crash_hit(name));
    ff_start(&run, spec);
    int status = 0;
    long long until = now_ms() + 60000;
    bool died = false;
    while (!died && now_ms() < until) {
        died = ff_exited(&run, &status);
        if (!died)
            usleep(50 * 1000);
    }
    if (!died || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        ff_print_logs(&run);
        ck_abort_msg(died ? "steward did not die by SIGKILL at %s (wait status %d)"
                          : "failpoint %s was never reached in 60 s",
                     name, status);
    }
    char needle[160];
    snprintf(needle, sizeof needle, "\"failpoint\":\"%s\"", name);
    char *log = tl_read_file(run.w.log);
    ck_assert_msg(strstr(log, needle) != NULL, "the log does not name %s", name);
    free(log);
    run.crashed_at = name;
    /* A crash costs a lease (dispatch.lease 1s) or a session, not a
     * delivery timeout (30 s). */
    ff_spawn(&run, NULL);
    ff_wait_done(&run, RESTART_BOUND_S);
    ff_finish(&run);
    ff_check(&run, ref_states);
    free(ref_states);
}
END_TEST

START_TEST(clock_jump)
{
    char *ref_states = reference_states();
    /* Small batches: the batch that reads the jump is not the last of the
     * backlog, and the watermark takes its time. */
    ff_run_init(&run, "fp_clock_jump", 4);
    ff_start(&run, NULL);
    long long until = now_ms() + 30000;
    while (now_ms() < until &&
           tw_scalar_long(&run.w, "SELECT count(*) FROM steward.commands WHERE sent_at IS NOT NULL",
                          NULL) == 0)
        usleep(50 * 1000);
    /* steward stops (a frozen VM) with commands in flight, for longer than
     * the first steps' deadlines, while the services go on answering and
     * placing orders; meanwhile a producer's clock jumps: an event stamped
     * an hour ahead on every event topic, followed by more. */
    ck_assert_int_eq(kill(run.w.pids[0], SIGSTOP), 0);
    long long stopped = now_ms();
    ff_noise(&run, (long long) time(NULL) * 1000 + 3600 * 1000LL, 20);
    while (now_ms() - stopped < FF_PAUSE_MS)
        usleep(50 * 1000);
    ck_assert_int_eq(kill(run.w.pids[0], SIGCONT), 0);
    /* The backlog read moves the watermark past the deadlines that ran out
     * meanwhile; the hour ahead moves none: judged at it, the deadlines
     * would no longer wait for what intake has not read yet. */
    ff_wait_read(&run, 30);
    tw_expect(&run.w,
              "SELECT count(*) FILTER (WHERE watermark > now() + interval '1 minute') FROM "
              "steward.offsets",
              NULL, "0");
    ff_wait_done(&run, RESTART_BOUND_S);
    ff_finish(&run);
    ff_check(&run, ref_states);
    free(ref_states);
}
END_TEST

Suite *failpoints_suite(void);
Suite *failpoints_suite(void)
{
    ff_suite_init();
    /* One case each, so CK_RUN_CASE picks one (reference, crash or clock_jump). */
    Suite *s = suite_create("failpoints");
    TCase *ref = tcase_create("reference"), *crash = tcase_create("crash"),
          *jump = tcase_create("clock_jump");
    TCase *cases[] = {ref, crash, jump};
    for (size_t i = 0; i < 3; i++) {
        tcase_add_checked_fixture(cases[i], NULL, teardown);
        tcase_set_timeout(cases[i], 150);
        suite_add_tcase(s, cases[i]);
    }
    tcase_add_test(ref, reference);
    tcase_add_loop_test(crash, crash_at, 0, fp_count() > 0 ? (int) fp_count() : 1);
    tcase_add_test(jump, clock_jump);
    return s;
}
