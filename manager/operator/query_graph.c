/*
 * query_graph - the graph view of query.h (query_graph()): the latest
 * recorded definition of a process, read back with the loader and laid
 * out by definitions/graph (the layout `steward graph` draws, `any`
 * transitions and all), with the live counts of its instances by state
 * and by the definition version each runs on, beside that version's
 * deadline.
 */
#include "manager/operator/query.h"

#include "common/db.h"
#include "definitions/def.h"
#include "definitions/duration.h"
#include "definitions/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The latest version's document, and the active instances counted by
 * (version, state) with that version's deadline of the state as written. */
static const char graph_sql[] =
    "SELECT d.version, d.mode, d.document::text, "
    "  (SELECT coalesce(json_agg(json_build_object('version', c.version, 'state', c.state, "
    "     'open', c.open, 'overdue', c.overdue, 'deadline', c.deadline) "
    "     ORDER BY c.state, c.version DESC), '[]') FROM ("
    "     SELECT i.version, i.state, count(*) AS open, "
    "       count(*) FILTER (WHERE i.overdue) AS overdue, "
    "       v.document->'states'->i.state->>'deadline' AS deadline "
    "     FROM steward.instances i LEFT JOIN steward.definitions v "
    "       ON v.process = i.process AND v.version = i.version "
    "     WHERE i.process = $1 AND i.status = 'active' "
    "     GROUP BY i.version, i.state, v.document->'states'->i.state->>'deadline') c)::text "
    "FROM steward.definitions d WHERE d.process = $1 ORDER BY d.version DESC LIMIT 1";

static json_t *transition(const char *from, const char *to, const char *event, const char *kind)
{
    return json_pack("{s:s?, s:s, s:s, s:s}", "from", from, "to", to, "event", event, "kind", kind);
}

/* The document of query_graph() for `def`, with the counts of `counts`
 * ([{version, state, open, overdue, deadline}]) laid on its states; those
 * of states the definition no longer has go to `elsewhere`. NULL when
 * memory runs out. */
static json_t *graph_json(const def_t *def, const char *mode, json_t *counts)
{
    graph_layout_t l;
    if (!graph_layout(def, &l))
        return NULL;
    json_t *states = json_array(), *transitions = json_array(), *elsewhere = json_array();
    json_t *doc = json_pack("{s:s, s:i, s:s, s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:o}", "process",
                            def->process, "version", def->version, "mode", mode, "start",
                            def->states[def->start_state].name, "start_event",
                            def->events[def->start_event].name, "columns", l.columns, "rows",
                            l.rows, "states", states, "transitions", transitions, "any",
                            l.has_any ? json_pack("{s:i, s:i}", "column", l.column[def->n_states],
                                                  "row", l.row[def->n_states])
                                      : json_null(),
                            "elsewhere", elsewhere);
    for (size_t i = 0; doc != NULL && i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        char notes[GRAPH_MAX_NOTES][160], deadline[32];
        size_t n_notes = graph_state_notes(def, i, notes);
        json_t *note_list = json_array(), *versions = json_array();
        for (size_t k = 0; k < n_notes; k++)
            json_array_append_new(note_list, json_string(notes[k]));
        json_int_t open = 0, overdue = 0;
        size_t k;
        json_t *c;
        json_array_foreach(counts, k, c)
        {
            if (strcmp(json_string_value(json_object_get(c, "state")), st->name) != 0)
                continue;
            open += json_integer_value(json_object_get(c, "open"));
            overdue += json_integer_value(json_object_get(c, "overdue"));
            json_array_append(versions, c);
        }
        json_t *row =
            json_pack("{s:s, s:s?, s:o, s:s?, s:o, s:i, s:i, s:I, s:I, s:o}", "name", st->name,
                      "terminal", st->terminal, "deadline",
                      st->deadline_ms > 0
                          ? json_string(duration_format(st->deadline_ms, deadline, sizeof deadline))
                          : json_null(),
                      "owner", def_state_owner(def, i), "notes", note_list, "column", l.column[i],
                      "row", l.row[i], "open", open, "overdue", overdue, "versions", versions);
        if (row == NULL || json_array_append_new(states, row) != 0) {
            json_decref(doc);
            doc = NULL;
        }
    }
    for (size_t i = 0; doc != NULL && i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        for (size_t k = 0; k < st->n_on; k++)
            json_array_append_new(transitions, transition(st->name, def->states[st->on[k].to].name,
                                                          def->events[st->on[k].event].name, "on"));
        if (st->on_timeout >= 0)
            json_array_append_new(
                transitions,
                transition(st->name, def->states[st->on_timeout].name, "timeout", "timeout"));
    }
    for (size_t k = 0; doc != NULL && k < def->n_any; k++)
        json_array_append_new(transitions, transition(NULL, def->states[def->any[k].to].name,
                                                      def->events[def->any[k].event].name, "any"));
    size_t k;
    json_t *c;
    json_array_foreach(counts, k, c)
    {
        if (doc != NULL && def_find_state(def, json_string_value(json_object_get(c, "state"))) < 0)
            json_array_append(elsewhere, c);
    }
    graph_layout_free(&l);
    return doc;
}

err_class_t query_graph(PGconn *conn, const char *process, json_t **out, char *errstr,
                        size_t errstr_size)
{
    const char *params[1] = {process};
    err_class_t cls;
    PGresult *res = db_query(conn, "reading a definition's graph", graph_sql, 1, params, &cls,
                             errstr, errstr_size);

    *out = NULL;
    if (res == NULL || PQntuples(res) == 0) {
        PQclear(res);
        return cls;
    }
    const char *text = PQgetvalue(res, 0, 2);
    def_problems_t problems = {0};
    def_t *def = def_load_json(text, strlen(text), "steward.definitions", &problems);
    json_t *counts = json_loads(PQgetvalue(res, 0, 3), 0, NULL);
    if (def == NULL) {
        cls = err_set(ERR_INVALID, errstr, errstr_size,
                      "the recorded definition of %s, version %s, no longer loads: %s", process,
                      PQgetvalue(res, 0, 0),
                      problems.n > 0 ? problems.items[0].message : "out of memory");
    } else if (counts == NULL || (*out = graph_json(def, PQgetvalue(res, 0, 1), counts)) == NULL) {
        cls =
            err_set(ERR_FATAL, errstr, errstr_size, "reading a definition's graph: out of memory");
    }
    def_problems_clear(&problems);
    def_free(def);
    json_decref(counts);
    PQclear(res);
    return cls;
}
