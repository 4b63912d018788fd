/*
 * sim_active - the responder's model, fault plan, expectations and
 * replies; see sim_active.h.
 */
#include "sim/sim_active.h"

#include "common/sha256.h"
#include "definitions/duration.h"
#include "sim/sim_def.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model --------------------------------------------------------- */

static int kind_by_name(const char *name)
{
    for (int k = 0; k < SIM_N_KINDS; k++)
        if (strcmp(sim_kind_name((sim_kind_t) k), name) == 0)
            return k;
    return -1;
}

int sim_active_find_state(const sim_active_model_t *model, const char *name)
{
    for (size_t i = 0; i < model->n_states; i++)
        if (strcmp(model->states[i].name, name) == 0)
            return (int) i;
    return -1;
}

/* Copies a string member into buf; false when it is missing, not a string
 * or too long. */
static bool copy_string(const json_t *obj, const char *member, char *buf, size_t size)
{
    const char *s = json_string_value(json_object_get(obj, member));
    if (s == NULL || strlen(s) >= size)
        return false;
    memcpy(buf, s, strlen(s) + 1);
    return true;
}

static bool parse_duration(const json_t *v, int64_t *ms)
{
    char err[128];
    return json_is_string(v) && duration_parse(json_string_value(v), ms, err, sizeof err);
}

/* A pointer of one level ("/steward_token"): the responder writes the
 * token as a top-level member. */
static bool top_level_pointer(const char *p)
{
    return p[0] == '/' && p[1] != '\0' && strchr(p + 1, '/') == NULL && strchr(p, '~') == NULL;
}

err_class_t sim_active_load(const json_t *doc, const char *prefix, sim_active_model_t *model,
                            char *errstr, size_t errstr_size)
{
    memset(model, 0, sizeof *model);
    if (prefix == NULL)
        prefix = "";
    if (!json_is_object(doc))
        return err_set(ERR_INVALID, errstr, errstr_size, "the definition is not a JSON object");
    if (!copy_string(doc, "process", model->process, sizeof model->process))
        return err_set(ERR_INVALID, errstr, errstr_size, "/process: missing or too long");
    const char *mode = json_string_value(json_object_get(doc, "mode"));
    if (mode == NULL || strcmp(mode, "active") != 0)
        return err_set(ERR_INVALID, errstr, errstr_size,
                       "the responder needs a definition in \"mode\": \"active\" (this one is %s)",
                       mode ? mode : "shadow");

    json_t *events = json_object_get(doc, "events");
    for (int k = 0; k < SIM_N_KINDS; k++) {
        json_t *ev = json_object_get(events, sim_kind_name((sim_kind_t) k));
        const char *topic = json_string_value(json_object_get(ev, "topic"));
        if (topic == NULL)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "/events: no %s with a topic; the responder answers with the events "
                           "of the order-fulfilment flow",
                           sim_kind_name((sim_kind_t) k));
        int n = snprintf(model->topic[k], sizeof model->topic[k], "%s%s", prefix, topic);
        if (n < 0 || n > 249)
            return err_set(ERR_INVALID, errstr, errstr_size, "topic '%s%s' is too long", prefix,
                           topic);
    }

    /* States first by name, so that transitions can name any of them. */
    json_t *states = json_object_get(doc, "states");
    const char *name;
    json_t *st;
    json_object_foreach(states, name, st)
    {
        if (model->n_states == SIM_ACTIVE_MAX_STATES || strlen(name) >= SIM_ACTIVE_NAME_MAX)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "/states: more than %d states, or a name too long",
                           SIM_ACTIVE_MAX_STATES);
        sim_active_state_t *s = &model->states[model->n_states++];
        memcpy(s->name, name, strlen(name) + 1);
        s->terminal = json_object_get(st, "terminal") != NULL;
        s->on_timeout = -1;
    }
    json_object_foreach(states, name, st)
    {
        sim_active_state_t *s = &model->states[sim_active_find_state(model, name)];
        const char *ev_name;
        json_t *to;
        json_object_foreach(json_object_get(st, "on"), ev_name, to)
        {
            int target =
                json_is_string(to) ? sim_active_find_state(model, json_string_value(to)) : -1;
            if (target < 0 || s->n_on == SIM_ACTIVE_MAX_ON)
                return err_set(ERR_INVALID, errstr, errstr_size, "/states/%s/on/%s: bad target",
                               name, ev_name);
            s->on_event[s->n_on] = kind_by_name(ev_name);
            s->on_to[s->n_on++] = target;
        }
        json_t *cmd = json_object_get(st, "command");
        if (cmd != NULL) {
            char topic[SIM_ACTIVE_TOPIC_MAX];
            if (!copy_string(cmd, "type", s->command_type, sizeof s->command_type) ||
                !copy_string(cmd, "topic", topic, sizeof topic))
                return err_set(ERR_INVALID, errstr, errstr_size,
                               "/states/%s/command: needs a type and a topic", name);
            int n = snprintf(s->command_topic, sizeof s->command_topic, "%s%s", prefix, topic);
            if (n < 0 || n > 249)
                return err_set(ERR_INVALID, errstr, errstr_size,
                               "/states/%s/command/topic: too long with the prefix", name);
        }
        json_t *deadline = json_object_get(st, "deadline");
        if (deadline != NULL && !parse_duration(deadline, &s->deadline_ms))
            return err_set(ERR_INVALID, errstr, errstr_size, "/states/%s/deadline: not a duration",
                           name);
        json_t *retry_max = json_object_get(json_object_get(st, "retry"), "max");
        s->retry_max = json_is_integer(retry_max) ? (int) json_integer_value(retry_max) : 0;
        const char *on_timeout = json_string_value(json_object_get(st, "on_timeout"));
        if (on_timeout != NULL && (s->on_timeout = sim_active_find_state(model, on_timeout)) < 0)
            return err_set(ERR_INVALID, errstr, errstr_size,
                           "/states/%s/on_timeout: unknown state '%s'", name, on_timeout);

        json_t *token = json_object_get(st, "token");
        if (token != NULL) {
            bool ok = copy_string(token, "pointer", s->token_pointer, sizeof s->token_pointer)
                          ? top_level_pointer(s->token_pointer)
                          : copy_string(token, "header", s->token_header, sizeof s->token_header);
            if (!ok)
                return err_set(ERR_INVALID, errstr, errstr_size,
                               "/states/%s/token: the responder writes a top-level pointer "
                               "(\"/steward_token\") or a header",
                               name);
        }

        json_t *lease = json_object_get(st, "lease");
        if (lease != NULL) {
            json_t *renew = json_array_get(json_object_get(lease, "renew"), 0);
            s->leased = copy_string(lease, "claim", s->lease_claim, sizeof s->lease_claim) &&
                        copy_string(lease, "holder", s->lease_holder, sizeof s->lease_holder) &&
                        top_level_pointer(s->lease_holder) && json_is_string(renew) &&
                        strlen(json_string_value(renew)) < sizeof s->lease_renew &&
                        parse_duration(json_object_get(lease, "duration"), &s->lease_ms) &&
                        s->lease_ms > 0;
            if (!s->leased)
                return err_set(ERR_INVALID, errstr, errstr_size,
                               "/states/%s/lease: needs claim, a top-level holder pointer, "
                               "renew and a duration",
                               name);
            strcpy(s->lease_renew, json_string_value(renew));
            const char *topic = json_string_value(
                json_object_get(json_object_get(events, s->lease_claim), "topic"));
            if (topic == NULL)
                return err_set(ERR_INVALID, errstr, errstr_size,
                               "/states/%s/lease/claim: event %s is not declared with a topic",
                               name, s->lease_claim);
            snprintf(s->lease_topic, sizeof s->lease_topic, "%s%s", prefix, topic);
        }
    }

    const char *start_to = json_string_value(json_object_get(json_object_get(doc, "start"), "to"));
    model->start_state = start_to ? sim_active_find_state(model, start_to) : -1;
    if (model->start_state < 0)
        return err_set(ERR_INVALID, errstr, errstr_size, "/start/to: missing or unknown");
    for (size_t i = 0; i < model->n_states; i++)
        if (model->states[i].command_type[0] != '\0')
            return ERR_OK;
    return err_set(ERR_INVALID, errstr, errstr_size,
                   "no state has a command: there is nothing to answer");
}

void sim_active_deadlines(const sim_active_model_t *model, double scale, sim_options_t *opts)
{
    for (int k = 0; k < SIM_N_KINDS; k++)
        opts->deadline_ms[k] = 0;
    for (size_t i = 0; i < model->n_states; i++) {
        const sim_active_state_t *s = &model->states[i];
        for (size_t j = 0; j < s->n_on; j++) {
            int k = s->on_event[j];
            if (k >= 0 && opts->deadline_ms[k] == 0 && s->deadline_ms > 0)
                opts->deadline_ms[k] = sim_def_scale_ms(s->deadline_ms, scale);
        }
    }
}

/* ---- faults ------------------------------------------------------------ */

const char *sim_fault_name(sim_fault_kind_t kind)
{
    switch (kind) {
    case SIM_FAULT_NONE:
        return "none";
    case SIM_FAULT_DROP_FIRST:
        return "drop_first";
    case SIM_FAULT_SILENT:
        return "silent";
    case SIM_FAULT_ZOMBIE:
        return "zombie";
    case SIM_FAULT_DUPLICATE:
        return "duplicate";
    case SIM_FAULT_LATE_ZOMBIE:
        return "late_zombie";
    case SIM_N_FAULTS:
        break;
    }
    return "unknown";
}

/* The transition `s` takes on `kind`: the target, or -1. */
static int on_kind(const sim_active_state_t *s, int kind)
{
    for (size_t i = 0; i < s->n_on; i++)
        if (s->on_event[i] == kind)
            return s->on_to[i];
    return -1;
}

/* The states the completed path passes through, in order; how many. */
static size_t completed_states(const sim_active_model_t *model, int out[SIM_MAX_PATH])
{
    static const sim_kind_t completed[] = {SIM_PAYMENT_CAPTURED, SIM_STOCK_RESERVED,
                                           SIM_SHIPMENT_DISPATCHED, SIM_ORDER_DELIVERED,
                                           SIM_CUSTOMER_NOTIFIED};
    size_t n = 0;
    int s = model->start_state;
    for (size_t k = 0; k < sizeof completed / sizeof completed[0] && s >= 0; k++) {
        if (model->states[s].terminal)
            break;
        out[n++] = s;
        s = on_kind(&model->states[s], (int) completed[k]);
    }
    return n;
}

sim_fault_t sim_active_fault(const sim_active_model_t *model, uint32_t index, uint32_t fault_every)
{
    sim_fault_t none = {SIM_FAULT_NONE, -1};
    if (fault_every == 0 || index % fault_every != fault_every - 1)
        return none;

    /* The rotation: only states an order on the completed path reaches.
     * The kinds added later come after the first three, so that an order's
     * place in the first part keeps its fault. */
    sim_fault_t rotation[5 * SIM_MAX_PATH];
    size_t n = 0;
    int path[SIM_MAX_PATH];
    size_t n_path = completed_states(model, path);
    for (size_t i = 0; i < n_path; i++) {
        const sim_active_state_t *s = &model->states[path[i]];
        if (s->command_type[0] != '\0' && s->retry_max > 0)
            rotation[n++] = (sim_fault_t){SIM_FAULT_DROP_FIRST, path[i]};
        if (s->command_type[0] != '\0')
            rotation[n++] = (sim_fault_t){SIM_FAULT_SILENT, path[i]};
        if (s->leased && s->command_type[0] != '\0')
            rotation[n++] = (sim_fault_t){SIM_FAULT_ZOMBIE, path[i]};
    }
    for (size_t i = 0; i < n_path; i++) {
        const sim_active_state_t *s = &model->states[path[i]];
        /* Without a token a second reply is judged as any event. */
        bool token = s->token_pointer[0] != '\0' || s->token_header[0] != '\0';
        if (s->command_type[0] != '\0' && token)
            rotation[n++] = (sim_fault_t){SIM_FAULT_DUPLICATE, path[i]};
    }
    for (size_t i = 0; i < n_path; i++) {
        const sim_active_state_t *s = &model->states[path[i]];
        /* The hand-off is a second attempt: the lease needs a retry. */
        if (s->leased && s->command_type[0] != '\0' && s->retry_max > 0)
            rotation[n++] = (sim_fault_t){SIM_FAULT_LATE_ZOMBIE, path[i]};
    }
    if (n == 0)
        return none;
    return rotation[(index / fault_every) % n];
}

void sim_active_plan(const sim_options_t *opts, const sim_active_model_t *model, uint32_t index,
                     uint32_t fault_every, sim_order_t *order)
{
    sim_options_t o = *opts;
    o.stall_rate = 0.0;
    o.reorder_rate = 0.0;
    o.duplicate_rate = 0.0;
    if (sim_active_fault(model, index, fault_every).kind != SIM_FAULT_NONE) {
        o.decline_rate = 0.0;
        o.stock_fail_rate = 0.0;
    }
    sim_plan_order(&o, index, 0, order);
}

/* The path index from `k` on whose event `s` accepts, or -1. */
static int path_event_in(const sim_order_t *order, const sim_active_state_t *s, int k)
{
    for (int i = k; i < order->n_path; i++)
        if (on_kind(s, order->path[i]) >= 0)
            return i;
    return -1;
}

/* The first simulated event `s` accepts, or -1. */
static int first_kind(const sim_active_state_t *s)
{
    for (size_t i = 0; i < s->n_on; i++)
        if (s->on_event[i] >= 0)
            return s->on_event[i];
    return -1;
}

sim_expect_t sim_active_expect(const sim_active_model_t *model, const sim_order_t *order,
                               sim_fault_t fault)
{
    /* Each of these sends one reply Steward must record as stale. */
    bool zombie = fault.kind == SIM_FAULT_ZOMBIE || fault.kind == SIM_FAULT_LATE_ZOMBIE;
    sim_expect_t e = {-1, -1, zombie || fault.kind == SIM_FAULT_DUPLICATE ? 1u : 0u};
    /* A lease that runs out with no attempt left is a missed last attempt:
     * no hand-off, so the quiet worker is as good as a silent service. */
    if (zombie && fault.state >= 0 && model->states[fault.state].retry_max == 0) {
        fault.kind = SIM_FAULT_SILENT;
        e.stale_replies = 0;
    }
    int s = model->start_state, k = 1;
    for (int guard = 0; guard < 4 * SIM_ACTIVE_MAX_STATES && s >= 0; guard++) {
        const sim_active_state_t *st = &model->states[s];
        if (st->terminal) {
            e.terminal = s;
            return e;
        }
        if (fault.kind == SIM_FAULT_SILENT && fault.state == s) {
            if (st->on_timeout < 0) {
                e.paged_at = s;
                return e;
            }
            /* Its compensation is answered: only this step's service is silent. */
            fault.kind = SIM_FAULT_NONE;
            s = st->on_timeout;
            continue;
        }
        int i = path_event_in(order, st, k);
        int kind = i >= 0 ? order->path[i] : first_kind(st);
        if (kind < 0) {
            e.paged_at = s; /* nothing the simulator sends moves it on */
            return e;
        }
        if (i >= 0)
            k = i + 1;
        s = on_kind(st, kind);
    }
    return e;
}

/* ---- commands and replies ---------------------------------------------- */

void sim_active_ce_id(const char *process, const char *key, long step, long attempt, char hex[65])
{
    size_t n = strlen(process) + strlen(key) + 64;
    char *buf = malloc(n);
    if (buf == NULL) {
        hex[0] = '\0';
        return;
    }
    int len = snprintf(buf, n, "%s\x1f%s\x1f%ld\x1f%ld", process, key, step, attempt);
    sha256_hex(buf, (size_t) len, hex);
    free(buf);
}

bool sim_active_order_index(const sim_options_t *opts, const char *key, uint32_t *index)
{
    char prefix[40];
    int n = snprintf(prefix, sizeof prefix, "ord-%" PRIx64 "-", opts->seed);
    if (strncmp(key, prefix, (size_t) n) != 0)
        return false;
    const char *digits = key + n;
    char *end;
    if (*digits < '0' || *digits > '9')
        return false;
    unsigned long long v = strtoull(digits, &end, 10);
    if (*end != '\0' || v >= opts->orders)
        return false;
    *index = (uint32_t) v;
    return true;
}

/* The latency of answering the step at path index i (the plan's), or,
 * off the plan's path, the kind's median latency at the time scale. */
static int64_t step_latency(const sim_options_t *opts, const sim_order_t *order, int i, int kind)
{
    int64_t ms;
    if (i >= 1)
        ms = order->time_ms[i] - order->time_ms[i - 1];
    else
        ms = (int64_t) (opts->latency[kind].median_ms * opts->time_scale);
    if (opts->deadline_ms[kind] > 0 && ms > opts->deadline_ms[kind] * 8 / 10)
        ms = opts->deadline_ms[kind] * 8 / 10;
    return ms < 1 ? 1 : ms;
}

typedef struct reply_builder {
    const sim_options_t *opts;
    const sim_order_t *order;
    const sim_command_t *cmd;
    sim_reply_t *out;
    size_t max, n;
    int path_step; /* >= 0: the reply is the plan's event at this path index */
} reply_builder_t;

/* Appends one reply: an event of the flow (kind >= 0) or a lease event
 * (`lease_type`, with `worker` at the holder pointer). */
static void add_reply(reply_builder_t *b, int64_t at, const char *topic, int kind,
                      const char *lease_type, const sim_active_state_t *st, const char *worker,
                      long long token, bool stale)
{
    if (b->n == b->max)
        return;
    sim_reply_t *r = &b->out[b->n];
    memset(r, 0, sizeof *r);
    r->emit_ms = at;
    r->topic = topic;
    r->token = token;
    r->stale = stale;
    if (b->path_step >= 0)
        sim_event_id(b->opts, b->order->index, (unsigned) b->path_step, r->event_id,
                     sizeof r->event_id);
    else
        snprintf(r->event_id, sizeof r->event_id, "evt-%" PRIx64 "-%" PRIu32 "-s%lda%ld-%zu",
                 b->opts->seed, b->order->index, b->cmd->step, b->cmd->attempt, b->n);

    json_t *v;
    if (kind >= 0) {
        char text[SIM_REPLY_VALUE_MAX];
        sim_msg_t msg = {0};
        msg.kind = (uint8_t) kind;
        msg.step = (uint8_t) b->cmd->step;
        sim_format_value(b->opts, b->order, &msg, text, sizeof text);
        v = json_loads(text, 0, NULL);
        snprintf(r->type, sizeof r->type, "%s", sim_kind_name((sim_kind_t) kind));
    } else {
        char order_id[64];
        sim_order_id(b->opts, b->order->index, order_id, sizeof order_id);
        v = json_pack("{s:s, s:s}", "type", lease_type, "order_id", order_id);
        snprintf(r->type, sizeof r->type, "%s", lease_type);
    }
    if (v == NULL)
        return;
    json_object_set_new(v, "id", json_string(r->event_id));
    if (worker != NULL && st != NULL)
        json_object_set_new(v, st->lease_holder + 1, json_string(worker));
    if (st != NULL && token > 0) {
        if (st->token_pointer[0] != '\0')
            json_object_set_new(v, st->token_pointer + 1, json_integer(token));
        else if (st->token_header[0] != '\0')
            r->token_header = st->token_header;
    }
    char *text = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    if (text == NULL || strlen(text) >= sizeof r->value) {
        free(text);
        return;
    }
    r->value_len = strlen(text);
    memcpy(r->value, text, r->value_len + 1);
    free(text);
    b->n++;
}

/* The claim and the heartbeats of a worker on the leased step from `from`
 * until `until` (exclusive), one every third of the lease. */
static void add_lease_work(reply_builder_t *b, const sim_active_state_t *st, int64_t from,
                           int64_t until, const char *worker, long long token)
{
    add_reply(b, from, st->lease_topic, -1, st->lease_claim, st, worker, token, false);
    int64_t beat = st->lease_ms / 3 > 0 ? st->lease_ms / 3 : 1;
    for (int64_t t = from + beat; t < until && b->n + 4 < b->max; t += beat)
        add_reply(b, t, st->lease_topic, -1, st->lease_renew, st, worker, token, false);
}

size_t sim_active_respond(const sim_options_t *opts, const sim_active_model_t *model,
                          const sim_order_t *order, sim_fault_t fault, const sim_command_t *cmd,
                          int64_t now_ms, sim_reply_t *out, size_t max)
{
    int s = cmd->state != NULL ? sim_active_find_state(model, cmd->state) : -1;
    for (size_t i = 0; s < 0 && cmd->type != NULL && i < model->n_states; i++)
        if (strcmp(model->states[i].command_type, cmd->type) == 0)
            s = (int) i;
    if (s < 0 || model->states[s].terminal)
        return 0;
    const sim_active_state_t *st = &model->states[s];

    bool faulty = fault.state == s;
    if (faulty && fault.kind == SIM_FAULT_SILENT)
        return 0;
    if (faulty && fault.kind == SIM_FAULT_DROP_FIRST && cmd->attempt == 0)
        return 0;

    reply_builder_t b = {opts, order, cmd, out, max, 0, -1};
    int i = path_event_in(order, st, 1);
    int kind = i >= 0 ? order->path[i] : first_kind(st);
    if (kind < 0)
        return 0;
    int64_t latency = step_latency(opts, order, i, kind);
    int64_t at = now_ms + latency;
    char worker[64];
    snprintf(worker, sizeof worker, "picker-%" PRIu32 "-%ld", order->index, cmd->attempt);

    bool late_zombie = faulty && fault.kind == SIM_FAULT_LATE_ZOMBIE && st->leased;
    if (st->leased) {
        bool zombie = faulty && (fault.kind == SIM_FAULT_ZOMBIE || late_zombie);
        if (zombie && cmd->attempt == 0) {
            /* Claims, heartbeats once, and is never heard of again until
             * the step has been handed on. */
            add_reply(&b, now_ms + 1 + latency / 5, st->lease_topic, -1, st->lease_claim, st,
                      worker, cmd->token, false);
            add_reply(&b, now_ms + 1 + latency / 5 + st->lease_ms / 3, st->lease_topic, -1,
                      st->lease_renew, st, worker, cmd->token, false);
            return b.n;
        }
        if (zombie && !late_zombie) {
            /* The hand-off: the old worker's late answer comes first, with
             * the token of the send before this one (tokens grow by one
             * per send), then the new worker claims and answers. */
            add_reply(&b, now_ms + 1, model->topic[kind], kind, NULL, st, NULL,
                      cmd->token > 1 ? cmd->token - 1 : 0, cmd->token > 1);
            at += 1;
        }
        add_lease_work(&b, st, now_ms + 1 + latency / 5, at, worker, cmd->token);
    }
    add_reply(&b, at, model->topic[kind], kind, NULL, st, NULL, cmd->token, false);
    if (late_zombie && cmd->attempt > 0) {
        /* The old worker's answer after the new one's, on the same
         * partition: it reaches Steward once the step has been left. */
        at += 1;
        add_reply(&b, at, model->topic[kind], kind, NULL, st, NULL,
                  cmd->token > 1 ? cmd->token - 1 : 0, cmd->token > 1);
    } else if (faulty && fault.kind == SIM_FAULT_DUPLICATE) {
        /* The same answer again under a new event id: after the first, so
         * by then the instance has a newer token. */
        at += 1;
        add_reply(&b, at, model->topic[kind], kind, NULL, st, NULL, cmd->token, true);
    }

    /* The steps no command drives (the carrier's delivery) follow on their
     * own, as in the choreography, under the choreography's event id: the
     * delivery happens once, however many attempts of the step before it
     * were answered, so a second one is a copy Steward drops. */
    int next = on_kind(st, kind);
    int k = i >= 0 ? i + 1 : order->n_path;
    while (next >= 0 && !model->states[next].terminal &&
           model->states[next].command_type[0] == '\0' && k < order->n_path) {
        const sim_active_state_t *ns = &model->states[next];
        int nk = order->path[k];
        if (on_kind(ns, nk) < 0)
            break;
        at += step_latency(opts, order, k, nk);
        b.path_step = k;
        add_reply(&b, at, model->topic[nk], nk, NULL, NULL, NULL, 0, false);
        b.path_step = -1;
        next = on_kind(ns, nk);
        k++;
    }
    return b.n;
}
