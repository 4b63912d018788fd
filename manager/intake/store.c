/*
 * store - the SQL of intake; see store.h.
 *
 * The statements of a batch, in the order manager/intake/batch.c runs them:
 *
 *   BEGIN
 *   fence       lock the batch's offsets rows and compare epochs
 *   lock        advisory locks on every touched (process, key), in hash
 *               order: instances that do not exist yet are locked too, so
 *               two replicas reading different topics of one instance
 *               serialize instead of parking past each other; a busy one
 *               is awaited for the lock timeout at most (the instance is
 *               then set aside); then instances with deferred events are
 *               tried
 *   read        instances (FOR UPDATE, key order), deferred events, judged
 *               event ids, parked events
 *   write       one statement per table, arrays unnest()ed
 *   COMMIT
 */
#include "manager/intake/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store {
    PGconn *conn;
    char *conninfo;
    char *group;
    char *replica;
    long lock_table; /* see store_lock_table() */
};

/* What PostgreSQL's defaults give (64 x (100 + 0)), when the settings
 * cannot be read. */
#define STORE_DEFAULT_LOCK_TABLE 6400

/* Reads the size of the server's shared lock table. */
static void read_lock_table(store_t *store)
{
    PGresult *res =
        PQexec(store->conn, "SELECT current_setting('max_locks_per_transaction')::bigint * "
                            "(current_setting('max_connections')::bigint + "
                            "current_setting('max_prepared_transactions')::bigint)");
    store->lock_table = STORE_DEFAULT_LOCK_TABLE;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        store->lock_table = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
}

long store_lock_table(const store_t *store)
{
    return store->lock_table;
}

/* ---- connection and definitions ---------------------------------------- */

store_t *store_new(const store_config_t *cfg, char *errstr, size_t errstr_size)
{
    store_t *store = calloc(1, sizeof *store);
    if (store == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    store->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    store->group = strdup(cfg->group);
    store->replica = strdup(cfg->replica);
    if (store->conninfo == NULL || store->group == NULL || store->replica == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        store_free(store);
        return NULL;
    }
    store->conn = db_connect(store->conninfo, "steward run", errstr, errstr_size);
    if (store->conn == NULL) {
        store_free(store);
        return NULL;
    }
    read_lock_table(store);
    return store;
}

void store_free(store_t *store)
{
    if (store == NULL)
        return;
    if (store->conn != NULL)
        PQfinish(store->conn);
    free(store->conninfo);
    free(store->group);
    free(store->replica);
    free(store);
}

PGconn *store_conn(store_t *store)
{
    return store->conn;
}

const char *store_replica(const store_t *store)
{
    return store->replica;
}

err_class_t store_reconnect(store_t *store, char *errstr, size_t errstr_size)
{
    if (store->conn != NULL && PQstatus(store->conn) == CONNECTION_OK)
        return ERR_OK;
    if (store->conn != NULL)
        PQfinish(store->conn);
    store->conn = db_connect(store->conninfo, "steward run", errstr, errstr_size);
    return store->conn != NULL ? ERR_OK : ERR_TRANSIENT;
}

err_class_t store_register_definitions(store_t *store, const def_set_t *defs, char *errstr,
                                       size_t errstr_size)
{
    err_class_t cls = ERR_OK;

    for (size_t i = 0; i < defs->n && cls == ERR_OK; i++) {
        const def_t *def = defs->defs[i];
        char version[16];
        char *doc = json_dumps(def->document, JSON_COMPACT);
        snprintf(version, sizeof version, "%d", def->version);
        const char *params[4] = {def->process, version,
                                 def->mode == DEF_MODE_ACTIVE ? "active" : "shadow", doc};
        /* The checksum is of the canonical jsonb text, so reformatting a
         * file is not a change; editing its meaning is. */
        PGresult *res =
            db_query(store->conn, "recording definitions",
                     "WITH ins AS ("
                     "  INSERT INTO steward.definitions "
                     "    (process, version, mode, document, checksum) "
                     "  VALUES ($1, $2::int, $3, $4::jsonb, md5(($4::jsonb)::text)) "
                     "  ON CONFLICT (process, version) DO NOTHING RETURNING 1) "
                     "SELECT checksum = md5(($4::jsonb)::text) "
                     "FROM steward.definitions WHERE process = $1 AND version = $2::int "
                     "UNION ALL SELECT true FROM ins",
                     4, params, &cls, errstr, errstr_size);
        free(doc);
        if (res == NULL)
            break;
        for (int row = 0; row < PQntuples(res); row++) {
            if (strcmp(PQgetvalue(res, row, 0), "t") != 0) {
                cls = err_set(ERR_INVALID, errstr, errstr_size,
                              "%s: version %d of process %s is already recorded with a "
                              "different document; instances keep the version they started "
                              "with, so give a changed definition a new version",
                              def->source, def->version, def->process);
                break;
            }
        }
        PQclear(res);
    }
    return cls;
}

/* ---- partition ownership ------------------------------------------------ */

/* The partitions as two array parameters, topics and partition numbers, in
 * params[0] and params[1]; false when out of memory. */
static bool part_arrays(const store_partition_t *parts, size_t n, pgarr_t *topics,
                        pgarr_t *partitions, const char **params)
{
    for (size_t i = 0; i < n; i++) {
        pgarr_add(topics, parts[i].topic);
        pgarr_add_int(partitions, parts[i].partition);
    }
    return pgarr_params((pgarr_t *const[]){topics, partitions}, 2, params);
}

err_class_t store_claim(store_t *store, store_partition_t *parts, size_t n, char *errstr,
                        size_t errstr_size)
{
    pgarr_t topics = {0}, partitions = {0};
    err_class_t cls = ERR_OK;
    PGresult *res = NULL;
    const char *params[4] = {store->group, NULL, NULL, store->replica};

    if (!part_arrays(parts, n, &topics, &partitions, params + 1)) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    /* The epoch bump blocks on a batch that holds the row, so a claim
     * never lands in the middle of another owner's commit. */
    res = db_query(store->conn, "claiming partitions",
                   "WITH claimed AS ("
                   "  INSERT INTO steward.offsets AS o "
                   "    (consumer_group, topic, partition, next_offset, epoch, owner) "
                   "  SELECT $1, t, p, -2, 1, $4 "
                   "  FROM unnest($2::text[], $3::int[]) AS u(t, p) ORDER BY t, p "
                   "  ON CONFLICT (consumer_group, topic, partition) DO UPDATE "
                   "    SET epoch = o.epoch + 1, owner = excluded.owner, updated_at = now() "
                   "  RETURNING topic, partition, next_offset, epoch), "
                   "logged AS ("
                   "  INSERT INTO steward.ownership_log "
                   "    (consumer_group, topic, partition, action, replica, epoch, next_offset) "
                   "  SELECT $1, topic, partition, 'claim', $4, epoch, next_offset FROM claimed) "
                   "SELECT topic, partition, next_offset, epoch FROM claimed",
                   4, params, &cls, errstr, errstr_size);
    if (res == NULL)
        goto done;
    for (int row = 0; row < PQntuples(res); row++) {
        const char *topic = PQgetvalue(res, row, 0);
        int32_t partition = (int32_t) atol(PQgetvalue(res, row, 1));
        for (size_t i = 0; i < n; i++) {
            if (parts[i].partition == partition && strcmp(parts[i].topic, topic) == 0) {
                parts[i].next_offset = strtoll(PQgetvalue(res, row, 2), NULL, 10);
                parts[i].epoch = strtoll(PQgetvalue(res, row, 3), NULL, 10);
                parts[i].fenced = false;
                parts[i].watermark_ms = -1;
            }
        }
    }
done:
    PQclear(res);
    pgarr_free(&topics);
    pgarr_free(&partitions);
    return cls;
}

err_class_t store_release(store_t *store, const store_partition_t *parts, size_t n,
                          store_release_reason_t reason, char *errstr, size_t errstr_size)
{
    static const char *const actions[] = {"release", "lost", "fenced"};
    pgarr_t topics = {0}, partitions = {0}, epochs = {0};
    err_class_t cls = ERR_OK;

    const char *params[6] = {store->group, NULL, NULL, NULL, store->replica, actions[reason]};
    for (size_t i = 0; i < n; i++)
        pgarr_add_int(&epochs, parts[i].epoch);
    params[3] = pgarr_text(&epochs);
    if (!part_arrays(parts, n, &topics, &partitions, params + 1) || params[3] == NULL)
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    else
        cls = db_exec(store->conn, "logging released partitions",
                      "INSERT INTO steward.ownership_log "
                      "  (consumer_group, topic, partition, action, replica, epoch, next_offset) "
                      "SELECT $1, u.t, u.p, $6, $5, u.e, o.next_offset "
                      "FROM unnest($2::text[], $3::int[], $4::bigint[]) AS u(t, p, e) "
                      "LEFT JOIN steward.offsets o ON o.consumer_group = $1 "
                      "  AND o.topic = u.t AND o.partition = u.p",
                      6, params, errstr, errstr_size);
    pgarr_free(&topics);
    pgarr_free(&partitions);
    pgarr_free(&epochs);
    return cls;
}

/* ---- the batch transaction ------------------------------------------------ */

err_class_t store_begin(store_t *store, char *errstr, size_t errstr_size)
{
    if (PQstatus(store->conn) != CONNECTION_OK)
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "the database connection is lost");
    return db_exec(store->conn, "starting the batch", "BEGIN", 0, NULL, errstr, errstr_size);
}

err_class_t store_commit(store_t *store, char *errstr, size_t errstr_size)
{
    return db_exec(store->conn, "committing the batch", "COMMIT", 0, NULL, errstr, errstr_size);
}

void store_rollback(store_t *store)
{
    db_rollback(store->conn);
}

size_t store_partition_index(const store_partition_t *parts, size_t n, const char *topic,
                             int32_t partition)
{
    for (size_t i = 0; i < n; i++) {
        if (parts[i].partition == partition && strcmp(parts[i].topic, topic) == 0)
            return i;
    }
    return SIZE_MAX;
}

err_class_t store_fence(store_t *store, store_partition_t *parts, size_t n, char *errstr,
                        size_t errstr_size)
{
    pgarr_t topics = {0}, partitions = {0};
    err_class_t cls;

    for (size_t i = 0; i < n; i++)
        parts[i].fenced = true; /* until its row says otherwise */
    const char *params[3] = {store->group, NULL, NULL};
    PGresult *res = NULL;
    if (!part_arrays(parts, n, &topics, &partitions, params + 1))
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    else
        res = db_query(store->conn, "checking partition ownership",
                       "SELECT topic, partition, epoch FROM steward.offsets "
                       "WHERE consumer_group = $1 AND (topic, partition) IN "
                       "  (SELECT * FROM unnest($2::text[], $3::int[])) "
                       "ORDER BY topic, partition FOR UPDATE",
                       3, params, &cls, errstr, errstr_size);
    pgarr_free(&topics);
    pgarr_free(&partitions);
    if (res == NULL)
        return cls;
    for (int row = 0; row < PQntuples(res); row++) {
        size_t i = store_partition_index(parts, n, PQgetvalue(res, row, 0),
                                         (int32_t) atol(PQgetvalue(res, row, 1)));
        if (i != SIZE_MAX && strtoll(PQgetvalue(res, row, 2), NULL, 10) == parts[i].epoch)
            parts[i].fenced = false;
    }
    PQclear(res);
    return ERR_OK;
}

/* The keys as two array parameters; false when out of memory. */
static bool key_arrays(const store_key_t *keys, size_t n, pgarr_t *processes, pgarr_t *names,
                       const char **params)
{
    for (size_t i = 0; i < n; i++) {
        pgarr_add(processes, keys[i].process);
        pgarr_add(names, keys[i].key);
    }
    return pgarr_params((pgarr_t *const[]){processes, names}, 2, params);
}

/*
 * Runs `sql` with the keys as its first two parameters ($1 the processes,
 * $2 the keys) and, when n_params is 3, `third` as $3 (NULL: it could not
 * be built, out of memory). Returns the result (PQclear() it), or NULL
 * with the class in *cls and the reason in errstr.
 */
static PGresult *query_keys(store_t *store, const char *what, const char *sql,
                            const store_key_t *keys, size_t n, int n_params, const char *third,
                            err_class_t *cls, char *errstr, size_t errstr_size)
{
    pgarr_t processes = {0}, names = {0};
    const char *params[3] = {NULL, NULL, third};
    PGresult *res = NULL;

    if (!key_arrays(keys, n, &processes, &names, params) || (n_params > 2 && third == NULL))
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    else
        res = db_query(store->conn, what, sql, n_params, params, cls, errstr, errstr_size);
    pgarr_free(&processes);
    pgarr_free(&names);
    return res;
}

err_class_t store_lock_instances(store_t *store, const store_key_t *keys, size_t n,
                                 int lock_timeout_ms, store_lock_fn fn, void *arg, char *errstr,
                                 size_t errstr_size)
{
    char wait[16];
    err_class_t cls;

    snprintf(wait, sizeof wait, "%d", lock_timeout_ms > 0 ? lock_timeout_ms : 1);
    PGresult *res = query_keys(store, "locking instances",
                               "SELECT process, key, objid, locked, has_deferred, timed_out "
                               "FROM steward.lock_instances($1::text[], $2::text[], $3::int)",
                               keys, n, 3, wait, &cls, errstr, errstr_size);
    for (int row = 0; res != NULL && row < PQntuples(res) && cls == ERR_OK; row++) {
        store_lock_row_t r = {
            .process = PQgetvalue(res, row, 0),
            .key = PQgetvalue(res, row, 1),
            .objid = (int32_t) atol(PQgetvalue(res, row, 2)),
            .locked = strcmp(PQgetvalue(res, row, 3), "t") == 0,
            .has_deferred = strcmp(PQgetvalue(res, row, 4), "t") == 0,
            .timed_out = strcmp(PQgetvalue(res, row, 5), "t") == 0,
        };
        cls = fn(arg, &r, errstr, errstr_size);
    }
    PQclear(res);
    return cls;
}

err_class_t store_pick_deferred(store_t *store, size_t limit, store_key_fn fn, void *arg,
                                char *errstr, size_t errstr_size)
{
    char lim[24];
    snprintf(lim, sizeof lim, "%zu", limit);
    const char *params[1] = {lim};
    err_class_t cls = ERR_OK;
    /* Candidates oldest first; the scan stops at the `limit`th lock it
     * gets, so no more are held, and instances still busy (a failed try
     * holds nothing) do not keep the free ones behind them waiting. */
    PGresult *res =
        db_query(store->conn, "finding deferred events",
                 "WITH c AS MATERIALIZED (SELECT process, key, min(id) AS first "
                 "  FROM steward.deferred GROUP BY process, key ORDER BY first) "
                 "SELECT process, key FROM c WHERE steward.try_lock_instance(process, key) "
                 "LIMIT $1",
                 1, params, &cls, errstr, errstr_size);
    for (int row = 0; res != NULL && row < PQntuples(res) && cls == ERR_OK; row++)
        cls = fn(arg, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1), errstr, errstr_size);
    PQclear(res);
    return cls;
}

/*
 * The reads of events kept for instances (store_read_deferred(),
 * store_read_parked()): their statements select id, process, key,
 * event_id, event_type, topic, partition, offset, the event time in ms and
 * the payload, then, for deferred events, token and epoch; last the
 * traceparent and tracestate.
 */
static err_class_t read_events(store_t *store, const char *what, const char *sql,
                               const store_key_t *keys, size_t n, bool deferred, store_event_fn fn,
                               void *arg, char *errstr, size_t errstr_size)
{
    err_class_t cls;
    PGresult *res = query_keys(store, what, sql, keys, n, 2, NULL, &cls, errstr, errstr_size);

    for (int row = 0; res != NULL && row < PQntuples(res) && cls == ERR_OK; row++) {
        store_event_row_t r = {
            .id = strtoll(PQgetvalue(res, row, 0), NULL, 10),
            .process = PQgetvalue(res, row, 1),
            .key = PQgetvalue(res, row, 2),
            .event_id = PQgetvalue(res, row, 3),
            .event_type = PQgetvalue(res, row, 4),
            .topic = PQgetvalue(res, row, 5),
            .partition = (int32_t) atol(PQgetvalue(res, row, 6)),
            .offset = strtoll(PQgetvalue(res, row, 7), NULL, 10),
            .event_ms = strtoll(PQgetvalue(res, row, 8), NULL, 10),
            .payload = PQgetvalue(res, row, 9),
            .token = deferred ? strtoll(PQgetvalue(res, row, 10), NULL, 10) : 0,
            .epoch = deferred ? strtoll(PQgetvalue(res, row, 11), NULL, 10) : 0,
            .traceparent = PQgetisnull(res, row, deferred ? 12 : 10)
                               ? NULL
                               : PQgetvalue(res, row, deferred ? 12 : 10),
            .tracestate = PQgetisnull(res, row, deferred ? 13 : 11)
                              ? NULL
                              : PQgetvalue(res, row, deferred ? 13 : 11),
        };
        cls = fn(arg, &r, errstr, errstr_size);
    }
    PQclear(res);
    return cls;
}

static const char read_deferred_sql[] =
    "SELECT d.id, d.process, d.key, d.event_id, d.event_type, d.topic, "
    "  d.partition, d.\"offset\", steward.to_ms(d.event_time), "
    "  d.payload::text, d.token, d.epoch, d.traceparent, d.tracestate "
    "FROM unnest($1::text[], $2::text[]) AS u(pr, k) "
    "CROSS JOIN LATERAL (SELECT * FROM steward.deferred "
    "  WHERE process = u.pr AND key = u.k ORDER BY id FOR UPDATE) d "
    "ORDER BY d.process, d.key, d.id";

err_class_t store_read_deferred(store_t *store, const store_key_t *keys, size_t n,
                                store_event_fn fn, void *arg, char *errstr, size_t errstr_size)
{
    return read_events(store, "reading deferred events", read_deferred_sql, keys, n, true, fn, arg,
                       errstr, errstr_size);
}

static int64_t ms_value(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? ROWS_NULL : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static bool bool_value(const PGresult *res, int row, int col)
{
    return strcmp(PQgetvalue(res, row, col), "t") == 0;
}

/*
 * The three reads below walk the batch's keys and probe an index for each
 * (a LATERAL subquery the planner cannot flatten: LIMIT or FOR UPDATE keep
 * it from pulling it up into a join). Written as a join, the planner hashes
 * the whole table instead: a sequential scan of history or instances per
 * batch, which grows with everything ever judged. The keys arrive sorted,
 * so rows are locked in key order.
 */
static const char read_instances_sql[] =
    "SELECT i.process, i.key, i.version, i.state, "
    "  steward.to_ms(i.started_at), "
    "  steward.to_ms(i.state_entered_at), "
    "  steward.to_ms(i.deadline_at), "
    "  steward.to_ms(i.process_deadline_at), "
    "  i.overdue, i.attempt, CASE WHEN u.w THEN i.vars::text END, i.events_applied, "
    "  i.process_overdue, i.step, i.token, i.lease_holder, steward.to_ms(i.lease_expires_at), "
    "  steward.to_ms(i.lease_renewed_at), i.resend_pending "
    "FROM unnest($1::text[], $2::text[], $3::bool[]) WITH ORDINALITY AS u(p, k, w, n) "
    "CROSS JOIN LATERAL (SELECT * FROM steward.instances "
    "  WHERE process = u.p AND key = u.k FOR UPDATE) i "
    "ORDER BY u.n";

err_class_t store_read_instances(store_t *store, const store_key_t *keys, const bool *want_vars,
                                 size_t n, store_instance_fn fn, void *arg, char *errstr,
                                 size_t errstr_size)
{
    pgarr_t wants = {0};
    err_class_t cls;

    for (size_t i = 0; i < n; i++)
        pgarr_add_bool(&wants, want_vars[i]);
    PGresult *res = query_keys(store, "reading instances", read_instances_sql, keys, n, 3,
                               pgarr_text(&wants), &cls, errstr, errstr_size);
    for (int row = 0; res != NULL && row < PQntuples(res) && cls == ERR_OK; row++) {
        store_instance_row_t r = {
            .process = PQgetvalue(res, row, 0),
            .key = PQgetvalue(res, row, 1),
            .version = atoi(PQgetvalue(res, row, 2)),
            .state = PQgetvalue(res, row, 3),
            .started_ms = ms_value(res, row, 4),
            .entered_ms = ms_value(res, row, 5),
            .deadline_ms = ms_value(res, row, 6),
            .process_deadline_ms = ms_value(res, row, 7),
            .overdue = bool_value(res, row, 8),
            .attempt = atoi(PQgetvalue(res, row, 9)),
            .vars = PQgetisnull(res, row, 10) ? NULL : PQgetvalue(res, row, 10),
            .events_applied = atoi(PQgetvalue(res, row, 11)),
            .process_overdue = bool_value(res, row, 12),
            .step = atoi(PQgetvalue(res, row, 13)),
            .token = strtoll(PQgetvalue(res, row, 14), NULL, 10),
            .lease_holder = PQgetisnull(res, row, 15) ? NULL : PQgetvalue(res, row, 15),
            .lease_expires_ms = ms_value(res, row, 16),
            .lease_renewed_ms = ms_value(res, row, 17),
            .resend_pending = bool_value(res, row, 18),
        };
        cls = fn(arg, &r, errstr, errstr_size);
    }
    PQclear(res);
    pgarr_free(&wants);
    return cls;
}

/* history_event (process, key, event_id) answers each probe; an
 * instance's events sit together in it, so the leaf a probe needs is the
 * one its earlier events were just written to. */
static const char read_judged_sql[] =
    "SELECT DISTINCT u.p, u.k, u.e "
    "FROM unnest($1::text[], $2::text[], $3::text[]) AS u(p, k, e) "
    "CROSS JOIN LATERAL (SELECT 1 FROM steward.history h WHERE h.process = u.p "
    "  AND h.key = u.k AND h.event_id = u.e LIMIT 1) judged";

err_class_t store_read_judged(store_t *store, const store_key_t *keys, const char *const *event_ids,
                              size_t n, store_judged_fn fn, void *arg, char *errstr,
                              size_t errstr_size)
{
    pgarr_t ids = {0};
    err_class_t cls;

    for (size_t i = 0; i < n; i++)
        pgarr_add(&ids, event_ids[i]);
    PGresult *res = query_keys(store, "reading judged event ids", read_judged_sql, keys, n, 3,
                               pgarr_text(&ids), &cls, errstr, errstr_size);
    for (int row = 0; res != NULL && row < PQntuples(res) && cls == ERR_OK; row++)
        cls = fn(arg, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1), PQgetvalue(res, row, 2),
                 errstr, errstr_size);
    PQclear(res);
    pgarr_free(&ids);
    return cls;
}

static const char read_parked_sql[] =
    "SELECT p.id, p.process, p.key, p.event_id, p.event_type, p.topic, "
    "  p.partition, p.\"offset\", steward.to_ms(p.event_time), "
    "  p.payload::text, p.traceparent, p.tracestate "
    "FROM unnest($1::text[], $2::text[]) AS u(pr, k) "
    "CROSS JOIN LATERAL (SELECT * FROM steward.parked "
    "  WHERE process = u.pr AND key = u.k FOR UPDATE) p "
    "ORDER BY p.process, p.key, p.event_time, p.id";

err_class_t store_read_parked(store_t *store, const store_key_t *keys, size_t n, store_event_fn fn,
                              void *arg, char *errstr, size_t errstr_size)
{
    return read_events(store, "reading parked events", read_parked_sql, keys, n, false, fn, arg,
                       errstr, errstr_size);
}

/* $19 is not a column: how late the step is for the deadline a `deadline`
 * alert of from_state pages (engine_result_t.deadline_late_by_ms). */
#define WRITE_HISTORY_INSERT                                                                       \
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "            \
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replayed, detail, "       \
    "  replica, epoch, late_by_ms, entered_at, time_in_state_ms, traceparent, tracestate) "        \
    "SELECT p, k, v, e, t, tp, pa, o, steward.from_ms(et), fs, ts, oc, rp, d, $22, ep, lb, "       \
    "  steward.from_ms(en), st, tr, tst "                                                          \
    "FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], "          \
    "  $7::int[], $8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[], "             \
    "  $13::bool[], $14::text[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], "     \
    "  $19::bigint[], $20::text[], $21::text[]) "                                                  \
    "  WITH ORDINALITY AS u(p, k, v, e, t, tp, pa, o, et, fs, ts, oc, rp, d, ep, lb, en, st, dl, " \
    "  tr, tst, n) "                                                                               \
    "ORDER BY n "

static const char write_history_sql[] = WRITE_HISTORY_INSERT;

/* The same, when some event is late: it also stores the engine's lateness
 * on the open deadline alert of the step it ends, before the batch
 * resolves it. */
static const char write_late_history_sql[] =
    "WITH h AS (" WRITE_HISTORY_INSERT "RETURNING 1) "
    "UPDATE steward.alerts a SET late_by_ms = u.dl "
    "FROM unnest($1::text[], $2::text[], $10::text[], $19::bigint[]) AS u(p, k, fs, dl) "
    "WHERE u.dl > 0 AND a.resolved_at IS NULL AND a.kind = 'deadline' "
    "  AND a.process = u.p AND a.key = u.k AND a.state = u.fs";

static const char write_parked_sql[] =
    "INSERT INTO steward.parked (process, key, event_id, event_type, topic, partition, "
    "  \"offset\", event_time, payload, expires_at, traceparent, tracestate) "
    "SELECT p, k, e, t, tp, pa, o, steward.from_ms(et), pl::jsonb, steward.from_ms(ex), tr, tst "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], "
    "  $7::bigint[], $8::bigint[], $9::text[], $10::bigint[], $11::text[], $12::text[]) "
    "  AS u(p, k, e, t, tp, pa, o, et, pl, ex, tr, tst)";

static const char write_rejected_sql[] =
    "INSERT INTO steward.rejected (consumer_group, topic, partition, \"offset\", process, "
    "  reason, detail, value, headers, kafka_time, replica, epoch, message_key) "
    "SELECT $12, tp, pa, o, pr, r, d, decode(v, 'hex'), h::jsonb, steward.from_ms(kt), $13, "
    "ep, decode(mk, 'hex') "
    "FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::text[], "
    "$6::text[], "
    "  $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[]) "
    "  AS u(tp, pa, o, pr, r, d, v, h, kt, ep, mk)";

static const char write_instances_sql[] =
    "INSERT INTO steward.instances AS i (process, key, version, state, status, started_at, "
    "  state_entered_at, deadline_at, process_deadline_at, next_deadline_at, overdue, "
    "  process_overdue, attempt, vars, events_applied, step, token, lease_holder, "
    "  lease_expires_at, lease_renewed_at, resend_pending) "
    "SELECT p, k, v, s, st, steward.from_ms(sa), steward.from_ms(se), "
    "  steward.from_ms(dl), steward.from_ms(pd), steward.from_ms(nd), "
    "  ov, po, at, vr::jsonb, ea, sp, tk, lh, steward.from_ms(le), steward.from_ms(lr), rs "
    "FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::bigint[], "
    "  $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bool[], $12::bool[], "
    "  $13::int[], $14::text[], $15::int[], $16::int[], $17::bigint[], $18::text[], "
    "  $19::bigint[], $20::bigint[], $21::bool[]) "
    "  AS u(p, k, v, s, st, sa, se, dl, pd, nd, ov, po, at, vr, ea, sp, tk, lh, le, lr, rs) "
    "ON CONFLICT (process, key) DO UPDATE SET version = excluded.version, "
    "  state = excluded.state, status = excluded.status, "
    "  state_entered_at = excluded.state_entered_at, deadline_at = excluded.deadline_at, "
    "  process_deadline_at = excluded.process_deadline_at, "
    "  next_deadline_at = excluded.next_deadline_at, overdue = excluded.overdue, "
    "  process_overdue = excluded.process_overdue, attempt = excluded.attempt, "
    "  vars = i.vars || excluded.vars, events_applied = excluded.events_applied, step = "
    "excluded.step, "
    "  token = excluded.token, lease_holder = excluded.lease_holder, "
    "  lease_expires_at = excluded.lease_expires_at, "
    "  lease_renewed_at = excluded.lease_renewed_at, "
    "  resend_pending = excluded.resend_pending, suspended = NULL, "
    "  updated_at = now()";

static const char write_offsets_sql[] =
    "UPDATE steward.offsets o SET "
    "  next_offset = CASE WHEN u.n >= 0 THEN u.n ELSE o.next_offset END, "
    "  watermark = CASE WHEN u.w >= 0 THEN greatest(o.watermark, steward.from_ms(u.w)) "
    "                   ELSE o.watermark END, "
    "  updated_at = now() "
    "FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bigint[], $5::bigint[]) "
    "  AS u(t, p, n, w, e) "
    "WHERE o.consumer_group = $6 AND o.topic = u.t AND o.partition = u.p AND o.epoch = u.e";

/*
 * Runs one bulk statement: the rows' columns are its first parameters,
 * `extra` follow. *affected gets the rows it changed (may be NULL).
 */
static err_class_t bulk(store_t *store, const char *what, const char *sql, rows_t *rows,
                        const char *const *extra, size_t n_extra, long long *affected, char *errstr,
                        size_t errstr_size)
{
    const char *params[ROWS_MAX_COLUMNS + 2];
    err_class_t cls;

    if ((cls = rows_params(rows, params, errstr, errstr_size)) != ERR_OK)
        return cls;
    for (size_t i = 0; i < n_extra; i++)
        params[rows->n_columns + i] = extra[i];
    PGresult *res = db_query(store->conn, what, sql, (int) (rows->n_columns + n_extra), params,
                             &cls, errstr, errstr_size);
    if (res != NULL && affected != NULL)
        *affected = atoll(PQcmdTuples(res));
    PQclear(res);
    return cls;
}

err_class_t store_write_history(store_t *store, rows_t *rows, bool lateness, char *errstr,
                                size_t errstr_size)
{
    const char *replica[1] = {store->replica};
    return bulk(store, "writing history", lateness ? write_late_history_sql : write_history_sql,
                rows, replica, 1, NULL, errstr, errstr_size);
}

err_class_t store_write_parked(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    return bulk(store, "parking events", write_parked_sql, rows, NULL, 0, NULL, errstr,
                errstr_size);
}

err_class_t store_unpark(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    long long deleted = 0;
    err_class_t cls =
        bulk(store, "unparking events", "DELETE FROM steward.parked WHERE id = ANY($1::bigint[])",
             rows, NULL, 0, &deleted, errstr, errstr_size);
    /* The instance lock makes this impossible; if it happens anyway, the
     * batch must not commit on a stale view. */
    if (cls == ERR_OK && (size_t) deleted != rows->n)
        cls = err_set(ERR_CONFLICT, errstr, errstr_size,
                      "parked events vanished under the instance lock: retrying");
    return cls;
}

err_class_t store_write_rejected(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    const char *group_replica[2] = {store->group, store->replica};
    return bulk(store, "recording rejected messages", write_rejected_sql, rows, group_replica, 2,
                NULL, errstr, errstr_size);
}

err_class_t store_write_instances(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    return bulk(store, "writing instances", write_instances_sql, rows, NULL, 0, NULL, errstr,
                errstr_size);
}

err_class_t store_write_offsets(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    const char *group[1] = {store->group};
    long long updated = 0;
    err_class_t cls = bulk(store, "advancing offsets", write_offsets_sql, rows, group, 1, &updated,
                           errstr, errstr_size);
    if (cls == ERR_OK && (size_t) updated != rows->n)
        cls = err_set(ERR_CONFLICT, errstr, errstr_size,
                      "a partition changed owner during the batch: retrying");
    return cls;
}

static const char write_deferred_sql[] =
    "INSERT INTO steward.deferred (process, key, event_id, event_type, topic, partition, "
    "  \"offset\", event_time, payload, token, epoch, traceparent, tracestate) "
    "SELECT p, k, e, t, tp, pa, o, steward.from_ms(et), pl::jsonb, tk, ep, tr, tst "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], "
    "  $7::bigint[], $8::bigint[], $9::text[], $10::bigint[], $11::bigint[], $12::text[], "
    "  $13::text[]) WITH ORDINALITY AS u(p, k, e, t, tp, pa, o, et, pl, tk, ep, tr, tst, n) "
    "ORDER BY n";

err_class_t store_write_deferred(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    return bulk(store, "deferring events", write_deferred_sql, rows, NULL, 0, NULL, errstr,
                errstr_size);
}

err_class_t store_undefer(store_t *store, rows_t *rows, char *errstr, size_t errstr_size)
{
    long long deleted = 0;
    err_class_t cls = bulk(store, "deleting judged deferred events",
                           "DELETE FROM steward.deferred WHERE id = ANY($1::bigint[])", rows, NULL,
                           0, &deleted, errstr, errstr_size);
    if (cls == ERR_OK && (size_t) deleted != rows->n)
        cls = err_set(ERR_CONFLICT, errstr, errstr_size,
                      "deferred events vanished under the instance lock: retrying");
    return cls;
}

const char *store_sql_read_instances(void)
{
    return read_instances_sql;
}

const char *store_sql_read_judged(void)
{
    return read_judged_sql;
}

const char *store_sql_write_history(void)
{
    return write_history_sql;
}

const char *store_sql_write_instances(void)
{
    return write_instances_sql;
}
