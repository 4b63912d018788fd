/*
 * test_topics_matrix - every rule that names a topic, under every way a
 * topic gets its broker name, and the watcher over the watermark.
 *
 * The matrix runs the same steps under four settings:
 *
 *   plain     the definitions name the broker's topics
 *   prefix    topics.prefix puts the world's prefix in front of each name
 *   map       topics.map names each topic's broker name
 *   versions  with the prefix, version 1 of mx_shadow reads a topic
 *             (mx.v1only) version 2 does not; an instance of version 1 is
 *             still open while version 2 is loaded
 *
 * and each setting must show: a missed deadline that fires (2s), a parked
 * event whose reorder window (1s) passes, a blind alert (a partition frozen
 * by hand; in `versions`, the topic only version 1 reads), a re-send
 * (active mode) read back from the broker's command topic, and an
 * operator's `steward retry` whose command is read back there too.
 *
 * watcher: one run with the three causes the watcher names (a topic no one
 * reads, so no watermark; a partition read whose watermark stands still; a
 * topic only an old version reads), in the blind alert, in
 * steward_watermark_blind and in /readyz.
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static tw_world_t w;

static void teardown(void)
{
    tw_teardown(&w);
}

/* A shadow process: a deadline on `open`, a reorder window of 1s; @OLDEV@
 * and @OLDON@ add version 1's extra event. */
static const char shadow_def[] =
    "{\"process\": \"@NAME@\", \"version\": @V@, \"mode\": \"shadow\", \"owner\": \"team\","
    " \"key\": \"/id\", \"reorder_window\": \"1s\","
    " \"events\": {\"Opened\": {\"topic\": \"@EV@\"}, \"Progressed\": {\"topic\": \"@EV@\"},"
    "            \"Closed\": {\"topic\": \"@EV@\"}@OLDEV@},"
    " \"start\": {\"on\": \"Opened\", \"to\": \"open\"},"
    " \"states\": {\"open\": {\"deadline\": \"@DL@\", \"on\": {\"Progressed\": "
    "\"working\"@OLDON@}},"
    "            \"working\": {\"deadline\": \"1h\", \"on\": {\"Closed\": \"closed\"}},"
    "            \"closed\": {\"terminal\": \"success\"}}}";

/* An active process: `asking` sends its command, once re-sent. */
static const char active_def[] =
    "{\"process\": \"@NAME@\", \"version\": 1, \"mode\": \"active\", \"owner\": \"team\","
    " \"key\": \"/id\","
    " \"events\": {\"Requested@NAME@\": {\"topic\": \"@EV@\"},"
    "            \"Done@NAME@\": {\"topic\": \"@EV@\"}},"
    " \"start\": {\"on\": \"Requested@NAME@\", \"to\": \"asking\"},"
    " \"states\": {\"asking\": {\"deadline\": \"@DL@\", \"on\": {\"Done@NAME@\": \"done\"},"
    "              \"command\": {\"topic\": \"@CMD@\", \"type\": \"Ask\","
    "                            \"payload\": {\"id\": \"${key}\", \"attempt\": \"${attempt}\"}},"
    "              \"retry\": {\"max\": 1, \"backoff\": \"1s\"}},"
    "            \"done\": {\"terminal\": \"success\"}}}";

typedef enum { MX_PLAIN, MX_PREFIX, MX_MAP, MX_VERSIONS, MX_N } mx_setting_t;

static const char *const setting_names[MX_N] = {"plain", "prefix", "map", "versions"};

/* The definitions' names for the three topics under `setting`. */
typedef struct names {
    char ev[256], cmd[256], old[256];
} names_t;

static names_t names_for(mx_setting_t setting)
{
    names_t n;
    if (setting == MX_PLAIN) {
        snprintf(n.ev, sizeof n.ev, "%smx.events", w.prefix);
        snprintf(n.cmd, sizeof n.cmd, "%smx.commands", w.prefix);
        snprintf(n.old, sizeof n.old, "%smx.v1only", w.prefix);
    } else if (setting == MX_MAP) {
        snprintf(n.ev, sizeof n.ev, "orders");
        snprintf(n.cmd, sizeof n.cmd, "asks");
        snprintf(n.old, sizeof n.old, "audits");
    } else {
        snprintf(n.ev, sizeof n.ev, "mx.events");
        snprintf(n.cmd, sizeof n.cmd, "mx.commands");
        snprintf(n.old, sizeof n.old, "mx.v1only");
    }
    return n;
}

static void write_def(const char *file, const char *text, const char *const *subs)
{
    char defs[1024];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    mkdir(defs, 0755);
    char *filled = tw_fill(text, w.prefix, subs);
    char *path = tl_write_file(defs, file, filled);
    free(path);
    free(filled);
}

static void write_shadow(const names_t *n, const char *name, int version, const char *deadline)
{
    char v[16], oldev[512] = "", oldon[128] = "", file[64];
    snprintf(v, sizeof v, "%d", version);
    if (version == 1) {
        snprintf(oldev, sizeof oldev, ", \"Audited\": {\"topic\": \"%s\"}", n->old);
        snprintf(oldon, sizeof oldon, ", \"Audited\": \"working\"");
    }
    snprintf(file, sizeof file, "%s_v%d.json", name, version);
    write_def(file, shadow_def,
              TW_LIST("@NAME@", name, "@V@", v, "@EV@", n->ev, "@OLDEV@", oldev, "@OLDON@", oldon,
                      "@DL@", deadline));
}

static void write_active(const names_t *n, const char *name, const char *deadline)
{
    char file[64];
    snprintf(file, sizeof file, "%s.json", name);
    write_def(file, active_def,
              TW_LIST("@NAME@", name, "@EV@", n->ev, "@CMD@", n->cmd, "@DL@", deadline));
}

static void write_config(mx_setting_t setting)
{
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts =
        json_pack("{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}, s:{s:s}, s:{s:s}}", "scheduler",
                  "interval", "200ms", "grace", "0s", "blind_after", "4s", "http", "listen",
                  "127.0.0.1:0", "routes", "default", "type", "log", "kafka",
                  "topic.metadata.refresh.interval.ms", "1000", "dispatch", "interval", "200ms");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    if (setting == MX_PREFIX || setting == MX_VERSIONS) {
        json_object_set_new(cfg, "topics", json_pack("{s:s}", "prefix", w.prefix));
    } else if (setting == MX_MAP) {
        char ev[256], cmd[256], old[256];
        snprintf(ev, sizeof ev, "%smx.events", w.prefix);
        snprintf(cmd, sizeof cmd, "%smx.commands", w.prefix);
        snprintf(old, sizeof old, "%smx.v1only", w.prefix);
        json_object_set_new(
            cfg, "topics",
            json_pack("{s:{s:s, s:s, s:s}}", "map", "orders", ev, "asks", cmd, "audits", old));
    }
    tw_config_write(&w, cfg);
}

static void send_event(tl_producer_t *p, const char *topic, const char *type, const char *key)
{
    char value[256];
    snprintf(value, sizeof value, "{\"type\": \"%s\", \"id\": \"%s\"}", type, key);
    tl_produce(p, topic, 0, value, -1, NULL, 0);
}

/* Every message on partition 0 of topic up to its end now, as
 * "key:attempt" words ("" when empty). */
static char *read_commands(const char *topic)
{
    char kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char *group = tl_unique("mx.reader");
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), kerr, sizeof kerr) ==
              RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof kerr) == RD_KAFKA_CONF_OK);
    free(group);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
    ck_assert_msg(rk != NULL, "consumer: %s", kerr);
    int64_t low = 0, high = 0;
    rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(rk, topic, 0, &low, &high, 10000);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "watermarks of %s: %s", topic,
                  rd_kafka_err2str(err));
    size_t len = 0, cap = 1024;
    char *out = calloc(1, cap);
    ck_assert_ptr_nonnull(out);
    if (high > low) {
        rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(list, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
        ck_assert_int_eq(rd_kafka_assign(rk, list), RD_KAFKA_RESP_ERR_NO_ERROR);
        rd_kafka_topic_partition_list_destroy(list);
        time_t until = time(NULL) + 30;
        bool done = false;
        while (!done && time(NULL) < until) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
            if (m == NULL)
                continue;
            if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                json_t *doc = json_loadb(m->payload, m->len, 0, NULL);
                const char *id = json_string_value(json_object_get(doc, "id"));
                json_t *attempt = json_object_get(doc, "attempt");
                char word[300];
                int wl = snprintf(word, sizeof word, "%s%s:%lld", len > 0 ? " " : "",
                                  id != NULL ? id : "?",
                                  json_is_integer(attempt) ? (long long) json_integer_value(attempt)
                                  : json_is_string(attempt) ? atoll(json_string_value(attempt))
                                                            : -1LL);
                json_decref(doc);
                if (len + (size_t) wl + 1 > cap) {
                    cap = (len + (size_t) wl + 1) * 2;
                    out = realloc(out, cap);
                    ck_assert_ptr_nonnull(out);
                }
                memcpy(out + len, word, (size_t) wl + 1);
                len += (size_t) wl;
                done = m->offset + 1 >= high;
            }
            rd_kafka_message_destroy(m);
        }
    }
    rd_kafka_destroy(rk);
    return out;
}

typedef struct command_word {
    const char *topic, *word;
} command_word_t;

static bool command_reached(void *arg, char *seen, size_t seen_size)
{
    const command_word_t *c = arg;
    char *got = read_commands(c->topic);
    char padded[4096], want[300];
    snprintf(padded, sizeof padded, " %s ", got);
    snprintf(want, sizeof want, " %s ", c->word);
    snprintf(seen, seen_size, "%s holds: %s", c->topic, got);
    free(got);
    return strstr(padded, want) != NULL;
}

/* Waits up to timeout_s for topic's commands to include `word`. */
static void wait_command(const char *topic, const char *word, int timeout_s)
{
    char what[300];
    snprintf(what, sizeof what, "command %s", word);
    tl_wait_until(command_reached, &(command_word_t){topic, word}, timeout_s, what, w.log);
}

static tl_output_t steward_retry(const char *process, const char *key)
{
    const char *argv[] = {NULL,      "retry", process,      key,      "--reason", "matrix",
                          "--actor", "alice", "--database", w.db_url, NULL};
    return tl_steward(argv, NULL);
}

START_TEST(matrix)
{
    mx_setting_t setting = (mx_setting_t) _i;
    char name[32];
    snprintf(name, sizeof name, "mx_%s", setting_names[setting]);
    tw_init(&w, name);
    tw_create_topics(&w, TW_LIST("mx.events", "mx.commands", "mx.v1only"), 1);
    tw_migrate(&w);
    names_t n = names_for(setting);
    char *ev = tw_topic(&w, "mx.events"), *cmd = tw_topic(&w, "mx.commands"),
         *old = tw_topic(&w, "mx.v1only");
    write_config(setting);
    write_active(&n, "mx_active", "2s");
    write_active(&n, "mx_ops", "1h");

    tl_producer_t *p = tl_producer_new();
    if (setting == MX_VERSIONS) {
        /* Version 1 starts an instance that waits, on `open`, for an event
         * version 2 no longer declares. */
        write_shadow(&n, "mx_shadow", 1, "1h");
        tw_start(&w, TW_LIST("--replica", "r1"), false);
        send_event(p, ev, "Opened", "OLD1");
        tw_wait(&w, "SELECT count(*) FROM steward.instances WHERE key = 'OLD1' AND version = 1",
                NULL, "1", 30, "the version 1 instance");
        tw_stop(&w, 20);
        char path[1100];
        snprintf(path, sizeof path, "%s/defs/mx_shadow_v1.json", w.dir);
        ck_assert_int_eq(unlink(path), 0);
        free(tl_write_file(w.dir, "steward.log", "")); /* the next address is the new run's */
    }
    write_shadow(&n, "mx_shadow", 2, "2s");
    tw_start(&w, TW_LIST("--replica", "r1"), true);

    send_event(p, ev, "Opened", "D1");             /* misses open's deadline */
    send_event(p, ev, "Closed", "P1");             /* parked: P1 never starts */
    send_event(p, ev, "Requestedmx_active", "A1"); /* re-sent after 2s */
    send_event(p, ev, "Requestedmx_ops", "R1");    /* retried by hand */
    if (setting == MX_VERSIONS)
        send_event(p, old, "Audited", "OLD1"); /* only version 1 reads it: kept, not lost */
    tl_producer_free(p);

    tw_wait(&w,
            "SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND process = "
            "'mx_shadow' AND key = 'D1'",
            NULL, "1", 40, "the missed deadline's alert");
    tw_wait(&w, "SELECT count(*) FROM steward.history WHERE outcome = 'violation' AND key = 'P1'",
            NULL, "1", 40, "the parked event's expiry");
    tw_wait(&w, "SELECT count(*) FROM steward.alerts WHERE kind = 'sequence' AND key = 'P1'", NULL,
            "1", 20, "the sequence alert of the expired event");

    /* The re-send: queued for the broker's command topic, and there. */
    tw_wait(&w,
            "SELECT count(*) FROM steward.commands WHERE key = 'A1' AND attempt = 1 "
            "AND sent_at IS NOT NULL",
            NULL, "1", 40, "the re-send");
    tw_expect(&w, "SELECT string_agg(DISTINCT topic, ',') FROM steward.commands", NULL, cmd);
    wait_command(cmd, "A1:0", 30);
    wait_command(cmd, "A1:1", 30);

    /* The operator's retry: the same topic. */
    tw_wait(&w, "SELECT count(*) FROM steward.commands WHERE key = 'R1' AND sent_at IS NOT NULL",
            NULL, "1", 30, "R1's first command");
    tl_output_t o = steward_retry("mx_ops", "R1");
    ck_assert_msg(o.status == 0, "steward retry: %d %s", o.status, o.err);
    ck_assert_msg(tl_contains(o.out, cmd), "retry queued elsewhere: %s", o.out);
    tl_output_free(&o);
    tw_wait(&w,
            "SELECT count(*) FROM steward.commands WHERE key = 'R1' AND attempt = 1 "
            "AND sent_at IS NOT NULL",
            NULL, "1", 30, "the operator's retry");
    tw_expect(&w, "SELECT string_agg(DISTINCT topic, ',') FROM steward.commands", NULL, cmd);
    wait_command(cmd, "R1:1", 30);

    /* A blind alert about the broker's topic names. */
    if (setting == MX_VERSIONS) {
        char want[600];
        snprintf(want, sizeof want,
                 "%s is read only by version 1 of mx_shadow, which has open instances but is not "
                 "loaded",
                 old);
        const char *const *params = TW_LIST(want);
        tw_wait(&w,
                "SELECT count(*) FROM steward.alerts WHERE kind = 'blind' "
                "AND resolved_at IS NULL AND strpos(summary, $1) > 0",
                params, "1", 30, "the blind alert naming the topic only version 1 reads");
        /* Its event cannot be judged while version 1 is not loaded: it is
         * kept with the reason, never consumed and dropped. */
        const char *const *topic = TW_LIST(old);
        tw_wait(&w,
                "SELECT count(*) FROM steward.rejected WHERE topic = $1 AND reason = "
                "'unknown_type' AND detail LIKE '%read only by an older version%'",
                topic, "1", 30, "the old version's event kept in steward.rejected");
    } else {
        /* A partition that is read while its watermark stands still: what a
         * producer's clock far ahead leaves behind. */
        const char *const *params = TW_LIST(ev);
        PGresult *res =
            PQexecParams(w.conn,
                         "UPDATE steward.offsets SET watermark = '2100-01-01T00:00:00Z', "
                         "  watermark_moved_at = now() - interval '1 hour' WHERE topic = $1",
                         1, NULL, params, NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "freeze: %s",
                      PQerrorMessage(w.conn));
        ck_assert_str_eq(PQcmdTuples(res), "1");
        PQclear(res);
        char want[600];
        snprintf(want, sizeof want, "%s[0] is read but its watermark is frozen at 2100-01-01", ev);
        const char *const *wparams = TW_LIST(want);
        tw_wait(&w,
                "SELECT count(*) FROM steward.alerts WHERE kind = 'blind' "
                "AND resolved_at IS NULL AND strpos(summary, $1) > 0",
                wparams, "1", 30, "the blind alert naming the frozen partition");
    }
    tw_stop(&w, 20);
    free(ev);
    free(cmd);
    free(old);
}
END_TEST

/* Waits until /readyz's `watermarks` holds `cause` for `process`. */
typedef struct ready_cause {
    const char *url, *process, *cause;
} ready_cause_t;

static bool ready_lists_cause(void *arg, char *seen, size_t seen_size)
{
    const ready_cause_t *r = arg;
    long status = 0;
    char *body = tl_http_get(r->url, &status);
    json_t *doc = body != NULL ? json_loads(body, 0, NULL) : NULL;
    json_t *list = json_object_get(doc, "watermarks");
    bool found = false;
    for (size_t i = 0; i < json_array_size(list) && !found; i++) {
        json_t *e = json_array_get(list, i);
        if (strcmp(json_string_value(json_object_get(e, "process")), r->process) != 0)
            continue;
        json_t *blind = json_object_get(e, "blind");
        for (size_t c = 0; c < json_array_size(blind); c++)
            found = found || strcmp(json_string_value(json_array_get(blind, c)), r->cause) == 0;
    }
    json_decref(doc);
    snprintf(seen, seen_size, "%s", body);
    free(body);
    return found;
}

static void wait_ready_cause(const char *process, const char *cause, int timeout_s)
{
    char url[256], what[300];
    snprintf(url, sizeof url, "%s/readyz", w.base);
    snprintf(what, sizeof what, "/readyz to say %s is blind (%s)", process, cause);
    tl_wait_until(ready_lists_cause, &(ready_cause_t){url, process, cause}, timeout_s, what, w.log);
}

/* Waits until /metrics holds `line`. */
static void wait_metric(const char *line, int timeout_s)
{
    tl_wait_metric(w.base, line, timeout_s);
}

/*
 * Waits until the open blind alert lists `part`. An open blind alert keeps
 * the listing it opened with, so one that does not list it yet is resolved
 * by hand: the next pass opens one listing every cause there is then.
 */
static bool blind_alert_lists(void *part, char *seen, size_t seen_size)
{
    long listed = tw_scalar_long(
        &w,
        "SELECT count(*) FROM steward.alerts WHERE kind = 'blind' AND resolved_at IS NULL "
        "AND strpos((SELECT string_agg(x, ' ') FROM jsonb_array_elements_text("
        "  details->'partitions') x), $1) > 0",
        TW_LIST((const char *) part));
    if (listed == 1)
        return true;
    char *open = tw_scalar(&w,
                           "SELECT string_agg(details->>'partitions', ' | ') FROM steward.alerts "
                           "WHERE kind = 'blind' AND resolved_at IS NULL",
                           NULL);
    snprintf(seen, seen_size, "open blind alerts list: %s", open != NULL ? open : "(none open)");
    free(open);
    tl_db_exec(w.conn, "UPDATE steward.alerts SET resolved_at = now(), resolution = 'test' "
                       "WHERE kind = 'blind' AND resolved_at IS NULL");
    return false;
}

static void wait_blind_listing(const char *part, int timeout_s)
{
    char what[300];
    snprintf(what, sizeof what, "a blind alert listing %s", part);
    tl_wait_until(blind_alert_lists, (void *) part, timeout_s, what, w.log);
}

START_TEST(watcher_names_each_cause)
{
    tw_init(&w, "mx_watch");
    tw_create_topics(&w, TW_LIST("mx.events", "mx.commands", "mx.v1only", "wf.events"), 1);
    tw_migrate(&w);
    names_t n = names_for(MX_PREFIX);
    char *ev = tw_topic(&w, "mx.events"), *old = tw_topic(&w, "mx.v1only"),
         *frozen = tw_topic(&w, "wf.events"), *missing = tw_topic(&w, "wn.missing");
    write_config(MX_PREFIX);

    /* mx_shadow: version 1 open, version 2 loaded (an old version's topic).
     * wf: its one partition frozen by hand. wn: its topic was never created,
     * so no partition is read and it has no watermark. */
    write_shadow(&n, "mx_shadow", 1, "1h");
    names_t nf = n, nn = n;
    snprintf(nf.ev, sizeof nf.ev, "wf.events");
    snprintf(nn.ev, sizeof nn.ev, "wn.missing");
    write_shadow(&nf, "wf", 2, "1h");
    tl_producer_t *p = tl_producer_new();
    tw_start(&w, TW_LIST("--replica", "r1"), false);
    send_event(p, ev, "Opened", "OLD1");
    send_event(p, frozen, "Opened", "F1");
    tl_producer_free(p);
    tw_wait(&w, "SELECT count(*) FROM steward.instances WHERE key IN ('OLD1', 'F1')", NULL, "2", 30,
            "the instances");
    tw_stop(&w, 20);
    char path[1100];
    snprintf(path, sizeof path, "%s/defs/mx_shadow_v1.json", w.dir);
    ck_assert_int_eq(unlink(path), 0);
    write_shadow(&n, "mx_shadow", 2, "1h");
    write_shadow(&nn, "wn", 2, "1h");
    free(tl_write_file(w.dir, "steward.log", "")); /* the next address is the new run's */
    tw_start(&w, TW_LIST("--replica", "r1"), true);

    /* The topic only version 1 reads: at once. */
    wait_ready_cause("mx_shadow", "old_version_topic", 30);
    wait_metric("steward_watermark_blind{process=\"mx_shadow\",cause=\"old_version_topic\"} 1", 10);
    char want[700];
    snprintf(want, sizeof want, "%s is read only by version 1 of mx_shadow", old);
    const char *const *p1 = TW_LIST(want);
    tw_wait(&w,
            "SELECT count(*) FROM steward.alerts WHERE kind = 'blind' AND resolved_at IS NULL "
            "AND strpos(summary, $1) > 0",
            p1, "1", 20, "the old version's topic in the blind alert");

    /* Frozen: read, but its watermark stands still. */
    const char *const *fp = TW_LIST(frozen);
    tw_wait(&w, "SELECT count(*) FROM steward.offsets WHERE topic = $1", fp, "1", 30,
            "wf's partition claimed");
    PGresult *res = PQexecParams(w.conn,
                                 "UPDATE steward.offsets SET watermark = '2100-01-01T00:00:00Z', "
                                 "  watermark_moved_at = now() - interval '1 hour' "
                                 "WHERE topic = $1",
                                 1, NULL, fp, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(res) == PGRES_COMMAND_OK, "freeze: %s", PQerrorMessage(w.conn));
    PQclear(res);
    wait_ready_cause("wf", "frozen", 30);
    wait_metric("steward_watermark_blind{process=\"wf\",cause=\"frozen\"} 1", 10);
    snprintf(want, sizeof want, "%s[0] is read but its watermark is frozen", frozen);
    wait_blind_listing(want, 30);

    /* No watermark: the topic no one can read, once the group had time to
     * form (a minute from the start). */
    wait_ready_cause("wn", "no_watermark", 10);
    snprintf(want, sizeof want, "%s: no partition read (no watermark)", missing);
    wait_blind_listing(want, 100);
    wait_metric("steward_watermark_blind{process=\"wn\",cause=\"no_watermark\"} 1", 10);
    tw_stop(&w, 20);
    free(ev);
    free(old);
    free(frozen);
    free(missing);
}
END_TEST

Suite *topics_matrix_suite(void);
Suite *topics_matrix_suite(void)
{
    Suite *s = suite_create("topics_matrix");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_loop_test(tc, matrix, MX_PLAIN, MX_N);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("watcher");
    tcase_set_timeout(tw, 240);
    tcase_add_checked_fixture(tw, NULL, teardown);
    tcase_add_test(tw, watcher_names_each_cause);
    suite_add_tcase(s, tw);
    return s;
}
