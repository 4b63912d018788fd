/*
 * report_upgrade - private to shadow/ (report_build.c calls it): what an
 * upgrade to each suggested deadline would do to the instances open now,
 * judged by the engine as `steward upgrade --dry-run` judges them.
 */
#ifndef STEWARD_REPORT_UPGRADE_H
#define STEWARD_REPORT_UPGRADE_H

#include "common/err.h"
#include "definitions/def.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

/*
 * Adds to each state of process_doc (report_build()'s document of `def`,
 * the reported version) whose suggestion has a deadline_ms the object
 * suggestion["upgrade"]: {"instances": the open instances in the state
 * that an upgrade to a version with that deadline (def's, that figure
 * alone changed, default state mapping) would move, "alerts_resolved" and
 * "alert_ids": their open deadline alerts that would resolve}. Instances of
 * older versions are judged on their own recorded version. Reads in the
 * caller's transaction; a failed query is its class, with the reason in
 * errstr, and adds nothing.
 */
err_class_t report_upgrade_add(PGconn *conn, const def_t *def, json_t *process_doc, char *errstr,
                               size_t errstr_size);

#endif
