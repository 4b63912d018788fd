/*
 * query - read-only views; see query.h.
 */
#include "manager/operator/query.h"

#include "common/db.h"
#include "engine/engine.h"
#include "manager/sinks/payload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUERY_COMMANDS_STR "20"

/*
 * The watermark of each process, as the schedulers watch it (the least over
 * the consumer groups that recorded their topics, unknown while any topic
 * is unread): deadlines are judged against it, not against the clock, so
 * the figures derived from it (engine_standing()) agree with `overdue`.
 */
#define WATERMARKS_CTE                                                                             \
    "wm AS (SELECT w.process, CASE WHEN bool_or(w.watermark IS NULL) THEN NULL "                   \
    "  ELSE min(w.watermark) END AS watermark "                                                    \
    "  FROM (SELECT DISTINCT consumer_group FROM steward.watched_topics) g "                       \
    "  CROSS JOIN LATERAL steward.process_watermarks(g.consumer_group) w GROUP BY w.process) "

/* The JSON is built by PostgreSQL: one round trip, and timestamps come out
 * in one format. The engine's figures are added after (standing()):
 * ms_in_state is a placeholder here, so it keeps its place in the object. */
static const char instance_sql[] =
    "WITH " WATERMARKS_CTE "SELECT json_build_object("
    "  'process', i.process, 'key', i.key, 'version', i.version, 'state', i.state, "
    "  'status', i.status, "
    "  'started_at', steward.rfc3339(i.started_at), "
    "  'state_entered_at', steward.rfc3339(i.state_entered_at), "
    "  'deadline_at', steward.rfc3339(i.deadline_at), "
    "  'process_deadline_at', steward.rfc3339(i.process_deadline_at), "
    "  'overdue', i.overdue, 'attempt', i.attempt, 'vars', i.vars, "
    "  'events_applied', i.events_applied, "
    "  'claimed_by', i.claimed_by, 'claimed_at', steward.rfc3339(i.claimed_at), "
    "  'step', i.step, 'token', i.token, 'lease_holder', i.lease_holder, "
    "  'lease_expires_at', steward.rfc3339(i.lease_expires_at), "
    "  'lease_renewed_at', steward.rfc3339(i.lease_renewed_at), "
    "  'resend_pending', i.resend_pending, "
    "  'mode', d.mode, "
    "  'has_command', coalesce((d.document->'states'->i.state) ? 'command', false), "
    "  'outcomes', (SELECT coalesce(json_agg(json_build_object('outcome', s.value->>'terminal', "
    "       'state', s.key) ORDER BY s.key), '[]') FROM jsonb_each(d.document->'states') s "
    "     WHERE s.value ? 'terminal'), "
    "  'states', (SELECT coalesce(json_agg(s.key ORDER BY s.key), '[]') "
    "     FROM jsonb_each(d.document->'states') s WHERE NOT s.value ? 'terminal'), "
    "  'commands', coalesce((SELECT json_agg(json_build_object("
    "       'state', c.state, 'step', c.step, 'attempt', c.attempt, 'token', c.token, "
    "       'type', c.type, 'topic', c.topic, 'ce_id', c.ce_id, "
    "       'queued_at', steward.rfc3339(c.created_at), "
    "       'status', CASE WHEN c.sent_at IS NOT NULL THEN 'sent' "
    "         WHEN c.cancelled_at IS NOT NULL THEN 'cancelled' ELSE 'pending' END, "
    "       'sent_at', steward.rfc3339(c.sent_at), "
    "       'cancelled_at', steward.rfc3339(c.cancelled_at), 'cancel_reason', c.cancel_reason, "
    "       'delivery_attempts', c.attempts, "
    "       'last_error', c.last_error, 'payload', c.payload, "
    "       'traceparent', c.traceparent, 'tracestate', c.tracestate, "
    "       'trace_id', substr(c.traceparent, 4, 32)) ORDER BY c.id) "
    "     FROM (SELECT * FROM steward.commands WHERE process = i.process AND key = i.key "
    "       ORDER BY id DESC LIMIT " QUERY_COMMANDS_STR ") c), '[]'), "
    "  'ms_in_state', NULL, '.entered_ms', steward.to_ms(i.state_entered_at), "
    "  'watermark_at', steward.rfc3339((SELECT watermark FROM wm WHERE wm.process = i.process)), "
    "  '.watermark_ms', steward.to_ms((SELECT watermark FROM wm WHERE wm.process = i.process)), "
    "  '.deadline_ms', CASE WHEN i.status = 'active' THEN steward.to_ms(i.deadline_at) END, "
    "  'history', coalesce((SELECT json_agg(json_build_object("
    "       'event_id', h.event_id, 'event_type', h.event_type, 'topic', h.topic, "
    "       'partition', h.partition, 'offset', h.\"offset\", "
    "       'event_time', steward.rfc3339(h.event_time), "
    "       'from_state', h.from_state, 'to_state', h.to_state, 'outcome', h.outcome, "
    "       'replayed', h.replayed, 'detail', h.detail, 'actor', h.actor, "
    "       'reason', h.reason, 'recorded_at', steward.rfc3339(h.recorded_at), "
    "       'trace_id', substr(h.traceparent, 4, 32)) "
    "       ORDER BY h.event_time, h.id) "
    "     FROM steward.history h WHERE h.process = i.process AND h.key = i.key), '[]'), "
    "  'parked', coalesce((SELECT json_agg(json_build_object("
    "       'event_id', p.event_id, 'event_type', p.event_type, 'topic', p.topic, "
    "       'partition', p.partition, 'offset', p.\"offset\", "
    "       'event_time', steward.rfc3339(p.event_time), "
    "       'parked_at', steward.rfc3339(p.parked_at), "
    "       'expires_at', steward.rfc3339(p.expires_at), 'payload', p.payload) "
    "       ORDER BY p.event_time, p.id) "
    "     FROM steward.parked p WHERE p.process = i.process AND p.key = i.key), '[]'), "
    "  'alerts', coalesce((SELECT json_agg(json_build_object("
    "       'id', a.id, 'kind', a.kind, 'state', a.state, 'summary', a.summary, "
    "       'opened_at', steward.rfc3339(a.opened_at), "
    "       'resolved_at', steward.rfc3339(a.resolved_at), 'resolution', a.resolution, "
    "       'acked_by', a.acked_by) ORDER BY a.id) "
    "     FROM steward.alerts a WHERE a.process = i.process AND a.key = i.key), '[]')"
    ")::text "
    "FROM steward.instances i LEFT JOIN steward.definitions d "
    "  ON d.process = i.process AND d.version = i.version "
    "WHERE i.process = $1 AND i.key = $2";

/* The int field `name` of `doc` in ms, ENGINE_NO_DEADLINE when null. */
static int64_t ms_field(const json_t *doc, const char *name)
{
    const json_t *v = json_object_get(doc, name);
    return json_is_integer(v) ? (int64_t) json_integer_value(v) : ENGINE_NO_DEADLINE;
}

static json_t *ms_json(int64_t ms)
{
    return ms == ENGINE_NO_DEADLINE ? json_null() : json_integer((json_int_t) ms);
}

/* Replaces the helper fields ".entered_ms" (when the instance entered its
 * state; null: no instance) and ".watermark_ms" with ms_in_state, the
 * engine's time in the state at the process's watermark
 * (engine_time_in_state(): it never runs back, 0 while the watermark is
 * behind the entry); null while either is unknown. */
static void in_state(json_t *doc)
{
    int64_t watermark = ms_field(doc, ".watermark_ms"), entered = ms_field(doc, ".entered_ms");
    json_object_set_new(doc, "ms_in_state",
                        ms_json(watermark == ENGINE_NO_DEADLINE || entered == ENGINE_NO_DEADLINE
                                    ? ENGINE_NO_DEADLINE
                                    : engine_time_in_state(entered, watermark)));
    json_object_del(doc, ".entered_ms");
    json_object_del(doc, ".watermark_ms");
}

/*
 * Replaces the helper fields of one instance (".entered_ms", when it
 * entered its state; ".deadline_ms", that state's deadline while active;
 * ".watermark_ms") with the engine's figures, every one at the process's
 * watermark, so a row never mixes the watermark with the clock:
 * ms_in_state (engine_time_in_state(): it never runs back, 0 while the
 * watermark is behind the entry), overdue_ms (`overdue_field`, NULL: not
 * wanted) and ms_to_deadline (`to_field`, likewise) (engine_standing()).
 * Each is null while the watermark is unknown.
 */
static void standing(json_t *inst, const char *overdue_field, const char *to_field)
{
    engine_standing_t s = engine_standing(ms_field(inst, ".deadline_ms"),
                                          json_is_true(json_object_get(inst, "overdue")),
                                          ms_field(inst, ".watermark_ms"));
    in_state(inst);
    if (overdue_field != NULL)
        json_object_set_new(inst, overdue_field, ms_json(s.overdue_ms));
    if (to_field != NULL)
        json_object_set_new(inst, to_field, ms_json(s.to_deadline_ms));
    json_object_del(inst, ".deadline_ms");
}

err_class_t query_instance(PGconn *conn, const char *process, const char *key, json_t **out,
                           query_absent_t *absent, char *errstr, size_t errstr_size)
{
    const char *params[2] = {process, key};
    char what[600];
    snprintf(what, sizeof what, "reading instance %s/%s", process, key);
    err_class_t cls;
    PGresult *res = db_query(conn, what, instance_sql, 2, params, &cls, errstr, errstr_size);

    *out = NULL;
    absent->judged = 0;
    absent->started = false;
    if (res == NULL)
        return cls;
    if (PQntuples(res) == 1) {
        json_error_t jerr;
        *out = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
        PQclear(res);
        if (*out == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "reading instance %s/%s: %s", process,
                           key, jerr.text);
        standing(*out, NULL, "ms_to_deadline");
        return ERR_OK;
    }
    PQclear(res);

    snprintf(what, sizeof what, "reading history of %s/%s", process, key);
    res = db_query(conn, what,
                   "SELECT count(*), coalesce(bool_or(outcome = 'started'), false) "
                   "FROM steward.history WHERE process = $1 AND key = $2",
                   2, params, &cls, errstr, errstr_size);
    if (res != NULL) {
        absent->judged = atol(PQgetvalue(res, 0, 0));
        absent->started = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    }
    PQclear(res);
    return cls;
}

/* Runs a statement answering one JSON text (or no row) into *out. */
static err_class_t json_query(PGconn *conn, const char *what, const char *sql, int n,
                              const char *const *params, json_t **out, char *errstr,
                              size_t errstr_size)
{
    err_class_t cls;
    PGresult *res = db_query(conn, what, sql, n, params, &cls, errstr, errstr_size);

    *out = NULL;
    if (res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        json_error_t jerr;
        *out = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
        if (*out == NULL)
            cls = err_set(ERR_FATAL, errstr, errstr_size, "%s: %s", what, jerr.text);
    }
    PQclear(res);
    return cls;
}

/* A group's `oldest` is its oldest alert's opening time, in the one form
 * (its text sorts as the times do). Each alert carries where its instance
 * stands: its state and how long it has been in it (ms_in_state, the
 * engine's at the watermark, added after by in_state(); a placeholder
 * here, so it keeps its place). */
static const char stuck_sql[] =
    "WITH " WATERMARKS_CTE
    "SELECT json_build_object('groups', coalesce(json_agg(g ORDER BY g.oldest, g.process, "
    "  g.state), '[]'))::text FROM ("
    "  SELECT coalesce(a.process, '') AS process, coalesce(a.state, '') AS state, "
    "    steward.rfc3339(min(a.opened_at)) AS oldest, count(*) AS open, "
    "    (array_agg(a.owner ORDER BY a.opened_at))[1] AS owner, "
    "    json_agg(json_build_object('id', a.id, 'kind', a.kind, 'key', a.key, 'owner', a.owner, "
    "      'summary', a.summary, 'dedup_key', a.dedup_key, "
    "      'opened_at', steward.rfc3339(a.opened_at), "
    "      'age_ms', steward.to_ms(now() - a.opened_at), "
    "      'acked_by', a.acked_by, 'acked_at', steward.rfc3339(a.acked_at), "
    "      'silenced_until', (SELECT steward.rfc3339(max(s.ends_at)) FROM steward.silences s "
    "        WHERE s.process = a.process AND s.lifted_at IS NULL AND s.starts_at <= now() "
    "        AND s.ends_at > now() AND (s.state IS NULL OR s.state = a.state) "
    "        AND (s.team IS NULL OR s.team = a.owner)), "
    "      'claimed_by', i.claimed_by, 'instance_state', i.state, "
    "      'instance_status', i.status, 'state_entered_at', steward.rfc3339(i.state_entered_at), "
    "      'ms_in_state', NULL, '.entered_ms', steward.to_ms(i.state_entered_at), "
    "      '.watermark_ms', steward.to_ms(wm.watermark)) "
    "      ORDER BY a.opened_at, a.id) AS alerts "
    "  FROM steward.alerts a "
    "  LEFT JOIN steward.instances i ON i.process = a.process AND i.key = a.key "
    "  LEFT JOIN wm ON wm.process = a.process "
    "  WHERE a.resolved_at IS NULL AND ($1::text IS NULL OR a.process = $1) "
    "  GROUP BY 1, 2) g";

err_class_t query_stuck(PGconn *conn, const char *process, json_t **out, char *errstr,
                        size_t errstr_size)
{
    const char *params[1] = {process};
    err_class_t cls =
        json_query(conn, "reading open alerts", stuck_sql, 1, params, out, errstr, errstr_size);
    size_t i, j;
    json_t *group, *alert;
    if (*out != NULL)
        json_array_foreach(json_object_get(*out, "groups"), i, group)
            json_array_foreach(json_object_get(group, "alerts"), j, alert) in_state(alert);
    return cls;
}

/* One more row than the page: whether there is a page after. */
static const char instances_sql[] =
    "WITH " WATERMARKS_CTE ", page AS ("
    "  SELECT i.*, coalesce(d.document->'states'->i.state->>'owner', d.document->>'owner') "
    "    AS owner, d.mode, coalesce((d.document->'states'->i.state) ? 'command', false) "
    "    AS has_command FROM steward.instances i "
    "  LEFT JOIN steward.definitions d ON d.process = i.process AND d.version = i.version "
    "  WHERE ($1::text IS NULL OR i.process = $1) AND ($2::text IS NULL OR i.state = $2) "
    "    AND ($3::text IS NULL OR left(i.key, length($3)) = $3) "
    "    AND ($4::text IS NULL OR (i.process, i.key) > ($4, $5)) "
    "    AND (NOT $6::boolean OR (i.status = 'active' AND i.overdue)) "
    "    AND (NOT $7::boolean OR i.status = 'active') "
    "  ORDER BY i.process, i.key LIMIT $8::int + 1), "
    "shown AS (SELECT * FROM page ORDER BY process, key LIMIT $8::int) "
    "SELECT json_build_object('instances', coalesce((SELECT json_agg(json_build_object("
    "  'process', s.process, 'key', s.key, 'version', s.version, 'state', s.state, "
    "  'status', s.status, 'owner', s.owner, "
    "  'started_at', steward.rfc3339(s.started_at), "
    "  'state_entered_at', steward.rfc3339(s.state_entered_at), "
    "  'deadline_at', steward.rfc3339(s.deadline_at), 'overdue', s.overdue, "
    "  'watermark_at', steward.rfc3339(wm.watermark), "
    "  '.watermark_ms', steward.to_ms(wm.watermark), "
    "  '.deadline_ms', CASE WHEN s.status = 'active' THEN steward.to_ms(s.deadline_at) END, "
    "  'ms_in_state', NULL, '.entered_ms', steward.to_ms(s.state_entered_at), "
    "  'claimed_by', s.claimed_by, 'mode', s.mode, 'has_command', s.has_command) "
    "  ORDER BY s.process, s.key) "
    "  FROM shown s LEFT JOIN wm ON wm.process = s.process), '[]'), "
    "  'next', CASE WHEN (SELECT count(*) FROM page) > $8::int THEN "
    "    (SELECT json_build_object('process', s.process, 'key', s.key) FROM shown s "
    "     ORDER BY s.process DESC, s.key DESC LIMIT 1) END)::text";

err_class_t query_instances(PGconn *conn, const query_filter_t *f, json_t **out, char *errstr,
                            size_t errstr_size)
{
    char limit[16];
    snprintf(limit, sizeof limit, "%d", f->limit);
    const char *params[8] = {f->process,
                             f->state,
                             f->key_prefix,
                             f->after_process,
                             f->after_key,
                             f->overdue_only ? "true" : "false",
                             f->active_only ? "true" : "false",
                             limit};
    err_class_t cls =
        json_query(conn, "listing instances", instances_sql, 8, params, out, errstr, errstr_size);
    size_t i;
    json_t *inst;
    if (*out != NULL)
        json_array_foreach(json_object_get(*out, "instances"), i, inst)
            standing(inst, "overdue_ms", NULL);
    return cls;
}

static const char processes_sql[] =
    "WITH d AS (SELECT DISTINCT ON (process) process, version, mode, document "
    "  FROM steward.definitions ORDER BY process, version DESC) "
    "SELECT json_build_object('processes', coalesce(json_agg(json_build_object("
    "  'process', d.process, 'version', d.version, 'mode', d.mode, "
    "  'owner', d.document->>'owner', "
    "  'open', (SELECT count(*) FROM steward.instances i "
    "    WHERE i.process = d.process AND i.status = 'active'), "
    "  'overdue', (SELECT count(*) FROM steward.instances i "
    "    WHERE i.process = d.process AND i.status = 'active' AND i.overdue)) "
    "  ORDER BY d.process), '[]'))::text FROM d";

err_class_t query_processes(PGconn *conn, json_t **out, char *errstr, size_t errstr_size)
{
    return json_query(conn, "listing processes", processes_sql, 0, NULL, out, errstr, errstr_size);
}

err_class_t query_watermark(PGconn *conn, const char *process, int64_t *ms, char *errstr,
                            size_t errstr_size)
{
    const char *params[1] = {process};
    err_class_t cls;
    *ms = ENGINE_NO_DEADLINE;
    PGresult *res = db_query(conn, "reading the watermark",
                             "WITH " WATERMARKS_CTE
                             "SELECT steward.to_ms(watermark) FROM wm WHERE process = $1",
                             1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
        *ms = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return ERR_OK;
}

void query_trace_links(json_t *inst, const char *tracing_link)
{
    if (inst == NULL || tracing_link == NULL || tracing_link[0] == '\0')
        return;
    const char *lists[] = {"history", "commands"};
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        size_t i;
        json_t *row;
        json_array_foreach(json_object_get(inst, lists[l]), i, row)
        {
            const char *trace = json_string_value(json_object_get(row, "trace_id"));
            char *link = trace != NULL ? payload_trace_link(tracing_link, trace) : NULL;
            if (link != NULL)
                json_object_set_new(row, "trace_link", json_string(link));
            free(link);
        }
    }
}
