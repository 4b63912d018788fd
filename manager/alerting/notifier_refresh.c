/*
 * notifier_refresh - Alertmanager's view of open alerts (notifier.h):
 * Alertmanager forgets an alert not re-sent before its endsAt, so every
 * alertmanager_resend the open alerts are posted again, each to the
 * Alertmanager sinks its owner routes to, as transfers like any other.
 */
#include "manager/alerting/notifier_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "manager/alerting/alerts.h"

#include <stdlib.h>

static const char open_alerts_sql[] =
    "SELECT a.id, a.kind, a.process, a.key, a.state, a.owner, a.summary, " ALERT_DETAILS_SQL(
        "a") ", "
             "  a.dedup_key, "
             "  steward.rfc3339(a.opened_at), NULL, NULL, "
             "  steward.rfc3339(a.deadline_at), " ALERT_TRACE_SQL(
                 "a") " "
                      "FROM steward.alerts a WHERE a.resolved_at IS NULL AND "
                      "NOT " ALERT_SILENCED_SQL("a") " "
                                                     "ORDER BY a.id";

/*
 * Alertmanager forgets an alert that is not re-sent before its endsAt:
 * post every open alert to every Alertmanager sink its owner routes to.
 */
err_class_t notifier_resend_open(notifier_t *n, char *errstr, size_t errstr_size)
{
    size_t n_sinks = route_sink_count(n->routes);
    bool any = false;
    for (size_t s = 0; s < n_sinks; s++)
        any = any || sink_ops(route_sink_at(n->routes, s)->type)->refresh != NULL;
    if (!any)
        return ERR_OK;

    PGresult *res = PQexec(n->conn, open_alerts_sql);
    err_class_t cls = db_result_class(res, n->conn);
    if (cls != ERR_OK) {
        err_set(cls, errstr, errstr_size, "reading open alerts: %s", PQerrorMessage(n->conn));
        PQclear(res);
        return cls;
    }
    int rows = PQntuples(res);
    payload_alert_t *alerts = calloc((size_t) rows + 1, sizeof *alerts);
    json_t **details = calloc((size_t) rows + 1, sizeof *details);
    for (size_t s = 0; s < n_sinks && alerts != NULL && details != NULL; s++) {
        const sink_t *sink = route_sink_at(n->routes, s);
        size_t count = 0;
        const sink_ops_t *ops = sink_ops(sink->type);
        if (ops->refresh == NULL)
            continue;
        for (int row = 0; row < rows; row++) {
            size_t k;
            const sink_t *const *sinks = route_sinks(n->routes, PQgetvalue(res, row, 5), &k);
            for (size_t i = 0; i < k; i++) {
                if (sinks[i] == sink) {
                    json_decref(details[count]);
                    alerts[count] = notifier_read_alert(n, res, row, 0, &details[count]);
                    count++;
                    break;
                }
            }
        }
        if (count == 0)
            continue;
        char *body = ops->refresh(sink, alerts, count, clock_wall_ms(), n->resend_ms);
        /* A transfer like any other: an Alertmanager that hangs holds no page. */
        if (notifier_post(n, sink, body) == NULL)
            LOG_LIMITED(LOG_LEVEL_WARN, "am-resend", 60000,
                        "could not refresh open alerts in Alertmanager", "sink", sink->name,
                        "error", "out of memory");
    }
    for (int row = 0; row < rows && details != NULL; row++)
        json_decref(details[row]);
    free(details);
    free(alerts);
    PQclear(res);
    return ERR_OK;
}
