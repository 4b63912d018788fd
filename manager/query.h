/*
 * query - read-only views of the state for people: one instance with its
 * history ("where is this order?"). Shared by the CLI and the HTTP API, so
 * both say the same thing.
 */
#ifndef STEWARD_QUERY_H
#define STEWARD_QUERY_H

#include "common/err.h"

#include <jansson.h>
#include <libpq-fe.h>

/*
 * How the documents built here print their numbers (with json_dumps() and
 * friends: inspect, --json, the HTTP API). A captured 90.34 is stored
 * exactly as jsonb but read back as a double, which jansson's default 17
 * digits print as 90.340000000000003; 15 significant digits give back what
 * was captured, as the store writes it.
 */
#define QUERY_REAL_PRECISION JSON_REAL_PRECISION(15)

/*
 * Reads instance (process, key) and its history, oldest first, as a new
 * JSON object (json_decref() it) into *out. When there is no such
 * instance, *out is NULL and ERR_OK is returned, with *judged_events set to
 * how many events were judged for the key all the same (parked ones,
 * waiting for a start event). Times are RFC 3339 in UTC.
 *
 * Besides the state and deadlines it carries what active mode keeps: the
 * step, the fencing token of the last command, the lease (lease_holder,
 * lease_expires_at, lease_renewed_at; null when nobody holds the step),
 * and `commands`, the instance's latest 20 commands oldest first (state,
 * step, attempt, token, ce_id, status "sent", "cancelled" (the instance
 * left the step first: cancelled_at, cancel_reason) or "pending",
 * sent_at). Print it with QUERY_REAL_PRECISION.
 */
err_class_t query_instance(PGconn *conn, const char *process, const char *key, json_t **out,
                           long *judged_events, char *errstr, size_t errstr_size);

/*
 * Reads the open alerts, grouped by process and state, oldest first, as a
 * new JSON object {"groups": [{process, state, owner, open, alerts: [...]}]}
 * into *out. `process` NULL means every process. Alerts without a process
 * (blind) form a group of their own.
 */
err_class_t query_stuck(PGconn *conn, const char *process, json_t **out, char *errstr,
                        size_t errstr_size);

#endif
