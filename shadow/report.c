/*
 * report - the pure arithmetic of the report: the ladder of nice
 * durations, the period and rates per day, the suggested deadline, the
 * order states are reported in, a state's histogram; see report.h for the
 * terms and docs/report.md for the figures. Reading the history and
 * building the document is report_build.c's, the text report_text.c's.
 */
#include "shadow/report.h"
#include "shadow/report_int.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define DAY_MS 86400000.0

size_t report_ladder(const int64_t **steps)
{
    *steps = ladder;
    return LADDER_N;
}

long report_ladder_index(int64_t ms)
{
    for (size_t i = 0; i < LADDER_N; i++) {
        if (ladder[i] >= ms)
            return (long) i;
    }
    return -1;
}

double report_period_ms(int64_t starts, int64_t first_ms, int64_t last_ms)
{
    if (starts < 2 || last_ms <= first_ms)
        return 0;
    return (double) (last_ms - first_ms) * (double) starts / (double) (starts - 1);
}

double report_per_day(double count, double period_ms)
{
    if (period_ms <= 0)
        return -1;
    return count * DAY_MS / period_ms;
}

report_suggestion_t report_suggest(int64_t samples, int64_t p99_ms, int64_t p999_ms)
{
    report_suggestion_t s = {
        .enough = samples >= REPORT_MIN_SAMPLES, .step = -1, .deadline_ms = -1};

    if (!s.enough)
        return s;
    /* p99.9 of fewer than a thousand samples is just the largest few:
     * noise, not a tail. */
    s.basis = samples >= REPORT_MANY_SAMPLES ? "p99.9" : "p99";
    s.basis_ms = samples >= REPORT_MANY_SAMPLES ? p999_ms : p99_ms;
    s.target_ms = (int64_t) ceil((double) s.basis_ms * REPORT_MARGIN);
    s.step = report_ladder_index(s.target_ms);
    if (s.step >= 0)
        s.deadline_ms = ladder[s.step];
    return s;
}

char *report_format_rate(double per_day, char *buf, size_t buf_size)
{
    if (per_day < 0) {
        snprintf(buf, buf_size, "-");
    } else if (per_day < 10) {
        snprintf(buf, buf_size, "%.2f", per_day);
    } else if (per_day < 100) {
        snprintf(buf, buf_size, "%.1f", per_day);
    } else {
        char digits[64];
        int n = snprintf(digits, sizeof digits, "%.0f", per_day);
        size_t out = 0;
        for (int i = 0; i < n && out + 2 < buf_size; i++) {
            if (i > 0 && (n - i) % 3 == 0)
                buf[out++] = ',';
            buf[out++] = digits[i];
        }
        buf[out] = '\0';
    }
    return buf;
}

void report_state_order(const def_t *def, size_t *order)
{
    size_t n = def->n_states, head = 0, tail = 0, out = 0;
    size_t *depth = malloc((n ? n : 1) * sizeof *depth);
    size_t *queue = malloc((n ? n : 1) * sizeof *queue);

    if (depth == NULL || queue == NULL) { /* definition order will do */
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        free(depth);
        free(queue);
        return;
    }
    for (size_t i = 0; i < n; i++)
        depth[i] = SIZE_MAX;
    depth[def->start_state] = 0;
    queue[tail++] = def->start_state;
    while (head < tail) {
        const def_state_t *st = &def->states[queue[head]];
        size_t d = depth[queue[head++]] + 1;
        for (size_t i = 0; i <= st->n_on; i++) {
            long to = i < st->n_on ? (long) st->on[i].to : st->on_timeout;
            if (to >= 0 && depth[to] == SIZE_MAX) {
                depth[to] = d;
                queue[tail++] = (size_t) to;
            }
        }
    }
    /* Breadth-first visits in order of depth; an unreachable state (the
     * loader refuses them) goes last. */
    for (size_t q = 0; q < tail; q++)
        if (def->states[queue[q]].terminal == NULL)
            order[out++] = queue[q];
    for (size_t i = 0; i < n; i++)
        if (depth[i] == SIZE_MAX && def->states[i].terminal == NULL)
            order[out++] = i;
    for (size_t i = 0; i < n; i++)
        if (def->states[i].terminal != NULL)
            order[out++] = i;
    free(depth);
    free(queue);
}

json_t *report_histogram(const int64_t *counts, size_t n_ladder)
{
    const int64_t *steps;
    size_t n_steps = report_ladder(&steps);
    size_t first = n_ladder, last = 0;
    bool any = false;
    for (size_t b = 0; b < n_ladder && b < n_steps; b++) {
        if (counts[b] == 0)
            continue;
        if (!any)
            first = b;
        last = b;
        any = true;
    }
    json_t *hist = json_array();
    if (hist == NULL)
        return NULL;
    for (size_t b = first; any && b <= last; b++)
        json_array_append_new(hist, json_pack("{s:I, s:I}", "le_ms", (json_int_t) steps[b], "count",
                                              (json_int_t) counts[b]));
    json_array_append_new(hist,
                          json_pack("{s:n, s:I}", "le_ms", "count", (json_int_t) counts[n_ladder]));
    return hist;
}
