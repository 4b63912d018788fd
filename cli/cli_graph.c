/*
 * cli_graph - `steward graph`: a process definition drawn as DOT, Mermaid
 * or SVG (definitions/graph), from a file or from the newest version the
 * database has recorded.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/db.h"
#include "common/err.h"
#include "definitions/def.h"
#include "definitions/graph.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char graph_usage[] =
    "usage: steward graph PROCESS|FILE [--format dot|mermaid|svg] [--config FILE]\n"
    "                     [--database CONNINFO]\n"
    "\n"
    "Draws a process definition: its states and transitions (`any` transitions\n"
    "from an \"any state\" node, on_timeout dashed), terminal states marked, each\n"
    "state's deadline, owner, command and lease written in its box. FILE is a\n"
    "definition file; PROCESS (no such file) is the newest version recorded in\n"
    "steward.definitions. Prints to stdout.\n"
    "\n"
    "  --format FORMAT       dot (Graphviz, the default), mermaid or svg\n" CLI_CONFIG_USAGE
    "  --json                print {\"process\", \"version\", \"format\", \"graph\"}, the\n"
    "                        drawing as a JSON string\n" CLI_HELP_USAGE;

/* The newest recorded version of `process`, loaded; NULL with a message on stderr. */
static def_t *load_recorded(cli_opts_t *o, const char *process, int *rc)
{
    PGconn *conn = cli_opts_connect(o, true, rc);
    if (conn == NULL)
        return NULL;
    const char *params[1] = {process};
    PGresult *res = PQexecParams(conn,
                                 "SELECT document::text FROM steward.definitions "
                                 "WHERE process = $1 ORDER BY version DESC LIMIT 1",
                                 1, NULL, params, NULL, NULL, 0);
    def_t *def = NULL;
    *rc = EXIT_RUNTIME;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "%s: reading the definitions: %s", o->cmd, PQerrorMessage(conn));
    } else if (PQntuples(res) == 0) {
        fprintf(stderr, "%s: no file %s and no process %s in steward.definitions\n", o->cmd,
                process, process);
    } else {
        def_problems_t problems = {0};
        const char *doc = PQgetvalue(res, 0, 0);
        def = def_load_json(doc, strlen(doc), "steward.definitions", &problems);
        if (def == NULL)
            fprintf(stderr, "%s: the recorded version of %s no longer loads: %s\n", o->cmd, process,
                    problems.n > 0 ? problems.items[0].message : "it does not validate");
        def_problems_clear(&problems);
    }
    PQclear(res);
    PQfinish(conn);
    return def;
}

int cli_graph(int argc, char **argv)
{
    static const struct option options[] = {
        {"format", required_argument, NULL, 'f'},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    graph_format_t format = GRAPH_DOT;
    const char *format_name = "dot";
    int opt, rc;
    cli_opts_t o;

    if (!cli_opts_init(&o, "steward graph", graph_usage, argc, argv))
        return EXIT_RUNTIME;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        if (opt == 'f') {
            if (!graph_format_parse(optarg, &format)) {
                fprintf(stderr, "steward graph: --format %s: expected dot, mermaid or svg\n%s",
                        optarg, graph_usage);
                cli_opts_free(&o);
                return EXIT_USAGE;
            }
            format_name = optarg;
        } else if ((rc = cli_opts_take(&o, opt, optarg)) >= 0) {
            cli_opts_free(&o);
            return rc;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "steward graph: expected one PROCESS or FILE\n%s", graph_usage);
        cli_opts_free(&o);
        return EXIT_USAGE;
    }
    const char *what = argv[optind];
    def_t *def = NULL;
    struct stat sb;
    rc = EXIT_OK;
    if (stat(what, &sb) == 0 || strchr(what, '/') != NULL || strstr(what, ".json") != NULL) {
        def_problems_t problems = {0};
        def = def_load_file(what, &problems);
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "%s:%s: %s\n", problems.items[i].file, problems.items[i].pointer,
                    problems.items[i].message);
        def_problems_clear(&problems);
        if (def == NULL)
            rc = EXIT_USAGE;
    } else {
        def = load_recorded(&o, what, &rc);
    }
    if (def != NULL) {
        char *out = graph_render(def, format);
        if (out == NULL) {
            fprintf(stderr, "steward graph: out of memory\n");
            rc = EXIT_RUNTIME;
        } else if (o.json) {
            json_t *doc = json_pack("{s:s, s:i, s:s, s:s}", "process", def->process, "version",
                                    def->version, "format", format_name, "graph", out);
            rc = doc != NULL && json_dumpf(doc, stdout, JSON_INDENT(2)) == 0 ? EXIT_OK
                                                                             : EXIT_RUNTIME;
            if (rc == EXIT_OK)
                fputc('\n', stdout);
            else
                fprintf(stderr, "steward graph: out of memory\n");
            json_decref(doc);
        } else {
            fputs(out, stdout);
            rc = EXIT_OK;
        }
        free(out);
    }
    def_free(def);
    cli_opts_free(&o);
    return rc;
}
