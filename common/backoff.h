/*
 * backoff - the one exponential backoff Steward waits by: a command's
 * re-send (engine_retry_backoff()), a command row's next dispatch
 * (dispatcher_backoff_ms()) and an alert's next delivery
 * (notifier_backoff_ms(), which adds its jitter to it). Each caller picks
 * its base and cap; the doubling and its bounds are here alone.
 * Pure: no clock, no state.
 */
#ifndef STEWARD_BACKOFF_H
#define STEWARD_BACKOFF_H

#include <stdint.h>

/*
 * The wait before try number `attempt` (1 for the first): base_ms doubled
 * per attempt after the first, capped at max_ms. An attempt below 1
 * counts as the first. Saturating: never above max_ms and never overflowing,
 * whatever the attempt. Never negative: 0 when base_ms or max_ms is 0 or
 * less.
 */
int64_t backoff_doubling_ms(int attempt, int64_t base_ms, int64_t max_ms);

#endif
