/*
 * sim_args - steward-sim's command line: every option, its default and its
 * check, --help's text, and which definition a run reads. What a command
 * line asks for is a sim_args_t, which the run (sim_run), the responder
 * (sim_serve) and the output (sim_output) read; nothing here talks to
 * Kafka or writes a file.
 */
#ifndef STEWARD_SIM_ARGS_H
#define STEWARD_SIM_ARGS_H

#include "sim/sim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sim_args {
    sim_options_t sim;
    const char *brokers;
    const char *topic_prefix;
    int partitions;
    bool seed_given;
    const char *start_time; /* virtual time only */
    const char *ground_truth;
    const char *write_definition;
    const char *definition;
    double deadline_scale;
    bool deadline_scale_given;
    bool plan_only;
    const char *single_topic;
    bool quiet;
    /* --active: answer the commands of an active definition. */
    bool active;
    uint32_t fault_every;
    double linger_s;
    /* --avro-topic and where its schemas go (sim_schemas). */
    const char *avro_topic;
    const char *schema_registry;
    const char *avro_schema_dir;
    /* --type-header TOPIC=HEADER, each topic once; sim_run resolves the
     * topics to kinds (cfg->sim.type_header). Point into argv. */
    struct {
        const char *topic;
        const char *header;
    } type_headers[SIM_N_KINDS];
    size_t n_type_headers;
} sim_args_t;

/*
 * Parses argv into cfg. Returns -1 to go on, else the exit code: EXIT_OK
 * after --help (printed on stdout), EXIT_USAGE with the reason on stderr.
 * Without --seed, the seed comes from the clock and the pid.
 */
int sim_args_parse(int argc, char **argv, sim_args_t *cfg);

/* The definition's path: --definition, else the example in the source
 * tree, else the example relative to the working directory. The result is
 * cfg's, buf (when it is built there) or a constant. */
const char *sim_args_definition(const sim_args_t *cfg, char *buf, size_t size);

#endif
