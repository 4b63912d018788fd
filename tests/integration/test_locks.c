/*
 * test_locks - instance locks that other sessions, the server's lock table
 * or a pile of expired events cannot turn into a stop.
 *
 *   expiry_locks  the scheduler's own passes (sched_tick) over 3,000
 *                 expired parked events: a pass holds no more instance
 *                 locks than it judges (SCHED_EXPIRY_BATCH), and a pass
 *                 whose expiry fails still checks the partitions (the
 *                 blind alert opens)
 *   lock_budget   3,000 instances in one batch of intake.batch_size
 *                 100000: no transaction holds more instance locks than
 *                 the budget (half the server's lock table over the
 *                 lanes); every event is judged once
 *   resource_refusal
 *                 SQLSTATE class 53 (but 53300) is not transient: a batch
 *                 the server refuses for want of (shared) memory is
 *                 committed in parts, never retried whole for ever, and
 *                 no message is rejected for it
 *   foreign_lock  the reader role (steward migrate --create-roles) holds
 *                 an instance's lock in Steward's namespace, and the old
 *                 single-bigint key of another: the second does not block
 *                 at all; the first is set aside after intake.lock_timeout
 *                 (log line and metric) while the partition's other
 *                 instances are judged; once released, its events are
 *                 judged in order, each once
 */
#include "common/db.h"
#include "definitions/def.h"
#include "manager/sinks/routes.h"
#include "manager/timing/scheduler.h"
#include "manager/intake/store.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tw_world_t w;

static void teardown(void)
{
    tw_teardown(&w);
}

/* A statement-level trigger on steward.history that records, at each
 * insert, how many advisory locks the inserting session holds: what its
 * transaction took so far. */
static void install_lock_probe(PGconn *conn)
{
    tl_db_exec(conn, "CREATE TABLE public.lock_probe (held bigint NOT NULL)");
    tl_db_exec(conn, "CREATE FUNCTION public.lock_probe() RETURNS trigger LANGUAGE plpgsql AS $$ "
                     "BEGIN INSERT INTO public.lock_probe SELECT count(*) FROM pg_locks "
                     "  WHERE locktype = 'advisory' AND pid = pg_backend_pid(); "
                     "RETURN NULL; END $$");
    tl_db_exec(conn, "CREATE TRIGGER lock_probe AFTER INSERT ON steward.history "
                     "FOR EACH STATEMENT EXECUTE FUNCTION public.lock_probe()");
}

/* ---- expiry ------------------------------------------------------------------- */

static const char expiry_def[] =
    "{\"process\": \"locks\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"fulfilment\","
    " \"key\": \"/order_id\", \"reorder_window\": \"1m\","
    " \"events\": {\"OrderPlaced\": {\"topic\": \"locks.orders\"},"
    "            \"PaymentCaptured\": {\"topic\": \"locks.payments\"}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"awaiting_payment\"},"
    " \"states\": {\"awaiting_payment\": {\"deadline\": \"15m\", \"owner\": \"payments\","
    "                                   \"on\": {\"PaymentCaptured\": \"paid\"}},"
    "            \"paid\": {\"terminal\": \"success\"}}}";

#define EXPIRED_ROWS 3000

START_TEST(expiry_holds_no_more_locks_than_it_judges)
{
    memset(&w, 0, sizeof w);
    w.db_url = tl_db_create("expirylocks");
    w.conn = tl_db_connect(w.db_url);
    tl_migrate(w.db_url);

    const char *params[1] = {expiry_def};
    PQclear(
        PQexecParams(w.conn,
                     "INSERT INTO steward.definitions (process, version, mode, document, "
                     "checksum) VALUES ('locks', 1, 'shadow', $1::jsonb, md5(($1::jsonb)::text))",
                     1, NULL, params, NULL, NULL, 0));
    /* Read up to now, but not advanced for an hour: blind. */
    tl_db_exec(w.conn, "INSERT INTO steward.offsets (consumer_group, topic, partition, "
                       "  next_offset, watermark, owner, epoch, updated_at) "
                       "SELECT 'locks', t, 0, 0, now(), 'locks', 1, now() - interval '1 hour' "
                       "FROM unnest(ARRAY['locks.orders', 'locks.payments']) t");
    /* Payments of instances that never started, each of its own instance,
     * all past their reorder window. */
    char seed[1024];
    snprintf(seed, sizeof seed,
             "INSERT INTO steward.parked (process, key, event_id, event_type, topic, partition, "
             "  \"offset\", event_time, payload, expires_at) "
             "SELECT 'locks', 'K' || g, 'pay-' || g, 'PaymentCaptured', 'locks.payments', 0, g, "
             "  now() - interval '2 hours' + g * interval '1 millisecond', "
             "  jsonb_build_object('order_id', 'K' || g), now() - interval '1 hour' "
             "FROM generate_series(1, %d) g",
             EXPIRED_ROWS);
    tl_db_exec(w.conn, seed);

    char *def_path = tl_write_file(tl_tmpdir(), "locks.json", expiry_def);
    def_problems_t problems = {0};
    const char *paths[1] = {def_path};
    def_set_t *defs = def_set_load(paths, 1, &problems, NULL);
    ck_assert_ptr_nonnull(defs);
    char errstr[1024];
    json_t *routes_json = json_pack("{s:[{s:s}]}", "default", "type", "log");
    route_table_t *routes = route_table_new(routes_json, errstr, sizeof errstr);
    json_decref(routes_json);
    ck_assert_msg(routes != NULL, "routes: %s", errstr);
    sched_config_t cfg = {
        .conninfo = w.db_url, .group = "locks", .blind_after_ms = 1000, .blind_owner = "steward"};
    sched_t *sched = sched_new(&cfg, defs, routes, errstr, sizeof errstr);
    ck_assert_msg(sched != NULL, "scheduler: %s", errstr);

    /* Expiry fails (its history insert is refused): the pass still checks
     * the partitions, and says what failed. */
    tl_db_exec(w.conn, "CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       "BEGIN RAISE EXCEPTION 'history refused for the test'; END $$");
    tl_db_exec(w.conn, "CREATE TRIGGER refuse BEFORE INSERT ON steward.history "
                       "FOR EACH STATEMENT EXECUTE FUNCTION public.refuse()");
    sched_stats_t stats;
    ck_assert_int_ne(sched_tick(sched, &stats, errstr, sizeof errstr), ERR_OK);
    ck_assert_msg(tl_contains(errstr, "history refused for the test"), "error: %s", errstr);
    ck_assert_msg(stats.blind, "the failed expiry skipped the blind check");
    ck_assert_int_eq(tw_scalar_long(&w,
                                    "SELECT count(*) FROM steward.alerts WHERE kind = 'blind' "
                                    "AND resolved_at IS NULL",
                                    NULL),
                     1);
    tl_db_exec(w.conn, "DROP TRIGGER refuse ON steward.history");

    /* A pass judges the oldest SCHED_EXPIRY_BATCH and locks no more. */
    install_lock_probe(w.conn);
    ck_assert_msg(sched_tick(sched, &stats, errstr, sizeof errstr) == ERR_OK, "pass: %s", errstr);
    ck_assert_int_eq(stats.expired, SCHED_EXPIRY_BATCH);
    long held = tw_scalar_long(&w, "SELECT max(held) FROM public.lock_probe", NULL);
    ck_assert_msg(held >= 1 && held <= SCHED_EXPIRY_BATCH,
                  "the expiry pass held %ld advisory locks for %d expired rows", held,
                  EXPIRED_ROWS);
    ck_assert_int_eq(tw_scalar_long(&w,
                                    "SELECT count(*) FROM steward.history WHERE "
                                    "outcome = 'violation' AND event_id = 'pay-1'",
                                    NULL),
                     1);
    ck_assert_int_eq(tw_scalar_long(&w, "SELECT count(*) FROM steward.parked", NULL),
                     EXPIRED_ROWS - SCHED_EXPIRY_BATCH);

    sched_free(sched);
    route_table_free(routes);
    def_set_free(defs);
    def_problems_clear(&problems);
    free(def_path);
}
END_TEST

/* ---- worlds with intake ------------------------------------------------------- */

/* The alert_order definition, one partition per topic, a migrated
 * database and config.json with `intake` settings (an object, taken). */
static void world_init(const char *name, json_t *intake)
{
    tw_init(&w, name);
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", "1h", "@D2@", "1h")));
    tw_create_topics(&w, TW_LIST("orders", "payments", "shipping"), 1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "alert_order.json");
    json_t *parts = json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:o}", "scheduler",
                              "interval", "200ms", "grace", "200ms", "http", "listen",
                              "127.0.0.1:0", "routes", "default", "type", "log", "intake", intake);
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
}

static void send_event(tl_producer_t *p, const char *topic, const char *type, const char *key)
{
    char value[256], *t = tw_topic(&w, topic);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"id\":\"%s-%s\",\"order_id\":\"%s\"}", type,
             type, key, key);
    tl_produce(p, t, 0, value, -1, NULL, -1);
    free(t);
}

/* The value of an unlabelled sample in /metrics; -1 when absent. */
static long metric(const char *name)
{
    char url[128];
    long status = 0;
    snprintf(url, sizeof url, "%s/metrics", w.base);
    char *body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    long value = -1;
    size_t len = strlen(name);
    for (const char *line = body; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            value = atol(line + len + 1);
    }
    free(body);
    return value;
}

/* ---- the lock budget ---------------------------------------------------------- */

#define BUDGET_INSTANCES 3000

START_TEST(a_batch_locks_no_more_instances_than_the_budget)
{
    world_init("lockbudget", json_pack("{s:i, s:s}", "batch_size", 100000, "batch_ms", "10s"));
    install_lock_probe(w.conn);
    long table = tw_scalar_long(&w,
                                "SELECT current_setting('max_locks_per_transaction')::bigint * "
                                "(current_setting('max_connections')::bigint + "
                                "current_setting('max_prepared_transactions')::bigint)",
                                NULL);
    /* Half the table over intake's two lanes (intake.transactions). */
    long budget = table / 2 / 2;
    ck_assert_msg(budget < BUDGET_INSTANCES,
                  "the server's lock table (%ld) is too large for "
                  "this test",
                  table);

    /* Read before steward starts, so the whole backlog is one batch. */
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < BUDGET_INSTANCES; i++) {
        char key[32];
        snprintf(key, sizeof key, "B%05d", i);
        send_event(p, "orders", "OrderPlaced", key);
    }
    tl_producer_free(p);
    tw_start(&w, NULL, true);

    char expected[32];
    snprintf(expected, sizeof expected, "%d %d", BUDGET_INSTANCES, BUDGET_INSTANCES);
    tw_wait(&w,
            "SELECT count(*) || ' ' || count(DISTINCT key) FROM steward.history "
            "WHERE outcome = 'started'",
            NULL, expected, 90, "every instance started, once");
    long held = tw_scalar_long(&w, "SELECT max(held) FROM public.lock_probe", NULL);
    ck_assert_msg(held <= budget, "a batch held %ld advisory locks; the budget is %ld", held,
                  budget);
    ck_assert_int_eq(tw_scalar_long(&w, "SELECT count(*) FROM steward.rejected", NULL), 0);
    char *log = tl_read_file(w.log);
    ck_assert_msg(tl_contains(log, "committed in parts"), "no line about the lock budget");
    free(log);
    tw_stop(&w, 30);
}
END_TEST

/* ---- out of resources ---------------------------------------------------------- */

/* The class db_query() gives a statement that fails with `sqlstate`. */
static err_class_t class_of(const char *sqlstate)
{
    char sql[256], errstr[256];
    snprintf(sql, sizeof sql,
             "DO $$ BEGIN RAISE EXCEPTION 'raised for the test' USING ERRCODE = '%s'; END $$",
             sqlstate);
    err_class_t cls;
    PGresult *res = db_query(w.conn, "raising", sql, 0, NULL, &cls, errstr, sizeof errstr);
    ck_assert_ptr_null(res);
    return cls;
}

#define RESOURCE_INSTANCES 40

START_TEST(a_batch_out_of_shared_memory_is_committed_in_parts)
{
    world_init("outofmemory", json_pack("{s:i, s:s}", "batch_size", 1000, "batch_ms", "5s"));
    /* Out of memory or shared memory: a smaller statement may pass. Too many
     * connections heals by itself; a deadlock is retried. */
    ck_assert_int_eq(class_of("53200"), ERR_INVALID);
    ck_assert_int_eq(class_of("53000"), ERR_INVALID);
    ck_assert_int_eq(class_of("53300"), ERR_TRANSIENT);
    ck_assert_int_eq(class_of("40P01"), ERR_CONFLICT);

    /* The server refuses any batch that writes more than ten history rows
     * as it refuses one that takes more locks than its table holds. */
    tl_db_exec(w.conn, "CREATE FUNCTION public.small_batches() RETURNS trigger LANGUAGE plpgsql "
                       "AS $$ BEGIN IF (SELECT count(*) FROM written) > 10 THEN "
                       "RAISE EXCEPTION 'out of shared memory' USING ERRCODE = '53200', "
                       "HINT = 'You might need to increase max_locks_per_transaction.'; "
                       "END IF; RETURN NULL; END $$");
    tl_db_exec(w.conn, "CREATE TRIGGER small_batches AFTER INSERT ON steward.history "
                       "REFERENCING NEW TABLE AS written FOR EACH STATEMENT "
                       "EXECUTE FUNCTION public.small_batches()");
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < RESOURCE_INSTANCES; i++) {
        char key[32];
        snprintf(key, sizeof key, "M%03d", i);
        send_event(p, "orders", "OrderPlaced", key);
    }
    tl_producer_free(p);
    tw_start(&w, NULL, true);

    char expected[32];
    snprintf(expected, sizeof expected, "%d %d", RESOURCE_INSTANCES, RESOURCE_INSTANCES);
    tw_wait(&w,
            "SELECT count(*) || ' ' || count(DISTINCT key) FROM steward.history "
            "WHERE outcome = 'started'",
            NULL, expected, 60, "every instance started once, in smaller batches");
    ck_assert_int_eq(tw_scalar_long(&w, "SELECT count(*) FROM steward.rejected", NULL), 0);
    tw_stop(&w, 30);
}
END_TEST

/* ---- a foreign session -------------------------------------------------------- */

static struct {
    char owner[64], runtime[64], reader[64], login[64];
} who;

static void drop_roles(void)
{
    if (w.conn == NULL || who.owner[0] == '\0')
        return;
    char sql[1024];
    const char *holders[] = {who.runtime, who.reader, who.owner};
    for (size_t i = 0; i < 3; i++) {
        snprintf(sql, sizeof sql,
                 "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN "
                 "REASSIGN OWNED BY \"%s\" TO current_user; DROP OWNED BY \"%s\"; "
                 "END IF; END $$",
                 holders[i], holders[i], holders[i]);
        PQclear(PQexec(w.conn, sql));
    }
    const char *roles[] = {who.login, who.runtime, who.reader, who.owner};
    for (size_t i = 0; i < 4; i++) {
        snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS \"%s\"", roles[i]);
        PQclear(PQexec(w.conn, sql));
    }
}

static void roles_teardown(void)
{
    if (w.pids[0] > 0)
        tl_stop(w.pids[0], SIGKILL, 10);
    w.pids[0] = 0;
    drop_roles();
    tw_teardown(&w);
    memset(&who, 0, sizeof who);
}

/* How many "instance lock busy" lines of the log name instance `key`. */
static int busy_lines(const char *key)
{
    char *log = tl_read_file(w.log), needle[64];
    snprintf(needle, sizeof needle, "\"key\":\"%s\"", key);
    int n = 0;
    for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strstr(line, "instance lock busy") != NULL && strstr(line, needle) != NULL)
            n++;
    }
    free(log);
    return n;
}

START_TEST(a_foreign_lock_sets_its_instance_aside_and_nothing_else)
{
    world_init("foreignlock", json_pack("{s:s, s:s}", "lock_timeout", "1s", "batch_ms", "100ms"));
    snprintf(who.owner, sizeof who.owner, "stw_locks_%d_owner", (int) getpid());
    snprintf(who.runtime, sizeof who.runtime, "stw_locks_%d_runtime", (int) getpid());
    snprintf(who.reader, sizeof who.reader, "stw_locks_%d_reader", (int) getpid());
    snprintf(who.login, sizeof who.login, "stw_locks_%d_alice", (int) getpid());
    drop_roles();
    char set_owner[128], set_runtime[128], set_reader[128];
    snprintf(set_owner, sizeof set_owner, "roles.owner=%s", who.owner);
    snprintf(set_runtime, sizeof set_runtime, "roles.runtime=%s", who.runtime);
    snprintf(set_reader, sizeof set_reader, "roles.reader=%s", who.reader);
    const char *argv[] = {NULL,      "migrate", "--create-roles", "--database", w.db_url,   "--set",
                          set_owner, "--set",   set_runtime,      "--set",      set_reader, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "migrate --create-roles: %s", o.err);
    tl_output_free(&o);
    char sql[512];
    snprintf(sql, sizeof sql, "CREATE ROLE \"%s\" LOGIN IN ROLE \"%s\"", who.login, who.reader);
    tl_db_exec(w.conn, sql);

    char *reader_url = NULL;
    ck_assert_int_ge(asprintf(&reader_url, "%s user=%s", w.db_url, who.login), 0);
    PGconn *reader = tl_db_connect(reader_url);
    /* The reader may not call the lock helpers... */
    PGresult *res = PQexec(reader, "SELECT steward.instance_lock_objid('alert_order', 'BUSY')");
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    ck_assert_msg(state != NULL && strcmp(state, "42501") == 0, "reader called the lock helper");
    PQclear(res);
    res = PQexec(reader, "SELECT steward.instance_lock_key('alert_order', 'BUSY')");
    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    ck_assert_msg(state != NULL && strcmp(state, "42501") == 0, "reader called the old helper");
    PQclear(res);
    /* ...but advisory locks are open to every login: it takes BUSY's lock
     * by hand, and OLD's under the single-bigint key Steward once used. */
    tl_db_exec(reader, "SELECT pg_advisory_lock(1398036292, hashtext('alert_order' || chr(31) || "
                       "'BUSY'))");
    tl_db_exec(reader, "SELECT pg_advisory_lock(hashtextextended('alert_order' || chr(31) || "
                       "'OLD', 0))");

    tw_start(&w, NULL, true);
    tl_producer_t *p = tl_producer_new();
    send_event(p, "orders", "OrderPlaced", "BUSY");
    send_event(p, "orders", "OrderPlaced", "OLD");
    send_event(p, "orders", "OrderPlaced", "A1");
    send_event(p, "orders", "OrderPlaced", "A2");
    tl_producer_free(p);
    /* The others are judged within seconds, OLD without any wait. */
    tw_wait(&w,
            "SELECT count(*) FROM steward.instances WHERE key IN ('OLD', 'A1', 'A2') "
            "AND state = 'awaiting_payment'",
            NULL, "3", 15, "the instances beside the busy one judged");
    tw_wait(&w, "SELECT count(*) FROM steward.deferred WHERE key = 'BUSY'", NULL, "1", 15,
            "the busy instance's event set aside");
    /* BUSY's next event queues behind the first, without a wait. */
    p = tl_producer_new();
    send_event(p, "payments", "PaymentCaptured", "BUSY");
    send_event(p, "payments", "PaymentCaptured", "A1");
    tl_producer_free(p);
    tw_wait(&w, "SELECT state FROM steward.instances WHERE key = 'A1'", NULL, "awaiting_dispatch",
            15, "A1 paid while BUSY is held");
    tw_wait(&w, "SELECT string_agg(event_type, ' ' ORDER BY id) FROM steward.deferred", NULL,
            "OrderPlaced PaymentCaptured", 15, "BUSY's events deferred in order");
    ck_assert_int_eq(
        tw_scalar_long(&w, "SELECT count(*) FROM steward.history WHERE key = 'BUSY'", NULL), 0);
    ck_assert_int_eq(metric("steward_instance_lock_timeouts_total"), 1);
    ck_assert_int_eq(metric("steward_events_deferred_total"), 2);
    ck_assert_int_eq(busy_lines("BUSY"), 1);
    ck_assert_int_eq(busy_lines("OLD"), 0);

    /* Released: BUSY's events are judged in order, each once. */
    tl_db_exec(reader, "SELECT pg_advisory_unlock_all()");
    tw_wait(&w,
            "SELECT string_agg(outcome || ':' || event_type, ' ' ORDER BY id) "
            "FROM steward.history WHERE key = 'BUSY'",
            NULL, "started:OrderPlaced advanced:PaymentCaptured", 20, "BUSY judged in order");
    tw_expect(&w, "SELECT count(*) FROM steward.deferred", NULL, "0");
    tw_expect(&w, "SELECT state FROM steward.instances WHERE key = 'BUSY'", NULL,
              "awaiting_dispatch");
    ck_assert_int_eq(metric("steward_deferred_judged_total"), 2);
    PQfinish(reader);
    free(reader_url);
    tw_stop(&w, 30);
}
END_TEST

#define LOCKS_SUITE(name, test, down)                                                              \
    Suite *name##_suite(void)                                                                      \
    {                                                                                              \
        Suite *s = suite_create(#name);                                                            \
        TCase *tc = tcase_create(#name);                                                           \
        tcase_set_timeout(tc, 180);                                                                \
        tcase_add_checked_fixture(tc, NULL, down);                                                 \
        tcase_add_test(tc, test);                                                                  \
        suite_add_tcase(s, tc);                                                                    \
        return s;                                                                                  \
    }

LOCKS_SUITE(expiry_locks, expiry_holds_no_more_locks_than_it_judges, teardown)
LOCKS_SUITE(lock_budget, a_batch_locks_no_more_instances_than_the_budget, teardown)
LOCKS_SUITE(resource_refusal, a_batch_out_of_shared_memory_is_committed_in_parts, teardown)
LOCKS_SUITE(foreign_lock, a_foreign_lock_sets_its_instance_aside_and_nothing_else, roles_teardown)
