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
 */
#include "cli/cli.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/err.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "definitions/duration.h"
#include "engine/decode.h"
#include "manager/intake.h"
#include "manager/routes.h"
#include "manager/scheduler.h"
#include "schema/migrate.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

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
    "  --brokers LIST        Kafka bootstrap servers ($STEWARD_KAFKA_BROKERS)\n"
    "  --database CONNINFO   where to create the scratch database ($STEWARD_DATABASE_URL);\n"
    "                        its user needs CREATEDB\n"
    "  --kafka NAME=VALUE    a librdkafka property; repeatable\n"
    "  --json                print the alerts as JSON\n"
    "  --keep                keep the scratch database and print its name\n";

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

/* RFC 3339, or a duration meaning that long ago. */
static bool parse_when(const char *text, int64_t *ms)
{
    int64_t ago;
    char why[128];
    if (rfc3339_parse(text, ms))
        return true;
    if (duration_parse(text, &ago, why, sizeof why)) {
        *ms = clock_wall_ms() - ago;
        return true;
    }
    return false;
}

/*
 * The steps that finished late within the window: the deadline passed in
 * event time before the awaited event came. A running steward would have
 * paged for each and resolved the page when the event arrived; the replay,
 * reading the window in seconds, cannot tell from its clock, so they are
 * found from history instead.
 */
static const char late_sql[] =
    "WITH moves AS ("
    "  SELECT h.key, h.from_state, h.event_type, h.event_time, "
    "    lag(h.event_time) OVER (PARTITION BY h.process, h.key ORDER BY h.id) AS entered "
    "  FROM steward.history h WHERE h.outcome IN ('started', 'advanced')) "
    "SELECT m.key, m.from_state, m.event_type, "
    "  steward.to_ms(m.event_time - m.entered), d.ms "
    "FROM moves m JOIN unnest($1::text[], $2::bigint[]) AS d(state, ms) "
    "  ON d.state = m.from_state "
    "WHERE m.entered IS NOT NULL AND m.event_time - m.entered > steward.ms_interval(d.ms) "
    "ORDER BY m.event_time, m.key";

/* Prints what the candidate would have paged for; returns how many. */
static long print_alerts(PGconn *conn, const def_t *def, bool as_json)
{
    json_t *list = json_array();
    PGresult *res =
        PQexec(conn, "SELECT kind, key, state, owner, summary FROM steward.alerts "
                     "WHERE kind NOT IN ('blind', 'unloadable') ORDER BY deadline_at, id");
    for (int row = 0; PQresultStatus(res) == PGRES_TUPLES_OK && row < PQntuples(res); row++)
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "kind", PQgetvalue(res, row, 0),
                            "key", PQgetvalue(res, row, 1), "state", PQgetvalue(res, row, 2),
                            "owner", PQgetvalue(res, row, 3), "summary", PQgetvalue(res, row, 4),
                            "open_at_end", 1));
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fprintf(stderr, "steward backtest: %s", PQerrorMessage(conn));
    PQclear(res);

    char states_lit[8192] = "{", ms_lit[4096] = "{";
    size_t sl = 1, ml = 1;
    for (size_t i = 0; i < def->n_states; i++) {
        if (def->states[i].deadline_ms <= 0)
            continue;
        sl += (size_t) snprintf(states_lit + sl, sizeof states_lit - sl, "%s\"%s\"",
                                sl > 1 ? "," : "", def->states[i].name);
        ml += (size_t) snprintf(ms_lit + ml, sizeof ms_lit - ml, "%s%lld", ml > 1 ? "," : "",
                                (long long) def->states[i].deadline_ms);
    }
    snprintf(states_lit + sl, sizeof states_lit - sl, "}");
    snprintf(ms_lit + ml, sizeof ms_lit - ml, "}");
    const char *params[2] = {states_lit, ms_lit};
    res = PQexecParams(conn, late_sql, 2, NULL, params, NULL, NULL, 0);
    for (int row = 0; PQresultStatus(res) == PGRES_TUPLES_OK && row < PQntuples(res); row++) {
        const char *key = PQgetvalue(res, row, 0), *state = PQgetvalue(res, row, 1);
        long state_idx = def_find_state(def, state);
        char took[32], limit[32], summary[512];
        duration_format(strtoll(PQgetvalue(res, row, 3), NULL, 10), took, sizeof took);
        duration_format(strtoll(PQgetvalue(res, row, 4), NULL, 10), limit, sizeof limit);
        const char *owner = state_idx >= 0 ? def_state_owner(def, (size_t) state_idx) : def->owner;
        snprintf(summary, sizeof summary,
                 "%s %s spent %s in %s (deadline %s) before %s: paged %s, then resolved",
                 def->process, key, took, state, limit, PQgetvalue(res, row, 2), owner);
        json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "kind", "deadline",
                                              "key", key, "state", state, "owner", owner, "summary",
                                              summary, "open_at_end", 0));
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fprintf(stderr, "steward backtest: %s", PQerrorMessage(conn));
    PQclear(res);

    long n = (long) json_array_size(list);
    if (as_json) {
        json_dumpf(list, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        printf("alerts the definition would have raised: %ld\n", n);
        size_t i;
        json_t *a;
        json_array_foreach(list, i, a)
        {
            printf("  %-8s %s\n", json_is_true(json_object_get(a, "open_at_end")) ? "open" : "late",
                   json_string_value(json_object_get(a, "summary")));
        }
    }
    json_decref(list);
    return n;
}

int cli_backtest(int argc, char **argv)
{
    static const struct option options[] = {
        {"definition", required_argument, NULL, 'f'},
        {"from", required_argument, NULL, 'F'},
        {"to", required_argument, NULL, 'T'},
        {"brokers", required_argument, NULL, 'b'},
        {"database", required_argument, NULL, 'd'},
        {"kafka", required_argument, NULL, 'k'},
        {"json", no_argument, NULL, 'j'},
        {"keep", no_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *definition = NULL, *from = NULL, *to = NULL, *database = NULL;
    const char *brokers = getenv("STEWARD_KAFKA_BROKERS");
    const char **props = calloc((size_t) argc + 1, sizeof *props);
    size_t n_props = 0;
    int opt, as_json = 0, keep = 0, rc = EXIT_OK;
    char errstr[1024];

    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'f':
            definition = optarg;
            break;
        case 'F':
            from = optarg;
            break;
        case 'T':
            to = optarg;
            break;
        case 'b':
            brokers = optarg;
            break;
        case 'd':
            database = optarg;
            break;
        case 'k':
            props[n_props++] = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'K':
            keep = 1;
            break;
        case 'h':
            fputs(backtest_usage, stdout);
            free(props);
            return EXIT_OK;
        default:
            fputs(backtest_usage, stderr);
            free(props);
            return EXIT_USAGE;
        }
    }
    int64_t from_ms = 0, to_ms = clock_wall_ms();
    const char *problem =
        definition == NULL                      ? "--definition is required"
        : from == NULL                          ? "--from is required"
        : brokers == NULL                       ? "no brokers: give --brokers"
        : !parse_when(from, &from_ms)           ? "--from is neither RFC 3339 nor a duration"
        : to != NULL && !parse_when(to, &to_ms) ? "--to is neither RFC 3339 nor a duration"
        : from_ms >= to_ms                      ? "--from must come before --to"
        : optind < argc                         ? "unexpected arguments"
                                                : NULL;
    if (problem != NULL) {
        fprintf(stderr, "steward backtest: %s\n%s", problem, backtest_usage);
        free(props);
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
        free(props);
        return EXIT_USAGE;
    }

    /* The scratch database, on the same server as the live one. */
    char scratch[64];
    snprintf(scratch, sizeof scratch, "steward_backtest_%d_%ld", (int) getpid(),
             (long) (clock_wall_ms() % 100000));
    const char *server = cli_database_url(database);
    PGconn *admin = db_connect(server, "steward backtest", errstr, sizeof errstr);
    char *scratch_url = NULL;
    PGconn *conn = NULL;
    if (admin != NULL) {
        char *ident = PQescapeIdentifier(admin, scratch, strlen(scratch));
        char sql[256];
        snprintf(sql, sizeof sql, "CREATE DATABASE %s", ident);
        PQfreemem(ident);
        if (db_exec(admin, "creating the scratch database", sql, 0, NULL, errstr, sizeof errstr) ==
            ERR_OK) {
            scratch_url = db_with_dbname(server, scratch);
            conn = db_connect(scratch_url, "steward backtest", errstr, sizeof errstr);
        }
    }
    migrate_result_t migrated;
    route_table_t *routes = NULL;
    if (conn == NULL || migrate_apply(conn, &migrated, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto out;
    }
    /* Nobody is paged from a backtest: alerts are only recorded. */
    json_t *quiet = json_pack("{s:[{s:s}]}", "default", "type", "log");
    routes = route_table_new(quiet, errstr, sizeof errstr);
    json_decref(quiet);

    char group[128], from_text[40];
    snprintf(group, sizeof group, "%s", scratch);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    rfc3339_format_seconds(from_ms, from_text, sizeof from_text);
    fprintf(stderr, "steward backtest: replaying %s from %s into %s\n", definition, from_text,
            scratch);
    log_set_level(LOG_LEVEL_WARN);
    intake_config_t icfg = {
        .brokers = brokers,
        .group = group,
        .conninfo = scratch_url,
        .replica = "backtest",
        .batch_max = INTAKE_DEFAULT_BATCH_MAX,
        .batch_ms = INTAKE_DEFAULT_BATCH_MS,
        .limits = {DECODE_DEFAULT_MAX_BYTES, DECODE_DEFAULT_MAX_DEPTH},
        .kafka_props = props,
        .n_kafka_props = n_props,
        .routes = routes,
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
    sched_config_t scfg = {scratch_url, group, 1000, 0, 3650LL * 86400000, "steward", to_ms};
    sched_t *sched = sched_new(&scfg, defs, routes, errstr, sizeof errstr);
    sched_stats_t stats;
    if (sched == NULL || sched_tick(sched, &stats, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward backtest: %s\n", errstr);
        rc = EXIT_RUNTIME;
        sched_free(sched);
        goto out;
    }
    sched_free(sched);

    print_alerts(conn, def_set_latest(defs, defs->defs[0]->process), as_json);
    if (!as_json) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        printf("\n");
        fflush(stdout);
        const char *report_argv[] = {
            self, "report", "--database", scratch_url, "--definitions", definition, NULL};
        pid_t pid;
        if (n > 0 &&
            posix_spawn(&pid, self, NULL, NULL, (char *const *) report_argv, environ) == 0) {
            int status;
            waitpid(pid, &status, 0);
        }
    }

out:
    if (conn != NULL)
        PQfinish(conn);
    if (admin != NULL && scratch_url != NULL && !keep) {
        char *ident = PQescapeIdentifier(admin, scratch, strlen(scratch));
        char sql[256];
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", ident);
        PQfreemem(ident);
        if (db_exec(admin, "dropping the scratch database", sql, 0, NULL, errstr, sizeof errstr) !=
            ERR_OK)
            fprintf(stderr, "steward backtest: %s\n", errstr);
    } else if (keep && scratch_url != NULL) {
        fprintf(stderr, "steward backtest: kept the scratch database %s\n", scratch);
    }
    if (admin != NULL)
        PQfinish(admin);
    free(scratch_url);
    route_table_free(routes);
    def_problems_clear(&problems);
    def_set_free(defs);
    free(props);
    return rc;
}
