/*
 * upgrade_rows - the reader of steward.upgrade_rows() (migration 0021):
 * its columns, and one row as the engine's instance. `steward upgrade`
 * (manager/operator) and the report's upgrade figures (report_upgrade)
 * both select `r.*` and the clock from it and judge each row with
 * engine_operator_upgrade(); reading the row in one place keeps the dry
 * run and the report's "would move" figures the same judgement.
 */
#ifndef STEWARD_UPGRADE_ROWS_H
#define STEWARD_UPGRADE_ROWS_H

#include "definitions/def.h"
#include "engine/engine.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

/* The columns of steward.upgrade_rows(), then the clock (epoch ms) that
 * every caller selects after them. */
enum {
    UPGRADE_ROWS_KEY,
    UPGRADE_ROWS_VERSION,
    UPGRADE_ROWS_STATE,
    UPGRADE_ROWS_STATUS,
    UPGRADE_ROWS_CLAIMED,
    UPGRADE_ROWS_STARTED,
    UPGRADE_ROWS_ENTERED,
    UPGRADE_ROWS_DEADLINE,
    UPGRADE_ROWS_PROCESS_DEADLINE,
    UPGRADE_ROWS_OVERDUE,
    UPGRADE_ROWS_PROCESS_OVERDUE,
    UPGRADE_ROWS_ATTEMPT,
    UPGRADE_ROWS_VARS,
    UPGRADE_ROWS_STEP,
    UPGRADE_ROWS_TOKEN,
    UPGRADE_ROWS_LEASE_HOLDER,
    UPGRADE_ROWS_LEASE_EXPIRES,
    UPGRADE_ROWS_LEASE_RENEWED,
    UPGRADE_ROWS_RESEND,
    UPGRADE_ROWS_ALERTS,
    UPGRADE_ROWS_NOW,
};

/* A time column of row r in epoch ms; ENGINE_NO_DEADLINE when NULL. */
int64_t upgrade_rows_ms(const PGresult *res, int r, int col);

/* Row r as the engine sees it, in `state` of def (the row's own recorded
 * version); the caller clears *inst with engine_instance_clear(). */
void upgrade_rows_instance(const PGresult *res, int r, const def_t *def, long state,
                           engine_instance_t *inst);

#endif
