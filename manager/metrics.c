/*
 * metrics - the counters; see metrics.h.
 */
#include "manager/metrics.h"

metrics_t metrics;
