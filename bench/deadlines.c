/*
 * steward-deadlines - bench/deadlines' timer: runs the deadline scheduler's
 * passes (the code `steward run` runs on its scheduler thread) against a
 * seeded database until no deadline is due, and prints how long opening
 * every alert and queueing its notifications took.
 *
 *   steward-deadlines CONNINFO GROUP DEFINITION [TRANSACTIONS]
 *
 * TRANSACTIONS is scheduler.transactions (default: steward's default).
 */
#include "common/log.h"
#include "manager/sinks/routes.h"
#include "manager/timing/scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    char errstr[1024];
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: steward-deadlines CONNINFO GROUP DEFINITION [TRANSACTIONS]\n");
        return 2;
    }
    char *end = NULL;
    long transactions = argc == 5 ? strtol(argv[4], &end, 10) : 0;
    if (argc == 5 && (*end != '\0' || transactions < 1 || transactions > SCHED_MAX_TRANSACTIONS)) {
        fprintf(stderr, "steward-deadlines: TRANSACTIONS is a whole number from 1 to %d\n",
                SCHED_MAX_TRANSACTIONS);
        return 2;
    }
    log_set_level(LOG_LEVEL_WARN);
    def_problems_t problems = {0};
    const char *paths[1] = {argv[3]};
    def_set_t *defs = def_set_load(paths, 1, &problems, NULL);
    json_t *routes_json = json_pack("{s:[{s:s}]}", "default", "type", "log");
    route_table_t *routes = route_table_new(routes_json, errstr, sizeof errstr);
    json_decref(routes_json);
    if (defs == NULL || routes == NULL) {
        fprintf(stderr, "steward-deadlines: bad definition or routes\n");
        return 2;
    }
    /* A blind check every pass would be noise: put it past the run. */
    sched_config_t cfg = {.conninfo = argv[1],
                          .group = argv[2],
                          .blind_after_ms = 3650LL * 86400000,
                          .blind_owner = "steward",
                          .transactions = (size_t) transactions};
    sched_t *sched = sched_new(&cfg, defs, routes, errstr, sizeof errstr);
    if (sched == NULL) {
        fprintf(stderr, "steward-deadlines: %s\n", errstr);
        return 1;
    }
    size_t judged = 0, opened = 0, passes = 0;
    double start = seconds();
    for (;;) {
        sched_stats_t stats;
        if (sched_tick(sched, &stats, errstr, sizeof errstr) != ERR_OK) {
            fprintf(stderr, "steward-deadlines: %s\n", errstr);
            return 1;
        }
        passes++;
        judged += stats.judged;
        opened += stats.opened;
        if (stats.judged == 0)
            break;
    }
    double took = seconds() - start;
    printf("judged %zu instances, opened %zu alerts in %.3f s over %zu passes, %s transaction(s) "
           "at once: %.0f alerts/s\n",
           judged, opened, took, passes, argc == 5 ? argv[4] : "the default number of",
           took > 0 ? opened / took : 0.0);
    sched_free(sched);
    route_table_free(routes);
    def_set_free(defs);
    def_problems_clear(&problems);
    return 0;
}
