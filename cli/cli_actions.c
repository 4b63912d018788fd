/*
 * cli_actions - the operator verbs: `steward ack|resolve ALERT_ID`,
 * `steward close|move|retry|claim|release PROCESS KEY`, `steward upgrade
 * PROCESS`, and the silences:
 * `steward silence`, `silences`, `unsilence ID`. Each is a row of
 * manager/operator/actions.h's verb table, and one parser reads every verb's line
 * from its row: its usage, operands and own options, and the shared ones
 * through cli/options, so the config file and its database_file secret
 * reach it like every verb. Then it checks the schema, names the actor and
 * hands the action to manager/actions, which the HTTP API shares.
 *
 * The actor is --actor, else $STEWARD_ACTOR, else the OS user name.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "manager/operator/actions.h"

#include <getopt.h>
#include <stdbool.h>
#include <pwd.h>
#include <stdarg.h>
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

static const char *default_actor(void)
{
    const char *env = getenv("STEWARD_ACTOR");
    if (env != NULL && *env != '\0')
        return env;
    struct passwd *pw = getpwuid(geteuid());
    return pw != NULL ? pw->pw_name : NULL;
}

#define ACTION_USAGE                                                                               \
    "  --reason TEXT         why (required; recorded in the audit trail)\n"                        \
    "  --actor NAME          who ($STEWARD_ACTOR, else the OS user name)\n" CLI_COMMON_USAGE "\n"  \
    "Exits 0 when done; 1 when there is no such alert or instance, when it\n"                      \
    "changed meanwhile (already resolved, already finished, claimed by\n"                          \
    "someone else) or the database failed, and nothing was changed; 2 on a\n"                      \
    "usage error (no --reason, an unknown state or outcome).\n"

/* Appends to buf (of size, holding a string) what fmt says; cut short
 * when full, which a usage text of the table's never is. */
static void append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (used < size)
        vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* A verb's usage, written from its row: the synopsis, the paragraph, its
 * own options, then the shared ones. */
static void verb_usage(const action_verb_def_t *def, char *buf, size_t size)
{
    buf[0] = '\0';
    append(buf, size, "usage: steward %s", def->name);
    if (def->operands != NULL)
        append(buf, size, " %s", def->operands);
    for (const action_option_t *op = def->options; op->name != NULL; op++) {
        if (!op->in_synopsis)
            continue;
        append(buf, size, op->required ? " --%s%s%s" : " [--%s%s%s]", op->name,
               op->arg != NULL ? " " : "", op->arg != NULL ? op->arg : "");
    }
    append(buf, size, "%s [OPTIONS]\n\n%s\n\n", def->audited ? " --reason TEXT" : "", def->about);
    for (const action_option_t *op = def->options; op->name != NULL; op++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s%s%s", op->name, op->arg != NULL ? " " : "",
                 op->arg != NULL ? op->arg : "");
        append(buf, size, "  %-20s  %s\n", flag, op->help);
    }
    append(buf, size, "%s", def->audited ? ACTION_USAGE : CLI_COMMON_USAGE);
}

/* Codes for the verbs' long options, below CLI_OPT_CONFIG: every verb's
 * own option is OPT_OWN plus its index in the union of all of them. */
enum {
    OPT_REASON = 0x800,
    OPT_ACTOR,
    OPT_OWN,
};

#define OWN_OPTIONS_MAX 32

/* What a verb's command line said. */
typedef struct verb_line {
    const char *reason, *actor;
    const char *value[ACTION_VERB_OPTIONS_MAX]; /* by the row's option index; a flag given: "" */
    char *joined[ACTION_VERB_OPTIONS_MAX];      /* a repeated option's values, owned */
    char **operands;
    int n_operands;
} verb_line_t;

/* The row's value of option `name`; NULL when not given. */
static const char *option_value(const action_verb_def_t *def, const verb_line_t *line,
                                const char *name)
{
    for (int i = 0; def->options[i].name != NULL; i++)
        if (strcmp(def->options[i].name, name) == 0)
            return line->value[i];
    return NULL;
}

/*
 * Parses a verb's command line by its row: --reason and --actor when it is
 * audited, its own options, the shared ones through cli_opts_take(), its
 * operands, and what is required. Every verb's own option is known to
 * getopt, so one that belongs to another verb is named as such. -1 when
 * the line is good, else the exit code to return at once (the problem
 * printed).
 */
static int verb_parse(const action_verb_def_t *def, cli_opts_t *o, int argc, char **argv,
                      verb_line_t *line)
{
    static const struct option common[] = {CLI_COMMON_OPTIONS};
    struct option options[OWN_OPTIONS_MAX + sizeof common / sizeof common[0] + 3];
    const char *own[OWN_OPTIONS_MAX];
    size_t n = 0, n_own = 0;
    options[n++] = (struct option){"reason", required_argument, NULL, OPT_REASON};
    options[n++] = (struct option){"actor", required_argument, NULL, OPT_ACTOR};
    for (size_t v = 0; v < action_verb_count; v++) {
        for (const action_option_t *op = action_verbs[v].options; op->name != NULL; op++) {
            bool seen = false;
            for (size_t i = 0; i < n_own; i++)
                seen = seen || strcmp(own[i], op->name) == 0;
            if (seen || n_own == OWN_OPTIONS_MAX)
                continue;
            options[n++] =
                (struct option){op->name, op->arg != NULL ? required_argument : no_argument, NULL,
                                OPT_OWN + (int) n_own};
            own[n_own++] = op->name;
        }
    }
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        options[n++] = common[i];
    options[n] = (struct option){NULL, 0, NULL, 0};

    int opt, rc;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        const char *other = opt == OPT_REASON                               ? "reason"
                            : opt == OPT_ACTOR                              ? "actor"
                            : opt >= OPT_OWN && opt < OPT_OWN + (int) n_own ? own[opt - OPT_OWN]
                                                                            : NULL;
        int index = -1;
        for (int i = 0; other != NULL && opt >= OPT_OWN && def->options[i].name != NULL; i++)
            if (strcmp(def->options[i].name, other) == 0)
                index = i;
        if (other != NULL && (opt >= OPT_OWN ? index < 0 : !def->audited)) {
            fprintf(stderr, "%s: --%s is not an option of %s\n", o->cmd, other, def->name);
            fputs(o->usage, stderr);
            return EXIT_USAGE;
        }
        if (opt == OPT_REASON) {
            line->reason = optarg;
        } else if (opt == OPT_ACTOR) {
            line->actor = optarg;
        } else if (index >= 0 && def->options[index].repeats && line->value[index] != NULL) {
            /* Given again: the values joined, as one value may list them. */
            char *both = NULL;
            if (asprintf(&both, "%s,%s", line->value[index], optarg) < 0) {
                fprintf(stderr, "%s: out of memory\n", o->cmd);
                return EXIT_RUNTIME;
            }
            free(line->joined[index]);
            line->value[index] = line->joined[index] = both;
        } else if (index >= 0) {
            line->value[index] = optarg != NULL ? optarg : "";
        } else if ((rc = cli_opts_take(o, opt, optarg)) >= 0) {
            return rc;
        }
    }

    int expected = 0;
    for (const char *p = def->operands; p != NULL && *p != '\0';
         p += strcspn(p, " "), p += *p == ' ')
        expected++;
    line->operands = argv + optind;
    line->n_operands = argc - optind;
    if (expected == 0 && cli_extra_args(argc, argv, o->cmd, o->usage))
        return EXIT_USAGE;
    if (line->n_operands != expected) {
        fprintf(stderr, "%s: expected %s\n", o->cmd, def->operands);
        fputs(o->usage, stderr);
        return EXIT_USAGE;
    }
    if (def->audited && (line->reason == NULL || *line->reason == '\0')) {
        fprintf(stderr, "%s: --reason is required: say why, for the audit trail\n", o->cmd);
        return EXIT_USAGE;
    }
    for (int i = 0; def->options[i].name != NULL; i++) {
        if (def->options[i].required && line->value[i] == NULL) {
            fprintf(stderr, "%s: --%s %s is required\n", o->cmd, def->options[i].name,
                    def->options[i].arg != NULL ? def->options[i].arg : "");
            return EXIT_USAGE;
        }
    }
    if (def->audited && line->actor == NULL)
        line->actor = default_actor();
    if (def->audited && line->actor == NULL) {
        fprintf(stderr, "%s: no actor: pass --actor or set STEWARD_ACTOR\n", o->cmd);
        return EXIT_USAGE;
    }
    return -1;
}

/* A positive id operand, or 0. */
static long long operand_id(const char *text)
{
    char *end;
    long long id = strtoll(text, &end, 10);
    return *text == '\0' || *end != '\0' || id <= 0 ? 0 : id;
}

/*
 * What a verb prints and returns once its action ran: the reason when it
 * did not happen (arc not ACTION_OK; EXIT_USAGE for a bad request, else
 * EXIT_RUNTIME), else the result as JSON with --json or as `text` writes
 * it. Takes result (may be NULL).
 */
static int answer(const action_verb_def_t *def, const cli_opts_t *o, const verb_line_t *line,
                  action_rc_t arc, json_t *result, const char *errstr,
                  void (*text)(const action_verb_def_t *, const verb_line_t *, const json_t *))
{
    int rc = EXIT_OK;
    if (arc != ACTION_OK) {
        fprintf(stderr, "%s: %s\n", o->cmd, shown(errstr));
        rc = arc == ACTION_BAD_REQUEST ? EXIT_USAGE : EXIT_RUNTIME;
    } else if (o->json) {
        cli_print_json(result);
    } else {
        text(def, line, result);
    }
    json_decref(result);
    return rc;
}

static void action_text(const action_verb_def_t *def, const verb_line_t *line, const json_t *result)
{
    if (def->on == ACTION_ON_ALERT) {
        printf("alert %s %s by %s\n", shown(line->operands[0]),
               def->verb == ACTION_ACK ? "acknowledged" : "resolved", shown(line->actor));
        return;
    }
    json_t *before = json_object_get(result, "before"), *after = json_object_get(result, "after");
    printf("%s %s: %s %s -> %s (%s) by %s\n", shown(line->operands[0]), shown(line->operands[1]),
           def->name, shown(json_string_value(json_object_get(before, "state"))),
           shown(json_string_value(json_object_get(after, "state"))),
           shown(json_string_value(json_object_get(after, "status"))), shown(line->actor));
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

/* ---- upgrade ---- */

/* The lines a section of the upgrade's text prints before "... and N more". */
#define UPGRADE_TEXT_ROWS 20

static const char *text_of(const json_t *obj, const char *name)
{
    const char *s = json_string_value(json_object_get(obj, name));
    return s != NULL ? shown(s) : "-";
}

static long long int_of(const json_t *obj, const char *name)
{
    return (long long) json_integer_value(json_object_get(obj, name));
}

/* A section's heading and count, then its first rows by `row`, then how
 * many more there are. */
static void section(const json_t *result, const char *heading, const char *count, const char *list,
                    void (*row)(const json_t *))
{
    long long n = int_of(result, count);
    json_t *items = json_object_get(result, list), *item;
    size_t i;
    printf("%s: %lld\n", heading, n);
    json_array_foreach(items, i, item)
    {
        if (i == UPGRADE_TEXT_ROWS)
            break;
        row(item);
    }
    if (n > UPGRADE_TEXT_ROWS)
        printf("  ... and %lld more (--json lists up to %d)\n", n - UPGRADE_TEXT_ROWS,
               ACTION_UPGRADE_LIST_MAX);
}

static void deadline_row(const json_t *d)
{
    char change[48] = "";
    json_t *ms = json_object_get(d, "change_ms");
    if (json_is_integer(ms)) {
        long long v = (long long) json_integer_value(ms);
        char text[32];
        duration_format(v < 0 ? -v : v, text, sizeof text);
        snprintf(change, sizeof change, " (%c%s)", v < 0 ? '-' : '+', text);
    }
    printf("  %s %s, %s deadline: %s -> %s%s\n", text_of(d, "key"), text_of(d, "state"),
           text_of(d, "deadline"), text_of(d, "before"), text_of(d, "after"), change);
}

static void alert_row(const json_t *a)
{
    printf("  alert %lld (%s) of %s\n", int_of(a, "id"), text_of(a, "kind"), text_of(a, "key"));
}

static void due_row(const json_t *d)
{
    printf("  %s %s: deadline %s passed, then %s\n", text_of(d, "key"), text_of(d, "state"),
           text_of(d, "deadline"), text_of(d, "then"));
}

static void command_row(const json_t *c)
{
    printf("  %s %s to %s (step %lld, attempt %lld, token %lld)\n", text_of(c, "key"),
           text_of(c, "type"), text_of(c, "topic"), int_of(c, "step"), int_of(c, "attempt"),
           int_of(c, "token"));
}

static void skipped_row(const json_t *s)
{
    printf("  %s: %s\n", text_of(s, "key"), text_of(s, "why"));
}

static void upgrade_text(const action_verb_def_t *def, const verb_line_t *line,
                         const json_t *result)
{
    (void) def;
    bool dry = json_is_true(json_object_get(result, "dry_run"));
    long long moved = int_of(result, "moved");
    printf("%s to version %lld: %lld instance%s %s%s\n", shown(line->operands[0]),
           int_of(result, "to_version"), moved, moved == 1 ? "" : "s", dry ? "would move" : "moved",
           dry ? " (a dry run: nothing was changed)" : "");
    json_t *states = json_object_get(result, "states"), *s;
    size_t i;
    json_array_foreach(states, i, s)
        printf("  version %lld %s -> %s: %lld\n", int_of(s, "from_version"),
               text_of(s, "from_state"), text_of(s, "to_state"), int_of(s, "instances"));
    section(result, "deadlines changed", "deadlines_changed", "deadlines", deadline_row);
    section(result, "alerts resolved", "alerts_resolved", "alerts", alert_row);
    section(result, "due at once (the scheduler's next pass judges them)", "due_at_once", "due",
            due_row);
    section(result, "commands queued", "commands_queued", "commands", command_row);
    long long promoted = int_of(result, "promoted");
    if (promoted > 0)
        printf("promoted to active: %lld (%s)\n", promoted,
               json_is_true(json_object_get(result, "send_current"))
                   ? "the current step's command sent now"
                   : "nothing sent now: each sends its next state's command on entry");
    json_t *skipped = json_object_get(result, "skipped");
    if (json_array_size(skipped) > 0) {
        printf("skipped: %zu\n", json_array_size(skipped));
        json_array_foreach(skipped, i, s)
        {
            if (i == UPGRADE_TEXT_ROWS)
                break;
            skipped_row(s);
        }
    }
}

/* An alert, instance or process verb: action_run(). */
static int run_action(const action_verb_def_t *def, cli_opts_t *o, const verb_line_t *line)
{
    action_request_t req = {.actor = line->actor, .reason = line->reason};
    char errstr[1024];
    int rc;

    if (def->on == ACTION_ON_ALERT) {
        if ((req.alert_id = operand_id(line->operands[0])) == 0) {
            fprintf(stderr, "%s: %s is not an alert id (steward stuck lists them)\n", o->cmd,
                    line->operands[0]);
            return EXIT_USAGE;
        }
    } else {
        req.process = line->operands[0];
        req.key = def->on == ACTION_ON_INSTANCE ? line->operands[1] : NULL;
    }
    /* A verb's first option, if any, is what it acts towards; an upgrade
     * reads all of its own. */
    req.target = def->options[0].name != NULL ? line->value[0] : NULL;
    req.options = line->value;

    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc = action_run(conn, def->verb, &req, &result, errstr, sizeof errstr);
    PQfinish(conn);
    return answer(def, o, line, arc, result, errstr,
                  def->on == ACTION_ON_PROCESS ? upgrade_text : action_text);
}

/* ---- silences ---- */

static void silence_text(const action_verb_def_t *def, const verb_line_t *line,
                         const json_t *result)
{
    (void) def;
    (void) line;
    printf("silence %lld until %s\n", (long long) json_integer_value(json_object_get(result, "id")),
           json_string_value(json_object_get(result, "ends_at")));
}

static int run_silence(const action_verb_def_t *def, cli_opts_t *o, const verb_line_t *line)
{
    silence_request_t req = {
        .actor = line->actor,
        .reason = line->reason,
        .process = option_value(def, line, "process"),
        .state = option_value(def, line, "state"),
        .team = option_value(def, line, "team"),
    };
    char errstr[1024];
    int rc;
    if (!duration_parse(option_value(def, line, "for"), &req.for_ms, errstr, sizeof errstr)) {
        fprintf(stderr, "%s: --for: %s\n", o->cmd, errstr);
        return EXIT_USAGE;
    }
    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc = action_silence(conn, &req, &result, errstr, sizeof errstr);
    PQfinish(conn);
    return answer(def, o, line, arc, result, errstr, silence_text);
}

static void unsilence_text(const action_verb_def_t *def, const verb_line_t *line,
                           const json_t *result)
{
    (void) def;
    (void) result;
    printf("silence %lld ended\n", operand_id(line->operands[0]));
}

static int run_unsilence(const action_verb_def_t *def, cli_opts_t *o, const verb_line_t *line)
{
    char errstr[1024];
    int rc;
    long long id = operand_id(line->operands[0]);
    if (id == 0) {
        fprintf(stderr, "%s: expected one silence ID (steward silences)\n", o->cmd);
        fputs(o->usage, stderr);
        return EXIT_USAGE;
    }
    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc =
        action_unsilence(conn, id, line->actor, line->reason, &result, errstr, sizeof errstr);
    PQfinish(conn);
    return answer(def, o, line, arc, result, errstr, unsilence_text);
}

static void silences_text(const action_verb_def_t *def, const verb_line_t *line,
                          const json_t *result)
{
    bool all = option_value(def, line, "all") != NULL;
    json_t *list = json_object_get(result, "silences"), *s;
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

static int run_silences(const action_verb_def_t *def, cli_opts_t *o, const verb_line_t *line)
{
    char errstr[1024];
    int rc;
    PGconn *conn = cli_opts_connect(o, true, &rc);
    if (conn == NULL)
        return rc;
    json_t *result = NULL;
    action_rc_t arc = action_silences(conn, option_value(def, line, "all") != NULL, &result, errstr,
                                      sizeof errstr);
    PQfinish(conn);
    return answer(def, o, line, arc, result, errstr, silences_text);
}

/* The silence rows' functions; alert and instance rows all go to
 * run_action(). */
static const struct {
    const char *name;
    int (*run)(const action_verb_def_t *, cli_opts_t *, const verb_line_t *);
} silence_runs[] = {
    {"silence", run_silence},
    {"unsilence", run_unsilence},
    {"silences", run_silences},
};

int cli_verb(const action_verb_def_t *def, int argc, char **argv)
{
    int (*run)(const action_verb_def_t *, cli_opts_t *, const verb_line_t *) = run_action;
    if (def->on == ACTION_ON_SILENCE) {
        run = NULL;
        for (size_t i = 0; i < sizeof silence_runs / sizeof silence_runs[0]; i++)
            if (strcmp(silence_runs[i].name, def->name) == 0)
                run = silence_runs[i].run;
        if (run == NULL) {
            fprintf(stderr, "steward %s: not available from the command line\n", def->name);
            return EXIT_RUNTIME;
        }
    }
    static char usage[4096];
    char cmd[64];
    cli_opts_t o;
    verb_line_t line = {0};
    snprintf(cmd, sizeof cmd, "steward %s", def->name);
    verb_usage(def, usage, sizeof usage);
    if (!cli_opts_init(&o, cmd, usage, argc, argv))
        return EXIT_RUNTIME;
    int rc = verb_parse(def, &o, argc, argv, &line);
    if (rc < 0)
        rc = run(def, &o, &line);
    for (size_t i = 0; i < ACTION_VERB_OPTIONS_MAX; i++)
        free(line.joined[i]);
    cli_opts_free(&o);
    return rc;
}
