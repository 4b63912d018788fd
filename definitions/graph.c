/*
 * graph - a definition as DOT, Mermaid or SVG (see graph.h).
 *
 * Terms: an *edge* is one arrow: a state's transition on an event, its
 * on_timeout, the start event into the start state, or an `any`
 * transition from the "any state" node.
 */
#include "definitions/graph.h"

#include "definitions/duration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool graph_format_parse(const char *name, graph_format_t *out)
{
    if (strcmp(name, "dot") == 0)
        *out = GRAPH_DOT;
    else if (strcmp(name, "mermaid") == 0)
        *out = GRAPH_MERMAID;
    else if (strcmp(name, "svg") == 0)
        *out = GRAPH_SVG;
    else
        return false;
    return true;
}

size_t graph_state_notes(const def_t *def, size_t state, char notes[GRAPH_MAX_NOTES][160])
{
    const def_state_t *st = &def->states[state];
    size_t n = 0;
    char d[32];
    if (st->terminal != NULL) {
        snprintf(notes[n++], 160, "terminal: %s", st->terminal);
        return n;
    }
    if (st->deadline_ms > 0)
        snprintf(notes[n++], 160, "deadline %s", duration_format(st->deadline_ms, d, sizeof d));
    if (st->owner != NULL && (def->owner == NULL || strcmp(st->owner, def->owner) != 0))
        snprintf(notes[n++], 160, "owner %s", st->owner);
    if (st->command != NULL) {
        if (st->retry_max > 0)
            snprintf(notes[n++], 160, "command %s, %d %s", st->command->type, st->retry_max,
                     st->retry_max == 1 ? "retry" : "retries");
        else
            snprintf(notes[n++], 160, "command %s", st->command->type);
    }
    if (st->lease != NULL)
        snprintf(notes[n++], 160, "lease %s", duration_format(st->lease->duration_ms, d, sizeof d));
    return n;
}

/* Writes s with the characters special to `format`'s quoted strings escaped. */
static void put_escaped(FILE *f, const char *s, graph_format_t format)
{
    for (; *s != '\0'; s++) {
        char c = *s;
        if (format == GRAPH_DOT && (c == '"' || c == '\\'))
            fprintf(f, "\\%c", c);
        else if (format == GRAPH_MERMAID && c == '"')
            fputs("#quot;", f);
        else if (format == GRAPH_MERMAID && (c == '<' || c == '>'))
            fputs(c == '<' ? "#lt;" : "#gt;", f);
        else if (format == GRAPH_SVG && c == '&')
            fputs("&amp;", f);
        else if (format == GRAPH_SVG && c == '<')
            fputs("&lt;", f);
        else if (format == GRAPH_SVG && c == '>')
            fputs("&gt;", f);
        else if (format == GRAPH_SVG && c == '"')
            fputs("&quot;", f);
        else
            fputc(c, f);
    }
}

static void render_dot(const def_t *def, FILE *f)
{
    fputs("digraph \"", f);
    put_escaped(f, def->process, GRAPH_DOT);
    fputs("\" {\n  rankdir=LR;\n  node [shape=box, style=rounded, fontname=\"sans-serif\"];\n"
          "  edge [fontname=\"sans-serif\", fontsize=10];\n"
          "  start [shape=point, width=0.15];\n",
          f);
    for (size_t i = 0; i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        char notes[GRAPH_MAX_NOTES][160];
        size_t n = graph_state_notes(def, i, notes);
        fprintf(f, "  s%zu [label=\"", i);
        put_escaped(f, st->name, GRAPH_DOT);
        for (size_t k = 0; k < n; k++) {
            fputs("\\n", f);
            put_escaped(f, notes[k], GRAPH_DOT);
        }
        fputs(st->terminal != NULL ? "\", peripheries=2];\n" : "\"];\n", f);
    }
    if (def->n_any > 0)
        fputs("  any [label=\"any state\", shape=box, style=dashed];\n", f);
    fprintf(f, "  start -> s%zu [label=\"", def->start_state);
    put_escaped(f, def->events[def->start_event].name, GRAPH_DOT);
    fputs("\"];\n", f);
    for (size_t i = 0; i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        for (size_t k = 0; k < st->n_on; k++) {
            fprintf(f, "  s%zu -> s%zu [label=\"", i, st->on[k].to);
            put_escaped(f, def->events[st->on[k].event].name, GRAPH_DOT);
            fputs("\"];\n", f);
        }
        if (st->on_timeout >= 0)
            fprintf(f, "  s%zu -> s%ld [label=\"timeout\", style=dashed];\n", i, st->on_timeout);
    }
    for (size_t k = 0; k < def->n_any; k++) {
        fprintf(f, "  any -> s%zu [label=\"", def->any[k].to);
        put_escaped(f, def->events[def->any[k].event].name, GRAPH_DOT);
        fputs("\", style=dotted];\n", f);
    }
    fputs("}\n", f);
}

static void render_mermaid(const def_t *def, FILE *f)
{
    fputs("flowchart LR\n  start((start))\n", f);
    for (size_t i = 0; i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        char notes[GRAPH_MAX_NOTES][160];
        size_t n = graph_state_notes(def, i, notes);
        fprintf(f, "  s%zu%s\"", i, st->terminal != NULL ? "([" : "[");
        put_escaped(f, st->name, GRAPH_MERMAID);
        for (size_t k = 0; k < n; k++) {
            fputs("<br/>", f);
            put_escaped(f, notes[k], GRAPH_MERMAID);
        }
        fputs(st->terminal != NULL ? "\"])\n" : "\"]\n", f);
    }
    if (def->n_any > 0)
        fputs("  any{{\"any state\"}}\n", f);
    fprintf(f, "  start -->|\"");
    put_escaped(f, def->events[def->start_event].name, GRAPH_MERMAID);
    fprintf(f, "\"| s%zu\n", def->start_state);
    for (size_t i = 0; i < def->n_states; i++) {
        const def_state_t *st = &def->states[i];
        for (size_t k = 0; k < st->n_on; k++) {
            fprintf(f, "  s%zu -->|\"", i);
            put_escaped(f, def->events[st->on[k].event].name, GRAPH_MERMAID);
            fprintf(f, "\"| s%zu\n", st->on[k].to);
        }
        if (st->on_timeout >= 0)
            fprintf(f, "  s%zu -.->|timeout| s%ld\n", i, st->on_timeout);
    }
    for (size_t k = 0; k < def->n_any; k++) {
        fputs("  any -.->|\"", f);
        put_escaped(f, def->events[def->any[k].event].name, GRAPH_MERMAID);
        fprintf(f, "\"| s%zu\n", def->any[k].to);
    }
}

/* SVG geometry, in pixels. */
enum { BOX_W = 200, BOX_H = 70, COL_GAP = 110, ROW_GAP = 40, MARGIN = 30, LINE_H = 14 };

typedef struct pos {
    int x, y; /* top left of the box */
} pos_t;

static void svg_edge(FILE *f, pos_t a, pos_t b, const char *label, const char *dash, int bend)
{
    int x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2;
    int x2 = b.x, y2 = b.y + BOX_H / 2;
    if (b.x <= a.x) { /* backwards or within a column: leave and enter by the bottom */
        x1 = a.x + BOX_W / 2;
        y1 = a.y + BOX_H;
        x2 = b.x + BOX_W / 2;
        y2 = b.y + BOX_H;
    }
    int cx = (x1 + x2) / 2, cy = (y1 + y2) / 2 + bend;
    if (b.x <= a.x)
        cy = (y1 > y2 ? y1 : y2) + 40 + bend;
    fprintf(f,
            "  <path d=\"M%d,%d Q%d,%d %d,%d\" fill=\"none\" stroke=\"#555\"%s "
            "marker-end=\"url(#arrow)\"/>\n",
            x1, y1, cx, cy, x2, y2, dash);
    int lx = (x1 + 2 * cx + x2) / 4, ly = (y1 + 2 * cy + y2) / 4 - 3;
    fprintf(f, "  <text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"edge\">", lx, ly);
    put_escaped(f, label, GRAPH_SVG);
    fputs("</text>\n", f);
}

bool graph_layout(const def_t *def, graph_layout_t *out)
{
    size_t n = def->n_states;
    long *depth = malloc((n + 1) * sizeof *depth);
    size_t *queue = malloc((n + 1) * sizeof *queue);
    int *col_rows = calloc(n + 2, sizeof *col_rows);

    memset(out, 0, sizeof *out);
    out->column = calloc(n + 1, sizeof *out->column);
    out->row = calloc(n + 1, sizeof *out->row);
    if (depth == NULL || queue == NULL || col_rows == NULL || out->column == NULL ||
        out->row == NULL) {
        free(depth);
        free(queue);
        free(col_rows);
        graph_layout_free(out);
        return false;
    }

    /* Columns: BFS depth from the start state over on, on_timeout and any. */
    for (size_t i = 0; i < n; i++)
        depth[i] = -1;
    size_t head = 0, tail = 0;
    depth[def->start_state] = 0;
    queue[tail++] = def->start_state;
    while (head < tail) {
        size_t s = queue[head++];
        const def_state_t *st = &def->states[s];
        size_t nt = st->n_on + 1 + (st->terminal == NULL ? def->n_any : 0);
        for (size_t k = 0; k < nt; k++) {
            long to;
            if (k < st->n_on)
                to = (long) st->on[k].to;
            else if (k == st->n_on)
                to = st->on_timeout;
            else
                to = (long) def->any[k - st->n_on - 1].to;
            if (to >= 0 && depth[to] < 0) {
                depth[to] = depth[s] + 1;
                queue[tail++] = (size_t) to;
            }
        }
    }
    long max_depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (depth[i] < 0) /* unreachable: validation refuses it, but draw it anyway */
            depth[i] = 0;
        if (depth[i] > max_depth)
            max_depth = depth[i];
    }
    int max_rows = 0;
    for (size_t i = 0; i < n; i++) {
        out->column[i] = (int) depth[i];
        out->row[i] = col_rows[depth[i]]++;
        if (col_rows[depth[i]] > max_rows)
            max_rows = col_rows[depth[i]];
    }
    out->has_any = def->n_any > 0;
    if (out->has_any) { /* the "any state" node: below the states of column 0 */
        out->column[n] = 0;
        out->row[n] = col_rows[0]++;
        if (col_rows[0] > max_rows)
            max_rows = col_rows[0];
    }
    out->n_nodes = n + (out->has_any ? 1 : 0);
    out->columns = (int) max_depth + 1;
    out->rows = max_rows;
    free(depth);
    free(queue);
    free(col_rows);
    return true;
}

void graph_layout_free(graph_layout_t *l)
{
    if (l == NULL)
        return;
    free(l->column);
    free(l->row);
    memset(l, 0, sizeof *l);
}

static void render_svg(const def_t *def, FILE *f)
{
    size_t n = def->n_states;
    graph_layout_t l;
    pos_t *pos = malloc((n + 1) * sizeof *pos);
    if (pos == NULL || !graph_layout(def, &l)) {
        free(pos);
        return;
    }
    for (size_t i = 0; i < l.n_nodes; i++) {
        pos[i].x = MARGIN + 40 + l.column[i] * (BOX_W + COL_GAP);
        pos[i].y = MARGIN + l.row[i] * (BOX_H + ROW_GAP);
    }
    bool has_any = l.has_any;
    int width = MARGIN * 2 + 40 + l.columns * (BOX_W + COL_GAP) - COL_GAP;
    int height = MARGIN * 2 + l.rows * (BOX_H + ROW_GAP) + 40;

    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            width, height, width, height);
    fputs("  <title>", f);
    put_escaped(f, def->process, GRAPH_SVG);
    fputs("</title>\n  <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
          "markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">"
          "<path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>\n"
          "  <style>.edge{font-size:10px;fill:#333}.note{font-size:10px;fill:#555}</style>\n",
          f);

    /* The start point and its edge. */
    pos_t sp = pos[def->start_state];
    fprintf(f, "  <circle cx=\"%d\" cy=\"%d\" r=\"6\" fill=\"#333\"/>\n", MARGIN + 6,
            sp.y + BOX_H / 2);
    fprintf(f,
            "  <line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#555\" "
            "marker-end=\"url(#arrow)\"/>\n",
            MARGIN + 12, sp.y + BOX_H / 2, sp.x, sp.y + BOX_H / 2);

    for (size_t i = 0; i < n; i++) {
        const def_state_t *st = &def->states[i];
        pos_t p = pos[i];
        bool term = st->terminal != NULL;
        fprintf(f,
                "  <g class=\"state%s\" id=\"state-%zu\">\n"
                "    <rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"%d\" "
                "fill=\"%s\" stroke=\"#333\" stroke-width=\"%s\"/>\n",
                term ? " terminal" : "", i, p.x, p.y, BOX_W, BOX_H, term ? 30 : 8,
                term ? "#e8f0e8" : "#f4f6fa", term ? "3" : "1");
        fprintf(f, "    <text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">",
                p.x + BOX_W / 2, p.y + 20);
        put_escaped(f, st->name, GRAPH_SVG);
        fputs("</text>\n", f);
        char notes[GRAPH_MAX_NOTES][160];
        size_t nn = graph_state_notes(def, i, notes);
        for (size_t k = 0; k < nn && k < 3; k++) {
            fprintf(f, "    <text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"note\">",
                    p.x + BOX_W / 2, p.y + 36 + (int) k * LINE_H);
            put_escaped(f, notes[k], GRAPH_SVG);
            fputs("</text>\n", f);
        }
        fputs("  </g>\n", f);
    }
    if (has_any) {
        pos_t p = pos[n];
        fprintf(f,
                "  <rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"8\" fill=\"none\" "
                "stroke=\"#333\" stroke-dasharray=\"4 3\"/>\n"
                "  <text x=\"%d\" y=\"%d\" text-anchor=\"middle\">any state</text>\n",
                p.x, p.y, BOX_W, BOX_H, p.x + BOX_W / 2, p.y + BOX_H / 2 + 4);
    }

    int nth = 0;
    for (size_t i = 0; i < n; i++) {
        const def_state_t *st = &def->states[i];
        for (size_t k = 0; k < st->n_on; k++) {
            /* Edges of one column fan out, so their labels do not sit on each other. */
            int bend = (nth++ % 5 - 2) * 12;
            svg_edge(f, pos[i], pos[st->on[k].to], def->events[st->on[k].event].name, "", bend);
        }
        if (st->on_timeout >= 0)
            svg_edge(f, pos[i], pos[st->on_timeout], "timeout", " stroke-dasharray=\"6 4\"", 0);
    }
    for (size_t k = 0; k < def->n_any; k++)
        svg_edge(f, pos[n], pos[def->any[k].to], def->events[def->any[k].event].name,
                 " stroke-dasharray=\"2 3\"", 0);
    fputs("</svg>\n", f);
    graph_layout_free(&l);
    free(pos);
}

char *graph_render(const def_t *def, graph_format_t format)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    switch (format) {
    case GRAPH_DOT:
        render_dot(def, f);
        break;
    case GRAPH_MERMAID:
        render_mermaid(def, f);
        break;
    case GRAPH_SVG:
        render_svg(def, f);
        break;
    }
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(buf);
        return NULL;
    }
    return buf;
}
