/*
 * payload - sink bodies; see payload.h.
 */
#include "manager/payload.h"

#include "manager/decode.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Sets key to a string, or null when value is NULL. */
static void set_text(json_t *obj, const char *key, const char *value)
{
    json_object_set_new(obj, key, value != NULL ? json_string(value) : json_null());
}

static json_t *alert_object(const payload_alert_t *a)
{
    json_t *obj = json_object();
    json_object_set_new(obj, "id", json_integer(a->id));
    set_text(obj, "kind", a->kind);
    set_text(obj, "process", a->process);
    set_text(obj, "key", a->key);
    set_text(obj, "state", a->state);
    set_text(obj, "owner", a->owner);
    set_text(obj, "summary", a->summary);
    set_text(obj, "dedup_key", a->dedup_key);
    set_text(obj, "deadline_at", a->deadline_at);
    set_text(obj, "opened_at", a->opened_at);
    set_text(obj, "resolved_at", a->resolved_at);
    set_text(obj, "resolution", a->resolution);
    json_object_set_new(obj, "details",
                        a->details != NULL ? json_incref((json_t *) a->details) : json_object());
    return obj;
}

static char *dump(json_t *doc)
{
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    return text;
}

char *payload_webhook(const payload_alert_t *a, bool resolve)
{
    json_t *doc = json_object();
    json_object_set_new(doc, "version", json_integer(1));
    json_object_set_new(doc, "event", json_string(resolve ? "resolve" : "trigger"));
    json_object_set_new(doc, "alert", alert_object(a));
    return dump(doc);
}

char *payload_pagerduty(const sink_t *sink, const payload_alert_t *a, bool resolve)
{
    json_t *doc = json_object();
    json_object_set_new(doc, "routing_key", json_string(sink->routing_key));
    json_object_set_new(doc, "event_action", json_string(resolve ? "resolve" : "trigger"));
    json_object_set_new(doc, "dedup_key", json_string(a->dedup_key));
    if (!resolve) {
        /* PagerDuty truncates summaries at 1024 characters; cut cleanly. */
        char summary[1025];
        snprintf(summary, sizeof summary, "%s", a->summary);
        char source[256];
        snprintf(source, sizeof source, "steward/%s", a->process != NULL ? a->process : "intake");
        json_t *details = alert_object(a);
        json_object_del(details, "summary");
        json_t *payload = json_object();
        json_object_set_new(payload, "summary", json_string(summary));
        json_object_set_new(payload, "source", json_string(source));
        json_object_set_new(payload, "severity", json_string(sink->severity));
        set_text(payload, "timestamp", a->opened_at);
        set_text(payload, "component", a->process);
        set_text(payload, "group", a->state);
        set_text(payload, "class", a->kind);
        json_object_set_new(payload, "custom_details", details);
        json_object_set_new(doc, "payload", payload);
    }
    return dump(doc);
}

const char *payload_alertname(const char *kind)
{
    if (kind == NULL)
        return "Steward";
    if (strcmp(kind, "deadline") == 0)
        return "StewardStalledStep";
    if (strcmp(kind, "process_deadline") == 0)
        return "StewardProcessDeadline";
    if (strcmp(kind, "sequence") == 0)
        return "StewardSequenceViolation";
    if (strcmp(kind, "blind") == 0)
        return "StewardBlind";
    return "Steward";
}

char *payload_alertmanager(const sink_t *sink, const payload_alert_t *alerts, size_t n,
                           int64_t now_ms, int64_t resend_ms)
{
    json_t *list = json_array();
    char ends[40];
    decode_format_time(now_ms + 4 * resend_ms, ends, sizeof ends);

    for (size_t i = 0; i < n; i++) {
        const payload_alert_t *a = &alerts[i];
        json_t *labels = json_object(), *annotations = json_object(), *alert = json_object();
        json_object_set_new(labels, "alertname", json_string(payload_alertname(a->kind)));
        if (a->process != NULL)
            json_object_set_new(labels, "process", json_string(a->process));
        if (a->key != NULL)
            json_object_set_new(labels, "key", json_string(a->key));
        if (a->state != NULL)
            json_object_set_new(labels, "state", json_string(a->state));
        json_object_set_new(labels, "team", json_string(a->owner));
        json_object_set_new(labels, "severity", json_string(sink->severity));
        json_object_set_new(labels, "kind", json_string(a->kind));
        json_object_set_new(annotations, "summary", json_string(a->summary));
        json_object_set_new(annotations, "dedup_key", json_string(a->dedup_key));
        if (a->resolution != NULL)
            json_object_set_new(annotations, "resolution", json_string(a->resolution));
        json_object_set_new(alert, "labels", labels);
        json_object_set_new(alert, "annotations", annotations);
        set_text(alert, "startsAt", a->opened_at);
        json_object_set_new(alert, "endsAt",
                            json_string(a->resolved_at != NULL ? a->resolved_at : ends));
        json_array_append_new(list, alert);
    }
    return dump(list);
}
