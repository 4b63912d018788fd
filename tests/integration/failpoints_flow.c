/*
 * failpoints_flow - the simulator's flow of integration.failpoints, and its
 * invariants; see failpoints_flow.h.
 */
#include "failpoints_flow.h"

#include "common/db.h"
#include "testlib.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFINITION "tests/data/definitions/sim_order_active.json"

/* The definition's event topics, and its command topics. */
static const char *const event_topics[] = {"orders",   "payments", "inventory",
                                           "shipping", "delivery", "notifications"};
#define N_EVENT_TOPICS (sizeof event_topics / sizeof event_topics[0])
static const char *const command_topics[] = {"payment-commands", "inventory-commands",
                                             "shipping-commands", "notification-commands"};
#define N_COMMAND_TOPICS (sizeof command_topics / sizeof command_topics[0])

/* The runner's pid: the shared world's name (set before the forks). */
static int runner_pid;

void ff_suite_init(void)
{
    runner_pid = (int) getpid();
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the shared world ---------------------------------------------------- */

/* Every table of the steward schema but its migrations, emptied: what a
 * fresh database would hold, without migrating one per run. */
static const char empty_sql[] =
    "DO $$ DECLARE t text; BEGIN "
    "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO t FROM pg_tables "
    "WHERE schemaname = 'steward' AND tablename <> 'schema_versions'; "
    "EXECUTE 'TRUNCATE ' || t || ' RESTART IDENTITY CASCADE'; END $$";

/* The shared database's URL (static), created and migrated on first use;
 * emptied on a later one when `empty`. */
static const char *shared_db(bool empty)
{
    static char *url;
    const char *base = getenv("STEWARD_TEST_DATABASE_URL");
    ck_assert_msg(base != NULL && *base,
                  "STEWARD_TEST_DATABASE_URL is not set: run the suite through scripts/test");
    PGconn *admin = tl_db_connect(base);
    char name[128];
    /* Named as tl_db_create() names a suite's, so scripts/test drops it. */
    snprintf(name, sizeof name, "%s_failpoints_%d", PQdb(admin), runner_pid);
    const char *params[1] = {name};
    char *found =
        tl_db_scalar(admin, "SELECT count(*) FROM pg_database WHERE datname = $1", 1, params);
    bool exists = found != NULL && strcmp(found, "1") == 0;
    free(found);
    if (!exists) {
        char *quoted = PQescapeIdentifier(admin, name, strlen(name));
        char sql[256];
        snprintf(sql, sizeof sql, "CREATE DATABASE %s", quoted);
        tl_db_exec(admin, sql);
        PQfreemem(quoted);
    }
    PQfinish(admin);
    free(url);
    url = db_with_dbname(base, name);
    ck_assert_msg(url != NULL, "cannot parse STEWARD_TEST_DATABASE_URL");
    if (!exists) {
        tl_migrate(url);
    } else if (empty) {
        PGconn *conn = tl_db_connect(url);
        tl_db_exec(conn, empty_sql);
        PQfinish(conn);
    }
    return url;
}

char *ff_reference(void)
{
    PGconn *conn = tl_db_connect(shared_db(false));
    char *has = tl_db_scalar(conn, "SELECT to_regclass('public.failpoints_reference') IS NOT NULL",
                             0, NULL);
    char *states = NULL;
    if (has != NULL && strcmp(has, "t") == 0)
        states = tl_db_scalar(conn, "SELECT states FROM public.failpoints_reference", 0, NULL);
    free(has);
    PQfinish(conn);
    if (states != NULL && states[0] == '\0') {
        free(states);
        states = NULL;
    }
    return states;
}

void ff_save_reference(ff_run_t *r, const char *states)
{
    tl_db_exec(r->w.conn, "CREATE TABLE IF NOT EXISTS public.failpoints_reference (states text)");
    tl_db_exec(r->w.conn, "DELETE FROM public.failpoints_reference");
    const char *params[1] = {states};
    free(tl_db_scalar(r->w.conn, "INSERT INTO public.failpoints_reference VALUES ($1) RETURNING 1",
                      1, params));
}

/* ---- a run --------------------------------------------------------------- */

void ff_noise(ff_run_t *r, long long ahead_ms, int count)
{
    tl_producer_t *p = tl_producer_new();
    static const char value[] = "{\"type\":\"Noise\",\"order_id\":\"none\"}";
    for (size_t i = 0; i < N_EVENT_TOPICS; i++) {
        char *t = tw_topic(&r->w, event_topics[i]);
        if (ahead_ms > 0)
            tl_produce(p, t, 0, value, -1, NULL, ahead_ms);
        for (int j = 0; j < count; j++)
            tl_produce(p, t, 0, value, -1, NULL, 0);
        free(t);
    }
    tl_producer_free(p); /* on the broker before it returns */
}

void ff_wait_read(ff_run_t *r, int timeout_s)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), err, sizeof err) ==
              RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "%s", err);
    for (size_t i = 0; i < N_EVENT_TOPICS; i++) {
        char *t = tw_topic(&r->w, event_topics[i]);
        int64_t lo = 0, hi = 0;
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, t, 0, &lo, &hi, 10000);
        ck_assert_msg(e == RD_KAFKA_RESP_ERR_NO_ERROR, "%s: %s", t, rd_kafka_err2str(e));
        char want[32];
        snprintf(want, sizeof want, "%" PRId64, hi);
        char what[320];
        snprintf(what, sizeof what, "%s read to offset %s", t, want);
        tw_wait(
            &r->w,
            "SELECT CASE WHEN next_offset >= $2::bigint THEN $2::text ELSE next_offset::text END "
            "FROM steward.offsets WHERE topic = $1",
            TW_LIST(t, want), want, timeout_s, what);
        free(t);
    }
    rd_kafka_destroy(rk);
}

void ff_run_init(ff_run_t *r, const char *name, int batch_size)
{
    memset(r, 0, sizeof *r);
    r->sim_pid = -1;
    r->began_ms = now_ms();
    tw_world_t *w = &r->w;
    char *base = tl_unique(name);
    ck_assert_int_ge(asprintf(&w->prefix, "%s.", base), 0);
    w->group = base;
    w->db_url = shared_db(true);
    w->conn = tl_db_connect(w->db_url);
    w->dir = strdup(tl_tmpdir());
    w->log = tl_write_file(w->dir, "steward.log", "");
    ck_assert_int_ge(asprintf(&w->config, "%s/config.json", w->dir), 0);
    ck_assert_int_ge(asprintf(&r->truth_path, "%s/ground-truth.jsonl", w->dir), 0);
    ck_assert_int_ge(asprintf(&r->sim_log, "%s/steward-sim.log", w->dir), 0);

    const char *topics[N_EVENT_TOPICS + N_COMMAND_TOPICS + 1] = {NULL};
    for (size_t i = 0; i < N_EVENT_TOPICS; i++)
        topics[i] = event_topics[i];
    for (size_t i = 0; i < N_COMMAND_TOPICS; i++)
        topics[N_EVENT_TOPICS + i] = command_topics[i];
    tw_create_topics(w, topics, 1);
    ff_noise(r, 0, 1);

    r->rcv = rcv_new();
    char hook[256];
    snprintf(hook, sizeof hook, "%s/hook", rcv_url(r->rcv));
    char *definition = tl_source_path(DEFINITION);
    json_t *cfg = tw_config(w, "unused"); /* "definitions" set below, in the source tree */
    json_t *parts = json_pack(
        "{s:s, s:{s:s}, s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s, s:s, s:s}]}, s:{s:s, s:s},"
        " s:{s:s, s:s}, s:{s:s, s:s, s:s}}",
        "definitions", definition, "topics", "prefix", w->prefix, "scheduler", "interval", "200ms",
        "grace", "0s", "blind_after", "10m", "http", "listen", "", "routes", "default", "type",
        "webhook", "name", "hook", "url", hook, "notifier", "interval", "200ms", "group_window",
        "0s", "kafka", "topic.metadata.refresh.interval.ms", "1000",
        /* A static member: the restarted steward takes the killed one's
         * place at once instead of waiting out its session. */
        "group.instance.id", w->group, "dispatch", "interval", "100ms", "lease", "1s", "paused",
        "");
    free(definition);
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (batch_size > 0)
        json_object_set_new(cfg, "intake", json_pack("{s:i}", "batch_size", batch_size));
    tw_config_write(w, cfg);
}

void ff_spawn(ff_run_t *r, const char *spec)
{
    char env[256];
    const char *argv[] = {NULL, "run", "--config", r->w.config, "--replica", "r1", NULL};
    snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", spec != NULL ? spec : "");
    r->w.pids[0] = tl_steward_spawn(argv, TW_LIST(env), r->w.log);
}

bool ff_exited(ff_run_t *r, int *status)
{
    if (r->died) {
        r->died = false;
        *status = r->died_status;
        return true;
    }
    if (r->w.pids[0] <= 0)
        return false;
    if (waitpid(r->w.pids[0], status, WNOHANG) == r->w.pids[0]) {
        r->w.pids[0] = 0;
        return true;
    }
    return false;
}

/* steward-sim --active for this run, its output in sim_log. */
static void spawn_simulator(ff_run_t *r)
{
    char *definition = tl_source_path(DEFINITION);
    char orders[16];
    snprintf(orders, sizeof orders, "%d", FF_ORDERS);
    /* Latencies at 1/50,000 of the example's and cut at an eighth of each
     * deadline (80% of it times 0.15): a healthy order is done in about
     * three seconds, and only a fault, or steward, misses a deadline. Seed
     * 0x16: two declined and two refunded among the healthy orders. */
    const char *argv[] = {STEWARD_SIM_BINARY,
                          "--active",
                          "--brokers",
                          tl_kafka_brokers(),
                          "--definition",
                          definition,
                          "--topic-prefix",
                          r->w.prefix,
                          "--partitions",
                          "1",
                          "--orders",
                          orders,
                          "--rate",
                          "30",
                          "--seed",
                          "0x16",
                          "--time-scale",
                          "0.00002",
                          "--deadline-scale",
                          "0.15",
                          "--fault-every",
                          "2",
                          "--decline-rate",
                          "0.15",
                          "--stock-fail-rate",
                          "0.15",
                          "--linger",
                          "600",
                          "--ground-truth",
                          r->truth_path,
                          "--quiet",
                          NULL};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(r->sim_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execv(argv[0], (char *const *) argv);
        _exit(127);
    }
    free(definition);
    r->sim_pid = pid;
}

void ff_start(ff_run_t *r, const char *spec)
{
    ff_spawn(r, spec);
    /* Every event topic read (its watermark known) before the first order,
     * so that no deadline runs while steward is still joining. */
    const char *params[1] = {r->w.group};
    long long until = now_ms() + 30000;
    while (now_ms() < until) {
        char *n = tl_db_scalar(r->w.conn,
                               "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1 "
                               "AND watermark IS NOT NULL",
                               1, params);
        bool read = n != NULL && atol(n) >= (long) N_EVENT_TOPICS;
        free(n);
        if (read)
            break;
        /* Died at its failpoint while joining: kept for ff_exited(). */
        if (ff_exited(r, &r->died_status)) {
            r->died = true;
            break;
        }
        usleep(100 * 1000);
    }
    spawn_simulator(r);
    r->started_ms = now_ms();
}

/* ---- the ground truth ---------------------------------------------------- */

static void copy_member(char *buf, size_t size, const json_t *obj, const char *name)
{
    const char *v = json_string_value(json_object_get(obj, name));
    snprintf(buf, size, "%s", v != NULL ? v : "");
}

static void truth_clear(ff_truth_t *t)
{
    free(t->orders);
    free(t->commands);
    free(t->stale);
    memset(t, 0, sizeof *t);
}

/* Reads the ground truth so far into r->truth (a line still being
 * written is skipped). */
static void read_truth(ff_run_t *r)
{
    ff_truth_t *t = &r->truth;
    truth_clear(t);
    FILE *f = fopen(r->truth_path, "r");
    if (f == NULL)
        return;
    char line[4096];
    size_t cap_o = 0, cap_c = 0, cap_s = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        json_t *doc = json_loads(line, 0, NULL);
        if (doc == NULL)
            continue;
        json_t *cmd = json_object_get(doc, "command"), *stale = json_object_get(doc, "stale_reply"),
               *summary = json_object_get(doc, "summary");
        if (json_object_get(doc, "order_id") != NULL) {
            if (t->n_orders == cap_o) {
                cap_o = cap_o ? 2 * cap_o : 32;
                t->orders = realloc(t->orders, cap_o * sizeof *t->orders);
                ck_assert_ptr_nonnull(t->orders);
            }
            ff_order_t *o = &t->orders[t->n_orders++];
            copy_member(o->key, sizeof o->key, doc, "order_id");
            copy_member(o->fault, sizeof o->fault, doc, "fault");
            copy_member(o->at, sizeof o->at, doc, "at");
            copy_member(o->terminal, sizeof o->terminal, doc, "terminal");
            copy_member(o->paged_at, sizeof o->paged_at, doc, "paged_at");
            o->stale_replies = (int) json_integer_value(json_object_get(doc, "stale_replies"));
        } else if (cmd != NULL) {
            if (t->n_commands == cap_c) {
                cap_c = cap_c ? 2 * cap_c : 128;
                t->commands = realloc(t->commands, cap_c * sizeof *t->commands);
                ck_assert_ptr_nonnull(t->commands);
            }
            ff_command_t *c = &t->commands[t->n_commands++];
            copy_member(c->key, sizeof c->key, cmd, "order_id");
            copy_member(c->state, sizeof c->state, cmd, "state");
            copy_member(c->ce_id, sizeof c->ce_id, cmd, "ce_id");
            c->step = (long) json_integer_value(json_object_get(cmd, "step"));
            c->attempt = (long) json_integer_value(json_object_get(cmd, "attempt"));
        } else if (stale != NULL) {
            if (t->n_stale == cap_s) {
                cap_s = cap_s ? 2 * cap_s : 16;
                t->stale = realloc(t->stale, cap_s * sizeof *t->stale);
                ck_assert_ptr_nonnull(t->stale);
            }
            ff_stale_t *s = &t->stale[t->n_stale++];
            copy_member(s->key, sizeof s->key, stale, "order_id");
            copy_member(s->event_id, sizeof s->event_id, stale, "event_id");
        } else if (summary != NULL) {
            t->summary = true;
            t->summary_count = (long) json_integer_value(json_object_get(summary, "orders"));
            t->unreadable =
                (long) json_integer_value(json_object_get(summary, "unreadable_commands"));
        }
        json_decref(doc);
    }
    fclose(f);
}

const ff_order_t *ff_order_with(const ff_run_t *r, const char *fault, const char *at)
{
    for (size_t i = 0; i < r->truth.n_orders; i++)
        if (strcmp(r->truth.orders[i].fault, fault) == 0 && strcmp(r->truth.orders[i].at, at) == 0)
            return &r->truth.orders[i];
    return NULL;
}

static const ff_order_t *order_of(const ff_run_t *r, const char *key)
{
    for (size_t i = 0; i < r->truth.n_orders; i++)
        if (strcmp(r->truth.orders[i].key, key) == 0)
            return &r->truth.orders[i];
    return NULL;
}

/* Whether the simulator read a command with this ce_id. */
static bool read_by_service(const ff_run_t *r, const char *ce_id)
{
    for (size_t i = 0; i < r->truth.n_commands; i++)
        if (strcmp(r->truth.commands[i].ce_id, ce_id) == 0)
            return true;
    return false;
}

/* How many of the stale replies sent for `key` are distinct. */
static int stale_sent(const ff_run_t *r, const char *key)
{
    int n = 0;
    for (size_t i = 0; i < r->truth.n_stale; i++) {
        const ff_stale_t *s = &r->truth.stale[i];
        bool earlier = false;
        for (size_t j = 0; j < i && !earlier; j++)
            earlier = strcmp(r->truth.stale[j].key, s->key) == 0 &&
                      strcmp(r->truth.stale[j].event_id, s->event_id) == 0;
        n += strcmp(s->key, key) == 0 && !earlier;
    }
    return n;
}

/* ---- what steward did ---------------------------------------------------- */

/* A query's rows (text), aborting on failure; PQclear() it. */
static PGresult *rows(const ff_run_t *r, const char *sql, int n, const char *const *params)
{
    PGresult *res = PQexecParams(r->w.conn, sql, n, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(r->w.conn));
    return res;
}

/* The state of the instance `key`, in buf ("" when there is none). */
static const char *state_of(PGresult *states, const char *key)
{
    for (int i = 0; i < PQntuples(states); i++)
        if (strcmp(PQgetvalue(states, i, 0), key) == 0)
            return PQgetvalue(states, i, 1);
    return "";
}

static const char states_sql[] =
    "SELECT key, state FROM steward.instances WHERE process = 'order_fulfilment' ORDER BY key";

char *ff_states(ff_run_t *r)
{
    return tw_scalar(&r->w,
                     "SELECT string_agg(key || ':' || state, ' ' ORDER BY key) FROM "
                     "steward.instances WHERE process = 'order_fulfilment'",
                     NULL);
}

/* A page the receiver got. */
typedef struct page {
    char event[16], key[64], kind[24], state[64], dedup[160];
} page_t;

/* The pages the receiver got so far (malloc'd), how many in *n. */
static page_t *pages(const ff_run_t *r, size_t *n)
{
    size_t count = rcv_count(r->rcv);
    page_t *out = calloc(count + 1, sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < count; i++) {
        rcv_request_t req = rcv_get(r->rcv, i);
        json_t *doc = json_loads(req.body, 0, NULL);
        json_t *alert = json_object_get(doc, "alert");
        copy_member(out[i].event, sizeof out[i].event, doc, "event");
        copy_member(out[i].key, sizeof out[i].key, alert, "key");
        copy_member(out[i].kind, sizeof out[i].kind, alert, "kind");
        copy_member(out[i].state, sizeof out[i].state, alert, "state");
        copy_member(out[i].dedup, sizeof out[i].dedup, alert, "dedup_key");
        json_decref(doc);
        rcv_request_clear(&req);
    }
    *n = count;
    return out;
}

/* Whether a page triggered for `key` at `state` reached the receiver. */
static bool paged(const page_t *p, size_t n, const char *key, const char *state)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].event, "trigger") == 0 && strcmp(p[i].key, key) == 0 &&
            strcmp(p[i].state, state) == 0)
            return true;
    return false;
}

/* Whether history records the event `event_id` of `key` as stale. */
static bool recorded_stale(PGresult *stale, const char *key, const char *event_id)
{
    for (int i = 0; i < PQntuples(stale); i++)
        if (strcmp(PQgetvalue(stale, i, 0), key) == 0 &&
            strcmp(PQgetvalue(stale, i, 1), event_id) == 0)
            return true;
    return false;
}

static const char stale_sql[] = "SELECT key, event_id FROM steward.history WHERE outcome = 'stale' "
                                "AND event_id IS NOT NULL";

/*
 * Whether the flow is over: every order placed and where the ground truth
 * says, every page it says delivered, nothing left to send, every command
 * delivered read by the service, every stale reply sent and judged `stale`.
 * What is still missing goes into seen.
 */
static bool flow_done(void *arg, char *seen, size_t size)
{
    ff_run_t *r = arg;
    read_truth(r);
    if (r->truth.n_orders < FF_ORDERS) {
        snprintf(seen, size, "%zu of %d orders placed", r->truth.n_orders, FF_ORDERS);
        return false;
    }
    PGresult *states = rows(r, states_sql, 0, NULL);
    size_t n_pages;
    page_t *p = pages(r, &n_pages);
    PGresult *stale = rows(r, stale_sql, 0, NULL);
    bool done = true;
    for (size_t i = 0; i < r->truth.n_orders && done; i++) {
        const ff_order_t *o = &r->truth.orders[i];
        const char *want = o->terminal[0] != '\0' ? o->terminal : o->paged_at;
        const char *state = state_of(states, o->key);
        if (strcmp(state, want) != 0) {
            snprintf(seen, size, "%s (%s at %s) in '%s', not yet %s", o->key, o->fault, o->at,
                     state, want);
            done = false;
        } else if (o->paged_at[0] != '\0' && !paged(p, n_pages, o->key, o->paged_at)) {
            snprintf(seen, size, "%s: no page yet at %s", o->key, o->paged_at);
            done = false;
        } else if (stale_sent(r, o->key) < o->stale_replies) {
            snprintf(seen, size, "%s (%s): %d of %d stale replies sent", o->key, o->fault,
                     stale_sent(r, o->key), o->stale_replies);
            done = false;
        }
    }
    /* A stale reply is judged soon after it is sent; one that is not by
     * then was judged otherwise, which ff_check() reports. */
    bool unjudged = false;
    for (size_t i = 0; i < r->truth.n_stale && done && !unjudged; i++)
        if (!recorded_stale(stale, r->truth.stale[i].key, r->truth.stale[i].event_id)) {
            snprintf(seen, size, "%s: stale reply %s not judged stale (yet)", r->truth.stale[i].key,
                     r->truth.stale[i].event_id);
            unjudged = true;
        }
    PQclear(states);
    PQclear(stale);
    free(p);
    if (!done)
        return false;
    PGresult *cmds = rows(r,
                          "SELECT key, ce_id, sent_at IS NOT NULL, cancelled_at IS NOT NULL "
                          "FROM steward.commands",
                          0, NULL);
    for (int i = 0; i < PQntuples(cmds) && done; i++) {
        bool sent = PQgetvalue(cmds, i, 2)[0] == 't', cancelled = PQgetvalue(cmds, i, 3)[0] == 't';
        if (!sent && !cancelled) {
            snprintf(seen, size, "%s: a command not sent yet", PQgetvalue(cmds, i, 0));
            done = false;
        } else if (sent && !read_by_service(r, PQgetvalue(cmds, i, 1))) {
            snprintf(seen, size, "%s: command %.16s... sent, not read by the service yet",
                     PQgetvalue(cmds, i, 0), PQgetvalue(cmds, i, 1));
            done = false;
        }
    }
    PQclear(cmds);
    if (!done) {
        r->settled_ms = 0;
        return false;
    }
    if (r->settled_ms == 0)
        r->settled_ms = now_ms();
    return !unjudged || now_ms() - r->settled_ms > 3000;
}

void ff_print_logs(const ff_run_t *r)
{
    fprintf(stderr, "== steward's log (%s), its end:\n", r->w.log);
    tl_print_tail(r->w.log, 8000);
    fprintf(stderr, "== steward-sim's output (%s), its end:\n", r->sim_log);
    tl_print_tail(r->sim_log, 2000);
}

/* Fails the test over a flow that did not end, saying where each order is. */
static void not_done(ff_run_t *r, int timeout_s, const char *seen)
{
    char *history = tw_scalar(
        &r->w,
        "SELECT string_agg(key || ' ' || outcome || ' ' || coalesce(to_state, '') || ' ' || "
        "coalesce(detail, ''), E'\\n' ORDER BY id) FROM steward.history WHERE key <> 'none'",
        NULL);
    char *waiting = tw_scalar(
        &r->w,
        "SELECT string_agg(key || ' in ' || state || ', attempt ' || attempt || ', re-send "
        "pending ' || resend_pending || ', deadline ' || coalesce(deadline_at::text, '-'), '; ' "
        "ORDER BY key) || '; watermark ' || (SELECT min(watermark) FROM steward.offsets) FROM "
        "steward.instances WHERE state NOT IN ('completed', 'cancelled', 'refunded')",
        NULL);
    fprintf(stderr, "== history:\n%s\n", history != NULL ? history : "(none)");
    ff_print_logs(r);
    ck_abort_msg("the flow did not end within %d s: %s\nwaiting: %s", timeout_s, seen,
                 waiting != NULL ? waiting : "(none)");
}

void ff_wait_done(ff_run_t *r, int timeout_s)
{
    long long until = now_ms() + timeout_s * 1000LL;
    char seen[512] = "";
    int status;
    while (now_ms() < until) {
        if (ff_exited(r, &status)) {
            ff_print_logs(r);
            ck_abort_msg("steward exited during the flow (wait status %d; its log above)", status);
        }
        seen[0] = '\0';
        if (flow_done(r, seen, sizeof seen)) {
            r->done_ms = now_ms();
            return;
        }
        usleep(250 * 1000);
    }
    not_done(r, timeout_s, seen);
}

void ff_finish(ff_run_t *r)
{
    if (r->sim_pid > 0) {
        int rc = tl_stop(r->sim_pid, SIGTERM, 15);
        r->sim_pid = -1;
        if (rc != 0) {
            ff_print_logs(r);
            ck_abort_msg("steward-sim exited %d after SIGTERM, expected 0", rc);
        }
    }
    tw_stop(&r->w, 30);
    read_truth(r);
    printf("%s: set up in %.1f s, flow over %.1f s after the first order, stopped in %.1f s\n",
           r->w.group, (r->started_ms - r->began_ms) / 1000.0,
           (r->done_ms - r->started_ms) / 1000.0, (now_ms() - r->done_ms) / 1000.0);
}

void ff_teardown(ff_run_t *r)
{
    if (r->sim_pid > 0)
        tl_stop(r->sim_pid, SIGKILL, 10);
    r->sim_pid = -1;
    tw_teardown(&r->w);
    rcv_free(r->rcv);
    free(r->truth_path);
    free(r->sim_log);
    truth_clear(&r->truth);
    memset(r, 0, sizeof *r);
}

/* ---- the invariants ------------------------------------------------------ */

/* The broken invariants of a run, one line each. */
typedef struct problems {
    FILE *f;
    char *text;
    size_t len;
    int n;
} problems_t;

static void problem(problems_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems_t *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
    fputc('\n', p->f);
    p->n++;
}

/* The state `name` of the definition the run loads. */
static json_t *def_state(json_t *def, const char *name)
{
    return json_object_get(json_object_get(def, "states"), name);
}

static int retry_max(json_t *def, const char *state)
{
    json_t *max = json_object_get(json_object_get(def_state(def, state), "retry"), "max");
    return json_is_integer(max) ? (int) json_integer_value(max) : 0;
}

static void check_states(ff_run_t *r, const char *reference, problems_t *p)
{
    const ff_truth_t *t = &r->truth;
    if (!t->summary || t->summary_count != FF_ORDERS || t->n_orders != FF_ORDERS)
        problem(p, "the simulator placed %zu orders (summary: %s, %ld), not %d", t->n_orders,
                t->summary ? "written" : "missing", t->summary_count, FF_ORDERS);
    if (t->unreadable != 0)
        problem(p, "the simulator read %ld commands without the contract's headers", t->unreadable);
    PGresult *states = rows(r, states_sql, 0, NULL);
    if (PQntuples(states) != FF_ORDERS)
        problem(p, "%d instances, not one per order (%d)", PQntuples(states), FF_ORDERS);
    for (size_t i = 0; i < t->n_orders; i++) {
        const ff_order_t *o = &t->orders[i];
        const char *want = o->terminal[0] != '\0' ? o->terminal : o->paged_at;
        const char *state = state_of(states, o->key);
        if (strcmp(state, want) != 0)
            problem(p, "%s (%s%s%s) ended in '%s'; the ground truth says %s", o->key, o->fault,
                    o->at[0] ? " at " : "", o->at, state, want);
    }
    PQclear(states);
    char *got = ff_states(r);
    if (reference != NULL && (got == NULL || strcmp(got, reference) != 0))
        problem(p, "final states\n  %s\nnot the reference run's\n  %s", got ? got : "(none)",
                reference);
    free(got);
}

/* Commands: one id per attempt on both sides, each delivered row read by
 * the service and each command read a row; none past retry.max. */
static void check_commands(ff_run_t *r, json_t *def, problems_t *p)
{
    const ff_truth_t *t = &r->truth;
    PGresult *cmds = rows(r,
                          "SELECT key, state, step, attempt, ce_id, sent_at IS NOT NULL, "
                          "cancelled_at IS NOT NULL FROM steward.commands ORDER BY id",
                          0, NULL);
    int n = PQntuples(cmds);
    for (int i = 0; i < n; i++) {
        const char *key = PQgetvalue(cmds, i, 0), *state = PQgetvalue(cmds, i, 1),
                   *ce_id = PQgetvalue(cmds, i, 4);
        long step = atol(PQgetvalue(cmds, i, 2)), attempt = atol(PQgetvalue(cmds, i, 3));
        bool sent = PQgetvalue(cmds, i, 5)[0] == 't', cancelled = PQgetvalue(cmds, i, 6)[0] == 't';
        int max = retry_max(def, state);
        if (strcmp(key, r->retried_key) == 0 && strcmp(state, r->retried_state) == 0)
            max++; /* the operator's re-send */
        if (attempt > max)
            problem(p, "%s: %s queued as attempt %ld, past retry.max %d", key, state, attempt, max);
        if (sent == cancelled)
            problem(p, "%s: %s attempt %ld %s", key, state, attempt,
                    sent ? "both sent and cancelled" : "neither sent nor cancelled");
        if (sent && !read_by_service(r, ce_id))
            problem(p, "%s: %s attempt %ld marked sent, never read by the service", key, state,
                    attempt);
        for (int j = 0; j < i; j++)
            if (strcmp(PQgetvalue(cmds, j, 0), key) == 0 && atol(PQgetvalue(cmds, j, 2)) == step &&
                atol(PQgetvalue(cmds, j, 3)) == attempt)
                problem(p, "%s: step %ld attempt %ld queued twice (%.16s..., %.16s...)", key, step,
                        attempt, PQgetvalue(cmds, j, 4), ce_id);
    }
    for (size_t i = 0; i < t->n_commands; i++) {
        const ff_command_t *c = &t->commands[i];
        int row = -1;
        for (int j = 0; j < n && row < 0; j++)
            if (strcmp(PQgetvalue(cmds, j, 4), c->ce_id) == 0)
                row = j;
        if (row < 0)
            problem(p, "%s: %s attempt %ld read under %.16s..., which no outbox row holds", c->key,
                    c->state, c->attempt, c->ce_id);
        for (size_t j = 0; j < i; j++) {
            const ff_command_t *d = &t->commands[j];
            if (strcmp(c->key, d->key) == 0 && c->step == d->step && c->attempt == d->attempt &&
                strcmp(c->ce_id, d->ce_id) != 0)
                problem(p,
                        "%s: step %ld attempt %ld on the topic under two ids: %.16s... and "
                        "%.16s...",
                        c->key, c->step, c->attempt, d->ce_id, c->ce_id);
        }
    }
    PQclear(cmds);
}

/* What steward judged: on_timeout only where a silent service left it
 * nothing else, every stale reply stale, hand-offs for the zombies only
 * (exactly one each when `exact`), no event judged twice. */
static void check_history(ff_run_t *r, json_t *def, bool exact, problems_t *p)
{
    const ff_truth_t *t = &r->truth;
    PGresult *timeouts =
        rows(r, "SELECT key, count(*) FROM steward.history WHERE outcome = 'timeout' GROUP BY key",
             0, NULL);
    PGresult *handoffs = rows(
        r, "SELECT key, count(*) FROM steward.history WHERE outcome = 'handed_off' GROUP BY key", 0,
        NULL);
    for (size_t i = 0; i < t->n_orders; i++) {
        const ff_order_t *o = &t->orders[i];
        bool silent = strcmp(o->fault, "silent") == 0;
        bool compensated = silent && json_object_get(def_state(def, o->at), "on_timeout") != NULL;
        const char *n = state_of(timeouts, o->key);
        if (compensated && strcmp(n, "1") != 0)
            problem(p, "%s: silent at %s, on_timeout taken %s times, not once", o->key, o->at,
                    n[0] ? n : "0");
        if (!compensated && n[0] != '\0')
            problem(p, "%s: on_timeout taken %s times, but its service answered (%s%s%s)", o->key,
                    n, o->fault, o->at[0] ? " at " : "", o->at);
        /* After a crash the zombie's step may be re-sent on its deadline
         * instead: the dispatcher's dead claim held the command back past
         * it, and the deadline came before the lease's end. */
        bool zombie = strcmp(o->fault, "zombie") == 0 || strcmp(o->fault, "late_zombie") == 0;
        n = state_of(handoffs, o->key);
        if (zombie ? strcmp(n, "1") != 0 && (exact || n[0] != '\0') : n[0] != '\0')
            problem(p, "%s (%s): handed off %s times, not %s", o->key, o->fault, n[0] ? n : "0",
                    !zombie ? "never"
                    : exact ? "once"
                            : "once at most");
        if (stale_sent(r, o->key) < o->stale_replies)
            problem(p, "%s (%s): %d stale replies sent, the fault plans %d: it never fired", o->key,
                    o->fault, stale_sent(r, o->key), o->stale_replies);
    }
    PQclear(timeouts);
    PQclear(handoffs);

    PGresult *stale = rows(r, stale_sql, 0, NULL);
    for (size_t i = 0; i < t->n_stale; i++)
        if (!recorded_stale(stale, t->stale[i].key, t->stale[i].event_id)) {
            const char *params[2] = {t->stale[i].key, t->stale[i].event_id};
            char *how = tl_db_scalar(r->w.conn,
                                     "SELECT string_agg(outcome || ': ' || coalesce(detail, ''), "
                                     "'; ') FROM steward.history WHERE key = $1 AND event_id = $2",
                                     2, params);
            problem(p, "%s: the reply %s is not recorded stale (%s)", t->stale[i].key,
                    t->stale[i].event_id, how != NULL ? how : "no row");
            free(how);
        }
    PQclear(stale);

    /* One judgement per event: a parked event's first row, the `released`
     * row beside the answer that ends a lease, and copies recognised as
     * such are not judgements. */
    char *twice = tw_scalar(&r->w,
                            "SELECT string_agg(key || ' ' || event_id || ' x' || n, '; ') FROM "
                            "(SELECT key, event_id, count(*) AS n FROM steward.history "
                            "WHERE \"offset\" >= 0 AND outcome NOT IN ('parked', 'released', "
                            "'duplicate') GROUP BY process, key, event_id HAVING count(*) > 1) d",
                            NULL);
    if (twice != NULL)
        problem(p, "events judged twice: %s", twice);
    free(twice);
}

/* Pages: each order the ground truth pages paged once at its step, none
 * for another; the alerts behind them likewise. */
static void check_pages(ff_run_t *r, problems_t *p)
{
    const ff_truth_t *t = &r->truth;
    size_t n;
    page_t *pg = pages(r, &n);
    bool copies_allowed =
        r->crashed_at != NULL && strcmp(r->crashed_at, "notifier.before_record") == 0;
    for (size_t i = 0; i < n; i++) {
        const ff_order_t *o = order_of(r, pg[i].key);
        if (strcmp(pg[i].event, "trigger") != 0)
            problem(p, "a %s page for %s (%s)", pg[i].event, pg[i].key, pg[i].kind);
        else if (o == NULL || o->paged_at[0] == '\0')
            problem(p, "a %s page at %s for %s, which the ground truth does not page (%s)",
                    pg[i].kind, pg[i].state, pg[i].key, o != NULL ? o->fault : "not an order");
        else if (strcmp(pg[i].kind, "deadline") != 0 || strcmp(pg[i].state, o->paged_at) != 0)
            problem(p, "%s paged for %s at %s; the ground truth pages its deadline at %s",
                    pg[i].key, pg[i].kind, pg[i].state, o->paged_at);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(pg[j].key, pg[i].key) != 0)
                continue;
            if (strcmp(pg[j].dedup, pg[i].dedup) != 0)
                problem(p, "%s paged twice: %s and %s", pg[i].key, pg[j].dedup, pg[i].dedup);
            else if (strcmp(pg[j].event, pg[i].event) == 0 && !copies_allowed)
                problem(p, "%s: the %s of %s delivered twice", pg[i].key, pg[i].event, pg[i].dedup);
            break;
        }
    }
    for (size_t i = 0; i < t->n_orders; i++)
        if (t->orders[i].paged_at[0] != '\0' &&
            !paged(pg, n, t->orders[i].key, t->orders[i].paged_at))
            problem(p, "%s (%s at %s): no page reached the receiver", t->orders[i].key,
                    t->orders[i].fault, t->orders[i].at);
    free(pg);

    PGresult *alerts = rows(r, "SELECT key, kind, state FROM steward.alerts ORDER BY id", 0, NULL);
    for (int i = 0; i < PQntuples(alerts); i++) {
        const char *key = PQgetvalue(alerts, i, 0);
        const ff_order_t *o = order_of(r, key);
        if (o == NULL || o->paged_at[0] == '\0' ||
            strcmp(PQgetvalue(alerts, i, 1), "deadline") != 0 ||
            strcmp(PQgetvalue(alerts, i, 2), o->paged_at) != 0)
            problem(p, "alert %s at %s for %s (%s)", PQgetvalue(alerts, i, 1),
                    PQgetvalue(alerts, i, 2), key, o != NULL ? o->fault : "not an order");
        for (int j = 0; j < i; j++)
            if (strcmp(PQgetvalue(alerts, j, 0), key) == 0)
                problem(p, "%s has a second alert (%s at %s)", key, PQgetvalue(alerts, i, 1),
                        PQgetvalue(alerts, i, 2));
    }
    PQclear(alerts);
}

void ff_check(ff_run_t *r, const char *reference)
{
    char *path = tl_source_path(DEFINITION);
    json_error_t jerr;
    json_t *def = json_load_file(path, 0, &jerr);
    ck_assert_msg(def != NULL, "%s: %s", path, jerr.text);
    free(path);
    problems_t p = {0};
    p.f = open_memstream(&p.text, &p.len);
    ck_assert_ptr_nonnull(p.f);
    check_states(r, reference, &p);
    check_commands(r, def, &p);
    check_history(r, def, reference == NULL, &p);
    check_pages(r, &p);
    json_decref(def);
    ck_assert_int_eq(fclose(p.f), 0);
    if (p.n > 0) {
        ff_print_logs(r);
        fprintf(stderr, "== %d invariants broken:\n%s", p.n, p.text);
        ck_abort_msg("%d invariants broken (listed above): %.3000s", p.n, p.text);
    }
    free(p.text);
}
