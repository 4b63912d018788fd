/*
 * steward-sim - produces the events of simulated orders of the six-service
 * order-fulfilment flow to Kafka, and writes the ground truth a test
 * compares Steward's alerts with.
 *
 * sim.c plans (which events, when, in which order). This file parses the
 * options (sim_args), catches SIGINT and SIGTERM, writes the rewritten
 * definition when asked (sim_output), and hands over to one of two modes:
 *
 *   choreographed (sim_run): reads the definition, creates the topics,
 *   paces the messages (by the wall clock in real time; as fast as
 *   possible in virtual time, the Kafka timestamp then carrying the event
 *   time) and writes the ground truth: one line per stalled order, written
 *   when its last message has been handed to the producer, and a summary
 *   line at the end.
 *
 *   --active (sim_serve): the other side of an active process instead
 *   (sim_active.h): it places the orders on schedule, consumes the command
 *   topics, and answers each command with the replies the responder plans,
 *   when they are due; its ground truth holds one line per order (its
 *   fault and expected end), per command received and per stale reply
 *   sent. It runs until --linger seconds pass without work, or until
 *   SIGTERM, which is how `steward demo --active` ends it (exit 0).
 *
 * Exit codes: 0 done, 1 a message failed to deliver (or Kafka, a file,
 * an interrupt), 2 usage.
 */
#include "common/err.h"
#include "sim/sim_args.h"
#include "sim/sim_output.h"
#include "sim/sim_run.h"
#include "sim/sim_serve.h"

#include <signal.h>
#include <stddef.h>

/* The one piece of global state: set by SIGINT/SIGTERM, read by the loops
 * through the pointer each mode is given. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void) sig;
    stop_requested = 1;
}

int main(int argc, char **argv)
{
    sim_args_t cfg;
    int rc = sim_args_parse(argc, argv, &cfg);
    if (rc >= 0)
        return rc;

    char pathbuf[4096];
    const char *src = sim_args_definition(&cfg, pathbuf, sizeof pathbuf);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (cfg.write_definition != NULL) {
        rc = sim_output_definition(&cfg, src);
        if (rc != EXIT_OK || (cfg.brokers == NULL && !cfg.plan_only))
            return rc;
    }

    if (cfg.active)
        return sim_serve_run(&cfg, src, &stop_requested);
    return sim_run_choreographed(&cfg, src, &stop_requested);
}
