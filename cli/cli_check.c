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
 */
#include "cli/cli.h"
#include "common/err.h"
#include "definitions/def.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: steward check [--] PATH...\n"
                 "\n"
                 "Validates process definitions. A PATH is a definition file or a directory\n"
                 "whose *.json files are read in name order. Every problem is printed as\n"
                 "FILE: JSON-POINTER: MESSAGE on stderr.\n"
                 "\n"
                 "options:\n"
                 "  -h, --help  print this help\n"
                 "\n"
                 "exit status: 0 when every definition is valid, 2 otherwise.\n");
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
    const char **paths = calloc((size_t) argc + 1, sizeof *paths);
    size_t n_paths = 0;
    bool options_done = false;
    int rc = EXIT_USAGE;
    def_problems_t problems = {0};
    size_t files = 0;

    if (paths == NULL) {
        fprintf(stderr, "steward check: out of memory\n");
        return EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)) {
            usage(stdout);
            rc = EXIT_OK;
            goto done;
        }
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = true;
            continue;
        }
        if (!options_done && arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "steward check: unknown option '%s'\n", arg);
            usage(stderr);
            goto done;
        }
        paths[n_paths++] = arg;
    }
    if (n_paths == 0) {
        fprintf(stderr, "steward check: no definition files or directories given\n");
        usage(stderr);
        goto done;
    }

    def_set_t *set = def_set_load(paths, n_paths, &problems, &files);
    if (set != NULL) {
        for (size_t i = 0; i < set->n; i++) {
            const def_t *d = set->defs[i];
            printf("%s: %s version %d (%s): %zu events, %zu states\n", d->source, d->process,
                   d->version, d->mode == DEF_MODE_ACTIVE ? "active" : "shadow", d->n_events,
                   d->n_states);
        }
        printf("checked %zu file%s: all valid\n", files, files == 1 ? "" : "s");
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
    def_problems_clear(&problems);

done:
    free(paths);
    return rc;
}
