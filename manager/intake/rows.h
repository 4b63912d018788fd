/*
 * rows - the rows a batch writes, built one whole row at a time.
 *
 * A batch writes each table with one statement whose parameters are one
 * array per column, unnest()ed on the server. Parallel arrays must stay the
 * same length, or unnest() pads the short ones with NULLs and writes a row
 * nobody built. So the columns of each table are listed once, below, in the
 * order of its statement's parameters; a row is added as a struct of that
 * table (every column set, or the compiler's designated-initializer zero),
 * and rows_params() refuses a table whose columns differ in length.
 *
 * A rows_t owns its arrays; rows_clear() frees them.
 */
#ifndef STEWARD_ROWS_H
#define STEWARD_ROWS_H

#include "common/err.h"
#include "common/pgarr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An integer column's SQL NULL. */
#define ROWS_NULL INT64_MIN

/* Bytes sent as hex text, decode()d into bytea by the statement; NULL
 * pointer: SQL NULL. */
typedef struct rows_bytes {
    const void *bytes;
    size_t len;
} rows_bytes_t;

/*
 * The tables. X(column, kind): kind is text (const char *, NULL for SQL
 * NULL), int (int64_t, ROWS_NULL for SQL NULL), bool, or bytes
 * (rows_bytes_t). The order is the order of the parameters of the table's
 * statement in manager/intake/store.c; ROWS_EVENT and ROWS_KEPT stand for
 * their columns, in place.
 */

/* An event: its id and type, where it was read, its time. */
#define ROWS_EVENT(X)                                                                              \
    X(event_id, text)                                                                              \
    X(event_type, text)                                                                            \
    X(topic, text)                                                                                 \
    X(partition, int)                                                                              \
    X(offset, int)                                                                                 \
    X(event_ms, int)

/* An event kept for an instance: the first columns of both steward.parked
 * and steward.deferred. */
#define ROWS_KEPT(X)                                                                               \
    X(process, text)                                                                               \
    X(key, text)                                                                                   \
    ROWS_EVENT(X)                                                                                  \
    X(payload, text)

#define ROWS_HISTORY(X)                                                                            \
    X(process, text)                                                                               \
    X(key, text)                                                                                   \
    X(version, int)                                                                                \
    ROWS_EVENT(X)                                                                                  \
    X(from_state, text)                                                                            \
    X(to_state, text)                                                                              \
    X(outcome, text)                                                                               \
    X(replayed, bool)                                                                              \
    X(detail, text)                                                                                \
    X(epoch, int)                                                                                  \
    X(late_by_ms, int)                                                                             \
    X(entered_ms, int)                                                                             \
    X(time_in_state_ms, int)                                                                       \
    X(deadline_late_by_ms, int)                                                                    \
    X(traceparent, text)                                                                           \
    X(tracestate, text)

#define ROWS_PARKED(X)                                                                             \
    ROWS_KEPT(X)                                                                                   \
    X(expires_ms, int)                                                                             \
    X(traceparent, text)                                                                           \
    X(tracestate, text)

#define ROWS_UNPARKED(X) X(id, int)

#define ROWS_REJECTED(X)                                                                           \
    X(topic, text)                                                                                 \
    X(partition, int)                                                                              \
    X(offset, int)                                                                                 \
    X(process, text)                                                                               \
    X(reason, text)                                                                                \
    X(detail, text)                                                                                \
    X(value, bytes)                                                                                \
    X(headers, text)                                                                               \
    X(kafka_ms, int)                                                                               \
    X(epoch, int)                                                                                  \
    X(message_key, bytes)

#define ROWS_INSTANCES(X)                                                                          \
    X(process, text)                                                                               \
    X(key, text)                                                                                   \
    X(version, int)                                                                                \
    X(state, text)                                                                                 \
    X(status, text)                                                                                \
    X(started_ms, int)                                                                             \
    X(entered_ms, int)                                                                             \
    X(deadline_ms, int)                                                                            \
    X(process_deadline_ms, int)                                                                    \
    X(next_deadline_ms, int)                                                                       \
    X(overdue, bool)                                                                               \
    X(process_overdue, bool)                                                                       \
    X(attempt, int)                                                                                \
    X(vars, text)                                                                                  \
    X(events_applied, int)                                                                         \
    X(step, int)                                                                                   \
    X(token, int)                                                                                  \
    X(lease_holder, text)                                                                          \
    X(lease_expires_ms, int)                                                                       \
    X(lease_renewed_ms, int)                                                                       \
    X(resend_pending, bool)

#define ROWS_DEFERRED(X)                                                                           \
    ROWS_KEPT(X)                                                                                   \
    X(token, int)                                                                                  \
    X(epoch, int)                                                                                  \
    X(traceparent, text)                                                                           \
    X(tracestate, text)

#define ROWS_UNDEFERRED(X) X(id, int)

#define ROWS_OFFSETS(X)                                                                            \
    X(topic, text)                                                                                 \
    X(partition, int)                                                                              \
    X(next_offset, int)                                                                            \
    X(watermark_ms, int)                                                                           \
    X(epoch, int)

#define ROWS_CTYPE_text          const char *
#define ROWS_CTYPE_int           int64_t
#define ROWS_CTYPE_bool          bool
#define ROWS_CTYPE_bytes         rows_bytes_t
#define ROWS_FIELD(column, kind) ROWS_CTYPE_##kind column;
#define ROWS_ONE(column, kind)   +1

/* One row of each table. */
typedef struct rows_history_row {
    ROWS_HISTORY(ROWS_FIELD)
} rows_history_row_t;
typedef struct rows_parked_row {
    ROWS_PARKED(ROWS_FIELD)
} rows_parked_row_t;
typedef struct rows_unparked_row {
    ROWS_UNPARKED(ROWS_FIELD)
} rows_unparked_row_t;
typedef struct rows_rejected_row {
    ROWS_REJECTED(ROWS_FIELD)
} rows_rejected_row_t;
typedef struct rows_instances_row {
    ROWS_INSTANCES(ROWS_FIELD)
} rows_instances_row_t;
typedef struct rows_deferred_row {
    ROWS_DEFERRED(ROWS_FIELD)
} rows_deferred_row_t;

typedef struct rows_undeferred_row {
    ROWS_UNDEFERRED(ROWS_FIELD)
} rows_undeferred_row_t;

typedef struct rows_offsets_row {
    ROWS_OFFSETS(ROWS_FIELD)
} rows_offsets_row_t;

enum {
    ROWS_HISTORY_COLUMNS = 0 ROWS_HISTORY(ROWS_ONE),
    ROWS_PARKED_COLUMNS = 0 ROWS_PARKED(ROWS_ONE),
    ROWS_UNPARKED_COLUMNS = 0 ROWS_UNPARKED(ROWS_ONE),
    ROWS_REJECTED_COLUMNS = 0 ROWS_REJECTED(ROWS_ONE),
    ROWS_INSTANCES_COLUMNS = 0 ROWS_INSTANCES(ROWS_ONE),
    ROWS_OFFSETS_COLUMNS = 0 ROWS_OFFSETS(ROWS_ONE),
    ROWS_DEFERRED_COLUMNS = 0 ROWS_DEFERRED(ROWS_ONE),
    ROWS_UNDEFERRED_COLUMNS = 0 ROWS_UNDEFERRED(ROWS_ONE),
    ROWS_MAX_COLUMNS = 21,
};

/* The rows of one table: one array per column, n rows. */
typedef struct rows {
    const char *table; /* its name, for errors; static */
    size_t n_columns;
    size_t n;
    pgarr_t column[ROWS_MAX_COLUMNS];
} rows_t;

/* Each table's empty rows; then add rows with its adder below. */
void rows_init(rows_t *rows, const char *table, size_t n_columns);
void rows_clear(rows_t *rows); /* frees the arrays; the rows are empty again */

void rows_add_history(rows_t *rows, const rows_history_row_t *row);
void rows_add_parked(rows_t *rows, const rows_parked_row_t *row);
void rows_add_unparked(rows_t *rows, const rows_unparked_row_t *row);
void rows_add_rejected(rows_t *rows, const rows_rejected_row_t *row);
void rows_add_instances(rows_t *rows, const rows_instances_row_t *row);
void rows_add_offsets(rows_t *rows, const rows_offsets_row_t *row);
void rows_add_deferred(rows_t *rows, const rows_deferred_row_t *row);
void rows_add_undeferred(rows_t *rows, const rows_undeferred_row_t *row);

/*
 * Fills params[0..n_columns) with the finished arrays, for a statement
 * whose first parameters are the table's columns in order. ERR_FATAL when
 * an allocation failed or the columns differ in length (a broken adder:
 * the statement would write rows padded with NULLs).
 */
err_class_t rows_params(rows_t *rows, const char **params, char *errstr, size_t errstr_size);

#endif
