/*
 * notifier_outbox - the notifier's outbox in SQL (notifier.h): due rows
 * claimed sink by sink under a lease (FOR UPDATE SKIP LOCKED), the
 * sequence triggers of a storm claimed as one group, the pages of alerts
 * resolved while silenced closed unsent, and each attempt marked:
 * delivered, failed, or due again after a backoff.
 */
#include "manager/alerting/notifier_int.h"

#include "common/backoff.h"
#include "common/clock.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/pgarr.h"
#include "manager/alerting/alerts.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOTIFIER_BATCH  20 /* rows claimed per sink per look */
#define SINK_IN_FLIGHT  8  /* concurrent transfers per sink */
#define LEASE_MARGIN_MS 5000

/* What a claimed outbox row comes back with, in claim_sql and group_sql
 * alike: columns read by position in notifier_start_row() and notifier_read_alert(). */
#define CLAIMED_COLUMNS                                                                            \
    "RETURNING o.id, o.destination, o.payload->>'event', o.attempts, a.id, a.kind, a.process, "    \
    "  a.key, a.state, a.owner, a.summary, " ALERT_DETAILS_SQL(                                    \
        "a") ", a.dedup_key, "                                                                     \
             "  steward.rfc3339(a.opened_at), steward.rfc3339(a.resolved_at), a.resolution, "      \
             "  steward.rfc3339(a.deadline_at), " ALERT_TRACE_SQL("a")

static const char claim_sql[] =
    "UPDATE steward.outbox o SET next_attempt_at = now() + steward.ms_interval($1::bigint) "
    "FROM steward.alerts a "
    "WHERE a.id = o.alert_id AND o.id IN ("
    "  SELECT c.id FROM steward.outbox c "
    "  WHERE c.kind = 'notification' AND c.delivered_at IS NULL AND c.failed_at IS NULL "
    "    AND c.next_attempt_at <= now() "
    "    AND (CASE WHEN $4::bool THEN c.destination <> ALL($2::text[]) "
    "         ELSE c.destination = ANY($2::text[]) END) "
    /* with a group window, sequence triggers go out as groups (group_sql) */
    "    AND NOT ($5::bigint > 0 AND c.payload->>'event' = 'trigger' AND EXISTS ("
    "      SELECT 1 FROM steward.alerts g WHERE g.id = c.alert_id AND g.kind = 'sequence')) "
    "    AND NOT EXISTS (SELECT 1 FROM steward.outbox e "
    "      WHERE e.alert_id = c.alert_id AND e.destination = c.destination AND e.id < c.id "
    "        AND e.delivered_at IS NULL AND e.failed_at IS NULL) "
    /* a silenced alert pages nobody until its silence ends */
    "    AND NOT (c.payload->>'event' IN ('trigger', 'acknowledge') AND EXISTS ("
    "      SELECT 1 FROM steward.alerts sa WHERE sa.id = c.alert_id AND " ALERT_SILENCED_SQL(
        "sa") ")) "
              "  ORDER BY c.id LIMIT $3::int FOR UPDATE SKIP LOCKED) " CLAIMED_COLUMNS;

/*
 * The sequence triggers of one (process, state) pending for one sink, once
 * the oldest of them has waited the group window: the storm so far, sent
 * as one page. Same columns as claim_sql.
 */
static const char group_sql[] =
    "WITH due AS ("
    "  SELECT a.process, a.state FROM steward.outbox c JOIN steward.alerts a ON a.id = c.alert_id "
    "  WHERE c.kind = 'notification' AND c.destination = $2 AND c.delivered_at IS NULL "
    "    AND c.failed_at IS NULL AND c.next_attempt_at <= now() "
    "    AND c.payload->>'event' = 'trigger' AND a.kind = 'sequence' "
    "    AND NOT " ALERT_SILENCED_SQL(
        "a") " "
             "  GROUP BY a.process, a.state "
             "  HAVING min(c.created_at) <= now() - steward.ms_interval($3::bigint) "
             "  ORDER BY min(c.id) LIMIT 1) "
             "UPDATE steward.outbox o SET next_attempt_at = now() + "
             "steward.ms_interval($1::bigint) "
             "FROM steward.alerts a "
             "WHERE a.id = o.alert_id AND o.id IN ("
             "  SELECT c.id FROM steward.outbox c JOIN steward.alerts ca ON ca.id = c.alert_id "
             "  JOIN due d ON d.process = ca.process AND d.state IS NOT DISTINCT FROM ca.state "
             "  WHERE c.kind = 'notification' AND c.destination = $2 AND c.delivered_at IS NULL "
             "    AND c.failed_at IS NULL AND c.next_attempt_at <= now() "
             "    AND c.payload->>'event' = 'trigger' AND ca.kind = 'sequence' "
             "    AND NOT " ALERT_SILENCED_SQL("ca") " "
                                                     "  ORDER BY c.id LIMIT $4::int FOR UPDATE OF "
                                                     "c SKIP LOCKED) " CLAIMED_COLUMNS;

/*
 * For a sequence alert's resolve (row $3): the group its trigger went out
 * in, and how many reasons there are to stay quiet: alerts of the group
 * still open, and later resolves of the group (the last one speaks, so
 * alerts resolved together resolve the page once).
 */
static const char group_of_sql[] =
    "SELECT t.payload->>'group', "
    "  (SELECT count(*) FROM steward.outbox m JOIN steward.alerts ma ON ma.id = m.alert_id "
    "   WHERE m.destination = t.destination AND m.payload->>'event' = 'trigger' "
    "     AND m.payload ? 'group' AND m.payload->>'group' = t.payload->>'group' "
    "     AND ma.resolved_at IS NULL) + "
    "  (SELECT count(*) FROM steward.outbox r JOIN steward.outbox m ON m.alert_id = r.alert_id "
    "     AND m.destination = r.destination AND m.payload->>'event' = 'trigger' "
    "     AND m.payload ? 'group' AND m.payload->>'group' = t.payload->>'group' "
    "   WHERE r.destination = t.destination AND r.payload->>'event' = 'resolve' "
    "     AND r.id > $3::bigint) "
    "FROM steward.outbox t WHERE t.alert_id = $1 AND t.destination = $2 "
    "  AND t.payload->>'event' = 'trigger' AND t.payload ? 'group' "
    "ORDER BY t.id DESC LIMIT 1";

static const char *nullable(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/* Reads an alert from columns first..first+13 of a row; details is new. */
payload_alert_t notifier_read_alert(const notifier_t *n, const PGresult *res, int row, int first,
                                    json_t **details)
{
    json_error_t jerr;
    *details = json_loads(PQgetvalue(res, row, first + 7), 0, &jerr);
    return (payload_alert_t){
        .id = strtoll(PQgetvalue(res, row, first), NULL, 10),
        .kind = nullable(res, row, first + 1),
        .process = nullable(res, row, first + 2),
        .key = nullable(res, row, first + 3),
        .state = nullable(res, row, first + 4),
        .owner = nullable(res, row, first + 5),
        .summary = nullable(res, row, first + 6),
        .dedup_key = nullable(res, row, first + 8),
        .opened_at = nullable(res, row, first + 9),
        .resolved_at = nullable(res, row, first + 10),
        .resolution = nullable(res, row, first + 11),
        .deadline_at = nullable(res, row, first + 12),
        .details = *details,
        .trace_id = nullable(res, row, first + 13),
        .tracing_link = n->tracing_link,
    };
}

int64_t notifier_backoff_ms(int attempts, int64_t max_backoff_ms, unsigned int *seed)
{
    int64_t step = backoff_doubling_ms(attempts, 1000, max_backoff_ms);
    return step / 2 + (int64_t) (rand_r(seed) % (unsigned int) (step / 2 + 1));
}

static int64_t backoff_ms(notifier_t *n, int attempts)
{
    return notifier_backoff_ms(attempts, n->max_backoff_ms, &n->seed);
}

err_class_t notifier_record(notifier_t *n, const char *id, const attempt_t *a, int attempts,
                            char *errstr, size_t errstr_size)
{
    char wait[24];
    const char *sql;
    int64_t delay = a->retry_after_ms >= 0 ? a->retry_after_ms : backoff_ms(n, attempts);
    snprintf(wait, sizeof wait, "%" PRId64, delay);

    switch (a->verdict) {
    case VERDICT_DELIVERED:
        sql = "UPDATE steward.outbox SET delivered_at = now(), attempts = attempts + 1, "
              "  last_error = NULL WHERE id = $1";
        break;
    case VERDICT_FAILED:
        sql = "UPDATE steward.outbox SET failed_at = now(), attempts = attempts + 1, "
              "  last_error = $2 WHERE id = $1";
        break;
    default:
        sql = "UPDATE steward.outbox SET attempts = attempts + 1, last_error = $2, "
              "  next_attempt_at = now() + steward.ms_interval($3::bigint) WHERE id = $1";
        break;
    }
    const char *params[3] = {id, a->error, wait};
    int nparams = a->verdict == VERDICT_DELIVERED ? 1 : a->verdict == VERDICT_FAILED ? 2 : 3;
    err_class_t cls = FAILPOINT_ERROR("notifier.before_record", errstr, errstr_size);
    if (cls == ERR_OK && (cls = db_exec(n->conn, "recording a delivery", sql, nparams, params,
                                        errstr, errstr_size)) == ERR_OK)
        FAILPOINT("notifier.after_record");
    return cls;
}

static bool sink_groups(const notifier_t *n, const sink_t *sink)
{
    return n->group_window_ms > 0 && sink_ops(sink->type)->group != NULL;
}

/*
 * For the resolve (row row_id) of a sequence alert whose trigger went out
 * in a group: *group_key (new) is the group's dedup key and *open > 0 when
 * this resolve is not the one to send (see group_of_sql). *group_key NULL
 * when the trigger went out alone.
 */
err_class_t notifier_group_of(notifier_t *n, const char *row_id, const char *alert_id,
                              const char *destination, char **group_key, long *open, char *errstr,
                              size_t errstr_size)
{
    const char *params[3] = {alert_id, destination, row_id};
    err_class_t cls;
    *group_key = NULL;
    *open = 0;
    PGresult *res = db_query(n->conn, "finding a page's group", group_of_sql, 3, params, &cls,
                             errstr, errstr_size);
    if (res == NULL)
        return cls;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        *group_key = strdup(PQgetvalue(res, 0, 0));
        *open = atol(PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return ERR_OK;
}

/*
 * Claims up to `limit` due rows (for the sinks named in `names`, or with
 * `others` for every destination not named) and starts each: the log sink
 * at once, HTTP sinks as transfers. window_ms > 0 leaves sequence triggers
 * to claim_group(). *claimed receives how many.
 */
static err_class_t claim_and_start(notifier_t *n, pgarr_t *names, bool others, int limit,
                                   int64_t window_ms, notifier_stats_t *stats, int *claimed,
                                   char *errstr, size_t errstr_size)
{
    char lease[24], limit_text[16], window[24];
    /* One attempt long, with a margin: no other replica takes a row up
     * while this one is still posting it. */
    snprintf(lease, sizeof lease, "%" PRId64, n->timeout_ms + LEASE_MARGIN_MS);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    snprintf(window, sizeof window, "%" PRId64, window_ms);
    const char *params[5] = {lease, pgarr_text(names), limit_text, others ? "t" : "f", window};
    err_class_t cls;
    *claimed = 0;
    if (params[1] == NULL)
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "claiming notifications: out of memory");
    PGresult *res = db_query(n->conn, "claiming notifications", claim_sql, 5, params, &cls, errstr,
                             errstr_size);
    if (res == NULL)
        return cls;
    *claimed = PQntuples(res);
    int64_t now = clock_wall_ms();
    for (int row = 0; row < *claimed && cls == ERR_OK; row++)
        cls = notifier_start_row(n, res, row, now, stats, errstr, errstr_size);
    PQclear(res);
    return cls;
}

/*
 * Claims the next due group of sequence triggers for `sink` and starts it
 * as one page (a group of one as a plain page). *claimed: rows claimed.
 */
static err_class_t claim_group(notifier_t *n, const sink_t *sink, notifier_stats_t *stats,
                               int *claimed, char *errstr, size_t errstr_size)
{
    char lease[24], window[24], limit[16];
    snprintf(lease, sizeof lease, "%" PRId64, n->timeout_ms + LEASE_MARGIN_MS);
    snprintf(window, sizeof window, "%" PRId64, n->group_window_ms);
    snprintf(limit, sizeof limit, "%d", PAYLOAD_GROUP_KEYS);
    const char *params[4] = {lease, sink->name, window, limit};
    err_class_t cls;
    *claimed = 0;
    PGresult *res = db_query(n->conn, "claiming a group of notifications", group_sql, 4, params,
                             &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    int rows = *claimed = PQntuples(res);
    int64_t now = clock_wall_ms();
    if (rows == 1) {
        cls = notifier_start_row(n, res, 0, now, stats, errstr, errstr_size);
        PQclear(res);
        return cls;
    }
    if (rows == 0) {
        PQclear(res);
        return ERR_OK;
    }
    payload_alert_t *alerts = calloc((size_t) rows, sizeof *alerts);
    json_t **details = calloc((size_t) rows, sizeof *details);
    char **ids = calloc((size_t) rows, sizeof *ids);
    int *attempts = calloc((size_t) rows, sizeof *attempts);
    char *identity = NULL, group_key[ALERT_DEDUP_SIZE];
    transfer_t *t = NULL;
    if (alerts != NULL && details != NULL && ids != NULL && attempts != NULL) {
        for (int row = 0; row < rows; row++) {
            alerts[row] = notifier_read_alert(n, res, row, 4, &details[row]);
            ids[row] = strdup(PQgetvalue(res, row, 0));
            attempts[row] = atoi(PQgetvalue(res, row, 3)) + 1;
        }
        /* Named by its first alert: a retry of the same storm keeps it. */
        if (asprintf(&identity, "steward:sequence_group:%s:%s:%lld",
                     alerts[0].process ? alerts[0].process : "",
                     alerts[0].state ? alerts[0].state : "", alerts[0].id) < 0)
            identity = NULL;
        if (identity != NULL) {
            alert_dedup_key(ALERT_SEQUENCE, identity, group_key, sizeof group_key);
            t = notifier_post(
                n, sink, sink_ops(sink->type)->group(sink, alerts, (size_t) rows, group_key, now));
        }
    }
    if (t != NULL) {
        snprintf(t->row_id, sizeof t->row_id, "%s", PQgetvalue(res, 0, 0));
        snprintf(t->alert_id, sizeof t->alert_id, "%s", PQgetvalue(res, 0, 4));
        snprintf(t->event, sizeof t->event, "trigger");
        t->attempts = attempts[0];
        t->group_rows = ids;
        t->group_attempts = attempts;
        t->n_group = (size_t) rows;
        t->group_key = strdup(group_key);
        ids = NULL; /* now owned by t */
        attempts = NULL;
        char count[16];
        snprintf(count, sizeof count, "%d", rows);
        LOG_INFO("sequence alerts grouped into one page", "sink", sink->name, "process",
                 alerts[0].process, "state", alerts[0].state, "alerts", count);
    } else {
        /* Out of memory: the lease runs out and the rows are claimed again. */
        cls = err_set(ERR_TRANSIENT, errstr, errstr_size, "grouping notifications: out of memory");
    }
    for (int row = 0; row < rows; row++) {
        if (details != NULL)
            json_decref(details[row]);
        if (ids != NULL)
            free(ids[row]);
    }
    free(identity);
    free(alerts);
    free(details);
    free(ids);
    free(attempts);
    PQclear(res);
    return cls;
}

/*
 * An alert that resolved while silenced, before any page about it reached
 * a sink, is news to nobody there: its pending rows for that sink are
 * closed unsent rather than paging and resolving at once when the silence
 * ends.
 */
static const char silenced_resolved_sql[] =
    "UPDATE steward.outbox o SET delivered_at = now(), "
    "  last_error = 'not sent: the alert resolved while silenced' "
    "FROM steward.alerts a "
    "WHERE a.id = o.alert_id AND a.resolved_at IS NOT NULL AND o.kind = 'notification' "
    "  AND o.delivered_at IS NULL AND o.failed_at IS NULL "
    "  AND NOT EXISTS (SELECT 1 FROM steward.outbox d WHERE d.alert_id = o.alert_id "
    "    AND d.destination = o.destination AND d.payload->>'event' = 'trigger' "
    "    AND d.delivered_at IS NOT NULL "
    "    AND d.last_error IS DISTINCT FROM 'not sent: the alert resolved while silenced') "
    "  AND EXISTS (SELECT 1 FROM steward.silences s WHERE s.process = a.process "
    "    AND (s.state IS NULL OR s.state = a.state) AND (s.team IS NULL OR s.team = a.owner) "
    "    AND s.starts_at <= a.resolved_at AND coalesce(s.lifted_at, s.ends_at) > a.resolved_at)";

/*
 * Looks for due rows, sink by sink: a sink with SINK_IN_FLIGHT transfers
 * open is not given more, so a sink that hangs holds only its own rows.
 * Rows naming a sink the routes no longer have are claimed too, and failed.
 */
err_class_t notifier_claim_due(notifier_t *n, notifier_stats_t *stats, char *errstr,
                               size_t errstr_size)
{
    size_t n_sinks = route_sink_count(n->routes);
    pgarr_t all = {0};
    err_class_t cls = db_exec(n->conn, "closing the pages of alerts resolved while silenced",
                              silenced_resolved_sql, 0, NULL, errstr, errstr_size);
    if (cls != ERR_OK)
        return cls;
    int claimed;

    for (size_t s = 0; s < n_sinks && cls == ERR_OK; s++) {
        const sink_t *sink = route_sink_at(n->routes, s);
        bool groups = sink_groups(n, sink);
        pgarr_add(&all, sink->name);
        int passes = 0; /* bounded, so a log backlog does not stall the transfers */
        do {
            int busy = 0;
            for (const transfer_t *t = n->in_flight; t != NULL; t = t->next)
                busy += t->row_id[0] != '\0' && strcmp(t->sink, sink->name) == 0;
            int room = !notifier_posted(sink) ? NOTIFIER_BATCH : SINK_IN_FLIGHT - busy;
            if (room <= 0)
                break;
            if (groups) {
                cls = claim_group(n, sink, stats, &claimed, errstr, errstr_size);
                if (cls != ERR_OK || claimed > 0)
                    continue; /* one transfer more: look at the room again */
            }
            pgarr_t one = {0};
            pgarr_add(&one, sink->name);
            cls = claim_and_start(n, &one, false, room < NOTIFIER_BATCH ? room : NOTIFIER_BATCH,
                                  groups ? n->group_window_ms : 0, stats, &claimed, errstr,
                                  errstr_size);
            pgarr_free(&one);
            if (notifier_posted(sink))
                break;
        } while (cls == ERR_OK && claimed > 0 && ++passes < 10);
    }
    if (cls == ERR_OK)
        cls =
            claim_and_start(n, &all, true, NOTIFIER_BATCH, 0, stats, &claimed, errstr, errstr_size);
    pgarr_free(&all);
    return cls;
}

/* Marks the rows of a delivered group with its dedup key, for their resolves. */
err_class_t notifier_tag_group(notifier_t *n, const transfer_t *t, char *errstr, size_t errstr_size)
{
    pgarr_t ids = {0};
    for (size_t i = 0; i < t->n_group; i++)
        pgarr_add(&ids, t->group_rows[i]);
    const char *params[2] = {pgarr_text(&ids), t->group_key};
    err_class_t cls =
        params[0] == NULL
            ? err_set(ERR_TRANSIENT, errstr, errstr_size, "recording a group: out of memory")
            : db_exec(n->conn, "recording a group",
                      "UPDATE steward.outbox SET payload = payload || jsonb_build_object('group', "
                      "$2::text) WHERE id = ANY($1::bigint[])",
                      2, params, errstr, errstr_size);
    pgarr_free(&ids);
    return cls;
}
