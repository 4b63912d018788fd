// browser.js - drives headless Chromium over the DevTools protocol (its
// --remote-debugging-pipe: JSON messages separated by NUL bytes on file
// descriptors 3 and 4), for the console suite (tests/integration/test_console.c).
//
//   node browser.js SCRIPT.json
//
// SCRIPT is {"url", "profile" (a fresh directory), "log" (a file),
// "init" (JavaScript run before each document loads; may be absent),
// "steps": [...]}. Each step, in order, may have:
//   "width", "height"  the window's size from then on (default 1400 x 900)
//   "do"       JavaScript run in the page (awaited when it is a promise)
//   "until"    JavaScript polled until it is truthy (20 s, then the run fails)
//   "value"    a file to write the JSON of "do"'s result into
//   "dump"     a file to write the page's DOM into
//   "shot"     a file to write a PNG of the whole page into
// The page is loaded before the first step, and is ready once
// #main[data-state=ready]. The log gets one line per console message, page
// error, refused resource (the Content-Security-Policy's refusals among
// them) and JavaScript dialog (alert, confirm, prompt: dismissed). Exits 0
// when every step ran, 1 with the reason on stderr otherwise.
"use strict";

const { spawn } = require("child_process");
const fs = require("fs");

const script = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const log = fs.openSync(script.log, "a");
const note = line => fs.writeSync(log, line.replace(/\n/g, " ") + "\n");

const chrome = spawn("chromium", [
  "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-dev-shm-usage",
  "--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir=" + script.profile, "about:blank",
], { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
const toChrome = chrome.stdio[3], fromChrome = chrome.stdio[4];

let nextId = 1, session = null, buffered = "";
const waiting = new Map();
const listeners = [];

fromChrome.on("data", chunk => {
  buffered += chunk.toString("utf8");
  let end;
  while ((end = buffered.indexOf("\0")) >= 0) {
    const msg = JSON.parse(buffered.slice(0, end));
    buffered = buffered.slice(end + 1);
    if (msg.id && waiting.has(msg.id)) {
      const { resolve, reject } = waiting.get(msg.id);
      waiting.delete(msg.id);
      if (msg.error) reject(new Error(msg.error.message));
      else resolve(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg);
    }
  }
});

function send(method, params, withSession = true) {
  const id = nextId++;
  const msg = { id, method, params: params || {} };
  if (withSession && session) msg.sessionId = session;
  toChrome.write(JSON.stringify(msg) + "\0");
  return new Promise((resolve, reject) => waiting.set(id, { resolve, reject }));
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

async function evaluate(expression) {
  const r = await send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true });
  if (r.exceptionDetails) {
    const d = r.exceptionDetails;
    throw new Error((d.exception && d.exception.description) || d.text);
  }
  return r.result.value;
}

async function until(expression, what) {
  const deadline = Date.now() + 20000;
  let last = null;
  while (Date.now() < deadline) {
    try {
      if (await evaluate(expression)) return;
    } catch (e) {
      last = e.message; // the document may be between two loads
    }
    await sleep(100);
  }
  const shown = await evaluate("document.getElementById('main') ? document.getElementById('main').outerHTML.slice(0, 600) : ''").catch(() => "");
  throw new Error("timed out waiting for " + what + (last ? " (" + last + ")" : "") + "; the page shows: " + shown);
}

async function size(width, height) {
  await send("Emulation.setDeviceMetricsOverride", { width, height, deviceScaleFactor: 1, mobile: false });
}

async function run() {
  listeners.push(msg => {
    const p = msg.params || {};
    if (msg.method === "Runtime.consoleAPICalled")
      note("console." + p.type + ": " + p.args.map(a => a.value !== undefined ? String(a.value) : a.description || "").join(" "));
    else if (msg.method === "Runtime.exceptionThrown")
      note("exception: " + ((p.exceptionDetails.exception && p.exceptionDetails.exception.description) || p.exceptionDetails.text));
    else if (msg.method === "Log.entryAdded")
      note("log." + p.entry.level + " (" + p.entry.source + "): " + p.entry.text);
    else if (msg.method === "Page.javascriptDialogOpening") {
      note("dialog " + p.type + ": " + p.message);
      send("Page.handleJavaScriptDialog", { accept: false });
    }
  });
  const { targetId } = await send("Target.createTarget", { url: "about:blank" }, false);
  ({ sessionId: session } = await send("Target.attachToTarget", { targetId, flatten: true }, false));
  for (const domain of ["Page", "Runtime", "Log"]) await send(domain + ".enable");
  if (script.init) await send("Page.addScriptToEvaluateOnNewDocument", { source: script.init });
  let width = 1400, height = 900;
  await size(width, height);
  await send("Page.navigate", { url: script.url });
  await until("document.getElementById('main') && document.getElementById('main').dataset.state === 'ready'", "the page to be ready");
  for (const [n, step] of script.steps.entries()) {
    const where = "step " + (n + 1);
    if (step.width || step.height) {
      width = step.width || width;
      height = step.height || height;
      await size(width, height);
      await sleep(200);
    }
    let value;
    if (step.do) value = await evaluate(step.do).catch(e => { throw new Error(where + ": " + e.message); });
    if (step.until) await until(step.until, where + ": " + step.until);
    if (step.value) fs.writeFileSync(step.value, JSON.stringify(value === undefined ? null : value));
    if (step.dump) fs.writeFileSync(step.dump, await evaluate("document.documentElement.outerHTML"));
    if (step.shot) {
      const r = await send("Page.captureScreenshot", { format: "png", captureBeyondViewport: true });
      fs.writeFileSync(step.shot, Buffer.from(r.data, "base64"));
    }
  }
}

const timer = setTimeout(() => { console.error("browser.js: the run took over 120 s"); finish(1); }, 120000);
function finish(code) {
  clearTimeout(timer);
  chrome.kill("SIGKILL");
  fs.closeSync(log);
  process.exit(code);
}
chrome.on("error", e => { console.error("browser.js: cannot start chromium: " + e.message); finish(1); });
run().then(() => finish(0), e => { console.error("browser.js: " + e.message); finish(1); });
