/*
 * world - the setting of an end-to-end test; see world.h.
 */
#include "world.h"

#include "testlib.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Steward's log is where a failure in steward shows; this much of its end
 * fits a check failure report without burying it. */
#define TW_TAIL 6000

void tw_init(tw_world_t *w, const char *name)
{
    memset(w, 0, sizeof *w);
    char *base = tl_unique(name);
    ck_assert_int_ge(asprintf(&w->prefix, "%s.", base), 0);
    w->group = base;
    w->db_url = tl_db_create(name);
    w->conn = tl_db_connect(w->db_url);
    w->dir = strdup(tl_tmpdir());
    w->log = tl_write_file(w->dir, "steward.log", "");
    ck_assert_int_ge(asprintf(&w->config, "%s/config.json", w->dir), 0);
}

void tw_migrate(const tw_world_t *w)
{
    tl_migrate(w->db_url);
}

char *tw_topic(const tw_world_t *w, const char *name)
{
    char *t = NULL;
    ck_assert_int_ge(asprintf(&t, "%s%s", w->prefix, name), 0);
    return t;
}

void tw_create_topics(const tw_world_t *w, const char *const *names, int partitions)
{
    size_t n = 0;
    while (names[n] != NULL)
        n++;
    char **topics = calloc(n + 1, sizeof *topics);
    ck_assert_ptr_nonnull(topics);
    for (size_t i = 0; i < n; i++)
        topics[i] = tw_topic(w, names[i]);
    tl_kafka_create_topics((const char *const *) topics, n, partitions);
    for (size_t i = 0; i < n; i++)
        free(topics[i]);
    free(topics);
}

/* The length of the token p starts with (0: none), its value in *with. */
static size_t token_at(const char *p, const char *prefix, const char *const *subs,
                       const char **with)
{
    if (strncmp(p, "@P@", 3) == 0) {
        *with = prefix;
        return 3;
    }
    for (const char *const *s = subs; s != NULL && s[0] != NULL; s += 2) {
        size_t n = strlen(s[0]);
        if (strncmp(p, s[0], n) == 0) {
            *with = s[1];
            return n;
        }
    }
    return 0;
}

char *tw_fill(const char *text, const char *prefix, const char *const *subs)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ck_assert_ptr_nonnull(f);
    for (const char *p = text; *p;) {
        const char *with;
        size_t n = token_at(p, prefix, subs, &with);
        if (n > 0) {
            fputs(with, f);
            p += n;
        } else {
            fputc(*p++, f);
        }
    }
    ck_assert_int_eq(fclose(f), 0);
    return out;
}

char *tw_write_template(const tw_world_t *w, const char *template, const char *file,
                        const char *const *subs)
{
    char *path = tl_source_path(template);
    char *text = tl_read_file(path);
    char *filled = tw_fill(text, w->prefix, subs);
    char *written = tl_write_file(w->dir, file, filled);
    free(filled);
    free(text);
    free(path);
    return written;
}

json_t *tw_config(const tw_world_t *w, const char *definitions)
{
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/%s", w->dir, definitions);
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:s, s:s}", "brokers", tl_kafka_brokers(), "database",
                            w->db_url, "definitions", defs, "group", w->group, "log_level", "info");
    ck_assert_ptr_nonnull(cfg);
    return cfg;
}

void tw_config_write(const tw_world_t *w, json_t *cfg)
{
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(json_dump_file(cfg, w->config, JSON_INDENT(2)), 0);
    json_decref(cfg);
}

int tw_spawn(const tw_world_t *w, const char *const *extra)
{
    const char *argv[16] = {NULL, "run", "--config", w->config};
    size_t n = 4;
    for (const char *const *a = extra; a != NULL && *a != NULL; a++) {
        ck_assert_uint_lt(n, sizeof argv / sizeof argv[0] - 1);
        argv[n++] = *a;
    }
    argv[n] = NULL;
    return tl_steward_spawn(argv, NULL, w->log);
}

void tw_start(tw_world_t *w, const char *const *extra, bool http)
{
    w->pids[0] = tw_spawn(w, extra);
    if (http)
        tl_wait_http_listening(w->log, w->base, sizeof w->base);
}

void tw_stop(tw_world_t *w, int timeout_s)
{
    if (w->pids[0] <= 0)
        return; /* tl_stop(0) would signal the test's own process group */
    int rc = tl_stop(w->pids[0], SIGTERM, timeout_s);
    w->pids[0] = 0;
    if (rc != 0) {
        tl_print_tail(w->log, TW_TAIL);
        ck_abort_msg("steward exited %d after SIGTERM, expected 0 (its log above)", rc);
    }
}

void tw_teardown(tw_world_t *w)
{
    for (int i = 0; i < TW_STEWARDS; i++) {
        if (w->pids[i] > 0)
            tl_stop(w->pids[i], SIGKILL, 10);
        w->pids[i] = 0;
    }
    PQfinish(w->conn);
    free(w->prefix);
    free(w->group);
    free(w->dir);
    free(w->log);
    free(w->config);
    memset(w, 0, sizeof *w);
}

static int count(const char *const *list)
{
    int n = 0;
    while (list != NULL && list[n] != NULL)
        n++;
    return n;
}

void tw_wait(const tw_world_t *w, const char *sql, const char *const *params, const char *expected,
             int timeout_s, const char *what)
{
    char *last = NULL;
    if (!tl_db_wait(w->conn, sql, count(params), params, expected, timeout_s, &last)) {
        tl_print_tail(w->log, TW_TAIL);
        ck_abort_msg("%s: got %s, expected %s (steward's log above)", what, last, expected);
    }
}

char *tw_scalar(const tw_world_t *w, const char *sql, const char *const *params)
{
    return tl_db_scalar(w->conn, sql, count(params), params);
}

long tw_scalar_long(const tw_world_t *w, const char *sql, const char *const *params)
{
    char *v = tw_scalar(w, sql, params);
    long n = v != NULL ? atol(v) : -1;
    free(v);
    return n;
}

void tw_expect(const tw_world_t *w, const char *sql, const char *const *params,
               const char *expected)
{
    char *got = tw_scalar(w, sql, params);
    ck_assert_msg(got != NULL && strcmp(got, expected) == 0, "%s: got %s, expected %s", sql, got,
                  expected);
    free(got);
}
