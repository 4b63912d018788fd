/*
 * sim_def - the flow read from a definition, and its per-run rewrite; see
 * sim_def.h.
 */
#include "sim/sim_def.h"

#include "definitions/duration.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The three paths of the flow, each from the start to a terminal state. */
static const sim_kind_t paths[][SIM_MAX_PATH + 1] = {
    {SIM_ORDER_PLACED, SIM_PAYMENT_CAPTURED, SIM_STOCK_RESERVED, SIM_SHIPMENT_DISPATCHED,
     SIM_ORDER_DELIVERED, SIM_CUSTOMER_NOTIFIED, SIM_N_KINDS},
    {SIM_ORDER_PLACED, SIM_PAYMENT_DECLINED, SIM_N_KINDS},
    {SIM_ORDER_PLACED, SIM_PAYMENT_CAPTURED, SIM_STOCK_UNAVAILABLE, SIM_REFUND_ISSUED, SIM_N_KINDS},
};

void sim_def_flow_clear(sim_def_flow_t *flow)
{
    for (int k = 0; k < SIM_N_KINDS; k++)
        free(flow->expected_after[k]);
    memset(flow, 0, sizeof *flow);
}

/* The events state `s` accepts, as a JSON array; NULL when out of memory. */
static char *expected_events(const def_t *def, size_t s)
{
    json_t *arr = json_array();
    const def_state_t *st = &def->states[s];
    for (size_t i = 0; i < st->n_on; i++)
        json_array_append_new(arr, json_string(def->events[st->on[i].event].name));
    char *text = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return text;
}

err_class_t sim_def_flow(const def_t *def, const char *prefix, const char *single_topic,
                         sim_def_flow_t *flow, char *errstr, size_t errstr_size)
{
    err_class_t rc = ERR_OK;
    memset(flow, 0, sizeof *flow);

    long event[SIM_N_KINDS];
    for (int k = 0; k < SIM_N_KINDS; k++) {
        const char *name = sim_kind_name((sim_kind_t) k);
        event[k] = def_find_event(def, name);
        if (event[k] < 0) {
            rc = err_set(ERR_INVALID, errstr, errstr_size,
                         "%s declares no event %s: steward-sim simulates the order-fulfilment "
                         "flow of definitions/examples/order_fulfilment.json",
                         def->source, name);
            goto done;
        }
        const char *topic = single_topic ? single_topic : def->events[event[k]].topic;
        const char *pre = single_topic ? "" : prefix;
        int n = snprintf(flow->topic[k], sizeof flow->topic[k], "%s%s", pre, topic);
        if (n < 0 || n > 249) {
            rc = err_set(ERR_INVALID, errstr, errstr_size,
                         "topic '%s%s' is longer than Kafka's 249 characters", pre, topic);
            goto done;
        }
    }
    if ((long) def->start_event != event[SIM_ORDER_PLACED]) {
        rc = err_set(ERR_INVALID, errstr, errstr_size, "%s starts on %s, not OrderPlaced",
                     def->source, def->events[def->start_event].name);
        goto done;
    }

    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        size_t state = def->start_state;
        flow->state_after[SIM_ORDER_PLACED] = def->states[state].name;
        for (int i = 1; paths[p][i] != SIM_N_KINDS; i++) {
            sim_kind_t kind = paths[p][i];
            const def_state_t *from = &def->states[state];
            const def_transition_t *t = def_transition(def, state, (size_t) event[kind]);
            if (t == NULL) {
                rc = err_set(ERR_INVALID, errstr, errstr_size,
                             "%s: state %s does not accept %s, which the simulated flow sends "
                             "after %s",
                             def->source, from->name, sim_kind_name(kind),
                             sim_kind_name(paths[p][i - 1]));
                goto done;
            }
            flow->deadline_ms[kind] = from->deadline_ms > 0 ? from->deadline_ms : def->deadline_ms;
            state = t->to;
            flow->state_after[kind] = def->states[state].name;
        }
        if (def->states[state].terminal == NULL) {
            rc = err_set(ERR_INVALID, errstr, errstr_size,
                         "%s: the simulated path ending in %s leaves orders in %s, which is not "
                         "terminal",
                         def->source, sim_kind_name(paths[p][1]), def->states[state].name);
            goto done;
        }
    }

    for (int k = 0; k < SIM_N_KINDS; k++) {
        long s = def_find_state(def, flow->state_after[k]);
        flow->expected_after[k] = expected_events(def, (size_t) s);
        if (flow->expected_after[k] == NULL) {
            rc = err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
            goto done;
        }
    }

done:
    if (rc != ERR_OK)
        sim_def_flow_clear(flow);
    return rc;
}

int64_t sim_def_scale_ms(int64_t ms, double scale)
{
    if (ms <= 0)
        return ms;
    double scaled = (double) ms * scale;
    if (scaled >= 9.2e18)
        return INT64_MAX;
    int64_t out = llround(scaled);
    return out < 1 ? 1 : out;
}

char *sim_def_format_duration(int64_t ms, char *buf, size_t size)
{
    static const struct {
        const char *name;
        int64_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};

    if (size == 0)
        return buf;
    buf[0] = '\0';
    if (ms <= 0) {
        snprintf(buf, size, "0s");
        return buf;
    }
    size_t len = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0] && ms > 0; i++) {
        int64_t n = ms / units[i].ms;
        if (n == 0)
            continue;
        int w = snprintf(buf + len, size - len, "%" PRId64 "%s", n, units[i].name);
        if (w < 0 || (size_t) w >= size - len)
            break; /* truncated: the caller's buffer is too small */
        len += (size_t) w;
        ms -= n * units[i].ms;
    }
    return buf;
}

/* Multiplies the duration at obj.name, when present. */
static err_class_t scale_member(json_t *obj, const char *name, const char *where, double scale,
                                char *errstr, size_t errstr_size)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL)
        return ERR_OK;
    char err[200], buf[64];
    int64_t ms;
    if (!json_is_string(v) || !duration_parse(json_string_value(v), &ms, err, sizeof err))
        return err_set(ERR_INVALID, errstr, errstr_size, "%s/%s: not a duration", where, name);
    sim_def_format_duration(sim_def_scale_ms(ms, scale), buf, sizeof buf);
    json_string_set(v, buf);
    return ERR_OK;
}

/* Puts `prefix` in front of the string at obj.topic, or replaces it with
 * `replace` when that is not NULL. */
static err_class_t prefix_topic(json_t *obj, const char *prefix, const char *replace,
                                const char *where, char *errstr, size_t errstr_size)
{
    json_t *v = json_object_get(obj, "topic");
    if (v == NULL)
        return ERR_OK;
    if (!json_is_string(v))
        return err_set(ERR_INVALID, errstr, errstr_size, "%s/topic: not a string", where);
    char buf[SIM_DEF_TOPIC_MAX];
    int n = replace ? snprintf(buf, sizeof buf, "%s", replace)
                    : snprintf(buf, sizeof buf, "%s%s", prefix, json_string_value(v));
    if (n < 0 || (size_t) n >= sizeof buf)
        return err_set(ERR_INVALID, errstr, errstr_size, "%s/topic: too long with the prefix",
                       where);
    json_string_set(v, buf);
    return ERR_OK;
}

err_class_t sim_def_rewrite(json_t *doc, const char *prefix, const char *single_topic,
                            double deadline_scale, char *errstr, size_t errstr_size)
{
    err_class_t rc;
    if (!json_is_object(doc))
        return err_set(ERR_INVALID, errstr, errstr_size, "the definition is not a JSON object");
    if (prefix == NULL)
        prefix = "";

    if ((rc = scale_member(doc, "deadline", "", deadline_scale, errstr, errstr_size)) ||
        (rc = scale_member(doc, "reorder_window", "", deadline_scale, errstr, errstr_size)))
        return rc;

    const char *name;
    json_t *v;
    char where[300];
    json_t *events = json_object_get(doc, "events");
    json_t *states = json_object_get(doc, "states");
    json_object_foreach(events, name, v)
    {
        snprintf(where, sizeof where, "/events/%s", name);
        if (!json_is_object(v))
            return err_set(ERR_INVALID, errstr, errstr_size, "%s: not an object", where);
        if ((rc = prefix_topic(v, prefix, single_topic, where, errstr, errstr_size)))
            return rc;
    }
    json_object_foreach(states, name, v)
    {
        snprintf(where, sizeof where, "/states/%s", name);
        if (!json_is_object(v))
            return err_set(ERR_INVALID, errstr, errstr_size, "%s: not an object", where);
        if ((rc = scale_member(v, "deadline", where, deadline_scale, errstr, errstr_size)))
            return rc;
        /* Active mode's durations scale with the deadlines they pace. */
        char sub[340];
        json_t *retry = json_object_get(v, "retry"), *lease = json_object_get(v, "lease");
        snprintf(sub, sizeof sub, "%s/retry", where);
        if (json_is_object(retry) &&
            ((rc = scale_member(retry, "backoff", sub, deadline_scale, errstr, errstr_size)) ||
             (rc = scale_member(retry, "max_backoff", sub, deadline_scale, errstr, errstr_size))))
            return rc;
        snprintf(sub, sizeof sub, "%s/lease", where);
        if (json_is_object(lease) &&
            (rc = scale_member(lease, "duration", sub, deadline_scale, errstr, errstr_size)))
            return rc;
        json_t *cmd = json_object_get(v, "command");
        if (json_is_object(cmd)) {
            strncat(where, "/command", sizeof where - strlen(where) - 1);
            if ((rc = prefix_topic(cmd, prefix, NULL, where, errstr, errstr_size)))
                return rc;
        }
    }
    return ERR_OK;
}
