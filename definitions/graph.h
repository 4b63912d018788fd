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
 * depth from the start state, its row its order within the column.
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

/* Returns the rendering of `def` as a new NUL-terminated string (caller
 * frees), ending in a newline; NULL when memory runs out. */
char *graph_render(const def_t *def, graph_format_t format);

#endif
