/*
 * sim_run - steward-sim's choreographed run, the default mode: the flow
 * read from the definition, each step's latency cut below the deadline
 * waiting for it, the plan's messages paced to Kafka by the wall clock
 * (real time) or sent at once with the event time as their timestamp
 * (virtual time), or printed (--plan-only); then the flush, the ground
 * truth (sim_output) and the closing line. Progress goes to stderr once a
 * second unless --quiet.
 */
#ifndef STEWARD_SIM_RUN_H
#define STEWARD_SIM_RUN_H

#include "sim/sim_args.h"

#include <signal.h>

/*
 * Runs cfg's simulation of the definition at src; returns the exit code
 * (EXIT_RUNTIME when a message failed to deliver or *stop was set before
 * the end). Sets cfg->sim's deadlines and start time. `stop` is main()'s
 * signal flag, read throughout.
 */
int sim_run_choreographed(sim_args_t *cfg, const char *src, const volatile sig_atomic_t *stop);

#endif
