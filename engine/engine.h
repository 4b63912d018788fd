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
 * Times are event times in milliseconds since the epoch; deadlines are
 * absolute. Storage (store.c) wraps this with the reads and writes.
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
} engine_instance_t;

/* One event, already routed to this process and decoded. */
typedef struct engine_event {
    long event;         /* index into def->events */
    const char *id;     /* its identity for deduplication */
    int64_t time_ms;    /* event time */
    const json_t *data; /* the payload captures read from; borrowed */
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
    char detail[256]; /* why, for history; "" when nothing to say */
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

#endif
