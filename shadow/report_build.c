/*
 * report_build - the report's reading and its document: the definitions
 * recorded in the database (report_load_recorded()), the one statement
 * over the history and its rows, and the JSON document built from them
 * (report_build()), the commands active mode would send included; see
 * report.h.
 */
#include "shadow/report.h"
#include "shadow/report_int.h"
#include "shadow/rejections.h"
#include "shadow/report_upgrade.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/pgarr.h"
#include "common/rfc3339.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- definitions recorded in the database ----------------------------- */

static int compare_process(const void *a, const void *b)
{
    const def_t *const *x = a, *const *y = b;
    return strcmp((*x)->process, (*y)->process);
}

err_class_t report_load_recorded(PGconn *conn, const char *process, def_set_t **out, char *errstr,
                                 size_t errstr_size)
{
    const char *params[1] = {process};
    PGresult *res = PQexecParams(conn,
                                 "SELECT DISTINCT ON (process) process, version, document::text "
                                 "FROM steward.definitions "
                                 "WHERE $1::text IS NULL OR process = $1 "
                                 "ORDER BY process, version DESC",
                                 1, NULL, params, NULL, NULL, 0);
    err_class_t cls = db_result_class(res, conn);
    def_set_t *set = NULL;

    *out = NULL;
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "reading steward.definitions: %s", PQerrorMessage(conn));
        goto done;
    }
    set = calloc(1, sizeof *set);
    int n = PQntuples(res);
    if (set == NULL || (n > 0 && (set->defs = calloc((size_t) n, sizeof *set->defs)) == NULL)) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        def_problems_t problems = {0};
        const char *doc = PQgetvalue(res, i, 2);
        def_t *def = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
        if (def == NULL) {
            cls =
                err_set(ERR_INVALID, errstr, errstr_size,
                        "version %s of %s in steward.definitions no longer loads: %s%s%s",
                        PQgetvalue(res, i, 1), PQgetvalue(res, i, 0),
                        problems.n > 0 ? problems.items[0].pointer : "", problems.n > 0 ? ": " : "",
                        problems.n > 0 ? problems.items[0].message : "out of memory");
            def_problems_clear(&problems);
            goto done;
        }
        set->defs[set->n++] = def;
    }
    if (set->n > 0)
        qsort(set->defs, set->n, sizeof *set->defs, compare_process);
    *out = set;
    set = NULL; /* now the caller's */

done:
    def_set_free(set);
    PQclear(res);
    return cls;
}

/* ---- the statement ------------------------------------------------------ */

/*
 * $1 the processes; $2 the window in ms (NULL: all history); $3, $4, $5
 * each defined state's process, name and deadline in ms (NULL: none), in
 * definition order; $6 the ladder; $7 the recorded_at from which history
 * is read, in ms (NULL: all history).
 *
 * rows_in: with a window, only the history recorded since its start (less
 * REPORT_RECORDED_SLACK_MS), so the partitions of older weeks are pruned
 * when the statement is planned. An instance with rows in the window also
 * needs the row that entered the state its first row there leaves:
 * rows_before fetches that one row per instance through history_instance,
 * its event time the running maximum up to it, as moves would have made it.
 *
 * moves: one window pass over the started/advanced rows of each instance,
 * and the timeout rows of active mode (on_timeout moves an instance too;
 * history_instance gives them in order). An entry's time is the one the
 * engine judged and intake stored (history.entered_at, engine_entered_at());
 * the exit is the next row's entry time. Rows recorded before migration
 * 0009 have no entered_at: for them the running maximum of the event times
 * so far stands in, which is what the engine judged for rows in history
 * order.
 *
 * Latencies and ages are also counted per ladder step (width_bucket() of
 * ms - 1: bucket b holds those above step b and not above step b + 1), so
 * the alerts a suggested deadline would raise come out of this one pass
 * whatever step the suggestion lands on.
 */
static const char report_sql[] =
    "WITH params AS ("
    "  SELECT now() AS now_at, CASE WHEN $2::bigint IS NULL THEN '-infinity'::timestamptz "
    "    ELSE now() - steward.ms_interval($2::bigint) END AS since_at), "
    "limits AS ("
    "  SELECT l.process, l.state, l.deadline_ms, l.ord "
    "  FROM unnest($3::text[], $4::text[], $5::bigint[]) WITH ORDINALITY "
    "    AS l(process, state, deadline_ms, ord)), "
    "rows_in AS ("
    "  SELECT h.id, h.process, h.key, h.from_state, h.to_state, h.event_time, h.entered_at, "
    "    h.time_in_state_ms, true AS in_window "
    "  FROM steward.history h "
    "  WHERE h.process = ANY ($1::text[]) AND h.outcome IN ('started', 'advanced', 'timeout') "
    "    AND ($7::bigint IS NULL OR h.recorded_at >= steward.from_ms($7::bigint))), "
    "rows_before AS ("
    "  SELECT b.id, f.process, f.key, b.from_state, b.to_state, m.event_time, b.entered_at, "
    "    b.time_in_state_ms, false AS in_window "
    "  FROM (SELECT process, key, min(id) AS first_id FROM rows_in "
    "        WHERE $7::bigint IS NOT NULL GROUP BY 1, 2) f "
    "  CROSS JOIN LATERAL (SELECT h.id, h.from_state, h.to_state, h.entered_at, "
    "      h.time_in_state_ms "
    "    FROM steward.history h "
    "    WHERE h.process = f.process AND h.key = f.key AND h.id < f.first_id "
    "      AND h.outcome IN ('started', 'advanced', 'timeout') ORDER BY h.id DESC LIMIT 1) b "
    "  CROSS JOIN LATERAL (SELECT max(h.event_time) AS event_time FROM steward.history h "
    "    WHERE h.process = f.process AND h.key = f.key AND h.id < f.first_id "
    "      AND h.outcome IN ('started', 'advanced', 'timeout')) m), "
    "entries AS ("
    "  SELECT h.process, h.key, h.id, h.from_state, h.to_state, h.in_window, "
    "    h.time_in_state_ms, "
    "    coalesce(h.entered_at, max(h.event_time) OVER w) AS entered_at "
    "  FROM (SELECT * FROM rows_in UNION ALL SELECT * FROM rows_before) h "
    "  WINDOW w AS (PARTITION BY h.process, h.key ORDER BY h.id)), "
    "moves AS ("
    "  SELECT e.*, lag(e.entered_at) OVER w AS prev_entered_at "
    "  FROM entries e WINDOW w AS (PARTITION BY e.process, e.key ORDER BY e.id)), "
    "stays AS ("
    "  SELECT m.process, m.to_state AS state, m.from_state IS NULL AS is_start, m.entered_at, "
    "    true AS entered_in, false AS left_in, NULL::bigint AS ms "
    "  FROM moves m, params p WHERE m.entered_at >= p.since_at "
    "  UNION ALL "
    "  SELECT m.process, m.from_state, false, NULL, false, true, "
    "    coalesce(m.time_in_state_ms, steward.to_ms(m.entered_at - m.prev_entered_at)) "
    "  FROM moves m, params p "
    "  WHERE m.in_window AND m.from_state IS NOT NULL AND m.entered_at >= p.since_at "
    "    AND (m.time_in_state_ms IS NOT NULL OR m.prev_entered_at IS NOT NULL)), "
    "by_state AS ("
    "  SELECT s.process, s.state, "
    "    count(*) FILTER (WHERE s.entered_in) AS entered, "
    "    count(*) FILTER (WHERE s.left_in) AS exits, "
    "    percentile_disc(ARRAY[0.5, 0.9, 0.99, 0.999]) WITHIN GROUP (ORDER BY s.ms) "
    "      FILTER (WHERE s.left_in) AS pct, "
    "    max(s.ms) FILTER (WHERE s.left_in) AS max_ms, "
    "    count(*) FILTER (WHERE s.left_in AND s.ms > l.deadline_ms) AS slow "
    "  FROM stays s LEFT JOIN limits l ON l.process = s.process AND l.state = s.state "
    "  GROUP BY s.process, s.state), "
    "exit_steps AS ("
    "  SELECT x.process, x.state, array_agg(x.b ORDER BY x.b) AS b, "
    "    array_agg(x.n ORDER BY x.b) AS n "
    "  FROM (SELECT s.process, s.state, width_bucket(s.ms - 1, $6::bigint[]) AS b, "
    "          count(*) AS n "
    "        FROM stays s WHERE s.left_in GROUP BY 1, 2, 3) x "
    "  GROUP BY x.process, x.state), "
    "open_now AS ("
    "  SELECT i.process, i.state, i.overdue, i.state_entered_at >= p.since_at AS entered_in, "
    "    steward.to_ms(p.now_at - i.state_entered_at) AS age_ms "
    "  FROM steward.instances i, params p "
    "  WHERE i.process = ANY ($1::text[]) AND i.status = 'active'), "
    "by_state_open AS ("
    "  SELECT o.process, o.state, count(*) AS open, count(*) FILTER (WHERE o.overdue) AS overdue, "
    "    count(*) FILTER (WHERE o.entered_in) AS open_in, "
    "    count(*) FILTER (WHERE o.entered_in AND o.age_ms > l.deadline_ms) AS open_past "
    "  FROM open_now o LEFT JOIN limits l ON l.process = o.process AND l.state = o.state "
    "  GROUP BY o.process, o.state), "
    "open_steps AS ("
    "  SELECT x.process, x.state, array_agg(x.b ORDER BY x.b) AS b, "
    "    array_agg(x.n ORDER BY x.b) AS n "
    "  FROM (SELECT o.process, o.state, width_bucket(o.age_ms - 1, $6::bigint[]) AS b, "
    "          count(*) AS n "
    "        FROM open_now o WHERE o.entered_in GROUP BY 1, 2, 3) x "
    "  GROUP BY x.process, x.state), "
    "volume AS ("
    "  SELECT s.process, count(*) AS starts, "
    "    steward.to_ms(min(s.entered_at)) AS first_ms, "
    "    steward.to_ms(max(s.entered_at)) AS last_ms "
    "  FROM stays s WHERE s.is_start AND s.entered_in GROUP BY s.process), "
    "stalled AS ("
    "  SELECT i.process, count(*) AS stalled "
    "  FROM steward.instances i, params p "
    "  WHERE i.process = ANY ($1::text[]) AND i.status = 'active' "
    "    AND i.started_at >= p.since_at "
    "    AND (i.overdue OR i.process_overdue OR EXISTS ("
    "      SELECT 1 FROM steward.alerts a "
    "      WHERE a.process = i.process AND a.key = i.key AND a.resolved_at IS NULL "
    "        AND a.kind IN ('deadline', 'process_deadline'))) "
    "  GROUP BY i.process), "
    "names AS ("
    "  SELECT process, state FROM limits "
    "  UNION SELECT process, state FROM by_state "
    "  UNION SELECT process, state FROM by_state_open) "
    "SELECT n.process, n.state, l.ord IS NOT NULL, "
    "  coalesce(b.entered, 0), coalesce(b.exits, 0), "
    "  b.pct[1], b.pct[2], b.pct[3], b.pct[4], b.max_ms, coalesce(b.slow, 0), "
    "  coalesce(o.open, 0), coalesce(o.overdue, 0), coalesce(o.open_in, 0), "
    "  coalesce(o.open_past, 0), es.b, es.n, os.b, os.n, "
    "  coalesce(v.starts, 0), v.first_ms, v.last_ms, coalesce(st.stalled, 0), "
    "  steward.to_ms(p.now_at) "
    "FROM names n CROSS JOIN params p "
    "LEFT JOIN limits l ON l.process = n.process AND l.state = n.state "
    "LEFT JOIN by_state b ON b.process = n.process AND b.state = n.state "
    "LEFT JOIN by_state_open o ON o.process = n.process AND o.state = n.state "
    "LEFT JOIN exit_steps es ON es.process = n.process AND es.state = n.state "
    "LEFT JOIN open_steps os ON os.process = n.process AND os.state = n.state "
    "LEFT JOIN volume v ON v.process = n.process "
    "LEFT JOIN stalled st ON st.process = n.process "
    "ORDER BY n.process, l.ord NULLS LAST, n.state";

enum {
    COL_PROCESS,
    COL_STATE,
    COL_DEFINED,
    COL_ENTERED,
    COL_EXITS,
    COL_P50,
    COL_P90,
    COL_P99,
    COL_P999,
    COL_MAX,
    COL_SLOW,
    COL_OPEN,
    COL_OVERDUE,
    COL_OPEN_IN,
    COL_OPEN_PAST,
    COL_EXIT_B,
    COL_EXIT_N,
    COL_OPEN_B,
    COL_OPEN_N,
    COL_STARTS,
    COL_FIRST,
    COL_LAST,
    COL_STALLED,
    COL_NOW,
};

/* Counts per ladder bucket: [b] holds the values above step b - 1 (the
 * 1-based step b) and not above the next; [0] those not above the first. */
typedef struct steps {
    int64_t n[LADDER_N + 1];
} steps_t;

static int64_t col_int(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* Parses an integer array literal ("{1,2,3}") into at most cap values;
 * false when it is not one. */
static bool parse_ints(const char *text, int64_t *out, size_t cap, size_t *n)
{
    const char *p = text;
    *n = 0;
    if (*p++ != '{')
        return false;
    while (*p != '}') {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || *n >= cap)
            return false;
        out[(*n)++] = v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return false;
    }
    return true;
}

static bool col_steps(const PGresult *res, int row, int col_b, int col_n, steps_t *out)
{
    int64_t b[LADDER_N + 1], n[LADDER_N + 1];
    size_t nb, nn;

    memset(out, 0, sizeof *out);
    if (PQgetisnull(res, row, col_b))
        return true;
    if (!parse_ints(PQgetvalue(res, row, col_b), b, LADDER_N + 1, &nb) ||
        !parse_ints(PQgetvalue(res, row, col_n), n, LADDER_N + 1, &nn) || nb != nn)
        return false;
    for (size_t i = 0; i < nb; i++) {
        if (b[i] < 0 || b[i] > (int64_t) LADDER_N)
            return false;
        out->n[b[i]] = n[i];
    }
    return true;
}

/* How many values lie above ladder step `step` (0-based). */
static int64_t above_step(const steps_t *s, long step)
{
    int64_t total = 0;
    for (size_t b = (size_t) step + 1; b <= LADDER_N; b++)
        total += s->n[b];
    return total;
}

/* ---- building the document -------------------------------------------- */

/* A new JSON number, or null when the value is unknown (negative). */
static json_t *real_or_null(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

static json_t *int_or_null(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? json_null() : json_integer(col_int(res, row, col));
}

/* share = missed / (exits + open in the window); alerts per day = share
 * times the entries per day. Adds "missed", "share", "alerts_per_day",
 * all null when missed is unknown (negative). */
static void add_alerts(json_t *obj, int64_t missed, int64_t population, double entries_per_day)
{
    double share = missed >= 0 && population > 0 ? (double) missed / (double) population : -1;
    json_object_set_new(obj, "missed", missed >= 0 ? json_integer(missed) : json_null());
    json_object_set_new(obj, "share", real_or_null(share));
    json_object_set_new(
        obj, "alerts_per_day",
        real_or_null(share >= 0 && entries_per_day >= 0 ? share * entries_per_day : -1));
}

static const char would_send_assumptions[] =
    "each entry into a state with a command sends it once; each entry that missed the "
    "state's current deadline (left later than it, or is still open and older) would have "
    "been re-sent retry.max times, an upper bound since an earlier send might have "
    "finished the step sooner; what on_timeout would then have changed is not modelled";

/* The document's entry for def from the rows [first, end) of res (its own). */
static json_t *process_json(const def_t *def, const PGresult *res, int first, int end,
                            bool *bad_row)
{
    int64_t starts = first < end ? col_int(res, first, COL_STARTS) : 0;
    bool have_starts = first < end && !PQgetisnull(res, first, COL_FIRST);
    int64_t first_ms = have_starts ? col_int(res, first, COL_FIRST) : 0;
    int64_t last_ms = have_starts ? col_int(res, first, COL_LAST) : 0;
    int64_t stalled = first < end ? col_int(res, first, COL_STALLED) : 0;
    double period = report_period_ms(starts, first_ms, last_ms);
    char when[40];

    json_t *volume = json_object();
    json_object_set_new(volume, "started", json_integer(starts));
    json_object_set_new(volume, "first_start",
                        have_starts ? json_string(rfc3339_format(first_ms, when, sizeof when))
                                    : json_null());
    json_object_set_new(volume, "last_start",
                        have_starts ? json_string(rfc3339_format(last_ms, when, sizeof when))
                                    : json_null());
    json_object_set_new(volume, "period_ms",
                        period > 0 ? json_integer((json_int_t) llround(period)) : json_null());
    json_object_set_new(volume, "started_per_day", real_or_null(report_per_day(starts, period)));
    json_object_set_new(volume, "stalled", json_integer(stalled));
    json_object_set_new(volume, "stalled_share",
                        starts > 0 ? json_real((double) stalled / (double) starts) : json_null());
    json_object_set_new(volume, "stalled_per_day", real_or_null(report_per_day(stalled, period)));

    json_t *states = json_array();
    json_t *commands = json_array();
    for (int row = first; row < end; row++) {
        const char *name = PQgetvalue(res, row, COL_STATE);
        long idx =
            strcmp(PQgetvalue(res, row, COL_DEFINED), "t") == 0 ? def_find_state(def, name) : -1;
        const def_state_t *st = idx >= 0 ? &def->states[idx] : NULL;
        int64_t entered = col_int(res, row, COL_ENTERED);
        int64_t exits = col_int(res, row, COL_EXITS);
        int64_t open_in = col_int(res, row, COL_OPEN_IN);
        double entries_per_day = report_per_day(entered, period);
        steps_t exit_steps, open_steps;

        if (!col_steps(res, row, COL_EXIT_B, COL_EXIT_N, &exit_steps) ||
            !col_steps(res, row, COL_OPEN_B, COL_OPEN_N, &open_steps))
            *bad_row = true;

        json_t *s = json_object();
        json_object_set_new(s, "state", json_string(name));
        json_object_set_new(s, "in_definition", json_boolean(st != NULL));
        json_object_set_new(
            s, "owner", st != NULL ? json_string(def_state_owner(def, (size_t) idx)) : json_null());
        json_object_set_new(s, "terminal",
                            st != NULL && st->terminal != NULL ? json_string(st->terminal)
                                                               : json_null());
        json_object_set_new(s, "entered", json_integer(entered));
        json_object_set_new(s, "entered_per_day", real_or_null(entries_per_day));
        json_object_set_new(s, "left", json_integer(exits));
        json_object_set_new(s, "open", json_integer(col_int(res, row, COL_OPEN)));
        json_object_set_new(s, "overdue", json_integer(col_int(res, row, COL_OVERDUE)));
        json_object_set_new(s, "open_in_window", json_integer(open_in));
        json_array_append_new(states, s);
        if (st != NULL && st->terminal != NULL) {
            json_object_set_new(s, "histogram", json_null());
            json_object_set_new(s, "latency", json_null());
            json_object_set_new(s, "deadline", json_null());
            json_object_set_new(s, "suggestion", json_null());
            continue;
        }

        json_t *latency = json_object();
        json_object_set_new(latency, "samples", json_integer(exits));
        json_object_set_new(latency, "p50_ms", int_or_null(res, row, COL_P50));
        json_object_set_new(latency, "p90_ms", int_or_null(res, row, COL_P90));
        json_object_set_new(latency, "p99_ms", int_or_null(res, row, COL_P99));
        json_object_set_new(latency, "p999_ms", int_or_null(res, row, COL_P999));
        json_object_set_new(latency, "max_ms", int_or_null(res, row, COL_MAX));
        json_object_set_new(s, "latency", latency);
        json_object_set_new(s, "histogram", report_histogram(exit_steps.n, LADDER_N));

        /* The current deadline: the step's own. A state without one is
         * covered by the process deadline alone, which this does not judge. */
        int64_t missed = 0;
        json_t *deadline = json_object();
        if (st != NULL && st->deadline_ms > 0) {
            missed = col_int(res, row, COL_SLOW) + col_int(res, row, COL_OPEN_PAST);
            json_object_set_new(deadline, "ms", json_integer(st->deadline_ms));
            add_alerts(deadline, missed, exits + open_in, entries_per_day);
        } else {
            json_object_set_new(deadline, "ms", json_null());
            add_alerts(deadline, -1, 0, -1);
        }
        json_object_set_new(s, "deadline", deadline);

        report_suggestion_t sug =
            report_suggest(exits, col_int(res, row, COL_P99), col_int(res, row, COL_P999));
        json_t *suggestion = json_object();
        json_object_set_new(suggestion, "enough_samples", json_boolean(sug.enough));
        json_object_set_new(suggestion, "samples", json_integer(exits));
        json_object_set_new(suggestion, "needed", json_integer(REPORT_MIN_SAMPLES));
        json_object_set_new(suggestion, "basis", sug.enough ? json_string(sug.basis) : json_null());
        json_object_set_new(suggestion, "basis_ms",
                            sug.enough ? json_integer(sug.basis_ms) : json_null());
        json_object_set_new(suggestion, "margin", json_real(REPORT_MARGIN));
        json_object_set_new(suggestion, "deadline_ms",
                            sug.step >= 0 ? json_integer(sug.deadline_ms) : json_null());
        add_alerts(suggestion,
                   sug.step >= 0
                       ? above_step(&exit_steps, sug.step) + above_step(&open_steps, sug.step)
                       : -1,
                   exits + open_in, entries_per_day);
        json_object_set_new(s, "suggestion", suggestion);

        if (st != NULL && st->command != NULL && def->mode == DEF_MODE_SHADOW) {
            json_array_append_new(
                commands,
                json_pack("{s:s, s:s, s:s, s:I, s:i, s:I, s:I}", "state", name, "type",
                          st->command->type, "topic", st->command->topic, "commands",
                          (json_int_t) entered, "retry_max", st->retry_max, "retries_at_most",
                          (json_int_t) (missed * st->retry_max),
                          /* The expected event came anyway, after the deadline:
                           * each such first re-send would have been redundant. */
                          "arrived_after_deadline",
                          (json_int_t) (st->deadline_ms > 0 ? col_int(res, row, COL_SLOW) : 0)));
        }
    }

    json_t *would_send = json_null();
    if (def->mode == DEF_MODE_SHADOW) {
        would_send =
            json_pack("{s:s, s:o}", "assumptions", would_send_assumptions, "commands", commands);
        commands = NULL; /* now owned by would_send */
    }
    json_decref(commands);

    return json_pack("{s:s, s:i, s:s, s:s, s:o, s:o, s:o}", "process", def->process, "version",
                     def->version, "owner", def->owner, "mode",
                     def->mode == DEF_MODE_ACTIVE ? "active" : "shadow", "volume", volume, "states",
                     states, "would_send", would_send);
}

static json_t *report_json(const def_t *const *defs, size_t n_defs, const report_options_t *opts,
                           const PGresult *res, bool *bad_row)
{
    int rows = PQntuples(res);
    int64_t now_ms = rows > 0 ? col_int(res, 0, COL_NOW) : (int64_t) time(NULL) * 1000;
    char when[40];

    json_t *window = json_object();
    json_object_set_new(window, "since",
                        opts->since_ms > 0 && opts->since_text != NULL
                            ? json_string(opts->since_text)
                            : json_null());
    json_object_set_new(window, "since_ms",
                        opts->since_ms > 0 ? json_integer(opts->since_ms) : json_null());
    json_object_set_new(
        window, "from",
        opts->since_ms > 0 ? json_string(rfc3339_format(now_ms - opts->since_ms, when, sizeof when))
                           : json_null());
    json_object_set_new(window, "to", json_string(rfc3339_format(now_ms, when, sizeof when)));

    json_t *processes = json_array();
    for (size_t i = 0; i < n_defs; i++) {
        int first = 0;
        while (first < rows && strcmp(PQgetvalue(res, first, COL_PROCESS), defs[i]->process) != 0)
            first++;
        int end = first;
        while (end < rows && strcmp(PQgetvalue(res, end, COL_PROCESS), defs[i]->process) == 0)
            end++;
        json_array_append_new(processes, process_json(defs[i], res, first, end, bad_row));
    }
    return json_pack("{s:s, s:o, s:s?, s:o}", "generated_at",
                     rfc3339_format(now_ms, when, sizeof when), "window", window, "definitions",
                     opts->definitions, "processes", processes);
}

err_class_t report_build(PGconn *conn, const def_t *const *defs, size_t n_defs,
                         const report_options_t *opts, json_t **out, char *errstr,
                         size_t errstr_size)
{
    pgarr_t procs = {0}, l_process = {0}, l_state = {0}, l_deadline = {0}, steps = {0};
    PGresult *res = NULL;
    err_class_t cls;
    bool in_tx = false;
    char since[32];

    *out = NULL;
    for (size_t i = 0; i < n_defs; i++) {
        size_t *order = malloc((defs[i]->n_states + 1) * sizeof *order);
        if (order == NULL) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto done;
        }
        report_state_order(defs[i], order);
        pgarr_add(&procs, defs[i]->process);
        for (size_t s = 0; s < defs[i]->n_states; s++) {
            const def_state_t *st = &defs[i]->states[order[s]];
            pgarr_add(&l_process, defs[i]->process);
            pgarr_add(&l_state, st->name);
            if (st->terminal == NULL && st->deadline_ms > 0)
                pgarr_add_int(&l_deadline, st->deadline_ms);
            else
                pgarr_add(&l_deadline, NULL);
        }
        free(order);
    }
    for (size_t i = 0; i < LADDER_N; i++)
        pgarr_add_int(&steps, ladder[i]);
    snprintf(since, sizeof since, "%lld", (long long) opts->since_ms);
    /* A window reaching back before 1970 reads everything. */
    char recorded_from[32];
    int64_t wall = clock_wall_ms();
    bool bounded = opts->since_ms > 0 && opts->since_ms < wall - REPORT_RECORDED_SLACK_MS;
    snprintf(recorded_from, sizeof recorded_from, "%lld",
             bounded ? (long long) (wall - opts->since_ms - REPORT_RECORDED_SLACK_MS) : 0LL);
    const char *params[7] = {pgarr_text(&procs),
                             opts->since_ms > 0 ? since : NULL,
                             pgarr_text(&l_process),
                             pgarr_text(&l_state),
                             pgarr_text(&l_deadline),
                             pgarr_text(&steps),
                             bounded ? recorded_from : NULL};
    if (params[0] == NULL || params[2] == NULL || params[3] == NULL || params[4] == NULL ||
        params[5] == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }

    /* One snapshot, and never a write: the report may run on a standby.
     * JIT only adds seconds of compiling to this plan, and the sorts behind
     * the percentiles want more than the default work_mem (a larger
     * setting is kept). */
    if ((cls =
             db_exec(conn, "starting the report", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                     0, NULL, errstr, errstr_size)) != ERR_OK)
        goto done;
    in_tx = true;
    if ((cls = db_exec(conn, "setting up the report",
                       "SELECT set_config('jit', 'off', true), "
                       "  (SELECT set_config('work_mem', '65536kB', true) FROM pg_settings "
                       "   WHERE name = 'work_mem' AND setting::bigint < 65536)",
                       0, NULL, errstr, errstr_size)) != ERR_OK)
        goto done;

    res = PQexecParams(conn, report_sql, 7, NULL, params, NULL, NULL, 0);
    if ((cls = db_result_class(res, conn)) != ERR_OK) {
        err_set(cls, errstr, errstr_size, "computing the report: %s", PQerrorMessage(conn));
        goto done;
    }
    bool bad_row = false;
    *out = report_json(defs, n_defs, opts, res, &bad_row);
    if (*out == NULL || bad_row) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "%s",
                      bad_row ? "computing the report: unreadable step counts"
                              : "out of memory building the report");
        json_decref(*out);
        *out = NULL;
        goto done;
    }
    /* What an upgrade to each suggestion would move, and the messages
     * rejected in the window (recorded since its start), in the same
     * snapshot. */
    const json_t *processes = json_object_get(*out, "processes");
    for (size_t i = 0; i < n_defs && cls == ERR_OK; i++)
        cls = report_upgrade_add(conn, defs[i], json_array_get(processes, i), errstr, errstr_size);
    json_t *rejected = NULL;
    if (cls == ERR_OK &&
        (cls = rejections_read(
             conn, opts->since_ms > 0 && opts->since_ms < wall ? wall - opts->since_ms : 0,
             &rejected, errstr, errstr_size)) == ERR_OK)
        json_object_set_new(*out, "rejected", rejected);
    if (cls != ERR_OK) {
        json_decref(*out);
        *out = NULL;
        goto done;
    }
    cls = db_exec(conn, "finishing the report", "COMMIT", 0, NULL, errstr, errstr_size);
    in_tx = false;
    if (cls != ERR_OK) {
        json_decref(*out);
        *out = NULL;
    }

done:
    if (in_tx) {
        PGresult *rb = PQexec(conn, "ROLLBACK");
        PQclear(rb);
    }
    PQclear(res);
    pgarr_free(&procs);
    pgarr_free(&l_process);
    pgarr_free(&l_state);
    pgarr_free(&l_deadline);
    pgarr_free(&steps);
    return cls;
}
