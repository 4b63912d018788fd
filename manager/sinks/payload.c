/*
 * payload - sink bodies; see payload.h.
 */
#include "manager/sinks/payload.h"

#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/duration.h"
#include "formats/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Sets key to a string, or null when value is NULL. */
static void set_text(json_t *obj, const char *key, const char *value)
{
    json_object_set_new(obj, key, value != NULL ? json_string(value) : json_null());
}

char *payload_summary(const payload_alert_t *a, int64_t now_ms)
{
    const char *summary = a->summary != NULL ? a->summary : "";
    const json_t *since_ms = a->details != NULL ? json_object_get(a->details, "since_ms") : NULL;
    const char *since =
        a->details != NULL ? json_string_value(json_object_get(a->details, "since")) : NULL;
    const char *at = since != NULL && *since != '\0' ? strstr(summary, since) : NULL;
    if (!json_is_integer(since_ms) || at == NULL)
        return strdup(summary);

    char ago[48], text[32];
    int64_t since_value = (int64_t) json_integer_value(since_ms);
    duration_format_rounded(now_ms >= since_value ? now_ms - since_value : 0, text, sizeof text);
    snprintf(ago, sizeof ago, " (%s ago)", text);
    size_t head = (size_t) (at - summary) + strlen(since);
    char *out = malloc(strlen(summary) + strlen(ago) + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, summary, head);
    strcpy(out + head, ago);
    strcat(out, summary + head);
    return out;
}

char *payload_trace_link(const char *tmpl, const char *trace_id)
{
    static const char var[] = "${trace_id}";
    if (tmpl == NULL || *tmpl == '\0' || trace_id == NULL || *trace_id == '\0')
        return NULL;
    size_t n = 0;
    for (const char *p = strstr(tmpl, var); p != NULL; p = strstr(p + sizeof var - 1, var))
        n++;
    size_t size = strlen(tmpl) + n * strlen(trace_id) + 1;
    char *out = malloc(size), *o = out;
    if (out == NULL)
        return NULL;
    for (const char *p = tmpl; *p != '\0';) {
        if (strncmp(p, var, sizeof var - 1) == 0) {
            o = stpcpy(o, trace_id);
            p += sizeof var - 1;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

static json_t *alert_object(const payload_alert_t *a, int64_t now_ms)
{
    json_t *obj = json_object();
    json_object_set_new(obj, "id", json_integer(a->id));
    set_text(obj, "kind", a->kind);
    set_text(obj, "process", a->process);
    set_text(obj, "key", a->key);
    set_text(obj, "state", a->state);
    set_text(obj, "owner", a->owner);
    char *summary = payload_summary(a, now_ms);
    set_text(obj, "summary", summary != NULL ? summary : a->summary);
    free(summary);
    set_text(obj, "dedup_key", a->dedup_key);
    set_text(obj, "deadline_at", a->deadline_at);
    set_text(obj, "opened_at", a->opened_at);
    set_text(obj, "resolved_at", a->resolved_at);
    set_text(obj, "resolution", a->resolution);
    char *link = payload_trace_link(a->tracing_link, a->trace_id);
    set_text(obj, "trace_id", a->trace_id);
    set_text(obj, "trace_link", link);
    free(link);
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

char *payload_webhook(const payload_alert_t *a, bool resolve, int64_t now_ms)
{
    json_t *doc = json_object();
    json_object_set_new(doc, "version", json_integer(1));
    json_object_set_new(doc, "event", json_string(resolve ? "resolve" : "trigger"));
    json_object_set_new(doc, "alert", alert_object(a, now_ms));
    return dump(doc);
}

/* Sets key to value cut to max bytes on a character boundary; null when NULL. */
static void set_cut(json_t *obj, const char *key, const char *value, size_t max)
{
    char buf[PAYLOAD_PD_SUMMARY_MAX + 1];
    if (value == NULL) {
        json_object_set_new(obj, key, json_null());
        return;
    }
    json_object_set_new(obj, key, json_string(utf8_cut(value, max, "...", buf, sizeof buf)));
}

/* The payload fields PagerDuty reads besides the summary, the same for one
 * alert and a group of them (a is the group's first). */
static void set_pd_fields(json_t *payload, const sink_t *sink, const payload_alert_t *a)
{
    char *source = NULL;
    if (asprintf(&source, "steward/%s", a->process != NULL ? a->process : "intake") < 0)
        source = NULL;
    set_cut(payload, "source", source != NULL ? source : "steward", PAYLOAD_PD_FIELD_MAX);
    free(source);
    json_object_set_new(payload, "severity", json_string(sink->severity));
    set_text(payload, "timestamp", a->opened_at);
    set_cut(payload, "component", a->process, PAYLOAD_PD_FIELD_MAX);
    set_cut(payload, "group", a->state, PAYLOAD_PD_FIELD_MAX);
    set_text(payload, "class", a->kind);
}

char *payload_pagerduty(const sink_t *sink, const payload_alert_t *a, bool resolve, int64_t now_ms)
{
    json_t *doc = json_object();
    json_object_set_new(doc, "routing_key", json_string(sink->routing_key));
    json_object_set_new(doc, "event_action", json_string(resolve ? "resolve" : "trigger"));
    json_object_set_new(doc, "dedup_key", json_string(a->dedup_key));
    if (!resolve) {
        /* PagerDuty refuses a summary over 1,024 bytes, and json_string()
         * refuses invalid UTF-8: cut on a character boundary. The whole
         * text stays in custom_details. */
        char *summary = payload_summary(a, now_ms);
        json_t *details = alert_object(a, now_ms);
        json_t *payload = json_object();
        set_cut(payload, "summary", summary != NULL ? summary : a->summary, PAYLOAD_PD_SUMMARY_MAX);
        free(summary);
        set_pd_fields(payload, sink, a);
        json_object_set_new(payload, "custom_details", details);
        json_object_set_new(doc, "payload", payload);
        char *link = payload_trace_link(a->tracing_link, a->trace_id);
        if (link != NULL) {
            /* PagerDuty shows links on the incident: one click to the trace. */
            json_t *l = json_object();
            json_object_set_new(l, "href", json_string(link));
            json_object_set_new(l, "text", json_string("trace of the last event"));
            json_object_set_new(doc, "links", json_pack("[o]", l));
        }
        free(link);
    }
    return dump(doc);
}

char *payload_acknowledge(const sink_t *sink, const payload_alert_t *a, int64_t now_ms)
{
    json_t *doc = json_object();
    if (sink->type == SINK_PAGERDUTY) {
        json_object_set_new(doc, "routing_key", json_string(sink->routing_key));
        json_object_set_new(doc, "event_action", json_string("acknowledge"));
        json_object_set_new(doc, "dedup_key", json_string(a->dedup_key));
    } else {
        json_object_set_new(doc, "version", json_integer(1));
        json_object_set_new(doc, "event", json_string("acknowledge"));
        json_object_set_new(doc, "alert", alert_object(a, now_ms));
    }
    return dump(doc);
}

char *payload_group(const sink_t *sink, const payload_alert_t *alerts, size_t n,
                    const char *group_key, int64_t now_ms)
{
    const payload_alert_t *first = &alerts[0];
    json_t *keys = json_array(), *ids = json_array();
    char summary[PAYLOAD_PD_SUMMARY_MAX + 1];
    size_t len = 0;

    len += (size_t) snprintf(summary, sizeof summary, "%zu events out of sequence: %s in %s: ", n,
                             first->process != NULL ? first->process : "?",
                             first->state != NULL ? first->state : "no state");
    for (size_t i = 0; i < n; i++) {
        const char *key = alerts[i].key != NULL ? alerts[i].key : "";
        json_array_append_new(ids, json_integer(alerts[i].id));
        if (i < PAYLOAD_GROUP_KEYS) {
            char cut[PAYLOAD_PD_FIELD_MAX + 1];
            json_array_append_new(
                keys, json_string(utf8_cut(key, PAYLOAD_PD_FIELD_MAX, "...", cut, sizeof cut)));
        }
        if (len < sizeof summary)
            len +=
                (size_t) snprintf(summary + len, sizeof summary - len, "%s%s", i ? ", " : "", key);
    }
    if (len < sizeof summary)
        snprintf(summary + len, sizeof summary - len, "; owner %s",
                 first->owner != NULL ? first->owner : "?");
    /* snprintf may have cut through a character: cut again on a boundary. */
    char clean[PAYLOAD_PD_SUMMARY_MAX + 1];
    utf8_cut(summary, PAYLOAD_PD_SUMMARY_MAX, "...", clean, sizeof clean);

    payload_alert_t group = *first;
    group.summary = clean;
    group.key = NULL;
    group.dedup_key = group_key;
    json_t *details =
        json_pack("{s:O, s:O, s:I}", "keys", keys, "alert_ids", ids, "count", (json_int_t) n);
    group.details = details;
    json_t *doc = json_object();
    if (sink->type == SINK_PAGERDUTY) {
        json_object_set_new(doc, "routing_key", json_string(sink->routing_key));
        json_object_set_new(doc, "event_action", json_string("trigger"));
        json_object_set_new(doc, "dedup_key", json_string(group_key));
        json_t *payload = json_object();
        json_object_set_new(payload, "summary", json_string(clean));
        set_pd_fields(payload, sink, first);
        json_object_set_new(payload, "custom_details", alert_object(&group, now_ms));
        json_object_set_new(doc, "payload", payload);
    } else {
        json_object_set_new(doc, "version", json_integer(1));
        json_object_set_new(doc, "event", json_string("trigger"));
        json_object_set_new(doc, "alert", alert_object(&group, now_ms));
        json_object_set_new(doc, "group",
                            json_pack("{s:I, s:O}", "count", (json_int_t) n, "keys", keys));
    }
    json_decref(details);
    json_decref(keys);
    json_decref(ids);
    return dump(doc);
}

char *payload_log(const sink_t *sink, const payload_alert_t *a, bool resolve, int64_t now_ms)
{
    char ts[40];
    char *summary = payload_summary(a, now_ms);
    json_t *line = json_object();
    rfc3339_format(now_ms, ts, sizeof ts);
    json_object_set_new(line, "ts", json_string(ts));
    json_object_set_new(line, "level", json_string("alert"));
    json_object_set_new(line, "msg", json_string(resolve ? "alert resolved" : "alert"));
    const char *fields[][2] = {
        {"sink", sink->name},
        {"kind", a->kind},
        {"process", a->process},
        {"key", a->key},
        {"state", a->state},
        {"owner", a->owner},
        {"summary", summary != NULL ? summary : a->summary},
        {"resolution", resolve ? a->resolution : NULL},
        {"dedup_key", a->dedup_key},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (fields[i][1] != NULL || strcmp(fields[i][0], "resolution") != 0 || resolve)
            json_object_set_new(line, fields[i][0],
                                fields[i][1] != NULL ? json_string(fields[i][1]) : json_null());
    }
    free(summary);
    return dump(line);
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
    if (strcmp(kind, "unloadable") == 0)
        return "StewardUnloadableVersion";
    return "Steward";
}

char *payload_alertmanager(const sink_t *sink, const payload_alert_t *alerts, size_t n,
                           int64_t now_ms, int64_t resend_ms)
{
    json_t *list = json_array();
    char ends[40];
    rfc3339_format(now_ms + 4 * resend_ms, ends, sizeof ends);

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
        char *summary = payload_summary(a, now_ms);
        set_text(annotations, "summary", summary != NULL ? summary : a->summary);
        free(summary);
        json_object_set_new(annotations, "dedup_key", json_string(a->dedup_key));
        if (a->resolution != NULL)
            json_object_set_new(annotations, "resolution", json_string(a->resolution));
        char *link = payload_trace_link(a->tracing_link, a->trace_id);
        if (a->trace_id != NULL)
            json_object_set_new(annotations, "trace_id", json_string(a->trace_id));
        if (link != NULL)
            json_object_set_new(annotations, "trace_link", json_string(link));
        free(link);
        json_object_set_new(alert, "labels", labels);
        json_object_set_new(alert, "annotations", annotations);
        set_text(alert, "startsAt", a->opened_at);
        json_object_set_new(alert, "endsAt",
                            json_string(a->resolved_at != NULL ? a->resolved_at : ends));
        json_array_append_new(list, alert);
    }
    return dump(list);
}
