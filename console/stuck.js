/* The Stuck page: the overdue instances, longest overdue first, and the
 * open alerts, oldest first, with filters; with a token, the actions that
 * apply on each row, and bulk actions on the overdue instances selected
 * together (those the verb table marks "bulk": retry, close), for
 * instances stuck at one step of one process. */
"use strict";

function parseAge(text) {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) return 0;
  return Number(m[1]) * { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[m[2]];
}

/* What a row of /v1/instances needs besides itself for applies(): its
 * process's outcomes and states, from the latest version's graph (the
 * server refuses what the instance's own version lacks). */
function withChoices(i, graphs) {
  const g = graphs[i.process];
  return Object.assign({}, i, {
    outcomes: g ? g.states.filter(s => s.terminal).map(s => ({ outcome: s.terminal, state: s.name })) : [],
    states: g ? g.states.filter(s => !s.terminal).map(s => s.name) : [],
  });
}

/* The bulk bar: what the selected rows have in common decides what is
 * offered; a confirmation says how many instances, then each is asked for
 * in turn and its row says how it went. */
function bulkBar(table, rows, graphs) {
  const bar = el("div", { class: "bulk", id: "bulk" });
  const checks = () => [...main.querySelectorAll("input.select:checked")];
  const render = () => {
    const picked = checks().map(c => rows.find(r => r.key === c.value && r.process === c.dataset.process));
    bar.replaceChildren();
    if (!picked.length) { bar.appendChild(el("span", { class: "muted" }, "Select instances to act on several at once.")); return; }
    const steps = new Set(picked.map(r => r.process + " / " + r.state));
    if (steps.size > 1) {
      bar.appendChild(el("span", { class: "error", "data-bulk": "mixed" },
        `${picked.length} selected at ${steps.size} steps: select instances stuck at one step of one process.`));
      return;
    }
    const ctx = withChoices(picked[0], graphs);
    const offered = table.filter(v => (v.console || []).includes("bulk") && picked.every(r => applies(v, withChoices(r, graphs))));
    bar.appendChild(el("span", { "data-selected": picked.length }, `${picked.length} selected at ${[...steps][0]}: `));
    const slot = el("span", { class: "bulk-form" });
    for (const v of offered)
      bar.appendChild(el("button", { class: "action", type: "button", "data-bulk-action": v.name,
        onclick: () => { openForm = bulkForm(v, ctx, picked); slot.replaceChildren(openForm); } }, v.name + " " + picked.length));
    if (!offered.length) bar.appendChild(el("span", { class: "muted" }, "no action applies to all of them"));
    bar.appendChild(slot);
  };
  bar.refresh = render;
  render();
  return bar;
}

function bulkForm(verb, ctx, picked) {
  const error = el("p", { class: "error", "data-error": verb.name });
  const form = el("form", { class: "act", "data-verb": verb.name, "data-bulk": picked.length });
  const confirmLine = () => {
    const target = verb.options.length && form.elements[verb.options[0].name] ? " " + verb.options[0].name + " " + form.elements[verb.options[0].name].value : "";
    return `${verb.name}${target} ${picked.length} instance${picked.length === 1 ? "" : "s"} of ${ctx.process} in ${ctx.state}?`;
  };
  const confirm = el("span", { class: "confirm" });
  form.addEventListener("submit", async e => {
    e.preventDefault();
    if (!form.dataset.confirmed) {
      form.dataset.confirmed = "1";
      confirm.textContent = confirmLine();
      form.querySelector("button[type=submit]").textContent = "confirm: " + verb.name + " " + picked.length;
      return;
    }
    const body = { reason: form.elements.reason.value.trim() };
    for (const o of verb.options) if (form.elements[o.name]) body[o.name] = form.elements[o.name].value;
    form.classList.add("busy");
    let ok = 0, refused = 0;
    for (const r of picked) {
      const cell = main.querySelector(`tr.overdue-row[data-process="${CSS.escape(r.process)}"][data-key="${CSS.escape(r.key)}"] td.result`);
      try {
        await api(verbPath(verb, r), { method: "POST", body: JSON.stringify(body) });
        ok++;
        if (cell) { cell.textContent = verb.name + ": done"; cell.className = "result ok"; }
      } catch (err) {
        refused++;
        if (cell) { cell.textContent = err.message; cell.className = "result error"; }
      }
    }
    openForm = null;
    form.replaceWith(el("span", { class: "bulk-results", "data-done": ok, "data-refused": refused },
      `${verb.name}: ${ok} done, ${refused} refused. `,
      el("button", { type: "button", onclick: () => route() }, "refresh")));
  });
  form.append(el("b", {}, verb.name), " ", ...verb.options.map(o => optionField(o, ctx)),
    el("label", {}, "reason ", el("input", { name: "reason", required: true, size: 26, placeholder: "recorded for each" })),
    el("button", { type: "submit" }, verb.name + " " + picked.length),
    el("button", { type: "button", onclick: () => { openForm = null; form.remove(); } }, "cancel"),
    confirm, error);
  return form;
}

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
  const graphs = {};
  if (token())
    for (const p of new Set(rows.map(r => r.process)))
      graphs[p] = await api("/v1/processes/" + encodeURIComponent(p) + "/graph").catch(() => null);
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

  const operate = !!token();
  const overdueRow = i => {
    const slot = el("div", { class: "slot" });
    const t = withChoices(i, graphs);
    return [el("tr", { class: "overdue-row", "data-key": i.key, "data-state": i.state, "data-process": i.process },
      operate ? el("td", {}, el("input", { type: "checkbox", class: "select", value: i.key, "data-process": i.process,
                                           title: "select for a bulk action" })) : null,
      el("td", {}, i.process), el("td", {}, instanceLink(i.process, i.key)),
      el("td", {}, i.state), el("td", {}, i.owner || ""),
      el("td", { class: "error" }, duration(i.overdue_ms)), el("td", {}, duration(i.ms_in_state)),
      el("td", {}, i.claimed_by ? el("span", { class: "pill claim" }, "claimed by " + i.claimed_by) : ""),
      el("td", {}, verbButtons(table, "overdue", t, slot)), operate ? el("td", { class: "result" }) : null),
      el("tr", { class: "slot-row" }, el("td", { colspan: 10 }, slot))];
  };
  const alertRow = a => {
    const slot = el("div", { class: "slot" });
    return [el("tr", { class: "alert-row", "data-alert": a.id, "data-key": a.key || "" },
      el("td", {}, a.kind), el("td", {}, a.process), el("td", {}, a.state),
      el("td", {}, a.key ? instanceLink(a.process, a.key) : ""),
      el("td", {}, a.owner),
      el("td", { "data-ms-in-state": a.ms_in_state === null ? "" : a.ms_in_state }, a.key ? duration(a.ms_in_state) : "–"),
      el("td", {}, when(a.opened_at)), el("td", {}, a.summary),
      el("td", {}, a.acked_by ? "acked by " + a.acked_by + " " : null,
         a.silenced_until ? el("span", { class: "pill" }, "silenced until ", when(a.silenced_until)) : null,
         verbButtons(table, "alerts", a, slot))),
      el("tr", { class: "slot-row" }, el("td", { colspan: 9 }, slot))];
  };

  const bar = rows.length && operate ? bulkBar(table, rows, graphs) : null;
  const selectAll = el("input", { type: "checkbox", class: "select-all", title: "select every row shown",
    onchange: e => { for (const c of main.querySelectorAll("input.select")) c.checked = e.target.checked; } });
  show(el("h2", {}, "Stuck"), form,
    el("section", { class: "card", onchange: () => { if (bar) bar.refresh(); } },
      el("h3", {}, `Overdue instances (${rows.length})`),
      bar,
      rows.length ? el("table", { id: "overdue" },
        el("tr", {}, operate ? el("th", {}, selectAll) : null, ["process", "key", "state", "team", "overdue by", "in state", "claim", "", operate ? "" : null]
          .filter(h => h !== null).map(h => el("th", {}, h))),
        rows.map(overdueRow))
        : el("p", { class: "muted" }, "Nothing overdue.")),
    el("section", { class: "card" },
      el("h3", {}, `Open alerts (${shownAlerts.length})`),
      shownAlerts.length ? el("table", { id: "alerts" },
        el("tr", {}, ["kind", "process", "state", "key", "team", "in state", "opened", "summary", ""].map(h => el("th", {}, h))),
        shownAlerts.map(alertRow))
        : el("p", { class: "muted" }, "No open alert.")));
}
