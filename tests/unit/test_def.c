/*
 * test_def - definitions as they are read: from files, directories and
 * sets; the suggestions in messages; the key, type and time sources, "any"
 * and the topic mapping; the active-mode fields. The other definition
 * suites are test_def_document.c and test_def_rules.c, their helpers in
 * test_def_support.c.
 */
#include "definitions/def.h"
#include "engine/engine.h"
#include "test_def_support.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- files and sets ---- */

static char *write_def(const char *dir, const char *name, json_t *doc)
{
    char *text = dt_dump(doc);
    json_decref(doc);
    char *path = tl_write_file(dir, name, text);
    free(text);
    return path;
}

START_TEST(test_load_file_errors)
{
    ck_assert_ptr_null(def_load_file("/nonexistent/steward/def.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].file, "/nonexistent/steward/def.json");
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_str_eq(dt_problems.items[0].message, "no such file or directory");
    def_problems_clear(&dt_problems);

    char *dir = strdup(tl_tmpdir());
    ck_assert_ptr_null(def_load_file(dir, &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a directory"));
    def_problems_clear(&dt_problems);

    /* A FIFO would block open() and read() with no writer: refused at once. */
    char *fifo = NULL;
    ck_assert_int_ge(asprintf(&fifo, "%s/pipe.json", dir), 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_ptr_null(def_load_file(fifo, &dt_problems));
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, fifo);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a FIFO, not a regular file"));
    def_problems_clear(&dt_problems);

    ck_assert_ptr_null(def_load_file("/dev/null", &dt_problems));
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a device, not a regular file"));
    def_problems_clear(&dt_problems);

    /* The same inside a directory of definitions: the others still load
     * and are checked, the FIFO is named. */
    free(write_def(dir, "a.json", dt_base()));
    const char *paths[] = {dir};
    size_t files = 0;
    ck_assert_ptr_null(def_set_load(paths, 1, &dt_problems, &files));
    ck_assert_uint_eq(files, 2);
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, fifo);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a FIFO"));
    free(fifo);
    free(dir);
}
END_TEST

START_TEST(test_set_load)
{
    char *dir = strdup(tl_tmpdir());
    json_t *v2 = dt_base();
    dt_put(v2, "/version", "2");
    free(write_def(dir, "b.json", v2));
    char *a = write_def(dir, "a.json", dt_base());
    free(tl_write_file(dir, "notes.txt", "not a definition"));
    free(tl_write_file(dir, ".#a.json", "{ half-saved by an editor"));

    const char *paths[] = {dir};
    size_t files = 99;
    def_set_t *set = def_set_load(paths, 1, &dt_problems, &files);
    ck_assert_msg(set != NULL, "invalid:%s", dt_listing());
    ck_assert_uint_eq(files, 2);
    ck_assert_uint_eq(set->n, 2);
    ck_assert_int_eq(set->defs[0]->version, 1); /* a.json before b.json */
    ck_assert_int_eq(set->defs[1]->version, 2);
    ck_assert_int_eq(def_set_latest(set, "order_fulfilment")->version, 2);
    ck_assert_int_eq(def_set_find(set, "order_fulfilment", 1)->version, 1);
    ck_assert_ptr_null(def_set_find(set, "order_fulfilment", 3));
    ck_assert_ptr_null(def_set_latest(set, "billing"));
    def_set_free(set);
    def_set_free(NULL);

    /* A file named on its own and through its directory is read once. */
    const char *twice[] = {a, dir};
    set = def_set_load(twice, 2, &dt_problems, &files);
    ck_assert_msg(set != NULL, "invalid:%s", dt_listing());
    ck_assert_uint_eq(set->n, 2);
    ck_assert_uint_eq(files, 2);
    def_set_free(set);
    free(a);
    free(dir);
}
END_TEST

START_TEST(test_set_duplicate_version)
{
    char *dir = strdup(tl_tmpdir());
    char *a = write_def(dir, "a.json", dt_base());
    char *c = write_def(dir, "c.json", dt_base());
    const char *paths[] = {dir};
    size_t files = 0;
    ck_assert_ptr_null(def_set_load(paths, 1, &dt_problems, &files));
    ck_assert_uint_eq(files, 2);
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, c);
    ck_assert_str_eq(dt_problems.items[0].pointer, "/version");
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message,
                                 "process 'order_fulfilment' version 1 is already defined in"));
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, a));
    free(a);
    free(c);
    free(dir);
}
END_TEST

START_TEST(test_set_bad_paths)
{
    char *dir = strdup(tl_tmpdir());
    char *bad = tl_write_file(dir, "bad.json", "{");
    char *empty = strdup(tl_tmpdir());
    const char *paths[] = {"/nonexistent/defs", bad, empty};
    size_t files = 0;
    ck_assert_ptr_null(def_set_load(paths, 3, &dt_problems, &files));
    ck_assert_uint_eq(files, 1);
    ck_assert_msg(dt_problems.n == 3, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, "/nonexistent/defs");
    ck_assert_str_eq(dt_problems.items[0].message, "no such file or directory");
    ck_assert_str_eq(dt_problems.items[1].file, empty);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[1].message, "no *.json files"));
    ck_assert_str_eq(dt_problems.items[2].file, bad);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[2].message, "invalid JSON at line 1"));
    free(bad);
    free(empty);
    free(dir);
}
END_TEST

/* ---- suggestions ---- */

START_TEST(test_suggestions)
{
    ck_assert_uint_eq(def_edit_distance("topic", "tpoic"), 1); /* a swap is one edit */
    ck_assert_uint_eq(def_edit_distance("shiped", "shipped"), 1);
    ck_assert_uint_eq(def_edit_distance("Shipped", "shipped"), 0);
    ck_assert_uint_eq(def_edit_distance("", "abc"), 3);
    ck_assert_uint_eq(def_edit_distance("kitten", "sitting"), 3);

    static const char *const states[] = {"shipped", NULL, "shopping", "cancelled"};
    ck_assert_str_eq(def_suggest("shiped", states, 4), "shipped");
    ck_assert_str_eq(def_suggest("canceled", states, 4), "cancelled");
    ck_assert_ptr_null(def_suggest("delivered", states, 4));
    static const char *const short_words[] = {"on", "to"};
    ck_assert_str_eq(def_suggest("tp", short_words, 2), "to");
    ck_assert_ptr_null(def_suggest("at", short_words, 2)); /* 2 edits in 2 letters */
    ck_assert_ptr_null(def_suggest("x", short_words, 2));
}
END_TEST

/* ---- events as they are: key, type and time sources, "any", $schema ---- */

START_TEST(test_schema_member_is_accepted)
{
    json_t *doc = dt_base();
    dt_put(doc, "/$schema", "\"https://steward.dev/schema/steward-definition.schema.json\"");
    def_free(dt_expect_valid(doc));

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/$schema", "7");
    dt_expect_problem(doc, true, "/$schema", "URI", "integer", NULL);
}
END_TEST

START_TEST(test_key_sources)
{
    json_t *doc = dt_base();
    dt_put(doc, "/key", "{\"from\": \"message_key\"}");
    def_t *def = dt_expect_valid(doc);
    ck_assert(def->envelope.key_from_message);
    ck_assert_ptr_null(def->envelope.key_pointer);
    ck_assert(def->events[0].envelope.key_from_message);  /* inherits the process's */
    ck_assert(!def->events[1].envelope.key_from_message); /* its own pointer */
    ck_assert_str_eq(def->events[1].envelope.key_pointer, "/payment/order_id");
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/ShipmentDispatched/key", "{\"from\": \"message_key\"}");
    def = dt_expect_valid(doc);
    ck_assert(def->events[3].envelope.key_from_message);
    ck_assert(!def->events[0].envelope.key_from_message);
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/key", "{\"from\": \"message-key\"}");
    dt_expect_problem(doc, true, "/key/from", "'message-key'", "message_key", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/key", "{\"form\": \"message_key\"}");
    dt_expect_problem(doc, false, "/key/form", "did you mean 'from'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/key", "42");
    dt_expect_problem(doc, true, "/key", "JSON pointer", "message_key", "integer", NULL);
}
END_TEST

START_TEST(test_type_sources)
{
    json_t *doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"header\": \"event-type\"}}");
    def_t *def = dt_expect_valid(doc);
    ck_assert_str_eq(def->envelope.type_header, "event-type");
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"header\": \"event type\"}}");
    dt_expect_problem(doc, true, "/envelope/type/header", "'event type'", "spaces", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"headr\": \"t\"}}");
    dt_expect_problem(doc, false, "/envelope/type/headr", "did you mean 'header'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/ShipmentDispatched/type_from_topic", "true");
    def = dt_expect_valid(doc);
    ck_assert(def->events[3].type_from_topic);
    ck_assert(!def->events[0].type_from_topic);
    def_free(def);

    /* payments carries two events: its topic cannot fix the type */
    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/PaymentDeclined/type_from_topic", "true");
    dt_expect_problem(doc, true, "/events/PaymentDeclined/type_from_topic", "'payments'",
                      "PaymentCaptured", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/OrderPlaced/type_from_topic", "\"yes\"");
    dt_expect_problem(doc, true, "/events/OrderPlaced/type_from_topic", "true or false", NULL);
}
END_TEST

START_TEST(test_time_sources)
{
    static const struct {
        const char *value;
        def_time_format_t format;
    } ok[] = {
        {"\"/at\"", DEF_TIME_TEXT_OR_MS},
        {"{\"pointer\": \"/at\", \"format\": \"rfc3339\"}", DEF_TIME_RFC3339},
        {"{\"pointer\": \"/at\", \"format\": \"epoch_seconds\"}", DEF_TIME_EPOCH_SECONDS},
        {"{\"pointer\": \"/at\", \"format\": \"epoch_millis\"}", DEF_TIME_EPOCH_MILLIS},
        {"{\"from\": \"kafka_timestamp\"}", DEF_TIME_KAFKA},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        def_problems_clear(&dt_problems);
        json_t *doc = dt_base();
        char env[200];
        snprintf(env, sizeof env, "{\"time\": %s}", ok[i].value);
        dt_put(doc, "/envelope", env);
        def_t *def = dt_expect_valid(doc);
        ck_assert_int_eq(def->envelope.time_format, ok[i].format);
        if (ok[i].format != DEF_TIME_KAFKA)
            ck_assert_str_eq(def->envelope.time_pointer, "/at");
        def_free(def);
    }

    json_t *doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"pointer\": \"/at\", \"format\": \"epoch_milis\"}}");
    dt_expect_problem(doc, true, "/envelope/time/format", "'epoch_milis'",
                      "did you mean 'epoch_millis'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"pointer\": \"/at\"}}");
    dt_expect_problem(doc, true, "/envelope/time", "missing required field 'format'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"from\": \"kafka_timestamp\", \"pointer\": \"/at\"}}");
    dt_expect_problem(doc, true, "/envelope/time", "cannot have 'pointer'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"from\": \"broker\"}}");
    dt_expect_problem(doc, true, "/envelope/time/from", "'broker'", "kafka_timestamp", NULL);
}
END_TEST

START_TEST(test_any_transitions)
{
    json_t *doc = dt_base();
    dt_put(doc, "/events/OrderWithdrawn", "{\"topic\": \"orders\"}");
    dt_put(doc, "/states/withdrawn", "{\"terminal\": \"withdrawn\"}");
    dt_put(doc, "/any", "{\"OrderWithdrawn\": \"withdrawn\", \"PaymentDeclined\": \"withdrawn\"}");
    def_t *def = dt_expect_valid(doc);
    long withdrawn = def_find_state(def, "withdrawn");
    long cancelled = def_find_state(def, "cancelled");
    long wd = def_find_event(def, "OrderWithdrawn");
    long declined = def_find_event(def, "PaymentDeclined");
    long pay = def_find_state(def, "awaiting_payment");
    long dispatch = def_find_state(def, "awaiting_dispatch");
    long shipped = def_find_state(def, "shipped");
    ck_assert_uint_eq(def->n_any, 2);
    /* every non-terminal state takes it */
    ck_assert_uint_eq(def_transition(def, (size_t) pay, (size_t) wd)->to, (size_t) withdrawn);
    ck_assert_uint_eq(def_transition(def, (size_t) dispatch, (size_t) wd)->to, (size_t) withdrawn);
    /* a state's own `on` overrides it */
    ck_assert_uint_eq(def_transition(def, (size_t) pay, (size_t) declined)->to, (size_t) cancelled);
    ck_assert_uint_eq(def_transition(def, (size_t) dispatch, (size_t) declined)->to,
                      (size_t) withdrawn);
    /* a terminal state takes nothing */
    ck_assert_ptr_null(def_transition(def, (size_t) shipped, (size_t) wd));
    /* the engine's look-ahead (may an early event be taken later?) sees `any` */
    ck_assert(engine_may_accept(def, pay, wd));
    ck_assert(engine_may_accept(def, dispatch, wd));
    ck_assert(!engine_may_accept(def, shipped, wd));
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/OrderWithdrawn", "{\"topic\": \"orders\"}");
    dt_put(doc, "/any", "{\"OrderWithdrawn\": \"withdrawnn\"}");
    dt_expect_problem(doc, true, "/any/OrderWithdrawn", "unknown state 'withdrawnn'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/any", "{\"OrderWithdrawm\": \"cancelled\"}");
    dt_expect_problem(doc, true, "/any/OrderWithdrawm", "not declared", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/any", "[]");
    dt_expect_problem(doc, true, "/any", "expected an object", "array", NULL);

    /* a state reached only through `any` must still lead to a terminal
     * state: `any` leading back to itself is no way out */
    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/Held", "{\"topic\": \"orders\"}");
    dt_put(doc, "/states/on_hold", "{\"deadline\": \"1d\"}");
    dt_put(doc, "/any", "{\"Held\": \"on_hold\"}");
    dt_expect_problem(doc, true, "/states/on_hold", "terminal", NULL);
}
END_TEST

START_TEST(test_set_map_topics)
{
    json_t *doc = dt_base();
    char *text = dt_dump(doc);
    json_decref(doc);
    char *dir = strdup(tl_tmpdir());
    char *path = tl_write_file(dir, "map.json", text);
    free(text);
    const char *paths[1] = {path};
    def_set_t *set = def_set_load(paths, 1, &dt_problems, NULL);
    ck_assert_msg(set != NULL, "load:%s", dt_listing());

    json_t *map = json_pack("{s:s}", "payments", "prod.payments.v2");
    ck_assert(def_set_map_topics(set, "staging.", map, &dt_problems));
    const def_t *def = set->defs[0];
    ck_assert_str_eq(def->events[0].topic, "staging.orders");
    ck_assert_str_eq(def->events[1].topic, "prod.payments.v2"); /* the map wins */
    ck_assert_str_eq(def->events[3].topic, "staging.shipping");
    ck_assert_str_eq(def->states[0].command->topic, "staging.payment-commands");
    /* the stored document keeps the definition's own names */
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_object_get(json_object_get(def->document, "events"), "OrderPlaced"), "topic")),
        "orders");
    json_decref(map);

    /* A version read back from its stored document is renamed alike, by
     * the set's mapping or by the one recorded beside it. */
    char *stored = json_dumps(def->document, JSON_COMPACT);
    def_t *back = def_load_json(stored, strlen(stored), "steward.definitions", &dt_problems);
    ck_assert_msg(back != NULL, "read back:%s", dt_listing());
    ck_assert_str_eq(back->events[0].topic, "orders");
    ck_assert(def_set_map_like(set, back, &dt_problems));
    ck_assert_str_eq(back->events[0].topic, "staging.orders");
    ck_assert_str_eq(back->events[1].topic, "prod.payments.v2");
    ck_assert_str_eq(back->states[0].command->topic, "staging.payment-commands");
    def_free(back);
    json_t *recorded = def_set_mapping_json(set);
    back = def_load_json(stored, strlen(stored), "steward.definitions", &dt_problems);
    ck_assert(back != NULL && def_map_recorded(back, recorded, &dt_problems));
    ck_assert_str_eq(back->events[1].topic, "prod.payments.v2");
    ck_assert_str_eq(back->states[0].command->topic, "staging.payment-commands");
    json_decref(recorded);

    /* The watermark's topics: the loaded version's, and those only an
     * open old version reads, marked with that version. */
    back->version = def->version + 1; /* stands for another version */
    free(back->events[0].topic);
    back->events[0].topic = strdup("staging.audits");
    const def_t *open[1] = {back};
    engine_watch_topics_t watch = {0};
    ck_assert(engine_watch_topics(set, open, 1, &watch));
    size_t loaded_topics = 0, old_only = 0;
    for (size_t i = 0; i < watch.n; i++) {
        if (watch.items[i].old_version == 0)
            loaded_topics++;
        else {
            old_only++;
            ck_assert_str_eq(watch.items[i].topic, "staging.audits");
            ck_assert_int_eq(watch.items[i].old_version, back->version);
        }
    }
    ck_assert_uint_eq(old_only, 1);
    ck_assert_uint_gt(loaded_topics, 0);
    engine_watch_topics_clear(&watch);
    def_free(back);
    free(stored);

    char long_prefix[260];
    memset(long_prefix, 'p', 245);
    long_prefix[245] = '\0';
    ck_assert(!def_set_map_topics(set, long_prefix, NULL, &dt_problems));
    ck_assert_msg(dt_problems.n > 0 &&
                      strstr(dt_problems.items[0].message, "over Kafka's 249") != NULL,
                  "%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].pointer, "/events/OrderPlaced/topic");
    def_set_free(set);
    free(path);
    free(dir);
}
END_TEST

/* ---- active mode: retry backoff, leases ---- */

START_TEST(test_active_fields)
{
    /* backoff without max, a cap below the wait, a lease without the
     * state's own deadline, lease events not declared, a variable captured
     * only on a path that does not reach the state, the token. */
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry", "{\"backoff\": \"30s\"}"),
                "/states/awaiting_payment/retry", "retry.backoff", "has no 'max'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry",
                        "{\"max\": 2, \"backoff\": \"5m\", \"max_backoff\": \"1m\"}"),
                "/states/awaiting_payment/retry", "max_backoff is shorter than retry.backoff");
    def_problems_clear(&dt_problems);

    json_t *doc = dt_with("/states/awaiting_dispatch/lease",
                          "{\"claim\": \"PaymentDeclined\", \"holder\": \"/worker\", "
                          "\"renew\": [\"PaymentDeclinedd\"], \"duration\": \"10m\"}");
    EXPECT_ONLY(doc, "/states/awaiting_dispatch/lease/renew/0",
                "lease event 'PaymentDeclinedd' is not declared in 'events'",
                "did you mean 'PaymentDeclined'?");
    def_problems_clear(&dt_problems);

    doc = dt_without("/states/awaiting_dispatch/deadline");
    dt_put(doc, "/deadline", "\"10d\"");
    dt_put(doc, "/states/awaiting_dispatch/lease",
           "{\"claim\": \"PaymentDeclined\", \"holder\": \"/worker\", \"duration\": \"10m\"}");
    EXPECT(doc, "/states/awaiting_dispatch/lease", "a lease needs the state's own 'deadline'");
    def_problems_clear(&dt_problems);

    /* payment_id is captured by PaymentCaptured, which leads to
     * awaiting_dispatch, not back to awaiting_payment. */
    EXPECT_ONLY(dt_with("/states/awaiting_payment/command/payload/pid", "\"${vars.payment_id}\""),
                "/states/awaiting_payment/command/payload/pid",
                "${vars.payment_id} is never captured on a path that reaches state "
                "'awaiting_payment'");
    def_problems_clear(&dt_problems);

    def_t *def =
        dt_expect_valid(dt_with("/states/awaiting_payment/retry",
                                "{\"max\": 3, \"backoff\": \"30s\", \"max_backoff\": \"2m\"}"));
    ck_assert_int_eq(def->states[0].retry_max, 3);
    ck_assert_int_eq(def->states[0].retry_backoff_ms, 30000);
    ck_assert_int_eq(def->states[0].retry_max_backoff_ms, 120000);
    def_free(def);

    doc = dt_with("/states/awaiting_dispatch/lease",
                  "{\"claim\": \"PaymentDeclined\", \"holder\": \"/worker\", "
                  "\"renew\": [\"OrderPlaced\"], \"duration\": \"10m\"}");
    dt_put(doc, "/states/awaiting_dispatch/token", "{\"header\": \"ce_stewardtoken\"}");
    dt_put(doc, "/states/awaiting_dispatch/command",
           "{\"topic\": \"t\", \"type\": \"Ship\", \"payload\": {\"p\": \"${vars.payment_id}\"}}");
    def = dt_expect_valid(doc);
    long s = def_find_state(def, "awaiting_dispatch");
    ck_assert_ptr_nonnull(def->states[s].lease);
    ck_assert_str_eq(def->states[s].lease->holder_pointer, "/worker");
    ck_assert_int_eq(def->states[s].lease->duration_ms, 600000);
    ck_assert_str_eq(def->states[s].token.header, "ce_stewardtoken");
    bool claim = false;
    ck_assert(
        def_lease_event(def, (size_t) s, (size_t) def_find_event(def, "PaymentDeclined"), &claim));
    ck_assert(claim);
    ck_assert(
        def_lease_event(def, (size_t) s, (size_t) def_find_event(def, "OrderPlaced"), &claim));
    ck_assert(!claim);
    ck_assert(!def_lease_event(def, 0, (size_t) def_find_event(def, "OrderPlaced"), NULL));
    def_free(def);
}
END_TEST

Suite *def_suite(void);
Suite *def_suite(void)
{
    Suite *s = suite_create("def");

    TCase *tc = tcase_create("files");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_load_file_errors);
    tcase_add_test(tc, test_set_load);
    tcase_add_test(tc, test_set_duplicate_version);
    tcase_add_test(tc, test_set_bad_paths);
    tcase_add_test(tc, test_suggestions);
    tcase_add_test(tc, test_schema_member_is_accepted);
    tcase_add_test(tc, test_key_sources);
    tcase_add_test(tc, test_type_sources);
    tcase_add_test(tc, test_time_sources);
    tcase_add_test(tc, test_any_transitions);
    tcase_add_test(tc, test_set_map_topics);
    tcase_add_test(tc, test_active_fields);
    suite_add_tcase(s, tc);
    return s;
}
