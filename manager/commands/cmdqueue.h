/*
 * cmdqueue - the command outbox rows a transaction writes: what the
 * engine decided to send (engine_command_t), rendered from the state's
 * template into steward.commands in the caller's transaction, so a command
 * is queued exactly when the state change or re-send that decides it
 * commits. The dispatcher (not here) produces and marks them.
 *
 * A command whose template cannot be rendered (a variable the instance
 * never captured) is not queued: a `command_failed` alert names the
 * variable instead. Never half a command.
 *
 * A cmdq_t is a plain struct owned by one thread: zero it, add, write,
 * cmdq_clear() it.
 */
#ifndef STEWARD_CMDQUEUE_H
#define STEWARD_CMDQUEUE_H

#include "common/err.h"
#include "common/pgarr.h"
#include "definitions/def.h"
#include "engine/engine.h"
#include "manager/alerting/alerts.h"

#include <libpq-fe.h>

typedef struct cmdq {
    pgarr_t process, key, version, state, step, attempt, token, topic, type, payload, ce_id;
    pgarr_t traceparent, tracestate, span, inherit; /* see cmdq_trace_t */
    pgarr_t left_process, left_key;                 /* instances that left a step (cmdq_left()) */
    size_t n;
    size_t failed; /* commands refused (a command_failed alert each) */
} cmdq_t;

/*
 * The W3C trace context a command continues. Each row queued is one
 * attempt and one span: it gets a span id of its own (cmdq_span_id()),
 * made here, outside the engine, and stored on the row with the trace id
 * and flags of its parent, so a row sent again after a crash (the same
 * ce_id) carries the same traceparent, and a re-send (a new row) a new
 * span of the same trace.
 *
 * Decided by a judged event (intake): traceparent and tracestate are the
 * event's (NULL: it carried none, and so does the command: an untraced
 * event's command never joins an older trace). Decided by the scheduler
 * (a re-send, a hand-off, on_timeout): `inherit`, and the trace is the one
 * of the first command of the same step (same state, same trace), else,
 * for a step that has none yet (entered by on_timeout), the last traced
 * event in the instance's history; else none. No trace is ever started:
 * Steward exports no spans, so a root trace of its own would lead nowhere.
 */
typedef struct cmdq_trace {
    const char *traceparent; /* the parent's, valid (decode_traceparent()); NULL: none */
    const char *tracestate;  /* forwarded unchanged; NULL: none */
    bool inherit;            /* the scheduler decided: look the trace up (see above) */
} cmdq_trace_t;

/*
 * Renders and queues `cmd` (cmd->send must be true) for instance
 * (def->process, key) with captured `vars` (borrowed), to be sent at
 * once, continuing `trace` (borrowed; NULL: no trace). On a render failure
 * opens a command_failed alert in `alerts` instead and returns false.
 */
bool cmdq_add(cmdq_t *q, alert_batch_t *alerts, const def_t *def, const char *key,
              const json_t *vars, const engine_command_t *cmd, const cmdq_trace_t *trace);

/*
 * A new span id: 8 bytes from the kernel's random source, never all zero
 * (W3C: an invalid id), as 16 lowercase hex digits. False (out "") only
 * when no random bytes could be had; the command is then queued without
 * a traceparent rather than with a guessable one.
 */
bool cmdq_span_id(char out[17]);

/*
 * The traceparent of a child span: version 00, the trace id and flags of
 * `parent` (a valid version-00 traceparent), span id `span` (16 lowercase
 * hex digits, not all zero). False (out "") when either is not valid.
 */
bool cmdq_trace_child(const char *parent, const char *span, char out[56]);

/*
 * Notes that instance (process, key) left a step in this transaction (an
 * event moved it, a timeout took on_timeout, an operator moved or closed
 * it): cmdq_write() cancels its unsent commands of the steps before the one
 * it is in now, and all of them once it finished. Such a command was
 * meant for a step that is over; sent later (after a pause is lifted, or a
 * failing topic recovers) it would start work nobody waits for. A command
 * already in flight when this commits may still be delivered; it carries
 * its older token.
 */
void cmdq_left(cmdq_t *q, const char *process, const char *key);

/* Inserts the queued rows on conn, inside the caller's transaction. A row
 * whose ce_id exists already (the same decision replayed) is skipped. Then
 * cancels (cancelled_at, cancel_reason) the unsent commands of the steps
 * the instances noted by cmdq_left() have left, judged against their rows
 * in steward.instances: write the instances first, in the same
 * transaction. The dispatcher never claims a cancelled row. */
err_class_t cmdq_write(PGconn *conn, cmdq_t *q, char *errstr, size_t errstr_size);

void cmdq_clear(cmdq_t *q);

/*
 * The idempotency key of a step entry: SHA-256 (hex, 65 bytes with the
 * NUL) of "process \x1f key \x1f step". Every attempt of one entry (the
 * first send, re-sends, hand-offs, an operator's retry) has the same step,
 * hence the same key, while each has its own ce_id; the next entry of any
 * state is a new step, hence a new key. ${idempotency_key} in a template,
 * ce_idempotencykey on the message.
 */
void cmdq_idempotency_key(const char *process, const char *key, long step, char out[65]);

#endif
