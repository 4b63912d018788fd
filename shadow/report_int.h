/*
 * report_int - private to shadow/: what the report's .c files (report.c,
 * report_build.c) share and no other file includes: the ladder of nice
 * durations a suggestion is rounded up to and the statement counts by
 * (report.h's report_ladder() gives it to the rest).
 */
#ifndef STEWARD_REPORT_INT_H
#define STEWARD_REPORT_INT_H

#include <stdint.h>

#define SEC  1000LL
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

static const int64_t ladder[] = {
    1,        2,        5,        10,       20,       50,       100,      200,       500,
    1 * SEC,  2 * SEC,  5 * SEC,  10 * SEC, 15 * SEC, 30 * SEC, 1 * MIN,  2 * MIN,   5 * MIN,
    10 * MIN, 15 * MIN, 30 * MIN, 1 * HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, 1 * DAY,
    2 * DAY,  3 * DAY,  7 * DAY,  14 * DAY, 30 * DAY, 60 * DAY, 90 * DAY, 180 * DAY, 365 * DAY,
};
#define LADDER_N (sizeof ladder / sizeof ladder[0])
/* The units served the table alone: MIN, at least, means more elsewhere. */
#undef SEC
#undef MIN
#undef HOUR
#undef DAY

#endif
