/*
 * actions - what a person does to an instance or an alert: acknowledge or
 * resolve an alert, close an instance in one of its terminal states, move
 * it to another state (decided by engine_operator_move(): in active mode
 * the state's command goes as on an event's entry), send its current
 * step's command again (retry: decided by engine_operator_resend()), both
 * queued in the action's transaction, claim or release
 * its investigation; move a process's open instances to a newer version
 * of its definition (upgrade: decided by engine_operator_upgrade(), one
 * instance at a time, each in a transaction of its own); silence a
 * process's alerts for a while. Shared by
 * the CLI verbs (cli/cli_actions.c) and the HTTP API (manager/api/http_actions.c),
 * which both read the verb table below.
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
    ACTION_UPGRADE, /* process: its open instances of older versions to a newer one */
} action_verb_t;

/* The verb's name ("ack", "close"...); never NULL. */
const char *action_verb_name(action_verb_t verb);

/* ---- the verb table ----
 *
 * Every operator verb is one row of action_verbs[]: the CLI's commands,
 * usage and option parsing (cli/cli_actions.c, cli/main.c), the HTTP
 * router's action routes (manager/api/http_route.c), GET /v1/verbs and so the
 * console's buttons, and the man page's check (tests/deploy_check.sh) all
 * read it. A new verb is its row (actions_verbs.c), its function
 * (actions_alert.c, actions_instance.c, actions_upgrade.c or
 * actions_silence.c) and its test. */

typedef enum action_subject {
    ACTION_ON_ALERT,    /* path {id}: an alert id */
    ACTION_ON_INSTANCE, /* path {process}/{key} */
    ACTION_ON_SILENCE,  /* the silences; path {id}: a silence id */
    ACTION_ON_PROCESS,  /* path {process}: a process's instances at once */
} action_subject_t;

/* One option of a verb's own: `--NAME ARG` on the command line, "NAME" in
 * the HTTP body. */
typedef struct action_option {
    const char *name; /* NULL ends a row's list */
    const char *arg;  /* its value's name in usage ("OUTCOME"); NULL: a flag */
    const char *help; /* one line */
    bool required;
    bool in_synopsis; /* written in the usage line */
    bool repeats;     /* may be given more than once: the values are joined by commas (in
                         the HTTP body: a string, or an array of them) */
} action_option_t;

#define ACTION_VERB_OPTIONS_MAX 12

typedef struct action_verb_def {
    const char *name;     /* the command (steward NAME) and, for actions, the path's last segment */
    action_subject_t on;  /* what it acts on */
    action_verb_t verb;   /* alert and instance rows: what action_run() does */
    const char *operands; /* the command's positional arguments: "ALERT_ID", "PROCESS KEY" */
    bool audited;         /* changes something: takes --reason (required) and --actor */
    action_option_t options[ACTION_VERB_OPTIONS_MAX]; /* its own, in usage order */
    const char *method;  /* HTTP: "POST" for what changes state, "GET" for a read */
    const char *path;    /* HTTP: "/v1/alerts/{id}/ack"; {id}, {process}, {key} are captures */
    const char *summary; /* one line: steward --help */
    const char *about;   /* steward NAME --help's paragraph */
    const char *console; /* the console views that offer it, space-separated: "overdue"
                          (the stuck page's overdue rows), "bulk" (the same rows, selected
                          together), "alerts" (its alert rows), "instance" (the instance
                          page); NULL: none. The console asks for the reason and the
                          options (close: an outcome of the instance's own version; move:
                          one of its states) and offers a verb only where it applies */
} action_verb_def_t;

/* The table, in the order help lists it. */
extern const action_verb_def_t action_verbs[];
extern const size_t action_verb_count;

/* The row named `name`, borrowed from the table (static); NULL when none. */
const action_verb_def_t *action_verb_find(const char *name);

/* The row of an alert or instance verb; never NULL. */
const action_verb_def_t *action_verb_def(action_verb_t verb);

/* The table as {"verbs": [{"name", "on", "operands", "options": [{"name",
 * "arg", "help", "required"}], "method", "path", "summary", "console":
 * [VIEW...]}]}: GET /v1/verbs. New reference; NULL when
 * out of memory. */
json_t *action_verbs_json(void);

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
    const char *process, *key; /* close, move, retry, claim, release; upgrade: process */
    const char *target;        /* close: an outcome or terminal state; move: a state */
    /* upgrade: the values of its row's own options, by their index in the
     * row (a flag given: ""; not given: NULL); NULL: none given */
    const char *const *options;
} action_request_t;

/* An upgrade's default batch, its largest, and the longest list it answers. */
#define ACTION_UPGRADE_BATCH     100
#define ACTION_UPGRADE_BATCH_MAX 10000
#define ACTION_UPGRADE_LIST_MAX  1000

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
 *
 * An upgrade (its options in req->options) moves the instances it selects
 * in batches of --batch (ACTION_UPGRADE_BATCH), each under its lock in a
 * transaction of its own, and answers {"action", "process", "to_version",
 * "dry_run", "moved", "promoted", "states": [{"from_version",
 * "from_state", "to_state", "instances"}], "deadlines_changed",
 * "deadlines": [{"key", "state", "deadline": "state"|"process", "before",
 * "after", "change_ms"}], "alerts_resolved", "alerts": [{"id", "key",
 * "kind"}], "due_at_once", "due": [{"key", "state", "deadline", "then"}],
 * "commands_queued", "commands": [{"key", ...as above}], "skipped":
 * [{"key", "why"}], "truncated"}: each list in key order and at most
 * ACTION_UPGRADE_LIST_MAX long (truncated says when one was cut; the
 * counts are whole). A dry run (--dry-run) reads the same instances,
 * takes no lock, changes nothing and answers the same document. A
 * mapping refused (a state without a target, a terminal target) is
 * ACTION_REFUSED before anything moves; a failure after some batches
 * committed is ACTION_FAILED saying how many moved (run it again: moved
 * instances are not selected twice).
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
