/*
 * rejsum - the summary of rejected messages; see rejsum.h.
 */
#include "manager/intake/rejsum.h"

#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pair {
    char topic[256];
    char reason[48];
    char sample[256]; /* the first message's detail, cut */
    long long count;
} pair_t;

struct rejsum {
    pthread_mutex_t lock;
    int64_t every_ms;
    int64_t since_ms;
    pair_t pairs[REJSUM_MAX_PAIRS + 1]; /* the last one: "other" */
    size_t n_pairs;
    long long total;
};

rejsum_t *rejsum_new(int64_t every_ms, int64_t now_ms)
{
    rejsum_t *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return NULL;
    pthread_mutex_init(&rs->lock, NULL);
    rs->every_ms = every_ms;
    rs->since_ms = now_ms;
    return rs;
}

void rejsum_free(rejsum_t *rs)
{
    if (rs == NULL)
        return;
    pthread_mutex_destroy(&rs->lock);
    free(rs);
}

void rejsum_add(rejsum_t *rs, const char *topic, const char *reason, const char *detail)
{
    if (rs == NULL || rs->every_ms <= 0)
        return;
    pthread_mutex_lock(&rs->lock);
    size_t i = 0;
    while (i < rs->n_pairs &&
           (strncmp(rs->pairs[i].topic, topic, sizeof rs->pairs[i].topic - 1) != 0 ||
            strcmp(rs->pairs[i].reason, reason) != 0))
        i++;
    if (i == rs->n_pairs) {
        if (rs->n_pairs == REJSUM_MAX_PAIRS) {
            i = REJSUM_MAX_PAIRS;
            topic = "(other topics and reasons)";
            reason = "other";
            detail = NULL;
        } else {
            rs->n_pairs++;
        }
        if (rs->pairs[i].count == 0) {
            snprintf(rs->pairs[i].topic, sizeof rs->pairs[i].topic, "%s", topic);
            snprintf(rs->pairs[i].reason, sizeof rs->pairs[i].reason, "%s", reason);
            snprintf(rs->pairs[i].sample, sizeof rs->pairs[i].sample, "%s",
                     detail != NULL ? detail : "");
        }
    }
    rs->pairs[i].count++;
    rs->total++;
    pthread_mutex_unlock(&rs->lock);
}

/* Appends to buf (size bytes, NUL-terminated) what fits. */
static void appendf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

void rejsum_tick(rejsum_t *rs, int64_t now_ms, int force)
{
    if (rs == NULL || rs->every_ms <= 0)
        return;
    pthread_mutex_lock(&rs->lock);
    if (rs->total == 0 || (!force && now_ms - rs->since_ms < rs->every_ms)) {
        if (rs->total == 0 && now_ms - rs->since_ms >= rs->every_ms)
            rs->since_ms = now_ms;
        pthread_mutex_unlock(&rs->lock);
        return;
    }
    size_t n = rs->n_pairs + (rs->pairs[REJSUM_MAX_PAIRS].count > 0);
    pair_t *pairs = malloc((n + 1) * sizeof *pairs);
    if (pairs != NULL) {
        memcpy(pairs, rs->pairs, rs->n_pairs * sizeof *pairs);
        if (n > rs->n_pairs)
            pairs[rs->n_pairs] = rs->pairs[REJSUM_MAX_PAIRS];
    }
    long long total = rs->total;
    int64_t span_ms = now_ms - rs->since_ms;
    memset(rs->pairs, 0, sizeof rs->pairs);
    rs->n_pairs = 0;
    rs->total = 0;
    rs->since_ms = now_ms;
    pthread_mutex_unlock(&rs->lock);
    if (pairs == NULL)
        return; /* a summary is not worth failing for; the rows are in steward.rejected */

    /* By reason: the pairs' counts summed per reason, in first-seen order. */
    char by_reason[1024] = "", by_topic[4096] = "", count[24], seconds[24];
    for (size_t i = 0; i < n; i++) {
        long long sum = 0;
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = strcmp(pairs[j].reason, pairs[i].reason) != 0;
        if (!first)
            continue;
        for (size_t j = i; j < n; j++) {
            if (strcmp(pairs[j].reason, pairs[i].reason) == 0)
                sum += pairs[j].count;
        }
        appendf(by_reason, sizeof by_reason, "%s%s %lld", by_reason[0] ? ", " : "", pairs[i].reason,
                sum);
    }
    for (size_t i = 0; i < n; i++)
        appendf(by_topic, sizeof by_topic, "%s%s %s %lld%s%s", by_topic[0] ? "; " : "",
                pairs[i].topic, pairs[i].reason, pairs[i].count, pairs[i].sample[0] ? " e.g. " : "",
                pairs[i].sample);
    snprintf(count, sizeof count, "%lld", total);
    snprintf(seconds, sizeof seconds, "%.0fs", (double) span_ms / 1000.0);
    free(pairs);
    LOG_WARN("messages rejected since the last summary (each in steward.rejected, with its "
             "message): a definition may look for the type, key, id or time where these topics "
             "do not keep them",
             "rejected", count, "over", seconds, "by_reason", by_reason, "by_topic", by_topic);
}
