#!/usr/bin/env python3
"""PyTorch as a real client of gpupool, on a GPU.

Trains two small models on synthetic data (no downloads): a transformer
language model with a different sequence length every step, and a CNN with
varying batch sizes. Each model is trained twice, in separate processes (the
allocator can only be changed before the first CUDA allocation): once with
PyTorch's own caching allocator and once with gpupool plugged in through
CUDAPluggableAllocator. Same seed, deterministic settings. Then compares the
losses step by step, reports steps/s, and leaves one allocation trace per run
(bench/trace_file.h format) for bench_replay:

- gpupool runs: GPUPOOL_RECORD (torch/torch_allocator.c) writes the trace, and
  the agent (GPUPOOL_AGENT_CONF, ephemeral port) is scraped at /metrics during
  the run;
- PyTorch runs: torch.cuda.memory._record_memory_history + _snapshot, whose
  alloc / free_requested entries are written in the same format.

    torch_train.py --lib build/release/libgpupool.so --outdir DIR [--lm-steps 300] [--cnn-steps 200]

Timing rounds (--timing-rounds, --timing-only) train again with nothing
recorded and report steps/s per configuration; there the agent is scraped
every 0.5 s from this (the parent) process, as Prometheus would scrape it,
so that no scraping thread competes with the training loop for the GIL.

Exit status 0 when every run finished and the losses match (within --rtol).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

MODELS = ("lm", "cnn")
ALLOCATORS = ("torch", "gpupool")
WARMUP_STEPS = 10  # not counted in steps/s


# ---------------------------------------------------------------- the child


def make_lm(torch, nn, vocab, d, heads, layers):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, mask):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            # Attention written out (no fused kernel): deterministic backward.
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // heads))
            att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    class LM(nn.Module):
        def __init__(self, max_len):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer(
                "mask", torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1))

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x, self.mask)
            return self.head(self.ln(x))

    return LM


def lm_batches(torch, steps, vocab, seed):
    """Sequences of an affine recurrence x[t+1] = (a x[t] + c) mod vocab, a and
    c drawn from a few choices: learnable, so the loss falls."""
    g = torch.Generator().manual_seed(seed)
    lengths = [64, 96, 128, 192, 256, 384, 512]
    mults = torch.tensor([3, 5, 7, 11])
    for _ in range(steps):
        t = lengths[int(torch.randint(len(lengths), (1,), generator=g))]
        b = 16
        a = mults[torch.randint(len(mults), (b, 1), generator=g)]
        c = torch.randint(vocab, (b, 1), generator=g)
        x = torch.empty(b, t + 1, dtype=torch.long)
        x[:, 0] = torch.randint(vocab, (b,), generator=g)
        for i in range(t):
            x[:, i + 1] = (a[:, 0] * x[:, i] + c[:, 0]) % vocab
        yield x[:, :-1], x[:, 1:]


def make_cnn(nn, classes):
    """Strided convolutions and a global mean instead of pooling layers, whose
    CUDA backward passes use atomics and are not deterministic."""

    class GlobalMean(nn.Module):
        def forward(self, x):
            return x.mean(dim=(2, 3))

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU())

    return nn.Sequential(block(3, 32, 1), block(32, 64, 2), block(64, 128, 2), GlobalMean(),
                         nn.Linear(128, classes))


def cnn_batches(torch, steps, classes, seed):
    """Noise plus a class-dependent pattern, batch sizes varying."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(classes, 3, 32, 32, generator=g)
    sizes = [32, 48, 64, 96]
    for _ in range(steps):
        b = sizes[int(torch.randint(len(sizes), (1,), generator=g))]
        y = torch.randint(classes, (b,), generator=g)
        x = patterns[y] + 0.8 * torch.randn(b, 3, 32, 32, generator=g)
        yield x, y


class Scraper(threading.Thread):
    """Polls the agent's /metrics during a gpupool run."""

    WANTED = ("gpupool_reserved_bytes", "gpupool_allocated_bytes", "gpupool_peak_reserved_bytes",
              "gpupool_peak_allocated_bytes", "gpupool_allocations_total", "gpupool_segments",
              "gpupool_frees_total", "gpupool_ooms_total", "gpupool_pages_moved_total",
              "gpupool_device_syncs_total", "gpupool_device_allocs_total",
              "gpupool_device_call_seconds_sum")
    LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')

    def __init__(self, port_fn, interval):
        super().__init__(daemon=True)
        self.port_fn, self.interval = port_fn, interval
        self.ok = self.failed = 0
        self.last, self.max_reserved, self.error = {}, 0.0, ""
        self.stop = threading.Event()

    def scrape(self):
        port = self.port_fn()
        if not port:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except Exception as e:  # the agent must never stop training; count and go on
            self.failed += 1
            self.error = str(e)
            return False
        sample = {}
        for line in text.splitlines():
            m = self.LINE.match(line)
            if not m or m.group(1) not in self.WANTED or 'pool="torch"' not in (m.group(2) or ""):
                continue
            key = m.group(1) + (re.sub(r'.*source="(\w+)".*', r'{source="\1"}', m.group(2))
                                if "source=" in m.group(2) else "")
            sample[key] = sample.get(key, 0.0) + float(m.group(3))
        self.ok += 1
        self.last = sample
        self.max_reserved = max(self.max_reserved, sample.get("gpupool_reserved_bytes", 0.0))
        return True

    def run(self):
        while not self.stop.wait(self.interval):
            self.scrape()


def write_snapshot_trace(torch, path):
    """PyTorch's allocation history as a bench_replay trace."""
    snap = torch.cuda.memory._snapshot()
    n = 0
    with open(path, "w") as f:
        f.write("# PyTorch caching allocator history (torch.cuda.memory._snapshot)\n")
        for dev_trace in snap.get("device_traces", []):
            for e in dev_trace:
                if e["action"] == "alloc":
                    f.write(f"a {e['addr']:#x} {e['size']} {e.get('stream', 0):#x}\n")
                    n += 1
                elif e["action"] == "free_requested":
                    f.write(f"f {e['addr']:#x}\n")
                    n += 1
    return n


def oom_check(torch):
    """A request no GPU can hold must raise (for gpupool: the C++ exception
    torch/torch_allocator.c throws), and the allocator must work after it."""
    try:
        torch.empty(1 << 44, dtype=torch.uint8, device="cuda")  # 16 TiB
        raised = None
    except RuntimeError as e:  # torch.OutOfMemoryError is one too
        raised = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    x = torch.ones(1024, device="cuda")
    return {"raised": raised, "works_after": float(x.sum()) == 1024.0}


class Turns:
    """Lockstep timing (the child's side): the runs being compared train at
    the same time, one step each in turn, passing a byte around a ring of
    pipes. Step k of every configuration then runs within a few tens of ms of
    the others', on a GPU no other run is using (each step ends in
    loss.item(), a synchronization): a slow stretch of a shared host hits all
    of them alike."""

    def __init__(self, a):
        self.inp, self.out = a.turn_in, a.turn_out
        os.write(a.ready, b"r")  # set up: the parent starts the ring when all are
        os.close(a.ready)

    def wait(self):
        if os.read(self.inp, 1) != b"t":  # a run before it in the ring died
            sys.exit("torch_train child: the lockstep ring closed")

    def give(self):
        try:
            os.write(self.out, b"t")
        except BrokenPipeError:  # the next run has finished: nobody waits
            pass


def child(a):
    begun = time.time()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if a.allocator == "gpupool":
        alloc = torch.cuda.memory.CUDAPluggableAllocator(a.lib, "gpupool_torch_malloc",
                                                         "gpupool_torch_free")
        torch.cuda.memory.change_current_allocator(alloc)
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")

    scraper = None
    if a.allocator == "gpupool":
        # Timing runs are scraped from the parent process, as Prometheus would
        # scrape: a thread here would take the GIL from the training loop.
        if os.environ.get("GPUPOOL_AGENT_CONF") and not a.plain:
            import ctypes
            lib = ctypes.CDLL(a.lib)  # the same handle PyTorch opened: dlopen shares it
            scraper = Scraper(lib.gpupool_agent_port, 0.5)
            scraper.start()
    elif not a.plain:
        torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                 max_entries=4_000_000)

    if a.model == "lm":
        vocab = 4096
        model = make_lm(torch, nn, vocab, d=256, heads=4, layers=4)(max_len=512).to(dev)
        batches = list(lm_batches(torch, a.steps, vocab, a.seed))  # made before timing
        loss_of = lambda out, y: F.cross_entropy(out.reshape(-1, vocab), y.reshape(-1))
    else:
        classes = 10
        model = make_cnn(nn, classes).to(dev)
        batches = list(cnn_batches(torch, a.steps, classes, a.seed))
        loss_of = F.cross_entropy
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    losses, step_s, t0 = [], [], None
    torch.cuda.synchronize()
    turns = Turns(a) if a.turn_in is not None else None
    looping = time.time()
    for step, (x, y) in enumerate(batches):
        if turns:
            turns.wait()
        if step == WARMUP_STEPS:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            timed = time.time()
        begin = time.perf_counter()
        x, y = x.to(dev), y.to(dev)
        loss = loss_of(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # synchronizes: same cost for both allocators
        if t0 is not None:
            step_s.append(time.perf_counter() - begin)
        if turns and step + 1 < len(batches):
            turns.give()
    torch.cuda.synchronize()
    # In lockstep the wall time includes the other runs' turns: only the
    # steps' own times count.
    seconds = sum(step_s) if turns else time.perf_counter() - t0
    oom = oom_check(torch)
    result = {"model": a.model, "allocator": a.allocator, "steps": len(losses),
              "timed_steps": len(losses) - WARMUP_STEPS, "seconds": seconds,
              "steps_per_s": (len(losses) - WARMUP_STEPS) / seconds, "losses": losses,
              "step_seconds": step_s,  # each timed step's wall time (ends at loss.item())
              "torch": torch.__version__, "device": torch.cuda.get_device_name(), "oom": oom,
              # wall-clock marks, for where a run's time outside the timed steps goes
              "marks": {"begun": begun, "looping": looping, "timed": timed, "ended": time.time()}}
    if scraper:
        scraper.stop.set()
        scraper.join()
        scraper.scrape()  # a final one, after the last step
        result["metrics"] = {"scrapes_ok": scraper.ok, "scrapes_failed": scraper.failed,
                             "last_error": scraper.error, "max_reserved_bytes": scraper.max_reserved,
                             "last": scraper.last}
    elif not a.plain:
        s = torch.cuda.memory_stats()
        result["memory_stats"] = {k: s.get(k) for k in (
            "reserved_bytes.all.peak", "allocated_bytes.all.peak", "requested_bytes.all.peak",
            "num_device_alloc", "num_device_free", "segment.all.allocated")}
        result["trace_events"] = write_snapshot_trace(torch, a.trace)
        torch.cuda.memory._record_memory_history(enabled=None)
    with open(a.out, "w") as f:
        json.dump(result, f)
    if turns:  # its own last work done (the OOM check too): the next run's turn
        turns.give()


# ---------------------------------------------------------------- the driver


def free_port():
    """A port nothing listens on now (the agent binds it moments later)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Launch:
    """One training process to start: its command, environment, files and
    (timing runs with the agent) the parent's scraper."""

    def __init__(self, a, model, allocator, plain_env=None, tag=""):
        """plain_env: None for the recorded comparison run; else a timing run
        with no recording, its environment updated with plain_env."""
        self.model, self.allocator, self.plain_env = model, allocator, plain_env
        tag = ("" if plain_env is None else "_timing") + tag
        self.out = os.path.join(a.outdir, f"{model}_{allocator}{tag}.json")
        self.trace = os.path.join(a.outdir, f"{model}_{allocator}{tag}.trace")
        for p in (self.out, self.trace):
            if os.path.exists(p):
                os.unlink(p)
        env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONHASHSEED="0",
                   PYTHONUNBUFFERED="1")
        if plain_env is not None:
            for k in ("GPUPOOL_AGENT_CONF", "GPUPOOL_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
                env.pop(k, None)
            env.update(plain_env)
        elif allocator == "gpupool":
            env["GPUPOOL_RECORD"] = self.trace
            env.setdefault("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0")
        self.outside = None
        conf = env.get("GPUPOOL_AGENT_CONF", "")
        if plain_env is not None and "listen:127.0.0.1:0" in conf:
            port = free_port()
            env.pop("LOCAL_RANK", None)  # the agent would add it to the port
            env["GPUPOOL_AGENT_CONF"] = conf.replace("listen:127.0.0.1:0",
                                                     f"listen:127.0.0.1:{port}")
            self.outside = Scraper(lambda: port, 0.5)
        self.env = env
        steps = a.lm_steps if model == "lm" else a.cnn_steps
        self.cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model", model,
                    "--allocator", allocator, "--lib", a.lib, "--steps", str(steps), "--seed",
                    str(a.seed), "--out", self.out, "--trace", self.trace] + \
            (["--plain"] if plain_env is not None else [])

    def finish(self, rc, log, started, exited):
        """Prints how the run went; its result, or None."""
        if self.outside:
            self.outside.stop.set()
            self.outside.join()
        env = self.plain_env
        print(f"--- {self.model} / {self.allocator}{' ' + str(env) if env else ''}: exit {rc} "
              f"after {exited - started:.1f} s"
              f"{phases(self.out, started, exited) if rc == 0 else ''}"
              + (f", /metrics scraped {self.outside.ok} times from outside"
                 if self.outside else ""))
        for line in log.strip().splitlines()[-15:]:
            print(f"    {line}")
        if rc != 0 or not os.path.exists(self.out):
            return None
        with open(self.out) as f:
            r = json.load(f)
        if self.outside and self.outside.last:
            r["outside_last"] = self.outside.last  # the last /metrics sample, after the last step
        if self.allocator == "gpupool" and os.path.exists(self.trace):
            with open(self.trace) as f:
                r["trace_events"] = sum(1 for _ in f)
        return r


def run_child(a, model, allocator, plain_env=None):
    """One training process, alone on the GPU."""
    run = Launch(a, model, allocator, plain_env)
    if run.outside:
        run.outside.start()
    t = time.time()
    try:
        p = subprocess.run(run.cmd, env=run.env, timeout=a.timeout, capture_output=True,
                           text=True)
        rc, log = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = "timeout", (e.stdout or b"").decode(errors="replace") + \
            (e.stderr or b"").decode(errors="replace")
    return run.finish(rc, log, t, time.time())


def run_lockstep(a, model, entries, round_no):
    """The timing runs of entries ((label, allocator, env), ...) side by side,
    one step each in turn (Turns): their results by label. Each run's result
    stays in the out directory (<model>_<allocator>_timing_r<round>_c<entry
    of TIMING_CONFIGS>.json), its output beside it (.log)."""
    import select
    runs = [Launch(a, model, allocator, env,
                   tag=f"_r{round_no}_c{TIMING_CONFIGS.index((label, allocator, env))}")
            for label, allocator, env in entries]
    cpus = sorted(os.sched_getaffinity(0))
    cpus = cpus[-4:] if len(cpus) > 4 else cpus
    for run in runs:
        # One CPU thread each: the runs waiting for their turn would otherwise
        # keep OpenMP workers spinning on the cores the running one needs (the
        # CNN's batches, made on the CPU, took over 90 s with four at once).
        run.env["OMP_NUM_THREADS"] = "1"
    n = len(runs)
    ring = [os.pipe() for _ in range(n)]  # ring[i]: into run i's turn
    ready_r, ready_w = os.pipe()
    procs, logs, t = [], [], time.time()
    for i, run in enumerate(runs):
        turn_in, turn_out = ring[i][0], ring[(i + 1) % n][1]
        log = open(run.out + ".log", "w+")
        logs.append(log)
        procs.append(subprocess.Popen(
            run.cmd + ["--turn-in", str(turn_in), "--turn-out", str(turn_out), "--ready",
                       str(ready_w)], env=run.env, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(turn_in, turn_out, ready_w),
            # All on the same few cores (only one runs at a time): no run gets
            # a faster core, a warmer cache or another memory node than the
            # others.
            preexec_fn=lambda: os.sched_setaffinity(0, cpus)))
        if run.outside:
            run.outside.start()
    start = ring[0][1]  # the parent's way into the ring: the first turn
    for r, w in ring:
        os.close(r)
        if w != start:
            os.close(w)
    os.close(ready_w)
    deadline, ready = time.time() + a.timeout, 0
    while ready < n and time.time() < deadline:  # every run set up, or one died
        if select.select([ready_r], [], [], 1.0)[0]:
            got = os.read(ready_r, n)
            if not got:
                break
            ready += len(got)
    os.close(ready_r)
    if ready == n:
        os.write(start, b"t")
    os.close(start)  # not ready: the runs read EOF and stop
    results = {}
    for (label, _, _), run, proc, log in zip(entries, runs, procs, logs):
        try:
            rc = proc.wait(timeout=max(1.0, deadline + a.timeout * n - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
        log.seek(0)
        results[label] = run.finish(rc, log.read(), t, time.time())
        log.close()
    return results


def phases(out, started, exited):
    """Where a child's wall time went: ' (start 1.2, setup 3.4, warm-up 0.5,
    timed 2.0, exit 0.3 s)', from the marks it wrote."""
    try:
        with open(out) as f:
            m = json.load(f)["marks"]
    except (OSError, ValueError, KeyError):
        return ""
    cuts = [started, m["begun"], m["looping"], m["timed"], m["ended"], exited]
    names = ("start", "setup", "warm-up", "timed", "exit")
    return " (" + ", ".join(f"{n} {b - a:.1f}" for n, a, b in zip(names, cuts, cuts[1:])) + " s)"


def alloc_sequence(path):
    """The (size, is_alloc) sequence of a trace, to compare the two runs'."""
    seq = []
    with open(path) as f:
        for line in f:
            if line.startswith("a "):
                seq.append(int(line.split()[2]))
    return seq


def compare(a, model, runs):
    ref, gp = runs.get("torch"), runs.get("gpupool")
    if not ref or not gp:
        return False, "a run failed"
    la, lb = ref["losses"], gp["losses"]
    if len(la) != len(lb):
        return False, f"{len(la)} vs {len(lb)} steps"
    same = sum(1 for x, y in zip(la, lb) if x == y)
    rel = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)), default=0.0)
    ok = rel <= a.rtol
    text = (f"losses: {same}/{len(la)} steps bit-identical, max relative difference {rel:.3g} "
            f"(tolerance {a.rtol:g}); first {la[0]:.4f}, last {la[-1]:.4f} (torch) / "
            f"{lb[-1]:.4f} (gpupool)")
    ta = os.path.join(a.outdir, f"{model}_torch.trace")
    tb = os.path.join(a.outdir, f"{model}_gpupool.trace")
    if os.path.exists(ta) and os.path.exists(tb):
        sa, sb = alloc_sequence(ta), alloc_sequence(tb)
        text += (f"\n    allocation sequences: {len(sa)} (torch) vs {len(sb)} (gpupool) "
                 f"allocations, sizes in order {'identical' if sa == sb else 'differ'}")
    return ok, text


TIMING_CONFIGS = [  # (label, allocator, environment): nothing is recorded
    ("torch (its caching allocator)", "torch", {}),
    ("gpupool, no agent", "gpupool", {}),
    ("gpupool, agent, cupti:off", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0,cupti:off"}),
    ("gpupool, agent, trace_events:0, cupti:off", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0,cupti:off,trace_events:0"}),
    ("gpupool, agent (default: events and CUPTI on)", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0"}),
    ("gpupool expandable_segments, agent (default)", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0", "GPUPOOL_CONF": "expandable_segments:True"}),
    ("torch expandable_segments", "torch",
     {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("gpupool expandable_segments, growth 8, agent (default)", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0",
      "GPUPOOL_CONF": "expandable_segments:True,expandable_growth_moves:8"}),
    # PyTorch's allocator records nothing: this is the like-for-like row
    # against "torch expandable_segments" (the agent's cost is issue 15's)
    ("gpupool expandable_segments, no agent", "gpupool",
     {"GPUPOOL_CONF": "expandable_segments:True"}),
    # where the agent's cost with expandable segments goes: each part off
    ("gpupool expandable_segments, agent, cupti:off", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0,cupti:off",
      "GPUPOOL_CONF": "expandable_segments:True"}),
    ("gpupool expandable_segments, agent, trace_events:0", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0,trace_events:0",
      "GPUPOOL_CONF": "expandable_segments:True"}),
    ("gpupool expandable_segments, agent, trace_events:0, cupti:off", "gpupool",
     {"GPUPOOL_AGENT_CONF": "listen:127.0.0.1:0,trace_events:0,cupti:off",
      "GPUPOOL_CONF": "expandable_segments:True"}),
    # the moves' share of expandable segments' cost, like for like with
    # PyTorch's: a growth of 8 cuts the LM's page moves, for memory
    ("gpupool expandable_segments, growth 8, no agent", "gpupool",
     {"GPUPOOL_CONF": "expandable_segments:True,expandable_growth_moves:8"}),
]


def timing(a):
    """Steps/s of each configuration without any recording, rounds
    interleaved, the median per configuration."""
    import statistics
    if a.timing_configs:
        configs = [TIMING_CONFIGS[int(i)] for i in a.timing_configs.split(",")]
    elif a.timing_short:
        configs = [TIMING_CONFIGS[i] for i in (0, 1, 4, 5, 6)]
    else:
        configs = TIMING_CONFIGS
    mode = "rounds in lockstep" if a.lockstep else "interleaved rounds"
    print(f"\n## steps/s without recording ({a.timing_rounds} {mode}, median)\n")
    print(f"| model | configuration | steps/s | relative to {configs[0][0]} |")
    print("|---|---|---:|---:|")
    paired = {}
    for model in a.timing_models.split(","):
        runs = {label: [] for label, _, _ in configs}
        for k in range(a.timing_rounds):
            if a.lockstep:  # each round starts the ring at a different configuration
                order = configs[k % len(configs):] + configs[:k % len(configs)]
                for label, r in run_lockstep(a, model, order, k).items():
                    if r:
                        runs[label].append(r)
                continue
            for label, allocator, env in configs:
                r = run_child(a, model, allocator, env)
                if r:
                    runs[label].append(r)
        rates = {label: [r["steps_per_s"] for r in rs] for label, rs in runs.items()}
        base = statistics.median(rates[configs[0][0]]) if rates[configs[0][0]] else None
        for label, _, _ in configs:
            if not rates[label]:
                print(f"| {model} | {label} | failed | |")
                continue
            m = statistics.median(rates[label])
            rel = f"{m / base:.3f}" if base else "n/a"
            print(f"| {model} | {label} | {m:.2f} | {rel} |")
        paired[model] = runs
    print_pool_work(configs, paired)
    if a.timing_pairs:
        print_pairs(a, configs, paired)
    return losses_agree(a, configs, paired)


def losses_agree(a, configs, paired):
    """Every run trains the same model on the same batches: its losses must
    match the first configuration's step by step (within --rtol), whatever the
    allocator did with the memory (pages moved under live tensors' neighbours,
    old mappings left in place). False when one does not."""
    ok = True
    print()
    for model, runs in paired.items():
        ref = next((rs[0]["losses"] for rs in runs.values() if rs), None)
        if ref is None:
            continue
        n = exact = 0
        model_ok = True
        for label, _, _ in configs:
            for r in runs[label]:
                n += 1
                la = r["losses"]
                same = len(la) == len(ref) and all(
                    x == y or abs(x - y) <= a.rtol * max(abs(x), abs(y)) for x, y in zip(la, ref))
                exact += la == ref
                if not same:
                    model_ok = ok = False
                    print(f"{model}: {label}: losses DIFFER from the first run's")
        print(f"{model}: losses of {n} runs checked against the first, step by step: "
              f"{'agree' if model_ok else 'MISMATCH'} ({exact} bit-identical)")
    return ok


def print_pool_work(configs, paired):
    """What each gpupool configuration asked of the device during a run (the
    last /metrics sample the parent scraped): medians over the rounds."""
    import statistics
    keys = (("gpupool_device_allocs_total", "device allocs", "{:.0f}"),
            ("gpupool_pages_moved_total", "pages moved", "{:.0f}"),
            ("gpupool_device_syncs_total", "syncs", "{:.0f}"),
            ("gpupool_device_call_seconds_sum", "s in device calls", "{:.3f}"))
    rows = []
    for model, runs in paired.items():
        for label, _, _ in configs:
            samples = [r["outside_last"] for r in runs[label] if r.get("outside_last")]
            if samples:
                cells = [fmt.format(statistics.median(s.get(k, 0.0) for s in samples))
                         for k, _, fmt in keys]
                rows.append(f"| {model} | {label} | {' | '.join(cells)} |")
    if rows:
        print("\n## what the pool asked of the device per run (last /metrics sample, median)\n")
        print(f"| model | configuration | {' | '.join(h for _, h, _ in keys)} |")
        print("|---|---|" + "---:|" * len(keys))
        print("\n".join(rows))


def print_pairs(a, configs, paired):
    """The ratio of two configurations' steps/s within each round (runs next
    to each other, so a slow stretch of a shared host hits both), and its
    median and range over the rounds: steadier than a ratio of medians."""
    import statistics
    labels = [c[0] for c in configs]
    print(f"\n## paired ratios: steps/s of A / B within each round ({a.timing_rounds} rounds)\n")
    print("| model | A | B | median A / B | min | max | per round |")
    print("|---|---|---|---:|---:|---:|---|")
    per_step = []
    for pair in a.timing_pairs.split(","):
        i, j = (int(x) for x in pair.split("/"))
        la, lb = TIMING_CONFIGS[i][0], TIMING_CONFIGS[j][0]
        if la not in labels or lb not in labels:
            sys.exit(f"torch_train: --timing-pairs {pair}: both must be timed")
        for model, runs in paired.items():
            r = [x["steps_per_s"] / y["steps_per_s"] for x, y in zip(runs[la], runs[lb])]
            if len(runs[la]) != len(runs[lb]) or not r:
                print(f"| {model} | {la} | {lb} | failed runs | | | |")
                continue
            print(f"| {model} | {la} | {lb} | {statistics.median(r):.3f} | {min(r):.3f} | "
                  f"{max(r):.3f} | {', '.join(f'{x:.3f}' for x in r)} |")
            per_step.append((model, la, lb, step_ratios(runs[la], runs[lb])))
    # Both runs train on the same batches in the same order, so step k of A
    # and step k of B do the same work: the ratio of their times, step by
    # step, leaves out what a whole run's mean carries (a slow stretch of the
    # host, a stall in one step). The median says what a typical step costs,
    # the mean of the times what the run as a whole costs.
    print(f"\n## paired steps: B's time / A's time for the same step, all rounds\n")
    print("| model | A | B | steps | median | q25 | q75 | total time B / A | A's extra time per "
          "round, the share in its worst 5 % of steps |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for model, la, lb, (ratios, total, extra) in per_step:
        if not ratios:
            print(f"| {model} | {la} | {lb} | no step times | | | | | |")
            continue
        q = statistics.quantiles(ratios, n=4)
        print(f"| {model} | {la} | {lb} | {len(ratios)} | {statistics.median(ratios):.3f} | "
              f"{q[0]:.3f} | {q[2]:.3f} | {total:.3f} | {extra} |")


def step_ratios(runs_a, runs_b):
    """Per-step time ratios B / A over paired rounds, the rounds' total-time
    ratio, and where A's extra time goes: its sum, and the share of it in the
    5 % of steps where A lost most (near 100 %: a few slow steps, e.g. pages
    mapped; near 5 %: spread over every step, e.g. a slower hot path)."""
    ratios, ta_all, tb_all, extra = [], 0.0, 0.0, []
    for ra, rb in zip(runs_a, runs_b):
        ta, tb = ra.get("step_seconds") or [], rb.get("step_seconds") or []
        if not ta or len(ta) != len(tb):
            continue
        ratios += [y / x for x, y in zip(ta, tb) if x > 0]
        ta_all += sum(ta)
        tb_all += sum(tb)
        lost = sorted((x - y for x, y in zip(ta, tb)), reverse=True)
        worst = sum(lost[:max(1, len(lost) // 20)])
        total = sum(lost)
        share = f"{worst / total:.0%}" if total > 0 else "none lost"
        extra.append(f"{total * 1e3:+.0f} ms, {share}")
    return ratios, (tb_all / ta_all if ta_all else float("nan")), "; ".join(extra)


def driver(a):
    os.makedirs(a.outdir, exist_ok=True)
    a.lib = os.path.realpath(a.lib)
    if a.timing_only:
        return 0 if timing(a) else 1
    results, ok = {}, True
    for model in MODELS:
        for allocator in ALLOCATORS:
            results.setdefault(model, {})[allocator] = run_child(a, model, allocator)
    print("\n| model | allocator | steps | steps/s | final loss | trace events | /metrics scrapes "
          "| peak reserved |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model in MODELS:
        for allocator in ALLOCATORS:
            r = results[model][allocator]
            if not r:
                print(f"| {model} | {allocator} | failed | | | | | |")
                ok = False
                continue
            if allocator == "gpupool":
                m = r.get("metrics", {})
                scrapes = f"{m.get('scrapes_ok', 0)} ok, {m.get('scrapes_failed', 0)} failed"
                peak = m.get("last", {}).get("gpupool_peak_reserved_bytes")
                if not m.get("scrapes_ok"):
                    ok = False
            else:
                scrapes = "-"
                peak = r.get("memory_stats", {}).get("reserved_bytes.all.peak")
            peak = f"{peak / 2**20:.1f} MiB" if peak else "n/a"
            print(f"| {model} | {allocator} | {r['steps']} | {r['steps_per_s']:.2f} | "
                  f"{r['losses'][-1]:.4f} | {r.get('trace_events', 'n/a')} | {scrapes} | {peak} |")
    print()
    for model in MODELS:
        good, text = compare(a, model, results[model])
        ok &= good
        sp = [results[model][x]["steps_per_s"] for x in ALLOCATORS if results[model][x]]
        if len(sp) == 2:
            text += f"\n    steps/s gpupool / torch: {sp[1] / sp[0]:.3f}"
        print(f"{model}: {'MATCH' if good else 'MISMATCH'}\n    {text}")
    for model in MODELS:
        for allocator in ALLOCATORS:
            r = results[model][allocator]
            if not r:
                continue
            oom = r.get("oom", {})
            # gpupool's: torch.OutOfMemoryError, as PyTorch's own allocator raises, with its
            # message "CUDA out of memory. ... in pool 'torch' on device N ..."
            good = bool(oom.get("raised")) and oom.get("works_after") and (
                allocator != "gpupool" or (oom["raised"].startswith("OutOfMemoryError: CUDA out "
                                                                    "of memory.")
                                           and "in pool 'torch'" in oom["raised"]))
            ok &= good
            print(f"{model} / {allocator}: 16 TiB request {'raised' if oom.get('raised') else 'did NOT raise'}"
                  f" ({oom.get('raised')}); allocator works after: {oom.get('works_after')}"
                  f" -> {'ok' if good else 'FAIL'}")
    for model in MODELS:
        r = results[model].get("gpupool")
        if r and r.get("metrics", {}).get("last"):
            print(f"{model} gpupool, last /metrics sample (pool=\"torch\"): "
                  f"{json.dumps(r['metrics']['last'], sort_keys=True)}")
    if a.timing_rounds:
        ok &= timing(a)
    with open(os.path.join(a.outdir, "summary.json"), "w") as f:
        json.dump(results, f)
    print(f"\ntorch_train: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libgpupool.so")
    ap.add_argument("--outdir", default="torch_train_out")
    ap.add_argument("--lm-steps", type=int, default=300)
    ap.add_argument("--cnn-steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--timeout", type=float, default=150, help="seconds per training process")
    ap.add_argument("--timing-rounds", type=int, default=0,
                    help="also time every allocator configuration without recording")
    ap.add_argument("--timing-only", action="store_true",
                    help="only the timing rounds (no recorded comparison)")
    ap.add_argument("--timing-short", action="store_true",
                    help="time only torch, gpupool without and with the default agent, and "
                    "both with expandable_segments:True")
    ap.add_argument("--timing-configs", metavar="I,J,...",
                    help="time only these entries of TIMING_CONFIGS (0 is the baseline: torch)")
    ap.add_argument("--timing-models", metavar="M,N", default=",".join(MODELS),
                    help="time only these models")
    ap.add_argument("--timing-pairs", metavar="I/J,...",
                    help="also print the per-round steps/s ratios of TIMING_CONFIGS entry I to "
                    "entry J (both timed)")
    ap.add_argument("--lockstep", action="store_true",
                    help="timing rounds: the configurations of a model train at the same time, "
                    "one step each in turn (the default: one after the other)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--turn-in", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--turn-out", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ready", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    ap.add_argument("--allocator", choices=ALLOCATORS, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    return driver(a)


if __name__ == "__main__":
    sys.exit(main())
