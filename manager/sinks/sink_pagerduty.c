/*
 * sink_pagerduty - PagerDuty's Events API v2: trigger, acknowledge and
 * resolve by the alert's dedup_key, with the integration's routing key
 * (a secret). Storms grouped.
 */
#include "manager/sinks/sink.h"

#include "common/err.h"
#include "manager/sinks/payload.h"

#include <stdlib.h>
#include <string.h>

#define PAGERDUTY_DEFAULT_URL "https://events.pagerduty.com/v2/enqueue"

static bool pagerduty_validate(sink_t *sink, const char *where, char *errstr, size_t errstr_size)
{
    if (sink->routing_key == NULL || *sink->routing_key == '\0') {
        err_set(ERR_INVALID, errstr, errstr_size,
                "%s.routing_key: a pagerduty sink needs the integration's routing key "
                "(routing_key or routing_key_file)",
                where);
        return false;
    }
    if (sink->url == NULL && (sink->url = strdup(PAGERDUTY_DEFAULT_URL)) == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "%s: out of memory", where);
        return false;
    }
    return true;
}

static char *pagerduty_body(const sink_t *sink, const payload_alert_t *alert, sink_event_t event,
                            int64_t now_ms, int64_t resend_ms)
{
    (void) resend_ms;
    if (event == SINK_ACKNOWLEDGE)
        return payload_acknowledge(sink, alert, now_ms);
    return payload_pagerduty(sink, alert, event == SINK_RESOLVE, now_ms);
}

const sink_ops_t sink_pagerduty_ops = {
    .name = "pagerduty",
    .validate = pagerduty_validate,
    .body = pagerduty_body,
    .group = payload_group,
    .judge = sink_http_verdict,
    .path = "",
    .acknowledges = true,
    .retry_after = true,
};
