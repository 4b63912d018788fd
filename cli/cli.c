/*
 * cli - what the subcommands share: where the database is, connecting to
 * it, refusing stray arguments, reading an instant, printing JSON. See
 * cli.h.
 */
#include "cli/cli.h"

#include "common/clock.h"
#include "common/db.h"
#include "common/err.h"
#include "common/rfc3339.h"
#include "definitions/duration.h"
#include "manager/operator/query.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

const char *cli_database_url(const char *flag_value)
{
    if (flag_value != NULL)
        return flag_value;
    const char *env = getenv("STEWARD_DATABASE_URL");
    return env != NULL ? env : "";
}

PGconn *cli_connect(const char *flag_value, const char *cmd)
{
    char errstr[1024];
    PGconn *conn = db_connect(cli_database_url(flag_value), cmd, errstr, sizeof errstr);
    if (conn == NULL)
        fprintf(stderr, "%s: %s\n", cmd, errstr);
    return conn;
}

bool cli_extra_args(int argc, char **argv, const char *cmd, const char *usage)
{
    if (optind >= argc)
        return false;
    fprintf(stderr, "%s: unexpected argument '%s'\n%s", cmd, argv[optind], usage);
    return true;
}

int cli_help_or_usage(const char *cmd, int opt, char **argv, const char *usage)
{
    if (opt == '?' || opt == ':') {
        /* getopt left the offending word behind optind, or in optopt for
         * a short option. */
        char shortopt[3] = {'-', (char) optopt, '\0'};
        const char *word = optopt > 0 && optopt < 128 ? shortopt : argv[optind - 1];
        if (opt == ':')
            fprintf(stderr, "%s: option '%s' needs a value\n", cmd, word);
        else
            fprintf(stderr, "%s: unknown option '%s'\n", cmd, word);
    }
    fputs(usage, opt == 'h' ? stdout : stderr);
    return opt == 'h' ? EXIT_OK : EXIT_USAGE;
}

void cli_print_json(const json_t *doc)
{
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | QUERY_REAL_PRECISION);
    printf("\n");
}

bool cli_parse_when(const char *text, int64_t *ms)
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
