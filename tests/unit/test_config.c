/*
 * test_config - `steward run` refuses a bad configuration before it
 * touches anything: exit 2, with the key and the problem named. No
 * services are needed: every case fails before the first connection.
 * The key table's defaults, and the docs' table of them, are checked too.
 */
#include "common/secret.h"
#include "manager/config/config.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static void setup(void)
{
    dir = tl_tmpdir();
    char *def = tl_source_path("definitions/examples/order_fulfilment.json");
    char *text = tl_read_file(def);
    free(tl_write_file(dir, "order_fulfilment.json", text));
    free(text);
    free(def);
}

/* Runs steward run with a config file of this text (and extra env), expects
 * exit 2 and `words` on stderr. */
static void refused(const char *config, const char *const *env, const char *words)
{
    char *path = tl_write_file(dir, "config.json", config);
    const char *argv[] = {NULL, "run", "--config", path, NULL};
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 2, "exit %d for %s\nstderr: %s", o.status, config, o.err);
    ck_assert_msg(tl_contains(o.err, words), "expected '%s' in:\n%s", words, o.err);
    tl_output_free(&o);
    free(path);
}

/* A valid config with one fragment spliced in before the closing brace. */
static char *with(const char *fragment)
{
    char *text = NULL;
    ck_assert_int_ge(asprintf(&text,
                              "{\"brokers\": \"127.0.0.1:1\", \"database\": \"host=127.0.0.1 "
                              "port=1\", \"definitions\": \"%s\"%s%s}",
                              dir, *fragment ? ", " : "", fragment),
                     0);
    return text;
}

#define REFUSED(fragment, words)                                                                   \
    do {                                                                                           \
        char *config_ = with(fragment);                                                            \
        refused(config_, NULL, words);                                                             \
        free(config_);                                                                             \
    } while (0)

START_TEST(syntax_errors_name_the_line)
{
    refused("{\"brokers\": \"x\",\n \"group\": }", NULL, "line 2");
    refused("[1, 2]", NULL, "must be a JSON object");
    refused("{\"group\": \"a\", \"group\": \"b\"}", NULL, "duplicate");
}
END_TEST

START_TEST(unknown_keys_are_named_with_a_suggestion)
{
    REFUSED("\"intake\": {\"bach_size\": 10}",
            "intake.bach_size: unknown key (did you mean 'intake.batch_size'?)");
    REFUSED("\"grup\": \"x\"", "grup: unknown key (did you mean 'group'?)");
    REFUSED("\"intake\": 5", "intake: expected an object");
}
END_TEST

START_TEST(topic_mapping_keys)
{
    config_flag_t flags[] = {{"set", "topics.prefix=staging."},
                             {"set", "topics.map=payments=prod.payments.v2,orders=prod.orders"}};
    err_class_t cls;
    char errstr[512];
    config_t *cfg = config_build(NULL, flags, 2, &cls, errstr, sizeof errstr);
    ck_assert_msg(cfg != NULL, "%s", errstr);
    ck_assert_str_eq(cfg->topics_prefix, "staging.");
    ck_assert_str_eq(json_string_value(json_object_get(cfg->topics_map, "payments")),
                     "prod.payments.v2");
    ck_assert_str_eq(json_string_value(json_object_get(cfg->topics_map, "orders")), "prod.orders");
    config_free(cfg);

    config_flag_t twice[] = {{"set", "topics.map=a=x,b=x"}};
    ck_assert_ptr_null(config_build(NULL, twice, 1, &cls, errstr, sizeof errstr));
    ck_assert_msg(tl_contains(errstr, "'a' and 'b' both map to broker topic 'x'"), "%s", errstr);

    REFUSED("\"topics\": {\"prefix\": \"staging/\"}", "topics.prefix: 'staging/' is not a topic");
    REFUSED("\"topics\": {\"map\": {\"orders\": 5}}", "topics.map: orders: expected the broker");
    REFUSED("\"topics\": {\"map\": \"orders\"}", "topics.map: 'orders' is not NAME=BROKER_NAME");
    REFUSED("\"topics\": {\"prefx\": \"a.\"}", "did you mean 'topics.prefix'");
}
END_TEST

START_TEST(bad_values_are_named)
{
    REFUSED("\"scheduler\": {\"interval\": \"soon\"}", "scheduler.interval");
    REFUSED("\"intake\": {\"batch_size\": 0}",
            "intake.batch_size: '0' is not a whole number from 1 to 100000");
    REFUSED("\"intake\": {\"transactions\": 5}",
            "intake.transactions: '5' is not a whole number from 1 to 4");
    REFUSED("\"scheduler\": {\"transactions\": 0}",
            "scheduler.transactions: '0' is not a whole number from 1 to 4");
    REFUSED("\"log_level\": \"loud\"", "log_level: 'loud' is not one of");
    REFUSED("\"scheduler\": {\"blind_after\": \"1ms\"}", "scheduler.blind_after: '1ms' is outside");
    REFUSED("\"group\": [1]", "group: expected a string or a number");
    REFUSED("\"intake\": {\"record_unknown\": \"maybe\"}",
            "intake.record_unknown: 'maybe' is not true or false");
    REFUSED("\"intake\": {\"record_unknown\": 2}",
            "intake.record_unknown: '2' is not true or false");
    REFUSED("\"tracing\": {\"link\": \"https://tempo.example/trace/\"}",
            "tracing.link: 'https://tempo.example/trace/' is not an http:// or https:// URL "
            "holding ${trace_id}");
    REFUSED("\"tracing\": {\"link\": \"ftp://t.example/${trace_id}\"}",
            "tracing.link: 'ftp://t.example/${trace_id}' is not an http://");
}
END_TEST

START_TEST(the_tracing_link_is_a_url_with_the_trace_id)
{
    config_t *cfg = config_new();
    char errstr[512];
    ck_assert_str_eq(cfg->tracing_link, "");
    ck_assert_int_eq(config_set(cfg, "tracing.link", "https://tempo.example/trace/${trace_id}",
                                errstr, sizeof errstr),
                     ERR_OK);
    ck_assert_str_eq(cfg->tracing_link, "https://tempo.example/trace/${trace_id}");
    ck_assert_int_eq(
        config_set(cfg, "tracing.link", "http://j.example/t?id=${trace_id}", errstr, sizeof errstr),
        ERR_OK);
    ck_assert_int_eq(config_set(cfg, "tracing.link", "", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(
        config_set(cfg, "tracing.link", "https://t.example/${trace_id} x", errstr, sizeof errstr),
        ERR_INVALID);
    config_free(cfg);
}
END_TEST

START_TEST(routes_are_checked)
{
    REFUSED("\"routes\": {\"payments\": [{\"type\": \"log\"}]}", "routes.default: missing");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"pager\"}]}",
            "routes.default[0].type: 'pager': expected log, webhook, pagerduty or alertmanager");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"pagerduty\"}]}",
            "routes.default[0].routing_key: a pagerduty sink needs");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"webhook\", \"ulr\": \"http://x\"}]}",
            "routes.default[0].ulr: unknown key (did you mean 'url'?)");
    REFUSED("\"routes\": {\"default\": []}", "routes.default: expected a non-empty list");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"log\", \"name\": \"a\"}, {\"type\": \"log\", "
            "\"name\": \"a\", \"severity\": \"info\"}]}",
            "names another sink too");
    /* Every sink posts over HTTP: no other scheme, even where a URL is optional. */
    REFUSED("\"routes\": {\"default\": [{\"type\": \"pagerduty\", \"routing_key\": \"k\", "
            "\"url\": \"file:///etc/passwd\"}]}",
            "routes.default[0].url: expected an http:// or https:// URL");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"webhook\", \"url\": \"httpx://h/\"}]}",
            "routes.default[0].url: expected an http:// or https:// URL");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"alertmanager\", \"url\": "
            "\"gopher://h/\"}]}",
            "routes.default[0].url: expected an http:// or https:// URL");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"webhook\", \"url\": \"http:///x\"}]}",
            "routes.default[0].url: expected an http:// or https:// URL");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"log\", \"url\": \"file:///tmp/x\"}]}",
            "routes.default[0].url: expected an http:// or https:// URL");
}
END_TEST

START_TEST(secrets_and_kafka_properties)
{
    REFUSED("\"database_file\": \"/nonexistent/secret\"", "database_file: cannot read");
    REFUSED("\"kafka\": {\"no.such.property\": \"1\"}", "kafka.no.such.property:");
    REFUSED("\"kafka\": [1]", "kafka: expected an object");
    /* What Steward's offsets, reads and delivery rest on is not a property
     * to override: the message says what to set instead. */
    REFUSED("\"kafka\": {\"group.id\": \"other\"}",
            "kafka.group.id: Steward sets this property itself and cannot take it: set the "
            "consumer group with `group`");
    REFUSED("\"kafka\": {\"enable.auto.commit\": \"true\"}", "kafka.enable.auto.commit: Steward");
    REFUSED("\"kafka\": {\"isolation.level\": \"read_uncommitted\"}",
            "kafka.isolation.level: Steward");
    REFUSED("\"routes\": {\"default\": [{\"type\": \"pagerduty\", \"routing_key_file\": "
            "\"/nonexistent/key\"}]}",
            "routes.default[0].routing_key_file: cannot read /nonexistent/key");
}
END_TEST

/* The same from a flag, and for each property Steward owns; the ones
 * it only defaults stay the user's. */
START_TEST(owned_kafka_properties_are_refused_from_flags)
{
    static const char *const owned[] = {"group.id=other",
                                        "bootstrap.servers=x:9092",
                                        "metadata.broker.list=x:9092",
                                        "enable.auto.commit=true",
                                        "enable.auto.offset.store=true",
                                        "auto.offset.reset=latest",
                                        "isolation.level=read_uncommitted",
                                        "partition.assignment.strategy=cooperative-sticky",
                                        "group.protocol=consumer",
                                        "enable.idempotence=false",
                                        "acks=1",
                                        "request.required.acks=1",
                                        "auto.commit.enable=true"};
    err_class_t cls;
    char errstr[512];
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) {
        config_flag_t flags[] = {{"kafka", owned[i]}};
        config_t *cfg = config_build(NULL, flags, 1, &cls, errstr, sizeof errstr);
        ck_assert_msg(cfg == NULL && cls == ERR_INVALID, "%s was taken", owned[i]);
        ck_assert_msg(tl_contains(errstr, "Steward sets this property itself"), "%s: %s", owned[i],
                      errstr);
    }
    config_flag_t group[] = {{"kafka", "group.id=other"}};
    ck_assert_ptr_null(config_build(NULL, group, 1, &cls, errstr, sizeof errstr));
    ck_assert_msg(tl_contains(errstr, "--group"), "%s", errstr);

    config_flag_t tuning[] = {{"kafka", "session.timeout.ms=10000"},
                              {"kafka", "security.protocol=plaintext"}};
    config_t *cfg = config_build(NULL, tuning, 2, &cls, errstr, sizeof errstr);
    ck_assert_msg(cfg != NULL, "%s", errstr);
    ck_assert_uint_eq(cfg->n_kafka_props, 2);
    config_free(cfg);
}
END_TEST

/* A secret file is read whole (a tokens file of many lines), or refused. */
START_TEST(secret_files_are_read_whole_or_refused)
{
    char err[256];
    size_t big = 9999; /* ends on a letter: only the final newline goes */
    char *text = malloc(big + 2);
    for (size_t i = 0; i < big; i++)
        text[i] = i % 80 == 79 ? '\n' : (char) ('a' + i % 26);
    text[big] = '\n';
    text[big + 1] = '\0';
    char *path = tl_write_file(dir, "tokens", text);
    char *read = secret_read_file(path, err, sizeof err);
    ck_assert_msg(read != NULL, "%s", err);
    ck_assert_uint_eq(strlen(read), big); /* all of it, the last newline dropped */
    ck_assert_int_eq(memcmp(read, text, big), 0);
    free(read);
    free(path);
    free(text);

    text = malloc(SECRET_MAX_BYTES + 2);
    memset(text, 'x', SECRET_MAX_BYTES + 1);
    text[SECRET_MAX_BYTES + 1] = '\0';
    path = tl_write_file(dir, "huge", text);
    ck_assert_ptr_null(secret_read_file(path, err, sizeof err));
    ck_assert_msg(tl_contains(err, "larger than"), "%s", err);
    free(path);
    free(text);
}
END_TEST

START_TEST(missing_settings_and_environment)
{
    refused("{\"definitions\": \"/tmp\"}", NULL, "brokers: not set");
    char *config = with("");
    const char *env[] = {"STEWARD_BATCH_SIZE=lots", NULL};
    refused(config, env, "STEWARD_BATCH_SIZE: intake.batch_size: 'lots' is not a whole number");
    free(config);

    /* Flags name their key too. */
    char *path = tl_write_file(dir, "config.json", "{}");
    const char *argv[] = {NULL, "run",           "--config", path,    "--brokers",
                          "x",  "--definitions", dir,        "--set", "scheduler.grase=1s",
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "scheduler.grase: unknown key (did you mean "
                                     "'scheduler.grace'?)"),
                  "got: %s", o.err);
    tl_output_free(&o);
    const char *missing[] = {NULL, "run", "--config", "/nonexistent/steward.json", NULL};
    o = tl_steward(missing, NULL);
    ck_assert_int_eq(o.status, 2);
    ck_assert_msg(tl_contains(o.err, "/nonexistent/steward.json"), "got: %s", o.err);
    tl_output_free(&o);
    free(path);
}
END_TEST

START_TEST(invalid_definitions_refuse_to_start)
{
    free(tl_write_file(dir, "broken.json", "{\"process\": \"broken\""));
    REFUSED("", "refusing to start with invalid definitions");
}
END_TEST

/* The text of the markdown table cell starting at p (after a '|'), trimmed,
 * into out; returns where the next cell starts, or NULL at the line's end. */
static const char *table_cell(const char *p, char *out, size_t out_size)
{
    const char *end = p;
    while (*end != '\0' && *end != '\n' && !(*end == '|' && end[-1] != '\\'))
        end++;
    const char *a = p, *b = end;
    while (a < b && *a == ' ')
        a++;
    while (b > a && b[-1] == ' ')
        b--;
    snprintf(out, out_size, "%.*s", (int) (b - a), a);
    return *end == '|' ? end + 1 : NULL;
}

/* The code spans of a cell, in order ("`a`, `b`" -> a, b); at most max. */
static size_t code_spans(const char *cell, char spans[][256], size_t max)
{
    size_t n = 0;
    for (const char *p = strchr(cell, '`'); p != NULL && n < max; p = strchr(p + 1, '`')) {
        const char *close = strchr(p + 1, '`');
        if (close == NULL)
            break;
        snprintf(spans[n], sizeof spans[n], "%.*s", (int) (close - p - 1), p + 1);
        if (strcmp(spans[n], "\"\"") == 0)
            spans[n][0] = '\0';
        n++;
        p = close;
    }
    return n;
}

/* docs/operations.md's configuration table says of each key what the key
 * table (config.c) holds: the default config_new() applies, the variable,
 * whether SIGHUP reloads it; and it lists every key, and no other. */
START_TEST(docs_table_matches_the_key_table)
{
    char *path = tl_source_path("docs/operations.md");
    char *text = tl_read_file(path);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    const char *header = "| key | type | default | variable | SIGHUP | meaning |";
    const char *line = strstr(text, header);
    ck_assert_msg(line != NULL, "%s: no configuration table (\"%s\")", path, header);
    line = strchr(strchr(line, '\n') + 1, '\n') + 1; /* past the separator row */

    config_key_info_t info;
    size_t n_keys = 0;
    while (config_key_info(n_keys, &info))
        n_keys++;
    int *seen = calloc(n_keys, sizeof *seen);
    ck_assert_ptr_nonnull(seen);

    for (; *line == '|'; line = strchr(line, '\n') + 1) {
        char cells[6][2048];
        const char *p = line + 1;
        for (size_t c = 0; c < 6; c++) {
            ck_assert_msg(p != NULL, "%s: a row with fewer than 6 cells: %.80s", path, line);
            p = table_cell(p, cells[c], sizeof cells[c]);
        }
        char names[8][256], defaults[8][256], env[1][256];
        size_t n_names = code_spans(cells[0], names, 8);
        size_t n_defaults = cells[2][0] == '`' ? code_spans(cells[2], defaults, 8) : 0;
        size_t n_env = code_spans(cells[3], env, 1);
        ck_assert_msg(n_names > 0, "%s: a row without a key: %.80s", path, line);
        for (size_t k = 0; k < n_names; k++) {
            const char *name = names[k];
            size_t i = 0, len = strlen(name);
            for (; config_key_info(i, &info); i++) {
                /* a secret given as a file is documented as NAME_file */
                if (strcmp(info.name, name) == 0 ||
                    (len > 5 && strcmp(name + len - 5, "_file") == 0 &&
                     strlen(info.name) == len - 5 && strncmp(info.name, name, len - 5) == 0))
                    break;
            }
            ck_assert_msg(i < n_keys, "%s documents `%s`, which is no config key", path, name);
            seen[i]++;
            if (info.default_value == NULL)
                ck_assert_msg(n_defaults == 0,
                              "%s: `%s` has no default in the key table, the docs say %s", path,
                              name, cells[2]);
            else
                ck_assert_msg(k < n_defaults && strcmp(defaults[k], info.default_value) == 0,
                              "%s: `%s`: the docs give the default %s, the key table `%s` (a value "
                              "is written "
                              "as code; words mean none)",
                              path, name, cells[2], info.default_value);
            ck_assert_msg(info.env != NULL ? n_env == 1 && strcmp(env[0], info.env) == 0
                                           : cells[3][0] == '\0',
                          "%s: `%s`: the docs give the variable '%s', the key table %s", path, name,
                          cells[3], info.env != NULL ? info.env : "none");
            ck_assert_msg(strcmp(cells[4], info.reload ? "reloads" : "restart") == 0,
                          "%s: `%s`: the docs say '%s' on SIGHUP, the key table %s", path, name,
                          cells[4], info.reload ? "reloads" : "restart");
        }
    }
    for (size_t i = 0; i < n_keys; i++) {
        config_key_info(i, &info);
        ck_assert_msg(seen[i] == 1, "%s: `%s` is documented %d times in the configuration table",
                      path, info.name, seen[i]);
        ck_assert_msg(info.description != NULL && *info.description != '\0' &&
                          strchr(info.description, '\n') == NULL,
                      "`%s` has no one-line description in the key table", info.name);
    }
    free(seen);
    free(text);
    free(path);
}
END_TEST

/* config_new() takes every default from the key table: each parses, and
 * the fields hold what they held when they were set by hand. */
START_TEST(defaults_come_from_the_key_table)
{
    config_t *cfg = config_new();
    ck_assert_msg(cfg != NULL, "a default in the key table does not parse");
    ck_assert_str_eq(cfg->database, "");
    ck_assert_ptr_null(cfg->brokers);
    ck_assert_ptr_null(cfg->replica);
    ck_assert_ptr_null(cfg->http_tokens);
    ck_assert_str_eq(cfg->group, "steward");
    ck_assert_int_eq(cfg->log_level, LOG_LEVEL_INFO);
    ck_assert_int_eq(cfg->batch_size, 2000);
    ck_assert_int_eq(cfg->batch_ms, 200);
    ck_assert_int_eq(cfg->lock_timeout_ms, 3000);
    ck_assert_int_eq(cfg->max_message_bytes, 1024 * 1024);
    ck_assert(!cfg->record_unknown);
    ck_assert_int_eq(json_object_size(cfg->topics_map), 0);
    ck_assert_int_eq(cfg->blind_after_ms, 120000);
    ck_assert_int_eq(cfg->retention_history_ms, 30 * 86400000LL);
    ck_assert_int_eq(cfg->retention_instances_ms, 0);
    ck_assert_int_eq(cfg->retention_interval_ms, 3600000);
    ck_assert(cfg->migrate_on_start);
    ck_assert_str_eq(cfg->roles_operator, "steward_operator");
    ck_assert_str_eq(cfg->dispatch_source, "urn:steward:${process}");
    ck_assert_str_eq(cfg->dispatch_paused, "");
    ck_assert_int_eq(cfg->http_connections_per_client, 64);
    json_t *routes = json_pack("{s:[{s:s}]}", "default", "type", "log");
    ck_assert(json_equal(cfg->routes, routes));
    json_decref(routes);
    config_free(cfg);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, syntax_errors_name_the_line);
    tcase_add_test(tc, unknown_keys_are_named_with_a_suggestion);
    tcase_add_test(tc, bad_values_are_named);
    tcase_add_test(tc, the_tracing_link_is_a_url_with_the_trace_id);
    tcase_add_test(tc, topic_mapping_keys);
    tcase_add_test(tc, routes_are_checked);
    tcase_add_test(tc, secrets_and_kafka_properties);
    tcase_add_test(tc, owned_kafka_properties_are_refused_from_flags);
    tcase_add_test(tc, secret_files_are_read_whole_or_refused);
    tcase_add_test(tc, missing_settings_and_environment);
    tcase_add_test(tc, invalid_definitions_refuse_to_start);
    tcase_add_test(tc, docs_table_matches_the_key_table);
    tcase_add_test(tc, defaults_come_from_the_key_table);
    suite_add_tcase(s, tc);
    return s;
}
