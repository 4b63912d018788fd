/*
 * cli_check - `steward check PATH...`: validates process definitions
 * without touching a database or a broker, so it can run in CI before a
 * definition is deployed.
 *
 * Each problem goes to stderr as "FILE: POINTER: MESSAGE" (POINTER is the
 * JSON pointer of the offending value, empty for the whole file), followed
 * by a count. When every file is valid, stdout gets one line per
 * definition and a summary. Exit codes: EXIT_OK when all are valid,
 * EXIT_USAGE for problems or bad arguments.
 *
 * With a database (--database, or --config naming one) it also refuses a
 * definition whose process and version are recorded there with a different
 * document: what `steward run` refuses at start or on SIGHUP, caught in CI
 * instead. Only then does it connect; without, it stays offline.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/def.h"
#include "schema/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char check_usage[] =
    "usage: steward check [--database CONNINFO | --config FILE] [--json] [--] PATH...\n"
    "\n"
    "Validates process definitions. A PATH is a definition file or a directory\n"
    "whose *.json files are read in name order. Every problem is printed as\n"
    "FILE: JSON-POINTER: MESSAGE on stderr.\n"
    "\n"
    "With a database (--database, or a --config that names one), a definition\n"
    "whose process and version are already recorded there with a different\n"
    "document is a problem too, as steward run would refuse it; without one,\n"
    "nothing is connected to ($STEWARD_CONFIG alone does not connect).\n"
    "\n" CLI_COMMON_USAGE "\n"
    "exit status: 0 when every definition is valid, 2 otherwise (1 when the\n"
    "database cannot be read).\n";

/*
 * Appends a problem for every definition of set recorded in the database
 * under its version with another document (compared as jsonb, so layout
 * is no change). A database without the steward schema has recorded
 * nothing.
 */
static err_class_t check_recorded(PGconn *conn, const def_set_t *set, def_problems_t *problems,
                                  char *errstr, size_t errstr_size)
{
    int version = 0;
    err_class_t cls = migrate_current(conn, &version, errstr, errstr_size);
    for (size_t i = 0; cls == ERR_OK && version > 0 && i < set->n; i++) {
        const def_t *d = set->defs[i];
        char number[16];
        char *doc = json_dumps(d->document, JSON_COMPACT);
        snprintf(number, sizeof number, "%d", d->version);
        const char *params[3] = {d->process, number, doc};
        PGresult *res = db_query(conn, "reading steward.definitions",
                                 "SELECT document = $3::jsonb FROM steward.definitions "
                                 "WHERE process = $1 AND version = $2::int",
                                 3, params, &cls, errstr, errstr_size);
        free(doc);
        if (res == NULL)
            break;
        if (PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
            char message[512];
            snprintf(message, sizeof message,
                     "version %d of process %s is already recorded in database %s with a "
                     "different document; instances keep the version they started with, so "
                     "give a changed definition a new version",
                     d->version, d->process, PQdb(conn));
            def_problems_add(problems, d->source, "/version", "%s", message);
        }
        PQclear(res);
    }
    return cls;
}

/* How many distinct files the problems name. */
static size_t count_files(const def_problems_t *problems)
{
    size_t n = 0;
    for (size_t i = 0; i < problems->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(problems->items[j].file, problems->items[i].file) == 0;
        if (!seen)
            n++;
    }
    return n;
}

int cli_check(int argc, char **argv)
{
    static const struct option options[] = {
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    const char **paths = calloc((size_t) argc + 1, sizeof *paths);
    size_t n_paths = 0;
    int rc = EXIT_USAGE, opt;
    def_problems_t problems = {0};
    size_t files = 0;
    char errstr[1024];
    cli_opts_t o;
    PGconn *conn = NULL;
    bool have_config;

    if (paths == NULL || !cli_opts_init(&o, "steward check", check_usage, argc, argv)) {
        fprintf(stderr, "steward check: out of memory\n");
        free(paths);
        return EXIT_USAGE;
    }
    /* Only an explicit --config: $STEWARD_CONFIG alone keeps check offline,
     * as CI needs it without a database. */
    o.config_path = NULL;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        int taken = cli_opts_take(&o, opt, optarg);
        if (taken >= 0) {
            rc = taken;
            goto done;
        }
    }
    have_config = o.config_path != NULL || o.n_flags > 0;
    for (int i = optind; i < argc; i++)
        paths[n_paths++] = argv[i];
    if (n_paths == 0) {
        fprintf(stderr, "steward check: no definition files or directories given\n");
        fputs(check_usage, stderr);
        goto done;
    }
    if (have_config) {
        const config_t *cfg = cli_opts_config(&o);
        if (cfg == NULL)
            goto done;
        if (cfg->database[0] != '\0' && (conn = cli_opts_connect(&o, false, &rc)) == NULL)
            goto done;
        rc = EXIT_USAGE;
    }

    def_set_t *set = def_set_load(paths, n_paths, &problems, &files);
    if (set != NULL && conn != NULL &&
        check_recorded(conn, set, &problems, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "steward check: %s\n", errstr);
        def_set_free(set);
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (set != NULL && problems.n > 0) {
        def_set_free(set);
        set = NULL;
    }
    if (set != NULL) {
        json_t *list = json_array();
        for (size_t i = 0; i < set->n; i++) {
            const def_t *d = set->defs[i];
            if (o.json)
                json_array_append_new(
                    list, json_pack("{s:s, s:s, s:i, s:s, s:I, s:I}", "file", d->source, "process",
                                    d->process, "version", d->version, "mode",
                                    d->mode == DEF_MODE_ACTIVE ? "active" : "shadow", "events",
                                    (json_int_t) d->n_events, "states", (json_int_t) d->n_states));
            else
                printf("%s: %s version %d (%s): %zu events, %zu states\n", d->source, d->process,
                       d->version, d->mode == DEF_MODE_ACTIVE ? "active" : "shadow", d->n_events,
                       d->n_states);
        }
        if (o.json) {
            json_t *doc = json_pack("{s:b, s:I, s:o}", "valid", 1, "files", (json_int_t) files,
                                    "definitions", list);
            cli_print_json(doc);
            json_decref(doc);
        } else {
            json_decref(list);
            printf("checked %zu file%s: all valid\n", files, files == 1 ? "" : "s");
        }
        rc = EXIT_OK;
    } else {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "%s: %s: %s\n", problems.items[i].file, problems.items[i].pointer,
                    problems.items[i].message);
        size_t bad = count_files(&problems);
        if (problems.n == 0) /* every problem was lost to a failed allocation */
            fprintf(stderr, "steward check: out of memory\n");
        else
            fprintf(stderr, "%zu problem%s in %zu file%s (%zu file%s checked)\n", problems.n,
                    problems.n == 1 ? "" : "s", bad, bad == 1 ? "" : "s", files,
                    files == 1 ? "" : "s");
    }
    def_set_free(set);

done:
    def_problems_clear(&problems);
    if (conn != NULL)
        PQfinish(conn);
    cli_opts_free(&o);
    free(paths);
    return rc;
}
