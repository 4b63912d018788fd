/*
 * fuzz_message - Kafka messages, as `steward run` reads them: value, key and
 * headers through decode_message() and decode_envelope(), then judged by
 * the engine against fixed definitions (manager/intake/batch.c's order, without the
 * database: every definition that reads the topic, one instance per
 * definition and correlation key, the identities seen, the parked events
 * replayed after each move). The definitions between them use every rule
 * that maps a message to an event: the type at a pointer, in a named
 * header or fixed by the topic; the key at a pointer (a string or an
 * integer) or the Kafka message key; the time as RFC 3339 text or epoch
 * milliseconds, epoch seconds, epoch milliseconds, or the Kafka timestamp.
 *
 * What the edge checks promise, asserted for every message that passes
 * them: its correlation key and its identity are non-empty UTF-8 within
 * DECODE_MAX_KEY_BYTES and DECODE_MAX_ID_BYTES, its event type is UTF-8,
 * its time is within DECODE_MIN_TIME_MS..DECODE_MAX_TIME_MS (PostgreSQL's
 * timestamptz holds it and every deadline after it), and the engine's
 * deadline arithmetic on it does not overflow (UBSan aborts if it does).
 * What becomes a text column besides (a rejection's detail, a history
 * row's detail) is UTF-8 too: PostgreSQL refuses anything else.
 *
 * Input: up to MAX_MESSAGES records separated by "\n\xfe\n". A record is
 *   byte 0      bits 0-1 topic (orders, payments, inventory, shipping);
 *               bit 2 a Kafka key; bit 3 a tombstone (no value);
 *               bits 4-6 the number of headers; bit 7 no Kafka timestamp
 *   bytes 1-8   the Kafka timestamp, int64 little-endian
 *   the rest    fields separated by 0xFF (never in UTF-8): the key, then a
 *               name and a value per header, then the value (which takes
 *               everything after, 0xFF included)
 * tests/fuzz/seeds.py writes seeds in this form.
 */
#include "common/rfc3339.h"
#include "common/utf8.h"
#include "definitions/def.h"
#include "formats/decode.h"
#include "engine/engine.h"
#include "fuzz.h"

#include <inttypes.h>

#define MAX_MESSAGES  8
#define N_DEFS        4
#define MAX_HEADERS   7
#define MAX_INSTANCES 8
#define MAX_PARKED    16

static const char definition[] =
    "{\"process\": \"fuzz_order\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"fulfilment\","
    " \"key\": \"/order_id\", \"deadline\": \"36500d\", \"reorder_window\": \"2m\","
    " \"envelope\": {\"type\": \"/type\", \"id\": \"/id\", \"time\": \"/time\"},"
    " \"events\": {"
    "  \"OrderPlaced\": {\"topic\": \"orders\"},"
    "  \"PaymentCaptured\": {\"topic\": \"payments\", \"key\": \"/payment/order_id\","
    "                       \"capture\": {\"payment_id\": \"/payment/id\"}},"
    "  \"PaymentDeclined\": {\"topic\": \"payments\"},"
    "  \"StockReserved\": {\"topic\": \"inventory\"},"
    "  \"StockUnavailable\": {\"topic\": \"inventory\"},"
    "  \"RefundIssued\": {\"topic\": \"payments\"},"
    "  \"ShipmentDispatched\": {\"topic\": \"shipping\", \"capture\": {\"carrier\": "
    "\"/carrier\"}}},"
    " \"start\": {\"on\": \"OrderPlaced\", \"to\": \"awaiting_payment\","
    "            \"capture\": {\"total\": \"/total\", \"items\": \"/items/0\"}},"
    " \"states\": {"
    "  \"awaiting_payment\": {\"deadline\": \"15m\", \"owner\": \"payments\","
    "    \"on\": {\"PaymentCaptured\": \"awaiting_stock\", \"PaymentDeclined\": \"cancelled\"}},"
    "  \"awaiting_stock\": {\"deadline\": \"36500d\", \"on\": {\"StockReserved\": "
    "\"awaiting_dispatch\","
    "    \"StockUnavailable\": \"refunding\"}, \"on_timeout\": \"refunding\"},"
    "  \"refunding\": {\"deadline\": \"1d\", \"on\": {\"RefundIssued\": \"refunded\"}},"
    "  \"awaiting_dispatch\": {\"deadline\": \"2d\", \"on\": {\"ShipmentDispatched\": "
    "\"completed\"}},"
    "  \"completed\": {\"terminal\": \"success\"},"
    "  \"cancelled\": {\"terminal\": \"cancelled\"},"
    "  \"refunded\": {\"terminal\": \"refunded\"}}}";

/* The same topics, mapped otherwise: a refund keyed by the Kafka message
 * key, typed by a header, timed in epoch seconds. */
static const char definition_header[] =
    "{\"process\": \"fuzz_refund\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"payments\","
    " \"key\": {\"from\": \"message_key\"},"
    " \"envelope\": {\"type\": {\"header\": \"event-type\"}, \"id\": \"/id\","
    "               \"time\": {\"pointer\": \"/at\", \"format\": \"epoch_seconds\"}},"
    " \"events\": {"
    "  \"RefundRequested\": {\"topic\": \"orders\", \"capture\": {\"amount\": \"/amount\"}},"
    "  \"RefundIssued\": {\"topic\": \"payments\", \"key\": \"/refund/order_id\"}},"
    " \"start\": {\"on\": \"RefundRequested\", \"to\": \"refunding\"},"
    " \"states\": {"
    "  \"refunding\": {\"deadline\": \"1d\", \"on\": {\"RefundIssued\": \"refunded\"}},"
    "  \"refunded\": {\"terminal\": \"refunded\"}}}";

/* Every message on inventory is a count, whatever it says; timed by Kafka. */
static const char definition_topic[] =
    "{\"process\": \"fuzz_stock\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"inventory\","
    " \"key\": \"/sku\","
    " \"envelope\": {\"type\": \"/kind\", \"time\": {\"from\": \"kafka_timestamp\"}},"
    " \"events\": {"
    "  \"StockCounted\": {\"topic\": \"inventory\", \"type_from_topic\": true},"
    "  \"StockShipped\": {\"topic\": \"shipping\"}},"
    " \"start\": {\"on\": \"StockCounted\", \"to\": \"counted\"},"
    " \"states\": {"
    "  \"counted\": {\"deadline\": \"2h\", \"on\": {\"StockShipped\": \"shipped\"}},"
    "  \"shipped\": {\"terminal\": \"success\"}}}";

/* Epoch milliseconds at a pointer; a settlement keyed by the message key. */
static const char definition_millis[] =
    "{\"process\": \"fuzz_pay\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"payments\","
    " \"key\": \"/order_id\","
    " \"envelope\": {\"type\": \"/type\", \"id\": \"/id\","
    "               \"time\": {\"pointer\": \"/ts\", \"format\": \"epoch_millis\"}},"
    " \"events\": {"
    "  \"PaymentCaptured\": {\"topic\": \"payments\"},"
    "  \"PaymentSettled\": {\"topic\": \"payments\", \"key\": {\"from\": \"message_key\"}}},"
    " \"start\": {\"on\": \"PaymentCaptured\", \"to\": \"settling\"},"
    " \"states\": {"
    "  \"settling\": {\"deadline\": \"3d\", \"on\": {\"PaymentSettled\": \"settled\"}},"
    "  \"settled\": {\"terminal\": \"success\"}}}";

static const char *const topics[] = {"orders", "payments", "inventory", "shipping"};

static def_t *defs[N_DEFS];
static const def_t *def; /* the one being judged against */

typedef struct parked {
    long event;
    char *id;
    int64_t time_ms;
    json_t *data;
} parked_t;

typedef struct instance {
    char *key;
    engine_instance_t inst;
    char *seen[MAX_MESSAGES];
    size_t n_seen;
    parked_t parked[MAX_PARKED];
    size_t n_parked;
} instance_t;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const texts[N_DEFS] = {definition, definition_header, definition_topic,
                                              definition_millis};
    (void) argc;
    (void) argv;
    for (size_t d = 0; d < N_DEFS; d++) {
        def_problems_t problems = {0};
        defs[d] = def_load_json(texts[d], strlen(texts[d]), "fuzz.json", &problems);
        if (defs[d] == NULL) {
            for (size_t i = 0; i < problems.n; i++)
                fprintf(stderr, "definition %zu: %s: %s\n", d, problems.items[i].pointer,
                        problems.items[i].message);
            abort();
        }
        def_problems_clear(&problems);
    }
    return 0;
}

static bool reads_topic(const def_t *d, const char *topic)
{
    for (size_t i = 0; i < d->n_events; i++) {
        if (strcmp(d->events[i].topic, topic) == 0)
            return true;
    }
    return false;
}

static bool utf8(const char *s)
{
    return utf8_valid((const unsigned char *) s, strlen(s));
}

/* A deadline is absent or an event time plus at most DEF_MAX_DURATION_MS. */
static void check_deadline(int64_t ms, const char *what)
{
    FUZZ_CHECK(ms == ENGINE_NO_DEADLINE ||
                   (ms >= DECODE_MIN_TIME_MS && ms <= DECODE_MAX_TIME_MS + DEF_MAX_DURATION_MS),
               "%s deadline %" PRId64 " ms", what, ms);
}

static void check_instance(const engine_instance_t *inst)
{
    if (!inst->exists)
        return;
    FUZZ_CHECK(inst->state >= 0 && (size_t) inst->state < def->n_states, "state %ld", inst->state);
    check_deadline(inst->deadline_ms, "state");
    check_deadline(inst->process_deadline_ms, "process");
    check_deadline(engine_next_deadline(def, inst), "next");
    FUZZ_CHECK(decode_time_in_range(inst->state_entered_ms), "entered at %" PRId64,
               inst->state_entered_ms);
}

static void check_result(const engine_result_t *r)
{
    FUZZ_CHECK(r->outcome < ENGINE_N_OUTCOMES, "outcome %d", (int) r->outcome);
    FUZZ_CHECK(r->late_by_ms >= 0, "late by %" PRId64, r->late_by_ms);
    FUZZ_CHECK(memchr(r->detail, '\0', sizeof r->detail) != NULL, "detail not terminated");
    FUZZ_CHECK(utf8(r->detail), "the history detail is not UTF-8: %s", r->detail);
}

static instance_t *find_instance(instance_t *table, size_t *n, const char *key)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp(table[i].key, key) == 0)
            return &table[i];
    }
    if (*n == MAX_INSTANCES)
        return NULL;
    instance_t *in = &table[(*n)++];
    memset(in, 0, sizeof *in);
    in->key = strdup(key);
    engine_instance_init(&in->inst);
    return in;
}

/* Judges the parked events again until none moves the instance (manager/intake/batch_replay.c). */
static void replay(instance_t *in)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (size_t i = 0; i < in->n_parked && !moved; i++) {
            parked_t *p = &in->parked[i];
            engine_event_t ev = {p->event, p->id, p->time_ms, p->data};
            engine_result_t r = engine_replay(def, &in->inst, &ev);
            check_result(&r);
            check_instance(&in->inst);
            if (r.outcome == ENGINE_PARKED)
                continue;
            free(p->id);
            json_decref(p->data);
            in->parked[i] = in->parked[--in->n_parked];
            moved = r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED;
        }
    }
}

static void judge(instance_t *in, long event, const char *id, int64_t time_ms, const json_t *data,
                  int64_t token)
{
    bool seen = false;
    for (size_t i = 0; i < in->n_seen; i++)
        seen = seen || strcmp(in->seen[i], id) == 0;
    engine_event_t ev = {event, id, time_ms, data, token};
    engine_result_t r = engine_apply(def, &in->inst, &ev, seen);
    check_result(&r);
    check_instance(&in->inst);
    if (!seen && in->n_seen < MAX_MESSAGES)
        in->seen[in->n_seen++] = strdup(id);
    if (r.outcome == ENGINE_PARKED && in->n_parked < MAX_PARKED) {
        parked_t *p = &in->parked[in->n_parked++];
        p->event = event;
        p->id = strdup(id);
        p->time_ms = time_ms;
        p->data = json_deep_copy(data);
    }
    if (r.outcome == ENGINE_STARTED || r.outcome == ENGINE_ADVANCED)
        replay(in);
}

/* The fields of one record, 0xFF-separated; the last takes the rest. */
static const uint8_t *field(const uint8_t **p, const uint8_t *end, bool last, size_t *len)
{
    const uint8_t *start = *p;
    const uint8_t *sep = last ? NULL : memchr(start, 0xFF, (size_t) (end - start));
    const uint8_t *stop = sep != NULL ? sep : end;
    *len = (size_t) (stop - start);
    *p = sep != NULL ? sep + 1 : end;
    return start;
}

/* The message as process `def` reads it (manager/intake/batch_decode.c, batch_route()). */
static void judge_against(const decode_message_t *msg, const decode_input_t *in, instance_t *table,
                          size_t *n_instances)
{
    char detail[512];
    const char *type = decode_event_type(msg, in, def);
    if (type == NULL) {
        decode_type_source(def, in->topic, detail, sizeof detail);
        FUZZ_CHECK(detail[0] != '\0' && utf8(detail), "a missing type's detail: %s", detail);
        return;
    }
    FUZZ_CHECK(utf8(type), "the event type is not UTF-8");
    long event = def_find_event(def, type);
    if (event < 0 || strcmp(def->events[event].topic, in->topic) != 0) {
        engine_result_t r = engine_undeclared(def, NULL, type);
        check_result(&r);
        return;
    }

    decode_envelope_t env;
    decode_reason_t reason =
        decode_envelope(msg, in, def, (size_t) event, &env, detail, sizeof detail);
    if (reason != DECODE_OK) {
        FUZZ_CHECK(env.key == NULL && env.id == NULL, "a rejected envelope kept its strings");
        FUZZ_CHECK(detail[0] != '\0', "envelope rejected (%s) without a detail",
                   decode_reason_name(reason));
        FUZZ_CHECK(utf8(detail), "the rejected detail is not UTF-8: %s", detail);
        return;
    }
    size_t klen = strlen(env.key), ilen = strlen(env.id);
    FUZZ_CHECK(klen > 0 && klen <= DECODE_MAX_KEY_BYTES, "key of %zu bytes", klen);
    FUZZ_CHECK(ilen > 0 && ilen <= DECODE_MAX_ID_BYTES, "id of %zu bytes", ilen);
    FUZZ_CHECK(utf8(env.key) && utf8(env.id), "a key or id that is not UTF-8");
    FUZZ_CHECK(memchr(env.key, 0, klen + 1) == env.key + klen, "a key with a NUL");
    FUZZ_CHECK(decode_time_in_range(env.time_ms), "time %" PRId64 " ms", env.time_ms);
    FUZZ_CHECK(env.token >= 0, "token %" PRId64, env.token);
    char when[64];
    int64_t back;
    rfc3339_format(env.time_ms, when, sizeof when);
    FUZZ_CHECK(rfc3339_parse(when, &back) && back == env.time_ms, "time %s round trip", when);

    instance_t *inst = find_instance(table, n_instances, env.key);
    if (inst != NULL)
        judge(inst, event, env.id, env.time_ms, msg->data, env.token);
    decode_envelope_clear(&env);
}

static void one_message(const uint8_t *rec, size_t size, int64_t offset,
                        instance_t tables[N_DEFS][MAX_INSTANCES], size_t n_instances[N_DEFS])
{
    if (size < 9)
        return;
    uint8_t ctl = rec[0];
    uint64_t ts;
    memcpy(&ts, rec + 1, 8);
    const uint8_t *p = rec + 9, *end = rec + size;

    decode_header_t headers[MAX_HEADERS];
    char *names[MAX_HEADERS];
    size_t n_headers = (ctl >> 4) & 7, key_len, value_len;
    const uint8_t *key = field(&p, end, false, &key_len);
    for (size_t h = 0; h < n_headers; h++) {
        size_t name_len, len;
        const uint8_t *name = field(&p, end, false, &name_len);
        names[h] = fuzz_cstr(name, name_len);
        headers[h].name = names[h];
        headers[h].value = field(&p, end, false, &len);
        headers[h].len = len;
        if (len == 0 && (ctl & 0x80) != 0)
            headers[h].value = NULL; /* a header without a value */
    }
    const uint8_t *value = field(&p, end, true, &value_len);

    decode_input_t in = {
        .topic = topics[ctl & 3],
        .partition = (int32_t) (ts >> 56),
        .offset = offset,
        .key = (ctl & 4) ? key : NULL,
        .key_len = (ctl & 4) ? key_len : 0,
        .value = (ctl & 8) ? NULL : value,
        .value_len = (ctl & 8) ? 0 : value_len,
        .headers = headers,
        .n_headers = n_headers,
        .timestamp_ms = (ctl & 0x80) ? -1 : (int64_t) ts,
    };
    decode_limits_t limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH};
    decode_message_t msg;
    char detail[512];

    decode_reason_t reason = decode_message(&in, &limits, &msg, detail, sizeof detail);
    FUZZ_CHECK(reason < DECODE_N_REASONS, "reason %d", (int) reason);
    if (reason != DECODE_OK) {
        FUZZ_CHECK(msg.value == NULL && detail[0] != '\0', "rejected (%s) without a detail",
                   decode_reason_name(reason));
        FUZZ_CHECK(utf8(detail), "the rejected detail is not UTF-8: %s", detail);
        goto done;
    }
    FUZZ_CHECK(json_is_object(msg.data), "decoded data is not an object");

    /* What `steward stuck` and `inspect` do with stored payloads. */
    json_t *shown = json_deep_copy(msg.value);
    decode_json_printable(shown);
    char *text = json_dumps(shown, JSON_COMPACT);
    FUZZ_CHECK(text != NULL, "a printable payload does not dump");
    free(text);
    json_decref(shown);

    for (size_t d = 0; d < N_DEFS; d++) {
        def = defs[d];
        if (reads_topic(def, in.topic))
            judge_against(&msg, &in, tables[d], &n_instances[d]);
    }
    decode_message_clear(&msg);
done:
    for (size_t h = 0; h < n_headers; h++)
        free(names[h]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t sep[] = {'\n', 0xFE, '\n'};
    static instance_t tables[N_DEFS][MAX_INSTANCES];
    size_t n_instances[N_DEFS] = {0}, n = 0;

    while (size > 0 && n < MAX_MESSAGES) {
        const uint8_t *next = memmem(data, size, sep, sizeof sep);
        size_t len = next != NULL ? (size_t) (next - data) : size;
        one_message(data, len, (int64_t) n, tables, n_instances);
        n++;
        if (next == NULL)
            break;
        data = next + sizeof sep;
        size -= len + sizeof sep;
    }
    for (size_t d = 0; d < N_DEFS; d++)
        for (size_t i = 0; i < n_instances[d]; i++) {
            instance_t *in = &tables[d][i];
            for (size_t s = 0; s < in->n_seen; s++)
                free(in->seen[s]);
            for (size_t k = 0; k < in->n_parked; k++) {
                free(in->parked[k].id);
                json_decref(in->parked[k].data);
            }
            engine_instance_clear(&in->inst);
            free(in->key);
        }
    return 0;
}
