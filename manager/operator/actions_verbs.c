/*
 * actions_verbs - the verb table (actions.h): one row per operator verb,
 * read by the CLI, the HTTP router, GET /v1/verbs and the console, and
 * the man page's check. A verb's function is in actions_alert.c,
 * actions_instance.c, actions_upgrade.c or actions_silence.c.
 */
#include "manager/operator/actions.h"

#include <jansson.h>
#include <stddef.h>
#include <string.h>

/* What every alert verb's row says alike, and every instance verb's: what
 * it acts on and its operands, that it is audited, and its route, whose
 * last segment is the verb's name. */
#define ALERT_VERB(name_, verb_)                                                                   \
    .name = name_, .on = ACTION_ON_ALERT, .verb = verb_, .operands = "ALERT_ID", .audited = true,  \
    .method = "POST", .path = "/v1/alerts/{id}/" name_
#define INSTANCE_VERB(name_, verb_)                                                                \
    .name = name_, .on = ACTION_ON_INSTANCE, .verb = verb_, .operands = "PROCESS KEY",             \
    .audited = true, .method = "POST", .path = "/v1/instances/{process}/{key}/" name_

const action_verb_def_t action_verbs[] = {
    {
        ALERT_VERB("ack", ACTION_ACK),
        .summary = "acknowledge an alert (it stays open)",
        .about = "Acknowledges an open alert: somebody is on it. It stays open; PagerDuty and\n"
                 "webhook sinks that got its trigger get an acknowledge.",
        .console = "alerts",
    },
    {
        ALERT_VERB("resolve", ACTION_RESOLVE),
        .summary = "resolve an alert by hand",
        .about = "Resolves an open alert by hand; every sink that got its trigger gets the\n"
                 "resolve (Alertmanager: endsAt).",
        .console = "alerts",
    },
    {
        INSTANCE_VERB("close", ACTION_CLOSE),
        .options = {{"as", "OUTCOME", "the outcome, e.g. cancelled", true, true}},
        .summary = "finish an instance in one of its outcomes",
        .about = "Finishes an active instance in the terminal state of OUTCOME (or the\n"
                 "terminal state so named) and resolves its open alerts.",
        .console = "overdue bulk instance",
    },
    {
        INSTANCE_VERB("move", ACTION_MOVE),
        .options = {{"to", "STATE", "the state to put it in", true, true}},
        .summary = "put an instance in another state",
        .about = "Puts an active instance in another non-terminal state, as an event\n"
                 "would: that state's deadline starts now, the alert of the old state's\n"
                 "missed deadline is resolved, and the old step's unsent commands are\n"
                 "cancelled. On an active definition version the state's command is\n"
                 "queued (refused, nothing changed, when its template lacks a variable).",
        .console = "overdue instance",
    },
    {
        INSTANCE_VERB("retry", ACTION_RETRY),
        .summary = "send the current step's command again (active mode)",
        .about = "Sends the current step's command again now, as a new attempt with a new\n"
                 "fencing token (replies carrying an older token are stale from then on);\n"
                 "the step's deadline counts from now and its lease is over. Only for an\n"
                 "instance of an active definition version in a state with a command:\n"
                 "in shadow mode, in a state without a command or for a finished\n"
                 "instance it is refused (exit 1) and nothing is sent.",
        .console = "overdue bulk instance",
    },
    {
        INSTANCE_VERB("claim", ACTION_CLAIM),
        .summary = "take ownership of an instance's investigation",
        .about = "Takes ownership of an instance's investigation. While claimed, only the\n"
                 "claimant can close, move or release it; inspect shows who.",
        .console = "instance",
    },
    {
        INSTANCE_VERB("release", ACTION_RELEASE),
        .summary = "give back an instance you claimed",
        .about = "Gives back an instance you claimed.",
        .console = "instance",
    },
    {
        .name = "upgrade",
        .on = ACTION_ON_PROCESS,
        .verb = ACTION_UPGRADE,
        .operands = "PROCESS",
        .audited = true,
        .options = {{"to", "VERSION", "the newer recorded version to move them to", true, true},
                    {"map", "OLD=NEW", "state OLD goes to NEW (repeatable; default: the same name)",
                     false, true, true},
                    {"dry-run", NULL, "say what would happen, change nothing", false, true},
                    {"from-version", "N", "only instances of version N", false, false},
                    {"state", "S", "only instances in state S (repeatable)", false, false, true},
                    {"key", "KEY", "only the instance KEY", false, false},
                    {"older-than", "DURATION", "only instances started longer ago than DURATION",
                     false, false},
                    {"allow-terminal", NULL,
                     "let a state go to a terminal one: its instances finish", false, false},
                    {"send-current", NULL,
                     "on a promotion to active: send the current step's command now", false, false},
                    {"batch", "N", "instances per batch (default 100)", false, false}},
        .method = "POST",
        .path = "/v1/processes/{process}/upgrade",
        .summary = "move a process's open instances to a newer version",
        .about = "Moves the open instances of older versions of PROCESS (those of --from-version,\n"
                 "in --state, the instance --key, started longer ago than --older-than) to\n"
                 "recorded version VERSION, each into the state of the same name or the one\n"
                 "--map names; refused before anything moves when a state has no target or\n"
                 "its target is terminal (unless --allow-terminal). Each keeps its step, its\n"
                 "vars and its token; its deadlines count from when it entered its state, by\n"
                 "the new figures, and a missed deadline that no longer is resolves its\n"
                 "alert. Instances move in batches, each under its lock; run it again to\n"
                 "finish an upgrade cut short. Promoted to an active version, an instance\n"
                 "sends nothing now (the next state's command goes on entry) unless\n"
                 "--send-current. --dry-run prints what would happen and changes nothing.\n"
                 "When the database fails midway, it exits 1 saying how many moved.",
    },
    {
        .name = "silence",
        .on = ACTION_ON_SILENCE,
        .audited = true,
        .options = {{"process", "P", "the process whose alerts go unpaged", true, true},
                    {"state", "S", "only its alerts in this state", false, true},
                    {"team", "T", "only its alerts owned by this team", false, true},
                    {"for", "DURATION", "how long, e.g. 2h", true, true}},
        .method = "POST",
        .path = "/v1/silences",
        .summary = "no pages for a process's alerts for a while",
        .about = "No pages for the open alerts of process P (only those in state S, only\n"
                 "those owned by team T) for DURATION (1s to 14d), e.g. a maintenance\n"
                 "window. The alerts stay open and steward stuck shows them silenced; what\n"
                 "is still open when the silence ends is paged then. Prints the silence's\n"
                 "id, for steward unsilence.",
    },
    {
        .name = "silences",
        .on = ACTION_ON_SILENCE,
        .options = {{"all", NULL, "ended silences too", false, true}},
        .method = "GET",
        .path = "/v1/silences",
        .summary = "list the silences in force",
        .about = "Lists the silences in force (with --all, ended ones too), newest first.",
    },
    {
        .name = "unsilence",
        .on = ACTION_ON_SILENCE,
        .operands = "ID",
        .audited = true,
        .method = "POST",
        .path = "/v1/silences/{id}/unsilence",
        .summary = "end a silence now",
        .about = "Ends a silence now; held pages go out at once.",
    },
};

const size_t action_verb_count = sizeof action_verbs / sizeof action_verbs[0];

const action_verb_def_t *action_verb_find(const char *name)
{
    for (size_t i = 0; i < action_verb_count; i++)
        if (strcmp(action_verbs[i].name, name) == 0)
            return &action_verbs[i];
    return NULL;
}

const action_verb_def_t *action_verb_def(action_verb_t verb)
{
    for (size_t i = 0; i < action_verb_count; i++)
        if (action_verbs[i].on != ACTION_ON_SILENCE && action_verbs[i].verb == verb)
            return &action_verbs[i];
    return &action_verbs[0]; /* not reached: every action_verb_t has its row */
}

const char *action_verb_name(action_verb_t verb)
{
    return action_verb_def(verb)->name;
}

json_t *action_verbs_json(void)
{
    static const char *const subject[] = {
        [ACTION_ON_ALERT] = "alert",
        [ACTION_ON_INSTANCE] = "instance",
        [ACTION_ON_SILENCE] = "silence",
        [ACTION_ON_PROCESS] = "process",
    };
    json_t *list = json_array();
    json_t *doc = json_pack("{s:o}", "verbs", list);
    for (size_t i = 0; doc != NULL && i < action_verb_count; i++) {
        const action_verb_def_t *v = &action_verbs[i];
        json_t *options = json_array(), *console = json_array();
        for (const action_option_t *o = v->options; o->name != NULL; o++)
            json_array_append_new(options,
                                  json_pack("{s:s, s:s?, s:s, s:b}", "name", o->name, "arg", o->arg,
                                            "help", o->help, "required", o->required));
        if (v->console != NULL) {
            for (const char *p = v->console; *p != '\0';) {
                size_t len = strcspn(p, " ");
                if (len > 0)
                    json_array_append_new(console, json_stringn(p, len));
                p += len + (p[len] == ' ');
            }
        }
        json_t *row =
            json_pack("{s:s, s:s, s:s, s:b, s:o, s:s, s:s, s:s, s:o}", "name", v->name, "on",
                      subject[v->on], "operands", v->operands != NULL ? v->operands : "", "audited",
                      v->audited, "options", options, "method", v->method, "path", v->path,
                      "summary", v->summary, "console", console);
        if (row == NULL || json_array_append_new(list, row) != 0) {
            json_decref(doc);
            return NULL;
        }
    }
    return doc;
}
