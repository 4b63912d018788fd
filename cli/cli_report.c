/*
 * cli_report - `steward report`: per process and state, what the history
 * says: entries, exits, open and overdue instances, latency percentiles,
 * the alerts the current deadline raises per day, a suggested deadline,
 * the volume arithmetic, and in shadow mode the commands active mode would
 * have sent. The figures are defined in docs/report.md.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/def.h"
#include "definitions/duration.h"
#include "shadow/report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char report_usage[] =
    "usage: steward report [--process NAME] [--since DURATION] [--json]\n"
    "                      [--definitions PATH] [--config FILE] [--database CONNINFO]\n"
    "\n"
    "Per process and state, from steward.history: how many instances entered,\n"
    "left and are still in each state, the latency percentiles (p50, p90, p99,\n"
    "max), how many alerts per day the current deadline raises, a suggested\n"
    "deadline with the alerts it would raise, the instances started and stalled\n"
    "per day, and for shadow-mode processes the commands active mode would have\n"
    "sent. docs/report.md defines every figure.\n"
    "\n"
    "  --process NAME        only this process\n"
    "  --since DURATION      only the last DURATION of event time (7d, 12h...);\n"
    "                        default: all history\n"
    "  --definitions PATH    the definition files to judge against\n"
    "                        ($STEWARD_DEFINITIONS, the config's definitions);\n"
    "                        default: the latest version of each process\n"
    "                        recorded in steward.definitions\n" CLI_COMMON_USAGE "\n"
    "exit status: 0 ok, 1 database failure or unknown process, 2 usage or\n"
    "definition error.\n";

static int compare_process(const void *a, const void *b)
{
    const def_t *const *x = a, *const *y = b;
    return strcmp((*x)->process, (*y)->process);
}

/*
 * The latest version of each process in `set` (only `process` when not
 * NULL), by name, into a new array of borrowed pointers (free() it) with
 * the count in *n. NULL with *n = 0 when none matches or memory runs out.
 */
static const def_t **pick_latest(const def_set_t *set, const char *process, size_t *n)
{
    const def_t **picked = calloc(set->n + 1, sizeof *picked);
    *n = 0;
    if (picked == NULL)
        return NULL;
    for (size_t i = 0; i < set->n; i++) {
        const def_t *d = set->defs[i];
        if ((process == NULL || strcmp(d->process, process) == 0) &&
            def_set_latest(set, d->process) == d)
            picked[(*n)++] = d;
    }
    qsort(picked, *n, sizeof *picked, compare_process);
    return picked;
}

int cli_report(int argc, char **argv)
{
    static const struct option options[] = {
        {"process", required_argument, NULL, 'p'},
        {"since", required_argument, NULL, 's'},
        {"definitions", required_argument, NULL, 'f'},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    const char *process = NULL, *since_text = NULL, *path = NULL;
    int opt, rc;
    char errstr[1024];
    cli_opts_t o;

    if (!cli_opts_init(&o, "steward report", report_usage, argc, argv))
        return EXIT_RUNTIME;
    while ((opt = cli_opts_next(&o, argc, argv, options, false, &rc)) != -1) {
        if (opt == 'p')
            process = optarg;
        else if (opt == 's')
            since_text = optarg;
        else if (opt == 'f')
            cli_opts_add(&o, "definitions", optarg);
    }
    if (rc >= 0 || cli_opts_config(&o) == NULL) {
        cli_opts_free(&o);
        return rc >= 0 ? rc : EXIT_USAGE;
    }
    if (o.cfg->definitions != NULL && *o.cfg->definitions != '\0')
        path = o.cfg->definitions;

    report_options_t opts = {.since_ms = 0, .since_text = since_text};
    if (since_text != NULL) {
        if (!duration_parse(since_text, &opts.since_ms, errstr, sizeof errstr)) {
            fprintf(stderr, "steward report: --since '%s' is not a duration: %s\n", since_text,
                    errstr);
            cli_opts_free(&o);
            return EXIT_USAGE;
        }
        if (opts.since_ms <= 0) {
            fprintf(stderr,
                    "steward report: --since '%s' is an empty window: give a duration "
                    "longer than 0, or leave --since out for all history\n",
                    since_text);
            cli_opts_free(&o);
            return EXIT_USAGE;
        }
    }
    opts.definitions = path != NULL ? path : "steward.definitions";

    /* Files first: a definition error is the user's to fix, whatever the
     * database says. */
    def_set_t *set = NULL;
    if (path != NULL) {
        def_problems_t problems = {0};
        set = def_set_load(&path, 1, &problems, NULL);
        if (set == NULL) {
            for (size_t i = 0; i < problems.n; i++)
                fprintf(stderr, "%s: %s: %s\n", problems.items[i].file, problems.items[i].pointer,
                        problems.items[i].message);
            fprintf(stderr, "steward report: invalid definitions in %s\n", path);
            def_problems_clear(&problems);
            cli_opts_free(&o);
            return EXIT_USAGE;
        }
    }

    const def_t **defs = NULL;
    size_t n_defs = 0;
    json_t *doc = NULL;
    PGconn *conn = cli_opts_connect(&o, true, &rc);
    if (conn == NULL)
        goto done;
    rc = EXIT_OK;
    if (set == NULL && report_load_recorded(conn, process, &set, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward report: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    defs = pick_latest(set, process, &n_defs);
    if (defs == NULL) {
        fprintf(stderr, "steward report: out of memory\n");
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (process != NULL && n_defs == 0) {
        fprintf(stderr, "steward report: no process %s in %s\n", process, opts.definitions);
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (report_build(conn, defs, n_defs, &opts, &doc, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward report: %s\n", errstr);
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (o.json) {
        cli_print_json(doc);
    } else {
        report_print_text(doc, stdout);
    }

done:
    json_decref(doc);
    free(defs);
    def_set_free(set);
    if (conn != NULL)
        PQfinish(conn);
    cli_opts_free(&o);
    return rc;
}
