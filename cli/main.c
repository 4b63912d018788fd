/*
 * steward - a process manager for workflows that run across many services.
 *
 * main() only picks the subcommand; the operator verbs are the rows of
 * manager/operator/actions.h's verb table, run by cli_verb(); the others are
 * listed here. Each lives in cli/cli_*.c and
 * returns the exit code (0 ok, 1 runtime failure, 2 usage, config or
 * definition error).
 *
 * SIGTERM, SIGINT and SIGHUP are blocked before anything else, so one sent
 * while the daemon starts waits for its handler instead of killing it (the
 * default action). "Before anything else" is the executable's preinit
 * array: the dynamic loader runs it after loading and relocating the
 * libraries but before any of their constructors (GnuTLS's, which reads
 * its config, OpenSSL's, libcap's: milliseconds in all), where a
 * constructor of ours would run only after them. The loader's own work
 * before it, mapping some fifty libraries, is the one window left: no
 * code of the program runs there. A command that handles the
 * signals unblocks them itself once its handlers exist; for every other
 * command the mask the process started with is restored.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "manager/operator/actions.h"

#include <curl/curl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    bool handles_signals; /* installs handlers and unblocks the signals itself */
} command_t;

static const command_t commands[] = {
    {"run", cli_run, "consume events and keep every instance's state", true},
    {"check", cli_check, "validate process definitions", false},
    {"migrate", cli_migrate, "apply pending schema migrations", false},
    {"inspect", cli_inspect, "show one instance and its history", false},
    {"stuck", cli_stuck, "list open alerts by process and state", false},
    {"report", cli_report, "step latencies, deadline suggestions, volume", false},
    {"demo", cli_demo, "the whole story on an embedded Kafka", false},
    {"backtest", cli_backtest, "try a definition on the events Kafka retains", false},
    {"discover", cli_discover, "draft a definition from the traffic on some topics", false},
    {"graph", cli_graph, "draw a process definition (dot, mermaid, svg)", false},
    {"prune", cli_prune, "remove what the retention settings say is old", false},
};

static sigset_t started_mask; /* the mask at exec, before block_handled() */
static bool handled_blocked;

static void handled_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
}

/* Runs single-threaded, before main() and every library constructor. */
static void block_handled(int argc, char **argv, char **envp)
{
    (void) argc;
    (void) argv;
    (void) envp;
    sigset_t handled;
    handled_signals(&handled);
    if (sigprocmask(SIG_BLOCK, &handled, &started_mask) == 0)
        handled_blocked = true;
}

__attribute__((used, section(".preinit_array"))) static void (*const block_handled_at_start)(
    int, char **, char **) = block_handled;

static const char version_usage[] = "usage: steward version [--json]\n"
                                    "\n"
                                    "Prints the version of this binary.\n"
                                    "\n"
                                    "  --json                print {\"version\": \"...\"}\n"
                                    "  -h, --help            this help\n";

/* `steward version [--json]` (also `steward --version`). */
static int print_version(int argc, char **argv)
{
    static const struct option options[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    int opt;

    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        if (opt != 'j')
            return cli_help_or_usage("steward version", opt, argv, version_usage);
        json = true;
    }
    if (cli_extra_args(argc, argv, "steward version", version_usage))
        return EXIT_USAGE;
    if (json)
        printf("{\"version\": \"%s\"}\n", STEWARD_VERSION);
    else
        printf("steward %s\n", STEWARD_VERSION);
    return EXIT_OK;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: steward COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "  %-10s %s\n", "version", "print the version");
    fprintf(out, "\noperator verbs:\n");
    for (size_t i = 0; i < action_verb_count; i++)
        fprintf(out, "  %-10s %s\n", action_verbs[i].name, action_verbs[i].summary);
    fprintf(out, "\n'steward COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    /* A loader that skips the preinit array still gets the signals
     * blocked here, later. */
    sigset_t saved = started_mask;
    if (!handled_blocked) {
        sigset_t handled;
        handled_signals(&handled);
        pthread_sigmask(SIG_BLOCK, &handled, &saved);
    }

    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(name, "version") == 0 || strcmp(name, "--version") == 0)
        return print_version(argc - 1, argv + 1);
    /* Before any thread starts: libcurl's global setup is not thread-safe,
     * and the failpoint table is read-only once threads run. A typo in the
     * variable stops here, so a test cannot pass vacuously. Every command
     * and operator verb honours it. */
    char fperr[2048];
    if (fp_init(getenv("STEWARD_FAILPOINTS"), fperr, sizeof fperr) != ERR_OK) {
        fprintf(stderr, "steward: %s\n", fperr);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(name, commands[i].name) == 0) {
            if (!commands[i].handles_signals)
                pthread_sigmask(SIG_SETMASK, &saved, NULL);
            curl_global_init(CURL_GLOBAL_DEFAULT);
            int rc = commands[i].run(argc - 1, argv + 1);
            curl_global_cleanup();
            return rc;
        }
    }
    const action_verb_def_t *verb = action_verb_find(name);
    if (verb != NULL) {
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        int rc = cli_verb(verb, argc - 1, argv + 1);
        curl_global_cleanup();
        return rc;
    }
    fprintf(stderr, "steward: unknown command '%s'\n", name);
    usage(stderr);
    return EXIT_USAGE;
}
