/*
 * cli - the steward subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit code: EXIT_OK,
 * EXIT_RUNTIME or EXIT_USAGE (see err.h). Each prints its own --help.
 */
#ifndef STEWARD_CLI_H
#define STEWARD_CLI_H

int cli_check(int argc, char **argv);
int cli_migrate(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_stuck(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_demo(int argc, char **argv);
int cli_backtest(int argc, char **argv);
int cli_prune(int argc, char **argv);

/* The database connection string: --database, else STEWARD_DATABASE_URL,
 * else "" (libpq then follows the PG* variables). Borrowed. */
const char *cli_database_url(const char *flag_value);

#endif
