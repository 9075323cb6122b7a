// A /trace document through two third-party viewers' own import code, under
// Node: Chrome DevTools' trace engine (@paulirish/trace_engine, the model of
// the Performance panel) and speedscope's Trace Event importer. Prints what
// each builds from it and exits 1 on any warning, or when what they draw
// differs from the document: names, one track per pool's device calls, every
// X event drawn once, none nested in another.
//   node trace_viewers.mjs NODE_MODULES_DIR TRACE.json
import fs from 'node:fs';
import vm from 'node:vm';

const [nodeModules, tracePath] = process.argv.slice(2);
if (!nodeModules || !tracePath) {
  console.error('usage: node trace_viewers.mjs NODE_MODULES_DIR TRACE.json');
  process.exit(2);
}
const problems = [];
const check = (ok, what) => {
  if (!ok)
    problems.push(what);
};
// Both engines report trouble through the console: collect it as failures.
const consoleLines = [];
for (const level of ['warn', 'error']) {
  console[level] = (...args) => consoleLines.push(`${level}: ${args.join(' ').slice(0, 400)}`);
}

const text = fs.readFileSync(tracePath, 'utf8');
const doc = JSON.parse(text);
const events = doc.traceEvents;

// ---- what the document holds ----
const threadNames = new Map(); // "pid:tid" -> name
const processNames = new Map();
const xByTrack = new Map(); // "pid:tid" -> [X events]
const counterKeys = new Map(); // counter name -> key list
let asyncOpen = 0, asyncClosed = 0;
for (const ev of events) {
  const track = `${ev.pid}:${ev.tid}`;
  if (ev.ph === 'M' && ev.name === 'thread_name')
    threadNames.set(track, ev.args.name);
  if (ev.ph === 'M' && ev.name === 'process_name')
    processNames.set(ev.pid, ev.args.name);
  if (ev.ph === 'X') {
    if (!xByTrack.has(track))
      xByTrack.set(track, []);
    xByTrack.get(track).push(ev);
  }
  if (ev.ph === 'C') {
    const keys = Object.keys(ev.args).join(',');
    if (!counterKeys.has(ev.name))
      counterKeys.set(ev.name, keys);
    check(counterKeys.get(ev.name) === keys, `counter "${ev.name}": keys ${keys} after ${counterKeys.get(ev.name)}`);
    check(Object.values(ev.args).every(v => typeof v === 'number'), `counter "${ev.name}": a value is not a number`);
  }
  asyncOpen += ev.ph === 'b';
  asyncClosed += ev.ph === 'e';
}
const xTotal = [...xByTrack.values()].reduce((n, xs) => n + xs.length, 0);
// Calls that begin exactly where the one before ends (a map after an unmap):
// the case that 3-decimal times used to draw nested.
let touching = 0;
for (const xs of xByTrack.values())
  for (let i = 1; i < xs.length; i++)
    touching += xs[i].ts === xs[i - 1].ts + xs[i - 1].dur;
console.log(`document: ${events.length} events; ${processNames.size} processes, ${threadNames.size} named threads; ` +
            `${counterKeys.size} counter tracks; ${asyncOpen} allocation bars opened (b), ${asyncClosed} closed (e); ` +
            `${xTotal} device calls (X) on ${xByTrack.size} tracks, ${touching} beginning where the one before ends`);
check(counterKeys.size > 0, 'no counter track in the document');
check(asyncOpen > 0, 'no allocation lifetime (b) in the document');
check(xTotal > 0, 'no device call (X) in the document');
for (const name of counterKeys.keys())
  check(/^pool .+ (memory|allocations)$/.test(name), `unexpected counter name "${name}"`);

// ---- Chrome DevTools' trace engine ----
{
  const {polyfillDOMRect} = await import(`${nodeModules}/@paulirish/trace_engine/analyze-trace.mjs`);
  polyfillDOMRect();
  const Trace = await import(`${nodeModules}/@paulirish/trace_engine/models/trace/trace.js`);
  const model = Trace.TraceModel.Model.createWithAllHandlers();
  await model.parse(structuredClone(events), {metadata: {}});
  const parsed = model.parsedTrace();
  const data = parsed.data;
  const warnings = [...data.Warnings.perWarning].filter(([, list]) => list.length > 0);
  check(warnings.length === 0, `trace_engine warnings: ${warnings.map(([k, l]) => `${k} x${l.length}`).join(', ')}`);
  check(parsed.traceEvents.length === events.length,
        `trace_engine kept ${parsed.traceEvents.length} of ${events.length} events`);
  for (const [pid, name] of processNames)
    check(data.Meta.processNames.get(pid)?.args.name === name, `trace_engine: process ${pid} is not named "${name}"`);
  let tracks = 0, drawn = 0, deepest = 0;
  for (const [pid, proc] of data.Renderer.processes) {
    for (const [tid, thread] of proc.threads) {
      const key = `${pid}:${tid}`;
      const xs = xByTrack.get(key) ?? [];
      const complete = thread.entries.filter(e => e.ph === 'X');
      check(thread.name === threadNames.get(key), `trace_engine: thread ${key} named "${thread.name}", not "${threadNames.get(key)}"`);
      check(complete.length === xs.length, `trace_engine: ${complete.length} of the ${xs.length} X events of "${thread.name}" drawn`);
      const depth = thread.tree?.maxDepth ?? 0;
      check(depth <= 1, `trace_engine: "${thread.name}" nests device calls (depth ${depth})`);
      deepest = Math.max(deepest, depth);
      tracks += xs.length > 0;
      drawn += complete.length;
    }
  }
  check(tracks === xByTrack.size, `trace_engine: ${tracks} of ${xByTrack.size} device-call tracks drawn`);
  console.log(`trace_engine: ${parsed.traceEvents.length} events taken; processes ` +
              `${[...data.Meta.processNames.values()].map(e => `"${e.args.name}"`).join(', ')}; ` +
              `${tracks} timelines of device calls with ${drawn} X events, nesting depth ${deepest}; ` +
              `counters and allocation bars are not modelled by this engine (it draws X and instant events only)`);
}

// ---- speedscope ----
{
  // speedscope ships a browser bundle only. Its Trace Event importer is
  // reached by evaluating the bundle in a context with a minimal window and
  // document, stopping it right after the import module is defined (before
  // the UI would render): the bundle is taken as npm ships it, not changed on
  // disk.
  const dir = `${nodeModules}/speedscope/dist/release/`;
  const file = fs.readdirSync(dir).find(f => /^speedscope-[A-Z0-9]+\.js$/.test(f));
  let src = fs.readFileSync(dir + file, 'utf8');
  const hook = /var (\w+)=Promise\.resolve\(\)\.then\(\(\)=>\((\w+)\(\),(\w+)\)\);/;
  const m = src.match(hook);
  if (!m) {
    console.error(`speedscope: ${file} has no import-module hook (a speedscope version other than the pinned one?)`);
    process.exit(1);
  }
  src = src.replace(hook, `${m[0]}globalThis.__importers=()=>(${m[2]}(),${m[3]});throw"stop";`);
  const sandboxConsole = {log: () => {}, info: () => {}, warn: console.warn, error: console.error};
  const element = () => ({style: {}, setAttribute() {}, appendChild() {}, getContext: () => null});
  const ctx = {
    console: sandboxConsole, TextDecoder, TextEncoder, URL, setTimeout, clearTimeout, Promise,
    navigator: {userAgent: 'node'},
    location: {hash: '', search: '', href: 'http://localhost/', protocol: 'http:'},
    document: {createElement: element, head: {appendChild() {}}, body: {}, addEventListener() {}, querySelector: () => null},
    addEventListener() {},
    matchMedia: () => ({matches: false, addEventListener() {}, addListener() {}}),
  };
  ctx.window = ctx.self = ctx.globalThis = ctx;
  vm.createContext(ctx);
  try {
    vm.runInContext(src, ctx);
  } catch (e) {
    if (e !== 'stop')
      throw e;
  }
  const importers = ctx.__importers();
  const group = await importers.importProfileGroupFromText('trace.json', text);
  check(group && group.profiles.length === xByTrack.size,
        `speedscope: ${group?.profiles.length} profiles for ${xByTrack.size} device-call tracks`);
  const lines = [];
  for (const profile of group?.profiles ?? []) {
    const name = profile.getName();
    const tm = name.match(/\(pid (\d+)\), (.*) \(tid (\d+)\)$/);
    check(tm, `speedscope: profile name "${name}" lacks our process/thread names`);
    if (!tm)
      continue;
    const key = `${tm[1]}:${tm[3]}`;
    check(tm[2] === threadNames.get(key), `speedscope: "${tm[2]}" is not the thread name "${threadNames.get(key)}"`);
    check(name.startsWith(`${processNames.get(Number(tm[1]))} (pid`), `speedscope: "${name}" lacks the process name`);
    // Nothing nested: every call is a root frame, so the profile's total
    // weight is the sum of the durations.
    const xs = xByTrack.get(key) ?? [];
    const sum = xs.reduce((s, e) => s + e.dur, 0);
    const total = profile.getTotalNonIdleWeight();
    check(Math.abs(total - sum) <= 1e-6 * Math.max(1, sum), `speedscope: "${tm[2]}" weighs ${total} µs, its X events ${sum} µs`);
    let roots = 0, nested = 0;
    profile.forEachCall((node, start) => { node.parent && !node.parent.isRoot() ? nested++ : roots++; }, () => {});
    check(nested === 0, `speedscope: "${tm[2]}": ${nested} calls drawn nested`);
    lines.push(`"${tm[2]}" ${roots} calls`);
  }
  console.log(`speedscope: ${group?.profiles.length} profiles (one per device-call track): ${lines.join(', ')}; ` +
              `it draws B/E/X events only, so no counters or allocation bars`);
}

for (const line of consoleLines)
  problems.push(`console ${line}`);
if (problems.length) {
  for (const p of problems.slice(0, 20))
    console.log(`FAIL: ${p}`);
  if (problems.length > 20)
    console.log(`FAIL: ... and ${problems.length - 20} more`);
  process.exit(1);
}
console.log('ok   both viewers took the trace without a warning');
