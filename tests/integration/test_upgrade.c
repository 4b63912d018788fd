/*
 * test_upgrade - steward upgrade end to end (the upgrade suite): steward
 * run on the real broker and PostgreSQL judges instances of
 * upgrade_order (tests/data/definitions/upgrade_order.json.in, shadow:
 * awaiting_payment, then @S2@, then completed or cancelled) or of
 * active_order for a promotion; newer versions are written beside the
 * first and loaded by SIGHUP; the upgrades go through the CLI.
 *
 *   deadline fixed  v1's 2s deadline pages; v2's 1h moves the paged
 *                   instances and resolves their alerts (the history row
 *                   says from and to which version, who and why), while
 *                   awaiting_dispatch's 1h becomes 2s and the instance in
 *                   it pages at once; the dry run's document is the real
 *                   run's; run again, nothing moves; the next event is
 *                   judged on v2
 *   shortened       a deadline shortened by the upgrade fires after it, at
 *                   the new deadline counted from the state's entry
 *   renamed         a state renamed in v3 must be mapped: refused without
 *                   a map, with a terminal target, with names that match
 *                   nothing, and nothing moves; then v1 and v2 instances
 *                   move to v3 (--state, --from-version, --map, one finished
 *                   by --allow-terminal), and events go on under v3
 *   crash           killed between batches (upgrade.between_batches), run
 *                   again it moves the rest: every instance once, ending
 *                   where the dry run said
 *   race            an upgrade waits for the instance's lock like a batch:
 *                   the event racing it is judged once, on the version it
 *                   found; payments arriving while an upgrade runs in
 *                   batches each have one row, on the instance's version
 *                   then
 *   promotion       shadow v1 to active v2: --send-current queues the
 *                   current step's command (counted on the command topic);
 *                   without it nothing goes until the next state sends its
 *                   own
 *
 * The HTTP path (an operate token) is in test_actions_http.c, the operator
 * role's in test_roles.c.
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static tw_world_t w;
static const char *process = "upgrade_order";

static void teardown(void)
{
    tw_teardown(&w);
}

/* Writes version v of upgrade_order (D1, D2 and the second state's name)
 * into the definitions directory. */
static void write_version(const char *v, const char *d1, const char *d2, const char *s2)
{
    char file[64];
    snprintf(file, sizeof file, "defs/v%s.json", v);
    free(tw_write_template(&w, "tests/data/definitions/upgrade_order.json.in", file,
                           TW_LIST("@V@", v, "@D1@", d1, "@D2@", d2, "@S2@", s2)));
}

/* A world on version 1 of upgrade_order, steward run started and its
 * partitions claimed. */
static void world_start(const char *name, const char *d1, const char *d2)
{
    tw_init(&w, name);
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    ck_assert_int_eq(mkdir(defs, 0755), 0);
    write_version("1", d1, d2, "awaiting_dispatch");
    tw_create_topics(&w, TW_LIST("orders", "payments", "shipping"), 1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts =
        json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}}", "scheduler", "interval", "200ms",
                  "grace", "200ms", "http", "listen", "", "routes", "default", "type", "log");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    tw_start(&w, NULL, false);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w.group),
            "3", 60, "partitions claimed");
}

/* Loads what the definitions directory now holds (SIGHUP) and waits until
 * version v of `proc` is recorded. */
static void reload(const char *proc, const char *v)
{
    ck_assert_int_eq(kill(w.pids[0], SIGHUP), 0);
    tw_wait(&w, "SELECT count(*) FROM steward.definitions WHERE process = $1 AND version = $2::int",
            TW_LIST(proc, v), "1", 30, "the new version recorded");
}

static void send_event(const char *topic, const char *type, const char *key)
{
    char value[256], *t = tw_topic(&w, topic);
    tl_producer_t *p = tl_producer_new();
    snprintf(value, sizeof value,
             "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\",\"total\":42.5}", type, type,
             key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    tl_producer_free(p);
    free(t);
}

static void wait_sql(const char *sql, const char *key, const char *expected, int timeout_s)
{
    tw_wait(&w, sql, key != NULL ? TW_LIST(key) : NULL, expected, timeout_s, sql);
}

static void expect_sql(const char *sql, const char *key, const char *expected)
{
    tw_expect(&w, sql, key != NULL ? TW_LIST(key) : NULL, expected);
}

/* `steward upgrade PROC ARGS... --database --actor alice --reason R` with
 * the environment `env` (NULL: none); args end in NULL. */
static tl_output_t upgrade_env(const char *proc, const char *const *env, const char *const *args)
{
    const char *argv[32] = {NULL, "upgrade", proc};
    int n = 3;
    for (size_t i = 0; args[i] != NULL && n < 24; i++)
        argv[n++] = args[i];
    const char *tail[] = {
        "--database", w.db_url, "--actor", "alice", "--reason", "the deadline was wrong", NULL};
    for (size_t i = 0; tail[i] != NULL; i++)
        argv[n++] = tail[i];
    return tl_steward(argv, env);
}

#define UPGRADE(...) upgrade_env(process, NULL, TW_LIST(__VA_ARGS__))

/* An upgrade's --json answer, asserted to have worked. */
static json_t *upgrade_json(const char *proc, const char *const *args)
{
    const char *with[24];
    size_t n = 0;
    for (; args[n] != NULL && n < 22; n++)
        with[n] = args[n];
    with[n++] = "--json";
    with[n] = NULL;
    tl_output_t o = upgrade_env(proc, NULL, with);
    ck_assert_msg(o.status == 0, "upgrade: exit %d: %s", o.status, o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "upgrade --json: %s: %s", jerr.text, o.out);
    tl_output_free(&o);
    return doc;
}

static long long int_of(const json_t *doc, const char *name)
{
    return (long long) json_integer_value(json_object_get(doc, name));
}

/* The entry of list `name` in doc whose "key" is key; NULL when none. */
static json_t *entry(const json_t *doc, const char *name, const char *key)
{
    return tl_json_find(json_object_get(doc, name), "key", key);
}

/* Asserts the two answers say the same but for dry_run. */
static void expect_same_answer(json_t *dry, json_t *real)
{
    ck_assert(json_is_true(json_object_get(dry, "dry_run")));
    ck_assert(json_is_false(json_object_get(real, "dry_run")));
    json_t *a = json_deep_copy(dry), *b = json_deep_copy(real);
    json_object_del(a, "dry_run");
    json_object_del(b, "dry_run");
    char *ta = json_dumps(a, JSON_SORT_KEYS), *tb = json_dumps(b, JSON_SORT_KEYS);
    ck_assert_msg(json_equal(a, b), "the dry run said\n%s\nthe run did\n%s", ta, tb);
    free(ta);
    free(tb);
    json_decref(a);
    json_decref(b);
}

/* ---- a deadline fixed ------------------------------------------------------------------ */

START_TEST(a_deadline_fixed_resolves_its_alerts_as_the_dry_run_said)
{
    world_start("upg_fixed", "2s", "1h");
    send_event("orders", "OrderPlaced", "K1");
    send_event("orders", "OrderPlaced", "K2");
    send_event("orders", "OrderPlaced", "K3");
    send_event("payments", "PaymentCaptured", "K3");
    wait_sql("SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND resolved_at IS NULL",
             NULL, "2", 30);
    /* K3 has been in awaiting_dispatch longer than v2's 2s. */
    wait_sql("SELECT (state = 'awaiting_dispatch' AND now() - state_entered_at > interval '3 s') "
             "FROM steward.instances WHERE key = $1",
             "K3", "t", 30);

    write_version("2", "1h", "2s", "awaiting_dispatch");
    reload(process, "2");
    json_t *dry = upgrade_json(process, TW_LIST("--to", "2", "--dry-run"));
    ck_assert_int_eq(int_of(dry, "moved"), 3);
    ck_assert_int_eq(int_of(dry, "deadlines_changed"), 3);
    ck_assert_int_eq(int_of(dry, "alerts_resolved"), 2);
    ck_assert_int_eq(int_of(dry, "due_at_once"), 1);
    ck_assert_int_eq(int_of(dry, "commands_queued"), 0);
    json_t *states = json_object_get(dry, "states");
    ck_assert_int_eq(json_array_size(states), 2);
    json_t *paying = tl_json_find(states, "from_state", "awaiting_payment");
    ck_assert_int_eq(int_of(paying, "instances"), 2);
    ck_assert_str_eq(json_string_value(json_object_get(paying, "to_state")), "awaiting_payment");
    ck_assert_int_eq(int_of(entry(dry, "deadlines", "K1"), "change_ms"), 3600000 - 2000);
    ck_assert_int_eq(int_of(entry(dry, "deadlines", "K3"), "change_ms"), 2000 - 3600000);
    ck_assert_str_eq(json_string_value(json_object_get(entry(dry, "alerts", "K2"), "kind")),
                     "deadline");
    ck_assert_str_eq(json_string_value(json_object_get(entry(dry, "due", "K3"), "then")),
                     "deadline");
    /* Nothing changed. */
    expect_sql("SELECT string_agg(version::text, ' ' ORDER BY key) FROM steward.instances", NULL,
               "1 1 1");
    expect_sql("SELECT count(*) FROM steward.alerts WHERE resolved_at IS NULL", NULL, "2");
    expect_sql("SELECT count(*) FROM steward.history WHERE outcome = 'operator'", NULL, "0");

    json_t *real = upgrade_json(process, TW_LIST("--to", "2"));
    expect_same_answer(dry, real);
    expect_sql("SELECT string_agg(version || ' ' || state, ', ' ORDER BY key) FROM "
               "steward.instances",
               NULL, "2 awaiting_payment, 2 awaiting_payment, 2 awaiting_dispatch");
    expect_sql(
        "SELECT string_agg(key || ': ' || resolution || ' ' || resolved_by, ', ' ORDER BY "
        "key) FROM steward.alerts",
        NULL, "K1: upgraded by alice to version 2 alice, K2: upgraded by alice to version 2 alice");
    expect_sql(
        "SELECT string_agg(format('%s %s %s->%s %s: %s [%s]', key, version, from_state, "
        "to_state, actor, reason, detail), E'\\n' ORDER BY key) FROM steward.history "
        "WHERE event_type = 'operator:upgrade'",
        NULL,
        "K1 2 awaiting_payment->awaiting_payment alice: the deadline was wrong [from "
        "version 1 (awaiting_payment) to version 2 (awaiting_payment); deadline 2s -> 1h]\n"
        "K2 2 awaiting_payment->awaiting_payment alice: the deadline was wrong [from "
        "version 1 (awaiting_payment) to version 2 (awaiting_payment); deadline 2s -> 1h]\n"
        "K3 2 awaiting_dispatch->awaiting_dispatch alice: the deadline was wrong [from "
        "version 1 (awaiting_dispatch) to version 2 (awaiting_dispatch); deadline 1h -> 2s]");
    /* The deadlines count from the entry, the vars are kept. */
    expect_sql(
        "SELECT string_agg((deadline_at - state_entered_at)::text || ' ' || (vars->>'total'), "
        "', ' ORDER BY key) FROM steward.instances",
        NULL, "01:00:00 42.5, 01:00:00 42.5, 00:00:02 42.5");
    /* K3, past its new deadline, is paged by the scheduler's next pass. */
    wait_sql("SELECT count(*) FROM steward.alerts WHERE key = $1 AND kind = 'deadline' AND "
             "resolved_at IS NULL AND state = 'awaiting_dispatch'",
             "K3", "1", 30);

    /* Run again: nothing left to move. */
    json_t *again = upgrade_json(process, TW_LIST("--to", "2"));
    ck_assert_int_eq(int_of(again, "moved"), 0);
    expect_sql("SELECT count(*) FROM steward.history WHERE event_type = 'operator:upgrade'", NULL,
               "3");
    /* The next event is judged on version 2: awaiting_dispatch's 2s. */
    send_event("payments", "PaymentCaptured", "K1");
    wait_sql(
        "SELECT h.version || ' ' || (i.deadline_at - i.state_entered_at) FROM steward.history h "
        "JOIN steward.instances i USING (process, key) WHERE key = $1 AND "
        "h.event_type = 'PaymentCaptured'",
        "K1", "2 00:00:02", 30);
    const char *inspect[] = {NULL, "inspect", process, "K1", "--database", w.db_url, NULL};
    tl_output_t o = tl_steward(inspect, NULL);
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "operator:upgrade") &&
                      tl_contains(o.out, "by alice: the deadline was wrong"),
                  "inspect: %s", o.out);
    tl_output_free(&o);
    json_decref(again);
    json_decref(real);
    json_decref(dry);
}
END_TEST

START_TEST(a_shortened_deadline_fires_after_the_upgrade)
{
    world_start("upg_short", "1h", "1h");
    send_event("orders", "OrderPlaced", "K1");
    wait_sql("SELECT state FROM steward.instances WHERE key = $1", "K1", "awaiting_payment", 30);
    write_version("2", "15s", "1h", "awaiting_dispatch");
    reload(process, "2");
    json_t *done = upgrade_json(process, TW_LIST("--to", "2"));
    ck_assert_int_eq(int_of(done, "moved"), 1);
    ck_assert_int_eq(int_of(done, "due_at_once"), 0);
    ck_assert_int_eq(int_of(entry(done, "deadlines", "K1"), "change_ms"), 15000 - 3600000);
    json_decref(done);
    expect_sql("SELECT count(*) FROM steward.alerts", NULL, "0");
    /* It fires at the entry + 15s, after the upgrade. */
    wait_sql("SELECT count(*) FROM steward.alerts WHERE key = $1 AND kind = 'deadline'", "K1", "1",
             40);
    expect_sql("SELECT (a.deadline_at = i.state_entered_at + interval '15 s')::text || ' ' || "
               "(a.opened_at > h.recorded_at)::text || ' ' || (a.details->>'deadline') FROM "
               "steward.alerts a JOIN steward.instances i USING (process, key) JOIN "
               "steward.history h USING (process, key) WHERE key = $1 AND "
               "h.event_type = 'operator:upgrade'",
               "K1", "true true 15s");
}
END_TEST

/* ---- a state renamed ------------------------------------------------------------------------- */

/* Refused: exit `status` with `needle` in stderr, nothing moved. */
static void expect_refused(tl_output_t o, int status, const char *needle)
{
    ck_assert_msg(o.status == status && tl_contains(o.err, needle), "exit %d (expected %d): %s",
                  o.status, status, o.err);
    tl_output_free(&o);
    expect_sql("SELECT count(*) FROM steward.history WHERE outcome = 'operator'", NULL, "0");
}

START_TEST(a_renamed_state_must_be_mapped_and_a_third_version_takes_both)
{
    world_start("upg_renamed", "1h", "1h");
    send_event("orders", "OrderPlaced", "K1"); /* v1, awaiting_payment */
    send_event("orders", "OrderPlaced", "K2"); /* v1, awaiting_dispatch */
    send_event("payments", "PaymentCaptured", "K2");
    send_event("orders", "OrderPlaced", "K6"); /* v1, awaiting_dispatch: finished below */
    send_event("payments", "PaymentCaptured", "K6");
    wait_sql("SELECT count(*) FROM steward.instances WHERE state = 'awaiting_dispatch'", NULL, "2",
             30);
    write_version("2", "30m", "1h", "awaiting_dispatch");
    reload(process, "2");
    send_event("orders", "OrderPlaced", "K3"); /* v2, awaiting_payment */
    send_event("orders", "OrderPlaced", "K4"); /* v2, awaiting_dispatch */
    send_event("payments", "PaymentCaptured", "K4");
    wait_sql("SELECT count(*) FROM steward.instances WHERE version = 2 AND state = "
             "'awaiting_dispatch'",
             NULL, "1", 30);
    write_version("3", "1h", "1h", "packing");
    reload(process, "3");
    expect_sql("SELECT string_agg(key || ' ' || version, ', ' ORDER BY key) FROM "
               "steward.instances",
               NULL, "K1 1, K2 1, K3 2, K4 2, K6 1");

    expect_refused(UPGRADE("--to", "3"), 1,
                   "version 3 of upgrade_order has no state "
                   "awaiting_dispatch");
    expect_refused(UPGRADE("--to", "3", "--dry-run"), 1, "--map awaiting_dispatch=STATE");
    expect_refused(UPGRADE("--to", "3", "--map", "awaiting_dispatch=completed"), 1,
                   "--allow-terminal");
    expect_refused(UPGRADE("--to", "3", "--map", "nowhere=packing"), 2,
                   "no version being upgraded has a state nowhere");
    expect_refused(UPGRADE("--to", "3", "--map", "awaiting_dispatch=nowhere"), 2,
                   "version 3 of upgrade_order has no state nowhere");
    expect_refused(UPGRADE("--to", "3", "--map", "awaiting_dispatch"), 2, "expected OLD=NEW");
    expect_refused(UPGRADE("--to", "9"), 1, "version 9 of upgrade_order is not recorded");
    expect_refused(UPGRADE("--to", "2", "--from-version", "2"), 2, "not older than --to 2");
    expect_refused(UPGRADE("--to", "3", "--state", "awaiting_paymnt"), 2,
                   "--state awaiting_paymnt");

    /* Into a terminal state when allowed: K6 finishes. */
    json_t *doc = upgrade_json(process, TW_LIST("--to", "3", "--key", "K6", "--map",
                                                "awaiting_dispatch=completed", "--allow-terminal"));
    ck_assert_int_eq(int_of(doc, "moved"), 1);
    json_decref(doc);
    expect_sql("SELECT version || ' ' || state || ' ' || status FROM steward.instances WHERE "
               "key = $1",
               "K6", "3 completed success");

    /* --state selects: awaiting_dispatch needs no target then. */
    doc = upgrade_json(process,
                       TW_LIST("--to", "3", "--from-version", "1", "--state", "awaiting_payment"));
    ck_assert_int_eq(int_of(doc, "moved"), 1);
    ck_assert_ptr_nonnull(
        tl_json_find(json_object_get(doc, "states"), "from_state", "awaiting_payment"));
    json_decref(doc);
    /* The rest of version 1, then version 2, the map given twice over. */
    doc = upgrade_json(process, TW_LIST("--to", "3", "--from-version", "1", "--map",
                                        "awaiting_dispatch=packing", "--map",
                                        "awaiting_payment=awaiting_payment"));
    ck_assert_int_eq(int_of(doc, "moved"), 1);
    json_t *row = json_array_get(json_object_get(doc, "states"), 0);
    ck_assert_int_eq(int_of(row, "from_version"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(row, "to_state")), "packing");
    json_decref(doc);
    doc = upgrade_json(process, TW_LIST("--to", "3", "--map", "awaiting_dispatch=packing"));
    ck_assert_int_eq(int_of(doc, "moved"), 2);
    json_decref(doc);
    expect_sql("SELECT string_agg(key || ' ' || version || ' ' || state, ', ' ORDER BY key) FROM "
               "steward.instances",
               NULL,
               "K1 3 awaiting_payment, K2 3 packing, K3 3 awaiting_payment, K4 3 packing, K6 3 "
               "completed");
    expect_sql(
        "SELECT string_agg(key || ' ' || from_state || '->' || to_state || ' ' || "
        "regexp_replace(detail, '[:;].*', ''), ', ' ORDER BY key) FROM steward.history WHERE "
        "event_type = 'operator:upgrade'",
        NULL,
        "K1 awaiting_payment->awaiting_payment from version 1 (awaiting_payment) to "
        "version 3 (awaiting_payment), K2 awaiting_dispatch->packing from version 1 "
        "(awaiting_dispatch) to version 3 (packing), K3 awaiting_payment->awaiting_payment "
        "from version 2 (awaiting_payment) to version 3 (awaiting_payment), K4 "
        "awaiting_dispatch->packing from version 2 (awaiting_dispatch) to version 3 "
        "(packing), K6 awaiting_dispatch->completed from version 1 (awaiting_dispatch) to "
        "version 3 (completed)");
    /* The renamed state takes v3's events. */
    send_event("shipping", "ShipmentDispatched", "K2");
    wait_sql("SELECT outcome || ' ' || version || ' ' || from_state || ' ' || to_state FROM "
             "steward.history WHERE key = $1 AND event_type = 'ShipmentDispatched'",
             "K2", "advanced 3 packing completed", 30);
}
END_TEST

/* ---- a crash between batches ----------------------------------------------------------------- */

START_TEST(killed_between_batches_it_finishes_when_run_again)
{
    world_start("upg_crash", "1h", "1h");
    const char *keys[] = {"K1", "K2", "K3", "K4", "K5", "K6", "K7"};
    for (size_t i = 0; i < 7; i++)
        send_event("orders", "OrderPlaced", keys[i]);
    wait_sql("SELECT count(*) FROM steward.instances", NULL, "7", 30);
    write_version("2", "2h", "1h", "awaiting_dispatch");
    reload(process, "2");
    json_t *dry = upgrade_json(process, TW_LIST("--to", "2", "--batch", "2", "--dry-run"));
    ck_assert_int_eq(int_of(dry, "moved"), 7);

    /* Killed once its second batch committed. */
    tl_output_t o =
        upgrade_env(process, TW_LIST("STEWARD_FAILPOINTS=upgrade.between_batches=crash@2"),
                    TW_LIST("--to", "2", "--batch", "2"));
    ck_assert_msg(o.status == 128 + SIGKILL, "upgrade under the failpoint: exit %d: %s", o.status,
                  o.err);
    ck_assert_msg(tl_contains(o.err, "upgrade.between_batches") ||
                      tl_contains(o.out, "upgrade.between_batches"),
                  "the crash does not name the failpoint: %s %s", o.out, o.err);
    tl_output_free(&o);
    expect_sql("SELECT count(*) FILTER (WHERE version = 2) || ' ' || (SELECT count(*) FROM "
               "steward.history WHERE event_type = 'operator:upgrade') FROM steward.instances",
               NULL, "4 4");

    json_t *rest = upgrade_json(process, TW_LIST("--to", "2", "--batch", "2"));
    ck_assert_int_eq(int_of(rest, "moved"), 3);
    json_decref(rest);
    /* Every instance moved once, and ends where the dry run said. */
    expect_sql("SELECT count(*) FILTER (WHERE version = 2) || ' ' || (SELECT count(DISTINCT key) "
               "FROM steward.history WHERE event_type = 'operator:upgrade') || ' ' || (SELECT "
               "count(*) FROM steward.history WHERE event_type = 'operator:upgrade') FROM "
               "steward.instances",
               NULL, "7 7 7");
    json_t *d;
    size_t i;
    json_array_foreach(json_object_get(dry, "deadlines"), i, d)
    {
        const char *key = json_string_value(json_object_get(d, "key"));
        expect_sql("SELECT steward.rfc3339(deadline_at) FROM steward.instances WHERE key = $1", key,
                   json_string_value(json_object_get(d, "after")));
    }
    ck_assert_int_eq(json_array_size(json_object_get(dry, "deadlines")), 7);
    json_decref(dry);
}
END_TEST

/* ---- racing an event ---------------------------------------------------------------------- */

START_TEST(an_upgrade_waits_for_the_instance_lock_and_agrees_with_the_event)
{
    world_start("upg_race", "1h", "1h");
    send_event("orders", "OrderPlaced", "K1");
    wait_sql("SELECT state FROM steward.instances WHERE key = $1", "K1", "awaiting_payment", 30);
    write_version("2", "2h", "2h", "awaiting_dispatch");
    reload(process, "2");

    /* Hold the instance's lock as a batch would. */
    PGconn *holder = tl_hold_instance_lock(w.db_url, process, "K1");
    char *log = tl_write_file(w.dir, "upgrade.log", "");
    const char *argv[] = {NULL,    "upgrade", process, "--to",       "2",      "--reason",
                          "fixed", "--actor", "carol", "--database", w.db_url, NULL};
    int pid = tl_steward_spawn(argv, NULL, log);
    tl_wait_lock_waiters(w.conn, "steward upgrade", 1, 30,
                         "steward upgrade is not waiting for the instance's lock");
    send_event("payments", "PaymentCaptured", "K1");
    tl_wait_lock_waiters(w.conn, NULL, 2, 30,
                         "the batch with the payment is not waiting for the instance's lock");
    tl_release_instance_lock(holder, process, "K1");
    int rc = tl_stop(pid, 0, 30);
    char *out = tl_read_file(log);
    ck_assert_msg(rc == 0, "upgrade exit %d: %s", rc, out);
    free(out);
    wait_sql("SELECT (SELECT version || ' ' || state FROM steward.instances WHERE key = $1) || ' ' "
             "|| (SELECT count(*) FROM steward.history WHERE key = $1 AND event_type = "
             "'PaymentCaptured')",
             "K1", "2 awaiting_dispatch 1", 30);
    /* Whichever went first, the other found what it left: the payment
     * judged on version 1 and then moved in awaiting_dispatch, or judged
     * on version 2 after the upgrade moved awaiting_payment. */
    char *order = tw_scalar(&w,
                            "SELECT CASE WHEN p.id < u.id "
                            "  THEN 'event first ' || (p.version = 1 AND "
                            "    u.from_state = 'awaiting_dispatch') "
                            "  ELSE 'upgrade first ' || (p.version = 2 AND "
                            "    u.from_state = 'awaiting_payment') END "
                            "FROM steward.history p, steward.history u WHERE p.key = $1 AND "
                            "u.key = $1 AND p.event_type = 'PaymentCaptured' AND "
                            "p.outcome = 'advanced' AND u.event_type = 'operator:upgrade'",
                            TW_LIST("K1"));
    ck_assert_msg(order != NULL && tl_contains(order, "true"), "order: %s", order);
    free(order);
    free(log);
}
END_TEST

/* An upgrade in batches of one, held up between them, while payments for
 * the same instances come in: every event has one history row, judged on
 * the version the instance had when it was judged, and the upgrade moved
 * each instance from the state the event left. */
START_TEST(events_during_an_upgrade_in_batches_are_each_judged_once_on_the_version_found)
{
    world_start("upg_batches", "1h", "1h");
    enum { N = 12 };
    char keys[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "R%02d", i);
        send_event("orders", "OrderPlaced", keys[i]);
    }
    wait_sql("SELECT count(*) FROM steward.instances WHERE state = 'awaiting_payment'", NULL, "12",
             30);
    write_version("2", "2h", "3h", "awaiting_dispatch");
    reload(process, "2");

    char *log = tl_write_file(w.dir, "upgrade.log", "");
    const char *argv[] = {NULL,       "upgrade", process,   "--to",  "2",          "--batch", "1",
                          "--reason", "fixed",   "--actor", "carol", "--database", w.db_url,  NULL};
    int pid = tl_steward_spawn(
        argv, TW_LIST("STEWARD_FAILPOINTS=upgrade.between_batches=pause(400)"), log);
    /* Once the upgrade has begun, a payment for every instance, spread
     * over the batches. */
    wait_sql("SELECT count(*) > 0 FROM steward.history WHERE event_type = 'operator:upgrade'", NULL,
             "t", 30);
    for (int i = 0; i < N; i++) {
        send_event("payments", "PaymentCaptured", keys[N - 1 - i]);
        usleep(250 * 1000);
    }
    int rc = tl_stop(pid, 0, 60);
    char *out = tl_read_file(log);
    ck_assert_msg(rc == 0, "upgrade exit %d: %s", rc, out);
    free(out);
    free(log);
    wait_sql("SELECT count(*) FROM steward.history WHERE event_type = 'PaymentCaptured'", NULL,
             "12", 30);
    /* Both orders happened: some payments before the move, some after. */
    char *mix = tw_scalar(&w,
                          "SELECT count(*) FILTER (WHERE version = 1) > 0 AND count(*) FILTER "
                          "(WHERE version = 2) > 0 FROM steward.history WHERE event_type = "
                          "'PaymentCaptured'",
                          NULL);
    ck_assert_msg(mix != NULL && strcmp(mix, "t") == 0, "the payments did not race the upgrade: %s",
                  mix);
    free(mix);
    /* One row per event id, one move per instance. */
    expect_sql("SELECT count(*) || ' ' || count(DISTINCT event_id) FROM steward.history WHERE "
               "event_type = 'PaymentCaptured' AND outcome = 'advanced'",
               NULL, "12 12");
    expect_sql("SELECT count(*) || ' ' || count(DISTINCT key) FROM steward.history WHERE "
               "event_type = 'operator:upgrade'",
               NULL, "12 12");
    /* Each payment's version is the instance's when it was judged: 1 and
     * then moved from awaiting_dispatch, or 2 after the move of
     * awaiting_payment; the deadline is v2's awaiting_dispatch either way. */
    expect_sql("SELECT count(*) FROM steward.history p JOIN steward.history u USING (process, "
               "key) JOIN steward.instances i USING (process, key) WHERE p.event_type = "
               "'PaymentCaptured' AND u.event_type = 'operator:upgrade' AND i.version = 2 AND "
               "i.state = 'awaiting_dispatch' AND i.deadline_at - i.state_entered_at = "
               "interval '3 h' AND CASE WHEN p.id < u.id THEN p.version = 1 AND u.from_state = "
               "'awaiting_dispatch' AND u.detail LIKE 'from version 1 (awaiting_dispatch)%' "
               "ELSE p.version = 2 AND u.from_state = 'awaiting_payment' AND u.detail LIKE "
               "'from version 1 (awaiting_payment)%' END",
               NULL, "12");
}
END_TEST

/* ---- promotion ---------------------------------------------------------------------------- */

/* "KEY:TYPE:TOKEN" of every command on topic `name` (partition 0), in
 * order, read to its high watermark. */
static char *commands_on(const char *name)
{
    char kerr[512], *topic = tw_topic(&w, name), *group = tl_unique("upgrade.reader");
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "enable.auto.commit", "false", kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
    ck_assert_msg(rk != NULL, "consumer: %s", kerr);
    int64_t low = 0, high = 0;
    ck_assert_int_eq(rd_kafka_query_watermark_offsets(rk, topic, 0, &low, &high, 10000),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    ck_assert_int_eq(rd_kafka_assign(rk, list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    char *out = calloc(1, 4096);
    int64_t next = low;
    for (int polls = 0; next < high && polls < 300; polls++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            rd_kafka_headers_t *h = NULL;
            const void *type = NULL, *token = NULL;
            size_t type_len = 0, token_len = 0;
            if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                rd_kafka_header_get_last(h, "ce_type", &type, &type_len);
                rd_kafka_header_get_last(h, "ce_stewardtoken", &token, &token_len);
            }
            size_t len = strlen(out);
            snprintf(out + len, 4096 - len, "%s%.*s:%.*s:%.*s", len > 0 ? " " : "",
                     (int) m->key_len, (const char *) m->key, (int) type_len,
                     type != NULL ? (const char *) type : "", (int) token_len,
                     token != NULL ? (const char *) token : "");
            next = m->offset + 1;
        }
        rd_kafka_message_destroy(m);
    }
    ck_assert_msg(next >= high, "read %s to %lld of %lld", name, (long long) next,
                  (long long) high);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    free(group);
    free(topic);
    return out;
}

START_TEST(a_promotion_sends_the_current_command_only_when_asked)
{
    process = "active_order";
    tw_init(&w, "upg_promote");
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    ck_assert_int_eq(mkdir(defs, 0755), 0);
    free(tw_write_template(&w, "tests/data/definitions/active_order.json.in", "defs/v1.json",
                           TW_LIST("@V@", "1", "@MODE@", "shadow", "@D1@", "1h")));
    tw_create_topics(&w,
                     TW_LIST("orders", "stock", "picking", "payments", "stock-commands",
                             "pick-commands", "payment-commands"),
                     1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts =
        json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}}", "scheduler", "interval",
                  "200ms", "grace", "200ms", "http", "listen", "", "routes", "default", "type",
                  "log", "kafka", "topic.metadata.refresh.interval.ms", "1000");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    tw_start(&w, NULL, false);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", TW_LIST(w.group),
            "4", 60, "partitions claimed");
    send_event("orders", "OrderPlaced", "P1");
    send_event("orders", "OrderPlaced", "P2");
    wait_sql("SELECT count(*) FROM steward.instances WHERE state = 'reserving'", NULL, "2", 30);
    free(tw_write_template(&w, "tests/data/definitions/active_order.json.in", "defs/v2.json",
                           TW_LIST("@V@", "2", "@MODE@", "active", "@D1@", "1h")));
    reload(process, "2");

    /* With --send-current: P1's ReserveStock now, the step's first send. */
    json_t *dry =
        upgrade_json(process, TW_LIST("--to", "2", "--key", "P1", "--send-current", "--dry-run"));
    json_t *real = upgrade_json(process, TW_LIST("--to", "2", "--key", "P1", "--send-current"));
    ck_assert_int_eq(int_of(real, "promoted"), 1);
    ck_assert_int_eq(int_of(real, "commands_queued"), 1);
    json_t *cmd = entry(real, "commands", "P1");
    ck_assert_str_eq(json_string_value(json_object_get(cmd, "type")), "ReserveStock");
    ck_assert_int_eq(int_of(cmd, "step"), 1);
    ck_assert_int_eq(int_of(cmd, "attempt"), 0);
    ck_assert_int_eq(int_of(cmd, "token"), 1);
    /* The send starts the step's deadline: counted from the run's clock,
     * later than the dry run's; all else the dry run said. */
    json_t *dd = json_object_get(dry, "deadlines"), *rd = json_object_get(real, "deadlines");
    ck_assert_int_eq(json_array_size(dd), 1);
    ck_assert_int_eq(json_array_size(rd), 1);
    json_t *d0 = json_array_get(dd, 0), *r0 = json_array_get(rd, 0);
    ck_assert_int_ge(int_of(r0, "change_ms"), int_of(d0, "change_ms"));
    ck_assert_int_lt(int_of(r0, "change_ms"), int_of(d0, "change_ms") + 30000);
    ck_assert_int_eq(json_object_del(d0, "after") + json_object_del(d0, "change_ms") +
                         json_object_del(r0, "after") + json_object_del(r0, "change_ms"),
                     0);
    expect_same_answer(dry, real);
    json_decref(dry);
    json_decref(real);
    expect_sql("SELECT state || ' ' || attempt || ' ' || token FROM steward.commands WHERE "
               "key = $1",
               "P1", "reserving 0 1");

    /* Without it: P2 is promoted and nothing goes now. */
    dry = upgrade_json(process, TW_LIST("--to", "2", "--dry-run"));
    ck_assert_int_eq(int_of(dry, "moved"), 1);
    ck_assert_int_eq(int_of(dry, "promoted"), 1);
    ck_assert_int_eq(int_of(dry, "commands_queued"), 0);
    real = upgrade_json(process, TW_LIST("--to", "2"));
    expect_same_answer(dry, real);
    json_decref(dry);
    json_decref(real);
    expect_sql("SELECT count(*) FROM steward.commands WHERE key = $1", "P2", "0");
    expect_sql("SELECT string_agg(detail, '') FROM steward.history WHERE key = $1 AND "
               "event_type = 'operator:upgrade'",
               "P2",
               "from version 1 (reserving) to version 2 (reserving); promoted to active: nothing "
               "sent now, the next state's command on entry");

    /* The next state P2 enters sends its own command; P1's reply, with its
     * token, moves it on and sends the next. */
    send_event("stock", "StockReserved", "P2");
    char value[256], *stock = tw_topic(&w, "stock");
    snprintf(
        value, sizeof value,
        "{\"type\":\"StockReserved\",\"id\":\"r-P1\",\"order_id\":\"P1\",\"steward_token\":1}");
    tl_producer_t *p = tl_producer_new();
    tl_produce(p, stock, -1, value, -1, NULL, 0);
    tl_producer_free(p);
    free(stock);
    wait_sql("SELECT string_agg(key || ' ' || state || ' ' || token, ', ' ORDER BY key) FROM "
             "steward.commands WHERE sent_at IS NOT NULL AND state = 'picking'",
             NULL, "P1 picking 2, P2 picking 1", 30);
    wait_sql("SELECT count(*) FROM steward.commands WHERE sent_at IS NULL", NULL, "0", 30);
    /* On the command topics: one ReserveStock (P1's, the only current
     * step sent), one PickOrder each. */
    char *reserve = commands_on("stock-commands"), *pick = commands_on("pick-commands");
    ck_assert_str_eq(reserve, "P1:ReserveStock:1");
    ck_assert_msg(strcmp(pick, "P1:PickOrder:2 P2:PickOrder:1") == 0 ||
                      strcmp(pick, "P2:PickOrder:1 P1:PickOrder:2") == 0,
                  "pick-commands: %s", pick);
    free(reserve);
    free(pick);
    process = "upgrade_order";
}
END_TEST

Suite *upgrade_suite(void);
Suite *upgrade_suite(void)
{
    Suite *s = suite_create("upgrade");
    TCase *tc = tcase_create("upgrade");
    tcase_set_timeout(tc, 150);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, a_deadline_fixed_resolves_its_alerts_as_the_dry_run_said);
    tcase_add_test(tc, a_shortened_deadline_fires_after_the_upgrade);
    tcase_add_test(tc, a_renamed_state_must_be_mapped_and_a_third_version_takes_both);
    tcase_add_test(tc, killed_between_batches_it_finishes_when_run_again);
    tcase_add_test(tc, an_upgrade_waits_for_the_instance_lock_and_agrees_with_the_event);
    tcase_add_test(tc,
                   events_during_an_upgrade_in_batches_are_each_judged_once_on_the_version_found);
    tcase_add_test(tc, a_promotion_sends_the_current_command_only_when_asked);
    suite_add_tcase(s, tc);
    return s;
}
