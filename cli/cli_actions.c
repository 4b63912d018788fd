/*
 * cli_actions - the operator verbs: `steward ack|resolve ALERT_ID` and
 * `steward close|move|retry|claim|release PROCESS KEY`, and the silences:
 * `steward silence`, `silences`, `unsilence ID`. Each parses its
 * options (its own, and the shared ones through cli/options, so the
 * config file and its database_file secret reach it like every verb),
 * checks the schema, names the actor and hands the action to
 * manager/actions, which the HTTP API shares.
 *
 * The actor is --actor, else $STEWARD_ACTOR, else the OS user name.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "manager/actions.h"

#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Text output carries what others typed (actors, reasons, keys, states),
 * and an escape sequence in it would drive the reader's terminal. `shown`
 * returns s with backslash, C0 and DEL written as \\, \n, \t, \r or \xNN
 * and C1 controls (U+0080 to U+009F) as \u00NN; NULL stays NULL for
 * printf's "(null)". The result lives until a few more calls, enough for
 * one line's arguments: a CLI command prints from one thread.
 */
static const char *shown(const char *s)
{
    static char *ring[16];
    static size_t next;
    if (s == NULL)
        return NULL;
    size_t len = strlen(s);
    char *out = malloc(len * 6 + 1);
    if (out == NULL)
        return "(out of memory)";
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char) s[i];
        unsigned char d = (unsigned char) s[i + 1];
        if (c == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
        } else if (c == '\n' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t) sprintf(out + o, "\\x%02x", c);
        } else if (c == 0xc2 && d >= 0x80 && d <= 0x9f) {
            o += (size_t) sprintf(out + o, "\\u%04x", d);
            i++;
        } else {
            out[o++] = (char) c;
        }
    }
    out[o] = '\0';
    free(ring[next]);
    ring[next] = out;
    next = (next + 1) % (sizeof ring / sizeof ring[0]);
    return out;
}

typedef struct verb_spec {
    action_verb_t verb;
    const char *usage;
} verb_spec_t;

#define ACTION_USAGE                                                                               \
    "  --reason TEXT         why (required; recorded in the audit trail)\n"                        \
    "  --actor NAME          who ($STEWARD_ACTOR, else the OS user name)\n" CLI_COMMON_USAGE "\n"  \
    "Exits 0 when done; 1 when there is no such alert or instance, when it\n"                      \
    "changed meanwhile (already resolved, already finished, claimed by\n"                          \
    "someone else) or the database failed, and nothing was changed; 2 on a\n"                      \
    "usage error (no --reason, an unknown state or outcome).\n"

static const verb_spec_t verbs[] = {
    {ACTION_ACK, "usage: steward ack ALERT_ID --reason TEXT [OPTIONS]\n"
                 "\n"
                 "Acknowledges an open alert: somebody is on it. It stays open; PagerDuty and\n"
                 "webhook sinks that got its trigger get an acknowledge.\n"
                 "\n" ACTION_USAGE},
    {ACTION_RESOLVE, "usage: steward resolve ALERT_ID --reason TEXT [OPTIONS]\n"
                     "\n"
                     "Resolves an open alert by hand; every sink that got its trigger gets the\n"
                     "resolve (Alertmanager: endsAt).\n"
                     "\n" ACTION_USAGE},
    {ACTION_CLOSE, "usage: steward close PROCESS KEY --as OUTCOME --reason TEXT [OPTIONS]\n"
                   "\n"
                   "Finishes an active instance in the terminal state of OUTCOME (or the\n"
                   "terminal state so named) and resolves its open alerts.\n"
                   "\n"
                   "  --as OUTCOME          the outcome, e.g. cancelled\n" ACTION_USAGE},
    {ACTION_MOVE, "usage: steward move PROCESS KEY --to STATE --reason TEXT [OPTIONS]\n"
                  "\n"
                  "Puts an active instance in another non-terminal state, as an event\n"
                  "would: that state's deadline starts now, the alert of the old state's\n"
                  "missed deadline is resolved, and the old step's unsent commands are\n"
                  "cancelled. On an active definition version the state's command is\n"
                  "queued (refused, nothing changed, when its template lacks a variable).\n"
                  "\n"
                  "  --to STATE            the state to put it in\n" ACTION_USAGE},
    {ACTION_RETRY, "usage: steward retry PROCESS KEY --reason TEXT [OPTIONS]\n"
                   "\n"
                   "Sends the current step's command again now, as a new attempt with a new\n"
                   "fencing token (replies carrying an older token are stale from then on);\n"
                   "the step's deadline counts from now and its lease is over. Only for an\n"
                   "instance of an active definition version in a state with a command:\n"
                   "in shadow mode, in a state without a command or for a finished\n"
                   "instance it is refused (exit 1) and nothing is sent.\n"
                   "\n" ACTION_USAGE},
    {ACTION_CLAIM, "usage: steward claim PROCESS KEY --reason TEXT [OPTIONS]\n"
                   "\n"
                   "Takes ownership of an instance's investigation. While claimed, only the\n"
                   "claimant can close, move or release it; inspect shows who.\n"
                   "\n" ACTION_USAGE},
    {ACTION_RELEASE, "usage: steward release PROCESS KEY --reason TEXT [OPTIONS]\n"
                     "\n"
                     "Gives back an instance you claimed.\n"
                     "\n" ACTION_USAGE},
};

static const char *default_actor(void)
{
    const char *env = getenv("STEWARD_ACTOR");
    if (env != NULL && *env != '\0')
        return env;
    struct passwd *pw = getpwuid(geteuid());
    return pw != NULL ? pw->pw_name : NULL;
}

/*
 * Parses the options getopt returns until the end: the verb's own through
 * `own` (which returns -1 when it took the option, -2 when it is not the
 * verb's own, else an exit code), the rest through cli_opts_take(). -1
 * when all were taken, else the exit code to return at once.
 */
typedef int (*own_option_fn)(int opt, const char *arg, void *state);

static int parse_options(cli_opts_t *o, int argc, char **argv, const struct option *options,
                         own_option_fn own, void *state)
{
    int opt, rc;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        if ((rc = own(opt, optarg, state)) == -1)
            continue;
        if (rc != -2 || (rc = cli_opts_take(o, opt, optarg)) >= 0)
            return rc;
    }
    return -1;
}

/* Codes for the verbs' own long options, below CLI_OPT_CONFIG. */
enum {
    OPT_REASON = 0x800,
    OPT_ACTOR,
    OPT_AS,
    OPT_TO,
    OPT_PROCESS,
    OPT_STATE,
    OPT_TEAM,
    OPT_FOR,
    OPT_ALL,
};

typedef struct verb_args {
    action_verb_t verb;
    const char *cmd, *usage, *target;
    action_request_t *req;
} verb_args_t;

/* -1: taken; -2: not the verb's own; else an exit code. */
static int verb_option(int opt, const char *arg, void *state)
{
    verb_args_t *v = state;
    switch (opt) {
    case OPT_REASON:
        v->req->reason = arg;
        return -1;
    case OPT_ACTOR:
        v->req->actor = arg;
        return -1;
    case OPT_AS:
    case OPT_TO:
        if ((opt == OPT_AS) != (v->verb == ACTION_CLOSE) ||
            (opt == OPT_TO) != (v->verb == ACTION_MOVE)) {
            fprintf(stderr, "%s: --%s is not an option of %s\n", v->cmd,
                    opt == OPT_AS ? "as" : "to", action_verb_name(v->verb));
            fputs(v->usage, stderr);
            return EXIT_USAGE;
        }
        v->target = arg;
        return -1;
    default:
        return -2;
    }
}

static int run_verb_with(cli_opts_t *o, verb_args_t *v, int argc, char **argv)
{
    static const struct option options[] = {
        {"reason", required_argument, NULL, OPT_REASON},
        {"actor", required_argument, NULL, OPT_ACTOR},
        {"as", required_argument, NULL, OPT_AS},
        {"to", required_argument, NULL, OPT_TO},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    action_verb_t verb = v->verb;
    const char *cmd = v->cmd, *usage = v->usage;
    action_request_t *req = v->req;
    char errstr[1024];
    int rc = parse_options(o, argc, argv, options, verb_option, v);
    if (rc >= 0)
        return rc;

    bool on_alert = verb == ACTION_ACK || verb == ACTION_RESOLVE;
    if (argc - optind != (on_alert ? 1 : 2)) {
        fprintf(stderr, "%s: expected %s\n", cmd, on_alert ? "ALERT_ID" : "PROCESS KEY");
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    if (on_alert) {
        char *end;
        req->alert_id = strtoll(argv[optind], &end, 10);
        if (*argv[optind] == '\0' || *end != '\0' || req->alert_id <= 0) {
            fprintf(stderr, "%s: %s is not an alert id (steward stuck lists them)\n", cmd,
                    argv[optind]);
            return EXIT_USAGE;
        }
    } else {
        req->process = argv[optind];
        req->key = argv[optind + 1];
    }
    if (req->reason == NULL || *req->reason == '\0') {
        fprintf(stderr, "%s: --reason is required: say why, for the audit trail\n", cmd);
        return EXIT_USAGE;
    }
    if ((verb == ACTION_CLOSE || verb == ACTION_MOVE) && v->target == NULL) {
        fprintf(stderr, "%s: %s is required\n", cmd,
                verb == ACTION_CLOSE ? "--as OUTCOME" : "--to STATE");
        return EXIT_USAGE;
    }
    req->target = v->target;
    if (req->actor == NULL)
        req->actor = default_actor();
    if (req->actor == NULL) {
        fprintf(stderr, "%s: no actor: pass --actor or set STEWARD_ACTOR\n", cmd);
        return EXIT_USAGE;
    }

    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc = action_run(conn, verb, req, &result, errstr, sizeof errstr);
    PQfinish(conn);
    if (arc != ACTION_OK) {
        fprintf(stderr, "%s: %s\n", cmd, shown(errstr));
        return arc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (o->json) {
        cli_print_json(result);
    } else if (on_alert) {
        printf("alert %s %s by %s\n", shown(argv[optind]),
               verb == ACTION_ACK ? "acknowledged" : "resolved", shown(req->actor));
    } else {
        json_t *before = json_object_get(result, "before"),
               *after = json_object_get(result, "after");
        printf("%s %s: %s %s -> %s (%s) by %s\n", shown(req->process), shown(req->key),
               action_verb_name(verb), shown(json_string_value(json_object_get(before, "state"))),
               shown(json_string_value(json_object_get(after, "state"))),
               shown(json_string_value(json_object_get(after, "status"))), shown(req->actor));
        json_t *command = json_object_get(result, "command");
        if (command != NULL)
            printf("queued %s to %s (step %" JSON_INTEGER_FORMAT ", attempt %" JSON_INTEGER_FORMAT
                   ", token %" JSON_INTEGER_FORMAT ")\n",
                   shown(json_string_value(json_object_get(command, "type"))),
                   shown(json_string_value(json_object_get(command, "topic"))),
                   json_integer_value(json_object_get(command, "step")),
                   json_integer_value(json_object_get(command, "attempt")),
                   json_integer_value(json_object_get(command, "token")));
    }
    json_decref(result);
    return EXIT_OK;
}

static int run_verb(action_verb_t verb, int argc, char **argv)
{
    char cmd[32];
    action_request_t req = {0};
    verb_args_t v = {.verb = verb, .cmd = cmd, .usage = verbs[verb].usage, .req = &req};
    cli_opts_t o;
    snprintf(cmd, sizeof cmd, "steward %s", action_verb_name(verb));
    if (!cli_opts_init(&o, cmd, v.usage, argc, argv))
        return EXIT_RUNTIME;
    int rc = run_verb_with(&o, &v, argc, argv);
    cli_opts_free(&o);
    return rc;
}

int cli_ack(int argc, char **argv)
{
    return run_verb(ACTION_ACK, argc, argv);
}
int cli_resolve(int argc, char **argv)
{
    return run_verb(ACTION_RESOLVE, argc, argv);
}
int cli_close(int argc, char **argv)
{
    return run_verb(ACTION_CLOSE, argc, argv);
}
int cli_move(int argc, char **argv)
{
    return run_verb(ACTION_MOVE, argc, argv);
}
int cli_retry(int argc, char **argv)
{
    return run_verb(ACTION_RETRY, argc, argv);
}
int cli_claim(int argc, char **argv)
{
    return run_verb(ACTION_CLAIM, argc, argv);
}
int cli_release(int argc, char **argv)
{
    return run_verb(ACTION_RELEASE, argc, argv);
}

/* ---- silences ---- */

static const char silence_usage[] =
    "usage: steward silence --process P [--state S] [--team T] --for DURATION --reason TEXT\n"
    "                       [OPTIONS]\n"
    "\n"
    "No pages for the open alerts of process P (only those in state S, only\n"
    "those owned by team T) for DURATION (1s to 14d), e.g. a maintenance\n"
    "window. The alerts stay open and steward stuck shows them silenced; what\n"
    "is still open when the silence ends is paged then. Prints the silence's\n"
    "id, for steward unsilence.\n"
    "\n"
    "  --for DURATION        how long, e.g. 2h\n" ACTION_USAGE;

static const char unsilence_usage[] = "usage: steward unsilence ID --reason TEXT [OPTIONS]\n"
                                      "\n"
                                      "Ends a silence now; held pages go out at once.\n"
                                      "\n" ACTION_USAGE;

static const char silences_usage[] =
    "usage: steward silences [--all] [OPTIONS]\n"
    "\n"
    "Lists the silences in force (with --all, ended ones too), newest first.\n"
    "\n"
    "  --all                 ended silences too\n" CLI_COMMON_USAGE;

typedef struct silence_args {
    silence_request_t *req;
    const char *for_text;
    bool all;
} silence_args_t;

/* The options of silence, unsilence and silences; see own_option_fn. */
static int silence_option(int opt, const char *arg, void *state)
{
    silence_args_t *a = state;
    switch (opt) {
    case OPT_PROCESS:
        a->req->process = arg;
        return -1;
    case OPT_STATE:
        a->req->state = arg;
        return -1;
    case OPT_TEAM:
        a->req->team = arg;
        return -1;
    case OPT_FOR:
        a->for_text = arg;
        return -1;
    case OPT_REASON:
        a->req->reason = arg;
        return -1;
    case OPT_ACTOR:
        a->req->actor = arg;
        return -1;
    case OPT_ALL:
        a->all = true;
        return -1;
    default:
        return -2;
    }
}

static int silence_with(cli_opts_t *o, int argc, char **argv)
{
    static const struct option options[] = {
        {"process", required_argument, NULL, OPT_PROCESS},
        {"state", required_argument, NULL, OPT_STATE},
        {"team", required_argument, NULL, OPT_TEAM},
        {"for", required_argument, NULL, OPT_FOR},
        {"reason", required_argument, NULL, OPT_REASON},
        {"actor", required_argument, NULL, OPT_ACTOR},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    silence_request_t req = {0};
    silence_args_t a = {.req = &req};
    char errstr[1024];
    int rc = parse_options(o, argc, argv, options, silence_option, &a);
    if (rc >= 0)
        return rc;
    if (cli_extra_args(argc, argv, o->cmd, silence_usage))
        return EXIT_USAGE;
    if (req.process == NULL || a.for_text == NULL || req.reason == NULL) {
        fprintf(stderr, "steward silence: --process, --for and --reason are required\n");
        return EXIT_USAGE;
    }
    if (!duration_parse(a.for_text, &req.for_ms, errstr, sizeof errstr)) {
        fprintf(stderr, "steward silence: --for: %s\n", errstr);
        return EXIT_USAGE;
    }
    if (req.actor == NULL)
        req.actor = default_actor();
    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc = action_silence(conn, &req, &result, errstr, sizeof errstr);
    PQfinish(conn);
    if (arc != ACTION_OK) {
        fprintf(stderr, "steward silence: %s\n", shown(errstr));
        return arc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (o->json)
        cli_print_json(result);
    else
        printf("silence %lld until %s\n",
               (long long) json_integer_value(json_object_get(result, "id")),
               json_string_value(json_object_get(result, "ends_at")));
    json_decref(result);
    return EXIT_OK;
}

static int unsilence_with(cli_opts_t *o, int argc, char **argv)
{
    static const struct option options[] = {
        {"reason", required_argument, NULL, OPT_REASON},
        {"actor", required_argument, NULL, OPT_ACTOR},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    silence_request_t req = {0};
    silence_args_t a = {.req = &req};
    char errstr[1024];
    int rc = parse_options(o, argc, argv, options, silence_option, &a);
    if (rc >= 0)
        return rc;
    char *end = NULL;
    long long id = argc - optind == 1 ? strtoll(argv[optind], &end, 10) : 0;
    if (argc - optind != 1 || *end != '\0' || id <= 0) {
        fprintf(stderr, "steward unsilence: expected one silence ID (steward silences)\n");
        fputs(unsilence_usage, stderr);
        return EXIT_USAGE;
    }
    if (req.reason == NULL) {
        fprintf(stderr, "steward unsilence: --reason is required\n");
        return EXIT_USAGE;
    }
    if (req.actor == NULL)
        req.actor = default_actor();
    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc =
        action_unsilence(conn, id, req.actor, req.reason, &result, errstr, sizeof errstr);
    PQfinish(conn);
    if (arc != ACTION_OK) {
        fprintf(stderr, "steward unsilence: %s\n", shown(errstr));
        return arc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (o->json)
        cli_print_json(result);
    else
        printf("silence %lld ended\n", id);
    json_decref(result);
    return EXIT_OK;
}

static int silences_with(cli_opts_t *o, int argc, char **argv)
{
    static const struct option options[] = {
        {"all", no_argument, NULL, OPT_ALL},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    silence_request_t req = {0};
    silence_args_t a = {.req = &req};
    char errstr[1024];
    int rc = parse_options(o, argc, argv, options, silence_option, &a);
    if (rc >= 0)
        return rc;
    bool all = a.all;
    if (cli_extra_args(argc, argv, o->cmd, silences_usage))
        return EXIT_USAGE;
    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *doc = NULL;
    action_rc_t arc = action_silences(conn, all, &doc, errstr, sizeof errstr);
    PQfinish(conn);
    if (arc != ACTION_OK) {
        fprintf(stderr, "steward silences: %s\n", shown(errstr));
        return EXIT_RUNTIME;
    }
    if (o->json) {
        cli_print_json(doc);
    } else {
        json_t *list = json_object_get(doc, "silences"), *s;
        size_t i;
        if (json_array_size(list) == 0)
            printf("no silences%s\n", all ? "" : " in force");
        json_array_foreach(list, i, s)
        {
            const char *state = json_string_value(json_object_get(s, "state"));
            const char *team = json_string_value(json_object_get(s, "team"));
            printf("%-6lld %s%s%s%s%s until %s by %s: %s%s\n",
                   (long long) json_integer_value(json_object_get(s, "id")),
                   shown(json_string_value(json_object_get(s, "process"))), state ? " state " : "",
                   state ? shown(state) : "", team ? " team " : "", team ? shown(team) : "",
                   shown(json_string_value(json_object_get(s, "ends_at"))),
                   shown(json_string_value(json_object_get(s, "actor"))),
                   shown(json_string_value(json_object_get(s, "reason"))),
                   json_is_true(json_object_get(s, "live")) ? "" : " (ended)");
        }
    }
    json_decref(doc);
    return EXIT_OK;
}

/* Runs one silence verb with the shared options, which it then releases. */
static int with_opts(const char *cmd, const char *usage, int (*body)(cli_opts_t *, int, char **),
                     int argc, char **argv)
{
    cli_opts_t o;
    if (!cli_opts_init(&o, cmd, usage, argc, argv))
        return EXIT_RUNTIME;
    int rc = body(&o, argc, argv);
    cli_opts_free(&o);
    return rc;
}

int cli_silence(int argc, char **argv)
{
    return with_opts("steward silence", silence_usage, silence_with, argc, argv);
}

int cli_unsilence(int argc, char **argv)
{
    return with_opts("steward unsilence", unsilence_usage, unsilence_with, argc, argv);
}

int cli_silences(int argc, char **argv)
{
    return with_opts("steward silences", silences_usage, silences_with, argc, argv);
}
