/*
 * routes - how each team is reached: the `routes` object of the config,
 * mapping a team to a list of sinks.
 *
 * Definitions say who owns what (teams); the config says how to reach
 * them. A sink is one destination of one kind: log (JSON lines), webhook
 * (a JSON POST), pagerduty (Events API v2) or alertmanager (API v2). A team
 * with no route of its own falls back to the `default` route, which must
 * exist, and the fallback is logged once per team.
 *
 * Every sink has a name, and the outbox names the sink of each pending
 * page by it, so a reload finds the same sink again. A sink given a `name`
 * keeps it whatever else changes; one without is named from what it is
 * ("webhook-" and 12 hex digits of a hash of its type, URL, routing key and
 * severity), so inserting or moving sinks never renames another, though a
 * changed URL is a new sink. The same sink listed for several teams is one
 * sink; a name given to two different sinks is refused, and so is a sink
 * listed twice in one route.
 *
 * A route table is immutable after route_table_new() except for that
 * once-per-team memory, which a mutex guards: any thread may use it.
 * Routing keys and URLs are secrets: nothing here logs them.
 */
#ifndef STEWARD_ROUTES_H
#define STEWARD_ROUTES_H

#include "common/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum sink_type {
    SINK_LOG,
    SINK_WEBHOOK,
    SINK_PAGERDUTY,
    SINK_ALERTMANAGER,
} sink_type_t;

#define ROUTE_NAME_MAX 64 /* characters of a sink's name */

typedef struct sink {
    char *name; /* unique; what the outbox and logs name it by; stable across reloads */
    sink_type_t type;
    char *url;         /* webhook: required; pagerduty: the Events API endpoint;
                          alertmanager: its base URL */
    char *routing_key; /* pagerduty only; secret */
    char *severity;    /* pagerduty's and alertmanager's severity; default "error" */
} sink_t;

typedef struct route_table route_table_t;

/*
 * Builds the table from the config's `routes` object (borrowed). Secrets
 * may be given as `routing_key_file` or `url_file`. Returns NULL with
 * "routes.TEAM[i].KEY: problem" in errstr when the object is wrong.
 */
route_table_t *route_table_new(const json_t *routes, char *errstr, size_t errstr_size);
void route_table_free(route_table_t *table); /* NULL is a no-op */

/*
 * The sinks that reach `team` (its own route, else `default`), borrowed
 * from the table; *n receives how many.
 */
const sink_t *const *route_sinks(route_table_t *table, const char *team, size_t *n);

/*
 * The sink called `name`, borrowed; NULL when the config has none by that
 * name. An unnamed sink also answers to "TEAM.TYPE.INDEX", the name older
 * versions gave it by position, so pages queued before an upgrade are
 * delivered; new pages never use it.
 */
const sink_t *route_find_sink(const route_table_t *table, const char *name);

/* Every sink of the table, for walks (the Alertmanager refresh). */
const sink_t *route_sink_at(const route_table_t *table, size_t i);
size_t route_sink_count(const route_table_t *table);

const char *sink_type_name(sink_type_t type);

#endif
