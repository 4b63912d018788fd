/*
 * test_watermark_rules - how a partition's watermark moves, where the rule
 * is easy to get wrong: a lane that is never idle must not hold another
 * lane's quiet partitions (and every deadline of the processes reading
 * them) at their last batch, and a message stamped ahead of the clock must
 * not move its partition's watermark, or the deadlines judged against it
 * stop waiting for what intake has not read yet.
 *
 * One world: four topics of one partition each, read by a shadow process
 * with a 2 s deadline, on intake's default two lanes (the partitions are
 * dealt to them in turn, so two quiet topics share the lane the busy one
 * is not in).
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tw_world_t w;

static const char definition[] =
    "{\"process\": \"rules\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"team\","
    " \"key\": \"/id\","
    " \"events\": {\"Begin\": {\"topic\": \"@P@busy\"}, \"One\": {\"topic\": \"@P@q1\"},"
    "   \"Two\": {\"topic\": \"@P@q2\"}, \"Three\": {\"topic\": \"@P@q3\"}},"
    " \"start\": {\"on\": \"Begin\", \"to\": \"waiting\"},"
    " \"states\": {\"waiting\": {\"deadline\": \"2s\","
    "     \"on\": {\"One\": \"done\", \"Two\": \"done\", \"Three\": \"done\"}},"
    "   \"done\": {\"terminal\": \"success\"}}}";

static const char *const topics[] = {"busy", "q1", "q2", "q3"};

static void teardown(void)
{
    tw_teardown(&w);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Produces `value` to the world's topic `name`, stamped ts (0: the broker's). */
static void produce(tl_producer_t *p, const char *name, const char *value, long long ts)
{
    char *t = tw_topic(&w, name);
    tl_produce(p, t, 0, value, -1, NULL, ts);
    free(t);
}

/* The world, steward started (batch_size: intake.batch_size, 0 for the
 * default), and every partition read once. */
static void start(const char *name, int batch_size)
{
    tw_init(&w, name);
    tw_create_topics(&w, TW_LIST("busy", "q1", "q2", "q3"), 1);
    tw_migrate(&w);
    char *filled = tw_fill(definition, w.prefix, NULL);
    free(tl_write_file(w.dir, "rules.json", filled));
    free(filled);
    json_t *cfg = tw_config(&w, "rules.json");
    json_t *parts =
        json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}}", "scheduler", "interval",
                  "200ms", "grace", "0s", "blind_after", "10m", "http", "listen", "", "routes",
                  "default", "type", "log", "kafka", "topic.metadata.refresh.interval.ms", "1000");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (batch_size > 0)
        json_object_set_new(cfg, "intake", json_pack("{s:i}", "batch_size", batch_size));
    tw_config_write(&w, cfg);
    tl_producer_t *p = tl_producer_new();
    for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++)
        produce(p, topics[i], "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
    tl_producer_free(p);
    tw_start(&w, NULL, false);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE watermark IS NOT NULL", NULL, "4", 30,
            "every partition read");
}

/*
 * A message every 50 ms on the busy topic keeps its lane gathering a batch
 * all the time; the other lane's partitions are read to their end. Their
 * watermarks still follow the clock (once a second, the quiet lane's own
 * heartbeat), and the instance started on the busy topic is alerted at its
 * 2 s deadline while the traffic goes on.
 */
START_TEST(a_busy_lane_holds_no_other_lanes_watermark)
{
    start("wm_lanes", 0);
    tl_producer_t *p = tl_producer_new_conf(TW_LIST("linger.ms", "0"));
    produce(p, "busy", "{\"type\":\"Begin\",\"id\":\"k1\"}", 0);
    long long began = now_ms(), alerted = 0;
    double worst = 0;
    char seen[256] = "";
    for (int i = 0; now_ms() - began < 8000; i++) {
        produce(p, "busy", "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
        usleep(50 * 1000);
        if (i % 5 != 4)
            continue;
        char *lag = tw_scalar(&w,
                              "SELECT max(extract(epoch FROM now() - watermark)) FROM "
                              "steward.offsets WHERE watermark IS NOT NULL",
                              NULL);
        double l = lag != NULL ? atof(lag) : 0;
        if (l > worst) {
            worst = l;
            char *who = tw_scalar(&w,
                                  "SELECT string_agg(topic || ' ' || round(extract(epoch FROM "
                                  "now() - watermark)::numeric, 1), ', ') FROM steward.offsets",
                                  NULL);
            snprintf(seen, sizeof seen, "%s", who != NULL ? who : "");
            free(who);
        }
        free(lag);
        if (alerted == 0 && tw_scalar_long(&w,
                                           "SELECT count(*) FROM steward.alerts WHERE key = 'k1' "
                                           "AND kind = 'deadline'",
                                           NULL) == 1)
            alerted = now_ms();
    }
    tl_producer_free(p);
    ck_assert_msg(worst < 2.5, "a partition's watermark fell %.1f s behind the clock (%s)", worst,
                  seen);
    ck_assert_msg(alerted > 0 && alerted - began<5000,
                                                 "the 2 s deadline was alerted %lld ms after the "
                                                 "start, with traffic going on",
                                                 alerted> 0
                      ? alerted - began
                      : -1);
    tw_stop(&w, 30);
}
END_TEST

/*
 * An event stamped an hour ahead, read on a partition with more behind it
 * (batches of 4, so the batch that holds it is not the partition's end),
 * leaves its watermark with the clock: trusting it would make the
 * partition count as read up to an hour from now, and every deadline before
 * then would be judged by the clock alone, before the events that answer it
 * are read.
 */
START_TEST(a_message_ahead_of_the_clock_does_not_move_its_watermark)
{
    start("wm_ahead", 4);
    tl_producer_t *p = tl_producer_new();
    produce(p, "q2", "{\"type\":\"Noise\",\"id\":\"none\"}", now_ms() + 3600 * 1000LL);
    for (int i = 0; i < 40; i++)
        produce(p, "q2", "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
    tl_producer_free(p);
    char *topic = tw_topic(&w, "q2");
    tw_wait(&w, "SELECT next_offset FROM steward.offsets WHERE topic = $1", TW_LIST(topic), "42",
            30, "the messages read");
    tw_expect(&w,
              "SELECT count(*) FROM steward.offsets WHERE topic = $1 AND watermark > now() + "
              "interval '1 minute'",
              TW_LIST(topic), "0");
    free(topic);
    tw_stop(&w, 30);
}
END_TEST

Suite *watermark_rules_suite(void)
{
    Suite *s = suite_create("watermark_rules");
    TCase *tc = tcase_create("watermark_rules");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, a_busy_lane_holds_no_other_lanes_watermark);
    tcase_add_test(tc, a_message_ahead_of_the_clock_does_not_move_its_watermark);
    suite_add_tcase(s, tc);
    return s;
}
