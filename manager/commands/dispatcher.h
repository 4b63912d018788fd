/*
 * dispatcher - delivers the command outbox (steward.commands) to Kafka.
 *
 * A command is one outbox row: one send of one step's command, queued by
 * the transaction that moved the instance (or decided the re-send). The
 * dispatcher claims due rows (FOR UPDATE SKIP LOCKED; the claim is a lease:
 * a later next_attempt_at, so replicas never send the same row at once),
 * produces them with librdkafka's idempotent producer (acks=all) to the
 * row's topic, keyed by the instance key, with CloudEvents binary-mode
 * headers (dispatcher_headers()), and marks a row sent (sent_at) only
 * after its delivery report says the broker has it.
 *
 * The lease: a claim holds a row for dispatch.lease (a few seconds), and
 * while its delivery is in flight (up to dispatch.timeout, librdkafka's
 * message.timeout.ms) the dispatcher renews it every third of a lease. So
 * a live dispatcher keeps its rows however long the broker takes, and the
 * rows of one that died (SIGKILL, a lost host) are free again one lease
 * after its last renewal, not a delivery timeout later: the instance's
 * later commands (re-sends, hand-offs) wait at most that long behind them.
 * A dispatcher that cannot renew (its database is gone) for two thirds of
 * a lease takes back what librdkafka has not yet transmitted, so that a row
 * another replica may claim next is not also sent from here; a message
 * already on the wire may still arrive, under the same ce_id.
 *
 * Streaming: the dispatcher claims up to dispatch.batch_size rows at a
 * time and produces them without waiting for the reports of those before
 * (at most four batches in flight), marks what the reports said in bulk,
 * and claims again at once when a claim came back full, when a mark may
 * have freed an instance's next row, or when a transaction that queued
 * commands commits (cmdwake: LISTEN/NOTIFY). Rows that fall due by time
 * alone (a backoff passed, a dead replica's lease run out) are found by a
 * look every dispatch.interval. The outbox stays the record: nothing is
 * handed over in memory, and a restart finds everything where it was.
 *
 * Order: a row is never claimed while an earlier unsent row of the same
 * instance exists, so one instance's commands reach its topic in the order
 * they were queued, retries included: a re-send is claimed only once the
 * attempt before it is marked sent, after the broker acknowledged it.
 *
 * Cancelled rows (cancelled_at: the instance left the step, see
 * cmdq_left()) are never claimed and hold nothing back. A row cancelled
 * after it was claimed is found at the next renewal: what librdkafka still
 * holds is purged from its queue and the cancelled rows are dropped at
 * their delivery report, never marked sent (the others purged with them
 * are released to be claimed again at once, no attempt counted). One that
 * had already left is recorded as it happened: sent, the cancellation
 * cleared and last_error saying it was delivered after it was cancelled. A
 * row is sent or cancelled, never both (a CHECK).
 *
 * Failure: a delivery that fails (topic missing - the producer never asks
 * the broker to create one -, message too large, not authorized, timed
 * out) counts an attempt, keeps the broker's error in last_error and waits
 * dispatcher_backoff_ms() before the next; it also opens a dispatch_failed
 * alert for the (process, topic), in the same transaction. The first
 * delivery to that (process, topic) that works resolves it. Nothing is
 * dropped: a row stays until it is sent or cancelled.
 *
 * Delivery is at least once under one id: a crash between the delivery
 * report and the mark sends the row again when its lease runs out, with
 * the same ce_id. Every attempt of one step entry (re-sends, hand-offs,
 * an operator's retry) carries the same idempotency key
 * (cmdq_idempotency_key()), the next entry of a state a new one: that is
 * what a service deduplicates on.
 *
 * Pause: processes named in dispatch.paused (or every one, "*") are not
 * claimed; their rows wait, in order, until the pause is lifted (SIGHUP).
 *
 * Replicas: each steward run has one dispatcher, on its own thread, with
 * its own PostgreSQL connection and producer. Their claims are disjoint
 * (FOR UPDATE SKIP LOCKED, then the lease), so they share the rows; the
 * rows a killed replica had claimed are due again one dispatch.lease after
 * its last renewal, and a survivor claims them at its next look.
 */
#ifndef STEWARD_DISPATCHER_H
#define STEWARD_DISPATCHER_H

#include "common/err.h"
#include "manager/runtime/generation.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dispatcher dispatcher_t;

typedef struct dispatcher_config {
    const char *conninfo;
    const char *brokers;
    const char *const *kafka_props; /* "name=value"; applied before idempotence and acks */
    size_t n_kafka_props;
    int64_t interval_ms;    /* between looks at the outbox when nothing wakes it */
    int64_t timeout_ms;     /* one delivery (librdkafka's message.timeout.ms) */
    int64_t lease_ms;       /* a claim's hold on a row, renewed while in flight */
    const char *source;     /* ce_source; "${process}" in it is the process name */
    int64_t max_backoff_ms; /* the longest wait between attempts of a row */
    long batch_size;        /* rows claimed per look, at most */
    const char *owner;      /* the team paged when a process has no definition loaded */
} dispatcher_config_t;

typedef struct dispatcher_stats {
    size_t claimed;
    size_t sent;
    size_t failed;
    size_t dropped; /* cancelled after they were claimed, taken back unsent */
} dispatcher_stats_t;

/*
 * Returns a new dispatcher (free with dispatcher_free()), or NULL with the
 * reason in errstr and its class in *cls: ERR_INVALID when librdkafka
 * refuses the producer's configuration (waiting cannot help),
 * ERR_TRANSIENT when the database could not be reached, ERR_FATAL when out
 * of memory.
 */
dispatcher_t *dispatcher_new(const dispatcher_config_t *cfg, err_class_t *cls, char *errstr,
                             size_t errstr_size);

/* Waits up to the delivery timeout for what is in flight and records it,
 * then frees everything. NULL is a no-op. */
void dispatcher_free(dispatcher_t *d);

/*
 * Takes up a generation: the owners of its processes and its routes, for
 * dispatch_failed alerts. gen is borrowed until the next call or
 * dispatcher_free().
 */
void dispatcher_set_generation(dispatcher_t *d, const gen_t *gen);

/* Takes up a pause list (dispatch.paused: "" none, "*" all, else names
 * separated by commas; copied). */
void dispatcher_set_paused(dispatcher_t *d, const char *list);

/*
 * One step: claims due rows when something woke it or an interval has
 * passed since the last look, produces them, serves the delivery reports
 * and records what they said, then waits up to wait_ms for something to
 * do (not at all when more may be claimable at once). stats counts this
 * step. Runs on the dispatcher's thread only.
 */
err_class_t dispatcher_tick(dispatcher_t *d, int64_t wait_ms, dispatcher_stats_t *stats,
                            char *errstr, size_t errstr_size);

/* Rows produced and not yet recorded. */
size_t dispatcher_in_flight(const dispatcher_t *d);

/*
 * Passes until *stop is set, taking up reloaded generations and pause
 * lists from `cur` between passes; then waits at most drain_ms for what is
 * in flight.
 */
void dispatcher_run(dispatcher_t *d, volatile sig_atomic_t *stop, int64_t drain_ms,
                    gen_current_t *cur);

/*
 * The pure parts, public for tests/unit/test_dispatcher.c.
 */

/* A command row as the dispatcher reads it; every string borrowed. */
typedef struct dispatcher_command {
    const char *process, *key, *state, *type, *ce_id;
    const char *idempotency_key; /* cmdq_idempotency_key() of its step */
    const char *time;            /* RFC 3339 of when it was queued */
    const char *traceparent;     /* the row's (migration 0024); NULL: none */
    const char *tracestate;      /* NULL: none */
    long step, attempt;
    long long token;
} dispatcher_command_t;

/* The headers every command carries, in order; with a trace context up to
 * four more. */
#define DISPATCHER_N_HEADERS   14
#define DISPATCHER_MAX_HEADERS (DISPATCHER_N_HEADERS + 4)

/* dispatch.source's default: an absolute URI, as CloudEvents recommends. */
#define DISPATCHER_SOURCE_DEFAULT "urn:steward:${process}"

typedef struct dispatcher_header {
    const char *name;   /* static */
    char value_buf[24]; /* numbers are written here */
    const char *value;  /* borrowed from the command, or value_buf */
} dispatcher_header_t;

/*
 * Fills out[0..DISPATCHER_N_HEADERS) with the CloudEvents binary-mode
 * headers of c: ce_specversion "1.0", ce_id, ce_source (`source` with
 * each "${process}" replaced by the process name; NULL:
 * DISPATCHER_SOURCE_DEFAULT), ce_type, ce_time, content-type
 * "application/json" (the datacontenttype of binary mode), the extension
 * ce_idempotencykey and the same value as steward_idempotency_key (for a
 * consumer that reads no CloudEvents), and the extensions
 * ce_stewardprocess, ce_stewardkey, ce_stewardstate, ce_stewardstep,
 * ce_stewardattempt, ce_stewardtoken (decimal). source_buf (source_size
 * bytes) holds ce_source; a source too long for it is cut. Then, when the
 * row continues a trace, `traceparent` and its CloudEvents
 * distributed-tracing extension `ce_traceparent` (the same value: a
 * consumer's Kafka instrumentation reads the first, a CloudEvents SDK the
 * second, as with the idempotency key), and with a tracestate
 * `tracestate` and `ce_tracestate`. `out` holds DISPATCHER_MAX_HEADERS.
 * Returns how many it filled. Values borrow from c and the buffers.
 */
size_t dispatcher_headers(const dispatcher_command_t *c, const char *source,
                          dispatcher_header_t *out, char *source_buf, size_t source_size);

/* The wait before attempt `attempts` + 1 after `attempts` failed ones (1
 * for the first failure): 1 s doubling, capped at max_backoff_ms. */
int64_t dispatcher_backoff_ms(int attempts, int64_t max_backoff_ms);

#endif
