/*
 * failpoint - named places in the owning half where a test may crash the
 * daemon, make a call fail, or hold it up, to see what a fault between two
 * statements leaves behind.
 *
 * A failpoint is a name in the table below and a FAILPOINT("name") (or
 * FAILPOINT_ERROR) at one place in the code. Which ones act, and how, comes
 * from $STEWARD_FAILPOINTS, read once by fp_init() at start:
 *
 *   STEWARD_FAILPOINTS="dispatcher.after_produce=crash@2;intake.before_commit=error"
 *
 * Each entry is NAME=ACTION[@N], entries separated by ';'. ACTION is
 *   crash      the process dies at once by SIGKILL: no exit handlers, no
 *              flush, no COMMIT; what is uncommitted is lost as in a crash
 *   error      the call site takes its transient error path (only points
 *              written with FAILPOINT_ERROR can; fp_init refuses others)
 *   pause(MS)  the calling thread sleeps MS milliseconds
 * With @N the action happens on the Nth time the point is reached only;
 * without it, every time.
 *
 * The points exist only in a build with STEWARD_FAILPOINTS defined (the
 * CMake option of the same name, on in the test build): elsewhere the
 * macros are nothing, no name is in the binary, and fp_init() refuses a
 * non-empty variable so a test cannot pass against a build without them.
 *
 * Threads: fp_init() runs once on the main thread before any other thread
 * starts; after it the table is read-only but for its hit counters, which
 * are atomic, so any thread may pass a point.
 */
#ifndef STEWARD_FAILPOINT_H
#define STEWARD_FAILPOINT_H

#include "common/err.h"

#include <stdbool.h>
#include <stddef.h>

/* Every failpoint, with whether its site can take an error path. The one
 * list: the crash suite walks it, fp_init checks names against it. */
#define FP_LIST(X)                                                                                 \
    X("intake.before_commit", true)                                                                \
    X("intake.after_commit", false)                                                                \
    X("scheduler.after_judge", false)                                                              \
    X("scheduler.before_commit", true)                                                             \
    X("scheduler.after_commit", false)                                                             \
    X("scheduler.handoff", false)                                                                  \
    X("dispatcher.after_claim", false)                                                             \
    X("dispatcher.after_produce", false)                                                           \
    X("dispatcher.before_mark_sent", true)                                                         \
    X("dispatcher.after_mark_sent", false)                                                         \
    X("notifier.before_record", true)                                                              \
    X("notifier.after_record", false)                                                              \
    X("actions.before_commit", true)                                                               \
    X("upgrade.between_batches", false)

/*
 * Parses `spec` (the variable's text; NULL or "" sets nothing) into the
 * table. Returns ERR_OK, or ERR_INVALID with the reason in errstr (an
 * unknown name lists the known ones) and nothing set. In a build without
 * failpoints a non-empty spec is refused the same way. Call once, before
 * any thread passes a point.
 */
err_class_t fp_init(const char *spec, char *errstr, size_t errstr_size);

/* Whether this build has failpoints. */
bool fp_enabled(void);

/* How many failpoints there are, and the name of the i-th (borrowed,
 * static); NULL past the end or in a build without them. */
size_t fp_count(void);
const char *fp_name(size_t i);

/* How many times the point `name` has been reached since fp_init(); -1
 * for a name not in the table. */
long fp_hits(const char *name);

/* Passes the point: counts the hit and acts as set. Returns true when its
 * action is `error` and this hit is one it applies to. A name not in the
 * table is a programming error: the process aborts. */
bool fp_hit(const char *name);

/* fp_hit(), for a FAILPOINT_ERROR site: ERR_OK, or ERR_TRANSIENT with
 * errstr saying that the failpoint injected the error. */
err_class_t fp_hit_error(const char *name, char *errstr, size_t errstr_size);

#ifdef STEWARD_FAILPOINTS
#define FAILPOINT(name)                            ((void) fp_hit(name))
#define FAILPOINT_ERROR(name, errstr, errstr_size) fp_hit_error(name, errstr, errstr_size)
#else
#define FAILPOINT(name)                            ((void) 0)
#define FAILPOINT_ERROR(name, errstr, errstr_size) ERR_OK
#endif

#endif
