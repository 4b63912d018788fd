/* The Instance page: search by key (or its beginning), then one instance
 * as `steward inspect` shows it: where it stands, the operator's claim
 * apart from the step's lease (active mode), its captured variables, the
 * commands sent for it with their payloads and delivery, the events parked
 * for it, and its timeline in event-time order (events, operator actions,
 * alerts opened and resolved); with a token, the actions that apply. */
"use strict";

/* A trace id, linked when tracing.link is set (the server fills trace_link). */
function traceView(row) {
  if (!row.trace_id) return null;
  return el("span", { class: "trace", "data-trace-id": row.trace_id }, " · trace ",
    row.trace_link ? el("a", { href: row.trace_link, rel: "noopener noreferrer", target: "_blank" }, row.trace_id)
                   : row.trace_id);
}

function timelineItem(e) {
  if (e.kind === "event") {
    const h = e.h;
    const operator = h.outcome === "operator";
    const bad = ["late", "unexpected", "violation", "stale"].includes(h.outcome);
    const where = operator ? null : h.topic ? `${h.topic}[${h.partition}]@${h.offset}` : null;
    return el("li", { class: "event" + (operator ? " op" : bad ? " bad" : ""), "data-outcome": h.outcome,
                      "data-event": h.event_type },
      el("b", {}, operator ? h.event_type.replace(/^operator:/, "") : h.event_type), " ",
      el("span", { class: "pill" + (bad ? " late" : operator ? " claim" : "") }, operator ? "operator" : h.outcome),
      h.replayed ? el("span", { class: "pill", title: "a parked event, judged once its instance could take it" }, "replayed") : null,
      " ", h.from_state || "·", " → ", h.to_state || "·",
      el("div", { class: "muted" }, when(h.event_time),
         operator ? el("span", { class: "actor" }, " · by " + h.actor + (h.reason ? ": " + h.reason : "")) : null,
         where ? " · " + where : null,
         h.detail ? " · " + h.detail : null,
         traceView(h)));
  }
  const a = e.a;
  return el("li", { class: "alert", "data-alert": a.id, "data-alert-kind": e.kind },
    el("b", {}, e.kind === "alert-open" ? "alert opened" : "alert resolved"), " ",
    el("span", { class: "pill late" }, a.kind), " ", a.state || "",
    el("div", { class: "muted" }, when(e.at), " · ", e.kind === "alert-open" ? a.summary : (a.resolution || "")));
}

function commandsTable(commands) {
  return el("table", { id: "commands" },
    el("tr", {}, ["queued", "type", "state", "step", "attempt", "token", "delivery", "payload"].map(h => el("th", {}, h))),
    commands.map(c => el("tr", { class: "command", "data-status": c.status, "data-ce-id": c.ce_id },
      el("td", {}, when(c.queued_at)), el("td", {}, c.type, el("div", { class: "muted" }, c.topic)),
      el("td", {}, c.state), el("td", {}, c.step), el("td", {}, c.attempt), el("td", {}, c.token),
      el("td", {}, el("span", { class: "pill" + (c.status === "pending" && c.last_error ? " late" : "") }, c.status), " ",
         c.status === "sent" ? when(c.sent_at) : c.status === "cancelled" ? [when(c.cancelled_at), " ", c.cancel_reason || ""] : null,
         el("div", { class: "muted" }, c.delivery_attempts + " delivery attempt" + (c.delivery_attempts === 1 ? "" : "s"),
            c.last_error ? " · last error: " + c.last_error : "", traceView(c))),
      el("td", { class: "payload" }, jsonView(c.payload, "payload")))));
}

function parkedTable(parked) {
  return el("table", { id: "parked" },
    el("tr", {}, ["event", "event time", "from", "waits until", "payload"].map(h => el("th", {}, h))),
    parked.map(p => el("tr", { class: "parked", "data-event": p.event_type },
      el("td", {}, p.event_type), el("td", {}, when(p.event_time)),
      el("td", {}, `${p.topic}[${p.partition}]@${p.offset}`), el("td", {}, when(p.expires_at)),
      el("td", { class: "payload" }, jsonView(p.payload, "payload")))));
}

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
            el("td", {}, instanceLink(i.process, i.key)),
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
  /* The history comes in event-time order; alerts go where their time is
   * (a stable sort keeps the history's own order among equal times). */
  events.sort((x, y) => (x.at < y.at ? -1 : x.at > y.at ? 1 : 0));
  const i = inst;
  const slot = el("div", { class: "slot", id: "actions-slot" });
  const deadline = i.deadline_at
    ? [when(i.deadline_at), i.ms_to_deadline === null ? "" : " · " + (i.ms_to_deadline < 0 ? "overdue by " + duration(-i.ms_to_deadline) : duration(i.ms_to_deadline) + " left"), " (at the watermark)"]
    : "none";
  const row = (...cells) => el("tr", {}, cells.map((c, n) => el(n % 2 ? "td" : "th", {}, c)));
  const active = i.mode === "active";
  show(el("h2", {}, "Instance"), form,
    el("section", { class: "card", id: "instance", "data-key": i.key, "data-state": i.state, "data-status": i.status,
                    "data-mode": i.mode || "" },
      el("h3", {}, i.process, " / ", i.key, " ",
         el("span", { class: "pill" }, "v" + i.version + (i.mode ? " · " + i.mode : "")), " ",
         el("span", { class: "pill" + (i.overdue ? " late" : "") }, i.status)),
      el("table", { class: "facts" },
        row("state", el("span", { id: "inst-state" }, i.state), "in state", duration(i.ms_in_state) + " (at the watermark)"),
        row("started", when(i.started_at), "deadline", el("span", { class: i.overdue ? "error" : "" }, deadline)),
        row("entered state", when(i.state_entered_at), "process deadline", when(i.process_deadline_at)),
        row("claimed by", el("span", { id: "inst-claim" }, i.claimed_by ? [el("span", { class: "pill claim" }, i.claimed_by), " since ", when(i.claimed_at)] : "nobody (operator's claim)"),
            "step lease", el("span", { id: "inst-lease" }, !active ? "– (shadow mode)" : i.lease_expires_at
              ? [el("span", { class: "pill lease" }, i.lease_holder || "an unnamed holder"), " until ", when(i.lease_expires_at), " · renewed ", when(i.lease_renewed_at)]
              : "nobody holds the step")),
        active ? row("step", i.step, "fencing token", i.token) : null),
      token() ? el("div", { class: "actions", id: "actions" },
        verbButtons(table, "instance", i, slot),
        i.status !== "active" ? el("span", { class: "muted" }, "finished: no action applies") : null) : null,
      slot),
    el("section", { class: "card", id: "vars" }, el("h3", {}, "Captured variables"),
      Object.keys(i.vars || {}).length ? jsonView(i.vars, "vars") : el("p", { class: "muted" }, "None captured.")),
    i.commands.length ? el("section", { class: "card" }, el("h3", {}, `Commands (the latest ${i.commands.length})`), commandsTable(i.commands)) : null,
    i.parked.length ? el("section", { class: "card" }, el("h3", {}, `Parked events (${i.parked.length})`), parkedTable(i.parked)) : null,
    el("section", { class: "card" }, el("h3", {}, "Timeline"),
      el("p", { class: "muted" }, "In event-time order; operator actions at the time they were taken. Event bodies are not kept once judged: what they carried is in the captured variables."),
      el("ol", { class: "timeline", id: "timeline" }, events.map(timelineItem))));
}
