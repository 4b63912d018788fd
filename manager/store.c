/*
 * store - the batch transaction and partition ownership; see store.h.
 *
 * A batch runs as:
 *
 *   decode      every message once; route it to each process that declares
 *               its type on its topic; read that process's envelope
 *   BEGIN
 *   fence       lock the batch's offsets rows and compare epochs
 *   lock        advisory locks on every touched (process, key), in hash
 *               order: instances that do not exist yet are locked too, so
 *               two replicas reading different topics of one instance
 *               serialize instead of parking past each other
 *   read        instances (FOR UPDATE, key order), seen event ids, parked
 *   judge       the engine, in memory, replaying parked events as
 *               instances move
 *   write       one statement per table, arrays unnest()ed
 *   COMMIT
 *
 * Every statement is parameterized; the arrays are parameters too.
 */
#include "manager/store.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/log.h"
#include "common/pgarr.h"
#include "common/utf8.h"
#include "engine/engine.h"
#include "manager/alerts.h"
#include "manager/cmdqueue.h"
#include "manager/defcache.h"
#include "manager/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct store {
    PGconn *conn;
    char *conninfo;
    char *group;
    char *replica;
    decode_limits_t limits;
    const def_set_t *defs; /* borrowed */
    defcache_t *versions;  /* the versions instances run on */
    route_table_t *routes; /* borrowed */
    bool record_unknown;   /* a rejected row for each message of an undeclared type */
    store_reject_hook_t reject_hook;
    void *reject_arg;
};

/* A parked event, read from steward.parked or parked in this batch. */
typedef struct parked {
    int64_t db_id; /* 0 when parked by this batch */
    char *event_id;
    char *event_type;
    char *topic;
    int32_t partition;
    int64_t offset;
    int64_t time_ms;
    json_t *payload; /* owned */
    bool settled;    /* judged again in this batch and no longer parked */
} parked_t;

/* One touched instance. */
typedef struct slot {
    const char *process; /* borrowed from the definitions */
    const char *key;     /* borrowed from an item's envelope */
    const def_t *def;    /* the version the instance runs (or would start) on */
    engine_instance_t inst;
    bool dirty;
    char **seen; /* event ids already judged for this instance */
    size_t n_seen, cap_seen;
    parked_t *parked;
    size_t n_parked, cap_parked;
    char unjudgeable[192]; /* why this replica cannot judge it; "" when it can */
} slot_t;

/* One (message, process) pair to judge, or to reject for that process. */
typedef struct item {
    size_t msg;
    const def_t *latest;
    const char *type; /* borrowed from the decoded message */
    decode_envelope_t env;
    slot_t *slot;
    decode_reason_t reject; /* DECODE_OK, or why this process cannot take it */
    char reject_detail[192];
} item_t;

/* The columns of the rows a batch writes. */
typedef struct rows {
    pgarr_t h_process, h_key, h_version, h_event_id, h_event_type, h_topic, h_partition, h_offset,
        h_time, h_from, h_to, h_outcome, h_replayed, h_detail, h_epoch, h_late, h_entered, h_stayed;
    size_t n_history, n_late;
    pgarr_t p_process, p_key, p_event_id, p_event_type, p_topic, p_partition, p_offset, p_time,
        p_payload, p_expires;
    pgarr_t p_delete;
    pgarr_t r_topic, r_partition, r_offset, r_process, r_reason, r_detail, r_value, r_headers,
        r_time, r_epoch, r_key;
    size_t n_rejected;
    pgarr_t i_process, i_key, i_version, i_state, i_status, i_started, i_entered, i_deadline,
        i_pdeadline, i_next, i_overdue, i_poverdue, i_attempt, i_vars, i_applied, i_step, i_token,
        i_holder, i_lease_expires, i_lease_renewed, i_resend;
} rows_t;

static void rows_free(rows_t *rows)
{
    pgarr_t *all[] = {
        &rows->h_process,
        &rows->h_key,
        &rows->h_version,
        &rows->h_event_id,
        &rows->h_event_type,
        &rows->h_topic,
        &rows->h_partition,
        &rows->h_offset,
        &rows->h_time,
        &rows->h_from,
        &rows->h_to,
        &rows->h_outcome,
        &rows->h_replayed,
        &rows->h_detail,
        &rows->h_epoch,
        &rows->p_process,
        &rows->p_key,
        &rows->p_event_id,
        &rows->p_event_type,
        &rows->p_topic,
        &rows->p_partition,
        &rows->p_offset,
        &rows->p_time,
        &rows->p_payload,
        &rows->p_expires,
        &rows->p_delete,
        &rows->r_topic,
        &rows->r_partition,
        &rows->r_offset,
        &rows->r_process,
        &rows->r_reason,
        &rows->r_detail,
        &rows->r_value,
        &rows->r_headers,
        &rows->r_time,
        &rows->r_epoch,
        &rows->i_process,
        &rows->i_key,
        &rows->i_version,
        &rows->i_state,
        &rows->i_status,
        &rows->i_started,
        &rows->i_entered,
        &rows->i_deadline,
        &rows->i_pdeadline,
        &rows->i_next,
        &rows->i_overdue,
        &rows->i_attempt,
        &rows->i_vars,
        &rows->i_applied,
        &rows->i_poverdue,
        &rows->r_key,
        &rows->h_late,
        &rows->h_entered,
        &rows->h_stayed,
        &rows->i_step,
        &rows->i_token,
        &rows->i_holder,
        &rows->i_lease_expires,
        &rows->i_lease_renewed,
        &rows->i_resend,
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgarr_free(all[i]);
    rows->n_history = rows->n_late = rows->n_rejected = 0;
}

/* Compact, with 15 significant digits: what a double keeps of the decimal a
 * producer wrote (11.53 stays 11.53, not 11.529999999999999). */
#define JSON_NUMBERS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* ---- connection and definitions ---------------------------------------- */

store_t *store_new(const store_config_t *cfg, const def_set_t *defs, char *errstr,
                   size_t errstr_size)
{
    store_t *store = calloc(1, sizeof *store);
    if (store == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    store->conninfo = strdup(cfg->conninfo != NULL ? cfg->conninfo : "");
    store->group = strdup(cfg->group);
    store->replica = strdup(cfg->replica);
    store->limits = cfg->limits;
    store->defs = defs;
    store->routes = cfg->routes;
    store->record_unknown = cfg->record_unknown;
    store->versions = defcache_new(defs);
    if (store->conninfo == NULL || store->group == NULL || store->replica == NULL ||
        store->versions == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        store_free(store);
        return NULL;
    }
    store->conn = db_connect(store->conninfo, "steward run", errstr, errstr_size);
    if (store->conn == NULL) {
        store_free(store);
        return NULL;
    }
    return store;
}

void store_free(store_t *store)
{
    if (store == NULL)
        return;
    if (store->conn != NULL)
        PQfinish(store->conn);
    defcache_free(store->versions);
    free(store->conninfo);
    free(store->group);
    free(store->replica);
    free(store);
}

void store_set_definitions(store_t *store, const def_set_t *defs, route_table_t *routes)
{
    store->defs = defs;
    store->routes = routes;
    defcache_set_loaded(store->versions, defs);
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

err_class_t store_register_definitions(store_t *store, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;

    for (size_t i = 0; i < store->defs->n && cls == ERR_OK; i++) {
        const def_t *def = store->defs->defs[i];
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

err_class_t store_claim(store_t *store, store_partition_t *parts, size_t n, char *errstr,
                        size_t errstr_size)
{
    pgarr_t topics = {0}, partitions = {0};
    err_class_t cls = ERR_OK;
    PGresult *res = NULL;

    for (size_t i = 0; i < n; i++) {
        pgarr_add(&topics, parts[i].topic);
        pgarr_add_int(&partitions, parts[i].partition);
    }
    const char *params[4] = {store->group, pgarr_text(&topics), pgarr_text(&partitions),
                             store->replica};
    if (params[1] == NULL || params[2] == NULL) {
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

    for (size_t i = 0; i < n; i++) {
        pgarr_add(&topics, parts[i].topic);
        pgarr_add_int(&partitions, parts[i].partition);
        pgarr_add_int(&epochs, parts[i].epoch);
    }
    const char *params[6] = {store->group,        pgarr_text(&topics), pgarr_text(&partitions),
                             pgarr_text(&epochs), store->replica,      actions[reason]};
    if (params[1] == NULL || params[2] == NULL || params[3] == NULL)
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

/* ---- the batch ------------------------------------------------------------ */

/* How often the same undeclared (topic, type) is logged, at most. */
#define STORE_UNKNOWN_LOG_MS 60000

typedef struct batch {
    store_t *store;
    const decode_input_t *msgs;
    size_t n_msgs;
    store_partition_t *parts;
    size_t n_parts;
    size_t *msg_part;            /* each message's index in parts */
    decode_message_t *decoded;   /* per message; empty when rejected as a whole */
    decode_reason_t *msg_reason; /* per message: why it was rejected as a whole */
    char (*msg_detail)[256];
    item_t *items;
    size_t n_items, cap_items;
    slot_t *slots;
    size_t n_slots;
    rows_t rows;
    alert_batch_t alerts;
    cmdq_t commands; /* the commands the batch's state changes send */
    long long outcome_counts[ENGINE_N_OUTCOMES];
    long long reject_counts[DECODE_N_REASONS];
    store_batch_stats_t stats;
    const char **msg_type; /* per message: the type no process declares, when ignored */
    bool bare;             /* rejected rows without key, value and headers (see
                              store_refuse_message()) */
    struct rejection {
        size_t msg;
        const char *process, *detail; /* borrowed from the batch */
        decode_reason_t reason;
    } * rejections; /* what the reject hook hears once committed */
    size_t n_rejections, cap_rejections;
    struct stay {
        const char *process, *state; /* borrowed from the batch's slots */
        int64_t ms;
    } * stays; /* states left, for steward_step_duration_seconds once committed */
    size_t n_stays, cap_stays;
} batch_t;

static void slot_clear(slot_t *slot)
{
    engine_instance_clear(&slot->inst);
    for (size_t i = 0; i < slot->n_seen; i++)
        free(slot->seen[i]);
    free(slot->seen);
    for (size_t i = 0; i < slot->n_parked; i++) {
        free(slot->parked[i].event_id);
        free(slot->parked[i].event_type);
        free(slot->parked[i].topic);
        json_decref(slot->parked[i].payload);
    }
    free(slot->parked);
}

static void batch_free(batch_t *b)
{
    for (size_t i = 0; i < b->n_msgs; i++)
        decode_message_clear(&b->decoded[i]);
    for (size_t i = 0; i < b->n_items; i++)
        decode_envelope_clear(&b->items[i].env);
    for (size_t i = 0; i < b->n_slots; i++)
        slot_clear(&b->slots[i]);
    free(b->stays);
    free(b->decoded);
    free(b->msg_reason);
    free(b->msg_detail);
    free(b->msg_part);
    free(b->msg_type);
    free(b->rejections);
    free(b->items);
    free(b->slots);
    rows_free(&b->rows);
    alert_batch_clear(&b->alerts);
    cmdq_clear(&b->commands);
}

static bool slot_seen(const slot_t *slot, const char *id)
{
    for (size_t i = 0; i < slot->n_seen; i++) {
        if (strcmp(slot->seen[i], id) == 0)
            return true;
    }
    return false;
}

static bool slot_add_seen(slot_t *slot, const char *id)
{
    if (slot->n_seen == slot->cap_seen) {
        size_t cap = slot->cap_seen ? slot->cap_seen * 2 : 4;
        char **grown = realloc(slot->seen, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        slot->seen = grown;
        slot->cap_seen = cap;
    }
    if ((slot->seen[slot->n_seen] = strdup(id)) == NULL)
        return false;
    slot->n_seen++;
    return true;
}

static parked_t *slot_add_parked(slot_t *slot)
{
    if (slot->n_parked == slot->cap_parked) {
        size_t cap = slot->cap_parked ? slot->cap_parked * 2 : 4;
        parked_t *grown = realloc(slot->parked, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        slot->parked = grown;
        slot->cap_parked = cap;
    }
    parked_t *p = &slot->parked[slot->n_parked++];
    memset(p, 0, sizeof *p);
    return p;
}

static int slot_compare(const void *a, const void *b)
{
    const slot_t *x = a, *y = b;
    int c = strcmp(x->process, y->process);
    return c != 0 ? c : strcmp(x->key, y->key);
}

static slot_t *find_slot(batch_t *b, const char *process, const char *key)
{
    slot_t probe = {.process = process, .key = key};
    return bsearch(&probe, b->slots, b->n_slots, sizeof *b->slots, slot_compare);
}

static size_t find_part(const batch_t *b, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < b->n_parts; i++) {
        if (b->parts[i].partition == partition && strcmp(b->parts[i].topic, topic) == 0)
            return i;
    }
    return SIZE_MAX;
}

static bool reads_topic(const def_t *def, const char *topic)
{
    for (size_t i = 0; i < def->n_events; i++) {
        if (strcmp(def->events[i].topic, topic) == 0)
            return true;
    }
    return false;
}

/* The event `type` on `topic`, or -1 when the definition does not declare it there. */
static long declared_event(const def_t *def, const char *type, const char *topic)
{
    long idx = def_find_event(def, type);
    return idx >= 0 && strcmp(def->events[idx].topic, topic) == 0 ? idx : -1;
}

/* Decodes every message and routes it to the processes that declare it.
 * Pure CPU; runs before the transaction. */
static err_class_t batch_route(batch_t *b, char *errstr, size_t errstr_size)
{
    const def_set_t *defs = b->store->defs;

    for (size_t m = 0; m < b->n_msgs; m++) {
        const decode_input_t *in = &b->msgs[m];
        decode_message_t *msg = &b->decoded[m];

        b->msg_part[m] = find_part(b, in->topic, in->partition);
        if (b->msg_part[m] == SIZE_MAX)
            return err_set(ERR_FATAL, errstr, errstr_size,
                           "internal error: message from %s[%" PRId32 "] has no partition entry",
                           in->topic, in->partition);
        b->msg_reason[m] =
            decode_message(in, &b->store->limits, msg, b->msg_detail[m], sizeof b->msg_detail[m]);
        if (b->msg_reason[m] != DECODE_OK)
            continue;

        bool listened = false, typed = false;
        const def_t *listener = NULL;
        for (size_t d = 0; d < defs->n; d++) {
            const def_t *def = defs->defs[d];
            if (def_set_latest(defs, def->process) != def || !reads_topic(def, in->topic))
                continue;
            listened = true;
            if (listener == NULL)
                listener = def;
            const char *type = decode_event_type(msg, in, def);
            if (type == NULL)
                continue;
            typed = true;
            if (b->msg_type[m] == NULL)
                b->msg_type[m] = type;
            long event = declared_event(def, type, in->topic);
            if (event < 0)
                continue;

            if (b->n_items == b->cap_items) {
                size_t cap = b->cap_items ? b->cap_items * 2 : 64;
                item_t *grown = realloc(b->items, cap * sizeof *grown);
                if (grown == NULL)
                    return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
                b->items = grown;
                b->cap_items = cap;
            }
            item_t *item = &b->items[b->n_items++];
            memset(item, 0, sizeof *item);
            item->msg = m;
            item->latest = def;
            item->type = type;
            /* A rejection here is for this process only; others may take it. */
            item->reject = decode_envelope(msg, in, def, (size_t) event, &item->env,
                                           item->reject_detail, sizeof item->reject_detail);
        }
        if (!listened)
            b->msg_type[m] = msg->ce_type; /* an undeclared topic: the type if known */
        if (listened && !typed) {
            /* Name the rule of the first process reading the topic: that is
             * the one a person fixes the producer (or the definition) for. */
            decode_type_source(listener, b->msg_detail[m], sizeof b->msg_detail[m]);
            b->msg_reason[m] = DECODE_MISSING_TYPE;
            decode_message_clear(msg);
        }
    }
    return ERR_OK;
}

/* Locks the batch's offsets rows and marks partitions whose epoch moved on. */
static err_class_t batch_fence(batch_t *b, char *errstr, size_t errstr_size)
{
    pgarr_t topics = {0}, partitions = {0};
    err_class_t cls;

    for (size_t i = 0; i < b->n_parts; i++) {
        pgarr_add(&topics, b->parts[i].topic);
        pgarr_add_int(&partitions, b->parts[i].partition);
        b->parts[i].fenced = true; /* until its row says otherwise */
    }
    const char *params[3] = {b->store->group, pgarr_text(&topics), pgarr_text(&partitions)};
    PGresult *res = db_query(b->store->conn, "checking partition ownership",
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
        size_t i = find_part(b, PQgetvalue(res, row, 0), (int32_t) atol(PQgetvalue(res, row, 1)));
        if (i != SIZE_MAX && strtoll(PQgetvalue(res, row, 2), NULL, 10) == b->parts[i].epoch)
            b->parts[i].fenced = false;
    }
    PQclear(res);
    for (size_t i = 0; i < b->n_parts; i++) {
        if (b->parts[i].fenced)
            b->stats.fenced++;
    }
    return ERR_OK;
}

static bool msg_fenced(const batch_t *b, size_t m)
{
    return b->parts[b->msg_part[m]].fenced;
}

/* Builds the sorted, unique set of instances the live items touch. */
static err_class_t batch_slots(batch_t *b, char *errstr, size_t errstr_size)
{
    b->slots = calloc(b->n_items + 1, sizeof *b->slots);
    if (b->slots == NULL)
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->reject != DECODE_OK || msg_fenced(b, item->msg))
            continue;
        slot_t *slot = &b->slots[b->n_slots++];
        slot->process = item->latest->process;
        slot->key = item->env.key;
        engine_instance_init(&slot->inst);
    }
    qsort(b->slots, b->n_slots, sizeof *b->slots, slot_compare);
    size_t unique = 0;
    for (size_t i = 0; i < b->n_slots; i++) {
        if (unique > 0 && slot_compare(&b->slots[unique - 1], &b->slots[i]) == 0)
            continue;
        b->slots[unique++] = b->slots[i];
    }
    b->n_slots = unique;
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->reject == DECODE_OK && !msg_fenced(b, item->msg))
            item->slot = find_slot(b, item->latest->process, item->env.key);
    }
    return ERR_OK;
}

static int64_t ms_value(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? ENGINE_NO_DEADLINE
                                      : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/*
 * The three reads below walk the batch's keys and probe an index for each
 * (a LATERAL subquery the planner cannot flatten). Written as a join, the
 * planner hashes the whole table instead: a sequential scan of history per
 * batch, which grows with everything ever judged. The keys arrive sorted,
 * so rows are locked in key order.
 */
static const char read_instances_sql[] =
    "SELECT i.process, i.key, i.version, i.state, "
    "  steward.to_ms(i.started_at), "
    "  steward.to_ms(i.state_entered_at), "
    "  steward.to_ms(i.deadline_at), "
    "  steward.to_ms(i.process_deadline_at), "
    "  i.overdue, i.attempt, i.vars::text, i.events_applied, i.process_overdue, "
    "  i.step, i.token, i.lease_holder, steward.to_ms(i.lease_expires_at), "
    "  steward.to_ms(i.lease_renewed_at), i.resend_pending "
    "FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(p, k, n) "
    "CROSS JOIN LATERAL (SELECT * FROM steward.instances "
    "  WHERE process = u.p AND key = u.k FOR UPDATE) i "
    "ORDER BY u.n";

/* Locks every touched instance, existing or not, then reads those that exist. */
static err_class_t batch_lock_and_read(batch_t *b, char *errstr, size_t errstr_size)
{
    pgarr_t processes = {0}, keys = {0};
    err_class_t cls = ERR_OK;
    PGresult *res = NULL;

    for (size_t i = 0; i < b->n_slots; i++) {
        pgarr_add(&processes, b->slots[i].process);
        pgarr_add(&keys, b->slots[i].key);
    }
    const char *params[2] = {pgarr_text(&processes), pgarr_text(&keys)};
    if (params[0] == NULL || params[1] == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }

    /* Hash order is the one global order every transaction locks in. */
    res = db_query(b->store->conn, "locking instances",
                   "SELECT count(pg_advisory_xact_lock(h)) FROM ("
                   "  SELECT DISTINCT steward.instance_lock_key(p, k) AS h "
                   "  FROM unnest($1::text[], $2::text[]) AS u(p, k) ORDER BY h OFFSET 0) s",
                   2, params, &cls, errstr, errstr_size);
    if (res == NULL)
        goto done;
    PQclear(res);

    res = db_query(b->store->conn, "reading instances", read_instances_sql, 2, params, &cls, errstr,
                   errstr_size);
    if (res == NULL)
        goto done;
    for (int row = 0; row < PQntuples(res); row++) {
        slot_t *slot = find_slot(b, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1));
        if (slot == NULL)
            continue;
        int version = atoi(PQgetvalue(res, row, 2));
        const def_t *def = defcache_get(b->store->versions, b->store->conn, slot->process, version);
        /* An instance this replica cannot judge must not stop intake: its
         * events are kept in steward.rejected, and the scheduler sets the
         * instance aside with an `unloadable` alert naming the version. */
        long state = def != NULL ? def_find_state(def, PQgetvalue(res, row, 3)) : -1;
        if (def == NULL || state < 0) {
            if (def == NULL)
                snprintf(slot->unjudgeable, sizeof slot->unjudgeable,
                         "instance %s runs on version %d of %s, which is neither loaded nor "
                         "recorded in steward.definitions",
                         slot->key, version, slot->process);
            else
                snprintf(slot->unjudgeable, sizeof slot->unjudgeable,
                         "instance %s is in state '%s', which version %d of %s does not declare",
                         slot->key, PQgetvalue(res, row, 3), version, slot->process);
            continue;
        }
        json_error_t jerr;
        engine_instance_t *inst = &slot->inst;
        slot->def = def;
        inst->exists = true;
        inst->version = version;
        inst->state = state;
        inst->started_ms = ms_value(res, row, 4);
        inst->state_entered_ms = ms_value(res, row, 5);
        inst->deadline_ms = ms_value(res, row, 6);
        inst->process_deadline_ms = ms_value(res, row, 7);
        inst->overdue = strcmp(PQgetvalue(res, row, 8), "t") == 0;
        inst->attempt = atoi(PQgetvalue(res, row, 9));
        inst->vars = json_loads(PQgetvalue(res, row, 10), 0, &jerr);
        if (inst->vars == NULL)
            inst->vars = json_object();
        inst->events_applied = atoi(PQgetvalue(res, row, 11));
        inst->process_overdue = strcmp(PQgetvalue(res, row, 12), "t") == 0;
        inst->step = atoi(PQgetvalue(res, row, 13));
        inst->token = strtoll(PQgetvalue(res, row, 14), NULL, 10);
        inst->lease_holder = PQgetisnull(res, row, 15) ? NULL : strdup(PQgetvalue(res, row, 15));
        inst->lease_expires_ms = ms_value(res, row, 16);
        inst->lease_renewed_ms = ms_value(res, row, 17);
        inst->resend_pending = strcmp(PQgetvalue(res, row, 18), "t") == 0;
    }
    for (size_t i = 0; i < b->n_slots; i++) {
        if (b->slots[i].def == NULL)
            b->slots[i].def = def_set_latest(b->store->defs, b->slots[i].process);
    }
    for (size_t i = 0; i < b->n_items; i++) {
        item_t *item = &b->items[i];
        if (item->slot == NULL || item->slot->unjudgeable[0] == '\0')
            continue;
        item->reject = DECODE_UNLOADABLE_VERSION;
        snprintf(item->reject_detail, sizeof item->reject_detail, "%s", item->slot->unjudgeable);
        item->slot = NULL;
    }
done:
    PQclear(res);
    pgarr_free(&processes);
    pgarr_free(&keys);
    return cls;
}

/* Reads which of the batch's event ids each instance has already judged. */
static err_class_t batch_read_seen(batch_t *b, char *errstr, size_t errstr_size)
{
    pgarr_t processes = {0}, keys = {0}, ids = {0};
    err_class_t cls = ERR_OK;

    for (size_t i = 0; i < b->n_items; i++) {
        if (b->items[i].slot == NULL)
            continue;
        pgarr_add(&processes, b->items[i].slot->process);
        pgarr_add(&keys, b->items[i].slot->key);
        pgarr_add(&ids, b->items[i].env.id);
    }
    const char *params[3] = {pgarr_text(&processes), pgarr_text(&keys), pgarr_text(&ids)};
    PGresult *res = NULL;
    if (params[0] == NULL || params[1] == NULL || params[2] == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    res = db_query(b->store->conn, "reading judged event ids",
                   "SELECT DISTINCT u.p, u.k, u.e "
                   "FROM unnest($1::text[], $2::text[], $3::text[]) AS u(p, k, e) "
                   "CROSS JOIN LATERAL (SELECT 1 FROM steward.history h WHERE h.process = u.p "
                   "  AND h.key = u.k AND h.event_id = u.e LIMIT 1) judged",
                   3, params, &cls, errstr, errstr_size);
    if (res == NULL)
        goto done;
    for (int row = 0; row < PQntuples(res); row++) {
        slot_t *slot = find_slot(b, PQgetvalue(res, row, 0), PQgetvalue(res, row, 1));
        if (slot != NULL && !slot_add_seen(slot, PQgetvalue(res, row, 2))) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto done;
        }
    }
done:
    PQclear(res);
    pgarr_free(&processes);
    pgarr_free(&keys);
    pgarr_free(&ids);
    return cls;
}

/* Reads the events parked for the touched instances, oldest first. */
static err_class_t batch_read_parked(batch_t *b, char *errstr, size_t errstr_size)
{
    pgarr_t processes = {0}, keys = {0};
    err_class_t cls = ERR_OK;

    for (size_t i = 0; i < b->n_slots; i++) {
        pgarr_add(&processes, b->slots[i].process);
        pgarr_add(&keys, b->slots[i].key);
    }
    const char *params[2] = {pgarr_text(&processes), pgarr_text(&keys)};
    PGresult *res =
        db_query(b->store->conn, "reading parked events",
                 "SELECT p.id, p.process, p.key, p.event_id, p.event_type, p.topic, p.partition, "
                 "  p.\"offset\", steward.to_ms(p.event_time), "
                 "  p.payload::text "
                 "FROM unnest($1::text[], $2::text[]) AS u(pr, k) "
                 "CROSS JOIN LATERAL (SELECT * FROM steward.parked "
                 "  WHERE process = u.pr AND key = u.k FOR UPDATE) p "
                 "ORDER BY p.process, p.key, p.event_time, p.id",
                 2, params, &cls, errstr, errstr_size);
    pgarr_free(&processes);
    pgarr_free(&keys);
    if (res == NULL)
        return cls;
    for (int row = 0; row < PQntuples(res) && cls == ERR_OK; row++) {
        slot_t *slot = find_slot(b, PQgetvalue(res, row, 1), PQgetvalue(res, row, 2));
        parked_t *p = slot != NULL ? slot_add_parked(slot) : NULL;
        if (slot == NULL)
            continue;
        if (p == NULL) {
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            break;
        }
        json_error_t jerr;
        p->db_id = strtoll(PQgetvalue(res, row, 0), NULL, 10);
        p->event_id = strdup(PQgetvalue(res, row, 3));
        p->event_type = strdup(PQgetvalue(res, row, 4));
        p->topic = strdup(PQgetvalue(res, row, 5));
        p->partition = (int32_t) atol(PQgetvalue(res, row, 6));
        p->offset = strtoll(PQgetvalue(res, row, 7), NULL, 10);
        p->time_ms = strtoll(PQgetvalue(res, row, 8), NULL, 10);
        p->payload = json_loads(PQgetvalue(res, row, 9), 0, &jerr);
        if (p->event_id == NULL || p->event_type == NULL || p->topic == NULL || p->payload == NULL)
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory reading parked events");
    }
    PQclear(res);
    return cls;
}

static void add_history(batch_t *b, const slot_t *slot, const char *event_id,
                        const char *event_type, const char *topic, int32_t partition,
                        int64_t offset, int64_t time_ms, const engine_result_t *r, bool replayed,
                        int64_t epoch)
{
    rows_t *rows = &b->rows;
    const def_t *def = slot->def;

    pgarr_add(&rows->h_process, slot->process);
    pgarr_add(&rows->h_key, slot->key);
    pgarr_add_int(&rows->h_version, slot->inst.exists ? slot->inst.version : def->version);
    pgarr_add(&rows->h_event_id, event_id);
    pgarr_add(&rows->h_event_type, event_type);
    pgarr_add(&rows->h_topic, topic);
    pgarr_add_int(&rows->h_partition, partition);
    pgarr_add_int(&rows->h_offset, offset);
    pgarr_add_int(&rows->h_time, time_ms);
    pgarr_add(&rows->h_from, r->from_state >= 0 ? def->states[r->from_state].name : NULL);
    pgarr_add(&rows->h_to, r->to_state >= 0 ? def->states[r->to_state].name : NULL);
    pgarr_add(&rows->h_outcome, engine_outcome_name(r->outcome));
    pgarr_add_bool(&rows->h_replayed, replayed);
    pgarr_add(&rows->h_detail, r->detail[0] ? r->detail : NULL);
    pgarr_add_int(&rows->h_epoch, epoch);
    if (r->late_by_ms > 0) {
        pgarr_add_int(&rows->h_late, r->late_by_ms);
        rows->n_late++;
    } else {
        pgarr_add(&rows->h_late, NULL);
    }
    if (r->entered_ms != ENGINE_NO_DEADLINE)
        pgarr_add_int(&rows->h_entered, r->entered_ms);
    else
        pgarr_add(&rows->h_entered, NULL);
    if (r->time_in_state_ms >= 0)
        pgarr_add_int(&rows->h_stayed, r->time_in_state_ms);
    else
        pgarr_add(&rows->h_stayed, NULL);
    if (r->time_in_state_ms >= 0 && r->from_state >= 0) {
        if (b->n_stays == b->cap_stays) {
            size_t cap = b->cap_stays > 0 ? b->cap_stays * 2 : 64;
            struct stay *grown = realloc(b->stays, cap * sizeof *grown);
            if (grown != NULL) {
                b->stays = grown;
                b->cap_stays = cap;
            }
        }
        if (b->n_stays < b->cap_stays) /* out of memory: one observation less */
            b->stays[b->n_stays++] =
                (struct stay){slot->process, def->states[r->from_state].name, r->time_in_state_ms};
    }
    rows->n_history++;
    b->outcome_counts[r->outcome]++;
}

/*
 * The alerts a judgement opens or resolves: the late event that ends a
 * missed deadline, the terminal state that ends a missed process deadline
 * and any sequence alerts, and an event out of sequence.
 */
static void note_alerts(batch_t *b, const slot_t *slot, const engine_result_t *r, bool was_overdue,
                        bool was_process_overdue, const char *type, const char *event_id)
{
    const def_t *def = slot->def;
    char text[512];

    if (r->outcome == ENGINE_ADVANCED || r->outcome == ENGINE_STARTED) {
        if (was_overdue && r->from_state >= 0) {
            snprintf(text, sizeof text, "%s %s", type, r->detail[0] ? r->detail : "arrived");
            alert_batch_resolve(&b->alerts, ALERT_DEADLINE, slot->process, slot->key,
                                def->states[r->from_state].name, text);
        }
        const char *terminal = def->states[r->to_state].terminal;
        if (terminal != NULL) {
            snprintf(text, sizeof text, "the instance finished in %s (%s)",
                     def->states[r->to_state].name, terminal);
            if (was_process_overdue)
                alert_batch_resolve(&b->alerts, ALERT_PROCESS_DEADLINE, slot->process, slot->key,
                                    NULL, text);
            alert_batch_resolve(&b->alerts, ALERT_SEQUENCE, slot->process, slot->key, NULL, text);
        }
    } else if (r->outcome == ENGINE_UNEXPECTED) {
        long state = slot->inst.exists ? slot->inst.state : -1;
        engine_alert_text_t words;
        json_t *details = engine_sequence_alert(def, slot->process, slot->key,
                                                state >= 0 ? def->states[state].name : NULL, type,
                                                event_id, r->detail, &words);
        alert_batch_open(&b->alerts, ALERT_SEQUENCE, slot->process, slot->key, words.state,
                         words.owner, words.summary, details,
                         words.identity != NULL ? words.identity : words.summary, -1);
        engine_alert_text_clear(&words);
        json_decref(details);
    }
}

/* Queues the command the engine decided on entering a state, in the
 * batch's transaction: committed with the state change or not at all; and
 * cancels what is unsent for the step it left. */
static void queue_command(batch_t *b, slot_t *slot, const engine_result_t *r)
{
    /* Only an active version has commands to leave behind. */
    if (r->outcome == ENGINE_ADVANCED && slot->def->mode == DEF_MODE_ACTIVE)
        cmdq_left(&b->commands, slot->process, slot->key);
    if (r->command.send)
        cmdq_add(&b->commands, &b->alerts, slot->def, slot->key, slot->inst.vars, &r->command);
}

/* The `released` row of a move out of a held lease, beside the event's own. */
static void add_released(batch_t *b, const slot_t *slot, const char *event_id,
                         const char *event_type, const char *topic, int32_t partition,
                         int64_t offset, int64_t time_ms, const engine_result_t *r, bool replayed,
                         int64_t epoch)
{
    if (r->released[0] == '\0')
        return;
    engine_result_t rel = *r;
    rel.outcome = ENGINE_RELEASED;
    rel.to_state = r->from_state;
    rel.late_by_ms = 0;
    rel.entered_ms = ENGINE_NO_DEADLINE;
    rel.time_in_state_ms = -1;
    snprintf(rel.detail, sizeof rel.detail, "%s", r->released);
    add_history(b, slot, event_id, event_type, topic, partition, offset, time_ms, &rel, replayed,
                epoch);
}

/* Judges the instance's parked events again after it moved, until none
 * moves it further. */
static void replay_parked(batch_t *b, slot_t *slot, int64_t epoch)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (size_t i = 0; i < slot->n_parked && !moved; i++) {
            parked_t *p = &slot->parked[i];
            if (p->settled)
                continue;
            long event = def_find_event(slot->def, p->event_type);
            bool was_overdue = slot->inst.overdue;
            bool was_process_overdue = slot->inst.process_overdue;
            engine_result_t r;
            if (event < 0) {
                r = engine_undeclared(slot->def, &slot->inst, p->event_type);
            } else {
                engine_event_t ev = {event, p->event_id, p->time_ms, p->payload};
                r = engine_replay(slot->def, &slot->inst, &ev);
            }
            if (r.outcome == ENGINE_PARKED)
                continue;
            p->settled = true;
            add_history(b, slot, p->event_id, p->event_type, p->topic, p->partition, p->offset,
                        p->time_ms, &r, true, epoch);
            add_released(b, slot, p->event_id, p->event_type, p->topic, p->partition, p->offset,
                         p->time_ms, &r, true, epoch);
            note_alerts(b, slot, &r, was_overdue, was_process_overdue, p->event_type, p->event_id);
            if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED) {
                slot->dirty = true;
                moved = true;
                queue_command(b, slot, &r);
            }
        }
    }
}

static err_class_t judge_item(batch_t *b, item_t *item, char *errstr, size_t errstr_size)
{
    slot_t *slot = item->slot;
    const decode_input_t *in = &b->msgs[item->msg];
    int64_t epoch = b->parts[b->msg_part[item->msg]].epoch;
    long event = def_find_event(slot->def, item->type);
    bool seen = slot_seen(slot, item->env.id);
    bool was_overdue = slot->inst.overdue;
    bool was_process_overdue = slot->inst.process_overdue;
    engine_result_t r;

    if (seen || event >= 0) {
        engine_event_t ev = {event, item->env.id, item->env.time_ms, b->decoded[item->msg].data,
                             item->env.token};
        r = engine_apply(slot->def, &slot->inst, &ev, seen);
    } else {
        r = engine_undeclared(slot->def, &slot->inst, item->type);
    }
    add_history(b, slot, item->env.id, item->type, in->topic, in->partition, in->offset,
                item->env.time_ms, &r, false, epoch);
    add_released(b, slot, item->env.id, item->type, in->topic, in->partition, in->offset,
                 item->env.time_ms, &r, false, epoch);
    note_alerts(b, slot, &r, was_overdue, was_process_overdue, item->type, item->env.id);
    if (!seen && !slot_add_seen(slot, item->env.id))
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");

    if (r.outcome == ENGINE_PARKED) {
        parked_t *p = slot_add_parked(slot);
        if (p == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        p->event_id = strdup(item->env.id);
        p->event_type = strdup(item->type);
        p->topic = strdup(in->topic);
        p->partition = in->partition;
        p->offset = in->offset;
        p->time_ms = item->env.time_ms;
        p->payload = json_incref((json_t *) b->decoded[item->msg].data);
        if (p->event_id == NULL || p->event_type == NULL || p->topic == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    } else if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED) {
        slot->dirty = true;
        queue_command(b, slot, &r);
        replay_parked(b, slot, epoch);
    } else if (r.outcome == ENGINE_CLAIMED || r.outcome == ENGINE_RENEWED) {
        slot->dirty = true; /* the lease moved; the state did not */
    }
    return ERR_OK;
}

/* bytes as a new JSON string of hex digits (NULL when out of memory). */
static json_t *hex_string(const void *bytes, size_t len)
{
    char *hex = malloc(2 * len + 1);
    json_t *str = NULL;
    for (size_t k = 0; hex != NULL && k < len; k++)
        sprintf(hex + 2 * k, "%02x", ((const unsigned char *) bytes)[k]);
    if (hex != NULL) {
        hex[2 * len] = '\0';
        str = json_string(hex);
    }
    free(hex);
    return str;
}

/* The message's headers as a JSON array, values as text when they are
 * UTF-8 and as hex otherwise. Returns a new string (free it). */
static char *headers_json(const decode_input_t *in)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < in->n_headers; i++) {
        const decode_header_t *h = &in->headers[i];
        /* A header name is bytes too: text only when it is UTF-8. */
        json_t *obj = json_object();
        if (utf8_valid((const unsigned char *) h->name, strlen(h->name)))
            json_object_set_new(obj, "name", json_string(h->name));
        else
            json_object_set_new(obj, "name_hex", hex_string(h->name, strlen(h->name)));
        if (h->value == NULL) {
            json_object_set_new(obj, "value", json_null());
        } else if (utf8_valid(h->value, h->len) && memchr(h->value, 0, h->len) == NULL) {
            json_object_set_new(obj, "value", json_stringn(h->value, h->len));
        } else {
            json_object_set_new(obj, "value_hex", hex_string(h->value, h->len));
        }
        json_array_append_new(arr, obj);
    }
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return text;
}

static void add_rejected(batch_t *b, size_t m, const char *process, decode_reason_t reason,
                         const char *detail)
{
    rows_t *rows = &b->rows;
    const decode_input_t *in = &b->msgs[m];
    char *headers = b->bare ? NULL : headers_json(in);

    if (b->n_rejections == b->cap_rejections) {
        size_t cap = b->cap_rejections ? b->cap_rejections * 2 : 8;
        struct rejection *grown = realloc(b->rejections, cap * sizeof *grown);
        if (grown != NULL) {
            b->rejections = grown;
            b->cap_rejections = cap;
        }
    }
    if (b->n_rejections < b->cap_rejections)
        b->rejections[b->n_rejections++] = (struct rejection){m, process, detail, reason};
    if (in->key != NULL && !b->bare)
        pgarr_add_hex(&rows->r_key, in->key, in->key_len);
    else
        pgarr_add(&rows->r_key, NULL);

    pgarr_add(&rows->r_topic, in->topic);
    pgarr_add_int(&rows->r_partition, in->partition);
    pgarr_add_int(&rows->r_offset, in->offset);
    pgarr_add(&rows->r_process, process);
    pgarr_add(&rows->r_reason, decode_reason_name(reason));
    pgarr_add(&rows->r_detail, detail);
    if (in->value != NULL && !b->bare)
        pgarr_add_hex(&rows->r_value, in->value, in->value_len);
    else
        pgarr_add(&rows->r_value, NULL);
    pgarr_add(&rows->r_headers, headers);
    if (in->timestamp_ms >= 0 && decode_time_in_range(in->timestamp_ms))
        pgarr_add_int(&rows->r_time, in->timestamp_ms);
    else
        pgarr_add(&rows->r_time, NULL);
    pgarr_add_int(&rows->r_epoch, b->parts[b->msg_part[m]].epoch);
    free(headers);
    rows->n_rejected++;
    b->reject_counts[reason]++;
}

static void add_deadline(pgarr_t *arr, int64_t ms)
{
    if (ms == ENGINE_NO_DEADLINE)
        pgarr_add(arr, NULL);
    else
        pgarr_add_int(arr, ms);
}

/* Collects every row the batch writes. */
static void batch_collect(batch_t *b)
{
    rows_t *rows = &b->rows;

    /* Items were made message by message, so one cursor walks both. */
    size_t item = 0;
    for (size_t m = 0; m < b->n_msgs; m++) {
        size_t first = item;
        while (item < b->n_items && b->items[item].msg == m)
            item++;
        if (msg_fenced(b, m))
            continue;
        b->stats.messages++;
        if (b->msg_reason[m] != DECODE_OK) {
            add_rejected(b, m, NULL, b->msg_reason[m], b->msg_detail[m]);
            continue;
        }
        if (first == item) {
            b->stats.ignored++;
            if (b->store->record_unknown) {
                snprintf(b->msg_detail[m], sizeof b->msg_detail[m],
                         "no loaded definition declares type '%.100s' on topic %s",
                         b->msg_type[m] != NULL ? b->msg_type[m] : "(none)", b->msgs[m].topic);
                add_rejected(b, m, NULL, DECODE_UNKNOWN_TYPE, b->msg_detail[m]);
            }
        }
        for (size_t i = first; i < item; i++) {
            if (b->items[i].reject != DECODE_OK)
                add_rejected(b, m, b->items[i].latest->process, b->items[i].reject,
                             b->items[i].reject_detail);
        }
    }

    for (size_t s = 0; s < b->n_slots; s++) {
        slot_t *slot = &b->slots[s];
        for (size_t i = 0; i < slot->n_parked; i++) {
            parked_t *p = &slot->parked[i];
            if (p->db_id > 0 && p->settled) {
                pgarr_add_int(&rows->p_delete, p->db_id);
            } else if (p->db_id == 0 && !p->settled) {
                char *payload = json_dumps(p->payload, JSON_NUMBERS);
                pgarr_add(&rows->p_process, slot->process);
                pgarr_add(&rows->p_key, slot->key);
                pgarr_add(&rows->p_event_id, p->event_id);
                pgarr_add(&rows->p_event_type, p->event_type);
                pgarr_add(&rows->p_topic, p->topic);
                pgarr_add_int(&rows->p_partition, p->partition);
                pgarr_add_int(&rows->p_offset, p->offset);
                pgarr_add_int(&rows->p_time, p->time_ms);
                pgarr_add(&rows->p_payload, payload);
                pgarr_add_int(&rows->p_expires, engine_park_expires_at(slot->def, p->time_ms));
                free(payload);
            }
        }
        if (!slot->dirty)
            continue;
        const engine_instance_t *inst = &slot->inst;
        char *vars = json_dumps(inst->vars, JSON_NUMBERS);
        pgarr_add(&rows->i_process, slot->process);
        pgarr_add(&rows->i_key, slot->key);
        pgarr_add_int(&rows->i_version, inst->version);
        pgarr_add(&rows->i_state, slot->def->states[inst->state].name);
        pgarr_add(&rows->i_status, engine_status(slot->def, inst->state));
        pgarr_add_int(&rows->i_started, inst->started_ms);
        pgarr_add_int(&rows->i_entered, inst->state_entered_ms);
        add_deadline(&rows->i_deadline, inst->deadline_ms);
        add_deadline(&rows->i_pdeadline, inst->process_deadline_ms);
        add_deadline(&rows->i_next, engine_next_deadline(slot->def, inst));
        pgarr_add_bool(&rows->i_overdue, inst->overdue);
        pgarr_add_bool(&rows->i_poverdue, inst->process_overdue);
        pgarr_add_int(&rows->i_attempt, inst->attempt);
        pgarr_add(&rows->i_vars, vars);
        pgarr_add_int(&rows->i_applied, inst->events_applied);
        pgarr_add_int(&rows->i_step, inst->step);
        pgarr_add_int(&rows->i_token, inst->token);
        pgarr_add(&rows->i_holder, inst->lease_holder);
        add_deadline(&rows->i_lease_expires, inst->lease_expires_ms);
        add_deadline(&rows->i_lease_renewed, inst->lease_renewed_ms);
        pgarr_add_bool(&rows->i_resend, inst->resend_pending);
        free(vars);
    }
}

#define WRITE_HISTORY_INSERT                                                                       \
    "INSERT INTO steward.history (process, key, version, event_id, event_type, topic, "            \
    "  partition, \"offset\", event_time, from_state, to_state, outcome, replayed, detail, "       \
    "  replica, epoch, late_by_ms, entered_at, time_in_state_ms) "                                 \
    "SELECT p, k, v, e, t, tp, pa, o, steward.from_ms(et), fs, ts, oc, rp, d, $19, ep, lb, "       \
    "  steward.from_ms(en), st "                                                                   \
    "FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], "          \
    "  $7::int[], $8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[], "             \
    "  $13::bool[], $14::text[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[]) "     \
    "  WITH ORDINALITY AS u(p, k, v, e, t, tp, pa, o, et, fs, ts, oc, rp, d, ep, lb, en, st, n) "  \
    "ORDER BY n "

static const char write_history_sql[] = WRITE_HISTORY_INSERT;

/* The same, when some event is late: it also records its lateness on the
 * open deadline alert of the step it ends, measured from that alert's
 * deadline, before the batch resolves it. */
static const char write_late_history_sql[] =
    "WITH h AS (" WRITE_HISTORY_INSERT
    "RETURNING process, key, from_state, event_time, late_by_ms) "
    "UPDATE steward.alerts a "
    "SET late_by_ms = "
    "  greatest(1, steward.to_ms(h.event_time - a.deadline_at)) "
    "FROM h "
    "WHERE h.late_by_ms IS NOT NULL AND a.resolved_at IS NULL AND a.kind = 'deadline' "
    "  AND a.process = h.process AND a.key = h.key AND a.state = h.from_state "
    "  AND h.event_time > a.deadline_at";

static const char write_parked_sql[] =
    "INSERT INTO steward.parked (process, key, event_id, event_type, topic, partition, "
    "  \"offset\", event_time, payload, expires_at) "
    "SELECT p, k, e, t, tp, pa, o, steward.from_ms(et), pl::jsonb, steward.from_ms(ex) "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], "
    "  $7::bigint[], $8::bigint[], $9::text[], $10::bigint[]) "
    "  AS u(p, k, e, t, tp, pa, o, et, pl, ex)";

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
    "  vars = excluded.vars, events_applied = excluded.events_applied, step = excluded.step, "
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
    "FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[]) "
    "  AS u(t, p, n, w, e) "
    "WHERE o.consumer_group = $1 AND o.topic = u.t AND o.partition = u.p AND o.epoch = "
    "u.e";

/* Runs one bulk statement whose parameters are the finished arrays. */
static err_class_t bulk(batch_t *b, const char *what, const char *sql, pgarr_t *const *arrays,
                        size_t n_arrays, const char *const *extra, size_t n_extra,
                        long long *affected, char *errstr, size_t errstr_size)
{
    const char *params[24];
    err_class_t cls;

    if (!pgarr_params(arrays, n_arrays, params))
        return err_set(ERR_FATAL, errstr, errstr_size, "%s: out of memory", what);
    for (size_t i = 0; i < n_extra; i++)
        params[n_arrays + i] = extra[i];
    PGresult *res = db_query(b->store->conn, what, sql, (int) (n_arrays + n_extra), params, &cls,
                             errstr, errstr_size);
    if (res != NULL && affected != NULL)
        *affected = atoll(PQcmdTuples(res));
    PQclear(res);
    return cls;
}

static err_class_t batch_write(batch_t *b, char *errstr, size_t errstr_size)
{
    rows_t *r = &b->rows;
    const char *replica[1] = {b->store->replica};
    const char *group_replica[2] = {b->store->group, b->store->replica};
    err_class_t cls = ERR_OK;

    if (r->n_history > 0) {
        pgarr_t *cols[] = {&r->h_process,    &r->h_key,    &r->h_version,   &r->h_event_id,
                           &r->h_event_type, &r->h_topic,  &r->h_partition, &r->h_offset,
                           &r->h_time,       &r->h_from,   &r->h_to,        &r->h_outcome,
                           &r->h_replayed,   &r->h_detail, &r->h_epoch,     &r->h_late,
                           &r->h_entered,    &r->h_stayed};
        if ((cls = bulk(b, "writing history",
                        r->n_late > 0 ? write_late_history_sql : write_history_sql, cols, 18,
                        replica, 1, NULL, errstr, errstr_size)) != ERR_OK)
            return cls;
    }
    if (r->p_process.n > 0) {
        pgarr_t *cols[] = {&r->p_process, &r->p_key,       &r->p_event_id, &r->p_event_type,
                           &r->p_topic,   &r->p_partition, &r->p_offset,   &r->p_time,
                           &r->p_payload, &r->p_expires};
        if ((cls = bulk(b, "parking events", write_parked_sql, cols, 10, NULL, 0, NULL, errstr,
                        errstr_size)) != ERR_OK)
            return cls;
    }
    if (r->p_delete.n > 0) {
        pgarr_t *cols[] = {&r->p_delete};
        long long deleted = 0;
        if ((cls = bulk(b, "unparking events",
                        "DELETE FROM steward.parked WHERE id = ANY($1::bigint[])", cols, 1, NULL, 0,
                        &deleted, errstr, errstr_size)) != ERR_OK)
            return cls;
        /* The instance lock makes this impossible; if it happens anyway,
         * the batch must not commit on a stale view. */
        if ((size_t) deleted != r->p_delete.n)
            return err_set(ERR_CONFLICT, errstr, errstr_size,
                           "parked events vanished under the instance lock: retrying");
    }
    if (r->n_rejected > 0) {
        pgarr_t *cols[] = {&r->r_topic,  &r->r_partition, &r->r_offset, &r->r_process,
                           &r->r_reason, &r->r_detail,    &r->r_value,  &r->r_headers,
                           &r->r_time,   &r->r_epoch,     &r->r_key};
        if ((cls = bulk(b, "recording rejected messages", write_rejected_sql, cols, 11,
                        group_replica, 2, NULL, errstr, errstr_size)) != ERR_OK)
            return cls;
    }
    if (r->i_process.n > 0) {
        pgarr_t *cols[] = {&r->i_process,   &r->i_key,     &r->i_version,       &r->i_state,
                           &r->i_status,    &r->i_started, &r->i_entered,       &r->i_deadline,
                           &r->i_pdeadline, &r->i_next,    &r->i_overdue,       &r->i_poverdue,
                           &r->i_attempt,   &r->i_vars,    &r->i_applied,       &r->i_step,
                           &r->i_token,     &r->i_holder,  &r->i_lease_expires, &r->i_lease_renewed,
                           &r->i_resend};
        if ((cls = bulk(b, "writing instances", write_instances_sql, cols, 21, NULL, 0, NULL,
                        errstr, errstr_size)) != ERR_OK)
            return cls;
    }
    if ((cls = cmdq_write(b->store->conn, &b->commands, errstr, errstr_size)) != ERR_OK)
        return cls;

    if (!alert_batch_empty(&b->alerts)) {
        alert_counts_t counts = {0};
        if ((cls = alert_batch_write(b->store->conn, &b->alerts, b->store->routes, &counts, errstr,
                                     errstr_size)) != ERR_OK)
            return cls;
    }

    pgarr_t topics = {0}, partitions = {0}, next = {0}, watermark = {0}, epochs = {0};
    size_t live = 0;
    for (size_t i = 0; i < b->n_parts; i++) {
        if (b->parts[i].fenced)
            continue;
        pgarr_add(&topics, b->parts[i].topic);
        pgarr_add_int(&partitions, b->parts[i].partition);
        pgarr_add_int(&next, b->parts[i].next_offset);
        pgarr_add_int(&watermark, b->parts[i].watermark_ms);
        pgarr_add_int(&epochs, b->parts[i].epoch);
        live++;
    }
    if (live > 0) {
        pgarr_t *cols[] = {&topics, &partitions, &next, &watermark, &epochs};
        const char *group[1] = {b->store->group};
        long long updated = 0;
        /* The group is $1 here; bulk() appends extras after the arrays, so
         * the statement numbers its arrays from $2. */
        const char *params[6] = {group[0]};
        if (!pgarr_params(cols, 5, params + 1))
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        if (cls == ERR_OK) {
            PGresult *res = db_query(b->store->conn, "advancing offsets", write_offsets_sql, 6,
                                     params, &cls, errstr, errstr_size);
            if (res != NULL)
                updated = atoll(PQcmdTuples(res));
            PQclear(res);
            if (cls == ERR_OK && (size_t) updated != live)
                cls = err_set(ERR_CONFLICT, errstr, errstr_size,
                              "a partition changed owner during the batch: retrying");
        }
    }
    pgarr_free(&topics);
    pgarr_free(&partitions);
    pgarr_free(&next);
    pgarr_free(&watermark);
    pgarr_free(&epochs);
    return cls;
}

/* After COMMIT: count and log undeclared types, tell the reject hook. */
static void batch_committed(batch_t *b)
{
    int64_t now = clock_monotonic_ms();
    size_t item = 0;

    for (size_t m = 0; m < b->n_msgs; m++) {
        size_t first = item;
        while (item < b->n_items && b->items[item].msg == m)
            item++;
        if (msg_fenced(b, m) || b->msg_reason[m] != DECODE_OK || first != item)
            continue;
        const char *type = b->msg_type[m];
        if (metrics_count_unknown(b->msgs[m].topic, type, now, STORE_UNKNOWN_LOG_MS))
            LOG_WARN("no loaded definition declares this event type on this topic: ignored "
                     "(logged once a minute per type)",
                     "topic", b->msgs[m].topic, "type", type != NULL ? type : "(none)");
    }
    for (size_t i = 0; b->store->reject_hook != NULL && i < b->n_rejections; i++) {
        const struct rejection *r = &b->rejections[i];
        b->store->reject_hook(b->store->reject_arg, &b->msgs[r->msg], r->process,
                              decode_reason_name(r->reason), r->detail);
    }
}

void store_set_reject_hook(store_t *store, store_reject_hook_t hook, void *arg)
{
    store->reject_hook = hook;
    store->reject_arg = arg;
}

err_class_t store_refuse_message(store_t *store, const decode_input_t *msg, store_partition_t *part,
                                 const char *detail, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;

    if (PQstatus(store->conn) != CONNECTION_OK)
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "the database connection is lost");
    /* Twice at most: if even the rejected row is refused (its headers or
     * detail), record the message by its position alone. */
    for (int bare = 0; bare < 2; bare++) {
        batch_t b = {.store = store,
                     .msgs = msg,
                     .n_msgs = 1,
                     .parts = part,
                     .n_parts = 1,
                     .bare = bare != 0};
        b.decoded = calloc(1, sizeof *b.decoded);
        b.msg_reason = calloc(1, sizeof *b.msg_reason);
        b.msg_detail = calloc(1, sizeof *b.msg_detail);
        b.msg_part = calloc(1, sizeof *b.msg_part);
        b.msg_type = calloc(1, sizeof *b.msg_type);
        if (b.decoded == NULL || b.msg_reason == NULL || b.msg_detail == NULL ||
            b.msg_part == NULL || b.msg_type == NULL) {
            batch_free(&b);
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        }
        b.msg_reason[0] = DECODE_DATABASE_REFUSED;
        snprintf(b.msg_detail[0], sizeof b.msg_detail[0], "%s", detail);
        if ((cls = db_exec(store->conn, "starting the refusal", "BEGIN", 0, NULL, errstr,
                           errstr_size)) == ERR_OK &&
            (cls = batch_fence(&b, errstr, errstr_size)) == ERR_OK) {
            batch_collect(&b);
            if ((cls = batch_write(&b, errstr, errstr_size)) == ERR_OK)
                cls = db_exec(store->conn, "committing the refusal", "COMMIT", 0, NULL, errstr,
                              errstr_size);
        }
        if (cls == ERR_OK) {
            for (size_t i = 0; i < DECODE_N_REASONS; i++)
                metrics_add(&metrics.rejected[i], b.reject_counts[i]);
            metrics_add(&metrics.batches_committed, 1);
            batch_committed(&b);
        } else {
            db_rollback(store->conn);
        }
        batch_free(&b);
        if (cls != ERR_INVALID)
            break;
    }
    return cls;
}

err_class_t store_apply_batch(store_t *store, const decode_input_t *msgs, size_t n_msgs,
                              store_partition_t *parts, size_t n_parts, store_batch_stats_t *stats,
                              char *errstr, size_t errstr_size)
{
    batch_t b = {
        .store = store, .msgs = msgs, .n_msgs = n_msgs, .parts = parts, .n_parts = n_parts};
    err_class_t cls;

    memset(stats, 0, sizeof *stats);
    if (PQstatus(store->conn) != CONNECTION_OK)
        return err_set(ERR_TRANSIENT, errstr, errstr_size, "the database connection is lost");

    b.decoded = calloc(n_msgs + 1, sizeof *b.decoded);
    b.msg_reason = calloc(n_msgs + 1, sizeof *b.msg_reason);
    b.msg_detail = calloc(n_msgs + 1, sizeof *b.msg_detail);
    b.msg_part = calloc(n_msgs + 1, sizeof *b.msg_part);
    b.msg_type = calloc(n_msgs + 1, sizeof *b.msg_type);
    if (b.decoded == NULL || b.msg_reason == NULL || b.msg_detail == NULL || b.msg_part == NULL ||
        b.msg_type == NULL) {
        cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        goto done;
    }
    if ((cls = batch_route(&b, errstr, errstr_size)) != ERR_OK)
        goto done;

    if ((cls = db_exec(store->conn, "starting the batch", "BEGIN", 0, NULL, errstr, errstr_size)) !=
            ERR_OK ||
        (cls = batch_fence(&b, errstr, errstr_size)) != ERR_OK ||
        (cls = batch_slots(&b, errstr, errstr_size)) != ERR_OK)
        goto done;
    if (b.n_slots > 0 && ((cls = batch_lock_and_read(&b, errstr, errstr_size)) != ERR_OK ||
                          (cls = batch_read_seen(&b, errstr, errstr_size)) != ERR_OK ||
                          (cls = batch_read_parked(&b, errstr, errstr_size)) != ERR_OK))
        goto done;
    for (size_t i = 0; i < b.n_items; i++) {
        if (b.items[i].slot != NULL &&
            (cls = judge_item(&b, &b.items[i], errstr, errstr_size)) != ERR_OK)
            goto done;
    }
    batch_collect(&b);
    if ((cls = batch_write(&b, errstr, errstr_size)) != ERR_OK ||
        (cls = db_exec(store->conn, "committing the batch", "COMMIT", 0, NULL, errstr,
                       errstr_size)) != ERR_OK)
        goto done;

    /* Counted once committed, so retried batches are not counted twice. */
    for (size_t i = 0; i < ENGINE_N_OUTCOMES; i++)
        metrics_add(&metrics.outcomes[i], b.outcome_counts[i]);
    for (size_t i = 0; i < DECODE_N_REASONS; i++)
        metrics_add(&metrics.rejected[i], b.reject_counts[i]);
    metrics_add(&metrics.events_ignored, (long long) b.stats.ignored);
    metrics_add(&metrics.batches_committed, 1);
    for (size_t i = 0; i < b.n_stays; i++)
        metrics_observe_step(b.stays[i].process, b.stays[i].state, b.stays[i].ms);
    b.stats.judged = b.rows.n_history;
    b.stats.rejected = b.rows.n_rejected;
    *stats = b.stats;
    batch_committed(&b);

done:
    if (cls != ERR_OK)
        db_rollback(store->conn);
    batch_free(&b);
    return cls;
}
