/*
 * cli_actions - the operator verbs: `steward ack|resolve ALERT_ID` and
 * `steward close|move|retry|claim|release PROCESS KEY`, and the silences:
 * `steward silence`, `silences`, `unsilence ID`. Each parses its
 * options, names the actor and hands the action to manager/actions, which
 * the HTTP API shares.
 *
 * The actor is --actor, else $STEWARD_ACTOR, else the OS user name.
 */
#include "cli/cli.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "manager/actions.h"

#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct verb_spec {
    action_verb_t verb;
    const char *usage;
} verb_spec_t;

#define COMMON_OPTIONS                                                                             \
    "  --reason TEXT         why (required; recorded in the audit trail)\n"                        \
    "  --actor NAME          who ($STEWARD_ACTOR, else the OS user name)\n"                        \
    "  --json                print the result as one JSON object\n"                                \
    "  --database CONNINFO   libpq connection string ($STEWARD_DATABASE_URL)\n"                    \
    "\n"                                                                                           \
    "Exits 0 when done; 1 when there is no such alert or instance, when it\n"                      \
    "changed meanwhile (already resolved, already finished, claimed by\n"                          \
    "someone else) or the database failed, and nothing was changed; 2 on a\n"                      \
    "usage error (no --reason, an unknown state or outcome).\n"

static const verb_spec_t verbs[] = {
    {ACTION_ACK, "usage: steward ack ALERT_ID --reason TEXT [OPTIONS]\n"
                 "\n"
                 "Acknowledges an open alert: somebody is on it. It stays open; PagerDuty and\n"
                 "webhook sinks that got its trigger get an acknowledge.\n"
                 "\n" COMMON_OPTIONS},
    {ACTION_RESOLVE, "usage: steward resolve ALERT_ID --reason TEXT [OPTIONS]\n"
                     "\n"
                     "Resolves an open alert by hand; every sink that got its trigger gets the\n"
                     "resolve (Alertmanager: endsAt).\n"
                     "\n" COMMON_OPTIONS},
    {ACTION_CLOSE, "usage: steward close PROCESS KEY --as OUTCOME --reason TEXT [OPTIONS]\n"
                   "\n"
                   "Finishes an active instance in the terminal state of OUTCOME (or the\n"
                   "terminal state so named) and resolves its open alerts.\n"
                   "\n"
                   "  --as OUTCOME          the outcome, e.g. cancelled\n" COMMON_OPTIONS},
    {ACTION_MOVE, "usage: steward move PROCESS KEY --to STATE --reason TEXT [OPTIONS]\n"
                  "\n"
                  "Puts an active instance in another non-terminal state; that state's\n"
                  "deadline starts now, and the alert of the old state's missed deadline is\n"
                  "resolved.\n"
                  "\n"
                  "  --to STATE            the state to put it in\n" COMMON_OPTIONS},
    {ACTION_RETRY, "usage: steward retry PROCESS KEY --reason TEXT [OPTIONS]\n"
                   "\n"
                   "Would send the current step's command again. Commands are sent only in\n"
                   "active mode, which is not built yet: retry is always refused (exit 1)\n"
                   "and nothing is sent.\n"
                   "\n" COMMON_OPTIONS},
    {ACTION_CLAIM, "usage: steward claim PROCESS KEY --reason TEXT [OPTIONS]\n"
                   "\n"
                   "Takes ownership of an instance's investigation. While claimed, only the\n"
                   "claimant can close, move or release it; inspect shows who.\n"
                   "\n" COMMON_OPTIONS},
    {ACTION_RELEASE, "usage: steward release PROCESS KEY --reason TEXT [OPTIONS]\n"
                     "\n"
                     "Gives back an instance you claimed.\n"
                     "\n" COMMON_OPTIONS},
};

static const char *default_actor(void)
{
    const char *env = getenv("STEWARD_ACTOR");
    if (env != NULL && *env != '\0')
        return env;
    struct passwd *pw = getpwuid(geteuid());
    return pw != NULL ? pw->pw_name : NULL;
}

static int run_verb(action_verb_t verb, int argc, char **argv)
{
    static const struct option options[] = {
        {"reason", required_argument, NULL, 'r'}, {"actor", required_argument, NULL, 'a'},
        {"as", required_argument, NULL, 's'},     {"to", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},         {"database", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *usage = verbs[verb].usage, *database = NULL, *target = NULL;
    action_request_t req = {0};
    int as_json = 0, opt;
    char cmd[32], errstr[1024];
    snprintf(cmd, sizeof cmd, "steward %s", action_verb_name(verb));

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'r':
            req.reason = optarg;
            break;
        case 'a':
            req.actor = optarg;
            break;
        case 's':
        case 't':
            if ((opt == 's') != (verb == ACTION_CLOSE) || (opt == 't') != (verb == ACTION_MOVE)) {
                fprintf(stderr, "%s: --%s is not an option of %s\n", cmd, opt == 's' ? "as" : "to",
                        action_verb_name(verb));
                fputs(usage, stderr);
                return EXIT_USAGE;
            }
            target = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'd':
            database = optarg;
            break;
        default:
            return cli_help_or_usage(opt, usage);
        }
    }
    bool on_alert = verb == ACTION_ACK || verb == ACTION_RESOLVE;
    if (argc - optind != (on_alert ? 1 : 2)) {
        fprintf(stderr, "%s: expected %s\n", cmd, on_alert ? "ALERT_ID" : "PROCESS KEY");
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    if (on_alert) {
        char *end;
        req.alert_id = strtoll(argv[optind], &end, 10);
        if (*argv[optind] == '\0' || *end != '\0' || req.alert_id <= 0) {
            fprintf(stderr, "%s: %s is not an alert id (steward stuck lists them)\n", cmd,
                    argv[optind]);
            return EXIT_USAGE;
        }
    } else {
        req.process = argv[optind];
        req.key = argv[optind + 1];
    }
    if (req.reason == NULL || *req.reason == '\0') {
        fprintf(stderr, "%s: --reason is required: say why, for the audit trail\n", cmd);
        return EXIT_USAGE;
    }
    if ((verb == ACTION_CLOSE || verb == ACTION_MOVE) && target == NULL) {
        fprintf(stderr, "%s: %s is required\n", cmd,
                verb == ACTION_CLOSE ? "--as OUTCOME" : "--to STATE");
        return EXIT_USAGE;
    }
    req.target = target;
    if (req.actor == NULL)
        req.actor = default_actor();
    if (req.actor == NULL) {
        fprintf(stderr, "%s: no actor: pass --actor or set STEWARD_ACTOR\n", cmd);
        return EXIT_USAGE;
    }

    PGconn *conn = cli_connect(database, cmd);
    if (conn == NULL)
        return EXIT_RUNTIME;
    json_t *result = NULL;
    action_rc_t rc = action_run(conn, verb, &req, &result, errstr, sizeof errstr);
    PQfinish(conn);
    if (rc != ACTION_OK) {
        fprintf(stderr, "%s: %s\n", cmd, errstr);
        return rc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (as_json) {
        cli_print_json(result);
    } else if (on_alert) {
        printf("alert %s %s by %s\n", argv[optind],
               verb == ACTION_ACK ? "acknowledged" : "resolved", req.actor);
    } else {
        json_t *before = json_object_get(result, "before"),
               *after = json_object_get(result, "after");
        printf("%s %s: %s %s -> %s (%s) by %s\n", req.process, req.key, action_verb_name(verb),
               json_string_value(json_object_get(before, "state")),
               json_string_value(json_object_get(after, "state")),
               json_string_value(json_object_get(after, "status")), req.actor);
    }
    json_decref(result);
    return EXIT_OK;
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
    "  --for DURATION        how long, e.g. 2h\n" COMMON_OPTIONS;

static const char unsilence_usage[] = "usage: steward unsilence ID --reason TEXT [OPTIONS]\n"
                                      "\n"
                                      "Ends a silence now; held pages go out at once.\n"
                                      "\n" COMMON_OPTIONS;

static const char silences_usage[] =
    "usage: steward silences [--all] [--json] [--database CONNINFO]\n"
    "\n"
    "Lists the silences in force (with --all, ended ones too), newest first.\n";

int cli_silence(int argc, char **argv)
{
    static const struct option options[] = {
        {"process", required_argument, NULL, 'p'}, {"state", required_argument, NULL, 's'},
        {"team", required_argument, NULL, 't'},    {"for", required_argument, NULL, 'f'},
        {"reason", required_argument, NULL, 'r'},  {"actor", required_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},          {"database", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    silence_request_t req = {0};
    const char *database = NULL, *for_text = NULL;
    int as_json = 0, opt;
    char errstr[1024];

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            req.process = optarg;
            break;
        case 's':
            req.state = optarg;
            break;
        case 't':
            req.team = optarg;
            break;
        case 'f':
            for_text = optarg;
            break;
        case 'r':
            req.reason = optarg;
            break;
        case 'a':
            req.actor = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'd':
            database = optarg;
            break;
        default:
            return cli_help_or_usage(opt, silence_usage);
        }
    }
    if (cli_extra_args(argc, argv, "steward silence", silence_usage))
        return EXIT_USAGE;
    if (req.process == NULL || for_text == NULL || req.reason == NULL) {
        fprintf(stderr, "steward silence: --process, --for and --reason are required\n");
        return EXIT_USAGE;
    }
    if (!duration_parse(for_text, &req.for_ms, errstr, sizeof errstr)) {
        fprintf(stderr, "steward silence: --for: %s\n", errstr);
        return EXIT_USAGE;
    }
    if (req.actor == NULL)
        req.actor = default_actor();
    PGconn *conn = cli_connect(database, "steward silence");
    if (conn == NULL)
        return EXIT_RUNTIME;
    json_t *result = NULL;
    action_rc_t rc = action_silence(conn, &req, &result, errstr, sizeof errstr);
    PQfinish(conn);
    if (rc != ACTION_OK) {
        fprintf(stderr, "steward silence: %s\n", errstr);
        return rc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (as_json)
        cli_print_json(result);
    else
        printf("silence %lld until %s\n",
               (long long) json_integer_value(json_object_get(result, "id")),
               json_string_value(json_object_get(result, "ends_at")));
    json_decref(result);
    return EXIT_OK;
}

int cli_unsilence(int argc, char **argv)
{
    static const struct option options[] = {
        {"reason", required_argument, NULL, 'r'}, {"actor", required_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},         {"database", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *database = NULL, *reason = NULL, *actor = NULL;
    int as_json = 0, opt;
    char errstr[1024];

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'r':
            reason = optarg;
            break;
        case 'a':
            actor = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'd':
            database = optarg;
            break;
        default:
            return cli_help_or_usage(opt, unsilence_usage);
        }
    }
    char *end = NULL;
    long long id = argc - optind == 1 ? strtoll(argv[optind], &end, 10) : 0;
    if (argc - optind != 1 || *end != '\0' || id <= 0) {
        fprintf(stderr, "steward unsilence: expected one silence ID (steward silences)\n");
        fputs(unsilence_usage, stderr);
        return EXIT_USAGE;
    }
    if (reason == NULL) {
        fprintf(stderr, "steward unsilence: --reason is required\n");
        return EXIT_USAGE;
    }
    if (actor == NULL)
        actor = default_actor();
    PGconn *conn = cli_connect(database, "steward unsilence");
    if (conn == NULL)
        return EXIT_RUNTIME;
    json_t *result = NULL;
    action_rc_t rc = action_unsilence(conn, id, actor, reason, &result, errstr, sizeof errstr);
    PQfinish(conn);
    if (rc != ACTION_OK) {
        fprintf(stderr, "steward unsilence: %s\n", errstr);
        return rc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (as_json)
        cli_print_json(result);
    else
        printf("silence %lld ended\n", id);
    json_decref(result);
    return EXIT_OK;
}

int cli_silences(int argc, char **argv)
{
    static const struct option options[] = {
        {"all", no_argument, NULL, 'A'},
        {"json", no_argument, NULL, 'j'},
        {"database", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *database = NULL;
    int as_json = 0, all = 0, opt;
    char errstr[1024];

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'A':
            all = 1;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'd':
            database = optarg;
            break;
        default:
            return cli_help_or_usage(opt, silences_usage);
        }
    }
    if (cli_extra_args(argc, argv, "steward silences", silences_usage))
        return EXIT_USAGE;
    PGconn *conn = cli_connect(database, "steward silences");
    if (conn == NULL)
        return EXIT_RUNTIME;
    json_t *doc = NULL;
    action_rc_t rc = action_silences(conn, all, &doc, errstr, sizeof errstr);
    PQfinish(conn);
    if (rc != ACTION_OK) {
        fprintf(stderr, "steward silences: %s\n", errstr);
        return EXIT_RUNTIME;
    }
    if (as_json) {
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
                   json_string_value(json_object_get(s, "process")), state ? " state " : "",
                   state ? state : "", team ? " team " : "", team ? team : "",
                   json_string_value(json_object_get(s, "ends_at")),
                   json_string_value(json_object_get(s, "actor")),
                   json_string_value(json_object_get(s, "reason")),
                   json_is_true(json_object_get(s, "live")) ? "" : " (ended)");
        }
    }
    json_decref(doc);
    return EXIT_OK;
}
