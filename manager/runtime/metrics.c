/*
 * metrics - the counters, the histogram and the lag table; see metrics.h.
 */
#include "manager/runtime/metrics.h"

#include "common/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

metrics_t metrics;

/* From a few milliseconds (a small batch on a local database) to the ten
 * seconds of a batch retried against a database that went away. */
const int64_t metrics_batch_bounds_ms[METRICS_BATCH_BUCKETS] = {
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};

/* The lag table: one entry per owned partition. Written by intake once a
 * second, read by each scrape; a mutex is simpler than anything lock-free
 * and costs nothing at that rate. */
static pthread_mutex_t lag_lock = PTHREAD_MUTEX_INITIALIZER;
static metrics_lag_t *lags;
static size_t n_lags, cap_lags;

/* From a tenth of a second (a service answering at once) to a week (a
 * person or a customer in the loop). */
const double metrics_step_bounds_s[METRICS_STEP_BUCKETS] = {
    0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400, 86400, 604800};

/* The step table: open addressing on (process, state), never shrunk; the
 * mutex is held for one probe per observation. */
#define STEP_SLOTS 8192 /* twice METRICS_MAX_STEPS: probes stay short */
static pthread_mutex_t step_lock = PTHREAD_MUTEX_INITIALIZER;
static metrics_step_t *step_table; /* STEP_SLOTS entries, allocated on first use */
static size_t n_step_entries;

static uint64_t step_hash(const char *process, const char *state)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *c = process; *c; c++)
        h = (h ^ (unsigned char) *c) * 1099511628211ULL;
    h = (h ^ 0x1f) * 1099511628211ULL;
    for (const char *c = state; *c; c++)
        h = (h ^ (unsigned char) *c) * 1099511628211ULL;
    return h;
}

void metrics_observe_step(const char *process, const char *state, int64_t ms)
{
    char p[64], st[64];
    snprintf(p, sizeof p, "%s", process);
    snprintf(st, sizeof st, "%s", state);
    if (ms < 0)
        ms = 0;
    size_t b = 0;
    while (b < METRICS_STEP_BUCKETS && (double) ms > metrics_step_bounds_s[b] * 1000.0)
        b++;

    pthread_mutex_lock(&step_lock);
    if (step_table == NULL && (step_table = calloc(STEP_SLOTS, sizeof *step_table)) == NULL) {
        pthread_mutex_unlock(&step_lock); /* a metric is not worth failing for */
        return;
    }
    size_t i = (size_t) (step_hash(p, st) % STEP_SLOTS);
    while (step_table[i].process[0] != '\0' &&
           (strcmp(step_table[i].process, p) != 0 || strcmp(step_table[i].state, st) != 0))
        i = (i + 1) % STEP_SLOTS;
    if (step_table[i].process[0] == '\0') {
        if (n_step_entries >= METRICS_MAX_STEPS) {
            pthread_mutex_unlock(&step_lock);
            return;
        }
        memcpy(step_table[i].process, p, sizeof p);
        memcpy(step_table[i].state, st, sizeof st);
        n_step_entries++;
    }
    step_table[i].counts[b]++;
    step_table[i].sum_ms += ms;
    pthread_mutex_unlock(&step_lock);
}

static int step_cmp(const void *a, const void *b)
{
    const metrics_step_t *x = a, *y = b;
    int c = strcmp(x->process, y->process);
    return c != 0 ? c : strcmp(x->state, y->state);
}

size_t metrics_steps(metrics_step_t **out)
{
    size_t n = 0;
    *out = NULL;
    pthread_mutex_lock(&step_lock);
    if (n_step_entries > 0 && (*out = malloc(n_step_entries * sizeof **out)) != NULL) {
        for (size_t i = 0; i < STEP_SLOTS; i++)
            if (step_table[i].process[0] != '\0')
                (*out)[n++] = step_table[i];
    }
    pthread_mutex_unlock(&step_lock);
    if (n > 1)
        qsort(*out, n, sizeof **out, step_cmp);
    return n;
}

bool metrics_parse_proc_stat(const char *text, double ticks_per_s, double *cpu_seconds)
{
    /* The command name (field 2) may hold spaces and parentheses: the
     * fields after it start at the last ')'. */
    const char *p = strrchr(text, ')');
    unsigned long long utime, stime;
    if (p == NULL || ticks_per_s <= 0 ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
            2)
        return false;
    *cpu_seconds = (double) (utime + stime) / ticks_per_s;
    return true;
}

bool metrics_parse_statm(const char *text, long page_bytes, double *resident_bytes)
{
    unsigned long long size, resident;
    if (page_bytes <= 0 || sscanf(text, "%llu %llu", &size, &resident) != 2)
        return false;
    *resident_bytes = (double) resident * (double) page_bytes;
    return true;
}

int metrics_stalled(int64_t now_ms, int64_t stall_ms, int64_t *for_ms)
{
    for (int t = 0; t < METRICS_N_THREADS; t++) {
        int64_t beat = metrics_last_beat((metrics_thread_t) t);
        if (beat > 0 && now_ms - beat > stall_ms) {
            if (for_ms != NULL)
                *for_ms = now_ms - beat;
            return t;
        }
    }
    return -1;
}

void metrics_observe_batch(int64_t ms)
{
    size_t i = 0;

    if (ms < 0)
        ms = 0;
    while (i < METRICS_BATCH_BUCKETS && ms > metrics_batch_bounds_ms[i])
        i++;
    metrics_add(&metrics.batch_buckets[i], 1);
    metrics_add(&metrics.batch_ms_sum, (long long) ms);
}

void metrics_set_assigned(long long partitions)
{
    atomic_store_explicit(&metrics.partitions_assigned, partitions, memory_order_relaxed);
}

void metrics_set_partition_lag(const char *topic, int32_t partition, int64_t lag)
{
    pthread_mutex_lock(&lag_lock);
    size_t i = 0;
    while (i < n_lags && (lags[i].partition != partition || strcmp(lags[i].topic, topic) != 0))
        i++;
    if (i == n_lags && n_lags == cap_lags) {
        size_t cap = cap_lags > 0 ? cap_lags * 2 : 16;
        metrics_lag_t *grown = realloc(lags, cap * sizeof *grown);
        if (grown == NULL) { /* a metric is not worth failing for */
            pthread_mutex_unlock(&lag_lock);
            return;
        }
        lags = grown;
        cap_lags = cap;
    }
    if (i == n_lags) {
        snprintf(lags[i].topic, sizeof lags[i].topic, "%s", topic);
        lags[i].partition = partition;
        n_lags++;
    }
    lags[i].lag = lag > 0 ? lag : 0;
    pthread_mutex_unlock(&lag_lock);
}

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static metrics_watch_t *watches; /* guarded by watch_lock */
static size_t n_watches;

const char *metrics_watch_cause_name(metrics_watch_cause_t c)
{
    static const char *const names[METRICS_WATCH_N_CAUSES] = {
        [METRICS_WATCH_NO_WATERMARK] = "no_watermark",
        [METRICS_WATCH_FROZEN] = "frozen",
        [METRICS_WATCH_UNREAD] = "unread",
        [METRICS_WATCH_OLD_VERSION] = "old_version_topic",
    };
    return c < METRICS_WATCH_N_CAUSES ? names[c] : "?";
}

void metrics_set_watches(const metrics_watch_t *w, size_t n)
{
    metrics_watch_t *copy = n > 0 ? malloc(n * sizeof *copy) : NULL;
    if (n > 0 && copy == NULL)
        return; /* a metric is not worth failing for: the last table stays */
    if (n > 0)
        memcpy(copy, w, n * sizeof *copy);
    pthread_mutex_lock(&watch_lock);
    free(watches);
    watches = copy;
    n_watches = n;
    pthread_mutex_unlock(&watch_lock);
}

size_t metrics_watches(metrics_watch_t **out)
{
    size_t n = 0;
    *out = NULL;
    pthread_mutex_lock(&watch_lock);
    if (n_watches > 0 && (*out = malloc(n_watches * sizeof **out)) != NULL) {
        memcpy(*out, watches, n_watches * sizeof **out);
        n = n_watches;
    }
    pthread_mutex_unlock(&watch_lock);
    return n;
}

void metrics_clear_partitions(void)
{
    pthread_mutex_lock(&lag_lock);
    free(lags);
    lags = NULL;
    n_lags = cap_lags = 0;
    pthread_mutex_unlock(&lag_lock);
}

size_t metrics_partition_lags(metrics_lag_t **out)
{
    size_t n = 0;

    *out = NULL;
    pthread_mutex_lock(&lag_lock);
    if (n_lags > 0 && (*out = malloc(n_lags * sizeof **out)) != NULL) {
        memcpy(*out, lags, n_lags * sizeof **out);
        n = n_lags;
    }
    pthread_mutex_unlock(&lag_lock);
    return n;
}

/* The undeclared-type table: written by intake after each batch with such
 * messages, read by each scrape. Bounded, so a producer inventing types
 * cannot grow it without end. */
static pthread_mutex_t unknown_lock = PTHREAD_MUTEX_INITIALIZER;
static metrics_unknown_t *unknowns;
static size_t n_unknowns, cap_unknowns;

bool metrics_count_unknown(const char *topic, const char *type, int64_t now_ms,
                           int64_t log_every_ms)
{
    char cut[256];
    bool report = false;

    snprintf(cut, sizeof cut, "%s", type != NULL ? type : "(none)");
    pthread_mutex_lock(&unknown_lock);
    size_t i = 0;
    while (i < n_unknowns && (strcmp(unknowns[i].type, cut) != 0 ||
                              strncmp(unknowns[i].topic, topic, sizeof unknowns[i].topic) != 0))
        i++;
    if (i == n_unknowns && n_unknowns >= METRICS_MAX_UNKNOWN) {
        topic = "other";
        snprintf(cut, sizeof cut, "other");
        i = 0;
        while (i < n_unknowns &&
               (strcmp(unknowns[i].type, cut) != 0 || strcmp(unknowns[i].topic, topic) != 0))
            i++;
    }
    if (i == n_unknowns && n_unknowns == cap_unknowns) {
        size_t cap = cap_unknowns > 0 ? cap_unknowns * 2 : 16;
        metrics_unknown_t *grown = realloc(unknowns, cap * sizeof *grown);
        if (grown == NULL) { /* a metric is not worth failing for */
            pthread_mutex_unlock(&unknown_lock);
            return false;
        }
        unknowns = grown;
        cap_unknowns = cap;
    }
    if (i == n_unknowns) {
        memset(&unknowns[i], 0, sizeof unknowns[i]);
        snprintf(unknowns[i].topic, sizeof unknowns[i].topic, "%s", topic);
        snprintf(unknowns[i].type, sizeof unknowns[i].type, "%s", cut);
        n_unknowns++;
    }
    unknowns[i].count++;
    if (unknowns[i].logged_ms == 0 || now_ms - unknowns[i].logged_ms >= log_every_ms) {
        unknowns[i].logged_ms = now_ms > 0 ? now_ms : 1;
        report = true;
    }
    pthread_mutex_unlock(&unknown_lock);
    return report;
}

size_t metrics_unknown_types(metrics_unknown_t **out)
{
    size_t n = 0;

    *out = NULL;
    pthread_mutex_lock(&unknown_lock);
    if (n_unknowns > 0 && (*out = malloc(n_unknowns * sizeof **out)) != NULL) {
        memcpy(*out, unknowns, n_unknowns * sizeof **out);
        n = n_unknowns;
    }
    pthread_mutex_unlock(&unknown_lock);
    return n;
}

const char *metrics_thread_name(metrics_thread_t t)
{
    static const char *const names[METRICS_N_THREADS] = {"intake", "scheduler", "notifier",
                                                         "dispatcher"};
    return t < METRICS_N_THREADS && names[t] != NULL ? names[t] : "unknown";
}

void metrics_beat(metrics_thread_t t)
{
    int64_t now = clock_monotonic_ms();
    /* 0 means "never": a clock that starts at 0 still counts as a beat. */
    atomic_store_explicit(&metrics.beats[t], now > 0 ? now : 1, memory_order_relaxed);
}

int64_t metrics_last_beat(metrics_thread_t t)
{
    return atomic_load_explicit(&metrics.beats[t], memory_order_relaxed);
}

void metrics_beat_stop(metrics_thread_t t)
{
    atomic_store_explicit(&metrics.beats[t], 0, memory_order_relaxed);
}
