/*
 * test_faults - steward run against the faults of its surroundings and of
 * its operators, on the real broker and PostgreSQL.
 *
 * PostgreSQL is reached through a TCP proxy inside the test (a thread per
 * connection), which can refuse connections (its port closed: ECONNREFUSED,
 * as a server that is down), cut the ones open, or hold each new one for a
 * while before passing it on (a server slow to answer).
 *
 *   db_down_at_start     the database refuses at start: steward waits, is
 *                        not ready (503 naming the wait) but alive, and
 *                        starts and consumes once the database comes
 *   bad_database_config  an unparseable connection string or an unknown
 *                        role exits 2 at once; no password is printed
 *   stop_during_outage   SIGTERM while the database is cut off: exit 0
 *                        within 15 s, and the batch in hand is applied by
 *                        the next run (nothing lost)
 *   sighup_at_start      SIGHUP sent again and again while steward starts
 *                        does not kill it; it runs, then stops with 0
 *   log_reader_gone      stdout and stderr a pipe nobody reads: steward
 *                        is ready, judges an event, and stops with 0
 *   idle_connections     200 idle TCP connections to the HTTP port: /healthz
 *                        still answers 200 within a second
 *   standby_is_ready     two replicas, one partition per topic: the one
 *                        without partitions is ready too
 *   broker_unreachable   brokers nobody answers: steward_kafka_reachable 0
 *                        and a log line, and the process keeps running
 *   stuck_thread         the notifier held in a database call (its table
 *                        locked) longer than http.stall_after: /healthz
 *                        503 names it, and 200 once it moves again
 */
#include "receiver.h"
#include "testlib.h"
#include "world.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the proxy --------------------------------------------------------------- */

#define PROXY_MAX_LINKS 256

typedef struct proxy {
    struct sockaddr_in upstream;
    int port;
    int listen_fd; /* -1 while down */
    pthread_t acceptor;
    atomic_bool quit;
    atomic_int hold_ms;  /* each new connection waits this long before it is passed on */
    atomic_int accepted; /* connections accepted so far */

    pthread_mutex_t lock; /* guards what follows */
    bool down;
    int fds[PROXY_MAX_LINKS * 2]; /* open sockets, -1 for free slots */
    pthread_t links[PROXY_MAX_LINKS];
    size_t n_links;
} proxy_t;

typedef struct link_arg {
    proxy_t *p;
    int client;
    int slot;
} link_arg_t;

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                               .sin_port = htons((uint16_t) port)};
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ck_assert_msg(bind(fd, (struct sockaddr *) &addr, sizeof addr) == 0, "bind: %s",
                  strerror(errno));
    ck_assert_int_eq(listen(fd, 64), 0);
    return fd;
}

/* Remembers fd in slot `slot` (two per link) so a cut can shut it down. */
static void proxy_track(proxy_t *p, int slot, int fd)
{
    pthread_mutex_lock(&p->lock);
    p->fds[slot] = fd;
    pthread_mutex_unlock(&p->lock);
}

static void *proxy_link(void *arg)
{
    link_arg_t a = *(link_arg_t *) arg;
    proxy_t *p = a.p;
    free(arg);
    for (int waited = 0; waited < atomic_load(&p->hold_ms) && !atomic_load(&p->quit); waited += 10)
        usleep(10 * 1000);
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    proxy_track(p, a.slot * 2 + 1, up);
    pthread_mutex_lock(&p->lock);
    bool down = p->down;
    pthread_mutex_unlock(&p->lock);
    if (!down && connect(up, (struct sockaddr *) &p->upstream, sizeof p->upstream) == 0) {
        struct pollfd pfd[2] = {{a.client, POLLIN, 0}, {up, POLLIN, 0}};
        char buf[16384];
        while (!atomic_load(&p->quit) && poll(pfd, 2, 100) >= 0) {
            bool done = false;
            for (int i = 0; i < 2 && !done; i++) {
                if (pfd[i].revents == 0)
                    continue;
                ssize_t n = read(pfd[i].fd, buf, sizeof buf);
                /* MSG_NOSIGNAL: a cut (proxy_set_down) shuts the peer down under
                 * a forward in flight; that ends the link, not the test process. */
                if (n <= 0 || send(pfd[1 - i].fd, buf, (size_t) n, MSG_NOSIGNAL) != n)
                    done = true;
            }
            if (done)
                break;
        }
    }
    pthread_mutex_lock(&p->lock);
    p->fds[a.slot * 2] = -1;
    p->fds[a.slot * 2 + 1] = -1;
    pthread_mutex_unlock(&p->lock);
    close(a.client);
    close(up);
    return NULL;
}

static void *proxy_accept(void *arg)
{
    proxy_t *p = arg;
    while (!atomic_load(&p->quit)) {
        pthread_mutex_lock(&p->lock);
        int fd = p->listen_fd;
        pthread_mutex_unlock(&p->lock);
        if (fd < 0) {
            usleep(20 * 1000);
            continue;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        int client = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0)
            continue;
        pthread_mutex_lock(&p->lock);
        if (p->n_links == PROXY_MAX_LINKS) {
            pthread_mutex_unlock(&p->lock);
            close(client);
            continue;
        }
        link_arg_t *a = malloc(sizeof *a);
        *a = (link_arg_t){p, client, (int) p->n_links};
        p->fds[a->slot * 2] = client;
        pthread_create(&p->links[p->n_links++], NULL, proxy_link, a);
        pthread_mutex_unlock(&p->lock);
        atomic_fetch_add(&p->accepted, 1);
    }
    return NULL;
}

/* A proxy on a free loopback port to the server `conninfo` names. */
static proxy_t *proxy_new(const char *conninfo)
{
    proxy_t *p = calloc(1, sizeof *p);
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    const char *host = "127.0.0.1", *port = "5432";
    ck_assert_ptr_nonnull(opts);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (strcmp(o->keyword, "host") == 0 && o->val != NULL && o->val[0] != '\0')
            host = o->val;
        if (strcmp(o->keyword, "port") == 0 && o->val != NULL && o->val[0] != '\0')
            port = o->val;
    }
    p->upstream.sin_family = AF_INET;
    p->upstream.sin_port = htons((uint16_t) atoi(port));
    ck_assert_msg(inet_pton(AF_INET, strcmp(host, "localhost") == 0 ? "127.0.0.1" : host,
                            &p->upstream.sin_addr) == 1,
                  "the test database must be on an IPv4 address, not %s", host);
    PQconninfoFree(opts);
    for (size_t i = 0; i < PROXY_MAX_LINKS * 2; i++)
        p->fds[i] = -1;
    pthread_mutex_init(&p->lock, NULL);
    p->listen_fd = listen_on(0);
    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    ck_assert_int_eq(getsockname(p->listen_fd, (struct sockaddr *) &addr, &len), 0);
    p->port = ntohs(addr.sin_port);
    pthread_create(&p->acceptor, NULL, proxy_accept, p);
    return p;
}

/* down: the port refuses connections and every open one is cut; up: the
 * same port accepts and forwards again. */
static void proxy_set_down(proxy_t *p, bool down)
{
    pthread_mutex_lock(&p->lock);
    if (down && !p->down) {
        close(p->listen_fd);
        p->listen_fd = -1;
        for (size_t i = 0; i < PROXY_MAX_LINKS * 2; i++) {
            if (p->fds[i] >= 0)
                shutdown(p->fds[i], SHUT_RDWR);
        }
    } else if (!down && p->down) {
        p->listen_fd = listen_on(p->port);
    }
    p->down = down;
    pthread_mutex_unlock(&p->lock);
}

static void proxy_free(proxy_t *p)
{
    if (p == NULL)
        return;
    atomic_store(&p->quit, true);
    pthread_join(p->acceptor, NULL);
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < PROXY_MAX_LINKS * 2; i++) {
        if (p->fds[i] >= 0)
            shutdown(p->fds[i], SHUT_RDWR);
    }
    size_t n = p->n_links;
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++)
        pthread_join(p->links[i], NULL);
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* conninfo with its server replaced by the proxy (a new string). */
static char *via_proxy(const char *conninfo, const proxy_t *p)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    size_t cap = 4096, len = 0;
    char *out = calloc(1, cap), port[16];
    snprintf(port, sizeof port, "%d", p->port);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        const char *val = strcmp(o->keyword, "host") == 0       ? "127.0.0.1"
                          : strcmp(o->keyword, "port") == 0     ? port
                          : strcmp(o->keyword, "hostaddr") == 0 ? NULL
                                                                : o->val;
        if (val == NULL || val[0] == '\0')
            continue;
        len +=
            (size_t) snprintf(out + len, cap - len, "%s%s='%s'", len ? " " : "", o->keyword, val);
    }
    PQconninfoFree(opts);
    return out;
}

/* ---- steward ----------------------------------------------------------------- */

static tw_world_t w;
static proxy_t *proxy;

/* A steward process and what it printed. */
typedef struct replica {
    int pid;
    bool exited; /* reaped by alive(); status holds how it ended */
    int status;
    char *log;
    char base[64]; /* http://127.0.0.1:PORT */
} replica_t;

/* The alerting definition on our topics; payment due `due` after the order. */
static void write_definition(const char *due)
{
    free(tw_write_template(&w, "tests/data/definitions/alert_order.json.in", "alert_order.json",
                           TW_LIST("@D1@", due, "@D2@", "1h")));
}

/* A database, the definition, and the topics (one partition each) unless
 * `topics` is false. */
static void world_init(const char *name, bool topics)
{
    tw_init(&w, name);
    write_definition("1h");
    if (topics)
        tw_create_topics(&w, TW_LIST("orders", "payments", "shipping"), 1);
}

/*
 * Writes a config (database `database`, brokers `brokers`, plus the JSON
 * members in `extra`, e.g. "\"http\": {...}") and returns its path.
 */
static char *world_config(const char *name, const char *database, const char *brokers,
                          const char *extra)
{
    char file[64];
    snprintf(file, sizeof file, "%s.json", name);
    json_t *cfg = tw_config(&w, "alert_order.json");
    json_t *parts =
        json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s}, s:{s:s}}", "brokers", brokers, "database",
                  database, "scheduler", "interval", "200ms", "blind_after", "10m", "notifier",
                  "interval", "100ms", "kafka", "topic.metadata.refresh.interval.ms", "1000");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (extra != NULL) {
        char *wrapped = NULL;
        ck_assert_int_ge(asprintf(&wrapped, "{%s}", extra), 0);
        json_error_t jerr;
        json_t *more = json_loads(wrapped, 0, &jerr);
        ck_assert_msg(more != NULL, "extra config: %s: %s", wrapped, jerr.text);
        json_object_update(cfg, more);
        json_decref(more);
        free(wrapped);
    }
    if (json_object_get(cfg, "http") == NULL)
        json_object_set_new(cfg, "http", json_pack("{s:s}", "listen", "127.0.0.1:0"));
    char *text = json_dumps(cfg, JSON_INDENT(2));
    char *path = tl_write_file(w.dir, file, text);
    free(text);
    json_decref(cfg);
    return path;
}

static void replica_start(replica_t *r, const char *name, const char *config)
{
    memset(r, 0, sizeof *r);
    char file[64];
    snprintf(file, sizeof file, "%s.log", name);
    r->log = tl_write_file(w.dir, file, "");
    const char *argv[] = {NULL, "run", "--config", config, "--replica", name, NULL};
    r->pid = tl_steward_spawn(argv, NULL, r->log);
}

static void replica_stop(replica_t *r)
{
    if (r->pid > 0 && !r->exited)
        tl_stop(r->pid, SIGKILL, 10);
    r->pid = 0;
    free(r->log);
    r->log = NULL;
}

/* SIGTERM: r must exit 0 within 30 s; then what replica_stop() frees. */
static void replica_stop_clean(replica_t *r)
{
    ck_assert_int_eq(tl_stop(r->pid, SIGTERM, 30), 0);
    r->pid = 0;
    replica_stop(r);
}

/* How many lines of r's log carry `msg` (and `also` anywhere, when not NULL). */
static int log_count(const replica_t *r, const char *msg, const char *also)
{
    char *log = tl_read_file(r->log);
    int n = 0;
    for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        json_t *doc = json_loads(line, 0, NULL);
        const char *m = json_string_value(json_object_get(doc, "msg"));
        if (m != NULL && strcmp(m, msg) == 0 && (also == NULL || strstr(line, also) != NULL))
            n++;
        if (m != NULL && strcmp(m, "http listening") == 0 && r->base[0] == '\0') {
            const char *address = json_string_value(json_object_get(doc, "address"));
            if (address != NULL)
                snprintf((char *) r->base, sizeof r->base, "http://%s", address);
        }
        json_decref(doc);
    }
    free(log);
    return n;
}

typedef struct log_lines {
    const replica_t *r;
    const char *msg, *also;
    int n;
} log_lines_t;

static bool log_has_lines(void *arg, char *seen, size_t seen_size)
{
    const log_lines_t *l = arg;
    int got = log_count(l->r, l->msg, l->also);
    snprintf(seen, seen_size, "%d such lines", got);
    return got >= l->n;
}

/* Waits until r's log has `n` lines of `msg`. */
static void wait_log(const replica_t *r, const char *msg, const char *also, int n, int timeout_s)
{
    char what[512];
    snprintf(what, sizeof what, "%d \"%s\" in the log of pid %d", n, msg, r->pid);
    tl_wait_until(log_has_lines, &(log_lines_t){r, msg, also, n}, timeout_s, what, r->log);
}

/* Whether r is still running; once it is not, r->status says how it ended. */
static bool alive(replica_t *r)
{
    if (!r->exited && waitpid(r->pid, &r->status, WNOHANG) == r->pid)
        r->exited = true;
    return !r->exited;
}

/* What the SIGHUP storm waits for: steward's first connection through the
 * proxy, or its end. */
struct first_connection {
    proxy_t *proxy;
    replica_t *r;
};

static bool connected_or_gone(void *arg, char *seen, size_t seen_size)
{
    struct first_connection *fc = arg;
    (void) seen;
    (void) seen_size;
    return atomic_load(&fc->proxy->accepted) > 0 || !alive(fc->r);
}

/* GETs path from r; the status in *status, the body returned (free it). */
static char *get(const replica_t *r, const char *path, long *status)
{
    char url[256];
    ck_assert_msg(r->base[0] != '\0', "no HTTP address yet");
    snprintf(url, sizeof url, "%s%s", r->base, path);
    return tl_http_get(url, status);
}

typedef struct answer {
    const replica_t *r;
    const char *path;
    long status;
    char *body;
} answer_t;

static bool answers(void *arg, char *seen, size_t seen_size)
{
    answer_t *a = arg;
    long got;
    free(a->body);
    a->body = get(a->r, a->path, &got);
    snprintf(seen, seen_size, "%ld %.300s", got, a->body);
    return got == a->status;
}

/* Waits until GET path answers `status`; returns the body (free it). */
static char *wait_status(const replica_t *r, const char *path, long status, int timeout_s)
{
    answer_t a = {r, path, status, NULL};
    char what[300];
    snprintf(what, sizeof what, "%s to answer %ld", path, status);
    tl_wait_until(answers, &a, timeout_s, what, r->log);
    return a.body;
}

/* The value of one series in r's /metrics; -1 when absent. */
static double series(const replica_t *r, const char *name)
{
    long status;
    char *text = get(r, "/metrics", &status);
    double value = -1;
    size_t len = strlen(name);
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            value = strtod(line + len + 1, NULL);
    }
    free(text);
    return value;
}

typedef struct series_value {
    const replica_t *r;
    const char *name;
    double expected;
} series_value_t;

static bool series_is(void *arg, char *seen, size_t seen_size)
{
    const series_value_t *v = arg;
    double got = series(v->r, v->name);
    snprintf(seen, seen_size, "%g, expected %g", got, v->expected);
    return got == v->expected;
}

static void wait_series(const replica_t *r, const char *name, double expected, int timeout_s)
{
    tl_wait_until(series_is, &(series_value_t){r, name, expected}, timeout_s, name, r->log);
}

static void send_order(const char *key)
{
    char value[256], *t = tw_topic(&w, "orders");
    tl_producer_t *p = tl_producer_new();
    snprintf(value, sizeof value, "{\"type\":\"OrderPlaced\",\"id\":\"o-%s\",\"order_id\":\"%s\"}",
             key, key);
    tl_produce(p, t, -1, value, -1, NULL, 0);
    tl_producer_free(p);
    free(t);
}

static void wait_sql(const char *sql, const char *expected, int timeout_s, const replica_t *r)
{
    char *last = NULL;
    if (!tl_db_wait(w.conn, sql, 0, NULL, expected, timeout_s, &last)) {
        if (r != NULL)
            tl_print_tail(r->log, 4000);
        ck_abort_msg("%s: got %s, expected %s", sql, last, expected);
    }
}

static void teardown(void)
{
    proxy_free(proxy);
    proxy = NULL;
    tw_teardown(&w);
}

/* ---- the database ------------------------------------------------------------ */

START_TEST(db_down_at_start)
{
    world_init("fdown", true);
    proxy = proxy_new(w.db_url);
    proxy_set_down(proxy, true);
    char *database = via_proxy(w.db_url, proxy);
    char *config = world_config("a", database, tl_kafka_brokers(), NULL);
    replica_t r;
    replica_start(&r, "a", config);

    /* Refused, and refused again: waiting, alive, not ready. */
    wait_log(&r, "PostgreSQL unavailable at start; waiting for it", "Connection refused", 3, 30);
    ck_assert_msg(alive(&r), "steward exited while the database was down");
    long status;
    char *body = get(&r, "/healthz", &status);
    ck_assert_int_eq(status, 200);
    free(body);
    body = get(&r, "/readyz", &status);
    ck_assert_int_eq(status, 503);
    ck_assert_msg(tl_contains(body, "starting: waiting for PostgreSQL") &&
                      tl_contains(body, "Connection refused"),
                  "readyz: %s", body);
    free(body);

    /* The database comes: the schema is migrated, intake consumes. */
    proxy_set_down(proxy, false);
    free(wait_status(&r, "/readyz", 200, 60));
    send_order("K1");
    wait_sql("SELECT count(*) FROM steward.instances", "1", 60, &r);
    replica_stop_clean(&r);
    free(config);
    free(database);
}
END_TEST

START_TEST(bad_database_config)
{
    world_init("fbad", false);
    /* Unparseable (a '%' not followed by two hex digits): libpq quoted the
     * password in its message. */
    static const char *const unparseable[] = {
        "postgresql://steward:ab%zzSECRET1@127.0.0.1:1/db",
        "host=127.0.0.1 port=1 password=my SECRET1",
    };
    for (size_t i = 0; i < 2; i++) {
        char *config = world_config("bad", unparseable[i], tl_kafka_brokers(), NULL);
        const char *argv[] = {NULL, "run", "--config", config, NULL};
        tl_output_t o = tl_steward(argv, NULL);
        ck_assert_msg(o.status == 2, "exit %d: %s", o.status, o.err);
        ck_assert_msg(tl_contains(o.err, "cannot be parsed"), "stderr: %s", o.err);
        ck_assert_msg(!tl_contains(o.err, "SECRET1") && !tl_contains(o.out, "SECRET1"),
                      "the password was printed: %s%s", o.out, o.err);
        tl_output_free(&o);
        const char *margv[] = {NULL, "migrate", "--database", unparseable[i], NULL};
        o = tl_steward(margv, NULL);
        ck_assert_int_ne(o.status, 0);
        ck_assert_msg(!tl_contains(o.err, "SECRET1") && !tl_contains(o.out, "SECRET1"),
                      "the password was printed: %s%s", o.out, o.err);
        tl_output_free(&o);
        free(config);
    }

    /* The real server refuses a role that does not exist: a config error,
     * at once, and the password (with '%', quotes and spaces) is not shown. */
    PQconninfoOption *opts = PQconninfoParse(w.db_url, NULL);
    char database[2048];
    size_t len = 0;
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val != NULL && o->val[0] != '\0' && strcmp(o->keyword, "user") != 0 &&
            strcmp(o->keyword, "password") != 0)
            len += (size_t) snprintf(database + len, sizeof database - len, "%s='%s' ", o->keyword,
                                     o->val);
    }
    PQconninfoFree(opts);
    snprintf(database + len, sizeof database - len,
             "user=steward_nobody password='p%%25 \\'SECRET2\" x'");
    char *config = world_config("role", database, tl_kafka_brokers(), NULL);
    const char *argv[] = {NULL, "run", "--config", config, NULL};
    int64_t started = now_ms();
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 2, "exit %d: %s", o.status, o.err);
    ck_assert_msg(now_ms() - started < 20000, "took %lld ms", (long long) (now_ms() - started));
    ck_assert_msg(tl_contains(o.out, "does not exist") || tl_contains(o.err, "does not exist"),
                  "output: %s%s", o.out, o.err);
    ck_assert_msg(!tl_contains(o.err, "SECRET2") && !tl_contains(o.out, "SECRET2"),
                  "the password was printed: %s%s", o.out, o.err);
    tl_output_free(&o);
    free(config);
}
END_TEST

START_TEST(stop_during_outage)
{
    world_init("fstop", true);
    proxy = proxy_new(w.db_url);
    char *database = via_proxy(w.db_url, proxy);
    char *config = world_config("a", database, tl_kafka_brokers(), NULL);
    replica_t r;
    replica_start(&r, "a", config);
    wait_log(&r, "http listening", NULL, 1, 30);
    free(wait_status(&r, "/readyz", 200, 60));
    send_order("K1");
    wait_sql("SELECT count(*) FROM steward.instances", "1", 60, &r);

    /* The database goes away; an order arrives that cannot be committed. */
    proxy_set_down(proxy, true);
    send_order("K2");
    wait_log(&r, "batch not committed; retrying", NULL, 1, 30);

    int64_t started = now_ms();
    int rc = tl_stop(r.pid, SIGTERM, 30);
    int64_t took = now_ms() - started;
    if (rc != 0)
        tl_print_tail(r.log, 4000);
    ck_assert_msg(rc == 0, "exit %d after SIGTERM during the outage", rc);
    ck_assert_msg(took < 15000, "took %lld ms to stop", (long long) took);
    ck_assert_int_ge(log_count(&r,
                               "stopping: the batch in hand is abandoned, not committed; it "
                               "is read again from the stored offsets",
                               NULL),
                     1);
    r.pid = 0;
    replica_stop(&r);

    /* Nothing was lost: the next run reads the abandoned batch again. */
    proxy_set_down(proxy, false);
    replica_start(&r, "b", config);
    wait_sql("SELECT count(*) FROM steward.instances", "2", 60, &r);
    replica_stop_clean(&r);
    free(config);
    free(database);
}
END_TEST

/* ---- signals ----------------------------------------------------------------- */

START_TEST(sighup_at_start)
{
    world_init("fhup", true);
    proxy = proxy_new(w.db_url);
    /* Every connection waits 1.5 s: start-up takes a while. */
    atomic_store(&proxy->hold_ms, 1500);
    char *database = via_proxy(w.db_url, proxy);
    char *config = world_config("a", database, tl_kafka_brokers(), NULL);
    replica_t r;
    replica_start(&r, "a", config);

    /* From its first connection on, SIGHUP every 20 ms until it runs. The
     * first wait checks every 5 ms, so that the storm starts inside
     * start-up; the storm's own pace is the scenario. */
    struct first_connection fc = {proxy, &r};
    tl_poll_every(connected_or_gone, &fc, 5, 30, NULL, 0);
    ck_assert_msg(atomic_load(&proxy->accepted) > 0, "steward never connected");
    int64_t until = now_ms() + 30000;
    int sent = 0;
    while (log_count(&r, "steward running", NULL) == 0 && now_ms() < until) {
        if (kill(r.pid, SIGHUP) != 0 || !alive(&r))
            break;
        sent++;
        usleep(20 * 1000);
    }
    ck_assert_msg(alive(&r), "steward died during start-up after %d SIGHUPs: %s %d", sent,
                  WIFSIGNALED(r.status) ? "signal" : "exit",
                  WIFSIGNALED(r.status) ? WTERMSIG(r.status) : WEXITSTATUS(r.status));
    ck_assert_msg(sent >= 10, "only %d SIGHUPs during start-up", sent);
    wait_log(&r, "steward running", NULL, 1, 30);
    /* The held SIGHUP is a reload, taken up once running. */
    wait_log(&r, "definitions and routes reloaded", NULL, 1, 30);
    replica_stop_clean(&r);
    free(config);
    free(database);
}
END_TEST

/* ---- health and readiness --------------------------------------------------- */

START_TEST(idle_connections)
{
    world_init("fidle", true);
    char *config = world_config("a", w.db_url, tl_kafka_brokers(), NULL);
    replica_t r;
    replica_start(&r, "a", config);
    wait_log(&r, "http listening", NULL, 1, 30);
    free(wait_status(&r, "/readyz", 200, 60));

    /* 200 clients connect and say nothing: from four addresses, 50 each,
     * within http.connections_per_client (64), so what is shown is that the
     * polling threads serve /healthz beside them, not the per-client limit
     * (integration.http shows that). */
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t) atoi(strrchr(r.base, ':') + 1))};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    int fds[200];
    for (int i = 0; i < 200; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        char source[16];
        snprintf(source, sizeof source, "127.0.0.%d", 2 + i % 4);
        struct sockaddr_in from = {.sin_family = AF_INET};
        inet_pton(AF_INET, source, &from.sin_addr);
        ck_assert_int_eq(bind(fds[i], (struct sockaddr *) &from, sizeof from), 0);
        ck_assert_int_eq(connect(fds[i], (struct sockaddr *) &addr, sizeof addr), 0);
    }
    /* Let the server accept them all: nothing outside it shows when it has,
     * so this gives it the time. */
    usleep(300 * 1000);
    for (int i = 0; i < 3; i++) {
        long status;
        int64_t started = now_ms();
        char *body = get(&r, "/healthz", &status);
        int64_t took = now_ms() - started;
        ck_assert_msg(status == 200 && took < 1000, "/healthz: %ld after %lld ms: %s", status,
                      (long long) took, body);
        free(body);
    }
    for (int i = 0; i < 200; i++)
        close(fds[i]);
    replica_stop_clean(&r);
    free(config);
}
END_TEST

typedef struct standby {
    replica_t *a, *b;
    replica_t *standby, *active;
} standby_t;

/* One replica has all 3 partitions and the other, none, is ready saying so. */
static bool found_standby(void *arg, char *seen, size_t seen_size)
{
    standby_t *s = arg;
    double pa = series(s->a, "steward_partitions_assigned");
    double pb = series(s->b, "steward_partitions_assigned");
    long status = 0;
    char *body = NULL;
    if (pa + pb == 3 && (pa == 0 || pb == 0)) {
        replica_t *idle = pa == 0 ? s->a : s->b;
        body = get(idle, "/readyz", &status);
        json_t *doc = json_loads(body, 0, NULL);
        if (status == 200 && json_integer_value(json_object_get(doc, "partitions")) == 0) {
            s->standby = idle;
            s->active = pa == 0 ? s->b : s->a;
        }
        json_decref(doc);
    }
    snprintf(seen, seen_size, "a %g, b %g partitions; /readyz of the one without: %ld %.300s", pa,
             pb, status, body != NULL ? body : "");
    free(body);
    return s->standby != NULL;
}

START_TEST(standby_is_ready)
{
    world_init("fstandby", true);
    char *config = world_config("a", w.db_url, tl_kafka_brokers(), NULL);
    replica_t a, b;
    replica_start(&a, "a", config);
    replica_start(&b, "b", config);
    wait_log(&a, "http listening", NULL, 1, 30);
    wait_log(&b, "http listening", NULL, 1, 30);

    /* Three topics of one partition each, range-assigned: one replica
     * holds all three, the other none. Until both have joined, the one
     * alone holds them all and the other is not in the group yet (503
     * "joining"); so wait for a replica without partitions that answers
     * 200 saying it has none. */
    standby_t sb = {&a, &b, NULL, NULL};
    tl_wait_until(found_standby, &sb, 60, "a ready standby", b.log);
    replica_t *standby = sb.standby, *active = sb.active;
    char *body = NULL;
    long status = 0;
    free(wait_status(active, "/readyz", 200, 30));
    /* Reachability is checked once a second, apart from joining: the
     * standby may be ready before its first check has answered. */
    wait_series(standby, "steward_kafka_reachable", 1, 15);
    body = get(standby, "/readyz", &status);
    json_t *doc = json_loads(body, 0, NULL);
    ck_assert_int_eq(status, 200);
    ck_assert_int_eq(json_is_true(json_object_get(doc, "kafka_reachable")), 1);
    json_decref(doc);
    free(body);

    ck_assert_int_eq(tl_stop(a.pid, SIGTERM, 30), 0);
    ck_assert_int_eq(tl_stop(b.pid, SIGTERM, 30), 0);
    a.pid = b.pid = 0;
    replica_stop(&a);
    replica_stop(&b);
    free(config);
}
END_TEST

/* A loopback port nobody listens on: one taken from the kernel, then freed. */
static int unused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &addr, sizeof addr), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &addr, &len), 0);
    close(fd);
    return ntohs(addr.sin_port);
}

typedef struct ready_or_dead {
    replica_t *r;
    long status;
} ready_or_dead_t;

static bool ready_or_dead(void *arg, char *seen, size_t seen_size)
{
    ready_or_dead_t *rd = arg;
    (void) seen;
    (void) seen_size;
    if (!alive(rd->r))
        return true;
    free(get(rd->r, "/readyz", &rd->status));
    return rd->status == 200;
}

START_TEST(log_reader_gone)
{
    world_init("fpipe", true);
    /* Its log goes nowhere, so the HTTP port is chosen here, not read from it. */
    int port = unused_port();
    char extra[96];
    snprintf(extra, sizeof extra, "\"http\": {\"listen\": \"127.0.0.1:%d\"}", port);
    char *config = world_config("a", w.db_url, tl_kafka_brokers(), extra);
    replica_t r = {0};
    r.log = tl_write_file(w.dir, "a.log", "");
    snprintf(r.base, sizeof r.base, "http://127.0.0.1:%d", port);
    const char *argv[] = {NULL, "run", "--config", config, "--replica", "a", NULL};
    r.pid = tl_steward_spawn(argv, NULL, NULL);

    /* Every line it logs is a write to a pipe nobody reads. */
    ready_or_dead_t rd = {&r, 0};
    tl_poll(ready_or_dead, &rd, 60, NULL, 0);
    long status = rd.status;
    ck_assert_msg(alive(&r), "steward died with its log reader gone: %s %d",
                  WIFSIGNALED(r.status) ? "signal" : "exit",
                  WIFSIGNALED(r.status) ? WTERMSIG(r.status) : WEXITSTATUS(r.status));
    ck_assert_int_eq(status, 200);
    send_order("K1");
    wait_sql("SELECT count(*) FROM steward.instances", "1", 60, &r);
    ck_assert_msg(alive(&r), "steward died with its log reader gone");
    replica_stop_clean(&r);
    free(config);
}
END_TEST

START_TEST(broker_unreachable)
{
    world_init("fkafka", false);
    char brokers[64];
    snprintf(brokers, sizeof brokers, "127.0.0.1:%d", unused_port());

    char *config = world_config("a", w.db_url, brokers, NULL);
    replica_t r;
    replica_start(&r, "a", config);
    wait_log(&r, "http listening", NULL, 1, 30);
    wait_log(&r, "Kafka unreachable: watermarks hold until it answers", NULL, 1, 30);
    wait_series(&r, "steward_kafka_reachable", 0, 30);
    ck_assert_msg(alive(&r), "steward exited with the broker unreachable");
    long status;
    free(get(&r, "/healthz", &status));
    ck_assert_int_eq(status, 200);
    replica_stop_clean(&r);
    free(config);
}
END_TEST

START_TEST(stuck_thread)
{
    world_init("fstuck", true);
    write_definition("1s");
    char extra[512];
    snprintf(extra, sizeof extra,
             "\"http\": {\"listen\": \"127.0.0.1:0\", \"stall_after\": \"2s\"}, "
             "\"notifier\": {\"interval\": \"100ms\"}, "
             "\"scheduler\": {\"interval\": \"200ms\", \"blind_after\": \"10m\"}");
    char *config = world_config("a", w.db_url, tl_kafka_brokers(), extra);
    replica_t r;
    replica_start(&r, "a", config);
    wait_log(&r, "http listening", NULL, 1, 30);
    free(wait_status(&r, "/healthz", 200, 30));
    free(wait_status(&r, "/readyz", 200, 60));

    /* The notifier looks at the outbox every pass; a lock held on it
     * stops that thread (and no other) inside a database call. */
    tl_db_exec(w.conn, "BEGIN");
    tl_db_exec(w.conn, "LOCK TABLE steward.outbox IN ACCESS EXCLUSIVE MODE");
    char *body = wait_status(&r, "/healthz", 503, 15);
    ck_assert_msg(tl_contains(body, "notifier"), "healthz: %s", body);
    free(body);
    tl_db_exec(w.conn, "COMMIT");
    /* Progress again: alive again. */
    free(wait_status(&r, "/healthz", 200, 15));
    ck_assert_msg(alive(&r), "steward exited");
    replica_stop(&r);
    free(config);
}
END_TEST

Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, db_down_at_start);
    tcase_add_test(tc, bad_database_config);
    tcase_add_test(tc, stop_during_outage);
    tcase_add_test(tc, sighup_at_start);
    tcase_add_test(tc, log_reader_gone);
    tcase_add_test(tc, idle_connections);
    tcase_add_test(tc, standby_is_ready);
    tcase_add_test(tc, broker_unreachable);
    tcase_add_test(tc, stuck_thread);
    suite_add_tcase(s, tc);
    return s;
}
