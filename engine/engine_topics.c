/*
 * engine_topics - which topics hold a process's watermark
 * (engine_watch_topics()). See engine.h.
 */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

/* Adds (process, topic) unless listed; false when out of memory. */
static bool watch_add(engine_watch_topics_t *out, size_t *cap, const char *process,
                      const char *topic, int old_version)
{
    for (size_t i = 0; i < out->n; i++) {
        engine_watch_topic_t *t = &out->items[i];
        if (strcmp(t->topic, topic) == 0 && strcmp(t->process, process) == 0) {
            if (t->old_version > 0 && (old_version == 0 || old_version > t->old_version))
                t->old_version = old_version;
            return true;
        }
    }
    if (out->n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 16;
        engine_watch_topic_t *grown = realloc(out->items, grown_cap * sizeof *grown);
        if (grown == NULL)
            return false;
        out->items = grown;
        *cap = grown_cap;
    }
    out->items[out->n++] = (engine_watch_topic_t){process, topic, old_version};
    return true;
}

bool engine_watch_topics(const def_set_t *loaded, const def_t *const *open, size_t n_open,
                         engine_watch_topics_t *out)
{
    size_t cap = 0;
    engine_watch_topics_clear(out);
    for (size_t d = 0; loaded != NULL && d < loaded->n; d++) {
        const def_t *def = loaded->defs[d];
        for (size_t e = 0; e < def->n_events; e++) {
            if (!watch_add(out, &cap, def->process, def->events[e].topic, 0))
                goto oom;
        }
    }
    for (size_t d = 0; d < n_open; d++) {
        const def_t *def = open[d];
        if (loaded != NULL && def_set_find(loaded, def->process, def->version) == def)
            continue;
        for (size_t e = 0; e < def->n_events; e++) {
            if (!watch_add(out, &cap, def->process, def->events[e].topic, def->version))
                goto oom;
        }
    }
    return true;
oom:
    engine_watch_topics_clear(out);
    return false;
}

void engine_watch_topics_clear(engine_watch_topics_t *topics)
{
    free(topics->items);
    topics->items = NULL;
    topics->n = 0;
}
