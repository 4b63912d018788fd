/*
 * cli_run - `steward run`: the daemon. Loads and validates the
 * definitions, brings the schema up to date, then consumes until SIGTERM
 * or SIGINT.
 */
#include "manager/cli.h"
#include "manager/db.h"
#include "manager/err.h"
#include "manager/intake.h"
#include "manager/log.h"
#include "schema/migrate.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char run_usage[] =
    "usage: steward run [OPTIONS]\n"
    "\n"
    "Consumes the topics the definitions name, as one Kafka consumer group,\n"
    "and keeps every process instance's state in PostgreSQL. Stops cleanly on\n"
    "SIGTERM or SIGINT.\n"
    "\n"
    "  --brokers LIST        Kafka bootstrap servers ($STEWARD_KAFKA_BROKERS)\n"
    "  --database CONNINFO   libpq connection string ($STEWARD_DATABASE_URL)\n"
    "  --definitions PATH    a definition file or a directory of them\n"
    "                        ($STEWARD_DEFINITIONS)\n"
    "  --group NAME          consumer group ($STEWARD_GROUP, default steward)\n"
    "  --replica NAME        this process's name in history (default host-pid)\n"
    "  --batch-size N        messages per transaction, at most (default 2000)\n"
    "  --batch-ms MS         how long a batch gathers, at most (default 200)\n"
    "  --max-message-bytes N larger messages are rejected (default 1048576)\n"
    "  --kafka NAME=VALUE    a librdkafka property; repeatable\n"
    "  --log-level LEVEL     debug, info, warn or error (default info)\n";

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void) sig;
    stop_requested = 1;
}

static const char *from_env(const char *flag, const char *env, const char *fallback)
{
    if (flag != NULL)
        return flag;
    const char *value = getenv(env);
    return value != NULL && *value ? value : fallback;
}

static bool parse_size(const char *text, long min, long max, long *out)
{
    char *end;
    long value = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value < min || value > max)
        return false;
    *out = value;
    return true;
}

int cli_run(int argc, char **argv)
{
    static const struct option options[] = {
        {"brokers", required_argument, NULL, 'b'},
        {"database", required_argument, NULL, 'd'},
        {"definitions", required_argument, NULL, 'f'},
        {"group", required_argument, NULL, 'g'},
        {"replica", required_argument, NULL, 'r'},
        {"batch-size", required_argument, NULL, 'n'},
        {"batch-ms", required_argument, NULL, 't'},
        {"max-message-bytes", required_argument, NULL, 'm'},
        {"kafka", required_argument, NULL, 'k'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *brokers = NULL, *database = NULL, *definitions = NULL, *group = NULL,
               *replica = NULL;
    long batch_size = INTAKE_DEFAULT_BATCH_MAX, batch_ms = INTAKE_DEFAULT_BATCH_MS;
    long max_bytes = DECODE_DEFAULT_MAX_BYTES;
    const char **kafka_props = calloc((size_t) argc + 1, sizeof *kafka_props);
    size_t n_kafka_props = 0;
    int opt, rc = EXIT_OK;
    char errstr[1024], replica_buf[300];
    log_level_t level;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'b':
            brokers = optarg;
            break;
        case 'd':
            database = optarg;
            break;
        case 'f':
            definitions = optarg;
            break;
        case 'g':
            group = optarg;
            break;
        case 'r':
            replica = optarg;
            break;
        case 'n':
            if (!parse_size(optarg, 1, 100000, &batch_size)) {
                fprintf(stderr, "steward run: --batch-size must be 1 to 100000, not '%s'\n",
                        optarg);
                rc = EXIT_USAGE;
            }
            break;
        case 't':
            if (!parse_size(optarg, 1, 60000, &batch_ms)) {
                fprintf(stderr, "steward run: --batch-ms must be 1 to 60000, not '%s'\n", optarg);
                rc = EXIT_USAGE;
            }
            break;
        case 'm':
            if (!parse_size(optarg, 64, 100L * 1024 * 1024, &max_bytes)) {
                fprintf(stderr,
                        "steward run: --max-message-bytes must be 64 to 104857600, not '%s'\n",
                        optarg);
                rc = EXIT_USAGE;
            }
            break;
        case 'k':
            kafka_props[n_kafka_props++] = optarg;
            break;
        case 'l':
            if (!log_parse_level(optarg, &level)) {
                fprintf(stderr, "steward run: --log-level must be debug, info, warn or error\n");
                rc = EXIT_USAGE;
            } else {
                log_set_level(level);
            }
            break;
        case 'h':
            fputs(run_usage, stdout);
            free(kafka_props);
            return EXIT_OK;
        default:
            rc = EXIT_USAGE;
        }
    }
    brokers = from_env(brokers, "STEWARD_KAFKA_BROKERS", NULL);
    definitions = from_env(definitions, "STEWARD_DEFINITIONS", NULL);
    group = from_env(group, "STEWARD_GROUP", "steward");
    database = cli_database_url(database);
    if (rc == EXIT_OK && optind < argc) {
        fprintf(stderr, "steward run: unexpected argument '%s'\n", argv[optind]);
        rc = EXIT_USAGE;
    }
    if (rc == EXIT_OK && brokers == NULL) {
        fprintf(stderr, "steward run: no brokers: pass --brokers or set STEWARD_KAFKA_BROKERS\n");
        rc = EXIT_USAGE;
    }
    if (rc == EXIT_OK && definitions == NULL) {
        fprintf(stderr, "steward run: no definitions: pass --definitions or set "
                        "STEWARD_DEFINITIONS\n");
        rc = EXIT_USAGE;
    }
    if (rc != EXIT_OK) {
        fputs(run_usage, stderr);
        free(kafka_props);
        return rc;
    }
    if (replica == NULL) {
        char host[256];
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "steward");
        host[sizeof host - 1] = '\0';
        snprintf(replica_buf, sizeof replica_buf, "%s-%d", host, (int) getpid());
        replica = replica_buf;
    }

    def_problems_t problems = {0};
    def_set_t *defs = def_set_load(&definitions, 1, &problems, NULL);
    if (defs == NULL || defs->n == 0) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "%s: %s: %s\n", problems.items[i].file, problems.items[i].pointer,
                    problems.items[i].message);
        if (defs != NULL)
            fprintf(stderr, "steward run: %s holds no definitions\n", definitions);
        else
            fprintf(stderr, "steward run: refusing to start with invalid definitions\n");
        def_problems_clear(&problems);
        def_set_free(defs);
        free(kafka_props);
        return EXIT_USAGE;
    }

    PGconn *conn = db_connect(database, "steward run", errstr, sizeof errstr);
    migrate_result_t migrated;
    if (conn == NULL || migrate_apply(conn, &migrated, errstr, sizeof errstr) != ERR_OK) {
        LOG_ERROR("cannot prepare the database", "error", errstr);
        if (conn != NULL)
            PQfinish(conn);
        def_set_free(defs);
        free(kafka_props);
        return EXIT_RUNTIME;
    }
    PQfinish(conn);
    if (migrated.applied > 0) {
        char from[16], to[16];
        snprintf(from, sizeof from, "%d", migrated.from_version);
        snprintf(to, sizeof to, "%d", migrated.to_version);
        LOG_INFO("schema migrated", "from", from, "to", to);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    intake_config_t cfg = {
        .brokers = brokers,
        .group = group,
        .conninfo = database,
        .replica = replica,
        .batch_max = (size_t) batch_size,
        .batch_ms = (int) batch_ms,
        .limits = {(size_t) max_bytes, DECODE_DEFAULT_MAX_DEPTH},
        .kafka_props = kafka_props,
        .n_kafka_props = n_kafka_props,
    };
    err_class_t cls;
    intake_t *intake = intake_new(&cfg, defs, &cls, errstr, sizeof errstr);
    if (intake == NULL) {
        LOG_ERROR("cannot start", "error", errstr);
        rc = cls == ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
    } else {
        char count[16];
        snprintf(count, sizeof count, "%zu", defs->n);
        LOG_INFO("steward running", "replica", replica, "group", group, "definitions", count);
        cls = intake_run(intake, &stop_requested, errstr, sizeof errstr);
        if (cls != ERR_OK) {
            LOG_ERROR("stopped on an error", "error", errstr, "class", err_class_name(cls));
            rc = EXIT_RUNTIME;
        } else {
            LOG_INFO("steward stopped", "replica", replica);
        }
    }
    intake_free(intake);
    def_set_free(defs);
    free(kafka_props);
    return rc;
}
