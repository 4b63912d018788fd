/*
 * receiver - a scripted HTTP server for the alerting tests (receiver.h).
 *
 * A request's life: MHD calls rcv_handle() once with the headers, once per
 * chunk of body, and once more with nothing left; on that last call the
 * request is recorded, takes its scripted answer, waits out any hang, and
 * is answered. rcv_completed() frees what the request held, however it
 * ended.
 */
#include "receiver.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One scripted answer, waiting in the FIFO. */
typedef struct rcv_answer {
    int status;
    char *body;
    char *retry_after;
    int hang_ms;
    struct rcv_answer *next;
} rcv_answer_t;

struct rcv {
    pthread_mutex_t lock;  /* guards everything below but daemon/port/url/holder */
    pthread_cond_t change; /* CLOCK_MONOTONIC; a request is done, or stopping was set */
    bool stopping;         /* the daemon is being stopped: hangs end now */

    rcv_answer_t *script; /* next answer to use */
    rcv_answer_t **script_tail;

    rcv_request_t *reqs; /* in order of arrival */
    size_t n, cap;
    size_t done; /* requests answered or given up */

    /* Touched only by the test's thread (rcv_new, rcv_set_down, rcv_free). */
    struct MHD_Daemon *daemon; /* NULL while down */
    uint16_t port;
    int holder; /* while down: a bound, non-listening socket on port; else -1 */
    char url[32];
};

/* A growable byte buffer, always NUL-terminated once anything was added. */
typedef struct rcv_buf {
    char *data;
    size_t len, cap;
} rcv_buf_t;

/* Out of memory in a test helper, on any thread: nothing sensible to do
 * but stop the test process (ck_abort is only for the test's own thread). */
static void *rcv_oom(void *p)
{
    if (p == NULL) {
        fputs("receiver: out of memory\n", stderr);
        abort();
    }
    return p;
}

static char *rcv_strdup(const char *s)
{
    return s == NULL ? NULL : rcv_oom(strdup(s));
}

static void rcv_buf_add(rcv_buf_t *b, const char *data, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap == 0 ? 256 : b->cap;
        while (cap < b->len + len + 1)
            cap *= 2;
        b->data = rcv_oom(realloc(b->data, cap));
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

static void rcv_buf_str(rcv_buf_t *b, const char *s)
{
    rcv_buf_add(b, s, strlen(s));
}

/* The monotonic time `ms` from now, for pthread_cond_timedwait. */
static struct timespec rcv_deadline(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long) (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static enum MHD_Result rcv_add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    rcv_buf_t *b = cls;
    (void) kind;
    rcv_buf_str(b, key);
    rcv_buf_str(b, ": ");
    rcv_buf_str(b, value != NULL ? value : "");
    rcv_buf_str(b, "\n");
    return MHD_YES;
}

/* PagerDuty's answer to an accepted event, echoing the event's dedup_key
 * (PagerDuty makes one up when the event has none; so do we, from the
 * request's index). Returns a new string. */
static char *rcv_default_body(const rcv_buf_t *req_body, size_t index)
{
    json_t *event =
        json_loadb(req_body->data != NULL ? req_body->data : "", req_body->len, 0, NULL);
    const char *key = json_string_value(json_object_get(event, "dedup_key"));
    char made_up[32];

    if (key == NULL) {
        snprintf(made_up, sizeof made_up, "rcv-%zu", index);
        key = made_up;
    }
    json_t *answer = json_pack("{s:s, s:s, s:s}", "status", "success", "message", "Event processed",
                               "dedup_key", key);
    char *text = rcv_oom(json_dumps(answer, JSON_COMPACT));
    json_decref(answer);
    json_decref(event);
    return text;
}

static void rcv_answer_free(rcv_answer_t *a)
{
    if (a == NULL)
        return;
    free(a->body);
    free(a->retry_after);
    free(a);
}

/* Marks request `index` done with `status` and wakes rcv_wait(). */
static void rcv_finish(rcv_t *r, size_t index, int status)
{
    pthread_mutex_lock(&r->lock);
    r->reqs[index].status = status;
    r->done++;
    pthread_cond_broadcast(&r->change);
    pthread_mutex_unlock(&r->lock);
}

/* MHD's access handler; runs on the request's connection thread. The
 * request's body accumulates in *con_cls (a rcv_buf_t) until MHD calls
 * with nothing left to upload. */
static enum MHD_Result rcv_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    rcv_t *r = cls;
    rcv_buf_t *body = *con_cls;
    (void) version;

    if (body == NULL) {
        /* Headers only so far: MHD calls again with the body. */
        *con_cls = rcv_oom(calloc(1, sizeof *body));
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        rcv_buf_add(body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }

    rcv_buf_t headers = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, rcv_add_header, &headers);
    rcv_request_t req = {
        .method = rcv_strdup(method),
        .path = rcv_strdup(url),
        .content_type = rcv_strdup(
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE)),
        .headers = headers.data != NULL ? headers.data : rcv_strdup(""),
        .body = rcv_oom(calloc(1, body->len + 1)),
        .body_len = body->len,
    };
    if (body->len > 0)
        memcpy(req.body, body->data, body->len);

    /* Recording and taking the answer under one lock: request i gets the
     * i-th scripted answer, whatever order the threads run in. */
    pthread_mutex_lock(&r->lock);
    if (r->n == r->cap) {
        r->cap = r->cap == 0 ? 16 : r->cap * 2;
        r->reqs = rcv_oom(realloc(r->reqs, r->cap * sizeof *r->reqs));
    }
    size_t index = r->n++;
    r->reqs[index] = req; /* now owned by r */
    rcv_answer_t *answer = r->script;
    if (answer != NULL) {
        r->script = answer->next;
        if (r->script == NULL)
            r->script_tail = &r->script;
    }
    pthread_mutex_unlock(&r->lock);

    if (answer == NULL) {
        answer = rcv_oom(calloc(1, sizeof *answer));
        answer->status = MHD_HTTP_ACCEPTED;
        answer->body = rcv_default_body(body, index);
    }

    bool cut_off = false;
    if (answer->hang_ms > 0) {
        struct timespec until = rcv_deadline(answer->hang_ms);
        pthread_mutex_lock(&r->lock);
        while (!r->stopping && pthread_cond_timedwait(&r->change, &r->lock, &until) != ETIMEDOUT)
            ;
        cut_off = r->stopping;
        pthread_mutex_unlock(&r->lock);
    }

    enum MHD_Result ret = MHD_NO; /* MHD closes the connection unanswered */
    int status = 0;
    if (!cut_off && answer->status != 0) {
        const char *text = answer->body != NULL ? answer->body : "";
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(strlen(text), (void *) text, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (answer->retry_after != NULL)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, answer->retry_after);
        ret = MHD_queue_response(conn, (unsigned int) answer->status, resp);
        MHD_destroy_response(resp);
        if (ret == MHD_YES)
            status = answer->status;
    }
    rcv_answer_free(answer);
    rcv_finish(r, index, status);
    return ret;
}

/* MHD's request-completed notice; frees the body buffer of any request,
 * also one whose client went away mid-upload. */
static void rcv_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    rcv_buf_t *body = *con_cls;
    (void) cls;
    (void) conn;
    (void) toe;
    if (body != NULL) {
        free(body->data);
        free(body);
        *con_cls = NULL;
    }
}

/* MHD's error log, on any of its threads. A handler's MHD_NO (a scripted
 * drop, a hang cut short) is logged by MHD as an "internal error"; those
 * are the receiver's own doing, recorded as status 0, and left out so the
 * test's output shows only real trouble. */
static void rcv_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void) cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (strncmp(msg, "Application reported internal error", 35) == 0)
        return;
    fprintf(stderr, "receiver: libmicrohttpd: %s", msg);
}

/* Starts the daemon on r->port (0: any), then learns the port it got.
 * One thread per connection, so a hang holds only its connection. MHD sets
 * SO_REUSEADDR on its listening socket by default on Linux, which is what
 * lets a restart bind the port again despite the old connections in
 * TIME_WAIT and the holder socket (see rcv_set_down). */
static void rcv_start(rcv_t *r)
{
    struct sockaddr_in addr = {
        .sin_family = AF_INET,
        .sin_port = htons(r->port),
        .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
    };
    r->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, r->port,
        NULL, NULL, rcv_handle, r, MHD_OPTION_EXTERNAL_LOGGER, rcv_log, NULL, MHD_OPTION_SOCK_ADDR,
        &addr, MHD_OPTION_NOTIFY_COMPLETED, rcv_completed, r, MHD_OPTION_END);
    if (r->daemon == NULL)
        ck_abort_msg("receiver: cannot listen on 127.0.0.1:%u", (unsigned) r->port);
    if (r->port == 0) {
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(r->daemon, MHD_DAEMON_INFO_BIND_PORT);
        ck_assert_msg(info != NULL && info->port != 0, "receiver: MHD did not report its port");
        r->port = info->port;
        snprintf(r->url, sizeof r->url, "http://127.0.0.1:%u", (unsigned) r->port);
    }
}

/* Ends every hang, then stops the daemon (which joins the connection
 * threads, so none is left touching r). */
static void rcv_stop(rcv_t *r)
{
    if (r->daemon == NULL)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->change);
    pthread_mutex_unlock(&r->lock);

    MHD_stop_daemon(r->daemon);
    r->daemon = NULL;

    pthread_mutex_lock(&r->lock);
    r->stopping = false;
    pthread_mutex_unlock(&r->lock);
}

rcv_t *rcv_new(void)
{
    rcv_t *r = rcv_oom(calloc(1, sizeof *r));
    pthread_condattr_t attr;

    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->change, &attr);
    pthread_condattr_destroy(&attr);
    r->script_tail = &r->script;
    r->holder = -1;
    rcv_start(r);
    return r;
}

void rcv_free(rcv_t *r)
{
    if (r == NULL)
        return;
    rcv_stop(r);
    if (r->holder >= 0)
        close(r->holder);
    while (r->script != NULL) {
        rcv_answer_t *next = r->script->next;
        rcv_answer_free(r->script);
        r->script = next;
    }
    for (size_t i = 0; i < r->n; i++)
        rcv_request_clear(&r->reqs[i]);
    free(r->reqs);
    pthread_cond_destroy(&r->change);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

const char *rcv_url(const rcv_t *r)
{
    return r->url;
}

void rcv_push(rcv_t *r, int status, const char *body, const char *retry_after, int hang_ms)
{
    rcv_answer_t *a = rcv_oom(calloc(1, sizeof *a));
    a->status = status;
    a->body = rcv_strdup(body);
    a->retry_after = rcv_strdup(retry_after);
    a->hang_ms = hang_ms;

    pthread_mutex_lock(&r->lock);
    *r->script_tail = a; /* now owned by r */
    r->script_tail = &a->next;
    pthread_mutex_unlock(&r->lock);
}

void rcv_set_down(rcv_t *r, bool down)
{
    if (down && r->daemon != NULL) {
        rcv_stop(r);
        /*
         * Keep the port while down: a socket bound to it but not listening
         * makes connects fail with ECONNREFUSED just as a free port does,
         * and stops an outgoing connection of this or another process from
         * taking the port as its local end meanwhile, which would make the
         * restart fail. Best effort: without it the restart usually works.
         */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        struct sockaddr_in addr = {
            .sin_family = AF_INET,
            .sin_port = htons(r->port),
            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
        };
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                        bind(fd, (struct sockaddr *) &addr, sizeof addr) != 0)) {
            close(fd);
            fd = -1;
        }
        r->holder = fd;
    } else if (!down && r->daemon == NULL) {
        rcv_start(r);
        if (r->holder >= 0)
            close(r->holder);
        r->holder = -1;
    }
}

size_t rcv_count(rcv_t *r)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->n;
    pthread_mutex_unlock(&r->lock);
    return n;
}

rcv_request_t rcv_get(rcv_t *r, size_t i)
{
    rcv_request_t copy = {0};

    pthread_mutex_lock(&r->lock);
    size_t n = r->n;
    if (i < n) {
        const rcv_request_t *req = &r->reqs[i];
        copy = *req;
        copy.method = rcv_strdup(req->method);
        copy.path = rcv_strdup(req->path);
        copy.content_type = rcv_strdup(req->content_type);
        copy.headers = rcv_strdup(req->headers);
        copy.body = rcv_oom(malloc(req->body_len + 1));
        memcpy(copy.body, req->body, req->body_len + 1);
    }
    pthread_mutex_unlock(&r->lock);
    ck_assert_msg(i < n, "receiver: request %zu asked for, %zu received", i, n);
    return copy;
}

void rcv_request_clear(rcv_request_t *req)
{
    if (req == NULL)
        return;
    free(req->method);
    free(req->path);
    free(req->content_type);
    free(req->headers);
    free(req->body);
    memset(req, 0, sizeof *req);
}

bool rcv_wait(rcv_t *r, size_t count, int timeout_ms)
{
    struct timespec until = rcv_deadline(timeout_ms);
    bool reached;

    pthread_mutex_lock(&r->lock);
    while (r->done < count && pthread_cond_timedwait(&r->change, &r->lock, &until) != ETIMEDOUT)
        ;
    reached = r->done >= count;
    pthread_mutex_unlock(&r->lock);
    return reached;
}

typedef struct arrived {
    rcv_t *r;
    size_t count;
} arrived_t;

static bool have_arrived(void *arg, char *seen, size_t seen_size)
{
    const arrived_t *a = arg;
    size_t n = rcv_count(a->r);
    snprintf(seen, seen_size, "%zu requests", n);
    return n >= a->count;
}

void rcv_wait_arrived(rcv_t *r, size_t count, int timeout_s)
{
    char what[64];
    snprintf(what, sizeof what, "%zu requests at the receiver", count);
    tl_wait_until(have_arrived, &(arrived_t){r, count}, timeout_s, what, NULL);
}
