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
#include <stdbool.h>
#include <stdint.h>

/*
 * How the documents built here print their numbers (with json_dumps() and
 * friends: inspect, --json, the HTTP API). A captured 90.34 is stored
 * exactly as jsonb but read back as a double, which jansson's default 17
 * digits print as 90.340000000000003; 15 significant digits give back what
 * was captured, as the store writes it.
 */
#define QUERY_REAL_PRECISION JSON_REAL_PRECISION(15)

/* What the history kept says of a key that has no instance. */
typedef struct query_absent {
    long judged;  /* events judged for the key all the same (parked ones, waiting for a start) */
    bool started; /* one of them started an instance, removed since (retention.instances) */
} query_absent_t;

/*
 * Reads instance (process, key) with its history (in event-time order,
 * operator rows at the time of the action), the events parked for it
 * (`parked`, each with its payload) and the alerts raised on it (open and
 * resolved, oldest first), as a new
 * JSON object (json_decref() it) into *out. When there is no such
 * instance, *out is NULL and ERR_OK is returned, with *absent filled from
 * the history kept for the key. Times are RFC 3339 in UTC. Each history
 * row carries the trace_id of its event's W3C traceparent (null: none),
 * and each command its `traceparent` and `trace_id` (null: it continues
 * no trace); query_trace_links() adds the links to them.
 *
 * Besides the state and deadlines it carries what active mode keeps: the
 * step, the fencing token of the last command, the lease (lease_holder,
 * lease_expires_at, lease_renewed_at; null when nobody holds the step),
 * and `commands`, the instance's latest 20 commands oldest first (state,
 * step, attempt, token, ce_id, status "sent", "cancelled" (the instance
 * left the step first: cancelled_at, cancel_reason) or "pending",
 * sent_at, payload). ms_to_deadline counts to the deadline from the process's
 * watermark (watermark_at), as the scheduler judges it, not from the
 * clock, and ms_in_state counts from state_entered_at to the same
 * watermark (engine_time_in_state(): never below 0); both null while the
 * watermark is unknown. What its own definition version says of it, for
 * what may be done to it: `mode`, `has_command` (its state sends a
 * command: a retry can), `outcomes` ([{outcome, state}]: a close's
 * choices) and `states` (the non-terminal states: a move's). The
 * operator's claim (claimed_by, claimed_at) is apart from the step's
 * lease. Print it with QUERY_REAL_PRECISION.
 */
err_class_t query_instance(PGconn *conn, const char *process, const char *key, json_t **out,
                           query_absent_t *absent, char *errstr, size_t errstr_size);

/*
 * Reads the open alerts, grouped by process and state, oldest first, as a
 * new JSON object {"groups": [{process, state, owner, open, alerts: [...]}]}
 * into *out. `process` NULL means every process. Alerts without a process
 * (blind) form a group of their own. Each alert carries its age (age_ms,
 * on the clock) and where its instance stands: instance_state,
 * instance_status, state_entered_at and ms_in_state (how long it has been
 * in that state, at the process's watermark, as the instance views count
 * it; null without an instance or a known watermark), claimed_by.
 */
err_class_t query_stuck(PGconn *conn, const char *process, json_t **out, char *errstr,
                        size_t errstr_size);

/* The most instances one page of query_instances() holds. */
#define QUERY_MAX_LIMIT 500

typedef struct query_filter {
    const char *process;       /* NULL: every process */
    const char *state;         /* NULL: every state */
    const char *key_prefix;    /* NULL: every key; else keys starting with it */
    const char *after_process; /* the page after (after_process, after_key); NULL: the first */
    const char *after_key;
    bool overdue_only; /* only active instances past their deadline */
    bool active_only;  /* only instances not yet in a terminal state */
    int limit;         /* 1..QUERY_MAX_LIMIT */
} query_filter_t;

/*
 * Lists instances matching `f` in (process, key) order as a new JSON
 * object {"instances": [...], "next": {"process", "key"} | null} into
 * *out; `next` is the cursor of the page after, null on the last page.
 * Each instance carries its state, status, owner (the state's team, else
 * the process's), deadline, overdue and overdue_ms (how far the process's
 * watermark, watermark_at, is past a deadline judged missed: 0 while not,
 * null without a deadline or a known watermark; engine_standing()),
 * ms_in_state (from state_entered_at to that watermark, null while it is
 * unknown; engine_time_in_state()), the operator who claimed it
 * (claimed_by), and its version's mode and whether its state sends a
 * command (has_command).
 */
err_class_t query_instances(PGconn *conn, const query_filter_t *f, json_t **out, char *errstr,
                            size_t errstr_size);

/*
 * The latest recorded version of every process as a new JSON object
 * {"processes": [{process, version, mode, owner, open, overdue}]} into
 * *out, in name order.
 */
err_class_t query_processes(PGconn *conn, json_t **out, char *errstr, size_t errstr_size);

/*
 * The latest recorded definition of `process` as a graph with live counts
 * (query_graph.c), into *out; *out NULL when no such process was recorded:
 * {process, version, mode, start, start_event, columns, rows,
 *  states: [{name, terminal (outcome or null), deadline, owner, notes (the
 *    lines `steward graph` writes in its box), column, row (graph_layout()),
 *    open, overdue (active instances in it, every version), versions:
 *    [{version, open, overdue, deadline (that version's, as written)}]}],
 *  transitions: [{from (null for `any`), to, event, kind: "on", "timeout"
 *    (on_timeout, event "timeout") or "any"}],
 *  any: {column, row} (where the "any state" node goes) or null,
 *  elsewhere: [{version, state, open, overdue, deadline}] (instances in a
 *    state the latest version no longer has)}.
 * A recorded document that no longer loads is ERR_INVALID.
 */
err_class_t query_graph(PGconn *conn, const char *process, json_t **out, char *errstr,
                        size_t errstr_size);

/*
 * The watermark of `process` as the schedulers judge its deadlines at (the
 * least over the consumer groups that recorded its topics), in *ms;
 * INT64_MIN (the engine's ENGINE_NO_DEADLINE) while it is unknown.
 */
err_class_t query_watermark(PGconn *conn, const char *process, int64_t *ms, char *errstr,
                            size_t errstr_size);

/*
 * Adds `trace_link`, tracing.link's template (`tracing_link`; NULL or "":
 * nothing is added) filled with the trace id, beside each `trace_id` of
 * the history rows and commands of `inst` (query_instance()'s document),
 * so `steward inspect`, its --json and the HTTP view (hence the console)
 * show the same link the pages carry.
 */
void query_trace_links(json_t *inst, const char *tracing_link);

#endif
