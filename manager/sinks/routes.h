/*
 * routes - how each team is reached: the `routes` object of the config,
 * mapping a team to a list of sinks.
 *
 * Definitions say who owns what (teams); the config says how to reach
 * them. A sink is one destination of one kind (sink.h: log, webhook,
 * pagerduty, alertmanager); what each kind needs of its config is checked
 * by that kind's row of the sink table. A team
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
#include "manager/sinks/sink.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define ROUTE_NAME_MAX 64 /* characters of a sink's name */

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

#endif
