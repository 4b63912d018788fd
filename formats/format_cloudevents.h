/*
 * format_cloudevents - CloudEvents 1.0 over Kafka, as decode reads them:
 * structured mode (content-type application/cloudevents+json: the
 * attributes in the value, the event in its "data"), binary mode (a
 * ce_specversion header: the attributes in ce_* headers, the event the
 * value), and a bare ce_type header (no ce_specversion: not a CloudEvent,
 * only the type of a plain JSON event). Pure.
 */
#ifndef STEWARD_FORMAT_CLOUDEVENTS_H
#define STEWARD_FORMAT_CLOUDEVENTS_H

#include "formats/decode.h"

#include <stddef.h>

/*
 * Reads the CloudEvents side of a message whose value parsed as a JSON
 * object (out->value and out->data set): the attributes into out->ce_*
 * and out->cloudevent, out->data to structured mode's "data". DECODE_OK
 * also when the message is no CloudEvent at all; otherwise the reason,
 * with what was wrong in detail (the caller clears *out).
 */
decode_reason_t format_cloudevents(const decode_input_t *in, decode_message_t *out, char *detail,
                                   size_t detail_size);

/*
 * What a JSON value's CloudEvent says of its data, judged before the
 * value is parsed (a value Steward does not read would read as invalid
 * JSON, which blames the producer): DECODE_UNSUPPORTED_DATA, with the
 * type in detail, for a binary-mode CloudEvent whose datacontenttype
 * (the content-type header, else ce_datacontenttype) is not JSON
 * (application/json or a +json type, parameters aside; none declared is
 * JSON), or for structured mode in another format than JSON
 * (application/cloudevents+avro, ...); DECODE_OK otherwise. Structured
 * mode's datacontenttype attribute is judged by format_cloudevents(). An
 * Avro payload is not judged here: its topic's format says what it is.
 */
decode_reason_t format_cloudevents_content(const decode_input_t *in, char *detail,
                                           size_t detail_size);

/* Frees and clears out->ce_*. */
void format_cloudevents_clear(decode_message_t *out);

#endif
