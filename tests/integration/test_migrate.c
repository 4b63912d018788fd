/*
 * test_migrate - the schema runner against a real PostgreSQL: a fresh
 * database, a second run that changes nothing, two runners at once, and
 * the refusals (a tampered migration, a schema newer than the binary).
 */
#include "manager/db.h"
#include "schema/migrate.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *count_tables(PGconn *conn)
{
    return tl_db_scalar(conn,
                        "SELECT count(*) FROM information_schema.tables "
                        "WHERE table_schema = 'steward'",
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
    /* schema_versions, the nine tables of 0001_init and steward.replicas (0005) */
    ck_assert_str_eq(tables, "11");
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
    usleep(200 * 1000); /* both connected and waiting at the gate */
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

Suite *migrate_suite(void)
{
    Suite *s = suite_create("migrate");
    TCase *tc = tcase_create("migrate");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, migrate_creates_schema_then_does_nothing);
    tcase_add_test(tc, two_runners_at_once_apply_each_migration_once);
    tcase_add_test(tc, tampered_migration_is_refused);
    tcase_add_test(tc, newer_schema_is_refused);
    tcase_add_test(tc, unreachable_database_fails_without_printing_the_password);
    suite_add_tcase(s, tc);
    return s;
}
