/*
 * test_cli - what every verb shares, through the binary: -h, the config
 * file and its secrets, the schema check, and the consistency rules.
 *
 *   help       `steward VERB -h` prints the usage on stdout and exits 0
 *   config     STEWARD_CONFIG and --config, with database_file, reach the
 *              database for stuck, inspect, report, migrate, prune and the
 *              operator verbs; backtest takes its database and brokers there
 *   schema     the operator verbs on an unmigrated database say so, before
 *              any query fails
 *   status     migrate --status exits 1 while migrations are pending, 0 after
 *   stuck      --process with an unknown process exits 1 and says so; a
 *              schema missing a migration below its newest is refused
 *   check      check --database refuses a changed document under a version
 *              the database recorded; the same document passes
 *   run        --batch-ms takes a duration; a port in use is named in the
 *              error; SIGHUP names each changed setting that needs a restart;
 *              a signal raised before main() does not kill it
 *   fifo       check and run refuse a FIFO as a definition, named or in a
 *              directory, at once
 *   escapes    the operator verbs' text output escapes control characters
 */
#include "testlib.h"

#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* A small valid definition; deadline is the first state's. */
static char *write_definition(const char *dir, const char *prefix, const char *deadline)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"process\": \"cli_order\", \"version\": 1, \"mode\": \"shadow\",\n"
             " \"owner\": \"fulfilment\", \"key\": \"/order_id\",\n"
             " \"events\": {\"OrderPlaced\": {\"topic\": \"%sorders\"},\n"
             "            \"OrderShipped\": {\"topic\": \"%sorders\"}},\n"
             " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"placed\"},\n"
             " \"states\": {\"placed\": {\"deadline\": \"%s\", \"on\": {\"OrderShipped\": "
             "\"shipped\"}},\n"
             "            \"shipped\": {\"terminal\": \"success\"}}}\n",
             prefix, prefix, deadline);
    return tl_write_file(dir, "cli_order.json", text);
}

START_TEST(every_verb_has_help)
{
    const char *verbs[] = {"run",     "check",    "migrate",  "inspect",   "stuck",  "report",
                           "demo",    "backtest", "prune",    "discover",  "graph",  "version",
                           "ack",     "resolve",  "close",    "move",      "retry",  "claim",
                           "release", "silence",  "silences", "unsilence", "upgrade"};
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        /* An unknown option: exit 2, said one way by every verb. */
        const char *bad[] = {NULL, verbs[i], "--no-such-option", NULL};
        tl_output_t b = tl_steward(bad, NULL);
        char said[128], usage[64];
        snprintf(said, sizeof said, "steward %s: unknown option '--no-such-option'\n", verbs[i]);
        snprintf(usage, sizeof usage, "usage: steward %s", verbs[i]);
        ck_assert_msg(b.status == 2 && strncmp(b.err, said, strlen(said)) == 0 &&
                          tl_contains(b.err, usage),
                      "steward %s --no-such-option: exit %d, stderr %s", verbs[i], b.status, b.err);
        tl_output_free(&b);
        for (int form = 0; form < 2; form++) {
            const char *argv[] = {NULL, verbs[i], form == 0 ? "-h" : "--help", NULL};
            tl_output_t o = tl_steward(argv, NULL);
            char expected[64];
            snprintf(expected, sizeof expected, "usage: steward %s", verbs[i]);
            ck_assert_msg(o.status == 0 && tl_contains(o.out, expected),
                          "steward %s %s: exit %d, stdout %s, stderr %s", verbs[i], argv[2],
                          o.status, o.out, o.err);
            tl_output_free(&o);
        }
    }
    /* version --json prints JSON. */
    const char *version[] = {NULL, "version", "--json", NULL};
    tl_output_t o = tl_steward(version, NULL);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(o.status == 0 && doc != NULL &&
                      strcmp(json_string_value(json_object_get(doc, "version")), STEWARD_VERSION) ==
                          0,
                  "steward version --json: exit %d: %s", o.status, o.out);
    json_decref(doc);
    tl_output_free(&o);

    /* --set takes a secret's file as the config file does (KEY_file). */
    const char *dir = tl_tmpdir();
    char *def = write_definition(dir, "", "1h");
    char *tokens =
        tl_write_file(dir, "tokens",
                      "alice operate "
                      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n");
    char set[1200];
    snprintf(set, sizeof set, "http.tokens_file=%s", tokens);
    const char *check[] = {NULL, "check", "--set", set, def, NULL};
    o = tl_steward(check, NULL);
    ck_assert_msg(o.status == 0, "steward check --set %s: exit %d: %s", set, o.status, o.err);
    tl_output_free(&o);
    snprintf(set, sizeof set, "http.tokens_file=%s/no-such-file", dir);
    o = tl_steward(check, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "http.tokens_file") &&
                      !tl_contains(o.err, "unknown key"),
                  "steward check --set %s: exit %d: %s", set, o.status, o.err);
    tl_output_free(&o);
    free(def);
    free(tokens);
}
END_TEST

START_TEST(config_file_reaches_the_database_for_every_verb)
{
    const char *url = tl_db_create("cli_config");
    tl_migrate(url);
    const char *dir = tl_tmpdir();
    char *secret = tl_write_file(dir, "database", url); /* no newline: as a secret file may be */
    json_t *cfg = json_pack("{s:s}", "database_file", secret);
    char config[1024];
    snprintf(config, sizeof config, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(cfg, config, 0), 0);
    json_decref(cfg);
    char env_config[1100];
    snprintf(env_config, sizeof env_config, "STEWARD_CONFIG=%s", config);
    const char *env[] = {env_config, NULL};

    /* Each verb, once through the variable and once through the flag. */
    const char *const verbs[][8] = {
        {"stuck", NULL},
        {"inspect", "cli_order", "k-1", NULL},
        {"report", NULL},
        {"migrate", "--status", NULL},
        {"prune", "--dry-run", NULL},
        {"silences", "--json", NULL},
        {"ack", "1", "--reason", "x", "--actor", "tester", NULL},
        {"close", "cli_order", "k-1", "--as", "cancelled", "--reason", "x", NULL},
        {"silence", "--process", "cli_order", "--for", "1h", "--reason", "x", NULL},
        {"unsilence", "999999", "--reason", "x", NULL},
    };
    const int expect[] = {0, 1, 0, 0, 0, 0, 1, 1, 1, 1};
    /* What each says once it has queried, not merely connected. */
    const char *const says[] = {NULL,
                                "no instance k-1 of cli_order",
                                NULL,
                                NULL,
                                NULL,
                                "\"silences\"",
                                "no alert 1",
                                "no instance k-1 of cli_order",
                                "no process cli_order",
                                "no silence 999999"};
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        for (int via_flag = 0; via_flag < 2; via_flag++) {
            const char *argv[12] = {NULL};
            size_t n = 1;
            for (size_t j = 0; verbs[i][j] != NULL; j++)
                argv[n++] = verbs[i][j];
            if (via_flag) {
                argv[n++] = "--config";
                argv[n++] = config;
            }
            tl_output_t o = tl_steward(argv, via_flag ? NULL : env);
            ck_assert_msg(o.status == expect[i], "steward %s (%s): exit %d: %s", verbs[i][0],
                          via_flag ? "--config" : "STEWARD_CONFIG", o.status, o.err);
            if (says[i] != NULL)
                ck_assert_msg(tl_contains(o.out, says[i]) || tl_contains(o.err, says[i]),
                              "steward %s: want %s, got: %s%s", verbs[i][0], says[i], o.out, o.err);
            tl_output_free(&o);
        }
    }
    free(secret);
}
END_TEST

START_TEST(backtest_takes_database_and_brokers_from_the_config)
{
    const char *dir = tl_tmpdir();
    char *defs = write_definition(dir, "p.", "1h");
    /* A server nobody listens on: the error shows which database it used. */
    char *secret = tl_write_file(dir, "database", "host=127.0.0.1 port=1 dbname=nowhere");
    json_t *cfg = json_pack("{s:s, s:s}", "database_file", secret, "brokers", tl_kafka_brokers());
    char config[1024], env_config[1100];
    snprintf(config, sizeof config, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(cfg, config, 0), 0);
    json_decref(cfg);
    snprintf(env_config, sizeof env_config, "STEWARD_CONFIG=%s", config);
    const char *env[] = {env_config, NULL};

    const char *argv[] = {NULL, "backtest", "--definition", defs, "--from", "1h", NULL};
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 1 && !tl_contains(o.err, "no brokers") &&
                      tl_contains(o.err, "port 1"),
                  "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    free(secret);
    free(defs);
}
END_TEST

START_TEST(operator_verbs_name_a_missing_schema)
{
    const char *url = tl_db_create("cli_noschema");
    const char *const verbs[][9] = {
        {"ack", "1", NULL},
        {"resolve", "1", NULL},
        {"close", "cli_order", "k-1", "--as", "cancelled", NULL},
        {"move", "cli_order", "k-1", "--to", "placed", NULL},
        {"retry", "cli_order", "k-1", NULL},
        {"claim", "cli_order", "k-1", NULL},
        {"release", "cli_order", "k-1", NULL},
        {"silence", "--process", "cli_order", "--for", "1h", NULL},
        {"silences", NULL},
        {"unsilence", "1", NULL},
    };
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        const char *argv[16] = {NULL};
        size_t n = 1;
        for (size_t j = 0; verbs[i][j] != NULL; j++)
            argv[n++] = verbs[i][j];
        if (strcmp(verbs[i][0], "silences") != 0) {
            argv[n++] = "--reason";
            argv[n++] = "x";
            argv[n++] = "--actor";
            argv[n++] = "tester";
        }
        argv[n++] = "--database";
        argv[n++] = url;
        tl_output_t o = tl_steward(argv, NULL);
        ck_assert_msg(o.status == 1 && tl_contains(o.err, "no steward schema") &&
                          tl_contains(o.err, "run steward migrate"),
                      "steward %s: exit %d: %s", verbs[i][0], o.status, o.err);
        tl_output_free(&o);
    }
}
END_TEST

START_TEST(migrate_status_exits_1_while_pending)
{
    const char *url = tl_db_create("cli_status");
    const char *argv[] = {NULL, "migrate", "--status", "--database", url, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.out, "migrations pending"), "exit %d: %s%s",
                  o.status, o.out, o.err);
    tl_output_free(&o);
    const char *json_argv[] = {NULL, "migrate", "--status", "--json", "--database", url, NULL};
    o = tl_steward(json_argv, NULL);
    json_t *doc = json_loads(o.out, 0, NULL);
    ck_assert_msg(o.status == 1 && json_is_true(json_object_get(doc, "pending")), "got: %s", o.out);
    json_decref(doc);
    tl_output_free(&o);

    tl_migrate(url);
    o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0 && !tl_contains(o.out, "pending"), "exit %d: %s", o.status, o.out);
    tl_output_free(&o);
}
END_TEST

START_TEST(stuck_refuses_an_unknown_process)
{
    const char *url = tl_db_create("cli_stuck");
    tl_migrate(url);
    const char *argv[] = {NULL, "stuck", "--process", "no_such_process", "--database", url, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "no process no_such_process"),
                  "exit %d: %s%s", o.status, o.out, o.err);
    tl_output_free(&o);

    /* A migration below the newest missing (branches merged out of order):
     * the readers see it too, not only a lower version. */
    PGconn *conn = tl_db_connect(url);
    tl_db_exec(conn, "DELETE FROM steward.schema_versions WHERE version = 4");
    PQfinish(conn);
    const char *plain[] = {NULL, "stuck", "--database", url, NULL};
    o = tl_steward(plain, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "lacks 1 migration(s)"), "exit %d: %s%s",
                  o.status, o.out, o.err);
    tl_output_free(&o);
}
END_TEST

/* Records the definition file at `path` as version 1 of cli_order in the
 * database at `url`, as steward run would. */
static void record_definition(const char *url, const char *path)
{
    char *text = tl_read_file(path);
    PGconn *conn = tl_db_connect(url);
    const char *params[1] = {text};
    free(tl_db_scalar(conn,
                      "INSERT INTO steward.definitions (process, version, mode, document, "
                      "checksum) VALUES ('cli_order', 1, 'shadow', $1::jsonb, "
                      "md5(($1::jsonb)::text)) RETURNING 1",
                      1, params));
    PQfinish(conn);
    free(text);
}

START_TEST(check_database_refuses_a_changed_recorded_version)
{
    const char *url = tl_db_create("cli_check");
    tl_migrate(url);
    const char *dir = tl_tmpdir();
    char *recorded = write_definition(dir, "p.", "1h");
    record_definition(url, recorded);

    /* The same document, reformatted by nothing: fine with or without a database. */
    const char *same[] = {NULL, "check", "--database", url, recorded, NULL};
    tl_output_t o = tl_steward(same, NULL);
    ck_assert_msg(o.status == 0, "exit %d: %s", o.status, o.err);
    tl_output_free(&o);

    char *changed = write_definition(dir, "p.", "2h"); /* same version, another deadline */
    const char *offline[] = {NULL, "check", changed, NULL};
    o = tl_steward(offline, NULL);
    ck_assert_msg(o.status == 0, "offline: exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    const char *online[] = {NULL, "check", "--database", url, changed, NULL};
    o = tl_steward(online, NULL);
    ck_assert_msg(o.status == 2 &&
                      tl_contains(o.err, "version 1 of process cli_order is "
                                         "already recorded") &&
                      tl_contains(o.err, ": /version: "),
                  "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    free(changed);
    free(recorded);
}
END_TEST

START_TEST(run_flags_and_messages)
{
    const char *dir = tl_tmpdir();
    char *defs = write_definition(dir, "p.", "1h");

    /* --batch-ms is a duration, judged like its key. */
    const char *bad_ms[] = {NULL, "run",        "--brokers",    "127.0.0.1:1", "--definitions",
                            defs, "--batch-ms", "2 fortnights", NULL};
    tl_output_t o = tl_steward(bad_ms, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "intake.batch_ms"), "exit %d: %s", o.status,
                  o.err);
    tl_output_free(&o);

    /* A port someone holds: the error names it, not "port 0". */
    int port, fd = tl_hold_port(&port);
    char listen_at[64], port_words[64];
    snprintf(listen_at, sizeof listen_at, "127.0.0.1:%d", port);
    snprintf(port_words, sizeof port_words, "port %d", port);
    const char *in_use[] = {NULL, "run",        "--brokers", "127.0.0.1:1",   "--definitions",
                            defs, "--batch-ms", "20ms",      "--http-listen", listen_at,
                            NULL};
    o = tl_steward(in_use, NULL);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, port_words) && !tl_contains(o.err, "port 0"),
                  "exit %d: %s", o.status, o.err);
    tl_output_free(&o);
    close(fd);
    free(defs);
}
END_TEST

START_TEST(sighup_names_settings_that_need_a_restart)
{
    const char *url = tl_db_create("cli_hup");
    tl_migrate(url);
    const char *dir = tl_tmpdir();
    char *prefix = tl_unique("cli");
    char *defs = write_definition(dir, prefix, "1h");
    char config[1024];
    snprintf(config, sizeof config, "%s/config.json", dir);
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:s, s:{s:s}, s:{s:s}}", "database", url, "brokers",
                            tl_kafka_brokers(), "definitions", defs, "group", prefix, "scheduler",
                            "interval", "1s", "http", "listen", "");
    ck_assert_int_eq(json_dump_file(cfg, config, 0), 0);
    char *log = tl_write_file(dir, "steward.log", "");
    const char *argv[] = {NULL, "run", "--config", config, NULL};
    int pid = tl_steward_spawn(argv, NULL, log);

    /* Running once the replica row is there. */
    PGconn *conn = tl_db_connect(url);
    ck_assert_msg(
        tl_db_wait(conn, "SELECT count(*) > 0 FROM steward.replicas", 0, NULL, "t", 30, NULL),
        "steward never started");
    json_object_set_new(json_object_get(cfg, "scheduler"), "interval", json_string("2s"));
    ck_assert_int_eq(json_dump_file(cfg, config, 0), 0);
    json_decref(cfg);
    kill(pid, SIGHUP);

    tl_wait_file(log, "needs a restart", 20);
    char *text = tl_read_file(log);
    ck_assert_msg(tl_contains(text, "scheduler.interval"), "the restart warning: %s", text);
    ck_assert_msg(!tl_contains(text, "\"key\":\"definitions\""), "definitions reload: %s", text);
    free(text);
    ck_assert_int_eq(tl_stop(pid, SIGTERM, 30), 0);
    PQfinish(conn);
    free(log);
    free(defs);
    free(prefix);
}
END_TEST

/* check and run refuse a FIFO at once, named or inside a directory,
 * instead of waiting for a writer that never comes. */
START_TEST(check_and_run_refuse_a_fifo)
{
    const char *dir = tl_tmpdir();
    char *defs = write_definition(dir, "p.", "1h");
    char fifo[1024];
    snprintf(fifo, sizeof fifo, "%s/pipe.json", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);

    const char *named[] = {NULL, "check", fifo, NULL};
    tl_output_t o = tl_steward(named, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "is a FIFO, not a regular file"),
                  "check FIFO: exit %d: %s", o.status, o.err);
    tl_output_free(&o);

    const char *in_dir[] = {NULL, "check", dir, NULL};
    o = tl_steward(in_dir, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "pipe.json") &&
                      tl_contains(o.err, "is a FIFO"),
                  "check DIR: exit %d: %s", o.status, o.err);
    tl_output_free(&o);

    const char *run[] = {NULL, "run", "--brokers", "127.0.0.1:1", "--definitions", dir, NULL};
    o = tl_steward(run, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "is a FIFO"), "run: exit %d: %s", o.status,
                  o.err);
    tl_output_free(&o);
    free(defs);
}
END_TEST

/* A signal that arrives while the libraries initialise, before main(),
 * waits for the daemon instead of killing it with the default action:
 * here raised from a preloaded constructor, every time. This run stops at
 * its definitions (exit 2), so a signal that got through shows as 128+N. */
START_TEST(a_signal_before_main_does_not_kill_run)
{
    const char *asan = getenv("ASAN_OPTIONS");
    char preload[1024], asan_env[1024];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", STEWARD_RAISE_SIGNAL_LIB);
    /* The sanitizer runtime wants to be first; the preload is first here. */
    snprintf(asan_env, sizeof asan_env, "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
             asan != NULL ? asan : "", asan != NULL && *asan != '\0' ? ":" : "");
    static const char *const names[] = {"STEWARD_TEST_RAISE=HUP", "STEWARD_TEST_RAISE=TERM",
                                        "STEWARD_TEST_RAISE=INT"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *env[] = {preload, asan_env, names[i], NULL};
        const char *argv[] = {NULL,          "run",           "--brokers",
                              "127.0.0.1:1", "--definitions", "/nonexistent/definitions",
                              NULL};
        tl_output_t o = tl_steward(argv, env);
        ck_assert_msg(o.status == 2 && tl_contains(o.err, "/nonexistent/definitions"),
                      "%s: exit %d: %s", names[i], o.status, o.err);
        tl_output_free(&o);
    }
}
END_TEST

/* What others typed reaches a terminal escaped in text output; --json
 * keeps it as JSON escapes it. */
START_TEST(text_output_escapes_control_characters)
{
    const char *url = tl_db_create("cli_escape");
    tl_migrate(url);
    /* A silence is only taken for a process with a recorded definition. */
    char *recorded = write_definition(tl_tmpdir(), "p.", "1h");
    record_definition(url, recorded);
    free(recorded);
    const char *sil[] = {NULL,
                         "silence",
                         "--process",
                         "cli_order",
                         "--for",
                         "1h",
                         "--reason",
                         "\x1b[2Jwiped",
                         "--actor",
                         "\x1b]0;owned\x07"
                         "eve\xc2\x9b",
                         "--database",
                         url,
                         NULL};
    tl_output_t o = tl_steward(sil, NULL);
    ck_assert_msg(o.status == 0, "silence: %d %s", o.status, o.err);
    tl_output_free(&o);

    const char *list[] = {NULL, "silences", "--database", url, NULL};
    o = tl_steward(list, NULL);
    ck_assert_msg(o.status == 0, "silences: %d %s", o.status, o.err);
    ck_assert_msg(strchr(o.out, '\x1b') == NULL && strchr(o.out, '\x07') == NULL &&
                      strstr(o.out, "\xc2\x9b") == NULL,
                  "raw control characters in: %s", o.out);
    ck_assert_msg(tl_contains(o.out, "by \\x1b]0;owned\\x07eve\\u009b: \\x1b[2Jwiped"),
                  "silences: %s", o.out);
    tl_output_free(&o);

    const char *json[] = {NULL, "silences", "--json", "--database", url, NULL};
    o = tl_steward(json, NULL);
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "\\u001B[2Jwiped"), "silences --json: %s",
                  o.out);
    tl_output_free(&o);

    /* A refusal repeats the key it was given: escaped too. */
    const char *close_argv[] = {NULL,         "close",    "cli_order", "k\x1b[31m", "--as",
                                "cancelled",  "--reason", "x",         "--actor",   "tester",
                                "--database", url,        NULL};
    o = tl_steward(close_argv, NULL);
    ck_assert_msg(o.status == 1 && strchr(o.err, '\x1b') == NULL &&
                      tl_contains(o.err, "no instance k\\x1b[31m of cli_order"),
                  "close: %d %s", o.status, o.err);
    tl_output_free(&o);
}
END_TEST

Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_verb_has_help);
    tcase_add_test(tc, config_file_reaches_the_database_for_every_verb);
    tcase_add_test(tc, backtest_takes_database_and_brokers_from_the_config);
    tcase_add_test(tc, operator_verbs_name_a_missing_schema);
    tcase_add_test(tc, migrate_status_exits_1_while_pending);
    tcase_add_test(tc, stuck_refuses_an_unknown_process);
    tcase_add_test(tc, check_database_refuses_a_changed_recorded_version);
    tcase_add_test(tc, run_flags_and_messages);
    tcase_add_test(tc, sighup_names_settings_that_need_a_restart);
    tcase_add_test(tc, text_output_escapes_control_characters);
    tcase_add_test(tc, a_signal_before_main_does_not_kill_run);
    tcase_add_test(tc, check_and_run_refuse_a_fifo);
    suite_add_tcase(s, tc);
    return s;
}
