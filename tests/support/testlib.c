/*
 * testlib - shared test support; see testlib.h.
 */
#include "common/db.h"
#include "definitions/def.h"
#include "testlib.h"

#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <time.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

void tl_output_free(tl_output_t *o)
{
    free(o->out);
    free(o->err);
    o->out = o->err = NULL;
}

/* Appends what fd has to *buf; returns 0 at EOF. */
static int drain(int fd, char **buf, size_t *len)
{
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
        return 1;
    if (n <= 0)
        return 0;
    *buf = realloc(*buf, *len + (size_t) n + 1);
    ck_assert_ptr_nonnull(*buf);
    memcpy(*buf + *len, chunk, (size_t) n);
    *len += (size_t) n;
    (*buf)[*len] = '\0';
    return 1;
}

tl_output_t tl_steward(const char *const *argv, const char *const *env)
{
    int out_pipe[2], err_pipe[2];
    ck_assert_int_eq(pipe(out_pipe), 0);
    ck_assert_int_eq(pipe(err_pipe), 0);

    size_t argc = 0;
    while (argv[argc] != NULL || argc == 0)
        argc++;
    const char **args = calloc(argc + 1, sizeof *args);
    args[0] = STEWARD_BINARY;
    for (size_t i = 1; i < argc; i++)
        args[i] = argv[i];

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
        close(out_pipe[0]);
        close(err_pipe[0]);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, STDIN_FILENO);
        for (const char *const *e = env; e != NULL && *e != NULL; e++)
            putenv((char *) *e);
        execv(STEWARD_BINARY, (char *const *) args);
        _exit(127);
    }
    free(args);
    close(out_pipe[1]);
    close(err_pipe[1]);

    tl_output_t o = {0};
    size_t out_len = 0, err_len = 0;
    o.out = calloc(1, 1);
    o.err = calloc(1, 1);
    struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP))) {
                if (!drain(fds[i].fd, i == 0 ? &o.out : &o.err, i == 0 ? &out_len : &err_len)) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    open_fds--;
                }
            }
        }
    }
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    o.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    return o;
}

const char *tl_tmpdir(void)
{
    static char path[512];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/steward-test-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(path));
    return path;
}

char *tl_write_file(const char *dir, const char *name, const char *content)
{
    char *path = NULL;
    ck_assert_int_ge(asprintf(&path, "%s/%s", dir, name), 0);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
    fputs(content, f);
    fclose(f);
    return path;
}

char *tl_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        buf = realloc(buf, len + n + 1);
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (buf == NULL)
        buf = calloc(1, 1);
    buf[len] = '\0';
    return buf;
}

void tl_print_tail(const char *path, size_t bytes)
{
    char *text = tl_read_file(path);
    size_t len = strlen(text);
    fprintf(stderr, "---- the end of %s ----\n%s\n----\n", path,
            len > bytes ? text + len - bytes : text);
    free(text);
}

char *tl_source_path(const char *relative)
{
    char *path = NULL;
    ck_assert_int_ge(asprintf(&path, "%s/%s", STEWARD_SOURCE_DIR, relative), 0);
    return path;
}

def_t *tl_def_load(const char *relative)
{
    def_problems_t problems = {0};
    char *path = tl_source_path(relative);
    def_t *def = def_load_file(path, &problems);
    ck_assert_msg(def != NULL, "%s: %s", path,
                  problems.n ? problems.items[0].message : "not loaded");
    def_problems_clear(&problems);
    free(path);
    return def;
}

const char *tl_kafka_brokers(void)
{
    const char *brokers = getenv("STEWARD_TEST_KAFKA_BROKERS");
    ck_assert_msg(brokers != NULL && *brokers,
                  "STEWARD_TEST_KAFKA_BROKERS is not set: run the suite through scripts/test");
    return brokers;
}

PGconn *tl_db_connect(const char *conninfo)
{
    PGconn *conn = PQconnectdb(conninfo);
    ck_assert_msg(PQstatus(conn) == CONNECTION_OK, "connect: %s", PQerrorMessage(conn));
    PQsetNoticeProcessor(conn, NULL, NULL);
    return conn;
}

void tl_migrate(const char *conninfo)
{
    const char *argv[] = {NULL, "migrate", "--database", conninfo, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "migrate: %s", o.err);
    tl_output_free(&o);
}

const char *tl_db_create(const char *suffix)
{
    const char *base = getenv("STEWARD_TEST_DATABASE_URL");
    ck_assert_msg(base != NULL && *base,
                  "STEWARD_TEST_DATABASE_URL is not set: run the suite through scripts/test");
    PGconn *admin = tl_db_connect(base);
    char name[128];
    snprintf(name, sizeof name, "%s_%s_%d", PQdb(admin), suffix, (int) getpid());

    char *quoted = PQescapeIdentifier(admin, name, strlen(name));
    char sql[512];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", quoted);
    tl_db_exec(admin, sql);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", quoted);
    tl_db_exec(admin, sql);
    PQfreemem(quoted);
    PQfinish(admin);

    /* One per suite process; kept for the life of the process. */
    static char *url;
    free(url);
    url = db_with_dbname(base, name);
    ck_assert_msg(url != NULL, "cannot parse STEWARD_TEST_DATABASE_URL");
    return url;
}

char *tl_db_scalar(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(conn));
    char *value = NULL;
    if (PQntuples(res) == 0)
        value = strdup("");
    else if (!PQgetisnull(res, 0, 0))
        value = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return value;
}

void tl_db_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(conn));
    PQclear(res);
}

int tl_contains(const char *haystack, const char *needle)
{
    return haystack != NULL && strstr(haystack, needle) != NULL;
}

/* ---- Kafka ---------------------------------------------------------------- */

static rd_kafka_t *new_client(rd_kafka_type_t type, const char *const *props)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (const char *const *p = props; p != NULL && p[0] != NULL; p += 2)
        ck_assert_msg(rd_kafka_conf_set(conf, p[0], p[1], errstr, sizeof errstr) ==
                          RD_KAFKA_CONF_OK,
                      "%s: %s", p[0], errstr);
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), errstr,
                                sizeof errstr) == RD_KAFKA_CONF_OK);
    if (type == RD_KAFKA_PRODUCER) {
        rd_kafka_conf_set(conf, "linger.ms", "5", errstr, sizeof errstr);
        rd_kafka_conf_set(conf, "enable.idempotence", "true", errstr, sizeof errstr);
    }
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
    ck_assert_msg(rk != NULL, "rd_kafka_new: %s", errstr);
    return rk;
}

typedef struct topics_ready {
    rd_kafka_t *rk;
    const char *const *topics;
    size_t n;
    int partitions;
} topics_ready_t;

static bool topics_ready(void *arg, char *seen, size_t seen_size)
{
    const topics_ready_t *t = arg;
    const struct rd_kafka_metadata *md = NULL;
    size_t ready = 0;
    if (rd_kafka_metadata(t->rk, 1, NULL, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(seen, seen_size, "no metadata from the broker");
        return false;
    }
    for (int k = 0; k < md->topic_cnt; k++) {
        for (size_t i = 0; i < t->n; i++) {
            if (strcmp(md->topics[k].topic, t->topics[i]) == 0 &&
                md->topics[k].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                md->topics[k].partition_cnt == t->partitions)
                ready++;
        }
    }
    rd_kafka_metadata_destroy(md);
    snprintf(seen, seen_size, "%zu of %zu topics with %d partitions", ready, t->n, t->partitions);
    return ready == t->n;
}

void tl_kafka_create_topics(const char *const *topics, size_t n, int partitions)
{
    rd_kafka_t *rk = new_client(RD_KAFKA_PRODUCER, NULL);
    rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);
    rd_kafka_NewTopic_t **new_topics = calloc(n, sizeof *new_topics);
    char errstr[512];

    for (size_t i = 0; i < n; i++) {
        new_topics[i] = rd_kafka_NewTopic_new(topics[i], partitions, 1, errstr, sizeof errstr);
        ck_assert_msg(new_topics[i] != NULL, "NewTopic %s: %s", topics[i], errstr);
    }
    rd_kafka_CreateTopics(rk, new_topics, n, NULL, queue);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, 30000);
    ck_assert_msg(ev != NULL, "CreateTopics timed out");
    const rd_kafka_CreateTopics_result_t *result = rd_kafka_event_CreateTopics_result(ev);
    size_t count;
    const rd_kafka_topic_result_t **results = rd_kafka_CreateTopics_result_topics(result, &count);
    for (size_t i = 0; i < count; i++) {
        rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
        ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR ||
                          err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS,
                      "CreateTopics %s: %s", rd_kafka_topic_result_name(results[i]),
                      rd_kafka_topic_result_error_string(results[i]));
    }
    rd_kafka_event_destroy(ev);

    /* Metadata lags creation a little: wait until every partition has a leader. */
    topics_ready_t ready = {rk, topics, n, partitions};
    tl_wait_until(topics_ready, &ready, 30, "the new topics' metadata", NULL);
    for (size_t i = 0; i < n; i++)
        rd_kafka_NewTopic_destroy(new_topics[i]);
    free(new_topics);
    rd_kafka_queue_destroy(queue);
    rd_kafka_destroy(rk);
}

char *tl_unique(const char *prefix)
{
    static int counter;
    char *name = NULL;
    ck_assert_int_ge(asprintf(&name, "%s%d_%d_%ld", prefix, (int) getpid(), ++counter,
                              (long) time(NULL) % 100000),
                     0);
    return name;
}

struct tl_producer {
    rd_kafka_t *rk;
};

tl_producer_t *tl_producer_new_conf(const char *const *props)
{
    tl_producer_t *p = calloc(1, sizeof *p);
    p->rk = new_client(RD_KAFKA_PRODUCER, props);
    return p;
}

tl_producer_t *tl_producer_new(void)
{
    return tl_producer_new_conf(NULL);
}

void tl_produce(tl_producer_t *p, const char *topic, int partition, const char *value,
                long value_len, const char *const *headers, long long timestamp_ms)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(4);
    for (const char *const *h = headers; h != NULL && h[0] != NULL; h += 2)
        rd_kafka_header_add(hdrs, h[0], -1, h[1], -1);
    size_t len = value == NULL ? 0 : value_len < 0 ? strlen(value) : (size_t) value_len;
    rd_kafka_resp_err_t err;
    do {
        err = rd_kafka_producev(
            p->rk, RD_KAFKA_V_TOPIC(topic),
            RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
            RD_KAFKA_V_VALUE((void *) value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_HEADERS(rd_kafka_headers_copy(hdrs)), RD_KAFKA_V_TIMESTAMP(timestamp_ms),
            RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(p->rk, 50);
    } while (err == RD_KAFKA_RESP_ERR__QUEUE_FULL);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce to %s: %s", topic,
                  rd_kafka_err2str(err));
    rd_kafka_headers_destroy(hdrs);
    rd_kafka_poll(p->rk, 0);
}

void tl_producer_free(tl_producer_t *p)
{
    if (p == NULL)
        return;
    ck_assert_msg(rd_kafka_flush(p->rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR,
                  "messages not delivered within 30 s");
    rd_kafka_destroy(p->rk);
    free(p);
}

/* ---- processes and waiting -------------------------------------------------- */

int tl_steward_spawn(const char *const *argv, const char *const *env, const char *log_path)
{
    size_t argc = 0;
    while (argv[argc] != NULL || argc == 0)
        argc++;
    const char **args = calloc(argc + 1, sizeof *args);
    args[0] = STEWARD_BINARY;
    for (size_t i = 1; i < argc; i++)
        args[i] = argv[i];

    int orphaned[2] = {-1, -1};
    if (log_path == NULL) {
        ck_assert_int_eq(pipe(orphaned), 0);
        close(orphaned[0]);
    }
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd =
            log_path != NULL ? open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644) : orphaned[1];
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, STDIN_FILENO);
        for (const char *const *e = env; e != NULL && *e != NULL; e++)
            putenv((char *) *e);
        execv(STEWARD_BINARY, (char *const *) args);
        _exit(127);
    }
    if (orphaned[1] >= 0)
        close(orphaned[1]);
    free(args);
    return (int) pid;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool tl_poll(tl_pred_t pred, void *arg, int timeout_s, char *seen, size_t seen_size)
{
    return tl_poll_every(pred, arg, 100, timeout_s, seen, seen_size);
}

bool tl_poll_every(tl_pred_t pred, void *arg, int interval_ms, int timeout_s, char *seen,
                   size_t seen_size)
{
    char scratch[1];
    if (seen == NULL || seen_size == 0) {
        seen = scratch;
        seen_size = sizeof scratch;
    }
    long long until = now_ms() + (long long) timeout_s * 1000;
    for (;;) {
        seen[0] = '\0';
        if (pred(arg, seen, seen_size))
            return true;
        if (now_ms() >= until)
            return false;
        usleep((useconds_t) interval_ms * 1000);
    }
}

void tl_wait_until(tl_pred_t pred, void *arg, int timeout_s, const char *what, const char *log_path)
{
    tl_wait_every(pred, arg, 100, timeout_s, what, log_path);
}

void tl_wait_every(tl_pred_t pred, void *arg, int interval_ms, int timeout_s, const char *what,
                   const char *log_path)
{
    char seen[1024];
    if (tl_poll_every(pred, arg, interval_ms, timeout_s, seen, sizeof seen))
        return;
    if (log_path != NULL)
        tl_print_tail(log_path, 4000);
    ck_abort_msg("waited %d s for %s; last seen: %s%s", timeout_s, what,
                 seen[0] != '\0' ? seen : "(nothing said)", log_path != NULL ? " (log above)" : "");
}

typedef struct file_has {
    const char *path, *needle;
} file_has_t;

static bool file_contains(void *arg, char *seen, size_t seen_size)
{
    const file_has_t *f = arg;
    char *text = tl_read_file(f->path);
    bool found = tl_contains(text, f->needle);
    snprintf(seen, seen_size, "%zu bytes without it", strlen(text));
    free(text);
    return found;
}

void tl_wait_file(const char *path, const char *needle, int timeout_s)
{
    char what[512];
    snprintf(what, sizeof what, "\"%s\" in %s", needle, path);
    tl_wait_until(file_contains, &(file_has_t){path, needle}, timeout_s, what, path);
}

typedef struct exited {
    pid_t pid;
    int status;
} exited_t;

static bool has_exited(void *arg, char *seen, size_t seen_size)
{
    exited_t *e = arg;
    int wstatus;
    (void) seen;
    (void) seen_size;
    if (waitpid(e->pid, &wstatus, WNOHANG) != e->pid)
        return false;
    e->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    return true;
}

int tl_stop(int pid, int sig, int timeout_s)
{
    if (pid <= 0)
        return -1; /* kill(0, ...) would signal our own process group */
    kill((pid_t) pid, sig);
    exited_t e = {(pid_t) pid, -1};
    if (tl_poll(has_exited, &e, timeout_s, NULL, 0))
        return e.status;
    int wstatus;
    kill((pid_t) pid, SIGKILL);
    waitpid((pid_t) pid, &wstatus, 0);
    return -1;
}

typedef struct db_value {
    PGconn *conn;
    const char *sql;
    int nparams;
    const char *const *params;
    const char *expected;
    char *last;
} db_value_t;

static bool db_value_is(void *arg, char *seen, size_t seen_size)
{
    db_value_t *d = arg;
    free(d->last);
    d->last = tl_db_scalar(d->conn, d->sql, d->nparams, d->params);
    snprintf(seen, seen_size, "%s", d->last != NULL ? d->last : "NULL");
    return d->last != NULL && strcmp(d->last, d->expected) == 0;
}

int tl_db_wait(PGconn *conn, const char *sql, int nparams, const char *const *params,
               const char *expected, int timeout_s, char **last)
{
    db_value_t d = {conn, sql, nparams, params, expected, NULL};
    bool matched = tl_poll(db_value_is, &d, timeout_s, NULL, 0);
    if (!matched && last != NULL)
        *last = d.last;
    else
        free(d.last);
    return matched;
}

static const char instance_lock_sql[] =
    "SELECT pg_advisory_lock(steward.lock_class(), steward.instance_lock_objid($1, $2))";
static const char instance_unlock_sql[] =
    "SELECT pg_advisory_unlock(steward.lock_class(), steward.instance_lock_objid($1, $2))";

PGconn *tl_hold_instance_lock(const char *db_url, const char *process, const char *key)
{
    PGconn *holder = tl_db_connect(db_url);
    const char *params[2] = {process, key};
    PGresult *res = PQexecParams(holder, instance_lock_sql, 2, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "lock of %s/%s: %s", process, key,
                  PQerrorMessage(holder));
    PQclear(res);
    return holder;
}

void tl_release_instance_lock(PGconn *holder, const char *process, const char *key)
{
    const char *params[2] = {process, key};
    PQclear(PQexecParams(holder, instance_unlock_sql, 2, NULL, params, NULL, NULL, 0));
    PQfinish(holder);
}

void tl_wait_lock_waiters(PGconn *conn, const char *application, int n, int timeout_s,
                          const char *what)
{
    char expected[16];
    snprintf(expected, sizeof expected, "%d", n);
    const char *params[1] = {application};
    int matched =
        application != NULL
            ? tl_db_wait(conn,
                         "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                         "AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                         1, params, expected, timeout_s, NULL)
            : tl_db_wait(conn,
                         "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                         "current_database() AND wait_event_type = 'Lock' AND wait_event = "
                         "'advisory'",
                         0, NULL, expected, timeout_s, NULL);
    ck_assert_msg(matched, "%s", what);
}

/* ---- HTTP ------------------------------------------------------------------- */

static size_t collect(char *data, size_t size, size_t nmemb, void *arg)
{
    char **buf = arg;
    size_t old = *buf != NULL ? strlen(*buf) : 0, n = size * nmemb;
    char *grown = realloc(*buf, old + n + 1);
    ck_assert_ptr_nonnull(grown);
    memcpy(grown + old, data, n);
    grown[old + n] = '\0';
    *buf = grown;
    return n;
}

char *tl_http_get(const char *url, long *status)
{
    CURL *curl = curl_easy_init();
    char *body = calloc(1, 1);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(curl);
    *status = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(curl);
    return body;
}

typedef struct listening {
    const char *log_path;
    char *base;
    size_t size;
} listening_t;

static bool logged_listening(void *arg, char *seen, size_t seen_size)
{
    const listening_t *l = arg;
    char *log = tl_read_file(l->log_path);
    bool found = false;
    (void) seen;
    (void) seen_size;
    for (char *line = strtok(log, "\n"); line != NULL && !found; line = strtok(NULL, "\n")) {
        json_t *doc = json_loads(line, 0, NULL);
        const char *msg = json_string_value(json_object_get(doc, "msg"));
        const char *address = json_string_value(json_object_get(doc, "address"));
        if (msg != NULL && strcmp(msg, "http listening") == 0 && address != NULL) {
            snprintf(l->base, l->size, "http://%s", address);
            found = true;
        }
        json_decref(doc);
    }
    free(log);
    return found;
}

typedef struct http_status {
    const char *url;
    long expected;
} http_status_t;

static bool http_status_is(void *arg, char *seen, size_t seen_size)
{
    const http_status_t *h = arg;
    long status;
    char *body = tl_http_get(h->url, &status);
    snprintf(seen, seen_size, "%ld %.200s", status, body);
    free(body);
    return status == h->expected;
}

void tl_wait_http_status(const char *url, long expected, int timeout_s)
{
    char what[512];
    snprintf(what, sizeof what, "GET %s to answer %ld", url, expected);
    tl_wait_until(http_status_is, &(http_status_t){url, expected}, timeout_s, what, NULL);
}

typedef struct metric_line {
    const char *url, *line;
} metric_line_t;

static bool metric_shown(void *arg, char *seen, size_t seen_size)
{
    const metric_line_t *m = arg;
    long status;
    char *body = tl_http_get(m->url, &status);
    bool found = status == 200 && tl_contains(body, m->line);
    snprintf(seen, seen_size, "status %ld, %zu bytes without it", status, strlen(body));
    free(body);
    return found;
}

void tl_wait_metric(const char *base, const char *line, int timeout_s)
{
    char url[300], what[512];
    snprintf(url, sizeof url, "%s/metrics", base);
    snprintf(what, sizeof what, "/metrics to show %s", line);
    tl_wait_until(metric_shown, &(metric_line_t){url, line}, timeout_s, what, NULL);
}

void tl_wait_http_listening(const char *log_path, char *base, size_t size)
{
    tl_wait_until(logged_listening, &(listening_t){log_path, base, size}, 30,
                  "steward to log \"http listening\" with an address", log_path);
}

char *tl_am_state(const char *am, const char *key)
{
    char url[1024], filter[256];
    long status;
    CURL *curl = curl_easy_init();
    snprintf(filter, sizeof filter, "key=\"%s\"", key);
    char *escaped = curl_easy_escape(curl, filter, 0);
    snprintf(url, sizeof url, "%s/api/v2/alerts?filter=%s", am, escaped);
    curl_free(escaped);
    curl_easy_cleanup(curl);
    char *body = tl_http_get(url, &status);
    ck_assert_msg(status == 200, "GET %s: %ld %s", url, status, body);
    json_t *list = json_loads(body, 0, NULL);
    free(body);
    ck_assert_ptr_nonnull(list);
    const char *state = "";
    if (json_array_size(list) > 0)
        state = json_string_value(
            json_object_get(json_object_get(json_array_get(list, 0), "status"), "state"));
    char *copy = strdup(state != NULL ? state : "");
    json_decref(list);
    return copy;
}

typedef struct am_alert {
    const char *am, *key, *expected;
} am_alert_t;

static bool am_state_is(void *arg, char *seen, size_t seen_size)
{
    const am_alert_t *a = arg;
    char *state = tl_am_state(a->am, a->key);
    bool match = strcmp(state, a->expected) == 0;
    snprintf(seen, seen_size, "'%s'", state);
    free(state);
    return match;
}

void tl_wait_am(const char *am, const char *key, const char *expected, int timeout_s)
{
    char what[512];
    snprintf(what, sizeof what, "Alertmanager to show %s as '%s'", key, expected);
    tl_wait_until(am_state_is, &(am_alert_t){am, key, expected}, timeout_s, what, NULL);
}

json_t *tl_json_find(json_t *array, const char *field, const char *value)
{
    size_t i;
    json_t *item;
    json_array_foreach(array, i, item)
    {
        const char *v = json_string_value(json_object_get(item, field));
        if (v != NULL && strcmp(v, value) == 0)
            return item;
    }
    ck_abort_msg("no item with %s = %s among %zu", field, value, json_array_size(array));
    return NULL;
}

int tl_hold_port(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t addr_len = sizeof addr;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *) &addr, sizeof addr), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *) &addr, &addr_len), 0);
    *port = ntohs(addr.sin_port);
    return fd;
}
