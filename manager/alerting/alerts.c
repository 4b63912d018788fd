/*
 * alerts - alert rows and their outbox rows; see alerts.h.
 */
#include "manager/alerting/alerts.h"

#include "common/db.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"deadline",        "process_deadline", "sequence",
                                         "blind",           "unloadable",       "command_failed",
                                         "dispatch_failed", "lease_expired"};

const char *alert_kind_name(alert_kind_t kind)
{
    return (size_t) kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

char *alert_dedup_key(alert_kind_t kind, const char *identity, char *out, size_t out_size)
{
    char hex[SHA256_HEX_SIZE], readable[41], prefix[32];
    const char *name = alert_kind_name(kind);
    size_t n = 0;

    sha256_hex(identity, strlen(identity), hex);
    snprintf(prefix, sizeof prefix, "steward:%s:", name);
    const unsigned char *p = (const unsigned char *) identity;
    if (strncmp(identity, prefix, strlen(prefix)) == 0)
        p += strlen(prefix);
    /* One '_' per character, not per byte, so a multibyte key reads as
     * many marks as it has characters. */
    for (; *p != '\0' && n < 40; p++) {
        if ((*p & 0xC0) == 0x80)
            continue;
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("._:-", *p) != NULL;
        readable[n++] = plain ? (char) *p : '_';
    }
    readable[n] = '\0';
    snprintf(out, out_size, "steward:%s:%s:%s", name, readable, hex);
    return out;
}

void alert_batch_open(alert_batch_t *b, alert_kind_t kind, const char *process, const char *key,
                      const char *state, const char *owner, const char *summary,
                      const json_t *details, const char *identity, int64_t deadline_ms)
{
    char *text = details != NULL ? json_dumps(details, JSON_COMPACT) : NULL;
    char dedup_key[ALERT_DEDUP_SIZE];
    alert_dedup_key(kind, identity, dedup_key, sizeof dedup_key);
    /* Callers build summaries in fixed buffers: a cut through a character
     * would make PostgreSQL refuse the whole transaction. */
    char *whole = summary != NULL ? strndup(summary, utf8_whole_len(summary)) : NULL;
    pgarr_add(&b->o_kind, alert_kind_name(kind));
    pgarr_add(&b->o_process, process);
    pgarr_add(&b->o_key, key);
    pgarr_add(&b->o_state, state);
    pgarr_add(&b->o_owner, owner);
    pgarr_add(&b->o_summary, whole != NULL ? whole : summary);
    pgarr_add(&b->o_details, text != NULL ? text : "{}");
    pgarr_add(&b->o_dedup, dedup_key);
    if (deadline_ms >= 0)
        pgarr_add_int(&b->o_deadline, deadline_ms);
    else
        pgarr_add(&b->o_deadline, NULL);
    free(text);
    free(whole);
}

void alert_batch_resolve(alert_batch_t *b, alert_kind_t kind, const char *process, const char *key,
                         const char *state, const char *resolution)
{
    pgarr_add(&b->r_process, process);
    pgarr_add(&b->r_key, key);
    pgarr_add(&b->r_kind, alert_kind_name(kind));
    pgarr_add(&b->r_state, state);
    pgarr_add(&b->r_resolution, resolution);
}

void alert_batch_resolve_key(alert_batch_t *b, alert_kind_t kind, const char *identity,
                             const char *resolution)
{
    char dedup_key[ALERT_DEDUP_SIZE];
    pgarr_add(&b->k_dedup, alert_dedup_key(kind, identity, dedup_key, sizeof dedup_key));
    pgarr_add(&b->k_legacy, identity);
    pgarr_add(&b->k_resolution, resolution);
}

bool alert_batch_empty(const alert_batch_t *b)
{
    return b->o_kind.n == 0 && b->r_kind.n == 0 && b->k_dedup.n == 0;
}

void alert_batch_clear(alert_batch_t *b)
{
    pgarr_t *all[] = {&b->o_kind,    &b->o_process,   &b->o_key,   &b->o_state,      &b->o_owner,
                      &b->o_summary, &b->o_details,   &b->o_dedup, &b->o_deadline,   &b->r_process,
                      &b->r_key,     &b->r_kind,      &b->r_state, &b->r_resolution, &b->k_dedup,
                      &b->k_legacy,  &b->k_resolution};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgarr_free(all[i]);
}

static const char open_sql[] =
    "INSERT INTO steward.alerts (kind, process, key, state, owner, summary, details, "
    "  dedup_key, deadline_at) "
    "SELECT k, p, ky, s, o, sm, d::jsonb, dk, steward.from_ms(dl) "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], "
    "  $7::text[], $8::text[], $9::bigint[]) AS u(k, p, ky, s, o, sm, d, dk, dl) "
    "ON CONFLICT (dedup_key) WHERE resolved_at IS NULL DO NOTHING "
    "RETURNING id, owner, kind, summary";

static const char resolve_sql[] =
    "UPDATE steward.alerts a SET resolved_at = now(), resolution = u.r "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) "
    "  AS u(p, k, kind, s, r) "
    "WHERE a.resolved_at IS NULL AND a.process = u.p AND a.key = u.k AND a.kind = u.kind "
    "  AND (u.s IS NULL OR a.state = u.s) "
    "RETURNING a.id, a.owner, a.kind, a.summary";

static const char resolve_key_sql[] =
    "UPDATE steward.alerts a SET resolved_at = now(), resolution = u.r "
    "FROM unnest($1::text[], $2::text[], $3::text[]) AS u(dk, lg, r) "
    "WHERE a.resolved_at IS NULL AND (a.dedup_key = u.dk OR a.dedup_key = u.lg) "
    "RETURNING a.id, a.owner, a.kind, a.summary";

static const char outbox_sql[] =
    "INSERT INTO steward.outbox (kind, destination, alert_id, process, key, payload) "
    "SELECT 'notification', d, a, al.process, al.key, jsonb_build_object('event', e) "
    "FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS u(d, a, e, n) "
    "JOIN steward.alerts al ON al.id = u.a ORDER BY n";

/* Runs a statement over finished arrays; NULL (with errstr) on failure. */
static PGresult *run(PGconn *conn, const char *what, const char *sql, pgarr_t *const *arrays, int n,
                     err_class_t *cls, char *errstr, size_t errstr_size)
{
    const char *params[16];
    if (!pgarr_params(arrays, (size_t) n, params)) {
        *cls = err_set(ERR_FATAL, errstr, errstr_size, "%s: out of memory", what);
        return NULL;
    }
    return db_query(conn, what, sql, n, params, cls, errstr, errstr_size);
}

/* Adds one outbox row per sink of each returned alert's owner. */
static void fan_out(PGresult *res, const char *event, route_table_t *routes, pgarr_t *dest,
                    pgarr_t *ids, pgarr_t *events, alert_counts_t *counts, bool opened)
{
    for (int row = 0; row < PQntuples(res); row++) {
        size_t n = 0;
        const sink_t *const *sinks =
            routes != NULL ? route_sinks(routes, PQgetvalue(res, row, 1), &n) : NULL;
        for (size_t i = 0; i < n; i++) {
            pgarr_add(dest, sinks[i]->name);
            pgarr_add(ids, PQgetvalue(res, row, 0));
            pgarr_add(events, event);
            counts->notifications++;
        }
        if (opened)
            counts->opened++;
        else
            counts->resolved++;
        LOG_DEBUG(opened ? "alert opened" : "alert resolved", "alert", PQgetvalue(res, row, 0),
                  "kind", PQgetvalue(res, row, 2), "summary", PQgetvalue(res, row, 3));
    }
}

err_class_t alert_batch_write(PGconn *conn, alert_batch_t *b, route_table_t *routes,
                              alert_counts_t *counts, char *errstr, size_t errstr_size)
{
    pgarr_t dest = {0}, ids = {0}, events = {0};
    err_class_t cls = ERR_OK;
    PGresult *res;

    if (!alert_batch_empty(b) && PQtransactionStatus(conn) != PQTRANS_INTRANS) {
        /* Autocommit would let an alert commit without its outbox rows. */
        return err_set(ERR_FATAL, errstr, errstr_size,
                       "alerts must be written inside the transaction of the change that "
                       "caused them (a bug in Steward: the connection is not in a "
                       "transaction)");
    }
    if (b->o_kind.n > 0) {
        pgarr_t *cols[] = {&b->o_kind,    &b->o_process, &b->o_key,   &b->o_state,   &b->o_owner,
                           &b->o_summary, &b->o_details, &b->o_dedup, &b->o_deadline};
        if ((res = run(conn, "opening alerts", open_sql, cols, 9, &cls, errstr, errstr_size)) ==
            NULL)
            goto done;
        fan_out(res, "trigger", routes, &dest, &ids, &events, counts, true);
        PQclear(res);
    }
    if (b->r_kind.n > 0) {
        pgarr_t *cols[] = {&b->r_process, &b->r_key, &b->r_kind, &b->r_state, &b->r_resolution};
        if ((res = run(conn, "resolving alerts", resolve_sql, cols, 5, &cls, errstr,
                       errstr_size)) == NULL)
            goto done;
        fan_out(res, "resolve", routes, &dest, &ids, &events, counts, false);
        PQclear(res);
    }
    if (b->k_dedup.n > 0) {
        pgarr_t *cols[] = {&b->k_dedup, &b->k_legacy, &b->k_resolution};
        if ((res = run(conn, "resolving alerts", resolve_key_sql, cols, 3, &cls, errstr,
                       errstr_size)) == NULL)
            goto done;
        fan_out(res, "resolve", routes, &dest, &ids, &events, counts, false);
        PQclear(res);
    }
    if (dest.n > 0) {
        pgarr_t *cols[] = {&dest, &ids, &events};
        if ((res = run(conn, "queueing notifications", outbox_sql, cols, 3, &cls, errstr,
                       errstr_size)) == NULL)
            goto done;
        PQclear(res);
    }
done:
    pgarr_free(&dest);
    pgarr_free(&ids);
    pgarr_free(&events);
    return cls;
}
