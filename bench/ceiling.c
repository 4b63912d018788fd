/*
 * steward-ceiling - the write ceiling for bench/throughput: how fast the
 * same PostgreSQL database absorbs the rows a `steward run` wrote, written
 * by bulk SQL alone (no Kafka, no decoding, no locks, no reads, no judging).
 *
 * It reads what steward left in steward.history and steward.instances and
 * rebuilds steward's transactions from them: every history row carries
 * recorded_at = now() of the transaction that wrote it, so rows sharing
 * (recorded_at, replica) are one batch. Each batch is then replayed into
 * scratch tables made LIKE the real ones (INCLUDING ALL: the same columns,
 * defaults, checks and every index, partial ones included; plus the
 * instances' foreign key to steward.definitions), as
 *
 *   BEGIN
 *   INSERT INTO <scratch>.history ... FROM unnest(15 arrays) WITH ORDINALITY
 *   INSERT INTO <scratch>.instances ... FROM unnest(15 arrays)
 *     ON CONFLICT (process, key) DO UPDATE ...      (one row per instance the
 *                                                     batch started or moved)
 *   COMMIT
 *
 * with steward's own statement texts (manager/intake/store.c, write_history_sql
 * and write_instances_sql), its own array encoding (common/pgarr.c) and
 * the same PQexecParams round trips. The arrays are built before the clock
 * starts, so the timed part is the database's work plus the wire, nothing
 * else: an upper bound for steward's write path.
 *
 * CONNECTIONS (default 1) replays on that many connections at once, as
 * steward commits with intake.transactions: a batch goes to the connection
 * of its first event's partition modulo CONNECTIONS, so a partition's
 * batches keep their order on one connection, as they do in one of
 * steward's lanes, and the connections' batches run side by side.
 *
 * What it leaves out, each of which only makes the ceiling higher: the
 * fence (SELECT ... FOR UPDATE on offsets), the advisory locks, reading
 * instances, judged ids and parked events, the parked and offsets writes.
 *
 * usage: steward-ceiling CONNINFO [SCHEMA [CONNECTIONS]]
 * Prints key=value lines on stdout (for the script); exits 0 on success.
 */
#include "common/pgarr.h"
#include "manager/intake/rows.h"
#include "manager/intake/store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_HIST_COLS ROWS_HISTORY_COLUMNS
#define N_INST_COLS ROWS_INSTANCES_COLUMNS
#define N_VARS_COL  13 /* vars, in the order of ROWS_INSTANCES */

static PGconn *conn;

static void die(const char *what, PGresult *res)
{
    fprintf(stderr, "steward-ceiling: %s: %s", what,
            res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(conn));
    PQclear(res);
    PQfinish(conn);
    exit(1);
}

static PGresult *run(const char *what, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        die(what, res);
    return res;
}

/* Simple protocol: may hold several statements (the DDL). */
static void sql_exec(const char *what, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        die(what, res);
    PQclear(res);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fprintf(stderr, "steward-ceiling: out of memory\n");
        exit(1);
    }
    return d;
}

/* A finished array literal, copied (pgarr_text is NULL after an allocation failed). */
static char *array_text(pgarr_t *arr)
{
    const char *text = pgarr_text(arr);
    if (text == NULL) {
        fprintf(stderr, "steward-ceiling: out of memory\n");
        exit(1);
    }
    return xstrdup(text);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n + 1, size);
    if (p == NULL) {
        fprintf(stderr, "steward-ceiling: out of memory\n");
        exit(1);
    }
    return p;
}

/* One final instance row, as text columns in write order (NULL = SQL NULL). */
typedef struct inst {
    char *col[N_INST_COLS];
    bool vars_sent;  /* an upsert with its vars was replayed */
    long last_batch; /* the batch that last queued it, to queue it once per batch */
} inst_t;

static int index_compare(const void *a, const void *b)
{
    size_t x = *(const size_t *) a, y = *(const size_t *) b;
    return x < y ? -1 : x > y;
}

static int inst_compare(const void *a, const void *b)
{
    const inst_t *x = a, *y = b;
    int c = strcmp(x->col[0], y->col[0]);
    return c != 0 ? c : strcmp(x->col[1], y->col[1]);
}

/* One batch: its statements' parameters, finished before timing. */
typedef struct batch {
    char *hist[N_HIST_COLS + 1]; /* + replica */
    char *inst[N_INST_COLS];
    size_t n_history, n_events, n_instances;
    size_t connection; /* which of the replaying connections writes it */
} batch_t;

#define MAX_CONNECTIONS 16

/* One replaying connection: its batches, in order, on a thread of its own. */
typedef struct replayer {
    PGconn *conn;
    size_t index;
    const batch_t *batches;
    size_t n_batches;
    const char *hsql, *isql;
    char error[512]; /* "" when every batch committed */
} replayer_t;

/* One statement on the replayer's connection; false with the error kept. */
static bool replay_step(replayer_t *r, const char *what, const char *sql, int nparams,
                        const char *const *params)
{
    PGresult *res = PQexecParams(r->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        snprintf(r->error, sizeof r->error, "%s: %s", what, PQresultErrorMessage(res));
    PQclear(res);
    return ok;
}

static void *replay(void *arg)
{
    replayer_t *r = arg;
    for (size_t i = 0; i < r->n_batches && r->error[0] == '\0'; i++) {
        const batch_t *b = &r->batches[i];
        if (b->connection != r->index)
            continue;
        if (replay_step(r, "BEGIN", "BEGIN", 0, NULL) && /* as db_exec does */
            replay_step(r, "writing history", r->hsql, N_HIST_COLS + 1,
                        (const char *const *) b->hist) &&
            (b->n_instances == 0 || replay_step(r, "writing instances", r->isql, N_INST_COLS,
                                                (const char *const *) b->inst)))
            replay_step(r, "COMMIT", "COMMIT", 0, NULL);
    }
    return NULL;
}

/* A copy of sql with every "INTO steward.TABLE " written into schema
 * instead. */
static char *on_schema(const char *sql, const char *schema)
{
    size_t cap = strlen(sql) * 2 + 256, len = 0;
    char *out = xcalloc(cap, 1);
    const char *from = "INTO steward.";
    while (*sql != '\0') {
        if (strncmp(sql, from, strlen(from)) == 0) {
            len += (size_t) snprintf(out + len, cap - len, "INTO %s.", schema);
            sql += strlen(from);
        } else {
            out[len++] = *sql++;
        }
    }
    return out;
}

/* The statements of manager/intake/store.c (store_sql_write_*()), on the scratch
 * schema: the same text, parameters and encoding. */
static char *history_sql(const char *schema)
{
    return on_schema(store_sql_write_history(), schema);
}

static char *instances_sql(const char *schema)
{
    return on_schema(store_sql_write_instances(), schema);
}

static const char *value(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4 || strcmp(argv[1], "--help") == 0) {
        fputs("usage: steward-ceiling CONNINFO [SCHEMA [CONNECTIONS]]\n"
              "Replays the history and instance rows of a finished `steward run` (read\n"
              "from steward.*) into scratch tables shaped like the real ones, in the\n"
              "same transactions, with steward's statements, on CONNECTIONS connections\n"
              "at once (default 1); prints the time.\n",
              argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *schema = argc >= 3 ? argv[2] : "bench_ceiling";
    char *conns_end = NULL;
    long n_conns = argc == 4 ? strtol(argv[3], &conns_end, 10) : 1;
    if (argc == 4 && (*conns_end != '\0' || n_conns < 1 || n_conns > MAX_CONNECTIONS)) {
        fprintf(stderr, "steward-ceiling: CONNECTIONS is a whole number from 1 to %d, not '%s'\n",
                MAX_CONNECTIONS, argv[3]);
        return 2;
    }
    const char *keys[] = {"dbname", "application_name", NULL};
    const char *vals[] = {argv[1], "steward-ceiling", NULL};
    conn = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(conn) != CONNECTION_OK)
        die("connecting", NULL);
    sql_exec("quiet", "SET client_min_messages = warning");

    /* ---- the scratch tables: the real ones' shape and indexes ---------- */
    char *ddl = NULL;
    if (asprintf(&ddl,
                 "DROP SCHEMA IF EXISTS %1$s CASCADE; CREATE SCHEMA %1$s; "
                 "CREATE TABLE %1$s.history (LIKE steward.history INCLUDING ALL); "
                 "CREATE SEQUENCE %1$s.history_id_seq OWNED BY %1$s.history.id; "
                 "ALTER TABLE %1$s.history ALTER id SET DEFAULT nextval('%1$s.history_id_seq'); "
                 "CREATE TABLE %1$s.instances (LIKE steward.instances INCLUDING ALL); "
                 "ALTER TABLE %1$s.instances ADD FOREIGN KEY (process, version) "
                 "  REFERENCES steward.definitions (process, version)",
                 schema) < 0)
        die("out of memory", NULL);
    sql_exec("creating the scratch tables", ddl);
    free(ddl);

    /* ---- steward's final instance rows, by (process, key) -------------- */
    PGresult *res = run("reading instances",
                        "SELECT process, key, version, state, status, "
                        "  steward.to_ms(started_at), "
                        "  steward.to_ms(state_entered_at), "
                        "  steward.to_ms(deadline_at), "
                        "  steward.to_ms(process_deadline_at), "
                        "  steward.to_ms(next_deadline_at), "
                        "  overdue, process_overdue, attempt, vars::text, events_applied, "
                        "  step, token, lease_holder, steward.to_ms(lease_expires_at), "
                        "  steward.to_ms(lease_renewed_at), resend_pending "
                        "FROM steward.instances",
                        0, NULL);
    size_t n_inst = (size_t) PQntuples(res);
    inst_t *insts = xcalloc(n_inst, sizeof *insts);
    for (size_t i = 0; i < n_inst; i++) {
        for (int c = 0; c < N_INST_COLS; c++) {
            const char *v = value(res, (int) i, c);
            insts[i].col[c] = v != NULL ? xstrdup(v) : NULL;
        }
        insts[i].last_batch = -1;
    }
    PQclear(res);
    qsort(insts, n_inst, sizeof *insts, inst_compare);

    /* ---- steward's history rows, in its transactions -------------------- */
    res = run("reading history",
              "SELECT recorded_at, replica, process, key, version, event_id, event_type, topic, "
              "  partition, \"offset\", steward.to_ms(event_time), "
              "  from_state, to_state, outcome, replayed, detail, epoch, late_by_ms, "
              "  steward.to_ms(entered_at), time_in_state_ms "
              "FROM steward.history ORDER BY recorded_at, replica, id",
              0, NULL);
    int n_rows = PQntuples(res);
    batch_t *batches = xcalloc((size_t) n_rows, sizeof *batches);
    size_t n_batches = 0, total_history = 0, total_events = 0, total_upserts = 0;
    size_t *touched = xcalloc(n_inst, sizeof *touched);
    for (int row = 0; row < n_rows;) {
        int end = row;
        while (end < n_rows && strcmp(PQgetvalue(res, end, 0), PQgetvalue(res, row, 0)) == 0 &&
               strcmp(PQgetvalue(res, end, 1), PQgetvalue(res, row, 1)) == 0)
            end++;
        batch_t *b = &batches[n_batches];
        pgarr_t cols[N_HIST_COLS] = {{0}};
        size_t n_touched = 0;
        for (int r = row; r < end; r++) {
            for (int c = 0; c < N_HIST_COLS; c++)
                pgarr_add(&cols[c], value(res, r, c + 2));
            b->n_history++;
            const char *outcome = PQgetvalue(res, r, 13);
            bool replayed = strcmp(PQgetvalue(res, r, 14), "t") == 0;
            /* an event read from Kafka has exactly one unreplayed row */
            if (!replayed)
                b->n_events++;
            /* steward writes an instance once per batch that started or moved it */
            if (strcmp(outcome, "started") == 0 || strcmp(outcome, "advanced") == 0) {
                inst_t probe = {.col = {PQgetvalue(res, r, 2), PQgetvalue(res, r, 3)}};
                inst_t *in = bsearch(&probe, insts, n_inst, sizeof *insts, inst_compare);
                if (in != NULL && in->last_batch != (long) n_batches) {
                    in->last_batch = (long) n_batches;
                    touched[n_touched++] = (size_t) (in - insts);
                }
            }
        }
        for (int c = 0; c < N_HIST_COLS; c++) {
            b->hist[c] = array_text(&cols[c]);
            pgarr_free(&cols[c]);
        }
        b->hist[N_HIST_COLS] = xstrdup(PQgetvalue(res, row, 1));
        long partition = atol(PQgetvalue(res, row, 8));
        b->connection = (size_t) (((partition % n_conns) + n_conns) % n_conns);

        /* in (process, key) order, as steward's sorted slots */
        pgarr_t icols[N_INST_COLS] = {{0}};
        qsort(touched, n_touched, sizeof *touched, index_compare);
        for (size_t i = 0; i < n_touched; i++) {
            inst_t *in = &insts[touched[i]];
            for (int c = 0; c < N_INST_COLS; c++) {
                /* steward sends only what a batch captured into vars and
                 * merges it: the final vars once, then none, is no more
                 * than it sends. */
                bool vars = c == N_VARS_COL;
                pgarr_add(&icols[c], vars && in->vars_sent ? "{}" : in->col[c]);
            }
            in->vars_sent = true;
        }
        for (int c = 0; c < N_INST_COLS; c++) {
            b->inst[c] = n_touched > 0 ? array_text(&icols[c]) : NULL;
            pgarr_free(&icols[c]);
        }
        b->n_instances = n_touched;
        total_history += b->n_history;
        total_events += b->n_events;
        total_upserts += b->n_instances;
        n_batches++;
        row = end;
    }
    PQclear(res);
    free(touched);

    char *hsql = history_sql(schema), *isql = instances_sql(schema);
    if (hsql == NULL || isql == NULL)
        die("out of memory", NULL);

    /* ---- the timed part ----------------------------------------------- */
    replayer_t replayers[MAX_CONNECTIONS] = {{0}};
    pthread_t threads[MAX_CONNECTIONS];
    for (long c = 0; c < n_conns; c++) {
        replayer_t *r = &replayers[c];
        *r = (replayer_t){.conn = PQconnectdbParams(keys, vals, 1),
                          .index = (size_t) c,
                          .batches = batches,
                          .n_batches = n_batches,
                          .hsql = hsql,
                          .isql = isql};
        if (PQstatus(r->conn) != CONNECTION_OK) {
            fprintf(stderr, "steward-ceiling: connecting: %s", PQerrorMessage(r->conn));
            return 1;
        }
    }
    double t0 = now_s();
    for (long c = 0; c < n_conns; c++) {
        if (pthread_create(&threads[c], NULL, replay, &replayers[c]) != 0) {
            fprintf(stderr, "steward-ceiling: cannot start a replaying thread\n");
            return 1;
        }
    }
    for (long c = 0; c < n_conns; c++)
        pthread_join(threads[c], NULL);
    double seconds = now_s() - t0;
    for (long c = 0; c < n_conns; c++) {
        PQfinish(replayers[c].conn);
        if (replayers[c].error[0] != '\0') {
            fprintf(stderr, "steward-ceiling: connection %ld: %s", c, replayers[c].error);
            return 1;
        }
    }

    /* ---- check: the same rows arrived ---------------------------------- */
    char *check = NULL;
    if (asprintf(&check,
                 "SELECT (SELECT count(*) FROM %1$s.history), "
                 "  (SELECT count(*) FROM %1$s.instances)",
                 schema) < 0)
        die("out of memory", NULL);
    res = run("counting", check, 0, NULL);
    long long got_history = atoll(PQgetvalue(res, 0, 0)), got_inst = atoll(PQgetvalue(res, 0, 1));
    PQclear(res);
    free(check);

    printf("batches=%zu\nhistory_rows=%zu\nevents=%zu\ninstance_upserts=%zu\ninstances=%lld\n"
           "connections=%ld\nseconds=%.3f\nevents_per_s=%.0f\nrows_per_s=%.0f\n",
           n_batches, total_history, total_events, total_upserts, got_inst, n_conns, seconds,
           seconds > 0 ? (double) total_events / seconds : 0.0,
           seconds > 0 ? (double) total_history / seconds : 0.0);
    int rc = 0;
    if ((size_t) got_history != total_history || (size_t) got_inst > n_inst) {
        fprintf(stderr,
                "steward-ceiling: the scratch tables hold %lld history rows (expected %zu) and "
                "%lld instances (steward has %zu)\n",
                got_history, total_history, got_inst, n_inst);
        rc = 1;
    }

    char *drop = NULL;
    if (asprintf(&drop, "DROP SCHEMA %s CASCADE", schema) >= 0) {
        sql_exec("dropping the scratch schema", drop);
        free(drop);
    }
    for (size_t i = 0; i < n_batches; i++) {
        for (int c = 0; c <= N_HIST_COLS; c++)
            free(batches[i].hist[c]);
        for (int c = 0; c < N_INST_COLS; c++)
            free(batches[i].inst[c]);
    }
    free(batches);
    for (size_t i = 0; i < n_inst; i++)
        for (int c = 0; c < N_INST_COLS; c++)
            free(insts[i].col[c]);
    free(insts);
    free(hsql);
    free(isql);
    PQfinish(conn);
    return rc;
}
