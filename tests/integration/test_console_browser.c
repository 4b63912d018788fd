/*
 * test_console_browser - the console suite's pages in headless Chromium,
 * driven by tests/support/browser.js over the DevTools protocol: the test
 * asserts on the DOM the pages' scripts built, on values the pages
 * compute (the geometry of the graph, the durations they write, which
 * actions apply), and that the Content-Security-Policy blocked nothing, no
 * script failed and no dialog opened; it saves each page's DOM and
 * screenshots at 1400 and 800 px as artefacts (STEWARD_TEST_ARTIFACTS,
 * else ./artifacts).
 *
 *   pages     each page (processes, stuck, instance, report): the graph
 *             with event names, no edge across a box, every text inside
 *             its box; how long an instance has been in its state; times
 *             relative and local with UTC on hover; the console's
 *             durations are Steward's
 *   actions   with an operate token: only the actions that apply (claim
 *             or release, close with the process's outcomes, move, no
 *             retry on a shadow version), an inline refusal, a bulk close
 *             with its confirmation, auto-refresh
 *   demo      steward demo --serve serves the console until interrupted
 */
#include "definitions/duration.h"
#include "test_console.h"
#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where an artefact named `name` goes (STEWARD_TEST_ARTIFACTS, else
 * ./artifacts); static, so use it before the next call. */
static const char *artifact(const char *name)
{
    static char path[1200];
    const char *dir = getenv("STEWARD_TEST_ARTIFACTS");
    char artifacts[1024];
    snprintf(artifacts, sizeof artifacts, "%s", dir != NULL && dir[0] ? dir : "artifacts");
    mkdir(artifacts, 0755);
    snprintf(path, sizeof path, "%s/%s", artifacts, name);
    return path;
}

/*
 * Loads the console's page `fragment` in headless Chromium, driven by
 * tests/support/browser.js, runs `steps` (a JSON array of its steps, taken;
 * NULL: none) with an operate token in the tab when `operate`, then saves
 * the DOM and screenshots at 1400 and 800 px as artefacts named
 * console-NAME. Fails on a step that fails, a refusal by the
 * Content-Security-Policy, an error in the page or a dialog (actions ask
 * inline, never by alert() or prompt()). Returns the last DOM.
 */
static char *browse_steps(const char *fragment, const char *name, bool operate, bool refresh,
                          json_t *steps)
{
    ck_assert_msg(system("command -v chromium >/dev/null 2>&1") == 0,
                  "chromium is not installed: the console suite needs Debian's chromium package "
                  "(scripts/test installs it)");
    char url[1200], profile[1024], log[1100], dom_path[1200], file[256], init[512];
    snprintf(url, sizeof url, "%s/#/%s", tc_world.base, fragment);
    snprintf(profile, sizeof profile, "%s/chromium-%s", tc_world.dir, name);
    snprintf(log, sizeof log, "%s/chromium-%s.log", tc_world.dir, name);
    snprintf(file, sizeof file, "console-%s.html", name);
    snprintf(dom_path, sizeof dom_path, "%s", artifact(file));
    snprintf(init, sizeof init, "%s%s%s",
             refresh ? "" : "localStorage.setItem('steward.refresh', 'off');",
             operate ? "sessionStorage.setItem('steward.token', '" OPS_SECRET "');" : "",
             "window.addEventListener('error', e => console.error('page error: ' + e.message));");
    if (steps == NULL)
        steps = json_array();
    snprintf(file, sizeof file, "console-%s.png", name);
    json_array_append_new(steps, json_pack("{s:i, s:s, s:s}", "width", 1400, "dump", dom_path,
                                           "shot", artifact(file)));
    snprintf(file, sizeof file, "console-%s-800.png", name);
    json_array_append_new(steps, json_pack("{s:i, s:s}", "width", 800, "shot", artifact(file)));
    json_t *script = json_pack("{s:s, s:s, s:s, s:s, s:o}", "url", url, "profile", profile, "log",
                               log, "init", init, "steps", steps);
    char *text = json_dumps(script, JSON_INDENT(1));
    char *script_path = tl_write_file(tc_world.dir, "browser-script.json", text);
    free(text);
    json_decref(script);

    char cmd[4096];
    char *driver = tl_source_path("tests/support/browser.js");
    snprintf(cmd, sizeof cmd, "node '%s' '%s' 2>&1", driver, script_path);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char said[2048];
    size_t n = fread(said, 1, sizeof said - 1, f);
    said[n] = '\0';
    int rc = pclose(f);
    char *logged = tl_read_file(log);
    ck_assert_msg(rc == 0, "page %s: %s\nthe page's log:\n%.3000s", fragment, said, logged);
    static const char *const refused[] = {"Content Security Policy", "exception:", "page error",
                                          "dialog ", "console.error"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        ck_assert_msg(!tl_contains(logged, refused[i]), "page %s: \"%s\" in its log:\n%.3000s",
                      fragment, refused[i], logged);
    free(logged);
    free(driver);
    free(script_path);
    char *dom = tl_read_file(dom_path);
    ck_assert_msg(tl_contains(dom, "data-state=\"ready\""), "page %s never got ready: %s", fragment,
                  dom);
    return dom;
}

static char *browse(const char *fragment, const char *name)
{
    return browse_steps(fragment, name, false, false, NULL);
}

/* A step of browser.js: `do` (may be NULL) and `until` (may be NULL). */
static json_t *step(const char *js, const char *until)
{
    json_t *s = json_object();
    if (js != NULL)
        json_object_set_new(s, "do", json_string(js));
    if (until != NULL)
        json_object_set_new(s, "until", json_string(until));
    return s;
}

/* The same, writing the value of `js` to the artefact `name`. */
static json_t *step_value(const char *js, const char *name)
{
    json_t *s = step(js, NULL);
    json_object_set_new(s, "value", json_string(artifact(name)));
    return s;
}

static json_t *read_value(const char *name)
{
    char *text = tl_read_file(artifact(name));
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    ck_assert_msg(v != NULL, "%s: not JSON: %s", name, text);
    free(text);
    return v;
}

/* The start tag holding `attr` (e.g. data-state="x"), up to its '>';
 * "" when there is none. */
static char *tag_with(const char *dom, const char *tag, const char *attr)
{
    static char buf[2048];
    buf[0] = '\0';
    for (const char *p = strstr(dom, attr); p != NULL; p = strstr(p + 1, attr)) {
        const char *start = p;
        while (start > dom && *start != '<')
            start--;
        const char *end = strchr(p, '>');
        if (end == NULL || strncmp(start + 1, tag, strlen(tag)) != 0)
            continue;
        snprintf(buf, sizeof buf, "%.*s", (int) (end - start + 1), start);
        return buf;
    }
    return buf;
}

static void assert_tag(const char *dom, const char *tag, const char *attr, const char *has)
{
    const char *t = tag_with(dom, tag, attr);
    ck_assert_msg(tl_contains(t, has), "<%s %s>: expected %s in \"%s\"", tag, attr, has, t);
}

/* In the page: every edge of every graph sampled along its length, the
 * points inside a box that is neither its source nor its target counted
 * (crossings), and every text of a box that is wider than the box
 * (overflow). */
static const char geometry_js[] =
    "(() => { let crossings = [], overflow = [], edges = 0;"
    "  for (const svg of document.querySelectorAll('svg.graph')) {"
    "    const boxes = [...svg.querySelectorAll('g.node')].map(g => {"
    "      const r = g.querySelector('rect').getBBox(), m = "
    "g.transform.baseVal.consolidate().matrix;"
    "      return {name: g.dataset.state, x: m.e, y: m.f, w: r.width, h: r.height, g}; });"
    "    for (const b of boxes) for (const t of b.g.querySelectorAll('text'))"
    "      if (t.getComputedTextLength() > b.w - 8) overflow.push(b.name + ': ' + t.textContent);"
    "    for (const p of svg.querySelectorAll('path.edge')) {"
    "      edges++; const len = p.getTotalLength();"
    "      for (let d = 0; d <= len; d += 2) { const q = p.getPointAtLength(d);"
    "        for (const b of boxes) {"
    "          if (b.name === p.dataset.from || b.name === p.dataset.to) continue;"
    "          if (q.x > b.x + 1 && q.x < b.x + b.w - 1 && q.y > b.y + 1 && q.y < b.y + b.h - 1)"
    "            { crossings.push(p.dataset.from + '->' + p.dataset.to + ' in ' + b.name); break; "
    "} } } } }"
    "  return {edges, crossings: [...new Set(crossings)], overflow}; })()";

START_TEST(browser_shows_each_page)
{
    tc_world_start();

    /* processes: the graph, counts on each state, the terminal marked,
     * each edge named by its event, none across another box, every text
     * inside its box. */
    json_t *steps = json_array();
    json_array_append_new(steps, step_value(geometry_js, "console-processes-geometry.json"));
    /* ... and the console writes a duration as the rest of Steward does. */
    static const long long spans[] = {
        0,       1,       999,      1000,     1004,
        1005,    1500,    9010,     9994,     9996,
        -2500,   45400,   59600,    60212,    450600,
        3723000, 7199999, 19690000, 86400000, 3 * 86400000LL + 4 * 3600000 + 31 * 60000};
    char js[1024] = "[";
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
        snprintf(js + strlen(js), sizeof js - strlen(js), "%s%lld", i ? "," : "", spans[i]);
    strncat(js, "].map(duration)", sizeof js - strlen(js) - 1);
    json_array_append_new(steps, step_value(js, "console-durations.json"));
    char *dom = browse_steps("processes", "processes", false, false, steps);
    json_t *written = read_value("console-durations.json");
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        char want[48];
        duration_format_rounded(spans[i], want, sizeof want);
        ck_assert_msg(json_is_string(json_array_get(written, i)) &&
                          strcmp(json_string_value(json_array_get(written, i)), want) == 0,
                      "%lld ms: the console writes %s, Steward %s", spans[i],
                      json_string_value(json_array_get(written, i)), want);
    }
    json_decref(written);
    assert_tag(dom, "svg", "data-process=\"alert_order\"", "class=\"graph\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "data-open=\"1\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "data-overdue=\"1\"");
    assert_tag(dom, "g", "data-state=\"awaiting_payment\"", "node late");
    assert_tag(dom, "g", "data-state=\"awaiting_dispatch\"", "data-overdue=\"0\"");
    assert_tag(dom, "g", "data-state=\"awaiting_dispatch\"", "node busy");
    assert_tag(dom, "g", "data-state=\"completed\"", "data-terminal=\"true\"");
    ck_assert(tl_contains(dom, "1 open · 1 overdue"));
    ck_assert(tl_contains(dom, "terminal: success"));
    ck_assert(tl_contains(dom, "deadline 3s")); /* the box's notes, as steward graph writes them */
    ck_assert(tl_contains(dom, "data-from=\"awaiting_payment\" data-to=\"awaiting_dispatch\""));
    assert_tag(dom, "text", "data-event=\"PaymentCaptured\"", "edge-label");
    ck_assert(tl_contains(dom, ">PaymentCaptured</text>"));
    ck_assert(tl_contains(dom, ">ShipmentDispatched</text>"));
    ck_assert(tl_contains(dom, ">OrderPlaced</text>")); /* the start event */
    free(dom);
    json_t *geometry = read_value("console-processes-geometry.json");
    ck_assert_int_eq(json_integer_value(json_object_get(geometry, "edges")), 3);
    char *g = json_dumps(geometry, 0);
    ck_assert_msg(json_array_size(json_object_get(geometry, "crossings")) == 0 &&
                      json_array_size(json_object_get(geometry, "overflow")) == 0,
                  "geometry: %s", g);
    free(g);
    json_decref(geometry);

    /* stuck: o-3 overdue with its alert; nobody else; no actions without
     * a token; how long it has been in its state, and the alert's time
     * relative and local with the UTC value on hover. */
    dom = browse("stuck", "stuck");
    assert_tag(dom, "tr", "class=\"overdue-row\"", "data-key=\"o-3\"");
    ck_assert(!tl_contains(dom, "data-key=\"o-2\""));
    assert_tag(dom, "tr", "class=\"alert-row\"", "data-key=\"o-3\"");
    ck_assert(tl_contains(dom, "Overdue instances (1)"));
    ck_assert(!tl_contains(dom, "data-action="));
    ck_assert(!tl_contains(dom, "class=\"select\""));
    ck_assert(!tl_contains(dom, "data-ms-in-state=\"\""));
    assert_tag(dom, "time", "datetime=\"", "Z (UTC)\"");
    ck_assert(tl_contains(dom, " ago <span class=\"muted\">("));
    free(dom);
    /* ... filtered by a team that owns none of it. */
    dom = browse("stuck?team=shipping", "stuck-filtered");
    ck_assert(tl_contains(dom, "Overdue instances (0)"));
    ck_assert(!tl_contains(dom, "class=\"overdue-row\""));
    free(dom);

    /* instance: found by key, its timeline in event-time order, its claim
     * apart from the step's lease, its variables. */
    dom = browse("instance?key=o-1", "instance");
    assert_tag(dom, "section", "id=\"instance\"", "data-state=\"completed\"");
    assert_tag(dom, "section", "id=\"instance\"", "data-key=\"o-1\"");
    assert_tag(dom, "section", "id=\"instance\"", "data-mode=\"shadow\"");
    const char *placed = strstr(dom, "data-event=\"OrderPlaced\"");
    const char *paid = strstr(dom, "data-event=\"PaymentCaptured\"");
    const char *shipped = strstr(dom, "data-event=\"ShipmentDispatched\"");
    ck_assert_msg(placed != NULL && paid != NULL && shipped != NULL && placed < paid &&
                      paid < shipped,
                  "timeline: %s", dom);
    ck_assert(tl_contains(dom, "nobody (operator's claim)"));
    ck_assert(tl_contains(dom, "– (shadow mode)"));
    ck_assert(tl_contains(dom, "id=\"vars\""));
    free(dom);
    dom = browse("instance?key=o-3", "instance-alert");
    ck_assert(tl_contains(dom, "data-alert-kind=\"alert-open\""));
    ck_assert(tl_contains(dom, "alert opened"));
    free(dom);

    /* report: a histogram per state from the report's buckets, the
     * state's own deadline drawn, no suggestion from two exits. */
    dom = browse("report?process=alert_order", "report");
    assert_tag(dom, "svg", "data-state=\"awaiting_payment\"", "data-exits=\"2\"");
    assert_tag(dom, "svg", "data-state=\"awaiting_dispatch\"", "data-exits=\"1\"");
    assert_tag(dom, "line", "class=\"deadline-line\"", "data-ms=\"3000\"");
    assert_tag(dom, "rect", "data-le-ms=\"null\"", "data-count=\"0\"");
    ck_assert(tl_contains(dom, "too few exits to suggest (2 of 20)"));
    ck_assert(tl_contains(dom, "deadline 3s ("));
    ck_assert(!tl_contains(dom, "class=\"suggested-line\""));
    ck_assert(!tl_contains(dom, "data-state=\"completed\""));
    free(dom);
}
END_TEST

/* Clicks the button of `action` in `scope` (a CSS selector), then fills
 * the form it opens: `field` (NULL: none) set to `value`, the reason, and
 * submits it. */
static json_t *act_step(const char *scope, const char *action, const char *field, const char *value,
                        const char *reason, const char *until)
{
    char js[2048];
    snprintf(js, sizeof js,
             "(() => { const b = document.querySelector('%s [data-action=\"%s\"]');"
             "  if (!b) throw new Error('no %s button in %s'); b.click();"
             "  const f = document.querySelector('form.act[data-verb=\"%s\"]');"
             "  if ('%s') f.elements['%s'].value = '%s';"
             "  f.elements.reason.value = '%s'; f.requestSubmit(); })()",
             scope, action, action, scope, action, field != NULL ? field : "",
             field != NULL ? field : "", value != NULL ? value : "", reason);
    return step(js, until);
}

/* The buttons of `scope`'s actions, joined by ','. */
static json_t *buttons_step(const char *scope, const char *name)
{
    char js[512];
    snprintf(js, sizeof js,
             "[...document.querySelectorAll('%s [data-action]')].map(b => b.dataset.action)"
             ".join(',')",
             scope);
    return step_value(js, name);
}

static char *read_string(const char *name)
{
    json_t *v = read_value(name);
    char *s = strdup(json_is_string(v) ? json_string_value(v) : "(not a string)");
    json_decref(v);
    return s;
}

static void expect_buttons(const char *name, const char *want)
{
    char *got = read_string(name);
    ck_assert_msg(strcmp(got, want) == 0, "%s: buttons %s, expected %s", name, got, want);
    free(got);
}

START_TEST(browser_acts_where_it_applies)
{
    tc_world_start();
    /* Three more orders never paid: overdue at awaiting_payment with o-3. */
    tl_producer_t *p = tl_producer_new();
    tc_send_event(p, "orders", "OrderPlaced", "o-4");
    tc_send_event(p, "orders", "OrderPlaced", "o-5");
    tc_send_event(p, "orders", "OrderPlaced", "o-6");
    tl_producer_free(p);
    tc_wait_sql("SELECT count(*) FROM steward.instances WHERE overdue", "4", 60, "four overdue");

    /* The instance page of a shadow instance nobody claimed: claim, not
     * release; no retry (shadow mode); close with the process's own
     * outcome; move to another state. Claiming turns claim into release,
     * and shows the claim apart from the lease. */
    json_t *steps = json_array();
    json_array_append_new(steps, buttons_step("#actions", "console-o4-buttons.json"));
    json_array_append_new(steps, act_step("#actions", "claim", NULL, NULL, "looking",
                                          "document.querySelector('#inst-claim .pill') !== null"));
    json_array_append_new(steps, buttons_step("#actions", "console-o4-claimed.json"));
    json_array_append_new(steps,
                          step("document.querySelector('#actions [data-action=\"close\"]').click();"
                               "[...document.querySelector('form.act select[name=as]').options]"
                               ".map(o => o.value).join(',')",
                               NULL));
    json_array_append_new(steps, step_value("[...document.querySelector('form.act select[name=as]')"
                                            ".options].map(o => o.value).join(',')",
                                            "console-o4-outcomes.json"));
    json_array_append_new(steps,
                          act_step("#actions", "move", "to", "awaiting_dispatch", "paid by phone",
                                   "document.getElementById('inst-state') && "
                                   "document.getElementById('inst-state').textContent === "
                                   "'awaiting_dispatch'"));
    char *dom =
        browse_steps("instance?process=alert_order&key=o-4", "act-instance", true, false, steps);
    expect_buttons("console-o4-buttons.json", "close,move,claim");
    expect_buttons("console-o4-claimed.json", "close,move,release");
    char *outcomes = read_string("console-o4-outcomes.json");
    ck_assert_str_eq(outcomes, "success");
    free(outcomes);
    ck_assert(tl_contains(dom, "class=\"pill claim\">alice<"));
    free(dom);
    tc_wait_sql("SELECT state || ' ' || coalesce(claimed_by, '-') FROM steward.instances "
                "WHERE key = 'o-4'",
                "awaiting_dispatch alice", 30, "o-4 moved, claimed by alice");
    tc_wait_sql("SELECT string_agg(event_type || ' ' || actor || ' ' || reason, '; ' ORDER BY id) "
                "FROM steward.history WHERE key = 'o-4' AND outcome = 'operator'",
                "operator:claim alice looking; operator:move alice paid by phone", 30,
                "o-4's audit");

    /* A refusal shows inline, and no dialog opens: o-5 closed meanwhile by
     * someone else, the form's close is refused (409). */
    char js[2048];
    steps = json_array();
    snprintf(js, sizeof js,
             "(async () => { document.querySelector('#actions [data-action=\"close\"]').click();"
             "  await fetch('/v1/instances/alert_order/o-5/close', {method: 'POST', headers: "
             "    {Authorization: 'Bearer %s', 'Content-Type': 'application/json'}, "
             "    body: JSON.stringify({as: 'success', reason: 'elsewhere'})});"
             "  const f = document.querySelector('form.act[data-verb=close]');"
             "  f.elements.reason.value = 'too late'; f.requestSubmit(); })()",
             OPS_SECRET);
    json_array_append_new(steps, step(js, "document.querySelector('[data-error=close]')"
                                          ".textContent.includes('409')"));
    dom = browse_steps("instance?process=alert_order&key=o-5", "act-refused", true, false, steps);
    assert_tag(dom, "p", "data-error=\"close\"", "class=\"error\"");
    ck_assert(tl_contains(dom, "close refused: 409"));
    free(dom);

    /* Bulk on the Stuck page: o-3 and o-6 are overdue at one step; closing
     * both asks for the outcome, says how many, then does each. The
     * actions apply only with a token: none is offered without. */
    steps = json_array();
    json_array_append_new(steps, step("document.querySelector('input.select-all').click()",
                                      "document.querySelector('[data-selected=\"2\"]')"));
    json_array_append_new(steps, step_value("[...document.querySelectorAll('[data-bulk-action]')]"
                                            ".map(b => b.dataset.bulkAction).join(',')",
                                            "console-bulk-offered.json"));
    json_array_append_new(
        steps, step("document.querySelector('[data-bulk-action=close]').click();"
                    "const f = document.querySelector('form.act[data-bulk]');"
                    "f.elements.as.value = 'success'; f.elements.reason.value = 'refunded';"
                    "f.requestSubmit();",
                    "document.querySelector('form.act[data-bulk] .confirm').textContent !== ''"));
    json_array_append_new(
        steps, step_value("document.querySelector('form.act[data-bulk] .confirm').textContent",
                          "console-bulk-confirm.json"));
    json_array_append_new(steps, step("document.querySelector('form.act[data-bulk]')"
                                      ".requestSubmit()",
                                      "document.querySelector('.bulk-results')"));
    dom = browse_steps("stuck", "act-bulk", true, false, steps);
    char *offered = read_string("console-bulk-offered.json");
    ck_assert_str_eq(offered, "close"); /* no retry: a shadow version */
    free(offered);
    char *confirm = read_string("console-bulk-confirm.json");
    ck_assert_str_eq(confirm, "close as success 2 instances of alert_order in awaiting_payment?");
    free(confirm);
    assert_tag(dom, "span", "class=\"bulk-results\"", "data-done=\"2\"");
    ck_assert(tl_contains(dom, "close: 2 done, 0 refused."));
    free(dom);
    tc_wait_sql("SELECT string_agg(key || ' ' || status, ',' ORDER BY key) FROM steward.instances "
                "WHERE key IN ('o-3', 'o-6')",
                "o-3 success,o-6 success", 30, "both closed");
    tc_wait_sql("SELECT count(*) FROM steward.history WHERE outcome = 'operator' AND "
                "event_type = 'operator:close' AND actor = 'alice' AND reason = 'refunded'",
                "2", 30, "an audit row per instance");

    /* What applies, as the console judges it: retry only on an active
     * instance in a state with a command; claim only when unclaimed,
     * release only when claimed; nothing on a finished one. */
    steps = json_array();
    json_array_append_new(
        steps,
        step_value(
            "verbs().then(t => { const v = n => t.find(x => x.name === n);"
            "  const a = {status: 'active', mode: 'active', has_command: true};"
            "  return [applies(v('retry'), a), applies(v('retry'), {...a, mode: 'shadow'}),"
            "    applies(v('retry'), {...a, has_command: false}),"
            "    applies(v('claim'), a), applies(v('claim'), {...a, claimed_by: 'bob'}),"
            "    applies(v('release'), a), applies(v('release'), {...a, claimed_by: 'bob'}),"
            "    applies(v('close'), {...a, status: 'success', outcomes: [{outcome: 'x'}]}),"
            "    applies(v('ack'), {acked_by: 'bob'}), applies(v('resolve'), {acked_by: 'bob'})]"
            "  .map(b => b ? 'y' : 'n').join(''); })",
            "console-applies.json"));
    dom = browse_steps("stuck", "act-rules", true, false, steps);
    free(dom);
    char *rules = read_string("console-applies.json");
    ck_assert_str_eq(rules, "ynnynnynny");
    free(rules);

    /* Auto-refresh: on, the page is read again by itself. */
    steps = json_array();
    json_array_append_new(steps,
                          step(NULL, "document.getElementById('main').dataset.refreshed "
                                     ">= '1' && document.getElementById('refresh').checked"));
    dom = browse_steps("stuck", "refresh", true, true, steps);
    free(dom);
}
END_TEST

/* steward demo --serve: after its check, the console of the run, until
 * interrupted; then the demo exits with its check's verdict. */
/* The demo's output has the line `marker` starts, whole. */
static bool printed_url(void *marker, char *seen, size_t seen_size)
{
    char *out = tl_read_file(tc_world.log);
    const char *at = strstr(out, (const char *) marker);
    bool whole = at != NULL && strchr(at, '\n') != NULL;
    snprintf(seen, seen_size, "%zu bytes of output", strlen(out));
    free(out);
    return whole;
}

START_TEST(demo_serves_the_console_until_interrupted)
{
    memset(&tc_world, 0, sizeof tc_world);
    const char *url = tl_db_create("console_demo");
    tc_world.dir = strdup(tl_tmpdir());
    tc_world.log = tl_write_file(tc_world.dir, "demo.out", "");
    const char *argv[] = {NULL, "demo",   "--serve", "--database", url, "--orders",
                          "40", "--rate", "40",      "--seed",     "7", NULL};
    tc_world.pids[0] = tl_steward_spawn(argv, NULL, tc_world.log);

    const char *marker = "== the console: http://";
    tl_wait_until(printed_url, (void *) marker, 120, "the demo to print the console's URL",
                  tc_world.log);
    char *out = tl_read_file(tc_world.log);
    const char *at = strstr(out, marker);
    ck_assert_msg(at != NULL, "the demo never printed the console's URL: %s", out);
    const char *start = at + strlen("== the console: "); /* http://HOST:PORT/ */
    snprintf(tc_world.base, sizeof tc_world.base, "%.*s", (int) (7 + strcspn(start + 7, "/ \n")),
             start);
    ck_assert_msg(strncmp(tc_world.base, "http://127.0.0.1:", 17) == 0, "base %s", tc_world.base);
    ck_assert_msg(tl_contains(out, "demo: every stalled order was alerted"), "%s", out);

    json_t *doc = tc_get_json("/v1/processes", 200);
    json_t *p = tl_json_find(json_object_get(doc, "processes"), "process", "order_fulfilment");
    ck_assert_int_gt(tc_num(p, "open"), 0); /* the stalled orders stay open */
    json_decref(doc);
    long status = 0;
    char page[128];
    snprintf(page, sizeof page, "%s/", tc_world.base);
    char *body = tl_http_get(page, &status);
    ck_assert_int_eq(status, 200);
    free(body);

    /* The demo's graph in a browser; the README's screenshot is the whole
     * graph, in a window wide enough for it. */
    json_t *steps = json_array();
    json_array_append_new(steps, json_pack("{s:i, s:i, s:s}", "width", 2600, "height", 620, "shot",
                                           artifact("console-demo-processes-wide.png")));
    char *dom = browse_steps("processes", "demo-processes", false, false, steps);
    assert_tag(dom, "svg", "data-process=\"order_fulfilment\"", "class=\"graph\"");
    free(dom);

    /* Still serving a while later (the while is the point: no condition
     * marks it); Ctrl-C ends it, with the verdict. */
    sleep(1);
    json_decref(tc_get_json("/v1/stuck", 200));
    int rc = tl_stop(tc_world.pids[0], SIGINT, 30);
    tc_world.pids[0] = 0;
    ck_assert_msg(rc == 0, "demo exited %d", rc);
    free(out);
}
END_TEST

void tc_add_browser_tests(TCase *tc)
{
    tcase_add_test(tc, browser_shows_each_page);
    tcase_add_test(tc, browser_acts_where_it_applies);
    tcase_add_test(tc, demo_serves_the_console_until_interrupted);
}
