/*
 * test_envelopes - one process whose topics belong to teams with their own
 * conventions, on the real broker and PostgreSQL: the assessments team
 * puts the type in a header of its own (x-event-type), the claims and
 * payments topics keep the process's envelope (the type at /type, the key
 * at /claimId). Every topic's events are judged: a claim that is paid
 * finishes, one that is not misses its deadline and pages, a message
 * without the team's header is rejected naming the topic's rule, and the
 * header means nothing on the other topics.
 *
 * Then steward restarts with a second version of the definition in which
 * the payments team keys its messages by the Kafka message key: the
 * stalled claim of version 1 is paid in the new convention and finishes,
 * and a new claim runs on version 2 through all three topics.
 *
 * four topics: one version whose four topics each keep a convention of
 * their own (the process's envelope; a type header; the type, key and an
 * epoch-seconds time in fields of their own; the message key and a custom
 * id). Every event of five claims is judged where its topic says, under
 * the id its topic names, and the claim that stalls pages.
 *
 * framing: values in the Confluent wire format (magic byte 0, a schema
 * id): read where the topic says "confluent_json", rejected naming the
 * schema id where it does not, or where the payload is not JSON; and
 * steward backtest counts those rejections.
 */
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static tw_world_t w;

static void teardown(void)
{
    tw_teardown(&w);
}

static const char claim_def[] =
    "{\"process\": \"insurance_claim\", \"version\": @V@, \"mode\": \"shadow\","
    " \"owner\": \"claims\", \"key\": \"/claimId\","
    " \"topics\": {\"@P@assessments\": {\"envelope\": {\"type\": {\"header\": \"x-event-type\"}}}"
    "@PAYMENTS@},"
    " \"events\": {\"ClaimFiled\": {\"topic\": \"@P@claims\"},"
    "            \"ClaimAssessed\": {\"topic\": \"@P@assessments\"},"
    "            \"ClaimRejected\": {\"topic\": \"@P@assessments\"},"
    "            \"ClaimPaid\": {\"topic\": \"@P@payments\"}},"
    " \"start\": {\"on\": \"ClaimFiled\", \"to\": \"filed\"},"
    " \"states\": {\"filed\": {\"deadline\": \"1h\","
    "                        \"on\": {\"ClaimAssessed\": \"assessed\","
    "                               \"ClaimRejected\": \"rejected\"}},"
    "            \"assessed\": {\"deadline\": \"@DL@\", \"owner\": \"payments\","
    "                           \"on\": {\"ClaimPaid\": \"paid\"}},"
    "            \"paid\": {\"terminal\": \"success\"},"
    "            \"rejected\": {\"terminal\": \"rejected\"}}}";

static void write_version(int version, const char *deadline, const char *payments)
{
    char v[16], file[64], defs[1100];
    snprintf(defs, sizeof defs, "%s/defs", w.dir);
    mkdir(defs, 0755);
    snprintf(v, sizeof v, "%d", version);
    snprintf(file, sizeof file, "defs/claim_v%d.json", version);
    char *filled =
        tw_fill(claim_def, w.prefix, TW_LIST("@V@", v, "@DL@", deadline, "@PAYMENTS@", payments));
    char *path = tl_write_file(w.dir, file, filled);
    free(path);
    free(filled);
}

static rd_kafka_t *producer(void)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), err, sizeof err) ==
              RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(conf, "acks", "all", err, sizeof err) == RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "producer: %s", err);
    return rk;
}

/* Produces value to the world's `topic` with a message key (NULL: none)
 * and, when type is not NULL, the header x-event-type. */
static void produce(rd_kafka_t *rk, const char *topic, const char *key, const char *type,
                    const char *value)
{
    char *name = tw_topic(&w, topic);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
    if (type != NULL)
        rd_kafka_header_add(hdrs, "x-event-type", -1, type, -1);
    size_t key_len = key != NULL ? strlen(key) : 0;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(name), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(key, key_len),
        RD_KAFKA_V_VALUE((void *) value, strlen(value)), RD_KAFKA_V_HEADERS(hdrs),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_headers_destroy(hdrs);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
    free(name);
}

static void flush(rd_kafka_t *rk)
{
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
}

START_TEST(each_team_keeps_its_conventions)
{
    tw_init(&w, "envelopes");
    tw_create_topics(&w, TW_LIST("claims", "assessments", "payments"), 1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "defs");
    json_t *parts =
        json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}}", "scheduler", "interval", "200ms",
                  "grace", "0s", "http", "listen", "", "routes", "default", "type", "log");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    write_version(1, "2s", "");
    tw_start(&w, NULL, false);

    rd_kafka_t *rk = producer();
    /* C1: every step on time. On claims the assessments team's header is
     * just a header: the type is the payload's. */
    produce(rk, "claims", NULL, "ClaimRejected",
            "{\"type\": \"ClaimFiled\", \"claimId\": \"C1\", \"id\": \"f-C1\"}");
    /* On assessments the header is the type, whatever the payload says. */
    produce(rk, "assessments", NULL, "ClaimAssessed",
            "{\"type\": \"ClaimRejected\", \"claimId\": \"C1\", \"id\": \"a-C1\"}");
    produce(rk, "payments", NULL, NULL,
            "{\"type\": \"ClaimPaid\", \"claimId\": \"C1\", \"id\": \"p-C1\"}");
    /* C2: assessed, never paid under version 1. */
    produce(rk, "claims", NULL, NULL,
            "{\"type\": \"ClaimFiled\", \"claimId\": \"C2\", \"id\": \"f-C2\"}");
    produce(rk, "assessments", NULL, "ClaimAssessed", "{\"claimId\": \"C2\", \"id\": \"a-C2\"}");
    /* C9: the assessments team's message without its header. */
    produce(rk, "claims", NULL, NULL,
            "{\"type\": \"ClaimFiled\", \"claimId\": \"C9\", \"id\": \"f-C9\"}");
    produce(rk, "assessments", NULL, NULL,
            "{\"type\": \"ClaimAssessed\", \"claimId\": \"C9\", \"id\": \"a-C9\"}");
    flush(rk);

    tw_wait(&w, "SELECT status FROM steward.instances WHERE key = 'C1'", NULL, "success", 60,
            "C1 paid through three topics");
    tw_wait(&w,
            "SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'C2' "
            "AND state = 'assessed' AND owner = 'payments'",
            NULL, "1", 60, "C2's missed deadline on assessed");
    tw_wait(&w,
            "SELECT count(*) FROM steward.rejected WHERE reason = 'missing_type' "
            "AND detail LIKE '%x-event-type%' AND detail LIKE '%topic %assessments%'",
            NULL, "1", 30, "the message without the team's header, rejected naming its topic");
    tw_expect(&w, "SELECT state FROM steward.instances WHERE key = 'C9'", NULL, "filed");
    tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "1");

    /* A restart with version 2: payments are keyed by the message key. */
    tw_stop(&w, 30);
    char payments[512];
    snprintf(payments, sizeof payments, ", \"%spayments\": {\"key\": {\"from\": \"message_key\"}}",
             w.prefix);
    write_version(2, "1h", payments);
    tw_start(&w, NULL, false);
    tw_wait(&w, "SELECT max(version) FROM steward.definitions WHERE process = 'insurance_claim'",
            NULL, "2", 30, "version 2 recorded");

    /* C2 (version 1) paid in the payments team's new convention. */
    produce(rk, "payments", "C2", NULL, "{\"type\": \"ClaimPaid\", \"id\": \"p-C2\"}");
    /* C3 starts on version 2, through all three topics. */
    produce(rk, "claims", NULL, NULL,
            "{\"type\": \"ClaimFiled\", \"claimId\": \"C3\", \"id\": \"f-C3\"}");
    produce(rk, "assessments", NULL, "ClaimAssessed", "{\"claimId\": \"C3\", \"id\": \"a-C3\"}");
    produce(rk, "payments", "C3", NULL,
            "{\"type\": \"ClaimPaid\", \"claimId\": \"not-the-key\", \"id\": \"p-C3\"}");
    flush(rk);
    rd_kafka_destroy(rk);

    tw_wait(&w, "SELECT status || ':' || version FROM steward.instances WHERE key = 'C2'", NULL,
            "success:1", 60, "C2 paid after the restart");
    tw_wait(&w, "SELECT count(*) FROM steward.alerts WHERE key = 'C2' AND resolved_at IS NOT NULL",
            NULL, "1", 30, "C2's page resolved by its payment");
    tw_wait(&w, "SELECT status || ':' || version FROM steward.instances WHERE key = 'C3'", NULL,
            "success:2", 60, "C3 through version 2");
    tw_expect(&w, "SELECT count(*) FROM steward.instances WHERE key = 'not-the-key'", NULL, "0");
    tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "1");
    tw_stop(&w, 30);
}
END_TEST

/*
 * Four topics, four conventions, one version: claims as the process says
 * (type at /type, id at /id, key at /claimId, the Kafka timestamp);
 * assessments with the type in the x-event-type header; approvals with
 * the type at /kind, the key at /claim/ref and the time in epoch seconds
 * at /ts; payments keyed by the Kafka message key, the id at /eventId.
 * Each message also carries the other conventions' fields with wrong
 * values, so a rule applied on the wrong topic would show.
 */
static const char four_def[] =
    "{\"process\": \"claim_journey\", \"version\": 1, \"mode\": \"shadow\","
    " \"owner\": \"claims\", \"key\": \"/claimId\","
    " \"topics\": {"
    "   \"@P@assessments\": {\"envelope\": {\"type\": {\"header\": \"x-event-type\"}}},"
    "   \"@P@approvals\": {\"key\": \"/claim/ref\","
    "                    \"envelope\": {\"type\": \"/kind\","
    "                                 \"time\": {\"pointer\": \"/ts\","
    "                                          \"format\": \"epoch_seconds\"}}},"
    "   \"@P@payments\": {\"key\": {\"from\": \"message_key\"},"
    "                   \"envelope\": {\"id\": \"/eventId\"}}},"
    " \"events\": {\"ClaimFiled\": {\"topic\": \"@P@claims\"},"
    "            \"ClaimAssessed\": {\"topic\": \"@P@assessments\"},"
    "            \"ClaimRejected\": {\"topic\": \"@P@assessments\"},"
    "            \"ClaimApproved\": {\"topic\": \"@P@approvals\"},"
    "            \"ClaimPaid\": {\"topic\": \"@P@payments\"}},"
    " \"start\": {\"on\": \"ClaimFiled\", \"to\": \"filed\"},"
    " \"states\": {\"filed\": {\"deadline\": \"1h\","
    "                        \"on\": {\"ClaimAssessed\": \"assessed\","
    "                               \"ClaimRejected\": \"rejected\"}},"
    "            \"assessed\": {\"deadline\": \"1h\", \"owner\": \"approvals\","
    "                           \"on\": {\"ClaimApproved\": \"approved\"}},"
    "            \"approved\": {\"deadline\": \"3s\", \"owner\": \"payments\","
    "                           \"on\": {\"ClaimPaid\": \"paid\"}},"
    "            \"paid\": {\"terminal\": \"success\"},"
    "            \"rejected\": {\"terminal\": \"rejected\"}}}";

/* The instance's judged events, in order: type@topic#id for every row
 * that started or moved it. */
static char *path_of(const char *key)
{
    return tw_scalar(&w,
                     "SELECT string_agg(event_type || '@' || substr(topic, length($2) + 1) || '#' "
                     "|| event_id, ' ' ORDER BY id) FROM steward.history "
                     "WHERE process = 'claim_journey' AND key = $1 "
                     "AND outcome IN ('started', 'advanced')",
                     TW_LIST(key, w.prefix));
}

START_TEST(four_topics_four_conventions_in_one_version)
{
    tw_init(&w, "envelopes4");
    tw_create_topics(&w, TW_LIST("claims", "assessments", "approvals", "payments"), 1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "claim_journey.json");
    json_t *parts =
        json_pack("{s:{s:s, s:s}, s:{s:s}, s:{s:[{s:s}]}}", "scheduler", "interval", "200ms",
                  "grace", "0s", "http", "listen", "", "routes", "default", "type", "log");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    char *filled = tw_fill(four_def, w.prefix, NULL);
    char *def_path = tl_write_file(w.dir, "claim_journey.json", filled);
    free(filled);
    free(def_path);
    tw_start(&w, NULL, false);

    /* C1..C3 paid, C4 rejected, C5 approved and never paid. */
    const char *claims[] = {"C1", "C2", "C3", "C4", "C5"};
    long long ts[5];
    rd_kafka_t *rk = producer();
    for (int i = 0; i < 5; i++) {
        const char *c = claims[i];
        char v[512];
        /* claims: the message key is not the correlation key here */
        snprintf(v, sizeof v,
                 "{\"type\": \"ClaimFiled\", \"claimId\": \"%s\", \"id\": \"f-%s\","
                 " \"kind\": \"ClaimPaid\", \"eventId\": \"wrong-%s\"}",
                 c, c, c);
        produce(rk, "claims", "not-a-claim", "ClaimRejected", v);
        /* assessments: the header names the type, whatever /type says */
        snprintf(v, sizeof v, "{\"type\": \"%s\", \"claimId\": \"%s\", \"id\": \"a-%s\"}",
                 i == 3 ? "ClaimAssessed" : "ClaimRejected", c, c);
        produce(rk, "assessments", NULL, i == 3 ? "ClaimRejected" : "ClaimAssessed", v);
        if (i == 3)
            continue;
        /* approvals: type, key and time in the team's own fields; a
         * whole second, as epoch seconds can say, before now */
        ts[i] = (long long) time(NULL) - 1;
        snprintf(v, sizeof v,
                 "{\"kind\": \"ClaimApproved\", \"type\": \"ClaimRejected\","
                 " \"claim\": {\"ref\": \"%s\"}, \"claimId\": \"decoy-%s\", \"id\": \"ap-%s\","
                 " \"ts\": %lld}",
                 c, c, c, ts[i]);
        produce(rk, "approvals", NULL, "ClaimPaid", v);
        if (i == 4)
            continue;
        /* payments: keyed by the message, the id at /eventId */
        snprintf(v, sizeof v,
                 "{\"type\": \"ClaimPaid\", \"claimId\": \"not-the-key\", \"id\": \"wrong-%s\","
                 " \"eventId\": \"p-%s\"}",
                 c, c);
        produce(rk, "payments", c, NULL, v);
    }
    flush(rk);
    rd_kafka_destroy(rk);

    for (int i = 0; i < 3; i++)
        tw_wait(&w, "SELECT status || ':' || state FROM steward.instances WHERE key = $1",
                TW_LIST(claims[i]), "success:paid", 60, "a claim paid through four topics");
    tw_wait(&w, "SELECT status || ':' || state FROM steward.instances WHERE key = 'C4'", NULL,
            "rejected:rejected", 60, "C4 rejected by the header's type");
    tw_wait(&w,
            "SELECT count(*) FROM steward.alerts WHERE kind = 'deadline' AND key = 'C5' "
            "AND state = 'approved' AND owner = 'payments'",
            NULL, "1", 60, "C5's missed deadline on approved");
    tw_expect(&w, "SELECT state FROM steward.instances WHERE key = 'C5'", NULL, "approved");

    /* Every event judged under its own topic's rules. */
    for (int i = 0; i < 5; i++) {
        const char *c = claims[i];
        char want[512];
        if (i == 3)
            snprintf(want, sizeof want, "ClaimFiled@claims#f-%s ClaimRejected@assessments#a-%s", c,
                     c);
        else if (i == 4)
            snprintf(want, sizeof want,
                     "ClaimFiled@claims#f-%s ClaimAssessed@assessments#a-%s "
                     "ClaimApproved@approvals#ap-%s",
                     c, c, c);
        else
            snprintf(want, sizeof want,
                     "ClaimFiled@claims#f-%s ClaimAssessed@assessments#a-%s "
                     "ClaimApproved@approvals#ap-%s ClaimPaid@payments#p-%s",
                     c, c, c, c);
        char *got = path_of(c);
        ck_assert_msg(got != NULL && strcmp(got, want) == 0, "%s: %s, not %s", c,
                      got ? got : "(none)", want);
        free(got);
        if (i == 3)
            continue;
        /* the approval's time is its /ts, not its Kafka timestamp */
        char at[32];
        snprintf(at, sizeof at, "%lld", ts[i]);
        tw_expect(&w,
                  "SELECT extract(epoch FROM event_time)::bigint FROM steward.history "
                  "WHERE key = $1 AND event_type = 'ClaimApproved'",
                  TW_LIST(c), at);
    }
    tw_expect(&w, "SELECT count(*) FROM steward.instances", NULL, "5");
    tw_expect(&w, "SELECT count(*) FROM steward.alerts", NULL, "1");
    tw_expect(&w, "SELECT count(*) FROM steward.rejected", NULL, "0");
    /* A payment read before its approval waits for it (parked): nothing
     * else is out of place. */
    tw_expect(&w,
              "SELECT count(*) FROM steward.history "
              "WHERE outcome NOT IN ('started', 'advanced', 'parked')",
              NULL, "0");
    tw_stop(&w, 30);
}
END_TEST

/* value framed with schema id `id` (the Confluent wire format) */
static void produce_framed(rd_kafka_t *rk, const char *topic, unsigned id, const char *payload,
                           size_t len)
{
    char buf[512];
    ck_assert_uint_le(len + 5, sizeof buf);
    buf[0] = 0;
    buf[1] = (char) (id >> 24);
    buf[2] = (char) (id >> 16);
    buf[3] = (char) (id >> 8);
    buf[4] = (char) id;
    memcpy(buf + 5, payload, len);
    char *name = tw_topic(&w, topic);
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(name), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_VALUE(buf, len + 5),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
    free(name);
}

static const char policy_def[] =
    "{\"process\": \"policy\", \"version\": 1, \"mode\": \"shadow\", \"owner\": \"policies\","
    " \"key\": \"/policyId\","
    " \"topics\": {\"@P@policies\": {\"format\": \"confluent_json\"}},"
    " \"events\": {\"PolicyQuoted\": {\"topic\": \"@P@quotes\"},"
    "            \"PolicyIssued\": {\"topic\": \"@P@policies\"}},"
    " \"start\": {\"on\": \"PolicyQuoted\", \"to\": \"quoted\"},"
    " \"states\": {\"quoted\": {\"deadline\": \"1h\", \"on\": {\"PolicyIssued\": \"issued\"}},"
    "            \"issued\": {\"terminal\": \"success\"}}}";

START_TEST(framed_values_are_read_where_declared)
{
    tw_init(&w, "framing");
    tw_create_topics(&w, TW_LIST("quotes", "policies"), 1);
    tw_migrate(&w);
    json_t *cfg = tw_config(&w, "policy.json");
    json_t *parts = json_pack("{s:{s:s}, s:{s:s}, s:{s:[{s:s}]}}", "scheduler", "interval", "200ms",
                              "http", "listen", "", "routes", "default", "type", "log");
    ck_assert_int_eq(json_object_update(cfg, parts), 0);
    json_decref(parts);
    tw_config_write(&w, cfg);
    char *filled = tw_fill(policy_def, w.prefix, NULL);
    char *def_path = tl_write_file(w.dir, "policy.json", filled);
    free(filled);
    tw_start(&w, NULL, false);

    rd_kafka_t *rk = producer();
    const char q1[] = "{\"type\": \"PolicyQuoted\", \"policyId\": \"P1\"}";
    const char i1[] = "{\"type\": \"PolicyIssued\", \"policyId\": \"P1\"}";
    const char avro[] = "\x04P2\x18PolicyIssued";
    produce(rk, "quotes", NULL, NULL, q1);
    produce_framed(rk, "policies", 7, i1, strlen(i1));        /* read: confluent_json */
    produce_framed(rk, "quotes", 7, q1, strlen(q1));          /* quotes are plain JSON */
    produce_framed(rk, "policies", 9, avro, sizeof avro - 1); /* not JSON after the id */
    flush(rk);
    rd_kafka_destroy(rk);

    tw_wait(&w, "SELECT status FROM steward.instances WHERE key = 'P1'", NULL, "success", 60,
            "P1 issued through a framed value");
    tw_wait(&w, "SELECT count(*) FROM steward.rejected WHERE reason = 'schema_registry_format'",
            NULL, "2", 30, "the two framed values Steward cannot read");
    char *quotes = tw_topic(&w, "quotes"), *policies = tw_topic(&w, "policies");
    tw_expect(&w,
              "SELECT count(*) FROM steward.rejected WHERE topic = $1 "
              "AND detail LIKE '%schema id 7%confluent_json%'",
              TW_LIST(quotes), "1");
    tw_expect(&w,
              "SELECT count(*) FROM steward.rejected WHERE topic = $1 "
              "AND detail LIKE '%schema id 9%not a JSON object%'",
              TW_LIST(policies), "1");
    tw_stop(&w, 30);

    /* The backtest of the same definition counts them. */
    const char *argv[] = {NULL,  "backtest",  "--definition",     def_path,     "--from",
                          "10m", "--brokers", tl_kafka_brokers(), "--database", w.db_url,
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0 && tl_contains(o.out, "messages rejected: 2 (") &&
                      tl_contains(o.out, "schema_registry_format 2") &&
                      tl_contains(o.out, "schema id 9"),
                  "exit %d\n%s\n%s", o.status, o.out, o.err);
    tl_output_free(&o);
    free(quotes);
    free(policies);
    free(def_path);
}
END_TEST

Suite *envelopes_suite(void)
{
    Suite *s = suite_create("envelopes");
    TCase *tc = tcase_create("envelopes");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, each_team_keeps_its_conventions);
    tcase_add_test(tc, four_topics_four_conventions_in_one_version);
    tcase_add_test(tc, framed_values_are_read_where_declared);
    suite_add_tcase(s, tc);
    return s;
}
