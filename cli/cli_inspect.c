/*
 * cli_inspect - `steward inspect PROCESS KEY`: where one instance stands
 * and everything that happened to it, in one command.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/duration.h"
#include "formats/decode.h"
#include "manager/operator/query.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char inspect_usage[] =
    "usage: steward inspect PROCESS KEY [--json] [--config FILE] [--database CONNINFO]\n"
    "\n"
    "Prints the instance (state, whether it is open or how it finished, start,\n"
    "time in the current state, its deadline, variables, definition version and\n"
    "mode, who claimed it; in active mode its step, fencing token, lease holder\n"
    "and expiry, and its latest commands, sent or pending, each with the W3C\n"
    "traceparent it continues the event's trace with) and its history in\n"
    "event-time order, with what each event did and its trace id; with\n"
    "tracing.link set, the link to each trace. Exits 1 when there is no such\n"
    "instance.\n"
    "\n" CLI_CONFIG_USAGE
    "  --json                print what GET /v1/instances/PROCESS/KEY answers\n" CLI_HELP_USAGE;

static const char *str(const json_t *obj, const char *name)
{
    const char *value = json_string_value(json_object_get(obj, name));
    return value != NULL ? value : "-";
}

/* The trace links are in `inst` already (query_trace_links()). */
static void print_text(json_t *inst)
{
    size_t i;
    json_t *h;
    decode_json_printable(inst); /* keys and details came from producers */
    char in_state[64], to_deadline[32];
    json_t *ms_to_deadline = json_object_get(inst, "ms_to_deadline");
    char *vars = json_dumps(json_object_get(inst, "vars"),
                            JSON_COMPACT | JSON_SORT_KEYS | QUERY_REAL_PRECISION);

    /* Time in the state counts to the watermark, as the deadline does. */
    json_t *ms_in_state = json_object_get(inst, "ms_in_state");
    if (json_is_integer(ms_in_state)) {
        char span[32];
        duration_format_rounded(json_integer_value(ms_in_state), span, sizeof span);
        snprintf(in_state, sizeof in_state, "%s, at the watermark", span);
    } else {
        snprintf(in_state, sizeof in_state, "watermark unknown");
    }
    /* An instance's status is "active" until it finishes: said "open" here,
     * so it is not read as active mode. */
    const char *inst_status = str(inst, "status");
    printf("%s %s (definition version %lld, %s mode)\n", str(inst, "process"), str(inst, "key"),
           (long long) json_integer_value(json_object_get(inst, "version")), str(inst, "mode"));
    if (strcmp(inst_status, "active") == 0)
        printf("  state             %s (open)\n", str(inst, "state"));
    else
        printf("  state             %s (%s)\n", str(inst, "state"), inst_status);
    printf("  started           %s\n", str(inst, "started_at"));
    printf("  in state since    %s (%s)\n", str(inst, "state_entered_at"), in_state);
    if (json_is_integer(ms_to_deadline)) {
        long long ms = json_integer_value(ms_to_deadline);
        duration_format_rounded(ms < 0 ? -ms : ms, to_deadline, sizeof to_deadline);
        printf("  deadline          %s (%s %s)\n", str(inst, "deadline_at"), to_deadline,
               ms < 0 ? "past, at the watermark" : "left, at the watermark");
    } else {
        printf("  deadline          none\n");
    }
    printf("  process deadline  %s\n", str(inst, "process_deadline_at"));
    printf("  overdue           %s\n",
           json_is_true(json_object_get(inst, "overdue")) ? "yes" : "no");
    printf("  vars              %s\n", vars != NULL ? vars : "{}");
    if (json_is_string(json_object_get(inst, "claimed_by")))
        printf("  claimed by        %s since %s\n", str(inst, "claimed_by"),
               str(inst, "claimed_at"));
    free(vars);

    /* Active mode: who holds the step, and what was sent for it. */
    long long token = json_integer_value(json_object_get(inst, "token"));
    printf("  step              %lld\n",
           (long long) json_integer_value(json_object_get(inst, "step")));
    if (token > 0)
        printf("  fencing token     %lld\n", token);
    if (json_is_string(json_object_get(inst, "lease_expires_at")))
        printf("  lease             held by %s until %s (last renewed %s)\n",
               json_is_string(json_object_get(inst, "lease_holder")) ? str(inst, "lease_holder")
                                                                     : "an unnamed holder",
               str(inst, "lease_expires_at"), str(inst, "lease_renewed_at"));
    json_t *commands = json_object_get(inst, "commands");
    if (json_array_size(commands) > 0) {
        printf("\ncommands, oldest first (the latest %zu)\n", json_array_size(commands));
        json_array_foreach(commands, i, h)
        {
            const char *status = str(h, "status");
            printf("  %s  %-20s %-16s step %lld attempt %lld token %lld  %s%s%s  ce_id %s\n",
                   str(h, "queued_at"), str(h, "type"), str(h, "state"),
                   (long long) json_integer_value(json_object_get(h, "step")),
                   (long long) json_integer_value(json_object_get(h, "attempt")),
                   (long long) json_integer_value(json_object_get(h, "token")), status,
                   strcmp(status, "sent") == 0 ? " " : "",
                   strcmp(status, "sent") == 0 ? str(h, "sent_at") : "", str(h, "ce_id"));
            const char *tp = json_string_value(json_object_get(h, "traceparent"));
            if (tp != NULL) {
                const char *link = json_string_value(json_object_get(h, "trace_link"));
                printf("      traceparent %s%s%s\n", tp, link != NULL ? "  " : "",
                       link != NULL ? link : "");
            }
        }
    }

    json_t *history = json_object_get(inst, "history");
    printf("\nhistory in event-time order (%zu rows): event time, event, where it was read\n"
           "(topic[partition]@offset; an operator's action or Steward's own decision at a\n"
           "deadline was read from no topic), outcome (\"replayed\": a parked event judged\n"
           "once the instance could take it), from -> to; under a traced event, its trace\n"
           "id (W3C traceparent) and, with tracing.link, the link to it\n",
           json_array_size(history));
    json_array_foreach(history, i, h)
    {
        char where[160], move[160], outcome[64];
        const char *topic = str(h, "topic");
        if (strcmp(str(h, "outcome"), "operator") == 0)
            snprintf(where, sizeof where, "(operator)");
        else if (topic[0] == '\0' || json_integer_value(json_object_get(h, "partition")) < 0)
            snprintf(where, sizeof where, "(steward)");
        else
            snprintf(where, sizeof where, "%s[%lld]@%lld", topic,
                     (long long) json_integer_value(json_object_get(h, "partition")),
                     (long long) json_integer_value(json_object_get(h, "offset")));
        snprintf(outcome, sizeof outcome, "%s%s", str(h, "outcome"),
                 json_is_true(json_object_get(h, "replayed")) ? " (replayed)" : "");
        const char *from = json_string_value(json_object_get(h, "from_state"));
        const char *to = json_string_value(json_object_get(h, "to_state"));
        if (from != NULL && to != NULL && strcmp(from, to) != 0)
            snprintf(move, sizeof move, "%s -> %s", from, to);
        else if (from == NULL && to != NULL)
            snprintf(move, sizeof move, "-> %s", to);
        else
            snprintf(move, sizeof move, "%s", from != NULL ? from : "");
        printf("  %s  %-22s %-20s %-11s %s", str(h, "event_time"), str(h, "event_type"), where,
               outcome, move);
        const char *detail = json_string_value(json_object_get(h, "detail"));
        if (detail != NULL)
            printf("  (%s)", detail);
        if (json_is_string(json_object_get(h, "actor")))
            printf("  by %s: %s", str(h, "actor"), str(h, "reason"));
        const char *trace = json_string_value(json_object_get(h, "trace_id"));
        if (trace != NULL) {
            const char *link = json_string_value(json_object_get(h, "trace_link"));
            printf("\n      trace %s%s%s", trace, link != NULL ? "  " : "",
                   link != NULL ? link : "");
        }
        printf("\n");
    }
}

int cli_inspect(int argc, char **argv)
{
    static const struct option options[] = {
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int opt, rc;
    char errstr[1024];
    cli_opts_t o;

    if (!cli_opts_init(&o, "steward inspect", inspect_usage, argc, argv))
        return EXIT_RUNTIME;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        if ((rc = cli_opts_take(&o, opt, optarg)) >= 0) {
            cli_opts_free(&o);
            return rc;
        }
    }
    if (argc - optind != 2) {
        fputs(inspect_usage, stderr);
        cli_opts_free(&o);
        return EXIT_USAGE;
    }
    const char *process = argv[optind], *key = argv[optind + 1];

    PGconn *conn = cli_opts_connect(&o, true, &rc);
    if (conn == NULL) {
        cli_opts_free(&o);
        return rc;
    }
    json_t *inst = NULL;
    query_absent_t absent;
    rc = EXIT_OK;
    if (query_instance(conn, process, key, &inst, &absent, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward inspect: %s\n", errstr);
        rc = EXIT_RUNTIME;
    } else if (inst == NULL) {
        if (absent.started)
            fprintf(stderr,
                    "steward inspect: no instance %s of %s; its history (%ld event%s kept) "
                    "shows it started: it finished and was removed since (retention.instances)\n",
                    key, process, absent.judged, absent.judged == 1 ? "" : "s");
        else if (absent.judged > 0)
            fprintf(stderr,
                    "steward inspect: no instance %s of %s; %ld event%s for it waited or were "
                    "judged without one (its start event never arrived)\n",
                    key, process, absent.judged, absent.judged == 1 ? "" : "s");
        else
            fprintf(stderr, "steward inspect: no instance %s of %s\n", key, process);
        rc = EXIT_RUNTIME;
    } else {
        /* The HTTP answer, byte for byte in content: one query builds both,
         * and the links come from the same tracing.link. */
        const config_t *cfg = cli_opts_config(&o);
        query_trace_links(inst, cfg != NULL ? cfg->tracing_link : NULL);
        if (o.json)
            cli_print_json(inst);
        else
            print_text(inst);
    }
    json_decref(inst);
    PQfinish(conn);
    cli_opts_free(&o);
    return rc;
}
