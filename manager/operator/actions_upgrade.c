/*
 * actions_upgrade - steward upgrade PROCESS --to VERSION (actions.h): the
 * open instances of older versions of a process moved to a newer recorded
 * version.
 *
 * First, before anything moves: the options read, the target version and
 * every older version with open instances (the sources) loaded from
 * steward.definitions, and the mapping checked against each source
 * (engine_upgrade_targets()): a state without a target, or with a terminal
 * one not allowed, refuses the whole upgrade. Then the instances are
 * selected in key order, a batch at a time (the selection's SQL only
 * selects), and each is moved in a transaction of its own: BEGIN, its
 * advisory lock (the lock every batch of events takes), its row read again
 * under it (steward.action_upgrade_lock()), the engine's decision
 * (engine_operator_upgrade()), one steward.action_upgrade() call that
 * stores it with its audit row, COMMIT. A moved instance is on the target
 * version and never selected again, so an upgrade cut short (a crash
 * between batches: the failpoint upgrade.between_batches) is finished by
 * running it again, and no instance moves twice.
 *
 * A dry run reads the same rows in the same order without a lock and
 * stores nothing; the real run and the dry run tally what the engine
 * decided into the same document, so the dry run says what the run will
 * do.
 */
#include "manager/operator/actions_int.h"
#include "manager/operator/query.h"

#include "common/db.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "common/pgarr.h"
#include "common/rfc3339.h"
#include "definitions/def.h"
#include "definitions/duration.h"
#include "engine/engine.h"
#include "shadow/upgrade_rows.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most --map pairs, --state names and source versions one upgrade takes. */
#define UPGRADE_NAMES_MAX   64
#define UPGRADE_SOURCES_MAX 256

/* What the request asks, read from the row's options. */
typedef struct upgrade_opts {
    int to;
    int from;                    /* 0: every older version */
    char *map_text, *state_text; /* owned copies, cut into the lists below */
    const char *map_from[UPGRADE_NAMES_MAX], *map_to[UPGRADE_NAMES_MAX];
    size_t n_map;
    const char *states[UPGRADE_NAMES_MAX];
    size_t n_states;
    const char *key;       /* NULL: every key */
    int64_t older_than_ms; /* 0: any age */
    bool dry_run, allow_terminal, send_current;
    int batch;
} upgrade_opts_t;

/* An older version with open instances: its definition, and where each
 * of its states goes. */
typedef struct source {
    int version;
    def_t *def;
    long *targets; /* by state of def; -1: not moved */
    bool *only;    /* by state of def: the states --state selects (all without it) */
} source_t;

/* What the upgrade did (or a dry run would do), as the answer says it. */
typedef struct tally {
    json_t *states, *deadlines, *alerts, *due, *commands, *skipped;
    long moved, promoted, n_deadlines, n_alerts, n_due, n_commands;
    bool truncated;
} tally_t;

typedef struct upgrade {
    PGconn *conn;
    const action_request_t *req;
    upgrade_opts_t o;
    def_t *to;
    source_t sources[UPGRADE_SOURCES_MAX];
    size_t n_sources;
    int64_t watermark_ms; /* the process's, read each batch; ENGINE_NO_DEADLINE: unknown */
    tally_t t;
} upgrade_t;

/* ---- the options -------------------------------------------------------------- */

/* The value of the row's option `name`; NULL when not given. */
static const char *option(const action_request_t *req, const char *name)
{
    const action_verb_def_t *row = action_verb_def(ACTION_UPGRADE);
    for (int i = 0; row->options[i].name != NULL; i++)
        if (strcmp(row->options[i].name, name) == 0)
            return req->options != NULL ? req->options[i] : NULL;
    return NULL;
}

static bool whole_number(const char *text, int min, int max, int *out)
{
    char *end;
    long v = text != NULL ? strtol(text, &end, 10) : 0;
    if (text == NULL || *text == '\0' || *end != '\0' || v < min || v > max)
        return false;
    *out = (int) v;
    return true;
}

/* Cuts `text` (owned, changed in place) at commas into items, spaces
 * around each trimmed; false when one is empty or there are too many. */
static bool cut(char *text, const char **items, size_t *n)
{
    *n = 0;
    for (char *p = text; p != NULL;) {
        char *comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        while (*p == ' ')
            p++;
        size_t len = strlen(p);
        while (len > 0 && p[len - 1] == ' ')
            p[--len] = '\0';
        if (len == 0 || *n == UPGRADE_NAMES_MAX)
            return false;
        items[(*n)++] = p;
        p = comma != NULL ? comma + 1 : NULL;
    }
    return true;
}

static action_rc_t read_options(const action_request_t *req, upgrade_opts_t *o, char *errstr,
                                size_t errstr_size)
{
    memset(o, 0, sizeof *o);
    o->batch = ACTION_UPGRADE_BATCH;
    const char *to = option(req, "to"), *from = option(req, "from-version");
    const char *map = option(req, "map"), *states = option(req, "state");
    const char *older = option(req, "older-than"), *batch = option(req, "batch");
    if (!whole_number(to, 1, 2147483647, &o->to))
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                           "upgrade needs --to VERSION, a recorded version number (got %s)",
                           to != NULL ? to : "none");
    if (from != NULL && !whole_number(from, 1, 2147483647, &o->from))
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                           "--from-version %s: expected a version number", from);
    if (o->from != 0 && o->from >= o->to)
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                           "--from-version %d is not older than --to %d: an upgrade moves "
                           "instances to a newer version",
                           o->from, o->to);
    if (batch != NULL && !whole_number(batch, 1, ACTION_UPGRADE_BATCH_MAX, &o->batch))
        return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                           "--batch %s: expected 1 to %d instances", batch,
                           ACTION_UPGRADE_BATCH_MAX);
    if (older != NULL) {
        char why[256];
        if (!duration_parse(older, &o->older_than_ms, why, sizeof why))
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size, "--older-than: %s", why);
    }
    o->key = option(req, "key");
    o->dry_run = option(req, "dry-run") != NULL;
    o->allow_terminal = option(req, "allow-terminal") != NULL;
    o->send_current = option(req, "send-current") != NULL;
    if (map != NULL) {
        const char *items[UPGRADE_NAMES_MAX];
        size_t n;
        if ((o->map_text = strdup(map)) == NULL)
            return action_fail(ACTION_FAILED, errstr, errstr_size, "out of memory");
        if (!cut(o->map_text, items, &n))
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                               "--map %s: expected OLD=NEW, several separated by commas (at "
                               "most %d)",
                               map, UPGRADE_NAMES_MAX);
        for (size_t i = 0; i < n; i++) {
            char *eq = strchr(items[i], '=');
            if (eq == NULL || eq == items[i] || eq[1] == '\0')
                return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                                   "--map %s: expected OLD=NEW, a state of an older version and "
                                   "the state of the newer one it goes to",
                                   items[i]);
            *eq = '\0';
            for (size_t j = 0; j < o->n_map; j++)
                if (strcmp(o->map_from[j], items[i]) == 0)
                    return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                                       "--map names %s twice", items[i]);
            o->map_from[o->n_map] = items[i];
            o->map_to[o->n_map++] = eq + 1;
        }
    }
    if (states != NULL) {
        if ((o->state_text = strdup(states)) == NULL)
            return action_fail(ACTION_FAILED, errstr, errstr_size, "out of memory");
        if (!cut(o->state_text, o->states, &o->n_states))
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                               "--state %s: expected state names separated by commas (at most "
                               "%d)",
                               states, UPGRADE_NAMES_MAX);
    }
    return ACTION_OK;
}

/* ---- the versions --------------------------------------------------------------- */

static const char version_sql[] =
    "SELECT document::text, topic_mapping::text FROM steward.definitions "
    "WHERE process = $1 AND version = $2::int";

/*
 * Version `version` of `process` as recorded, renamed by the topic mapping
 * recorded beside it (a queued command goes to the broker's topic); NULL
 * with *rc and errstr set: ACTION_NOT_FOUND when it is not recorded,
 * ACTION_REFUSED when it no longer loads.
 */
static def_t *load_version(PGconn *conn, const char *process, int version, action_rc_t *rc,
                           char *errstr, size_t errstr_size)
{
    char v[16];
    snprintf(v, sizeof v, "%d", version);
    const char *params[2] = {process, v};
    err_class_t cls;
    PGresult *res =
        db_query(conn, "reading the definition", version_sql, 2, params, &cls, errstr, errstr_size);
    if (res == NULL) {
        *rc = ACTION_FAILED;
        return NULL;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        const char *p1[1] = {process};
        res = db_query(conn, "reading the versions",
                       "SELECT coalesce(string_agg(version::text, ', ' ORDER BY version), '') "
                       "FROM steward.definitions WHERE process = $1",
                       1, p1, &cls, errstr, errstr_size);
        const char *recorded = res != NULL ? PQgetvalue(res, 0, 0) : "";
        if (*recorded == '\0')
            *rc = action_fail(ACTION_NOT_FOUND, errstr, errstr_size,
                              "no definition of %s was ever recorded (steward run records the "
                              "versions it loads)",
                              process);
        else
            *rc = action_fail(ACTION_NOT_FOUND, errstr, errstr_size,
                              "version %d of %s is not recorded (recorded: %s); steward run "
                              "records a version when it loads it",
                              version, process, recorded);
        PQclear(res);
        return NULL;
    }
    def_problems_t problems = {0};
    const char *doc = PQgetvalue(res, 0, 0);
    def_t *def = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
    json_t *mapping = PQgetisnull(res, 0, 1) ? NULL : json_loads(PQgetvalue(res, 0, 1), 0, NULL);
    if (def != NULL && !def_map_recorded(def, mapping, &problems)) {
        def_free(def);
        def = NULL;
    }
    json_decref(mapping);
    PQclear(res);
    if (def == NULL)
        *rc = action_fail(ACTION_REFUSED, errstr, errstr_size,
                          "version %d of %s no longer loads (%s); nothing was moved", version,
                          process, problems.n > 0 ? problems.items[0].message : "?");
    def_problems_clear(&problems);
    return def;
}

static const source_t *find_source(const upgrade_t *u, int version)
{
    for (size_t i = 0; i < u->n_sources; i++)
        if (u->sources[i].version == version)
            return &u->sources[i];
    return NULL;
}

/* Whether some source declares a state `name`. */
static bool some_source_has(const upgrade_t *u, const char *name)
{
    for (size_t i = 0; i < u->n_sources; i++)
        if (def_find_state(u->sources[i].def, name) >= 0)
            return true;
    return false;
}

/*
 * The sources: every version older than the target with open instances
 * (of --from-version only), each loaded and its mapping checked, before
 * anything moves. ACTION_OK, or the refusal.
 */
static action_rc_t load_sources(upgrade_t *u, char *errstr, size_t errstr_size)
{
    const upgrade_opts_t *o = &u->o;
    char to[16], from[16];
    snprintf(to, sizeof to, "%d", o->to);
    snprintf(from, sizeof from, "%d", o->from);
    const char *params[3] = {u->req->process, to, o->from != 0 ? from : NULL};
    err_class_t cls;
    PGresult *res = db_query(u->conn, "reading the versions with open instances",
                             "SELECT version FROM steward.instances WHERE process = $1 "
                             "  AND status = 'active' AND version < $2::int "
                             "  AND ($3::int IS NULL OR version = $3::int) "
                             "GROUP BY version ORDER BY version",
                             3, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return ACTION_FAILED;
    action_rc_t rc = ACTION_OK;
    for (int r = 0; r < PQntuples(res) && rc == ACTION_OK; r++) {
        if (u->n_sources == UPGRADE_SOURCES_MAX) {
            rc = action_fail(ACTION_REFUSED, errstr, errstr_size,
                             "%s has open instances on more than %d older versions: upgrade "
                             "them a few at a time (--from-version)",
                             u->req->process, UPGRADE_SOURCES_MAX);
            break;
        }
        source_t *s = &u->sources[u->n_sources];
        s->version = atoi(PQgetvalue(res, r, 0));
        if ((s->def = load_version(u->conn, u->req->process, s->version, &rc, errstr,
                                   errstr_size)) == NULL)
            break;
        u->n_sources++;
        s->targets = calloc(s->def->n_states, sizeof *s->targets);
        s->only = calloc(s->def->n_states, sizeof *s->only);
        if (s->targets == NULL || s->only == NULL) {
            rc = action_fail(ACTION_FAILED, errstr, errstr_size, "out of memory");
            break;
        }
        for (size_t st = 0; st < s->def->n_states; st++) {
            s->only[st] = o->n_states == 0;
            for (size_t i = 0; i < o->n_states; i++)
                s->only[st] = s->only[st] || strcmp(o->states[i], s->def->states[st].name) == 0;
        }
    }
    PQclear(res);
    if (rc != ACTION_OK || u->n_sources == 0)
        return rc;

    /* Names that match nothing are typos: refused, not taken to mean "no
     * instance". */
    for (size_t i = 0; i < o->n_map; i++) {
        if (!some_source_has(u, o->map_from[i]))
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                               "--map %s=%s: no version being upgraded has a state %s",
                               o->map_from[i], o->map_to[i], o->map_from[i]);
        if (def_find_state(u->to, o->map_to[i]) < 0)
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                               "--map %s=%s: version %d of %s has no state %s", o->map_from[i],
                               o->map_to[i], o->to, u->req->process, o->map_to[i]);
    }
    for (size_t i = 0; i < o->n_states; i++)
        if (!some_source_has(u, o->states[i]))
            return action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                               "--state %s: no version being upgraded has that state",
                               o->states[i]);
    engine_upgrade_map_t map = {o->map_from, o->map_to, o->n_map, o->allow_terminal};
    for (size_t i = 0; i < u->n_sources; i++) {
        source_t *s = &u->sources[i];
        char why[512];
        if (!engine_upgrade_targets(s->def, u->to, &map, s->only, s->targets, why, sizeof why))
            return action_fail(ACTION_REFUSED, errstr, errstr_size, "%s; nothing was moved", why);
    }
    return ACTION_OK;
}

/* ---- one instance ------------------------------------------------------------------ */

/* What became of one instance. */
typedef enum outcome {
    IGNORED, /* no longer one to move: finished, upgraded or left the states selected meanwhile */
    SKIPPED, /* left as it is, for the reason in why */
    MOVED,   /* moved (a dry run: would be) */
} outcome_t;

typedef struct move {
    const char *key; /* borrowed from the row */
    const source_t *source;
    long from_state;
    engine_upgrade_t up;
    json_t *alerts;  /* resolved (would be): [{"id", "kind"}]; owned */
    json_t *command; /* queued (would be); owned, NULL: none */
    char why[768];
} move_t;

/* The open alerts of the row that `up` resolves: what a dry run reports. */
static json_t *alerts_resolved(const PGresult *res, int r, const engine_upgrade_t *up)
{
    json_t *open = json_loads(PQgetvalue(res, r, UPGRADE_ROWS_ALERTS), 0, NULL),
           *out = json_array(), *a;
    size_t i;
    json_array_foreach(open, i, a)
    {
        const char *kind = json_string_value(json_object_get(a, "kind"));
        if (kind != NULL &&
            (up->resolve_all || (up->resolve_deadline && strcmp(kind, "deadline") == 0) ||
             (up->resolve_process_deadline && strcmp(kind, "process_deadline") == 0)))
            json_array_append(out, a);
    }
    json_decref(open);
    return out;
}

static const char store_sql[] =
    "SELECT alert_id, alert_kind FROM steward.action_upgrade($1, $2, $3::int, $4::int, $5, $6, "
    "  $7::bigint, $8::int, $9::int, $10::bigint, $11::bigint, $12::bigint, $13::bigint, "
    "  $14::boolean, $15::boolean, $16, $17::bigint, $18::bigint, $19::jsonb, $20::boolean, "
    "  $21::text[], $22, $23, $24)";

/* Stores the engine's decision m (instance `inst` as it left it, its
 * command row as text, NULL for none) through steward.action_upgrade();
 * m->alerts gets what it resolved. In the caller's transaction. */
static action_rc_t store(upgrade_t *u, move_t *m, const engine_instance_t *inst,
                         const char *command, char *errstr, size_t errstr_size)
{
    const engine_upgrade_t *up = &m->up;
    char from[16], to[16], entered[32], step[16], attempt[16], token[32], deadline[32], next[32],
        process_deadline[32], expires[32], renewed[32];
    snprintf(from, sizeof from, "%d", m->source->version);
    snprintf(to, sizeof to, "%d", u->to->version);
    snprintf(step, sizeof step, "%d", inst->step);
    snprintf(attempt, sizeof attempt, "%d", inst->attempt);
    snprintf(token, sizeof token, "%" PRId64, inst->token);
    const char *resolve = up->resolve_all ? NULL
                          : up->resolve_deadline && up->resolve_process_deadline
                              ? "{deadline,process_deadline}"
                          : up->resolve_deadline         ? "{deadline}"
                          : up->resolve_process_deadline ? "{process_deadline}"
                                                         : "{}";
    const char *params[24] = {
        u->req->process,
        m->key,
        from,
        to,
        u->to->states[up->to_state].name,
        up->status,
        action_ms_param(inst->state_entered_ms, entered, sizeof entered),
        step,
        attempt,
        token,
        action_ms_param(inst->deadline_ms, deadline, sizeof deadline),
        action_ms_param(engine_next_deadline(u->to, inst), next, sizeof next),
        action_ms_param(inst->process_deadline_ms, process_deadline, sizeof process_deadline),
        inst->overdue ? "true" : "false",
        inst->process_overdue ? "true" : "false",
        inst->lease_holder,
        action_ms_param(inst->lease_expires_ms, expires, sizeof expires),
        action_ms_param(inst->lease_renewed_ms, renewed, sizeof renewed),
        command,
        up->cancel_unsent ? "true" : "false",
        resolve,
        up->detail,
        u->req->actor,
        u->req->reason,
    };
    action_rc_t rc = ACTION_FAILED;
    PGresult *res = action_call(u->conn, "recording the upgrade", store_sql, 24, params, &rc,
                                errstr, errstr_size);
    if (res == NULL)
        return rc;
    m->alerts = json_array();
    for (int r = 0; r < PQntuples(res); r++)
        json_array_append_new(m->alerts,
                              json_pack("{s:I, s:s}", "id",
                                        (json_int_t) strtoll(PQgetvalue(res, r, 0), NULL, 10),
                                        "kind", PQgetvalue(res, r, 1)));
    PQclear(res);
    return ACTION_OK;
}

/*
 * Judges row r of res (steward.upgrade_rows()'s columns, then the clock)
 * and, unless a dry run, stores the move in the caller's transaction.
 * Fills *m; ACTION_OK with *outcome, or ACTION_FAILED (the database, or
 * memory) with errstr set.
 */
static action_rc_t judge(upgrade_t *u, const PGresult *res, int r, move_t *m, outcome_t *outcome,
                         char *errstr, size_t errstr_size)
{
    memset(m, 0, sizeof *m);
    m->key = PQgetvalue(res, r, UPGRADE_ROWS_KEY);
    *outcome = IGNORED;
    const char *state = PQgetvalue(res, r, UPGRADE_ROWS_STATE),
               *claimed = PQgetvalue(res, r, UPGRADE_ROWS_CLAIMED);
    int version = atoi(PQgetvalue(res, r, UPGRADE_ROWS_VERSION));
    if (strcmp(PQgetvalue(res, r, UPGRADE_ROWS_STATUS), "active") != 0 ||
        (m->source = find_source(u, version)) == NULL)
        return ACTION_OK;
    if (*claimed != '\0' && strcmp(claimed, u->req->actor) != 0) {
        snprintf(m->why, sizeof m->why,
                 "claimed by %s: only they may move it (steward upgrade --key), or they release "
                 "it first",
                 claimed);
        *outcome = SKIPPED;
        return ACTION_OK;
    }
    const def_t *from = m->source->def;
    if ((m->from_state = def_find_state(from, state)) < 0) {
        snprintf(m->why, sizeof m->why, "state %s is not declared by version %d", state,
                 m->source->version);
        *outcome = SKIPPED;
        return ACTION_OK;
    }
    long to_state = m->source->targets[m->from_state];
    if (to_state < 0)
        return ACTION_OK; /* in a state --state leaves out, or finished: moved meanwhile */

    engine_instance_t inst;
    upgrade_rows_instance(res, r, from, m->from_state, &inst);
    action_rc_t rc = ACTION_OK;
    char *command = NULL;
    int64_t now_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_NOW);
    if (!engine_operator_upgrade(from, u->to, &inst, to_state, u->o.send_current, u->watermark_ms,
                                 now_ms, &m->up)) {
        snprintf(m->why, sizeof m->why, "%s", m->up.detail);
        *outcome = SKIPPED;
        goto done;
    }
    if (m->up.command.send &&
        (command = action_command_row(u->to, m->key, &inst, &m->up.command, &m->command, &rc,
                                      m->why, sizeof m->why)) == NULL) {
        if (rc == ACTION_REFUSED) {
            *outcome = SKIPPED;
            rc = ACTION_OK;
        } else {
            snprintf(errstr, errstr_size, "%s", m->why);
        }
        goto done;
    }
    if (u->o.dry_run)
        m->alerts = alerts_resolved(res, r, &m->up);
    else if ((rc = store(u, m, &inst, command, errstr, errstr_size)) != ACTION_OK)
        goto done;
    *outcome = MOVED;
done:
    if (rc != ACTION_OK) {
        json_decref(m->alerts);
        json_decref(m->command);
        m->alerts = m->command = NULL;
    }
    free(command);
    engine_instance_clear(&inst);
    return rc;
}

/* ---- the tally ------------------------------------------------------------------------ */

static void tally_init(tally_t *t)
{
    memset(t, 0, sizeof *t);
    t->states = json_array();
    t->deadlines = json_array();
    t->alerts = json_array();
    t->due = json_array();
    t->commands = json_array();
    t->skipped = json_array();
}

static void tally_clear(tally_t *t)
{
    json_decref(t->states);
    json_decref(t->deadlines);
    json_decref(t->alerts);
    json_decref(t->due);
    json_decref(t->commands);
    json_decref(t->skipped);
}

/* Appends item (taken) to list while it is shorter than the cap. */
static void listed(tally_t *t, json_t *list, json_t *item)
{
    if (json_array_size(list) < ACTION_UPGRADE_LIST_MAX)
        json_array_append_new(list, item);
    else {
        json_decref(item);
        t->truncated = true;
    }
}

/* An RFC 3339 time, or JSON null for ENGINE_NO_DEADLINE. */
static json_t *time_json(int64_t ms)
{
    char buf[40];
    return ms == ENGINE_NO_DEADLINE ? json_null()
                                    : json_string(rfc3339_format(ms, buf, sizeof buf));
}

static void deadline_changed(tally_t *t, const move_t *m, const char *state, const char *which,
                             int64_t before, int64_t after)
{
    if (before == after)
        return;
    t->n_deadlines++;
    json_t *change = before == ENGINE_NO_DEADLINE || after == ENGINE_NO_DEADLINE
                         ? json_null()
                         : json_integer((json_int_t) (after - before));
    listed(t, t->deadlines,
           json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "key", m->key, "state", state, "deadline",
                     which, "before", time_json(before), "after", time_json(after), "change_ms",
                     change));
}

/* What the scheduler's next pass does to an instance due at once. */
static const char *due_name(engine_due_kind_t kind)
{
    static const char *const names[ENGINE_DUE_N_KINDS] = {
        [ENGINE_DUE_DEADLINE] = "deadline",
        [ENGINE_DUE_PROCESS_DEADLINE] = "process_deadline",
        [ENGINE_DUE_RESEND] = "resend",
        [ENGINE_DUE_TIMEOUT] = "on_timeout",
        [ENGINE_DUE_LEASE_EXPIRED] = "lease_expired",
        [ENGINE_DUE_HANDOFF] = "handoff",
    };
    return kind < ENGINE_DUE_N_KINDS ? names[kind] : "?";
}

/* Counts the move (or skip) in the tally; takes m's alerts and command. */
static void tally_add(upgrade_t *u, move_t *m, outcome_t outcome)
{
    tally_t *t = &u->t;
    if (outcome == SKIPPED)
        listed(t, t->skipped, json_pack("{s:s, s:s}", "key", m->key, "why", m->why));
    if (outcome != MOVED) {
        json_decref(m->alerts);
        json_decref(m->command);
        return;
    }
    const engine_upgrade_t *up = &m->up;
    const char *from_state = m->source->def->states[m->from_state].name;
    const char *to_state = u->to->states[up->to_state].name;
    t->moved++;
    t->promoted += up->promoted;
    json_t *row = NULL, *s;
    size_t i;
    json_array_foreach(t->states, i, s)
    {
        if (json_integer_value(json_object_get(s, "from_version")) == m->source->version &&
            strcmp(json_string_value(json_object_get(s, "from_state")), from_state) == 0)
            row = s;
    }
    if (row == NULL) {
        row = json_pack("{s:i, s:s, s:s, s:I}", "from_version", m->source->version, "from_state",
                        from_state, "to_state", to_state, "instances", (json_int_t) 0);
        json_array_append_new(t->states, row);
    }
    json_object_set_new(row, "instances",
                        json_integer(json_integer_value(json_object_get(row, "instances")) + 1));

    if (strcmp(up->status, "active") == 0) {
        deadline_changed(t, m, to_state, "state", up->deadline_before_ms, up->deadline_after_ms);
        deadline_changed(t, m, to_state, "process", up->process_deadline_before_ms,
                         up->process_deadline_after_ms);
    }
    json_t *a;
    json_array_foreach(m->alerts, i, a)
    {
        t->n_alerts++;
        listed(t, t->alerts,
               json_pack("{s:O, s:s, s:O}", "id", json_object_get(a, "id"), "key", m->key, "kind",
                         json_object_get(a, "kind")));
    }
    json_decref(m->alerts);
    if (up->due) {
        t->n_due++;
        listed(t, t->due,
               json_pack("{s:s, s:s, s:o, s:s}", "key", m->key, "state", to_state, "deadline",
                         time_json(up->due_ms), "then", due_name(up->due_kind)));
    }
    if (m->command != NULL) {
        t->n_commands++;
        json_object_set_new(m->command, "key", json_string(m->key));
        listed(t, t->commands, m->command);
    }
}

static json_t *answer(const upgrade_t *u)
{
    const tally_t *t = &u->t;
    return json_pack("{s:s, s:s, s:i, s:s, s:s, s:b, s:b, s:I, s:I, s:O, s:I, s:O, s:I, s:O, "
                     "s:I, s:O, s:I, s:O, s:O, s:b}",
                     "action", "upgrade", "process", u->req->process, "to_version", u->o.to,
                     "actor", u->req->actor, "reason", u->req->reason, "dry_run", u->o.dry_run,
                     "send_current", u->o.send_current, "moved", (json_int_t) t->moved, "promoted",
                     (json_int_t) t->promoted, "states", t->states, "deadlines_changed",
                     (json_int_t) t->n_deadlines, "deadlines", t->deadlines, "alerts_resolved",
                     (json_int_t) t->n_alerts, "alerts", t->alerts, "due_at_once",
                     (json_int_t) t->n_due, "due", t->due, "commands_queued",
                     (json_int_t) t->n_commands, "commands", t->commands, "skipped", t->skipped,
                     "truncated", t->truncated);
}

/* ---- the batches --------------------------------------------------------------------- */

/* The next batch after key `after`, in key order: the instances the
 * request selects that are open on a source version. */
static const char candidates_sql[] =
    "SELECT r.*, steward.to_ms(now()) FROM steward.upgrade_rows($1, ARRAY("
    "  SELECT i.key FROM steward.instances i WHERE i.process = $1 AND i.status = 'active' "
    "    AND i.version = ANY ($2::int[]) "
    "    AND ($3::text[] IS NULL OR i.state = ANY ($3::text[])) "
    "    AND ($4::text IS NULL OR i.key = $4) "
    "    AND ($5::bigint IS NULL OR i.started_at < now() - $5::bigint * interval '1 millisecond') "
    "    AND i.key > $6 ORDER BY i.key LIMIT $7::int)) r";

static const char lock_sql[] =
    "SELECT r.*, steward.to_ms(now()) FROM steward.action_upgrade_lock($1, $2) r";

/* Moves the instance `key` in a transaction of its own. */
static action_rc_t move_one(upgrade_t *u, const char *key, char *errstr, size_t errstr_size)
{
    const char *params[2] = {u->req->process, key};
    action_rc_t rc = ACTION_FAILED;
    PGresult *res = NULL;
    move_t m;
    outcome_t outcome = IGNORED;
    memset(&m, 0, sizeof m);
    if (!action_begin(u->conn, u->req->process, key, errstr, errstr_size))
        goto done;
    if ((res = action_call(u->conn, "reading the instance", lock_sql, 2, params, &rc, errstr,
                           errstr_size)) == NULL)
        goto done;
    if (PQntuples(res) == 0) { /* gone meanwhile (retention) */
        rc = ACTION_OK;
        goto done;
    }
    if ((rc = judge(u, res, 0, &m, &outcome, errstr, errstr_size)) != ACTION_OK)
        goto done;
    if (outcome == MOVED && (rc = action_commit(u->conn, errstr, errstr_size)) != ACTION_OK) {
        json_decref(m.alerts);
        json_decref(m.command);
        goto done;
    }
    tally_add(u, &m, outcome); /* the key is res's: before PQclear */
done:
    if (rc != ACTION_OK || outcome != MOVED)
        db_rollback(u->conn);
    PQclear(res);
    return rc;
}

static action_rc_t run_batches(upgrade_t *u, char *errstr, size_t errstr_size)
{
    const upgrade_opts_t *o = &u->o;
    pgarr_t versions = {0}, states = {0};
    for (size_t i = 0; i < u->n_sources; i++)
        pgarr_add_int(&versions, u->sources[i].version);
    for (size_t i = 0; i < o->n_states; i++)
        pgarr_add(&states, o->states[i]);
    char older[32], batch[16], *after = strdup("");
    snprintf(older, sizeof older, "%" PRId64, o->older_than_ms);
    snprintf(batch, sizeof batch, "%d", o->batch);
    action_rc_t rc = ACTION_OK;
    for (bool more = true; more && rc == ACTION_OK;) {
        const char *params[7] = {u->req->process,
                                 pgarr_text(&versions),
                                 o->n_states > 0 ? pgarr_text(&states) : NULL,
                                 o->key,
                                 o->older_than_ms > 0 ? older : NULL,
                                 after,
                                 batch};
        if (after == NULL || params[1] == NULL || (o->n_states > 0 && params[2] == NULL)) {
            rc = action_fail(ACTION_FAILED, errstr, errstr_size, "out of memory");
            break;
        }
        err_class_t cls;
        if (query_watermark(u->conn, u->req->process, &u->watermark_ms, errstr, errstr_size) !=
            ERR_OK) {
            rc = ACTION_FAILED;
            break;
        }
        PGresult *res = db_query(u->conn, "selecting the instances", candidates_sql, 7, params,
                                 &cls, errstr, errstr_size);
        if (res == NULL) {
            rc = ACTION_FAILED;
            break;
        }
        int n = PQntuples(res);
        for (int r = 0; r < n && rc == ACTION_OK; r++) {
            if (o->dry_run) {
                move_t m;
                outcome_t outcome;
                if ((rc = judge(u, res, r, &m, &outcome, errstr, errstr_size)) == ACTION_OK)
                    tally_add(u, &m, outcome);
            } else {
                rc = move_one(u, PQgetvalue(res, r, UPGRADE_ROWS_KEY), errstr, errstr_size);
            }
        }
        more = n == o->batch;
        if (n > 0) {
            free(after);
            after = strdup(PQgetvalue(res, n - 1, UPGRADE_ROWS_KEY));
        }
        PQclear(res);
        /* A batch committed, the next not selected yet: where a crash
         * tests that running the upgrade again finishes it. */
        if (!o->dry_run && rc == ACTION_OK)
            FAILPOINT("upgrade.between_batches");
    }
    free(after);
    pgarr_free(&versions);
    pgarr_free(&states);
    return rc;
}

action_rc_t action_upgrade(PGconn *conn, const action_request_t *req, json_t **result, char *errstr,
                           size_t errstr_size)
{
    upgrade_t *u = calloc(1, sizeof *u);
    if (u == NULL)
        return action_fail(ACTION_FAILED, errstr, errstr_size, "out of memory");
    u->conn = conn;
    u->req = req;
    u->watermark_ms = ENGINE_NO_DEADLINE;
    tally_init(&u->t);
    action_rc_t rc = read_options(req, &u->o, errstr, errstr_size);
    if (rc == ACTION_OK)
        u->to = load_version(conn, req->process, u->o.to, &rc, errstr, errstr_size);
    if (rc == ACTION_OK && u->o.send_current && u->to->mode != DEF_MODE_ACTIVE)
        rc = action_fail(ACTION_BAD_REQUEST, errstr, errstr_size,
                         "--send-current: version %d of %s is in shadow mode and sends nothing",
                         u->o.to, req->process);
    if (rc == ACTION_OK)
        rc = load_sources(u, errstr, errstr_size);
    if (rc == ACTION_OK)
        rc = run_batches(u, errstr, errstr_size);
    if (rc == ACTION_OK && (*result = answer(u)) == NULL)
        rc = action_fail(ACTION_FAILED, errstr, errstr_size, "out of memory");
    if (rc == ACTION_FAILED && u->t.moved > 0 && !u->o.dry_run) {
        size_t len = strlen(errstr);
        snprintf(errstr + len, errstr_size - len,
                 " (after %ld instances moved: run the upgrade again to move the rest)",
                 u->t.moved);
    }
    for (size_t i = 0; i < u->n_sources; i++) {
        def_free(u->sources[i].def);
        free(u->sources[i].targets);
        free(u->sources[i].only);
    }
    def_free(u->to);
    free(u->o.map_text);
    free(u->o.state_text);
    tally_clear(&u->t);
    free(u);
    return rc;
}
