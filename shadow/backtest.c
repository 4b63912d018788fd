/*
 * backtest - the scratch database and the alerts of a replay; see
 * backtest.h.
 */
#include "shadow/backtest.h"

#include "common/clock.h"
#include "common/db.h"
#include "definitions/duration.h"
#include "engine/engine.h"
#include "schema/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs CREATE or DROP DATABASE on the scratch name, quoted. */
static err_class_t scratch_ddl(backtest_scratch_t *s, const char *verb, const char *tail,
                               const char *what, char *errstr, size_t errstr_size)
{
    char *ident = PQescapeIdentifier(s->admin, s->name, strlen(s->name));
    if (ident == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "%s: out of memory", what);
    char sql[256];
    snprintf(sql, sizeof sql, "%s %s%s", verb, ident, tail);
    PQfreemem(ident);
    return db_exec(s->admin, what, sql, 0, NULL, errstr, errstr_size);
}

err_class_t backtest_scratch_open(backtest_scratch_t *s, const char *server, char *errstr,
                                  size_t errstr_size)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "steward_backtest_%d_%ld", (int) getpid(),
             (long) (clock_wall_ms() % 100000));
    err_class_t cls;
    s->admin = db_connect_classified(server, "steward backtest", &cls, errstr, errstr_size);
    if (s->admin == NULL)
        return cls;
    cls =
        scratch_ddl(s, "CREATE DATABASE", "", "creating the scratch database", errstr, errstr_size);
    if (cls != ERR_OK)
        return cls;
    if ((s->url = db_with_dbname(server, s->name)) == NULL)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "the database connection string cannot be parsed");
    s->conn = db_connect_classified(s->url, "steward backtest", &cls, errstr, errstr_size);
    if (s->conn == NULL)
        return cls;
    migrate_result_t migrated;
    return migrate_apply(s->conn, &migrated, errstr, errstr_size);
}

err_class_t backtest_scratch_close(backtest_scratch_t *s, bool keep, char *errstr,
                                   size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    if (s->conn != NULL)
        PQfinish(s->conn);
    if (s->admin != NULL && s->url != NULL && !keep)
        cls = scratch_ddl(s, "DROP DATABASE IF EXISTS", " WITH (FORCE)",
                          "dropping the scratch database", errstr, errstr_size);
    if (s->admin != NULL)
        PQfinish(s->admin);
    free(s->url);
    memset(s, 0, sizeof *s);
    return cls;
}

/*
 * Candidates for steps that finished late within the window: advanced rows
 * the engine judged late, with the time in the state it left as the engine
 * judged it (history.time_in_state_ms). The replay, reading the window in
 * seconds, cannot tell from its clock; engine_state_late_by() decides which
 * were late for their own state's deadline (late_by_ms may be the
 * process's).
 */
static const char late_sql[] = "SELECT h.key, h.from_state, h.event_type, h.time_in_state_ms "
                               "FROM steward.history h "
                               "WHERE h.outcome = 'advanced' AND h.late_by_ms IS NOT NULL "
                               "  AND h.time_in_state_ms IS NOT NULL "
                               "ORDER BY h.event_time, h.key";

static const char open_alerts_sql[] =
    "SELECT kind, key, state, owner, summary FROM steward.alerts "
    "WHERE kind NOT IN ('blind', 'unloadable') ORDER BY deadline_at, id";

static json_t *alert_json(const char *kind, const char *key, const char *state, const char *owner,
                          const char *summary, bool open_at_end)
{
    return json_pack("{s:s, s:s, s:s?, s:s, s:s, s:b}", "kind", kind, "key", key, "state", state,
                     "owner", owner, "summary", summary, "open_at_end", open_at_end);
}

err_class_t backtest_alerts(PGconn *conn, const def_t *def, json_t **out, char *errstr,
                            size_t errstr_size)
{
    err_class_t cls;
    json_t *list = json_array();

    *out = NULL;
    PGresult *res =
        db_query(conn, "reading the alerts", open_alerts_sql, 0, NULL, &cls, errstr, errstr_size);
    if (res == NULL)
        goto done;
    for (int row = 0; row < PQntuples(res); row++)
        json_array_append_new(list, alert_json(PQgetvalue(res, row, 0), PQgetvalue(res, row, 1),
                                               PQgetvalue(res, row, 2), PQgetvalue(res, row, 3),
                                               PQgetvalue(res, row, 4), true));
    PQclear(res);

    res = db_query(conn, "reading late steps", late_sql, 0, NULL, &cls, errstr, errstr_size);
    if (res == NULL)
        goto done;
    for (int row = 0; row < PQntuples(res); row++) {
        const char *key = PQgetvalue(res, row, 0), *state = PQgetvalue(res, row, 1);
        long state_idx = def_find_state(def, state);
        int64_t stayed = strtoll(PQgetvalue(res, row, 3), NULL, 10);
        if (state_idx < 0 || engine_state_late_by(def, state_idx, stayed) <= 0)
            continue;
        char took[32], limit[32], summary[512];
        duration_format_rounded(stayed, took, sizeof took);
        duration_format(def->states[state_idx].deadline_ms, limit, sizeof limit);
        const char *owner = state_idx >= 0 ? def_state_owner(def, (size_t) state_idx) : def->owner;
        snprintf(summary, sizeof summary,
                 "%s %s spent %s in %s (deadline %s) before %s: paged %s, then resolved",
                 def->process, key, took, state, limit, PQgetvalue(res, row, 2), owner);
        json_array_append_new(list, alert_json("deadline", key, state, owner, summary, false));
    }
    PQclear(res);

done:
    if (cls == ERR_OK)
        *out = list;
    else
        json_decref(list);
    return cls;
}
