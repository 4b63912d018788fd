/*
 * test_registry - schemas from a local directory of <id>.avsc files: found
 * (and cached: the file's removal afterwards changes nothing), missing
 * (not found, permanent), a bad file (a directory where the file should
 * be, a file with a NUL byte: unavailable, so the message waits for the
 * operator rather than be rejected). The configuration refused with its
 * reason. And a registry URL where nothing listens: unavailable, naming
 * the URL and the id. The registry itself is the integration tier's.
 */
#include "registry/registry.h"
#include "testlib.h"

#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];
static char errstr[512];

static void put(const char *name, const char *text, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/registry-XXXXXX", tmp != NULL ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(a_directory_finds_missing_and_bad_files)
{
    const char *avsc = "{\"type\":\"record\",\"name\":\"R\",\"fields\":[]}\n";
    put("7.avsc", avsc, strlen(avsc));
    put("8.avsc", "{\"type\"\0}", 9);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/9.avsc", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);

    registry_t *reg = registry_new(&(registry_config_t){.directory = dir}, errstr, sizeof errstr);
    ck_assert_msg(reg != NULL, "%s", errstr);
    ck_assert_str_eq(registry_source(reg), dir);
    char *text;
    registry_schema_type_t type;
    int cached;
    ck_assert_int_eq(registry_lookup(reg, 7, &text, &type, &cached, errstr, sizeof errstr),
                     REGISTRY_FOUND);
    ck_assert_str_eq(text, "{\"type\":\"record\",\"name\":\"R\",\"fields\":[]}");
    ck_assert_int_eq(type, REGISTRY_AVRO);
    ck_assert_int_eq(cached, 0);
    free(text);
    /* Immutable once found: the cache answers though the file is gone. */
    snprintf(sub, sizeof sub, "%s/7.avsc", dir);
    ck_assert_int_eq(unlink(sub), 0);
    ck_assert_int_eq(registry_lookup(reg, 7, &text, &type, &cached, errstr, sizeof errstr),
                     REGISTRY_FOUND);
    ck_assert_int_eq(cached, 1);
    free(text);

    ck_assert_int_eq(registry_lookup(reg, 6, &text, &type, &cached, errstr, sizeof errstr),
                     REGISTRY_NOT_FOUND);
    ck_assert_ptr_null(text);
    ck_assert_msg(strstr(errstr, "schema id 6") != NULL && strstr(errstr, "6.avsc") != NULL, "%s",
                  errstr);
    ck_assert_int_eq(registry_lookup(reg, 8, &text, &type, &cached, errstr, sizeof errstr),
                     REGISTRY_UNAVAILABLE);
    ck_assert_msg(strstr(errstr, "schema id 8") != NULL, "%s", errstr);
    ck_assert_int_eq(registry_lookup(reg, 9, &text, &type, &cached, errstr, sizeof errstr),
                     REGISTRY_UNAVAILABLE);
    ck_assert_msg(strstr(errstr, "is not a file") != NULL, "%s", errstr);
    registry_free(reg);
    registry_free(NULL);
}
END_TEST

START_TEST(the_configuration_is_checked)
{
    ck_assert_ptr_null(registry_new(&(registry_config_t){0}, errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "schema_registry.url or schema_registry.directory") != NULL, "%s",
                  errstr);
    ck_assert_ptr_null(
        registry_new(&(registry_config_t){.url = "ftp://x/"}, errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "not an http") != NULL, "%s", errstr);
    ck_assert_ptr_null(registry_new(&(registry_config_t){.directory = "/nonexistent/schemas"},
                                    errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "not a directory") != NULL, "%s", errstr);
    ck_assert_ptr_null(registry_new(&(registry_config_t){.url = "http://127.0.0.1:1",
                                                         .username = "u",
                                                         .password_file = "/nonexistent/password"},
                                    errstr, sizeof errstr));
    ck_assert_msg(strstr(errstr, "schema_registry.password_file") != NULL, "%s", errstr);
}
END_TEST

/* Port 1 on the loopback: nothing listens, the connection is refused. */
START_TEST(a_registry_that_does_not_answer_is_unavailable)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    registry_t *reg =
        registry_new(&(registry_config_t){.url = "http://127.0.0.1:1/", .timeout_ms = 2000}, errstr,
                     sizeof errstr);
    ck_assert_msg(reg != NULL, "%s", errstr);
    char *text;
    registry_schema_type_t type;
    int cached;
    ck_assert_int_eq(registry_lookup(reg, 12, &text, &type, &cached, errstr, sizeof errstr),
                     REGISTRY_UNAVAILABLE);
    ck_assert_ptr_null(text);
    ck_assert_msg(strstr(errstr, "schema id 12") != NULL &&
                      strstr(errstr, "http://127.0.0.1:1/schemas/ids/12") != NULL,
                  "%s", errstr);
    ck_assert_str_eq(registry_result_name(REGISTRY_UNAVAILABLE), "unavailable");
    ck_assert_str_eq(registry_schema_type_name(REGISTRY_PROTOBUF), "PROTOBUF");
    registry_free(reg);
}
END_TEST

Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("registry");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, a_directory_finds_missing_and_bad_files);
    tcase_add_test(tc, the_configuration_is_checked);
    tcase_add_test(tc, a_registry_that_does_not_answer_is_unavailable);
    suite_add_tcase(s, tc);
    return s;
}
