/* The Report page: per state that is not terminal, the histogram of
 * /v1/report (the report's buckets) with the state's deadline (red) and
 * the report's suggested deadline (green dashes) drawn on it, and the
 * alerts per day the report gives for each. */
"use strict";

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

