/*
 * actions_int - private to manager/operator/: what the actions' .c files
 * share, included by them alone (actions.h is the whole interface; no
 * file outside manager/operator/ includes this header). The path every
 * action takes: its error sentence, the calls of the steward.action_*
 * functions (and what a role without them is told), the instance's lock
 * and the commit.
 *
 *   actions.c           the path below; action_run() checks a request and
 *                       hands it to the alert or the instance actions
 *   actions_verbs.c     the verb table
 *   actions_alert.c     ack and resolve
 *   actions_instance.c  close, move, retry (decided by the engine), claim
 *                       and release; the command row the engine decided
 *   actions_upgrade.c   upgrade (decided by the engine, instance by
 *                       instance)
 *   actions_silence.c   silences
 *
 * Threading: as actions.h; one connection is used by one thread at a time.
 */
#ifndef STEWARD_ACTIONS_INT_H
#define STEWARD_ACTIONS_INT_H

#include "manager/operator/actions.h"

#include "definitions/def.h"
#include "engine/engine.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes the sentence to errstr and returns rc, so a refusal is one line:
 * `return action_fail(ACTION_CONFLICT, errstr, errstr_size, "...", ...)`. */
action_rc_t action_fail(action_rc_t rc, char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ACTION_OK when actor and reason are given and within ACTION_ACTOR_MAX
 * and ACTION_REASON_MAX; else ACTION_BAD_REQUEST with the sentence. */
action_rc_t action_check_audit(const char *actor, const char *reason, char *errstr,
                               size_t errstr_size);

/*
 * Runs one statement calling a steward.action_* function. Returns its
 * result (PQclear() it), or NULL with *rc and errstr set: ACTION_NOT_FOUND
 * when the row went meanwhile (no_data_found), ACTION_FAILED otherwise; a
 * role without EXECUTE (42501) is told which role to take instead of
 * libpq's "permission denied", and its transaction is rolled back.
 */
PGresult *action_call(PGconn *conn, const char *what, const char *sql, int nparams,
                      const char *const *params, action_rc_t *rc, char *errstr, size_t errstr_size);

/* BEGIN, then, unless process is NULL (a blind alert), the lock every
 * batch takes for instance (process, key), waited for and held to the end
 * of the transaction. False with errstr set (the caller rolls back). The
 * lock is the transaction's first statement, so a login that may not lock
 * is told which role it lacks, as for the action functions (action_call()). */
bool action_begin(PGconn *conn, const char *process, const char *key, char *errstr,
                  size_t errstr_size);

/* COMMIT, behind the failpoint actions.before_commit; ACTION_FAILED with
 * errstr set when it did not commit. */
action_rc_t action_commit(PGconn *conn, char *errstr, size_t errstr_size);

/* ack and resolve (actions_alert.c); req checked by action_run(). */
action_rc_t action_alert(PGconn *conn, action_verb_t verb, const action_request_t *req,
                         json_t **result, char *errstr, size_t errstr_size);

/* close, move, retry, claim and release (actions_instance.c); req checked
 * by action_run(). */
action_rc_t action_instance(PGconn *conn, action_verb_t verb, const action_request_t *req,
                            json_t **result, char *errstr, size_t errstr_size);

/* upgrade (actions_upgrade.c); req checked by action_run(), its options
 * read here. */
action_rc_t action_upgrade(PGconn *conn, const action_request_t *req, json_t **result, char *errstr,
                           size_t errstr_size);

/* `ms` as a statement parameter in buf, or NULL for ENGINE_NO_DEADLINE. */
const char *action_ms_param(int64_t ms, char *buf, size_t size);

/*
 * The command the engine decided to send, for steward.action_step() and
 * steward.action_upgrade(): its row of steward.commands as JSON text (free
 * it), or NULL when its template cannot be rendered (ACTION_REFUSED,
 * naming the variable it lacks: nothing is queued and no alert is opened,
 * since the operator learns it here) or out of memory (ACTION_FAILED).
 * *sent receives what the result shows of it (a new reference).
 */
char *action_command_row(const def_t *def, const char *key, const engine_instance_t *inst,
                         const engine_command_t *cmd, json_t **sent, action_rc_t *rc, char *errstr,
                         size_t errstr_size);

#endif
