/*
 * sink_alertmanager - Alertmanager's API v2 (POST /api/v2/alerts): an
 * open alert ends a few resend intervals ahead, so every open alert is
 * re-sent each interval (the refresh), and a resolve is the alert with
 * its endsAt at the resolution. Alertmanager groups by itself and has no
 * acknowledge: the alert keeps firing until it resolves.
 */
#include "manager/sinks/sink.h"

#include "common/err.h"
#include "manager/sinks/payload.h"

static bool alertmanager_validate(sink_t *sink, const char *where, char *errstr, size_t errstr_size)
{
    if (sink->url == NULL) {
        err_set(ERR_INVALID, errstr, errstr_size,
                "%s.url: a alertmanager sink needs an http(s) URL", where);
        return false;
    }
    return true;
}

static char *alertmanager_body(const sink_t *sink, const payload_alert_t *alert, sink_event_t event,
                               int64_t now_ms, int64_t resend_ms)
{
    (void) event; /* a resolved alert carries its own endsAt */
    return payload_alertmanager(sink, alert, 1, now_ms, resend_ms);
}

const sink_ops_t sink_alertmanager_ops = {
    .name = "alertmanager",
    .validate = alertmanager_validate,
    .body = alertmanager_body,
    .refresh = payload_alertmanager,
    .judge = sink_http_verdict,
    .path = "/api/v2/alerts",
    .retry_after = true,
};
