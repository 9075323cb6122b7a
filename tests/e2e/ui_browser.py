#!/usr/bin/env python3
"""The /ui page in a real headless Chromium, driven over the DevTools protocol
(--remote-debugging-pipe: commands on fd 3, replies and events on fd 4, each
message JSON ended by a NUL byte). Standard library only.

  ui_browser.py --chromium PATH --demo PATH --fixture PATH --out DIR [--parts LIST]

Part 1, the demo (gpupool-demo on the host backend, workload running): the
pools are listed, every segment bar is drawn to scale (pixels on the canvas),
a counter on the page lies between /metrics' values read just before the page
fetched it and just after (allocations served from the device only grow, so
that window is exact), and the console stays clean. Screenshot ui-demo.png.

Part 2, the fixture (tests/ui/ui_fixture.c, frozen): the reserved bytes shown
equal /metrics' exactly; the 10^5-block map is drawn (time from navigation
printed, not asserted); an empty pool, unmapped pages and a pending block
render; the OOM the fixture made is a card (its message starts with "CUDA
out of memory.", links to /oom/<id> and its torch pickle); the advice
renderer takes any JSON shape; colouring by tag shows the fixture's tags in
the legend with /metrics' bytes per tag and their colours on the map, and a
hover names a block's tag and shows a pending block's requested size; each
pool's "N from device in window" equals /metrics' count (the pools were
created within the window); text with a bidi control (pool "rtl<U+202E>name")
is isolated wherever shown; the map's caption names a pool by its label
(?pool=same%233, pools same x3 and same#2); ?device= tells apart the pools
of one label on two devices ("twin"), alone or with ?pool=; ?pool= with a
label no pool has (there) says it waits for it; at a 400 px viewport the page does not scroll sideways
and the tooltip stays inside it; fmtBytes reaches PiB; the advice table shows
computed_at as a time and an age; a destroyed pool shows as gone, its chart's
lines ending at its last sample; a stopped agent shows "agent unreachable"
with the seconds to the next try counting down, without a script error.
Also: the pools table is updated in place (a selected cell stays selected);
an OOM card of a pool whose name holds U+202E (renamed on its way, DevTools'
Fetch domain) reads in order; the largest free block's outline is the block
blocks.json names, and none is drawn on another block when a filter hides it
or nothing is free over mapped pages; ?pool= shows a placeholder while it
waits and follows its label to another pool; a hung (SIGSTOPped) agent shows
"agent unreachable" after the requests' timeout; the map's poll backs off.
Screenshots ui-fixture*.png.

Part 3, the fixture with no pool: the block map says there is none.

Part 4, basic auth: the page opened with credentials in its URL polls; a
rate limit's 429 and refused credentials (401) are told apart from an agent
that does not answer.

Part 5, restarts on one port (fixture, fixture, demo): the page drops what
it kept of the process before (OOM details, the pool list)."""

import argparse
import base64
import ctypes
import ctypes.util
import fcntl
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


class Browser:
    def __init__(self, chromium, profile, extra_args=()):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():  # fd 3: what Chromium reads; fd 4: what it writes
            # Through fds above 4 first: a pipe end may already be fd 3 or 4.
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)  # every other fd is close-on-exec
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--user-data-dir=" + profile, "--remote-debugging-pipe", "--window-size=1400,1000",
             *extra_args, "about:blank"],
            preexec_fn=child_fds, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None
        self.paused = []  # Fetch.requestPaused events not answered yet
        self.rewrite = None  # intercept()'s function

    def send(self, method, params=None, session=True, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self.read(deadline)
            if m is None:
                raise RuntimeError(method + ": no answer in %d s" % timeout)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(method + ": " + json.dumps(m["error"]))
                return m.get("result", {})

    def read(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                return None
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        m = json.loads(raw)
        if "method" in m:
            self.events.append(m)
            if m["method"] in ("Fetch.requestPaused", "Fetch.authRequired"):
                self.paused.append(m)
        return m

    def pump(self, seconds):
        deadline = time.monotonic() + seconds
        self.answer_paused()
        while self.read(deadline) is not None:
            self.answer_paused()

    def intercept(self, patterns, rewrite):
        """Answers the page's requests for URLs matching `patterns` (Fetch
        domain, at the response) with rewrite(url, status, body) -> body of
        the agent's answer; rewrite None stops intercepting."""
        if rewrite is None:
            self.send("Fetch.disable")
            self.rewrite = None
            self.answer_paused()
            return
        self.rewrite = rewrite
        self.send("Fetch.enable", {"patterns": [{"urlPattern": p, "requestStage": "Response"}
                                                for p in patterns]})

    def cancel_logins(self):
        """Every login prompt the browser would show (a 401 with
        WWW-Authenticate) is cancelled at once, as by a user, so that the
        page gets the 401 (headless, the request would wait for an answer)."""
        self.rewrite = None
        self.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}],
                                   "handleAuthRequests": True})

    def answer_paused(self):
        # Not from within send(): its loop reads the events these answers cause.
        while self.paused:
            m = self.paused.pop(0)
            ev = m["params"]
            rid = ev["requestId"]
            try:
                if m["method"] == "Fetch.authRequired":
                    self.send("Fetch.continueWithAuth", {"requestId": rid, "authChallengeResponse":
                                                         {"response": "CancelAuth"}})
                    continue
                if self.rewrite is None or ev.get("responseStatusCode") != 200:
                    self.send("Fetch.continueRequest", {"requestId": rid})
                    continue
                got = self.send("Fetch.getResponseBody", {"requestId": rid})
                body = base64.b64decode(got["body"]) if got.get("base64Encoded") else got["body"].encode()
                body = self.rewrite(ev["request"]["url"], ev["responseStatusCode"], body)
                headers = [h for h in ev.get("responseHeaders", [])
                           if h["name"].lower() not in ("content-length", "content-encoding")]
                self.send("Fetch.fulfillRequest", {"requestId": rid, "responseCode": 200,
                                                   "responseHeaders": headers,
                                                   "body": base64.b64encode(body).decode()})
            except RuntimeError:  # the request went meanwhile (the page navigated)
                pass

    def open_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        att = self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
                        session=False)
        self.session = att["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(domain + ".enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("evaluate %r: %s" % (expr[:80], json.dumps(r["exceptionDetails"])[:400]))
        return r["result"].get("value")

    def wait_for(self, expr, timeout, what):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                if self.eval(expr):
                    check(True, what)
                    return True
            except RuntimeError as e:  # the page is still loading
                last = e
            self.pump(0.1)
        check(False, what + " (waited %d s%s; errors so far: %s)"
              % (timeout, "; last: %s" % last if last else "", self.errors()))
        return False

    def errors(self):
        """Console errors, uncaught exceptions and error log entries so far."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], json.dumps(p.get("args"))[:300]))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", "")[:300])
        return out

    def screenshot(self, path):
        h = self.eval("Math.min(4000, document.documentElement.scrollHeight)")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": int(h), "deviceScaleFactor": 1, "mobile": False})
        self.pump(0.3)
        shot = self.send("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        print("screenshot: " + path, flush=True)

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def metric(base, name, pool, label=""):
    """The sample of family `name` for pool `pool` (whose labels also hold `label`)."""
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    pat = re.compile(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), re.M)
    for labels, value in pat.findall(text):
        if 'pool="%s"' % pool in labels and label in labels:
            return float(value)
    return None


# Measures every bar on the canvas: the first and last pixel of the bar's
# middle row that is not background, against the size it stands for.
BARS_JS = """(() => {
  const cv = document.getElementById('map');
  const ctx = cv.getContext('2d');
  return gpupoolUI.layout.map(r => {
    const y = Math.round(r.y + r.h / 2);
    const row = ctx.getImageData(0, y, cv.width, 1).data;
    let first = -1, last = -1;
    for (let x = r.x - 1; x < cv.width; x++) {
      const a = row[4 * x + 3];
      if (a > 0) { if (first < 0) first = x; last = x; }
    }
    return {size: r.size, drawn: first < 0 ? 0 : last - first + 1, layout: r.width};
  });
})()"""


def check_bars(b, label):
    bars = b.eval(BARS_JS)
    check(len(bars) > 0, "%s: segment bars present (%d)" % (label, len(bars)))
    if not bars:
        return
    big = max(bars, key=lambda r: r["size"])
    # The outline adds one pixel on each side of a bar of `layout` pixels.
    scale = (big["drawn"] - 2) / big["size"]
    worst = max(abs((r["drawn"] - 2) - r["size"] * scale) for r in bars)
    check(worst <= 1.0, "%s: bars to scale: widths within %.2f px of size x %.3g px/B"
          % (label, worst, scale))


def check_oom(b, base):
    """The fixture's OOM as a card: message, links to the report and its pickle."""
    reports = json.loads(urllib.request.urlopen(base + "/oom", timeout=10).read())
    check(len(reports) == 1, "fixture: /oom has the fixture's one report (%d)" % len(reports))
    if not reports:
        return
    rid = reports[0]["id"]
    ok = b.wait_for("document.querySelector('.oom-card[data-oom-id=\"%d\"] .remedies li') !== null"
                    % rid, 20, "fixture: OOM #%d shown as a card with its remedies" % rid)
    if not ok:
        return
    card = b.eval("""(() => { const c = document.querySelector('.oom-card[data-oom-id="%d"]');
      return {msg: c.querySelector('.oom-msg').textContent, head: c.querySelector('.oom-head').textContent,
              json: c.querySelector('a.oom-json').getAttribute('href'),
              torch: c.querySelector('a.oom-torch').getAttribute('href'),
              remedies: [...c.querySelectorAll('.remedies li')].map(l => l.textContent)}; })()""" % rid)
    check(card["msg"].startswith("CUDA out of memory."),
          "fixture: the card's message starts with 'CUDA out of memory.' (%r)" % card["msg"][:60])
    check("request 40.0 MiB" in card["head"] and "pool oom" in card["head"],
          "fixture: the card names the pool and the request in human units (%r)" % card["head"])
    check(card["json"] == "/oom/%d" % rid and card["torch"] == "/oom/%d?format=torch" % rid,
          "fixture: the card links /oom/%d and its torch pickle (%s, %s)"
          % (rid, card["json"], card["torch"]))
    check(any("expandable_segments:True would not have served it" in r for r in card["remedies"])
          and any(r.startswith("no") and "empty_cache() would free 0 B" in r
                  for r in card["remedies"]),
          "fixture: the card lists the computed remedies (%s)" % card["remedies"])
    for link, kind in ((card["json"], "application/json"), (card["torch"], "application/octet-stream")):
        r = urllib.request.urlopen(base + link, timeout=10)
        check(r.status == 200 and r.headers.get("Content-Type", "").startswith(kind),
              "fixture: %s answers %s" % (link, kind))


def check_oom_bidi(b, out):
    """The OOM card of a pool whose name holds U+202E (the fixture's OOM,
    its pool renamed in /oom and /oom/<id> on their way to the page): the
    control is shown, not obeyed, so the message reads in order."""
    name = "rtl\u202ename"

    def rename(url, status, body):
        doc = json.loads(body)
        for r in doc if isinstance(doc, list) else [doc]:
            if isinstance(r, dict) and r.get("pool") == "oom":
                r["pool"] = name
                r["message"] = str(r.get("message", "")).replace("pool 'oom'", "pool '%s'" % name)
        return json.dumps(doc).encode()

    b.intercept(["*/oom*"], rename)
    try:
        ok = b.wait_for("(() => { const m = document.querySelector('.oom-card .oom-msg');"
                        " return m !== null && m.textContent.includes('rtl'); })()", 20,
                        "fixture: the OOM card of pool rtl<U+202E>name shown")
        if not ok:
            return
        got = b.eval(OOM_ORDER_JS)
        check("pool 'rtl<U+202E>name' on device 0" in got["text"] and got["back"] == 0,
              "fixture: the OOM message shows U+202E escaped and reads left to right (%d characters"
              " out of order): %r" % (got["back"], got["text"][:140]))
        bidi = b.eval(BIDI_JS)
        check(not bidi["bad"], "fixture: no bidi control of the OOM card acts on the page (not: %s)"
              % bidi["bad"])
        b.screenshot(os.path.join(out, "ui-fixture-oom-bidi.png"))
    finally:
        b.intercept(None, None)


def check_advice_view(b):
    """The advice renderer on documents of other shapes: a recommendation line
    to copy where there is one, a table of scalars otherwise, never a throw."""
    shapes = [
        ({"recommended": {"gpupool_conf": "GPUPOOL_CONF=expandable_segments:True"}, "saving_bytes": 5},
         "GPUPOOL_CONF=expandable_segments:True"),
        ({"text": "export GPUPOOL_CONF=max_split_size_mb:64", "confidence": 0.8},
         "export GPUPOOL_CONF=max_split_size_mb:64"),
        ({"pytorch_conf": "expandable_segments:True"}, "expandable_segments:True"),
        ({"a": 1, "b": "two", "c": None, "nested": {"x": [1, 2]}}, None),
        ([], None), ([1, "x"], None), (None, None), ("plain", None), (42, None),
        ({"deep": [[[[[[[[{"recommended": "GPUPOOL_CONF=x"}]]]]]]]]}, None),
    ]
    for doc, code in shapes:
        got = b.eval("(() => { const v = gpupoolUI.adviceView(%s);"
                     " const c = v.querySelector('code');"
                     " return {code: c ? c.textContent : null, rows: v.querySelectorAll('tr').length,"
                     " text: v.textContent}; })()" % json.dumps(doc))
        if code:
            check(got["code"] == code, "advice view: %s -> <code>%s</code> (%s)"
                  % (json.dumps(doc)[:60], code, got["code"]))
        else:
            check(got["text"] != "", "advice view: %s renders without a recommendation (%d rows)"
                  % (json.dumps(doc)[:60], got["rows"]))
    # The agent's own /advice: a line per pool, named; nothing to copy where
    # there is no recommendation or it is the defaults (an empty GPUPOOL_CONF).
    agent_doc = {"computed_at": 1.5, "pools": [
        {"pool": "a", "device": 0, "has_recommendation": True,
         "recommended": {"gpupool_conf": "expandable_segments:True", "saved_bytes": 1048576}},
        {"pool": "b", "device": 1, "has_recommendation": False, "recommended": {"gpupool_conf": "x"}},
        {"pool": "c", "device": 0, "has_recommendation": True, "recommended": {"gpupool_conf": ""}}]}
    got = b.eval("(() => { const v = gpupoolUI.adviceView(%s);"
                 " return {codes: [...v.querySelectorAll('code')].map((c) => c.textContent),"
                 " copies: v.querySelectorAll('button').length, text: v.textContent}; })()"
                 % json.dumps(agent_doc))
    check(got["codes"] == ["expandable_segments:True"] and got["copies"] == 1,
          "advice view, the agent's shape: one line to copy, pool a's (%s)" % got["codes"])
    for want in ("a (device 0)", "b (device 1)", "no recommendation", "c (device 0)",
                 "the defaults", "saves 1.00 MiB"):
        check(want in got["text"], "advice view, the agent's shape: '%s' not shown (%s)"
              % (want, got["text"][:200]))


TAG_PIXELS_JS = """(() => {
  const cv = document.getElementById('map');
  const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  const want = %s;
  const n = want.map(() => 0);
  for (let i = 0; i < d.length; i += 4)
    for (let k = 0; k < want.length; k++)
      if (d[i] === want[k][0] && d[i+1] === want[k][1] && d[i+2] === want[k][2]) n[k]++;
  return n;
})()"""


def check_tags(b, base):
    """Colour by tag on pool steady: the legend lists the fixture's tags with
    the bytes /metrics gives, and the map draws each tag's colour."""
    b.eval("(() => { const s = document.getElementById('map-colour'); s.value = 'tag';"
           " s.dispatchEvent(new Event('change')); })()")
    ok = b.wait_for("document.querySelectorAll('#tag-legend .tag-item[data-tag]').length >= 4", 10,
                    "fixture: the tag legend is shown")
    if not ok:
        return
    legend = b.eval("Object.fromEntries([...document.querySelectorAll('#tag-legend .tag-item')]"
                    ".map(e => [e.dataset.tag, Number(e.dataset.bytes)]))")
    for tag in ("weights", "activations", "kv_cache"):
        want = metric(base, "gpupool_tag_allocated_bytes", "steady", 'tag="%s"' % tag)
        check(want is not None and legend.get(tag) == want,
              "fixture: legend %s %s == /metrics %s" % (tag, legend.get(tag), want))
    alloc = metric(base, "gpupool_allocated_bytes", "steady")
    tagged = sum(v for k, v in legend.items() if k)
    check(alloc is not None and legend.get("") == alloc - tagged,
          "fixture: legend untagged %s == allocated %s - tagged %s" % (legend.get(""), alloc, tagged))
    colors = b.eval("[...document.querySelectorAll('#tag-legend .tag-item')].map(e =>"
                    " getComputedStyle(e.querySelector('.key')).backgroundColor)")
    rgb = [[int(x) for x in re.findall(r"\d+", c)[:3]] for c in colors]
    counts = b.eval(TAG_PIXELS_JS % json.dumps(rgb))
    check(all(n > 0 for n in counts) and len(set(map(tuple, rgb))) == len(rgb),
          "fixture: each tag's own colour drawn on the map (pixels %s)" % counts)


# Text nodes holding a bidi control (U+202E and the others: embeddings,
# overrides, isolates, marks) not isolated from the text around them:
# neither the pool's label alone in an element whose unicode-bidi isolates
# nor between U+2068 and U+2069.
BIDI_JS = r"""(() => {
  const bad = [];
  let n = 0;
  const controls = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
  const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let t; (t = w.nextNode()); ) {
    if (!controls.test(t.data)) continue;
    if (t.data.includes('\u202e')) n++; // a place pool rtl<U+202E>name is shown
    const d = t.data.replace(/\u2068[^\u2068\u2069]*\u2069/g, ''); // isolated between U+2068 and U+2069
    if (!controls.test(d)) continue;
    const p = t.parentElement;
    const alone = d === 'rtl\u202ename' && p.childNodes.length === 1
      && /isolate|plaintext/.test(getComputedStyle(p).unicodeBidi);
    if (!alone) bad.push(p.tagName + '.' + p.className + ': ' + JSON.stringify(p.textContent.slice(0, 200)));
  }
  return {n: n, bad: bad};
})()"""

# The rightmost column of a chart's plot holding a coloured (not grey) pixel.
CHART_END_JS = """(() => {
  const cv = document.querySelector('.chart[data-key="pool-%s"] canvas');
  const d = cv.getContext('2d').getImageData(0, 3, cv.width, cv.height - 18).data;
  let right = -1;
  for (let i = 0; i < d.length; i += 4) {
    const x = (i / 4) %% cv.width;
    if (d[i + 3] > 0 && Math.max(d[i], d[i+1], d[i+2]) - Math.min(d[i], d[i+1], d[i+2]) > 40)
      right = Math.max(right, x);
  }
  return {right: right, width: cv.width};
})()"""

# Whether pool `label`'s last sample lies at least 5 %% of the charts' span
# before now (the span as the page computes it).
CHART_GAP_JS = """(() => {
  const st = gpupoolUI.lastState;
  const p = st && st.pools.find((q) => q.label === %s);
  if (!p || p.live || !p.series.t.length) return false;
  let x0 = st.now_ms - 10000;
  for (const q of st.pools) if (q.series.t.length) x0 = Math.min(x0, q.series.t[0]);
  x0 = Math.max(x0, st.now_ms - st.window_s * 1000);
  return st.now_ms - p.series.t[p.series.t.length - 1] >= 0.05 * (st.now_ms - x0);
})()"""

# Pixels of the largest free block's outline (#d62728) on the map.
RED_JS = """(() => {
  const cv = document.getElementById('map');
  const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] === 214 && d[i+1] === 39 && d[i+2] === 40) n++;
  return n;
})()"""

# As a user chooses a pool in the map's list: a change only if the choice changes.
CHOOSE_JS = """(() => {
  const s = document.getElementById('map-pool');
  const o = [...s.options].find(o => o.textContent.startsWith('\\u2068' + %s + '\\u2069'));
  if (!o || o.selected) return false;
  o.selected = true;
  s.dispatchEvent(new Event('change'));
  return true;
})()"""

# Every request the page makes, with its time: [performance.now(), url].
FETCH_LOG_JS = """(() => {
  if (window.fetchLog) return true;
  window.fetchLog = [];
  const f = window.fetch.bind(window);
  window.fetch = (u, o) => { window.fetchLog.push([performance.now(), String(u)]); return f(u, o); };
  return true;
})()"""

# The characters of the OOM card's message whose box lies left of the one
# before them on the same line: text a bidi control reordered.
OOM_ORDER_JS = r"""(() => {
  const p = document.querySelector('.oom-card .oom-msg');
  const t = p && p.firstChild;
  if (!t || t.nodeType !== 3) return {text: p ? p.textContent : null, back: -1};
  const r = document.createRange();
  let back = 0, prev = null;
  for (let i = 0; i < t.data.length; i++) {
    if (/\s/.test(t.data[i])) continue;
    r.setStart(t, i);
    r.setEnd(t, i + 1);
    const b = r.getBoundingClientRect();
    if (!b.width) continue;
    if (prev && Math.abs(b.top - prev.top) < 2 && b.left < prev.left - 0.5) back++;
    prev = b;
  }
  return {text: t.data, back: back};
})()"""


def set_control(b, id, value):
    b.eval("(() => { const s = document.getElementById(%s); s.value = %s;"
           " s.dispatchEvent(new Event('change')); })()" % (json.dumps(id), json.dumps(value)))


def status(b):
    return b.eval("[document.getElementById('status').textContent,"
                  " document.getElementById('status').className]")


def check_largest(b, base):
    """Pool steady: the red outline is the block blocks.json names as the
    pool's largest free block; with a filter that hides its segment none is
    drawn (not another block's), and the caption says so without sending the
    user to the filter that hid it."""
    sid = b.eval("document.querySelector('#pools tr[data-pool=\"steady\"]').dataset.poolId")
    doc = json.loads(urllib.request.urlopen(base + "/ui/blocks.json?pool=" + sid, timeout=10).read())
    pool = doc["pool"]
    at = pool.get("largest_free_block")
    check(at is not None, "fixture: blocks.json names steady's largest free block (%s)" % at)
    if at is not None:
        seg = pool["segments"][at["segment"]]
        want = [seg["address"], seg["blocks"][6 * at["block"]], seg["blocks"][6 * at["block"] + 1]]
        check(want[2] == pool["largest_free"], "fixture: that block is largest_free %s (%s)"
              % (pool["largest_free"], want))
        set_control(b, "map-filter", "all")
        got = b.eval("gpupoolUI.largest && [gpupoolUI.largest.address, gpupoolUI.largest.offset,"
                     " gpupoolUI.largest.size]")
        red = b.eval(RED_JS)
        check(got == want and red > 0, "fixture: steady's outline is on the block blocks.json names"
              " (%s, %s; %d red px)" % (got, want, red))
    set_control(b, "map-filter", "small")  # the 2 MiB segment only: the largest is in another
    red = b.eval(RED_JS)
    info = b.eval("document.getElementById('map-info').textContent")
    check(red == 0 and not b.eval("gpupoolUI.largest"),
          "fixture: filter 'small pool': no outline on another block than the largest (%d red px)" % red)
    check("filter hides" in info and "sort or filter for others" not in info
          and "1 shown by the filter" in info,
          "fixture: filter 'small pool': the caption says the filter hides the largest free block"
          " and how many segments it shows (%r)" % info)
    set_control(b, "map-filter", "all")


def check_narrow(b, base, out):
    """At a 400 px viewport: no sideways scroll of the page, the tooltip inside."""
    b.send("Emulation.setDeviceMetricsOverride",
           {"width": 400, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    b.send("Page.navigate", {"url": base + "/ui?pool=steady"})
    b.wait_for("gpupoolUI.layout.length === 4 && document.querySelectorAll('.chart canvas').length >= 5"
               " && document.querySelector('.oom-card') !== null", 30,
               "narrow: map, charts and the OOM card drawn at 400 px")
    b.pump(1.5)
    w = b.eval("[document.documentElement.scrollWidth, window.innerWidth]")
    check(w[0] <= w[1], "narrow: the page does not scroll sideways at 400 px (scrollWidth %d, "
          "innerWidth %d)" % tuple(w))
    # Hover the right end of the widest bar: the tooltip stays in the viewport.
    at = b.eval("(() => { const r = gpupoolUI.layout.reduce((a, l) => l.width > a.width ? l : a);"
                " const c = document.getElementById('map'); c.scrollIntoView();"
                " const box = c.getBoundingClientRect();"
                " return [box.left + r.x + r.width - 2, box.top + r.y + r.h / 2]; })()")
    b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": at[0], "y": at[1]})
    ok = b.wait_for("!document.getElementById('tip').hidden", 10, "narrow: hover shows the tooltip")
    if ok:
        r = b.eval("(() => { const r = document.getElementById('tip').getBoundingClientRect();"
                   " return [r.left, r.right, r.top, r.bottom, document.documentElement.clientWidth,"
                   " document.documentElement.clientHeight]; })()")
        check(r[0] >= 0 and r[1] <= r[4] and r[2] >= 0 and r[3] <= r[5],
              "narrow: the tooltip lies inside the viewport (left %.0f right %.0f top %.0f bottom %.0f"
              " of %d x %d)" % tuple(r))
    shot = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
    with open(os.path.join(out, "ui-fixture-narrow.png"), "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    b.send("Emulation.setDeviceMetricsOverride",
           {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})


def start_process(cmd, env, port_re):
    # Unbuffered, so that select() sees every line not yet read.
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, bufsize=0)
    deadline = time.monotonic() + 60
    out = []
    while time.monotonic() < deadline:
        if not select.select([p.stdout], [], [], deadline - time.monotonic())[0]:
            break
        line = p.stdout.readline().decode(errors="replace")
        if not line:
            break
        out.append(line)
        m = re.search(port_re, line)
        if m:
            return p, int(m.group(1))
    p.kill()
    raise RuntimeError("%s did not print its port:\n%s" % (cmd[0], "".join(out)))


def part_demo(args, profile):
    env = dict(os.environ, GPUPOOL_CONF="backend:host",
               GPUPOOL_AGENT_CONF="listen:127.0.0.1:0,sample_interval_ms:250")
    demo, port = start_process([args.demo, "--quiet", "--seconds", "300"],
                               env, r"metrics\s+http://[^:]+:(\d+)/metrics")
    base = "http://127.0.0.1:%d" % port
    b = Browser(args.chromium, profile)
    try:
        b.open_page()
        b.send("Page.navigate", {"url": base + "/ui?pool=bfc"})
        b.wait_for("document.querySelectorAll('#pools tbody tr[data-pool]').length >= 4", 30,
                   "demo: pools listed")
        names = b.eval("[...document.querySelectorAll('#pools tbody tr')].map(r => r.dataset.pool)")
        check(all(n in names for n in ("bfc", "round", "naive", "bfc-expandable")),
              "demo: pools bfc, round, naive, bfc-expandable listed (%s)" % names)
        b.wait_for("gpupoolUI.layout.length > 0", 30, "demo: block map drawn")
        check_bars(b, "demo")
        # A value on the page against /metrics at the same time: the device
        # allocations of pool bfc only grow, so the page's value (fetched
        # between the two scrapes) lies between them.
        before = metric(base, "gpupool_allocations_total", "bfc", 'source="device"')
        n0 = b.eval("gpupoolUI.stateUpdates")
        b.wait_for("gpupoolUI.stateUpdates >= %d" % (n0 + 2), 20, "demo: page polled again")
        shown = b.eval("Number(document.querySelector('#pools tr[data-pool=\"bfc\"] "
                       "td[data-k=\"from_device\"]').dataset.v)")
        after = metric(base, "gpupool_allocations_total", "bfc", 'source="device"')
        check(before is not None and before <= shown <= after,
              "demo: from-device allocations on the page (%s) within /metrics' %s..%s"
              % (shown, before, after))
        b.wait_for("document.querySelectorAll('.chart canvas').length >= 4", 10, "demo: charts drawn")
        b.pump(1.5)
        b.screenshot(os.path.join(args.out, "ui-demo.png"))
        errs = b.errors()
        check(not errs, "demo: no console errors" + ("" if not errs else ": " + "; ".join(errs)))
    finally:
        b.close()
        demo.terminate()
        demo.wait(timeout=30)


def part_fixture(args, profile):
    env = dict(os.environ, GPUPOOL_AGENT_CONF="listen:127.0.0.1:0,sample_interval_ms:250")
    env.pop("GPUPOOL_CONF", None)
    fx, port = start_process([args.fixture, str(args.blocks)], env, r"^port (\d+)")
    base = "http://127.0.0.1:%d" % port
    b = Browser(args.chromium, profile)
    try:
        b.open_page()
        b.send("Page.navigate", {"url": base + "/ui?pool=frag"})
        ok = b.wait_for("gpupoolUI.mapBlocks >= %d" % args.blocks, 120,
                        "fixture: map of %d blocks drawn" % args.blocks)
        if ok:
            ms = b.eval("gpupoolUI.mapDrawnAt")
            print("time from navigation to a drawn block map of %d blocks: %.0f ms"
                  " (drawing it: %.0f ms)" % (b.eval("gpupoolUI.mapBlocks"), ms,
                                             b.eval("gpupoolUI.lastDrawMs")), flush=True)
        b.wait_for("document.querySelectorAll('#pools tbody tr[data-pool]').length >= 10", 30,
                   "fixture: pools listed")
        # The table is updated in place: a cell the user selected stays, and selected.
        picked = b.eval("(() => { const td = document.querySelector('#pools tr[data-pool=\"frag\"]"
                        " td[data-k=\"reserved\"]'); window.keptCell = td; const r = document.createRange();"
                        " r.selectNodeContents(td); getSelection().removeAllRanges(); getSelection().addRange(r);"
                        " return getSelection().toString(); })()")
        n0 = b.eval("gpupoolUI.stateUpdates")
        b.wait_for("gpupoolUI.stateUpdates >= %d" % (n0 + 2), 20, "fixture: page polled twice more")
        kept = b.eval("[document.contains(window.keptCell), getSelection().toString()]")
        check(picked != "" and kept == [True, picked],
              "fixture: a selected cell of the pools table stays, selected, across polls (%r, %r)"
              % (picked, kept))
        # The pools were made within the window: every device allocation counts.
        for pool in ("steady", "frag", "expandable"):
            want = metric(base, "gpupool_allocations_total", pool, 'source="device"')
            shown = b.eval("(() => { const id = document.querySelector('#pools tr[data-pool=\"%s\"]')"
                           ".dataset.poolId; const h = document.querySelector('.chart[data-key=\"pool-'"
                           " + id + '\"] h3'); const m = h && / (\\d+) from device in window/"
                           ".exec(h.textContent); return m ? Number(m[1]) : null; })()" % pool)
            check(want is not None and shown == want,
                  "fixture: %s's chart counts %s from device in window == /metrics %s"
                  % (pool, shown, want))
        # The y axis' top label: a pool that never held a byte has none (its
        # lines lie on the 0), a pool with bytes has its maximum there.
        for pool, labelled in (("empty", False), ("steady", True)):
            inked = b.eval("(() => { const id = document.querySelector('#pools tr[data-pool=\"%s\"]')"
                           ".dataset.poolId; const cv = document.querySelector('.chart[data-key=\"pool-'"
                           " + id + '\"] canvas'); const d = cv.getContext('2d').getImageData(0, 0, 52, 12)"
                           ".data; let n = 0; for (let i = 0; i < d.length; i += 4)"
                           " if (d[i + 3] > 128 && d[i] < 160) n++; return n; })()" % pool)
            check((inked > 0) == labelled, "fixture: %s's chart: %s (%d px inked there)"
                  % (pool, "a top label on its y axis" if labelled else "no top label on its y axis",
                     inked))
        bidi = b.eval(BIDI_JS)
        check(bidi["n"] >= 3 and not bidi["bad"],
              "fixture: pool rtl<U+202E>name isolated in its %d places (not: %s)"
              % (bidi["n"], bidi["bad"]))
        check(b.eval("typeof gpupoolUI.fmtBytes === 'function' && gpupoolUI.fmtBytes(2 ** 50)")
              == "1.00 PiB", "fixture: fmtBytes(2^50) is 1.00 PiB")
        when = time.time() - 90
        got = b.eval("gpupoolUI.adviceView({computed_at: %r, age_s: 90, pools: []})"
                     ".querySelector('td').textContent" % when)
        check("%.2f" % when not in got and "90.0 s ago" in got,
              "advice view: computed_at shown as a time and its age (%r)" % got)
        for pool in ("steady", "frag", "empty", "expandable"):
            want = metric(base, "gpupool_reserved_bytes", pool)
            shown = b.eval("(() => { const c = document.querySelector('#pools tr[data-pool=\"%s\"] "
                           "td[data-k=\"reserved\"]'); return c ? Number(c.dataset.v) : null; })()"
                           % pool)
            check(want is not None and shown == want,
                  "fixture: %s reserved on the page %s == /metrics %s" % (pool, shown, want))
            # The cap: expandable's (memory_fraction:0.5) as /metrics gives it, "—" without one.
            cap = metric(base, "gpupool_reserved_limit_bytes", pool)
            cell = b.eval("(() => { const c = document.querySelector('#pools tr[data-pool=\"%s\"] "
                          "td[data-k=\"limit\"]'); return c ? [c.dataset.v, c.textContent] : null; })()"
                          % pool)
            check(cell is not None and (cell == ["null", "—"] if cap is None else
                                        (float(cell[0]) == cap and cell[1] == "2.00 GiB")),
                  "fixture: %s cap on the page %r, /metrics %s" % (pool, cell, cap))
            if pool == "expandable":
                check(cap == 2 << 30, "fixture: expandable's cap is half its 4 GiB (%s)" % cap)
        b.screenshot(os.path.join(args.out, "ui-fixture-frag.png"))
        check_oom(b, base)
        check_oom_bidi(b, args.out)
        check_advice_view(b)
        # steady: bars to scale, a pending block, a free block marked largest.
        b.eval("(() => { const s = document.getElementById('map-pool');"
               " s.value = document.querySelector('#pools tr[data-pool=\"steady\"]').dataset.poolId;"
               " s.dispatchEvent(new Event('change')); })()")
        b.wait_for("gpupoolUI.layout.length === 4", 20, "fixture: steady's 4 segments drawn")
        check_bars(b, "fixture steady")
        check_largest(b, base)
        check_tags(b, base)
        # Hover over the start of the 20 MiB segment: the block pending on
        # another stream (freed after record_stream), with its size and age.
        at = b.eval("(() => { const r = gpupoolUI.layout.find(l => l.size === 20 << 20);"
                    " const c = document.getElementById('map');"
                    " c.scrollIntoView(); const box = c.getBoundingClientRect();"
                    " return [box.left + r.x + 5, box.top + r.y + r.h / 2]; })()")
        b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": at[0], "y": at[1]})
        b.wait_for("(() => { const t = document.getElementById('tip');"
                   " return !t.hidden && t.textContent.includes('pending on another stream')"
                   " && t.textContent.includes('5.00 MiB') && /age\\s+[0-9.]+ (ms|s|min)/.test(t.textContent)"
                   " && /tag\\s+\u2068?activations/.test(t.textContent)"
                   " && /requested\\s+5\\.00 MiB/.test(t.textContent); })()",
                   10, "fixture: hover shows the pending block, its size, requested size, age and tag")
        b.screenshot(os.path.join(args.out, "ui-fixture-steady.png"))
        for pool, text in (("empty", "an empty pool"), ("expandable", "1 segments")):
            b.eval("(() => { const s = document.getElementById('map-pool');"
                   " s.value = document.querySelector('#pools tr[data-pool=\"%s\"]').dataset.poolId;"
                   " s.dispatchEvent(new Event('change')); })()" % pool)
            b.wait_for("document.getElementById('map-info').textContent.includes(%s)"
                       % json.dumps(text), 20, "fixture: %s pool's map says %r" % (pool, text))
            if pool == "expandable":  # its free blocks are unmapped: no free block to mark
                red = b.eval(RED_JS)
                info = b.eval("document.getElementById('map-info').textContent")
                check(red == 0 and "largest free 0 B" in info,
                      "fixture: expandable: no outline on an unmapped block (%d red px; %r)" % (red, info))
        unmapped = b.eval("(() => { const cv = document.getElementById('map');"
                          " const d = cv.getContext('2d').getImageData(0, 9, cv.width, 1).data;"
                          " let n = 0; for (let i = 0; i < d.length; i += 4)"
                          " if (d[i] === 0xe4 && d[i+1] === 0xe4 && d[i+2] === 0xe4) n++; return n; })()")
        check(unmapped > 0, "fixture: unmapped pages drawn in the expandable pool (%d px)" % unmapped)
        # The caption names a pool by its label, as ?pool= does.
        b.send("Page.navigate", {"url": base + "/ui?pool=same%233"})
        b.wait_for("document.getElementById('map-info').textContent.startsWith("
                   "'same#3: no segments')", 20, "fixture: ?pool=same%233's caption is 'same#3: ...'")
        # One label on two devices: ?device= tells them apart, alone or with ?pool=.
        for query, segments, device in (("pool=twin&device=1", 2, 1), ("pool=twin", 1, 0),
                                         ("device=1", 2, 1)):
            b.send("Page.navigate", {"url": base + "/ui?" + query})
            b.wait_for("gpupoolUI.layout.length === %d && (() => { const s = document.getElementById("
                       "'map-pool'); return s.selectedOptions.length === 1 && s.selectedOptions[0]"
                       ".textContent.endsWith('twin\u2069 (device %d)'); })()" % (segments, device),
                       20, "fixture: /ui?%s maps twin on device %d (%d segments)"
                       % (query, device, segments))
            if query == "pool=twin&device=1":
                b.screenshot(os.path.join(args.out, "ui-fixture-twin-device1.png"))
        b.send("Page.navigate", {"url": base + "/ui?pool=twin&device=7"})
        b.wait_for("document.getElementById('map-info').textContent.includes("
                   "'waiting for pool twin on device 7')", 20,
                   "fixture: ?pool=twin&device=7 says it waits for pool twin on device 7")
        b.send("Page.navigate", {"url": base + "/ui?pool=nosuch"})
        b.wait_for("document.getElementById('map-info').textContent.includes('waiting for pool nosuch')",
                   20, "fixture: ?pool=nosuch says it waits for pool nosuch")
        # Meanwhile the pool list shows a placeholder, not the first pool as if chosen, so
        # that choosing that pool (steady) is a change and maps it.
        chosen = b.eval("(() => { const o = document.getElementById('map-pool').selectedOptions[0];"
                        " return o ? [o.value, o.textContent] : null; })()")
        check(chosen is not None and chosen[0] == "" and "waiting for pool" in chosen[1],
              "fixture: ?pool=nosuch: the pool list shows a placeholder (%r)" % chosen)
        b.eval(CHOOSE_JS % json.dumps("steady"))
        b.wait_for("document.getElementById('map-info').textContent.startsWith('steady: ')", 10,
                   "fixture: ?pool=nosuch, then choosing steady in the list maps it")
        # ?pool= follows its label: pools same, same, same and same#2 are labelled same,
        # same#2, same#3 and same#2#2; once the three named same are destroyed, the pool
        # named same#2 is labelled same#2, and the map shows it.
        b.send("Page.navigate", {"url": base + "/ui?pool=same%232"})
        b.wait_for("document.getElementById('map-info').textContent.startsWith('same#2: no segments')",
                   20, "fixture: ?pool=same%232 maps same#2")
        before = b.eval("document.getElementById('map-pool').value")
        fx.stdin.write(b"destroy same\n")
        fx.stdin.flush()
        b.wait_for("(() => { const st = gpupoolUI.lastState;"
                   " const p = st && st.pools.find(q => q.live && q.label === 'same#2');"
                   " return !!p && String(p.id) !== %s"
                   " && document.getElementById('map-pool').value === String(p.id)"
                   " && document.getElementById('map-info').textContent.startsWith('same#2: no segments');"
                   " })()" % json.dumps(before), 20,
                   "fixture: ?pool=same%232 follows the label to the pool that has it now")
        check_narrow(b, base, args.out)
        b.send("Page.navigate", {"url": base + "/ui?pool=frag"})
        b.wait_for("document.querySelectorAll('.chart canvas').length >= 5", 20,
                   "fixture: charts drawn again")
        # A pool that disappears.
        fx.stdin.write(b"destroy steady\n")
        fx.stdin.flush()
        b.wait_for("(() => { const r = document.querySelector('#pools tr[data-pool=\"steady\"]');"
                   " return r && r.classList.contains('gone'); })()", 20,
                   "fixture: destroyed pool shown as gone")
        # Its lines end at its last sample, not at now.
        ok = b.wait_for(CHART_GAP_JS % json.dumps("steady"), 60,
                        "fixture: steady's last sample lies 5 % of the span before now")
        if ok:
            sid = b.eval("document.querySelector('#pools tr[data-pool=\"steady\"]').dataset.poolId")
            end = b.eval(CHART_END_JS % sid)
            check(0 < end["right"] < end["width"] - 14,
                  "fixture: the gone pool's lines end before now (last coloured column %d, plot"
                  " ends at %d)" % (end["right"], end["width"] - 5))
        errs = b.errors()
        check(not errs, "fixture: no console errors" + ("" if not errs else ": " + "; ".join(errs)))
        # A hung agent (stopped, as in a debugger): its answers do not come, the page
        # says so after its timeout, and is live again once the agent runs again.
        os.kill(fx.pid, signal.SIGSTOP)
        try:
            ok = b.wait_for("document.getElementById('status').textContent.includes('agent unreachable')",
                            25, "fixture: a hung (SIGSTOPped) agent shows 'agent unreachable'")
            if ok:
                got = status(b)
                check("no answer in 5 s" in got[0] and "down" in got[1],
                      "fixture: the status says there was no answer (%r)" % got)
        finally:
            os.kill(fx.pid, signal.SIGCONT)
        b.wait_for("document.getElementById('status').textContent.startsWith('live')", 30,
                   "fixture: live again once the agent runs again")
        # A stopped agent: the page says so and retries; no script error
        # (the refused fetches are network log entries, expected here).
        b.eval(FETCH_LOG_JS)
        fx.stdin.write(b"quit\n")
        fx.stdin.flush()
        fx.wait(timeout=30)
        b.wait_for("document.getElementById('status').textContent.includes('agent unreachable')", 20,
                   "fixture: stopped agent shows 'agent unreachable'")
        # The seconds to the next try count down (the backoff's 4 s wait or a
        # longer one: 3 s or more left, then read again 1.5 s later).
        left = "Number((/retrying in (\\d+) s/.exec(document.getElementById('status').textContent)" \
               " || [0, -1])[1])"
        b.wait_for(left + " >= 3", 30, "fixture: the status says 'retrying in N s' with N >= 3")
        first = b.eval(left)
        time.sleep(1.5)
        later = b.eval(left)
        check(0 <= later < first, "fixture: 'retrying in N s' counts down (%s s, then %s s 1.5 s later)"
              % (first, later))
        # The block map's poll backs off too (every 2 s while the agent answers; 4, 8, 10 s
        # between tries while it does not): at most 4 tries in 16 s.
        t0 = b.eval("performance.now()")
        b.pump(16)
        tries = b.eval("window.fetchLog.filter(f => f[0] >= %f && f[1].includes('/ui/blocks.json'))"
                       ".length" % t0)
        check(tries <= 4, "fixture: the block map's poll backs off while the agent is down"
              " (%d tries in 16 s)" % tries)
        exc = [e for e in b.errors() if not e.startswith("log: ")]
        check(not exc, "fixture: no script error after the agent stopped" +
              ("" if not exc else ": " + "; ".join(exc)))
        b.screenshot(os.path.join(args.out, "ui-fixture-stopped.png"))
    finally:
        b.close()
        if fx.poll() is None:
            fx.kill()
            fx.wait()


def part_no_pool(args, profile):
    env = dict(os.environ, GPUPOOL_AGENT_CONF="listen:127.0.0.1:0,sample_interval_ms:250")
    env.pop("GPUPOOL_CONF", None)
    fx, port = start_process([args.fixture, "empty"], env, r"^port (\d+)")
    b = Browser(args.chromium, profile)
    try:
        b.open_page()
        b.send("Page.navigate", {"url": "http://127.0.0.1:%d/ui" % port})
        b.wait_for("document.getElementById('map-info').textContent.includes('No live pool')", 20,
                   "no pool: the block map says there is no pool")
        errs = b.errors()
        check(not errs, "no pool: no console errors" + ("" if not errs else ": " + "; ".join(errs)))
    finally:
        b.close()
        fx.stdin.write(b"quit\n")
        fx.stdin.flush()
        fx.wait(timeout=30)


def part_rebinding(args, profile):
    """DNS rebinding, as a browser does it: Chromium resolves attacker.example
    to 127.0.0.1 (--host-resolver-rules), and a page of that name asks the
    loopback agent for /ui and /snapshot. The agent refuses its Host
    (agent/host_guard.h); the same page by localhost renders; allowed_hosts
    names it, and it renders by that name too."""
    env = dict(os.environ)
    env.pop("GPUPOOL_CONF", None)
    rules = ["--host-resolver-rules=MAP attacker.example 127.0.0.1"]
    for allowed in ("", "attacker.example"):
        conf = "listen:127.0.0.1:0,sample_interval_ms:250"
        env["GPUPOOL_AGENT_CONF"] = conf + (",allowed_hosts:" + allowed if allowed else "")
        fx, port = start_process([args.fixture, "empty"], env, r"^port (\d+)")
        b = Browser(args.chromium, profile, rules)
        what = "rebinding (allowed_hosts:%s)" % allowed if allowed else "rebinding"
        try:
            b.open_page()
            b.send("Page.navigate", {"url": "http://attacker.example:%d/ui" % port})
            if allowed:
                b.wait_for("document.getElementById('map-info').textContent.includes('No live pool')",
                           20, what + ": the page of the allowed name renders")
            else:
                b.wait_for("document.body && document.body.innerText.includes('forbidden')", 20,
                           what + ": the page of the rebound name gets the refusal")
                text = b.eval("document.body.innerText")
                check("allowed_hosts" in text and typeof_ui_missing(b),
                      what + ": the refusal says what to set, and no page script ran (%r)"
                      % text[:120])
                snap = b.eval("fetch('/snapshot').then(r => r.status + ' ' + r.statusText)")
                check(snap.startswith("403"), what + ": /snapshot from that page: %s" % snap)
                b.screenshot(os.path.join(args.out, "ui-rebinding-refused.png"))
                b.send("Page.navigate", {"url": "http://localhost:%d/ui" % port})
                b.wait_for("document.getElementById('map-info').textContent.includes('No live pool')",
                           20, what + ": the same page by localhost renders")
        finally:
            b.close()
            fx.stdin.write(b"quit\n")
            fx.stdin.flush()
            fx.wait(timeout=30)


def typeof_ui_missing(b):
    return b.eval("typeof gpupoolUI === 'undefined'")


def bcrypt(password):
    """A bcrypt hash of password (libcrypt's, as the agent checks it)."""
    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", 4, None, 0)
    h = lib.crypt(password.encode(), salt) if salt else None
    if not h or not h.startswith(b"$2b$"):
        raise RuntimeError("libcrypt made no bcrypt hash")
    return h.decode()


def write_web_config(path, text):
    """Replaces the agent's web configuration at once (never an empty file)."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def part_auth(args, profile):
    """Basic auth (web_config): the page opened with the credentials in its
    URL polls with them; a rate limit's 429 says "rate-limited", and the
    agent refusing the credentials says so (reload to log in); neither says
    "agent unreachable"."""
    conf_dir = tempfile.mkdtemp(prefix="gpupool-ui-web.")
    web = os.path.join(conf_dir, "web.yml")
    good = "basic_auth_users:\n  gp: '%s'\n" % bcrypt("pw1")
    write_web_config(web, good)
    env = dict(os.environ, GPUPOOL_AGENT_CONF="listen:127.0.0.1:0,sample_interval_ms:250,web_config:" + web)
    env.pop("GPUPOOL_CONF", None)
    fx, port = start_process([args.fixture, "100"], env, r"^port (\d+)")
    b = Browser(args.chromium, profile)
    try:
        b.open_page()
        b.send("Page.navigate", {"url": "http://gp:pw1@127.0.0.1:%d/ui?pool=steady" % port})
        b.wait_for("document.getElementById('status').textContent.startsWith('live')"
                   " && gpupoolUI.layout.length === 4", 20,
                   "auth: opened as http://gp:pw1@host/ui, the page polls (live, map drawn)")
        # What the status says from now on.
        b.eval("(() => { window.statusSeen = []; const s = document.getElementById('status');"
               " new MutationObserver(() => window.statusSeen.push(s.textContent))"
               ".observe(s, {childList: true, characterData: true, subtree: true}); })()")
        # One request every 2 s: about every other state poll is refused.
        write_web_config(web, good + "rate_limit:\n  interval: 2s\n  burst: 1\n")
        ok = b.wait_for("document.getElementById('status').textContent.startsWith("
                        "'rate-limited by the agent (HTTP 429)')", 20,
                        "auth: a rate-limited agent's 429 says 'rate-limited'")
        if ok:
            check("stale" in status(b)[1], "auth: rate-limited: the status' style is 'stale' (%r)"
                  % (status(b),))
        # The credentials refused: a browser asks for others (here: none given).
        b.cancel_logins()
        write_web_config(web, "basic_auth_users:\n  gp: '%s'\n" % bcrypt("pw2"))
        ok = b.wait_for("document.getElementById('status').textContent.includes("
                        "'the agent refused the credentials (HTTP 401): reload the page to log in')", 20,
                        "auth: refused credentials say so")
        seen = b.eval("window.statusSeen")
        bad = [t for t in seen if "unreachable" in t]
        check(not bad, "auth: never 'agent unreachable' while the agent answers (%s)" % bad[:3])
        b.screenshot(os.path.join(args.out, "ui-auth-refused.png"))
        exc = [e for e in b.errors() if not e.startswith("log: ")]
        check(not exc, "auth: no script error" + ("" if not exc else ": " + "; ".join(exc)))
    finally:
        b.close()
        fx.stdin.write(b"quit\n")
        fx.stdin.flush()
        fx.wait(timeout=30)
        shutil.rmtree(conf_dir, ignore_errors=True)


def part_restart(args, profile):
    """The agent restarted on its port (another process: pool ids and OOM
    ids mean other things): the page forgets what it kept of the process
    before. Fixture A, then fixture B: OOM report 1 is fetched again; then
    the demo, whose pools 1-4 are other pools than B's 1-4: the map's pool
    list names the demo's pools, and the map shows the pool chosen there."""
    env = dict(os.environ, GPUPOOL_AGENT_CONF="listen:127.0.0.1:0,sample_interval_ms:250")
    env.pop("GPUPOOL_CONF", None)
    fx, port = start_process([args.fixture, "100"], env, r"^port (\d+)")
    env["GPUPOOL_AGENT_CONF"] = "listen:127.0.0.1:%d,sample_interval_ms:250" % port
    base = "http://127.0.0.1:%d" % port
    b = Browser(args.chromium, profile)
    procs = [fx]
    try:
        b.open_page()
        b.send("Page.navigate", {"url": base + "/ui"})
        b.wait_for("document.querySelector('.oom-card .remedies li') !== null"
                   " && gpupoolUI.layout.length > 0", 30, "restart: fixture A's OOM card and map shown")
        b.eval(CHOOSE_JS % json.dumps("frag"))
        b.eval(FETCH_LOG_JS)
        # Fixture B on the same port.
        fx.stdin.write(b"quit\n")
        fx.stdin.flush()
        fx.wait(timeout=30)
        t0 = b.eval("performance.now()")
        fx, _ = start_process([args.fixture, "100"], env, r"^port (\d+)")
        procs.append(fx)
        b.wait_for("document.getElementById('host').textContent.includes('pid %d ')"
                   " && document.getElementById('status').textContent.startsWith('live')" % fx.pid, 30,
                   "restart: the page polls fixture B (pid %d)" % fx.pid)
        b.wait_for("window.fetchLog.some(f => f[0] >= %f && /\\/oom\\/1$/.test(f[1]))" % t0, 20,
                   "restart: OOM report 1 of fixture B fetched, not the one of A kept")
        b.wait_for("document.getElementById('map-info').textContent.startsWith('frag: ')", 20,
                   "restart: fixture B's pool frag mapped, as A's was")
        # B keeps pools 1-4 (steady, frag, empty, expandable), then the demo (pools 1-4:
        # bfc, round, naive, bfc-expandable) takes the port.
        for name in ("oom", "same", "same#2", "rtl\u202ename", "twin"):
            fx.stdin.write(("destroy %s\n" % name).encode())
        fx.stdin.flush()
        b.wait_for("document.querySelectorAll('#map-pool option:not(.placeholder)').length === 4", 20,
                   "restart: fixture B lists 4 live pools")
        fx.stdin.write(b"quit\n")
        fx.stdin.flush()
        fx.wait(timeout=30)
        denv = dict(env, GPUPOOL_CONF="backend:host")
        demo, _ = start_process([args.demo, "--quiet", "--seconds", "300"], denv,
                                r"metrics\s+http://[^:]+:(\d+)/metrics")
        procs.append(demo)
        ok = b.wait_for("document.getElementById('host').textContent.includes('pid %d ')"
                        " && document.querySelectorAll('#pools tbody tr[data-pool=\"bfc\"]').length === 1"
                        % demo.pid, 30, "restart: the page polls the demo (pid %d)" % demo.pid)
        if ok:
            b.pump(3)  # a blocks poll or two
            got = b.eval("""(() => {
              const st = gpupoolUI.lastState, s = document.getElementById('map-pool');
              const wrong = [...s.options].filter(o => o.value !== '').filter(o => {
                const p = st.pools.find(q => String(q.id) === o.value);
                return !p || o.textContent !== '\\u2068' + p.label + '\\u2069 (device ' + p.device + ')';
              }).map(o => o.textContent);
              const o = s.selectedOptions[0];
              return {wrong: wrong, chosen: o ? o.textContent : null,
                      caption: document.getElementById('map-info').textContent};
            })()""")
            check(not got["wrong"], "restart: the map's pool list names the demo's pools (not: %s)"
                  % got["wrong"])
            label = re.sub(r"^\u2068(.*)\u2069 \(device \d+\)$", r"\1", got["chosen"] or "")
            check(label != "" and got["caption"].startswith(label + ": "),
                  "restart: the map shows the pool its list names (%r; %r)"
                  % (got["chosen"], got["caption"][:60]))
        b.screenshot(os.path.join(args.out, "ui-restart-demo.png"))
        exc = [e for e in b.errors() if not e.startswith("log: ")]
        check(not exc, "restart: no script error" + ("" if not exc else ": " + "; ".join(exc)))
    finally:
        b.close()
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--blocks", type=int, default=100000)
    ap.add_argument("--parts", default="demo,fixture,no_pool,rebinding,auth,restart",
                    help="the parts to run, comma-separated (all by default)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    parts = {"demo": part_demo, "fixture": part_fixture, "no_pool": part_no_pool,
             "rebinding": part_rebinding,
             "auth": part_auth, "restart": part_restart}
    for name in args.parts.split(","):
        part = parts[name]
        profile = tempfile.mkdtemp(prefix="gpupool-ui-chromium.")
        try:
            part(args, profile)
        except Exception as e:  # a step that cannot run is a failure, never a pass
            check(False, "%s: %s" % (part.__name__, e))
        finally:
            shutil.rmtree(profile, ignore_errors=True)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
