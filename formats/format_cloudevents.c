/*
 * format_cloudevents - CloudEvents in structured and binary mode, and a
 * bare ce_type header; see format_cloudevents.h.
 */
#include "formats/format_cloudevents.h"

#include "common/rfc3339.h"
#include "common/utf8.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const decode_header_t *find_header(const decode_input_t *in, const char *name)
{
    for (size_t i = 0; i < in->n_headers; i++) {
        if (strcasecmp(in->headers[i].name, name) == 0)
            return &in->headers[i];
    }
    return NULL;
}

static char *header_string(const decode_header_t *h)
{
    if (h == NULL || h->value == NULL)
        return NULL;
    return strndup(h->value, h->len);
}

void format_cloudevents_clear(decode_message_t *out)
{
    free(out->ce_type);
    free(out->ce_id);
    free(out->ce_source);
    free(out->ce_time);
    free(out->ce_subject);
    free(out->ce_traceparent);
    free(out->ce_tracestate);
    out->ce_type = out->ce_id = out->ce_source = out->ce_time = out->ce_subject = NULL;
    out->ce_traceparent = out->ce_tracestate = NULL;
}

/* The CloudEvents 1.0 required attributes, present and non-empty; a
 * binary-mode event's detail names the headers that carry them. */
static decode_reason_t check_ce(decode_message_t *out, const char *specversion, bool binary,
                                char *detail, size_t detail_size)
{
    if (specversion == NULL) {
        snprintf(detail, detail_size, "CloudEvent without specversion");
        return DECODE_INVALID_CLOUDEVENT;
    }
    if (strcmp(specversion, "1.0") != 0) {
        snprintf(detail, detail_size, "CloudEvents specversion '%.40s' is not supported (1.0 is)",
                 specversion);
        return DECODE_UNSUPPORTED_SPECVERSION;
    }
    const char *missing = out->ce_type == NULL || !*out->ce_type       ? "type"
                          : out->ce_id == NULL || !*out->ce_id         ? "id"
                          : out->ce_source == NULL || !*out->ce_source ? "source"
                                                                       : NULL;
    if (missing != NULL && binary) {
        snprintf(detail, detail_size,
                 "binary-mode CloudEvent (it has a ce_specversion header) without its required "
                 "attribute '%s': header ce_%s is missing or empty; a CloudEvent needs "
                 "ce_specversion, ce_type, ce_id and ce_source",
                 missing, missing);
        return DECODE_INVALID_CLOUDEVENT;
    }
    if (missing != NULL) {
        snprintf(detail, detail_size, "CloudEvent without its required attribute '%s'", missing);
        return DECODE_INVALID_CLOUDEVENT;
    }
    int64_t ms;
    if (out->ce_time != NULL && !rfc3339_parse(out->ce_time, &ms)) {
        snprintf(detail, detail_size, "CloudEvent time '%.60s' is not an RFC 3339 timestamp",
                 out->ce_time);
        return DECODE_INVALID_TIME;
    }
    if (out->ce_time != NULL && !decode_time_in_range(ms)) {
        snprintf(detail, detail_size,
                 "CloudEvent time '%.60s' is outside the years 0001 to 9999 Steward accepts",
                 out->ce_time);
        return DECODE_INVALID_TIME;
    }
    return DECODE_OK;
}

static char *member_string(const json_t *obj, const char *name, bool *mistyped)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL || json_is_null(v))
        return NULL;
    if (!json_is_string(v)) {
        *mistyped = true;
        return NULL;
    }
    return strdup(json_string_value(v));
}

/*
 * Whether a media type (len bytes, its parameters after ';' aside) is one
 * the CloudEvents JSON format reads as JSON: application/json or a +json
 * suffix. Nothing declared is JSON too: the spec's default.
 */
static bool json_media_type(const char *type, size_t len)
{
    const char *semi = memchr(type, ';', len);
    size_t n = semi != NULL ? (size_t) (semi - type) : len;
    while (n > 0 && (*type == ' ' || *type == '\t'))
        type++, n--;
    while (n > 0 && (type[n - 1] == ' ' || type[n - 1] == '\t'))
        n--;
    return n == 0 || (n == 16 && strncasecmp(type, "application/json", 16) == 0) ||
           (n > 5 && strncasecmp(type + n - 5, "+json", 5) == 0);
}

#define NOT_JSON "is not JSON: Steward reads JSON data only (application/json or a +json type)"

/* The data of a valid CloudEvent in structured mode, or why Steward does
 * not read it: a reason of Steward's (unsupported_data) when the event
 * says its data is of a type Steward does not read. */
static decode_reason_t structured_data(decode_message_t *out, const char *datacontenttype,
                                       char *detail, size_t detail_size)
{
    if (datacontenttype != NULL && !json_media_type(datacontenttype, strlen(datacontenttype))) {
        snprintf(detail, detail_size, "CloudEvent datacontenttype \"%.80s\" " NOT_JSON,
                 datacontenttype);
        return DECODE_UNSUPPORTED_DATA;
    }
    if (json_object_get(out->value, "data_base64") != NULL) {
        snprintf(detail, detail_size, "CloudEvent data_base64 is not supported: send JSON data");
        return DECODE_UNSUPPORTED_DATA;
    }
    json_t *data = json_object_get(out->value, "data");
    if (data == NULL || !json_is_object(data)) {
        snprintf(detail, detail_size, "CloudEvent data must be a JSON object");
        return DECODE_NOT_OBJECT;
    }
    out->data = data;
    return DECODE_OK;
}

static decode_reason_t structured_ce(decode_message_t *out, char *detail, size_t detail_size)
{
    bool mistyped = false;
    char *specversion = member_string(out->value, "specversion", &mistyped);
    char *datacontenttype = member_string(out->value, "datacontenttype", &mistyped);

    out->cloudevent = true;
    out->ce_type = member_string(out->value, "type", &mistyped);
    out->ce_id = member_string(out->value, "id", &mistyped);
    out->ce_source = member_string(out->value, "source", &mistyped);
    out->ce_time = member_string(out->value, "time", &mistyped);
    out->ce_subject = member_string(out->value, "subject", &mistyped);
    /* An extension: mistyped, it is a malformed traceparent (ignored and
     * counted by decode), never a rejected event. */
    json_t *trace = json_object_get(out->value, "traceparent");
    if (trace != NULL && !json_is_null(trace))
        out->ce_traceparent = strdup(json_is_string(trace) ? json_string_value(trace) : "");
    /* Its companion: mistyped, a malformed tracestate (dropped and counted). */
    json_t *state = json_object_get(out->value, "tracestate");
    if (state != NULL && !json_is_null(state))
        out->ce_tracestate = strdup(json_is_string(state) ? json_string_value(state) : "\x01");

    decode_reason_t reason;
    if (mistyped) {
        snprintf(detail, detail_size, "CloudEvent attributes must be strings");
        reason = DECODE_INVALID_CLOUDEVENT;
    } else {
        reason = check_ce(out, specversion, false, detail, detail_size);
    }
    if (reason == DECODE_OK)
        reason = structured_data(out, datacontenttype, detail, detail_size);
    free(specversion);
    free(datacontenttype);
    return reason;
}

/*
 * The CloudEvents attribute headers become text columns (event ids,
 * types, times): each must be UTF-8 without NUL bytes and at most
 * DECODE_MAX_HEADER_BYTES, or PostgreSQL refuses the whole batch.
 */
static decode_reason_t check_ce_header(const decode_input_t *in, const char *name, char *detail,
                                       size_t detail_size)
{
    const decode_header_t *h = find_header(in, name);
    if (h == NULL || h->value == NULL)
        return DECODE_OK;
    if (h->len > DECODE_MAX_HEADER_BYTES) {
        /* ce_id and ce_source make the event id: name that limit */
        bool id = strcmp(name, "ce_id") == 0 || strcmp(name, "ce_source") == 0;
        snprintf(detail, detail_size, "header %s is %zu bytes, over the %s limit of %d", name,
                 h->len, id ? "event id" : "header", DECODE_MAX_HEADER_BYTES);
        return id ? DECODE_INVALID_ID : DECODE_INVALID_HEADER;
    }
    if (memchr(h->value, 0, h->len) != NULL) {
        snprintf(detail, detail_size, "header %s holds a NUL byte", name);
        return DECODE_INVALID_HEADER;
    }
    if (!utf8_valid(h->value, h->len)) {
        snprintf(detail, detail_size, "header %s is not valid UTF-8", name);
        return DECODE_INVALID_HEADER;
    }
    return DECODE_OK;
}

static decode_reason_t check_ce_headers(const decode_input_t *in, char *detail, size_t detail_size)
{
    static const char *const names[] = {"ce_specversion", "ce_type", "ce_id",
                                        "ce_source",      "ce_time", "ce_subject"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        decode_reason_t bad = check_ce_header(in, names[i], detail, detail_size);
        if (bad != DECODE_OK)
            return bad;
    }
    return DECODE_OK;
}

static decode_reason_t binary_ce(const decode_input_t *in, decode_message_t *out, char *detail,
                                 size_t detail_size)
{
    decode_reason_t bad = check_ce_headers(in, detail, detail_size);
    if (bad != DECODE_OK)
        return bad;
    char *specversion = header_string(find_header(in, "ce_specversion"));

    out->cloudevent = true;
    out->ce_type = header_string(find_header(in, "ce_type"));
    out->ce_id = header_string(find_header(in, "ce_id"));
    out->ce_source = header_string(find_header(in, "ce_source"));
    out->ce_time = header_string(find_header(in, "ce_time"));
    out->ce_subject = header_string(find_header(in, "ce_subject"));
    out->ce_traceparent = header_string(find_header(in, "ce_traceparent"));
    const decode_header_t *state = find_header(in, "ce_tracestate");
    /* A NUL byte would cut it short of what was sent: malformed, dropped. */
    out->ce_tracestate =
        state != NULL && state->value != NULL && memchr(state->value, 0, state->len) != NULL
            ? strdup("\x01")
            : header_string(state);
    decode_reason_t reason = check_ce(out, specversion, true, detail, detail_size);
    free(specversion);
    return reason;
}

/*
 * A ce_type header without ce_specversion: not a CloudEvent, but a plain
 * JSON event whose producer names its type the CloudEvents way. The type
 * is read from the header; the id and the time from the definition's
 * envelope, as for any plain event (ce_id, ce_source and ce_time are not
 * read: without ce_specversion they are not CloudEvents attributes).
 */
static decode_reason_t bare_ce_type(const decode_input_t *in, decode_message_t *out, char *detail,
                                    size_t detail_size)
{
    decode_reason_t bad = check_ce_header(in, "ce_type", detail, detail_size);
    if (bad != DECODE_OK)
        return bad;
    const decode_header_t *h = find_header(in, "ce_type");
    if (h->value == NULL || h->len == 0)
        return DECODE_OK; /* no text: the type is looked for where the envelope says */
    out->ce_type = header_string(h);
    return DECODE_OK;
}

/* The content-type of structured mode in JSON, the one structured
 * format Steward reads. */
static bool structured_json(const decode_header_t *ctype)
{
    return ctype != NULL && ctype->value != NULL && ctype->len >= 28 &&
           strncasecmp(ctype->value, "application/cloudevents+json", 28) == 0;
}

decode_reason_t format_cloudevents_content(const decode_input_t *in, char *detail,
                                           size_t detail_size)
{
    const decode_header_t *ctype = find_header(in, "content-type");
    if (structured_json(ctype))
        return DECODE_OK; /* its datacontenttype is an attribute, judged with the others */
    const char *type = ctype != NULL ? ctype->value : NULL;
    size_t len = type != NULL ? ctype->len : 0;
    if (len > 24 && strncasecmp(type, "application/cloudevents+", 24) == 0) {
        snprintf(detail, detail_size,
                 "CloudEvent in structured mode as \"%.*s\" (its content-type): Steward reads "
                 "structured mode in JSON only (application/cloudevents+json), or binary mode",
                 (int) (len < 80 ? len : 80), type);
        return DECODE_UNSUPPORTED_DATA;
    }
    if (find_header(in, "ce_specversion") == NULL)
        return DECODE_OK; /* no CloudEvent: a content-type is no attribute of it */
    /* The Kafka binding maps datacontenttype to content-type; some
     * producers send it as an attribute header like the others. */
    const char *from = "content-type";
    if (type == NULL) {
        const decode_header_t *h = find_header(in, "ce_datacontenttype");
        type = h != NULL ? h->value : NULL;
        len = type != NULL ? h->len : 0;
        from = "ce_datacontenttype";
    }
    if (type == NULL || json_media_type(type, len))
        return DECODE_OK;
    snprintf(detail, detail_size,
             "binary-mode CloudEvent's %s \"%.*s\" (its datacontenttype) " NOT_JSON, from,
             (int) (len < 80 ? len : 80), type);
    return DECODE_UNSUPPORTED_DATA;
}

decode_reason_t format_cloudevents(const decode_input_t *in, decode_message_t *out, char *detail,
                                   size_t detail_size)
{
    if (structured_json(find_header(in, "content-type")))
        return structured_ce(out, detail, detail_size);
    if (find_header(in, "ce_specversion") != NULL)
        return binary_ce(in, out, detail, detail_size);
    if (find_header(in, "ce_type") != NULL)
        return bare_ce_type(in, out, detail, detail_size);
    return DECODE_OK;
}
