/* Steward's web console: four views over the JSON API of `steward run`
 * (docs/operations.md). No framework and no network beyond this server.
 * The server's Content-Security-Policy allows only this file and
 * console.css: no inline script, no style attribute (classes instead).
 * Read only unless an operate token is given; it is kept in
 * sessionStorage, so it goes with the tab. */
"use strict";

const main = document.getElementById("main");
const SVGNS = "http://www.w3.org/2000/svg";

function token() {
  return sessionStorage.getItem("steward.token") || "";
}

async function api(path, options) {
  const opts = options || {};
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  if (opts.body) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method: opts.method || "GET", headers, body: opts.body });
  let doc = null;
  try { doc = await resp.json(); } catch (e) { doc = null; }
  if (!resp.ok) {
    const why = doc && doc.error ? doc.error : resp.statusText;
    const err = new Error(resp.status + ": " + why);
    err.status = resp.status;
    throw err;
  }
  return doc;
}

/* el("tag", {attr: value}, child...): strings become text, never HTML. */
function el(tag, attrs, ...children) {
  const svg = ["svg", "g", "rect", "line", "path", "text", "defs", "marker", "title"].includes(tag);
  const node = svg ? document.createElementNS(SVGNS, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return node;
}

function show(...nodes) {
  main.replaceChildren(...nodes.flat().filter(n => n !== null && n !== undefined));
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.abs(ms) / 1000;
  const sign = ms < 0 ? "-" : "";
  if (s < 1) return sign + Math.round(Math.abs(ms)) + "ms";
  if (s < 60) return sign + (s < 10 ? s.toFixed(1) : Math.round(s)) + "s";
  if (s < 3600) return sign + Math.floor(s / 60) + "m" + (s % 60 >= 1 ? Math.floor(s % 60) + "s" : "");
  if (s < 86400) return sign + Math.floor(s / 3600) + "h" + (Math.floor(s % 3600 / 60) ? Math.floor(s % 3600 / 60) + "m" : "");
  return sign + Math.floor(s / 86400) + "d" + (Math.floor(s % 86400 / 3600) ? Math.floor(s % 86400 / 3600) + "h" : "");
}

function params() {
  const hash = location.hash.replace(/^#\/?/, "");
  const q = hash.indexOf("?");
  return {
    page: (q < 0 ? hash : hash.slice(0, q)) || "processes",
    args: new URLSearchParams(q < 0 ? "" : hash.slice(q + 1)),
  };
}

function go(page, args) {
  const q = new URLSearchParams(args || {}).toString();
  location.hash = "#/" + page + (q ? "?" + q : "");
}

/* ---- operator actions ---------------------------------------------------- */

async function act(path, body, label) {
  const reason = prompt(label + ": reason (recorded in the audit trail)");
  if (!reason) return;
  try {
    await api(path, { method: "POST", body: JSON.stringify(Object.assign({ reason }, body || {})) });
    route();
  } catch (e) {
    alert(label + " failed: " + e.message);
  }
}

function actionButton(label, path, body) {
  if (!token()) return null;
  return el("button", { class: "action", "data-action": label, onclick: () => act(path, body, label) }, label);
}

/* The verbs come from the server's table (GET /v1/verbs), read once: a
 * verb the server gains gets its button where its row says, with no
 * change here. */
let verbTable = null;
async function verbs() {
  if (!verbTable) verbTable = api("/v1/verbs").then(doc => doc.verbs, e => { verbTable = null; throw e; });
  return verbTable;
}

/* The buttons of the verbs the table offers in `view`, for the thing
 * whose path captures are `captures` ({id} or {process, key}). */
function verbButtons(table, view, captures, skip) {
  if (!token()) return [];
  return table.filter(v => (v.console || []).includes(view) && !(skip && skip(v)))
    .map(v => actionButton(v.name,
      v.path.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(captures[name])),
      v.console_body));
}

/* ---- processes: each definition as a graph -------------------------------- */

/* Layers by BFS depth from the start state; terminal states in the last
 * layer, unreachable ones after the deepest reached layer. */
function layout(graph) {
  const next = {};
  for (const s of graph.states) next[s.name] = [];
  for (const t of graph.transitions) if (next[t.from] && t.to) next[t.from].push(t.to);
  const depth = {};
  const queue = [];
  if (graph.start && next[graph.start]) { depth[graph.start] = 0; queue.push(graph.start); }
  while (queue.length) {
    const s = queue.shift();
    for (const n of next[s]) if (!(n in depth)) { depth[n] = depth[s] + 1; queue.push(n); }
  }
  const live = graph.states.filter(s => !s.terminal);
  let deepest = 0;
  for (const s of live) if (s.name in depth) deepest = Math.max(deepest, depth[s.name]);
  for (const s of live) if (!(s.name in depth)) depth[s.name] = deepest + 1;
  const last = Math.max(deepest, ...live.map(s => depth[s.name]), 0) + 1;
  for (const s of graph.states) if (s.terminal) depth[s.name] = last;
  const layers = [];
  for (const s of graph.states) (layers[depth[s.name]] = layers[depth[s.name]] || []).push(s);
  return layers.filter(l => l && l.length);
}

function health(s) {
  if (s.terminal) return "terminal";
  if (s.overdue > 0) return "late";
  if (s.open > 0) return "busy";
  return "ok";
}

function drawGraph(graph) {
  const W = 160, H = 54, GX = 56, GY = 22;
  const layers = layout(graph);
  const pos = {};
  const tallest = Math.max(...layers.map(l => l.length));
  layers.forEach((layer, x) => {
    const offset = (tallest - layer.length) * (H + GY) / 2;
    layer.forEach((s, y) => { pos[s.name] = { x: 10 + x * (W + GX), y: 10 + offset + y * (H + GY) }; });
  });
  const width = 20 + layers.length * (W + GX) - GX;
  const height = 20 + tallest * (H + GY) - GY;
  /* Scaled down to the page's width rather than cut off. */
  const svg = el("svg", { class: "graph", width, height, viewBox: `0 0 ${width} ${height}`,
                          "data-process": graph.process },
    el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                   markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a97ab" }))));
  const seen = {};
  for (const t of graph.transitions) {
    const a = pos[t.from], b = pos[t.to];
    if (!a || !b) continue;
    const pair = t.from + "→" + t.to;
    const n = seen[pair] = (seen[pair] || 0) + 1;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    let d;
    if (b.x > a.x) {
      const mx = (x1 + x2) / 2;
      d = `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`;
    } else { /* back or same layer: loop over the top */
      const top = Math.min(a.y, b.y) - 12 - 6 * n;
      d = `M ${a.x + W / 2} ${a.y} C ${a.x + W / 2} ${top}, ${b.x + W / 2} ${top}, ${b.x + W / 2} ${b.y}`;
    }
    svg.appendChild(el("path", { class: "edge" + (t.event === "timeout" ? " timeout" : ""), d,
                                 "data-from": t.from, "data-to": t.to },
      el("title", {}, t.event + ": " + t.from + " → " + t.to)));
  }
  for (const s of graph.states) {
    const p = pos[s.name];
    const cls = health(s);
    const g = el("g", { class: "node " + cls, transform: `translate(${p.x},${p.y})`,
                        "data-state": s.name, "data-open": s.open, "data-overdue": s.overdue,
                        "data-terminal": s.terminal ? "true" : "false",
                        onclick: s.terminal ? null : () => go("stuck", { process: graph.process, state: s.name }) },
      el("rect", { width: W, height: H, rx: s.terminal ? 20 : 6 }),
      el("text", { x: 10, y: 20, "font-weight": 600 }, s.name + (s.name === graph.start ? " ▸" : "")),
      el("text", { x: 10, y: 40, class: "counts" },
         s.terminal ? "terminal: " + s.terminal
                    : `${s.open} open · ${s.overdue} overdue` + (s.deadline ? " · " + s.deadline : "")));
    svg.appendChild(g);
  }
  return svg;
}

async function pageProcesses() {
  const list = await api("/v1/processes");
  if (!list.processes.length) {
    show(el("h2", {}, "Processes"), el("p", { class: "muted" }, "No definition recorded yet."));
    return;
  }
  const graphs = await Promise.all(list.processes.map(p =>
    api("/v1/processes/" + encodeURIComponent(p.process) + "/graph")));
  show(el("h2", {}, "Processes"),
    list.processes.map((p, i) => el("section", { class: "card process", "data-process": p.process },
      el("h3", {}, p.process, " ",
         el("span", { class: "pill" }, "v" + p.version + " · " + p.mode), " ",
         el("span", { class: "pill" + (p.overdue > 0 ? " late" : ""), "data-total-open": p.open,
                      "data-total-overdue": p.overdue }, `${p.open} open · ${p.overdue} overdue`)),
      el("div", { class: "scroll-x" }, drawGraph(graphs[i])))));
}

/* ---- stuck: open alerts and overdue instances ------------------------------ */

async function pageStuck(args) {
  const f = { process: args.get("process") || "", state: args.get("state") || "",
              team: args.get("team") || "", age: args.get("age") || "" };
  const q = new URLSearchParams({ overdue: "true", limit: "500" });
  if (f.process) q.set("process", f.process);
  if (f.state) q.set("state", f.state);
  const [stuck, overdue, table] = await Promise.all([
    api("/v1/stuck" + (f.process ? "?process=" + encodeURIComponent(f.process) : "")),
    api("/v1/instances?" + q.toString()),
    token() ? verbs() : [],
  ]);
  const minAge = f.age ? parseAge(f.age) : 0;
  const rows = overdue.instances
    .filter(i => !f.team || i.owner === f.team)
    .filter(i => (i.overdue_ms || 0) >= minAge)
    .sort((a, b) => (b.overdue_ms || 0) - (a.overdue_ms || 0));
  const alerts = [];
  for (const g of stuck.groups)
    for (const a of g.alerts)
      alerts.push(Object.assign({ process: g.process, state: g.state }, a));
  const shownAlerts = alerts
    .filter(a => !f.state || a.state === f.state)
    .filter(a => !f.team || a.owner === f.team)
    .filter(a => a.age_ms >= minAge)
    .sort((a, b) => b.age_ms - a.age_ms);

  const input = (name, placeholder) => el("input", { name, placeholder, value: f[name] });
  const form = el("form", { class: "filters", id: "stuck-filters",
    onsubmit: e => {
      e.preventDefault();
      const data = {};
      for (const k of ["process", "state", "team", "age"]) if (form.elements[k].value) data[k] = form.elements[k].value;
      go("stuck", data);
    } },
    input("process", "process"), input("state", "state"), input("team", "team"),
    input("age", "older than (e.g. 10m)"), el("button", { type: "submit" }, "Filter"));

  show(el("h2", {}, "Stuck"), form,
    el("section", { class: "card" },
      el("h3", {}, `Overdue instances (${rows.length})`),
      rows.length ? el("table", { id: "overdue" },
        el("tr", {}, ["process", "key", "state", "team", "overdue by", "in state", "lease", ""].map(h => el("th", {}, h))),
        rows.map(i => el("tr", { class: "overdue-row", "data-key": i.key, "data-state": i.state, "data-process": i.process },
          el("td", {}, i.process),
          el("td", {}, el("a", { href: "#/instance?" + new URLSearchParams({ process: i.process, key: i.key }) }, i.key)),
          el("td", {}, i.state), el("td", {}, i.owner || ""),
          el("td", { class: "error" }, duration(i.overdue_ms)), el("td", {}, duration(i.ms_in_state)),
          el("td", {}, i.claimed_by || ""),
          el("td", {}, verbButtons(table, "overdue", i)))))
        : el("p", { class: "muted" }, "Nothing overdue.")),
    el("section", { class: "card" },
      el("h3", {}, `Open alerts (${shownAlerts.length})`),
      shownAlerts.length ? el("table", { id: "alerts" },
        el("tr", {}, ["kind", "process", "state", "key", "team", "open for", "summary", ""].map(h => el("th", {}, h))),
        shownAlerts.map(a => el("tr", { class: "alert-row", "data-alert": a.id, "data-key": a.key || "" },
          el("td", {}, a.kind), el("td", {}, a.process), el("td", {}, a.state),
          el("td", {}, a.key ? el("a", { href: "#/instance?" + new URLSearchParams({ process: a.process, key: a.key }) }, a.key) : ""),
          el("td", {}, a.owner), el("td", {}, duration(a.age_ms)), el("td", {}, a.summary),
          el("td", {}, a.acked_by ? "acked by " + a.acked_by : null,
             /* an acknowledged alert is not offered another acknowledge */
             verbButtons(table, "alerts", a, v => a.acked_by && v.name === "ack")))))
        : el("p", { class: "muted" }, "No open alert.")));
}

function parseAge(text) {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) return 0;
  return Number(m[1]) * { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[m[2]];
}

/* ---- instance: search by key, then its timeline ---------------------------- */

async function pageInstance(args) {
  const key = args.get("key") || "";
  const process = args.get("process") || "";
  const form = el("form", { class: "filters", id: "search",
    onsubmit: e => { e.preventDefault(); go("instance", { key: form.elements.key.value }); } },
    el("input", { name: "key", placeholder: "key (or its beginning)", value: key, size: 40 }),
    el("button", { type: "submit" }, "Find"));
  if (!key) { show(el("h2", {}, "Instance"), form); return; }

  let target = process ? { process, key } : null;
  if (!target) {
    const found = await api("/v1/instances?" + new URLSearchParams({ key, limit: "50" }));
    const exact = found.instances.filter(i => i.key === key);
    if (exact.length === 1 || found.instances.length === 1) {
      target = exact[0] || found.instances[0];
    } else {
      show(el("h2", {}, "Instance"), form,
        el("section", { class: "card" },
          el("h3", {}, found.instances.length ? "Matches" : "No instance has such a key"),
          el("table", { id: "matches" }, found.instances.map(i => el("tr", { "data-key": i.key },
            el("td", {}, el("a", { href: "#/instance?" + new URLSearchParams({ process: i.process, key: i.key }) }, i.key)),
            el("td", {}, i.process), el("td", {}, i.state), el("td", {}, i.status))))));
      return;
    }
  }
  let inst;
  try {
    inst = await api("/v1/instances/" + encodeURIComponent(target.process) + "/" + encodeURIComponent(target.key));
  } catch (e) {
    if (e.status !== 404) throw e;
    show(el("h2", {}, "Instance"), form, el("p", { class: "error" }, e.message));
    return;
  }
  const table = token() ? await verbs() : [];
  const events = inst.history.map(h => ({ at: h.event_time, kind: "event", h }));
  for (const a of inst.alerts) {
    events.push({ at: a.opened_at, kind: "alert-open", a });
    if (a.resolved_at) events.push({ at: a.resolved_at, kind: "alert-resolved", a });
  }
  events.sort((x, y) => (x.at < y.at ? -1 : x.at > y.at ? 1 : 0));
  const item = e => {
    if (e.kind === "event") {
      const h = e.h;
      const operator = h.actor !== null && h.actor !== undefined;
      const bad = ["late", "unexpected", "violation"].includes(h.outcome);
      return el("li", { class: "event" + (operator ? " op" : bad ? " bad" : ""), "data-outcome": h.outcome,
                        "data-event": h.event_type },
        el("b", {}, h.event_type), " ", el("span", { class: "pill" + (bad ? " late" : "") }, h.outcome),
        h.replayed ? el("span", { class: "pill" }, "replayed") : null,
        " ", h.from_state || "·", " → ", h.to_state || "·",
        el("div", { class: "muted" }, h.event_time,
           operator ? " · by " + h.actor + (h.reason ? ": " + h.reason : "") : "",
           h.detail ? " · " + h.detail : ""));
    }
    const a = e.a;
    return el("li", { class: "alert", "data-alert": a.id, "data-alert-kind": e.kind },
      el("b", {}, e.kind === "alert-open" ? "alert opened" : "alert resolved"), " ",
      el("span", { class: "pill late" }, a.kind), " ", a.state || "",
      el("div", { class: "muted" }, e.at, " · ", e.kind === "alert-open" ? a.summary : (a.resolution || "")));
  };
  const i = inst;
  show(el("h2", {}, "Instance"), form,
    el("section", { class: "card", id: "instance", "data-key": i.key, "data-state": i.state, "data-status": i.status },
      el("h3", {}, i.process, " / ", i.key),
      el("table", {},
        el("tr", {}, el("th", {}, "state"), el("td", { id: "inst-state" }, i.state), el("th", {}, "status"), el("td", {}, i.status)),
        el("tr", {}, el("th", {}, "in state"), el("td", {}, duration(i.ms_in_state)),
           el("th", {}, "deadline"), el("td", { class: i.overdue ? "error" : "" },
             i.deadline_at ? i.deadline_at + " (" + (i.ms_to_deadline < 0 ? "overdue by " + duration(-i.ms_to_deadline) : "in " + duration(i.ms_to_deadline)) + ")" : "none")),
        el("tr", {}, el("th", {}, "started"), el("td", {}, i.started_at),
           el("th", {}, "lease"), el("td", {}, i.claimed_by ? i.claimed_by + " since " + i.claimed_at : "none"))),
      i.status === "active" && token() ? el("p", {},
        verbButtons(table, "instance", i)) : null),
    el("section", { class: "card" }, el("h3", {}, "Timeline"), el("ol", { class: "timeline", id: "timeline" }, events.map(item))));
}

/* ---- report: latency histograms -------------------------------------------- */
/* The document is steward report --json's (shadow/report, docs/report.md):
 * this page only draws it. */

/* A rate as steward report prints it (report_format_rate): two decimals
 * below 10, one below 100, else whole; the console's "–" when unknown. */
function rate(perDay) {
  if (perDay === null || perDay === undefined || perDay < 0) return "–";
  if (perDay < 10) return perDay.toFixed(2);
  if (perDay < 100) return perDay.toFixed(1);
  return Math.round(perDay).toLocaleString("en-US");
}

/* Bars: the report's buckets, each counting the exits above the previous
 * bucket's le_ms and not above its own; the last (le_ms null) beyond the
 * ladder. */
function histogram(s) {
  const W = 520, H = 150, PAD = 28;
  const buckets = s.histogram;
  const max = Math.max(1, ...buckets.map(b => b.count));
  const bw = (W - PAD) / buckets.length;
  /* A time's x: inside the first bucket whose bound holds it, by log scale. */
  const xOf = ms => {
    for (let i = 0; i < buckets.length; i++) {
      const hi = buckets[i].le_ms, lo = i ? buckets[i - 1].le_ms : 0;
      if (hi === null || ms <= hi) {
        const f = hi === null ? 0.5 : lo ? Math.log(ms / lo) / Math.log(hi / lo) : ms / hi;
        return PAD + (i + Math.max(0, Math.min(1, f))) * bw;
      }
    }
    return W;
  };
  const svg = el("svg", { class: "histogram", width: W, height: H + 20, "data-state": s.state, "data-exits": s.left });
  buckets.forEach((b, i) => {
    const h = (H - 10) * b.count / max;
    svg.appendChild(el("rect", { class: "bar", x: PAD + i * bw + 1, y: H - h, width: bw - 2, height: h,
                                 "data-le-ms": b.le_ms === null ? "null" : b.le_ms, "data-count": b.count },
      el("title", {}, (b.le_ms === null ? "longer" : "≤ " + duration(b.le_ms)) + ": " + b.count)));
    if (i % 3 === 0 && b.le_ms !== null)
      svg.appendChild(el("text", { x: PAD + (i + 1) * bw, y: H + 14, "text-anchor": "middle", class: "muted" }, duration(b.le_ms)));
  });
  svg.appendChild(el("line", { x1: PAD, y1: H, x2: W, y2: H, stroke: "#8a97ab" }));
  if (s.deadline.ms !== null) {
    const x = xOf(s.deadline.ms);
    svg.appendChild(el("line", { class: "deadline-line", x1: x, x2: x, y1: 0, y2: H, "data-ms": s.deadline.ms },
      el("title", {}, "deadline " + duration(s.deadline.ms))));
  }
  if (s.suggestion.deadline_ms !== null) {
    const x = xOf(s.suggestion.deadline_ms);
    svg.appendChild(el("line", { class: "suggested-line", x1: x, x2: x, y1: 0, y2: H, "data-ms": s.suggestion.deadline_ms },
      el("title", {}, "suggested " + duration(s.suggestion.deadline_ms))));
  }
  return svg;
}

/* The suggestion as the report gives it: its basis, or why there is none. */
function suggestionText(g) {
  if (!g.enough_samples) return ` · too few exits to suggest (${g.samples} of ${g.needed})`;
  if (g.deadline_ms === null) return ` · suggested: beyond the longest step (${g.basis} ${duration(g.basis_ms)} × ${g.margin})`;
  return ` · suggested ${duration(g.deadline_ms)} (${g.basis} ${duration(g.basis_ms)} × ${g.margin}, rounded up; ${rate(g.alerts_per_day)} alerts/day)`;
}

async function pageReport(args) {
  const process = args.get("process") || "";
  const since = args.get("since") || "";
  const q = new URLSearchParams();
  if (process) q.set("process", process);
  if (since) q.set("since", since);
  const report = await api("/v1/report" + (q.toString() ? "?" + q : ""));
  const form = el("form", { class: "filters", onsubmit: e => {
      e.preventDefault();
      const d = {};
      if (form.elements.process.value) d.process = form.elements.process.value;
      if (form.elements.since.value) d.since = form.elements.since.value;
      go("report", d);
    } },
    el("input", { name: "process", placeholder: "process", value: process }),
    el("input", { name: "since", placeholder: "since (e.g. 7d)", value: since }),
    el("button", { type: "submit" }, "Show"));
  show(el("h2", {}, "Report"), form,
    el("p", { class: "muted" }, "Time spent in each state, by the exits ",
       report.window.since ? "of the last " + report.window.since : "in all history",
       ", as steward report computes it. Red: the deadline; green dashes: the suggested deadline."),
    report.processes.map(p => el("section", { class: "card report", "data-process": p.process },
      el("h3", {}, p.process, " ", el("span", { class: "pill" }, "v" + p.version)),
      p.states.filter(s => s.histogram !== null).map(s => el("div", { class: "report-state", "data-state": s.state, "data-exits": s.left },
        el("h3", {}, s.state, " ", el("span", { class: "muted" },
          `${s.left} exits · p50 ${duration(s.latency.p50_ms)} · p99 ${duration(s.latency.p99_ms)}`,
          s.deadline.ms !== null
            ? ` · deadline ${duration(s.deadline.ms)} (${rate(s.deadline.alerts_per_day)} alerts/day)`
            : " · no deadline of its own",
          suggestionText(s.suggestion))),
        histogram(s))))));
}

/* ---- routing ----------------------------------------------------------------- */

const pages = { processes: pageProcesses, stuck: pageStuck, instance: pageInstance, report: pageReport };

async function route() {
  const { page, args } = params();
  for (const a of document.querySelectorAll("nav a"))
    a.classList.toggle("active", a.dataset.page === page);
  const fn = pages[page] || pageProcesses;
  main.dataset.state = "loading";
  try {
    await fn(args);
    main.dataset.state = "ready";
  } catch (e) {
    show(el("p", { class: "error", id: "error" }, "Could not load: " + e.message,
            e.status === 401 || e.status === 403 ? " (give a token above)" : ""));
    main.dataset.state = "error";
  }
}

function showMode() {
  const mode = document.getElementById("mode");
  mode.textContent = token() ? "operate: actions shown" : "read only";
  mode.classList.toggle("operate", !!token());
}

document.getElementById("token-form").addEventListener("submit", e => {
  e.preventDefault();
  const t = document.getElementById("token").value.trim();
  if (t) sessionStorage.setItem("steward.token", t);
  else sessionStorage.removeItem("steward.token");
  document.getElementById("token").value = "";
  showMode();
  route();
});
window.addEventListener("hashchange", route);
showMode();
route();
