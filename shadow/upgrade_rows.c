/*
 * upgrade_rows - the reader of steward.upgrade_rows(); see upgrade_rows.h.
 */
#include "shadow/upgrade_rows.h"

#include <stdlib.h>
#include <string.h>

int64_t upgrade_rows_ms(const PGresult *res, int r, int col)
{
    return PQgetisnull(res, r, col) ? ENGINE_NO_DEADLINE
                                    : strtoll(PQgetvalue(res, r, col), NULL, 10);
}

static bool flag_at(const PGresult *res, int r, int col)
{
    return !PQgetisnull(res, r, col) && strcmp(PQgetvalue(res, r, col), "t") == 0;
}

void upgrade_rows_instance(const PGresult *res, int r, const def_t *def, long state,
                           engine_instance_t *inst)
{
    engine_instance_init(inst);
    inst->exists = true;
    inst->version = def->version;
    inst->state = state;
    inst->started_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_STARTED);
    inst->state_entered_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_ENTERED);
    inst->deadline_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_DEADLINE);
    inst->process_deadline_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_PROCESS_DEADLINE);
    inst->overdue = flag_at(res, r, UPGRADE_ROWS_OVERDUE);
    inst->process_overdue = flag_at(res, r, UPGRADE_ROWS_PROCESS_OVERDUE);
    inst->attempt = atoi(PQgetvalue(res, r, UPGRADE_ROWS_ATTEMPT));
    inst->vars = json_loads(PQgetvalue(res, r, UPGRADE_ROWS_VARS), 0, NULL);
    inst->step = atoi(PQgetvalue(res, r, UPGRADE_ROWS_STEP));
    inst->token = strtoll(PQgetvalue(res, r, UPGRADE_ROWS_TOKEN), NULL, 10);
    inst->lease_holder = PQgetisnull(res, r, UPGRADE_ROWS_LEASE_HOLDER)
                             ? NULL
                             : strdup(PQgetvalue(res, r, UPGRADE_ROWS_LEASE_HOLDER));
    inst->lease_expires_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_LEASE_EXPIRES);
    inst->lease_renewed_ms = upgrade_rows_ms(res, r, UPGRADE_ROWS_LEASE_RENEWED);
    inst->resend_pending = flag_at(res, r, UPGRADE_ROWS_RESEND);
}
