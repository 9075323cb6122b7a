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
// pool the block map shows first; either alone narrows the choice (the first live pool that fits).
let wantPoolName = query.get("pool");
let wantDevice = query.has("device") ? Number(query.get("device")) : null;
let wanted = wantPoolName !== null || wantDevice !== null; // until a live pool fits
let failures = 0;
let retryTimer = null; // counts the status' seconds down to the next try

function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = "status" + (cls ? " " + cls : "");
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

// "retrying in N s", N counting down each second to the next try.
function showRetry(delay) {
  const at = Date.now() + delay;
  const tick = () => {
    const left = Math.max(0, Math.ceil((at - Date.now()) / 1000));
    setStatus("agent unreachable · retrying in " + left + " s", "down");
    if (!left) clearInterval(retryTimer);
  };
  clearInterval(retryTimer);
  tick();
  retryTimer = setInterval(tick, 1000);
}

async function pollState() {
  let delay = STATE_POLL_MS;
  try {
    const st = await getJSON("/ui/state.json?window=" + $("window").value);
    failures = 0;
    clearInterval(retryTimer);
    ui.lastState = st;
    renderState(st);
    ui.stateUpdates++;
    setStatus("live · " + new Date(st.now_ms).toLocaleTimeString());
  } catch (e) {
    failures++;
    delay = Math.min(RETRY_MAX_MS, STATE_POLL_MS * 2 ** Math.min(failures, 4));
    showRetry(delay);
  }
  setTimeout(pollState, delay);
}

// ---- pools table ----

function renderState(st) {
  $("host").textContent = st.hostname + " · pid " + st.pid + " · v" + st.version;
  $("link-torch").hidden = !st.links.torch;
  $("link-oom").hidden = !st.links.oom;
  $("link-advice").hidden = !st.links.advice;
  const tbody = document.querySelector("#pools tbody");
  tbody.replaceChildren();
  const live = st.pools.filter((p) => p.live);
  $("no-pools").hidden = st.pools.length > 0;
  for (const p of st.pools) {
    const tr = el("tr", { "data-pool": p.label, "data-pool-id": String(p.id) });
    if (!p.live) tr.className = "gone";
    if (p.id === selectedPool) tr.classList.add("selected");
    const name = el("td");
    name.append(bdi(p.label), p.live ? "" : " (gone)");
    tr.append(name, el("td", {}, String(p.device)));
    tr.append(el("td", {}, p.backend + " / " + p.strategy));
    if (p.live) {
      const cells = [
        ["allocated", p.allocated, fmtBytes],
        ["reserved", p.reserved, fmtBytes],
        ["limit", p.limit, fmtBytes],
        ["free", p.reserved - p.allocated, fmtBytes],
        ["largest_free", p.largest_free, fmtBytes],
        ["from_device", p.from_device, String],
        ["from_cache", p.from_cache, String],
        ["ext_frag", extFrag(p), fmtRatio],
        ["overhead", overhead(p), fmtRatio],
      ];
      for (const [k, v, f] of cells) {
        const td = el("td", { class: "num", "data-k": k, "data-v": String(v) }, f(v));
        if (k === "ext_frag") td.title = "1 − " + p.largest_free + " / (" + p.reserved + " − " + p.allocated + ")";
        if (k === "overhead") td.title = "1 − " + p.allocated + " / " + p.reserved;
        if (k === "limit") td.title = v === null ? "no memory_fraction cap" : "memory_fraction's cap on reserved";
        tr.append(td);
      }
    } else {
      tr.append(el("td", { colspan: "9" }, "destroyed; its history stays while in the window"));
    }
    tr.addEventListener("click", () => {
      if (p.live) selectPool(p.id);
    });
    tbody.append(tr);
  }
  // The map's pool list: live pools only.
  const sel = $("map-pool");
  const ids = live.map((p) => String(p.id)).join(",");
  if (sel.dataset.ids !== ids) {
    sel.replaceChildren(...live.map((p) => el("option", { value: String(p.id) }, iso(p.label) + " (device " + p.device + ")")));
    sel.dataset.ids = ids;
  }
  if (wanted) {
    const p = live.find(
      (q) => (wantPoolName === null || q.label === wantPoolName) && (wantDevice === null || q.device === wantDevice),
    );
    if (p) {
      wanted = false;
      selectPool(p.id);
    }
  }
  // A pool gone from the list too (the agent restarted, or its samples left
  // the window): show another.
  if (selectedPool !== null && !st.pools.some((p) => p.id === selectedPool)) selectedPool = null;
  if (selectedPool === null && live.length && !wanted) selectPool(live[0].id);
  if (selectedPool !== null) sel.value = String(selectedPool);
  else if (wanted && wantPoolName === null) mapNote("waiting for a pool on device " + wantDevice + ": none is live yet.");
  else if (wanted && wantDevice !== null)
    mapNote("waiting for pool ", wantPoolName, " on device " + wantDevice + ": no live pool has this label there yet.");
  else if (wanted) mapNote("waiting for pool ", wantPoolName, ": no live pool has this label yet.");
  else if (!live.length) mapNote("No live pool in this process: nothing to map.");
  renderCharts(st);
  renderOomAdvice(st);
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
    : "CUPTI is not recording (" + c.reason + "): no view of other CUDA memory.";
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
  try {
    if (st.links.oom) await renderOoms();
    else $("oom").replaceChildren();
    if (st.links.advice) await renderAdvice();
    else $("advice").replaceChildren();
  } catch (e) {
    // A document of a shape this page does not know: the links above still lead to it.
    $("oom").replaceChildren(el("p", { class: "note" }, "could not show /oom or /advice here: " + e.message));
  }
}

async function renderOoms() {
  const box = $("oom");
  let list;
  try {
    list = await getJSON("/oom");
  } catch (e) {
    box.replaceChildren(el("p", { class: "note" }, "/oom did not answer: " + e.message));
    return;
  }
  if (!Array.isArray(list)) list = [];
  list = list.filter((r) => r && typeof r === "object" && typeof r.id === "number");
  const h = el("h3", {}, "Out-of-memory reports ");
  h.append(el("a", { href: "/oom" }, "/oom"));
  const cards = [];
  for (const r of list.slice(-OOM_SHOWN).reverse()) {
    if (!oomDetails.has(r.id)) {
      try {
        oomDetails.set(r.id, await getJSON("/oom/" + r.id));
      } catch (e) {
        // Evicted meanwhile: the summary still makes a card.
      }
    }
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
    el("span", { title: r.time }, when.toLocaleString()),
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
  const msg = String(r.message || "");
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
    if (p.error) return { label, note: "no advice: " + p.error };
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
        row.append(el("span", { class: "advice-key" }, ...[].concat(r.label)), el("span", { class: "advice-note" }, r.note));
        box.append(row);
        continue;
      }
      const code = el("code", {}, r.text);
      const copy = el("button", { type: "button", title: "copy to the clipboard" }, "copy");
      copy.addEventListener("click", () => {
        const sel = () => window.getSelection().selectAllChildren(code);
        if (navigator.clipboard && window.isSecureContext)
          navigator.clipboard.writeText(r.text).then(() => (copy.textContent = "copied"), sel);
        else sel();
      });
      row.append(el("span", { class: "advice-key" }, ...[].concat(r.label || "recommendation")), code, copy);
      if (r.note) row.append(el("span", { class: "advice-note" }, r.note));
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
        tr.append(el("th", {}, k), el("td", {}, text.length > 300 ? text.slice(0, 300) + "…" : text));
        table.append(tr);
      }
    else if (top !== null && typeof top !== "object" && top !== undefined) {
      const tr = el("tr");
      tr.append(el("th", {}, "value"), el("td", {}, String(top)));
      table.append(tr);
    }
    if (table.children.length) box.append(el("div", { class: "table-wrap" }, table));
    if (!box.children.length) box.append(el("p", { class: "note" }, "nothing to show in brief: open /advice"));
  } catch (e) {
    box.replaceChildren(el("p", { class: "note" }, "/advice has a shape this page does not know: open it"));
  }
  return box;
}

async function renderAdvice() {
  const box = $("advice");
  const h = el("h3", {}, "Advice ");
  h.append(el("a", { href: "/advice" }, "/advice"));
  try {
    box.replaceChildren(h, adviceView(await getJSON("/advice")));
  } catch (e) {
    box.replaceChildren(h, el("p", { class: "note" }, "/advice did not answer: " + e.message));
  }
}

// ---- block map ----

let blocks = null; // the last /ui/blocks.json
let blocksBusy = false;
let blocksTimer = null;

function selectPool(id) {
  if (selectedPool === id) return;
  selectedPool = id;
  blocks = null;
  for (const tr of document.querySelectorAll("#pools tbody tr"))
    tr.classList.toggle("selected", tr.dataset.poolId === String(id));
  $("map-pool").value = String(id);
  pollBlocks();
}

async function pollBlocks() {
  clearTimeout(blocksTimer);
  if (selectedPool !== null && !blocksBusy) {
    blocksBusy = true;
    const id = selectedPool;
    try {
      const b = await getJSON("/ui/blocks.json?pool=" + id);
      if (id === selectedPool) {
        blocks = b;
        drawMap();
      }
    } catch (e) {
      // The state poll says the agent is unreachable; keep the last map.
    }
    blocksBusy = false;
    if (id !== selectedPool) return pollBlocks(); // the selection changed meanwhile
  }
  blocksTimer = setTimeout(pollBlocks, BLOCKS_POLL_MS);
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
  if (!pool) return mapNote("This pool is gone (destroyed).");
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
  // The largest free block of the pool, to mark.
  let largest = null;
  for (const r of rows) {
    const b = r.seg.blocks;
    for (let i = 0; i < b.length; i += 6)
      if (b[i + 3] === 0 && (!largest || b[i + 1] > largest.size)) largest = { row: r, off: b[i], size: b[i + 1] };
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
  }
  ui.rows = rows;
  ui.mapBlocks = total;
  ui.lastDrawMs = performance.now() - t0;
  const frag = extFrag(pool);
  info.replaceChildren(
    bdi(pool.label),
    ": " + pool.segments.length + " segments, " + total + " blocks" +
    (rows.length < pool.segments.length ? " (" + rows.length + " shown: sort or filter for others)" : "") +
    " · scale " + fmtBytes(Math.round(bpp)) + " per pixel" +
    " · largest free " + fmtBytes(pool.largest_free) +
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
  $("map-pool").addEventListener("change", (e) => selectPool(Number(e.target.value)));
  for (const id of ["map-sort", "map-filter", "map-highlight", "map-colour"]) $(id).addEventListener("change", drawMap);
  $("map").addEventListener("mousemove", onHover);
  $("map").addEventListener("mouseleave", () => ($("tip").hidden = true));
  window.addEventListener("resize", drawMap);
  pollState();
  pollBlocks();
}

// A window change answers at once, beside the regular poll.
async function pollNow() {
  try {
    const st = await getJSON("/ui/state.json?window=" + $("window").value);
    ui.lastState = st;
    renderState(st);
  } catch (e) {
    setStatus("agent unreachable · retrying", "down");
  }
}

start();
