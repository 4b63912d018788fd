/*
 * test_migrate - the schema runner against a real PostgreSQL: a fresh
 * database, a second run that changes nothing, two runners at once, and
 * the refusals (a tampered migration, a schema newer than the binary); and
 * that the batch's reads stay index probes on the schema it makes.
 */
#include "common/db.h"
#include "manager/intake/store.h"
#include "schema/migrate.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Tables, a partitioned one counted once, its partitions not. */
static char *count_tables(PGconn *conn)
{
    return tl_db_scalar(conn,
                        "SELECT count(*) FROM pg_class c JOIN pg_namespace n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = 'steward' "
                        "AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
                        0, NULL);
}

START_TEST(migrate_creates_schema_then_does_nothing)
{
    const char *url = tl_db_create("migrate_fresh");
    const char *argv[] = {NULL, "migrate", "--database", url, NULL};

    tl_output_t first = tl_steward(argv, NULL);
    ck_assert_msg(first.status == 0, "first migrate failed: %s", first.err);
    ck_assert_msg(tl_contains(first.out, "migrated from version 0 to"), "got: %s", first.out);

    PGconn *conn = tl_db_connect(url);
    char *tables = count_tables(conn);
    /* schema_versions, the nine tables of 0001_init, steward.replicas (0005),
     * steward.silences (0010), steward.commands (0012),
     * steward.watched_topics (0017) and steward.deferred (0018) */
    ck_assert_str_eq(tables, "15");
    char *versions = tl_db_scalar(conn, "SELECT count(*) FROM steward.schema_versions", 0, NULL);
    ck_assert_int_eq(atoi(versions), (int) migrate_n_scripts);

    tl_output_t second = tl_steward(argv, NULL);
    ck_assert_msg(second.status == 0, "second migrate failed: %s", second.err);
    ck_assert_msg(tl_contains(second.out, "nothing to do"), "got: %s", second.out);
    char *tables_after = count_tables(conn);
    ck_assert_str_eq(tables_after, tables);
    char *versions_after =
        tl_db_scalar(conn, "SELECT count(*) FROM steward.schema_versions", 0, NULL);
    ck_assert_str_eq(versions_after, versions);

    const char *status_argv[] = {NULL, "migrate", "--status", "--database", url, NULL};
    tl_output_t status = tl_steward(status_argv, NULL);
    ck_assert_int_eq(status.status, 0);
    ck_assert_msg(tl_contains(status.out, "at version"), "got: %s", status.out);
    ck_assert_msg(!tl_contains(status.out, "pending"), "got: %s", status.out);

    free(tables);
    free(tables_after);
    free(versions);
    free(versions_after);
    tl_output_free(&first);
    tl_output_free(&second);
    tl_output_free(&status);
    PQfinish(conn);
}
END_TEST

/* Each child migrates on its own connection once the parent lets go of
 * the gate, and exits with how many migrations it applied (or 100 + class). */
static pid_t spawn_migrator(const char *url, const int gate[2])
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char errstr[512], byte;
        int gate_fd = gate[0];
        close(gate[1]); /* else the gate never opens: this copy keeps it shut */
        PGconn *conn = db_connect(url, "test", errstr, sizeof errstr);
        if (conn == NULL)
            _exit(100);
        ssize_t n = read(gate_fd, &byte, 1); /* returns 0 when the gate opens */
        (void) n;
        migrate_result_t result;
        err_class_t cls = migrate_apply(conn, &result, errstr, sizeof errstr);
        PQfinish(conn);
        _exit(cls == ERR_OK ? result.applied : 100 + (int) cls);
    }
    return pid;
}

START_TEST(two_runners_at_once_apply_each_migration_once)
{
    const char *url = tl_db_create("migrate_race");
    int gate[2];
    ck_assert_int_eq(pipe(gate), 0);

    pid_t a = spawn_migrator(url, gate);
    pid_t b = spawn_migrator(url, gate);
    /* Both connected and waiting at the gate. */
    PGconn *watch = tl_db_connect(url);
    char *last = NULL;
    ck_assert_msg(tl_db_wait(watch,
                             "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND pid <> pg_backend_pid()",
                             0, NULL, "2", 30, &last),
                  "the two runners never both connected: %s connections", last);
    PQfinish(watch);
    close(gate[1]);
    close(gate[0]);

    int sa, sb;
    ck_assert_int_eq(waitpid(a, &sa, 0), a);
    ck_assert_int_eq(waitpid(b, &sb, 0), b);
    ck_assert(WIFEXITED(sa) && WIFEXITED(sb));
    int applied_a = WEXITSTATUS(sa), applied_b = WEXITSTATUS(sb);
    ck_assert_msg(applied_a < 100 && applied_b < 100, "a runner failed: %d %d", applied_a,
                  applied_b);
    /* One did all the work, the other found nothing left. */
    ck_assert_int_eq(applied_a + applied_b, (int) migrate_n_scripts);
    ck_assert(applied_a == 0 || applied_b == 0);

    PGconn *conn = tl_db_connect(url);
    char *versions = tl_db_scalar(conn, "SELECT count(*) FROM steward.schema_versions", 0, NULL);
    ck_assert_int_eq(atoi(versions), (int) migrate_n_scripts);
    free(versions);
    PQfinish(conn);
}
END_TEST

START_TEST(tampered_migration_is_refused)
{
    const char *url = tl_db_create("migrate_tamper");
    const char *argv[] = {NULL, "migrate", "--database", url, NULL};
    tl_output_t first = tl_steward(argv, NULL);
    ck_assert_int_eq(first.status, 0);

    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "UPDATE steward.schema_versions SET checksum = 'edited' WHERE version = 1");
    tl_output_t second = tl_steward(argv, NULL);
    ck_assert_int_eq(second.status, 1);
    ck_assert_msg(tl_contains(second.err, "0001_init was changed after it was applied"), "got: %s",
                  second.err);

    tl_output_free(&first);
    tl_output_free(&second);
    PQfinish(conn);
}
END_TEST

START_TEST(newer_schema_is_refused)
{
    const char *url = tl_db_create("migrate_newer");
    const char *argv[] = {NULL, "migrate", "--database", url, NULL};
    tl_output_t first = tl_steward(argv, NULL);
    ck_assert_int_eq(first.status, 0);

    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "INSERT INTO steward.schema_versions (version, name, checksum) "
                     "VALUES (9999, '9999_future', 'x')");
    tl_output_t second = tl_steward(argv, NULL);
    ck_assert_int_eq(second.status, 1);
    ck_assert_msg(tl_contains(second.err, "schema version 9999") &&
                      tl_contains(second.err, "upgrade steward"),
                  "got: %s", second.err);

    tl_output_free(&first);
    tl_output_free(&second);
    PQfinish(conn);
}
END_TEST

START_TEST(unreachable_database_fails_without_printing_the_password)
{
    const char *argv[] = {NULL, "migrate", "--database",
                          "postgresql://steward:s3cretpw@127.0.0.1:1/nowhere", NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_int_eq(o.status, 1);
    ck_assert_msg(tl_contains(o.err, "cannot connect to PostgreSQL"), "got: %s", o.err);
    ck_assert_msg(!tl_contains(o.err, "s3cretpw"), "password printed: %s", o.err);
    ck_assert_msg(tl_contains(o.err, "password=********"), "got: %s", o.err);
    tl_output_free(&o);

    const char *bad_argv[] = {NULL, "migrate", "--bogus", NULL};
    tl_output_t usage = tl_steward(bad_argv, NULL);
    ck_assert_int_eq(usage.status, 2);
    tl_output_free(&usage);
}
END_TEST

/* Runs the embedded migrations up to `last` by hand, recorded as the
 * runner records them: a database an older steward migrated. */
static void migrate_until(PGconn *conn, int last)
{
    tl_db_exec(conn, "CREATE SCHEMA steward; CREATE TABLE steward.schema_versions ("
                     "  version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                     "  applied_at timestamptz NOT NULL DEFAULT now())");
    for (size_t i = 0; i < migrate_n_scripts && migrate_scripts[i].version <= last; i++) {
        tl_db_exec(conn, migrate_scripts[i].sql);
        char version[16];
        snprintf(version, sizeof version, "%d", migrate_scripts[i].version);
        const char *params[3] = {version, migrate_scripts[i].name, migrate_scripts[i].sql};
        PGresult *res = PQexecParams(conn,
                                     "INSERT INTO steward.schema_versions (version, name, "
                                     "checksum) VALUES ($1::int, $2, md5($3))",
                                     3, NULL, params, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(res), PGRES_COMMAND_OK);
        PQclear(res);
    }
}

static const char history_digest_sql[] =
    "SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', id, process, key, version, event_id, "
    "  event_type, topic, partition, \"offset\", event_time, from_state, to_state, outcome, "
    "  replayed, detail, recorded_at, replica, epoch), E'\\n' ORDER BY id)) FROM steward.history";

START_TEST(history_rows_survive_partitioning)
{
    const char *url = tl_db_create("migrate_history");
    PGconn *conn = tl_db_connect(url);
    migrate_until(conn, 2);
    /* two months of history under the old, unpartitioned table */
    tl_db_exec(conn, "INSERT INTO steward.history (process, key, version, event_id, event_type, "
                     "  topic, partition, \"offset\", event_time, from_state, to_state, "
                     "  outcome, detail, recorded_at, replica, epoch) "
                     "SELECT 'p', 'k' || (g % 50), 1, 'e' || g, 'E', 't', g % 3, g, "
                     "  now() - g * interval '1 hour', NULL, 's', 'started', "
                     "  CASE WHEN g % 7 = 0 THEN 'note ' || g END, "
                     "  now() - g * interval '1 hour', 'r', 1 "
                     "FROM generate_series(0, 1500) g");
    char *before = tl_db_scalar(conn, history_digest_sql, 0, NULL);
    char *max_id = tl_db_scalar(conn, "SELECT max(id) FROM steward.history", 0, NULL);

    const char *argv[] = {NULL, "migrate", "--database", url, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "migrate: %s", o.err);
    ck_assert_msg(tl_contains(o.out, "migrated from version 2 to"), "got: %s", o.out);
    tl_output_free(&o);

    char *after = tl_db_scalar(conn, history_digest_sql, 0, NULL);
    ck_assert_str_eq(after, before);
    char *kind = tl_db_scalar(conn,
                              "SELECT relkind FROM pg_class WHERE oid = "
                              "'steward.history'::regclass",
                              0, NULL);
    ck_assert_str_eq(kind, "p");
    /* the rows before this week sit in one partition, bounded by it */
    char *legacy = tl_db_scalar(conn,
                                "SELECT count(*) FROM steward.history WHERE tableoid::regclass::"
                                "text LIKE 'steward.history_before_%' AND recorded_at < "
                                "date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
                                0, NULL);
    char *old = tl_db_scalar(conn,
                             "SELECT count(*) FROM steward.history WHERE recorded_at < "
                             "date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
                             0, NULL);
    ck_assert_str_eq(legacy, old);
    ck_assert_int_gt(atoi(old), 1000);
    /* the indexes came along, and the key holds the partition key */
    char *indexes = tl_db_scalar(conn,
                                 "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM "
                                 "pg_indexes WHERE schemaname = 'steward' AND tablename = "
                                 "'history'",
                                 0, NULL);
    ck_assert_str_eq(indexes, "history_event,history_instance,history_pkey");
    /* ids go on from where they were */
    tl_db_exec(conn, "INSERT INTO steward.history (process, key, event_id, event_type, topic, "
                     "  partition, \"offset\", event_time, outcome, replica, epoch) "
                     "VALUES ('p', 'new', 'n', 'E', 't', 0, 1, now(), 'started', 'r', 1)");
    char *new_id = tl_db_scalar(conn, "SELECT id FROM steward.history WHERE key = 'new'", 0, NULL);
    ck_assert_int_gt(atoll(new_id), atoll(max_id));

    /* a prune at the defaults keeps them all: the old partition ends this week */
    const char *prune[] = {NULL, "prune", "--database", url, NULL};
    o = tl_steward(prune, NULL);
    ck_assert_msg(o.status == 0, "prune: %s", o.err);
    tl_output_free(&o);
    char *count = tl_db_scalar(conn, "SELECT count(*) FROM steward.history", 0, NULL);
    ck_assert_int_eq(atoi(count), 1502);
    char *in_default = tl_db_scalar(conn, "SELECT count(*) FROM steward.history_default", 0, NULL);
    ck_assert_str_eq(in_default, "0");

    free(before);
    free(after);
    free(max_id);
    free(kind);
    free(legacy);
    free(old);
    free(indexes);
    free(new_id);
    free(count);
    free(in_default);
    PQfinish(conn);
}
END_TEST

/* The plan of `sql` (a statement with $1.. array parameters) for the
 * given array literals, as one line. */
static char *plan_of(PGconn *conn, const char *sql, const char *args)
{
    char prepare[4096];
    tl_db_exec(conn, "DEALLOCATE ALL");
    snprintf(prepare, sizeof prepare, "PREPARE probe AS %s", sql);
    tl_db_exec(conn, prepare);
    size_t size = strlen(args) + 32;
    char *execute = malloc(size);
    ck_assert_ptr_nonnull(execute);
    snprintf(execute, size, "EXECUTE probe(%s)", args);
    const char *params[1] = {execute};
    char *plan = tl_db_scalar(conn, "SELECT pg_temp.plan($1)", 1, params);
    free(execute);
    return plan;
}

/*
 * The batch reads instances and judged event ids of up to a few thousand
 * keys against tables of millions of rows. Each must stay a probe per key;
 * a plan that hashes the whole table instead works on a small table and
 * grows with everything ever judged.
 */
START_TEST(batch_reads_probe_indexes)
{
    const char *url = tl_db_create("migrate_plans");
    tl_migrate(url);

    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "INSERT INTO steward.definitions (process, version, mode, document, checksum) "
                     "VALUES ('p', 1, 'shadow', '{}', md5('{}'))");
    tl_db_exec(conn, "INSERT INTO steward.instances (process, key, version, state, status, "
                     "  started_at, state_entered_at) "
                     "SELECT 'p', 'k' || g, 1, 's', 'active', now(), now() "
                     "FROM generate_series(1, 50000) g");
    tl_db_exec(conn, "INSERT INTO steward.history (process, key, event_id, event_type, topic, "
                     "  partition, \"offset\", event_time, outcome, replica, epoch) "
                     "SELECT 'p', 'k' || (g / 6), 'e' || g, 'E', 't', 0, g, now(), 'advanced', "
                     "  'r', 1 FROM generate_series(1, 100000) g");
    tl_db_exec(conn, "ANALYZE steward.instances");
    tl_db_exec(conn, "ANALYZE steward.history");
    tl_db_exec(conn, "CREATE FUNCTION pg_temp.plan(q text) RETURNS text LANGUAGE plpgsql AS $$ "
                     "DECLARE l text; r text := ''; BEGIN "
                     "  FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP r := r || l || ' '; "
                     "  END LOOP; RETURN r; END $$");

    /* 2,000 keys, as a batch sends them: array literals. */
    char *keys = tl_db_scalar(conn,
                              "SELECT quote_literal(array_agg('p'::text)::text) || ', ' || "
                              "  quote_literal(array_agg('k' || g)::text) || ', ' || "
                              "  quote_literal(array_agg(false)::text) "
                              "FROM generate_series(20001, 22000) g",
                              0, NULL);
    char *plan = plan_of(conn, store_sql_read_instances(), keys);
    ck_assert_msg(strstr(plan, "Index Scan using instances_pkey") != NULL &&
                      strstr(plan, "Seq Scan on instances") == NULL,
                  "the instances read is not a probe per key: %s", plan);
    free(plan);
    free(keys);

    char *ids = tl_db_scalar(conn,
                             "SELECT quote_literal(array_agg('p'::text)::text) || ', ' || "
                             "  quote_literal(array_agg('k' || (g / 6))::text) || ', ' || "
                             "  quote_literal(array_agg('new' || g)::text) "
                             "FROM generate_series(1, 2000) g",
                             0, NULL);
    plan = plan_of(conn, store_sql_read_judged(), ids);
    ck_assert_msg(strstr(plan, "Scan using history_") != NULL && strstr(plan, "Seq Scan") == NULL,
                  "the judged-ids read is not a probe per event: %s", plan);
    free(plan);
    free(ids);
    PQfinish(conn);
}
END_TEST

Suite *migrate_suite(void)
{
    Suite *s = suite_create("migrate");
    TCase *tc = tcase_create("migrate");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, migrate_creates_schema_then_does_nothing);
    tcase_add_test(tc, two_runners_at_once_apply_each_migration_once);
    tcase_add_test(tc, tampered_migration_is_refused);
    tcase_add_test(tc, newer_schema_is_refused);
    tcase_add_test(tc, history_rows_survive_partitioning);
    tcase_add_test(tc, batch_reads_probe_indexes);
    tcase_add_test(tc, unreachable_database_fails_without_printing_the_password);
    suite_add_tcase(s, tc);
    return s;
}
