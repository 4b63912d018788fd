/*
 * test_actions - what the actions suites (test_actions.c: actions, the
 * verbs through the CLI; test_actions_http.c: actions_http, the verbs
 * through the HTTP API) share: the world they run in (topics orders,
 * payments and shipping, the action_order definition, steward run with
 * fast passes and the routes given), the events they send, the queries
 * they wait on, and the requests the receiver got.
 */
#ifndef STEWARD_TEST_ACTIONS_H
#define STEWARD_TEST_ACTIONS_H

#include "receiver.h"
#include "world.h"

#include <jansson.h>
#include <stddef.h>

/* Topics, the definition (its two states' deadlines d1 and d2), a migrated
 * database, a config with `routes` (JSON), http.listen `listen` (NULL:
 * off) and http.tokens_file `tokens_file` (NULL: none); steward run, its
 * partitions claimed. tw_teardown() ends it. */
void ta_world_start(tw_world_t *w, const char *name, const char *d1, const char *d2,
                    const char *routes, const char *listen, const char *tokens_file);

/* Produces event `type` for order `key` to topic `name` of w. */
void ta_send_event(const tw_world_t *w, const char *name, const char *type, const char *key);

/* The suites' queries take one parameter, $1 = key: waits until sql gives
 * expected, its value (NULL when none), asserts it gives expected. */
void ta_wait_sql(const tw_world_t *w, const char *sql, const char *key, const char *expected,
                 int timeout_s);
char *ta_scalar(const tw_world_t *w, const char *sql, const char *key);
void ta_expect(const tw_world_t *w, const char *sql, const char *key, const char *expected);

/* The JSON body of the receiver's i-th request (json_decref() it), its
 * path in *path (free it) when path is not NULL. */
json_t *ta_request_json(rcv_t *r, size_t i, char **path);

/* Waits up to 30 s for a request to `path` whose `field` is `value`;
 * returns its index. */
long ta_wait_request(const tw_world_t *w, rcv_t *r, const char *path, const char *field,
                     const char *value);

#endif
