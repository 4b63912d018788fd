/*
 * test_graph - `steward graph`'s renderers (definitions/graph): exact DOT
 * and Mermaid for a small definition with a command, retries, on_timeout
 * and an `any` transition; SVG laid out by BFS depth.
 */
#include "definitions/def.h"
#include "definitions/graph.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const char tiny[] =
    "{\"process\": \"tiny\", \"version\": 1, \"mode\": \"active\", \"owner\": \"ops\", \"key\": "
    "\"/id\",\n"
    " \"events\": {\"Start\": {\"topic\": \"t\"}, \"Go\": {\"topic\": \"t\"}, \"Cancel\": "
    "{\"topic\": \"t\"}},\n"
    " \"start\": {\"on\": \"Start\", \"to\": \"wait\"},\n"
    " \"any\": {\"Cancel\": \"cancelled\"},\n"
    " \"states\": {\n"
    "   \"wait\": {\"deadline\": \"1m\", \"owner\": \"team_a\", \"on\": {\"Go\": \"done\"},\n"
    "            \"command\": {\"topic\": \"c\", \"type\": \"DoIt\", \"payload\": {\"k\": "
    "\"${key}\"}},\n"
    "            \"retry\": {\"max\": 2}, \"on_timeout\": \"cancelled\"},\n"
    "   \"done\": {\"terminal\": \"success\"},\n"
    "   \"cancelled\": {\"terminal\": \"cancelled\"}}}\n";

static def_t *load_tiny(void)
{
    def_problems_t problems = {0};
    def_t *def = def_load_json(tiny, strlen(tiny), "tiny.json", &problems);
    ck_assert_msg(def != NULL, "tiny.json: %s", problems.n > 0 ? problems.items[0].message : "?");
    def_problems_clear(&problems);
    return def;
}

START_TEST(test_graph_dot)
{
    def_t *def = load_tiny();
    char *out = graph_render(def, GRAPH_DOT);
    ck_assert_str_eq(
        out, "digraph \"tiny\" {\n"
             "  rankdir=LR;\n"
             "  node [shape=box, style=rounded, fontname=\"sans-serif\"];\n"
             "  edge [fontname=\"sans-serif\", fontsize=10];\n"
             "  start [shape=point, width=0.15];\n"
             "  s0 [label=\"wait\\ndeadline 1m\\nowner team_a\\ncommand DoIt, 2 retries\"];\n"
             "  s1 [label=\"done\\nterminal: success\", peripheries=2];\n"
             "  s2 [label=\"cancelled\\nterminal: cancelled\", peripheries=2];\n"
             "  any [label=\"any state\", shape=box, style=dashed];\n"
             "  start -> s0 [label=\"Start\"];\n"
             "  s0 -> s1 [label=\"Go\"];\n"
             "  s0 -> s2 [label=\"timeout\", style=dashed];\n"
             "  any -> s2 [label=\"Cancel\", style=dotted];\n"
             "}\n");
    free(out);
    def_free(def);
}
END_TEST

START_TEST(test_graph_mermaid)
{
    def_t *def = load_tiny();
    char *out = graph_render(def, GRAPH_MERMAID);
    ck_assert_str_eq(out,
                     "flowchart LR\n"
                     "  start((start))\n"
                     "  s0[\"wait<br/>deadline 1m<br/>owner team_a<br/>command DoIt, 2 retries\"]\n"
                     "  s1([\"done<br/>terminal: success\"])\n"
                     "  s2([\"cancelled<br/>terminal: cancelled\"])\n"
                     "  any{{\"any state\"}}\n"
                     "  start -->|\"Start\"| s0\n"
                     "  s0 -->|\"Go\"| s1\n"
                     "  s0 -.->|timeout| s2\n"
                     "  any -.->|\"Cancel\"| s2\n");
    free(out);
    def_free(def);
}
END_TEST

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* wait is column 0; done and cancelled (one step away) share column 1,
 * one above the other; the "any state" node sits under wait. */
START_TEST(test_graph_svg_layout)
{
    def_t *def = load_tiny();
    char *out = graph_render(def, GRAPH_SVG);
    ck_assert_ptr_nonnull(strstr(out, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    ck_assert_uint_eq(count(out, "<g class=\"state\""), 1);
    ck_assert_uint_eq(count(out, "<g class=\"state terminal\""), 2);
    ck_assert_ptr_nonnull(strstr(out, "id=\"state-0\">\n    <rect x=\"70\" y=\"30\""));
    ck_assert_ptr_nonnull(strstr(out, "id=\"state-1\">\n    <rect x=\"380\" y=\"30\""));
    ck_assert_ptr_nonnull(strstr(out, "id=\"state-2\">\n    <rect x=\"380\" y=\"140\""));
    ck_assert_ptr_nonnull(strstr(out, "<rect x=\"70\" y=\"140\""));
    ck_assert_ptr_nonnull(strstr(out, ">any state</text>"));
    ck_assert_uint_eq(count(out, "marker-end="), 4); /* start, Go, timeout, Cancel */
    ck_assert_ptr_nonnull(strstr(out, "command DoIt, 2 retries"));
    ck_assert_ptr_nonnull(strstr(out, "</svg>\n"));
    free(out);
    def_free(def);
}
END_TEST

START_TEST(test_graph_escapes)
{
    graph_format_t f;
    ck_assert(graph_format_parse("svg", &f) && f == GRAPH_SVG);
    ck_assert(graph_format_parse("mermaid", &f) && f == GRAPH_MERMAID);
    ck_assert(!graph_format_parse("png", &f));
    /* An event name with characters each format quotes. */
    def_problems_t problems = {0};
    json_error_t jerr;
    json_t *doc = json_loads(tiny, 0, &jerr);
    ck_assert_ptr_nonnull(doc);
    json_t *events = json_object_get(doc, "events");
    json_object_set(events, "A<\"&>", json_object_get(events, "Go"));
    json_object_del(events, "Go");
    json_object_set_new(
        json_object_get(json_object_get(json_object_get(doc, "states"), "wait"), "on"), "A<\"&>",
        json_string("done"));
    json_object_del(json_object_get(json_object_get(json_object_get(doc, "states"), "wait"), "on"),
                    "Go");
    char *edited = json_dumps(doc, 0);
    def_t *def = def_load_json(edited, strlen(edited), "edited.json", &problems);
    ck_assert_msg(def != NULL, "%s", problems.n > 0 ? problems.items[0].message : "?");
    char *dot = graph_render(def, GRAPH_DOT);
    char *mer = graph_render(def, GRAPH_MERMAID);
    char *svg = graph_render(def, GRAPH_SVG);
    ck_assert_ptr_nonnull(strstr(dot, "[label=\"A<\\\"&>\"]"));
    ck_assert_ptr_nonnull(strstr(mer, "|\"A#lt;#quot;&#gt;\"|"));
    ck_assert_ptr_nonnull(strstr(svg, ">A&lt;&quot;&amp;&gt;</text>"));
    free(dot);
    free(mer);
    free(svg);
    def_free(def);
    free(edited);
    json_decref(doc);
    def_problems_clear(&problems);
}
END_TEST

Suite *graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, test_graph_dot);
    tcase_add_test(tc, test_graph_mermaid);
    tcase_add_test(tc, test_graph_svg_layout);
    tcase_add_test(tc, test_graph_escapes);
    suite_add_tcase(s, tc);
    return s;
}
