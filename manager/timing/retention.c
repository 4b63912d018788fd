/*
 * retention - history partitions and batched deletes; see retention.h.
 */
#include "manager/timing/retention.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/log.h"
#include "definitions/duration.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Passes of all replicas and `steward prune` take this session lock. */
#define RETENTION_LOCK_KEY 0x5354455741524401LL
/* DDL on history waits at most this long for its lock, so intake's inserts
 * never queue behind a drop for longer; the next pass tries again. */
#define RETENTION_LOCK_TIMEOUT "2s"

static const char *const table_names[RETENTION_N_TABLES] = {
    "history", "rejected", "outbox", "alerts", "ownership_log", "commands", "instances"};

const char *retention_table_name(retention_table_t t)
{
    return t < RETENTION_N_TABLES ? table_names[t] : "?";
}

/* ---- the pure parts ----------------------------------------------------- */

/* 1970-01-01 was a Thursday: the first Monday is four days later. */
#define FIRST_MONDAY_MS ((int64_t) 4 * 86400000)

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t retention_week_start(int64_t t_ms)
{
    return floor_div(t_ms - FIRST_MONDAY_MS, RETENTION_WEEK_MS) * RETENTION_WEEK_MS +
           FIRST_MONDAY_MS;
}

char *retention_week_name(int64_t start_ms, char *buf, size_t buf_size)
{
    time_t secs = (time_t) floor_div(start_ms, 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, buf_size, "history_p%04d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    return buf;
}

bool retention_partition_expired(const retention_partition_t *p, int64_t now_ms, int64_t keep_ms)
{
    return keep_ms > 0 && !p->is_default && p->has_upper && p->upper_ms <= now_ms - keep_ms;
}

size_t retention_weeks_to_create(const retention_partition_t *parts, size_t n, int64_t now_ms,
                                 int64_t *starts)
{
    size_t count = 0;
    int64_t first = retention_week_start(now_ms);
    for (int k = 0; k <= RETENTION_AHEAD; k++) {
        int64_t lo = first + k * RETENTION_WEEK_MS, hi = lo + RETENTION_WEEK_MS;
        bool taken = false;
        for (size_t i = 0; i < n && !taken; i++) {
            const retention_partition_t *p = &parts[i];
            if (p->is_default)
                continue;
            taken = (!p->has_lower || p->lower_ms < hi) && (!p->has_upper || p->upper_ms > lo);
        }
        if (!taken)
            starts[count++] = lo;
    }
    return count;
}

/* ---- results ------------------------------------------------------------ */

static bool add_name(char ***names, size_t *n, const char *name)
{
    char **grown = realloc(*names, (*n + 1) * sizeof *grown);
    if (grown == NULL)
        return false;
    *names = grown;
    if ((grown[*n] = strdup(name)) == NULL)
        return false;
    (*n)++;
    return true;
}

void retention_result_clear(retention_result_t *r)
{
    for (size_t i = 0; i < r->n_dropped; i++)
        free(r->dropped[i]);
    for (size_t i = 0; i < r->n_created; i++)
        free(r->created[i]);
    free(r->dropped);
    free(r->created);
    memset(r, 0, sizeof *r);
}

static json_t *names_json(char *const *names, size_t n)
{
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, json_string(names[i]));
    return list;
}

json_t *retention_result_json(const retention_result_t *r, const retention_config_t *cfg)
{
    json_t *tables = json_array();
    for (int t = 0; t < RETENTION_N_TABLES; t++) {
        char keep[32];
        json_t *row = json_pack(
            "{s:s, s:o, s:I}", "table", table_names[t], "keep",
            cfg->keep_ms[t] > 0 ? json_string(duration_format(cfg->keep_ms[t], keep, sizeof keep))
                                : json_null(),
            "rows", (json_int_t) r->rows[t]);
        if (t == RETENTION_HISTORY) {
            json_object_set_new(row, "partitions_dropped", names_json(r->dropped, r->n_dropped));
            json_object_set_new(row, "partitions_created", names_json(r->created, r->n_created));
        }
        json_array_append_new(tables, row);
    }
    return json_pack("{s:b, s:I, s:o}", "dry_run", r->dry_run, "now_ms", (json_int_t) r->now_ms,
                     "tables", tables);
}

/* ---- history partitions ------------------------------------------------- */

/* Bounds come back through timestamptz in this session, so whatever
 * DateStyle or TimeZone printed them reads them back. */
static const char list_partitions_sql[] =
    "SELECT c.relname, b.bound = 'DEFAULT', "
    "  steward.to_ms(substring(b.bound FROM 'FROM \\(''([^'']*)''\\)')::timestamptz), "
    "  steward.to_ms(substring(b.bound FROM 'TO \\(''([^'']*)''\\)')::timestamptz) "
    "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b "
    "WHERE i.inhparent = 'steward.history'::regclass ORDER BY c.relname";

static err_class_t list_partitions(PGconn *conn, retention_partition_t **out, size_t *n,
                                   char *errstr, size_t errstr_size)
{
    err_class_t cls;
    PGresult *res = db_query(conn, "listing history partitions", list_partitions_sql, 0, NULL, &cls,
                             errstr, errstr_size);
    *out = NULL;
    *n = 0;
    if (res == NULL)
        return cls;
    int rows = PQntuples(res);
    retention_partition_t *parts = calloc((size_t) rows + 1, sizeof *parts);
    if (parts == NULL) {
        PQclear(res);
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
    for (int i = 0; i < rows; i++) {
        retention_partition_t *p = &parts[i];
        snprintf(p->name, sizeof p->name, "%s", PQgetvalue(res, i, 0));
        p->is_default = strcmp(PQgetvalue(res, i, 1), "t") == 0;
        p->has_lower = !PQgetisnull(res, i, 2);
        p->has_upper = !PQgetisnull(res, i, 3);
        p->lower_ms = p->has_lower ? strtoll(PQgetvalue(res, i, 2), NULL, 10) : 0;
        p->upper_ms = p->has_upper ? strtoll(PQgetvalue(res, i, 3), NULL, 10) : 0;
    }
    PQclear(res);
    *out = parts;
    *n = (size_t) rows;
    return ERR_OK;
}

/*
 * Creates one week through steward.history_week_create() (migration 0011),
 * which runs with the schema owner's rights: the rows the DEFAULT partition
 * took for it move into the new table before it is attached, all in this
 * one statement's transaction.
 */
static err_class_t create_week(PGconn *conn, int64_t start_ms, char *name, size_t name_size,
                               char *errstr, size_t errstr_size)
{
    char lo[32], hi[32];
    retention_week_name(start_ms, name, name_size);
    snprintf(lo, sizeof lo, "%" PRId64, start_ms);
    snprintf(hi, sizeof hi, "%" PRId64, start_ms + RETENTION_WEEK_MS);
    const char *params[3] = {name, lo, hi};
    return db_exec(conn, "creating a history partition",
                   "SELECT steward.history_week_create($1, steward.from_ms($2::bigint), "
                   "  steward.from_ms($3::bigint))",
                   3, params, errstr, errstr_size);
}

static long long count_rows(PGconn *conn, const char *name, err_class_t *cls, char *errstr,
                            size_t errstr_size)
{
    char *ident = PQescapeIdentifier(conn, name, strlen(name));
    char *sql = NULL;
    long long n = -1;
    if (ident == NULL || asprintf(&sql, "SELECT count(*) FROM steward.%s", ident) < 0) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    } else {
        PGresult *res =
            db_query(conn, "counting a history partition", sql, 0, NULL, cls, errstr, errstr_size);
        if (res != NULL)
            n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
    }
    PQfreemem(ident);
    free(sql);
    return n;
}

/* ---- deletes ------------------------------------------------------------ */

/*
 * What each table loses, $1 the cutoff in ms. An outbox row goes only once
 * delivered or failed; an alert only once resolved and no outbox row
 * refers to it (the outbox goes first in a pass). The DEFAULT partition of
 * history has no index on recorded_at; it is normally empty. History is
 * append-only for every role but the owner (migration 0019), so its rows
 * go through steward.history_prune(), which runs as the owner and keeps
 * the last hour whatever the cutoff.
 */
typedef struct doomed {
    retention_table_t table;
    const char *count_sql;  /* alerts: $2 the outbox's cutoff, NULL when it keeps all */
    const char *delete_sql; /* $2 the batch size; returns nothing, or the count deleted */
} doomed_t;

#define CUTOFF "steward.from_ms($1::bigint)"
/* Sent, or cancelled unsent (each part matches an index). */
#define COMMAND_DONE                                                                               \
    "((sent_at IS NOT NULL AND sent_at < " CUTOFF ") OR "                                          \
    "(sent_at IS NULL AND cancelled_at IS NOT NULL AND cancelled_at < " CUTOFF "))"
/* Finished (instances_finished, migration 0015), with nothing open on it. */
#define INSTANCE_DONE                                                                              \
    "i.status <> 'active' AND i.state_entered_at < " CUTOFF " AND NOT EXISTS ("                    \
    "  SELECT 1 FROM steward.alerts a WHERE a.process = i.process AND a.key = i.key "              \
    "    AND a.resolved_at IS NULL) AND NOT EXISTS ("                                              \
    "  SELECT 1 FROM steward.commands c WHERE c.process = i.process AND c.key = i.key "            \
    "    AND c.sent_at IS NULL AND c.cancelled_at IS NULL)"
#define NEWER_ENTRY                                                                                \
    "EXISTS (SELECT 1 FROM steward.ownership_log n WHERE n.consumer_group = l.consumer_group "     \
    "  AND n.topic = l.topic AND n.partition = l.partition AND n.id > l.id)"

static const doomed_t doomed[] = {
    {RETENTION_HISTORY, "SELECT count(*) FROM steward.history_default WHERE recorded_at < " CUTOFF,
     "SELECT steward.history_prune(" CUTOFF ", $2::int)"},
    {RETENTION_REJECTED, "SELECT count(*) FROM steward.rejected WHERE recorded_at < " CUTOFF,
     "DELETE FROM steward.rejected WHERE id IN ("
     "  SELECT id FROM steward.rejected WHERE recorded_at < " CUTOFF
     "  LIMIT $2 FOR UPDATE SKIP LOCKED)"},
    {RETENTION_OUTBOX,
     "SELECT count(*) FROM steward.outbox WHERE (delivered_at IS NOT NULL OR failed_at IS NOT "
     "NULL) AND coalesce(delivered_at, failed_at) < " CUTOFF,
     "DELETE FROM steward.outbox WHERE id IN ("
     "  SELECT id FROM steward.outbox WHERE (delivered_at IS NOT NULL OR failed_at IS NOT NULL) "
     "    AND coalesce(delivered_at, failed_at) < " CUTOFF " LIMIT $2 FOR UPDATE SKIP LOCKED)"},
    {RETENTION_ALERTS,
     /* Counted as the pass finds them once the outbox's old rows are gone,
      * so that a dry run says what the real one removes. */
     "SELECT count(*) FROM steward.alerts a WHERE a.resolved_at IS NOT NULL AND a.resolved_at "
     "< " CUTOFF "  AND NOT EXISTS (SELECT 1 FROM steward.outbox o WHERE o.alert_id = a.id "
     "    AND NOT coalesce(coalesce(o.delivered_at, o.failed_at) "
     "      < steward.from_ms($2::bigint), false))",
     "DELETE FROM steward.alerts WHERE id IN ("
     "  SELECT a.id FROM steward.alerts a WHERE a.resolved_at IS NOT NULL AND a.resolved_at "
     "< " CUTOFF "    AND NOT EXISTS (SELECT 1 FROM steward.outbox o WHERE o.alert_id = a.id) "
     "  LIMIT $2 FOR UPDATE SKIP LOCKED)"},
    /* Each partition's latest entry stays, however old: the scheduler reads
     * it to tell whether the partition has a live owner. */
    {RETENTION_OWNERSHIP_LOG,
     "SELECT count(*) FROM steward.ownership_log l WHERE l.at < " CUTOFF " AND " NEWER_ENTRY,
     "DELETE FROM steward.ownership_log WHERE id IN ("
     "  SELECT l.id FROM steward.ownership_log l WHERE l.at < " CUTOFF " AND " NEWER_ENTRY
     " LIMIT $2 FOR UPDATE SKIP LOCKED)"},
    /* A command goes once sent or cancelled; an unsent one stays however
     * old. */
    {RETENTION_COMMANDS, "SELECT count(*) FROM steward.commands WHERE " COMMAND_DONE,
     "DELETE FROM steward.commands WHERE id IN ("
     "  SELECT id FROM steward.commands WHERE " COMMAND_DONE " LIMIT $2 FOR UPDATE SKIP LOCKED)"},
    /* After the commands and alerts: what still holds an instance is what
     * those passes kept. SKIP LOCKED passes over a row an intake batch or
     * an operator's action holds (both read it FOR UPDATE); when the
     * delete wins, they find no instance, as for a key never seen. */
    {RETENTION_INSTANCES, "SELECT count(*) FROM steward.instances i WHERE " INSTANCE_DONE,
     "DELETE FROM steward.instances WHERE (process, key) IN ("
     "  SELECT i.process, i.key FROM steward.instances i WHERE " INSTANCE_DONE
     "  LIMIT $2 FOR UPDATE OF i SKIP LOCKED)"},
};

static err_class_t remove_rows(PGconn *conn, const doomed_t *d, int64_t cutoff_ms,
                               int64_t outbox_cutoff_ms, bool dry_run, volatile sig_atomic_t *stop,
                               long long *rows, char *errstr, size_t errstr_size)
{
    char cutoff[32], batch[16], outbox_cutoff[32], what[96];
    const char *params[2] = {cutoff, batch};
    err_class_t cls = ERR_OK;
    snprintf(cutoff, sizeof cutoff, "%" PRId64, cutoff_ms);
    snprintf(batch, sizeof batch, "%d", RETENTION_BATCH);
    snprintf(outbox_cutoff, sizeof outbox_cutoff, "%" PRId64, outbox_cutoff_ms);

    if (dry_run) {
        const char *count_params[2] = {cutoff, outbox_cutoff_ms != 0 ? outbox_cutoff : NULL};
        snprintf(what, sizeof what, "counting old rows of steward.%s", table_names[d->table]);
        PGresult *res = db_query(conn, what, d->count_sql, d->table == RETENTION_ALERTS ? 2 : 1,
                                 count_params, &cls, errstr, errstr_size);
        if (res != NULL)
            *rows += strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return cls;
    }
    snprintf(what, sizeof what, "deleting old rows of steward.%s", table_names[d->table]);
    for (;;) {
        PGresult *res = db_query(conn, what, d->delete_sql, 2, params, &cls, errstr, errstr_size);
        if (res == NULL)
            return cls;
        long long n = strtoll(PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 0)
                                                                     : PQcmdTuples(res),
                              NULL, 10);
        PQclear(res);
        *rows += n;
        if (n < RETENTION_BATCH || (stop != NULL && *stop))
            return ERR_OK;
    }
}

/* ---- the pass ----------------------------------------------------------- */

static err_class_t history_partitions(PGconn *conn, const retention_config_t *cfg, int64_t now_ms,
                                      bool dry_run, retention_result_t *out, char *errstr,
                                      size_t errstr_size)
{
    retention_partition_t *parts = NULL;
    size_t n = 0;
    err_class_t cls = list_partitions(conn, &parts, &n, errstr, errstr_size);
    if (cls != ERR_OK)
        return cls;

    int64_t starts[RETENTION_AHEAD + 1];
    size_t n_new = retention_weeks_to_create(parts, n, now_ms, starts);
    for (size_t i = 0; i < n_new && cls == ERR_OK; i++) {
        char name[64];
        if (dry_run)
            retention_week_name(starts[i], name, sizeof name);
        else
            cls = create_week(conn, starts[i], name, sizeof name, errstr, errstr_size);
        if (cls == ERR_OK && !add_name(&out->created, &out->n_created, name))
            cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }

    int64_t keep = cfg->keep_ms[RETENTION_HISTORY];
    for (size_t i = 0; i < n && cls == ERR_OK; i++) {
        if (!retention_partition_expired(&parts[i], now_ms, keep))
            continue;
        long long rows = count_rows(conn, parts[i].name, &cls, errstr, errstr_size);
        if (cls == ERR_OK && !dry_run)
            cls = db_exec(conn, "dropping a history partition",
                          "SELECT steward.history_week_drop($1)", 1,
                          (const char *const[]){parts[i].name}, errstr, errstr_size);
        if (cls == ERR_OK) {
            out->rows[RETENTION_HISTORY] += rows;
            if (!add_name(&out->dropped, &out->n_dropped, parts[i].name))
                cls = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        }
    }
    free(parts);
    return cls;
}

err_class_t retention_pass(PGconn *conn, const retention_config_t *cfg, int64_t now_ms,
                           bool dry_run, bool wait, volatile sig_atomic_t *stop, bool *skipped,
                           retention_result_t *out, char *errstr, size_t errstr_size)
{
    char key[32];
    const char *params[1] = {key};
    err_class_t cls;
    PGresult *res;

    memset(out, 0, sizeof *out);
    out->dry_run = dry_run;
    out->now_ms = now_ms;
    *skipped = false;
    snprintf(key, sizeof key, "%lld", RETENTION_LOCK_KEY);
    res = db_query(conn, "taking the retention lock",
                   wait ? "SELECT pg_advisory_lock($1::bigint), true"
                        : "SELECT true, pg_try_advisory_lock($1::bigint)",
                   1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    bool locked = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    if (!locked) {
        *skipped = true;
        return ERR_OK;
    }
    cls = db_exec(conn, "bounding lock waits", "SET lock_timeout = '" RETENTION_LOCK_TIMEOUT "'", 0,
                  NULL, errstr, errstr_size);
    if (cls == ERR_OK)
        cls = history_partitions(conn, cfg, now_ms, dry_run, out, errstr, errstr_size);
    for (size_t i = 0; i < sizeof doomed / sizeof doomed[0] && cls == ERR_OK; i++) {
        int64_t keep = cfg->keep_ms[doomed[i].table];
        if (stop != NULL && *stop)
            break;
        int64_t outbox_keep = cfg->keep_ms[RETENTION_OUTBOX];
        if (keep > 0)
            cls = remove_rows(conn, &doomed[i], now_ms - keep,
                              outbox_keep > 0 ? now_ms - outbox_keep : 0, dry_run, stop,
                              &out->rows[doomed[i].table], errstr, errstr_size);
    }
    db_rollback(conn);
    if (PQstatus(conn) == CONNECTION_OK) {
        PQclear(PQexec(conn, "RESET lock_timeout"));
        PQclear(PQexecParams(conn, "SELECT pg_advisory_unlock($1::bigint)", 1, NULL, params, NULL,
                             NULL, 0));
    }
    return cls;
}

/* ---- the daemon's thread ------------------------------------------------ */

static void log_result(const retention_result_t *r)
{
    long long total = 0;
    for (int t = 0; t < RETENTION_N_TABLES; t++)
        total += r->rows[t];
    if (total == 0 && r->n_dropped == 0 && r->n_created == 0)
        return;
    char counts[RETENTION_N_TABLES][24], dropped[16], created[16];
    for (int t = 0; t < RETENTION_N_TABLES; t++)
        snprintf(counts[t], sizeof counts[t], "%lld", r->rows[t]);
    snprintf(dropped, sizeof dropped, "%zu", r->n_dropped);
    snprintf(created, sizeof created, "%zu", r->n_created);
    LOG_INFO("retention pass", "history", counts[RETENTION_HISTORY], "rejected",
             counts[RETENTION_REJECTED], "outbox", counts[RETENTION_OUTBOX], "alerts",
             counts[RETENTION_ALERTS], "ownership_log", counts[RETENTION_OWNERSHIP_LOG], "commands",
             counts[RETENTION_COMMANDS], "instances", counts[RETENTION_INSTANCES],
             "partitions_dropped", dropped, "partitions_created", created);
}

void *retention_thread_main(void *arg)
{
    const retention_loop_t *loop = arg;
    PGconn *conn = NULL;
    char errstr[1024];
    int64_t interval = loop->interval_ms;

    if (interval <= 0)
        return NULL;
    retention_config_t cfg = loop->keep;
    while (!*loop->stop) {
        if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
            if (conn != NULL)
                PQfinish(conn);
            conn = db_connect(loop->database, "steward retention", errstr, sizeof errstr);
        }
        if (conn == NULL) {
            LOG_LIMITED(LOG_LEVEL_WARN, "retention-connect", 60000,
                        "retention cannot connect; retrying", "error", errstr);
        } else {
            retention_result_t result;
            bool skipped;
            err_class_t cls = retention_pass(conn, &cfg, clock_wall_ms(), false, false, loop->stop,
                                             &skipped, &result, errstr, sizeof errstr);
            log_result(&result);
            if (cls != ERR_OK)
                LOG_LIMITED(LOG_LEVEL_WARN, "retention-pass", 60000,
                            "retention pass failed; retrying next interval", "error", errstr,
                            "class", err_class_name(cls));
            retention_result_clear(&result);
        }
        /* After a failure, try again sooner than a whole interval. */
        int64_t wait = conn == NULL && interval > 10000 ? 10000 : interval;
        for (int64_t slept = 0; slept < wait && !*loop->stop; slept += 100)
            usleep(100 * 1000);
    }
    if (conn != NULL)
        PQfinish(conn);
    return NULL;
}
