/*
 * sim_def - steward-sim and the process definition it simulates.
 *
 * Two jobs. The *flow*: where each simulated event goes (its topic, from
 * the definition, with the run's topic prefix) and which state an order is
 * in after it (named as the definition names it, with the events that
 * would move it on), for the ground truth and the latency caps. The
 * *rewrite*: a copy of the definition for one run, its topics prefixed and
 * its durations scaled, so that a test or demo can point Steward at the
 * topics the simulator writes and see deadlines fire in seconds.
 *
 * Pure: no I/O; the caller loads and writes the files.
 */
#ifndef STEWARD_SIM_DEF_H
#define STEWARD_SIM_DEF_H

#include "common/err.h"
#include "definitions/def.h"
#include "sim/sim.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_DEF_TOPIC_MAX 250 /* Kafka's 249 characters and a NUL */

typedef struct sim_def_flow {
    char topic[SIM_N_KINDS][SIM_DEF_TOPIC_MAX]; /* where each kind is produced */
    const char *state_after[SIM_N_KINDS];       /* the state it leads to; borrowed from the def */
    char *expected_after[SIM_N_KINDS];          /* the events that state accepts, as a JSON
                                                   array text; owned */
    /* The deadline (unscaled) of the state waiting for each kind: its own
     * deadline, else the process's; 0 for OrderPlaced. */
    int64_t deadline_ms[SIM_N_KINDS];
} sim_def_flow_t;

/*
 * Reads the flow from `def`: every simulated event must be declared, and
 * the definition must take each path of the order-fulfilment flow from the
 * start to a terminal state. Topics are `prefix` + the event's topic, or
 * all `single_topic` when it is not NULL. Returns ERR_OK with *flow filled
 * (release it with sim_def_flow_clear()), or ERR_INVALID saying what the
 * definition lacks, with *flow empty.
 */
err_class_t sim_def_flow(const def_t *def, const char *prefix, const char *single_topic,
                         sim_def_flow_t *flow, char *errstr, size_t errstr_size);

void sim_def_flow_clear(sim_def_flow_t *flow);

/*
 * `ms` times `scale`, rounded to the millisecond; a positive duration stays
 * at least 1 ms (a deadline must be longer than zero).
 */
int64_t sim_def_scale_ms(int64_t ms, double scale);

/*
 * Formats `ms` (>= 0) exactly, in every unit it needs from d to ms
 * ("3s600ms", "14m24s", "1d2h3m4s5ms"; "0s" for zero), so that
 * duration_parse() gives back the same value. Returns buf.
 */
char *sim_def_format_duration(int64_t ms, char *buf, size_t size);

/*
 * Rewrites a definition document in place: every topic (of each event and
 * each state's command) gets `prefix` in front, or an event's topic becomes
 * `single_topic` when that is not NULL (commands keep their own, prefixed),
 * and every duration (the process's deadline and reorder_window, each
 * state's deadline, retry backoff and max_backoff, and lease duration) is
 * multiplied by `deadline_scale`. Returns ERR_OK, or
 * ERR_INVALID when doc is not shaped like a definition or a duration does
 * not parse (doc may then be partly rewritten).
 */
err_class_t sim_def_rewrite(json_t *doc, const char *prefix, const char *single_topic,
                            double deadline_scale, char *errstr, size_t errstr_size);

#endif
