/*
 * metrics - the process's counters, shared by every thread as atomics.
 * They are the one global state Steward keeps besides signal flags; the
 * HTTP module renders them in Prometheus text format.
 */
#ifndef STEWARD_METRICS_H
#define STEWARD_METRICS_H

#include "manager/decode.h"
#include "manager/engine.h"
#include "manager/routes.h"

#include <stdatomic.h>

typedef struct metrics {
    atomic_llong events_read;                 /* Kafka messages consumed */
    atomic_llong events_ignored;              /* no process declares their type */
    atomic_llong outcomes[ENGINE_N_OUTCOMES]; /* judgements, by outcome */
    atomic_llong rejected[DECODE_N_REASONS];  /* rejected messages, by reason */
    atomic_llong batches_committed;
    atomic_llong batches_retried; /* conflicts and lost connections */
    atomic_llong partitions_fenced;
    atomic_llong parked_expired; /* reorder windows that passed */
    atomic_llong alerts_opened;  /* by the scheduler */
    /* notifications by sink type and verdict (delivered, retried, failed) */
    atomic_llong notifications[4][3];
} metrics_t;

extern metrics_t metrics;

static inline void metrics_add(atomic_llong *counter, long long n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

#endif
