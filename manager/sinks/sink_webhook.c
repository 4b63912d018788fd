/*
 * sink_webhook - the generic webhook: Steward's own JSON body
 * (payload_webhook(), documented in docs/operations.md) POSTed to the
 * sink's URL for every trigger, resolve and acknowledge; storms grouped.
 */
#include "manager/sinks/sink.h"

#include "common/err.h"
#include "manager/sinks/payload.h"

static bool webhook_validate(sink_t *sink, const char *where, char *errstr, size_t errstr_size)
{
    if (sink->url == NULL) {
        err_set(ERR_INVALID, errstr, errstr_size, "%s.url: a webhook sink needs an http(s) URL",
                where);
        return false;
    }
    return true;
}

static char *webhook_body(const sink_t *sink, const payload_alert_t *alert, sink_event_t event,
                          int64_t now_ms, int64_t resend_ms)
{
    (void) resend_ms;
    if (event == SINK_ACKNOWLEDGE)
        return payload_acknowledge(sink, alert, now_ms);
    return payload_webhook(alert, event == SINK_RESOLVE, now_ms);
}

const sink_ops_t sink_webhook_ops = {
    .name = "webhook",
    .validate = webhook_validate,
    .body = webhook_body,
    .group = payload_group,
    .judge = sink_http_verdict,
    .path = "",
    .acknowledges = true,
    .retry_after = true,
};
