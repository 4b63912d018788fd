/*
 * rejsum - the summary of rejected messages that `steward run` logs: how
 * many messages intake rejected since its last summary, by reason and by
 * topic, each topic and reason with the detail of its first message, once
 * every intake.rejection_summary (and at the end of the run). A definition
 * that looks for the type or key where a topic does not keep it rejects
 * every message of that topic; without this line the only sign would be
 * rows in steward.rejected nobody reads.
 *
 * What this replica rejected, not the group's: each replica summarises
 * the messages of its own partitions. Thread-safe: lanes commit side by
 * side.
 */
#ifndef STEWARD_REJSUM_H
#define STEWARD_REJSUM_H

#include <stdint.h>

typedef struct rejsum rejsum_t; /* opaque */

/* (topic, reason) pairs kept apart; the rest is counted as "other". */
#define REJSUM_MAX_PAIRS 32

/* A new summary logged at most every every_ms (0: never), or NULL when out
 * of memory. */
rejsum_t *rejsum_new(int64_t every_ms, int64_t now_ms);
void rejsum_free(rejsum_t *rs); /* NULL is a no-op */

/* Counts one rejected message (strings borrowed; detail may be NULL). */
void rejsum_add(rejsum_t *rs, const char *topic, const char *reason, const char *detail);

/* Logs the summary when every_ms has passed since the last one (or with
 * force) and something was rejected meanwhile, then starts over. */
void rejsum_tick(rejsum_t *rs, int64_t now_ms, int force);

#endif
