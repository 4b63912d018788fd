/*
 * http_actions - the operator's requests: the actions of
 * manager/operator/actions.h (POST /v1/alerts/{id}/VERB,
 * /v1/instances/{process}/{key}/VERB, /v1/processes/{process}/VERB) and
 * the silences (GET and POST /v1/silences, POST
 * /v1/silences/{id}/unsilence). It reads the JSON body (a verb's own
 * options by name), runs the action on the connection within
 * QUERY_BUDGET_MS, logs what an operate token changed and maps the
 * action's outcome to a status.
 */
#include "manager/api/http_int.h"

#include "common/clock.h"
#include "common/log.h"
#include "definitions/duration.h"
#include "manager/operator/actions.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reply_action(http_reply_t *r, action_rc_t rc, json_t *result, const char *errstr);

/*
 * The body's value of an option, as the command line gives it: a string
 * as it is, a number as its digits; a flag true (given: "") or false; null
 * or absent, not given; for an option that repeats, an array of strings
 * joined by commas, or an object {"OLD": "NEW"} as "OLD=NEW,..." (--map).
 * False for any other type. *owned (free it) holds what was made.
 */
static bool body_value(const json_t *v, const action_option_t *o, const char **value, char **owned)
{
    *value = NULL;
    *owned = NULL;
    if (v == NULL || json_is_null(v))
        return true;
    if (o->arg == NULL) { /* a flag */
        *value = json_is_true(v) ? "" : NULL;
        return json_is_boolean(v);
    }
    if (json_is_string(v)) {
        *value = json_string_value(v);
        return true;
    }
    if (json_is_integer(v)) {
        if (asprintf(owned, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0)
            *owned = NULL;
        *value = *owned;
        return *owned != NULL;
    }
    if (!o->repeats || (!json_is_array(v) && !json_is_object(v)))
        return false;
    size_t len = 0, i;
    const char *k;
    json_t *item;
    json_array_foreach(v, i, item) len += json_string_length(item) + 1;
    json_object_foreach((json_t *) v, k, item) len += strlen(k) + json_string_length(item) + 2;
    char *out = malloc(len + 1);
    if (out == NULL)
        return false;
    out[0] = '\0';
    bool ok = true;
    json_array_foreach(v, i, item)
    {
        ok = ok && json_is_string(item);
        if (ok)
            sprintf(out + strlen(out), "%s%s", out[0] ? "," : "", json_string_value(item));
    }
    json_object_foreach((json_t *) v, k, item)
    {
        ok = ok && json_is_string(item);
        if (ok)
            sprintf(out + strlen(out), "%s%s=%s", out[0] ? "," : "", k, json_string_value(item));
    }
    if (!ok) {
        free(out);
        return false;
    }
    *value = *owned = out;
    return true;
}

/* One action, by the token named actor, with the JSON body {"reason", and
 * the verb's own options by name ("as", "to", ...)}. */
void http_post_action(http_t *h, action_verb_t verb, action_request_t *req, const char *body,
                      http_reply_t *r)
{
    char errstr[1024];
    json_error_t jerr;
    json_t *doc = body != NULL ? json_loads(body, 0, &jerr) : NULL;
    /* An action's first option, if any, is what it acts towards (its target). */
    const action_verb_def_t *row = action_verb_def(verb);
    const action_option_t *target = &row->options[0];
    if (!json_is_object(doc)) {
        json_decref(doc);
        http_reply_error(
            r, MHD_HTTP_BAD_REQUEST, "expected a JSON object body: {\"reason\": \"why\"%s%s%s%s}",
            target->name != NULL ? ", \"" : "", target->name != NULL ? target->name : "",
            target->name != NULL ? "\": \"" : "", target->name != NULL ? target->arg : "");
        return;
    }
    const char *values[ACTION_VERB_OPTIONS_MAX] = {NULL};
    char *owned[ACTION_VERB_OPTIONS_MAX] = {NULL};
    for (size_t i = 0; i < ACTION_VERB_OPTIONS_MAX && row->options[i].name != NULL; i++) {
        const action_option_t *o = &row->options[i];
        if (!body_value(json_object_get(doc, o->name), o, &values[i], &owned[i])) {
            http_reply_error(r, MHD_HTTP_BAD_REQUEST, "%s: expected %s%s", o->name,
                             o->arg == NULL ? "true or false" : "a string",
                             o->repeats ? ", an array of them or an object" : "");
            for (size_t j = 0; j <= i; j++)
                free(owned[j]);
            json_decref(doc);
            return;
        }
    }
    req->reason = json_string_value(json_object_get(doc, "reason"));
    req->target = values[0];
    req->options = values;

    json_t *result = NULL;
    action_rc_t rc = ACTION_FAILED;
    http_db_t *db;
    err_class_t cls = http_db_acquire(h, false, clock_monotonic_ms() + QUERY_BUDGET_MS, &db, errstr,
                                      sizeof errstr);
    if (cls == ERR_OK) {
        rc = action_run(db->conn, verb, req, &result, errstr, sizeof errstr);
        http_db_release(h, db);
    }
    if (cls != ERR_OK) {
        http_reply_db_error(r, cls, errstr);
    } else {
        if (rc == ACTION_OK)
            LOG_INFO("operator action", "action", action_verb_name(verb), "actor", req->actor,
                     "process", req->process, "key", req->key);
        reply_action(r, rc, result, errstr);
        result = NULL; /* taken by reply_action() on OK; NULL otherwise */
    }
    json_decref(result);
    json_decref(doc);
    for (size_t i = 0; i < ACTION_VERB_OPTIONS_MAX; i++)
        free(owned[i]);
}

/* A JSON body as an object, or NULL with the 400 in r. Caller frees. */
static json_t *body_object(const char *body, const char *expected, http_reply_t *r)
{
    json_t *doc = body != NULL ? json_loads(body, 0, NULL) : NULL;
    if (!json_is_object(doc)) {
        json_decref(doc);
        http_reply_error(r, MHD_HTTP_BAD_REQUEST, "expected a JSON object body: %s", expected);
        return NULL;
    }
    return doc;
}

/* The answer to an action: 200 with result (taken) or the error's status. */
static void reply_action(http_reply_t *r, action_rc_t rc, json_t *result, const char *errstr)
{
    static const unsigned int status[] = {
        [ACTION_OK] = MHD_HTTP_OK,
        [ACTION_BAD_REQUEST] = MHD_HTTP_BAD_REQUEST,
        [ACTION_NOT_FOUND] = MHD_HTTP_NOT_FOUND,
        [ACTION_CONFLICT] = MHD_HTTP_CONFLICT,
        [ACTION_REFUSED] = MHD_HTTP_CONFLICT,
        [ACTION_FAILED] = MHD_HTTP_SERVICE_UNAVAILABLE,
    };
    if (rc == ACTION_OK)
        http_reply_json(r, MHD_HTTP_OK, result);
    else
        http_reply_error(r, status[rc], "%s", errstr);
}

/* POST /v1/silences {"process", "state"?, "team"?, "for", "reason"};
 * POST /v1/silences/{id}/unsilence {"reason"}; GET /v1/silences[?all=true]. */
void http_silences(http_t *h, const char *method, const char *id, const char *actor,
                   const char *all, const char *body, http_reply_t *r)
{
    char errstr[1024];
    json_t *doc = NULL, *result = NULL;
    silence_request_t req = {.actor = actor};
    long long sid = 0;
    bool get = strcmp(method, MHD_HTTP_METHOD_POST) != 0;

    if (!get && id == NULL) {
        doc = body_object(body,
                          "{\"process\": P, \"state\": S?, \"team\": T?, \"for\": \"2h\", "
                          "\"reason\": \"why\"}",
                          r);
        if (doc == NULL)
            return;
        req.process = json_string_value(json_object_get(doc, "process"));
        req.state = json_string_value(json_object_get(doc, "state"));
        req.team = json_string_value(json_object_get(doc, "team"));
        req.reason = json_string_value(json_object_get(doc, "reason"));
        const char *for_text = json_string_value(json_object_get(doc, "for"));
        if (for_text == NULL || !duration_parse(for_text, &req.for_ms, errstr, sizeof errstr)) {
            http_reply_error(r, MHD_HTTP_BAD_REQUEST, "for: %s",
                             for_text == NULL ? "expected a duration such as \"2h\"" : errstr);
            json_decref(doc);
            return;
        }
    } else if (!get) {
        char *end;
        sid = strtoll(id, &end, 10);
        if (*end != '\0' || sid <= 0) {
            http_reply_error(r, MHD_HTTP_NOT_FOUND, "no silence %s", id);
            return;
        }
        if ((doc = body_object(body, "{\"reason\": \"why\"}", r)) == NULL)
            return;
        req.reason = json_string_value(json_object_get(doc, "reason"));
    }
    action_rc_t rc = ACTION_FAILED;
    http_db_t *db;
    err_class_t cls = http_db_acquire(h, false, clock_monotonic_ms() + QUERY_BUDGET_MS, &db, errstr,
                                      sizeof errstr);
    if (cls == ERR_OK) {
        if (get)
            rc = action_silences(db->conn, all != NULL && strcmp(all, "true") == 0, &result, errstr,
                                 sizeof errstr);
        else if (id == NULL)
            rc = action_silence(db->conn, &req, &result, errstr, sizeof errstr);
        else
            rc = action_unsilence(db->conn, sid, actor, req.reason, &result, errstr, sizeof errstr);
        http_db_release(h, db);
    }
    if (cls != ERR_OK) {
        http_reply_db_error(r, cls, errstr);
    } else {
        if (rc == ACTION_OK && !get)
            LOG_INFO("operator action", "action", id == NULL ? "silence" : "unsilence", "actor",
                     actor, "process", req.process);
        reply_action(r, rc, result, errstr);
        result = NULL; /* taken by reply_action() on OK; NULL otherwise */
    }
    json_decref(result);
    json_decref(doc);
}
