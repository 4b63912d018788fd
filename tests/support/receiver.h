/*
 * receiver - an HTTP server inside the test process that stands in for
 * PagerDuty's Events API v2 and for generic webhooks.
 *
 * It owns one libmicrohttpd daemon on 127.0.0.1 (a port the kernel picks,
 * kept for the receiver's life), a queue of scripted answers, and the list
 * of requests it received. A request is everything one HTTP request
 * brought (method, path, headers, body); an answer is what the receiver
 * sent back. Each request takes the next scripted answer, first pushed
 * first used; with the queue empty it gets what PagerDuty answers an
 * accepted event:
 *
 *     202 {"status":"success","message":"Event processed","dedup_key":"..."}
 *
 * with the request's dedup_key echoed (a made-up one when it has none).
 *
 * Threads: MHD runs one thread per connection, so an answer scripted to
 * hang holds only its own connection. Every function may be called from
 * any thread; a mutex guards the state the MHD threads share with the
 * test. Failures to start or restart the daemon abort the current test
 * (ck_abort), as testlib does, so call those from the test's own thread.
 *
 * Create a receiver in the test or in a checked fixture (the forked child):
 * the daemon's threads do not survive libcheck's fork.
 */
#ifndef STEWARD_RECEIVER_H
#define STEWARD_RECEIVER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rcv rcv_t; /* opaque; owns the daemon and every record */

/* One recorded request: a copy the caller owns (rcv_request_clear()). */
typedef struct rcv_request {
    char *method;       /* "POST" */
    char *path;         /* "/v2/enqueue", without the query string */
    char *content_type; /* the Content-Type header; NULL when absent */
    char *headers;      /* every request header, "Name: value\n" each, in order */
    char *body;         /* NUL-terminated (and may hold NULs: see body_len) */
    size_t body_len;
    int status; /* the status answered; 0 while the answer is pending, or when
                 * none was sent (scripted drop, or the receiver went down or
                 * was freed during a hang) */
} rcv_request_t;

/* Starts a receiver on a free loopback port. Aborts the test on failure. */
rcv_t *rcv_new(void);

/* Stops the daemon (ending any hang at once: those requests get no answer)
 * and frees everything. NULL is a no-op. */
void rcv_free(rcv_t *r);

/* "http://127.0.0.1:PORT", borrowed: valid until rcv_free(). The port
 * stays the same across rcv_set_down(). */
const char *rcv_url(const rcv_t *r);

/*
 * Appends an answer to the script. status is the HTTP status to send, or 0
 * to close the connection without answering. body (NULL: empty) is sent
 * as application/json; retry_after, when not NULL, becomes a Retry-After
 * header. hang_ms > 0 delays the answer by that long, holding only this
 * request's connection; rcv_set_down(r, true) and rcv_free() cut it short.
 * The strings are copied.
 */
void rcv_push(rcv_t *r, int status, const char *body, const char *retry_after, int hang_ms);

/*
 * down: stops the daemon, so connections are refused (ECONNREFUSED) until
 * it is up again; requests in progress are cut off without an answer.
 * up: starts it again on the same port. Calling it with the current state
 * does nothing. Aborts the test when the port cannot be bound again.
 */
void rcv_set_down(rcv_t *r, bool down);

/* How many requests have arrived (complete, body and all), answered or not. */
size_t rcv_count(rcv_t *r);

/*
 * A copy of the i-th request to arrive (0-based; the order in which they
 * took their scripted answers). Aborts the test when i >= rcv_count().
 * Free it with rcv_request_clear().
 */
rcv_request_t rcv_get(rcv_t *r, size_t i);

/* Frees what a rcv_request_t holds and zeroes it. */
void rcv_request_clear(rcv_request_t *req);

/*
 * Blocks until at least `count` requests are done (answered, or given up
 * without an answer) or timeout_ms passes. Returns true when they are.
 */
bool rcv_wait(rcv_t *r, size_t count, int timeout_ms);

/* Waits up to timeout_s until at least `count` requests have arrived
 * (answered or not, so a hanging one counts); aborts the test otherwise. */
void rcv_wait_arrived(rcv_t *r, size_t count, int timeout_s);

#endif
