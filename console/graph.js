/* The Processes page: each process's latest recorded definition drawn as
 * GET /v1/processes/{process}/graph gives it. The layout (a state's
 * column and row, the "any state" node) is definitions/graph's, the one
 * `steward graph` draws; this file only routes the edges and writes the
 * counts.
 *
 * Edges never cross a box: boxes sit on a grid, and an edge leaves its
 * box by the right side, runs in the channel between two columns, along
 * the gap between two rows when it must pass other columns, and enters
 * its target by the left side. Each edge has its own lane in every
 * channel and gap it uses, and its event's name by its start. */
"use strict";

const G = { W: 200, GX: 180, GY: 34, PAD: 44, LEFT: 150, LINE: 14 };

/* Text cut to `width` pixels in `font`, with "…"; measured, not guessed. */
const measure = document.createElement("canvas").getContext("2d");
function fit(text, width, font) {
  measure.font = font;
  if (measure.measureText(text).width <= width) return text;
  let n = text.length;
  while (n > 1 && measure.measureText(text.slice(0, n) + "…").width > width) n--;
  return text.slice(0, n) + "…";
}
const FONT_NAME = "600 12px system-ui, sans-serif", FONT_SMALL = "11px system-ui, sans-serif",
      FONT_EDGE = "10px system-ui, sans-serif";

function health(s) {
  if (s.terminal) return "terminal";
  if (s.overdue > 0) return "late";
  if (s.open > 0) return "busy";
  return "ok";
}

/* The lines under a state's name: its counts, then per version when its
 * instances run on another version than the latest (each with that
 * version's deadline), then the definition's notes. */
function boxLines(graph, s) {
  if (s.terminal) return ["terminal: " + s.terminal];
  const lines = [`${s.open} open · ${s.overdue} overdue`];
  const others = s.versions.filter(v => v.version !== graph.version);
  if (others.length) {
    for (const v of s.versions)
      lines.push(`v${v.version}: ${v.open} open · ${v.overdue} overdue` + (v.deadline ? " · " + v.deadline : ""));
  }
  return lines.concat(s.notes);
}

function drawGraph(graph) {
  const { W, GX, GY, PAD, LEFT, LINE } = G;
  const lines = {};
  let most = 1;
  for (const s of graph.states) { lines[s.name] = boxLines(graph, s).slice(0, 5); most = Math.max(most, lines[s.name].length); }
  const H = 26 + most * LINE;
  const left = c => LEFT + c * (W + GX), top = r => PAD + r * (H + GY);
  const width = left(graph.columns) - GX + PAD, height = top(graph.rows) - GY + PAD;
  const nodes = {};
  for (const s of graph.states) nodes[s.name] = { x: left(s.column), y: top(s.row), col: s.column, row: s.row, out: [], in: [] };
  const ANY = "\u0000any";
  if (graph.any) nodes[ANY] = { x: left(graph.any.column), y: top(graph.any.row), col: graph.any.column, row: graph.any.row, out: [], in: [] };

  const svg = el("svg", { class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, "data-process": graph.process },
    el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
                                   orient: "auto-start-reverse" }, el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#6b7588" }))));

  /* Ports: the edges leaving a box share its right side, those entering
   * it its left side, in the order of where they go to (or come from). */
  const edges = graph.transitions.map(t => ({ t, a: nodes[t.from === null ? ANY : t.from], b: nodes[t.to] }))
    .filter(e => e.a && e.b);
  for (const e of edges) { e.a.out.push(e); e.b.in.push(e); }
  const byRow = (f) => (x, y) => (f(x).row - f(y).row) || (f(x).col - f(y).col);
  /* Exits sit 3 px above, entries 3 px below the even spacing: in a
   * channel, an edge leaving column c never runs along one entering
   * column c + 1 at the same height. */
  for (const n of Object.values(nodes)) {
    n.out.sort(byRow(e => e.b)).forEach((e, i, all) => { e.y1 = n.y + H * (i + 1) / (all.length + 1) - 3; });
    n.in.sort(byRow(e => e.a)).forEach((e, i, all) => { e.y2 = n.y + H * (i + 1) / (all.length + 1) + 3; });
  }
  for (const e of edges)
    if (e.b.col === e.a.col + 1 && Math.abs(e.y1 - e.y2) <= 6) e.y2 = e.y1; /* straight, not a jog */
  /* Lanes: the channel right of column c (c = -1: left of column 0), the
   * gap above row r (r = rows: below the last row). */
  const lanes = {};
  const lane = (kind, i) => { const k = kind + i; lanes[k] = (lanes[k] || 0) + 1; return lanes[k] - 1; };
  const channelX = c => c < 0 ? LEFT - 24 - 7 * (lane("c", c) % 4)
                                : left(c) + W + GX * 0.7 + 7 * (lane("c", c) % 8);
  const gapY = r => top(r) - GY + 6 + 6 * (lane("g", r) % 4);

  const drawn = [];
  for (const e of edges) {
    const { a, b, t } = e;
    const x1 = a.x + W, x2 = b.x;
    let pts;
    if (b.col === a.col + 1) {
      const vx = channelX(a.col);
      pts = [[x1, e.y1], [vx, e.y1], [vx, e.y2], [x2, e.y2]];
    } else {
      const gap = b.col > a.col ? (b.row > a.row ? a.row + 1 : a.row) : Math.min(a.row, b.row);
      const vx1 = channelX(a.col), gy = gapY(gap), vx2 = channelX(b.col - 1);
      pts = [[x1, e.y1], [vx1, e.y1], [vx1, gy], [vx2, gy], [vx2, e.y2], [x2, e.y2]];
    }
    const d = "M " + pts.map(p => p[0].toFixed(1) + " " + p[1].toFixed(1)).join(" L ");
    /* The name by the edge's start, before the lanes of the channel. */
    const label = fit(t.event, GX * 0.7 - 10, FONT_EDGE);
    drawn.push(el("g", { class: "edge-group" },
      el("path", { class: "edge " + t.kind, d, "data-from": t.from === null ? "any" : t.from, "data-to": t.to,
                   "data-event": t.event, "data-kind": t.kind },
        el("title", {}, t.event + ": " + (t.from === null ? "any state" : t.from) + " → " + t.to)),
      el("text", { x: x1 + 5, y: e.y1 - 3, class: "edge-label", "data-event": t.event }, label)));
  }

  /* The start event enters the start state from a dot on the left. */
  const start = nodes[graph.start];
  if (start) {
    const y = start.y + H / 2;
    svg.appendChild(el("circle", { cx: 10, cy: y, r: 6, class: "start" }));
    svg.appendChild(el("path", { class: "edge start", d: `M 16 ${y} L ${start.x} ${y}`, "data-to": graph.start, "data-kind": "start" }));
    svg.appendChild(el("text", { x: 20, y: y - 4, class: "edge-label", "data-event": graph.start_event },
                       fit(graph.start_event, LEFT - 24 - 21 - 24, FONT_EDGE)));
  }
  for (const s of graph.states) {
    const p = nodes[s.name];
    const inner = W - 16;
    svg.appendChild(el("g", { class: "node " + health(s), transform: `translate(${p.x},${p.y})`,
                              "data-state": s.name, "data-open": s.open, "data-overdue": s.overdue,
                              "data-terminal": s.terminal ? "true" : "false",
                              onclick: s.terminal ? null : () => go("stuck", { process: graph.process, state: s.name }) },
      el("title", {}, [s.name].concat(lines[s.name]).join("\n")),
      el("rect", { width: W, height: H, rx: s.terminal ? 20 : 6 }),
      el("text", { x: 8, y: 18, class: "name" }, fit(s.name + (s.name === graph.start ? " ▸" : ""), inner, FONT_NAME)),
      lines[s.name].map((line, i) => el("text", { x: 8, y: 36 + i * LINE, class: i === 0 ? "counts" : "note" },
                                        fit(line, inner, FONT_SMALL)))));
  }
  if (graph.any) {
    const p = nodes[ANY];
    svg.appendChild(el("g", { class: "node any", transform: `translate(${p.x},${p.y})`, "data-state": "any" },
      el("rect", { width: W, height: H, rx: 6 }),
      el("text", { x: 8, y: 18, class: "name" }, "any state"),
      el("text", { x: 8, y: 36, class: "note" }, fit("every state not naming the event", W - 16, FONT_SMALL))));
  }
  /* Edges last, so a label is never under a box (no edge crosses one). */
  for (const g of drawn) svg.appendChild(g);
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
      el("div", { class: "scroll-x" }, drawGraph(graphs[i])),
      graphs[i].elsewhere.length ? el("p", { class: "muted elsewhere" }, "Open in states this version no longer has: ",
        graphs[i].elsewhere.map(c => `v${c.version} ${c.state}: ${c.open} open · ${c.overdue} overdue`).join("; ")) : null)));
}
