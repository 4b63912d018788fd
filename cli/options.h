/*
 * options - the options every subcommand shares, parsed in one place:
 * --config FILE (else $STEWARD_CONFIG), --database CONNINFO, --set
 * KEY=VALUE, --json and -h/--help. A verb lists CLI_COMMON_OPTIONS in its
 * getopt_long table (with CLI_SHORT_OPTIONS as the short string), hands
 * every option it does not know itself to cli_opts_take(), and then asks
 * cli_opts_config() / cli_opts_connect() for the configuration and the
 * database, so every verb reads the same file, environment and
 * `database_file` secret as `steward run`.
 *
 * Single-threaded: getopt's globals are used. A cli_opts_t borrows argv.
 */
#ifndef STEWARD_CLI_OPTIONS_H
#define STEWARD_CLI_OPTIONS_H

#include "manager/config/config.h"

#include <getopt.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* Option codes above any character, so they never clash with a verb's;
 * CLI_OPT_CONFIG to CLI_OPT_JSON are the common ones (cli_opts_next()). */
enum {
    CLI_OPT_CONFIG = 0x1000,
    CLI_OPT_DATABASE,
    CLI_OPT_SET,
    CLI_OPT_JSON,
};

/* ':' first: getopt stays quiet and cli_opts_take() names the problem
 * as "steward VERB: ...", the same in every verb. */
#define CLI_SHORT_OPTIONS ":h"

#define CLI_COMMON_OPTIONS                                                                         \
    {"config", required_argument, NULL, CLI_OPT_CONFIG},                                           \
        {"database", required_argument, NULL, CLI_OPT_DATABASE},                                   \
        {"set", required_argument, NULL, CLI_OPT_SET}, {"json", no_argument, NULL, CLI_OPT_JSON},  \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* The help lines for the common options, for a verb's usage text: all of
 * them (CLI_COMMON_USAGE), or the three parts around --json's line for a
 * verb whose --json prints something else. */
#define CLI_CONFIG_USAGE                                                                           \
    "  --config FILE         a JSON config file ($STEWARD_CONFIG)\n"                               \
    "  --database CONNINFO   libpq connection string ($STEWARD_DATABASE_URL,\n"                    \
    "                        or the config's database / database_file)\n"                          \
    "  --set KEY=VALUE       any config key (KEY_file: a secret's file), e.g.\n"                   \
    "                        retention.history=60d\n"
#define CLI_JSON_USAGE   "  --json                print one JSON object instead of text\n"
#define CLI_HELP_USAGE   "  -h, --help            this help\n"
#define CLI_COMMON_USAGE CLI_CONFIG_USAGE CLI_JSON_USAGE CLI_HELP_USAGE

typedef struct cli_opts {
    const char *cmd;         /* "steward stuck", for messages */
    const char *usage;       /* printed by -h (stdout) and on a usage error (stderr) */
    char **argv;             /* borrowed, to name a bad option */
    const char *config_path; /* --config, else $STEWARD_CONFIG, else NULL */
    config_flag_t *flags;    /* --database and --set, in order (owned) */
    size_t n_flags;
    bool json;
    config_t *cfg; /* built by cli_opts_config() (owned) */
} cli_opts_t;

/* Prepares o for argc arguments; false (message printed) when out of memory.
 * Resets getopt (optind = 1). */
bool cli_opts_init(cli_opts_t *o, const char *cmd, const char *usage, int argc, char **argv);

/* Releases what o owns; o may be zeroed or half initialized. */
void cli_opts_free(cli_opts_t *o);

/*
 * Takes one option getopt_long returned that the verb does not handle.
 * Returns -1 when it was a common option (consumed), or the exit code the
 * verb must return at once: EXIT_OK after printing the help for -h,
 * EXIT_USAGE after "cmd: unknown option 'X'" or "cmd: option 'X' needs a
 * value" and the usage on stderr for anything else.
 */
int cli_opts_take(cli_opts_t *o, int opt, const char *arg);

/*
 * getopt_long() over `options` (the verb's own and CLI_COMMON_OPTIONS;
 * short ones CLI_SHORT_OPTIONS), the common options taken on the way by
 * cli_opts_take(). Returns the code of the next option of the verb's own,
 * its value in optarg; -1 once none is left, with *exit_code -1 when the
 * verb goes on (its operands from optind on), else the code it must return
 * at once: EXIT_OK after -h, EXIT_USAGE after a usage error (printed),
 * among them an argument left after the options when `operands` is false
 * (cli_extra_args()).
 */
int cli_opts_next(cli_opts_t *o, int argc, char **argv, const struct option *options, bool operands,
                  int *exit_code);

/* Adds a setting as if given by --set key=value (a verb's own flag that
 * maps to a config key). False when out of memory. */
bool cli_opts_add(cli_opts_t *o, const char *key, const char *value);

/*
 * Builds the configuration: defaults, the config file, STEWARD_*, then the
 * flags (config_build()). Returns it (borrowed: o owns it) or NULL with
 * "cmd: config: problem" printed to stderr.
 */
const config_t *cli_opts_config(cli_opts_t *o);

/*
 * Connects to the configured database (building the configuration first
 * if needed) and, when need_schema, checks that the steward schema is
 * there at this binary's version (migrate_require()). NULL, the reason
 * printed to stderr as "cmd: reason", on failure; *exit_code is then the
 * code to return (EXIT_USAGE for a config error, else EXIT_RUNTIME);
 * EXIT_OK with the connection.
 */
PGconn *cli_opts_connect(cli_opts_t *o, bool need_schema, int *exit_code);

#endif
