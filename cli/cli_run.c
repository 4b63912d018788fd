/*
 * cli_run - `steward run`: the daemon. Reads its configuration, loads and
 * validates the definitions and routes, starts the HTTP server, waits for
 * PostgreSQL and brings the schema up to date, then runs intake on this
 * thread and the worker threads (scheduler, notifier, dispatcher) beside it, until
 * SIGTERM or SIGINT.
 *
 * Signals: main() blocks SIGTERM, SIGINT and SIGHUP before anything else;
 * cli_run() installs the handlers (which only set a flag) and unblocks them
 * on this thread alone. Every thread started here starts with them blocked
 * (librdkafka blocks them in its own), so a signal sent at any moment of
 * the start-up is held until a handler exists, and then lands here.
 * SIGPIPE is ignored: the daemon outlives whoever reads its log.
 *
 * Start-up failures: a bad config, definitions or connection string, or a
 * database that refuses our credentials, exit 2 at once; a database that
 * is down, starting or full is waited for (backoff 200 ms doubling to 5 s,
 * each attempt logged), not ready meanwhile, and a stop during the wait
 * exits 0.
 */
#include "cli/cli.h"
#include "cli/options.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/err.h"
#include "common/log.h"
#include "manager/config/config.h"
#include "manager/commands/dispatcher.h"
#include "manager/runtime/generation.h"
#include "manager/api/http.h"
#include "manager/intake/intake.h"
#include "manager/runtime/metrics.h"
#include "manager/alerting/notifier.h"
#include "manager/timing/retention.h"
#include "manager/sinks/routes.h"
#include "manager/timing/scheduler.h"
#include "schema/migrate.h"

#include <getopt.h>
#include <malloc.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long a clean stop waits for the notifier to deliver what is due. */
#define DRAIN_MS 5000

/* Waiting for PostgreSQL at start: first and longest pause between tries. */
#define START_BACKOFF_MS     200
#define START_MAX_BACKOFF_MS 5000

static const char run_usage[] =
    "usage: steward run [OPTIONS]\n"
    "\n"
    "Consumes the topics the definitions name, as one Kafka consumer group,\n"
    "keeps every process instance's state in PostgreSQL, judges deadlines and\n"
    "pages the owning teams. Stops cleanly on SIGTERM or SIGINT.\n"
    "\n"
    "Settings come from the config file, then STEWARD_* variables, then these\n"
    "flags, each overriding the one before (docs/operations.md lists them all):\n"
    "  --config FILE         a JSON config file\n"
    "  --brokers LIST        Kafka bootstrap servers ($STEWARD_KAFKA_BROKERS)\n"
    "  --database CONNINFO   libpq connection string ($STEWARD_DATABASE_URL)\n"
    "  --definitions PATH    a definition file or a directory of them\n"
    "                        ($STEWARD_DEFINITIONS)\n"
    "  --group NAME          consumer group ($STEWARD_GROUP, default steward)\n"
    "  --replica NAME        this process's name in history (default host-pid)\n"
    "  --batch-size N        messages per transaction, at most (default 2000)\n"
    "  --batch-ms DURATION   how long a batch gathers, e.g. 200ms (default 200ms;\n"
    "                        a bare number is milliseconds)\n"
    "  --max-message-bytes N larger messages are rejected (default 1048576)\n"
    "  --http-listen ADDR    the HTTP listener, e.g. 127.0.0.1:9464; \"\" turns\n"
    "                        it off ($STEWARD_HTTP_LISTEN)\n"
    "  --no-migrate          do not migrate at start; check the schema's version\n"
    "                        and refuse to start on a mismatch (migrate_on_start=false)\n"
    "  --set KEY=VALUE       any config key, e.g. scheduler.blind_after=30s\n"
    "  --kafka NAME=VALUE    a librdkafka property; repeatable\n"
    "  --log-level LEVEL     debug, info, warn or error (default info)\n"
    "  -h, --help            this help\n";

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stop_requested = 1;
}

/* The signals the daemon handles; main() blocks them first thing. */
static void handled_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
}

/* Installs the handlers, then lets the signals in on this thread. */
static void catch_signals(void)
{
    struct sigaction sa;
    sigset_t set;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* A log reader that goes away (a closed stderr pipe) must not stop the
     * watcher: the log's write fails with EPIPE instead. libpq, librdkafka,
     * libcurl and libmicrohttpd send with MSG_NOSIGNAL already, so the log
     * is the only writer this changes. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    handled_signals(&set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* Blocks the handled signals on this thread around the creation of
 * threads, which inherit the mask; `saved` restores it. */
static void hold_signals(sigset_t *saved)
{
    sigset_t set;
    handled_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, saved);
}

static void release_signals(const sigset_t *saved)
{
    pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* Sleeps up to ms, waking early on a stop; counts as the main thread's
 * progress for /healthz. */
static void nap(int64_t ms)
{
    for (int64_t slept = 0; slept < ms && !stop_requested; slept += 100) {
        metrics_beat(METRICS_INTAKE);
        usleep(100 * 1000);
    }
}

/*
 * Builds the configuration (config_build()) and checks it whole, librdkafka
 * properties included. Returns NULL (with the problem printed) on any error.
 */
static config_t *build_config(const config_flag_t *flags, size_t n_flags, const char *config_path)
{
    char errstr[1024];
    err_class_t cls;
    config_t *cfg = config_build(config_path, flags, n_flags, &cls, errstr, sizeof errstr);

    if (cls == ERR_OK)
        cls = config_check(cfg, errstr, sizeof errstr);
    /* librdkafka judges its own properties: ask it now, before any
     * connection, so a typo is a config error and not a runtime one. */
    if (cls == ERR_OK && cfg->n_kafka_props > 0) {
        rd_kafka_conf_t *probe = rd_kafka_conf_new();
        for (size_t i = 0; i < cfg->n_kafka_props && cls == ERR_OK; i++) {
            char name[256], kerr[256];
            const char *eq = strchr(cfg->kafka_props[i], '=');
            if (eq == NULL || (size_t) (eq - cfg->kafka_props[i]) >= sizeof name)
                continue;
            snprintf(name, sizeof name, "%.*s", (int) (eq - cfg->kafka_props[i]),
                     cfg->kafka_props[i]);
            if (rd_kafka_conf_set(probe, name, eq + 1, kerr, sizeof kerr) != RD_KAFKA_CONF_OK)
                cls = err_set(ERR_INVALID, errstr, sizeof errstr, "kafka.%s: %s", name, kerr);
        }
        rd_kafka_conf_destroy(probe);
    }
    if (cls != ERR_OK) {
        fprintf(stderr, "steward run: config: %s\n", cls == ERR_FATAL ? "out of memory" : errstr);
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* A worker thread beside intake. Adding one is a row in serve()'s table. */
typedef struct worker {
    const char *name;
    void *(*main)(void *ctx);
    pthread_t thread;
    bool started;
} worker_t;

/* What the threads and the reload share. */
typedef struct run_ctx {
    const config_flag_t *flags;
    size_t n_flags;
    const char *config_path;
    const config_t *running; /* the configuration the daemon started with */
    gen_current_t *current;
    gen_t *intake_gen; /* the generation intake works with */
    sched_t *sched;
    notifier_t *notifier;
    dispatcher_t *dispatcher;
    http_t *http;               /* NULL when http.listen is "" */
    retention_loop_t retention; /* what the retention thread prunes, and when */
    cli_schemas_t schemas;      /* the writer schemas of confluent_avro topics */
} run_ctx_t;

static void *scheduler_main(void *arg)
{
    run_ctx_t *ctx = arg;
    metrics_beat(METRICS_SCHEDULER);
    sched_run(ctx->sched, &stop_requested, ctx->current);
    metrics_beat_stop(METRICS_SCHEDULER);
    return NULL;
}

/*
 * Under systemd with WatchdogSec=, feeds the watchdog at half its interval
 * while every worker thread's heartbeat is fresh (the /healthz rule), so
 * systemd restarts a steward whose thread is stuck. Returns at once when no
 * watchdog is asked for (not under systemd, or no WatchdogSec=).
 */
static void *watchdog_main(void *arg)
{
    run_ctx_t *ctx = arg;
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return NULL;
    int64_t every_ms = (int64_t) (usec / 2000), next = 0;
    if (every_ms < 100)
        every_ms = 100;
    while (!stop_requested) {
        int64_t now = clock_monotonic_ms();
        if (now >= next) {
            if (metrics_stalled(now, ctx->running->stall_after_ms, NULL) < 0)
                sd_notify(0, "WATCHDOG=1");
            next = now + every_ms;
        }
        struct timespec tick = {0, 100 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    return NULL;
}

static void *retention_main(void *arg)
{
    run_ctx_t *ctx = arg;
    return retention_thread_main(&ctx->retention);
}

static void *notifier_main(void *arg)
{
    run_ctx_t *ctx = arg;
    metrics_beat(METRICS_NOTIFIER);
    notifier_run(ctx->notifier, &stop_requested, DRAIN_MS, ctx->current);
    metrics_beat_stop(METRICS_NOTIFIER);
    return NULL;
}

static void *dispatcher_main(void *arg)
{
    run_ctx_t *ctx = arg;
    metrics_beat(METRICS_DISPATCHER);
    dispatcher_run(ctx->dispatcher, &stop_requested, DRAIN_MS, ctx->current);
    metrics_beat_stop(METRICS_DISPATCHER);
    return NULL;
}

/* Prints a set's problems to the log, one line each. */
static void log_problems(const def_problems_t *problems)
{
    for (size_t i = 0; i < problems->n; i++)
        LOG_ERROR("definition problem", "file", problems->items[i].file, "pointer",
                  problems->items[i].pointer, "problem", problems->items[i].message);
}

/*
 * SIGHUP: reads the config again and reloads the definitions and routes,
 * validated first. A bad reload keeps the running ones and says why.
 * Runs on the intake thread, between batches.
 */
static void reload(intake_t *intake, void *arg)
{
    run_ctx_t *ctx = arg;
    char errstr[1024];

    if (!reload_requested)
        return;
    reload_requested = 0;
    LOG_INFO("reloading definitions and routes (SIGHUP)");
    config_t *cfg = build_config(ctx->flags, ctx->n_flags, ctx->config_path);
    if (cfg == NULL) {
        LOG_ERROR("reload refused: the config is invalid (see above); keeping the running "
                  "definitions and routes");
        return;
    }
    /* Settings read only at start keep their running values: say so, each
     * by name, rather than let the file and the daemon silently disagree. */
    const char *changed[64];
    size_t n_changed = config_restart_needed(ctx->running, cfg, changed, 64);
    for (size_t i = 0; i < n_changed && i < 64; i++)
        LOG_WARN("setting changed but needs a restart to apply; keeping the running value", "key",
                 changed[i]);
    /* The pause switch first, and whatever becomes of the definitions. */
    if (!gen_set_paused(ctx->current, cfg->dispatch_paused))
        LOG_ERROR("dispatch.paused not reloaded: out of memory");
    route_table_t *routes = route_table_new(cfg->routes, errstr, sizeof errstr);
    def_problems_t problems = {0};
    const char *paths[1] = {cfg->definitions};
    def_set_t *defs = routes != NULL ? def_set_load(paths, 1, &problems, NULL) : NULL;
    if (defs != NULL && !def_set_map_topics(defs, cfg->topics_prefix, cfg->topics_map, &problems)) {
        def_set_free(defs);
        defs = NULL;
    }
    if (routes == NULL) {
        LOG_ERROR("reload refused: keeping the running definitions and routes", "error", errstr);
    } else if (defs == NULL || defs->n == 0) {
        log_problems(&problems);
        LOG_ERROR("reload refused: the definitions are invalid; keeping the running ones",
                  "definitions", cfg->definitions);
    } else if (intake_set_definitions(intake, defs, routes, errstr, sizeof errstr) != ERR_OK) {
        LOG_ERROR("reload refused: keeping the running definitions", "error", errstr);
    } else {
        gen_t *next = gen_new(defs, routes);
        defs = NULL;
        routes = NULL;
        gen_publish(ctx->current, next);
        gen_release(ctx->intake_gen);
        ctx->intake_gen = gen_acquire(ctx->current);
        char count[16], number[16];
        snprintf(count, sizeof count, "%zu", next->defs->n);
        snprintf(number, sizeof number, "%d", next->number);
        LOG_INFO("definitions and routes reloaded", "definitions", count, "generation", number);
    }
    /* Tokens reload on their own: a bad tokens file keeps the running ones. */
    if (http_reload_tokens(ctx->http, cfg->http_tokens, errstr, sizeof errstr) != ERR_OK)
        LOG_ERROR("http tokens reload refused: keeping the running tokens", "error", errstr);
    else if (ctx->http != NULL)
        LOG_INFO("http tokens reloaded");
    def_problems_clear(&problems);
    def_set_free(defs);
    route_table_free(routes);
    config_free(cfg);
}

/*
 * Connects to PostgreSQL and applies pending migrations, or with
 * migrate_on_start false only checks the schema's version (a role without
 * CREATE; see docs/operations.md, roles). ERR_TRANSIENT when
 * the database may yet come (worth waiting for), ERR_INVALID when it never
 * will for this config (a bad connection string, refused credentials),
 * anything else when the schema cannot be brought up to date.
 */
static err_class_t prepare_database(const config_t *cfg, char *errstr, size_t errstr_size)
{
    err_class_t cls;
    migrate_result_t migrated;
    PGconn *conn = db_connect_classified(cfg->database, "steward run", &cls, errstr, errstr_size);

    if (conn == NULL)
        return cls;
    if (!cfg->migrate_on_start) {
        /* A runtime role cannot migrate: the owner does, as its own step. */
        cls = migrate_require(conn, errstr, errstr_size);
        if (cls != ERR_OK && PQstatus(conn) == CONNECTION_BAD)
            cls = ERR_TRANSIENT;
        PQfinish(conn);
        return cls;
    }
    cls = migrate_apply(conn, &migrated, errstr, errstr_size);
    if (cls == ERR_OK && migrated.applied > 0) {
        char from[16], to[16];
        snprintf(from, sizeof from, "%d", migrated.from_version);
        snprintf(to, sizeof to, "%d", migrated.to_version);
        LOG_INFO("schema migrated", "from", from, "to", to);
    }
    /* Lost in the middle: the migration rolled back; try again. */
    if (cls != ERR_OK && PQstatus(conn) == CONNECTION_BAD)
        cls = ERR_TRANSIENT;
    PQfinish(conn);
    return cls;
}

/* The modules that do the work, each with its own connection. */
typedef struct workers {
    intake_t *intake;
    sched_t *sched;
    notifier_t *notifier;
    dispatcher_t *dispatcher;
} workers_t;

static void workers_free(workers_t *w)
{
    intake_free(w->intake);
    sched_free(w->sched);
    notifier_free(w->notifier);
    dispatcher_free(w->dispatcher);
    memset(w, 0, sizeof *w);
}

/*
 * Prepares the database and opens every worker. On failure nothing is left
 * open; the class says whether waiting can help (ERR_TRANSIENT).
 */
static err_class_t open_workers(const config_t *cfg, const char *replica, run_ctx_t *ctx,
                                workers_t *w, char *errstr, size_t errstr_size)
{
    const def_set_t *defs = ctx->intake_gen->defs;
    route_table_t *routes = ctx->intake_gen->routes;
    err_class_t cls = prepare_database(cfg, errstr, errstr_size);

    memset(w, 0, sizeof *w);
    if (cls != ERR_OK)
        return cls;
    intake_config_t icfg = {
        .brokers = cfg->brokers,
        .group = cfg->group,
        .conninfo = cfg->database,
        .replica = replica,
        .batch_max = (size_t) cfg->batch_size,
        .batch_ms = (int) cfg->batch_ms,
        .transactions = (size_t) cfg->transactions,
        .lock_timeout_ms = (int) cfg->lock_timeout_ms,
        .limits = {(size_t) cfg->max_message_bytes, DECODE_DEFAULT_MAX_DEPTH},
        .record_unknown = cfg->record_unknown,
        .dead_letter_topic = cfg->dead_letter_topic,
        .rejection_summary_ms = cfg->rejection_summary_ms,
        .kafka_props = (const char *const *) cfg->kafka_props,
        .n_kafka_props = cfg->n_kafka_props,
        .routes = routes,
        .schemas = ctx->schemas.schemas,
        .on_tick = reload,
        .tick_arg = ctx,
    };
    sched_config_t scfg = {cfg->database,
                           cfg->group,
                           cfg->scheduler_interval_ms,
                           cfg->grace_ms,
                           cfg->blind_after_ms,
                           cfg->blind_owner,
                           0,
                           replica,
                           cfg->unowned_after_ms,
                           (size_t) cfg->scheduler_transactions};
    notifier_config_t ncfg = {cfg->database,
                              cfg->notifier_interval_ms,
                              cfg->http_timeout_ms,
                              cfg->max_backoff_ms,
                              cfg->alertmanager_resend_ms,
                              cfg->max_retry_after_ms,
                              cfg->group_window_ms,
                              cfg->tracing_link};

    dispatcher_config_t dcfg = {
        .conninfo = cfg->database,
        .brokers = cfg->brokers,
        .kafka_props = (const char *const *) cfg->kafka_props,
        .n_kafka_props = cfg->n_kafka_props,
        .interval_ms = cfg->dispatch_interval_ms,
        .timeout_ms = cfg->dispatch_timeout_ms,
        .lease_ms = cfg->dispatch_lease_ms,
        .source = cfg->dispatch_source,
        .max_backoff_ms = cfg->dispatch_max_backoff_ms,
        .batch_size = cfg->dispatch_batch_size,
        .owner = cfg->blind_owner,
    };

    w->intake = intake_new(&icfg, defs, &cls, errstr, errstr_size);
    if (w->intake == NULL)
        return cls;
    /* Connection failures only, this late: the database answered above. */
    w->sched = sched_new(&scfg, defs, routes, errstr, errstr_size);
    w->notifier = w->sched != NULL ? notifier_new(&ncfg, routes, errstr, errstr_size) : NULL;
    if (w->notifier == NULL) {
        workers_free(w);
        return ERR_TRANSIENT;
    }
    /* A producer configuration librdkafka refuses (ERR_INVALID) exits 2. */
    w->dispatcher = dispatcher_new(&dcfg, &cls, errstr, errstr_size);
    if (w->dispatcher == NULL) {
        workers_free(w);
        return cls;
    }
    return ERR_OK;
}

/*
 * Opens the workers, waiting for PostgreSQL as long as it may come.
 * Returns EXIT_OK with *w open, or the exit code to stop with (EXIT_OK
 * too, with *w empty, when a stop came first).
 */
static int start_up(const config_t *cfg, const char *replica, run_ctx_t *ctx, workers_t *w)
{
    char errstr[1024], attempt[24], pause[24];
    int64_t backoff = START_BACKOFF_MS;

    for (long n = 1;; n++) {
        metrics_beat(METRICS_INTAKE);
        err_class_t cls = open_workers(cfg, replica, ctx, w, errstr, sizeof errstr);
        if (cls == ERR_OK)
            return EXIT_OK;
        if (cls != ERR_TRANSIENT) {
            LOG_ERROR("cannot start", "error", errstr, "class", err_class_name(cls));
            return cls == ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
        }
        snprintf(attempt, sizeof attempt, "%ld", n);
        snprintf(pause, sizeof pause, "%lld", (long long) backoff);
        LOG_WARN("PostgreSQL unavailable at start; waiting for it", "error", errstr, "attempt",
                 attempt, "retry_in_ms", pause);
        char waiting[1100];
        snprintf(waiting, sizeof waiting, "waiting for PostgreSQL: %s", errstr);
        http_set_waiting(ctx->http, waiting);
        nap(backoff);
        if (stop_requested) {
            LOG_INFO("stopped while waiting for PostgreSQL", "replica", replica);
            return EXIT_OK;
        }
        backoff = backoff * 2 < START_MAX_BACKOFF_MS ? backoff * 2 : START_MAX_BACKOFF_MS;
    }
}

/* Starts a worker with the handled signals blocked: they belong to the
 * main thread. */
static void worker_start(worker_t *wk, run_ctx_t *ctx)
{
    sigset_t saved;
    hold_signals(&saved);
    wk->started = pthread_create(&wk->thread, NULL, wk->main, ctx) == 0;
    release_signals(&saved);
    if (!wk->started)
        LOG_ERROR("cannot start a thread", "thread", wk->name);
}

/*
 * Runs intake here and the workers beside it until a stop, then stops
 * them. A stop always ends in EXIT_OK: the batch in hand is committed or
 * abandoned (its offsets stay where they were), never waited on past the
 * database's answer.
 */
static int serve(const config_t *cfg, const char *replica, run_ctx_t *ctx, workers_t *w)
{
    char errstr[1024];
    int rc = EXIT_OK;
    worker_t workers[] = {
        {"scheduler", scheduler_main, 0, false}, {"notifier", notifier_main, 0, false},
        {"retention", retention_main, 0, false}, {"dispatcher", dispatcher_main, 0, false},
        {"watchdog", watchdog_main, 0, false},
    };
    size_t n_workers = sizeof workers / sizeof workers[0];

    ctx->sched = w->sched;
    ctx->notifier = w->notifier;
    ctx->dispatcher = w->dispatcher;
    ctx->retention = (retention_loop_t){.database = cfg->database,
                                        .interval_ms = cfg->retention_interval_ms,
                                        .stop = &stop_requested};
    config_retention(cfg, &ctx->retention.keep);
    for (size_t i = 0; i < n_workers; i++)
        worker_start(&workers[i], ctx);

    char count[16];
    snprintf(count, sizeof count, "%zu", ctx->intake_gen->defs->n);
    LOG_INFO("steward running", "replica", replica, "group", cfg->group, "definitions", count);
    http_set_waiting(ctx->http, NULL);
    /* systemd's Type=notify: started once the workers run (a no-op elsewhere). */
    sd_notify(0, "READY=1\nSTATUS=running");
    err_class_t cls = intake_run(w->intake, &stop_requested, errstr, sizeof errstr);
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
    if (cls != ERR_OK) {
        LOG_ERROR("intake stopped on an error", "error", errstr, "class", err_class_name(cls));
        rc = EXIT_RUNTIME;
    }
    metrics_beat_stop(METRICS_INTAKE);
    stop_requested = 1; /* intake failing stops the others too */
    for (size_t i = 0; i < n_workers; i++) {
        if (workers[i].started)
            pthread_join(workers[i].thread, NULL);
    }
    if (rc == EXIT_OK)
        LOG_INFO("steward stopped", "replica", replica);
    return rc;
}

int cli_run(int argc, char **argv)
{
    static const struct option options[] = {
        {"config", required_argument, NULL, 'c'},
        {"brokers", required_argument, NULL, 'b'},
        {"database", required_argument, NULL, 'd'},
        {"definitions", required_argument, NULL, 'f'},
        {"group", required_argument, NULL, 'g'},
        {"replica", required_argument, NULL, 'r'},
        {"batch-size", required_argument, NULL, 'n'},
        {"batch-ms", required_argument, NULL, 't'},
        {"max-message-bytes", required_argument, NULL, 'm'},
        {"set", required_argument, NULL, 's'},
        {"kafka", required_argument, NULL, 'k'},
        {"log-level", required_argument, NULL, 'l'},
        {"http-listen", required_argument, NULL, 'H'},
        {"no-migrate", no_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    config_flag_t *flags = calloc((size_t) argc + 1, sizeof *flags);
    size_t n_flags = 0;
    const char *config_path = getenv("STEWARD_CONFIG");
    char batch_ms[32];
    int opt;

    catch_signals();
#ifdef M_ARENA_MAX
    /* One malloc arena for the daemon. glibc gives each thread that
     * allocates an arena of its own, and each keeps the high-water mark of
     * what it held: a batch decoded on the consumer's thread and committed
     * on a thread of its own (manager/intake/intake_lanes.c) then holds a batch's
     * memory twice. Measured: a 77 MiB peak with an arena per thread, 36
     * MiB with one, at the same throughput (docs/performance.md, "The batch
     * pipeline"). */
    mallopt(M_ARENA_MAX, 1);
#endif
    if (flags == NULL)
        return EXIT_RUNTIME;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, CLI_SHORT_OPTIONS, options, NULL)) != -1) {
        const char *key = NULL;
        switch (opt) {
        case 'c':
            config_path = optarg;
            continue;
        case 'b':
            key = "brokers";
            break;
        case 'd':
            key = "database";
            break;
        case 'f':
            key = "definitions";
            break;
        case 'g':
            key = "group";
            break;
        case 'r':
            key = "replica";
            break;
        case 'n':
            key = "intake.batch_size";
            break;
        case 't':
            /* A duration like the key; a bare number of milliseconds, as
             * the flag always took, still works. */
            if (optarg[0] != '\0' && strspn(optarg, "0123456789") == strlen(optarg)) {
                snprintf(batch_ms, sizeof batch_ms, "%.20sms", optarg);
                flags[n_flags++] = (config_flag_t){"intake.batch_ms", batch_ms};
                continue;
            }
            key = "intake.batch_ms";
            break;
        case 'H':
            key = "http.listen";
            break;
        case 'M':
            flags[n_flags++] = (config_flag_t){"migrate_on_start", "false"};
            continue;
        case 'm':
            key = "intake.max_message_bytes";
            break;
        case 's':
            key = "set";
            break;
        case 'k':
            key = "kafka";
            break;
        case 'l':
            key = "log_level";
            break;
        default:
            free(flags);
            return cli_help_or_usage("steward run", opt, argv, run_usage);
        }
        flags[n_flags++] = (config_flag_t){key, optarg};
    }
    if (cli_extra_args(argc, argv, "steward run", run_usage)) {
        free(flags);
        return EXIT_USAGE;
    }
    config_t *cfg = build_config(flags, n_flags, config_path);
    if (cfg == NULL) {
        free(flags);
        return EXIT_USAGE;
    }
    log_set_level(cfg->log_level);

    char errstr[1024], replica_buf[300];
    const char *bad_key = NULL;
    if (db_check_conninfo(cfg->database, errstr, sizeof errstr) != ERR_OK)
        bad_key = "database";
    else if (cfg->http_database[0] != '\0' &&
             db_check_conninfo(cfg->http_database, errstr, sizeof errstr) != ERR_OK)
        bad_key = "http.database";
    if (bad_key != NULL) {
        fprintf(stderr, "steward run: config: %s: %s\n", bad_key, errstr);
        config_free(cfg);
        free(flags);
        return EXIT_USAGE;
    }

    const char *replica = cfg->replica;
    if (replica == NULL) {
        char host[256];
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "steward");
        host[sizeof host - 1] = '\0';
        snprintf(replica_buf, sizeof replica_buf, "%s-%d", host, (int) getpid());
        replica = replica_buf;
    }

    route_table_t *routes = route_table_new(cfg->routes, errstr, sizeof errstr);
    if (routes == NULL) {
        fprintf(stderr, "steward run: config: %s\n", errstr);
        config_free(cfg);
        free(flags);
        return EXIT_USAGE;
    }

    def_problems_t problems = {0};
    const char *paths[1] = {cfg->definitions};
    def_set_t *defs = def_set_load(paths, 1, &problems, NULL);
    if (defs != NULL && !def_set_map_topics(defs, cfg->topics_prefix, cfg->topics_map, &problems)) {
        def_set_free(defs);
        defs = NULL;
    }
    if (defs == NULL || defs->n == 0) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "%s: %s: %s\n", problems.items[i].file, problems.items[i].pointer,
                    problems.items[i].message);
        fprintf(stderr,
                defs != NULL ? "steward run: %s holds no definitions\n"
                             : "steward run: refusing to start with invalid definitions "
                               "in %s\n",
                cfg->definitions);
        def_problems_clear(&problems);
        def_set_free(defs);
        route_table_free(routes);
        config_free(cfg);
        free(flags);
        return EXIT_USAGE;
    }

    /* The HTTP server first: /healthz answers, and /readyz says why not
     * ready, while the database is waited for. */
    run_ctx_t ctx = {flags, n_flags, config_path, cfg, NULL, NULL, NULL, NULL, NULL};
    if (!cli_schemas_open(cfg, defs, &ctx.schemas, errstr, sizeof errstr)) {
        fprintf(stderr, "steward run: %s\n", errstr);
        def_set_free(defs);
        route_table_free(routes);
        config_free(cfg);
        free(flags);
        return EXIT_USAGE;
    }
    err_class_t cls;
    sigset_t saved;
    hold_signals(&saved); /* its threads inherit the mask */
    /* The read endpoints may log in as a reader of their own: they never write. */
    const char *http_db = cfg->http_database[0] != '\0' ? cfg->http_database : cfg->database;
    ctx.http =
        http_new(cfg->http_listen, http_db, cfg->group, cfg->http_tokens,
                 cfg->http_allow_anonymous_read, cfg->http_allowed_hosts,
                 (unsigned int) cfg->http_connections_per_client, &cls, errstr, sizeof errstr);
    release_signals(&saved);
    if (ctx.http == NULL && cls != ERR_OK) { /* NULL with ERR_OK: http.listen is "" */
        LOG_ERROR("cannot start the HTTP server", "error", errstr);
        cli_schemas_close(&ctx.schemas);
        def_set_free(defs);
        route_table_free(routes);
        config_free(cfg);
        free(flags);
        return cls == ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
    }
    http_set_stall_after(ctx.http, cfg->stall_after_ms);
    http_set_tracing_link(ctx.http, cfg->tracing_link);

    ctx.current = gen_current_new(gen_new(defs, routes)); /* defs, routes now owned there */
    if (ctx.current != NULL && !gen_set_paused(ctx.current, cfg->dispatch_paused)) {
        /* Sending what should wait is worse than not starting. */
        fprintf(stderr, "steward run: out of memory\n");
        gen_current_free(ctx.current);
        http_free(ctx.http);
        cli_schemas_close(&ctx.schemas);
        config_free(cfg);
        free(flags);
        return EXIT_RUNTIME;
    }
    ctx.intake_gen = gen_acquire(ctx.current);
    workers_t w;
    int rc = start_up(cfg, replica, &ctx, &w);
    if (rc == EXIT_OK && w.intake != NULL)
        rc = serve(cfg, replica, &ctx, &w);
    metrics_beat_stop(METRICS_INTAKE);
    http_free(ctx.http); /* before the workers: its requests read nothing of theirs */
    workers_free(&w);
    cli_schemas_close(&ctx.schemas); /* after intake, which borrowed it */
    gen_release(ctx.intake_gen);
    gen_current_free(ctx.current);
    config_free(cfg);
    free(flags);
    return rc;
}
