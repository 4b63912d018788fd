/*
 * report - what a process's history says about its deadlines: the
 * `steward report` behind the shadow period.
 *
 * Terms, per process and state S (docs/report.md gives the arithmetic):
 *
 *   an entry   a `started` or `advanced` row of steward.history whose
 *              to_state is S. It enters S at its event time, or at the
 *              time the instance entered its previous state if that is
 *              later (time in a state never runs back: the engine's rule).
 *   an exit    the instance's next `started`/`advanced` row, which leaves
 *              S; its latency is its entry time minus S's entry time.
 *   open       an instance whose row in steward.instances is active in S.
 *   the window the last --since of event time (or all history): entries
 *              count when they entered in it, exits when they left in it,
 *              starts when they started in it. Only history recorded in
 *              it (less REPORT_RECORDED_SLACK_MS) is read, plus, per
 *              instance, the row that entered the state it leaves there.
 *   the period the time the starts in the window cover: from the first to
 *              the last, plus one mean gap between starts. Every "per day"
 *              figure is a count divided by it.
 *
 * The figures are computed by PostgreSQL in one statement (window
 * functions over the history, percentile_disc per state); this module
 * applies the policy (which percentile to trust, the margin, rounding to a
 * nice duration) and renders the result as JSON or text.
 */
#ifndef STEWARD_REPORT_H
#define STEWARD_REPORT_H

#include "common/err.h"
#include "definitions/def.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Fewer exits than this and no deadline is suggested. */
#define REPORT_MIN_SAMPLES 20
/* From this many exits on, the suggestion starts from p99.9 rather than p99. */
#define REPORT_MANY_SAMPLES 1000
/* The suggested deadline is the percentile times this, rounded up. */
#define REPORT_MARGIN 1.5
/* With --since, history is read from the window's start less this, by the
 * time it was recorded: an event stamped up to this far ahead of the clock
 * of the steward that recorded it still counts in the window. */
#define REPORT_RECORDED_SLACK_MS (3600LL * 1000)

typedef struct report_options {
    int64_t since_ms;        /* the window: the last since_ms of event time; 0 for all */
    const char *since_text;  /* since_ms as the user wrote it ("7d"), for the document */
    const char *definitions; /* where the definitions came from, for the document */
} report_options_t;

/*
 * Reads the latest version of each process recorded in
 * steward.definitions (only `process` when it is not NULL) into *out, a
 * new set (def_set_free() it), in process name order. A recorded document
 * that no longer loads is ERR_INVALID with the first problem in errstr; a
 * failed query is its db_result_class(). An empty set is not an error.
 */
err_class_t report_load_recorded(PGconn *conn, const char *process, def_set_t **out, char *errstr,
                                 size_t errstr_size);

/*
 * Computes the report for `defs` (borrowed; one per process, in the order
 * they are to appear) into *out, a new JSON object (json_decref() it)
 * whose shape docs/report.md describes. Runs one read-only transaction on
 * conn. On failure *out is NULL and the class is returned with the reason
 * in errstr.
 */
err_class_t report_build(PGconn *conn, const def_t *const *defs, size_t n_defs,
                         const report_options_t *opts, json_t **out, char *errstr,
                         size_t errstr_size);

/* Prints a report_build() document as aligned tables, one per process. */
void report_print_text(const json_t *report, FILE *out);

/*
 * The pure parts, public for the unit tests.
 */

/*
 * The order states are reported in: the non-terminal states by their
 * distance from the start state along transitions and on_timeout (ties in
 * definition order), then the terminal states in definition order. Not
 * simply definition order: a definition read back from steward.definitions
 * has been through jsonb, which keeps object keys sorted by length, so its
 * states no longer come in the order the file gave them. Fills order[]
 * (def->n_states indexes into def->states).
 */
void report_state_order(const def_t *def, size_t *order);

/*
 * The nice durations a suggestion is rounded up to, ascending: 1, 2, 5,
 * 10, 15 and 30 of seconds and minutes, 1, 2, 3, 6 and 12 hours, then
 * 1, 2, 3, 7, 14, 30, 60, 90, 180 and 365 days (milliseconds below a
 * second go 1, 2, 5, 10, 20, 50...). Sets *steps (static) and returns how
 * many.
 */
size_t report_ladder(const int64_t **steps);

/* The index in the ladder of the smallest step >= ms; -1 beyond its top. */
long report_ladder_index(int64_t ms);

/*
 * The time the starts cover: (last - first) * starts / (starts - 1), so
 * that n evenly spaced starts cover n gaps. 0 (unknown) with fewer than
 * two starts or when they all share one time.
 */
double report_period_ms(int64_t starts, int64_t first_ms, int64_t last_ms);

/* count per day over period_ms; -1 (unknown) when period_ms is 0. */
double report_per_day(double count, double period_ms);

typedef struct report_suggestion {
    bool enough;         /* samples >= REPORT_MIN_SAMPLES */
    const char *basis;   /* "p99" or "p99.9"; static */
    int64_t basis_ms;    /* that percentile */
    int64_t target_ms;   /* basis_ms * REPORT_MARGIN, rounded up */
    long step;           /* its ladder index; -1 beyond the ladder */
    int64_t deadline_ms; /* the ladder step; -1 beyond the ladder */
} report_suggestion_t;

/* The suggested deadline for `samples` exits with these percentiles. */
report_suggestion_t report_suggest(int64_t samples, int64_t p99_ms, int64_t p999_ms);

/*
 * A state's latency histogram from its exits per ladder bucket: counts[b]
 * (b in 0..n_ladder) holds the exits above ladder step b - 1 and not above
 * step b; counts[n_ladder] those above the top. Returns a new JSON array
 * of {"le_ms": STEP, "count": N}, one per ladder step from the first
 * non-empty bucket to the last non-empty one below the top (counts per
 * bucket, not cumulative: each holds the exits above the previous entry's
 * le_ms), then always {"le_ms": null, "count": N} for those above the top.
 * With no exits, only the null entry (count 0). NULL when memory runs out.
 */
json_t *report_histogram(const int64_t *counts, size_t n_ladder);

/*
 * A rate for people: "-" when unknown (negative), two decimals below 10,
 * one below 100, else whole with thousands separated ("10,000"). Returns
 * buf.
 */
char *report_format_rate(double per_day, char *buf, size_t buf_size);

#endif
