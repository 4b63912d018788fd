/*
 * test_schemas - intake's cache of parsed writer schemas over a registry
 * (here a directory of <id>.avsc files): the decode stage's look-up (no
 * fetch) answers only from the cache and calls the rest unavailable; a
 * fetch parses and keeps the schema, so the next look-up needs no
 * request; an id with no file is not found, a file that is not an Avro
 * schema invalid (kept too: an id never changes), and the requests are
 * counted by result; schemas_avro_event() finds a confluent_avro topic.
 */
#include "manager/intake/schemas.h"
#include "manager/runtime/metrics.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(schemas_are_fetched_once_and_judged)
{
    char dir[256], errstr[256], detail[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/schemas-XXXXXX", tmp != NULL ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    free(tl_write_file(dir, "5.avsc",
                       "{\"type\":\"record\",\"name\":\"R\",\"fields\":["
                       "{\"name\":\"a\",\"type\":\"long\"}]}"));
    free(tl_write_file(dir, "6.avsc", "{\"type\":\"recrod\"}"));
    registry_t *reg = registry_new(&(registry_config_t){.directory = dir}, errstr, sizeof errstr);
    ck_assert_msg(reg != NULL, "%s", errstr);
    schemas_t *s = schemas_new(reg);
    ck_assert_ptr_nonnull(s);
    long long found0 = metrics_get(&metrics.registry_requests[REGISTRY_FOUND]);
    long long missing0 = metrics_get(&metrics.registry_requests[REGISTRY_NOT_FOUND]);

    const format_avro_schema_t *schema = NULL;
    ck_assert_int_eq(schemas_get(s, 5, false, &schema, detail, sizeof detail), SCHEMAS_UNAVAILABLE);
    ck_assert_ptr_null(schema);
    ck_assert_int_eq(schemas_get(s, 5, true, &schema, detail, sizeof detail), SCHEMAS_AVRO);
    ck_assert_ptr_nonnull(schema);
    schemas_release(s, 5, schema);
    /* Kept: the decode stage has it now, and no request is made. */
    ck_assert_int_eq(schemas_get(s, 5, false, &schema, detail, sizeof detail), SCHEMAS_AVRO);
    json_t *v = NULL;
    ck_assert_int_eq(format_avro_decode(schema, "\x54", 1, 8, &v, detail, sizeof detail),
                     FORMAT_AVRO_OK);
    ck_assert_int_eq(json_integer_value(json_object_get(v, "a")), 42);
    json_decref(v);
    schemas_release(s, 5, schema);
    ck_assert_int_eq(metrics_get(&metrics.registry_requests[REGISTRY_FOUND]) - found0, 1);

    ck_assert_int_eq(schemas_get(s, 7, true, &schema, detail, sizeof detail), SCHEMAS_NOT_FOUND);
    ck_assert_msg(strstr(detail, "unknown schema id 7") != NULL, "%s", detail);
    ck_assert_int_eq(metrics_get(&metrics.registry_requests[REGISTRY_NOT_FOUND]) - missing0, 1);

    ck_assert_int_eq(schemas_get(s, 6, true, &schema, detail, sizeof detail), SCHEMAS_INVALID);
    ck_assert_msg(strstr(detail, "schema id 6") != NULL &&
                      strstr(detail, "not an Avro schema") != NULL,
                  "%s", detail);
    ck_assert_int_eq(schemas_get(s, 6, false, &schema, detail, sizeof detail), SCHEMAS_INVALID);
    ck_assert_int_eq(metrics_get(&metrics.registry_down), 0);

    schemas_free(s);
    registry_free(reg);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(a_confluent_avro_topic_is_found)
{
    const char *doc =
        "{\"process\":\"p\",\"version\":1,\"mode\":\"shadow\",\"owner\":\"team\","
        "\"key\":\"/order_id\",\"topics\":{\"payments\":{\"format\":\"confluent_avro\"}},"
        "\"events\":{\"Placed\":{\"topic\":\"orders\"},\"Paid\":{\"topic\":\"payments\"}},"
        "\"start\":{\"on\":\"Placed\",\"to\":\"open\"},"
        "\"states\":{\"open\":{\"deadline\":\"1h\",\"on\":{\"Paid\":\"done\"}},"
        "            \"done\":{\"terminal\":\"success\"}}}";
    def_problems_t problems = {0};
    def_t *d = def_load_json(doc, strlen(doc), "p.json", &problems);
    ck_assert_ptr_nonnull(d);
    def_t *defs[1] = {d};
    def_set_t set = {.defs = defs, .n = 1};
    const def_event_t *ev = schemas_avro_event(&set);
    ck_assert_ptr_nonnull(ev);
    ck_assert_str_eq(ev->name, "Paid");
    ck_assert_ptr_null(schemas_avro_event(NULL));
    def_free(d);
}
END_TEST

Suite *schemas_suite(void)
{
    Suite *s = suite_create("schemas");
    TCase *tc = tcase_create("schemas");
    tcase_add_test(tc, schemas_are_fetched_once_and_judged);
    tcase_add_test(tc, a_confluent_avro_topic_is_found);
    suite_add_tcase(s, tc);
    return s;
}
