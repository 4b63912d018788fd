/*
 * test_dispatcher - the dispatcher's pure parts: the CloudEvents headers of
 * a command, the backoff between attempts, and the dispatch.* config keys
 * (the pause list as SIGHUP reads it). No broker, no database.
 */
#include "manager/alerting/alerts.h"
#include "manager/commands/cmdqueue.h"
#include "manager/config/config.h"
#include "manager/commands/dispatcher.h"
#include "manager/runtime/generation.h"
#include "manager/timing/retention.h"
#include "testlib.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(headers_are_the_contracts)
{
    dispatcher_command_t c = {
        .process = "order_fulfilment",
        .key = "o-1001",
        .state = "reserving",
        .type = "ReserveStock",
        .ce_id = "4f2a",
        .time = "2026-11-29T21:06:03.250Z",
        .step = 3,
        .attempt = 2,
        .token = 9000000001LL,
        .idempotency_key = "9c1e",
    };
    dispatcher_header_t h[DISPATCHER_MAX_HEADERS];
    char source[64];
    dispatcher_headers(&c, NULL, h, source, sizeof source);
    static const char *const want[DISPATCHER_N_HEADERS][2] = {
        {"ce_specversion", "1.0"},
        {"ce_id", "4f2a"},
        {"ce_source", "urn:steward:order_fulfilment"},
        {"ce_type", "ReserveStock"},
        {"ce_time", "2026-11-29T21:06:03.250Z"},
        {"content-type", "application/json"},
        {"ce_idempotencykey", "9c1e"},
        {"steward_idempotency_key", "9c1e"},
        {"ce_stewardprocess", "order_fulfilment"},
        {"ce_stewardkey", "o-1001"},
        {"ce_stewardstate", "reserving"},
        {"ce_stewardstep", "3"},
        {"ce_stewardattempt", "2"},
        {"ce_stewardtoken", "9000000001"},
    };
    for (int i = 0; i < DISPATCHER_N_HEADERS; i++) {
        ck_assert_str_eq(h[i].name, want[i][0]);
        ck_assert_str_eq(h[i].value, want[i][1]);
    }
}
END_TEST

/* A row with a trace context adds it twice (Kafka and CloudEvents
 * names); without one, no trace header at all. */
START_TEST(headers_carry_the_trace_context)
{
    dispatcher_command_t c = {.process = "p",
                              .key = "k",
                              .state = "s",
                              .type = "t",
                              .ce_id = "i",
                              .time = "x",
                              .idempotency_key = "i"};
    dispatcher_header_t h[DISPATCHER_MAX_HEADERS];
    char source[64];
    ck_assert_uint_eq(dispatcher_headers(&c, NULL, h, source, sizeof source), DISPATCHER_N_HEADERS);
    c.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    ck_assert_uint_eq(dispatcher_headers(&c, NULL, h, source, sizeof source),
                      DISPATCHER_N_HEADERS + 2);
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS].name, "traceparent");
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS].value, c.traceparent);
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS + 1].name, "ce_traceparent");
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS + 1].value, c.traceparent);
    c.tracestate = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
    ck_assert_uint_eq(dispatcher_headers(&c, NULL, h, source, sizeof source),
                      DISPATCHER_MAX_HEADERS);
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS + 2].name, "tracestate");
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS + 2].value, c.tracestate);
    ck_assert_str_eq(h[DISPATCHER_N_HEADERS + 3].name, "ce_tracestate");
    /* A tracestate never travels without its traceparent. */
    c.traceparent = NULL;
    ck_assert_uint_eq(dispatcher_headers(&c, NULL, h, source, sizeof source), DISPATCHER_N_HEADERS);
}
END_TEST

/* Span ids: 16 lowercase hex digits, never zero, a new one each time. */
START_TEST(span_ids_are_random_and_valid)
{
    char a[17], b[17];
    ck_assert(cmdq_span_id(a));
    ck_assert(cmdq_span_id(b));
    ck_assert_uint_eq(strlen(a), 16);
    ck_assert_str_ne(a, b);
    ck_assert_str_ne(a, "0000000000000000");
    for (int i = 0; i < 16; i++)
        ck_assert_msg((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f'), "%s", a);
}
END_TEST

/* The child keeps the parent's trace id and flags, version 00, and takes
 * the new span id; an invalid parent or span makes none. */
START_TEST(trace_child_continues_the_parent)
{
    char out[56];
    ck_assert(cmdq_trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                               "a1b2c3d4e5f60718", out));
    ck_assert_str_eq(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-a1b2c3d4e5f60718-01");
    ck_assert(cmdq_trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
                               "a1b2c3d4e5f60718", out));
    ck_assert_str_eq(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-a1b2c3d4e5f60718-00");
    ck_assert(!cmdq_trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                "0000000000000000", out));
    ck_assert_str_eq(out, "");
    ck_assert(!cmdq_trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                "A1B2C3D4E5F60718", out));
    ck_assert(
        !cmdq_trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a1b2", out));
    ck_assert(!cmdq_trace_child("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                "a1b2c3d4e5f60718", out));
    ck_assert(!cmdq_trace_child(NULL, "a1b2c3d4e5f60718", out));
    char span[17];
    ck_assert(cmdq_span_id(span));
    ck_assert(
        cmdq_trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", span, out));
    ck_assert_int_eq(strncmp(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36), 0);
    ck_assert_str_eq(out + 52, "-01");
}
END_TEST

START_TEST(headers_cut_a_long_source_safely)
{
    char process[300];
    memset(process, 'p', sizeof process - 1);
    process[sizeof process - 1] = '\0';
    dispatcher_command_t c = {.process = process,
                              .key = "k",
                              .state = "s",
                              .type = "t",
                              .ce_id = "i",
                              .time = "x",
                              .step = 1,
                              .attempt = 0,
                              .token = 1};
    dispatcher_header_t h[DISPATCHER_MAX_HEADERS];
    char source[32];
    dispatcher_headers(&c, "https://ops.example/${process}/x", h, source, sizeof source);
    ck_assert_int_eq((int) strlen(h[2].value), 31);
    ck_assert(strncmp(h[2].value, "https://ops.example/ppp", 23) == 0);
    ck_assert_str_eq(h[8].value, process); /* the extension is whole */
    ck_assert_str_eq(h[11].value, "1");
    ck_assert_str_eq(h[12].value, "0");
    ck_assert_str_eq(h[13].value, "1");
}
END_TEST

START_TEST(source_is_configurable)
{
    dispatcher_command_t c = {.process = "pay",
                              .key = "k",
                              .state = "s",
                              .type = "t",
                              .ce_id = "i",
                              .time = "x",
                              .step = 1,
                              .token = 1};
    dispatcher_header_t h[DISPATCHER_MAX_HEADERS];
    char source[128];
    dispatcher_headers(&c, "https://steward.example/${process}?p=${process}", h, source,
                       sizeof source);
    ck_assert_str_eq(h[2].value, "https://steward.example/pay?p=pay");
    dispatcher_headers(&c, "urn:acme:orchestrator", h, source, sizeof source);
    ck_assert_str_eq(h[2].value, "urn:acme:orchestrator"); /* fixed: the process is an extension */
    dispatcher_headers(&c, "urn:x:${proc", h, source, sizeof source);
    ck_assert_str_eq(h[2].value, "urn:x:${proc");
}
END_TEST

/* One key per step entry: every attempt of it the same, the next entry of
 * the same state (a loop back) another; and never a ce_id. */
START_TEST(idempotency_key_per_step_entry)
{
    char a[65], b[65], other[65], ce_id[65];
    cmdq_idempotency_key("pay", "o-1", 3, a);
    cmdq_idempotency_key("pay", "o-1", 3, b);
    ck_assert_str_eq(a, b);
    ck_assert_int_eq((int) strlen(a), 64);
    cmdq_idempotency_key("pay", "o-1", 4, other);
    ck_assert_str_ne(a, other);
    cmdq_idempotency_key("pay", "o-2", 3, other);
    ck_assert_str_ne(a, other);
    cmdq_idempotency_key("pa", "yo-1", 3, other); /* the separator keeps fields apart */
    ck_assert_str_ne(a, other);
    for (int attempt = 0; attempt < 3; attempt++) {
        engine_command_id("pay", "o-1", 3, attempt, ce_id);
        ck_assert_str_ne(a, ce_id);
    }
}
END_TEST

START_TEST(backoff_doubles_to_its_cap)
{
    ck_assert_int_eq(dispatcher_backoff_ms(0, 300000), 1000);
    ck_assert_int_eq(dispatcher_backoff_ms(1, 300000), 1000);
    ck_assert_int_eq(dispatcher_backoff_ms(2, 300000), 2000);
    ck_assert_int_eq(dispatcher_backoff_ms(3, 300000), 4000);
    ck_assert_int_eq(dispatcher_backoff_ms(9, 300000), 256000);
    ck_assert_int_eq(dispatcher_backoff_ms(10, 300000), 300000);
    /* no overflow however many attempts */
    ck_assert_int_eq(dispatcher_backoff_ms(1000000, 300000), 300000);
    ck_assert_int_eq(dispatcher_backoff_ms(5, 1500), 1500);
}
END_TEST

static config_t *cfg;

static void config_setup(void)
{
    cfg = config_new();
    ck_assert_ptr_nonnull(cfg);
}

static void config_teardown(void)
{
    config_free(cfg);
}

static const char *paused_after(const char *value)
{
    char errstr[256];
    ck_assert_int_eq(config_set(cfg, "dispatch.paused", value, errstr, sizeof errstr), ERR_OK);
    return cfg->dispatch_paused;
}

START_TEST(paused_list_is_normalized)
{
    ck_assert_str_eq(cfg->dispatch_paused, "");
    ck_assert_str_eq(paused_after("orders"), "orders");
    ck_assert_str_eq(paused_after(" orders , payments,orders,, "), "orders,payments");
    ck_assert_str_eq(paused_after("ord"), "ord");
    ck_assert_str_eq(paused_after("orders,ord,orders_v2,ord"), "orders,ord,orders_v2");
    ck_assert_str_eq(paused_after("orders, *"), "*");
    ck_assert_str_eq(paused_after(""), "");
}
END_TEST

START_TEST(paused_list_from_a_file)
{
    char errstr[512];
    const char *dir = tl_tmpdir();
    char *path =
        tl_write_file(dir, "c.json", "{\"dispatch\": {\"paused\": [\"orders\", \"payments\"]}}");
    ck_assert_int_eq(config_load_file(cfg, path, errstr, sizeof errstr), ERR_OK);
    ck_assert_str_eq(cfg->dispatch_paused, "orders,payments");
    free(path);
    path = tl_write_file(dir, "c.json", "{\"dispatch\": {\"paused\": \"*\"}}");
    ck_assert_int_eq(config_load_file(cfg, path, errstr, sizeof errstr), ERR_OK);
    ck_assert_str_eq(cfg->dispatch_paused, "*");
    free(path);
    path = tl_write_file(dir, "c.json", "{\"dispatch\": {\"paused\": [\"orders\", 3]}}");
    ck_assert_int_eq(config_load_file(cfg, path, errstr, sizeof errstr), ERR_INVALID);
    ck_assert_msg(strstr(errstr, "dispatch.paused[1]") != NULL, "errstr: %s", errstr);
    free(path);
}
END_TEST

START_TEST(dispatch_keys_have_defaults_and_bounds)
{
    char errstr[256];
    ck_assert_int_eq(cfg->dispatch_interval_ms, 100);
    ck_assert_int_eq(cfg->dispatch_timeout_ms, 30000);
    ck_assert_int_eq(cfg->dispatch_max_backoff_ms, 300000);
    ck_assert_int_eq(cfg->dispatch_batch_size, 500);
    ck_assert_int_eq(config_set(cfg, "dispatch.timeout", "10ms", errstr, sizeof errstr),
                     ERR_INVALID);
    ck_assert_msg(strstr(errstr, "dispatch.timeout") != NULL, "errstr: %s", errstr);
    ck_assert_int_eq(config_set(cfg, "dispatch.batch_size", "0", errstr, sizeof errstr),
                     ERR_INVALID);
    ck_assert_int_eq(config_set(cfg, "dispatch.max_backoff", "2m", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(cfg->dispatch_max_backoff_ms, 120000);
    ck_assert_int_eq(cfg->dispatch_lease_ms, 5000);
    ck_assert_str_eq(cfg->dispatch_source, "urn:steward:${process}");
    ck_assert_int_eq(config_set(cfg, "dispatch.lease", "2s", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(cfg->dispatch_lease_ms, 2000);
    ck_assert_int_eq(config_set(cfg, "dispatch.lease", "100ms", errstr, sizeof errstr),
                     ERR_INVALID);
    ck_assert_int_eq(
        config_set(cfg, "dispatch.source", "https://ops.example/steward", errstr, sizeof errstr),
        ERR_OK);
    ck_assert_str_eq(cfg->dispatch_source, "https://ops.example/steward");
    ck_assert_int_eq(config_set(cfg, "dispatch.pause", "x", errstr, sizeof errstr), ERR_INVALID);
    ck_assert_msg(strstr(errstr, "did you mean 'dispatch.paused'") != NULL, "errstr: %s", errstr);
}
END_TEST

START_TEST(names_for_the_new_rows)
{
    ck_assert_str_eq(alert_kind_name(ALERT_DISPATCH_FAILED), "dispatch_failed");
    ck_assert_str_eq(alert_kind_name(ALERT_COMMAND_FAILED), "command_failed");
    ck_assert_str_eq(alert_kind_name(ALERT_LEASE_EXPIRED), "lease_expired");
    ck_assert_str_eq(retention_table_name(RETENTION_COMMANDS), "commands");
}
END_TEST

START_TEST(pause_list_is_published_beside_the_generation)
{
    gen_current_t *cur = gen_current_new(gen_new(NULL, NULL));
    ck_assert_ptr_nonnull(cur);
    unsigned seen = 0;
    ck_assert_ptr_null(gen_paused_refresh(cur, &seen)); /* never set: nothing to take up */
    ck_assert(gen_set_paused(cur, "orders"));
    char *got = gen_paused_refresh(cur, &seen);
    ck_assert_str_eq(got, "orders");
    free(got);
    ck_assert_ptr_null(gen_paused_refresh(cur, &seen)); /* taken up once */
    unsigned other = 0;                                 /* another thread's first look */
    got = gen_paused_refresh(cur, &other);
    ck_assert_str_eq(got, "orders");
    free(got);
    ck_assert(gen_set_paused(cur, ""));
    got = gen_paused_refresh(cur, &seen);
    ck_assert_str_eq(got, "");
    free(got);
    gen_current_free(cur);
}
END_TEST

Suite *dispatcher_suite(void)
{
    Suite *s = suite_create("dispatcher");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, headers_are_the_contracts);
    tcase_add_test(tc, headers_cut_a_long_source_safely);
    tcase_add_test(tc, headers_carry_the_trace_context);
    tcase_add_test(tc, span_ids_are_random_and_valid);
    tcase_add_test(tc, trace_child_continues_the_parent);
    tcase_add_test(tc, source_is_configurable);
    tcase_add_test(tc, idempotency_key_per_step_entry);
    tcase_add_test(tc, backoff_doubles_to_its_cap);
    tcase_add_test(tc, names_for_the_new_rows);
    tcase_add_test(tc, pause_list_is_published_beside_the_generation);
    suite_add_tcase(s, tc);
    TCase *conf = tcase_create("config");
    tcase_add_checked_fixture(conf, config_setup, config_teardown);
    tcase_add_test(conf, paused_list_is_normalized);
    tcase_add_test(conf, paused_list_from_a_file);
    tcase_add_test(conf, dispatch_keys_have_defaults_and_bounds);
    suite_add_tcase(s, conf);
    return s;
}
