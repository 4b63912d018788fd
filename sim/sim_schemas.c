/*
 * sim_schemas - see sim_schemas.h. A run has a handful of event types, so
 * the schemas are a small array searched by their text.
 */
#include "sim/sim_schemas.h"

#include "sim/sim.h"
#include "sim/sim_avro.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SCHEMAS_MAX  64
#define RESPONSE_MAX 65536

typedef struct schema_entry {
    char *text;
    sim_avro_encoder_t *enc;
} schema_entry_t;

struct sim_schemas {
    char *topic;
    char *registry_url;
    char *dir;
    schema_entry_t entries[SCHEMAS_MAX];
    size_t n;
    uint32_t next_local_id; /* without a registry */
};

sim_schemas_t *sim_schemas_new(const char *topic, const char *registry_url, const char *dir,
                               char *errstr, size_t errstr_size)
{
    sim_schemas_t *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    s->topic = strdup(topic);
    s->registry_url = registry_url ? strdup(registry_url) : NULL;
    s->dir = dir ? strdup(dir) : NULL;
    s->next_local_id = 1;
    if (!s->topic || (registry_url && !s->registry_url) || (dir && !s->dir)) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        sim_schemas_free(s);
        return NULL;
    }
    /* A trailing slash would make "//subjects". */
    if (s->registry_url) {
        size_t n = strlen(s->registry_url);
        while (n > 0 && s->registry_url[n - 1] == '/')
            s->registry_url[--n] = '\0';
    }
    if (s->dir && mkdir(s->dir, 0755) != 0 && errno != EEXIST) {
        err_set(ERR_INVALID, errstr, errstr_size, "--avro-schema-dir %s: %s", s->dir,
                strerror(errno));
        sim_schemas_free(s);
        return NULL;
    }
    return s;
}

void sim_schemas_free(sim_schemas_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->entries[i].text);
        sim_avro_encoder_free(s->entries[i].enc);
    }
    free(s->topic);
    free(s->registry_url);
    free(s->dir);
    free(s);
}

size_t sim_schemas_count(const sim_schemas_t *s)
{
    return s->n;
}

typedef struct response {
    char buf[RESPONSE_MAX];
    size_t len;
} response_t;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    response_t *r = arg;
    size_t n = size * nmemb;
    size_t room = sizeof r->buf - 1 - r->len;
    size_t take = n < room ? n : room;
    memcpy(r->buf + r->len, data, take);
    r->len += take;
    r->buf[r->len] = '\0';
    return n; /* a longer answer is cut, not an error: only its start is read */
}

/* POST url/subjects/<topic>-value/versions {"schema": text}; *id from the
 * answer's "id". */
static err_class_t registry_register(const sim_schemas_t *s, const char *text, uint32_t *id,
                                     char *errstr, size_t errstr_size)
{
    char url[2048];
    if ((size_t) snprintf(url, sizeof url, "%s/subjects/%s-value/versions", s->registry_url,
                          s->topic) >= sizeof url)
        return err_set(ERR_INVALID, errstr, errstr_size, "--schema-registry: URL too long");
    json_t *req = json_pack("{s:s}", "schema", text);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    CURL *c = body ? curl_easy_init() : NULL;
    if (!c) {
        free(body);
        return err_set(ERR_FATAL, errstr, errstr_size, "schema registry: out of memory");
    }
    response_t *resp = calloc(1, sizeof *resp);
    struct curl_slist *hdrs =
        curl_slist_append(NULL, "Content-Type: application/vnd.schemaregistry.v1+json");
    err_class_t cls = ERR_OK;
    if (!resp || !hdrs) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "schema registry: out of memory");
        goto done;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        cls = err_set(ERR_TRANSIENT, errstr, errstr_size, "schema registry %s: %s", url,
                      curl_easy_strerror(rc));
        goto done;
    }
    json_t *ans = json_loads(resp->buf, 0, NULL);
    json_t *jid = json_object_get(ans, "id");
    if (status / 100 != 2 || !json_is_integer(jid) || json_integer_value(jid) < 0 ||
        json_integer_value(jid) > UINT32_MAX) {
        cls = err_set(status >= 500 ? ERR_TRANSIENT : ERR_INVALID, errstr, errstr_size,
                      "schema registry %s: HTTP %ld, %.300s", url, status,
                      resp->len ? resp->buf : "no body");
    } else {
        *id = (uint32_t) json_integer_value(jid);
    }
    json_decref(ans);
done:
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    free(resp);
    free(body);
    return cls;
}

static err_class_t write_avsc(const sim_schemas_t *s, uint32_t id, const char *text, char *errstr,
                              size_t errstr_size)
{
    char path[4096];
    if ((size_t) snprintf(path, sizeof path, "%s/%" PRIu32 ".avsc", s->dir, id) >= sizeof path)
        return err_set(ERR_INVALID, errstr, errstr_size, "--avro-schema-dir: path too long");
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(ERR_INVALID, errstr, errstr_size, "%s: %s", path, strerror(errno));
    int bad = fprintf(f, "%s\n", text) < 0;
    bad |= fclose(f) != 0;
    if (bad)
        return err_set(ERR_INVALID, errstr, errstr_size, "%s: %s", path, strerror(errno));
    return ERR_OK;
}

/* The encoder of schema `text`, registered or written if new. */
static err_class_t encoder_for(sim_schemas_t *s, const char *text, sim_avro_encoder_t **enc,
                               char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->entries[i].text, text) == 0) {
            *enc = s->entries[i].enc;
            return ERR_OK;
        }
    if (s->n == SCHEMAS_MAX)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "--avro-topic %s: more than %d distinct schemas", s->topic, SCHEMAS_MAX);
    uint32_t id = s->next_local_id;
    err_class_t cls = ERR_OK;
    if (s->registry_url)
        cls = registry_register(s, text, &id, errstr, errstr_size);
    if (cls == ERR_OK && s->dir)
        cls = write_avsc(s, id, text, errstr, errstr_size);
    if (cls != ERR_OK)
        return cls;
    sim_avro_encoder_t *e = sim_avro_encoder_new(text, id, errstr, errstr_size);
    char *copy = e ? strdup(text) : NULL;
    if (!copy) {
        sim_avro_encoder_free(e);
        return e ? err_set(ERR_FATAL, errstr, errstr_size, "out of memory") : ERR_INVALID;
    }
    s->entries[s->n].text = copy;
    s->entries[s->n].enc = e;
    s->n++;
    if (!s->registry_url)
        s->next_local_id++;
    *enc = e;
    return ERR_OK;
}

err_class_t sim_schemas_frame(sim_schemas_t *s, const char *topic, bool poison, sim_kafka_msg_t *o,
                              char *errstr, size_t errstr_size)
{
    if (poison || o->value == NULL || strcmp(topic, s->topic) != 0)
        return ERR_OK;
    json_error_t jerr;
    json_t *v = json_loadb(o->value, o->value_len, 0, &jerr);
    if (!v)
        return err_set(ERR_INVALID, errstr, errstr_size, "--avro-topic %s: a value is not JSON: %s",
                       s->topic, jerr.text);
    /* The record is named after the event type: the value's "type", or
     * (a CloudEvent's value has none) the kind's name. */
    const char *name = json_string_value(json_object_get(v, "type"));
    if (!name)
        name = sim_kind_name((sim_kind_t) o->kind);
    char text[SIM_AVRO_SCHEMA_MAX];
    sim_avro_encoder_t *enc = NULL;
    unsigned char framed[sizeof o->value_buf];
    size_t len = 0;
    err_class_t cls = sim_avro_schema_json(name, v, text, sizeof text, errstr, errstr_size);
    if (cls == ERR_OK)
        cls = encoder_for(s, text, &enc, errstr, errstr_size);
    if (cls == ERR_OK)
        cls = sim_avro_encode(enc, v, framed, sizeof framed, &len, errstr, errstr_size);
    json_decref(v);
    if (cls != ERR_OK)
        return cls;
    memcpy(o->value_buf, framed, len);
    o->value = o->value_buf;
    o->value_len = len;
    return ERR_OK;
}
