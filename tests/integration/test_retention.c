/*
 * test_retention - old rows go, and only old rows, on a real PostgreSQL.
 *
 * The database is made to look as if Steward had run for two months: the
 * history partitions of eight weeks ago are created by a retention pass
 * whose clock says so (the clock is an argument), old history rows land in
 * them, and rejected, outbox, alerts and ownership_log rows get old
 * timestamps. Beside them: recent rows, and old rows that must stay (an
 * undelivered outbox row, an open alert, a resolved alert an undelivered
 * outbox row still refers to, history recorded ten days ago in the DEFAULT
 * partition).
 *
 *   prune_dry_run_then_prune  `steward prune --dry-run` counts exactly what
 *                             would go and changes nothing; `steward prune`
 *                             removes it, drops the old partitions whole,
 *                             moves this week's rows out of DEFAULT into
 *                             their new partition, keeps the rest; a second
 *                             prune finds nothing
 *   run_applies_retention     `steward run` with retention.interval=1s does
 *                             the same on its own, then stops cleanly
 *   prune_finished_instances  retention.instances is off unless set; set,
 *                             a finished instance older than it goes, and
 *                             not one that is open, recent, held by a
 *                             batch (until released), or has an open alert
 *                             or an unsent command (until they close);
 *                             `steward inspect` of a removed one says so
 *   prune_usage               unknown flags and bad retention values exit 2
 */
#include "common/db.h"
#include "manager/timing/retention.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define DAY_MS 86400000LL

static const char *db_url;
static PGconn *conn;

static long long wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static long long scalar_ll(const char *sql)
{
    char *v = tl_db_scalar(conn, sql, 0, NULL);
    long long n = v != NULL ? atoll(v) : -1;
    free(v);
    return n;
}

static void setup(void)
{
    db_url = tl_db_create("retention");
    tl_migrate(db_url);
    conn = tl_db_connect(db_url);
}

static void teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

/* Each history row names its key; the rows of one time share a key. */
static void add_history(const char *key, const char *age)
{
    const char *params[2] = {key, age};
    PGresult *res = PQexecParams(
        conn,
        "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
        "  partition, \"offset\", event_time, from_state, to_state, outcome, recorded_at, "
        "  replica, epoch) "
        "SELECT 'p', $1, 1, $1 || '-' || g, 'E', 't', 0, g, now() - $2::interval, NULL, 's', "
        "  'started', now() - $2::interval, 'test', 1 FROM generate_series(1, 3) g",
        2, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "history: %s", PQerrorMessage(conn));
    PQclear(res);
}

static const char seed_sql[] =
    "INSERT INTO steward.rejected (consumer_group, topic, partition, \"offset\", reason, "
    "  recorded_at, replica, epoch) VALUES "
    "('g', 't', 0, 1, 'old', now() - interval '20 days', 'test', 1), "
    "('g', 't', 0, 2, 'old', now() - interval '15 days', 'test', 1), "
    "('g', 't', 0, 3, 'new', now() - interval '1 day', 'test', 1);"

    "INSERT INTO steward.alerts (id, kind, owner, summary, dedup_key, opened_at, resolved_at) "
    "VALUES "
    /* resolved long ago, nothing refers to it: goes */
    "(1, 'blind', 'ops', 'gone', 'a1', now() - interval '50 days', now() - interval '40 days'), "
    /* resolved long ago, its delivered notification old too: both go */
    "(2, 'blind', 'ops', 'gone', 'a2', now() - interval '50 days', now() - interval '40 days'), "
    /* resolved long ago, its notification never delivered: stays */
    "(3, 'blind', 'ops', 'kept', 'a3', now() - interval '50 days', now() - interval '40 days'), "
    /* open for two months: stays */
    "(4, 'blind', 'ops', 'kept', 'a4', now() - interval '60 days', NULL), "
    /* resolved yesterday: stays */
    "(5, 'blind', 'ops', 'kept', 'a5', now() - interval '3 days', now() - interval '1 day');"

    "INSERT INTO steward.outbox (kind, destination, alert_id, payload, created_at, "
    "  delivered_at, failed_at) VALUES "
    "('notification', 'log', NULL, '{}', now() - interval '12 days', "
    "  now() - interval '10 days', NULL), "
    "('notification', 'log', NULL, '{}', now() - interval '12 days', NULL, "
    "  now() - interval '9 days'), "
    "('notification', 'log', 2, '{}', now() - interval '40 days', "
    "  now() - interval '39 days', NULL), "
    /* undelivered for two months: stays, and keeps alert 3 */
    "('notification', 'log', 3, '{}', now() - interval '60 days', NULL, NULL), "
    /* delivered yesterday: stays */
    "('notification', 'log', NULL, '{}', now() - interval '1 day', now() - interval '1 day', "
    "  NULL);"

    "INSERT INTO steward.ownership_log (consumer_group, topic, partition, action, replica, "
    "  epoch, at) VALUES "
    "('g', 't', 0, 'claim', 'r', 1, now() - interval '45 days'), "
    "('g', 't', 0, 'release', 'r', 1, now() - interval '31 days'), "
    "('g', 't', 0, 'claim', 'r', 2, now() - interval '2 days'), "
    /* a partition's latest entry stays however old: its owner is known */
    "('g', 't', 1, 'claim', 'r', 1, now() - interval '40 days');";

/*
 * Two months of Steward: partitions made eight weeks ago, history in
 * them, old rows everywhere. Returns the name of the oldest week's
 * partition (static).
 */
static const char *seed(void)
{
    static char oldest[64];
    retention_config_t keep_all = {{0}};
    retention_result_t r;
    bool skipped;
    char errstr[512];
    PGconn *c = tl_db_connect(db_url);
    long long then = wall_ms() - 56 * DAY_MS;
    ck_assert_int_eq(
        retention_pass(c, &keep_all, then, false, true, NULL, &skipped, &r, errstr, sizeof errstr),
        ERR_OK);
    ck_assert_uint_eq(r.n_created, RETENTION_AHEAD + 1);
    retention_week_name(retention_week_start(then), oldest, sizeof oldest);
    ck_assert_str_eq(r.created[0], oldest);
    retention_result_clear(&r);
    PQfinish(c);

    add_history("h55", "55 days"); /* the oldest week */
    add_history("h45", "45 days"); /* a later old week */
    add_history("h32", "32 days"); /* no week made for it: DEFAULT, and old */
    add_history("h10", "10 days"); /* DEFAULT, kept */
    add_history("h0", "1 minute"); /* DEFAULT until this week is made */
    tl_db_exec(conn, seed_sql);

    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM steward.history WHERE key = 'h55' AND tableoid = "
             "'steward.%s'::regclass",
             oldest);
    ck_assert_int_eq(scalar_ll(sql), 3);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.history_default"), 9);
    return oldest;
}

/* What must be left after the pass, whoever ran it. */
static void assert_pruned(const char *oldest)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT to_regclass('steward.%s') IS NULL", oldest);
    char *gone = tl_db_scalar(conn, sql, 0, NULL);
    ck_assert_str_eq(gone, "t");
    free(gone);
    /* no range partition ends before the cutoff any more */
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM pg_inherits i JOIN pg_class c "
                               "ON c.oid = i.inhrelid WHERE i.inhparent = "
                               "'steward.history'::regclass AND c.relname < 'history_p' || "
                               "to_char(now() - interval '37 days', 'YYYYMMDD') "
                               "AND c.relname LIKE 'history_p%'"),
                     0);
    char *keys = tl_db_scalar(
        conn, "SELECT string_agg(DISTINCT key, ',' ORDER BY key) FROM steward.history", 0, NULL);
    ck_assert_str_eq(keys, "h0,h10");
    free(keys);
    /* this week's rows left DEFAULT for their partition */
    char *where = tl_db_scalar(conn,
                               "SELECT string_agg(DISTINCT tableoid::regclass::text, ',') "
                               "FROM steward.history WHERE key = 'h0'",
                               0, NULL);
    ck_assert_msg(strncmp(where, "steward.history_p", 17) == 0, "h0 is in %s", where);
    free(where);

    char *rejected =
        tl_db_scalar(conn, "SELECT string_agg(reason, ',') FROM steward.rejected", 0, NULL);
    ck_assert_str_eq(rejected, "new");
    free(rejected);
    char *alerts = tl_db_scalar(
        conn, "SELECT string_agg(id::text, ',' ORDER BY id) FROM steward.alerts", 0, NULL);
    ck_assert_str_eq(alerts, "3,4,5");
    free(alerts);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.outbox"), 2);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.outbox WHERE alert_id = 3 "
                               "AND delivered_at IS NULL"),
                     1);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.ownership_log"), 2);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.ownership_log WHERE partition = 1"),
                     1);
}

static json_t *prune_json(const char *extra)
{
    const char *argv[] = {NULL, "prune", "--json", "--database", db_url, extra, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "prune %s: %s", extra ? extra : "", o.err);
    json_error_t jerr;
    json_t *doc = json_loads(o.out, 0, &jerr);
    ck_assert_msg(doc != NULL, "not JSON (%s): %s", jerr.text, o.out);
    tl_output_free(&o);
    return doc;
}

static long long rows_of(const json_t *doc, const char *table)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(doc, "tables"), i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "table")), table) == 0)
            return (long long) json_integer_value(json_object_get(row, "rows"));
    }
    ck_abort_msg("no row for %s", table);
    return -1;
}

static const char state_sql[] =
    "SELECT (SELECT count(*) FROM steward.history) || '/' || "
    "  (SELECT count(*) FROM steward.rejected) || '/' || (SELECT count(*) FROM steward.outbox) "
    "  || '/' || (SELECT count(*) FROM steward.alerts) || '/' || "
    "  (SELECT count(*) FROM steward.ownership_log) || '/' || "
    "  (SELECT count(*) FROM pg_inherits WHERE inhparent = 'steward.history'::regclass)";

START_TEST(prune_dry_run_then_prune)
{
    const char *oldest = seed();
    char *before = tl_db_scalar(conn, state_sql, 0, NULL);

    json_t *dry = prune_json("--dry-run");
    ck_assert(json_is_true(json_object_get(dry, "dry_run")));
    /* h55 and h45 by partition, h32 from DEFAULT */
    ck_assert_int_eq(rows_of(dry, "history"), 9);
    ck_assert_int_eq(rows_of(dry, "rejected"), 2);
    ck_assert_int_eq(rows_of(dry, "outbox"), 3);
    /* alert 2 counts: its only outbox row goes first */
    ck_assert_int_eq(rows_of(dry, "alerts"), 2);
    ck_assert_int_eq(rows_of(dry, "ownership_log"), 2);
    char *after_dry = tl_db_scalar(conn, state_sql, 0, NULL);
    ck_assert_str_eq(after_dry, before);
    json_decref(dry);

    /* the text form says the same */
    const char *argv[] = {NULL, "prune", "--dry-run", "--database", db_url, NULL};
    tl_output_t text = tl_steward(argv, NULL);
    ck_assert_int_eq(text.status, 0);
    ck_assert_msg(tl_contains(text.out, "rejected       keep 14d    would remove 2 rows"),
                  "got: %s", text.out);
    ck_assert_msg(tl_contains(text.out, oldest), "got: %s", text.out);
    tl_output_free(&text);

    json_t *done = prune_json(NULL);
    ck_assert(json_is_false(json_object_get(done, "dry_run")));
    ck_assert_int_eq(rows_of(done, "history"), 9);
    ck_assert_int_eq(rows_of(done, "rejected"), 2);
    ck_assert_int_eq(rows_of(done, "outbox"), 3);
    ck_assert_int_eq(rows_of(done, "alerts"), 2);
    ck_assert_int_eq(rows_of(done, "ownership_log"), 2);
    json_decref(done);
    assert_pruned(oldest);

    json_t *again = prune_json(NULL);
    for (int t = 0; t < RETENTION_N_TABLES; t++)
        ck_assert_int_eq(rows_of(again, retention_table_name((retention_table_t) t)), 0);
    json_decref(again);
    free(before);
    free(after_dry);
}
END_TEST

START_TEST(run_applies_retention)
{
    const char *oldest = seed();
    const char *dir = tl_tmpdir();
    char *log = tl_write_file(dir, "steward.log", "");
    char *prefix = tl_unique("retention");
    char *path = tl_source_path("tests/data/definitions/alert_order.json.in");
    char *text = tl_read_file(path);
    /* topics of our own, never created: intake idles, retention works */
    char *def = tw_fill(text, prefix, TW_LIST("@D1@", "1h", "@D2@", "2h"));
    char *def_path = tl_write_file(dir, "order.json", def);
    const char *argv[] = {NULL,
                          "run",
                          "--database",
                          db_url,
                          "--brokers",
                          tl_kafka_brokers(),
                          "--definitions",
                          def_path,
                          "--group",
                          prefix,
                          "--set",
                          "http.listen=",
                          "--set",
                          "retention.interval=1s",
                          NULL};
    int pid = tl_steward_spawn(argv, NULL, log);

    char *last = NULL;
    if (!tl_db_wait(conn,
                    "SELECT (SELECT count(*) FROM steward.rejected) || '/' || "
                    "(SELECT count(*) FROM steward.alerts) || '/' || "
                    "(SELECT count(*) FROM steward.history)",
                    0, NULL, "1/3/6", 30, &last)) {
        tl_print_tail(log, 4000);
        ck_abort_msg("retention did not run: rejected/alerts/history = %s", last);
    }
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    assert_pruned(oldest);
    char *logged = tl_read_file(log);
    ck_assert_msg(tl_contains(logged, "\"msg\":\"retention pass\""), "log: %s", logged);
    free(logged);
    free(def_path);
    free(def);
    free(text);
    free(path);
    free(prefix);
    free(log);
}
END_TEST

/* Instances of process 'p' version 1, one per case retention.instances
 * weighs; the key says which. */
static const char instances_sql[] =
    "INSERT INTO steward.definitions (process, version, mode, document, checksum) "
    "  VALUES ('p', 1, 'shadow', '{}', 'x');"
    "INSERT INTO steward.instances (process, key, version, state, status, started_at, "
    "  state_entered_at) VALUES "
    "('p', 'done-old', 1, 'shipped', 'success', now() - interval '120 days', "
    "  now() - interval '100 days'), "
    "('p', 'held-old', 1, 'shipped', 'success', now() - interval '120 days', "
    "  now() - interval '100 days'), "
    "('p', 'done-new', 1, 'shipped', 'success', now() - interval '120 days', "
    "  now() - interval '10 days'), "
    /* entered its state long ago, but not finished */
    "('p', 'open-old', 1, 'placed', 'active', now() - interval '200 days', "
    "  now() - interval '200 days'), "
    "('p', 'alerted-old', 1, 'shipped', 'success', now() - interval '120 days', "
    "  now() - interval '100 days'), "
    "('p', 'command-old', 1, 'shipped', 'success', now() - interval '120 days', "
    "  now() - interval '100 days');"
    "INSERT INTO steward.alerts (kind, process, key, owner, summary, dedup_key, opened_at) "
    "  VALUES ('sequence', 'p', 'alerted-old', 'ops', 'open', 'i1', now() - interval '101 days');"
    "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
    "  type, payload, ce_id, created_at) VALUES ('p', 'command-old', 1, 'shipped', 3, 0, 1, "
    "  'cmds', 'Ship', '{}', 'c1', now() - interval '100 days');";

static char *instance_keys(void)
{
    return tl_db_scalar(conn, "SELECT string_agg(key, ',' ORDER BY key) FROM steward.instances", 0,
                        NULL);
}

START_TEST(prune_finished_instances)
{
    tl_db_exec(conn, instances_sql);
    add_history("done-old", "1 day"); /* its history outlives it */
    char *all = instance_keys();

    /* Off unless set: every instance stays. */
    json_t *doc = prune_json(NULL);
    ck_assert_int_eq(rows_of(doc, "instances"), 0);
    json_decref(doc);
    char *keys = instance_keys();
    ck_assert_str_eq(keys, all);
    free(keys);

    const char *dry[] = {NULL,         "prune", "--dry-run",
                         "--json",     "--set", "retention.instances=90d",
                         "--database", db_url,  NULL};
    tl_output_t o = tl_steward(dry, NULL);
    ck_assert_msg(o.status == 0, "prune --dry-run: %s", o.err);
    doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(doc != NULL, "not JSON: %s", o.out);
    ck_assert_int_eq(rows_of(doc, "instances"), 2); /* done-old, held-old */
    json_decref(doc);
    tl_output_free(&o);
    keys = instance_keys();
    ck_assert_str_eq(keys, all);
    free(keys);

    /* A batch holds held-old (intake reads its instances FOR UPDATE). */
    PGconn *batch = tl_db_connect(db_url);
    tl_db_exec(batch, "BEGIN");
    tl_db_exec(batch, "SELECT 1 FROM steward.instances WHERE process = 'p' AND key = 'held-old' "
                      "FOR UPDATE");

    const char *prune[] = {NULL,         "prune", "--set", "retention.instances=90d",
                           "--database", db_url,  NULL};
    o = tl_steward(prune, NULL);
    ck_assert_msg(o.status == 0, "prune: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "instances      keep 90d    removed 1 rows"), "got: %s",
                  o.out);
    tl_output_free(&o);
    keys = instance_keys();
    ck_assert_str_eq(keys, "alerted-old,command-old,done-new,held-old,open-old");
    free(keys);
    const char *inspect[] = {NULL, "inspect", "p", "done-old", "--database", db_url, NULL};
    o = tl_steward(inspect, NULL);
    ck_assert_int_eq(o.status, 1);
    ck_assert_msg(tl_contains(o.err, "no instance done-old of p; its history (3 events kept) "
                                     "shows it started: it finished and was removed since"),
                  "got: %s", o.err);
    tl_output_free(&o);

    /* Released, it goes with the next pass; the open alert and the unsent
     * command still keep theirs. */
    tl_db_exec(batch, "COMMIT");
    PQfinish(batch);
    o = tl_steward(prune, NULL);
    ck_assert_msg(tl_contains(o.out, "removed 1 rows") && o.status == 0, "got: %s%s", o.out, o.err);
    tl_output_free(&o);
    keys = instance_keys();
    ck_assert_str_eq(keys, "alerted-old,command-old,done-new,open-old");
    free(keys);

    /* Resolved, cancelled: nothing holds them any more. */
    tl_db_exec(conn, "UPDATE steward.alerts SET resolved_at = now(), resolution = 'closed'");
    tl_db_exec(conn, "UPDATE steward.commands SET cancelled_at = now(), "
                     "cancel_reason = 'finished'");
    o = tl_steward(prune, NULL);
    ck_assert_msg(o.status == 0, "prune: %s", o.err);
    tl_output_free(&o);
    keys = instance_keys();
    ck_assert_str_eq(keys, "done-new,open-old");
    free(keys);
    free(all);
}
END_TEST

START_TEST(prune_usage)
{
    const char *bogus[] = {NULL, "prune", "--bogus", NULL};
    tl_output_t o = tl_steward(bogus, NULL);
    ck_assert_int_eq(o.status, 2);
    tl_output_free(&o);

    const char *bad[] = {NULL,         "prune", "--set", "retention.history=0s",
                         "--database", db_url,  NULL};
    o = tl_steward(bad, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "retention.history"), "got: %s", o.err);
    tl_output_free(&o);

    /* off keeps a table whole */
    tl_db_exec(conn, "INSERT INTO steward.rejected (consumer_group, topic, partition, \"offset\", "
                     "reason, recorded_at, replica, epoch) VALUES ('g', 't', 0, 1, 'old', "
                     "now() - interval '300 days', 'test', 1)");
    const char *off[] = {NULL,         "prune", "--set", "retention.rejected=off",
                         "--database", db_url,  NULL};
    o = tl_steward(off, NULL);
    ck_assert_msg(o.status == 0, "got: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "keep always"), "got: %s", o.out);
    ck_assert_int_eq(scalar_ll("SELECT count(*) FROM steward.rejected"), 1);
    tl_output_free(&o);
}
END_TEST

Suite *retention_suite(void)
{
    Suite *s = suite_create("retention");
    TCase *tc = tcase_create("retention");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, prune_dry_run_then_prune);
    tcase_add_test(tc, run_applies_retention);
    tcase_add_test(tc, prune_finished_instances);
    tcase_add_test(tc, prune_usage);
    suite_add_tcase(s, tc);
    return s;
}
