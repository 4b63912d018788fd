/*
 * discover - a draft definition from observed traffic; see discover.h for
 * the terms and docs/quickstart.md for how it is used.
 */
#include "shadow/discover.h"

#include "shadow/discover_int.h"

#include "definitions/duration.h"
#include "shadow/report.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TYPE_BYTES 255 /* the validator's limit on an event type */

int64_t discover_percentile(const int64_t *sorted, size_t n, double fraction)
{
    /* percentile_disc: the first value whose cumulative share reaches it. */
    double pos = ceil(fraction * (double) n);
    size_t i = pos < 1 ? 0 : (size_t) pos - 1;
    return sorted[i < n ? i : n - 1];
}

char *discover_state_name(const char *type, char *buf, size_t buf_size)
{
    size_t o = 0, cap = buf_size - 1 < 63 ? buf_size - 1 : 63;
    bool gap = false; /* an underscore is owed before the next letter */
    for (const unsigned char *p = (const unsigned char *) type; *p != '\0' && o < cap; p++) {
        if (isupper(*p) && o > 0 && (islower(p[-1]) || isdigit(p[-1])))
            gap = true;
        if (!isalnum(*p) || *p >= 0x80) {
            gap = o > 0;
            continue;
        }
        if (gap && o + 1 < cap)
            buf[o++] = '_';
        gap = false;
        if (o == 0 && !isalpha(*p)) {
            buf[o++] = 's';
            if (o + 1 < cap)
                buf[o++] = '_';
        }
        buf[o++] = (char) tolower(*p);
    }
    if (o == 0)
        buf[o++] = 's';
    buf[o] = '\0';
    return buf;
}

/* ---- the pieces of the analysis --------------------------------------- */

typedef struct keyed {
    const char *key; /* borrowed from keybufs or the event */
    int64_t time_ms;
    size_t idx; /* input order breaks ties */
} keyed_t;

static int compare_keyed(const void *x, const void *y)
{
    const keyed_t *a = x, *b = y;
    int c = strcmp(a->key, b->key);
    if (c != 0)
        return c;
    if (a->time_ms != b->time_ms)
        return a->time_ms < b->time_ms ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int compare_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *) x, b = *(const int64_t *) y;
    return a < b ? -1 : a > b;
}

typedef struct samples {
    int64_t *ms;
    size_t n, cap;
} samples_t;

static bool samples_add(samples_t *s, int64_t ms)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        int64_t *grown = realloc(s->ms, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        s->ms = grown;
        s->cap = cap;
    }
    s->ms[s->n++] = ms;
    return true;
}

static const char *majority_topic(const json_t *topics)
{
    const char *best = NULL, *topic;
    json_int_t most = -1;
    json_t *v;
    json_object_foreach((json_t *) topics, topic, v)
    {
        if (json_integer_value(v) > most) {
            most = json_integer_value(v);
            best = topic;
        }
    }
    return best;
}

static char *fmt_ms(int64_t ms, char *buf, size_t size)
{
    return duration_format(ms, buf, size);
}

/* Whether runner-up c joins almost as many events as the key. */
static bool keylike_near(const candidate_t *c, const candidate_t *key)
{
    return c->distinct >= 2 && c->joins > 0 && c->joins * 10 >= key->joins * 9;
}

/* ---- the analysis ------------------------------------------------------ */

err_class_t discover_analyse(const discover_event_t *events, size_t n,
                             const discover_options_t *user_opts, json_t **out, char *errstr,
                             size_t errstr_size)
{
    discover_options_t opts = *user_opts;
    if (opts.process == NULL)
        opts.process = "discovered";
    if (opts.type_pointer == NULL)
        opts.type_pointer = "/type";
    if (opts.id_pointer == NULL)
        opts.id_pointer = "/id";

    analysis_t a = {.ev = events, .n = n, .opts = &opts};
    err_class_t rc = ERR_OK;
    keyed_t *keyed = NULL;
    char(*keybufs)[32] = NULL;
    size_t *graph = NULL, *starts = NULL, *lasts = NULL, *repeats = NULL;
    samples_t *steps = NULL;
    char(*state_names)[64] = NULL;
    bool *reached = NULL, *terminal = NULL, *finishes = NULL, *used = NULL, *aside = NULL;
    size_t *bfs = NULL;
    json_t *report = NULL;

    *out = NULL;
    a.types = json_object();
    a.cand_index = json_object();
    a.undecided = json_array();
    a.event_type = calloc(n + 1, sizeof *a.event_type);
    a.type_names = calloc(n + 1, sizeof *a.type_names);
    if (a.types == NULL || a.cand_index == NULL || a.undecided == NULL || a.event_type == NULL ||
        a.type_names == NULL)
        goto oom;

    /* The types, their counts and topics. */
    size_t too_long = 0;
    for (size_t i = 0; i < n; i++) {
        a.event_type[i] = SIZE_MAX;
        if (strlen(events[i].type) > MAX_TYPE_BYTES || events[i].type[0] == '\0') {
            too_long++;
            continue;
        }
        json_t *at = json_object_get(a.types, events[i].type);
        if (at == NULL) {
            json_object_set_new(a.types, events[i].type, json_integer((json_int_t) a.n_types));
            a.type_names[a.n_types] = events[i].type;
            a.event_type[i] = a.n_types++;
        } else {
            a.event_type[i] = (size_t) json_integer_value(at);
        }
    }
    if (too_long > 0)
        discover_note(&a, "%zu events had an empty type or one over %d bytes and were left out",
                      too_long, MAX_TYPE_BYTES);
    a.type_count = calloc(a.n_types + 1, sizeof *a.type_count);
    a.type_topics = calloc(a.n_types + 1, sizeof *a.type_topics);
    if (a.type_count == NULL || a.type_topics == NULL)
        goto oom;
    for (size_t t = 0; t < a.n_types; t++) {
        if ((a.type_topics[t] = json_object()) == NULL)
            goto oom;
    }
    for (size_t i = 0; i < n; i++) {
        size_t t = a.event_type[i];
        if (t == SIZE_MAX)
            continue;
        a.type_count[t]++;
        json_t *c = json_object_get(a.type_topics[t], events[i].topic);
        if (c == NULL)
            json_object_set_new(a.type_topics[t], events[i].topic, json_integer(1));
        else
            json_integer_set(c, json_integer_value(c) + 1);
        if (!discover_collect(&a, i))
            goto oom;
    }
    if (a.n_types < 2) {
        snprintf(errstr, errstr_size,
                 "%zu event type%s in %zu events: a process needs at least two; read more "
                 "topics or a longer --since",
                 a.n_types, a.n_types == 1 ? "" : "s", n);
        rc = ERR_INVALID;
        goto out;
    }

    if (opts.kafka_time)
        discover_note(&a, "the order of events: by their Kafka timestamps (or ce_time), which is "
                          "when the broker got them; if the events carry their own time, give "
                          "--time POINTER, so that a late producer does not reorder a trace");

    /* The candidate keys, best first; the key, unless the options name it. */
    discover_rank(&a);
    long chosen = 0;
    if (opts.key != NULL) {
        chosen = discover_find(&a, opts.key);
        if (chosen < 0) {
            snprintf(errstr, errstr_size,
                     "no event carries the key %s%s: give another --key, or none to let "
                     "discover choose",
                     strcmp(opts.key, DISCOVER_MESSAGE_KEY) == 0 ? "(the Kafka message key) " : "",
                     opts.key);
            rc = ERR_INVALID;
            goto out;
        }
    } else if (a.n_cands == 0 || a.cands[0].joining == 0) {
        snprintf(errstr, errstr_size,
                 "no field carries the same value in events of two types, so nothing says "
                 "which events belong together; read the topics of one process, or name the "
                 "key with --key");
        rc = ERR_INVALID;
        goto out;
    }
    const candidate_t *key = &a.cands[chosen];
    const char *key_name = key->message_key ? "the Kafka message key" : key->pointer;
    if (opts.key == NULL && a.n_cands > 1 && keylike_near(&a.cands[1], key))
        discover_note(&a,
                      "the key: %s and %s join almost as many events (%zu and %zu); check the "
                      "choice, or name it with --key",
                      key_name,
                      a.cands[1].message_key ? "the Kafka message key" : a.cands[1].pointer,
                      key->joins, a.cands[1].joins);
    a.type_key = calloc(a.n_types + 1, sizeof *a.type_key);
    if (a.type_key == NULL || !discover_type_keys(&a, (size_t) chosen))
        goto oom;

    /* Each event's key value, by its topic's key. */
    keyed = calloc(n + 1, sizeof *keyed);
    keybufs = calloc(n + 1, sizeof *keybufs);
    aside = calloc(a.n_types + 1, sizeof *aside);
    json_t *masks = json_object();
    if (keyed == NULL || keybufs == NULL || aside == NULL || masks == NULL) {
        json_decref(masks);
        goto oom;
    }
    size_t n_keyed = 0, keyless = 0;
    for (size_t i = 0; i < n; i++) {
        if (a.event_type[i] == SIZE_MAX)
            continue;
        const char *text = discover_value(&a, discover_key_of(&a, (size_t) chosen, i), i,
                                          keybufs[i], sizeof keybufs[i]);
        if (text == NULL) {
            keyless++;
            continue;
        }
        keyed[n_keyed++] = (keyed_t){text, events[i].time_ms, i};
        json_t *mask = json_object_get(masks, text);
        uint64_t bit = (uint64_t) 1 << (a.event_type[i] < 63 ? a.event_type[i] : 63);
        if (mask == NULL)
            json_object_set_new(masks, text, json_integer((json_int_t) bit));
        else
            json_integer_set(mask, (json_int_t) ((uint64_t) json_integer_value(mask) | bit));
    }
    /* A type none of whose key values another type shares is not of this
     * process (an unrelated type on a shared topic): set aside, not fatal. */
    bool *joined = calloc(a.n_types + 1, sizeof *joined);
    if (joined == NULL) {
        json_decref(masks);
        goto oom;
    }
    for (size_t k = 0; k < n_keyed; k++) {
        uint64_t m = (uint64_t) json_integer_value(json_object_get(masks, keyed[k].key));
        if ((m & (m - 1)) != 0)
            joined[a.event_type[keyed[k].idx]] = true;
    }
    json_decref(masks);
    size_t kept = 0, kept_keyed = 0;
    for (size_t t = 0; t < a.n_types; t++) {
        aside[t] = !joined[t] && opts.key == NULL;
        kept += !aside[t];
        if (aside[t])
            discover_note(&a,
                          "%s (%zu events) shares no value of %s with the other types: set aside "
                          "(another process's event on a shared topic, or its key is elsewhere)",
                          a.type_names[t], a.type_count[t], key_name);
    }
    free(joined);
    for (size_t k = 0; k < n_keyed; k++) {
        if (!aside[a.event_type[keyed[k].idx]])
            keyed[kept_keyed++] = keyed[k];
    }
    n_keyed = kept_keyed;
    if (kept < 2) {
        snprintf(errstr, errstr_size,
                 "%s joins events of fewer than two types: nothing to draft a process from",
                 key_name);
        rc = ERR_INVALID;
        goto out;
    }
    /* The share of the key, over the kept types it keys (one with a key
     * of its own is covered by that key). */
    double share = 1;
    for (size_t t = 0; t < a.n_types; t++) {
        if (aside[t] || a.type_key[t] >= 0)
            continue;
        double s = (double) key->carried[t] / (double) a.type_count[t];
        share = s < share ? s : share;
    }
    if (share < DISCOVER_MIN_KEY_SHARE)
        discover_note(&a,
                      "the key: %s is in %.1f%% of the least covered type's events, under %.0f%% "
                      "(give that type its own \"key\")",
                      key_name, share * 100, DISCOVER_MIN_KEY_SHARE * 100);
    if (keyless > 0)
        discover_note(&a,
                      "%zu events carried no string or integer key (%s) and are not in any trace",
                      keyless, key_name);
    qsort(keyed, n_keyed, sizeof *keyed, compare_keyed);

    size_t nt = a.n_types;
    graph = calloc(nt * nt, sizeof *graph);
    starts = calloc(nt, sizeof *starts);
    lasts = calloc(nt, sizeof *lasts);
    repeats = calloc(nt, sizeof *repeats);
    steps = calloc(nt, sizeof *steps);
    if (graph == NULL || starts == NULL || lasts == NULL || repeats == NULL || steps == NULL)
        goto oom;
    size_t traces = 0, dropped = 0;
    for (size_t b = 0; b < n_keyed;) {
        size_t e = b;
        while (e < n_keyed && strcmp(keyed[e].key, keyed[b].key) == 0)
            e++;
        traces++;
        size_t prev = SIZE_MAX;
        int64_t prev_ms = 0;
        for (size_t k = b; k < e; k++) {
            const discover_event_t *ev = &events[keyed[k].idx];
            size_t t = a.event_type[keyed[k].idx];
            bool repeat = false;
            for (size_t j = b; ev->id != NULL && j < k && !repeat; j++) {
                const discover_event_t *ej = &events[keyed[j].idx];
                repeat = a.event_type[keyed[j].idx] == t && ej->id != NULL &&
                         strcmp(ej->id, ev->id) == 0;
            }
            if (repeat) {
                dropped++;
                continue;
            }
            if (prev == SIZE_MAX) {
                starts[t]++;
            } else if (prev == t) {
                repeats[t]++;
            } else {
                graph[prev * nt + t]++;
                if (!samples_add(&steps[prev], ev->time_ms - prev_ms))
                    goto oom;
            }
            prev = t;
            prev_ms = ev->time_ms;
        }
        if (prev != SIZE_MAX)
            lasts[prev]++;
        b = e;
    }
    for (size_t t = 0; t < nt; t++) {
        if (repeats[t] > 0)
            discover_note(
                &a,
                "%s followed itself %zu times with another id (a retry, or a repeat without "
                "an id): the draft does not model it",
                a.type_names[t], repeats[t]);
    }

    /* The start: the type that most often opens a trace. */
    size_t start = 0;
    for (size_t t = 1; t < nt; t++) {
        if (starts[t] > starts[start])
            start = t;
    }
    if (starts[start] < traces)
        discover_note(
            &a,
            "the start: %zu of %zu traces began with another type than %s (begun before the "
            "window, or the start is another event)",
            traces - starts[start], traces, a.type_names[start]);

    /* The states: one per type; terminal when never followed. */
    state_names = calloc(nt, sizeof *state_names);
    terminal = calloc(nt, sizeof *terminal);
    reached = calloc(nt, sizeof *reached);
    finishes = calloc(nt, sizeof *finishes);
    used = calloc(nt, sizeof *used);
    bfs = calloc(nt, sizeof *bfs);
    if (state_names == NULL || terminal == NULL || reached == NULL || finishes == NULL ||
        used == NULL || bfs == NULL)
        goto oom;
    for (size_t t = 0; t < nt; t++) {
        char base[64];
        discover_state_name(a.type_names[t], base, sizeof base);
        snprintf(state_names[t], sizeof state_names[t], "%s", base);
        for (int suffix = 2;; suffix++) {
            bool clash = false;
            for (size_t u = 0; u < t && !clash; u++)
                clash = strcmp(state_names[u], state_names[t]) == 0;
            if (!clash)
                break;
            char tail[16];
            int tl = snprintf(tail, sizeof tail, "_%d", suffix);
            snprintf(state_names[t], sizeof state_names[t], "%.*s%s", 63 - tl, base, tail);
        }
        terminal[t] = true;
        for (size_t u = 0; u < nt; u++) {
            if (graph[t * nt + u] > 0)
                terminal[t] = false;
        }
    }
    if (terminal[start]) {
        snprintf(errstr, errstr_size,
                 "the start event %s is never followed by another event of its key: "
                 "nothing to draft a process from",
                 a.type_names[start]);
        rc = ERR_INVALID;
        goto out;
    }
    /* Reachable from the start, and able to finish; a state that cannot
     * finish becomes terminal (which may leave others unreachable), until
     * nothing changes: the validator wants both. */
    size_t n_bfs = 0;
    for (bool changed = true; changed;) {
        changed = false;
        memset(reached, 0, nt * sizeof *reached);
        n_bfs = 0;
        reached[start] = true;
        bfs[n_bfs++] = start;
        for (size_t h = 0; h < n_bfs; h++) {
            size_t t = bfs[h];
            for (size_t u = 0; !terminal[t] && u < nt; u++) {
                if (graph[t * nt + u] > 0 && !reached[u]) {
                    reached[u] = true;
                    bfs[n_bfs++] = u;
                }
            }
        }
        for (size_t t = 0; t < nt; t++)
            finishes[t] = terminal[t];
        for (bool grew = true; grew;) {
            grew = false;
            for (size_t t = 0; t < nt; t++) {
                for (size_t u = 0; !finishes[t] && u < nt; u++) {
                    if (graph[t * nt + u] > 0 && finishes[u])
                        finishes[t] = grew = true;
                }
            }
        }
        for (size_t t = 0; t < nt; t++) {
            if (reached[t] && !finishes[t]) {
                terminal[t] = changed = true;
                discover_note(&a,
                              "%s: no observed path from it reaches an end, so the draft makes it "
                              "terminal",
                              state_names[t]);
            }
        }
    }
    if (terminal[start]) {
        snprintf(errstr, errstr_size,
                 "no observed path from the start event %s reaches an end: nothing to "
                 "draft a process from",
                 a.type_names[start]);
        rc = ERR_INVALID;
        goto out;
    }
    for (size_t t = 0; t < nt; t++) {
        if (!reached[t] && !aside[t])
            discover_note(
                &a,
                "%s (%zu events) is not reached from %s in any observed trace and is left out "
                "of the draft",
                a.type_names[t], a.type_count[t], a.type_names[start]);
    }

    /* The report and the draft. */
    report = json_object();
    json_t *types = json_array(), *keys = json_array(), *starts_j = json_object(),
           *graph_j = json_array(), *steps_j = json_array();
    json_t *draft = json_object(), *events_j = json_object(), *states_j = json_object();
    if (report == NULL || types == NULL || keys == NULL || starts_j == NULL || graph_j == NULL ||
        steps_j == NULL || draft == NULL || events_j == NULL || states_j == NULL) {
        json_decref(types);
        json_decref(keys);
        json_decref(starts_j);
        json_decref(graph_j);
        json_decref(steps_j);
        json_decref(draft);
        json_decref(events_j);
        json_decref(states_j);
        goto oom;
    }
    json_object_set_new(report, "events", json_integer((json_int_t) n));
    json_object_set_new(report, "types", types);
    json_object_set_new(report, "keys", keys);
    json_object_set_new(report, "key", discover_key_json(key));
    json_object_set_new(report, "traces", json_integer((json_int_t) traces));
    json_object_set_new(report, "repeats_dropped", json_integer((json_int_t) dropped));
    json_object_set_new(report, "starts", starts_j);
    json_object_set_new(report, "graph", graph_j);
    json_object_set_new(report, "steps", steps_j);

    bool *listed = used;
    memset(listed, 0, nt * sizeof *listed);
    for (size_t k = 0; k < nt; k++) {
        size_t best = SIZE_MAX;
        for (size_t t = 0; t < nt; t++) {
            if (!listed[t] && (best == SIZE_MAX || a.type_count[t] > a.type_count[best]))
                best = t;
        }
        listed[best] = true;
        json_array_append_new(types, json_pack("{s:s, s:I, s:O, s:b}", "type", a.type_names[best],
                                               "count", (json_int_t) a.type_count[best], "topics",
                                               a.type_topics[best], "set_aside", aside[best]));
        if (json_object_size(a.type_topics[best]) > 1 && reached[best])
            discover_note(&a, "%s came on %zu topics; the draft declares the most used, %s",
                          a.type_names[best], json_object_size(a.type_topics[best]),
                          majority_topic(a.type_topics[best]));
    }
    /* The chosen key first, then the others that join anything. */
    for (size_t x = 0, listed_keys = 0; x <= a.n_cands && listed_keys < 10; x++) {
        size_t c = x == 0 ? (size_t) chosen : x - 1;
        if (x > 0 && (c == (size_t) chosen || a.cands[c].joining == 0))
            continue;
        const candidate_t *cand = &a.cands[c];
        json_t *entry = json_pack("{s:f, s:I, s:I, s:I}", "share", cand->share, "joining",
                                  (json_int_t) cand->joining, "joins", (json_int_t) cand->joins,
                                  "distinct", (json_int_t) cand->distinct);
        json_object_set_new(entry, cand->message_key ? "from" : "pointer",
                            json_string(cand->message_key ? "message_key" : cand->pointer));
        json_array_append_new(keys, entry);
        listed_keys++;
    }
    for (size_t t = 0; t < nt; t++) {
        if (starts[t] > 0)
            json_object_set_new(starts_j, a.type_names[t], json_integer((json_int_t) starts[t]));
    }
    /* Edges by count, most travelled first. */
    size_t *order = calloc(nt * nt, sizeof *order);
    if (order == NULL)
        goto oom;
    size_t n_edges = 0;
    for (size_t e = 0; e < nt * nt; e++) {
        if (graph[e] > 0)
            order[n_edges++] = e;
    }
    for (size_t x = 1; x < n_edges; x++) {
        for (size_t y = x; y > 0 && graph[order[y]] > graph[order[y - 1]]; y--) {
            size_t swap = order[y];
            order[y] = order[y - 1];
            order[y - 1] = swap;
        }
    }
    for (size_t x = 0; x < n_edges; x++)
        json_array_append_new(
            graph_j, json_pack("{s:s, s:s, s:I}", "from", a.type_names[order[x] / nt], "to",
                               a.type_names[order[x] % nt], "count", (json_int_t) graph[order[x]]));
    free(order);

    /* The draft, states in the order a trace meets them. */
    char desc[8192], when[32], seen[32];
    json_object_set_new(draft, "process", json_string(opts.process));
    json_object_set_new(draft, "version", json_integer(1));
    json_object_set_new(draft, "mode", json_string("shadow"));
    json_object_set_new(draft, "owner", json_string("unassigned"));
    json_object_set_new(draft, "description", json_null()); /* filled in last */
    json_object_set_new(draft, "key", discover_key_json(key));
    if (opts.envelope != NULL && json_object_size(opts.envelope) > 0)
        json_object_set_new(draft, "envelope", json_deep_copy(opts.envelope));
    json_object_set_new(draft, "events", events_j);
    json_object_set_new(
        draft, "start",
        json_pack("{s:s, s:s}", "on", a.type_names[start], "to", state_names[start]));
    json_object_set_new(draft, "states", states_j);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t h = 0; h < n_bfs; h++) {
            size_t t = bfs[h];
            if (terminal[t] != (pass == 1))
                continue;
            json_t *ev_j = json_pack("{s:s}", "topic", majority_topic(a.type_topics[t]));
            if (a.type_key[t] >= 0)
                json_object_set_new(ev_j, "key", discover_key_json(&a.cands[a.type_key[t]]));
            json_object_set_new(events_j, a.type_names[t], ev_j);
            json_t *st = json_object();
            json_object_set_new(states_j, state_names[t], st);
            if (terminal[t]) {
                json_object_set_new(st, "terminal", json_string(state_names[t]));
                continue;
            }
            json_t *on = json_object();
            for (size_t u = 0; u < nt; u++) {
                if (graph[t * nt + u] > 0 && reached[u])
                    json_object_set_new(on, a.type_names[u], json_string(state_names[u]));
            }
            samples_t *s = &steps[t];
            qsort(s->ms, s->n, sizeof *s->ms, compare_i64);
            int64_t p50 = discover_percentile(s->ms, s->n, 0.5);
            int64_t p90 = discover_percentile(s->ms, s->n, 0.9);
            int64_t p99 = discover_percentile(s->ms, s->n, 0.99);
            int64_t p999 = discover_percentile(s->ms, s->n, 0.999);
            int64_t max = s->ms[s->n - 1];
            report_suggestion_t sug = report_suggest((int64_t) s->n, p99, p999);
            int64_t deadline = sug.deadline_ms;
            const int64_t *ladder;
            size_t n_ladder = report_ladder(&ladder);
            if (!sug.enough || deadline < 0) {
                /* Too few samples for the report's rule: the largest seen
                 * with the same margin, so the draft still loads. */
                long i = report_ladder_index((int64_t) ceil((double) max * REPORT_MARGIN));
                deadline = i >= 0 ? ladder[i] : ladder[n_ladder - 1];
                discover_note(&a,
                              "%s: left only %zu times (fewer than %d), so its deadline %s is the "
                              "largest seen (%s) times %.1f, not a percentile",
                              state_names[t], s->n, REPORT_MIN_SAMPLES,
                              fmt_ms(deadline, when, sizeof when), fmt_ms(max, seen, sizeof seen),
                              REPORT_MARGIN);
            }
            json_object_set_new(st, "deadline", json_string(fmt_ms(deadline, when, sizeof when)));
            json_object_set_new(st, "on", on);
            json_array_append_new(
                steps_j,
                json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:s}", "state",
                          state_names[t], "after", a.type_names[t], "samples", (json_int_t) s->n,
                          "p50_ms", (json_int_t) p50, "p90_ms", (json_int_t) p90, "p99_ms",
                          (json_int_t) p99, "p999_ms", (json_int_t) p999, "max_ms",
                          (json_int_t) max, "suggested_ms",
                          sug.enough && sug.deadline_ms >= 0 ? json_integer(sug.deadline_ms)
                                                             : json_null(),
                          "deadline", when));
            if (lasts[t] > 0)
                discover_note(
                    &a,
                    "%s: %zu traces ended there (still in flight, or stuck; or an end the draft "
                    "does not know)",
                    state_names[t], lasts[t]);
        }
    }
    discover_note(&a, "the owner of the process and of each step: the draft says \"unassigned\"");
    discover_note(&a, "the outcome of each terminal state: the draft names it after its state");

    int dl = snprintf(desc, sizeof desc,
                      DISCOVER_DRAFT_MARKER " written by steward discover from %zu events%s%s; "
                                            "review it, then remove this marker. Undecided:",
                      n, opts.source != NULL ? " on " : "", opts.source != NULL ? opts.source : "");
    size_t i;
    json_t *u;
    json_array_foreach(a.undecided, i, u)
    {
        /* Whole items only: a cut could split a UTF-8 sequence. */
        char item[1100];
        int il = snprintf(item, sizeof item, " (%zu) %s.", i + 1, json_string_value(u));
        if (dl < 0 || il < 0 || (size_t) dl + (size_t) il >= sizeof desc - 32) {
            snprintf(desc + dl, sizeof desc - (size_t) dl, " (and more)");
            break;
        }
        memcpy(desc + dl, item, (size_t) il + 1);
        dl += il;
    }
    json_object_set_new(draft, "description", json_string(desc));
    json_object_set(report, "undecided", a.undecided);
    json_object_set_new(report, "draft", draft);
    *out = report;
    report = NULL;
    goto out;
oom:
    snprintf(errstr, errstr_size, "out of memory");
    rc = ERR_FATAL;
out:
    free(keyed);
    free(keybufs);
    free(graph);
    free(starts);
    free(lasts);
    free(repeats);
    if (steps != NULL) {
        for (size_t t = 0; t < a.n_types; t++)
            free(steps[t].ms);
    }
    free(steps);
    free(state_names);
    free(reached);
    free(terminal);
    free(finishes);
    free(used);
    free(aside);
    free(bfs);
    json_decref(report);
    discover_candidates_free(&a);
    free(a.type_key);
    for (size_t t = 0; a.type_topics != NULL && t < a.n_types; t++)
        json_decref(a.type_topics[t]);
    free(a.type_topics);
    free(a.type_count);
    free(a.event_type);
    free(a.type_names);
    json_decref(a.types);
    json_decref(a.cand_index);
    json_decref(a.undecided);
    return rc;
}
