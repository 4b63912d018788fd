/*
 * sim_serve - steward-sim --active: the six services live, the other side
 * of an active process. It places the orders on schedule (OrderPlaced, and
 * poison), reads every partition of the command topics from their
 * beginning, and answers each command with the replies sim_active plans,
 * held on a min-heap until each is due. Its ground truth is one line per
 * order (its fault and expected end), per command received and per stale
 * reply sent, and a summary line. It runs until --linger seconds pass
 * without work, or until *stop is set (SIGTERM is how `steward demo
 * --active` ends it: not a failure).
 */
#ifndef STEWARD_SIM_SERVE_H
#define STEWARD_SIM_SERVE_H

#include "sim/sim_args.h"

#include <signal.h>

/* Answers the active definition at src as cfg says; returns the exit code.
 * Sets cfg->sim's rates, deadlines and start time for the responder.
 * `stop` is main()'s signal flag, read throughout. */
int sim_serve_run(sim_args_t *cfg, const char *src, const volatile sig_atomic_t *stop);

#endif
