/*
 * def_topics - the topic mapping: a definition's topic names renamed to
 * the broker's (topics.prefix, topics.map), for one definition or a whole
 * set, and the mapping as recorded beside the stored definitions; see
 * def.h.
 */
#include "definitions/def.h"

#include "definitions/def_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* *topic renamed as def_set_map_topics() says; false (reported) when too long. */
static bool map_topic(char **topic, const char *prefix, const json_t *map, const char *file,
                      const char *pointer, def_problems_t *problems)
{
    if (*topic == NULL)
        return true;
    json_t *mapped = map != NULL ? json_object_get(map, *topic) : NULL;
    char *name = NULL;
    if (mapped != NULL && json_is_string(mapped))
        name = strdup(json_string_value(mapped));
    else if (asprintf(&name, "%s%s", prefix != NULL ? prefix : "", *topic) < 0)
        name = NULL;
    if (name == NULL) {
        def_problems_add(problems, file, pointer, "out of memory");
        return false;
    }
    if (strlen(name) > TOPIC_MAX_LEN) {
        def_problems_add(problems, file, pointer,
                         "topic '%s' becomes '%s' with topics.prefix or topics.map: over Kafka's "
                         "%d characters",
                         *topic, name, TOPIC_MAX_LEN);
        free(name);
        return false;
    }
    free(*topic);
    *topic = name;
    return true;
}

bool def_map_topics(def_t *def, const char *prefix, const json_t *map, def_problems_t *problems)
{
    bool ok = true;
    if ((prefix == NULL || *prefix == '\0') && (map == NULL || json_object_size(map) == 0))
        return true;
    char p[PTR_MAX], sub[PTR_MAX];
    for (size_t e = 0; e < def->n_events; e++) {
        def_ptr_join(p, "/events", def->events[e].name);
        ok = map_topic(&def->events[e].topic, prefix, map, def->source,
                       def_ptr_join(sub, p, "topic"), problems) &&
             ok;
    }
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].command == NULL)
            continue;
        def_ptr_join(p, "/states", def->states[i].name);
        def_ptr_join(sub, p, "command");
        ok = map_topic(&def->states[i].command->topic, prefix, map, def->source,
                       def_ptr_join(p, sub, "topic"), problems) &&
             ok;
    }
    return ok;
}

bool def_set_map_topics(def_set_t *set, const char *prefix, const json_t *map,
                        def_problems_t *problems)
{
    bool ok = true;
    if ((prefix == NULL || *prefix == '\0') && (map == NULL || json_object_size(map) == 0))
        return true;
    free(set->topics_prefix);
    json_decref(set->topics_map);
    set->topics_prefix = strdup(prefix != NULL ? prefix : "");
    set->topics_map = map != NULL ? json_deep_copy(map) : json_object();
    if (set->topics_prefix == NULL || set->topics_map == NULL) {
        def_problems_add(problems, "", "", "out of memory");
        return false;
    }
    for (size_t d = 0; d < set->n; d++)
        ok = def_map_topics(set->defs[d], prefix, map, problems) && ok;
    return ok;
}

bool def_set_map_like(const def_set_t *set, def_t *def, def_problems_t *problems)
{
    if (set == NULL)
        return true;
    return def_map_topics(def, set->topics_prefix, set->topics_map, problems);
}

json_t *def_set_mapping_json(const def_set_t *set)
{
    json_t *map = set->topics_map != NULL ? json_deep_copy(set->topics_map) : json_object();
    if (map == NULL)
        return NULL;
    return json_pack("{s:s, s:o}", "prefix", set->topics_prefix != NULL ? set->topics_prefix : "",
                     "map", map);
}

bool def_map_recorded(def_t *def, const json_t *mapping, def_problems_t *problems)
{
    if (!json_is_object(mapping))
        return true;
    json_t *map = json_object_get(mapping, "map");
    return def_map_topics(def, json_string_value(json_object_get(mapping, "prefix")),
                          json_is_object(map) ? map : NULL, problems);
}
