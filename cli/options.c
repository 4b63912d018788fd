/*
 * options - the options the subcommands share; see options.h.
 */
#include "cli/options.h"

#include "cli/cli.h"
#include "common/db.h"
#include "common/err.h"
#include "schema/migrate.h"

#include <stdio.h>
#include <stdlib.h>

bool cli_opts_init(cli_opts_t *o, const char *cmd, const char *usage, int argc, char **argv)
{
    *o = (cli_opts_t){
        .cmd = cmd, .usage = usage, .argv = argv, .config_path = getenv("STEWARD_CONFIG")};
    /* Every argument could be a setting: the array never grows. */
    o->flags = calloc((size_t) argc + 2, sizeof *o->flags);
    optind = 1;
    opterr = 0;
    if (o->flags == NULL) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        return false;
    }
    return true;
}

void cli_opts_free(cli_opts_t *o)
{
    free(o->flags);
    config_free(o->cfg);
    o->flags = NULL;
    o->cfg = NULL;
}

bool cli_opts_add(cli_opts_t *o, const char *key, const char *value)
{
    if (o->flags == NULL)
        return false;
    o->flags[o->n_flags++] = (config_flag_t){key, value};
    return true;
}

int cli_opts_take(cli_opts_t *o, int opt, const char *arg)
{
    switch (opt) {
    case CLI_OPT_CONFIG:
        o->config_path = arg;
        return -1;
    case CLI_OPT_DATABASE:
        cli_opts_add(o, "database", arg);
        return -1;
    case CLI_OPT_SET:
        cli_opts_add(o, "set", arg);
        return -1;
    case CLI_OPT_JSON:
        o->json = true;
        return -1;
    default:
        return cli_help_or_usage(o->cmd, opt, o->argv, o->usage);
    }
}

int cli_opts_next(cli_opts_t *o, int argc, char **argv, const struct option *options, bool operands,
                  int *exit_code)
{
    int opt;
    *exit_code = -1;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        bool common = opt == 'h' || opt == '?' || opt == ':' ||
                      (opt >= CLI_OPT_CONFIG && opt <= CLI_OPT_JSON);
        if (!common)
            return opt;
        if ((*exit_code = cli_opts_take(o, opt, optarg)) >= 0)
            return -1;
    }
    if (!operands && cli_extra_args(argc, argv, o->cmd, o->usage))
        *exit_code = EXIT_USAGE;
    return -1;
}

const config_t *cli_opts_config(cli_opts_t *o)
{
    char errstr[1024];
    err_class_t cls;

    if (o->cfg != NULL)
        return o->cfg;
    o->cfg = config_build(o->config_path, o->flags, o->n_flags, &cls, errstr, sizeof errstr);
    if (o->cfg == NULL)
        fprintf(stderr, "%s: config: %s\n", o->cmd, cls == ERR_FATAL ? "out of memory" : errstr);
    return o->cfg;
}

PGconn *cli_opts_connect(cli_opts_t *o, bool need_schema, int *exit_code)
{
    char errstr[1024];
    const config_t *cfg = cli_opts_config(o);

    *exit_code = EXIT_USAGE;
    if (cfg == NULL)
        return NULL;
    *exit_code = EXIT_RUNTIME;
    PGconn *conn = db_connect(cfg->database, o->cmd, errstr, sizeof errstr);
    if (conn == NULL) {
        fprintf(stderr, "%s: %s\n", o->cmd, errstr);
        return NULL;
    }
    if (need_schema && migrate_require(conn, errstr, sizeof errstr) != ERR_OK) {
        fprintf(stderr, "%s: %s\n", o->cmd, errstr);
        PQfinish(conn);
        return NULL;
    }
    *exit_code = EXIT_OK;
    return conn;
}
