/*
 * sink_log - the log sink: each page one JSON line on stderr, written at
 * once by the notifier whatever log_level says (a page is not a
 * diagnostic). Nothing to configure; it takes no acknowledge and is never
 * grouped, since every alert is its own line.
 */
#include "manager/sinks/payload.h"
#include "manager/sinks/sink.h"

static bool log_validate(sink_t *sink, const char *where, char *errstr, size_t errstr_size)
{
    (void) sink;
    (void) where;
    (void) errstr;
    (void) errstr_size;
    return true;
}

static char *log_body(const sink_t *sink, const payload_alert_t *alert, sink_event_t event,
                      int64_t now_ms, int64_t resend_ms)
{
    (void) resend_ms;
    return payload_log(sink, alert, event == SINK_RESOLVE, now_ms);
}

const sink_ops_t sink_log_ops = {
    .name = "log",
    .validate = log_validate,
    .body = log_body,
};
