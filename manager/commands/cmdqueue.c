/*
 * cmdqueue - command outbox rows; see cmdqueue.h.
 */
#include "manager/commands/cmdqueue.h"

#include "common/db.h"
#include "common/sha256.h"
#include "engine/template.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cmdq_add(cmdq_t *q, alert_batch_t *alerts, const def_t *def, const char *key,
              const json_t *vars, const engine_command_t *cmd)
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
    free(text);
    q->n++;
    return true;
}

/* Rows in decision order (ORDINALITY), so ids follow it and one
 * instance's commands are sent in order. */
static const char write_sql[] =
    "INSERT INTO steward.commands (process, key, version, state, step, attempt, token, topic, "
    "  type, payload, ce_id, next_attempt_at) "
    "SELECT p, k, v, s, sp, a, t, tp, ty, pl::jsonb, c, now() "
    "FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::int[], "
    "  $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[]) "
    "  WITH ORDINALITY AS u(p, k, v, s, sp, a, t, tp, ty, pl, c, n) "
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
        pgarr_t *cols[] = {&q->process, &q->key,   &q->version, &q->state,   &q->step, &q->attempt,
                           &q->token,   &q->topic, &q->type,    &q->payload, &q->ce_id};
        const char *params[11];
        if (!pgarr_params(cols, 11, params))
            return err_set(ERR_FATAL, errstr, errstr_size, "queueing commands: out of memory");
        if ((cls = db_exec(conn, "queueing commands", write_sql, 11, params, errstr,
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
    pgarr_t *all[] = {&q->process, &q->key,          &q->version, &q->state, &q->step,
                      &q->attempt, &q->token,        &q->topic,   &q->type,  &q->payload,
                      &q->ce_id,   &q->left_process, &q->left_key};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pgarr_free(all[i]);
    q->n = q->failed = 0;
}
