/*
 * cmdqueue - command outbox rows; see cmdqueue.h.
 */
#include "manager/commands/cmdqueue.h"

#include "common/db.h"
#include "common/sha256.h"
#include "engine/template.h"
#include "formats/decode.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

bool cmdq_span_id(char out[17])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char bytes[8];
    out[0] = '\0';
    for (int tries = 0; tries < 4; tries++) {
        if (getrandom(bytes, sizeof bytes, 0) != (ssize_t) sizeof bytes)
            return false;
        bool zero = true;
        for (size_t i = 0; i < sizeof bytes; i++)
            zero = zero && bytes[i] == 0;
        if (zero)
            continue; /* 2^-64: draw again */
        for (size_t i = 0; i < sizeof bytes; i++) {
            out[2 * i] = hex[bytes[i] >> 4];
            out[2 * i + 1] = hex[bytes[i] & 0xf];
        }
        out[16] = '\0';
        return true;
    }
    return false;
}

bool cmdq_trace_child(const char *parent, const char *span, char out[56])
{
    char checked[DECODE_TRACEPARENT_LEN + 1];
    out[0] = '\0';
    if (parent == NULL || span == NULL || strlen(span) != 16 ||
        decode_traceparent(parent, strlen(parent), checked) != DECODE_TRACE_OK)
        return false;
    char candidate[DECODE_TRACEPARENT_LEN + 1];
    snprintf(candidate, sizeof candidate, "00-%.32s-%s-%.2s", parent + 3, span, parent + 53);
    /* The span id as the edge would judge it: hex, lowercase, not zero. */
    if (decode_traceparent(candidate, strlen(candidate), checked) != DECODE_TRACE_OK)
        return false;
    memcpy(out, checked, DECODE_TRACEPARENT_LEN + 1);
    return true;
}

/* The trace columns of one row (see cmdq_trace_t): the traceparent itself
 * when the parent is known, else the span the statement gives a trace it
 * looks up. */
static void add_trace(cmdq_t *q, const cmdq_trace_t *trace)
{
    char span[17], child[DECODE_TRACEPARENT_LEN + 1] = "";
    bool have_span = cmdq_span_id(span);
    bool inherit = trace != NULL && trace->inherit && have_span;
    bool own = trace != NULL && !trace->inherit && have_span &&
               cmdq_trace_child(trace->traceparent, span, child);
    pgarr_add(&q->traceparent, own ? child : NULL);
    pgarr_add(&q->tracestate, own ? trace->tracestate : NULL);
    pgarr_add(&q->span, inherit ? span : NULL);
    pgarr_add_bool(&q->inherit, inherit);
}

bool cmdq_add(cmdq_t *q, alert_batch_t *alerts, const def_t *def, const char *key,
              const json_t *vars, const engine_command_t *cmd, const cmdq_trace_t *trace)
{
    const def_state_t *st = &def->states[cmd->state];
    char err[512];
    char idempotency_key[65];
    cmdq_idempotency_key(def->process, key, cmd->step, idempotency_key);
    template_ctx_t ctx = {key,        def->process, st->name,       cmd->attempt,
                          cmd->token, vars,         idempotency_key};
    json_t *payload = template_render(st->command->payload, &ctx, err, sizeof err);
    char *text =
        payload != NULL ? json_dumps(payload, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(payload);
    if (text == NULL) {
        char summary[1024], identity[1024];
        snprintf(summary, sizeof summary, "%s %s: command %s of %s not sent: %s; owner %s",
                 def->process, key, st->command->type, st->name,
                 payload == NULL ? err : "out of memory",
                 def_state_owner(def, (size_t) cmd->state));
        snprintf(identity, sizeof identity, "steward:command_failed:%s:%s:%d:%d", def->process, key,
                 cmd->step, cmd->attempt);
        json_t *details = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:s}", "process", def->process,
                                    "key", key, "state", st->name, "command", st->command->type,
                                    "step", cmd->step, "attempt", cmd->attempt, "reason", err);
        alert_batch_open(alerts, ALERT_COMMAND_FAILED, def->process, key, st->name,
                         def_state_owner(def, (size_t) cmd->state), summary, details, identity, -1);
        json_decref(details);
        q->failed++;
        return false;
    }
    char ce_id[65];
    engine_command_id(def->process, key, cmd->step, cmd->attempt, ce_id);
    pgarr_add(&q->process, def->process);
    pgarr_add(&q->key, key);
    pgarr_add_int(&q->version, def->version);
    pgarr_add(&q->state, st->name);
    pgarr_add_int(&q->step, cmd->step);
    pgarr_add_int(&q->attempt, cmd->attempt);
    pgarr_add_int(&q->token, cmd->token);
    pgarr_add(&q->topic, st->command->topic);
    pgarr_add(&q->type, st->command->type);
    pgarr_add(&q->payload, text);
    pgarr_add(&q->ce_id, ce_id);
    add_trace(q, trace);
    free(text);
    q->n++;
    return true;
}

/* Rows in decision order (ORDINALITY), so ids follow it and one
 * instance's commands are sent in order. A row that inherits its trace
 * (ih) takes the trace id, flags and tracestate of the first command of
 * its step, else of the instance's last traced history row (cmdq_trace_t),
 * with its own span id (sid). The lookups are filtered by ih inside, so
 * an intake row (which knows its trace) costs no index probe. */
static const char write_sql[] =
    "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
    "  type, payload, ce_id, next_attempt_at, traceparent, tracestate) "
    "SELECT p, k, v, s, sp, a, t, tp, ty, pl::jsonb, c, now(), "
    "  CASE WHEN NOT ih THEN tr WHEN par.ptp IS NOT NULL "
    "    THEN '00-' || substr(par.ptp, 4, 32) || '-' || sid || '-' || substr(par.ptp, 54, 2) END, "
    "  CASE WHEN NOT ih THEN tst WHEN par.ptp IS NOT NULL THEN par.pts END "
    "FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::int[], "
    "  $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], "
    "  $13::text[], $14::text[], $15::bool[]) "
    "  WITH ORDINALITY AS u(p, k, v, s, sp, a, t, tp, ty, pl, c, tr, tst, sid, ih, n) "
    "LEFT JOIN LATERAL ("
    "  SELECT x.ptp, x.pts FROM ("
    "    (SELECT 1 AS o, f.traceparent AS ptp, f.tracestate AS pts FROM steward.commands f "
    "      WHERE u.ih AND f.process = u.p AND f.key = u.k AND f.step = u.sp "
    "      ORDER BY f.id LIMIT 1) "
    "    UNION ALL "
    "    (SELECT 2, h.traceparent, h.tracestate FROM steward.history h "
    "      WHERE u.ih AND h.process = u.p AND h.key = u.k AND h.traceparent IS NOT NULL "
    "      ORDER BY h.id DESC LIMIT 1)) x ORDER BY x.o LIMIT 1) par ON u.ih "
    "ORDER BY n "
    "ON CONFLICT (ce_id) DO NOTHING";

/* The instance as written in this transaction says which step it is in:
 * rows of an earlier step, or any row once it finished, are over. */
static const char cancel_sql[] =
    "UPDATE steward.commands c SET cancelled_at = now(), "
    "  cancel_reason = CASE WHEN i.status <> 'active' "
    "    THEN 'the instance finished (' || i.status || ' in ' || i.state || ') before it was sent' "
    "    ELSE 'the instance left ' || c.state || ' (step ' || c.step || ') for ' || i.state || "
    "      ' (step ' || i.step || ') before it was sent' END "
    "FROM unnest($1::text[], $2::text[]) AS u(p, k) "
    "JOIN steward.instances i ON i.process = u.p AND i.key = u.k "
    "WHERE c.process = u.p AND c.key = u.k AND c.sent_at IS NULL AND c.cancelled_at IS NULL "
    "  AND (c.step < i.step OR i.status <> 'active')";

void cmdq_left(cmdq_t *q, const char *process, const char *key)
{
    pgarr_add(&q->left_process, process);
    pgarr_add(&q->left_key, key);
}

err_class_t cmdq_write(PGconn *conn, cmdq_t *q, char *errstr, size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    if (q->n > 0) {
        pgarr_t *cols[] = {&q->process, &q->key,         &q->version,    &q->state, &q->step,
                           &q->attempt, &q->token,       &q->topic,      &q->type,  &q->payload,
                           &q->ce_id,   &q->traceparent, &q->tracestate, &q->span,  &q->inherit};
        const char *params[15];
        if (!pgarr_params(cols, 15, params))
            return err_set(ERR_FATAL, errstr, errstr_size, "queueing commands: out of memory");
        if ((cls = db_exec(conn, "queueing commands", write_sql, 15, params, errstr,
                           errstr_size)) != ERR_OK)
            return cls;
    }
    if (q->left_process.n > 0) {
        pgarr_t *cols[] = {&q->left_process, &q->left_key};
        const char *params[2];
        if (!pgarr_params(cols, 2, params))
            return err_set(ERR_FATAL, errstr, errstr_size, "cancelling commands: out of memory");
        cls = db_exec(conn, "cancelling the commands of steps left", cancel_sql, 2, params, errstr,
                      errstr_size);
    }
    return cls;
}

void cmdq_idempotency_key(const char *process, const char *key, long step, char out[65])
{
    char *text = NULL;
    int len = asprintf(&text, "%s\x1f%s\x1f%ld", process, key, step);
    if (len < 0) {
        out[0] = '\0';
        return;
    }
    sha256_hex(text, (size_t) len, out);
    free(text);
}

void cmdq_clear(cmdq_t *q)
{
    pgarr_t *all[] = {&q->process, &q->key,          &q->version,  &q->state,       &q->step,
                      &q->attempt, &q->token,        &q->topic,    &q->type,        &q->payload,
                      &q->ce_id,   &q->left_process, &q->left_key, &q->traceparent, &q->tracestate,
                      &q->span,    &q->inherit};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgarr_free(all[i]);
    q->n = q->failed = 0;
}
