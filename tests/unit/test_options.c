/*
 * test_options - the option handling every verb shares (cli/options.h)
 * and the reload flag of the config keys, without any service.
 */
#include "cli/options.h"
#include "common/err.h"
#include "manager/config/config.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: steward test\n";

/* Parses argv as a verb with one option of its own (--only NAME) would. */
static int parse(cli_opts_t *o, int argc, char **argv, const char **only)
{
    static const struct option options[] = {
        {"only", required_argument, NULL, 'p'},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int opt, rc;
    ck_assert(cli_opts_init(o, "steward test", usage, argc, argv));
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        if (opt == 'p')
            *only = optarg;
        else if ((rc = cli_opts_take(o, opt, optarg)) >= 0)
            return rc;
    }
    return -1;
}

START_TEST(common_options_become_settings)
{
    const char *dir = tl_tmpdir();
    char *secret = tl_write_file(dir, "db", "host=/nowhere dbname=from_secret\n");
    char text[512];
    snprintf(text, sizeof text, "{\"database_file\": \"%s\", \"group\": \"g1\"}", secret);
    char *config = tl_write_file(dir, "config.json", text);
    char *argv[] = {"test",  "--config", config,   "--only", "x",
                    "--set", "group=g2", "--json", "rest",   NULL};
    const char *only = NULL;
    cli_opts_t o;

    unsetenv("STEWARD_DATABASE_URL");
    unsetenv("STEWARD_GROUP");
    ck_assert_int_eq(parse(&o, 9, argv, &only), -1);
    ck_assert_str_eq(only, "x");
    ck_assert(o.json);
    ck_assert_str_eq(o.config_path, config);
    ck_assert_int_eq(optind, 8); /* "rest" is left to the verb */
    const config_t *cfg = cli_opts_config(&o);
    ck_assert_ptr_nonnull(cfg);
    /* The secret file, newline removed; --set over the file. */
    ck_assert_str_eq(cfg->database, "host=/nowhere dbname=from_secret");
    ck_assert_str_eq(cfg->group, "g2");
    ck_assert_ptr_eq(cli_opts_config(&o), cfg); /* built once */
    cli_opts_free(&o);
    free(config);
    free(secret);
}
END_TEST

START_TEST(database_flag_beats_config_and_environment)
{
    const char *dir = tl_tmpdir();
    char *config = tl_write_file(dir, "config.json", "{\"database\": \"dbname=file\"}");
    char *argv[] = {"test", "--database", "dbname=flag", NULL};
    const char *only = NULL;
    cli_opts_t o;

    setenv("STEWARD_CONFIG", config, 1);
    setenv("STEWARD_DATABASE_URL", "dbname=env", 1);
    ck_assert_int_eq(parse(&o, 3, argv, &only), -1);
    ck_assert_str_eq(o.config_path, config); /* from STEWARD_CONFIG */
    ck_assert_str_eq(cli_opts_config(&o)->database, "dbname=flag");
    cli_opts_free(&o);

    char *bare[] = {"test", NULL};
    ck_assert_int_eq(parse(&o, 1, bare, &only), -1);
    ck_assert_str_eq(cli_opts_config(&o)->database, "dbname=env");
    cli_opts_free(&o);
    unsetenv("STEWARD_CONFIG");
    unsetenv("STEWARD_DATABASE_URL");
    free(config);
}
END_TEST

START_TEST(help_and_bad_options)
{
    const char *only = NULL;
    cli_opts_t o;
    char *help[] = {"test", "-h", NULL};
    ck_assert_int_eq(parse(&o, 2, help, &only), EXIT_OK);
    cli_opts_free(&o);
    char *unknown[] = {"test", "--nope", NULL};
    ck_assert_int_eq(parse(&o, 2, unknown, &only), EXIT_USAGE);
    cli_opts_free(&o);
    char *missing[] = {"test", "--database", NULL};
    ck_assert_int_eq(parse(&o, 2, missing, &only), EXIT_USAGE);
    cli_opts_free(&o);
    char *bad_set[] = {"test", "--set", "nokey", NULL};
    ck_assert_int_eq(parse(&o, 3, bad_set, &only), -1);
    ck_assert_ptr_null(cli_opts_config(&o)); /* "expected NAME=VALUE", printed */
    cli_opts_free(&o);
}
END_TEST

START_TEST(restart_needed_names_changed_keys)
{
    ck_assert(config_key_reloads("definitions"));
    ck_assert(config_key_reloads("routes"));
    ck_assert(!config_key_reloads("scheduler.interval"));
    ck_assert(!config_key_reloads("no.such.key"));

    config_t *a = config_new(), *b = config_new();
    const char *names[8];
    char errstr[256];
    ck_assert_int_eq(config_restart_needed(a, b, names, 8), 0);
    ck_assert_int_eq(config_set(b, "definitions", "/elsewhere", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(config_restart_needed(a, b, names, 8), 0); /* reloads */
    ck_assert_int_eq(config_set(b, "scheduler.interval", "5s", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(config_set(b, "http.listen", "", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(config_set_kafka(b, "client.id", "x", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(config_restart_needed(a, b, names, 8), 3);
    ck_assert_str_eq(names[0], "scheduler.interval");
    ck_assert_str_eq(names[1], "http.listen");
    ck_assert_str_eq(names[2], "kafka");
    ck_assert_int_eq(config_restart_needed(a, b, names, 1), 3); /* counts past max */
    config_free(a);
    config_free(b);
}
END_TEST

START_TEST(new_keys_parse)
{
    config_t *cfg = config_new();
    char errstr[256];
    ck_assert(cfg->migrate_on_start);
    ck_assert_str_eq(cfg->roles_owner, "steward_owner");
    ck_assert_str_eq(cfg->roles_runtime, "steward_runtime");
    ck_assert_str_eq(cfg->roles_reader, "steward_reader");
    ck_assert_int_eq(config_set(cfg, "migrate_on_start", "false", errstr, sizeof errstr), ERR_OK);
    ck_assert(!cfg->migrate_on_start);
    ck_assert_int_eq(config_set(cfg, "roles.reader", "ro", errstr, sizeof errstr), ERR_OK);
    ck_assert_str_eq(cfg->roles_reader, "ro");
    config_free(cfg);
}
END_TEST

Suite *options_suite(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("options");
    tcase_add_test(tc, common_options_become_settings);
    tcase_add_test(tc, database_flag_beats_config_and_environment);
    tcase_add_test(tc, help_and_bad_options);
    tcase_add_test(tc, restart_needed_names_changed_keys);
    tcase_add_test(tc, new_keys_parse);
    suite_add_tcase(s, tc);
    return s;
}
