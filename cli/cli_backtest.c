/*
 * cli_backtest - `steward backtest`: try a definition on the events Kafka
 * still retains before it pages anyone.
 *
 * It replays the definition's topics from --from (to --to, or to their
 * end) into a scratch database, with a consumer group of its own, judges
 * every deadline as the scheduler would at the end of the window, and
 * prints the alerts the candidate would have raised and the report. Live
 * state is never touched: not the live schema, not the live group's
 * offsets. The scratch database is dropped at the end unless --keep.
 * The messages the replay rejected are counted by reason and by topic,
 * with a sample detail: a definition that reads nothing of a topic shows
 * it there, not as a quiet report.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/err.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "definitions/duration.h"
#include "formats/decode.h"
#include "manager/intake/intake.h"
#include "manager/sinks/routes.h"
#include "manager/timing/scheduler.h"
#include "shadow/rejections.h"
#include "shadow/backtest.h"
#include "shadow/report.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char backtest_usage[] =
    "usage: steward backtest --definition FILE --from TIME [--to TIME] [OPTIONS]\n"
    "\n"
    "Replays the events Kafka retains on the definition's topics into a scratch\n"
    "database with this definition, and prints the alerts it would have raised\n"
    "and the report. Live state is not touched.\n"
    "\n"
    "  --definition FILE     the candidate definition\n"
    "  --from TIME           RFC 3339, or a duration back from now (\"7d\")\n"
    "  --to TIME             RFC 3339, or a duration back from now (default: now)\n"
    "  --brokers LIST        Kafka bootstrap servers ($STEWARD_KAFKA_BROKERS, or the\n"
    "                        config's brokers)\n"
    "  --kafka NAME=VALUE    a librdkafka property; repeatable\n"
    "  --keep                keep the scratch database and print its name\n"
    "\n"
    "The scratch database is created on the server of the configured database\n"
    "(--database, $STEWARD_DATABASE_URL, the config's database or\n"
    "database_file), whose user needs CREATEDB; the live schema is not read.\n"
    "\n" CLI_CONFIG_USAGE
    "  --json                print {\"alerts\": [...], \"rejected\": {...}}: the\n"
    "                        alerts, and the rejected messages by reason and "
    "topic\n" CLI_HELP_USAGE;

static volatile sig_atomic_t backtest_done;

static void on_signal(int sig)
{
    (void) sig;
    backtest_done = 1;
}

/* Ends the replay once every partition is read to the window's end. */
static void stop_when_drained(intake_t *intake, void *arg)
{
    (void) arg;
    if (intake_drained(intake))
        backtest_done = 1;
}

/* Prints the alerts backtest_alerts() found, one line each. */
static void print_alerts(const json_t *list)
{
    printf("alerts the definition would have raised: %zu\n", json_array_size(list));
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a)
    {
        printf("  %-8s %s\n", json_is_true(json_object_get(a, "open_at_end")) ? "open" : "late",
               json_string_value(json_object_get(a, "summary")));
    }
}

/* The latest version of each process of the candidate set, for the report. */
static const def_t **latest_defs(const def_set_t *set, size_t *n)
{
    const def_t **picked = calloc(set->n + 1, sizeof *picked);
    *n = 0;
    for (size_t i = 0; picked != NULL && i < set->n; i++) {
        if (def_set_latest(set, set->defs[i]->process) == set->defs[i])
            picked[(*n)++] = set->defs[i];
    }
    return picked;
}

/* Codes for backtest's own long options, below CLI_OPT_CONFIG. */
enum {
    OPT_DEFINITION = 0x800,
    OPT_FROM,
    OPT_TO,
    OPT_BROKERS,
    OPT_KAFKA,
    OPT_KEEP,
};

static int backtest_with(cli_opts_t *o, int argc, char **argv);

int cli_backtest(int argc, char **argv)
{
    cli_opts_t o;
    if (!cli_opts_init(&o, "steward backtest", backtest_usage, argc, argv))
        return EXIT_RUNTIME;
    int rc = backtest_with(&o, argc, argv);
    cli_opts_free(&o);
    return rc;
}

static int backtest_with(cli_opts_t *o, int argc, char **argv)
{
    static const struct option options[] = {
        {"definition", required_argument, NULL, OPT_DEFINITION},
        {"from", required_argument, NULL, OPT_FROM},
        {"to", required_argument, NULL, OPT_TO},
        {"brokers", required_argument, NULL, OPT_BROKERS},
        {"kafka", required_argument, NULL, OPT_KAFKA},
        {"keep", no_argument, NULL, OPT_KEEP},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    const char *definition = NULL, *from = NULL, *to = NULL;
    int opt, keep = 0, rc = EXIT_OK;
    char errstr[1024];

    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        switch (opt) {
        case OPT_DEFINITION:
            definition = optarg;
            break;
        case OPT_FROM:
            from = optarg;
            break;
        case OPT_TO:
            to = optarg;
            break;
        case OPT_BROKERS:
            cli_opts_add(o, "brokers", optarg);
            break;
        case OPT_KAFKA:
            cli_opts_add(o, "kafka", optarg);
            break;
        case OPT_KEEP:
            keep = 1;
            break;
        default:
            if ((rc = cli_opts_take(o, opt, optarg)) >= 0)
                return rc;
        }
    }
    rc = EXIT_OK;
    const config_t *cfg = cli_opts_config(o);
    if (cfg == NULL)
        return EXIT_USAGE;
    const char *brokers = cfg->brokers != NULL && *cfg->brokers != '\0' ? cfg->brokers : NULL;
    bool as_json = o->json;
    int64_t from_ms = 0, to_ms = clock_wall_ms();
    const char *problem =
        definition == NULL                          ? "--definition is required"
        : from == NULL                              ? "--from is required"
        : brokers == NULL                           ? "no brokers: give --brokers"
        : !cli_parse_when(from, &from_ms)           ? "--from is neither RFC 3339 nor a duration"
        : to != NULL && !cli_parse_when(to, &to_ms) ? "--to is neither RFC 3339 nor a duration"
        : from_ms >= to_ms                          ? "--from must come before --to"
        : optind < argc                             ? "unexpected arguments"
                                                    : NULL;
    if (problem != NULL) {
        fprintf(stderr, "steward backtest: %s\n%s", problem, backtest_usage);
        return EXIT_USAGE;
    }

    def_problems_t problems = {0};
    def_set_t *defs = def_set_load(&definition, 1, &problems, NULL);
    if (defs == NULL || defs->n == 0) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "%s: %s: %s\n", problems.items[i].file, problems.items[i].pointer,
                    problems.items[i].message);
        fprintf(stderr, "steward backtest: the candidate definition is invalid\n");
        def_problems_clear(&problems);
        def_set_free(defs);
        return EXIT_USAGE;
    }

    /* The writer schemas of confluent_avro topics, from the config's registry. */
    cli_schemas_t schemas;
    if (!cli_schemas_open(cfg, defs, &schemas, errstr, sizeof errstr)) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        def_set_free(defs);
        return EXIT_USAGE;
    }

    /* The scratch database, on the same server as the live one. */
    backtest_scratch_t scratch;
    route_table_t *routes = NULL;
    if (backtest_scratch_open(&scratch, cfg->database, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto out;
    }
    /* Nobody is paged from a backtest: alerts are only recorded. */
    json_t *quiet = json_pack("{s:[{s:s}]}", "default", "type", "log");
    routes = route_table_new(quiet, errstr, sizeof errstr);
    json_decref(quiet);

    char group[128], from_text[40];
    snprintf(group, sizeof group, "%s", scratch.name);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    rfc3339_format(from_ms, from_text, sizeof from_text);
    fprintf(stderr, "steward backtest: replaying %s from %s into %s\n", definition, from_text,
            scratch.name);
    log_set_level(LOG_LEVEL_WARN);
    intake_config_t icfg = {
        .brokers = brokers,
        .group = group,
        .conninfo = scratch.url,
        .replica = "backtest",
        .batch_max = INTAKE_DEFAULT_BATCH_MAX,
        .batch_ms = INTAKE_DEFAULT_BATCH_MS,
        /* Judged as steward run with this config would judge them. */
        .limits = {(size_t) cfg->max_message_bytes, DECODE_DEFAULT_MAX_DEPTH},
        .record_unknown = cfg->record_unknown,
        .kafka_props = (const char *const *) cfg->kafka_props,
        .n_kafka_props = cfg->n_kafka_props,
        .routes = routes,
        .schemas = schemas.schemas,
        .on_tick = stop_when_drained,
        .from_ms = from_ms,
        .until_ms = to_ms,
    };
    err_class_t cls;
    intake_t *intake = intake_new(&icfg, defs, &cls, errstr, sizeof errstr);
    if (intake == NULL) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        rc = cls == ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
        goto out;
    }
    cls = intake_run(intake, &backtest_done, errstr, sizeof errstr);
    intake_free(intake);
    if (cls != ERR_OK) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto out;
    }

    /* Every deadline judged as of the window's end. */
    /* A replay cannot be blind: blind_after is set past any window. */
    sched_config_t scfg = {scratch.url, group, 1000, 0, 3650LL * 86400000, "steward", to_ms};
    sched_t *sched = sched_new(&scfg, defs, routes, errstr, sizeof errstr);
    sched_stats_t stats;
    if (sched == NULL || sched_tick(sched, &stats, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        rc = EXIT_RUNTIME;
        sched_free(sched);
        goto out;
    }
    sched_free(sched);

    json_t *alerts = NULL, *report = NULL, *rejected = NULL;
    const def_t *candidate = def_set_latest(defs, defs->defs[0]->process);
    if (backtest_alerts(scratch.conn, candidate, &alerts, errstr, sizeof errstr) != ERR_OK ||
        rejections_read(scratch.conn, 0, &rejected, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        json_decref(alerts);
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (as_json) {
        json_t *doc = json_pack("{s:o, s:o}", "alerts", alerts, "rejected", rejected);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else {
        print_alerts(alerts);
        printf("\n");
        rejections_print(rejected, stdout);
        if (json_integer_value(json_object_get(rejected, "total")) > 0)
            printf("(each is in the scratch database's steward.rejected: keep it with --keep)\n");
        json_decref(alerts);
        json_decref(rejected);
    }
    if (!as_json) {
        size_t n_latest;
        const def_t **latest = latest_defs(defs, &n_latest);
        report_options_t ropts = {.definitions = definition};
        if (latest == NULL || report_build(scratch.conn, latest, n_latest, &ropts, &report, errstr,
                                           sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward backtest: %s\n", latest == NULL ? "out of memory" : errstr);
            rc = EXIT_RUNTIME;
        } else {
            printf("\n");
            json_object_del(report, "rejected"); /* printed above, with the alerts */
            report_print_text(report, stdout);
        }
        json_decref(report);
        free(latest);
    }

out:
    if (scratch.admin != NULL && keep && scratch.url != NULL)
        fprintf(stderr, "steward backtest: kept the scratch database %s\n", scratch.name);
    if (backtest_scratch_close(&scratch, keep, errstr, sizeof errstr) != ERR_OK)
        fprintf(stderr, "steward backtest: %s\n", errstr);
    route_table_free(routes);
    cli_schemas_close(&schemas);
    def_problems_clear(&problems);
    def_set_free(defs);
    return rc;
}
