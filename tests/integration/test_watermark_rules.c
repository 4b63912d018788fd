/*
 * test_watermark_rules - how a partition's watermark moves, where the rule
 * is easy to get wrong: a lane that is never idle must not hold another
 * lane's quiet partitions (and every deadline of the processes reading
 * them) at their last batch, a message stamped ahead of the clock must not
 * move its partition's watermark, or the deadlines judged against it stop
 * waiting for what intake has not read yet, and a batch with more of its
 * lane read behind it moves the watermark only to its own newest event.
 * Beside them, the one rule of reading the lanes hang on: a lane whose
 * transaction runs holds up the reading for the others only once it has
 * gathered two batches.
 *
 * One world: four topics of one partition each, read by a shadow process
 * with a 2 s deadline, on intake's default two lanes (the partitions are
 * dealt to them in turn, so two quiet topics share the lane the busy one
 * is not in). The cases that need a transaction to stay open hold every
 * batch with messages at intake.before_commit (a failpoint's pause).
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
    " \"events\": {\"Begin\": {\"topic\": \"@P@busy\"}, \"Answer\": {\"topic\": \"@P@busy\","
    "     \"envelope\": {\"id\": \"/answer\"}},"
    "   \"One\": {\"topic\": \"@P@q1\"}, \"Two\": {\"topic\": \"@P@q2\"},"
    "   \"Three\": {\"topic\": \"@P@q3\"}},"
    " \"start\": {\"on\": \"Begin\", \"to\": \"waiting\"},"
    " \"states\": {\"waiting\": {\"deadline\": \"2s\","
    "     \"on\": {\"Answer\": \"done\", \"One\": \"done\", \"Two\": \"done\","
    "       \"Three\": \"done\"}},"
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
 * default; failpoints: $STEWARD_FAILPOINTS, NULL for none), and every
 * partition read once. */
static void start(const char *name, int batch_size, const char *failpoints)
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
    json_t *intake = json_object();
    if (batch_size > 0)
        json_object_set_new(intake, "batch_size", json_integer(batch_size));
    /* Held transactions: a batch gathers for 1 s, so each lane's first
     * messages and each burst a case sends are cut by batch_size alone. */
    if (failpoints != NULL)
        json_object_set_new(intake, "batch_ms", json_string("1s"));
    json_object_set_new(cfg, "intake", intake);
    tw_config_write(&w, cfg);
    tl_producer_t *p = tl_producer_new();
    for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++)
        produce(p, topics[i], "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
    tl_producer_free(p);
    if (failpoints == NULL) {
        tw_start(&w, NULL, false);
    } else {
        char env[256];
        snprintf(env, sizeof env, "STEWARD_FAILPOINTS=%s", failpoints);
        const char *argv[] = {NULL, "run", "--config", w.config, NULL};
        w.pids[0] = tl_steward_spawn(argv, TW_LIST(env), w.log);
    }
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
    start("wm_lanes", 0, NULL);
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
    start("wm_ahead", 4, NULL);
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

/* The partition's next offset and watermark (ms), -1 for either not yet there. */
static void progress(const char *topic, long long *next, long long *watermark)
{
    char *v = tw_scalar(&w,
                        "SELECT coalesce(next_offset, -1) || ' ' || coalesce((extract(epoch FROM "
                        "watermark) * 1000)::bigint, -1) FROM steward.offsets WHERE topic = $1",
                        TW_LIST(topic));
    *next = *watermark = -1;
    if (v != NULL && sscanf(v, "%lld %lld", next, watermark) != 2)
        *next = *watermark = -1;
    free(v);
}

/* Sleeps until the wall clock reads `at` (ms). */
static void sleep_until(long long at)
{
    long long left = at - now_ms();
    if (left > 0)
        usleep((useconds_t) left * 1000);
}

/*
 * Every batch held 3.5 s before its COMMIT, batches of 4 gathered for 1 s
 * at most. Begin k1 and three more (batch 1) are committing while four
 * more (batch 2) are read; 2.5 s on, past k1's 2 s deadline, the Answer
 * stamped 1 s after Begin and three more are read, so the lane holds two
 * batches and hands batch 2 on with batch 3 behind it. Batch 2 must move
 * the watermark only to its own newest event (0.3 s after Begin): judged
 * at the clock, or at the newest read, the deadline is past while the
 * Answer that meets it is read but not committed, and k1 is alerted
 * although it was answered in time.
 */
START_TEST(a_batch_with_more_of_its_lane_read_moves_the_watermark_to_its_own_newest)
{
    start("wm_rest", 4, "intake.before_commit=pause(3500)");
    char *topic = tw_topic(&w, "busy");
    tl_producer_t *p = tl_producer_new_conf(TW_LIST("linger.ms", "50"));
    long long began = now_ms();
    produce(p, "busy", "{\"type\":\"Begin\",\"id\":\"k1\"}", began);
    for (int i = 0; i < 3; i++)
        produce(p, "busy", "{\"type\":\"Noise\",\"id\":\"none\"}", began);
    sleep_until(began + 300);
    for (int i = 0; i < 4; i++)
        produce(p, "busy", "{\"type\":\"Noise\",\"id\":\"none\"}", began + 300);
    sleep_until(began + 2500);
    produce(p, "busy", "{\"type\":\"Answer\",\"id\":\"k1\",\"answer\":\"a1\"}", began + 1000);
    for (int i = 0; i < 3; i++)
        produce(p, "busy", "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
    tl_producer_free(p);

    /* Offsets: the start's message 0, Begin 1, batch 2 ends at 8, the Answer 9. */
    long long next = -1, mark = -1, batch2_mark = -1;
    while (next < 13 && now_ms() - began < 30000) {
        progress(topic, &next, &mark);
        if (next == 9)
            batch2_mark = mark;
        usleep(50 * 1000);
    }
    ck_assert_msg(next == 13, "the 12 messages were not committed within 30 s (next offset %lld)",
                  next);
    fprintf(stderr, "MEASURE batch2 mark %lld\n", batch2_mark - began);
    ck_assert_msg(batch2_mark > 0,
                  "batch 2 (offsets 5-8) was never seen committed on its own: the batches were not "
                  "cut as the test expects");
    ck_assert_msg(batch2_mark < began + 2000,
                  "with batch 3 read but not committed, batch 2 moved the watermark %lld ms past "
                  "Begin, past k1's 2 s deadline (its own newest event is 300 ms past Begin)",
                  batch2_mark - began);
    usleep(600 * 1000); /* three scheduler passes */
    long alerts = tw_scalar_long(
        &w, "SELECT count(*) FROM steward.alerts WHERE key = 'k1' AND kind = 'deadline'", NULL);
    ck_assert_msg(alerts == 0,
                  "k1 was alerted at its deadline although its Answer, stamped 1 s after Begin, "
                  "was read before the deadline was judged");
    tw_expect(&w, "SELECT state FROM steward.instances WHERE key = 'k1'", NULL, "done");
    free(topic);
    tw_stop(&w, 30);
}
END_TEST

/*
 * Every batch held 3.5 s before its COMMIT, batches of 4 gathered for 1 s at
 * most. Eight messages on the busy topic: one batch committing, one full
 * batch gathered behind it. A message on each quiet topic a moment later is
 * read at once and committed by the other lane after 1 s of gathering and
 * 3.5 s held (5.2 s measured from the send): a consumer that waited for the
 * busy lane as soon as it held one full batch would read them only when the
 * busy lane's first batch ends, and commit them a whole pause later.
 */
START_TEST(a_busy_lanes_full_batch_does_not_stop_the_reading_for_the_other_lane)
{
    start("wm_read_on", 4, "intake.before_commit=pause(3500)");
    char *busy = tw_topic(&w, "busy");
    tl_producer_t *p = tl_producer_new_conf(TW_LIST("linger.ms", "50"));
    for (int i = 0; i < 8; i++)
        produce(p, "busy", "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
    usleep(300 * 1000);
    long long sent = now_ms(), committed = 0;
    for (size_t i = 1; i < sizeof topics / sizeof topics[0]; i++)
        produce(p, topics[i], "{\"type\":\"Noise\",\"id\":\"none\"}", 0);
    tl_producer_free(p);
    long long busy_next = -1, mark;
    while (committed == 0 && now_ms() - sent < 15000) {
        if (tw_scalar_long(&w,
                           "SELECT count(*) FROM steward.offsets WHERE topic <> $1 AND "
                           "next_offset = 2",
                           TW_LIST(busy)) > 0) {
            committed = now_ms();
            progress(busy, &busy_next, &mark);
        } else {
            usleep(25 * 1000);
        }
    }
    fprintf(stderr, "MEASURE quiet latency %lld busy_next %lld\n", committed - sent, busy_next);
    ck_assert_msg(committed > 0, "no quiet topic's message was committed within 15 s");
    ck_assert_msg(committed - sent < 6500,
                  "a quiet topic's message was committed %lld ms after it was sent, more than "
                  "the other lane's own 1 s of gathering, 3.5 s transaction and 2 s (the busy "
                  "topic's next offset then: %lld of 9)",
                  committed - sent, busy_next);
    tw_wait(&w, "SELECT next_offset FROM steward.offsets WHERE topic = $1", TW_LIST(busy), "9", 30,
            "the busy topic's messages committed");
    free(busy);
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
    tcase_add_test(tc, a_batch_with_more_of_its_lane_read_moves_the_watermark_to_its_own_newest);
    tcase_add_test(tc, a_busy_lanes_full_batch_does_not_stop_the_reading_for_the_other_lane);
    suite_add_tcase(s, tc);
    return s;
}
