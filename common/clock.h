/*
 * clock - the two clocks Steward reads: the wall clock, for times that are
 * stored or compared with event times, and the monotonic clock, for
 * measuring how long something took or waiting a while. Milliseconds.
 * The engine never reads either: its time is an argument.
 */
#ifndef STEWARD_CLOCK_H
#define STEWARD_CLOCK_H

#include <stdint.h>

int64_t clock_wall_ms(void);
int64_t clock_monotonic_ms(void);

#endif
