/*
 * actions - what a person does to an instance or an alert: acknowledge or
 * resolve an alert, close an instance in one of its terminal states, move
 * it to another state (decided by engine_operator_move(): in active mode
 * the state's command goes as on an event's entry), send its current
 * step's command again (retry: decided by engine_operator_resend()), both
 * queued in the action's transaction, claim or release
 * its investigation. Shared by the
 * CLI verbs (cli/cli_actions.c) and meant for the HTTP API.
 *
 * Each action is one transaction on the caller's connection. It first
 * takes the instance's advisory lock, steward.lock_instance(process,
 * key), the lock every batch of events takes, so an action and an event
 * for the same instance run one after the other and the action judges the
 * state the event left. It then checks that what it acts on is still as
 * the request expects (an alert still open, an instance still active) and
 * refuses with ACTION_CONFLICT when it is not: acting on something that
 * changed meanwhile is never a silent no-op.
 *
 * Every action on an instance writes a history row of outcome 'operator'
 * (event_type "operator:VERB", actor, reason, login, from_state,
 * to_state), shown by `steward inspect`; login is the connection's
 * session_user, written by the database, beside the actor the request
 * names. Notifications go through the outbox like every other: an
 * acknowledge or resolve is queued to each sink the alert's trigger was
 * queued to, in the same transaction.
 *
 * The locked reads and every write are calls of the steward.action_*
 * functions (migration 0019), which run with the schema owner's rights
 * and write the audit in the same call: conn's role needs EXECUTE on them
 * (the runtime or the operator role of `steward migrate --create-roles`)
 * and SELECT, no write grant. A role without it gets ACTION_FAILED with a
 * sentence naming the role to be granted.
 *
 * Threading: none of its own; one connection is used by one thread at a
 * time, as libpq requires.
 */
#ifndef STEWARD_ACTIONS_H
#define STEWARD_ACTIONS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum action_verb {
    ACTION_ACK = 0, /* alert: somebody is on it; it stays open */
    ACTION_RESOLVE, /* alert: resolved by hand */
    ACTION_CLOSE,   /* instance: to the terminal state of outcome `target` */
    ACTION_MOVE,    /* instance: to state `target`, its deadline restarted, its command sent */
    ACTION_RETRY,   /* instance, active mode: the current step's command again, now */
    ACTION_CLAIM,   /* instance: actor owns the investigation */
    ACTION_RELEASE, /* instance: gives it back */
} action_verb_t;

/* The verb's name ("ack", "close"...); never NULL. */
const char *action_verb_name(action_verb_t verb);

typedef enum action_rc {
    ACTION_OK = 0,
    ACTION_BAD_REQUEST, /* missing reason, unknown state or outcome */
    ACTION_NOT_FOUND,   /* no such alert or instance */
    ACTION_CONFLICT,    /* it changed meanwhile: finished, resolved, claimed by another */
    ACTION_REFUSED,     /* the action cannot be done here (retry in shadow mode or in a
                           state without a command) */
    ACTION_FAILED,      /* the database failed; nothing was changed */
} action_rc_t;

/* All borrowed for the call. */
typedef struct action_request {
    const char *actor;         /* who; required */
    const char *reason;        /* why; required, not empty */
    long long alert_id;        /* ack, resolve */
    const char *process, *key; /* close, move, retry, claim, release */
    const char *target;        /* close: an outcome or terminal state; move: a state */
} action_request_t;

/* Longest actor and reason taken; longer ones are refused (BAD_REQUEST). */
#define ACTION_ACTOR_MAX  200
#define ACTION_REASON_MAX 2000

/*
 * Runs one action on conn (not inside a transaction). On ACTION_OK,
 * *result (new reference, caller frees; may be NULL on other codes) says
 * what changed: {"action", "actor", "before", "after", ...}; a retry, and
 * a move into a state whose command it sent, add "command" {"type",
 * "topic", "step", "attempt", "token", "ce_id"}, the row it queued. On any other
 * code nothing was changed and errstr says why in a sentence a person can
 * act on.
 */
action_rc_t action_run(PGconn *conn, action_verb_t verb, const action_request_t *req,
                       json_t **result, char *errstr, size_t errstr_size);

/* ---- silences ---- */

/* The longest silence taken: a maintenance window, not a way to mute a
 * process for good. */
#define ACTION_SILENCE_MAX_MS (INT64_C(14) * 24 * 3600 * 1000)

/* All borrowed for the call. */
typedef struct silence_request {
    const char *actor, *reason; /* required, as for actions */
    const char *process;        /* required */
    const char *state, *team;   /* NULL: any */
    int64_t for_ms;             /* from now; 1 s to ACTION_SILENCE_MAX_MS */
} silence_request_t;

/*
 * Silences the open alerts of a process (of one state, of one owning
 * team) for for_ms from now: the notifier sends no trigger or acknowledge
 * for them meanwhile, and sends what is still due when the silence ends.
 * The alerts stay open. On ACTION_OK *result (new reference) is the
 * silence {"id", "process", "state", "team", "ends_at", ...}.
 */
action_rc_t action_silence(PGconn *conn, const silence_request_t *req, json_t **result,
                           char *errstr, size_t errstr_size);

/* Ends silence `id` now (steward unsilence); ACTION_CONFLICT when it
 * already ended. Held pages go out at the notifier's next pass. */
action_rc_t action_unsilence(PGconn *conn, long long id, const char *actor, const char *reason,
                             json_t **result, char *errstr, size_t errstr_size);

/* The silences live now (all of them, ended ones too, when `all`), newest
 * first: {"silences": [...]} in *out (new reference). */
action_rc_t action_silences(PGconn *conn, bool all, json_t **out, char *errstr, size_t errstr_size);

#endif
