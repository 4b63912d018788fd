/*
 * sim_avro - see sim_avro.h. The encoder keeps one generic value of the
 * schema and resets it per event, so framing allocates nothing after
 * sim_avro_encoder_new.
 */
#include "sim/sim_avro.h"

#include <avro.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct sim_avro_encoder {
    avro_schema_t schema;
    avro_value_iface_t *iface;
    avro_value_t value;
    bool has_value;
    uint32_t id;
    size_t n_fields;
};

/* Avro's rule for names: [A-Za-z_][A-Za-z0-9_]*. */
static bool avro_name_ok(const char *s)
{
    if (!s || !*s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return false;
    for (const char *p = s + 1; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return false;
    return true;
}

static const char *avro_type_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "long";
    case JSON_REAL:
        return "double";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return NULL;
    }
}

err_class_t sim_avro_schema_json(const char *name, const json_t *value, char *buf, size_t size,
                                 char *errstr, size_t errstr_size)
{
    if (!avro_name_ok(name))
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: record name '%s' is not an Avro name ([A-Za-z_][A-Za-z0-9_]*)",
                       name ? name : "(null)");
    if (!json_is_object(value))
        return err_set(ERR_INVALID, errstr, errstr_size, "avro: the value of %s is not an object",
                       name);
    if (json_object_size(value) == 0 || json_object_size(value) > SIM_AVRO_MAX_FIELDS)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: the value of %s has %zu fields (1 to %d)", name,
                       json_object_size(value), SIM_AVRO_MAX_FIELDS);

    json_t *fields = json_array();
    const char *key;
    json_t *member;
    json_object_foreach((json_t *) value, key, member)
    {
        const char *type = avro_type_of(member);
        if (!avro_name_ok(key) || !type) {
            json_decref(fields);
            return err_set(ERR_INVALID, errstr, errstr_size,
                           !type ? "avro: field '%s' of %s is not a string, number or boolean"
                                 : "avro: field '%s' of %s is not an Avro name",
                           key, name);
        }
        json_array_append_new(fields, json_pack("{s:s, s:s}", "name", key, "type", type));
    }
    json_t *schema = json_pack("{s:s, s:s, s:o}", "type", "record", "name", name, "fields", fields);
    char *text = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    if (!text)
        return err_set(ERR_FATAL, errstr, errstr_size, "avro: out of memory for %s's schema", name);
    size_t n = strlen(text);
    if (n >= size || n >= SIM_AVRO_SCHEMA_MAX) {
        free(text);
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: the schema of %s is %zu bytes, more than fits (%zu)", name, n,
                       size < SIM_AVRO_SCHEMA_MAX ? size : (size_t) SIM_AVRO_SCHEMA_MAX);
    }
    memcpy(buf, text, n + 1);
    free(text);
    return ERR_OK;
}

sim_avro_encoder_t *sim_avro_encoder_new(const char *schema_json, uint32_t id, char *errstr,
                                         size_t errstr_size)
{
    sim_avro_encoder_t *e = calloc(1, sizeof *e);
    if (!e) {
        err_set(ERR_FATAL, errstr, errstr_size, "avro: out of memory");
        return NULL;
    }
    e->id = id;
    if (avro_schema_from_json_length(schema_json, strlen(schema_json), &e->schema) != 0) {
        err_set(ERR_INVALID, errstr, errstr_size, "avro: the schema does not parse: %s",
                avro_strerror());
        goto fail;
    }
    if (!is_avro_record(e->schema)) {
        err_set(ERR_INVALID, errstr, errstr_size, "avro: the schema is not a record");
        goto fail;
    }
    e->n_fields = avro_schema_record_size(e->schema);
    for (size_t i = 0; i < e->n_fields; i++) {
        avro_schema_t f = avro_schema_record_field_get_by_index(e->schema, (int) i);
        avro_type_t t = avro_typeof(f);
        if (t != AVRO_STRING && t != AVRO_INT64 && t != AVRO_INT32 && t != AVRO_DOUBLE &&
            t != AVRO_BOOLEAN) {
            err_set(ERR_INVALID, errstr, errstr_size,
                    "avro: field '%s' is not a string, int, long, double or boolean",
                    avro_schema_record_field_name(e->schema, (int) i));
            goto fail;
        }
    }
    e->iface = avro_generic_class_from_schema(e->schema);
    if (!e->iface || avro_generic_value_new(e->iface, &e->value) != 0) {
        err_set(ERR_FATAL, errstr, errstr_size, "avro: no value for the schema: %s",
                avro_strerror());
        goto fail;
    }
    e->has_value = true;
    return e;
fail:
    sim_avro_encoder_free(e);
    return NULL;
}

void sim_avro_encoder_free(sim_avro_encoder_t *e)
{
    if (!e)
        return;
    if (e->has_value)
        avro_value_decref(&e->value);
    if (e->iface)
        avro_value_iface_decref(e->iface);
    if (e->schema)
        avro_schema_decref(e->schema);
    free(e);
}

/* Sets field (of Avro type t) from the JSON member m. */
static err_class_t set_field(avro_value_t *field, avro_type_t t, const char *name, const json_t *m,
                             char *errstr, size_t errstr_size)
{
    int rc = -1;
    switch (t) {
    case AVRO_STRING:
        if (json_is_string(m))
            rc = avro_value_set_string_len(field, json_string_value(m), json_string_length(m) + 1);
        break;
    case AVRO_INT64:
        if (json_is_integer(m))
            rc = avro_value_set_long(field, (int64_t) json_integer_value(m));
        break;
    case AVRO_INT32:
        if (json_is_integer(m) && json_integer_value(m) >= INT32_MIN &&
            json_integer_value(m) <= INT32_MAX)
            rc = avro_value_set_int(field, (int32_t) json_integer_value(m));
        break;
    case AVRO_DOUBLE:
        if (json_is_number(m))
            rc = avro_value_set_double(field, json_number_value(m));
        break;
    case AVRO_BOOLEAN:
        if (json_is_boolean(m))
            rc = avro_value_set_boolean(field, json_is_true(m));
        break;
    default:
        break;
    }
    if (rc != 0)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: field '%s' is missing or not of its schema's type", name);
    return ERR_OK;
}

err_class_t sim_avro_encode(sim_avro_encoder_t *e, const json_t *value, unsigned char *out,
                            size_t size, size_t *len, char *errstr, size_t errstr_size)
{
    *len = 0;
    if (!json_is_object(value))
        return err_set(ERR_INVALID, errstr, errstr_size, "avro: the value is not an object");
    if (json_object_size(value) != e->n_fields)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: the value has %zu fields, its schema %zu", json_object_size(value),
                       e->n_fields);
    if (size <= SIM_AVRO_HEADER_LEN)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: a %zu-byte buffer holds no framed value", size);

    avro_value_reset(&e->value);
    for (size_t i = 0; i < e->n_fields; i++) {
        const char *name = avro_schema_record_field_name(e->schema, (int) i);
        avro_schema_t fs = avro_schema_record_field_get_by_index(e->schema, (int) i);
        avro_value_t field;
        if (avro_value_get_by_index(&e->value, i, &field, NULL) != 0)
            return err_set(ERR_FATAL, errstr, errstr_size, "avro: field %zu: %s", i,
                           avro_strerror());
        err_class_t cls = set_field(&field, avro_typeof(fs), name, json_object_get(value, name),
                                    errstr, errstr_size);
        if (cls != ERR_OK)
            return cls;
    }

    out[0] = SIM_AVRO_MAGIC;
    out[1] = (unsigned char) (e->id >> 24);
    out[2] = (unsigned char) (e->id >> 16);
    out[3] = (unsigned char) (e->id >> 8);
    out[4] = (unsigned char) e->id;
    avro_writer_t w = avro_writer_memory((char *) out + SIM_AVRO_HEADER_LEN,
                                         (int64_t) (size - SIM_AVRO_HEADER_LEN));
    if (!w)
        return err_set(ERR_FATAL, errstr, errstr_size, "avro: no writer: %s", avro_strerror());
    int rc = avro_value_write(w, &e->value);
    int64_t n = avro_writer_tell(w);
    avro_writer_free(w);
    if (rc != 0)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "avro: the value does not fit in %zu bytes (%s)", size, avro_strerror());
    *len = SIM_AVRO_HEADER_LEN + (size_t) n;
    return ERR_OK;
}
