// gpupool /ui: polls /ui/state.json (pools now and over time) and
// /ui/blocks.json (the selected pool's segments and blocks) and draws them.
// No framework and nothing from the network but this agent (docs/ui.md).
"use strict";

const COLORS = { 1: "#3b6fd4", 0: "#7fc97f", 2: "#f0a030", 3: "#e4e4e4" };
const STACK = [1, 2, 0, 3]; // the order of states in a pixel column
// COLORS as canvas pixels (RGBA bytes in memory order, read as one word).
const pixel = (hex) => {
  const v = parseInt(hex.slice(1), 16);
  return new Uint32Array(new Uint8Array([v >> 16, (v >> 8) & 255, v & 255, 255]).buffer)[0];
};
const PIXELS = { 0: pixel(COLORS[0]), 1: pixel(COLORS[1]), 2: pixel(COLORS[2]), 3: pixel(COLORS[3]) };
const PIXEL_DIM = pixel("#f2f2f2");
// Colour by tag: allocated blocks take their tag's colour (the pool's tag
// table order, the same in every pool of the process), untagged ones grey;
// free, pending and unmapped keep their state's colour.
// Not red (the largest free block's outline), green or orange (free, pending).
const TAG_COLORS = ["#1f77b4", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#393b79", "#7b4173", "#6b6ecf",
  "#843c39", "#bcbd22", "#a55194", "#3182bd", "#5254a3", "#e7ba52", "#636363", "#ad494a"];
const UNTAGGED_COLOR = "#a9b4c6";
const STATE_NAMES = { 0: "free", 1: "allocated", 2: "pending on another stream", 3: "unmapped" };
const STATE_POLL_MS = 1000;
const BLOCKS_POLL_MS = 2000;
const RETRY_MAX_MS = 10000;
const RETRY_AFTER_MAX_MS = 60000; // a 429's Retry-After is heeded up to this
const FETCH_TIMEOUT_MS = 5000; // a request not answered by then failed (a hung agent)
const ADVICE_TIMEOUT_MS = 20000; // /advice may compute for a while
const ROW_H = 14; // one segment bar, while the canvas has room
const ROW_H_MIN = 3; // thinner bars when there are many segments
const ROW_GAP = 4;
const CANVAS_MAX_H = 30000; // below every browser's canvas limit
const LABEL_W = 150; // left of the bars: the segment's size

const $ = (id) => document.getElementById(id);

// What the tests read (tests/e2e/ui_browser.py): when the map was first drawn,
// and where each bar lies on the canvas.
const ui = (window.gpupoolUI = {
  mapDrawnAt: null, // performance.now() of the first block map drawn
  mapBlocks: 0, // blocks in the map drawn last
  layout: [], // [{y, h, x, width, size, address}] of the bars drawn last
  lastDrawMs: 0, // how long the last map took to draw
  stateUpdates: 0,
  lastState: null,
  restarts: 0, // times the agent polled turned out to be another process
  largest: null, // where the largest free block's outline is drawn (and the block), null when none is
  adviceView: (data) => adviceView(data), // the advice renderer, for any shape of /advice
  fmtBytes: (v) => fmtBytes(v),
});

function fmtBytes(v) {
  if (v === undefined || v === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let x = v;
  while (Math.abs(x) >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return (i === 0 ? String(x) : x.toFixed(x < 10 ? 2 : 1)) + " " + units[i];
}

function fmtRatio(v) {
  return v === null ? "—" : (100 * v).toFixed(1) + " %";
}

function fmtAge(ms) {
  if (ms < 0) return "unknown (events off when it was allocated)";
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

// A time in seconds since the epoch (the advisor's computed_at) as the local
// time and its age (age_s where the document gives it); other numbers as they are.
function fmtWhen(s, ageS) {
  if (!(s > 1e9)) return String(s);
  const age = typeof ageS === "number" ? ageS : Date.now() / 1000 - s;
  return new Date(s * 1000).toLocaleTimeString() + " (" + (age < 0 ? "now" : fmtAge(Math.round(age * 1000)) + " ago") + ")";
}

function extFrag(p) {
  const free = p.reserved - p.allocated;
  return free > 0 ? 1 - p.largest_free / free : null;
}

function overhead(p) {
  return p.reserved > 0 ? 1 - p.allocated / p.reserved : null;
}

// Text the process chose (pool names and labels, tags) is isolated from the
// text around it, so that its bidi controls (U+202E ...) cannot reorder ours:
// in the DOM a <bdi>, in a string (an <option>, the tooltip) U+2068 ... U+2069.
const bdi = (text) => el("bdi", {}, String(text));
const iso = (text) => "\u2068" + text + "\u2069";
// Text of the process's that merely contains such names (an OOM report's
// message, the advice's notes, ...): its bidi controls are shown, escaped,
// rather than obeyed, so none reorders the text after it.
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const bidiVisible = (text) =>
  String(text).replace(BIDI_CONTROLS, (c) => "<U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + ">");

// An element with attributes and children (strings or nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  for (const c of children) if (c !== undefined && c !== null) e.append(c);
  return e;
}

// The map's caption alone, with no map: why there is none.
function mapNote(...parts) {
  const info = $("map-info");
  const cv = $("map");
  info.replaceChildren(...parts.map((x, i) => (i % 2 ? bdi(x) : x))); // odd parts: the user's text
  cv.height = 1;
  ui.layout = [];
  ui.rows = null;
}

// ---- polling, with "agent unreachable" and retries ----

let selectedPool = null; // id
const query = new URLSearchParams(location.search);
// ?pool= names a pool as /metrics labels it (one label per device), ?device= its device: the
// pool the block map shows; either alone narrows the choice (the first live pool that fits).
// The map follows that label (a pool destroyed and made again, or the label passing to
// another pool of the name) until the user picks another pool.
let want =
  query.has("pool") || query.has("device")
    ? { label: query.get("pool"), device: query.has("device") ? Number(query.get("device")) : null }
    : null;
let restartWant = null; // after a restart of the agent: the label shown before, looked for once
let failures = 0;
let retryTimer = null; // counts the status' seconds down to the next try
// The process the page polls (state.json's pid and instance): another one
// (the agent restarted) means other pools and reports under the same ids.
let agentIdentity = null;
let epoch = 0; // bumped at such a restart: answers for the process before are dropped

function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = "status" + (cls ? " " + cls : "");
}

// An answer other than 2xx, and a request that got no answer in time.
class HttpError extends Error {
  constructor(path, status, retryAfterMs) {
    super(path + ": HTTP " + status);
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}
class NoAnswer extends Error {
  constructor(path, ms) {
    super(path + ": no answer in " + ms / 1000 + " s");
    this.ms = ms;
  }
}

// Requests go to this page's origin, never through its URL: a page opened
// as https://user:pass@host/ui has credentials in its URL, which fetch()
// refuses; the browser sends the ones it logged in with by itself.
async function getJSON(path, timeoutMs = FETCH_TIMEOUT_MS) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const r = await fetch(location.origin + path, { cache: "no-store", signal: ctl.signal });
    if (!r.ok) {
      const after = Number(r.headers.get("Retry-After"));
      throw new HttpError(path, r.status, after > 0 ? after * 1000 : 0);
    }
    return await r.json();
  } catch (e) {
    if (ctl.signal.aborted) throw new NoAnswer(path, timeoutMs);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// What a failed request says in the status, and its style.
function failureText(e) {
  if (e instanceof HttpError) {
    if (e.status === 401) return ["the agent refused the credentials (HTTP 401): reload the page to log in", "stale"];
    if (e.status === 429) return ["rate-limited by the agent (HTTP 429)", "stale"];
    return ["the agent answered HTTP " + e.status, "stale"];
  }
  if (e instanceof NoAnswer) return ["agent unreachable (no answer in " + e.ms / 1000 + " s)", "down"];
  return ["agent unreachable", "down"];
}

// The wait before the next try after `n` failures in a row of a poll of
// period `base`: doubling, up to RETRY_MAX_MS; at least a 429's Retry-After.
function backoff(n, base, e) {
  const d = Math.min(RETRY_MAX_MS, base * 2 ** Math.min(n, 4));
  return e instanceof HttpError && e.retryAfterMs ? Math.max(d, Math.min(RETRY_AFTER_MAX_MS, e.retryAfterMs)) : d;
}

// "<why> · retrying in N s", N counting down each second to the next try.
function showRetry(delay, e) {
  const [text, cls] = failureText(e);
  const at = Date.now() + delay;
  const tick = () => {
    const left = Math.max(0, Math.ceil((at - Date.now()) / 1000));
    setStatus(text + " · retrying in " + left + " s", cls);
    if (!left) clearInterval(retryTimer);
  };
  clearInterval(retryTimer);
  tick();
  retryTimer = setInterval(tick, 1000);
}

async function pollState() {
  let st = null;
  let err = null;
  try {
    st = await getJSON("/ui/state.json?window=" + $("window").value);
  } catch (e) {
    err = e;
  }
  // The next poll is set before drawing, so that no error while drawing stops polling.
  if (err) {
    failures++;
    const delay = backoff(failures, STATE_POLL_MS, err);
    setTimeout(pollState, delay);
    showRetry(delay, err);
    return;
  }
  setTimeout(pollState, STATE_POLL_MS);
  failures = 0;
  clearInterval(retryTimer);
  acceptState(st);
  ui.stateUpdates++;
  setStatus("live · " + new Date(st.now_ms).toLocaleTimeString());
}

// A state from the agent: when it comes from another process than the last
// one (restarted on this port), everything kept of the one before goes.
function acceptState(st) {
  const identity = st.pid + "/" + st.instance;
  if (agentIdentity !== null && identity !== agentIdentity) forgetProcess();
  agentIdentity = identity;
  ui.lastState = st;
  renderState(st);
}

let selectedLabel = null; // {label, device} of the pool selected, at the last state

function forgetProcess() {
  epoch++;
  ui.restarts++;
  oomDetails.clear();
  oomFetchedAt = 0;
  if (!want && selectedLabel) restartWant = selectedLabel;
  selectedPool = null;
  selectedLabel = null;
  blocks = null;
  clearTimeout(blocksTimer);
  blocksFailures = 0;
  tableKey = "";
  document.querySelector("#pools tbody").replaceChildren();
  $("map-pool").dataset.key = "";
  for (const box of document.querySelectorAll(".chart")) box.remove();
  $("oom").replaceChildren();
  $("advice").replaceChildren();
}

// ---- pools table ----

const setText = (node, text) => {
  if (node.textContent !== text) node.textContent = text;
};
const setAttr = (node, k, v) => {
  if (node.getAttribute(k) !== v) node.setAttribute(k, v);
};

const CELLS = ["allocated", "reserved", "limit", "free", "largest_free", "from_device", "from_cache", "ext_frag", "overhead"];
let tableKey = ""; // the rows drawn: their pools' ids and liveness

// The rows are made again only when the pools listed change; otherwise
// their cells are updated in place (a selection and a tooltip stay).
function renderTable(st) {
  const tbody = document.querySelector("#pools tbody");
  const key = st.pools.map((p) => p.id + (p.live ? "" : "-")).join(",");
  if (key !== tableKey) {
    tbody.replaceChildren(
      ...st.pools.map((p) => {
        const tr = el("tr", { "data-pool-id": String(p.id) });
        if (!p.live) tr.className = "gone";
        tr.append(el("td", {}, bdi(""), ""), el("td"), el("td"));
        if (p.live) for (const k of CELLS) tr.append(el("td", { class: "num", "data-k": k }));
        else tr.append(el("td", { colspan: "9" }, "destroyed; its history stays while in the window"));
        tr.addEventListener("click", () => {
          if (tr.classList.contains("gone")) return;
          want = null; // the user's choice: no label followed any more
          restartWant = null;
          selectPool(Number(tr.dataset.poolId));
        });
        return tr;
      })
    );
    tableKey = key;
  }
  st.pools.forEach((p, i) => {
    const tr = tbody.rows[i];
    setAttr(tr, "data-pool", p.label);
    tr.classList.toggle("selected", p.id === selectedPool);
    const name = tr.cells[0];
    setText(name.firstChild, p.label);
    setText(name.lastChild, p.live ? "" : " (gone)");
    setText(tr.cells[1], String(p.device));
    setText(tr.cells[2], p.backend + " / " + p.strategy);
    if (!p.live) return;
    const values = {
      allocated: [p.allocated, fmtBytes],
      reserved: [p.reserved, fmtBytes],
      limit: [p.limit, fmtBytes],
      free: [p.reserved - p.allocated, fmtBytes],
      largest_free: [p.largest_free, fmtBytes],
      from_device: [p.from_device, String],
      from_cache: [p.from_cache, String],
      ext_frag: [extFrag(p), fmtRatio],
      overhead: [overhead(p), fmtRatio],
    };
    CELLS.forEach((k, j) => {
      const td = tr.cells[3 + j];
      const [v, f] = values[k];
      setAttr(td, "data-v", String(v));
      setText(td, f(v));
      let title = null;
      if (k === "ext_frag") title = "1 − " + p.largest_free + " / (" + p.reserved + " − " + p.allocated + ")";
      if (k === "overhead") title = "1 − " + p.allocated + " / " + p.reserved;
      if (k === "limit") title = v === null ? "no memory_fraction cap" : "memory_fraction's cap on reserved";
      if (title !== null) setAttr(td, "title", title);
    });
  });
}

// Whether live pool q is the one {label, device} names (either may be null: any).
const fits = (q, w) => (w.label === null || q.label === w.label) && (w.device === null || q.device === w.device);

function renderState(st) {
  setText($("host"), bidiVisible(st.hostname) + " · pid " + st.pid + " · v" + st.version);
  $("link-torch").hidden = !st.links.torch;
  $("link-oom").hidden = !st.links.oom;
  $("link-advice").hidden = !st.links.advice;
  $("no-pools").hidden = st.pools.length > 0;
  const live = st.pools.filter((p) => p.live);
  if (restartWant) {
    const p = live.find((q) => fits(q, restartWant));
    restartWant = null;
    if (p) selectPool(p.id);
  }
  const shown = () => st.pools.find((q) => q.id === selectedPool);
  if (want) {
    // The label followed: whichever live pool has it now.
    const p = live.find((q) => fits(q, want));
    if (p) selectPool(p.id);
    // None: the pool shown stays while it is listed as gone (the map says so), not
    // once it has another label or left the list.
    else if (selectedPool !== null && (!shown() || shown().live)) selectPool(null);
  } else if (selectedPool !== null && !shown()) {
    selectPool(null); // gone from the list too (its samples left the window)
  }
  if (selectedPool === null && live.length && !want) selectPool(live[0].id);
  const sel = shown();
  selectedLabel = sel ? { label: sel.label, device: sel.device } : null;
  renderTable(st);
  // The map's pool list: live pools, and a placeholder while none is chosen
  // (or the one chosen is gone), so that choosing any pool is a change.
  const where = want && want.device !== null ? " on device " + want.device : "";
  let placeholder = null;
  if (sel && !sel.live) placeholder = iso(sel.label) + " (device " + sel.device + "): gone";
  else if (!sel && want && want.label !== null) placeholder = "waiting for pool " + iso(want.label) + where + "…";
  else if (!sel && want) placeholder = "waiting for a pool" + where + "…";
  else if (!sel) placeholder = "no live pool";
  renderPoolSelect(live, placeholder);
  // With a pool chosen, pollBlocks draws the map; without, the map says why.
  if (!sel) {
    if (want && want.label === null) mapNote("waiting for a pool on device " + want.device + ": none is live yet.");
    else if (want && want.device !== null)
      mapNote("waiting for pool ", want.label, " on device " + want.device + ": no live pool has this label there yet.");
    else if (want) mapNote("waiting for pool ", want.label, ": no live pool has this label yet.");
    else mapNote("No live pool in this process: nothing to map.");
  }
  renderCharts(st);
  renderOomAdvice(st);
}

function renderPoolSelect(live, placeholder) {
  const sel = $("map-pool");
  const key = JSON.stringify([live.map((p) => [p.id, p.label, p.device]), placeholder]);
  if (sel.dataset.key !== key) {
    const options = live.map((p) => el("option", { value: String(p.id) }, iso(p.label) + " (device " + p.device + ")"));
    if (placeholder !== null) options.unshift(el("option", { value: "", disabled: "", class: "placeholder" }, placeholder));
    sel.replaceChildren(...options);
    sel.dataset.key = key;
  }
  if (placeholder !== null) sel.options[0].selected = true;
  else sel.value = String(selectedPool);
}

// ---- charts ----

// title: strings and nodes. A chart is 420 px wide, less where the page is
// narrower (its box adds 10 px).
function chartCanvas(key, title) {
  let box = document.querySelector('.chart[data-key="' + key + '"]');
  if (!box) {
    box = el("div", { class: "chart", "data-key": key });
    box.append(el("h3"), el("canvas", { width: "420", height: "120" }));
    $("charts").append(box);
  }
  box.querySelector("h3").replaceChildren(...title);
  box.dataset.seen = "1";
  const cv = box.querySelector("canvas");
  const w = Math.max(120, Math.min(420, $("charts").clientWidth - 10));
  if (cv.width !== w) cv.width = w;
  return cv;
}

// x runs from x0Ms to nowMs (the window, or less while the process is younger).
// Lines hold their last value up to now, unless `ended` (a destroyed pool's
// end at its last sample).
function drawLines(cv, t, lines, bars, x0Ms, nowMs, ended) {
  const ctx = cv.getContext("2d");
  const W = cv.width;
  const H = cv.height;
  const padL = 56;
  const padB = 14;
  ctx.clearRect(0, 0, W, H);
  let max = 0;
  for (const l of lines) for (const v of l.v) max = Math.max(max, v);
  const span = nowMs - x0Ms;
  const xOf = (ms) => padL + ((ms - x0Ms) / span) * (W - padL - 4);
  const yOf = (v) => H - padB - (v / (max || 1)) * (H - padB - 6);
  ctx.strokeStyle = "#ddd";
  ctx.strokeRect(padL, 2, W - padL - 4, H - padB - 2);
  ctx.fillStyle = "#555";
  ctx.font = "10px sans-serif";
  ctx.textAlign = "right";
  if (max) ctx.fillText(fmtBytes(max), padL - 4, 10); // all zero: only the 0 at the foot
  ctx.fillText("0", padL - 4, H - padB);
  ctx.textAlign = "left";
  const s = span / 1000;
  ctx.fillText("−" + (s >= 120 ? Math.round(s / 60) + " min" : Math.round(s) + " s"), padL, H - 2);
  ctx.textAlign = "right";
  ctx.fillText("now", W - 4, H - 2);
  if (bars) {
    let bmax = 1;
    for (const b of bars.v) bmax = Math.max(bmax, b);
    ctx.fillStyle = bars.color;
    for (let i = 0; i < t.length; i++) {
      if (!bars.v[i]) continue;
      const h = Math.max(2, (bars.v[i] / bmax) * 24);
      ctx.fillRect(xOf(t[i]) - 1, H - padB - h, 2, h);
    }
  }
  for (const l of lines) {
    ctx.strokeStyle = l.color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (let i = 0; i < t.length; i++) {
      // Steps: a value holds until the next sample.
      const x = xOf(t[i]);
      const y = yOf(l.v[i]);
      if (i === 0) ctx.moveTo(x, y);
      else {
        ctx.lineTo(x, yOf(l.v[i - 1]));
        ctx.lineTo(x, y);
      }
    }
    if (t.length && !ended) ctx.lineTo(xOf(nowMs), yOf(l.v[t.length - 1]));
    ctx.stroke();
  }
  cv.dataset.endX = t.length ? String(ended ? xOf(t[t.length - 1]) : xOf(nowMs)) : "";
}

function renderCharts(st) {
  for (const box of document.querySelectorAll(".chart")) box.dataset.seen = "";
  // The window, shortened to the oldest sample (at least 10 s).
  let x0 = st.now_ms - 10000;
  const starts = st.pools.map((p) => p.series.t[0]).concat(st.cupti.devices.map((d) => d.t[0]));
  for (const t0 of starts) if (t0 !== undefined) x0 = Math.min(x0, t0);
  x0 = Math.max(x0, st.now_ms - st.window_s * 1000);
  for (const p of st.pools) {
    const s = p.series;
    const free = s.reserved.map((r, i) => r - s.allocated[i]);
    // Allocations from the device per point: the first counts from the value
    // before it (state.json's series.before), so none in the window is missed.
    const before = s.before ? s.before.from_device : s.from_device[0];
    const dev = s.from_device.map((v, i) => v - (i ? s.from_device[i - 1] : before));
    const n = dev.reduce((a, b) => a + b, 0);
    const title = [bdi(p.label), " · device " + p.device + (p.live ? "" : " (gone)") + " · " + n + " from device in window"];
    const cv = chartCanvas("pool-" + p.id, title);
    cv.parentElement.dataset.fromDevice = String(n);
    drawLines(
      cv,
      s.t,
      [
        { v: s.reserved, color: "#20304a" },
        { v: s.allocated, color: "#3b6fd4" },
        { v: free, color: "#4daf4a" },
      ],
      { v: dev, color: "#d62728" },
      x0,
      st.now_ms,
      !p.live
    );
  }
  const c = st.cupti;
  for (const d of c.devices) {
    const cv = chartCanvas("cupti-" + d.device, ["CUPTI · device " + d.device + ": all CUDA memory"]);
    drawLines(cv, d.t, [{ v: d.pool, color: "#3b6fd4" }, { v: d.other, color: "#9467bd" }], null, x0, st.now_ms);
  }
  $("cupti-note").textContent = c.up
    ? "CUPTI is recording: purple is CUDA memory outside every gpupool pool, blue inside them."
    : "CUPTI is not recording (" + bidiVisible(c.reason) + "): no view of other CUDA memory.";
  for (const box of document.querySelectorAll(".chart")) if (!box.dataset.seen) box.remove();
}

// ---- OOM reports and advice (only where the agent has those endpoints) ----

const OOM_SHOWN = 3; // the last reports shown as cards
let oomFetchedAt = 0;
const oomDetails = new Map(); // id -> /oom/<id> (a report never changes)

async function renderOomAdvice(st) {
  const any = st.links.oom || st.links.advice;
  $("oom-section").hidden = !any;
  if (!any || Date.now() - oomFetchedAt < 5000) return;
  oomFetchedAt = Date.now();
  const ep = epoch; // an agent restarted meanwhile: what was fetched is the old one's
  try {
    if (st.links.oom) await renderOoms(ep);
    else $("oom").replaceChildren();
    if (ep !== epoch) return;
    if (st.links.advice) await renderAdvice(ep);
    else $("advice").replaceChildren();
  } catch (e) {
    // A document of a shape this page does not know: the links above still lead to it.
    if (ep === epoch)
      $("oom").replaceChildren(el("p", { class: "note" }, "could not show /oom or /advice here: " + bidiVisible(e.message)));
  }
}

// Why a request for a document failed, in a note.
const notAnswered = (what, e) => what + " did not answer: " + bidiVisible(e instanceof HttpError || e instanceof NoAnswer ? failureText(e)[0] : e.message);

async function renderOoms(ep) {
  const box = $("oom");
  let list;
  try {
    list = await getJSON("/oom");
  } catch (e) {
    if (ep === epoch) box.replaceChildren(el("p", { class: "note" }, notAnswered("/oom", e)));
    return;
  }
  if (ep !== epoch) return;
  if (!Array.isArray(list)) list = [];
  list = list.filter((r) => r && typeof r === "object" && typeof r.id === "number");
  const h = el("h3", {}, "Out-of-memory reports ");
  h.append(el("a", { href: "/oom" }, "/oom"));
  const cards = [];
  for (const r of list.slice(-OOM_SHOWN).reverse()) {
    if (!oomDetails.has(r.id)) {
      try {
        const detail = await getJSON("/oom/" + r.id);
        if (ep !== epoch) return;
        oomDetails.set(r.id, detail);
      } catch (e) {
        // Evicted meanwhile: the summary still makes a card.
      }
    }
    if (ep !== epoch) return;
    cards.push(oomCard(r, oomDetails.get(r.id)));
  }
  for (const id of oomDetails.keys()) if (!list.some((r) => r.id === id)) oomDetails.delete(id);
  const note = el(
    "p",
    { class: "note" },
    !list.length ? "No OOM so far." : list.length === 1 ? "1 report kept." : list.length + " reports kept; the last " + cards.length + ", newest first."
  );
  box.replaceChildren(h, note, ...cards);
}

const ANSWER = { yes: "yes", no: "no", maybe: "maybe", not_applicable: "n/a" };

// One report: its summary (/oom) and, when fetched, its remedies (/oom/<id>).
function oomCard(r, detail) {
  const card = el("div", { class: "oom-card", "data-oom-id": String(r.id) });
  const when = new Date(Number(r.time_unix_ns) / 1e6);
  const head = el("div", { class: "oom-head" });
  head.append(
    el("b", {}, "OOM #" + r.id),
    el("span", { title: bidiVisible(r.time) }, when.toLocaleString()),
    el("span", {}, "pool ", bdi(r.pool), " · device " + r.device),
    el("span", {}, "request " + fmtBytes(r.size)),
    el("span", {}, "reserved " + fmtBytes(r.reserved_bytes) + " · allocated " + fmtBytes(r.allocated_bytes))
  );
  const url = typeof r.url === "string" ? r.url : "/oom/" + r.id;
  const links = el("span", { class: "oom-links" });
  links.append(
    el("a", { href: url, class: "oom-json" }, "report (JSON)"),
    el("a", { href: url + "?format=torch", download: "gpupool-oom-" + r.id + ".pickle", class: "oom-torch" }, "torch pickle (memory_viz)")
  );
  head.append(links);
  card.append(head);
  // The message's explanation; its remedies are listed below from the report.
  // It names the pool: a bidi control of the name is shown, not obeyed.
  const msg = bidiVisible(r.message || "");
  const cut = msg.search(/ (Remedies:|The request is larger than the device|Report: \/oom)/);
  card.append(el("p", { class: "oom-msg" }, cut > 0 ? msg.slice(0, cut) : msg));
  const ul = el("ul", { class: "remedies" });
  for (const [answer, text] of remedies(r, detail)) {
    const li = el("li");
    li.append(el("span", { class: "answer a-" + answer }, ANSWER[answer] || answer), text);
    ul.append(li);
  }
  if (ul.children.length) card.append(ul);
  const full = el("details");
  full.append(el("summary", {}, "the whole message"), el("p", { class: "oom-full" }, msg));
  card.append(full);
  return card;
}

// [answer, text] per remedy of the report (docs/oom.md), [] without details.
function remedies(r, detail) {
  const x = detail && detail.explanation;
  const out = [];
  if (!x || typeof x !== "object") return out;
  if (x.larger_than_device) return [["no", "the request is larger than the device: no setting makes it fit"]];
  const rm = x.remedies || {};
  const ec = rm.empty_cache;
  if (ec) out.push([ec.enough, "empty_cache() would free " + fmtBytes(ec.frees_bytes) + (ec.enough === "yes" ? ": enough" : ec.enough === "no" ? ": not enough" : "")]);
  const xs = rm.expandable_segments;
  if (xs) {
    const verb = { yes: "would have served it", no: "would not have served it", maybe: "might have served it" }[xs.would_serve];
    out.push([
      xs.would_serve,
      verb
        ? "expandable_segments:True " + verb + " (the pool would hold " + fmtBytes(xs.pool_bytes_low) + " to " + fmtBytes(xs.pool_bytes_high) + " of " + fmtBytes(xs.room_bytes) + " usable)"
        : "expandable_segments: already on, or not available on this backend",
    ]);
  }
  const ms = rm.max_split_size_mb;
  if (ms)
    out.push(
      ms.unstranded_bytes
        ? ["yes", "max_split_size_mb:" + ms.value + " leaves at most " + fmtBytes(ms.at_most_in_splits_bytes) + " in splits"]
        : ["no", "max_split_size_mb:" + ms.value + " would not help (the free bytes in splits lie in smaller segments)"]
    );
  if (rm.free_outside_pool_bytes > 0) out.push(["maybe", "it fits if " + fmtBytes(rm.free_outside_pool_bytes) + " held outside this pool is freed"]);
  return out;
}

// /advice is another module's document: its shape is not fixed here. A
// recommendation line (a GPUPOOL_CONF string, or a key that names one) is
// shown to copy; otherwise the top-level scalars as a table. Never throws.
const ADVICE_KEYS = /^(recommended|recommendation|gpupool_conf|pytorch_conf|pytorch_cuda_alloc_conf|conf)$/i;

// The agent's own /advice: {pools: [{pool, device, has_recommendation,
// recommended: {gpupool_conf, saved_bytes}, ...}]}. One line per pool, named;
// a pool without a recommendation, or whose recommendation is the defaults
// (an empty GPUPOOL_CONF), gets a line of text and nothing to copy.
function advicePools(data) {
  if (!data || !Array.isArray(data.pools) || !data.pools.length) return null;
  if (!data.pools.every((p) => p && typeof p === "object" && typeof p.pool === "string")) return null;
  return data.pools.slice(0, 64).map((p) => {
    const label = [bdi(p.pool), " (device " + p.device + ")"];
    const rec = p.recommended && typeof p.recommended === "object" ? p.recommended : null;
    if (p.error) return { label, note: "no advice: " + bidiVisible(p.error) };
    if (p.has_recommendation === false || !rec) return { label, note: "no recommendation" };
    const saved = rec.saved_bytes > 0 ? "saves " + fmtBytes(rec.saved_bytes) + " of peak reserved" : "";
    if (typeof rec.gpupool_conf !== "string" || rec.gpupool_conf === "")
      return { label, note: "the defaults (an empty GPUPOOL_CONF)" + (saved ? ": " + saved : "") };
    return { label, text: rec.gpupool_conf, note: saved };
  });
}

function adviceFind(data) {
  const pools = advicePools(data);
  if (pools) return pools;
  const found = [];
  const seen = new Set();
  const walk = (v, path, depth) => {
    if (found.length >= 4 || depth > 5 || v === null) return;
    if (typeof v === "string") {
      const key = path.length ? path[path.length - 1] : "";
      if ((ADVICE_KEYS.test(key) || v.includes("GPUPOOL_CONF")) && v !== "" && !seen.has(v)) {
        seen.add(v);
        found.push({ label: path.join("."), text: v });
      }
    } else if (Array.isArray(v)) v.slice(0, 50).forEach((x, i) => walk(x, path.concat(String(i)), depth + 1));
    else if (typeof v === "object") {
      // the advisor's "recommended" before its "current" and "candidates"
      // has_recommendation false: "recommended" is the current configuration's
      // entry, nothing to copy
      const keys = Object.keys(v)
        .slice(0, 100)
        .filter((k) => !(v.has_recommendation === false && k === "recommended"));
      keys.sort((x, y) => /^recommend/i.test(y) - /^recommend/i.test(x));
      for (const k of keys) walk(v[k], path.concat(k), depth + 1);
    }
  };
  walk(data, [], 0);
  return found;
}

function adviceView(data) {
  const box = el("div", { class: "advice-body" });
  try {
    for (const r of adviceFind(data)) {
      const row = el("div", { class: "advice-rec" });
      if (r.text === undefined) {
        row.append(el("span", { class: "advice-key" }, ...[].concat(r.label)), el("span", { class: "advice-note" }, bidiVisible(r.note)));
        box.append(row);
        continue;
      }
      const code = el("code", {}, bidiVisible(r.text));
      const copy = el("button", { type: "button", title: "copy to the clipboard" }, "copy");
      copy.addEventListener("click", () => {
        const sel = () => window.getSelection().selectAllChildren(code);
        if (navigator.clipboard && window.isSecureContext)
          navigator.clipboard.writeText(r.text).then(() => (copy.textContent = "copied"), sel);
        else sel();
      });
      row.append(el("span", { class: "advice-key" }, ...[].concat(typeof r.label === "string" ? bidiVisible(r.label) : r.label || "recommendation")), code, copy);
      if (r.note) row.append(el("span", { class: "advice-note" }, bidiVisible(r.note)));
      box.append(row);
    }
    const top = Array.isArray(data) ? data[data.length - 1] : data;
    const table = el("table", { class: "advice-fields" });
    if (top && typeof top === "object" && !Array.isArray(top))
      for (const k of Object.keys(top).slice(0, 40)) {
        const v = top[k];
        if (v === null || typeof v === "object") continue;
        const text = k === "computed_at" && typeof v === "number" ? fmtWhen(v, top.age_s) : typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : String(v);
        const tr = el("tr");
        tr.append(el("th", {}, bidiVisible(k)), el("td", {}, bidiVisible(text.length > 300 ? text.slice(0, 300) + "…" : text)));
        table.append(tr);
      }
    else if (top !== null && typeof top !== "object" && top !== undefined) {
      const tr = el("tr");
      tr.append(el("th", {}, "value"), el("td", {}, bidiVisible(String(top))));
      table.append(tr);
    }
    if (table.children.length) box.append(el("div", { class: "table-wrap" }, table));
    if (!box.children.length) box.append(el("p", { class: "note" }, "nothing to show in brief: open /advice"));
  } catch (e) {
    box.replaceChildren(el("p", { class: "note" }, "/advice has a shape this page does not know: open it"));
  }
  return box;
}

async function renderAdvice(ep) {
  const box = $("advice");
  const h = el("h3", {}, "Advice ");
  h.append(el("a", { href: "/advice" }, "/advice"));
  let doc;
  try {
    doc = await getJSON("/advice", ADVICE_TIMEOUT_MS);
  } catch (e) {
    if (ep === epoch) box.replaceChildren(h, el("p", { class: "note" }, notAnswered("/advice", e)));
    return;
  }
  if (ep === epoch) box.replaceChildren(h, adviceView(doc));
}

// ---- block map ----

let blocks = null; // the last /ui/blocks.json
let blocksBusy = false;
let blocksTimer = null;
let blocksFailures = 0; // in a row: the blocks poll backs off as the state poll does

// id: a pool's, or null for none (the map then says why, renderState).
function selectPool(id) {
  if (selectedPool === id) return;
  selectedPool = id;
  const p = ui.lastState && ui.lastState.pools.find((q) => q.id === id);
  selectedLabel = p ? { label: p.label, device: p.device } : null;
  blocks = null;
  for (const tr of document.querySelectorAll("#pools tbody tr"))
    tr.classList.toggle("selected", tr.dataset.poolId === String(id));
  if (id !== null) $("map-pool").value = String(id);
  pollBlocks();
}

async function pollBlocks() {
  clearTimeout(blocksTimer);
  let delay = BLOCKS_POLL_MS;
  if (selectedPool !== null && !blocksBusy) {
    blocksBusy = true;
    const id = selectedPool;
    const ep = epoch;
    let got = null;
    try {
      got = await getJSON("/ui/blocks.json?pool=" + id);
      blocksFailures = 0;
    } catch (e) {
      // The state poll says why; the last map stays.
      blocksFailures++;
      delay = backoff(blocksFailures, BLOCKS_POLL_MS, e);
    }
    blocksBusy = false;
    if (id !== selectedPool || ep !== epoch) return pollBlocks(); // the selection changed meanwhile
    if (got) {
      blocks = got;
      drawMap();
    }
  }
  blocksTimer = setTimeout(pollBlocks, delay);
}

// Segment rows in the order and subset the controls ask for.
function mapRows(pool) {
  const filter = $("map-filter").value;
  const rows = [];
  for (const s of pool.segments) {
    const b = s.blocks;
    let free = 0;
    let nfree = 0;
    for (let i = 0; i < b.length; i += 6)
      if (b[i + 3] === 0) {
        free += b[i + 1];
        nfree++;
      }
    if (filter === "small" && s.large) continue;
    if (filter === "large" && !s.large) continue;
    if (filter === "free" && !nfree) continue;
    rows.push({ seg: s, free: free, nfree: nfree, addr: BigInt(s.address) });
  }
  const sort = $("map-sort").value;
  const by = {
    address: (a, b) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0),
    size: (a, b) => b.seg.size - a.seg.size,
    free: (a, b) => b.free - a.free,
    frag: (a, b) => b.nfree - a.nfree,
  }[sort];
  rows.sort(by);
  return rows;
}

// Bytes of each category per pixel column of one bar: blocks narrower than a
// pixel are summed, never dropped; a column is then drawn as a stack of its
// categories' shares. Categories are the states (0 free, 1 allocated, 2
// pending, 3 unmapped) and, colouring by tag, 4 + the tag of an allocated
// block.
function columns(seg, width, bpp, ncat, byTag) {
  const cols = new Float64Array(width * ncat);
  const add = (cat, from, to) => {
    let c = Math.floor(from / bpp);
    while (from < to && c < width) {
      const end = Math.min(to, (c + 1) * bpp);
      cols[c * ncat + cat] += end - from;
      from = end;
      c++;
    }
  };
  const b = seg.blocks;
  const bt = byTag ? seg.block_tags : null;
  for (let i = 0; i < b.length; i += 6) {
    const off = b[i];
    const size = b[i + 1];
    const state = b[i + 3];
    const unmapped = b[i + 5];
    if (unmapped > 0) {
      // Unmapped pages lie inside free blocks (the edges are shared pages,
      // mapped): drawn as one span in the middle of the block.
      const lead = Math.floor((size - unmapped) / 2);
      add(0, off, off + lead);
      add(3, off + lead, off + lead + unmapped);
      add(0, off + lead + unmapped, off + size);
    } else {
      const t = bt && state === 1 ? bt[i / 6] : -1;
      add(t >= 0 && 4 + t < ncat ? 4 + t : state, off, off + size);
    }
  }
  return cols;
}

// The tags of a pool's blocks: [{name, allocated, color}] (blocks.json's table).
function poolTags(pool) {
  return (Array.isArray(pool.tags) ? pool.tags : []).map((t, i) => ({
    name: String(t.name),
    allocated: Number(t.allocated) || 0,
    color: TAG_COLORS[i % TAG_COLORS.length],
  }));
}

// The legend of the tag colours, with the allocated bytes of each tag in
// this pool (the tags holding nothing here are left out) and the untagged rest.
function renderTagLegend(pool, byTag) {
  const box = $("tag-legend");
  $("legend-allocated").hidden = byTag;
  box.hidden = !byTag;
  if (!byTag) return;
  const tags = poolTags(pool);
  const items = [];
  let tagged = 0;
  tags.forEach((t) => {
    tagged += t.allocated;
    if (!t.allocated) return;
    const item = el("span", { class: "tag-item", "data-tag": t.name, "data-bytes": String(t.allocated) });
    const key = el("span", { class: "key" });
    key.style.background = t.color; // CSSOM, not an inline style attribute: the CSP allows it
    item.append(key, bdi(t.name), " " + fmtBytes(t.allocated));
    items.push(item);
  });
  const rest = Math.max(0, (pool.allocated || 0) - tagged);
  const untagged = el("span", { class: "tag-item", "data-tag": "", "data-bytes": String(rest) });
  const key = el("span", { class: "key" });
  key.style.background = UNTAGGED_COLOR;
  untagged.append(key, "untagged " + fmtBytes(rest));
  items.push(untagged);
  box.replaceChildren(el("span", { class: "tag-title" }, "allocated by tag:"), ...items);
  if (!tags.length) box.append(el("span", { class: "note" }, " (no block of this process has a tag: gpupool_tag_push, gpupool.tag)"));
}

function drawMap() {
  const cv = $("map");
  const info = $("map-info");
  const pool = blocks && blocks.pool;
  if (!blocks) return;
  ui.largest = null;
  if (!pool) {
    if (want && want.label !== null)
      return mapNote("pool ", want.label, " is gone (destroyed): waiting for a live pool with this label.");
    return mapNote("This pool is gone (destroyed).");
  }
  const t0 = performance.now();
  const all = mapRows(pool);
  // Bars thin down to ROW_H_MIN to keep every segment; beyond that the
  // canvas would exceed what a browser draws, so the rest is left out (and
  // said so): sort or filter to see them.
  const rowH = Math.max(ROW_H_MIN, Math.min(ROW_H, Math.floor(CANVAS_MAX_H / Math.max(1, all.length)) - ROW_GAP));
  const rows = all.slice(0, Math.floor(CANVAS_MAX_H / (rowH + ROW_GAP)));
  ui.rowH = rowH;
  const total = pool.segments.reduce((a, s) => a + s.blocks.length / 6, 0);
  // The box's width (the box scrolls below a bar of 100 px).
  const width = Math.max(LABEL_W + 108, $("map-wrap").clientWidth);
  cv.width = width;
  cv.height = Math.max(20, rows.length * (rowH + ROW_GAP) + 4);
  const ctx = cv.getContext("2d");
  ctx.clearRect(0, 0, cv.width, cv.height);
  if (!pool.segments.length) {
    info.replaceChildren(bdi(pool.label), ": no segments (an empty pool).");
    ui.layout = [];
    ui.mapBlocks = 0;
    markDrawn();
    return;
  }
  const maxSize = Math.max(...pool.segments.map((s) => s.size));
  const barW = width - LABEL_W - 8;
  const bpp = maxSize / barW; // one scale for every bar: widths are to scale
  const hl = $("map-highlight").value;
  const byTag = $("map-colour").value === "tag";
  const tags = poolTags(pool);
  renderTagLegend(pool, byTag);
  // Each category's pixel, greyed when a state is highlighted and it is another.
  const ncat = byTag ? 4 + tags.length : 4;
  const catPx = [];
  for (let cat = 0; cat < ncat; cat++) {
    const state = cat >= 4 ? 1 : cat;
    const color = cat >= 4 ? pixel(tags[cat - 4].color) : byTag && cat === 1 ? pixel(UNTAGGED_COLOR) : PIXELS[cat];
    catPx.push(hl !== "" && String(state) !== hl ? PIXEL_DIM : color);
  }
  const stack = byTag ? tags.map((t, i) => 4 + i).concat(STACK) : STACK;
  const top = stack.length - 1;
  // The pool's largest free block, to mark: the block blocks.json names
  // (largest over mapped pages in expandable segments, as the pool counts
  // it), wherever the rows drawn leave it.
  let largest = null;
  let largestNote = "";
  const at = pool.largest_free_block;
  const atSeg = at ? pool.segments[at.segment] : null;
  if (atSeg) {
    const r = rows.find((x) => x.seg === atSeg);
    if (r) largest = { row: r, off: atSeg.blocks[at.block * 6], size: atSeg.blocks[at.block * 6 + 1] };
    else if (all.some((x) => x.seg === atSeg)) largestNote = ", in a segment past those drawn";
    else largestNote = ", in a segment the filter hides";
  }
  ui.layout = [];
  ctx.font = "10px sans-serif";
  ctx.textBaseline = "middle";
  rows.forEach((r, k) => {
    const s = r.seg;
    const y = 2 + k * (rowH + ROW_GAP);
    const w = Math.max(1, Math.round(s.size / bpp));
    r.y = y;
    r.w = w;
    ctx.fillStyle = "#444";
    ctx.textAlign = "right";
    if (rowH >= 8) ctx.fillText((s.large ? "L " : "S ") + fmtBytes(s.size), LABEL_W - 6, y + rowH / 2);
    // Pixels written directly: a fillRect per column and state is too slow
    // for 10^5 blocks.
    const cols = columns(s, w, s.size / w, ncat, byTag);
    const img = ctx.createImageData(w, rowH);
    const px = new Uint32Array(img.data.buffer);
    for (let c = 0; c < w; c++) {
      const base = c * ncat;
      let sum = 0;
      for (let j = 0; j < ncat; j++) sum += cols[base + j];
      if (!sum) continue;
      let k = 0;
      let upto = 0;
      for (let j = 0; j < rowH; j++) {
        const at = ((j + 0.5) / rowH) * sum; // which state's share this pixel row is in
        while (k < top && (upto + cols[base + stack[k]] <= at || !cols[base + stack[k]])) upto += cols[base + stack[k++]];
        px[j * w + c] = catPx[stack[k]];
      }
    }
    ctx.putImageData(img, LABEL_W, y);
    // Block boundaries where blocks are wide enough to tell apart.
    const b = s.blocks;
    const scale = w / s.size;
    if (b.length / 6 < w / 4) {
      ctx.fillStyle = "rgba(255,255,255,0.9)";
      for (let i = 6; i < b.length; i += 6) ctx.fillRect(LABEL_W + Math.round(b[i] * scale), y, 1, rowH);
    }
    ctx.strokeStyle = "#777";
    ctx.lineWidth = 1;
    ctx.strokeRect(LABEL_W - 0.5, y - 0.5, w + 1, rowH + 1);
    ui.layout.push({ y: y, h: rowH, x: LABEL_W, width: w, size: s.size, address: s.address });
  });
  if (largest) {
    const r = largest.row;
    const scale = r.w / r.seg.size;
    const x = LABEL_W + largest.off * scale;
    const w = Math.max(3, largest.size * scale);
    ctx.strokeStyle = "#d62728";
    ctx.lineWidth = 2;
    ctx.strokeRect(x + 1, r.y + 1, w - 2, rowH - 2);
    ui.largest = { x: x, y: r.y, w: w, h: rowH, address: r.seg.address, offset: largest.off, size: largest.size };
  }
  ui.rows = rows;
  ui.mapBlocks = total;
  ui.lastDrawMs = performance.now() - t0;
  const frag = extFrag(pool);
  // Which segments are drawn: those the filter keeps, and of those as many as the canvas holds.
  const filter = $("map-filter");
  let shown = "";
  if (all.length < pool.segments.length) shown += " · " + all.length + " shown by the filter (" + filter.selectedOptions[0].textContent + ")";
  if (rows.length < all.length) shown += " · the first " + rows.length + " of them drawn (no room for more: sort or filter to see the others)";
  info.replaceChildren(
    bdi(pool.label),
    ": " + pool.segments.length + " segments, " + total + " blocks" + shown +
    (pool.truncated ? " · segments changed while they were copied: some are missing" : "") +
    " · scale " + fmtBytes(Math.round(bpp)) + " per pixel" +
    " · largest free " + fmtBytes(pool.largest_free) + largestNote +
    " · external fragmentation " + fmtRatio(frag) + " · cache overhead " + fmtRatio(overhead(pool))
  );
  markDrawn();
}

function markDrawn() {
  if (ui.mapDrawnAt === null) ui.mapDrawnAt = performance.now();
  $("map").dataset.drawn = String(Number($("map").dataset.drawn || 0) + 1);
}

// Hover: the block under the pointer (binary search in its segment).
function onHover(ev) {
  const tip = $("tip");
  const rows = ui.rows;
  if (!blocks || !blocks.pool || !rows) return void (tip.hidden = true);
  const rect = $("map").getBoundingClientRect();
  const x = ev.clientX - rect.left;
  const y = ev.clientY - rect.top;
  const k = Math.floor((y - 2) / (ui.rowH + ROW_GAP));
  const r = rows[k];
  if (!r || y - r.y > ui.rowH || x < LABEL_W || x >= LABEL_W + r.w) return void (tip.hidden = true);
  const s = r.seg;
  const off = ((x - LABEL_W) / r.w) * s.size;
  const b = s.blocks;
  // The last block starting at or before a byte offset (blocks tile the segment).
  const blockAt = (at) => {
    let lo = 0;
    let hi = b.length / 6 - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (b[mid * 6] <= at) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const i = blockAt(off) * 6;
  const perPx = s.size / r.w;
  const pxFrom = Math.floor(off / perPx) * perPx;
  const inPx = blockAt(Math.min(s.size - 1, pxFrom + perPx - 1)) - blockAt(pxFrom) + 1;
  const addr = BigInt(s.address) + BigInt(b[i]);
  const lines = [
    "block 0x" + addr.toString(16) + " (segment " + s.address + ", " + (s.large ? "large" : "small") + " pool)",
    "state      " + STATE_NAMES[b[i + 3]],
    "size       " + fmtBytes(b[i + 1]) + " (" + b[i + 1] + " B)",
    "requested  " + (b[i + 3] !== 0 ? fmtBytes(b[i + 2]) + " (" + b[i + 2] + " B)" : "—"), // allocated, pending
    "stream     " + s.stream,
    "age        " + (b[i + 3] === 0 ? "— (free)" : fmtAge(b[i + 4])),
  ];
  if (b[i + 3] !== 0) {
    const t = s.block_tags ? s.block_tags[i / 6] : -1;
    const tag = t >= 0 && blocks.pool.tags && blocks.pool.tags[t] ? blocks.pool.tags[t].name : null;
    lines.push("tag        " + (tag === null ? "— (untagged)" : iso(tag)));
  }
  if (b[i + 5]) lines.push("unmapped   " + fmtBytes(b[i + 5]));
  if (inPx > 1) lines.push(inPx + " blocks share this pixel: its colours are their shares");
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  // Right of and below the pointer where it fits, else left of or above it;
  // never outside the viewport (the CSS caps its size to it).
  const vw = document.documentElement.clientWidth;
  const vh = document.documentElement.clientHeight;
  const w = tip.offsetWidth;
  const h = tip.offsetHeight;
  const left = ev.clientX + 14 + w <= vw ? ev.clientX + 14 : ev.clientX - 14 - w;
  const top = ev.clientY + 14 + h <= vh ? ev.clientY + 14 : ev.clientY - 14 - h;
  tip.style.left = Math.max(0, Math.min(left, vw - w)) + "px";
  tip.style.top = Math.max(0, Math.min(top, vh - h)) + "px";
}

function start() {
  $("window").addEventListener("change", () => {
    if (ui.lastState) pollNow();
  });
  $("map-pool").addEventListener("change", (e) => {
    if (e.target.value === "") return; // the placeholder
    want = null; // the user's choice: no label followed any more
    restartWant = null;
    selectPool(Number(e.target.value));
  });
  for (const id of ["map-sort", "map-filter", "map-highlight", "map-colour"]) $(id).addEventListener("change", drawMap);
  $("map").addEventListener("mousemove", onHover);
  $("map").addEventListener("mouseleave", () => ($("tip").hidden = true));
  window.addEventListener("resize", drawMap);
  pollState();
  pollBlocks();
}

// A window change answers at once, beside the regular poll.
async function pollNow() {
  let st;
  try {
    st = await getJSON("/ui/state.json?window=" + $("window").value);
  } catch (e) {
    setStatus(failureText(e)[0] + " · retrying", failureText(e)[1]);
    return;
  }
  acceptState(st);
}

start();
