/*
 * test_discover - `steward discover` on the simulator's six-service order
 * traffic on the real broker recovers the order flow: the same start
 * event, key and transitions as the simulator's own definition, for the
 * paths that occurred; and its draft passes `steward check`.
 *
 * States are compared by the event that enters them: the draft names a
 * state after that event, the simulator's definition by meaning
 * ("awaiting_payment"), and in both each state has one entering event.
 *
 * And claims as teams publish them: the claim id in the Kafka message key
 * (the only place payments carry it), an unrelated type on the payments
 * topic, the type, id and time in fields of their own (--type, --id,
 * --time), events whose Kafka timestamps disagree with their own time,
 * and duplicates under the custom id: the draft has the right key, states
 * and terminals, and passes `steward check`; some claims stall, and a
 * backtest of the unedited draft over the same topics pages exactly those.
 *
 * And one topic whose team puts the type in a header of its own, read by
 * the per-topic --type and declared in the draft's topics.
 */
#include "common/rfc3339.h"
#include "definitions/def.h"
#include "testlib.h"

#include <check.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Runs steward-sim with argv (argv[0] ignored); returns its exit code. */
static int run_sim(const char *const *argv, const char *log_path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *log = freopen(log_path, "w", stdout);
        if (log != NULL)
            dup2(fileno(stdout), 2);
        execv(STEWARD_SIM_BINARY, (char *const *) argv);
        _exit(127);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/*
 * steward-sim's orders on the topics under `prefix`, virtual time
 * compressed so they span minutes, with `extra` (NULL-terminated) after
 * the common arguments; its output in log_path, shown when it fails.
 */
static void sim_produce(const char *prefix, const char *orders, const char *seed,
                        const char *const *extra, const char *log_path)
{
    const char *argv[48] = {"steward-sim",    "--brokers", tl_kafka_brokers(),
                            "--topic-prefix", prefix,      "--orders",
                            orders,           "--seed",    seed,
                            "--time-mode",    "virtual",   "--time-scale",
                            "0.001",          "--quiet"};
    size_t n = 14;
    for (size_t i = 0; extra[i] != NULL; i++) {
        ck_assert_uint_lt(n, sizeof argv / sizeof *argv - 1);
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    int rc = run_sim(argv, log_path);
    if (rc != 0)
        tl_print_tail(log_path, 4000);
    ck_assert_int_eq(rc, 0);
}

/* The event entering each state: the start event for start.to, else the
 * event of a transition into it; NULL when none does. */
static const char **entering(const def_t *def)
{
    const char **in = calloc(def->n_states, sizeof *in);
    in[def->start_state] = def->events[def->start_event].name;
    for (size_t s = 0; s < def->n_states; s++) {
        for (size_t t = 0; t < def->states[s].n_on; t++) {
            const def_transition_t *tr = &def->states[s].on[t];
            const char *ev = def->events[tr->event].name;
            ck_assert_msg(in[tr->to] == NULL || strcmp(in[tr->to], ev) == 0,
                          "state %s entered by %s and %s", def->states[tr->to].name, in[tr->to],
                          ev);
            in[tr->to] = ev;
        }
    }
    return in;
}

static int compare_lines(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

/* "A>B" for each transition, where A enters the source state and B is
 * the event; terminal states' entering events as "A|end". Sorted, one per
 * line. */
static char *transitions(const def_t *def)
{
    const char **in = entering(def);
    size_t cap = 64, n = 0;
    char **lines = calloc(cap, sizeof *lines);
    for (size_t s = 0; s < def->n_states; s++) {
        if (def->states[s].terminal != NULL && in[s] != NULL) {
            lines[n] = malloc(300);
            snprintf(lines[n++], 300, "%s|end", in[s]);
        }
        for (size_t t = 0; t < def->states[s].n_on && n < cap; t++) {
            lines[n] = malloc(600);
            snprintf(lines[n++], 600, "%s>%s", in[s], def->events[def->states[s].on[t].event].name);
        }
    }
    qsort(lines, n, sizeof *lines, compare_lines);
    char *all = calloc(n * 600 + 1, 1);
    for (size_t i = 0; i < n; i++) {
        strcat(all, lines[i]);
        strcat(all, "\n");
        free(lines[i]);
    }
    free(lines);
    free(in);
    return all;
}

START_TEST(discover_recovers_the_simulators_order_flow)
{
    const char *dir = tl_tmpdir();
    char *unique = tl_unique("disc"), prefix[128];
    char truth_path[512], draft_path[512], sim_log[512], topics[1024] = "";
    snprintf(truth_path, sizeof truth_path, "%s/truth.json", dir);
    snprintf(draft_path, sizeof draft_path, "%s/draft.json", dir);
    snprintf(sim_log, sizeof sim_log, "%s/sim.log", dir);
    snprintf(prefix, sizeof prefix, "%s_", unique);

    /* Every path (declines, refunds), with duplicates and reordered
     * events; virtual time compressed so the orders span minutes. */
    const char *sim_extra[] = {"--decline-rate",
                               "0.05",
                               "--stock-fail-rate",
                               "0.05",
                               "--duplicate-rate",
                               "0.03",
                               "--reorder-rate",
                               "0.03",
                               "--write-definition",
                               truth_path,
                               NULL};
    sim_produce(prefix, "400", "11", sim_extra, sim_log);

    def_problems_t problems = {0};
    def_t *truth = def_load_file(truth_path, &problems);
    ck_assert_msg(truth != NULL, "the simulator's definition does not load");
    for (size_t i = 0; i < truth->n_events; i++) {
        /* One topic per service: several events share one. */
        if (strstr(topics, truth->events[i].topic) == NULL) {
            if (topics[0] != '\0')
                strcat(topics, ",");
            strcat(topics, truth->events[i].topic);
        }
    }

    const char *argv[] = {
        NULL, "discover",  "--brokers",        tl_kafka_brokers(), "--topics", topics, "--since",
        "1d", "--process", "order_fulfilment", "--draft",          draft_path, NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "steward discover exited %d\n%s\n%s", o.status, o.out, o.err);
    ck_assert_msg(tl_contains(o.out, "<- the key") && tl_contains(o.out, "draft definition"), "%s",
                  o.out);

    def_t *draft = def_load_file(draft_path, &problems);
    ck_assert_msg(draft != NULL, "the draft does not load: %s: %s",
                  problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "");
    ck_assert_str_eq(draft->envelope.key_pointer, truth->envelope.key_pointer);
    ck_assert_str_eq(draft->events[draft->start_event].name,
                     truth->events[truth->start_event].name);
    for (size_t i = 0; i < draft->n_events; i++) {
        long t = def_find_event(truth, draft->events[i].name);
        ck_assert_msg(t >= 0, "the draft invented event %s", draft->events[i].name);
        ck_assert_str_eq(draft->events[i].topic, truth->events[t].topic);
    }
    ck_assert_uint_eq(draft->n_events, truth->n_events);
    char *want = transitions(truth), *got = transitions(draft);
    ck_assert_msg(strcmp(want, got) == 0, "transitions differ\nsimulator:\n%s\ndraft:\n%s", want,
                  got);

    /* The draft is marked, and passes the check as a file. */
    ck_assert_msg(strncmp(draft->document
                              ? json_string_value(json_object_get(draft->document, "description"))
                              : "",
                          "DRAFT ", 6) == 0,
                  "the draft is not marked");
    const char *check_argv[] = {NULL, "check", draft_path, NULL};
    tl_output_t c = tl_steward(check_argv, NULL);
    ck_assert_msg(c.status == 0, "steward check refused the draft:\n%s\n%s", c.out, c.err);

    tl_output_free(&c);
    tl_output_free(&o);
    free(want);
    free(got);
    def_free(draft);
    def_free(truth);
    def_problems_clear(&problems);
    free(unique);
}
END_TEST

static void produce_at(rd_kafka_t *rk, const char *topic, const char *key, long long kafka_ms,
                       const char *value)
{
    size_t key_len = key != NULL ? strlen(key) : 0;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(key, key_len),
        RD_KAFKA_V_VALUE((void *) value, strlen(value)), RD_KAFKA_V_TIMESTAMP(kafka_ms),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    ck_assert_msg(err == RD_KAFKA_RESP_ERR_NO_ERROR, "produce: %s", rd_kafka_err2str(err));
}

/* A claim event: its type, id and time in the team's own fields. */
static void claim_event(rd_kafka_t *rk, const char *topic, const char *key, const char *type,
                        const char *id, const char *claim, long long at_ms, long long kafka_ms)
{
    char at[40], value[512], claim_field[96] = "";
    rfc3339_format(at_ms, at, sizeof at);
    if (claim != NULL)
        snprintf(claim_field, sizeof claim_field, ", \"claimId\": \"%s\"", claim);
    snprintf(value, sizeof value,
             "{\"eventType\": \"%s\", \"eventId\": \"%s\", \"occurredAt\": \"%s\"%s}", type, id, at,
             claim_field);
    produce_at(rk, topic, key, kafka_ms, value);
}

START_TEST(discover_drafts_claims_as_teams_publish_them)
{
    const char *dir = tl_tmpdir();
    char *unique = tl_unique("disc_claims");
    char topics[3][256], list[800], draft_path[512];
    const char *names[] = {"claims", "assessments", "payments"};
    const char *create[3];
    for (int i = 0; i < 3; i++) {
        snprintf(topics[i], sizeof topics[i], "%s.%s", unique, names[i]);
        create[i] = topics[i];
    }
    snprintf(list, sizeof list, "%s,%s,%s", topics[0], topics[1], topics[2]);
    snprintf(draft_path, sizeof draft_path, "%s/claims.json", dir);
    tl_kafka_create_topics(create, 3, 1);

    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(conf, "bootstrap.servers", tl_kafka_brokers(), err, sizeof err) ==
              RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ck_assert_msg(rk != NULL, "producer: %s", err);
    long long base = (long long) time(NULL) * 1000 - 30 * 60000LL;
    int dups = 0;
    for (int i = 0; i < 40; i++) {
        char claim[32], id[48];
        snprintf(claim, sizeof claim, "CL-%d", i);
        long long t = base + i * 10000LL;
        /* every seventh claim's filing reached the broker after its
         * assessment: its Kafka timestamp says so, its own time does not */
        long long filed_kafka = i % 7 == 0 ? t + 5000 : t;
        snprintf(id, sizeof id, "f-%d", i);
        claim_event(rk, topics[0], claim, "ClaimFiled", id, claim, t, filed_kafka);
        snprintf(id, sizeof id, "a-%d", i);
        const char *verdict = i % 5 == 4 ? "ClaimRejected" : "ClaimAssessed";
        claim_event(rk, topics[1], claim, verdict, id, claim, t + 2000, t + 2000);
        if (i % 6 == 1) { /* redelivered: the same eventId, another offset */
            claim_event(rk, topics[1], claim, verdict, id, claim, t + 2000, t + 2100);
            dups++;
        }
        if (i % 5 != 4) {
            snprintf(id, sizeof id, "p-%d", i);
            claim_event(rk, topics[2], claim, "ClaimPaid", id, NULL, t + 4000, t + 4000);
        }
        if (i % 2 == 0) { /* the premiums team's event, keyed by policy */
            char policy[32];
            snprintf(policy, sizeof policy, "POL-%d", i);
            snprintf(id, sizeof id, "pr-%d", i);
            claim_event(rk, topics[2], policy, "PremiumCollected", id, NULL, t + 1000, t + 1000);
        }
    }
    /* Stalled claims, over twenty minutes old: two filed and never
     * assessed, two assessed and never paid. */
    for (int i = 40; i < 44; i++) {
        char claim[32], id[48];
        snprintf(claim, sizeof claim, "CL-%d", i);
        long long t = base + i * 10000LL;
        snprintf(id, sizeof id, "f-%d", i);
        claim_event(rk, topics[0], claim, "ClaimFiled", id, claim, t, t);
        if (i >= 42) {
            snprintf(id, sizeof id, "a-%d", i);
            claim_event(rk, topics[1], claim, "ClaimAssessed", id, claim, t + 2000, t + 2000);
        }
    }
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);

    const char *argv[] = {NULL,
                          "discover",
                          "--brokers",
                          tl_kafka_brokers(),
                          "--topics",
                          list,
                          "--since",
                          "1h",
                          "--process",
                          "insurance_claim",
                          "--type",
                          "/eventType",
                          "--id",
                          "/eventId",
                          "--time",
                          "/occurredAt",
                          "--time-format",
                          "rfc3339",
                          "--draft",
                          draft_path,
                          "--json",
                          NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "steward discover exited %d\n%s\n%s", o.status, o.out, o.err);
    json_t *report = json_loads(o.out, 0, NULL);
    ck_assert_msg(report != NULL, "not JSON: %s", o.out);
    ck_assert_int_eq(json_integer_value(json_object_get(report, "repeats_dropped")), dups);
    const json_t *key = json_object_get(report, "key");
    ck_assert_msg(json_is_object(key) &&
                      strcmp(json_string_value(json_object_get(key, "from")), "message_key") == 0,
                  "key: %s", o.out);

    def_problems_t problems = {0};
    def_t *draft = def_load_file(draft_path, &problems);
    ck_assert_msg(draft != NULL, "the draft does not load: %s: %s",
                  problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "");
    ck_assert(draft->envelope.key_from_message);
    ck_assert_str_eq(draft->envelope.type_pointer, "/eventType");
    ck_assert_str_eq(draft->envelope.id_pointer, "/eventId");
    ck_assert_str_eq(draft->envelope.time_pointer, "/occurredAt");
    ck_assert_int_eq(draft->envelope.time_format, DEF_TIME_RFC3339);
    ck_assert_str_eq(draft->events[draft->start_event].name, "ClaimFiled");
    ck_assert_int_lt(def_find_event(draft, "PremiumCollected"), 0);
    ck_assert_uint_eq(draft->n_events, 4);
    char *got = transitions(draft);
    const char *want = "ClaimAssessed>ClaimPaid\n"
                       "ClaimFiled>ClaimAssessed\n"
                       "ClaimFiled>ClaimRejected\n"
                       "ClaimPaid|end\n"
                       "ClaimRejected|end\n";
    ck_assert_msg(strcmp(got, want) == 0, "transitions:\n%s", got);

    const char *check_argv[] = {NULL, "check", draft_path, NULL};
    tl_output_t c = tl_steward(check_argv, NULL);
    ck_assert_msg(c.status == 0, "steward check refused the draft:\n%s\n%s", c.out, c.err);
    tl_output_free(&c);

    /* The text names the message key, and what was set aside. */
    argv[sizeof argv / sizeof argv[0] - 2] = NULL; /* no --json */
    c = tl_steward(argv, NULL);
    ck_assert_msg(c.status == 0 && tl_contains(c.out, "(the Kafka message key)") &&
                      tl_contains(c.out, "<- the key") && tl_contains(c.out, "(set aside)") &&
                      tl_contains(c.out, "PremiumCollected (20 events) shares no value"),
                  "exit %d\n%s\n%s", c.status, c.out, c.err);
    tl_output_free(&c);

    /* The unedited draft, backtested over the same traffic, pages the
     * stalled claims and no other: every draft state has a deadline from
     * the latencies seen. */
    for (size_t s = 0; s < draft->n_states; s++)
        ck_assert_msg(draft->states[s].terminal != NULL || draft->states[s].deadline_ms > 0,
                      "the draft's state %s has no deadline", draft->states[s].name);
    const char *bt_argv[] = {
        NULL,     "backtest",  "--definition",     draft_path,   "--from",
        "1h",     "--brokers", tl_kafka_brokers(), "--database", tl_db_create("discover_backtest"),
        "--json", NULL};
    c = tl_steward(bt_argv, NULL);
    ck_assert_msg(c.status == 0, "backtest exited %d\n%s\n%s", c.status, c.out, c.err);
    json_t *bt = json_loads(c.out, 0, NULL);
    ck_assert_msg(bt != NULL, "not JSON: %s", c.out);
    const json_t *alerts = json_object_get(bt, "alerts");
    ck_assert_msg(json_is_array(alerts), "no alerts: %s", c.out);
    char paged[512] = "";
    const char *expected[] = {"CL-40:claim_filed", "CL-41:claim_filed", "CL-42:claim_assessed",
                              "CL-43:claim_assessed"};
    size_t n_expected = sizeof expected / sizeof expected[0];
    for (size_t x = 0; x < json_array_size(alerts); x++) {
        const json_t *al = json_array_get(alerts, x);
        char item[160];
        snprintf(item, sizeof item, "%s:%s", json_string_value(json_object_get(al, "key")),
                 json_string_value(json_object_get(al, "state")));
        bool stalled = false;
        for (size_t e = 0; e < n_expected; e++)
            stalled = stalled || strcmp(item, expected[e]) == 0;
        ck_assert_msg(stalled && json_is_true(json_object_get(al, "open_at_end")) &&
                          strcmp(json_string_value(json_object_get(al, "kind")), "deadline") == 0,
                      "the backtest paged a claim that did not stall: %s\n%s", item, c.out);
        ck_assert_msg(strstr(paged, item) == NULL, "%s paged twice:\n%s", item, c.out);
        strcat(paged, item);
        strcat(paged, " ");
    }
    ck_assert_msg(json_array_size(alerts) == n_expected, "paged %s, not every stalled claim:\n%s",
                  paged, c.out);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(bt, "rejected"), "total")),
                     0);
    json_decref(bt);
    tl_output_free(&c);
    free(got);
    def_free(draft);
    def_problems_clear(&problems);
    json_decref(report);
    tl_output_free(&o);
    free(unique);
}
END_TEST

/* Values in the Confluent wire format: counted as schema_registry_format,
 * or read with --format confluent_json, and the draft says so. */
START_TEST(discover_reads_framed_json_with_format)
{
    char *unique = tl_unique("disc_framed");
    char topics[2][256], list[600], draft_path[600];
    snprintf(topics[0], sizeof topics[0], "%s.orders", unique);
    snprintf(topics[1], sizeof topics[1], "%s.payments", unique);
    snprintf(list, sizeof list, "%s,%s", topics[0], topics[1]);
    snprintf(draft_path, sizeof draft_path, "%s/framed.json", tl_tmpdir());
    const char *create[] = {topics[0], topics[1]};
    tl_kafka_create_topics(create, 2, 1);
    tl_producer_t *p = tl_producer_new();
    for (int i = 0; i < 20; i++) {
        char value[256];
        int n =
            snprintf(value, sizeof value,
                     "%c%c%c%c%c{\"type\": \"OrderPlaced\", \"order\": \"O%d\"}", 0, 0, 0, 0, 3, i);
        tl_produce(p, topics[0], 0, value, n, NULL, 0);
        n = snprintf(value, sizeof value, "%c%c%c%c%c{\"type\": \"OrderPaid\", \"order\": \"O%d\"}",
                     0, 0, 0, 0, 4, i);
        tl_produce(p, topics[1], 0, value, n, NULL, 0);
    }
    tl_producer_free(p);

    const char *plain[] = {NULL,       "discover", "--brokers", tl_kafka_brokers(),
                           "--topics", list,       NULL};
    tl_output_t o = tl_steward(plain, NULL);
    ck_assert_msg(o.status != 0 && tl_contains(o.err, "0 events read") &&
                      tl_contains(o.err, "40 messages left out: schema_registry_format 40"),
                  "exit %d\n%s\n%s", o.status, o.out, o.err);
    tl_output_free(&o);

    const char *framed[] = {NULL,       "discover", "--brokers", tl_kafka_brokers(),
                            "--topics", list,       "--format",  "confluent_json",
                            "--draft",  draft_path, NULL};
    o = tl_steward(framed, NULL);
    ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
    def_problems_t problems = {0};
    def_t *draft = def_load_file(draft_path, &problems);
    ck_assert_msg(draft != NULL, "the draft does not load: %s",
                  problems.n ? problems.items[0].message : "");
    ck_assert_str_eq(draft->envelope.key_pointer, "/order");
    for (size_t i = 0; i < draft->n_events; i++)
        ck_assert_int_eq(draft->events[i].format, DEF_FORMAT_CONFLUENT_JSON);
    def_free(draft);
    def_problems_clear(&problems);
    tl_output_free(&o);
    free(unique);
}
END_TEST

/*
 * Avro on one topic, as a team behind a schema registry publishes it:
 * with --format confluent_avro discover reads each framed value with the
 * writer schema its id names (here from a directory of <id>.avsc files,
 * the registry-less source) and every unframed one as JSON, drafts the
 * flow across both, and gives the Avro topic "confluent_avro" in the
 * draft. A schema id the source does not hold is counted as
 * unknown_schema; no source is a usage error; a registry that does not
 * answer stops discover (exit 1) instead of drafting without the topic.
 */
START_TEST(discover_reads_avro_with_its_writer_schemas)
{
    const char *dir = tl_tmpdir();
    char *unique = tl_unique("disc_avro"), prefix[128], avro_topic[200];
    char schema_dir[512], draft_path[512], sim_log[512], topics[1024];
    snprintf(prefix, sizeof prefix, "%s_", unique);
    snprintf(avro_topic, sizeof avro_topic, "%spayments", prefix);
    snprintf(schema_dir, sizeof schema_dir, "%s/avro-schemas", dir);
    snprintf(draft_path, sizeof draft_path, "%s/avro-draft.json", dir);
    snprintf(sim_log, sizeof sim_log, "%s/avro-sim.log", dir);
    snprintf(topics, sizeof topics, "%sorders,%spayments,%sinventory,%sshipping,%sdelivery", prefix,
             prefix, prefix, prefix, prefix);
    ck_assert_int_eq(mkdir(schema_dir, 0755), 0);
    const char *sim_extra[] = {"--avro-topic", avro_topic, "--avro-schema-dir", schema_dir, NULL};
    sim_produce(prefix, "200", "3", sim_extra, sim_log);
    /* One framed value under an id no schema file holds. */
    tl_producer_t *p = tl_producer_new();
    const char unknown[] = {0, 0, 0, 0x03, (char) 0xe7, 2, 'x'};
    tl_produce(p, avro_topic, -1, unknown, sizeof unknown, NULL, 0);
    tl_producer_free(p);

    char dir_env[600];
    snprintf(dir_env, sizeof dir_env, "STEWARD_SCHEMA_REGISTRY_DIRECTORY=%s", schema_dir);
    const char *argv[] = {NULL,      "discover", "--brokers", tl_kafka_brokers(), "--topics",
                          topics,    "--since",  "1d",        "--format",         "confluent_avro",
                          "--draft", draft_path, NULL};

    /* No source for the schemas: refused before anything is read. */
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "schema_registry.url"), "exit %d\n%s",
                  o.status, o.err);
    tl_output_free(&o);

    const char *with_dir[] = {dir_env, NULL};
    o = tl_steward(argv, with_dir);
    ck_assert_msg(o.status == 0, "exit %d\n%s\n%s", o.status, o.out, o.err);
    ck_assert_msg(tl_contains(o.out, "unknown_schema 1") || tl_contains(o.out, "unknown_schema: 1"),
                  "the unknown schema id is not counted:\n%s", o.out);
    def_problems_t problems = {0};
    def_t *draft = def_load_file(draft_path, &problems);
    ck_assert_msg(draft != NULL, "the draft does not load: %s",
                  problems.n ? problems.items[0].message : "");
    ck_assert_str_eq(draft->envelope.key_pointer, "/order_id");
    bool paid = false;
    for (size_t i = 0; i < draft->n_events; i++) {
        const def_event_t *ev = &draft->events[i];
        bool on_avro = strcmp(ev->topic, avro_topic) == 0;
        ck_assert_msg(ev->format == (on_avro ? DEF_FORMAT_CONFLUENT_AVRO : DEF_FORMAT_JSON),
                      "event %s on %s has format %d", ev->name, ev->topic, (int) ev->format);
        paid = paid || (on_avro && strcmp(ev->name, "PaymentCaptured") == 0);
    }
    ck_assert_msg(paid, "no PaymentCaptured (an Avro event) in the draft");
    def_free(draft);
    def_problems_clear(&problems);
    tl_output_free(&o);
    const char *check_argv[] = {NULL, "check", draft_path, NULL};
    o = tl_steward(check_argv, NULL);
    ck_assert_msg(o.status == 0, "steward check refused the draft:\n%s", o.err);
    tl_output_free(&o);

    /* A registry that does not answer: no draft without the Avro topic. */
    int port, held = tl_hold_port(&port);
    close(held); /* nothing listens there now */
    char url_env[128];
    snprintf(url_env, sizeof url_env, "STEWARD_SCHEMA_REGISTRY_URL=http://127.0.0.1:%d", port);
    const char *with_url[] = {url_env, NULL};
    o = tl_steward(argv, with_url);
    ck_assert_msg(o.status == 1 && tl_contains(o.err, "schema registry cannot answer"),
                  "exit %d\n%s", o.status, o.err);
    tl_output_free(&o);
    free(unique);
}
END_TEST

/* One team puts the type in a header of its own: the simulator's shipping
 * topic (--type-header), the others a mix of CloudEvents and plain JSON.
 * Without a word about it, discover cannot type the shipping events; with
 * --type SHIPPING=header:x-event-type it reads them, and the draft
 * declares that envelope for that topic alone, which `steward check`
 * accepts. Malformed per-topic values, and a topic not in --topics, are
 * usage errors that say what is wrong. */
START_TEST(discover_reads_a_topic_by_its_own_envelope)
{
    const char *dir = tl_tmpdir();
    char *unique = tl_unique("disc_hdr"), prefix[128], shipping[160], type_flag[256];
    char draft_path[512], sim_log[512], topics[1024] = "";
    snprintf(prefix, sizeof prefix, "%s_", unique);
    snprintf(shipping, sizeof shipping, "%sshipping", prefix);
    snprintf(type_flag, sizeof type_flag, "%s=x-event-type", shipping);
    snprintf(draft_path, sizeof draft_path, "%s/draft_hdr.json", dir);
    snprintf(sim_log, sizeof sim_log, "%s/sim_hdr.log", dir);
    const char *names[] = {"orders",   "payments", "inventory",
                           "shipping", "delivery", "notifications"};
    for (int i = 0; i < 6; i++)
        snprintf(topics + strlen(topics), sizeof topics - strlen(topics), "%s%s%s", i ? "," : "",
                 prefix, names[i]);

    const char *sim_extra[] = {"--cloudevents-rate", "0.3", "--type-header", type_flag, NULL};
    sim_produce(prefix, "200", "7", sim_extra, sim_log);

    /* As the other topics: shipping's events have no type there. */
    const char *plain[] = {NULL,   "discover", "--brokers", tl_kafka_brokers(), "--topics",
                           topics, "--since",  "1h",        "--json",           NULL};
    tl_output_t o = tl_steward(plain, NULL);
    ck_assert_msg(o.status == 0, "steward discover exited %d\n%s\n%s", o.status, o.out, o.err);
    ck_assert_msg(!tl_contains(o.out, "\"ShipmentDispatched\""), "typed without the flag: %s",
                  o.out);
    tl_output_free(&o);

    char per_topic[256];
    snprintf(per_topic, sizeof per_topic, "%s=header:x-event-type", shipping);
    const char *argv[] = {NULL,      "discover", "--brokers", tl_kafka_brokers(), "--topics",
                          topics,    "--since",  "1h",        "--type",           per_topic,
                          "--draft", draft_path, NULL};
    o = tl_steward(argv, NULL);
    ck_assert_msg(o.status == 0, "steward discover exited %d\n%s\n%s", o.status, o.out, o.err);
    ck_assert_msg(tl_contains(o.out, "ShipmentDispatched"), "%s", o.out);
    tl_output_free(&o);

    def_problems_t problems = {0};
    def_t *draft = def_load_file(draft_path, &problems);
    ck_assert_msg(draft != NULL, "the draft does not load: %s: %s",
                  problems.n ? problems.items[0].pointer : "",
                  problems.n ? problems.items[0].message : "");
    ck_assert_ptr_null(draft->envelope.type_header);
    long ship = def_find_event(draft, "ShipmentDispatched");
    ck_assert_int_ge(ship, 0);
    ck_assert_str_eq(draft->events[ship].topic, shipping);
    ck_assert(draft->events[ship].topic_envelope);
    ck_assert_str_eq(draft->events[ship].envelope.type_header, "x-event-type");
    for (size_t i = 0; i < draft->n_events; i++) {
        if ((long) i != ship)
            ck_assert_msg(draft->events[i].envelope.type_header == NULL &&
                              !draft->events[i].topic_envelope,
                          "%s has shipping's envelope", draft->events[i].name);
    }
    ck_assert_uint_eq(draft->n_events, 9);
    json_t *doc = json_load_file(draft_path, 0, NULL);
    const char *header = json_string_value(json_object_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(doc, "topics"), shipping), "envelope"),
            "type"),
        "header"));
    ck_assert_msg(header != NULL && strcmp(header, "x-event-type") == 0,
                  "topics.%s.envelope.type is not the header", shipping);
    json_decref(doc);
    const char *check_argv[] = {NULL, "check", draft_path, NULL};
    tl_output_t c = tl_steward(check_argv, NULL);
    ck_assert_msg(c.status == 0, "steward check refused the draft:\n%s\n%s", c.out, c.err);
    tl_output_free(&c);

    /* Refused before Kafka is asked anything: exit 2, saying what. */
    char unknown[300], twice_a[300], twice_b[300], no_header[300], bad_time[300], no_topic[300];
    snprintf(unknown, sizeof unknown, "%sreturns=header:x-event-type", prefix);
    snprintf(twice_a, sizeof twice_a, "%s=/a", shipping);
    snprintf(twice_b, sizeof twice_b, "%s=/b", shipping);
    snprintf(no_header, sizeof no_header, "%s=header:", shipping);
    snprintf(bad_time, sizeof bad_time, "%s=occurredAt", shipping);
    snprintf(no_topic, sizeof no_topic, "=header:x-event-type");
    const struct {
        const char *flag, *value, *flag2, *value2, *says;
    } refused[] = {
        {"--type", unknown, NULL, NULL, "is not one of --topics"},
        {"--type", no_topic, NULL, NULL, "the topic before '='"},
        {"--type", no_header, NULL, NULL, "needs a header name"},
        {"--type", twice_a, "--type", twice_b, "given twice"},
        {"--time", bad_time, NULL, NULL, "is a JSON pointer or kafka_timestamp"},
        {"--time-format", twice_a, NULL, NULL, "is rfc3339, epoch_seconds or epoch_millis"},
        {"--id", no_header, NULL, NULL, "is a JSON pointer"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *bad[] = {
            NULL,   "discover",      "--brokers",      tl_kafka_brokers(), "--topics",
            topics, refused[i].flag, refused[i].value, refused[i].flag2,   refused[i].value2,
            NULL};
        o = tl_steward(bad, NULL);
        ck_assert_msg(o.status == 2 && tl_contains(o.err, refused[i].says), "%s %s: exit %d\n%s",
                      refused[i].flag, refused[i].value, o.status, o.err);
        tl_output_free(&o);
    }

    def_free(draft);
    def_problems_clear(&problems);
    free(unique);
}
END_TEST

START_TEST(discover_refuses_an_unknown_topic)
{
    char *topic = tl_unique("disc_missing");
    const char *argv[] = {NULL,       "discover", "--brokers", tl_kafka_brokers(),
                          "--topics", topic,      NULL};
    tl_output_t o = tl_steward(argv, NULL);
    ck_assert_msg(o.status != 0 && tl_contains(o.err, topic), "exit %d\n%s\n%s", o.status, o.out,
                  o.err);
    tl_output_free(&o);
    free(topic);
}
END_TEST

/* The config's brokers and kafka properties reach the consumer, as they do
 * steward run's (here from $STEWARD_CONFIG); a bad config or property is a
 * usage error that names it. */
START_TEST(discover_takes_brokers_and_kafka_properties_from_a_config)
{
    char *topic = tl_unique("disc_config");
    char text[512];
    snprintf(text, sizeof text,
             "{\"brokers\": \"%s\", \"kafka\": {\"client.id\": \"steward-discover-test\"}}",
             tl_kafka_brokers());
    char *good = tl_write_file(tl_tmpdir(), "discover.json", text);
    const char *argv[] = {NULL, "discover", "--topics", topic, NULL};
    char env_config[600];
    snprintf(env_config, sizeof env_config, "STEWARD_CONFIG=%s", good);
    const char *env[] = {env_config, "STEWARD_KAFKA_BROKERS=", NULL};
    /* Reached the broker (no "no brokers"): its metadata has no such topic. */
    tl_output_t o = tl_steward(argv, env);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, topic) && tl_contains(o.err, "Unknown topic"),
                  "exit %d\n%s\n%s", o.status, o.out, o.err);
    tl_output_free(&o);

    char *bad_prop = tl_write_file(tl_tmpdir(), "discover-prop.json",
                                   "{\"kafka\": {\"no.such.property\": \"1\"}}");
    const char *argv_prop[] = {NULL,       "discover", "--brokers", tl_kafka_brokers(),
                               "--topics", topic,      "--config",  bad_prop,
                               NULL};
    o = tl_steward(argv_prop, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "no.such.property"), "exit %d\n%s", o.status,
                  o.err);
    tl_output_free(&o);

    char *bad_key =
        tl_write_file(tl_tmpdir(), "discover-key.json", "{\"brokerz\": \"localhost:1\"}");
    const char *argv_key[] = {NULL, "discover", "--topics", topic, "--config", bad_key, NULL};
    o = tl_steward(argv_key, NULL);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "config:") && tl_contains(o.err, "brokerz"),
                  "exit %d\n%s", o.status, o.err);
    tl_output_free(&o);

    /* Without --brokers, a config or the variable: said so. */
    const char *env_none[] = {"STEWARD_CONFIG=", "STEWARD_KAFKA_BROKERS=", NULL};
    o = tl_steward(argv, env_none);
    ck_assert_msg(o.status == 2 && tl_contains(o.err, "no brokers"), "exit %d\n%s", o.status,
                  o.err);
    tl_output_free(&o);
    free(good);
    free(bad_prop);
    free(bad_key);
    free(topic);
}
END_TEST

Suite *discover_suite(void)
{
    Suite *s = suite_create("discover");
    TCase *tc = tcase_create("discover");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, discover_recovers_the_simulators_order_flow);
    tcase_add_test(tc, discover_drafts_claims_as_teams_publish_them);
    tcase_add_test(tc, discover_reads_framed_json_with_format);
    tcase_add_test(tc, discover_reads_avro_with_its_writer_schemas);
    tcase_add_test(tc, discover_reads_a_topic_by_its_own_envelope);
    tcase_add_test(tc, discover_refuses_an_unknown_topic);
    tcase_add_test(tc, discover_takes_brokers_and_kafka_properties_from_a_config);
    suite_add_tcase(s, tc);
    return s;
}
