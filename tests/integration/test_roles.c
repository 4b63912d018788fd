/*
 * test_roles - the least-privilege database roles, end to end: `steward
 * migrate --create-roles` as the test's superuser, then `steward run
 * --no-migrate` logged in as a member of the runtime role and the read
 * commands as a member of the reader role.
 *
 *   roles      run works as the runtime role (an event becomes an
 *              instance), stuck and inspect work as the reader, and
 *              inspect --json equals the HTTP answer for the instance,
 *              which the HTTP server read as the reader (http.database);
 *              the runtime role's retention pass makes week partitions
 *              through the owner's SECURITY DEFINER functions; the
 *              reader cannot change a row, the runtime role cannot create
 *              or alter a table (SQLSTATE 42501)
 *   operator   as a member of the operator role every action works
 *              (ack, resolve, claim, release, close, move and retry on an
 *              active version, upgrade, silence, unsilence) and each audit row
 *              carries the login beside the given actor; the operator
 *              cannot UPDATE alerts or history, DELETE history or write an
 *              operator row; the runtime login cannot UPDATE or DELETE
 *              history (a week partition's rows included), forge the audit
 *              columns of alerts or prune the last hour, while its steward
 *              judges events and deadlines and its retention still prunes
 *              old history; the reader cannot act, and is told which role
 *              to be granted
 *   refusals   run as the runtime role without --no-migrate stops at once
 *              (exit 2) saying to migrate as the owner; --no-migrate on an
 *              unmigrated database stops with "no steward schema in
 *              database X; run steward migrate", as do the read commands
 *
 * Roles are cluster-wide: their names carry the runner's pid, the teardown
 * drops them, and so does the runner after the tests when a failed test
 * could not.
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static tw_world_t w;

/* The roles and their logins, named after the runner; URLs as the logins. */
static struct {
    char *db_name;
    char owner[64], runtime[64], reader[64], operator[64], run_login[64], read_login[64],
        op_login[64];
    char *runtime_url, *reader_url, *operator_url;
} who;

/* The database URL as another user: libpq takes the last of a repeated keyword. */
static char *as_user(const char *user)
{
    char *url = NULL;
    ck_assert_int_ge(asprintf(&url, "%s user=%s", w.db_url, user), 0);
    return url;
}

static void drop_roles(void)
{
    if (w.conn == NULL || who.owner[0] == '\0')
        return;
    char sql[1024];
    /* Objects and grants first: a role holding any cannot go. One role per
     * statement: DROP OWNED BY of several at once trips over default
     * privileges that name two of them. */
    const char *holders[] = {who.runtime, who.reader, who.operator, who.owner };
    for (size_t i = 0; i < sizeof holders / sizeof holders[0]; i++) {
        snprintf(sql, sizeof sql,
                 "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN "
                 "REASSIGN OWNED BY \"%s\" TO current_user; DROP OWNED BY \"%s\"; "
                 "END IF; END $$",
                 holders[i], holders[i], holders[i]);
        PQclear(PQexec(w.conn, sql));
    }
    const char *roles[] = {who.run_login, who.read_login, who.op_login, who.runtime, who.reader,
                           who.operator, who.owner };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS \"%s\"", roles[i]);
        PQclear(PQexec(w.conn, sql));
    }
}

/*
 * A failed assertion ends a forked test before its teardown, and roles are
 * cluster-wide. Finds the roles of runner `pid`, clears what they own or
 * were granted in every database that records a dependency on them
 * (pg_shdepend), and drops them: before each test (what an earlier failed
 * test left would otherwise fail it too) and in the runner after the tests.
 */
static void sweep_roles_of(int pid)
{
    const char *base = getenv("STEWARD_TEST_DATABASE_URL");
    if (base == NULL)
        return;
    PGconn *admin = PQconnectdb(base);
    char pattern[64], sql[512];
    snprintf(pattern, sizeof pattern, "stw\\_roles\\_%d\\_%%", pid);
    const char *params[1] = {pattern};
    PGresult *roles = PQexecParams(admin,
                                   "SELECT rolname FROM pg_roles WHERE rolname LIKE $1 "
                                   "ORDER BY rolcanlogin DESC",
                                   1, NULL, params, NULL, NULL, 0);
    PGresult *dbs = PQexecParams(admin,
                                 "SELECT DISTINCT d.datname FROM pg_shdepend s "
                                 "JOIN pg_database d ON d.oid = s.dbid "
                                 "JOIN pg_roles r ON r.oid = s.refobjid "
                                 "WHERE r.rolname LIKE $1",
                                 1, NULL, params, NULL, NULL, 0);
    for (int d = 0; PQresultStatus(dbs) == PGRES_TUPLES_OK && d < PQntuples(dbs); d++) {
        char *url = NULL;
        if (asprintf(&url, "%s dbname='%s'", base, PQgetvalue(dbs, d, 0)) < 0)
            continue;
        PGconn *conn = PQconnectdb(url);
        for (int r = 0; PQresultStatus(roles) == PGRES_TUPLES_OK && r < PQntuples(roles); r++) {
            const char *name = PQgetvalue(roles, r, 0);
            snprintf(sql, sizeof sql, "REASSIGN OWNED BY \"%s\" TO current_user", name);
            PQclear(PQexec(conn, sql));
            snprintf(sql, sizeof sql, "DROP OWNED BY \"%s\"", name);
            PQclear(PQexec(conn, sql));
        }
        PQfinish(conn);
        free(url);
    }
    for (int r = 0; PQresultStatus(roles) == PGRES_TUPLES_OK && r < PQntuples(roles); r++) {
        snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS \"%s\"", PQgetvalue(roles, r, 0));
        PQclear(PQexec(admin, sql));
    }
    PQclear(dbs);
    PQclear(roles);
    PQfinish(admin);
}

static void sweep_roles(void)
{
    sweep_roles_of((int) getpid());
}

/* The alerting definition with our topics, a database migrated with its
 * roles created, and two login users in them. */
static void world_init(void)
{
    memset(&who, 0, sizeof who);
    tw_init(&w, "roles");
    who.db_name = strdup(PQdb(w.conn));
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", "1h", "@D2@", "1h")));
    /* Named after the runner (the parent of this forked test), so that
     * sweep_roles() there finds what a failed test left. */
    snprintf(who.owner, sizeof who.owner, "stw_roles_%d_owner", (int) getppid());
    snprintf(who.runtime, sizeof who.runtime, "stw_roles_%d_runtime", (int) getppid());
    snprintf(who.reader, sizeof who.reader, "stw_roles_%d_reader", (int) getppid());
    snprintf(who.run_login, sizeof who.run_login, "stw_roles_%d_svc", (int) getppid());
    snprintf(who.read_login, sizeof who.read_login, "stw_roles_%d_alice", (int) getppid());
    snprintf(who.operator, sizeof who.operator, "stw_roles_%d_operator", (int) getppid());
    snprintf(who.op_login, sizeof who.op_login, "stw_roles_%d_bob", (int) getppid());
    sweep_roles_of((int) getppid()); /* left over from a failed test or a killed run */

    char set_owner[128], set_runtime[128], set_reader[128], set_operator[128];
    snprintf(set_owner, sizeof set_owner, "roles.owner=%s", who.owner);
    snprintf(set_runtime, sizeof set_runtime, "roles.runtime=%s", who.runtime);
    snprintf(set_reader, sizeof set_reader, "roles.reader=%s", who.reader);
    snprintf(set_operator, sizeof set_operator, "roles.operator=%s", who.operator);
    const char *argv[] = {NULL,       "migrate", "--create-roles", "--database", w.db_url,
                          "--set",    set_owner, "--set",          set_runtime,  "--set",
                          set_reader, "--set",   set_operator,     NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "migrate --create-roles: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "ready in database"), "got: %s", o.out);
    tl_output_free(&o);

    char sql[512];
    snprintf(sql, sizeof sql, "CREATE ROLE \"%s\" LOGIN IN ROLE \"%s\"", who.run_login,
             who.runtime);
    tl_db_exec(w.conn, sql);
    snprintf(sql, sizeof sql, "CREATE ROLE \"%s\" LOGIN IN ROLE \"%s\"", who.read_login,
             who.reader);
    tl_db_exec(w.conn, sql);
    snprintf(sql, sizeof sql, "CREATE ROLE \"%s\" LOGIN IN ROLE \"%s\"", who.op_login,
             who.operator);
    tl_db_exec(w.conn, sql);
    who.runtime_url = as_user(who.run_login);
    who.reader_url = as_user(who.read_login);
    who.operator_url = as_user(who.op_login);
}

static void world_teardown(void)
{
    if (w.pids[0] > 0)
        tl_stop(w.pids[0], SIGKILL, 10);
    w.pids[0] = 0;
    drop_roles();
    tw_teardown(&w);
}

/* The SQLSTATE a statement fails with as conninfo's user ("" when it succeeds). */
static char *sqlstate_as(const char *conninfo, const char *sql)
{
    PGconn *conn = tl_db_connect(conninfo);
    PGresult *res = PQexec(conn, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    char *out = strdup(state != NULL ? state : "");
    PQclear(res);
    PQfinish(conn);
    return out;
}

/*
 * An instance document (r-1 of alert_order, in a state with a deadline)
 * reckons every figure at the process's watermark, never at the clock:
 * ms_in_state and ms_to_deadline are null together with watermark_at, and
 * add up to the state's deadline, unless the watermark is still behind the
 * state's entry, where time in the state is 0 (it never runs back).
 */
static void expect_one_clock(const json_t *inst, const char *text)
{
    const json_t *in = json_object_get(inst, "ms_in_state");
    const json_t *to = json_object_get(inst, "ms_to_deadline");
    bool unknown = json_is_null(json_object_get(inst, "watermark_at"));
    ck_assert_msg(unknown ? json_is_null(in) && json_is_null(to)
                          : json_is_integer(in) && json_is_integer(to),
                  "ms_in_state and ms_to_deadline, at the watermark: %s", text);
    if (unknown)
        return;
    long span =
        tw_scalar_long(&w,
                       "SELECT steward.to_ms(deadline_at) - steward.to_ms(state_entered_at) "
                       "FROM steward.instances WHERE process = 'alert_order' AND key = 'r-1'",
                       NULL);
    long long in_ms = json_integer_value(in), to_ms = json_integer_value(to);
    ck_assert_msg(in_ms > 0 ? in_ms + to_ms == span : in_ms == 0 && to_ms >= span,
                  "ms_in_state %lld + ms_to_deadline %lld against a deadline of %ld ms: %s", in_ms,
                  to_ms, span, text);
}

START_TEST(runtime_runs_and_reader_reads)
{
    world_init();
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/alert_order.json", w.dir);
    char *orders = tw_topic(&w, "orders"), *payments = tw_topic(&w, "payments"),
         *shipping = tw_topic(&w, "shipping");
    const char *topics[] = {orders, payments, shipping};
    tl_kafka_create_topics(topics, 3, 1);
    char http_database[1200];
    snprintf(http_database, sizeof http_database, "http.database=%s", who.reader_url);

    /* Retention's partition upkeep is DDL, done through the owner's
     * SECURITY DEFINER functions: the runtime role's first retention pass
     * must make the week partitions, which migrate does not. */
    const char weeks_sql[] =
        "SELECT count(*) > 0 FROM pg_inherits i JOIN pg_class c "
        "ON c.oid = i.inhrelid WHERE i.inhparent = 'steward.history'::regclass "
        "AND c.relname <> 'history_default'";
    char *weeks = tl_db_scalar(w.conn, weeks_sql, 0, NULL);
    ck_assert_str_eq(weeks, "f");
    free(weeks);
    const char *argv[] = {NULL,
                          "run",
                          "--no-migrate",
                          "--database",
                          who.runtime_url,
                          "--brokers",
                          tl_kafka_brokers(),
                          "--definitions",
                          defs,
                          "--group",
                          w.group,
                          "--batch-ms",
                          "50ms",
                          "--http-listen",
                          "127.0.0.1:0",
                          "--set",
                          http_database,
                          "--kafka",
                          "topic.metadata.refresh.interval.ms=1000",
                          NULL};
    w.pids[0] = tl_steward_spawn(argv, NULL, w.log);
    tl_wait_http_listening(w.log, w.base, sizeof w.base);

    tl_producer_t *p = tl_producer_new();
    tl_produce(p, orders, -1, "{\"type\":\"OrderPlaced\",\"id\":\"e1\",\"order_id\":\"r-1\"}", -1,
               NULL, 0);
    tl_producer_free(p);
    char *last = NULL;
    if (!tl_db_wait(w.conn,
                    "SELECT state FROM steward.instances WHERE process = 'alert_order' "
                    "AND key = 'r-1'",
                    0, NULL, "awaiting_payment", 60, &last)) {
        tl_print_tail(w.log, 4000);
        ck_abort_msg("the runtime role's steward never made the instance (got %s)", last);
    }

    if (!tl_db_wait(w.conn, weeks_sql, 0, NULL, "t", 30, NULL)) {
        tl_print_tail(w.log, 4000);
        ck_abort_msg("the runtime role's retention pass made no week partition");
    }

    /* The reader reads: stuck, and inspect --json equal to the HTTP answer. */
    const char *stuck_argv[] = {NULL, "stuck", "--json", "--database", who.reader_url, NULL};
    tl_output_t o = tl_steward(stuck_argv, NULL);
    ck_assert_msg(o.status == 0, "stuck as the reader: %s", o.err);
    tl_output_free(&o);
    const char *inspect_argv[] = {NULL,     "inspect",    "alert_order",  "r-1",
                                  "--json", "--database", who.reader_url, NULL};
    o = tl_steward(inspect_argv, NULL);
    ck_assert_msg(o.status == 0, "inspect as the reader: %s", o.err);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/instances/alert_order/r-1", w.base);
    long status = 0;
    char *body = tl_http_get(url, &status);
    ck_assert_int_eq(status, 200);
    json_t *cli = json_loads(o.out, 0, NULL), *http = json_loads(body, 0, NULL);
    ck_assert_msg(cli != NULL && http != NULL, "cli: %s\nhttp: %s", o.out, body);
    expect_one_clock(cli, o.out);
    expect_one_clock(http, body);
    /* Read a moment apart: the figures at the watermark, which a caught-up
     * partition moves to now, may differ by that. */
    const char *moving[] = {"ms_in_state", "ms_to_deadline"};
    for (size_t i = 0; i < 2; i++) {
        ck_assert_msg(json_object_get(cli, moving[i]) != NULL, "inspect --json lacks %s: %s",
                      moving[i], o.out);
        json_object_del(cli, moving[i]);
        json_object_del(http, moving[i]);
    }
    ck_assert_msg(json_equal(cli, http), "inspect --json:\n%s\nHTTP:\n%s", o.out, body);
    /* The HTTP reads went through the reader's login (http.database), which
     * keeps its connection open after the request. */
    const char *login[1] = {who.read_login};
    char *readers = tl_db_scalar(w.conn,
                                 "SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = $1 "
                                 "AND datname = current_database()",
                                 1, login);
    ck_assert_str_eq(readers, "t");
    free(readers);
    json_decref(cli);
    json_decref(http);
    free(body);
    tl_output_free(&o);

    /* Least privilege, asked of PostgreSQL itself. */
    char *s = sqlstate_as(who.reader_url, "UPDATE steward.instances SET state = 'x'");
    ck_assert_str_eq(s, "42501");
    free(s);
    s = sqlstate_as(who.reader_url, "DELETE FROM steward.alerts");
    ck_assert_str_eq(s, "42501");
    free(s);
    s = sqlstate_as(who.runtime_url, "CREATE TABLE steward.intruder (a int)");
    ck_assert_str_eq(s, "42501");
    free(s);
    s = sqlstate_as(who.runtime_url, "ALTER TABLE steward.instances ADD COLUMN intruder int");
    ck_assert_str_eq(s, "42501");
    free(s);
    s = sqlstate_as(who.runtime_url, "DROP TABLE steward.rejected");
    ck_assert_str_eq(s, "42501");
    free(s);
    s = sqlstate_as(who.reader_url, "SELECT steward.history_week_drop('history_default')");
    ck_assert_str_eq(s, "42501");
    free(s);
    /* The functions take only a week partition: no other DDL through them. */
    s = sqlstate_as(who.runtime_url, "SELECT steward.history_week_drop('instances')");
    ck_assert_str_eq(s, "22023");
    free(s);
    s = sqlstate_as(who.runtime_url, "SELECT count(*) FROM steward.instances");
    ck_assert_str_eq(s, "");
    free(s);

    tw_stop(&w, 30);
    free(orders);
    free(payments);
    free(shipping);
}
END_TEST

/* Runs `steward ARGS... --database url` (args NULL-terminated, at most 12). */
static tl_output_t steward_as(const char *url, const char *const *args)
{
    const char *argv[16] = {NULL};
    int n = 1;
    for (size_t i = 0; args[i] != NULL && n < 13; i++)
        argv[n++] = args[i];
    argv[n++] = "--database";
    argv[n++] = url;
    return tl_steward(argv, NULL);
}

/* Runs an action as the operator's login, with --actor `actor`, and
 * asserts it worked. */
static void operate(const char *const *args)
{
    tl_output_t o = steward_as(who.operator_url, args);
    ck_assert_msg(o.status == 0, "steward %s as the operator: exit %d: %s", args[0], o.status,
                  o.err);
    tl_output_free(&o);
}

static char *scalar(const char *sql, const char *p1)
{
    const char *params[1] = {p1};
    return tl_db_scalar(w.conn, sql, p1 != NULL ? 1 : 0, params);
}

static void expect_scalar(const char *sql, const char *p1, const char *expected)
{
    char *got = scalar(sql, p1);
    ck_assert_msg(got != NULL && strcmp(got, expected) == 0, "%s: got %s, expected %s", sql,
                  got ? got : "NULL", expected);
    free(got);
}

static void expect_refused(const char *url, const char *sql)
{
    char *s = sqlstate_as(url, sql);
    ck_assert_msg(strcmp(s, "42501") == 0, "%s as %s: SQLSTATE '%s', expected 42501", sql,
                  url == who.runtime_url  ? "the runtime login"
                  : url == who.reader_url ? "the reader login"
                                          : "the operator login",
                  s);
    free(s);
}

START_TEST(operator_acts_and_the_audit_holds)
{
    world_init();
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    ck_assert_int_eq(mkdir(defs, 0755), 0);
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "defs/alert.json",
                           TW_LIST("@D1@", "1s", "@D2@", "1h")));
    free(tw_write_template(&w, "tests/data/definitions/active_order.json.in", "defs/active.json",
                           TW_LIST("@V@", "1", "@MODE@", "active", "@D1@", "1h")));
    char *orders = tw_topic(&w, "orders"), *payments = tw_topic(&w, "payments"),
         *shipping = tw_topic(&w, "shipping"), *stock = tw_topic(&w, "stock"),
         *picking = tw_topic(&w, "picking");
    const char *topics[] = {orders, payments, shipping, stock, picking};
    tl_kafka_create_topics(topics, 5, 1);

    /* The daemon as the runtime login; the dispatcher holds its commands,
     * retention runs every second. */
    const char *argv[] = {NULL,
                          "run",
                          "--no-migrate",
                          "--database",
                          who.runtime_url,
                          "--brokers",
                          tl_kafka_brokers(),
                          "--definitions",
                          defs,
                          "--group",
                          w.group,
                          "--batch-ms",
                          "50ms",
                          "--http-listen",
                          "",
                          "--set",
                          "scheduler.interval=200ms",
                          "--set",
                          "scheduler.grace=0s",
                          "--set",
                          "retention.interval=1s",
                          "--set",
                          "dispatch.paused=*",
                          "--kafka",
                          "topic.metadata.refresh.interval.ms=1000",
                          NULL};
    w.pids[0] = tl_steward_spawn(argv, NULL, w.log);

    /* A batch and a deadline, as the runtime role: two instances of each
     * process (one event starts both), and alert_order's 1s deadline pages. */
    tl_producer_t *p = tl_producer_new();
    tl_produce(p, orders, -1,
               "{\"type\":\"OrderPlaced\",\"id\":\"e1\",\"order_id\":\"k1\",\"total\":5}", -1, NULL,
               0);
    tl_produce(p, orders, -1,
               "{\"type\":\"OrderPlaced\",\"id\":\"e2\",\"order_id\":\"k2\",\"total\":7}", -1, NULL,
               0);
    tl_producer_free(p);
    char *last = NULL;
    if (!tl_db_wait(w.conn,
                    "SELECT count(*) FROM steward.alerts WHERE process = 'alert_order' "
                    "AND kind = 'deadline' AND resolved_at IS NULL",
                    0, NULL, "2", 60, &last)) {
        tl_print_tail(w.log, 4000);
        ck_abort_msg("the runtime role's steward never paged both deadlines (got %s)", last);
    }
    free(last);
    expect_scalar("SELECT count(*) FROM steward.instances WHERE process = 'active_order' "
                  "AND state = 'reserving'",
                  NULL, "2");
    char *a1 = scalar("SELECT id FROM steward.alerts WHERE key = 'k1' AND kind = 'deadline'", NULL);
    char *a2 = scalar("SELECT id FROM steward.alerts WHERE key = 'k2' AND kind = 'deadline'", NULL);

    /* The reader may not act: told which role to be granted, nothing changed. */
    const char *ack_as_reader[] = {"ack", a1, "--reason", "r", "--actor", "alice", NULL};
    tl_output_t o = steward_as(who.reader_url, ack_as_reader);
    char grant[256];
    snprintf(grant, sizeof grant, "GRANT %s TO %s", who.operator, who.read_login);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, grant) &&
                      !tl_contains(o.err, "permission denied for table"),
                  "ack as the reader: exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    expect_scalar("SELECT count(*) FROM steward.alerts WHERE acked_at IS NOT NULL", NULL, "0");
    expect_refused(who.reader_url, "SELECT steward.action_claim('alert_order', 'k1', true, 'x', "
                                   "'y')");

    /* Every action as the operator, the actor named freely: the audit
     * says who logged in as well. */
    const char *acts[][12] = {
        {"ack", a1, "--reason", "on it", "--actor", "mallory", NULL},
        {"resolve", a2, "--reason", "known", "--actor", "mallory", NULL},
        {"claim", "alert_order", "k1", "--reason", "mine", "--actor", "mallory", NULL},
        {"release", "alert_order", "k1", "--reason", "done", "--actor", "mallory", NULL},
        {"close", "alert_order", "k1", "--as", "success", "--reason", "by hand", "--actor",
         "mallory", NULL},
        {"move", "active_order", "k1", "--to", "picking", "--reason", "reserved by phone",
         "--actor", "mallory", NULL},
        {"retry", "active_order", "k1", "--reason", "again", "--actor", "mallory", NULL},
        {"upgrade", "active_order", "--to", "2", "--reason", "version 2", "--actor", "mallory",
         NULL},
        {"silence", "--process", "alert_order", "--for", "1h", "--reason", "window", "--actor",
         "mallory", NULL},
    };
    /* A second version of active_order to upgrade to, as steward run records one. */
    tl_db_exec(w.conn, "INSERT INTO steward.definitions (process, version, mode, document, "
                       "  checksum, topic_mapping) "
                       "SELECT process, 2, mode, jsonb_set(document, '{version}', '2'), 'v2', "
                       "  topic_mapping FROM steward.definitions "
                       "WHERE process = 'active_order' AND version = 1");
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        operate(acts[i]);
    char *silence = scalar("SELECT max(id) FROM steward.silences", NULL);
    const char *unsilence[] = {"unsilence", silence,   "--reason", "over",
                               "--actor",   "mallory", NULL};
    operate(unsilence);

    const char *login[1] = {who.op_login};
    char *audit = tl_db_scalar(w.conn,
                               "SELECT string_agg(event_type || ' ' || actor || ' ' || "
                               "  (login = $1)::text, ', ' ORDER BY recorded_at, id) "
                               "FROM steward.history WHERE outcome = 'operator'",
                               1, login);
    ck_assert_str_eq(audit, "operator:ack mallory true, operator:resolve mallory true, "
                            "operator:claim mallory true, operator:release mallory true, "
                            "operator:close mallory true, operator:move mallory true, "
                            "operator:retry mallory true, operator:upgrade mallory true, "
                            "operator:upgrade mallory true");
    free(audit);
    expect_scalar("SELECT count(*) FROM steward.history WHERE outcome <> 'operator' "
                  "AND login IS NOT NULL",
                  NULL, "0");
    char *alerts = tl_db_scalar(w.conn,
                                "SELECT string_agg(coalesce(acked_by, '-') || ' ' || "
                                "  coalesce((acked_login = $1)::text, '-') || ' ' || "
                                "  coalesce(resolved_by, '-') || ' ' || "
                                "  coalesce((resolved_login = $1)::text, '-'), ', ' ORDER BY key) "
                                "FROM steward.alerts WHERE process = 'alert_order'",
                                1, login);
    ck_assert_str_eq(alerts, "mallory true mallory true, - - mallory true");
    free(alerts);
    char *silences =
        tl_db_scalar(w.conn,
                     "SELECT actor || ' ' || (login = $1)::text || ' ' || lifted_by || ' ' || "
                     "  (lifted_login = $1)::text FROM steward.silences",
                     1, login);
    ck_assert_str_eq(silences, "mallory true mallory true");
    free(silences);
    expect_scalar("SELECT string_agg(type || ' ' || attempt, ', ' ORDER BY id) "
                  "FROM steward.commands WHERE key = 'k1' AND cancelled_at IS NULL",
                  NULL, "PickOrder 0, PickOrder 1");

    /* The operator changes nothing but through the actions. */
    expect_refused(who.operator_url, "UPDATE steward.alerts SET acked_by = 'nobody'");
    expect_refused(who.operator_url, "DELETE FROM steward.history WHERE outcome = 'operator'");
    expect_refused(who.operator_url, "UPDATE steward.history SET actor = 'nobody'");
    expect_refused(who.operator_url, "UPDATE steward.instances SET state = 'x'");
    expect_refused(who.operator_url, "INSERT INTO steward.silences (process, ends_at, actor, "
                                     "reason) VALUES ('p', now() + interval '1h', 'a', 'r')");
    expect_refused(who.operator_url,
                   "SELECT steward.audit_history('alert_order', 'k2', 1, 'close', 'a', 'b', "
                   "'c', 'nobody', 'forged')");

    /* The runtime login appends events, but rewrites no history, forges no
     * audit and prunes nothing recent; a week partition (made by its
     * retention, so granted to it by default privileges) holds as well. */
    expect_refused(who.runtime_url, "UPDATE steward.history SET actor = 'nobody' "
                                    "WHERE outcome = 'operator'");
    expect_refused(who.runtime_url, "DELETE FROM steward.history WHERE outcome = 'operator'");
    expect_refused(who.runtime_url, "DELETE FROM steward.history_default");
    char *week = scalar("SELECT min(tableoid::regclass::text) FROM steward.history "
                        "WHERE outcome = 'operator'",
                        NULL);
    ck_assert_msg(week != NULL && strcmp(week, "steward.history_default") != 0,
                  "the actions' rows are in %s, not in a week partition", week);
    char sql[512];
    snprintf(sql, sizeof sql, "DELETE FROM %s", week);
    expect_refused(who.runtime_url, sql);
    snprintf(sql, sizeof sql, "UPDATE %s SET reason = 'forged'", week);
    expect_refused(who.runtime_url, sql);
    expect_refused(who.runtime_url, "UPDATE steward.alerts SET acked_by = 'nobody' "
                                    "WHERE acked_by IS NOT NULL");
    expect_refused(who.runtime_url, "UPDATE steward.alerts SET resolution = 'forged' "
                                    "WHERE resolved_at IS NOT NULL");
    expect_refused(who.runtime_url, "DELETE FROM steward.alerts");
    expect_refused(who.runtime_url, "UPDATE steward.silences SET lifted_by = 'nobody'");
    expect_refused(who.runtime_url,
                   "INSERT INTO steward.history (process, key, event_id, event_type, topic, "
                   "partition, \"offset\", event_time, outcome, replica, epoch, actor, reason) "
                   "VALUES ('alert_order', 'k2', 'x', 'operator:close', '', -1, -1, now(), "
                   "'operator', 'r', 0, 'nobody', 'forged')");
    char *s = sqlstate_as(who.runtime_url, "SELECT steward.history_prune(now(), 100000)");
    ck_assert_str_eq(s, "");
    free(s);
    expect_scalar("SELECT count(*) FROM steward.history WHERE outcome = 'operator'", NULL, "9");
    snprintf(sql, sizeof sql, "SELECT steward.history_week_drop('%s')", week + strlen("steward."));
    s = sqlstate_as(who.runtime_url, sql);
    ck_assert_str_eq(s, "22023");
    free(s);
    free(week);

    /* Meanwhile the daemon goes on: a batch advances k2, and its retention
     * prunes history older than retention.history (30 days). */
    tl_db_exec(w.conn,
               "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "
               "  partition, \"offset\", event_time, to_state, outcome, recorded_at, replica, "
               "  epoch) "
               "VALUES ('alert_order', 'old', 1, 'old-1', 'OrderPlaced', 't', 0, 1, "
               "  now() - interval '40 days', 'awaiting_payment', 'started', "
               "  now() - interval '40 days', 'test', 1)");
    p = tl_producer_new();
    tl_produce(p, payments, -1, "{\"type\":\"PaymentCaptured\",\"id\":\"e3\",\"order_id\":\"k2\"}",
               -1, NULL, 0);
    tl_producer_free(p);
    if (!tl_db_wait(w.conn,
                    "SELECT state FROM steward.instances WHERE process = 'alert_order' "
                    "AND key = 'k2'",
                    0, NULL, "awaiting_dispatch", 60, &last)) {
        tl_print_tail(w.log, 4000);
        ck_abort_msg("the runtime role's steward stopped judging events (k2 in %s)", last);
    }
    free(last);
    if (!tl_db_wait(w.conn, "SELECT count(*) FROM steward.history WHERE key = 'old'", 0, NULL, "0",
                    30, &last)) {
        tl_print_tail(w.log, 4000);
        ck_abort_msg("the runtime role's retention no longer prunes history (%s left)", last);
    }
    free(last);
    expect_scalar("SELECT count(*) FROM steward.history WHERE outcome = 'operator'", NULL, "9");

    tw_stop(&w, 30);
    free(a1);
    free(a2);
    free(silence);
    free(orders);
    free(payments);
    free(shipping);
    free(stock);
    free(picking);
}
END_TEST

START_TEST(refusals_name_the_fix)
{
    world_init();
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/alert_order.json", w.dir);

    /* The runtime role, asked to migrate at start: a config error, at once. */
    const char *argv[] = {NULL,
                          "run",
                          "--database",
                          who.runtime_url,
                          "--brokers",
                          tl_kafka_brokers(),
                          "--definitions",
                          defs,
                          "--http-listen",
                          "",
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 2, "exit %d: %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.err, "permission denied") && tl_contains(o.err, "--no-migrate"),
                  "stderr: %s", o.err);
    tl_output_free(&o);

    /* An unmigrated database: run --no-migrate and the readers say what to do. */
    char *empty = strdup(tl_db_create("roles_empty"));
    PGconn *conn = tl_db_connect(empty);
    char expected[256];
    snprintf(expected, sizeof expected, "no steward schema in database %s; run steward migrate",
             PQdb(conn));
    PQfinish(conn);
    const char *run_argv[] = {NULL,
                              "run",
                              "--no-migrate",
                              "--database",
                              empty,
                              "--brokers",
                              tl_kafka_brokers(),
                              "--definitions",
                              defs,
                              "--http-listen",
                              "",
                              NULL};
    o = tl_steward(run_argv, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, expected), "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    const char *stuck_argv[] = {NULL, "stuck", "--database", empty, NULL};
    o = tl_steward(stuck_argv, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, expected), "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    const char *inspect_argv[] = {NULL, "inspect", "p", "k", "--database", empty, NULL};
    o = tl_steward(inspect_argv, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, expected), "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    const char *report_argv[] = {NULL, "report", "--database", empty, NULL};
    o = tl_steward(report_argv, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, expected), "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    free(empty);
}
END_TEST

static void teardown(void)
{
    world_teardown();
}

Suite *roles_suite(void)
{
    Suite *s = suite_create("roles");
    TCase *tc = tcase_create("roles");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_unchecked_fixture(tc, NULL, sweep_roles);
    tcase_add_test(tc, runtime_runs_and_reader_reads);
    tcase_add_test(tc, operator_acts_and_the_audit_holds);
    tcase_add_test(tc, refusals_name_the_fix);
    suite_add_tcase(s, tc);
    return s;
}
