/*
 * test_def - loading and validating process definitions.
 *
 * Most cases start from tests/data/definitions/base.json (a small valid
 * order process), change one thing with dt_put()/dt_del() and check the problem
 * it causes: the JSON pointer exactly, and the words of the message a
 * person acts on.
 */
#include "definitions/def.h"
#include "definitions/jsonptr.h"
#include "engine/engine.h"
#include "testlib.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static def_problems_t dt_problems;

static void dt_setup(void)
{
    memset(&dt_problems, 0, sizeof dt_problems);
}

static void dt_teardown(void)
{
    def_problems_clear(&dt_problems);
}

/* All problems as text, for failure messages (static buffer). */
static const char *dt_listing(void)
{
    static char buf[8192];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < dt_problems.n && len < sizeof buf; i++)
        len += (size_t) snprintf(buf + len, sizeof buf - len, "\n  %s: %s: %s",
                                 dt_problems.items[i].file, dt_problems.items[i].pointer,
                                 dt_problems.items[i].message);
    return dt_problems.n == 0 ? " (none)" : buf;
}

static json_t *dt_base(void)
{
    char *path = tl_source_path("tests/data/definitions/base.json");
    json_error_t jerr;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_msg(doc != NULL, "%s: %s", path, jerr.text);
    free(path);
    return doc;
}

/* The object holding ptr's last token, and that token (unescaped tokens only). */
static json_t *parent_of(json_t *doc, const char *ptr, const char **token)
{
    const char *slash = strrchr(ptr, '/');
    ck_assert_ptr_nonnull(slash);
    char *parent_ptr = strndup(ptr, (size_t) (slash - ptr));
    json_t *parent = jsonptr_get(doc, parent_ptr);
    ck_assert_msg(json_is_object(parent), "test bug: no object at '%s'", parent_ptr);
    free(parent_ptr);
    *token = slash + 1;
    return parent;
}

/* Sets the value at ptr to the JSON text `value`. */
static void dt_put(json_t *doc, const char *ptr, const char *value)
{
    const char *token;
    json_t *parent = parent_of(doc, ptr, &token);
    json_error_t jerr;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &jerr);
    ck_assert_msg(v != NULL, "test bug: %s: %s", value, jerr.text);
    json_object_set_new(parent, token, v);
}

static void dt_del(json_t *doc, const char *ptr)
{
    const char *token;
    json_t *parent = parent_of(doc, ptr, &token);
    ck_assert_msg(json_object_del(parent, token) == 0, "test bug: nothing at '%s'", ptr);
}

static char *dt_dump(json_t *doc)
{
    char *text = json_dumps(doc, JSON_INDENT(2));
    ck_assert_ptr_nonnull(text);
    return text;
}

/* Loads doc (consumed) as "test.json". */
static def_t *dt_load(json_t *doc)
{
    char *text = dt_dump(doc);
    json_decref(doc);
    def_t *def = def_load_json(text, strlen(text), "test.json", &dt_problems);
    free(text);
    return def;
}

static def_t *dt_expect_valid(json_t *doc)
{
    def_t *def = dt_load(doc);
    ck_assert_msg(def != NULL && dt_problems.n == 0, "expected valid, got:%s", dt_listing());
    return def;
}

/*
 * Loads doc (consumed), which must fail with a problem at exactly `pointer`
 * whose message holds every word of the NULL-terminated list; with `only`,
 * that must be the sole problem. Returns the problem's message.
 */
static const char *dt_expect_problem(json_t *doc, bool only, const char *pointer, ...)
{
    const char *words[8];
    size_t n_words = 0;
    va_list ap;
    va_start(ap, pointer);
    for (const char *w = va_arg(ap, const char *); w != NULL; w = va_arg(ap, const char *)) {
        ck_assert_uint_lt(n_words, 8);
        words[n_words++] = w;
    }
    va_end(ap);

    def_t *def = dt_load(doc);
    ck_assert_msg(def == NULL, "loaded a definition that should be invalid");
    ck_assert_msg(dt_problems.n > 0, "NULL returned with no problem");
    for (size_t i = 0; i < dt_problems.n; i++) {
        const def_problem_t *p = &dt_problems.items[i];
        ck_assert_str_eq(p->file, "test.json");
        if (strcmp(p->pointer, pointer) != 0)
            continue;
        bool all = true;
        for (size_t w = 0; w < n_words && all; w++)
            all = strstr(p->message, words[w]) != NULL;
        if (!all)
            continue;
        ck_assert_msg(!only || dt_problems.n == 1, "expected only this problem, got:%s",
                      dt_listing());
        return p->message;
    }
    ck_abort_msg("no problem at '%s' with the expected words; got:%s", pointer, dt_listing());
    return NULL;
}
#define EXPECT(doc, ptr, ...)                                                                      \
    dt_expect_problem((doc), false, (ptr), __VA_ARGS__, (const char *) NULL)
#define EXPECT_ONLY(doc, ptr, ...)                                                                 \
    dt_expect_problem((doc), true, (ptr), __VA_ARGS__, (const char *) NULL)

/* Loads base.json with one change; shorthand for the common case. */
static json_t *dt_with(const char *ptr, const char *value)
{
    json_t *doc = dt_base();
    dt_put(doc, ptr, value);
    return doc;
}

static json_t *dt_without(const char *ptr)
{
    json_t *doc = dt_base();
    dt_del(doc, ptr);
    return doc;
}

/* ---- a valid definition and what it loads into ---- */

START_TEST(test_base_valid)
{
    def_t *def = dt_expect_valid(dt_base());
    ck_assert_str_eq(def->process, "order_fulfilment");
    ck_assert_int_eq(def->version, 1);
    ck_assert_int_eq(def->mode, DEF_MODE_SHADOW);
    ck_assert_str_eq(def->owner, "fulfilment");
    ck_assert_ptr_null(def->description);
    ck_assert_str_eq(def->key_pointer, "/order_id");
    ck_assert_str_eq(def->type_pointer, "/type");
    ck_assert_str_eq(def->id_pointer, "/id");
    ck_assert_ptr_null(def->time_pointer);
    ck_assert(def->deadline_ms == 0);
    ck_assert(def->reorder_window_ms == 5 * 60 * 1000);
    ck_assert_str_eq(def->source, "test.json");
    ck_assert_ptr_nonnull(def->document);

    /* Events in document order, keys defaulted to the process's. */
    ck_assert_uint_eq(def->n_events, 4);
    ck_assert_str_eq(def->events[0].name, "OrderPlaced");
    ck_assert_str_eq(def->events[0].topic, "orders");
    ck_assert_str_eq(def->events[0].key_pointer, "/order_id");
    ck_assert_str_eq(def->events[1].name, "PaymentCaptured");
    ck_assert_str_eq(def->events[1].key_pointer, "/payment/order_id");
    ck_assert_uint_eq(def->events[1].n_captures, 1);
    ck_assert_str_eq(def->events[1].captures[0].var, "payment_id");
    ck_assert_str_eq(def->events[1].captures[0].pointer, "/payment/id");
    ck_assert_str_eq(def->events[3].name, "ShipmentDispatched");

    ck_assert_uint_eq(def->start_event, 0);
    ck_assert_uint_eq(def->start_state, 0);
    ck_assert_uint_eq(def->n_start_captures, 1);
    ck_assert_str_eq(def->start_captures[0].var, "total");
    ck_assert_str_eq(def->start_captures[0].pointer, "/total");

    /* States in document order. */
    ck_assert_uint_eq(def->n_states, 4);
    const def_state_t *pay = &def->states[0];
    ck_assert_str_eq(pay->name, "awaiting_payment");
    ck_assert_ptr_null(pay->terminal);
    ck_assert(pay->deadline_ms == 15 * 60 * 1000);
    ck_assert_str_eq(pay->owner, "payments");
    ck_assert_uint_eq(pay->n_on, 2);
    ck_assert_uint_eq(pay->on[0].event, 1);
    ck_assert_uint_eq(pay->on[0].to, 1);
    ck_assert_uint_eq(pay->on[1].event, 2);
    ck_assert_uint_eq(pay->on[1].to, 3);
    ck_assert_ptr_nonnull(pay->command);
    ck_assert_str_eq(pay->command->topic, "payment-commands");
    ck_assert_str_eq(pay->command->type, "CapturePayment");
    ck_assert_str_eq(json_string_value(json_object_get(pay->command->payload, "amount")),
                     "${vars.total}");
    ck_assert_int_eq(pay->retry_max, 2);
    ck_assert_int_eq(pay->on_timeout, 3);

    const def_state_t *dispatch = &def->states[1];
    ck_assert_ptr_null(dispatch->owner);
    ck_assert_ptr_null(dispatch->command);
    ck_assert_int_eq(dispatch->retry_max, 0);
    ck_assert_int_eq(dispatch->on_timeout, -1);
    ck_assert(dispatch->deadline_ms == 2 * 86400000LL);

    ck_assert_str_eq(def->states[2].terminal, "success");
    ck_assert_str_eq(def->states[3].terminal, "cancelled");
    ck_assert(def->states[2].deadline_ms == 0);
    def_free(def);
}
END_TEST

START_TEST(test_lookups)
{
    def_t *def = dt_expect_valid(dt_base());
    ck_assert_int_eq(def_find_state(def, "shipped"), 2);
    ck_assert_int_eq(def_find_state(def, "nowhere"), -1);
    ck_assert_int_eq(def_find_event(def, "PaymentDeclined"), 2);
    ck_assert_int_eq(def_find_event(def, "paymentdeclined"), -1);

    const def_transition_t *t = def_transition(def, 0, 2);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->to, 3);
    ck_assert_ptr_null(def_transition(def, 0, 3));  /* awaiting_payment ignores shipments */
    ck_assert_ptr_null(def_transition(def, 2, 0));  /* terminal: nothing */
    ck_assert_ptr_null(def_transition(def, 99, 0)); /* no such state */

    ck_assert_str_eq(def_state_owner(def, 0), "payments");
    ck_assert_str_eq(def_state_owner(def, 1), "fulfilment"); /* falls back to the process */
    def_free(def);
    def_free(NULL);
}
END_TEST

START_TEST(test_optional_fields)
{
    json_t *doc = dt_base();
    dt_put(doc, "/description", "\"Orders from checkout to the door.\"");
    dt_put(doc, "/deadline", "\"10d\"");
    dt_put(doc, "/reorder_window", "\"0s\"");
    dt_put(doc, "/mode", "\"active\"");
    dt_put(doc, "/envelope",
           "{\"type\": \"/event_type\", \"id\": \"/meta/id\", \"time\": \"/at\"}");
    dt_put(doc, "/states/awaiting_dispatch/description", "\"Waiting for the warehouse.\"");
    dt_del(doc, "/states/awaiting_dispatch/deadline"); /* the process deadline covers it */
    def_t *def = dt_expect_valid(doc);
    ck_assert_str_eq(def->description, "Orders from checkout to the door.");
    ck_assert(def->deadline_ms == 10 * 86400000LL);
    ck_assert(def->reorder_window_ms == 0);
    ck_assert_int_eq(def->mode, DEF_MODE_ACTIVE);
    ck_assert_str_eq(def->type_pointer, "/event_type");
    ck_assert_str_eq(def->id_pointer, "/meta/id");
    ck_assert_str_eq(def->time_pointer, "/at");
    ck_assert(def->states[1].deadline_ms == 0);
    def_free(def);
}
END_TEST

START_TEST(test_examples)
{
    char *path = tl_source_path("definitions/examples/order_fulfilment.json");
    def_t *def = def_load_file(path, &dt_problems);
    ck_assert_msg(def != NULL, "%s invalid:%s", path, dt_listing());
    free(path);

    ck_assert_str_eq(def->process, "order_fulfilment");
    ck_assert_int_eq(def->mode, DEF_MODE_SHADOW);
    ck_assert_str_eq(def->owner, "fulfilment");

    /* Events from six services' topics, each with its team owning a step. */
    static const char *const services[] = {"orders",   "payments", "inventory",
                                           "shipping", "delivery", "notifications"};
    for (size_t s = 0; s < 6; s++) {
        bool topic = false, owner = false;
        for (size_t i = 0; i < def->n_events; i++)
            topic = topic || strcmp(def->events[i].topic, services[s]) == 0;
        for (size_t i = 0; i < def->n_states; i++)
            owner = owner || strcmp(def_state_owner(def, i), services[s]) == 0;
        ck_assert_msg(topic, "no event on topic %s", services[s]);
        ck_assert_msg(owner, "no state owned by %s", services[s]);
    }

    /* The decline path and the compensation path. */
    long pay = def_find_state(def, "awaiting_payment");
    long stock = def_find_state(def, "awaiting_stock");
    long refunding = def_find_state(def, "refunding");
    ck_assert_int_ge(pay, 0);
    ck_assert_int_ge(stock, 0);
    ck_assert_int_ge(refunding, 0);
    const def_transition_t *t =
        def_transition(def, (size_t) pay, (size_t) def_find_event(def, "PaymentDeclined"));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(def->states[t->to].terminal, "cancelled");
    t = def_transition(def, (size_t) stock, (size_t) def_find_event(def, "StockUnavailable"));
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->to, (size_t) refunding);
    t = def_transition(def, (size_t) refunding, (size_t) def_find_event(def, "RefundIssued"));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(def->states[t->to].terminal, "refunded");

    /* Every non-terminal state has an owner and a deadline of its own; some send commands. */
    size_t commands = 0;
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].terminal != NULL)
            continue;
        ck_assert_ptr_nonnull(def->states[i].owner);
        ck_assert(def->states[i].deadline_ms > 0);
        commands += def->states[i].command != NULL;
    }
    ck_assert_uint_ge(commands, 1);
    def_free(def);

    path = tl_source_path("definitions/examples/loan_application.json");
    def = def_load_file(path, &dt_problems);
    ck_assert_msg(def != NULL, "%s invalid:%s", path, dt_listing());
    free(path);
    ck_assert_str_eq(def->time_pointer, "/occurred_at");
    def_free(def);
}
END_TEST

/* ---- the document ---- */

START_TEST(test_syntax_error)
{
    const char *text = "{\n  \"process\": \"x\",\n  \"version\": 1,\n}\n";
    ck_assert_ptr_null(def_load_json(text, strlen(text), "broken.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].file, "broken.json");
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_msg(strstr(dt_problems.items[0].message, "invalid JSON at line 4, column 1") != NULL,
                  "%s", dt_problems.items[0].message);
}
END_TEST

START_TEST(test_duplicate_key)
{
    const char *text = "{\"process\": \"a\",\n \"process\": \"b\"}";
    ck_assert_ptr_null(def_load_json(text, strlen(text), "dup.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "line 2"));
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "duplicate object key"));
}
END_TEST

START_TEST(test_not_an_object)
{
    const char *text = "[1, 2]";
    ck_assert_ptr_null(def_load_json(text, strlen(text), "arr.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "expected a JSON object"));
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "an array"));
}
END_TEST

START_TEST(test_missing_required)
{
    static const char *const fields[] = {"process", "version", "mode",  "owner",
                                         "key",     "events",  "start", "states"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char ptr[64], words[64];
        snprintf(ptr, sizeof ptr, "/%s", fields[i]);
        snprintf(words, sizeof words, "missing required field '%s'", fields[i]);
        EXPECT(dt_without(ptr), "", words);
        def_problems_clear(&dt_problems);
    }
    EXPECT_ONLY(dt_without("/events/OrderPlaced/topic"), "/events/OrderPlaced",
                "missing required field 'topic'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_without("/start/to"), "/start", "missing required field 'to'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_without("/states/awaiting_payment/command/type"),
                "/states/awaiting_payment/command", "missing required field 'type'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry", "{}"), "/states/awaiting_payment/retry",
                "missing required field 'max'");
}
END_TEST

START_TEST(test_wrong_types)
{
    EXPECT_ONLY(dt_with("/owner", "5"), "/owner", "expected a string, got an integer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/description", "[\"a\"]"), "/description", "expected a string",
                "an array");
    def_problems_clear(&dt_problems);
    EXPECT(dt_with("/events", "[]"), "/events", "expected an object", "an array");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/OrderPlaced", "\"orders\""), "/events/OrderPlaced",
                "expected an object", "a string");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start", "\"OrderPlaced\""), "/start", "expected an object");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/shipped/terminal", "true"), "/states/shipped/terminal",
                "naming the outcome", "a boolean");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on", "[\"shipped\"]"),
                "/states/awaiting_dispatch/on", "expected an object", "an array");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatched", "2"),
                "/states/awaiting_dispatch/on/ShipmentDispatched", "expected the name of the state",
                "an integer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/PaymentCaptured/capture", "\"/payment/id\""),
                "/events/PaymentCaptured/capture", "expected an object mapping variable names");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/command/payload", "\"x\""),
                "/states/awaiting_payment/command/payload", "expected an object");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch", "null"), "/states/awaiting_dispatch",
                "expected an object describing the state", "null");
}
END_TEST

START_TEST(test_unknown_fields)
{
    const char *msg = EXPECT_ONLY(dt_with("/states/awaiting_dispatch/deadlin", "\"1h\""),
                                  "/states/awaiting_dispatch/deadlin", "unknown field 'deadlin'",
                                  "(did you mean 'deadline'?)");
    (void) msg;
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/OrderPlaced/tpoic", "\"orders\""), "/events/OrderPlaced/tpoic",
                "unknown field 'tpoic'", "did you mean 'topic'");
    def_problems_clear(&dt_problems);
    msg = EXPECT_ONLY(dt_with("/colour", "\"blue\""), "/colour", "unknown field 'colour'",
                      "expected one of", "'process'", "'states'");
    ck_assert_ptr_null(strstr(msg, "did you mean"));
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/envelope", "{\"tyep\": \"/t\"}"), "/envelope/tyep",
                "did you mean 'type'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/maximum", "3"),
                "/states/awaiting_payment/retry/maximum", "unknown field 'maximum'");
}
END_TEST

/* ---- references ---- */

START_TEST(test_unknown_state)
{
    /* The graph checks stay quiet: 'shipped' is unreachable only because of the typo. */
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatched", "\"shiped\""),
                "/states/awaiting_dispatch/on/ShipmentDispatched",
                "transition on ShipmentDispatched goes to unknown state 'shiped'",
                "(did you mean 'shipped'?)");
    def_problems_clear(&dt_problems);
    const char *msg =
        EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatched", "\"warehouse\""),
                    "/states/awaiting_dispatch/on/ShipmentDispatched", "unknown state 'warehouse'");
    ck_assert_ptr_null(strstr(msg, "did you mean"));
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/on_timeout", "\"canceled\""),
                "/states/awaiting_payment/on_timeout",
                "on_timeout goes to unknown state 'canceled'", "did you mean 'cancelled'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start/to", "\"awaiting_paymnet\""), "/start/to",
                "start goes to unknown state 'awaiting_paymnet'",
                "did you mean 'awaiting_payment'");
}
END_TEST

START_TEST(test_undeclared_event)
{
    EXPECT_ONLY(dt_with("/states/awaiting_dispatch/on/ShipmentDispatchd", "\"shipped\""),
                "/states/awaiting_dispatch/on/ShipmentDispatchd",
                "event 'ShipmentDispatchd' is not declared in 'events'",
                "did you mean 'ShipmentDispatched'");
    def_problems_clear(&dt_problems);
    /* OrderPlaced is then unused too: that is a second, true, problem. */
    EXPECT(dt_with("/start/on", "\"CartCheckedOut\""), "/start/on",
           "event 'CartCheckedOut' is not declared in 'events'", "declare it there");
}
END_TEST

START_TEST(test_unused_event)
{
    EXPECT_ONLY(dt_with("/events/RefundIssued", "{\"topic\": \"payments\"}"),
                "/events/RefundIssued", "event 'RefundIssued' is declared but", "uses it");
}
END_TEST

/* ---- the state graph ---- */

START_TEST(test_unreachable)
{
    EXPECT_ONLY(dt_with("/states/limbo", "{\"deadline\": \"1h\", \"on\": {\"ShipmentDispatched\": "
                                         "\"shipped\"}}"),
                "/states/limbo", "state 'limbo' is unreachable");
    def_problems_clear(&dt_problems);
    /* Reachable through on_timeout alone is reachable. */
    json_t *doc = dt_base();
    dt_put(doc, "/states/awaiting_payment/on_timeout", "\"limbo\"");
    dt_put(doc, "/states/limbo",
           "{\"deadline\": \"1h\", \"on\": {\"PaymentDeclined\": "
           "\"cancelled\"}}");
    def_free(dt_expect_valid(doc));
}
END_TEST

START_TEST(test_no_terminal)
{
    json_t *doc = dt_base();
    dt_put(doc, "/states/shipped", "{\"deadline\": \"1h\"}");
    dt_put(doc, "/states/cancelled", "{\"deadline\": \"1h\"}");
    dt_del(doc, "/states/awaiting_payment/on_timeout"); /* keep the on_timeout rules out of it */
    EXPECT_ONLY(doc, "/states", "no terminal state", "\"terminal\"");
}
END_TEST

START_TEST(test_cannot_finish)
{
    json_t *doc = dt_base();
    dt_put(doc, "/states/awaiting_payment/on/PaymentDeclined", "\"stuck\"");
    dt_put(doc, "/states/stuck",
           "{\"deadline\": \"1h\", \"on\": {\"PaymentDeclined\": \"stuck\"}}");
    EXPECT_ONLY(doc, "/states/stuck", "no terminal state can be reached from state 'stuck'");
    def_problems_clear(&dt_problems);

    /* Two states feeding each other with no way out. */
    doc = dt_base();
    dt_put(doc, "/states/awaiting_dispatch/on/ShipmentDispatched", "\"loop_b\"");
    dt_put(doc, "/states/loop_b",
           "{\"deadline\": \"1h\", \"on\": {\"PaymentCaptured\": \"awaiting_dispatch\"}}");
    dt_put(doc, "/events/Late", "{\"topic\": \"shipping\"}");
    dt_put(doc, "/states/awaiting_payment/on/Late", "\"shipped\"");
    EXPECT(doc, "/states/awaiting_dispatch", "no terminal state can be reached");
    ck_assert_uint_eq(dt_problems.n, 2);
    ck_assert_str_eq(dt_problems.items[1].pointer, "/states/loop_b");
}
END_TEST

START_TEST(test_deadline_required)
{
    EXPECT_ONLY(dt_without("/states/awaiting_dispatch/deadline"), "/states/awaiting_dispatch",
                "state 'awaiting_dispatch' is not terminal and has no deadline",
                "add a 'deadline'");
    def_problems_clear(&dt_problems);
    json_t *doc = dt_without("/states/awaiting_dispatch/deadline");
    dt_put(doc, "/deadline", "\"10d\"");
    def_free(dt_expect_valid(doc));
}
END_TEST

START_TEST(test_terminal_restrictions)
{
    static const char *const fields[][2] = {
        {"on", "{\"PaymentDeclined\": \"cancelled\"}"},
        {"command", "{\"topic\": \"t\", \"type\": \"T\"}"},
        {"retry", "{\"max\": 1}"},
        {"on_timeout", "\"cancelled\""},
        {"deadline", "\"1h\""},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char ptr[64], words[64];
        snprintf(ptr, sizeof ptr, "/states/shipped/%s", fields[i][0]);
        snprintf(words, sizeof words, "cannot have '%s'", fields[i][0]);
        EXPECT_ONLY(dt_with(ptr, fields[i][1]), ptr, "terminal state 'shipped'", words,
                    "is finished");
        def_problems_clear(&dt_problems);
    }
    /* An owner on a terminal state is fine: someone owns the outcome. */
    def_free(dt_expect_valid(dt_with("/states/shipped/owner", "\"shipping\"")));
}
END_TEST

START_TEST(test_start_to_terminal)
{
    EXPECT(dt_with("/start/to", "\"shipped\""), "/start/to",
           "start goes to terminal state 'shipped'");
}
END_TEST

START_TEST(test_on_timeout_rules)
{
    EXPECT_ONLY(dt_with("/states/awaiting_payment/on_timeout", "\"awaiting_payment\""),
                "/states/awaiting_payment/on_timeout",
                "on_timeout goes back to state 'awaiting_payment' itself");
    def_problems_clear(&dt_problems);

    json_t *doc = dt_without("/states/awaiting_payment/deadline");
    dt_put(doc, "/deadline", "\"10d\"");
    EXPECT(doc, "/states/awaiting_payment/on_timeout",
           "on_timeout needs the state's own 'deadline'");
    ck_assert_uint_eq(dt_problems.n, 2); /* and retry, below */
    def_problems_clear(&dt_problems);

    doc = dt_without("/states/awaiting_payment/deadline");
    dt_del(doc, "/states/awaiting_payment/retry");
    dt_put(doc, "/deadline", "\"10d\"");
    EXPECT_ONLY(doc, "/states/awaiting_payment/on_timeout", "needs the state's own 'deadline'");
}
END_TEST

START_TEST(test_active_fields)
{
    /* backoff without max, a cap below the wait, a lease without the
     * state's own deadline, lease events not declared, a variable captured
     * only on a path that does not reach the state, the token. */
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry", "{\"backoff\": \"30s\"}"),
                "/states/awaiting_payment/retry", "retry.backoff", "has no 'max'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry",
                        "{\"max\": 2, \"backoff\": \"5m\", \"max_backoff\": \"1m\"}"),
                "/states/awaiting_payment/retry", "max_backoff is shorter than retry.backoff");
    def_problems_clear(&dt_problems);

    json_t *doc = dt_with("/states/awaiting_dispatch/lease",
                          "{\"claim\": \"PaymentDeclined\", \"holder\": \"/worker\", "
                          "\"renew\": [\"PaymentDeclinedd\"], \"duration\": \"10m\"}");
    EXPECT_ONLY(doc, "/states/awaiting_dispatch/lease/renew/0",
                "lease event 'PaymentDeclinedd' is not declared in 'events'",
                "did you mean 'PaymentDeclined'?");
    def_problems_clear(&dt_problems);

    doc = dt_without("/states/awaiting_dispatch/deadline");
    dt_put(doc, "/deadline", "\"10d\"");
    dt_put(doc, "/states/awaiting_dispatch/lease",
           "{\"claim\": \"PaymentDeclined\", \"holder\": \"/worker\", \"duration\": \"10m\"}");
    EXPECT(doc, "/states/awaiting_dispatch/lease", "a lease needs the state's own 'deadline'");
    def_problems_clear(&dt_problems);

    /* payment_id is captured by PaymentCaptured, which leads to
     * awaiting_dispatch, not back to awaiting_payment. */
    EXPECT_ONLY(dt_with("/states/awaiting_payment/command/payload/pid", "\"${vars.payment_id}\""),
                "/states/awaiting_payment/command/payload/pid",
                "${vars.payment_id} is never captured on a path that reaches state "
                "'awaiting_payment'");
    def_problems_clear(&dt_problems);

    def_t *def =
        dt_expect_valid(dt_with("/states/awaiting_payment/retry",
                                "{\"max\": 3, \"backoff\": \"30s\", \"max_backoff\": \"2m\"}"));
    ck_assert_int_eq(def->states[0].retry_max, 3);
    ck_assert_int_eq(def->states[0].retry_backoff_ms, 30000);
    ck_assert_int_eq(def->states[0].retry_max_backoff_ms, 120000);
    def_free(def);

    doc = dt_with("/states/awaiting_dispatch/lease",
                  "{\"claim\": \"PaymentDeclined\", \"holder\": \"/worker\", "
                  "\"renew\": [\"OrderPlaced\"], \"duration\": \"10m\"}");
    dt_put(doc, "/states/awaiting_dispatch/token", "{\"header\": \"ce_stewardtoken\"}");
    dt_put(doc, "/states/awaiting_dispatch/command",
           "{\"topic\": \"t\", \"type\": \"Ship\", \"payload\": {\"p\": \"${vars.payment_id}\"}}");
    def = dt_expect_valid(doc);
    long s = def_find_state(def, "awaiting_dispatch");
    ck_assert_ptr_nonnull(def->states[s].lease);
    ck_assert_str_eq(def->states[s].lease->holder_pointer, "/worker");
    ck_assert_int_eq(def->states[s].lease->duration_ms, 600000);
    ck_assert_str_eq(def->states[s].token.header, "ce_stewardtoken");
    bool claim = false;
    ck_assert(
        def_lease_event(def, (size_t) s, (size_t) def_find_event(def, "PaymentDeclined"), &claim));
    ck_assert(claim);
    ck_assert(
        def_lease_event(def, (size_t) s, (size_t) def_find_event(def, "OrderPlaced"), &claim));
    ck_assert(!claim);
    ck_assert(!def_lease_event(def, 0, (size_t) def_find_event(def, "OrderPlaced"), NULL));
    def_free(def);
}
END_TEST

START_TEST(test_retry_rules)
{
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/max", "-1"),
                "/states/awaiting_payment/retry/max", "retry.max must be 0 or more, got -1");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/max", "\"2\""),
                "/states/awaiting_payment/retry/max", "must be an integer", "a string");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/retry/max", "1000000"),
                "/states/awaiting_payment/retry/max", "at most 1000");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_without("/states/awaiting_payment/command"), "/states/awaiting_payment/retry",
                "retry re-sends the state's command", "has no 'command'");
    def_problems_clear(&dt_problems);

    json_t *doc = dt_without("/states/awaiting_payment/deadline");
    dt_del(doc, "/states/awaiting_payment/on_timeout");
    dt_put(doc, "/deadline", "\"10d\"");
    EXPECT_ONLY(doc, "/states/awaiting_payment/retry", "retry needs the state's own 'deadline'");
    def_problems_clear(&dt_problems);

    def_t *def = dt_expect_valid(dt_with("/states/awaiting_payment/retry/max", "0"));
    ck_assert_int_eq(def->states[0].retry_max, 0);
    def_free(def);
}
END_TEST

/* ---- values ---- */

START_TEST(test_bad_duration)
{
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "\"15x\""),
                "/states/awaiting_payment/deadline", "bad duration '15x'", "unknown unit 'x'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "\"0s\""),
                "/states/awaiting_payment/deadline", "bad duration '0s'", "longer than zero");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "900"),
                "/states/awaiting_payment/deadline", "expected a duration string", "an integer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/deadline", "\"1h1h\""), "/deadline", "bad duration '1h1h'",
                "appears twice");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/reorder_window", "\"5\""), "/reorder_window", "bad duration '5'",
                "no unit");
    def_problems_clear(&dt_problems);
    /* A bad process deadline is one problem, not one per state without a deadline. */
    json_t *doc = dt_without("/states/awaiting_dispatch/deadline");
    dt_put(doc, "/deadline", "\"ten days\"");
    EXPECT_ONLY(doc, "/deadline", "bad duration 'ten days'");
    def_problems_clear(&dt_problems);
    /* Longer than the daemon can store or add: refused, at 100 years. */
    EXPECT_ONLY(dt_with("/states/awaiting_payment/deadline", "\"200000000d\""),
                "/states/awaiting_payment/deadline", "bad duration '200000000d'",
                "at most 36525d (100 years)");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/deadline", "\"106751991167d\""), "/deadline", "at most 36525d");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/reorder_window", "\"36525d1ms\""), "/reorder_window", "at most 36525d");
    def_problems_clear(&dt_problems);
    def_free(dt_expect_valid(dt_with("/deadline", "\"36525d\"")));
}
END_TEST

START_TEST(test_bad_pointer)
{
    EXPECT_ONLY(dt_with("/key", "\"order_id\""), "/key", "bad JSON pointer 'order_id'",
                "starts with '/'", "did you mean '/order_id'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/PaymentCaptured/key", "\"/a~2\""), "/events/PaymentCaptured/key",
                "bad JSON pointer '/a~2'", "'~'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start/capture/total", "\"\""), "/start/capture/total",
                "bad JSON pointer ''", "empty pointer");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/envelope", "{\"time\": \"occurred_at\"}"), "/envelope/time",
                "bad JSON pointer 'occurred_at'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/key", "7"), "/key", "expected a JSON pointer string", "an integer");
    def_problems_clear(&dt_problems);
    char long_ptr[300] = "\"/";
    memset(long_ptr + 2, 'a', 257);
    strcpy(long_ptr + 259, "\"");
    EXPECT_ONLY(dt_with("/key", long_ptr), "/key", "bad JSON pointer", "258 characters",
                "limit of 256");
}
END_TEST

START_TEST(test_mode)
{
    EXPECT_ONLY(dt_with("/mode", "\"shdow\""), "/mode", "mode 'shdow' is not valid",
                "expected 'shadow' or 'active'", "did you mean 'shadow'");
    def_problems_clear(&dt_problems);
    const char *msg =
        EXPECT_ONLY(dt_with("/mode", "\"live\""), "/mode", "mode 'live' is not valid");
    ck_assert_ptr_null(strstr(msg, "did you mean"));
}
END_TEST

START_TEST(test_names)
{
    EXPECT_ONLY(dt_with("/process", "\"Order-Fulfilment\""), "/process",
                "process name 'Order-Fulfilment' is not valid", "lowercase");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/process", "\"1orders\""), "/process", "starting with a letter");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(
        dt_with("/process", "\"a234567890123456789012345678901234567890123456789012345678901234\""),
        "/process", "at most 63 characters");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/owner", "\"Fulfilment Team\""), "/owner",
                "team name 'Fulfilment Team' is not valid");
    def_problems_clear(&dt_problems);
    def_free(dt_expect_valid(dt_with("/owner", "\"order-ops\"")));
    EXPECT_ONLY(dt_with("/states/awaiting_payment/owner", "\"\""), "/states/awaiting_payment/owner",
                "must not be empty");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/events/OrderPlaced/topic", "\"new orders\""), "/events/OrderPlaced/topic",
                "'new orders' is not a valid Kafka topic name");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/awaiting_payment/command/topic", "\"cmd/payments\""),
                "/states/awaiting_payment/command/topic", "not a valid Kafka topic name");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/start/capture/1total", "\"/total\""), "/start/capture/1total",
                "variable name '1total' is not valid");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with("/states/shipped/terminal", "\"Shipped OK\""), "/states/shipped/terminal",
                "outcome 'Shipped OK' is not valid");
    def_problems_clear(&dt_problems);

    /* A state with a bad name: its references still resolve (by the same bad name). */
    json_t *doc = dt_base();
    dt_put(doc, "/states/awaiting_dispatch/on/ShipmentDispatched", "\"Shipped\"");
    dt_put(doc, "/states/Shipped", "{\"terminal\": \"success\"}");
    dt_del(doc, "/states/shipped");
    EXPECT_ONLY(doc, "/states/Shipped", "state name 'Shipped' is not valid");
}
END_TEST

START_TEST(test_version)
{
    static const char *const bad[] = {"0", "-1", "2147483648"};
    for (size_t i = 0; i < 3; i++) {
        char words[64];
        snprintf(words, sizeof words, "got %s", bad[i]);
        EXPECT_ONLY(dt_with("/version", bad[i]), "/version", "version must be a positive integer",
                    words);
        def_problems_clear(&dt_problems);
    }
    EXPECT_ONLY(dt_with("/version", "1.5"), "/version", "positive integer",
                "a number with a fraction");
    def_problems_clear(&dt_problems);
    def_t *def = dt_expect_valid(dt_with("/version", "7"));
    ck_assert_int_eq(def->version, 7);
    def_free(def);
}
END_TEST

START_TEST(test_templates)
{
    const char *payload = "/states/awaiting_payment/command/payload";
    char ptr[128];

    snprintf(ptr, sizeof ptr, "%s/amount", payload);
    EXPECT_ONLY(dt_with(ptr, "\"${vars.totl}\""), ptr,
                "${vars.totl} names a variable that nothing captures",
                "did you mean ${vars.total}?");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"${vars.discount}\""), ptr, "${vars.discount}",
                "add it to the 'capture'");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"${amount}\""), ptr, "unknown template variable ${amount}",
                "${vars.NAME}");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"${kye}\""), ptr, "unknown template variable ${kye}",
                "did you mean ${key}?");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"total: ${vars.total\""), ptr, "unclosed '${'");
    def_problems_clear(&dt_problems);

    /* Nested values are checked, with their pointers. */
    snprintf(ptr, sizeof ptr, "%s/lines", payload);
    char nested[160];
    snprintf(nested, sizeof nested, "%s/lines/1/sku", payload);
    EXPECT_ONLY(dt_with(ptr, "[{\"sku\": \"${vars.total}\"}, {\"sku\": \"${vars.skus}\"}]"), nested,
                "${vars.skus}");
    def_problems_clear(&dt_problems);

    /* With no capture anywhere, a ${vars.X} is still refused, not taken
     * as "any name". */
    snprintf(ptr, sizeof ptr, "%s/amount", payload);
    json_t *bare = dt_base();
    dt_del(bare, "/start/capture");
    dt_del(bare, "/events/PaymentCaptured/capture");
    EXPECT_ONLY(bare, ptr, "${vars.total} names a variable that nothing captures",
                "add it to the 'capture'");
    def_problems_clear(&dt_problems);

    /* Every built-in and a start capture are fine; so is a lone '$'. (An
     * event's capture counts only on paths through it: test_active_fields.) */
    snprintf(ptr, sizeof ptr, "%s/note", payload);
    def_free(dt_expect_valid(dt_with(ptr, "\"${key} ${process} ${state} ${attempt} ${token} "
                                          "${vars.total} costs $5\"")));
}
END_TEST

/* A command on an event topic would come back to Steward as an event. */
START_TEST(test_command_topic_is_not_an_event_topic)
{
    const char *ptr = "/states/awaiting_payment/command/topic";
    EXPECT_ONLY(dt_with(ptr, "\"payments\""), ptr, "command topic 'payments'",
                "event 'PaymentCaptured' arrives", "a topic of their own");
    def_problems_clear(&dt_problems);
    EXPECT_ONLY(dt_with(ptr, "\"orders\""), ptr, "event 'OrderPlaced'");
    def_problems_clear(&dt_problems);
    def_free(dt_expect_valid(dt_with(ptr, "\"payments-commands\"")));
}
END_TEST

START_TEST(test_all_problems_reported)
{
    json_t *doc = dt_base();
    dt_put(doc, "/mode", "\"shadowy\"");
    dt_put(doc, "/version", "0");
    dt_put(doc, "/states/awaiting_dispatch/deadline", "\"2 days\"");
    dt_put(doc, "/states/awaiting_dispatch/on/ShipmentDispatched", "\"shiped\"");
    def_t *def = dt_load(doc);
    ck_assert_ptr_null(def);
    ck_assert_msg(dt_problems.n == 4, "expected 4 problems, got:%s", dt_listing());
    /* In document order. */
    ck_assert_str_eq(dt_problems.items[0].pointer, "/version");
    ck_assert_str_eq(dt_problems.items[1].pointer, "/mode");
    ck_assert_str_eq(dt_problems.items[2].pointer, "/states/awaiting_dispatch/deadline");
    ck_assert_str_eq(dt_problems.items[3].pointer,
                     "/states/awaiting_dispatch/on/ShipmentDispatched");
}
END_TEST

/* ---- files and sets ---- */

static char *write_def(const char *dir, const char *name, json_t *doc)
{
    char *text = dt_dump(doc);
    json_decref(doc);
    char *path = tl_write_file(dir, name, text);
    free(text);
    return path;
}

START_TEST(test_load_file_errors)
{
    ck_assert_ptr_null(def_load_file("/nonexistent/steward/def.json", &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_str_eq(dt_problems.items[0].file, "/nonexistent/steward/def.json");
    ck_assert_str_eq(dt_problems.items[0].pointer, "");
    ck_assert_str_eq(dt_problems.items[0].message, "no such file or directory");
    def_problems_clear(&dt_problems);

    char *dir = strdup(tl_tmpdir());
    ck_assert_ptr_null(def_load_file(dir, &dt_problems));
    ck_assert_uint_eq(dt_problems.n, 1);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a directory"));
    def_problems_clear(&dt_problems);

    /* A FIFO would block open() and read() with no writer: refused at once. */
    char *fifo = NULL;
    ck_assert_int_ge(asprintf(&fifo, "%s/pipe.json", dir), 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_ptr_null(def_load_file(fifo, &dt_problems));
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, fifo);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a FIFO, not a regular file"));
    def_problems_clear(&dt_problems);

    ck_assert_ptr_null(def_load_file("/dev/null", &dt_problems));
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a device, not a regular file"));
    def_problems_clear(&dt_problems);

    /* The same inside a directory of definitions: the others still load
     * and are checked, the FIFO is named. */
    free(write_def(dir, "a.json", dt_base()));
    const char *paths[] = {dir};
    size_t files = 0;
    ck_assert_ptr_null(def_set_load(paths, 1, &dt_problems, &files));
    ck_assert_uint_eq(files, 2);
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, fifo);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, "is a FIFO"));
    free(fifo);
    free(dir);
}
END_TEST

START_TEST(test_set_load)
{
    char *dir = strdup(tl_tmpdir());
    json_t *v2 = dt_base();
    dt_put(v2, "/version", "2");
    free(write_def(dir, "b.json", v2));
    char *a = write_def(dir, "a.json", dt_base());
    free(tl_write_file(dir, "notes.txt", "not a definition"));
    free(tl_write_file(dir, ".#a.json", "{ half-saved by an editor"));

    const char *paths[] = {dir};
    size_t files = 99;
    def_set_t *set = def_set_load(paths, 1, &dt_problems, &files);
    ck_assert_msg(set != NULL, "invalid:%s", dt_listing());
    ck_assert_uint_eq(files, 2);
    ck_assert_uint_eq(set->n, 2);
    ck_assert_int_eq(set->defs[0]->version, 1); /* a.json before b.json */
    ck_assert_int_eq(set->defs[1]->version, 2);
    ck_assert_int_eq(def_set_latest(set, "order_fulfilment")->version, 2);
    ck_assert_int_eq(def_set_find(set, "order_fulfilment", 1)->version, 1);
    ck_assert_ptr_null(def_set_find(set, "order_fulfilment", 3));
    ck_assert_ptr_null(def_set_latest(set, "billing"));
    def_set_free(set);
    def_set_free(NULL);

    /* A file named on its own and through its directory is read once. */
    const char *twice[] = {a, dir};
    set = def_set_load(twice, 2, &dt_problems, &files);
    ck_assert_msg(set != NULL, "invalid:%s", dt_listing());
    ck_assert_uint_eq(set->n, 2);
    ck_assert_uint_eq(files, 2);
    def_set_free(set);
    free(a);
    free(dir);
}
END_TEST

START_TEST(test_set_duplicate_version)
{
    char *dir = strdup(tl_tmpdir());
    char *a = write_def(dir, "a.json", dt_base());
    char *c = write_def(dir, "c.json", dt_base());
    const char *paths[] = {dir};
    size_t files = 0;
    ck_assert_ptr_null(def_set_load(paths, 1, &dt_problems, &files));
    ck_assert_uint_eq(files, 2);
    ck_assert_msg(dt_problems.n == 1, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, c);
    ck_assert_str_eq(dt_problems.items[0].pointer, "/version");
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message,
                                 "process 'order_fulfilment' version 1 is already defined in"));
    ck_assert_ptr_nonnull(strstr(dt_problems.items[0].message, a));
    free(a);
    free(c);
    free(dir);
}
END_TEST

START_TEST(test_set_bad_paths)
{
    char *dir = strdup(tl_tmpdir());
    char *bad = tl_write_file(dir, "bad.json", "{");
    char *empty = strdup(tl_tmpdir());
    const char *paths[] = {"/nonexistent/defs", bad, empty};
    size_t files = 0;
    ck_assert_ptr_null(def_set_load(paths, 3, &dt_problems, &files));
    ck_assert_uint_eq(files, 1);
    ck_assert_msg(dt_problems.n == 3, "got:%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].file, "/nonexistent/defs");
    ck_assert_str_eq(dt_problems.items[0].message, "no such file or directory");
    ck_assert_str_eq(dt_problems.items[1].file, empty);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[1].message, "no *.json files"));
    ck_assert_str_eq(dt_problems.items[2].file, bad);
    ck_assert_ptr_nonnull(strstr(dt_problems.items[2].message, "invalid JSON at line 1"));
    free(bad);
    free(empty);
    free(dir);
}
END_TEST

/* ---- suggestions ---- */

START_TEST(test_suggestions)
{
    ck_assert_uint_eq(def_edit_distance("topic", "tpoic"), 1); /* a swap is one edit */
    ck_assert_uint_eq(def_edit_distance("shiped", "shipped"), 1);
    ck_assert_uint_eq(def_edit_distance("Shipped", "shipped"), 0);
    ck_assert_uint_eq(def_edit_distance("", "abc"), 3);
    ck_assert_uint_eq(def_edit_distance("kitten", "sitting"), 3);

    static const char *const states[] = {"shipped", NULL, "shopping", "cancelled"};
    ck_assert_str_eq(def_suggest("shiped", states, 4), "shipped");
    ck_assert_str_eq(def_suggest("canceled", states, 4), "cancelled");
    ck_assert_ptr_null(def_suggest("delivered", states, 4));
    static const char *const short_words[] = {"on", "to"};
    ck_assert_str_eq(def_suggest("tp", short_words, 2), "to");
    ck_assert_ptr_null(def_suggest("at", short_words, 2)); /* 2 edits in 2 letters */
    ck_assert_ptr_null(def_suggest("x", short_words, 2));
}
END_TEST

/* ---- events as they are: key, type and time sources, "any", $schema ---- */

START_TEST(test_schema_member_is_accepted)
{
    json_t *doc = dt_base();
    dt_put(doc, "/$schema", "\"https://steward.dev/schema/steward-definition.schema.json\"");
    def_free(dt_expect_valid(doc));

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/$schema", "7");
    dt_expect_problem(doc, true, "/$schema", "URI", "integer", NULL);
}
END_TEST

START_TEST(test_key_sources)
{
    json_t *doc = dt_base();
    dt_put(doc, "/key", "{\"from\": \"message_key\"}");
    def_t *def = dt_expect_valid(doc);
    ck_assert(def->key_from_message);
    ck_assert_ptr_null(def->key_pointer);
    ck_assert(def->events[0].key_from_message);  /* inherits the process's */
    ck_assert(!def->events[1].key_from_message); /* its own pointer */
    ck_assert_str_eq(def->events[1].key_pointer, "/payment/order_id");
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/ShipmentDispatched/key", "{\"from\": \"message_key\"}");
    def = dt_expect_valid(doc);
    ck_assert(def->events[3].key_from_message);
    ck_assert(!def->events[0].key_from_message);
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/key", "{\"from\": \"message-key\"}");
    dt_expect_problem(doc, true, "/key/from", "'message-key'", "message_key", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/key", "{\"form\": \"message_key\"}");
    dt_expect_problem(doc, false, "/key/form", "did you mean 'from'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/key", "42");
    dt_expect_problem(doc, true, "/key", "JSON pointer", "message_key", "integer", NULL);
}
END_TEST

START_TEST(test_type_sources)
{
    json_t *doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"header\": \"event-type\"}}");
    def_t *def = dt_expect_valid(doc);
    ck_assert_str_eq(def->type_header, "event-type");
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"header\": \"event type\"}}");
    dt_expect_problem(doc, true, "/envelope/type/header", "'event type'", "spaces", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"type\": {\"headr\": \"t\"}}");
    dt_expect_problem(doc, false, "/envelope/type/headr", "did you mean 'header'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/ShipmentDispatched/type_from_topic", "true");
    def = dt_expect_valid(doc);
    ck_assert(def->events[3].type_from_topic);
    ck_assert(!def->events[0].type_from_topic);
    def_free(def);

    /* payments carries two events: its topic cannot fix the type */
    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/PaymentDeclined/type_from_topic", "true");
    dt_expect_problem(doc, true, "/events/PaymentDeclined/type_from_topic", "'payments'",
                      "PaymentCaptured", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/OrderPlaced/type_from_topic", "\"yes\"");
    dt_expect_problem(doc, true, "/events/OrderPlaced/type_from_topic", "true or false", NULL);
}
END_TEST

START_TEST(test_time_sources)
{
    static const struct {
        const char *value;
        def_time_format_t format;
    } ok[] = {
        {"\"/at\"", DEF_TIME_TEXT_OR_MS},
        {"{\"pointer\": \"/at\", \"format\": \"rfc3339\"}", DEF_TIME_RFC3339},
        {"{\"pointer\": \"/at\", \"format\": \"epoch_seconds\"}", DEF_TIME_EPOCH_SECONDS},
        {"{\"pointer\": \"/at\", \"format\": \"epoch_millis\"}", DEF_TIME_EPOCH_MILLIS},
        {"{\"from\": \"kafka_timestamp\"}", DEF_TIME_KAFKA},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        def_problems_clear(&dt_problems);
        json_t *doc = dt_base();
        char env[200];
        snprintf(env, sizeof env, "{\"time\": %s}", ok[i].value);
        dt_put(doc, "/envelope", env);
        def_t *def = dt_expect_valid(doc);
        ck_assert_int_eq(def->time_format, ok[i].format);
        if (ok[i].format != DEF_TIME_KAFKA)
            ck_assert_str_eq(def->time_pointer, "/at");
        def_free(def);
    }

    json_t *doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"pointer\": \"/at\", \"format\": \"epoch_milis\"}}");
    dt_expect_problem(doc, true, "/envelope/time/format", "'epoch_milis'",
                      "did you mean 'epoch_millis'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"pointer\": \"/at\"}}");
    dt_expect_problem(doc, true, "/envelope/time", "missing required field 'format'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"from\": \"kafka_timestamp\", \"pointer\": \"/at\"}}");
    dt_expect_problem(doc, true, "/envelope/time", "cannot have 'pointer'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/envelope", "{\"time\": {\"from\": \"broker\"}}");
    dt_expect_problem(doc, true, "/envelope/time/from", "'broker'", "kafka_timestamp", NULL);
}
END_TEST

START_TEST(test_any_transitions)
{
    json_t *doc = dt_base();
    dt_put(doc, "/events/OrderWithdrawn", "{\"topic\": \"orders\"}");
    dt_put(doc, "/states/withdrawn", "{\"terminal\": \"withdrawn\"}");
    dt_put(doc, "/any", "{\"OrderWithdrawn\": \"withdrawn\", \"PaymentDeclined\": \"withdrawn\"}");
    def_t *def = dt_expect_valid(doc);
    long withdrawn = def_find_state(def, "withdrawn");
    long cancelled = def_find_state(def, "cancelled");
    long wd = def_find_event(def, "OrderWithdrawn");
    long declined = def_find_event(def, "PaymentDeclined");
    long pay = def_find_state(def, "awaiting_payment");
    long dispatch = def_find_state(def, "awaiting_dispatch");
    long shipped = def_find_state(def, "shipped");
    ck_assert_uint_eq(def->n_any, 2);
    /* every non-terminal state takes it */
    ck_assert_uint_eq(def_transition(def, (size_t) pay, (size_t) wd)->to, (size_t) withdrawn);
    ck_assert_uint_eq(def_transition(def, (size_t) dispatch, (size_t) wd)->to, (size_t) withdrawn);
    /* a state's own `on` overrides it */
    ck_assert_uint_eq(def_transition(def, (size_t) pay, (size_t) declined)->to, (size_t) cancelled);
    ck_assert_uint_eq(def_transition(def, (size_t) dispatch, (size_t) declined)->to,
                      (size_t) withdrawn);
    /* a terminal state takes nothing */
    ck_assert_ptr_null(def_transition(def, (size_t) shipped, (size_t) wd));
    /* the engine's look-ahead (may an early event be taken later?) sees `any` */
    ck_assert(engine_may_accept(def, pay, wd));
    ck_assert(engine_may_accept(def, dispatch, wd));
    ck_assert(!engine_may_accept(def, shipped, wd));
    def_free(def);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/OrderWithdrawn", "{\"topic\": \"orders\"}");
    dt_put(doc, "/any", "{\"OrderWithdrawn\": \"withdrawnn\"}");
    dt_expect_problem(doc, true, "/any/OrderWithdrawn", "unknown state 'withdrawnn'", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/any", "{\"OrderWithdrawm\": \"cancelled\"}");
    dt_expect_problem(doc, true, "/any/OrderWithdrawm", "not declared", NULL);

    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/any", "[]");
    dt_expect_problem(doc, true, "/any", "expected an object", "array", NULL);

    /* a state reached only through `any` must still lead to a terminal
     * state: `any` leading back to itself is no way out */
    def_problems_clear(&dt_problems);
    doc = dt_base();
    dt_put(doc, "/events/Held", "{\"topic\": \"orders\"}");
    dt_put(doc, "/states/on_hold", "{\"deadline\": \"1d\"}");
    dt_put(doc, "/any", "{\"Held\": \"on_hold\"}");
    dt_expect_problem(doc, true, "/states/on_hold", "terminal", NULL);
}
END_TEST

START_TEST(test_set_map_topics)
{
    json_t *doc = dt_base();
    char *text = dt_dump(doc);
    json_decref(doc);
    char *dir = strdup(tl_tmpdir());
    char *path = tl_write_file(dir, "map.json", text);
    free(text);
    const char *paths[1] = {path};
    def_set_t *set = def_set_load(paths, 1, &dt_problems, NULL);
    ck_assert_msg(set != NULL, "load:%s", dt_listing());

    json_t *map = json_pack("{s:s}", "payments", "prod.payments.v2");
    ck_assert(def_set_map_topics(set, "staging.", map, &dt_problems));
    const def_t *def = set->defs[0];
    ck_assert_str_eq(def->events[0].topic, "staging.orders");
    ck_assert_str_eq(def->events[1].topic, "prod.payments.v2"); /* the map wins */
    ck_assert_str_eq(def->events[3].topic, "staging.shipping");
    ck_assert_str_eq(def->states[0].command->topic, "staging.payment-commands");
    /* the stored document keeps the definition's own names */
    ck_assert_str_eq(
        json_string_value(json_object_get(
            json_object_get(json_object_get(def->document, "events"), "OrderPlaced"), "topic")),
        "orders");
    json_decref(map);

    /* A version read back from its stored document is renamed alike, by
     * the set's mapping or by the one recorded beside it. */
    char *stored = json_dumps(def->document, JSON_COMPACT);
    def_t *back = def_load_json(stored, strlen(stored), "steward.definitions", &dt_problems);
    ck_assert_msg(back != NULL, "read back:%s", dt_listing());
    ck_assert_str_eq(back->events[0].topic, "orders");
    ck_assert(def_set_map_like(set, back, &dt_problems));
    ck_assert_str_eq(back->events[0].topic, "staging.orders");
    ck_assert_str_eq(back->events[1].topic, "prod.payments.v2");
    ck_assert_str_eq(back->states[0].command->topic, "staging.payment-commands");
    def_free(back);
    json_t *recorded = def_set_mapping_json(set);
    back = def_load_json(stored, strlen(stored), "steward.definitions", &dt_problems);
    ck_assert(back != NULL && def_map_recorded(back, recorded, &dt_problems));
    ck_assert_str_eq(back->events[1].topic, "prod.payments.v2");
    ck_assert_str_eq(back->states[0].command->topic, "staging.payment-commands");
    json_decref(recorded);

    /* The watermark's topics: the loaded version's, and those only an
     * open old version reads, marked with that version. */
    back->version = def->version + 1; /* stands for another version */
    free(back->events[0].topic);
    back->events[0].topic = strdup("staging.audits");
    const def_t *open[1] = {back};
    engine_watch_topics_t watch = {0};
    ck_assert(engine_watch_topics(set, open, 1, &watch));
    size_t loaded_topics = 0, old_only = 0;
    for (size_t i = 0; i < watch.n; i++) {
        if (watch.items[i].old_version == 0)
            loaded_topics++;
        else {
            old_only++;
            ck_assert_str_eq(watch.items[i].topic, "staging.audits");
            ck_assert_int_eq(watch.items[i].old_version, back->version);
        }
    }
    ck_assert_uint_eq(old_only, 1);
    ck_assert_uint_gt(loaded_topics, 0);
    engine_watch_topics_clear(&watch);
    def_free(back);
    free(stored);

    char long_prefix[260];
    memset(long_prefix, 'p', 245);
    long_prefix[245] = '\0';
    ck_assert(!def_set_map_topics(set, long_prefix, NULL, &dt_problems));
    ck_assert_msg(dt_problems.n > 0 &&
                      strstr(dt_problems.items[0].message, "over Kafka's 249") != NULL,
                  "%s", dt_listing());
    ck_assert_str_eq(dt_problems.items[0].pointer, "/events/OrderPlaced/topic");
    def_set_free(set);
    free(path);
    free(dir);
}
END_TEST

Suite *def_suite(void);
Suite *def_suite(void)
{
    Suite *s = suite_create("def");

    TCase *tc = tcase_create("valid");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_base_valid);
    tcase_add_test(tc, test_lookups);
    tcase_add_test(tc, test_optional_fields);
    tcase_add_test(tc, test_examples);
    suite_add_tcase(s, tc);

    tc = tcase_create("document");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_syntax_error);
    tcase_add_test(tc, test_duplicate_key);
    tcase_add_test(tc, test_not_an_object);
    tcase_add_test(tc, test_missing_required);
    tcase_add_test(tc, test_wrong_types);
    tcase_add_test(tc, test_unknown_fields);
    tcase_add_test(tc, test_all_problems_reported);
    suite_add_tcase(s, tc);

    tc = tcase_create("references");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_unknown_state);
    tcase_add_test(tc, test_undeclared_event);
    tcase_add_test(tc, test_unused_event);
    tcase_add_test(tc, test_templates);
    tcase_add_test(tc, test_command_topic_is_not_an_event_topic);
    suite_add_tcase(s, tc);

    tc = tcase_create("graph");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_unreachable);
    tcase_add_test(tc, test_no_terminal);
    tcase_add_test(tc, test_cannot_finish);
    tcase_add_test(tc, test_deadline_required);
    tcase_add_test(tc, test_terminal_restrictions);
    tcase_add_test(tc, test_start_to_terminal);
    tcase_add_test(tc, test_on_timeout_rules);
    tcase_add_test(tc, test_retry_rules);
    suite_add_tcase(s, tc);

    tc = tcase_create("values");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_bad_duration);
    tcase_add_test(tc, test_bad_pointer);
    tcase_add_test(tc, test_mode);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_version);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_checked_fixture(tc, dt_setup, dt_teardown);
    tcase_add_test(tc, test_load_file_errors);
    tcase_add_test(tc, test_set_load);
    tcase_add_test(tc, test_set_duplicate_version);
    tcase_add_test(tc, test_set_bad_paths);
    tcase_add_test(tc, test_suggestions);
    tcase_add_test(tc, test_schema_member_is_accepted);
    tcase_add_test(tc, test_key_sources);
    tcase_add_test(tc, test_type_sources);
    tcase_add_test(tc, test_time_sources);
    tcase_add_test(tc, test_any_transitions);
    tcase_add_test(tc, test_set_map_topics);
    tcase_add_test(tc, test_active_fields);
    suite_add_tcase(s, tc);
    return s;
}
