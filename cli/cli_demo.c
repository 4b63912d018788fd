/*
 * cli_demo - `steward demo`: the whole story on one machine, in about two
 * minutes.
 *
 * It starts an embedded Kafka (librdkafka's mock cluster, in this
 * process), brings the database's schema up to date, runs `steward run` in
 * shadow mode against the demo definition (the order-fulfilment example
 * with deadlines in seconds), runs the traffic simulator (steward-sim)
 * with a stall rate, prints each alert as it fires, then prints the report,
 * one stalled order's history, and a check of the alerts against the
 * simulator's ground truth: every stalled order alerted at the state it
 * stalled in, and no alert for any other. The exit status says whether the
 * check held.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/cli_demo.h"
#include "common/db.h"
#include "common/err.h"
#include "common/sha256.h"
#include "schema/migrate.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char demo_usage[] =
    "usage: steward demo [--active] [--orders N] [--rate R] [--stall-rate F]\n"
    "                    [--database CONNINFO] [--serve]\n"
    "\n"
    "Runs the order-fulfilment process end to end on an embedded Kafka (librdkafka's\n"
    "mock cluster): simulated traffic from six services, steward in shadow mode,\n"
    "alerts as they fire, the report, and a check of every alert against the\n"
    "simulator's ground truth. Exits 0 when every stalled order was alerted at the\n"
    "right state and nothing else was.\n"
    "\n"
    "With --active, steward runs the active version of the definition: it sends each\n"
    "step's command, and the simulator's services answer them instead of\n"
    "choreographing, with faults (a first command dropped, a service that never\n"
    "answers, a picker whose lease runs out and who answers late). Exits 0 when\n"
    "every order ended where its faults lead or paged the step that never answered,\n"
    "no command went out twice under different ids, and every late reply was\n"
    "recorded as stale.\n"
    "\n"
    "  --active              active mode, as above\n"
    "  --orders N            orders to simulate (default 400)\n"
    "  --rate R              orders per second (default 8)\n"
    "  --stall-rate F        share of orders that stall (default 0.02; shadow mode)\n"
    "  --database CONNINFO   an empty database ($STEWARD_DATABASE_URL)\n"
    "  --brokers LIST        a real Kafka cluster instead of the embedded one\n"
    "  --seed S              the simulator's seed, to replay a run\n"
    "  --definition FILE     the demo definition (default definitions/demo/...)\n"
    "  --keep                leave steward's log and the ground truth in the work folder\n"
    "                        (a run whose check fails leaves them too)\n"
    "  --serve               after the check, keep steward running and print the web\n"
    "                        console's URL (on 127.0.0.1); serve it until interrupted\n";

/* The command topics of the active demo definition (created up front on
 * the embedded cluster, which creates no topic on demand). */
static const char *const demo_command_topics[] = {"payment-commands", "inventory-commands",
                                                  "shipping-commands", "notification-commands"};

static const char *const demo_topics[] = {"orders",   "payments", "inventory",
                                          "shipping", "delivery", "notifications"};

static volatile sig_atomic_t demo_interrupted;

static void on_signal(int sig)
{
    (void) sig;
    demo_interrupted = 1;
}

/* The folder of this binary: steward-sim is built beside it. */
static void binary_dir(char *buf, size_t size)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(buf, size, "%s", n > 0 ? dirname(self) : ".");
}

static pid_t spawn(const char *const *argv, const char *log_path)
{
    posix_spawn_file_actions_t actions;
    pid_t pid;
    posix_spawn_file_actions_init(&actions);
    if (log_path != NULL) {
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path,
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    }
    int rc = posix_spawn(&pid, argv[0], &actions, NULL, (char *const *) argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    return rc == 0 ? pid : -1;
}

static int wait_exit(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void stop_steward(pid_t steward, const char *log)
{
    kill(steward, SIGTERM);
    int status = wait_exit(steward);
    if (status != 0)
        fprintf(stderr, "steward demo: steward run exited %d; its log: %s\n", status, log);
}

/* The address steward's HTTP server bound ("http listening" in its log):
 * it was asked for port 0, so the kernel picked one. */
static bool listen_address(const char *log, char *buf, size_t size)
{
    FILE *f = fopen(log, "r");
    char line[4096];
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL) {
        json_t *doc = json_loads(line, 0, NULL);
        const char *msg = json_string_value(json_object_get(doc, "msg"));
        const char *address = json_string_value(json_object_get(doc, "address"));
        if (msg != NULL && strcmp(msg, "http listening") == 0 && address != NULL) {
            snprintf(buf, size, "%s", address);
            found = true;
        }
        json_decref(doc);
    }
    if (f != NULL)
        fclose(f);
    return found;
}

/* --serve: prints the console's URL and keeps steward running until the
 * demo is interrupted (SIGINT, SIGTERM) or steward exits. */
static void serve_console(pid_t steward, const char *log)
{
    char address[256];
    if (demo_interrupted || !listen_address(log, address, sizeof address)) {
        if (!demo_interrupted)
            fprintf(stderr, "steward demo: steward's HTTP server did not start; its log: %s\n",
                    log);
        stop_steward(steward, log);
        return;
    }
    printf("\n== the console: http://%s/  (serving until Ctrl-C)\n", address);
    fflush(stdout);
    while (!demo_interrupted) {
        int status;
        if (waitpid(steward, &status, WNOHANG) == steward) {
            fprintf(stderr, "steward demo: steward run exited; its log: %s\n", log);
            return;
        }
        usleep(200 * 1000);
    }
    stop_steward(steward, log);
}

/* db_query() for the demo's checks: a failure is printed, not returned. */
static PGresult *demo_query(PGconn *conn, const char *sql, int n, const char *const *params)
{
    char errstr[512];
    err_class_t cls;
    PGresult *res =
        db_query(conn, "reading the results", sql, n, params, &cls, errstr, sizeof errstr);
    if (res == NULL)
        fprintf(stderr, "steward demo: %s\n", errstr);
    return res;
}

static long long scalar(PGconn *conn, const char *sql, int n, const char *const *params)
{
    PGresult *res = demo_query(conn, sql, n, params);
    long long v = res != NULL && PQntuples(res) > 0 ? atoll(PQgetvalue(res, 0, 0)) : -1;
    PQclear(res);
    return v;
}

/* Prints the alerts opened since the last call, by id. */
static void print_new_alerts(PGconn *conn, long long *last_id)
{
    char id[32];
    snprintf(id, sizeof id, "%lld", *last_id);
    const char *params[1] = {id};
    PGresult *res = demo_query(conn,
                               "SELECT id, kind, summary FROM steward.alerts WHERE id > $1::bigint "
                               "ORDER BY id",
                               1, params);
    for (int row = 0; res != NULL && row < PQntuples(res); row++) {
        printf("  ALERT  %s\n", PQgetvalue(res, row, 2));
        *last_id = atoll(PQgetvalue(res, row, 0));
    }
    fflush(stdout);
    PQclear(res);
}

/* Compares the deadline alerts with the ground truth; prints the verdict. */
static bool check_ground_truth(PGconn *conn, const char *path, char *stalled_key, size_t key_size)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    size_t stalled = 0, alerted = 0, wrong_state = 0, missed = 0;
    if (f == NULL) {
        fprintf(stderr, "steward demo: cannot read the ground truth %s\n", path);
        return false;
    }
    stalled_key[0] = '\0';
    while (fgets(line, sizeof line, f) != NULL) {
        json_t *doc = json_loads(line, 0, NULL);
        const char *key = json_string_value(json_object_get(doc, "order_id"));
        const char *state = json_string_value(json_object_get(doc, "state"));
        if (key != NULL && state != NULL) {
            stalled++;
            const char *params[1] = {key};
            PGresult *res = demo_query(conn,
                                       "SELECT state FROM steward.alerts WHERE kind = 'deadline' "
                                       "AND key = $1",
                                       1, params);
            bool right = false;
            for (int row = 0; res != NULL && row < PQntuples(res); row++)
                right = right || strcmp(PQgetvalue(res, row, 0), state) == 0;
            if (res != NULL && PQntuples(res) == 0) {
                missed++;
                printf("  missed: %s stalled in %s, and no alert named it\n", key, state);
            } else if (!right) {
                wrong_state++;
                printf("  wrong step: %s stalled in %s, but was alerted elsewhere\n", key, state);
            } else {
                alerted++;
                if (stalled_key[0] == '\0')
                    snprintf(stalled_key, key_size, "%s", key);
            }
            PQclear(res);
        }
        json_decref(doc);
    }
    fclose(f);
    /* Every deadline alert must belong to a stalled order. */
    long long total = scalar(conn,
                             "SELECT count(DISTINCT key) FROM steward.alerts "
                             "WHERE kind = 'deadline'",
                             0, NULL);
    long long false_alerts = total - (long long) (alerted + wrong_state);
    printf("\nground truth: %zu orders stalled; %zu alerted at the right step, %zu at another, "
           "%zu missed; %lld alerts for orders that did not stall\n",
           stalled, alerted, wrong_state, missed, false_alerts < 0 ? 0 : false_alerts);
    return wrong_state == 0 && missed == 0 && false_alerts == 0;
}

/* ---- the active demo's closing check (pure; see cli_demo.h) -------------- */

static void problem(demo_active_verdict_t *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void problem(demo_active_verdict_t *v, const char *fmt, ...)
{
    if (v->n_problems == DEMO_MAX_PROBLEMS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->problems[v->n_problems++], sizeof v->problems[0], fmt, ap);
    va_end(ap);
}

static const char *pair_find(const demo_pair_t *pairs, size_t n, const char *key, const char *value)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(pairs[i].key, key) == 0 && (value == NULL || strcmp(pairs[i].value, value) == 0))
            return pairs[i].value;
    return NULL;
}

static bool same_step(const demo_command_t *a, const demo_command_t *b)
{
    return a->step == b->step && a->attempt == b->attempt && strcmp(a->key, b->key) == 0;
}

/* The contract's ce_id: SHA-256 of process, key, step and attempt joined
 * by 0x1f, in lowercase hex. */
static void derive_ce_id(const char *process, const demo_command_t *c, char hex[SHA256_HEX_SIZE])
{
    char buf[1024];
    int n =
        snprintf(buf, sizeof buf, "%s\x1f%s\x1f%ld\x1f%ld", process, c->key, c->step, c->attempt);
    sha256_hex(buf, n < 0 ? 0 : (size_t) n < sizeof buf ? (size_t) n : sizeof buf - 1, hex);
}

bool demo_active_check(const demo_active_facts_t *f, demo_active_verdict_t *v)
{
    memset(v, 0, sizeof *v);
    v->orders = f->n_orders;
    for (size_t i = 0; i < f->n_orders; i++) {
        const demo_order_t *o = &f->orders[i];
        const char *state = pair_find(f->instances, f->n_instances, o->key, NULL);
        if (o->terminal != NULL) {
            if (state != NULL && strcmp(state, o->terminal) == 0) {
                v->ended_right++;
            } else {
                v->wrong_end++;
                problem(v, "%s should have ended %s, but is %s%s", o->key, o->terminal,
                        state ? "in " : "", state ? state : "unknown to steward");
            }
            const char *paged = pair_find(f->alerts, f->n_alerts, o->key, NULL);
            if (paged != NULL) {
                v->unexpected_pages++;
                problem(v,
                        "%s was paged at %s, but its retries or on_timeout should have "
                        "carried it to %s",
                        o->key, paged, o->terminal);
            }
        } else if (o->paged_at != NULL) {
            if (pair_find(f->alerts, f->n_alerts, o->key, o->paged_at) != NULL) {
                v->paged_right++;
            } else {
                v->missed_pages++;
                problem(v, "%s should have paged the owner of %s, but %s", o->key, o->paged_at,
                        pair_find(f->alerts, f->n_alerts, o->key, NULL)
                            ? "was paged at another step"
                            : "no alert names it");
            }
        }
    }

    /* Commands: both sides together; each (order, step, attempt) under one
     * id, the derived one. */
    const demo_command_t *lists[2] = {f->received, f->outbox};
    size_t sizes[2] = {f->n_received, f->n_outbox};
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < sizes[l]; i++) {
            const demo_command_t *c = &lists[l][i];
            bool first = true, conflict = false, copy = false;
            /* Only the first occurrence of a step, over both lists, counts it. */
            for (int l2 = 0; l2 <= l && first; l2++)
                for (size_t j = 0; j < (l2 == l ? i : sizes[l2]) && first; j++)
                    if (same_step(&lists[l2][j], c)) {
                        first = false;
                        copy = l2 == l && l == 0 && strcmp(lists[l2][j].ce_id, c->ce_id) == 0;
                    }
            if (copy)
                v->copies++;
            if (!first)
                continue;
            v->commands++;
            for (int l2 = 0; l2 < 2 && !conflict; l2++)
                for (size_t j = 0; j < sizes[l2] && !conflict; j++)
                    conflict =
                        same_step(&lists[l2][j], c) && strcmp(lists[l2][j].ce_id, c->ce_id) != 0;
            if (conflict) {
                v->conflicting_ids++;
                problem(v, "%s step %ld attempt %ld went out under two ids", c->key, c->step,
                        c->attempt);
            }
            char want[SHA256_HEX_SIZE];
            derive_ce_id(f->process, c, want);
            if (strcmp(want, c->ce_id) != 0) {
                v->foreign_ids++;
                problem(v, "%s step %ld attempt %ld has ce_id %.16s..., not the derived %.16s...",
                        c->key, c->step, c->attempt, c->ce_id, want);
            }
        }
    }

    v->stale_sent = f->n_stale_sent;
    v->stale_recorded = f->n_stale_recorded;
    for (size_t i = 0; i < f->n_stale_sent; i++) {
        const demo_pair_t *s = &f->stale_sent[i];
        if (pair_find(f->stale_recorded, f->n_stale_recorded, s->key, s->value) == NULL) {
            v->stale_missing++;
            problem(v, "%s: the late reply %s carried an old token but is not recorded as stale",
                    s->key, s->value);
        }
    }
    return v->orders > 0 && v->commands > 0 && v->wrong_end == 0 && v->missed_pages == 0 &&
           v->unexpected_pages == 0 && v->conflicting_ids == 0 && v->foreign_ids == 0 &&
           v->stale_missing == 0;
}

/* ---- the active demo: gathering the facts ------------------------------- */

/* Growable arrays of the facts; strings borrowed from `docs` (the ground
 * truth's lines) and from the PGresults, all freed by facts_clear(). */
typedef struct facts_store {
    json_t *docs;
    PGresult *res[5];
    demo_order_t *orders;
    demo_command_t *received, *outbox;
    demo_pair_t *stale_sent, *stale_recorded, *instances, *alerts;
    size_t n_orders, n_received, n_outbox, n_stale_sent, n_stale_recorded, n_instances, n_alerts;
    const char *zombie_key; /* an order with the zombie fault, for `steward inspect` */
    char faults[160];       /* the summary's fault counts, as text */
    bool summary;           /* the simulator finished its ground truth */
} facts_store_t;

static void facts_clear(facts_store_t *s)
{
    json_decref(s->docs);
    for (int i = 0; i < 5; i++)
        PQclear(s->res[i]);
    free(s->orders);
    free(s->received);
    free(s->outbox);
    free(s->stale_sent);
    free(s->stale_recorded);
    free(s->instances);
    free(s->alerts);
    memset(s, 0, sizeof *s);
}

/* Appends one element to a growable array; false when memory ran out. */
static bool grow(void **arr, size_t *n, size_t size, const void *elem)
{
    void *a = realloc(*arr, (*n + 1) * size);
    if (a == NULL)
        return false;
    memcpy((char *) a + *n * size, elem, size);
    *arr = a;
    (*n)++;
    return true;
}

static const char *str_or_null(const json_t *obj, const char *name)
{
    return json_string_value(json_object_get(obj, name));
}

/* Reads the simulator's ground truth so far. */
static bool read_active_truth(const char *path, facts_store_t *s)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    if (f == NULL)
        return false;
    s->docs = json_array();
    while (fgets(line, sizeof line, f) != NULL) {
        json_t *doc = json_loads(line, 0, NULL);
        if (doc == NULL)
            continue; /* a line still being written */
        json_array_append_new(s->docs, doc);
        json_t *cmd = json_object_get(doc, "command"), *stale = json_object_get(doc, "stale_reply");
        json_t *summary = json_object_get(doc, "summary");
        if (str_or_null(doc, "order_id") != NULL) {
            demo_order_t o = {str_or_null(doc, "order_id"), str_or_null(doc, "terminal"),
                              str_or_null(doc, "paged_at")};
            grow((void **) &s->orders, &s->n_orders, sizeof o, &o);
            const char *fault = str_or_null(doc, "fault");
            if (fault != NULL && strcmp(fault, "zombie") == 0 && s->zombie_key == NULL)
                s->zombie_key = o.key;
        } else if (cmd != NULL && str_or_null(cmd, "ce_id") != NULL) {
            demo_command_t c = {str_or_null(cmd, "order_id"),
                                (long) json_integer_value(json_object_get(cmd, "step")),
                                (long) json_integer_value(json_object_get(cmd, "attempt")),
                                str_or_null(cmd, "ce_id")};
            if (c.key != NULL)
                grow((void **) &s->received, &s->n_received, sizeof c, &c);
        } else if (stale != NULL && str_or_null(stale, "event_id") != NULL) {
            demo_pair_t p = {str_or_null(stale, "order_id"), str_or_null(stale, "event_id")};
            if (p.key != NULL)
                grow((void **) &s->stale_sent, &s->n_stale_sent, sizeof p, &p);
        } else if (summary != NULL) {
            json_t *faults = json_object_get(summary, "faults");
            snprintf(s->faults, sizeof s->faults,
                     "%lld dropped first commands, %lld silent services, %lld zombie pickers",
                     (long long) json_integer_value(json_object_get(faults, "drop_first")),
                     (long long) json_integer_value(json_object_get(faults, "silent")),
                     (long long) json_integer_value(json_object_get(faults, "zombie")));
            s->summary = true;
        }
    }
    fclose(f);
    return true;
}

/* (key, value) pairs from a two-column result. */
static void pairs_from(PGresult *res, demo_pair_t **out, size_t *n)
{
    for (int row = 0; res != NULL && row < PQntuples(res); row++) {
        demo_pair_t p = {PQgetvalue(res, row, 0), PQgetvalue(res, row, 1)};
        grow((void **) out, n, sizeof p, &p);
    }
}

/* Reads what steward recorded; false when a query failed (printed). */
static bool read_steward_facts(PGconn *conn, const char *process, facts_store_t *s)
{
    const char *params[1] = {process};
    s->res[0] =
        demo_query(conn, "SELECT key, state FROM steward.instances WHERE process = $1", 1, params);
    s->res[1] = demo_query(conn,
                           "SELECT key, coalesce(state, '') FROM steward.alerts "
                           "WHERE process = $1 AND key IS NOT NULL ORDER BY id",
                           1, params);
    s->res[2] = demo_query(conn,
                           "SELECT key, event_id FROM steward.history "
                           "WHERE process = $1 AND outcome = 'stale'",
                           1, params);
    s->res[3] = demo_query(conn,
                           "SELECT key, step, attempt, ce_id FROM steward.commands "
                           "WHERE process = $1 AND sent_at IS NOT NULL",
                           1, params);
    pairs_from(s->res[0], &s->instances, &s->n_instances);
    pairs_from(s->res[1], &s->alerts, &s->n_alerts);
    pairs_from(s->res[2], &s->stale_recorded, &s->n_stale_recorded);
    for (int row = 0; s->res[3] != NULL && row < PQntuples(s->res[3]); row++) {
        demo_command_t c = {PQgetvalue(s->res[3], row, 0), atol(PQgetvalue(s->res[3], row, 1)),
                            atol(PQgetvalue(s->res[3], row, 2)), PQgetvalue(s->res[3], row, 3)};
        grow((void **) &s->outbox, &s->n_outbox, sizeof c, &c);
    }
    return s->res[0] != NULL && s->res[1] != NULL && s->res[2] != NULL && s->res[3] != NULL;
}

/* Gathers the facts and runs the check into *v (v->orders: how many orders
 * the ground truth holds so far); true when it holds. */
static bool active_check_now(PGconn *conn, const char *truth, const char *process, facts_store_t *s,
                             demo_active_verdict_t *v)
{
    facts_clear(s);
    /* A fact that cannot be read is a failed check, but what was read is
     * still compared, so that the verdict says what is known. */
    bool read = read_active_truth(truth, s);
    read = read_steward_facts(conn, process, s) && read;
    demo_active_facts_t f = {process,         s->orders,         s->n_orders,         s->received,
                             s->n_received,   s->outbox,         s->n_outbox,         s->stale_sent,
                             s->n_stale_sent, s->stale_recorded, s->n_stale_recorded, s->instances,
                             s->n_instances,  s->alerts,         s->n_alerts};
    return demo_active_check(&f, v) && read;
}

static void print_active_verdict(const facts_store_t *s, const demo_active_verdict_t *v)
{
    for (size_t i = 0; i < v->n_problems; i++)
        printf("  %s\n", v->problems[i]);
    printf("\nground truth (active): %zu orders (%s); %zu ended where planned, %zu paged at the "
           "step that never answered, %zu ended elsewhere, %zu pages missed, %zu paged "
           "needlessly\n",
           v->orders, s->faults[0] ? s->faults : "faults unknown", v->ended_right, v->paged_right,
           v->wrong_end, v->missed_pages, v->unexpected_pages);
    printf("commands: %zu sent (order, step, attempt), %zu copies under the same id, %zu under "
           "two ids, %zu not under the derived id; stale replies: %zu sent, %zu not recorded "
           "as stale\n",
           v->commands, v->copies, v->conflicting_ids, v->foreign_ids, v->stale_sent,
           v->stale_missing);
}

/* Waits until steward has committed every message the cluster holds. */
static bool wait_consumed(PGconn *conn, rd_kafka_t *rk, const char *prefix, const char *group,
                          int partitions, int timeout_s)
{
    long long total = 0;
    for (size_t t = 0; t < sizeof demo_topics / sizeof demo_topics[0]; t++) {
        char topic[256];
        snprintf(topic, sizeof topic, "%s%s", prefix, demo_topics[t]);
        for (int p = 0; p < partitions; p++) {
            int64_t lo, hi;
            if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 5000) ==
                RD_KAFKA_RESP_ERR_NO_ERROR)
                total += hi;
        }
    }
    const char *params[1] = {group};
    for (int i = 0; i < timeout_s * 10 && !demo_interrupted; i++) {
        if (scalar(conn,
                   "SELECT coalesce(sum(next_offset), 0) FROM steward.offsets "
                   "WHERE consumer_group = $1 AND next_offset >= 0",
                   1, params) >= total)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

int cli_demo(int argc, char **argv)
{
    static const struct option options[] = {
        {"orders", required_argument, NULL, 'o'},
        {"rate", required_argument, NULL, 'r'},
        {"stall-rate", required_argument, NULL, 's'},
        {"database", required_argument, NULL, 'd'},
        {"brokers", required_argument, NULL, 'b'},
        {"seed", required_argument, NULL, 'S'},
        {"definition", required_argument, NULL, 'f'},
        {"keep", no_argument, NULL, 'k'},
        {"active", no_argument, NULL, 'A'},
        {"serve", no_argument, NULL, 'W'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *orders = "400", *rate = "8", *stall_rate = "0.02", *database = NULL;
    const char *definition = NULL, *brokers = NULL, *seed = NULL;
    int keep = 0, active = 0, serve = 0, opt, rc = EXIT_OK;
    char errstr[1024];

    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        switch (opt) {
        case 'o':
            orders = optarg;
            break;
        case 'r':
            rate = optarg;
            break;
        case 's':
            stall_rate = optarg;
            break;
        case 'd':
            database = optarg;
            break;
        case 'f':
            definition = optarg;
            break;
        case 'b':
            brokers = optarg;
            break;
        case 'S':
            seed = optarg;
            break;
        case 'k':
            keep = 1;
            break;
        case 'A':
            active = 1;
            break;
        case 'W':
            serve = 1;
            break;
        default:
            return cli_help_or_usage("steward demo", opt, argv, demo_usage);
        }
    }
    if (atol(orders) <= 0 || atof(rate) <= 0 || atof(stall_rate) < 0 || atof(stall_rate) > 1 ||
        optind < argc) {
        fprintf(stderr,
                "steward demo: --orders and --rate must be positive, --stall-rate 0 to 1\n");
        return EXIT_USAGE;
    }

    char bindir[PATH_MAX], self[PATH_MAX + 16], sim[PATH_MAX + 16], def_path[PATH_MAX];
    binary_dir(bindir, sizeof bindir);
    snprintf(self, sizeof self, "%s/steward", bindir);
    snprintf(sim, sizeof sim, "%s/steward-sim", bindir);
    if (definition == NULL) {
        snprintf(def_path, sizeof def_path, "%s/definitions/demo/%s", STEWARD_SOURCE_DIR,
                 active ? "order_fulfilment_active.json" : "order_fulfilment.json");
        definition = def_path;
    }
    if (access(sim, X_OK) != 0) {
        fprintf(stderr,
                "steward demo: the simulator %s is missing: build the steward-sim "
                "target\n",
                sim);
        return EXIT_RUNTIME;
    }

    /* The database: migrated, and empty of instances, so the check speaks of this run. */
    const char *url = cli_database_url(database);
    PGconn *conn = db_connect(url, "steward demo", errstr, sizeof errstr);
    migrate_result_t migrated;
    if (conn == NULL || migrate_apply(conn, &migrated, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward demo: %s\n", errstr);
        if (conn != NULL)
            PQfinish(conn);
        return EXIT_RUNTIME;
    }
    if (scalar(conn, "SELECT count(*) FROM steward.instances", 0, NULL) != 0) {
        fprintf(stderr, "steward demo: the database already holds instances; the demo needs an "
                        "empty one (scripts/demo makes a fresh steward_demo)\n");
        PQfinish(conn);
        return EXIT_USAGE;
    }

    /* The embedded Kafka (a mock cluster of one broker, six topics), or a
     * real cluster's client when --brokers names one; either answers the
     * watermark queries below. */
    const int partitions = 4;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (brokers != NULL)
        rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr);
    else
        rd_kafka_conf_set(conf, "test.mock.num.brokers", "1", errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    rd_kafka_mock_cluster_t *mc =
        rk != NULL && brokers == NULL ? rd_kafka_handle_mock_cluster(rk) : NULL;
    if (rk == NULL || (brokers == NULL && mc == NULL)) {
        fprintf(stderr, "steward demo: cannot start the embedded Kafka: %s\n", errstr);
        if (rk != NULL)
            rd_kafka_destroy(rk);
        PQfinish(conn);
        return EXIT_RUNTIME;
    }
    const char *bootstraps = brokers != NULL ? brokers : rd_kafka_mock_cluster_bootstraps(mc);
    /* Topics of this run alone: a real cluster may hold an earlier demo's. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "demo%ld.", (long) time(NULL));
    for (size_t t = 0; mc != NULL && t < sizeof demo_topics / sizeof demo_topics[0]; t++) {
        char topic[256];
        snprintf(topic, sizeof topic, "%s%s", prefix, demo_topics[t]);
        rd_kafka_mock_topic_create(mc, topic, partitions, 1);
    }
    for (size_t t = 0;
         active && mc != NULL && t < sizeof demo_command_topics / sizeof demo_command_topics[0];
         t++) {
        char topic[256];
        snprintf(topic, sizeof topic, "%s%s", prefix, demo_command_topics[t]);
        rd_kafka_mock_topic_create(mc, topic, partitions, 1);
    }
    rd_kafka_t *query = rk;

    char work[] = "/tmp/steward-demo-XXXXXX";
    if (mkdtemp(work) == NULL) {
        fprintf(stderr, "steward demo: cannot make a work folder: %s\n", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    char config[PATH_MAX], log[PATH_MAX], truth[PATH_MAX], group[64], run_def[PATH_MAX];
    snprintf(config, sizeof config, "%s/config.json", work);
    snprintf(run_def, sizeof run_def, "%s/order_fulfilment.json", work);
    snprintf(log, sizeof log, "%s/steward.log", work);
    snprintf(truth, sizeof truth, "%s/ground-truth.jsonl", work);
    snprintf(group, sizeof group, "steward-demo-%ld", (long) time(NULL));
    /* The definition with this run's topic names, written by the simulator. */
    char partitions_text[16];
    snprintf(partitions_text, sizeof partitions_text, "%d", partitions);
    const char *write_argv[] = {sim,        "--write-definition",
                                run_def,    "--definition",
                                definition, "--topic-prefix",
                                prefix,     "--deadline-scale",
                                "1",        NULL};
    if (wait_exit(spawn(write_argv, NULL)) != 0) {
        fprintf(stderr, "steward demo: cannot write the demo definition from %s\n", definition);
        unlink(run_def);
        rmdir(work);
        rc = EXIT_USAGE;
        goto out;
    }
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}}", "brokers",
                            bootstraps, "database", url, "definitions", run_def, "group", group,
                            "scheduler", "interval", "250ms", "grace", "250ms", "http", "listen",
                            serve ? "127.0.0.1:0" : "", "routes", "default", "type", "log");
    json_dump_file(cfg, config, JSON_INDENT(2));
    json_decref(cfg);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (mc != NULL)
        printf("== embedded Kafka at %s (librdkafka mock cluster): %zu topics x %d partitions\n",
               bootstraps,
               sizeof demo_topics / sizeof demo_topics[0] +
                   (active ? sizeof demo_command_topics / sizeof demo_command_topics[0] : 0),
               partitions);
    else
        printf("== Kafka at %s, topics %s*\n", bootstraps, prefix);
    printf("== steward run: %s mode, definition %s\n", active ? "active" : "shadow", definition);
    const char *run_argv[] = {self, "run", "--config", config, NULL};
    pid_t steward = spawn(run_argv, log);
    const char *params[1] = {group};
    for (int i = 0; i < 300 && !demo_interrupted; i++) {
        if (scalar(conn, "SELECT count(*) FROM steward.offsets WHERE consumer_group = $1", 1,
                   params) >= (long long) (partitions * 6))
            break;
        usleep(100 * 1000);
    }

    if (active)
        printf("== steward-sim --active: %s orders at %s per second; the six services answer "
               "steward's commands, and every 4th order meets a fault: a dropped first command, "
               "a service that never answers, a picker whose lease runs out\n\n",
               orders, rate);
    else
        printf("== steward-sim: %s orders at %s per second, stall rate %s, with duplicates, "
               "reordering, declines, refunds and a few poison messages\n\n",
               orders, rate, stall_rate);
    fflush(stdout);
    /* Latencies at 1/50,000 of the example's: payments in tens of
     * milliseconds, deliveries in seconds; the simulator caps each at 80% of
     * its deadline, so only the orders it stalls miss one. */
    const char *sim_argv[] = {sim,
                              "--brokers",
                              bootstraps,
                              "--orders",
                              orders,
                              "--rate",
                              rate,
                              "--stall-rate",
                              stall_rate,
                              "--topic-prefix",
                              prefix,
                              "--partitions",
                              partitions_text,
                              "--definition",
                              definition,
                              "--time-scale",
                              "0.00002",
                              "--deadline-scale",
                              "1",
                              "--poison",
                              "5",
                              "--cloudevents-rate",
                              "0.1",
                              "--ground-truth",
                              truth,
                              "--quiet",
                              seed != NULL ? "--seed" : NULL,
                              seed,
                              NULL,
                              NULL,
                              NULL,
                              NULL,
                              NULL,
                              NULL,
                              NULL};
    if (active) {
        /* After the seed (or in its place); the responder runs until the
         * check below holds or gives up, then gets SIGTERM. */
        static const char *const more[] = {"--active", "--fault-every", "4", "--linger", "600"};
        size_t at = 0;
        while (sim_argv[at] != NULL)
            at++;
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            sim_argv[at + i] = more[i];
    }
    pid_t simulator = spawn(sim_argv, NULL);
    long long last_alert = 0;
    int sim_status = -1;
    facts_store_t facts = {0};
    demo_active_verdict_t verdict = {0};
    bool active_held = false;
    if (active) {
        /* Until every order has reached its end (the check holds), for at
         * most two minutes after the last order is due. */
        long want = atol(orders);
        double give_up = (double) time(NULL) + (double) want / atof(rate) + 120;
        for (int tick = 0; !demo_interrupted; tick++) {
            print_new_alerts(conn, &last_alert);
            if (waitpid(simulator, &sim_status, WNOHANG) == simulator) {
                fprintf(stderr, "steward demo: the simulator ended early\n");
                simulator = -1;
                break;
            }
            if (tick % 4 == 0) {
                active_held = active_check_now(conn, truth, "order_fulfilment", &facts, &verdict);
                if ((long) verdict.orders >= want && active_held)
                    break;
                if ((double) time(NULL) > give_up) {
                    fprintf(stderr, "steward demo: the orders did not all reach their end within "
                                    "two minutes of the last one\n");
                    break;
                }
            }
            usleep(250 * 1000);
        }
        if (simulator > 0) {
            kill(simulator, SIGTERM);
            sim_status = wait_exit(simulator);
            if (sim_status != 0)
                fprintf(stderr, "steward demo: the simulator exited %d\n", sim_status);
        }
    }
    while (!active && !demo_interrupted) {
        print_new_alerts(conn, &last_alert);
        if (waitpid(simulator, &sim_status, WNOHANG) == simulator)
            break;
        usleep(250 * 1000);
    }
    if (active) {
        /* Checked above. */
    } else if (demo_interrupted) {
        kill(simulator, SIGTERM);
        wait_exit(simulator);
    } else if (!WIFEXITED(sim_status) || WEXITSTATUS(sim_status) != 0) {
        fprintf(stderr, "steward demo: the simulator failed; nothing to check\n");
        demo_interrupted = 1;
    }

    /* Everything read, then the longest deadline and a little: every stall has fired. */
    if (!active && !demo_interrupted && !wait_consumed(conn, query, prefix, group, partitions, 60))
        fprintf(stderr, "steward demo: steward did not read everything within 60 s\n");
    for (int i = 0; i < 40 && !active && !demo_interrupted; i++) {
        print_new_alerts(conn, &last_alert);
        usleep(250 * 1000);
    }
    print_new_alerts(conn, &last_alert);

    /* With --serve steward keeps running, its console showing this run. */
    if (!serve)
        stop_steward(steward, log);

    printf("\n== steward report\n");
    fflush(stdout);
    const char *report_argv[] = {self, "report", "--database", url, "--definitions", run_def, NULL};
    wait_exit(spawn(report_argv, NULL));

    char stalled_key[256];
    stalled_key[0] = '\0';
    bool truth_held;
    if (active) {
        /* Once more, with the simulator's summary. */
        truth_held = active_check_now(conn, truth, "order_fulfilment", &facts, &verdict) &&
                     (long) verdict.orders >= atol(orders) && !demo_interrupted;
        print_active_verdict(&facts, &verdict);
        if (facts.zombie_key != NULL)
            snprintf(stalled_key, sizeof stalled_key, "%s", facts.zombie_key);
    } else {
        truth_held =
            !demo_interrupted && check_ground_truth(conn, truth, stalled_key, sizeof stalled_key);
    }
    if (stalled_key[0] != '\0') {
        printf("\n== steward inspect order_fulfilment %s  (%s)\n", stalled_key,
               active ? "the order whose first picker went quiet" : "where is this order?");
        fflush(stdout);
        const char *inspect_argv[] = {
            self, "inspect", "order_fulfilment", stalled_key, "--database", url, NULL};
        wait_exit(spawn(inspect_argv, NULL));
    }
    if (active)
        printf("\n%s\n", truth_held ? "demo: every order ended where its faults lead or paged the "
                                      "step that never answered; each command went out under one "
                                      "id; every late reply was recorded as stale"
                                    : "demo: steward's record did not match the ground truth");
    else
        printf("\n%s\n", truth_held ? "demo: every stalled order was alerted at the right step, "
                                      "and nothing else was"
                                    : "demo: the alerts did not match the ground truth");
    facts_clear(&facts);
    rc = truth_held ? EXIT_OK : EXIT_RUNTIME;
    if (serve)
        serve_console(steward, log);
    /* A run that did not match keeps its evidence. */
    if (keep || !truth_held) {
        printf("steward's log and the ground truth are in %s\n", work);
    } else {
        unlink(config);
        unlink(log);
        unlink(truth);
        unlink(run_def);
        rmdir(work);
    }
out:
    rd_kafka_destroy(rk); /* and with it the mock cluster */
    PQfinish(conn);
    return rc;
}
