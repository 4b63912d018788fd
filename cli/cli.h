/*
 * cli - the steward subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit code: EXIT_OK,
 * EXIT_RUNTIME or EXIT_USAGE (see err.h). Each prints its own --help.
 */
#ifndef STEWARD_CLI_H
#define STEWARD_CLI_H

#include "manager/operator/actions.h"

#include "manager/config/config.h"
#include "manager/intake/schemas.h"
#include "registry/registry.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

/* Where steward run and steward backtest find the writer schemas of
 * confluent_avro topics: the config's schema_registry. */
typedef struct cli_schemas {
    registry_t *registry; /* NULL: none configured */
    schemas_t *schemas;   /* over registry; NULL with it */
} cli_schemas_t;

/*
 * Opens the config's schema registry (or directory) into *out: both NULL
 * when neither schema_registry.url nor .directory is set. When `defs`
 * reads a confluent_avro topic and none is set, or the settings are bad,
 * returns false with the reason in errstr.
 */
bool cli_schemas_open(const config_t *cfg, const def_set_t *defs, cli_schemas_t *out, char *errstr,
                      size_t errstr_size);
void cli_schemas_close(cli_schemas_t *s);

int cli_check(int argc, char **argv);
int cli_migrate(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_stuck(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_backtest(int argc, char **argv);
int cli_prune(int argc, char **argv);
int cli_discover(int argc, char **argv);
int cli_graph(int argc, char **argv);

/* Runs the operator verb of `def`, a row of action_verbs[] (borrowed), as
 * `steward NAME` with argv[0] its name (cli_actions.c); see
 * manager/operator/actions.h. Returns the exit code. */
int cli_verb(const action_verb_def_t *def, int argc, char **argv);

/* The database connection string: --database, else STEWARD_DATABASE_URL,
 * else "" (libpq then follows the PG* variables). Borrowed. */
const char *cli_database_url(const char *flag_value);

/* Connects to cli_database_url(flag_value) as application `cmd` ("steward
 * stuck"); NULL, the reason printed to stderr as "cmd: reason", on failure. */
PGconn *cli_connect(const char *flag_value, const char *cmd);

/* True, with "cmd: unexpected argument" and the usage printed to stderr,
 * when arguments are left after the options (optind < argc). */
bool cli_extra_args(int argc, char **argv, const char *cmd, const char *usage);

/* The end of an option switch, one wording for every verb: for 'h'
 * (--help) prints usage to stdout and returns EXIT_OK; for '?' prints
 * "cmd: unknown option 'X'", for ':' "cmd: option 'X' needs a value", then
 * the usage, to stderr, and returns EXIT_USAGE (for anything else the
 * usage alone). getopt must be quiet: opterr = 0 and a short option string
 * that starts with ':' (CLI_SHORT_OPTIONS). */
int cli_help_or_usage(const char *cmd, int opt, char **argv, const char *usage);

/* An instant given as RFC 3339, or as a duration meaning that long before
 * now (the wall clock), in *ms; false when text is neither (*ms may then
 * be anything). */
bool cli_parse_when(const char *text, int64_t *ms);

/* Prints doc to stdout as indented JSON in its own order, then a newline. */
void cli_print_json(const json_t *doc);

#endif
