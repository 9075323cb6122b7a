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
});

function fmtBytes(v) {
  if (v === undefined || v === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
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

function extFrag(p) {
  const free = p.reserved - p.allocated;
  return free > 0 ? 1 - p.largest_free / free : null;
}

function overhead(p) {
  return p.reserved > 0 ? 1 - p.allocated / p.reserved : null;
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---- polling, with "agent unreachable" and retries ----

let selectedPool = null; // id
let wantPoolName = new URLSearchParams(location.search).get("pool");
let failures = 0;

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

async function pollState() {
  let delay = STATE_POLL_MS;
  try {
    const st = await getJSON("/ui/state.json?window=" + $("window").value);
    failures = 0;
    ui.lastState = st;
    renderState(st);
    ui.stateUpdates++;
    setStatus("live · " + new Date(st.now_ms).toLocaleTimeString());
  } catch (e) {
    failures++;
    delay = Math.min(RETRY_MAX_MS, STATE_POLL_MS * 2 ** Math.min(failures, 4));
    setStatus("agent unreachable · retrying in " + Math.round(delay / 1000) + " s", "down");
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
    const tr = el("tr", { "data-pool": p.name, "data-pool-id": String(p.id) });
    if (!p.live) tr.className = "gone";
    if (p.id === selectedPool) tr.classList.add("selected");
    tr.append(el("td", {}, p.name + (p.live ? "" : " (gone)")), el("td", {}, String(p.device)));
    tr.append(el("td", {}, p.backend + " / " + p.strategy));
    if (p.live) {
      const cells = [
        ["allocated", p.allocated, fmtBytes],
        ["reserved", p.reserved, fmtBytes],
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
        tr.append(td);
      }
    } else {
      tr.append(el("td", { colspan: "8" }, "destroyed; its history stays while in the window"));
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
    sel.replaceChildren(...live.map((p) => el("option", { value: String(p.id) }, p.name + " (device " + p.device + ")")));
    sel.dataset.ids = ids;
  }
  if (wantPoolName !== null) {
    const p = live.find((q) => q.name === wantPoolName);
    if (p) {
      wantPoolName = null;
      selectPool(p.id);
    }
  }
  // A pool gone from the list too (the agent restarted, or its samples left
  // the window): show another.
  if (selectedPool !== null && !st.pools.some((p) => p.id === selectedPool)) selectedPool = null;
  if (selectedPool === null && live.length && wantPoolName === null) selectPool(live[0].id);
  if (selectedPool !== null) sel.value = String(selectedPool);
  renderCharts(st);
  renderOomAdvice(st);
}

// ---- charts ----

function chartCanvas(key, title) {
  let box = document.querySelector('.chart[data-key="' + key + '"]');
  if (!box) {
    box = el("div", { class: "chart", "data-key": key });
    box.append(el("h3"), el("canvas", { width: "420", height: "120" }));
    $("charts").append(box);
  }
  box.querySelector("h3").textContent = title;
  box.dataset.seen = "1";
  return box.querySelector("canvas");
}

// x runs from x0Ms to nowMs (the window, or less while the process is younger).
function drawLines(cv, t, lines, bars, x0Ms, nowMs) {
  const ctx = cv.getContext("2d");
  const W = cv.width;
  const H = cv.height;
  const padL = 56;
  const padB = 14;
  ctx.clearRect(0, 0, W, H);
  let max = 1;
  for (const l of lines) for (const v of l.v) max = Math.max(max, v);
  const span = nowMs - x0Ms;
  const xOf = (ms) => padL + ((ms - x0Ms) / span) * (W - padL - 4);
  const yOf = (v) => H - padB - (v / max) * (H - padB - 6);
  ctx.strokeStyle = "#ddd";
  ctx.strokeRect(padL, 2, W - padL - 4, H - padB - 2);
  ctx.fillStyle = "#555";
  ctx.font = "10px sans-serif";
  ctx.textAlign = "right";
  ctx.fillText(fmtBytes(max), padL - 4, 10);
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
    if (t.length) ctx.lineTo(xOf(nowMs), yOf(l.v[t.length - 1]));
    ctx.stroke();
  }
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
    const dev = s.from_device.map((v, i) => (i ? v - s.from_device[i - 1] : 0));
    const n = dev.reduce((a, b) => a + b, 0);
    const cv = chartCanvas("pool-" + p.id, p.name + " · device " + p.device + (p.live ? "" : " (gone)") + " · " + n + " from device in window");
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
      st.now_ms
    );
  }
  const c = st.cupti;
  for (const d of c.devices) {
    const cv = chartCanvas("cupti-" + d.device, "CUPTI · device " + d.device + ": all CUDA memory");
    drawLines(cv, d.t, [{ v: d.pool, color: "#3b6fd4" }, { v: d.other, color: "#9467bd" }], null, x0, st.now_ms);
  }
  $("cupti-note").textContent = c.up
    ? "CUPTI is recording: purple is CUDA memory outside every gpupool pool, blue inside them."
    : "CUPTI is not recording (" + c.reason + "): no view of other CUDA memory.";
  for (const box of document.querySelectorAll(".chart")) if (!box.dataset.seen) box.remove();
}

// ---- OOM reports and advice (only where the agent has those endpoints) ----

let oomFetchedAt = 0;

async function renderOomAdvice(st) {
  const any = st.links.oom || st.links.advice;
  $("oom-section").hidden = !any;
  if (!any || Date.now() - oomFetchedAt < 5000) return;
  oomFetchedAt = Date.now();
  const show = async (on, url, box, title, pick) => {
    box.replaceChildren();
    if (!on) return;
    try {
      const data = await getJSON(url);
      const h = el("h3", {}, title + " ");
      h.append(el("a", { href: url }, url));
      box.append(h, el("pre", {}, JSON.stringify(pick(data), null, 2)));
    } catch (e) {
      box.append(el("p", { class: "note" }, url + " did not answer: " + e.message));
    }
  };
  await show(st.links.oom, "/oom", $("oom"), "Last OOM reports", (d) => (Array.isArray(d) ? d.slice(-3) : d));
  await show(st.links.advice, "/advice", $("advice"), "Recommendation", (d) => d);
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

// Bytes of each state per pixel column of one bar: blocks narrower than a
// pixel are summed, never dropped; a column is then drawn as a stack of its
// states' shares.
function columns(seg, width, bpp) {
  const cols = new Float64Array(width * 4);
  const add = (state, from, to) => {
    let c = Math.floor(from / bpp);
    while (from < to && c < width) {
      const end = Math.min(to, (c + 1) * bpp);
      cols[c * 4 + state] += end - from;
      from = end;
      c++;
    }
  };
  const b = seg.blocks;
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
    } else add(state, off, off + size);
  }
  return cols;
}

function drawMap() {
  const cv = $("map");
  const info = $("map-info");
  const pool = blocks && blocks.pool;
  if (!blocks) return;
  if (!pool) {
    info.textContent = "This pool is gone (destroyed).";
    cv.height = 1;
    ui.layout = [];
    return;
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
  const width = Math.max(400, $("map-wrap").clientWidth - 2);
  cv.width = width;
  cv.height = Math.max(20, rows.length * (rowH + ROW_GAP) + 4);
  const ctx = cv.getContext("2d");
  ctx.clearRect(0, 0, cv.width, cv.height);
  if (!pool.segments.length) {
    info.textContent = pool.name + ": no segments (an empty pool).";
    ui.layout = [];
    ui.mapBlocks = 0;
    markDrawn();
    return;
  }
  const maxSize = Math.max(...pool.segments.map((s) => s.size));
  const barW = width - LABEL_W - 8;
  const bpp = maxSize / barW; // one scale for every bar: widths are to scale
  const hl = $("map-highlight").value;
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
    const cols = columns(s, w, s.size / w);
    const img = ctx.createImageData(w, rowH);
    const px = new Uint32Array(img.data.buffer);
    for (let c = 0; c < w; c++) {
      const base = c * 4;
      const sum = cols[base] + cols[base + 1] + cols[base + 2] + cols[base + 3];
      if (!sum) continue;
      let k = 0;
      let upto = 0;
      for (let j = 0; j < rowH; j++) {
        const at = ((j + 0.5) / rowH) * sum; // which state's share this pixel row is in
        while (k < 3 && (upto + cols[base + STACK[k]] <= at || !cols[base + STACK[k]])) upto += cols[base + STACK[k++]];
        const st = STACK[k];
        px[j * w + c] = hl !== "" && String(st) !== hl ? PIXEL_DIM : PIXELS[st];
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
  info.textContent =
    pool.name + ": " + pool.segments.length + " segments, " + total + " blocks" +
    (rows.length < pool.segments.length ? " (" + rows.length + " shown: sort or filter for others)" : "") +
    " · scale " + fmtBytes(Math.round(bpp)) + " per pixel" +
    " · largest free " + fmtBytes(pool.largest_free) +
    " · external fragmentation " + fmtRatio(frag) + " · cache overhead " + fmtRatio(overhead(pool));
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
    "requested  " + (b[i + 3] === 1 ? fmtBytes(b[i + 2]) + " (" + b[i + 2] + " B)" : "—"),
    "stream     " + s.stream,
    "age        " + (b[i + 3] === 0 ? "— (free)" : fmtAge(b[i + 4])),
  ];
  if (b[i + 5]) lines.push("unmapped   " + fmtBytes(b[i + 5]));
  if (inPx > 1) lines.push(inPx + " blocks share this pixel: its colours are their shares");
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 420) + "px";
  tip.style.top = ev.clientY + 14 + "px";
}

function start() {
  $("window").addEventListener("change", () => {
    if (ui.lastState) pollNow();
  });
  $("map-pool").addEventListener("change", (e) => selectPool(Number(e.target.value)));
  for (const id of ["map-sort", "map-filter", "map-highlight"]) $(id).addEventListener("change", drawMap);
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
