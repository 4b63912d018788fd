/*
 * graph - a definition drawn as a graph: Graphviz DOT, Mermaid, or SVG.
 *
 * Nodes are the states in document order, plus a start point (the start
 * event enters the start state) and, when the definition has `any`
 * transitions, one "any state" node standing for every non-terminal state
 * that does not name the event itself. Edges are the states' `on`
 * transitions (solid) and `on_timeout` (dashed, labelled "timeout").
 * Terminal states are marked with their outcome; a state's deadline,
 * owner, command type, retries and lease are written in its box.
 *
 * SVG is laid out here, without Graphviz: a state's column is its BFS
 * depth from the start state, its row its order within the column
 * (graph_layout(), which the console's graph uses too, through
 * GET /v1/processes/{process}/graph).
 *
 * Pure: no I/O. The output is deterministic for a given definition, so
 * tests and docs can compare it byte for byte.
 */
#ifndef STEWARD_GRAPH_H
#define STEWARD_GRAPH_H

#include "definitions/def.h"

#include <stdbool.h>

typedef enum graph_format {
    GRAPH_DOT = 0,
    GRAPH_MERMAID,
    GRAPH_SVG,
} graph_format_t;

/* "dot", "mermaid" or "svg" into *out; false for anything else. */
bool graph_format_parse(const char *name, graph_format_t *out);

/* The annotation lines of state `state`'s box, without its name ("deadline
 * 1m", "owner team_a", "command DoIt, 2 retries", "lease 10m"; a terminal
 * state's "terminal: success"), into notes; returns how many. */
#define GRAPH_MAX_NOTES 4
size_t graph_state_notes(const def_t *def, size_t state, char notes[GRAPH_MAX_NOTES][160]);

/* Where each box of a drawing goes: a grid of columns and rows. Nodes are
 * the states, by index, then the "any state" node when the definition has
 * `any` transitions (index n_states, column 0, under the start column's
 * states). */
typedef struct graph_layout {
    size_t n_nodes; /* def->n_states, one more with has_any */
    int *column;    /* per node: its BFS depth from the start state */
    int *row;       /* per node: its place within the column, from 0 */
    bool has_any;
    int columns, rows; /* the grid's size */
} graph_layout_t;

/* Lays `def` out into *out (free with graph_layout_free()); false, *out
 * empty, when memory runs out. Deterministic, like the renderings. */
bool graph_layout(const def_t *def, graph_layout_t *out);
void graph_layout_free(graph_layout_t *l); /* an empty or NULL one is a no-op */

/* Returns the rendering of `def` as a new NUL-terminated string (caller
 * frees), ending in a newline; NULL when memory runs out. */
char *graph_render(const def_t *def, graph_format_t format);

#endif
