/*
 * test_sim - what the sim suites (test_sim.c, test_sim_def.c,
 * test_sim_active.c) share: the start time of their runs, a check cheap
 * enough for loops over thousands of orders, and the options they start
 * from.
 */
#ifndef STEWARD_TEST_SIM_H
#define STEWARD_TEST_SIM_H

#include "sim/sim.h"

#include <check.h>

#define T0 1767225600000LL /* 2026-01-01T00:00:00Z */

/* For checks inside loops over thousands of orders: libcheck records
 * every ck_assert's location with a write(2), which would make this suite
 * take seconds; EXPECT costs nothing until it fails. */
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg("%s:%d: expected %s", __FILE__, __LINE__, #cond);                         \
    } while (0)

static inline sim_options_t base_options(void)
{
    sim_options_t o;
    sim_options_init(&o);
    o.seed = 42;
    o.start_ms = T0;
    o.virtual_time = true;
    return o;
}

#endif
