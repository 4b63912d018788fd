/*
 * rows - the rows a batch writes; see rows.h.
 */
#include "manager/intake/rows.h"

#include <assert.h>
#include <string.h>

void rows_init(rows_t *rows, const char *table, size_t n_columns)
{
    assert(n_columns <= ROWS_MAX_COLUMNS);
    memset(rows, 0, sizeof *rows);
    rows->table = table;
    rows->n_columns = n_columns;
}

void rows_clear(rows_t *rows)
{
    for (size_t i = 0; i < rows->n_columns; i++)
        pgarr_free(&rows->column[i]);
    rows->n = 0;
}

static void add_text(pgarr_t *col, const char *value)
{
    pgarr_add(col, value);
}

static void add_int(pgarr_t *col, int64_t value)
{
    if (value == ROWS_NULL)
        pgarr_add(col, NULL);
    else
        pgarr_add_int(col, value);
}

static void add_bool(pgarr_t *col, bool value)
{
    pgarr_add_bool(col, value);
}

static void add_bytes(pgarr_t *col, rows_bytes_t value)
{
    if (value.bytes == NULL)
        pgarr_add(col, NULL);
    else
        pgarr_add_hex(col, value.bytes, value.len);
}

/* Each adder appends one element to every column, in the table's order. */
#define ROWS_APPEND(field, kind) add_##kind(&rows->column[i++], row->field);
#define ROWS_ADDER(name, LIST)                                                                     \
    void rows_add_##name(rows_t *rows, const rows_##name##_row_t *row)                             \
    {                                                                                              \
        size_t i = 0;                                                                              \
        LIST(ROWS_APPEND)                                                                          \
        assert(i == rows->n_columns);                                                              \
        rows->n++;                                                                                 \
    }

ROWS_ADDER(history, ROWS_HISTORY)
ROWS_ADDER(parked, ROWS_PARKED)
ROWS_ADDER(unparked, ROWS_UNPARKED)
ROWS_ADDER(rejected, ROWS_REJECTED)
ROWS_ADDER(instances, ROWS_INSTANCES)
ROWS_ADDER(offsets, ROWS_OFFSETS)
ROWS_ADDER(deferred, ROWS_DEFERRED)
ROWS_ADDER(undeferred, ROWS_UNDEFERRED)

err_class_t rows_params(rows_t *rows, const char **params, char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < rows->n_columns; i++) {
        /* A column of another length means an adder skipped or doubled
         * one: unnest() would pad it with NULLs into rows nobody built. */
        if (rows->column[i].n != rows->n)
            return err_set(ERR_FATAL, errstr, errstr_size,
                           "internal error: column %zu of the %s rows has %zu values for %zu rows",
                           i + 1, rows->table, rows->column[i].n, rows->n);
        if ((params[i] = pgarr_text(&rows->column[i])) == NULL)
            return err_set(ERR_FATAL, errstr, errstr_size, "out of memory building the %s rows",
                           rows->table);
    }
    return ERR_OK;
}
