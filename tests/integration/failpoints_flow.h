/*
 * failpoints_flow - the simulator's active flow that integration.failpoints
 * runs steward through, and the invariants it holds a run to.
 *
 * A *run* is one pass of the flow: steward in active mode on
 * tests/data/definitions/sim_order_active.json (the simulator's order
 * fulfilment, timed for the suite), and steward-sim --active answering its
 * commands with its six services: FF_ORDERS orders, every second one with a
 * fault, so that the faulty half covers the responder's whole rotation once
 * (a dropped first command on each step that retries, a silent service on
 * each commanded step, the zombie picker, a duplicate reply under a new
 * event id on each commanded step, the picker whose old-token answer comes
 * after the step was left) and the healthy half carries declines and
 * refunds of its own. The simulator writes the *ground truth*: each order's
 * fault and expected end (a terminal state, or paged at a state), every
 * command it read off the command topics, every reply it sent that steward
 * must record as `stale`.
 *
 * The *world* is shared by the runs of one runner process: one database,
 * migrated once and emptied at the start of every run (its `public` schema
 * keeps the reference run's final states for the crash runs to compare
 * with). Each run has topics, a consumer group, a scratch directory and a
 * webhook receiver (tests/support/receiver.c) of its own; the receiver is
 * where steward's pages are read.
 *
 * Everything here aborts the current test on failure, as testlib does;
 * ff_check() gathers every broken invariant of a run before it fails, so
 * a failure names all of them.
 */
#ifndef STEWARD_FAILPOINTS_FLOW_H
#define STEWARD_FAILPOINTS_FLOW_H

#include "receiver.h"
#include "world.h"

#include <stdbool.h>
#include <stddef.h>

#define FF_ORDERS 26

/* One order of the ground truth. */
typedef struct ff_order {
    char key[64];
    char fault[24];    /* "none", "drop_first", ... */
    char at[64];       /* the state the fault hits; "" with none */
    char terminal[64]; /* the terminal state it ends in; "" when paged */
    char paged_at[64]; /* the state whose owner is paged; "" when none */
    int stale_replies; /* replies steward must record as `stale` */
} ff_order_t;

/* A command the simulator read off a command topic. */
typedef struct ff_command {
    char key[64], state[64], ce_id[80];
    long step, attempt;
} ff_command_t;

/* A reply the simulator sent that steward must record as `stale`. */
typedef struct ff_stale {
    char key[64], event_id[96];
} ff_stale_t;

typedef struct ff_truth {
    ff_order_t *orders;
    size_t n_orders;
    ff_command_t *commands;
    size_t n_commands;
    ff_stale_t *stale;
    size_t n_stale;
    bool summary;       /* the simulator ended and wrote its summary */
    long unreadable;    /* commands it could not read (the summary's) */
    long summary_count; /* orders placed (the summary's) */
} ff_truth_t;

typedef struct ff_run {
    tw_world_t w; /* db_url and conn are the shared world's */
    rcv_t *rcv;
    int sim_pid;
    char *truth_path, *sim_log;
    ff_truth_t truth; /* as ff_read_truth() last read it */
    /* The failpoint steward was killed at (copies of a page are allowed
     * only between its delivery and its record), or NULL. */
    const char *crashed_at;
    bool died; /* steward exited while ff_start() waited; its status: */
    int died_status;
    /* An order an operator re-sent, and at which state: one attempt past
     * retry.max is the operator's. */
    char retried_key[64], retried_state[64];
    /* When the run began, the simulator started, the flow was over (ms on
     * the monotonic clock): printed by ff_finish(). */
    long long began_ms, started_ms, done_ms;
    long long settled_ms; /* since when all but stale replies are done; 0 */
} ff_run_t;

/* Remembers the runner's pid, which names the shared world: call from the
 * suite function, before any test is forked. */
void ff_suite_init(void);

/*
 * Readies run `name`: the shared world emptied (created and migrated on
 * first use), topics of its own with one message each on the event topics
 * (so that every watermark exists from the start), a receiver, and the
 * config (batch_size: intake.batch_size, 0 for the default).
 */
void ff_run_init(ff_run_t *r, const char *name, int batch_size);

/* `steward run` with STEWARD_FAILPOINTS = spec (NULL: none) into w.pids[0]. */
void ff_spawn(ff_run_t *r, const char *spec);

/* ff_spawn(), then, once steward has read every event topic (or died at
 * its failpoint), steward-sim --active: the orders begin. */
void ff_start(ff_run_t *r, const char *spec);

/* Whether the steward in w.pids[0] has exited; its wait status in *status. */
bool ff_exited(ff_run_t *r, int *status);

/* Waits until the flow is over (every order placed and at its end, every
 * page the ground truth names delivered, nothing left to send, every
 * command sent read by the service, every stale reply judged `stale` or,
 * 3 s after the rest, left for ff_check() to report), for up to
 * timeout_s; a steward that exits meanwhile, or a flow that does not end,
 * fails the test with what is missing. */
void ff_wait_done(ff_run_t *r, int timeout_s);

/* The simulator ended (SIGTERM: its summary written), steward stopped
 * (SIGTERM, exit 0), and the whole ground truth read. */
void ff_finish(ff_run_t *r);

/* "key:state ..." of every order, by key (malloc'd). */
char *ff_states(ff_run_t *r);

/*
 * The invariants, on the ground truth, the tables and the pages the
 * receiver got: every order where the ground truth says, and the final
 * states equal to `reference` (NULL: this is the reference); no attempt
 * under two command ids, nor a command id the outbox does not hold, nor a
 * delivered row the service never read; no attempt past its state's
 * retry.max, hand-offs included; on_timeout taken exactly by the orders
 * whose service stayed silent on a step that has one; every stale reply
 * recorded `stale`; one hand-off each for the zombie pickers and no other;
 * every order the ground truth pages paged once, at its step, and no page
 * for any other (copies of a page only at notifier.before_record); no
 * event judged twice.
 */
void ff_check(ff_run_t *r, const char *reference);

/* The reference run's final states, as ff_save_reference() kept them in
 * the shared world (malloc'd), or NULL when there is none yet. */
char *ff_reference(void);
void ff_save_reference(ff_run_t *r, const char *states);

/* The first order of the ground truth with `fault` at `at` (borrowed). */
const ff_order_t *ff_order_with(const ff_run_t *r, const char *fault, const char *at);

/* Produces to every event topic a message of an undeclared type stamped
 * ahead_ms (none when 0), then `count` more stamped by the broker, and
 * waits until they are all on the broker. */
void ff_noise(ff_run_t *r, long long ahead_ms, int count);

/* Waits until steward has read every event topic up to where it ends
 * now, for up to timeout_s. */
void ff_wait_read(ff_run_t *r, int timeout_s);

/* The tail of steward's log and of the simulator's on stderr. */
void ff_print_logs(const ff_run_t *r);

/* Ends what is left (steward, the simulator, the receiver) and frees the
 * run: for a checked fixture's teardown. */
void ff_teardown(ff_run_t *r);

#endif
