/* Steward's web console: four views over the JSON API of `steward run`
 * (docs/operations.md). No framework and no network beyond this server.
 * The server's Content-Security-Policy allows only these files and
 * console.css: no inline script, no style attribute (classes instead).
 * Read only unless an operate token is given; it is kept in
 * sessionStorage, so it goes with the tab.
 *
 * This file is what the pages share: the API, building the DOM, the one
 * form of durations and times, the operator actions (offered only where
 * they apply, asked for inline, errors inline), routing and the
 * auto-refresh. The pages are graph.js (Processes), stuck.js, instance.js
 * and report.js; index.html loads them before this file, which starts the
 * console. */
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
const SVG_TAGS = ["svg", "g", "rect", "line", "path", "polyline", "text", "defs", "marker", "title",
                  "circle", "tspan"];
function el(tag, attrs, ...children) {
  const node = SVG_TAGS.includes(tag) ? document.createElementNS(SVGNS, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return node;
}

function show(...nodes) {
  main.replaceChildren(...nodes.flat(Infinity).filter(n => n !== null && n !== undefined));
}

/* ---- the one form of durations and times ----------------------------------- */

/* A measured duration, as duration_format_rounded() (definitions/duration.c)
 * writes it everywhere else: under a second "250ms"; under ten seconds to
 * the hundredth, trailing zeros dropped ("9.01s"); under a minute whole
 * seconds ("45s"); beyond, the two largest units, the second rounded
 * ("7m31s", "5h28m", "3d5h"). */
const UNITS = [["d", 864e5], ["h", 36e5], ["m", 6e4], ["s", 1e3]];
function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const sign = ms < 0 ? "-" : "";
  const mag = Math.abs(Math.round(ms));
  if (mag === 0) return "0s";
  if (mag < 1000) return sign + mag + "ms";
  const cs = Math.floor((mag + 5) / 10);
  if (cs < 1000) {
    let frac = cs % 100 ? "." + String(cs % 100).padStart(2, "0") : "";
    if (frac.endsWith("0")) frac = frac.slice(0, -1);
    return sign + Math.floor(cs / 100) + frac + "s";
  }
  let largest = 0;
  while (UNITS[largest][1] > mag) largest++;
  const step = UNITS[Math.min(largest + 1, 3)][1];
  let rounded = Math.floor(mag / step) * step;
  if (mag - rounded >= step / 2) rounded += step;
  let out = "", written = 0;
  for (const [name, unit] of UNITS) {
    if (written === 2 || rounded === 0) break;
    const n = Math.floor(rounded / unit);
    if (!n) continue;
    out += n + name;
    rounded -= n * unit;
    written++;
  }
  return sign + out;
}

/* "3 min ago", "in 2 h": how far `iso` is from now, in one unit. */
function relative(iso) {
  const ms = Date.parse(iso) - Date.now();
  const s = Math.abs(ms) / 1000;
  let text;
  if (s < 45) text = Math.max(1, Math.round(s)) + " s";
  else if (s < 90 * 60) text = Math.round(s / 60) + " min";
  else if (s < 36 * 3600) text = Math.round(s / 3600) + " h";
  else text = Math.round(s / 86400) + " d";
  return ms <= 0 ? text + " ago" : "in " + text;
}

/* A local time: the clock time alone when it is today, else with its date. */
function localTime(iso) {
  const d = new Date(iso);
  const sameDay = d.toDateString() === new Date().toDateString();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return sameDay ? time : d.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" }) + " " + time;
}

/* A time from the API (RFC 3339, UTC, milliseconds): relative and local,
 * the UTC value on hover. */
function when(iso) {
  if (!iso) return el("span", { class: "muted" }, "–");
  return el("time", { datetime: iso, title: iso + " (UTC)" }, relative(iso), " ",
            el("span", { class: "muted" }, "(" + localTime(iso) + ")"));
}

/* A JSON value, collapsible by object and array (payloads, vars). */
function jsonView(value, label) {
  if (value === null || typeof value !== "object") {
    return el("span", { class: "json-" + (value === null ? "null" : typeof value) }, JSON.stringify(value));
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  const summary = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
  return el("details", { class: "json", open: entries.length <= 12 },
    el("summary", {}, label !== undefined ? label + " " : "", el("span", { class: "muted" }, summary)),
    el("ul", {}, entries.map(([k, v]) =>
      el("li", {}, el("span", { class: "json-key" }, k + ": "), jsonView(v)))));
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

function instanceLink(process, key) {
  return el("a", { href: "#/instance?" + new URLSearchParams({ process, key }) }, key);
}

/* ---- operator actions ------------------------------------------------------ */

/* The verbs come from the server's table (GET /v1/verbs), read once: a
 * verb the server gains gets its button where its row says. */
let verbTable = null;
async function verbs() {
  if (!verbTable) verbTable = api("/v1/verbs").then(doc => doc.verbs, e => { verbTable = null; throw e; });
  return verbTable;
}

/* Whether `verb` applies to the thing `t` describes, as far as the console
 * can tell: the server decides in the end (and its refusal shows inline).
 * An instance's t: {status, mode, has_command, claimed_by, outcomes,
 * states, state}; an alert's: {acked_by}. */
function applies(verb, t) {
  if (verb.on === "alert") return verb.name !== "ack" || !t.acked_by;
  if (verb.on !== "instance" || t.status !== "active") return false;
  switch (verb.name) {
    case "retry": return t.mode === "active" && !!t.has_command;
    case "claim": return !t.claimed_by;
    case "release": return !!t.claimed_by;
    case "close": return (t.outcomes || []).length > 0;
    case "move": return (t.states || []).some(s => s !== t.state);
    default: return true;
  }
}

/* The field that asks for option `o` of a verb: a choice where the thing
 * knows the answers (close: its outcomes; move: its other states). */
function optionField(o, t) {
  let choices = null;
  if (o.name === "as") choices = (t.outcomes || []).map(x => [x.outcome, x.outcome + " (" + x.state + ")"]);
  if (o.name === "to") choices = (t.states || []).filter(s => s !== t.state).map(s => [s, s]);
  const field = choices
    ? el("select", { name: o.name, required: o.required }, choices.map(([v, label]) => el("option", { value: v }, label)))
    : el("input", { name: o.name, placeholder: o.arg || o.name, required: o.required });
  return el("label", {}, o.name + " ", field);
}

function verbPath(verb, captures) {
  return verb.path.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(captures[name]));
}

/* The open action form, if any: the auto-refresh leaves the page alone
 * while one is. */
let openForm = null;

/* An inline form under `anchor` (replacing what it held) that asks for the
 * reason and the verb's options, posts, and says how it went. */
function actionForm(verb, t, done) {
  const error = el("p", { class: "error", "data-error": verb.name });
  const form = el("form", { class: "act", "data-verb": verb.name,
    onsubmit: async e => {
      e.preventDefault();
      const body = { reason: form.elements.reason.value.trim() };
      for (const o of verb.options) if (form.elements[o.name] && form.elements[o.name].value) body[o.name] = form.elements[o.name].value;
      form.classList.add("busy");
      try {
        await api(verbPath(verb, t), { method: "POST", body: JSON.stringify(body) });
        openForm = null;
        done();
      } catch (err) {
        form.classList.remove("busy");
        error.textContent = verb.name + " refused: " + err.message;
      }
    } },
    el("b", {}, verb.name), " ", el("span", { class: "muted" }, verb.summary), " ",
    verb.options.map(o => optionField(o, t)),
    el("label", {}, "reason ", el("input", { name: "reason", required: true, size: 30,
                                              placeholder: "recorded in the audit trail" })),
    el("button", { type: "submit" }, verb.name),
    el("button", { type: "button", onclick: () => { openForm = null; form.remove(); } }, "cancel"),
    error);
  return form;
}

/* The buttons of the verbs the table offers in `view` that apply to `t`;
 * a click opens the verb's form in `slot`. `done` runs after a success. */
function verbButtons(table, view, t, slot, done) {
  if (!token()) return [];
  return table.filter(v => (v.console || []).includes(view) && applies(v, t))
    .map(v => el("button", { class: "action", type: "button", "data-action": v.name,
      onclick: () => {
        openForm = actionForm(v, t, done || route);
        slot.replaceChildren(openForm);
        const first = openForm.querySelector("select, input");
        if (first) first.focus();
      } }, v.name));
}

/* ---- routing and the auto-refresh --------------------------------------------- */

const pages = { processes: pageProcesses, stuck: pageStuck, instance: pageInstance, report: pageReport };
let refreshes = 0;

async function route(quiet) {
  const { page, args } = params();
  for (const a of document.querySelectorAll("nav a"))
    a.classList.toggle("active", a.dataset.page === page);
  const fn = pages[page] || pageProcesses;
  openForm = null;
  if (quiet !== true) main.dataset.state = "loading";
  try {
    await fn(args);
    main.dataset.state = "ready";
    main.dataset.refreshed = String(refreshes);
  } catch (e) {
    show(el("p", { class: "error", id: "error" }, "Could not load: " + e.message,
            e.status === 401 || e.status === 403 ? " (give a token above)" : ""));
    main.dataset.state = "error";
  }
}

const REFRESH_MS = 10000;
function refreshOn() {
  return localStorage.getItem("steward.refresh") !== "off";
}

/* Every REFRESH_MS the page is read again, unless refresh is paused, the
 * tab is hidden, or someone is busy on it (an action form open, a field
 * focused, rows selected). */
function tick() {
  if (!refreshOn() || document.hidden || openForm || main.dataset.state === "loading") return;
  const focused = document.activeElement;
  if (focused && main.contains(focused) && ["INPUT", "SELECT", "TEXTAREA"].includes(focused.tagName)) return;
  if (main.querySelector("input.select:checked, .bulk-results")) return;
  refreshes++;
  route(true);
}

function showMode() {
  const mode = document.getElementById("mode");
  mode.textContent = token() ? "operate: actions shown" : "read only";
  mode.classList.toggle("operate", !!token());
  document.getElementById("refresh").checked = refreshOn();
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
document.getElementById("refresh").addEventListener("change", e => {
  localStorage.setItem("steward.refresh", e.target.checked ? "on" : "off");
});
window.addEventListener("hashchange", () => route());
setInterval(tick, REFRESH_MS);
showMode();
route();
