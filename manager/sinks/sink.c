/*
 * sink - the table of sink operations; see sink.h. The rows are in
 * sink_TYPE.c.
 */
#include "manager/sinks/sink.h"

#include <stdio.h>
#include <string.h>

/* Indexed by type, so a type without a row is a NULL the unit test finds. */
static const sink_ops_t *const table[SINK_N_TYPES] = {
    [SINK_LOG] = &sink_log_ops,
    [SINK_WEBHOOK] = &sink_webhook_ops,
    [SINK_PAGERDUTY] = &sink_pagerduty_ops,
    [SINK_ALERTMANAGER] = &sink_alertmanager_ops,
};

const sink_ops_t *sink_ops(sink_type_t type)
{
    return (size_t) type < SINK_N_TYPES ? table[type] : NULL;
}

const char *sink_type_name(sink_type_t type)
{
    const sink_ops_t *ops = sink_ops(type);
    return ops != NULL && ops->name != NULL ? ops->name : "?";
}

sink_type_t sink_type_from_name(const char *name)
{
    size_t t;
    for (t = 0; name != NULL && t < SINK_N_TYPES; t++) {
        if (table[t] != NULL && strcmp(name, table[t]->name) == 0)
            return (sink_type_t) t;
    }
    return SINK_N_TYPES;
}

char *sink_type_list(char *buf, size_t buf_size)
{
    size_t o = 0;
    if (buf_size == 0)
        return buf;
    buf[0] = '\0';
    for (size_t t = 0; t < SINK_N_TYPES && o < buf_size; t++) {
        const char *sep = t == 0 ? "" : t + 1 == SINK_N_TYPES ? " or " : ", ";
        int w = snprintf(buf + o, buf_size - o, "%s%s", sep, sink_type_name((sink_type_t) t));
        o += w > 0 ? (size_t) w : 0;
    }
    return buf;
}

const char *sink_verdict_name(sink_verdict_t verdict)
{
    static const char *const names[SINK_N_VERDICTS] = {
        [SINK_DELIVERED] = "delivered", [SINK_RETRY] = "retried", [SINK_FAILED] = "failed"};
    return (size_t) verdict < SINK_N_VERDICTS ? names[verdict] : "?";
}

sink_verdict_t sink_http_verdict(long status)
{
    if (status >= 200 && status < 300)
        return SINK_DELIVERED;
    if (status == 0 || status == 429 || status >= 500 || status == 408)
        return SINK_RETRY;
    return SINK_FAILED;
}
