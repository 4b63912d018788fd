/*
 * discover_keys - the candidate correlation keys of `steward discover`:
 * every string or integer field of the events and the Kafka message key,
 * ranked by the event types their values join; see discover_int.h.
 */
#include "shadow/discover_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void discover_note(analysis_t *a, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_array_append_new(a->undecided, json_string(text));
}

/* The text of a key value: a string as it is, an integer in decimal; NULL
 * for anything else. */
static const char *key_text(const json_t *v, char *buf, size_t buf_size)
{
    if (json_is_string(v))
        return json_string_length(v) > 0 ? json_string_value(v) : NULL;
    if (json_is_integer(v)) {
        snprintf(buf, buf_size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return buf;
    }
    return NULL;
}

/* A type's bit in a value's mask; types past 63 share the last bit, which
 * can only undercount their joins. */
static uint64_t type_bit(size_t type)
{
    return (uint64_t) 1 << (type < 63 ? type : 63);
}

static candidate_t *candidate_get(analysis_t *a, const char *pointer)
{
    json_t *at = json_object_get(a->cand_index, pointer);
    if (at != NULL)
        return &a->cands[json_integer_value(at)];
    if (a->n_cands == a->cap_cands) {
        size_t cap = a->cap_cands ? 2 * a->cap_cands : 16;
        candidate_t *grown = realloc(a->cands, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        a->cands = grown;
        a->cap_cands = cap;
    }
    candidate_t *c = &a->cands[a->n_cands];
    memset(c, 0, sizeof *c);
    c->pointer = strdup(pointer);
    c->message_key = strcmp(pointer, DISCOVER_MESSAGE_KEY) == 0;
    c->carried = calloc(a->n_types + 1, sizeof *c->carried);
    c->values = json_object();
    if (c->pointer == NULL || c->carried == NULL || c->values == NULL) {
        free(c->pointer);
        free(c->carried);
        json_decref(c->values);
        return NULL;
    }
    json_object_set_new(a->cand_index, pointer, json_integer((json_int_t) a->n_cands));
    a->n_cands++;
    return c;
}

/* One value of a candidate in an event of `type`. */
static bool candidate_add(analysis_t *a, const char *pointer, size_t type, const char *text)
{
    candidate_t *c = candidate_get(a, pointer);
    if (c == NULL)
        return false;
    c->carried[type]++;
    json_t *mask = json_object_get(c->values, text);
    if (mask == NULL)
        return json_object_set_new(c->values, text, json_integer((json_int_t) type_bit(type))) == 0;
    json_integer_set(mask, (json_int_t) ((uint64_t) json_integer_value(mask) | type_bit(type)));
    return true;
}

/* Appends `name` to a pointer with RFC 6901's escapes. */
static bool pointer_append(char *ptr, size_t size, size_t len, const char *name)
{
    if (len + 1 >= size)
        return false;
    ptr[len++] = '/';
    for (const char *p = name; *p != '\0'; p++) {
        const char *esc = *p == '~' ? "~0" : *p == '/' ? "~1" : NULL;
        size_t need = esc != NULL ? 2 : 1;
        if (len + need >= size)
            return false;
        if (esc != NULL)
            memcpy(ptr + len, esc, 2);
        else
            ptr[len] = *p;
        len += need;
    }
    ptr[len] = '\0';
    return true;
}

/* A field the options name as the type, id or time of the event's
 * topic: never a key. */
static bool excluded(const analysis_t *a, const char *ptr)
{
    const discover_options_t *o = a->opts;
    const discover_topic_fields_t *t = a->collecting;
    const char *type = t != NULL && t->type_pointer != NULL ? t->type_pointer : o->type_pointer;
    const char *id = t != NULL && t->id_pointer != NULL ? t->id_pointer : o->id_pointer;
    const char *time = t != NULL && t->time_pointer != NULL ? t->time_pointer : o->time_pointer;
    return strcmp(ptr, type) == 0 || strcmp(ptr, id) == 0 ||
           (time != NULL && strcmp(ptr, time) == 0);
}

static bool walk_fields(analysis_t *a, const json_t *obj, size_t type, char *ptr, size_t len,
                        int depth)
{
    const char *name;
    json_t *v;
    json_object_foreach((json_t *) obj, name, v)
    {
        if (!pointer_append(ptr, 257, len, name))
            continue;
        size_t sub = strlen(ptr);
        if (json_is_object(v)) {
            if (depth < DISCOVER_MAX_KEY_DEPTH && !walk_fields(a, v, type, ptr, sub, depth + 1))
                return false;
            ptr[len] = '\0';
            continue;
        }
        char num[32];
        const char *text = key_text(v, num, sizeof num);
        if (text != NULL && !excluded(a, ptr) && !candidate_add(a, ptr, type, text))
            return false;
        ptr[len] = '\0';
    }
    return true;
}

bool discover_collect(analysis_t *a, size_t i)
{
    const discover_event_t *ev = &a->ev[i];
    size_t type = a->event_type[i];
    char ptr[257] = "";
    a->collecting = NULL;
    for (size_t t = 0; t < a->opts->n_topic_fields && a->collecting == NULL; t++)
        if (strcmp(a->opts->topic_fields[t].topic, ev->topic) == 0)
            a->collecting = &a->opts->topic_fields[t];
    if (json_is_object(ev->payload) && !walk_fields(a, ev->payload, type, ptr, 0, 1))
        return false;
    if (ev->message_key != NULL && ev->message_key[0] != '\0' &&
        !candidate_add(a, DISCOVER_MESSAGE_KEY, type, ev->message_key))
        return false;
    return true;
}

static int popcount64(uint64_t x)
{
    int n = 0;
    for (; x != 0; x &= x - 1)
        n++;
    return n;
}

static bool keylike(const candidate_t *c)
{
    return c->distinct >= 2 && c->joins > 0;
}

static int compare_candidates(const void *x, const void *y)
{
    const candidate_t *a = x, *b = y;
    if (keylike(a) != keylike(b))
        return keylike(a) ? -1 : 1;
    if (a->joins != b->joins)
        return a->joins > b->joins ? -1 : 1;
    if (a->share != b->share)
        return a->share > b->share ? -1 : 1;
    return strcmp(a->pointer, b->pointer); /* "/..." before the message key */
}

void discover_rank(analysis_t *a)
{
    for (size_t c = 0; c < a->n_cands; c++) {
        candidate_t *cand = &a->cands[c];
        const char *text;
        json_t *mask;
        cand->joining = cand->joins = 0;
        cand->distinct = json_object_size(cand->values);
        json_object_foreach(cand->values, text, mask)
        {
            int types = popcount64((uint64_t) json_integer_value(mask));
            if (types >= 2) {
                cand->joining++;
                cand->joins += (size_t) types - 1;
            }
        }
        double share = 1;
        for (size_t t = 0; t < a->n_types; t++) {
            if (a->type_count[t] == 0)
                continue;
            double s = (double) cand->carried[t] / (double) a->type_count[t];
            share = s < share ? s : share;
        }
        cand->share = share;
    }
    qsort(a->cands, a->n_cands, sizeof *a->cands, compare_candidates);
    json_object_clear(a->cand_index);
    for (size_t c = 0; c < a->n_cands; c++)
        json_object_set_new(a->cand_index, a->cands[c].pointer, json_integer((json_int_t) c));
}

long discover_find(const analysis_t *a, const char *name)
{
    json_t *at = json_object_get(a->cand_index, name);
    return at != NULL ? (long) json_integer_value(at) : -1;
}

const char *discover_value(const analysis_t *a, const candidate_t *c, size_t i, char *buf,
                           size_t buf_size)
{
    const discover_event_t *ev = &a->ev[i];
    if (c->message_key)
        return ev->message_key != NULL && ev->message_key[0] != '\0' ? ev->message_key : NULL;
    /* The pointer came from walking this shape, so it has no array
     * indexes: member names suffice. */
    const json_t *v = ev->payload;
    const char *p = c->pointer;
    char name[257];
    while (v != NULL && *p == '/') {
        size_t o = 0;
        for (p++; *p != '\0' && *p != '/' && o + 1 < sizeof name; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                name[o++] = p[1] == '0' ? '~' : '/';
                p++;
            } else {
                name[o++] = *p;
            }
        }
        name[o] = '\0';
        v = json_is_object(v) ? json_object_get(v, name) : NULL;
    }
    return v != NULL ? key_text(v, buf, buf_size) : NULL;
}

bool discover_type_keys(analysis_t *a, size_t key)
{
    const candidate_t *k = &a->cands[key];
    char buf[32];
    for (size_t t = 0; t < a->n_types; t++) {
        a->type_key[t] = -1;
        if ((double) k->carried[t] >= DISCOVER_MIN_KEY_SHARE * (double) a->type_count[t])
            continue;
        /* Which other field holds the key's values in this type's events? */
        for (size_t c = 0; c < a->n_cands; c++)
            a->cands[c].hits = 0;
        for (size_t i = 0; i < a->n; i++) {
            if (a->event_type[i] != t)
                continue;
            for (size_t c = 0; c < a->n_cands; c++) {
                const char *v =
                    c == key ? NULL : discover_value(a, &a->cands[c], i, buf, sizeof buf);
                if (v != NULL && json_object_get(k->values, v) != NULL)
                    a->cands[c].hits++;
            }
        }
        long best = -1;
        for (size_t c = 0; c < a->n_cands; c++) {
            if (c != key && (best < 0 || a->cands[c].hits > a->cands[best].hits))
                best = (long) c;
        }
        if (best < 0 ||
            (double) a->cands[best].hits < DISCOVER_MIN_KEY_SHARE * (double) a->type_count[t])
            continue;
        a->type_key[t] = best;
        const candidate_t *b = &a->cands[best];
        discover_note(a,
                      "%s: %zu of its %zu events carry the key as %s, not as %s: the draft "
                      "gives the event that key (events.%s.key)",
                      a->type_names[t], b->hits, a->type_count[t],
                      b->message_key ? "the Kafka message key" : b->pointer,
                      k->message_key ? "the Kafka message key" : k->pointer, a->type_names[t]);
    }
    return true;
}

const candidate_t *discover_key_of(const analysis_t *a, size_t key, size_t i)
{
    size_t t = a->event_type[i];
    return t != SIZE_MAX && a->type_key[t] >= 0 ? &a->cands[a->type_key[t]] : &a->cands[key];
}

json_t *discover_key_json(const candidate_t *c)
{
    return c->message_key ? json_pack("{s:s}", "from", "message_key") : json_string(c->pointer);
}

void discover_candidates_free(analysis_t *a)
{
    for (size_t c = 0; c < a->n_cands; c++) {
        free(a->cands[c].pointer);
        free(a->cands[c].carried);
        json_decref(a->cands[c].values);
    }
    free(a->cands);
    a->cands = NULL;
    a->n_cands = 0;
}
