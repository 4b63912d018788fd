/*
 * rejections - what steward.rejected holds, summed for a person: the total,
 * the count by reason, and by topic and reason with the detail of the
 * first message, most first. `steward backtest` prints it for its replay,
 * `steward report` for its window, so the messages a definition could not
 * read are said where its figures are read.
 */
#ifndef STEWARD_REJECTIONS_H
#define STEWARD_REJECTIONS_H

#include "common/err.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The messages recorded at or after since_wall_ms (epoch ms; 0: all),
 * into *out (a new object): {"total", "by_reason": {reason: count},
 * "by_topic": [{topic, reason, count, sample}]}. Reads in the caller's
 * transaction, if any; on failure *out is NULL and errstr says why.
 */
err_class_t rejections_read(PGconn *conn, int64_t since_wall_ms, json_t **out, char *errstr,
                            size_t errstr_size);

/* The object rejections_read() made, as text: "messages rejected: N
 * (reason n, ...)", then a line per topic and reason with its sample. */
void rejections_print(const json_t *rejected, FILE *out);

#endif
