/*
 * report_upgrade - what `steward upgrade` to a suggested deadline would do
 * to the instances open now: for each state the report suggests a deadline
 * for, the open instances in it that an upgrade to a version with that
 * deadline (the reported version's, that one figure changed) would move,
 * and which of their open deadline alerts would resolve. The engine judges
 * each instance as the upgrade's dry run does (engine_operator_upgrade()),
 * read through steward.upgrade_rows(); see report_upgrade.h.
 */
#include "shadow/report_upgrade.h"

#include "common/db.h"
#include "common/pgarr.h"
#include "engine/engine.h"
#include "shadow/upgrade_rows.h"

#include <stdlib.h>
#include <string.h>

/* The open instances of $1 in the states $2, as upgrade_rows() reads them
 * for the upgrade, with the clock. */
static const char rows_sql[] =
    "SELECT r.*, steward.to_ms(now()) FROM steward.upgrade_rows($1, ARRAY("
    "  SELECT i.key FROM steward.instances i WHERE i.process = $1 AND i.status = 'active' "
    "    AND i.state = ANY ($2::text[]))) r ORDER BY r.version, r.key";

/* Version `version` of `process` as recorded, loaded; NULL when it is not
 * recorded or no longer loads (its instances are then left out, as the
 * upgrade would skip them). */
static def_t *load_version(PGconn *conn, const char *process, int version)
{
    char v[16];
    snprintf(v, sizeof v, "%d", version);
    const char *params[2] = {process, v};
    PGresult *res = PQexecParams(conn,
                                 "SELECT document::text FROM steward.definitions "
                                 "WHERE process = $1 AND version = $2::int",
                                 2, NULL, params, NULL, NULL, 0);
    def_t *def = NULL;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        def_problems_t problems = {0};
        const char *doc = PQgetvalue(res, 0, 0);
        def = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
        def_problems_clear(&problems);
    }
    PQclear(res);
    return def;
}

/* The figures of one state: suggestion["upgrade"]. */
typedef struct preview {
    const char *state;
    def_state_t *to_state; /* in the copy of the version with the suggestion */
    int64_t deadline_ms;
    json_int_t moved;
    json_t *alerts; /* ids of the open deadline alerts that would resolve */
} preview_t;

/* Judges row r (an instance on `from`) against `to`, the reported version
 * with one state's deadline changed, into p. */
static void judge_row(const PGresult *res, int r, const def_t *from, const def_t *to, preview_t *p)
{
    long from_state = def_find_state(from, PQgetvalue(res, r, UPGRADE_ROWS_STATE));
    long to_state = def_find_state(to, p->state);
    if (from_state < 0 || to_state < 0 ||
        strcmp(PQgetvalue(res, r, UPGRADE_ROWS_STATUS), "active") != 0)
        return;
    engine_instance_t inst;
    engine_upgrade_t up;
    upgrade_rows_instance(res, r, from, from_state, &inst);
    /* No watermark in the report's reading: judged at the clock. */
    if (engine_operator_upgrade(from, to, &inst, to_state, false, ENGINE_NO_DEADLINE,
                                upgrade_rows_ms(res, r, UPGRADE_ROWS_NOW), &up)) {
        p->moved++;
        if (up.resolve_deadline || up.resolve_all) {
            json_t *open = json_loads(PQgetvalue(res, r, UPGRADE_ROWS_ALERTS), 0, NULL), *a;
            size_t i;
            json_array_foreach(open, i, a)
            {
                const char *kind = json_string_value(json_object_get(a, "kind"));
                if (up.resolve_all || (kind != NULL && strcmp(kind, "deadline") == 0))
                    json_array_append(p->alerts, json_object_get(a, "id"));
            }
            json_decref(open);
        }
    }
    engine_instance_clear(&inst);
}

static int compare_id(const void *a, const void *b)
{
    json_int_t x = *(const json_int_t *) a, y = *(const json_int_t *) b;
    return (x > y) - (x < y);
}

/* The array of alert ids, ascending; NULL when out of memory. */
static json_t *sorted_ids(const json_t *ids)
{
    size_t n = json_array_size(ids);
    json_int_t *v = malloc((n + 1) * sizeof *v);
    json_t *out = json_array();
    if (v == NULL || out == NULL) {
        free(v);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = json_integer_value(json_array_get(ids, i));
    qsort(v, n, sizeof *v, compare_id);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(out, json_integer(v[i]));
    free(v);
    return out;
}

err_class_t report_upgrade_add(PGconn *conn, const def_t *def, json_t *process_doc, char *errstr,
                               size_t errstr_size)
{
    json_t *states = json_object_get(process_doc, "states"), *st;
    size_t i, n = 0;
    preview_t *previews = calloc(json_array_size(states) + 1, sizeof *previews);
    pgarr_t names = {0};
    err_class_t cls = ERR_OK;
    PGresult *res = NULL;
    def_t *from = NULL;
    /* The version an upgrade would go to: the reported one, newer, its
     * states its own (each preview changes one deadline in turn). */
    def_t to = *def;
    to.version = def->version + 1;
    to.states = malloc((def->n_states + 1) * sizeof *to.states);
    if (previews == NULL || to.states == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    memcpy(to.states, def->states, def->n_states * sizeof *to.states);
    json_array_foreach(states, i, st)
    {
        json_t *sug = json_object_get(st, "suggestion");
        const char *name = json_string_value(json_object_get(st, "state"));
        long idx = name != NULL ? def_find_state(def, name) : -1;
        if (!json_is_integer(json_object_get(sug, "deadline_ms")) || idx < 0)
            continue;
        previews[n] =
            (preview_t){name, &to.states[idx],
                        json_integer_value(json_object_get(sug, "deadline_ms")), 0, json_array()};
        pgarr_add(&names, name);
        n++;
    }
    if (n == 0)
        goto done;
    const char *params[2] = {def->process, pgarr_text(&names)};
    if (params[1] == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    res = PQexecParams(conn, rows_sql, 2, NULL, params, NULL, NULL, 0);
    if ((cls = db_result_class(res, conn)) != ERR_OK) {
        err_set(cls, errstr, errstr_size, "reading the open instances: %s", PQerrorMessage(conn));
        goto done;
    }
    for (int r = 0; r < PQntuples(res); r++) {
        int version = atoi(PQgetvalue(res, r, UPGRADE_ROWS_VERSION));
        if (version > def->version)
            continue; /* newer than the report's: no upgrade to its figures moves it */
        if (from == NULL || from->version != version) {
            if (from != def)
                def_free(from);
            from =
                version == def->version ? (def_t *) def : load_version(conn, def->process, version);
            if (from == NULL)
                continue;
        }
        for (size_t p = 0; p < n; p++) {
            if (strcmp(previews[p].state, PQgetvalue(res, r, UPGRADE_ROWS_STATE)) != 0)
                continue;
            int64_t kept = previews[p].to_state->deadline_ms;
            previews[p].to_state->deadline_ms = previews[p].deadline_ms;
            judge_row(res, r, from, &to, &previews[p]);
            previews[p].to_state->deadline_ms = kept;
        }
    }

done:
    for (size_t p = 0; p < n; p++) {
        json_t *sug = NULL;
        json_array_foreach(states, i, st)
        {
            if (strcmp(json_string_value(json_object_get(st, "state")), previews[p].state) == 0)
                sug = json_object_get(st, "suggestion");
        }
        if (cls == ERR_OK && sug != NULL)
            json_object_set_new(sug, "upgrade",
                                json_pack("{s:I, s:I, s:o}", "instances", previews[p].moved,
                                          "alerts_resolved",
                                          (json_int_t) json_array_size(previews[p].alerts),
                                          "alert_ids", sorted_ids(previews[p].alerts)));
        json_decref(previews[p].alerts);
    }
    if (from != def)
        def_free(from);
    PQclear(res);
    pgarr_free(&names);
    free(to.states);
    free(previews);
    return cls;
}
