/*
 * test_failpoints - steward killed at every failpoint of the owning half
 * (common/failpoint.h), restarted without it, and held to the ground truth
 * of an uninterrupted run.
 *
 * The flow: ten orders of active_order (tests/data/definitions/
 * active_order.json.in, reserving's deadline 4s) with the dispatcher on and
 * a service played here, which reads the three command topics and answers:
 *
 *   A1..A6  StockReserved to the first ReserveStock, Picked to PickOrder: done
 *   S1, S2  ReserveStock answered from its first re-send on: a deadline
 *           pass re-sends it, then done
 *   L1      PickOrder's first send taken (PickStarted, no heartbeat): the
 *           lease runs out, the step is handed off, the second send is
 *           answered: done
 *   U1      StockUnavailable, and Refund never answered: refunding misses
 *           its deadline and pages (the notifier delivers to the log sink)
 *
 * Each ReserveStock or PickOrder is answered once per ce_id, with its token.
 *
 *   reference      the flow uninterrupted: the final states below, and the
 *                  invariants
 *   crash_at       for each failpoint in turn: the flow with NAME=crash@N;
 *                  steward must die by SIGKILL there (a point the flow never
 *                  reaches fails the test); restarted without it, the flow
 *                  ends as the reference did, within 30 s, and keeps every
 *                  invariant.
 *                  actions.before_commit is an operator's `steward retry`
 *                  killed before its COMMIT: nothing of it is left, and the
 *                  retry done again queues one command; upgrade.between_batches
 *                  an operator's `steward upgrade` killed after its first
 *                  batch: run again, every open instance moved once
 *   clock_jump     while the first commands are in flight, an event an hour
 *                  ahead arrives on every topic, which moves no watermark;
 *                  the orders still answered in time end as in the
 *                  reference, with the same invariants
 *
 * STEWARD_TEST_FAILPOINT=NAME runs crash_at for that failpoint alone.
 *
 * The invariants: every final state equal to the reference; no attempt of a
 * step under two command ids (read off the command topics, and in
 * steward.commands); no attempt past the state's retry.max; no on_timeout
 * (every order here is answered); no event judged twice (one history row
 * per event id per instance, a parked event's first row aside).
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/failpoint.h"

static const char *const keys[] = {"A1", "A2", "A3", "A4", "A5", "A6", "S1", "S2", "L1", "U1"};
#define N_KEYS (sizeof keys / sizeof keys[0])

/* What an uninterrupted run ends with (the reference test checks it). */
static const char reference_states[] =
    "A1:done A2:done A3:done A4:done A5:done A6:done L1:done S1:done S2:done U1:refunding";

static const char states_sql[] = "SELECT string_agg(key || ':' || state, ' ' ORDER BY key) FROM "
                                 "steward.instances WHERE process = 'active_order'";

static tw_world_t w;

/* How long the flow may take after a restart to end as the reference did. */
#define RESTART_BOUND_S 30

/* One command read off a command topic. */
typedef struct sent {
    char key[16], state[16], ce_id[80];
    int step, attempt;
    long long token;
} sent_t;

typedef struct service {
    rd_kafka_t *consumer;
    tl_producer_t *producer;
    sent_t *seen;
    size_t n_seen, cap_seen;
    int pid; /* the steward it watches */
} service_t;

static void teardown(void)
{
    tw_teardown(&w);
}

static long long now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* batch_size: intake.batch_size; 0 for the default. */
static void world_init_batch(const char *name, int batch_size)
{
    tw_init(&w, name);
    tw_create_topics(&w,
                     TW_LIST("orders", "stock", "picking", "payments", "stock-commands",
                             "pick-commands", "payment-commands"),
                     1);
    tw_migrate(&w);
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    mkdir(defs, 0755);
    free(tw_write_template(&w, "tests/data/definitions/active_order.json.in", "defs/v1.json",
                           TW_LIST("@V@", "1", "@MODE@", "active", "@D1@", "4s")));
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts = json_pack(
        "{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s, s:s}, s:{s:s, s:s, s:[]}}",
        "scheduler", "interval", "200ms", "grace", "0s", "blind_after", "10m", "http", "listen", "",
        "routes", "default", "type", "log", "kafka", "topic.metadata.refresh.interval.ms", "1000",
        /* A static member: the restarted steward takes the killed one's
         * place at once instead of waiting out its session. */
        "group.instance.id", w.group, "dispatch", "interval", "100ms", "lease", "2s", "paused");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (batch_size > 0)
        json_object_set_new(cfg, "intake", json_pack("{s:i}", "batch_size", batch_size));
    tw_config_write(&w, cfg);
}

static void world_init(const char *name)
{
    world_init_batch(name, 0);
}

/* `steward run` with STEWARD_FAILPOINTS = spec (NULL: unset), into pids[0]. */
static int spawn(const char *spec)
{
    char env[256];
    const char *argv[] = {NULL, "run", "--config", w.config, "--replica", "r1", NULL};
    snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", spec != NULL ? spec : "");
    w.pids[0] = tl_steward_spawn(argv, TW_LIST(env), w.log);
    return w.pids[0];
}

static char *topic(const char *name)
{
    return tw_topic(&w, name);
}

static void send_event(service_t *s, const char *name, const char *type, const char *key,
                       const char *extra, long long ts)
{
    char value[512], *t = topic(name);
    snprintf(value, sizeof value, "{\"type\":\"%s\",\"order_id\":\"%s\",\"total\":42.5%s%s}", type,
             key, extra[0] != '\0' ? "," : "", extra);
    tl_produce(s->producer, t, 0, value, -1, NULL, ts);
    free(t);
}

static void service_start(service_t *s)
{
    char kerr[512];
    memset(s, 0, sizeof *s);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char *group = tl_unique("failpoints.service");
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "enable.auto.commit", "false", kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    free(group);
    s->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
    ck_assert_msg(s->consumer != NULL, "consumer: %s", kerr);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(3);
    const char *names[] = {"stock-commands", "pick-commands", "payment-commands"};
    for (int i = 0; i < 3; i++) {
        char *t = topic(names[i]);
        rd_kafka_topic_partition_list_add(list, t, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
        free(t);
    }
    ck_assert_int_eq(rd_kafka_assign(s->consumer, list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    s->producer = tl_producer_new();
}

static void service_stop(service_t *s)
{
    rd_kafka_consumer_close(s->consumer);
    rd_kafka_destroy(s->consumer);
    tl_producer_free(s->producer);
    free(s->seen);
}

static bool header(rd_kafka_headers_t *h, const char *name, char *buf, size_t size)
{
    const void *v = NULL;
    size_t len = 0;
    if (rd_kafka_header_get_last(h, name, &v, &len) != RD_KAFKA_RESP_ERR_NO_ERROR || v == NULL)
        return false;
    snprintf(buf, size, "%.*s", (int) len, (const char *) v);
    return true;
}

/* Answers one command as the service described above does. */
static void answer(service_t *s, const sent_t *c)
{
    char extra[128];
    snprintf(extra, sizeof extra, "\"steward_token\":%lld", c->token);
    if (strcmp(c->state, "reserving") == 0) {
        if (c->key[0] == 'U')
            send_event(s, "stock", "StockUnavailable", c->key, extra, 0);
        else if (c->key[0] != 'S' || c->attempt >= 1)
            send_event(s, "stock", "StockReserved", c->key, extra, 0);
    } else if (strcmp(c->state, "picking") == 0) {
        if (c->key[0] == 'L' && c->attempt == 0) {
            char claim[160];
            snprintf(claim, sizeof claim, "\"worker_id\":\"picker-1\",%s", extra);
            send_event(s, "picking", "PickStarted", c->key, claim, 0);
        } else {
            send_event(s, "picking", "Picked", c->key, extra, 0);
        }
    }
    /* refunding: Refund is never answered, so refunding pages */
}

/* Reads what the command topics hold for up to ms, answering each new
 * ce_id once; copies under a known ce_id are recorded and not answered. */
static void service_poll(service_t *s, int ms)
{
    long long until = now_ms() + ms;
    while (now_ms() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(s->consumer, 50);
        if (m == NULL)
            continue;
        rd_kafka_headers_t *h = NULL;
        sent_t c = {0};
        char step[16], attempt[16], token[32];
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR &&
            rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            header(h, "ce_id", c.ce_id, sizeof c.ce_id) &&
            header(h, "ce_stewardkey", c.key, sizeof c.key) &&
            header(h, "ce_stewardstate", c.state, sizeof c.state) &&
            header(h, "ce_stewardstep", step, sizeof step) &&
            header(h, "ce_stewardattempt", attempt, sizeof attempt) &&
            header(h, "ce_stewardtoken", token, sizeof token)) {
            c.step = atoi(step);
            c.attempt = atoi(attempt);
            c.token = atoll(token);
            bool known = false;
            for (size_t i = 0; i < s->n_seen && !known; i++)
                known = strcmp(s->seen[i].ce_id, c.ce_id) == 0;
            if (s->n_seen == s->cap_seen) {
                s->cap_seen = s->cap_seen > 0 ? s->cap_seen * 2 : 64;
                s->seen = realloc(s->seen, s->cap_seen * sizeof *s->seen);
                ck_assert_ptr_nonnull(s->seen);
            }
            s->seen[s->n_seen++] = c;
            if (!known)
                answer(s, &c);
        }
        rd_kafka_message_destroy(m);
    }
}

/* The orders, and one message on each topic no order uses yet so that
 * every watermark moves. ts 0: Kafka's time. */
static void place_orders(service_t *s)
{
    send_event(s, "stock", "Noise", "none", "", 0);
    send_event(s, "picking", "Noise", "none", "", 0);
    send_event(s, "payments", "Noise", "none", "", 0);
    for (size_t i = 0; i < N_KEYS; i++)
        send_event(s, "orders", "OrderPlaced", keys[i], "", 0);
}

/* Whether the flow is over: the reference's states, nothing left to send,
 * U1's page delivered. */
static bool flow_done(void)
{
    char *states = tw_scalar(&w, states_sql, NULL);
    bool done = states != NULL && strcmp(states, reference_states) == 0;
    free(states);
    return done &&
           tw_scalar_long(&w,
                          "SELECT count(*) FROM steward.commands WHERE sent_at IS NULL AND "
                          "cancelled_at IS NULL",
                          NULL) == 0 &&
           tw_scalar_long(&w,
                          "SELECT count(*) FROM steward.outbox o JOIN steward.alerts a ON "
                          "a.id = o.alert_id WHERE a.key = 'U1' AND a.kind = 'deadline' AND "
                          "o.delivered_at IS NOT NULL",
                          NULL) >= 1;
}

/* Whether the steward in pids[0] has exited; its wait status in *status. */
static bool exited(int *status)
{
    if (w.pids[0] <= 0)
        return false;
    pid_t got = waitpid(w.pids[0], status, WNOHANG);
    if (got == w.pids[0]) {
        w.pids[0] = 0;
        return true;
    }
    return false;
}

static void fail_with_log(const char *fmt, const char *arg)
{
    tl_print_tail(w.log, 6000);
    ck_abort_msg(fmt, arg);
}

/* Serves until the flow is done, for up to timeout_s; a steward that
 * exits meanwhile fails the test. */
static void serve_until_done(service_t *s, int timeout_s)
{
    long long until = now_ms() + timeout_s * 1000LL;
    int status;
    while (now_ms() < until) {
        service_poll(s, 300);
        if (exited(&status))
            fail_with_log("steward exited during the flow (%s)", "see the log above");
        if (flow_done())
            return;
    }
    char *states = tw_scalar(&w, states_sql, NULL);
    char *history = tw_scalar(
        &w,
        "SELECT string_agg(key || ' ' || outcome || ' ' || coalesce(to_state, '') || ' ' || "
        "coalesce(detail, ''), E'\\n' ORDER BY id) FROM steward.history WHERE key <> 'none'",
        NULL);
    char *waiting = tw_scalar(
        &w,
        "SELECT string_agg(key || ' in ' || state || ', attempt ' || attempt || ', re-send "
        "pending ' || resend_pending || ', deadline ' || coalesce(deadline_at::text, '-'), '; ' "
        "ORDER BY key) || '; watermark ' || (SELECT min(watermark) FROM steward.offsets) FROM "
        "steward.instances WHERE state NOT IN ('done', 'cancelled')",
        NULL);
    tl_print_tail(w.log, 6000);
    ck_abort_msg("the flow did not end as the reference did within %d s: %s\nwaiting: "
                 "%s\nhistory:\n%s",
                 timeout_s, states != NULL ? states : "(none)",
                 waiting != NULL ? waiting : "(none)", history != NULL ? history : "(none)");
}

/* The retry.max of a state of active_order (the template's). */
static int retry_max(const char *state)
{
    if (strcmp(state, "reserving") == 0)
        return 2;
    if (strcmp(state, "picking") == 0)
        return 1;
    return 0;
}

/* The invariants of the header, on what the service read and the tables.
 * `extra_refunds`: operator retries of refunding the test made. */
static void check_invariants(const service_t *s, int extra_refunds)
{
    char *states = tw_scalar(&w, states_sql, NULL);
    ck_assert_msg(states != NULL && strcmp(states, reference_states) == 0,
                  "final states %s, the reference's %s", states, reference_states);
    free(states);
    for (size_t i = 0; i < s->n_seen; i++) {
        const sent_t *a = &s->seen[i];
        int max = retry_max(a->state) + (strcmp(a->state, "refunding") == 0 ? extra_refunds : 0);
        ck_assert_msg(a->attempt <= max, "%s: %s sent as attempt %d, past retry.max %d", a->key,
                      a->state, a->attempt, max);
        for (size_t j = 0; j < i; j++) {
            const sent_t *b = &s->seen[j];
            if (strcmp(a->key, b->key) == 0 && a->step == b->step && a->attempt == b->attempt)
                ck_assert_msg(strcmp(a->ce_id, b->ce_id) == 0,
                              "%s step %d attempt %d on the topic under two ids: %s and %s", a->key,
                              a->step, a->attempt, a->ce_id, b->ce_id);
        }
    }
    /* Every command queued reached the topic, the service saw each. */
    long queued = tw_scalar_long(&w, "SELECT count(*) FROM steward.commands", NULL);
    size_t distinct = 0;
    for (size_t i = 0; i < s->n_seen; i++) {
        bool earlier = false;
        for (size_t j = 0; j < i && !earlier; j++)
            earlier = strcmp(s->seen[i].ce_id, s->seen[j].ce_id) == 0;
        distinct += !earlier;
    }
    ck_assert_msg((long) distinct == queued, "%zu command ids on the topics, %ld rows queued",
                  distinct, queued);
    tw_expect(&w,
              "SELECT count(*) FROM (SELECT 1 FROM steward.commands GROUP BY process, key, step, "
              "attempt HAVING count(DISTINCT ce_id) > 1) d",
              NULL, "0");
    char *timeouts = tw_scalar(&w,
                               "SELECT string_agg(key || ' ' || detail, '; ') FROM "
                               "steward.history WHERE outcome = 'timeout'",
                               NULL);
    ck_assert_msg(timeouts == NULL, "on_timeout taken by an answered order: %s", timeouts);
    char *twice = tw_scalar(&w,
                            "SELECT string_agg(key || ' ' || event_id || ' x' || n, '; ') FROM "
                            "(SELECT key, event_id, count(*) AS n FROM steward.history "
                            "WHERE \"offset\" >= 0 AND outcome <> 'parked' "
                            "GROUP BY process, key, event_id HAVING count(*) > 1) d",
                            NULL);
    ck_assert_msg(twice == NULL, "events judged twice: %s", twice);
    /* The flow went the way it was meant to: one re-send for each S, one
     * hand-off for L1. */
    tw_expect(&w,
              "SELECT string_agg(key || ':' || outcome, ' ' ORDER BY key) FROM steward.history "
              "WHERE outcome = 'handed_off'",
              NULL, "L1:handed_off");
}

/* How often the flow passes a point before the Nth hit crashes: later
 * hits where the first one comes before anything interesting. */
static int crash_hit(const char *name)
{
    if (strcmp(name, "intake.after_commit") == 0 || strcmp(name, "intake.before_commit") == 0)
        return 3;
    if (strncmp(name, "dispatcher.", 11) == 0)
        return 2;
    return 1;
}

START_TEST(reference)
{
    world_init("fp_reference");
    service_t s;
    service_start(&s);
    spawn(NULL);
    place_orders(&s);
    serve_until_done(&s, 60);
    check_invariants(&s, 0);
    tw_stop(&w, 30);
    service_stop(&s);
}
END_TEST

/* `steward retry active_order U1`, with STEWARD_FAILPOINTS = spec. */
static tl_output_t operator_retry(const char *spec)
{
    char env[256];
    snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", spec != NULL ? spec : "");
    const char *argv[] = {NULL,      "retry", "active_order", "U1",         "--database", w.db_url,
                          "--actor", "alice", "--reason",     "failpoints", NULL};
    return tl_steward(argv, TW_LIST(env));
}

/* The operator's retry killed before its COMMIT leaves nothing; done again
 * it queues refunding's command once more, and it is sent. */
static void crash_in_action(service_t *s)
{
    const char *count = "SELECT count(*) FROM steward.commands WHERE key = 'U1'";
    long before = tw_scalar_long(&w, count, NULL);
    long rows = tw_scalar_long(&w, "SELECT count(*) FROM steward.history WHERE key = 'U1'", NULL);
    tl_output_t o = operator_retry("actions.before_commit=crash");
    ck_assert_msg(o.status == 128 + SIGKILL, "steward retry under the failpoint: status %d: %s",
                  o.status, o.err);
    tl_output_free(&o);
    ck_assert_int_eq(tw_scalar_long(&w, count, NULL), before);
    ck_assert_int_eq(
        tw_scalar_long(&w, "SELECT count(*) FROM steward.history WHERE key = 'U1'", NULL), rows);
    o = operator_retry(NULL);
    ck_assert_msg(o.status == 0, "steward retry: status %d: %s", o.status, o.err);
    tl_output_free(&o);
    ck_assert_int_eq(tw_scalar_long(&w, count, NULL), before + 1);
    long long until = now_ms() + 30000;
    while (now_ms() < until && tw_scalar_long(&w,
                                              "SELECT count(*) FROM steward.commands WHERE "
                                              "sent_at IS NULL AND cancelled_at IS NULL",
                                              NULL) > 0)
        service_poll(s, 300);
    service_poll(s, 1000); /* the retried Refund reaches the service */
}

/* `steward upgrade active_order --to 2 --batch 1`, with STEWARD_FAILPOINTS = spec. */
static tl_output_t operator_upgrade(const char *spec)
{
    char env[256];
    snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", spec != NULL ? spec : "");
    const char *argv[] = {NULL,      "upgrade",  "active_order", "--to",   "2",
                          "--batch", "1",        "--database",   w.db_url, "--actor",
                          "alice",   "--reason", "failpoints",   NULL};
    return tl_steward(argv, TW_LIST(env));
}

/* An upgrade killed once its first batch committed: that batch's instance
 * moved, once; run again, it moves the rest and nothing twice. */
static void crash_in_upgrade(void)
{
    tl_db_exec(w.conn, "INSERT INTO steward.definitions (process, version, mode, document, "
                       "  checksum, topic_mapping) "
                       "SELECT process, 2, mode, jsonb_set(document, '{version}', '2'), 'v2', "
                       "  topic_mapping FROM steward.definitions "
                       "WHERE process = 'active_order' AND version = 1");
    const char *open_sql = "SELECT count(*) FROM steward.instances WHERE status = 'active'";
    long open = tw_scalar_long(&w, open_sql, NULL);
    ck_assert_int_ge(open, 1);
    tl_output_t o = operator_upgrade("upgrade.between_batches=crash@1");
    ck_assert_msg(o.status == 128 + SIGKILL, "steward upgrade under the failpoint: status %d: %s",
                  o.status, o.err);
    tl_output_free(&o);
    const char *moved =
        "SELECT count(*) FROM steward.history WHERE event_type = 'operator:upgrade'";
    ck_assert_int_eq(tw_scalar_long(&w, moved, NULL), 1);
    o = operator_upgrade(NULL);
    ck_assert_msg(o.status == 0, "steward upgrade: status %d: %s", o.status, o.err);
    tl_output_free(&o);
    ck_assert_int_eq(tw_scalar_long(&w, moved, NULL), open);
    ck_assert_int_eq(tw_scalar_long(&w,
                                    "SELECT count(DISTINCT key) FROM steward.history WHERE "
                                    "event_type = 'operator:upgrade'",
                                    NULL),
                     open);
    ck_assert_int_eq(tw_scalar_long(&w,
                                    "SELECT count(*) FROM steward.instances WHERE status = "
                                    "'active' AND version = 2",
                                    NULL),
                     open);
}

START_TEST(crash_at)
{
    const char *name = fp_name((size_t) _i);
    ck_assert_msg(name != NULL, "this build has no failpoints (configure with "
                                "-DSTEWARD_FAILPOINTS=ON; the sanitizer build has them)");
    const char *only = getenv("STEWARD_TEST_FAILPOINT");
    if (only != NULL && only[0] != '\0' && strcmp(only, name) != 0)
        return;
    char world_name[64];
    snprintf(world_name, sizeof world_name, "fp_%d", _i);
    printf("failpoint %s\n", name);
    world_init(world_name);
    service_t s;
    service_start(&s);
    if (strcmp(name, "actions.before_commit") == 0) {
        spawn(NULL);
        place_orders(&s);
        serve_until_done(&s, 60);
        crash_in_action(&s);
        check_invariants(&s, 1);
        tw_stop(&w, 30);
        service_stop(&s);
        return;
    }
    if (strcmp(name, "upgrade.between_batches") == 0) {
        spawn(NULL);
        place_orders(&s);
        serve_until_done(&s, 60);
        crash_in_upgrade();
        check_invariants(&s, 0);
        tw_stop(&w, 30);
        service_stop(&s);
        return;
    }
    char spec[128];
    snprintf(spec, sizeof spec, "%s=crash@%d", name, crash_hit(name));
    spawn(spec);
    place_orders(&s);
    int status = 0;
    long long until = now_ms() + 60000;
    bool died = false;
    while (!died && now_ms() < until) {
        service_poll(&s, 200);
        died = exited(&status);
    }
    if (!died)
        fail_with_log("failpoint %s was never reached in 60 s", name);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_with_log("steward did not die by SIGKILL at %s", name);
    char needle[160];
    snprintf(needle, sizeof needle, "\"failpoint\":\"%s\"", name);
    char *log = tl_read_file(w.log);
    ck_assert_msg(log != NULL && strstr(log, needle) != NULL, "the log does not name %s", name);
    free(log);
    /* A crash costs a lease (dispatch.lease 2s) or a session, not a
     * delivery timeout (30 s): the uninterrupted flow takes about 10 s. */
    spawn(NULL);
    serve_until_done(&s, RESTART_BOUND_S);
    check_invariants(&s, 0);
    tw_stop(&w, 30);
    service_stop(&s);
}
END_TEST

START_TEST(clock_jump)
{
    world_init_batch("fp_clock_jump", 4);
    service_t s;
    service_start(&s);
    spawn(NULL);
    place_orders(&s);
    /* Once the first commands are out, time jumps an hour. */
    long long until = now_ms() + 30000;
    while (now_ms() < until && tw_scalar_long(&w,
                                              "SELECT count(*) FROM steward.commands WHERE "
                                              "sent_at IS NOT NULL",
                                              NULL) == 0)
        service_poll(&s, 100);
    /* steward stops (a pause, as of a frozen VM) with commands in
     * flight; meanwhile an event stamped an hour ahead arrives on every
     * topic, followed by more, so the batch that reads it is not the last
     * of the backlog and the watermark takes its time. */
    ck_assert_int_eq(kill(w.pids[0], SIGSTOP), 0);
    long long ahead = now_ms() + 3600 * 1000LL;
    const char *names[] = {"orders", "stock", "picking", "payments"};
    for (int i = 0; i < 4; i++) {
        send_event(&s, names[i], "Noise", "none", "", ahead);
        for (int j = 0; j < 20; j++)
            send_event(&s, names[i], "Noise", "none", "", 0);
    }
    tl_producer_free(s.producer); /* every one of them on the broker first */
    s.producer = tl_producer_new();
    ck_assert_int_eq(kill(w.pids[0], SIGCONT), 0);
    serve_until_done(&s, RESTART_BOUND_S);
    /* The hour ahead moved no watermark: judged at it, the deadlines would
     * no longer wait for what intake has not read yet. */
    tw_expect(&w,
              "SELECT count(*) FILTER (WHERE watermark > now() + interval '1 minute') FROM "
              "steward.offsets",
              NULL, "0");
    check_invariants(&s, 0);
    tw_stop(&w, 30);
    service_stop(&s);
}
END_TEST

Suite *failpoints_suite(void);
Suite *failpoints_suite(void)
{
    /* One case each, so CK_RUN_CASE picks one (reference, crash or clock_jump). */
    Suite *s = suite_create("failpoints");
    TCase *ref = tcase_create("reference"), *crash = tcase_create("crash"),
          *jump = tcase_create("clock_jump");
    TCase *cases[] = {ref, crash, jump};
    for (size_t i = 0; i < 3; i++) {
        tcase_add_checked_fixture(cases[i], NULL, teardown);
        tcase_set_timeout(cases[i], 150);
        suite_add_tcase(s, cases[i]);
    }
    tcase_add_test(ref, reference);
    tcase_add_loop_test(crash, crash_at, 0, fp_count() > 0 ? (int) fp_count() : 1);
    tcase_add_test(jump, clock_jump);
    return s;
}
