/*
 * test_retention - the pure arithmetic of retention: where a week starts,
 * how its partition is named, which partitions are past retention and
 * which weeks still need one; and the retention.* config keys.
 */
#include "manager/config/config.h"
#include "manager/timing/retention.h"
#include "testlib.h"

#include <check.h>
#include <string.h>

#define D (86400000LL)
#define W (7 * D)

/* 2026-11-30 00:00:00 UTC, a Monday. */
#define MON_2026_11_30 1795996800000LL

static retention_partition_t week(int64_t start)
{
    retention_partition_t p = {0};
    retention_week_name(start, p.name, sizeof p.name);
    p.has_lower = p.has_upper = true;
    p.lower_ms = start;
    p.upper_ms = start + W;
    return p;
}

START_TEST(weeks_start_on_monday_utc)
{
    ck_assert_int_eq(retention_week_start(MON_2026_11_30), MON_2026_11_30);
    ck_assert_int_eq(retention_week_start(MON_2026_11_30 + 1), MON_2026_11_30);
    ck_assert_int_eq(retention_week_start(MON_2026_11_30 + W - 1), MON_2026_11_30);
    ck_assert_int_eq(retention_week_start(MON_2026_11_30 + W), MON_2026_11_30 + W);
    ck_assert_int_eq(retention_week_start(MON_2026_11_30 - 1), MON_2026_11_30 - W);
    /* before 1970: floor, not truncation toward zero */
    ck_assert_int_eq(retention_week_start(0), -3 * D);
    ck_assert_int_eq(retention_week_start(-1), -3 * D);
    ck_assert_int_eq(retention_week_start(-3 * D - 1), -10 * D);

    char name[64];
    ck_assert_str_eq(retention_week_name(MON_2026_11_30, name, sizeof name), "history_p20261130");
    ck_assert_str_eq(retention_week_name(MON_2026_11_30 + 5 * W, name, sizeof name),
                     "history_p20270104");
}
END_TEST

START_TEST(expired_partitions)
{
    int64_t now = MON_2026_11_30 + 3 * D; /* a Thursday */
    retention_partition_t p = week(MON_2026_11_30 - 5 * W);
    /* ends 5 weeks before Monday: more than 30 days before now */
    ck_assert(retention_partition_expired(&p, now, 30 * D));
    /* but not with 40 days */
    ck_assert(!retention_partition_expired(&p, now, 40 * D));
    /* its newest row is exactly keep old: it goes */
    ck_assert(retention_partition_expired(&p, p.upper_ms + 30 * D, 30 * D));
    ck_assert(!retention_partition_expired(&p, p.upper_ms + 30 * D - 1, 30 * D));
    /* off keeps everything */
    ck_assert(!retention_partition_expired(&p, now, 0));

    retention_partition_t def = {.name = "history_default", .is_default = true};
    ck_assert(!retention_partition_expired(&def, now, 1));

    /* the migrated rows: MINVALUE up to a week start */
    retention_partition_t before = {
        .name = "history_before_20261005", .has_upper = true, .upper_ms = MON_2026_11_30 - 8 * W};
    ck_assert(retention_partition_expired(&before, now, 30 * D));
    before.upper_ms = MON_2026_11_30;
    ck_assert(!retention_partition_expired(&before, now, 30 * D));

    retention_partition_t open_ended = {.name = "x", .has_lower = true, .lower_ms = 0};
    ck_assert(!retention_partition_expired(&open_ended, now, 1));
}
END_TEST

START_TEST(weeks_to_create)
{
    int64_t now = MON_2026_11_30 + 3 * D, starts[RETENTION_AHEAD + 1];

    /* nothing yet: this week and the next RETENTION_AHEAD */
    size_t n = retention_weeks_to_create(NULL, 0, now, starts);
    ck_assert_uint_eq(n, RETENTION_AHEAD + 1);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(starts[i], MON_2026_11_30 + (int64_t) i * W);

    /* the default partition covers no week */
    retention_partition_t parts[4] = {{.name = "history_default", .is_default = true}};
    ck_assert_uint_eq(retention_weeks_to_create(parts, 1, now, starts), RETENTION_AHEAD + 1);

    /* this week exists: only the ones after it */
    parts[1] = week(MON_2026_11_30);
    n = retention_weeks_to_create(parts, 2, now, starts);
    ck_assert_uint_eq(n, RETENTION_AHEAD);
    ck_assert_int_eq(starts[0], MON_2026_11_30 + W);

    /* all there: nothing */
    parts[2] = week(MON_2026_11_30 + W);
    parts[3] = week(MON_2026_11_30 + 2 * W);
    ck_assert_uint_eq(retention_weeks_to_create(parts, 4, now, starts), 0);

    /* a partition overlapping a week in part (made by hand, or a MINVALUE
     * one reaching into it) keeps that week from being created */
    retention_partition_t odd[1] = {
        {.name = "odd", .has_upper = true, .upper_ms = MON_2026_11_30 + W + D}};
    n = retention_weeks_to_create(odd, 1, now, starts);
    ck_assert_uint_eq(n, RETENTION_AHEAD - 1);
    ck_assert_int_eq(starts[0], MON_2026_11_30 + 2 * W);
}
END_TEST

START_TEST(config_keys)
{
    char errstr[256];
    config_t *cfg = config_new();
    ck_assert_int_eq(cfg->retention_history_ms, 30 * D);
    ck_assert_int_eq(cfg->retention_rejected_ms, 14 * D);
    ck_assert_int_eq(cfg->retention_outbox_ms, 7 * D);
    ck_assert_int_eq(cfg->retention_alerts_ms, 30 * D);
    ck_assert_int_eq(cfg->retention_ownership_log_ms, 30 * D);
    ck_assert_int_eq(cfg->retention_interval_ms, 3600000);

    ck_assert_int_eq(config_set(cfg, "retention.history", "60d", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(cfg->retention_history_ms, 60 * D);
    ck_assert_int_eq(config_set(cfg, "retention.rejected", "off", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(cfg->retention_rejected_ms, 0);
    ck_assert_int_eq(config_set(cfg, "retention.interval", "off", errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(cfg->retention_interval_ms, 0);

    /* 0s is not "off": a history kept for no time is a mistake */
    ck_assert_int_eq(config_set(cfg, "retention.history", "0s", errstr, sizeof errstr),
                     ERR_INVALID);
    ck_assert_msg(strstr(errstr, "(or \"off\")") != NULL, "got: %s", errstr);
    ck_assert_int_eq(config_set(cfg, "retention.outbox", "soon", errstr, sizeof errstr),
                     ERR_INVALID);

    retention_config_t rcfg;
    config_retention(cfg, &rcfg);
    ck_assert_int_eq(rcfg.keep_ms[RETENTION_HISTORY], 60 * D);
    ck_assert_int_eq(rcfg.keep_ms[RETENTION_REJECTED], 0);
    ck_assert_int_eq(rcfg.keep_ms[RETENTION_OUTBOX], 7 * D);
    ck_assert_str_eq(retention_table_name(RETENTION_OWNERSHIP_LOG), "ownership_log");
    config_free(cfg);
}
END_TEST

START_TEST(config_file_section)
{
    char errstr[512];
    const char *dir = tl_tmpdir();
    char *path = tl_write_file(dir, "retention.json",
                               "{\"retention\": {\"history\": \"90d\", \"alerts\": \"off\"}}");
    config_t *cfg = config_new();
    ck_assert_int_eq(config_load_file(cfg, path, errstr, sizeof errstr), ERR_OK);
    ck_assert_int_eq(cfg->retention_history_ms, 90 * D);
    ck_assert_int_eq(cfg->retention_alerts_ms, 0);
    config_free(cfg);
    free(path);
}
END_TEST

Suite *retention_math_suite(void)
{
    Suite *s = suite_create("retention_math");
    TCase *tc = tcase_create("retention_math");
    tcase_add_test(tc, weeks_start_on_monday_utc);
    tcase_add_test(tc, expired_partitions);
    tcase_add_test(tc, weeks_to_create);
    tcase_add_test(tc, config_keys);
    tcase_add_test(tc, config_file_section);
    suite_add_tcase(s, tc);
    return s;
}
