/*
 * cli_actions - the operator verbs: `steward ack|resolve ALERT_ID` and
 * `steward close|move|retry|claim|release PROCESS KEY`. Each parses its
 * options, names the actor and hands the action to manager/actions, which
 * the HTTP API shares.
 *
 * The actor is --actor, else $STEWARD_ACTOR, else the OS user name.
 */
#include "cli/cli.h"
#include "common/err.h"
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
