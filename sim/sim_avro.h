/*
 * sim_avro - steward-sim's Avro values in the Confluent wire format: the
 * record schema of an event type, derived from one of its JSON values (a
 * flat object of strings, integers, numbers and booleans, as
 * sim_format_value writes them), and the framing of a value under a
 * registered schema: magic byte 0, the schema's id as 4 bytes big-endian,
 * then the record in Avro's binary encoding (avro-c). Registering the
 * schema is the caller's: this module does no I/O.
 */
#ifndef STEWARD_SIM_AVRO_H
#define STEWARD_SIM_AVRO_H

#include "common/err.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The magic byte and header length of the Confluent wire format. */
#define SIM_AVRO_MAGIC      0
#define SIM_AVRO_HEADER_LEN 5

/* The longest schema text sim_avro_schema_json writes, and the most fields
 * of an event it takes. */
#define SIM_AVRO_SCHEMA_MAX 4096
#define SIM_AVRO_MAX_FIELDS 32

/*
 * Writes into buf the Avro record schema (JSON text) named `name` whose
 * fields are value's members in their order: a string is "string", an
 * integer "long", a real "double", true/false "boolean". ERR_INVALID with
 * the reason when value is not such an object, a member's name or the
 * record's name is not a valid Avro name, or the text does not fit.
 */
err_class_t sim_avro_schema_json(const char *name, const json_t *value, char *buf, size_t size,
                                 char *errstr, size_t errstr_size);

typedef struct sim_avro_encoder sim_avro_encoder_t;

/* An encoder of values of the record schema `schema_json`, registered
 * under `id`; NULL with the reason (the schema does not parse, or is not a
 * record of such fields). */
sim_avro_encoder_t *sim_avro_encoder_new(const char *schema_json, uint32_t id, char *errstr,
                                         size_t errstr_size);
void sim_avro_encoder_free(sim_avro_encoder_t *e); /* NULL is a no-op */

/*
 * Frames value (a JSON object with every field of the schema, of its type;
 * members the schema lacks are an error too) into out[0..size): header,
 * then the binary record; *len is the bytes written. ERR_INVALID with the
 * field and the reason when value does not fit the schema, or when out is
 * too small.
 */
err_class_t sim_avro_encode(sim_avro_encoder_t *e, const json_t *value, unsigned char *out,
                            size_t size, size_t *len, char *errstr, size_t errstr_size);

#endif
