/*
 * fuzz_config - the config file of `steward run`: config_load_json() reads
 * it over the defaults, config_check() and the routes table
 * (route_table_new()) judge what it gave. A refused file says why; a
 * loaded one holds only values within each key's range.
 *
 * `NAME_file` keys read a secret from a file, which may be a FIFO (a secret
 * handed over by a pipe): the runs of scripts/test and scripts/fuzz give the
 * target no standard input, so "/dev/stdin" reads nothing.
 */
#include "manager/config/config.h"
#include "manager/sinks/routes.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    log_set_level(LOG_LEVEL_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    config_t *cfg = config_new();
    char errstr[1024] = "";

    if (cfg == NULL)
        abort();
    err_class_t cls =
        config_load_json(cfg, (const char *) data, size, "fuzz.json", errstr, sizeof errstr);
    if (cls != ERR_OK) {
        FUZZ_CHECK(errstr[0] != '\0', "refused without a reason");
    } else {
        FUZZ_CHECK(cfg->batch_size >= 1 && cfg->batch_size <= 100000, "batch_size %ld",
                   cfg->batch_size);
        FUZZ_CHECK(cfg->max_retry_after_ms >= 1000 && cfg->max_retry_after_ms <= 86400000,
                   "max_retry_after %lld", (long long) cfg->max_retry_after_ms);
        FUZZ_CHECK(cfg->grace_ms >= 0 && cfg->scheduler_interval_ms >= 10, "scheduler keys");
        (void) config_check(cfg, errstr, sizeof errstr);
        if (cfg->routes != NULL) {
            route_table_t *table = route_table_new(cfg->routes, errstr, sizeof errstr);
            if (table == NULL)
                FUZZ_CHECK(errstr[0] != '\0', "routes refused without a reason");
            route_table_free(table);
        }
    }
    config_free(cfg);
    return 0;
}
