/*
 * sim_output - the files and lines steward-sim writes in its choreographed
 * mode: --plan-only's line per message, the ground truth (one line per
 * stalled order, then a summary) and --write-definition's file (the
 * definition rewritten for the run, checked to load before it is
 * written). Every line is one JSON object; bytes that are not printable
 * ASCII are escaped, so a poison message's line is JSON too. The
 * responder's ground truth is its own (sim_serve).
 */
#ifndef STEWARD_SIM_OUTPUT_H
#define STEWARD_SIM_OUTPUT_H

#include "sim/sim.h"
#include "sim/sim_args.h"
#include "sim/sim_def.h"
#include "sim/sim_kafka.h"

#include <stdbool.h>
#include <stdio.h>

/* --plan-only's line for one message: item as the schedule released it, o
 * as sim_kafka_msg_fill() made it. */
void sim_output_plan_line(FILE *out, const sim_options_t *opts, const sim_def_flow_t *flow,
                          const sim_item_t *item, const sim_kafka_msg_t *o);

/* The ground-truth line of a stalled order: where it stopped, as the
 * definition names it, and what it waits for. */
void sim_output_stall(FILE *out, const sim_options_t *opts, const sim_def_flow_t *flow,
                      const sim_order_t *order);

/* The ground truth's last line: the run's counts, seed and start. */
void sim_output_summary(FILE *out, const sim_options_t *opts, const sim_stats_t *st,
                        bool interrupted);

/* Writes src rewritten (cfg's topic prefix or single topic, its durations
 * times --deadline-scale) to cfg->write_definition; returns an exit code,
 * the reason on stderr. */
int sim_output_definition(const sim_args_t *cfg, const char *src);

#endif
