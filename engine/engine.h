/*
 * engine - the state machine of one process instance. Pure: no I/O and no
 * clock reads; the time is the event's, passed in.
 *
 * An instance is one running copy of a process definition, identified by
 * (process, key). The engine takes the instance as it stands (or its
 * absence), one event, and whether that event's identity was seen for the
 * instance before, and judges it:
 *
 *   started     the start event created the instance
 *   advanced    a transition the current state declares moved it
 *   duplicate   the same event identity was already judged; nothing changes
 *   parked      the event cannot apply yet but may once the instance moves
 *               on (its start event is behind on another topic, or an
 *               earlier step's event is): it waits, for the reorder window
 *   unexpected  the current state does not accept it and no state after it
 *               does either: a sequence violation, judged at once
 *   late        the instance already reached a terminal state
 *   violation   a parked event whose reorder window passed
 *
 * and, in active mode and for leases (at a due time, engine_judge_due()):
 *
 *   timeout     the last attempt's deadline (or lease) passed: on_timeout
 *               was taken
 *   retried     a deadline passed with attempts left: the command re-sent
 *   stale       in an active version, a reply carrying a fencing token
 *               other than the instance's current one: older (a step or
 *               send that is over: a zombie worker's, a late or duplicate
 *               reply), or newer (never issued: "forged" in the detail);
 *               or a lease event of a step the instance left: recorded,
 *               nothing changes, nobody is paged
 *   claimed     the state's lease claim event: who holds the step
 *   renewed     a lease renewal (heartbeat): the lease runs on
 *   lease_expired  a lease ran out in shadow mode (an alert)
 *   handed_off  a lease ran out in active mode with attempts left: the
 *               command re-sent with a new token, for whoever takes it next
 *   released    the instance left a step whose lease someone held (a
 *               second history row of the event that moved it)
 *
 * Times are event times in milliseconds since the epoch; deadlines are
 * absolute. The batch (manager/intake/batch.c) wraps this with the reads and writes.
 *
 * Every rule of the state machine is here, and no other module computes
 * one (SQL only selects candidates by a time the engine computed, and
 * stores the verdicts):
 *
 *   judging an event        engine_apply(), engine_replay(): the verdicts
 *                           above, named as history records them
 *                           (engine_outcome_name()); a duplicate by the
 *                           caller's `seen`
 *   parked or unexpected    engine_may_accept(): whether the current state
 *                           or any state after it accepts the event
 *   an undeclared event     engine_undeclared()
 *   an instance's status    engine_status(): active, or its terminal outcome
 *   lateness                engine_result_t.late_by_ms (from the event's time);
 *                           deadline_late_by_ms, the part past the state's
 *                           own deadline, stored on its open deadline alert
 *   time in a state         engine_entered_at(): entry never runs back;
 *                           engine_time_in_state(); stored per history row
 *                           (engine_result_t.entered_ms, time_in_state_ms)
 *   a step late for its own state's deadline   engine_state_late_by()
 *   the time judged at      engine_judge_time(): the process's watermark,
 *                           never past the wall clock
 *   deadlines due           engine_judge_due(): state and process deadline
 *                           against the watermark less the grace, with what
 *                           the alert says (engine_due_alert()); callers
 *                           select candidates by engine_due_bound()
 *   a sequence alert's words engine_sequence_alert()
 *   the next deadline       engine_next_deadline()
 *   parked-event expiry     engine_park_expires_at() (when a parked event's
 *                           reorder window ends), engine_judge_parked()
 *                           (violation or still waiting, and why)
 *   commands (active mode)  entering a state with a `command` while the
 *                           instance's version is active sends it
 *                           (engine_result_t.command): step, attempt 0,
 *                           the entry's token; its id engine_command_id()
 *   retries and on_timeout  engine_judge_due(): a missed deadline with
 *                           attempts left waits the backoff
 *                           (engine_retry_backoff(), resend_pending), then
 *                           re-sends; the backoff and the next attempt's
 *                           deadline count from the pass that decides
 *                           them (never from before the missed deadline),
 *                           so a watermark far past several deadlines
 *                           re-sends once per pass that finds one due;
 *                           after the last attempt on_timeout (entered at
 *                           the pass), else the page that says what was
 *                           tried (from the step's queued and delivered
 *                           counts when known)
 *   an operator's re-send   engine_operator_resend() (steward retry): the
 *                           same rules of attempt, token and id, now
 *   an operator's move      engine_operator_move() (steward move): entry
 *                           into the state as an event's, now, with its
 *                           command in active mode
 *   an operator's close     engine_operator_close() (steward close): entry
 *                           into the terminal state as an event's, now; the
 *                           step's unsent commands cancelled, every open
 *                           alert resolved
 *   an upgrade              engine_upgrade_targets() (where each state of
 *                           an older version goes in a newer one, and which
 *                           mappings are refused), engine_operator_upgrade()
 *                           (steward upgrade: the instance on the newer
 *                           version, its deadlines counted from when the
 *                           attempt began, what resolves, what is due at
 *                           once, and on a promotion what is sent)
 *   overdue and time left   engine_standing(): against the process's
 *                           watermark, as engine_judge_due() judges, for
 *                           the API's overdue_ms and ms_to_deadline
 *   the watermark's topics  engine_watch_topics(): which topics hold a
 *                           process's watermark
 *   fencing                 in an active version every step entry
 *                           (an event's, on_timeout, an operator's move)
 *                           and every re-send or hand-off takes the next
 *                           token; a reply carrying any token but the
 *                           instance's current one is stale, whatever
 *                           state the instance is in (engine_apply())
 *   leases                  claim and renewals (engine_apply()) push the
 *                           judged deadline to min(event + lease, state
 *                           deadline), never before the event, uncapped
 *                           once the deadline was judged missed; expiry
 *                           (engine_judge_due()): shadow alerts, active
 *                           hands off within retry.max (a hand-off is an
 *                           attempt), then takes the lease's end as the
 *                           last attempt's: on_timeout, else the page;
 *                           leaving a step someone held releases it
 *                           (engine_result_t.released)
 *
 * The rules are kept by concern: engine.c judges an event (the instance,
 * fencing, lease claims and renewals, time in a state, lateness, parked
 * events), engine_due.c due times (deadlines, re-sends and their backoff,
 * on_timeout, lease expiry and hand-offs, the standing figures, command
 * ids), engine_operator.c an operator's actions (an upgrade's among
 * them), engine_alert.c the words
 * of alerts, engine_topics.c the watermark's topics; engine_int.h, private
 * to engine/, holds what they share.
 *
 * Only an instance whose own version is active sends commands: promotion
 * is a new version, and instances keep the version they started on until
 * an operator upgrades them (engine_operator_upgrade()).
 */
#ifndef STEWARD_ENGINE_H
#define STEWARD_ENGINE_H

#include "definitions/def.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum engine_outcome {
    ENGINE_STARTED = 0,
    ENGINE_ADVANCED,
    ENGINE_DUPLICATE,
    ENGINE_PARKED,
    ENGINE_UNEXPECTED,
    ENGINE_LATE,
    ENGINE_VIOLATION,
    ENGINE_TIMEOUT,
    ENGINE_RETRIED,
    ENGINE_STALE,
    ENGINE_CLAIMED,
    ENGINE_RENEWED,
    ENGINE_LEASE_EXPIRED,
    ENGINE_HANDED_OFF,
    ENGINE_RELEASED,
    ENGINE_N_OUTCOMES
} engine_outcome_t;

/* The outcome's name as history records it ("advanced"). */
const char *engine_outcome_name(engine_outcome_t outcome);

/* No deadline. */
#define ENGINE_NO_DEADLINE INT64_MIN

typedef struct engine_instance {
    bool exists;
    int version; /* the definition version it runs on */
    long state;  /* index into def->states */
    int64_t started_ms;
    int64_t state_entered_ms;
    int64_t deadline_ms; /* the current state's; ENGINE_NO_DEADLINE if none */
    int64_t process_deadline_ms;
    bool overdue;         /* the current state's deadline was judged missed */
    bool process_overdue; /* the process deadline was judged missed */
    int attempt;          /* commands sent for the current state, minus one */
    json_t *vars;         /* owned: an object */
    int events_applied;
    int step;                 /* states entered (1 in the start state) */
    int64_t token;            /* the fencing token of the current step entry or of its last
                                 send, whichever came later; 0: none (shadow versions) */
    char *lease_holder;       /* owned; NULL when nobody claimed the step */
    int64_t lease_expires_ms; /* ENGINE_NO_DEADLINE: no lease running */
    int64_t lease_renewed_ms; /* the last claim or renewal; ENGINE_NO_DEADLINE: none */
    bool resend_pending;      /* a re-send waits out its backoff: deadline_ms is when it is
                                 due; a reply before then moves the instance instead */
    /* Inputs to the words of a missed active step (engine_judge_due()): the
     * current step's command rows, queued (not cancelled) and delivered
     * (the broker has them); -1 when unknown (engine_instance_init()), and
     * the words then count the engine's attempts. */
    int sends_queued;
    int sends_delivered;
    bool sends_paused; /* dispatch.paused holds the process's commands */
} engine_instance_t;

/*
 * A command to queue: the current state's, for (step, attempt) with the
 * fencing token. It may be sent as soon as it is queued: the retry backoff
 * is waited out before a re-send is decided, not after.
 */
typedef struct engine_command {
    bool send;
    long state;
    int step;
    int attempt;
    int64_t token;
} engine_command_t;

/* One event, already routed to this process and decoded. */
typedef struct engine_event {
    long event;         /* index into def->events */
    const char *id;     /* its identity for deduplication */
    int64_t time_ms;    /* event time */
    const json_t *data; /* the payload captures read from; borrowed */
    int64_t token;      /* the fencing token it carries; 0: none */
} engine_event_t;

/* What judging one event did. */
typedef struct engine_result {
    engine_outcome_t outcome;
    long from_state; /* -1 when the instance did not exist */
    long to_state;   /* -1 when it still does not */
    /* advanced: how long after the deadline it ended the event's time lies
     * (the state's, and on reaching a terminal state also the process's;
     * the larger); 0 when on time or there was none. Judged from the event's
     * time alone, whether or not the scheduler got there first. */
    int64_t late_by_ms;
    /* advanced: how long after the state's own deadline, the one a
     * `deadline` alert of from_state pages, the event's time lies; 0 when
     * on time or there was none. The store records it on that alert. */
    int64_t deadline_late_by_ms;
    /* started, advanced: when the instance entered to_state, by the rule of
     * engine_entered_at(); ENGINE_NO_DEADLINE otherwise. */
    int64_t entered_ms;
    /* advanced: how long it spent in from_state (engine_time_in_state());
     * -1 otherwise. Stored on history, so the report and backtest read the
     * engine's figure instead of computing their own. */
    int64_t time_in_state_ms;
    char detail[256];         /* why, for history; "" when nothing to say */
    engine_command_t command; /* started, advanced: the command the new state sends */
    /* advanced out of a state whose lease someone held: what the `released`
     * history row says ("picking released by picker-7"); "" otherwise. */
    char released[160];
} engine_result_t;

/* A fresh, absent instance; free its vars with engine_instance_clear(). */
void engine_instance_init(engine_instance_t *inst);
void engine_instance_clear(engine_instance_t *inst);

/*
 * Judges `ev` for `inst` under `def` (the definition version the instance
 * runs on, or for an absent instance the version it would start with).
 * `seen` says whether this event identity was already judged for the
 * instance. Updates *inst in place on started and advanced; leaves it
 * untouched otherwise.
 */
engine_result_t engine_apply(const def_t *def, engine_instance_t *inst, const engine_event_t *ev,
                             bool seen);

/*
 * Judges a parked event again after the instance moved: advanced when the
 * instance now accepts it, parked when it still may later, unexpected when
 * it no longer can, late when the instance has finished.
 */
engine_result_t engine_replay(const def_t *def, engine_instance_t *inst, const engine_event_t *ev);

/* True if `state` or any state reachable from it accepts `event`. */
bool engine_may_accept(const def_t *def, long state, long event);

/* The status an instance in `state` has: "active" or the terminal outcome. */
const char *engine_status(const def_t *def, long state);

/*
 * The earliest deadline of the instance still to be judged: the state's
 * (unless already judged overdue) or the process's (likewise), whichever
 * comes first;
 * ENGINE_NO_DEADLINE for a finished instance or one with none.
 */
int64_t engine_next_deadline(const def_t *def, const engine_instance_t *inst);

/*
 * When the instance, having entered a state at `entered_ms`, enters the
 * next one on an event of time `event_ms`: never before it entered the
 * last one (events of one instance travel on several topics, so a later
 * step's event may carry an earlier time). A first entry (entered_ms
 * ENGINE_NO_DEADLINE) is the event's time.
 */
int64_t engine_entered_at(int64_t entered_ms, int64_t event_ms);

/* How long an instance spent in a state it entered at `entered_ms` and
 * left on an event of time `event_ms`, by the rule of engine_entered_at(). */
int64_t engine_time_in_state(int64_t entered_ms, int64_t event_ms);

/*
 * The judgement of an event whose type the instance's definition version
 * does not declare: unexpected, with the reason. `inst` may be absent.
 */
engine_result_t engine_undeclared(const def_t *def, const engine_instance_t *inst,
                                  const char *event_type);

/*
 * How long past `from_state`'s own deadline a step that spent
 * `time_in_state_ms` there ended; 0 when on time or the state has none.
 * (engine_result_t.late_by_ms is the larger of this and the process's.)
 */
int64_t engine_state_late_by(const def_t *def, long from_state, int64_t time_in_state_ms);

/* ---- due times ------------------------------------------------------------
 *
 * At a due time the engine says what happens, as a list of actions, so
 * that rules of other kinds (a command to send again, a timeout to take, a
 * lease to expire) add an action kind here and nothing in the callers'
 * loop changes.
 */
typedef enum engine_due_kind {
    ENGINE_DUE_DEADLINE = 0,     /* the current state's deadline passed: open its alert (in
                                    active mode only once retries and on_timeout are spent) */
    ENGINE_DUE_PROCESS_DEADLINE, /* the process deadline passed: open its alert */
    ENGINE_DUE_RESEND,           /* active: the deadline passed with attempts left, and the
                                    backoff after it: queue `command` (history `retried`) */
    ENGINE_DUE_TIMEOUT,          /* active: retries spent (the last attempt's deadline or
                                    lease passed): the instance took on_timeout into
                                    to_state (history `timeout`); `command` is that state's */
    ENGINE_DUE_LEASE_EXPIRED,    /* shadow, or active on a step already judged overdue: the
                                    lease ran out: open its alert */
    ENGINE_DUE_HANDOFF,          /* active: the lease ran out with attempts left: queue
                                    `command` with a new token (history `handed_off`) */
    ENGINE_DUE_N_KINDS
} engine_due_kind_t;

#define ENGINE_DUE_MAX ENGINE_DUE_N_KINDS

typedef struct engine_due_action {
    engine_due_kind_t kind;
    int64_t deadline_ms;      /* the deadline (or lease end) that passed; for a re-send after
                                 a backoff, when its wait began */
    int64_t since_ms;         /* since when the instance waits (state entry or start) */
    int64_t overdue_ms;       /* how far the watermark is past the deadline */
    long from_state;          /* the state the instance was in */
    long to_state;            /* TIMEOUT: the state entered; else from_state */
    engine_command_t command; /* RESEND, HANDOFF, TIMEOUT: what to queue (send false: none) */
    char detail[256];         /* for history and the alert: what was tried, who held it */
} engine_due_action_t;

typedef struct engine_due {
    size_t n; /* 0: nothing happens */
    engine_due_action_t actions[ENGINE_DUE_MAX];
    int64_t next_ms; /* the next deadline still to judge; ENGINE_NO_DEADLINE: none */
} engine_due_t;

/* The latest deadline that is due at `watermark_ms` with `grace_ms`: the
 * bound by which a caller may select candidates for engine_judge_due(). */
int64_t engine_due_bound(int64_t watermark_ms, int64_t grace_ms);

/*
 * The time a process's deadlines and parked events are judged at: its
 * watermark, but never past the wall clock `now_ms`. A watermark runs ahead
 * of the clock only when producers stamp times in the future (a clock
 * ahead, or one event stamped an hour on): judged as it stands, it would
 * fire every deadline early, and what Steward timed itself (a re-send's
 * backoff, counted from the pass) would wait until the clock caught up.
 */
int64_t engine_judge_time(int64_t watermark_ms, int64_t now_ms);

/*
 * Judges the instance's deadlines at `watermark_ms`, in a pass run at
 * wall-clock `now_ms`: a deadline is due once the watermark passed it by
 * `grace_ms` (at == deadline counts). Marks each due deadline judged on
 * *inst (overdue, process_overdue) so it is not judged again, and says
 * what happens and the next deadline to judge. What the pass sends goes
 * out at the pass's time, the later of `now_ms` and the watermark less
 * the grace (never before the deadline it follows): a backoff, the next
 * attempt's deadline and an on_timeout state's entry count from there. A
 * finished or absent instance has nothing due.
 */
engine_due_t engine_judge_due(const def_t *def, engine_instance_t *inst, int64_t watermark_ms,
                              int64_t grace_ms, int64_t now_ms);

/*
 * The wait before re-send `attempt` (1 for the first re-send) of `state`:
 * retry.backoff doubled per attempt after the first (backoff_doubling_ms()),
 * capped by retry.max_backoff, or without it by the longest duration a
 * definition may state (DEF_MAX_DURATION_MS); 0 without a backoff.
 */
int64_t engine_retry_backoff(const def_t *def, long state, int attempt);

/*
 * An operator's re-send (steward retry) at wall-clock `now_ms`: the current
 * step's command again, now, as attempt + 1 with the next fencing token,
 * its deadline counting from now (the state's whole deadline, as after a
 * re-send on timeout); a pending backoff and the lease are over (the old
 * holder's replies are stale from then on). An operator may go past
 * retry.max: the next missed deadline then takes on_timeout or pages.
 * Returns true with *cmd to queue and what happened in detail; false with
 * the reason in detail and *inst untouched when there is nothing to send:
 * a shadow version, a finished instance, a state without a command.
 */
bool engine_operator_resend(const def_t *def, engine_instance_t *inst, int64_t now_ms,
                            engine_command_t *cmd, char *detail, size_t detail_size);

/*
 * An operator's move (steward move) into non-terminal `state` at wall-clock
 * `now_ms`: a new step entered as an event enters it (attempt 0, deadline
 * from now, the lease and any pending re-send over, and in an active
 * version the next token even when the state has no command, so the old
 * step's reply racing the move is stale), and the state's
 * command in *cmd (cmd->send) when the instance's version is active and
 * the state has one, as an event's entry would send it. The process
 * deadline is untouched. Returns false with the reason in detail and
 * *inst untouched when the instance does not exist or has finished, or
 * `state` is not a non-terminal state of def.
 */
bool engine_operator_move(const def_t *def, engine_instance_t *inst, long state, int64_t now_ms,
                          engine_command_t *cmd, char *detail, size_t detail_size);

/*
 * An operator's close (steward close) into terminal `state` at wall-clock
 * `now_ms`: a step entered as an event enters it (no deadline, attempt 0,
 * the lease and any pending re-send over, and in an active version the
 * next token, so a reply to the closed step is stale). The step's unsent
 * commands are cancelled and every open alert of the instance resolved
 * (the caller stores both). *status gets the outcome (borrowed from def).
 * Returns false with the reason in detail and *inst untouched when the
 * instance does not exist or has finished, or `state` is not a terminal
 * state of def.
 */
bool engine_operator_close(const def_t *def, engine_instance_t *inst, long state, int64_t now_ms,
                           const char **status, char *detail, size_t detail_size);

/* ---- an upgrade to a newer version (steward upgrade) ------------------------ */

/*
 * The state mapping of an upgrade: each of the n pairs names a state of an
 * older version (from[i]) and the state of the newer one its instances go
 * to (to[i]); every other state goes to the state of the same name. All
 * borrowed.
 */
typedef struct engine_upgrade_map {
    const char *const *from;
    const char *const *to;
    size_t n;
    bool allow_terminal; /* a non-terminal state may go to a terminal one: its instances finish */
} engine_upgrade_map_t;

/*
 * Where each state of `from` goes in `to` under `map`, checked before
 * anything moves: targets[s] (sized from->n_states) is the index in `to`,
 * or -1 for a terminal state of `from` (no open instance is in one) and
 * for a state `only` leaves out (only: NULL for every state, else sized
 * from->n_states, true for the states the upgrade may find instances in).
 * Returns false with the reason in why, naming the state, when a state
 * that may hold instances has no target (`to` declares none of its name
 * and the map names none), goes to a terminal state while
 * map->allow_terminal is false, or the map sends it to a state `to` does
 * not declare.
 */
bool engine_upgrade_targets(const def_t *from, const def_t *to, const engine_upgrade_map_t *map,
                            const bool *only, long *targets, char *why, size_t why_size);

/* What an upgrade does to one instance (engine_operator_upgrade()). */
typedef struct engine_upgrade {
    long to_state;      /* in the newer version */
    const char *status; /* "active", or the outcome of a terminal to_state (borrowed from it) */
    /* The state's and the process's deadlines before and after;
     * ENGINE_NO_DEADLINE: none. */
    int64_t deadline_before_ms, deadline_after_ms;
    int64_t process_deadline_before_ms, process_deadline_after_ms;
    bool resolve_deadline;         /* its open deadline alert resolves: no longer missed */
    bool resolve_process_deadline; /* its open process_deadline alert resolves */
    bool resolve_all;              /* it finished: every open alert resolves, as on a close */
    bool cancel_unsent; /* its unsent commands are cancelled: a shadow version sends nothing,
                           a finished instance neither */
    bool promoted;      /* from a shadow version to an active one */
    /* A deadline (or lease) of the newer version has passed at the time
     * judged and was not judged yet: the scheduler's next pass judges it,
     * and due_kind is what that pass does first (a page, a re-send, the
     * wait before one (ENGINE_DUE_RESEND too), on_timeout); due_ms is the
     * deadline that passed. */
    bool due;
    engine_due_kind_t due_kind;
    int64_t due_ms;
    engine_command_t command; /* what to queue now: a promotion's current step (send_current) */
    char detail[256];         /* for history; on false, why not */
} engine_upgrade_t;

/*
 * Moves an open instance of version `from` into state `to_state` of the
 * newer version `to` (steward upgrade), at wall-clock `now_ms`, its
 * deadlines judged at `watermark_ms` (the process's, never past the clock;
 * ENGINE_NO_DEADLINE while unknown: the clock). It stays the same step:
 * entered when it entered its state, the same attempt and token, its vars
 * kept. Its state's deadline counts from when the current attempt began
 * (the state's entry, or a re-send: the attempt had the state's whole
 * deadline from it), by the newer version's figure, and the process
 * deadline from the start; a pending re-send's backoff is over (a deadline
 * already passed is judged again under the newer version's rules). A
 * deadline judged missed stays judged (its alert open) while the new one
 * has passed as well, and resolves otherwise. A lease runs on when the new
 * state declares one: to min(the last claim or renewal + its duration, the
 * new deadline), as a renewal would have set it; otherwise it is over.
 * Into a terminal state (allowed by engine_upgrade_targets()) the instance
 * finishes as engine_operator_close() finishes it. On a promotion (shadow
 * to active) nothing of the current step is sent unless `send_current`:
 * its command is then queued now, attempt 0 with the next token, and the
 * step's deadline counts from now, as after any send; otherwise the next
 * state entered sends its own, and a missed deadline here re-sends as in
 * any active step. Unsent commands are cancelled when the newer version is
 * shadow. Returns false with the reason in up->detail and *inst untouched
 * when the instance does not exist or has finished, or `to` is not a newer
 * version of the same process.
 */
bool engine_operator_upgrade(const def_t *from, const def_t *to, engine_instance_t *inst,
                             long to_state, bool send_current, int64_t watermark_ms, int64_t now_ms,
                             engine_upgrade_t *up);

/*
 * How the instance stands against its current state's deadline at the
 * process's `watermark_ms`, as engine_judge_due() judges it: overdue_ms is
 * how far the watermark is past a deadline judged missed (inst->overdue),
 * else 0; to_deadline_ms is how long the watermark has until the deadline
 * (negative once past it, before or after the verdict). Both
 * ENGINE_NO_DEADLINE when the state has no deadline or the watermark is
 * unknown (ENGINE_NO_DEADLINE).
 */
typedef struct engine_standing {
    int64_t overdue_ms;
    int64_t to_deadline_ms;
} engine_standing_t;

engine_standing_t engine_standing(int64_t deadline_ms, bool overdue, int64_t watermark_ms);

/*
 * The command's id, the same however often it is produced: lowercase hex
 * SHA-256 of "process \x1f key \x1f step \x1f attempt" (65 bytes with the NUL).
 */
void engine_command_id(const char *process, const char *key, int step, int attempt, char out[65]);

/* What the alert of one due action says. */
typedef struct engine_alert_text {
    char summary[1024];
    char *identity;    /* the whole identity, of any length (the dedup key derives from it);
                          owned, NULL when out of memory: free with engine_alert_text_clear() */
    const char *owner; /* borrowed from def */
    const char *state; /* borrowed from def */
} engine_alert_text_t;

/* Frees text->identity; the rest is borrowed or inline. */
void engine_alert_text_clear(engine_alert_text_t *text);

/*
 * Words the alert of `action` (DEADLINE, PROCESS_DEADLINE, LEASE_EXPIRED)
 * for instance `key`, and returns its details
 * (a new reference; NULL when out of memory). The summary says since when
 * the instance waits as an absolute time: a duration frozen here would be
 * wrong by the time a catch-up page is (re)sent; details.since_ms lets the
 * sender add it.
 */
json_t *engine_due_alert(const def_t *def, const char *key, const engine_instance_t *inst,
                         const engine_due_action_t *action, engine_alert_text_t *text);

/*
 * Words the `sequence` alert of an event judged unexpected or a violation
 * for instance (process, key) in `state` (NULL: no instance), and returns
 * its details (a new reference; NULL when out of memory). `def` may be NULL
 * (its version does not load): the owner is then "default". The identity
 * names the event, so each violating event is one alert.
 */
json_t *engine_sequence_alert(const def_t *def, const char *process, const char *key,
                              const char *state, const char *event_type, const char *event_id,
                              const char *detail, engine_alert_text_t *text);

/* ---- parked events -------------------------------------------------------- */

/* When a parked event of time `event_ms` has waited out its reorder window. */
int64_t engine_park_expires_at(const def_t *def, int64_t event_ms);

/*
 * Judges a parked event of `event_type` whose window ends at `expires_ms`,
 * at `watermark_ms`: ENGINE_VIOLATION once the watermark is past the end
 * (the instance moved nowhere that accepts it in time), with the reason;
 * ENGINE_PARKED while it may still wait. `state` is the instance's current
 * state name, NULL when the instance never started.
 */
engine_result_t engine_judge_parked(const char *event_type, const char *state, int64_t expires_ms,
                                    int64_t watermark_ms);

/* ---- the watermark's topics ---------------------------------------------- */

/*
 * Which topics hold a process's watermark, and so which intake must read
 * and the scheduler watch: every topic an event of a loaded version reads,
 * and every topic an event of a version with open instances reads (those
 * `open`, borrowed; loaded versions among them are skipped). An instance
 * of an old version still waits for its events, so its deadlines, and
 * with them the process's, may only be judged once those topics are read
 * past them too.
 */
typedef struct engine_watch_topic {
    const char *process; /* borrowed from the definitions given */
    const char *topic;   /* the broker's name, when the definitions are mapped */
    /* 0 when a loaded version reads the topic; else the (newest) version
     * with open instances that alone reads it: no loaded definition
     * declares its events, so intake cannot judge them. */
    int old_version;
} engine_watch_topic_t;

typedef struct engine_watch_topics {
    engine_watch_topic_t *items; /* distinct (process, topic), in definition order */
    size_t n;
} engine_watch_topics_t;

/* Fills *out (cleared first); false when out of memory (*out then empty). */
bool engine_watch_topics(const def_set_t *loaded, const def_t *const *open, size_t n_open,
                         engine_watch_topics_t *out);
void engine_watch_topics_clear(engine_watch_topics_t *topics);

#endif
