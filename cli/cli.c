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
#include <string.h>

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

bool cli_schemas_open(const config_t *cfg, const def_set_t *defs, cli_schemas_t *out, char *errstr,
                      size_t errstr_size)
{
    memset(out, 0, sizeof *out);
    const def_event_t *ev = schemas_avro_event(defs);
    if (cfg->registry_url[0] == '\0' && cfg->registry_directory[0] == '\0') {
        if (ev == NULL)
            return true;
        snprintf(errstr, errstr_size,
                 "event %s's topic %s has \"format\": \"confluent_avro\", but no schema "
                 "registry is configured: set schema_registry.url (or schema_registry.directory "
                 "for <id>.avsc files)",
                 ev->name, ev->topic);
        return false;
    }
    registry_config_t rcfg = {
        .url = cfg->registry_url[0] != '\0' ? cfg->registry_url : NULL,
        .username = cfg->registry_username,
        .password = cfg->registry_password,
        .ca_file = cfg->registry_ca_file,
        .timeout_ms = (int) cfg->registry_timeout_ms,
        .directory = cfg->registry_directory,
    };
    if ((out->registry = registry_new(&rcfg, errstr, errstr_size)) == NULL)
        return false;
    if ((out->schemas = schemas_new(out->registry)) == NULL) {
        registry_free(out->registry);
        out->registry = NULL;
        snprintf(errstr, errstr_size, "out of memory");
        return false;
    }
    return true;
}

void cli_schemas_close(cli_schemas_t *s)
{
    schemas_free(s->schemas);
    registry_free(s->registry);
    memset(s, 0, sizeof *s);
}
