/*
 * sim_schemas - the Avro side of a steward-sim run (--avro-topic): the
 * record schema of each event type seen on that topic, registered once
 * under subject <topic>-value with a Confluent-compatible schema registry
 * (--schema-registry, over HTTP) and/or written as <id>.avsc into a folder
 * (--avro-schema-dir), and each event's JSON value re-framed in place in the
 * Confluent wire format (sim_avro). Malformed (--poison) messages are left
 * as they are: they are what a decoder must refuse.
 */
#ifndef STEWARD_SIM_SCHEMAS_H
#define STEWARD_SIM_SCHEMAS_H

#include "common/err.h"
#include "sim/sim_kafka.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sim_schemas sim_schemas_t;

/* Schemas for `topic`; registry_url and dir may each be NULL (not both).
 * NULL with the reason when dir cannot be made. */
sim_schemas_t *sim_schemas_new(const char *topic, const char *registry_url, const char *dir,
                               char *errstr, size_t errstr_size);
void sim_schemas_free(sim_schemas_t *s); /* NULL is a no-op */

/*
 * When `topic` is the Avro one and o is an event (not poison), replaces
 * o's JSON value by its Avro framing, registering or writing its schema
 * first if it is new. ERR_TRANSIENT when the registry cannot be reached or
 * fails (5xx), ERR_INVALID when it refuses the schema or the value does
 * not fit, each with the reason.
 */
err_class_t sim_schemas_frame(sim_schemas_t *s, const char *topic, bool poison, sim_kafka_msg_t *o,
                              char *errstr, size_t errstr_size);

/* How many schemas were registered or written so far. */
size_t sim_schemas_count(const sim_schemas_t *s);

#endif
