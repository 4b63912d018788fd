/*
 * test_avro - a topic in the Confluent wire format around Avro payloads
 * ("format": "confluent_avro") beside a plain JSON topic, on the real
 * broker and PostgreSQL, the messages encoded by avro-c in the test and
 * framed with their schema id.
 *
 * avro: schemas from a local directory (schema_registry.directory). Orders
 * (Avro, the event time its timestamp-millis field) are paid on a JSON
 * topic: one finishes; one misses its deadline and pages naming instance
 * and step; steward restarts in the middle, and an order placed under a
 * new schema id (an added field) while it was down is judged after it.
 * A captured Avro long lands in the instance's variables. A schema id with no file is rejected as
 * unknown_schema naming the id, a payload cut short as invalid_avro; both
 * are printed by steward backtest's rejection summary, and a backtest
 * without a registry is refused. steward run refuses such a definition
 * without one too, and so does a reload (SIGHUP) that brings one.
 *
 * avro_registry: the same through a real schema registry
 * (STEWARD_TEST_SCHEMA_REGISTRY_URL, a Confluent-compatible API; schemas
 * registered by the test with POST /subjects/{subject}/versions; a JSON
 * Schema's id on the Avro topic is unsupported_schema_type, in run's
 * rejection summary and steward backtest's). When
 * the variable is unset the suite is SKIPPED (exit 77), never passed.
 * With STEWARD_TEST_SCHEMA_REGISTRY_PAUSE/_RESUME, the registry stops
 * answering for 30 s while an order under a schema not yet fetched arrives: the
 * order waits (nothing rejected), the outage is logged once and
 * steward_schema_registry_up is 0; once it answers again the order is
 * judged.
 */
#include "testlib.h"
#include "world.h"

#include <avro.h>
#include <check.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static tw_world_t w;

static void teardown(void)
{
    tw_teardown(&w);
}

/* After the registry test, in the runner's own process (a failed check
 * ends the test's process at once): a registry left paused by a failure
 * would fail every later suite that uses it. Resuming one that runs is
 * harmless. */
static void resume_registry(void)
{
    const char *resume = getenv("STEWARD_TEST_SCHEMA_REGISTRY_RESUME");
    if (resume != NULL && system(resume) != 0)
        fprintf(stderr, "avro_registry: the registry could not be resumed\n");
}

static const char schema_v1[] =
    "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\",\"fields\":["
    "{\"name\":\"type\",\"type\":\"string\"},"
    "{\"name\":\"order_id\",\"type\":\"string\"},"
    "{\"name\":\"amount\",\"type\":\"long\"},"
    "{\"name\":\"placed_at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}]}";

/* v1 and a field added with a default, as schema evolution does. */
static const char schema_v2[] =
    "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"shop\",\"fields\":["
    "{\"name\":\"type\",\"type\":\"string\"},"
    "{\"name\":\"order_id\",\"type\":\"string\"},"
    "{\"name\":\"amount\",\"type\":\"long\"},"
    "{\"name\":\"placed_at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
    "{\"name\":\"coupon\",\"type\":[\"null\",\"string\"],\"default\":null}]}";

static const char order_def[] =
    "{\"process\": \"order\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"shop\","
    " \"key\": \"/order_id\","
    " \"topics\": {\"@P@orders\": {\"format\": \"confluent_avro\","
    "                             \"envelope\": {\"time\": {\"pointer\": \"/placed_at\","
    "                                                      \"format\": \"epoch_millis\"}}}},"
    " \"events\": {\"OrderPlaced\": {\"topic\": \"@P@orders\"},"
    "            \"OrderPaid\": {\"topic\": \"@P@payments\"}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"placed\","
    "           \"capture\": {\"amount\": \"/amount\"}},"
    " \"states\": {\"placed\": {\"deadline\": \"3s\", \"on\": {\"OrderPaid\": \"paid\"}},"
    "            \"paid\": {\"terminal\": \"success\"}}}";

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An order as avro-c writes it under `schema` (v2 when coupon is not
 * NULL), framed with schema id `id`, into buf; returns its length. */
static size_t order_message(char *buf, size_t size, const char *schema, uint32_t id,
                            const char *order_id, const char *coupon)
{
    avro_schema_t s;
    ck_assert_int_eq(avro_schema_from_json_length(schema, strlen(schema), &s), 0);
    avro_value_iface_t *iface = avro_generic_class_from_schema(s);
    avro_value_t rec, f, branch;
    ck_assert_int_eq(avro_generic_value_new(iface, &rec), 0);
    avro_value_get_by_name(&rec, "type", &f, NULL);
    avro_value_set_string(&f, "OrderPlaced");
    avro_value_get_by_name(&rec, "order_id", &f, NULL);
    avro_value_set_string(&f, order_id);
    avro_value_get_by_name(&rec, "amount", &f, NULL);
    avro_value_set_long(&f, 1250);
    avro_value_get_by_name(&rec, "placed_at", &f, NULL);
    avro_value_set_long(&f, now_ms());
    if (avro_value_get_by_name(&rec, "coupon", &f, NULL) == 0) {
        avro_value_set_branch(&f, coupon != NULL ? 1 : 0, &branch);
        if (coupon != NULL)
            avro_value_set_string(&branch, coupon);
        else
            avro_value_set_null(&branch);
    }
    buf[0] = 0;
    buf[1] = (char) (id >> 24);
    buf[2] = (char) (id >> 16);
    buf[3] = (char) (id >> 8);
    buf[4] = (char) id;
    avro_writer_t out = avro_writer_memory(buf + 5, (int64_t) size - 5);
    ck_assert_int_eq(avro_value_write(out, &rec), 0);
    size_t len = 5 + (size_t) avro_writer_tell(out);
    avro_writer_free(out);
    avro_value_decref(&rec);
    avro_value_iface_decref(iface);
    avro_schema_decref(s);
    return len;
}

static void produce_bytes(tl_producer_t *p, const char *topic, const char *value, size_t len)
{
    char *name = tw_topic(&w, topic);
    tl_produce(p, name, 0, value, (long) len, NULL, 0);
    free(name);
}

static void produce_order(tl_producer_t *p, const char *schema, uint32_t id, const char *order_id,
                          const char *coupon)
{
    char buf[512];
    size_t len = order_message(buf, sizeof buf, schema, id, order_id, coupon);
    produce_bytes(p, "orders", buf, len);
}

static void produce_paid(tl_producer_t *p, const char *order_id)
{
    char value[128];
    snprintf(value, sizeof value, "{\"type\": \"OrderPaid\", \"order_id\": \"%s\"}", order_id);
    produce_bytes(p, "payments", value, strlen(value));
}

/* The world's config with schema_registry set to `registry` (taken) and
 * the definition; returns the definition's path. tw_init() first. */
static char *configure(json_t *registry, bool http)
{
    tw_create_topics(&w, TW_LIST("orders", "payments"), 1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "order.json");
    json_t *parts =
        json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:o}", "scheduler", "interval", "200ms",
                  "grace", "0s", "http", "listen", http ? "127.0.0.1:0" : "", "routes", "default",
                  "type", "log", "schema_registry", registry);
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    char *filled = tw_fill(order_def, w.prefix, NULL);
    char *def_path = tl_write_file(w.dir, "order.json", filled);
    free(filled);
    return def_path;
}

START_TEST(avro_events_are_judged_with_schemas_from_a_directory)
{
    tw_init(&w, "avro");
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/schemas", w.dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    free(tl_write_file(dir, "1.avsc", schema_v1));
    free(tl_write_file(dir, "2.avsc", schema_v2));
    free(tl_write_file(dir, "3.avsc", "{\"type\": \"recod\", \"name\": \"Order\"}"));
    char *def_path = configure(json_pack("{s:s}", "directory", dir), false);

    /* Without a registry, run refuses the definition at load. */
    json_t *bare = json_load_file(w.config, 0, NULL);
    ck_assert_ptr_nonnull(bare);
    json_object_del(bare, "schema_registry");
    char *text = json_dumps(bare, 0);
    char *bare_cfg = tl_write_file(w.dir, "bare.json", text);
    free(text);
    json_decref(bare);
    const char *no_registry[] = {"STEWARD_SCHEMA_REGISTRY_DIRECTORY=", NULL};
    const char *run_argv[] = {NULL, "run", "--config", bare_cfg, NULL};
    tl_output_t o = tl_steward(run_argv, no_registry);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "no schema registry is configured") &&
                      tl_contains(o.err, "confluent_avro"),
                  "exit %d\n%s", o.status, o.err);
    tl_output_free(&o);

    tw_start(&w, NULL, false);
    tl_producer_t *p = tl_producer_new();
    produce_order(p, schema_v1, 1, "A1", NULL); /* paid on time */
    produce_paid(p, "A1");
    produce_order(p, schema_v1, 1, "A2", NULL); /* never paid: its deadline pages */
    char buf[512];
    size_t len = order_message(buf, sizeof buf, schema_v1, 99, "A9", NULL);
    produce_bytes(p, "orders", buf, len); /* schema id 99: no 99.avsc */
    len = order_message(buf, sizeof buf, schema_v1, 1, "A8", NULL);
    produce_bytes(p, "orders", buf, len - 3); /* cut short */
    len = order_message(buf, sizeof buf, schema_v1, 3, "A7", NULL);
    produce_bytes(p, "orders", buf, len); /* 3.avsc is no Avro schema */
    tl_producer_free(p);

    tw_wait(&w, "SELECT status FROM steward.instances WHERE key = 'A1'", NULL, "success", 60,
            "A1 placed in Avro, paid in JSON");
    tw_expect(&w, "SELECT vars->>'amount' FROM steward.instances WHERE key = 'A1'", NULL, "1250");
    tw_wait(&w,
            "SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'A2' "
            "AND process = 'order' AND state = 'placed'",
            NULL, "1", 60, "A2's missed deadline, naming the instance and the step");
    tw_wait(&w,
            "SELECT count(*) FROM steward.rejected WHERE reason = 'unknown_schema' "
            "AND detail LIKE '%schema id 99%'",
            NULL, "1", 30, "the unknown schema id rejected naming it");
    tw_wait(&w,
            "SELECT count(*) FROM steward.rejected WHERE reason = 'invalid_avro' "
            "AND detail LIKE '%schema id 1%truncated%'",
            NULL, "1", 30, "the cut payload rejected saying where");
    tw_wait(&w,
            "SELECT count(*) FROM steward.rejected WHERE reason = 'invalid_avro' "
            "AND detail LIKE '%schema id 3%not an Avro schema%'",
            NULL, "1", 30, "the schema that does not parse, its messages rejected");

    /* A restart; meanwhile an order under schema 2 (a field added). The
     * run's last summary of what it rejected names the new reasons. */
    tw_stop(&w, 30);
    char *run_log = tl_read_file(w.log);
    ck_assert_msg(tl_contains(run_log, "messages rejected since the last summary") &&
                      tl_contains(run_log, "unknown_schema 1") &&
                      tl_contains(run_log, "invalid_avro 2"),
                  "run's rejection summary:\n%s", run_log);
    free(run_log);
    p = tl_producer_new();
    produce_order(p, schema_v2, 2, "A3", "SAVE10");
    produce_paid(p, "A3");
    tl_producer_free(p);
    tw_start(&w, NULL, false);
    tw_wait(&w, "SELECT status FROM steward.instances WHERE key = 'A3'", NULL, "success", 60,
            "A3, under the evolved schema, judged after the restart");
    tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "3");
    tw_stop(&w, 30);

    /* The backtest reads the schemas where the config says, and prints
     * the new reasons in its rejection summary. */
    char dir_env[1200];
    snprintf(dir_env, sizeof dir_env, "STEWARD_SCHEMA_REGISTRY_DIRECTORY=%s", dir);
    const char *argv[] = {NULL,  "backtest",  "--definition",     def_path,     "--from",
                          "10m", "--brokers", tl_kafka_brokers(), "--database", w.db_url,
                          NULL};
    o = tl_steward(argv, TW_LIST(dir_env));
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "messages rejected: 3 (") &&
                      tl_contains(o.out, "unknown_schema 1") &&
                      tl_contains(o.out, "invalid_avro 2") && tl_contains(o.out, "schema id 99"),
                  "exit %d\n%s\n%s", o.status, o.out, o.err);
    tl_output_free(&o);
    o = tl_steward(argv, no_registry);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "no schema registry is configured"),
                  "exit %d\n%s\n%s", o.status, o.out, o.err);
    tl_output_free(&o);
    free(bare_cfg);
    free(def_path);
}
END_TEST

/* A reload that brings a confluent_avro topic to a steward without a
 * registry is refused, naming the event and topic; the running
 * definition stays. */
START_TEST(a_reload_without_a_registry_is_refused)
{
    tw_init(&w, "avroreload");
    json_t *none = json_pack("{s:s}", "directory", "");
    char *def_path = configure(none, false);
    /* Version 1 reads orders as plain JSON. */
    char *plain = tw_fill(order_def, w.prefix, NULL);
    char *at = strstr(plain, "\"confluent_avro\"");
    ck_assert_ptr_nonnull(at);
    memcpy(at, "\"json\"", 6);
    memmove(at + 6, at + 16, strlen(at + 16) + 1);
    free(tl_write_file(w.dir, "order.json", plain));
    free(plain);
    tw_start(&w, NULL, false);
    tl_producer_t *p = tl_producer_new();
    char value[160];
    snprintf(value, sizeof value,
             "{\"type\": \"OrderPlaced\", \"order_id\": \"J1\", \"amount\": 5, "
             "\"placed_at\": %" PRId64 "}",
             now_ms());
    produce_bytes(p, "orders", value, strlen(value));
    tl_producer_free(p);
    tw_wait(&w, "SELECT count(*) FROM steward.instances WHERE key = 'J1'", NULL, "1", 60,
            "J1 read as JSON");

    char *filled = tw_fill(order_def, w.prefix, NULL);
    free(tl_write_file(w.dir, "order.json", filled));
    free(filled);
    kill(w.pids[0], SIGHUP);
    tl_wait_file(w.log, "no schema registry is configured", 30);
    char *log = tl_read_file(w.log);
    ck_assert_msg(strstr(log, "reload refused") != NULL, "no refusal in the log");
    free(log);
    tw_stop(&w, 30);
    free(def_path);
}
END_TEST

/* ---- a real registry ------------------------------------------------------ */

typedef struct body {
    char buf[4096];
    size_t len;
} body_t;

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    body_t *b = arg;
    size_t take = size * n;
    if (take > sizeof b->buf - 1 - b->len)
        take = sizeof b->buf - 1 - b->len;
    memcpy(b->buf + b->len, data, take);
    b->len += take;
    b->buf[b->len] = '\0';
    return size * n;
}

/* Registers `schema` of `type` (NULL: Avro, the API's default) under
 * `subject` and returns its id. */
static uint32_t register_schema(const char *url, const char *subject, const char *schema,
                                const char *type)
{
    char target[1024];
    snprintf(target, sizeof target, "%s/subjects/%s/versions", url, subject);
    json_t *req = json_pack("{s:s, s:s?}", "schema", schema, "schemaType", type);
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    body_t body = {.len = 0};
    CURL *easy = curl_easy_init();
    struct curl_slist *h =
        curl_slist_append(NULL, "Content-Type: application/vnd.schemaregistry.v1+json");
    curl_easy_setopt(easy, CURLOPT_URL, target);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(easy);
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(easy);
    free(text);
    ck_assert_msg(rc == CURLE_OK && status == 200, "POST %s: %s, HTTP %ld: %s", target,
                  curl_easy_strerror(rc), status, body.buf);
    json_t *doc = json_loads(body.buf, 0, NULL);
    json_t *id = json_object_get(doc, "id");
    ck_assert_msg(json_is_integer(id), "POST %s: no id in %s", target, body.buf);
    uint32_t out = (uint32_t) json_integer_value(id);
    json_decref(doc);
    return out;
}

static void run_command(const char *env)
{
    const char *cmd = getenv(env);
    ck_assert_msg(cmd != NULL, "%s unset", env);
    ck_assert_msg(system(cmd) == 0, "%s (%s) failed", env, cmd);
}

START_TEST(avro_events_are_judged_with_schemas_from_the_registry)
{
    const char *url = getenv("STEWARD_TEST_SCHEMA_REGISTRY_URL");
    ck_assert_ptr_nonnull(url); /* the suite is skipped without it */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    tw_init(&w, "avroreg");
    char subject[256];
    snprintf(subject, sizeof subject, "%sorders-value", w.prefix);
    uint32_t v1 = register_schema(url, subject, schema_v1, NULL);
    uint32_t v2 = register_schema(url, subject, schema_v2, NULL);
    ck_assert_uint_ne(v1, v2);
    snprintf(subject, sizeof subject, "%sjson-value", w.prefix);
    uint32_t js = register_schema(
        url, subject, "{\"type\": \"object\", \"properties\": {\"order_id\": {}}}", "JSON");
    char *def_path = configure(json_pack("{s:s, s:s}", "url", url, "timeout", "1s"), true);
    tw_start(&w, NULL, true);

    tl_producer_t *p = tl_producer_new();
    produce_order(p, schema_v1, v1, "R1", NULL);
    produce_paid(p, "R1");
    produce_order(p, schema_v1, 999999, "R9", NULL); /* an id the registry never gave */
    produce_order(p, schema_v1, js, "R8", NULL);     /* a JSON Schema's id */
    tl_producer_free(p);
    tw_wait(&w, "SELECT status FROM steward.instances WHERE key = 'R1'", NULL, "success", 60,
            "R1 read with its schema from the registry");
    tw_wait(&w,
            "SELECT count(*) FROM steward.rejected WHERE reason = 'unknown_schema' "
            "AND detail LIKE '%schema id 999999%'",
            NULL, "1", 30, "the id the registry does not have, rejected naming it");
    char js_text[16];
    snprintf(js_text, sizeof js_text, "%" PRIu32, js);
    tw_wait(&w,
            "SELECT count(*) FROM steward.rejected WHERE reason = 'unsupported_schema_type' "
            "AND detail LIKE '%schema id ' || $1 || ' is a JSON schema%'",
            TW_LIST(js_text), "1", 30, "a JSON Schema's id on an Avro topic, naming id and type");
    tl_wait_metric(w.base, "steward_schema_registry_requests_total{result=\"found\"} 2", 10);
    tl_wait_metric(w.base, "steward_schema_registry_up 1", 10);

    if (getenv("STEWARD_TEST_SCHEMA_REGISTRY_PAUSE") != NULL &&
        getenv("STEWARD_TEST_SCHEMA_REGISTRY_RESUME") != NULL) {
        /* The registry stops answering; R2 comes under v2, not fetched yet. */
        run_command("STEWARD_TEST_SCHEMA_REGISTRY_PAUSE");
        time_t paused_at = time(NULL);
        p = tl_producer_new();
        produce_order(p, schema_v2, v2, "R2", "SAVE10");
        produce_paid(p, "R2");
        tl_producer_free(p);
        tl_wait_file(w.log, "schema registry unavailable", 60);
        tl_wait_metric(w.base, "steward_schema_registry_up 0", 30);
        /* Away for 30 s in all, retried meanwhile with backoff: still
         * waiting, nothing rejected. */
        while (time(NULL) - paused_at < 30)
            sleep(1);
        tw_expect(&w, "SELECT count(*) FROM steward.instances WHERE key = 'R2'", NULL, "0");
        tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "2");
        run_command("STEWARD_TEST_SCHEMA_REGISTRY_RESUME");
        tw_wait(&w, "SELECT status FROM steward.instances WHERE key = 'R2'", NULL, "success", 90,
                "R2 judged once the registry answered again");
        tl_wait_file(w.log, "schema registry reachable again", 30);
        tl_wait_metric(w.base, "steward_schema_registry_up 1", 30);
        char *log = tl_read_file(w.log);
        const char *first = strstr(log, "schema registry unavailable");
        ck_assert_msg(first != NULL && strstr(first + 1, "schema registry unavailable") == NULL,
                      "the outage is logged once");
        free(log);
        tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "2");
    } else {
        fprintf(stderr, "avro_registry: no STEWARD_TEST_SCHEMA_REGISTRY_PAUSE/_RESUME: the "
                        "outage is not tested\n");
    }
    tw_stop(&w, 30);
    char *run_log = tl_read_file(w.log);
    ck_assert_msg(tl_contains(run_log, "unknown_schema 1") &&
                      tl_contains(run_log, "unsupported_schema_type 1"),
                  "run's rejection summary:\n%s", run_log);
    free(run_log);

    /* The backtest asks the same registry, and its rejection summary
     * names both reasons and the JSON Schema's id. */
    char url_env[1200], js_detail[64];
    snprintf(url_env, sizeof url_env, "STEWARD_SCHEMA_REGISTRY_URL=%s", url);
    snprintf(js_detail, sizeof js_detail, "schema id %" PRIu32 " is a JSON schema", js);
    const char *argv[] = {NULL,  "backtest",  "--definition",     def_path,     "--from",
                          "10m", "--brokers", tl_kafka_brokers(), "--database", w.db_url,
                          NULL};
    tl_output_t o = tl_steward(argv, TW_LIST(url_env));
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "messages rejected: 2 (") &&
                      tl_contains(o.out, "unknown_schema 1") &&
                      tl_contains(o.out, "unsupported_schema_type 1") &&
                      tl_contains(o.out, js_detail),
                  "exit %d\n%s\n%s", o.status, o.out, o.err);
    tl_output_free(&o);
    free(def_path);
}
END_TEST

Suite *avro_suite(void)
{
    Suite *s = suite_create("avro");
    TCase *tc = tcase_create("avro");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, avro_events_are_judged_with_schemas_from_a_directory);
    tcase_add_test(tc, a_reload_without_a_registry_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

/* Without a registry to test against, SKIPPED (77) when run alone, as
 * ctest does; among every suite, it adds no test and says so. */
Suite *avro_registry_suite(void)
{
    Suite *s = suite_create("avro_registry");
    if (getenv("STEWARD_TEST_SCHEMA_REGISTRY_URL") == NULL ||
        *getenv("STEWARD_TEST_SCHEMA_REGISTRY_URL") == '\0') {
        const char *only = getenv("CK_RUN_SUITE");
        printf("avro_registry: SKIPPED: STEWARD_TEST_SCHEMA_REGISTRY_URL is unset\n");
        if (only != NULL && strcmp(only, "avro_registry") == 0)
            exit(77);
        return s;
    }
    TCase *tc = tcase_create("avro_registry");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_unchecked_fixture(tc, NULL, resume_registry);
    tcase_add_test(tc, avro_events_are_judged_with_schemas_from_the_registry);
    suite_add_tcase(s, tc);
    return s;
}
