/*
 * test_receiver - the tests' stand-in for PagerDuty and webhooks
 * (tests/support/receiver.h), driven by libcurl as a real client would:
 * the default answer, scripted answers in order, hangs, a receiver that is
 * down and up again, large bodies, and counting and waiting.
 */
#include "receiver.h"
#include "testlib.h"

#include <check.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What one request got back. */
typedef struct answer {
    CURLcode rc;
    long status;
    long retry_after; /* seconds; 0 when absent */
    char *body;       /* malloc'd, NUL-terminated */
    size_t body_len;
} answer_t;

static void answer_clear(answer_t *a)
{
    free(a->body);
    memset(a, 0, sizeof *a);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t collect(char *data, size_t size, size_t nmemb, void *userdata)
{
    answer_t *a = userdata;
    size_t len = size * nmemb;
    a->body = realloc(a->body, a->body_len + len + 1);
    ck_assert_ptr_nonnull(a->body);
    memcpy(a->body + a->body_len, data, len);
    a->body_len += len;
    a->body[a->body_len] = '\0';
    return len;
}

/*
 * POSTs body (len bytes) as JSON to base + path with `easy` (NULL: a new
 * handle, so a new connection), giving up after timeout_ms. extra_header
 * may be NULL.
 */
static answer_t post_with(CURL *easy, const char *base, const char *path, const char *body,
                          size_t len, long timeout_ms, const char *extra_header)
{
    answer_t a = {0};
    char url[256];
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *own = NULL;

    /* A large body must go at once, not after a "100 Continue" round. */
    headers = curl_slist_append(headers, "Expect:");
    if (extra_header != NULL)
        headers = curl_slist_append(headers, extra_header);
    if (easy == NULL)
        easy = own = curl_easy_init();
    ck_assert_ptr_nonnull(easy);
    snprintf(url, sizeof url, "%s%s", base, path);
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &a);

    a.rc = curl_easy_perform(easy);
    if (a.rc == CURLE_OK) {
        curl_off_t retry = 0;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &a.status);
        curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &retry);
        a.retry_after = (long) retry;
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(headers);
    curl_easy_cleanup(own);
    return a;
}

static answer_t post(rcv_t *r, const char *body)
{
    return post_with(NULL, rcv_url(r), "/v2/enqueue", body, strlen(body), 10000, NULL);
}

static void setup(void) /* checked: curl and the receiver live in the forked child */
{
    ck_assert_int_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
}

static void teardown(void)
{
    curl_global_cleanup();
}

START_TEST(default_answer_is_pagerduty_s_and_echoes_the_dedup_key)
{
    rcv_t *r = rcv_new();
    ck_assert(strncmp(rcv_url(r), "http://127.0.0.1:", 17) == 0);

    answer_t a = post_with(NULL, rcv_url(r), "/v2/enqueue",
                           "{\"routing_key\":\"rk\",\"event_action\":\"trigger\","
                           "\"dedup_key\":\"order-42/paid\"}",
                           strlen("{\"routing_key\":\"rk\",\"event_action\":\"trigger\","
                                  "\"dedup_key\":\"order-42/paid\"}"),
                           10000, "X-Steward-Test: yes");
    ck_assert_int_eq(a.rc, CURLE_OK);
    ck_assert_int_eq(a.status, 202);
    ck_assert_str_eq(a.body, "{\"status\":\"success\",\"message\":\"Event processed\","
                             "\"dedup_key\":\"order-42/paid\"}");
    answer_clear(&a);

    /* No dedup_key (or no JSON at all): one is made up, as PagerDuty does. */
    a = post(r, "not json");
    ck_assert_int_eq(a.status, 202);
    ck_assert(tl_contains(a.body, "\"dedup_key\":\"rcv-1\""));
    answer_clear(&a);

    ck_assert_uint_eq(rcv_count(r), 2);
    rcv_request_t req = rcv_get(r, 0);
    ck_assert_str_eq(req.method, "POST");
    ck_assert_str_eq(req.path, "/v2/enqueue");
    ck_assert_str_eq(req.content_type, "application/json");
    ck_assert(tl_contains(req.headers, "X-Steward-Test: yes\n"));
    ck_assert(tl_contains(req.body, "\"dedup_key\":\"order-42/paid\""));
    ck_assert_int_eq(req.status, 202);
    rcv_request_clear(&req);
    rcv_request_clear(&req); /* cleared twice is fine */
    rcv_free(r);
    rcv_free(NULL);
}
END_TEST

START_TEST(scripted_answers_are_used_in_order_then_the_default)
{
    rcv_t *r = rcv_new();
    rcv_push(r, 500, "{\"status\":\"error\"}", NULL, 0);
    rcv_push(r, 429, "{\"status\":\"throttled\"}", "7", 0);

    long want_status[] = {500, 429, 202};
    long want_retry[] = {0, 7, 0};
    for (int i = 0; i < 3; i++) {
        answer_t a = post(r, "{\"dedup_key\":\"k\"}");
        ck_assert_int_eq(a.rc, CURLE_OK);
        ck_assert_int_eq(a.status, want_status[i]);
        ck_assert_int_eq(a.retry_after, want_retry[i]);
        if (i == 1)
            ck_assert_str_eq(a.body, "{\"status\":\"throttled\"}");
        answer_clear(&a);

        rcv_request_t req = rcv_get(r, (size_t) i);
        ck_assert_int_eq(req.status, want_status[i]);
        rcv_request_clear(&req);
    }

    /* Status 0: the connection is closed with no answer at all. */
    rcv_push(r, 0, NULL, NULL, 0);
    answer_t a = post(r, "{}");
    ck_assert_int_eq(a.rc, CURLE_GOT_NOTHING);
    answer_clear(&a);
    ck_assert(rcv_wait(r, 4, 5000));
    rcv_request_t req = rcv_get(r, 3);
    ck_assert_int_eq(req.status, 0);
    rcv_request_clear(&req);
    rcv_free(r);
}
END_TEST

START_TEST(a_hang_outlasts_the_client_s_timeout_and_holds_only_its_connection)
{
    rcv_t *r = rcv_new();
    rcv_push(r, 202, "{\"status\":\"success\"}", NULL, 1500);

    int64_t t0 = now_ms();
    answer_t a = post_with(NULL, rcv_url(r), "/hook", "{}", 2, 300, NULL);
    ck_assert_int_eq(a.rc, CURLE_OPERATION_TIMEDOUT);
    ck_assert_int_lt(now_ms() - t0, 1200);
    answer_clear(&a);

    /* The hung request has arrived, but is not done yet. */
    ck_assert_uint_eq(rcv_count(r), 1);
    rcv_request_t req = rcv_get(r, 0);
    ck_assert_int_eq(req.status, 0);
    ck_assert_str_eq(req.path, "/hook");
    rcv_request_clear(&req);

    /* Meanwhile another connection is answered at once. */
    t0 = now_ms();
    a = post(r, "{\"dedup_key\":\"second\"}");
    ck_assert_int_eq(a.status, 202);
    ck_assert_int_lt(now_ms() - t0, 1000);
    answer_clear(&a);

    /* The hang ends on its own and answers (to nobody). */
    ck_assert(rcv_wait(r, 2, 5000));
    req = rcv_get(r, 0);
    ck_assert_int_eq(req.status, 202);
    rcv_request_clear(&req);
    rcv_free(r);
}
END_TEST

/* A client on its own thread, for the hangs that rcv_free must cut. */
typedef struct client {
    const char *url;
    answer_t answer;
} client_t;

static void *client_run(void *arg)
{
    client_t *c = arg;
    c->answer = post_with(NULL, c->url, "/hook", "{}", 2, 30000, NULL);
    return NULL;
}

START_TEST(free_and_down_cut_a_hang_short)
{
    for (int down = 0; down < 2; down++) {
        rcv_t *r = rcv_new();
        char url[64];
        snprintf(url, sizeof url, "%s", rcv_url(r));
        rcv_push(r, 202, NULL, NULL, 60000);
        client_t c = {.url = url};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, client_run, &c), 0);
        rcv_wait_arrived(r, 1, 2);
        ck_assert_uint_eq(rcv_count(r), 1);

        int64_t t0 = now_ms();
        if (down) {
            rcv_set_down(r, true);
            ck_assert(rcv_wait(r, 1, 0));
            rcv_request_t req = rcv_get(r, 0);
            ck_assert_int_eq(req.status, 0);
            rcv_request_clear(&req);
        }
        rcv_free(r);
        ck_assert_int_lt(now_ms() - t0, 2000);
        pthread_join(th, NULL);
        ck_assert_msg(c.answer.rc == CURLE_GOT_NOTHING || c.answer.rc == CURLE_RECV_ERROR,
                      "client got %d (%s)", c.answer.rc, curl_easy_strerror(c.answer.rc));
        answer_clear(&c.answer);
    }
}
END_TEST

START_TEST(down_refuses_connections_then_up_answers_on_the_same_port)
{
    rcv_t *r = rcv_new();
    char url[64];
    snprintf(url, sizeof url, "%s", rcv_url(r));
    /* One handle throughout, as a client keeping its connection alive. */
    CURL *easy = curl_easy_init();

    answer_t a = post_with(easy, url, "/", "{}", 2, 5000, NULL);
    ck_assert_int_eq(a.status, 202);
    answer_clear(&a);

    rcv_set_down(r, true);
    rcv_set_down(r, true); /* already down: nothing happens */
    a = post_with(easy, url, "/", "{}", 2, 5000, NULL);
    ck_assert_msg(a.rc == CURLE_COULDNT_CONNECT, "got %d (%s)", a.rc, curl_easy_strerror(a.rc));
    answer_clear(&a);
    a = post_with(NULL, url, "/", "{}", 2, 5000, NULL);
    ck_assert_int_eq(a.rc, CURLE_COULDNT_CONNECT);
    answer_clear(&a);
    ck_assert_uint_eq(rcv_count(r), 1);

    rcv_set_down(r, false);
    rcv_set_down(r, false);
    ck_assert_str_eq(rcv_url(r), url);
    a = post_with(easy, url, "/", "{\"dedup_key\":\"back\"}", 20, 5000, NULL);
    ck_assert_int_eq(a.rc, CURLE_OK);
    ck_assert_int_eq(a.status, 202);
    answer_clear(&a);
    ck_assert_uint_eq(rcv_count(r), 2);

    /* Down and up again, quickly, with a connection just closed. */
    rcv_set_down(r, true);
    rcv_set_down(r, false);
    a = post_with(easy, url, "/", "{}", 2, 5000, NULL);
    ck_assert_int_eq(a.status, 202);
    answer_clear(&a);

    curl_easy_cleanup(easy);
    rcv_free(r);
}
END_TEST

START_TEST(a_large_body_is_recorded_intact)
{
    rcv_t *r = rcv_new();
    size_t len = 5 * 1024 * 1024 + 7;
    char *body = malloc(len);
    ck_assert_ptr_nonnull(body);
    for (size_t i = 0; i < len; i++)
        body[i] = (char) (i * 31 % 251); /* NUL bytes included */

    answer_t a = post_with(NULL, rcv_url(r), "/big", body, len, 30000, NULL);
    ck_assert_int_eq(a.rc, CURLE_OK);
    ck_assert_int_eq(a.status, 202);
    answer_clear(&a);

    rcv_request_t req = rcv_get(r, 0);
    ck_assert_uint_eq(req.body_len, len);
    ck_assert(memcmp(req.body, body, len) == 0);
    ck_assert_int_eq(req.body[len], '\0');
    rcv_request_clear(&req);
    free(body);
    rcv_free(r);
}
END_TEST

static void *late_client_run(void *arg)
{
    client_t *c = arg;
    /* Arriving late is the scenario: there is nothing to wait for. */
    nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
    c->answer = post_with(NULL, c->url, "/late", "{}", 2, 10000, NULL);
    return NULL;
}

START_TEST(count_and_wait)
{
    rcv_t *r = rcv_new();
    ck_assert_uint_eq(rcv_count(r), 0);
    ck_assert(rcv_wait(r, 0, 0));

    int64_t t0 = now_ms();
    ck_assert(!rcv_wait(r, 1, 200));
    ck_assert_int_ge(now_ms() - t0, 190);

    for (int i = 0; i < 3; i++) {
        answer_t a = post(r, "{}");
        ck_assert_int_eq(a.status, 202);
        answer_clear(&a);
    }
    ck_assert_uint_eq(rcv_count(r), 3);
    ck_assert(rcv_wait(r, 3, 0));

    /* wait wakes up when a request comes in, well before its timeout. */
    client_t c = {.url = rcv_url(r)};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_client_run, &c), 0);
    t0 = now_ms();
    ck_assert(rcv_wait(r, 4, 10000));
    ck_assert_int_lt(now_ms() - t0, 5000);
    pthread_join(th, NULL);
    ck_assert_int_eq(c.answer.status, 202);
    answer_clear(&c.answer);
    ck_assert_uint_eq(rcv_count(r), 4);
    rcv_request_t req = rcv_get(r, 3);
    ck_assert_str_eq(req.path, "/late");
    rcv_request_clear(&req);
    rcv_free(r);
}
END_TEST

Suite *receiver_suite(void)
{
    Suite *s = suite_create("receiver");
    TCase *tc = tcase_create("receiver");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, default_answer_is_pagerduty_s_and_echoes_the_dedup_key);
    tcase_add_test(tc, scripted_answers_are_used_in_order_then_the_default);
    tcase_add_test(tc, a_hang_outlasts_the_client_s_timeout_and_holds_only_its_connection);
    tcase_add_test(tc, free_and_down_cut_a_hang_short);
    tcase_add_test(tc, down_refuses_connections_then_up_answers_on_the_same_port);
    tcase_add_test(tc, a_large_body_is_recorded_intact);
    tcase_add_test(tc, count_and_wait);
    suite_add_tcase(s, tc);
    return s;
}
