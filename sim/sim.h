/*
 * sim - the planner of steward-sim: which events each simulated order
 * publishes, when, and in which order they reach Kafka.
 *
 * An order is one run of the six-service order-fulfilment flow:
 *
 *   OrderPlaced -> PaymentCaptured -> StockReserved -> ShipmentDispatched
 *               -> OrderDelivered -> CustomerNotified          (completed)
 *   OrderPlaced -> PaymentDeclined                              (cancelled)
 *   OrderPlaced -> PaymentCaptured -> StockUnavailable -> RefundIssued
 *                                                               (refunded)
 *
 * Its *plan* is the path it takes, the latency of each step, whether it
 * stalls (stops before some non-terminal step), and the messages it sends:
 * one per event, plus a second copy of a *duplicated* event (same id, up
 * to 2 s later), with a *reordered* event happening within a second of the
 * previous step's event and sent just before it, as when one service's
 * topic overtakes another's. A message has an event time (the Kafka
 * timestamp; when it happened) and an emit time (when it is produced):
 * they differ only for duplicates and reorders. Every duration here is
 * multiplied by the time scale.
 *
 * Latencies are log-normal and cut at 80% of the deadline of the state
 * waiting for the step, so an order misses a deadline only where the plan
 * stalls it: the ground truth is then exactly the orders that should alert.
 *
 * The *schedule* (sim_t) releases the messages of all orders in emit-time
 * order: orders arrive one at a time (Poisson at the configured rate), and
 * a min-heap holds one entry per order in flight and per pending poison
 * message, so memory follows the orders in flight, not the total.
 *
 * Everything here is pure: no I/O and no clock reads (the current time is
 * an argument), and the same options and seed give the same plan. Order i's
 * plan depends only on the seed, i and its start time, from a random stream
 * of its own, so changing the rate moves orders but does not change them.
 */
#ifndef STEWARD_SIM_H
#define STEWARD_SIM_H

#include "common/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The event types, in the order of the flow. */
typedef enum sim_kind {
    SIM_ORDER_PLACED = 0,
    SIM_PAYMENT_CAPTURED,
    SIM_PAYMENT_DECLINED,
    SIM_STOCK_RESERVED,
    SIM_STOCK_UNAVAILABLE,
    SIM_REFUND_ISSUED,
    SIM_SHIPMENT_DISPATCHED,
    SIM_ORDER_DELIVERED,
    SIM_CUSTOMER_NOTIFIED,
    SIM_N_KINDS
} sim_kind_t;

/* The event type's name ("OrderPlaced"); NULL for an unknown kind. */
const char *sim_kind_name(sim_kind_t kind);

/* The service that publishes it ("payments"), which is also its topic's
 * base name and, as "/sim/<service>", its CloudEvents source. */
const char *sim_kind_service(sim_kind_t kind);

/* The kinds of malformed message --poison sends, in rotation. */
typedef enum sim_poison {
    SIM_POISON_INVALID_JSON = 0,
    SIM_POISON_INVALID_UTF8,
    SIM_POISON_ARRAY,
    SIM_POISON_MISSING_KEY, /* a well-formed event without order_id */
    SIM_POISON_TOMBSTONE,
    SIM_N_POISON
} sim_poison_t;

const char *sim_poison_name(sim_poison_t poison); /* "invalid_json", ... */

/* A step's latency: log-normal, median * exp(sigma * N(0,1)), before the
 * time scale. */
typedef struct sim_latency {
    double median_ms;
    double sigma;
} sim_latency_t;

typedef struct sim_options {
    uint64_t seed;
    uint32_t orders;
    double rate;             /* orders per second; 0: as fast as possible */
    bool virtual_time;       /* event times run ahead of the wall clock */
    int64_t start_ms;        /* the first order's start (epoch ms) */
    double time_scale;       /* multiplies every latency; > 0 */
    double stall_rate;       /* each a probability in [0, 1] */
    double decline_rate;     /* of all orders */
    double stock_fail_rate;  /* of the orders whose payment was captured */
    double duplicate_rate;   /* of events */
    double reorder_rate;     /* of events after the first */
    double cloudevents_rate; /* of events */
    uint32_t poison;         /* malformed messages spread over the run */

    /* The Kafka header that carries each kind's type instead of the
     * value's "type" (--type-header, set per topic); NULL: the value's.
     * Such events are never CloudEvents: their team has its own
     * convention. Borrowed. */
    const char *type_header[SIM_N_KINDS];

    /* The latency of the step that ends with each kind (unused for
     * OrderPlaced); sim_options_init() fills in the defaults. */
    sim_latency_t latency[SIM_N_KINDS];

    /* The deadline, already scaled, of the state that waits for each kind;
     * 0 when none. A step's latency is cut at 80% of it, so only planned
     * stalls miss deadlines and the ground truth is exact. */
    int64_t deadline_ms[SIM_N_KINDS];
} sim_options_t;

/* The defaults of steward-sim's options, for 1000 orders. */
void sim_options_init(sim_options_t *opts);

/* ERR_OK, or ERR_INVALID naming the first bad field in errstr. */
err_class_t sim_options_check(const sim_options_t *opts, char *errstr, size_t errstr_size);

/* ---- one order's plan ------------------------------------------------ */

#define SIM_MAX_PATH 6                  /* events of the longest path */
#define SIM_MAX_MSGS (2 * SIM_MAX_PATH) /* each event may be duplicated */

enum {
    SIM_MSG_DUPLICATE = 1 << 0,  /* the second copy of an event */
    SIM_MSG_REORDERED = 1 << 1,  /* sent before the previous step's event */
    SIM_MSG_CLOUDEVENT = 1 << 2, /* CloudEvents binary mode */
};

typedef struct sim_msg {
    int64_t emit_ms; /* when it is produced */
    int64_t time_ms; /* when it happened: the Kafka timestamp, ce_time */
    uint8_t kind;    /* sim_kind_t */
    uint8_t step;    /* its index in the path (the event id's suffix) */
    uint8_t flags;   /* SIM_MSG_* */
} sim_msg_t;

typedef enum sim_outcome {
    SIM_COMPLETED = 0, /* CustomerNotified sent */
    SIM_DECLINED,      /* PaymentDeclined sent */
    SIM_REFUNDED,      /* RefundIssued sent */
    SIM_STALLED,       /* stopped before a non-terminal step's event */
} sim_outcome_t;

typedef struct sim_order {
    uint32_t index;
    int64_t start_ms;
    sim_outcome_t outcome;

    uint8_t path[SIM_MAX_PATH]; /* the events it would send, sim_kind_t */
    uint8_t n_path;
    uint8_t n_sent;                /* events actually sent: n_path unless stalled */
    int64_t time_ms[SIM_MAX_PATH]; /* each path event's time */

    sim_msg_t msgs[SIM_MAX_MSGS]; /* in emit order */
    uint8_t n_msgs;
    uint8_t next; /* the schedule's cursor into msgs */

    /* The business data its events carry. */
    uint32_t customer;
    uint32_t total_cents;
    uint8_t warehouse;
    uint8_t carrier;
    uint64_t tracking;
} sim_order_t;

/*
 * Plans order `index` starting at `start_ms` into *out. Deterministic in
 * (opts->seed, index, start_ms) and the rates and latencies of opts.
 */
void sim_plan_order(const sim_options_t *opts, uint32_t index, int64_t start_ms, sim_order_t *out);

/* The last event the order sent: for a stalled order, the event that put
 * it into the state it is stuck in. */
static inline sim_kind_t sim_order_last_kind(const sim_order_t *order)
{
    return (sim_kind_t) order->path[order->n_sent - 1];
}

/* Its time. */
static inline int64_t sim_order_last_time(const sim_order_t *order)
{
    return order->time_ms[order->n_sent - 1];
}

/*
 * How far the run's event and emit times reach past opts->start_ms, in
 * virtual time (or real time at a rate above 0): the latest of them, found
 * by planning every order once. With start_ms = now - sim_span_ms(), the
 * run ends now and no event time is in the future.
 */
int64_t sim_span_ms(const sim_options_t *opts);

/* ---- the schedule ---------------------------------------------------- */

typedef struct sim sim_t; /* opaque; owns the heap and the orders in flight */

/* What the run has released so far. */
typedef struct sim_stats {
    uint64_t orders;     /* started */
    uint64_t events;     /* event messages, first copies */
    uint64_t duplicates; /* second copies */
    uint64_t reordered;
    uint64_t cloudevents; /* event messages sent as CloudEvents, copies too */
    uint64_t poison;
    uint64_t messages;  /* everything: events + duplicates + poison */
    uint64_t in_flight; /* orders started with messages still to send */
    /* Orders whose last message was released, by outcome. */
    uint64_t completed, declined, refunded, stalled;
} sim_stats_t;

/* A new schedule for opts (copied), or NULL with the reason in errstr
 * (bad options, out of memory). Free with sim_free(). */
sim_t *sim_new(const sim_options_t *opts, char *errstr, size_t errstr_size);
void sim_free(sim_t *sim); /* NULL is a no-op */

#define SIM_DONE INT64_MAX

/*
 * The emit time of the next message, or SIM_DONE when every message has
 * been released. `now_ms` matters only in real time at rate 0, where the
 * next order arrives "now".
 */
int64_t sim_peek(sim_t *sim, int64_t now_ms);

/* One released message; the pointers are borrowed until the next
 * sim_pop() or sim_free(). */
typedef struct sim_item {
    const sim_order_t *order; /* NULL for poison */
    const sim_msg_t *msg;     /* NULL for poison */
    long poison;              /* the poison message's number, or -1 */
    int64_t emit_ms;
    bool order_done; /* the order's last message: its outcome is final */
} sim_item_t;

/* Releases the next message into *item; false when there are none left
 * (or memory ran out planning the next order: errstr says which). */
bool sim_pop(sim_t *sim, int64_t now_ms, sim_item_t *item, char *errstr, size_t errstr_size);

const sim_stats_t *sim_stats(const sim_t *sim);
const sim_options_t *sim_options(const sim_t *sim);

/* ---- what a message looks like --------------------------------------- */

/* The run's identifiers, all ASCII: "ord-<seed hex>-<index>",
 * "evt-<seed hex>-<index>-<step>", "poison-<seed hex>-<n>". Each returns
 * the length written (snprintf's contract). */
int sim_order_id(const sim_options_t *opts, uint32_t index, char *buf, size_t size);
int sim_event_id(const sim_options_t *opts, uint32_t index, unsigned step, char *buf, size_t size);
int sim_poison_id(const sim_options_t *opts, long n, char *buf, size_t size);

/*
 * The JSON value of an event message. Plain JSON carries "type", "id",
 * "order_id" and the event's fields; a CloudEvent's value is only the data
 * (order_id and the fields): type and id travel as headers. An event of a
 * kind with a type header (opts->type_header) carries "id", "order_id"
 * and the fields: its type travels in that header. Returns the length (as
 * snprintf: >= size means it was truncated).
 */
int sim_format_value(const sim_options_t *opts, const sim_order_t *order, const sim_msg_t *msg,
                     char *buf, size_t size);

#define SIM_MAX_HEADERS 6

/* The headers of a CloudEvents message, or the one type header of a kind
 * that has one: names and values point into buf (or are constants, or
 * opts'); returns how many (0 for plain JSON). */
typedef struct sim_header {
    const char *name;
    const char *value;
} sim_header_t;
size_t sim_format_headers(const sim_options_t *opts, const sim_order_t *order, const sim_msg_t *msg,
                          sim_header_t headers[SIM_MAX_HEADERS], char *buf, size_t size);

/*
 * Poison message n: its kind, and its value in buf (*len bytes; *len = -1
 * for a tombstone, which has no value). Its key is sim_poison_id().
 */
sim_poison_t sim_format_poison(const sim_options_t *opts, long n, char *buf, size_t size,
                               long *len);

/* The kind whose topic poison message n goes to (round-robin). */
sim_kind_t sim_poison_kind(long n);

/* Formats epoch ms as RFC 3339 in UTC with milliseconds
 * ("2026-01-02T03:04:05.678Z"). Returns buf. */
char *sim_format_time(int64_t ms, char *buf, size_t size);

#endif
