/*
 * metrics - the process's counters and gauges, shared by every thread.
 * They are the one global state Steward keeps besides signal flags; the
 * HTTP module (manager/api/http_metrics.c) renders them in Prometheus text format.
 *
 * Counters and the batch-duration histogram are atomics any thread adds
 * to. What intake alone knows of Kafka (how many partitions it owns, how
 * far each lags behind its high watermark) is published here too, because
 * the HTTP threads cannot ask librdkafka: the partition count is an atomic,
 * the lag table sits behind a mutex private to metrics.c.
 */
#ifndef STEWARD_METRICS_H
#define STEWARD_METRICS_H

#include "formats/decode.h"
#include "engine/engine.h"
#include "manager/sinks/routes.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bounds of the batch-duration buckets, in milliseconds. */
#define METRICS_BATCH_BUCKETS 12
extern const int64_t metrics_batch_bounds_ms[METRICS_BATCH_BUCKETS];

/* The worker threads whose progress /healthz watches. */
typedef enum metrics_thread {
    METRICS_INTAKE, /* the main thread: start-up, then intake */
    METRICS_SCHEDULER,
    METRICS_NOTIFIER,
    METRICS_DISPATCHER,
    METRICS_N_THREADS,
} metrics_thread_t;

typedef struct metrics {
    atomic_llong events_read;                 /* Kafka messages consumed */
    atomic_llong events_ignored;              /* no process declares their type */
    atomic_llong outcomes[ENGINE_N_OUTCOMES]; /* judgements, by outcome */
    atomic_llong rejected[DECODE_N_REASONS];  /* rejected messages, by reason */
    /* Malformed W3C traceparents ignored, by decode_trace_t (the event
     * itself is judged without one). */
    atomic_llong traceparent_ignored[DECODE_TRACE_N];
    /* Malformed tracestates dropped (with a valid traceparent, kept), by
     * decode_tracestate_t. */
    atomic_llong tracestate_ignored[DECODE_TRACESTATE_N];
    atomic_llong batches_committed;
    atomic_llong batches_retried; /* conflicts and lost connections */
    atomic_llong partitions_fenced;
    atomic_llong parked_expired; /* reorder windows that passed */
    /* Instance locks a batch awaited in vain (held outside Steward), the
     * events set aside in steward.deferred, and those judged from there. */
    atomic_llong instance_lock_timeouts;
    atomic_llong events_deferred;
    atomic_llong deferred_judged;
    atomic_llong alerts_opened; /* by the scheduler */
    /* notifications by sink type and verdict (delivered, retried, failed) */
    atomic_llong notifications[SINK_N_TYPES][SINK_N_VERDICTS];
    atomic_llong commands_sent;     /* command rows the broker acknowledged */
    atomic_llong dispatch_failures; /* command deliveries that failed (each retried) */

    /* Committed batches of at least one message, by duration (retries
     * included): bucket i counts those no longer than bound i and longer
     * than bound i - 1; the last one those longer than every bound. */
    atomic_llong batch_buckets[METRICS_BATCH_BUCKETS + 1];
    atomic_llong batch_ms_sum;

    atomic_llong partitions_assigned; /* claimed by intake now; 0 while none */
    atomic_llong group_joined;        /* 1 once intake got its first assignment, empty or not */
    atomic_llong kafka_reachable;     /* 1 while the last metadata request was answered */
    /* Requests to the schema registry (or its directory), by
     * registry_result_t (found, not_found, unavailable); cache hits are
     * not requests. registry_down: 1 while the last request found it
     * unavailable (steward_schema_registry_up is its opposite, so that it
     * is 1 where no registry is configured). */
    atomic_llong registry_requests[3];
    atomic_llong registry_down;

    /* When each worker thread last made progress (monotonic ms); 0 before
     * it started. See metrics_beat(). */
    atomic_llong beats[METRICS_N_THREADS];
} metrics_t;

/* The thread's name as /healthz prints it. */
const char *metrics_thread_name(metrics_thread_t t);

/* Records that thread t is making progress now: once per pass of its loop
 * and once per wait (backoff, retry) inside one. Any thread, lock-free. */
void metrics_beat(metrics_thread_t t);

/* When thread t last beat (monotonic ms), 0 if never. */
int64_t metrics_last_beat(metrics_thread_t t);

/* Forgets thread t's beats: it stopped on purpose (a clean stop). */
void metrics_beat_stop(metrics_thread_t t);

/* The first worker thread that has started and not beaten for more than
 * stall_ms at now_ms (monotonic), with how long in *for_ms (may be NULL);
 * -1 when none is stuck. What /healthz and the systemd watchdog judge
 * liveness by. Any thread, lock-free. */
int metrics_stalled(int64_t now_ms, int64_t stall_ms, int64_t *for_ms);

extern metrics_t metrics;

static inline void metrics_add(atomic_llong *counter, long long n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/* Sets a gauge (group_joined, kafka_reachable). Any thread. */
static inline void metrics_set(atomic_llong *gauge, long long value)
{
    atomic_store_explicit(gauge, value, memory_order_relaxed);
}

static inline long long metrics_get(atomic_llong *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

/* Records one committed batch that took `ms` milliseconds. Any thread. */
void metrics_observe_batch(int64_t ms);

/* Intake's assignment: how many partitions it has claimed (0 after a
 * revoke). Called on the intake thread, read by /readyz. */
void metrics_set_assigned(long long partitions);

/* The consumer lag of one partition intake owns (messages between what it
 * has read and the high watermark; negative values count as 0). Called
 * on the intake thread once a second; takes the table's mutex. */
void metrics_set_partition_lag(const char *topic, int32_t partition, int64_t lag);

/* Forgets every partition's lag (intake lost or gave up its assignment). */
void metrics_clear_partitions(void);

typedef struct metrics_lag {
    char topic[256]; /* Kafka topic names have at most 249 characters */
    int32_t partition;
    int64_t lag;
} metrics_lag_t;

/*
 * A copy of the lag table, in the order partitions were first reported,
 * into *out (free() it; NULL when empty). Returns how many entries; on
 * out of memory returns 0 with *out NULL. Any thread; takes the mutex.
 */
size_t metrics_partition_lags(metrics_lag_t **out);

/*
 * The scheduler's watch over each process's watermark, one entry per
 * process whose watermark it computed in its last pass:
 * steward_watermark_lag_seconds, steward_watermark_blind and /readyz's
 * `watermarks` read it. A cause is one of the ways a watermark stops
 * judging deadlines (docs/operations.md, "Blind").
 */
typedef enum metrics_watch_cause {
    METRICS_WATCH_NO_WATERMARK, /* a topic it needs has no partition read */
    METRICS_WATCH_FROZEN,       /* a partition is read but its watermark stands still */
    METRICS_WATCH_UNREAD,       /* a partition is not read for scheduler.blind_after */
    METRICS_WATCH_OLD_VERSION,  /* a topic only a version not loaded reads */
    METRICS_WATCH_N_CAUSES,
} metrics_watch_cause_t;

/* The cause's name as the metric's `cause` label and /readyz print it. */
const char *metrics_watch_cause_name(metrics_watch_cause_t c);

typedef struct metrics_watch {
    char process[64];     /* names from definitions have at most 63 characters */
    int64_t watermark_ms; /* -1: none */
    bool cause[METRICS_WATCH_N_CAUSES];
    char detail[640]; /* the first cause's wording; "" when none */
} metrics_watch_t;

/* Replaces the table with n entries (copied). The scheduler's thread,
 * once per pass; takes a mutex. */
void metrics_set_watches(const metrics_watch_t *w, size_t n);

/* A copy of the table into *out (free() it; NULL when empty). Returns how
 * many. Any thread; takes the mutex. */
size_t metrics_watches(metrics_watch_t **out);

/* How many distinct (topic, type) pairs of undeclared events are counted
 * apart; later ones are counted under topic and type "other". */
#define METRICS_MAX_UNKNOWN 1000

typedef struct metrics_unknown {
    char topic[256]; /* Kafka topic names have at most 249 characters */
    char type[256];  /* cut to 255 bytes; "(none)" when no type could be read */
    long long count;
    int64_t logged_ms; /* when it was last reported for logging; 0: never */
} metrics_unknown_t;

/*
 * Counts a message whose type no loaded definition declares on its topic
 * (type NULL: none could be read; an undeclared topic). Returns true when
 * this pair was never reported or last reported log_every_ms or more
 * before now_ms (a monotonic clock): the caller logs it then, so each type
 * is logged once per interval. Any thread; takes a mutex.
 */
bool metrics_count_unknown(const char *topic, const char *type, int64_t now_ms,
                           int64_t log_every_ms);

/* A copy of the undeclared-type table into *out (free() it; NULL when
 * empty). Returns how many entries. Any thread; takes the mutex. */
size_t metrics_unknown_types(metrics_unknown_t **out);

/*
 * Time spent in a step: steward_step_duration_seconds{process, state}.
 * Observed once per instance leaving a state through a committed event
 * (the engine's time_in_state of an `advanced` history row). The labels
 * are names from definitions (at most 63 characters each), so the series
 * are bounded by the states defined; past METRICS_MAX_STEPS pairs further
 * ones are not counted (a definition set that large is a mistake).
 */
#define METRICS_STEP_BUCKETS 14
#define METRICS_MAX_STEPS    4096
extern const double metrics_step_bounds_s[METRICS_STEP_BUCKETS];

typedef struct metrics_step {
    char process[64];
    char state[64];
    long long counts[METRICS_STEP_BUCKETS + 1]; /* per bucket; the last above every bound */
    long long sum_ms;
} metrics_step_t;

/* Counts one stay of `ms` in `state` of `process`. Any thread; takes a
 * mutex (one short hash probe). Names longer than 63 bytes are cut. */
void metrics_observe_step(const char *process, const char *state, int64_t ms);

/* A copy of the step table, sorted by process then state, into *out
 * (free() it; NULL when empty). Returns how many. Any thread. */
size_t metrics_steps(metrics_step_t **out);

/*
 * The process's own figures, read from Linux's /proc: pure parsers of the
 * files' text, for the unit tests. metrics_parse_proc_stat() reads the CPU
 * time (utime + stime of /proc/self/stat, in clock ticks of ticks_per_s)
 * in seconds; metrics_parse_statm() the resident set (the second field of
 * /proc/self/statm, in pages of page_bytes) in bytes. False when the text
 * is not what they expect.
 */
bool metrics_parse_proc_stat(const char *text, double ticks_per_s, double *cpu_seconds);
bool metrics_parse_statm(const char *text, long page_bytes, double *resident_bytes);

#endif
