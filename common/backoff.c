/*
 * backoff - the exponential backoff (backoff.h).
 */
#include "common/backoff.h"

int64_t backoff_doubling_ms(int attempt, int64_t base_ms, int64_t max_ms)
{
    if (base_ms <= 0 || max_ms <= 0)
        return 0;
    int64_t wait = base_ms;
    /* Stop doubling at the cap: the comparison against max_ms / 2 keeps
     * the product inside int64_t for any base and any attempt. */
    for (int i = 1; i < attempt && wait < max_ms; i++)
        wait = wait > max_ms / 2 ? max_ms : wait * 2;
    return wait < max_ms ? wait : max_ms;
}
