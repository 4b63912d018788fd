/*
 * sim_active - steward-sim's responder: the six services answering the
 * commands an active process sends, instead of choreographing.
 *
 * Terms. A *command* is what Steward's dispatcher produced for one step of
 * one order (its type, the order's key, the state, the step number, the
 * attempt and the fencing token, from the CloudEvents headers). A *reply*
 * is an event a service produces in answer, after the step's latency. The
 * *model* is what the responder needs of the active definition: each
 * state's command, the events it accepts and where they lead, its
 * on_timeout, the lease of the step that has one, where replies carry the
 * token. It is read from the definition's JSON with jansson alone, so the
 * responder does not depend on the loader knowing every active-mode field.
 *
 * Each order may carry one planned *fault*, chosen by its index (every
 * `fault_every`-th order, the kinds in rotation, so a run of a few dozen
 * orders shows each):
 *
 *   drop_first  the service drops the first command of its step; the
 *               re-send (attempt 1) is answered, so the retry wins
 *   silent      the service never answers; the step's retries run out and
 *               Steward takes on_timeout (a compensation state answered by
 *               its own service) or, without one, pages the step's owner
 *   zombie      on the leased step: a worker claims the step, heartbeats
 *               once and goes quiet; when Steward hands the step on (a
 *               re-send with a new token) the old worker answers at last,
 *               with its old token (a stale reply Steward must record as
 *               `stale`), and a new worker claims the step and answers
 *   duplicate   the service answers its step twice: the second reply is
 *               the same event under a new event id, right after the
 *               first, so it reaches Steward once the first has moved the
 *               instance on; its token is then an old one (`stale`)
 *   late_zombie on the leased step, as zombie, but the old worker answers
 *               only after the new worker's answer has moved the instance
 *               on: an old token arriving after its step was left
 *               (`stale`, paging nobody)
 *
 * The rotation lists drop_first, silent and zombie state by state, then
 * duplicate on each commanded state, then late_zombie, so that the first
 * places of the rotation do not depend on the later kinds.
 *
 * An order with a fault takes the completed path, so its fault is reached.
 * What each order should end as (a terminal state, or paged at a state)
 * follows from its path, its fault and the model: sim_active_expect().
 *
 * Pure: no I/O, no clock reads (times are arguments). The model is
 * immutable after loading and may be shared between threads.
 */
#ifndef STEWARD_SIM_ACTIVE_H
#define STEWARD_SIM_ACTIVE_H

#include "common/err.h"
#include "sim/sim.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_ACTIVE_MAX_STATES 32
#define SIM_ACTIVE_MAX_ON     8
#define SIM_ACTIVE_NAME_MAX   64
#define SIM_ACTIVE_TOPIC_MAX  250

typedef struct sim_active_state {
    char name[SIM_ACTIVE_NAME_MAX];
    bool terminal;
    char command_type[SIM_ACTIVE_NAME_MAX];   /* "" when the state sends none */
    char command_topic[SIM_ACTIVE_TOPIC_MAX]; /* with the run's prefix */
    int64_t deadline_ms;                      /* its own deadline; 0 when none */
    int retry_max;
    int on_timeout; /* state index, or -1 */
    size_t n_on;
    int on_event[SIM_ACTIVE_MAX_ON]; /* sim_kind_t; -1 for an event the simulator never sends */
    int on_to[SIM_ACTIVE_MAX_ON];    /* state index */
    /* The lease, when the state declares one. */
    bool leased;
    char lease_claim[SIM_ACTIVE_NAME_MAX];
    char lease_renew[SIM_ACTIVE_NAME_MAX];  /* the first renew event */
    char lease_holder[SIM_ACTIVE_NAME_MAX]; /* a top-level pointer: "/worker_id" */
    char lease_topic[SIM_ACTIVE_TOPIC_MAX]; /* where the claim and renewals go */
    int64_t lease_ms;
    /* Where replies carry the token: a top-level pointer ("/steward_token")
     * or a header name; both "" when the state names none. */
    char token_pointer[SIM_ACTIVE_NAME_MAX];
    char token_header[SIM_ACTIVE_NAME_MAX];
} sim_active_state_t;

typedef struct sim_active_model {
    char process[SIM_ACTIVE_NAME_MAX];
    int start_state;
    char topic[SIM_N_KINDS][SIM_ACTIVE_TOPIC_MAX]; /* each event's, with the prefix */
    sim_active_state_t states[SIM_ACTIVE_MAX_STATES];
    size_t n_states;
} sim_active_model_t;

/*
 * Reads the model from a definition document, topics prefixed with
 * `prefix` (may be NULL). The document must declare every simulated event,
 * be in "mode": "active", and have at least one state with a command.
 * Returns ERR_OK, or ERR_INVALID saying what is missing (*model is then
 * unspecified).
 */
err_class_t sim_active_load(const json_t *doc, const char *prefix, sim_active_model_t *model,
                            char *errstr, size_t errstr_size);

/*
 * Sets opts->deadline_ms[kind] to the deadline of the state that waits for
 * each kind, times `scale`: the cut of the latencies (sim.h), so that only
 * planned faults miss a deadline.
 */
void sim_active_deadlines(const sim_active_model_t *model, double scale, sim_options_t *opts);

/* The state's index, or -1. */
int sim_active_find_state(const sim_active_model_t *model, const char *name);

/* ---- faults ------------------------------------------------------------ */

typedef enum sim_fault_kind {
    SIM_FAULT_NONE = 0,
    SIM_FAULT_DROP_FIRST,
    SIM_FAULT_SILENT,
    SIM_FAULT_ZOMBIE,
    SIM_FAULT_DUPLICATE,
    SIM_FAULT_LATE_ZOMBIE,
    SIM_N_FAULTS
} sim_fault_kind_t;

const char *sim_fault_name(sim_fault_kind_t kind); /* "none", "drop_first", ... */

typedef struct sim_fault {
    sim_fault_kind_t kind;
    int state; /* the state whose command it hits; -1 with SIM_FAULT_NONE */
} sim_fault_t;

/*
 * The fault of order `index`: none unless fault_every > 0 and
 * index % fault_every == fault_every - 1; then the next of the rotation
 * the model allows (drop_first on each state with a retry, silent on each
 * state with a command, zombie on the leased state; then duplicate on each
 * state with a command; then late_zombie on the leased state).
 */
sim_fault_t sim_active_fault(const sim_active_model_t *model, uint32_t index, uint32_t fault_every);

/*
 * Plans order `index` for the responder into *order: sim_plan_order()
 * without stalls or reordering (faults replace them), and on the completed
 * path when the order has a fault.
 */
void sim_active_plan(const sim_options_t *opts, const sim_active_model_t *model, uint32_t index,
                     uint32_t fault_every, sim_order_t *order);

/* What an order should end as. */
typedef struct sim_expect {
    int terminal; /* the terminal state's index, or -1 */
    int paged_at; /* the state whose owner is paged, or -1 */
    unsigned stale_replies;
} sim_expect_t;

sim_expect_t sim_active_expect(const sim_active_model_t *model, const sim_order_t *order,
                               sim_fault_t fault);

/* ---- commands and replies ---------------------------------------------- */

typedef struct sim_command {
    const char *type;  /* ce_type */
    const char *key;   /* the order id */
    const char *state; /* ce_stewardstate */
    const char *ce_id;
    long step;
    long attempt;
    long long token; /* 0 when the command carries none */
} sim_command_t;

/*
 * The ce_id the contract derives for (process, key, step, attempt): the
 * lowercase hex SHA-256 of "process \x1f key \x1f step \x1f attempt".
 */
void sim_active_ce_id(const char *process, const char *key, long step, long attempt, char hex[65]);

#define SIM_MAX_REPLIES     32
#define SIM_REPLY_VALUE_MAX 768

typedef struct sim_reply {
    int64_t emit_ms;
    const char *topic; /* borrowed from the model */
    char event_id[96];
    char type[SIM_ACTIVE_NAME_MAX];
    long long token; /* the token it carries; 0: none */
    bool stale;      /* one Steward must record as `stale`: an older token
                      * than the command's, or a duplicate under a new id */
    char value[SIM_REPLY_VALUE_MAX];
    size_t value_len;
    const char *token_header; /* header to carry the token in, or NULL */
} sim_reply_t;

/*
 * The replies to `cmd` for `order` (planned by sim_active_plan()) with
 * `fault`, received at now_ms, into out[0..max), in emit order. Returns how
 * many; 0 when the command is dropped, never answered, or not for this
 * flow. Stateless: a copy of a command (the same ce_id) gets the same
 * replies, with the same event ids, so Steward drops them as duplicates.
 */
size_t sim_active_respond(const sim_options_t *opts, const sim_active_model_t *model,
                          const sim_order_t *order, sim_fault_t fault, const sim_command_t *cmd,
                          int64_t now_ms, sim_reply_t *out, size_t max);

/* The order index in an order id of this run ("ord-<seed hex>-<index>");
 * false when the id is not one of the run's. */
bool sim_active_order_index(const sim_options_t *opts, const char *key, uint32_t *index);

#endif
