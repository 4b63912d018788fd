/*
 * report_text - a report_build() document printed as aligned tables and
 * histograms, one process after another (report_print_text()); see
 * report.h.
 */
#include "shadow/rejections.h"
#include "shadow/report.h"

#include "definitions/duration.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COLS 13
#define CELL 48

typedef struct table {
    char (*cells)[COLS][CELL];
    size_t n, cap;
} table_t;

/* Left-aligned columns: the state, the deadlines; the counts go right. */
static const bool align_left[COLS] = {true,  false, false, false, false, false, false,
                                      false, false, true,  false, true,  false};

static char (*table_row(table_t *t))[CELL]
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 8;
        void *grown = realloc(t->cells, cap * sizeof *t->cells);
        if (grown == NULL)
            return NULL;
        t->cells = grown;
        t->cap = cap;
    }
    memset(t->cells[t->n], 0, sizeof t->cells[t->n]);
    return t->cells[t->n++];
}

static void table_print(const table_t *t, FILE *out)
{
    size_t width[COLS] = {0};
    for (size_t r = 0; r < t->n; r++)
        for (size_t c = 0; c < COLS; c++)
            if (strlen(t->cells[r][c]) > width[c])
                width[c] = strlen(t->cells[r][c]);
    for (size_t r = 0; r < t->n; r++) {
        char line[COLS * (CELL + 2) + 4];
        size_t len = 0;
        for (size_t c = 0; c < COLS; c++) {
            len +=
                (size_t) snprintf(line + len, sizeof line - len, "  %*s",
                                  align_left[c] ? -(int) width[c] : (int) width[c], t->cells[r][c]);
        }
        while (len > 0 && line[len - 1] == ' ')
            line[--len] = '\0';
        fprintf(out, "%s\n", line);
    }
}

static json_int_t jint(const json_t *obj, const char *name)
{
    return json_integer_value(json_object_get(obj, name));
}

/* A rate from the document: null (unknown) prints as "-". */
static char *jrate(const json_t *obj, const char *name, char *buf, size_t buf_size)
{
    const json_t *v = json_object_get(obj, name);
    return report_format_rate(json_is_number(v) ? json_number_value(v) : -1, buf, buf_size);
}

/* A measured duration in ms from the document, in the one form for people
 * (duration_format_rounded()): null prints as `none`. */
static void jduration(const json_t *obj, const char *name, const char *none, char *buf,
                      size_t buf_size)
{
    const json_t *v = json_object_get(obj, name);
    if (json_is_integer(v)) {
        duration_format_rounded(json_integer_value(v), buf, buf_size);
    } else {
        snprintf(buf, buf_size, "%s", none);
    }
}

/* A count with thousands separated ("1,000,000"). */
static char *fmt_count(json_int_t n, char *buf, size_t buf_size)
{
    if (n >= 100)
        return report_format_rate((double) n, buf, buf_size);
    snprintf(buf, buf_size, "%lld", (long long) n);
    return buf;
}

static void print_header(const json_t *doc, const json_t *proc, FILE *out)
{
    const json_t *window = json_object_get(doc, "window");
    const json_t *volume = json_object_get(proc, "volume");
    const char *since = json_string_value(json_object_get(window, "since"));
    char rate[48], stall_rate[48];

    fprintf(out, "%s (version %lld): owner %s, %s mode, ",
            json_string_value(json_object_get(proc, "process")), (long long) jint(proc, "version"),
            json_string_value(json_object_get(proc, "owner")),
            json_string_value(json_object_get(proc, "mode")));
    if (since != NULL)
        fprintf(out, "window: the last %s (%s to %s)\n", since,
                json_string_value(json_object_get(window, "from")),
                json_string_value(json_object_get(window, "to")));
    else
        fprintf(out, "window: all history (to %s)\n",
                json_string_value(json_object_get(window, "to")));

    json_int_t started = jint(volume, "started"), stalled = jint(volume, "stalled");
    char count[48];
    fprintf(out, "  %s instance%s started", fmt_count(started, count, sizeof count),
            started == 1 ? "" : "s");
    if (json_is_number(json_object_get(volume, "started_per_day"))) {
        char first[32];
        duration_format(jint(volume, "period_ms"), first, sizeof first);
        fprintf(out, " over %s, %s per day", first,
                jrate(volume, "started_per_day", rate, sizeof rate));
    } else if (started > 0) {
        fprintf(out, " (no rate: it needs two starts at different times)");
    }
    if (started > 0) {
        fprintf(out, "; %s stalled: %.2f%% of instances stall",
                fmt_count(stalled, count, sizeof count),
                100.0 * json_number_value(json_object_get(volume, "stalled_share")));
        if (json_is_number(json_object_get(volume, "started_per_day")))
            fprintf(out, "; %s per day at %s instances/day",
                    jrate(volume, "stalled_per_day", stall_rate, sizeof stall_rate), rate);
    }
    fprintf(out, "\n");
}

/* The widest bar of a histogram, in characters. */
#define BAR_WIDTH 40

/*
 * A state's histogram as one line per bucket: its bound, a bar scaled to
 * the fullest bucket, the count, and marks on the buckets that hold the
 * current deadline and the suggested one. Nothing for a state without
 * exits.
 */
static void print_histogram(const json_t *st, FILE *out)
{
    const json_t *hist = json_object_get(st, "histogram");
    const json_t *latency = json_object_get(st, "latency");
    if (!json_is_array(hist) || jint(latency, "samples") == 0)
        return;
    json_int_t peak = 0, deadline = -1, suggested = -1;
    size_t i;
    const json_t *b;
    json_array_foreach(hist, i, b)
    {
        if (jint(b, "count") > peak)
            peak = jint(b, "count");
    }
    if (json_is_integer(json_object_get(json_object_get(st, "deadline"), "ms")))
        deadline = jint(json_object_get(st, "deadline"), "ms");
    const json_t *sug = json_object_get(st, "suggestion");
    if (json_is_true(json_object_get(sug, "enough_samples")) &&
        json_is_integer(json_object_get(sug, "deadline_ms")))
        suggested = jint(sug, "deadline_ms");

    fprintf(out, "  %s: time to leave, %lld exit%s\n",
            json_string_value(json_object_get(st, "state")), (long long) jint(latency, "samples"),
            jint(latency, "samples") == 1 ? "" : "s");
    /* The previous bucket's bound; for the first, the ladder step below it. */
    json_int_t below = 0;
    const json_t *first_le = json_object_get(json_array_get(hist, 0), "le_ms");
    if (json_is_integer(first_le)) {
        long at = report_ladder_index(json_integer_value(first_le));
        const int64_t *steps;
        report_ladder(&steps);
        below = at > 0 ? steps[at - 1] : 0;
    }
    json_array_foreach(hist, i, b)
    {
        json_int_t n = jint(b, "count");
        const json_t *le = json_object_get(b, "le_ms");
        char bound[40], d[32], count[48];
        if (json_is_null(le)) {
            if (n == 0)
                break;
            snprintf(bound, sizeof bound, "> %s", duration_format(below, d, sizeof d));
        } else {
            snprintf(bound, sizeof bound, "<= %s",
                     duration_format(json_integer_value(le), d, sizeof d));
        }
        int width = peak > 0 ? (int) ((n * BAR_WIDTH + peak - 1) / peak) : 0;
        char bar[BAR_WIDTH + 1];
        memset(bar, '#', (size_t) width);
        bar[width] = '\0';
        json_int_t top = json_is_null(le) ? INT64_MAX : json_integer_value(le);
        bool has_deadline = deadline > below && deadline <= top;
        bool has_suggested = suggested > below && suggested <= top;
        fprintf(out, "    %10s |%-*s %s%s%s\n", bound, BAR_WIDTH, bar,
                fmt_count(n, count, sizeof count), has_deadline ? "  <- deadline" : "",
                has_suggested ? "  <- suggested" : "");
        below = top;
    }
    /* Marks past the last bucket drawn: every exit was quicker. */
    char d[32];
    if (deadline > below)
        fprintf(out, "    %10s  deadline %s: no exit took that long\n", "",
                duration_format(deadline, d, sizeof d));
    if (suggested > below)
        fprintf(out, "    %10s  suggested %s: no exit took that long\n", "",
                duration_format(suggested, d, sizeof d));
}

static void print_process(const json_t *doc, const json_t *proc, FILE *out)
{
    static const char *const heads[COLS] = {
        "state", "entered", "left",     "open",       "overdue",   "p50",       "p90",
        "p99",   "max",     "deadline", "alerts/day", "suggested", "alerts/day"};
    table_t t = {0};
    char(*row)[CELL] = table_row(&t);
    size_t i;
    const json_t *st;

    print_header(doc, proc, out);
    if (row == NULL)
        return;
    for (size_t c = 0; c < COLS; c++)
        snprintf(row[c], CELL, "%s", heads[c]);

    json_array_foreach(json_object_get(proc, "states"), i, st)
    {
        const char *name = json_string_value(json_object_get(st, "state"));
        const char *terminal = json_string_value(json_object_get(st, "terminal"));
        if ((row = table_row(&t)) == NULL)
            break;
        if (terminal != NULL)
            snprintf(row[0], CELL, "%s (%s)", name, terminal);
        else if (!json_is_true(json_object_get(st, "in_definition")))
            snprintf(row[0], CELL, "%s (not defined)", name);
        else
            snprintf(row[0], CELL, "%s", name);
        fmt_count(jint(st, "entered"), row[1], CELL);
        if (terminal != NULL)
            continue;
        fmt_count(jint(st, "left"), row[2], CELL);
        fmt_count(jint(st, "open"), row[3], CELL);
        fmt_count(jint(st, "overdue"), row[4], CELL);
        const json_t *latency = json_object_get(st, "latency");
        jduration(latency, "p50_ms", "-", row[5], CELL);
        jduration(latency, "p90_ms", "-", row[6], CELL);
        jduration(latency, "p99_ms", "-", row[7], CELL);
        jduration(latency, "max_ms", "-", row[8], CELL);
        const json_t *deadline = json_object_get(st, "deadline");
        jduration(deadline, "ms", "none", row[9], CELL);
        jrate(deadline, "alerts_per_day", row[10], CELL);
        const json_t *sug = json_object_get(st, "suggestion");
        if (!json_is_true(json_object_get(sug, "enough_samples"))) {
            snprintf(row[11], CELL, "too few samples");
            snprintf(row[12], CELL, "-");
        } else {
            char d[32];
            const char *basis = json_string_value(json_object_get(sug, "basis"));
            if (json_is_integer(json_object_get(sug, "deadline_ms")))
                snprintf(row[11], CELL, "%s (%s)",
                         duration_format(jint(sug, "deadline_ms"), d, sizeof d), basis);
            else
                snprintf(row[11], CELL, "over 365d (%s)", basis);
            jrate(sug, "alerts_per_day", row[12], CELL);
        }
    }
    table_print(&t, out);
    free(t.cells);

    json_array_foreach(json_object_get(proc, "states"), i, st) print_histogram(st, out);

    json_array_foreach(json_object_get(proc, "states"), i, st)
    {
        const json_t *sug = json_object_get(st, "suggestion");
        if (json_is_object(sug) && !json_is_true(json_object_get(sug, "enough_samples"))) {
            json_int_t n = jint(sug, "samples");
            fprintf(out,
                    "  %s: too few samples to suggest a deadline: %lld exit%s in the window, "
                    "%lld needed\n",
                    json_string_value(json_object_get(st, "state")), (long long) n,
                    n == 1 ? "" : "s", (long long) jint(sug, "needed"));
        }
    }

    json_array_foreach(json_object_get(proc, "states"), i, st)
    {
        const json_t *sug = json_object_get(st, "suggestion");
        const json_t *up = json_object_get(sug, "upgrade");
        if (!json_is_object(up))
            continue;
        char d[32], ids[256] = "";
        size_t j, len = 0;
        const json_t *id;
        json_array_foreach(json_object_get(up, "alert_ids"), j, id)
        {
            if (len + 24 >= sizeof ids) {
                snprintf(ids + len, sizeof ids - len, ", ...");
                break;
            }
            len += (size_t) snprintf(ids + len, sizeof ids - len, "%s%lld", j > 0 ? ", " : "",
                                     (long long) json_integer_value(id));
        }
        json_int_t moved = jint(up, "instances"), resolved = jint(up, "alerts_resolved");
        fprintf(out,
                "  %s: an upgrade to the suggested %s would move %lld open instance%s and "
                "resolve %lld deadline alert%s%s%s%s\n",
                json_string_value(json_object_get(st, "state")),
                duration_format(jint(sug, "deadline_ms"), d, sizeof d), (long long) moved,
                moved == 1 ? "" : "s", (long long) resolved, resolved == 1 ? "" : "s",
                resolved > 0 ? " (" : "", ids, resolved > 0 ? ")" : "");
    }

    const json_t *would_send = json_object_get(proc, "would_send");
    const json_t *commands = json_object_get(would_send, "commands");
    if (json_array_size(commands) > 0) {
        fprintf(out, "  active mode would have sent (see docs/report.md for the assumptions):\n");
        json_array_foreach(commands, i, st)
        {
            char sent[48], retries[48], anyway[48];
            fprintf(out,
                    "    %s: %s %s to %s, and at most %s retries (retry.max %lld); %s arrived "
                    "anyway after the deadline (a re-send would have been redundant)\n",
                    json_string_value(json_object_get(st, "state")),
                    fmt_count(jint(st, "commands"), sent, sizeof sent),
                    json_string_value(json_object_get(st, "type")),
                    json_string_value(json_object_get(st, "topic")),
                    fmt_count(jint(st, "retries_at_most"), retries, sizeof retries),
                    (long long) jint(st, "retry_max"),
                    fmt_count(jint(st, "arrived_after_deadline"), anyway, sizeof anyway));
        }
    }
}

void report_print_text(const json_t *report, FILE *out)
{
    const json_t *processes = json_object_get(report, "processes");
    size_t i;
    const json_t *proc;

    if (json_array_size(processes) == 0) {
        fprintf(out, "no process definitions to report on\n");
        return;
    }
    json_array_foreach(processes, i, proc)
    {
        if (i > 0)
            fprintf(out, "\n");
        print_process(report, proc, out);
    }
    /* The messages no definition could read: what the figures above miss. */
    const json_t *rejected = json_object_get(report, "rejected");
    if (rejected != NULL) {
        fprintf(out, "\n");
        rejections_print(rejected, out);
    }
}
