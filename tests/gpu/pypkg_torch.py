#!/usr/bin/env python3
"""The Python package with PyTorch on a GPU (tests/gpu/run --pypkg, or alone):

  python3 tests/gpu/pypkg_torch.py --lib build-gpu/libgpupool.so

1. install: `pip install --no-index --target DIR ./python` with GPUPOOL_LIBRARY=--lib (the
   package then carries that library), used by every child below.
2. stats: the same seeded training script runs twice in fresh processes, once with PyTorch's
   allocator recording torch.cuda.memory_stats() after each forward, backward and optimizer
   step, once after `gpupool.torch.enable()`, which makes that same call read gpupool's pool.
   The keys that count tensors (allocated/requested/active bytes, allocations, active blocks:
   all/small/large, current and peak) must be equal at every point; reserved bytes and segments
   are compared and reported (they depend on caching policy, which is gpupool's own). The two
   key lists must be the same, names and order. Then, in the gpupool run, torch.cuda's
   max_memory_allocated, memory_summary, empty_cache (reserved drops once the model is freed)
   and memory._dump_snapshot must answer (under a pluggable allocator PyTorch's raise), the
   snapshot holding the events recorded since memory._record_memory_history() (device_traces).
3. tags: weights created under gpupool.tag("weights") and one forward pass under
   tag("activations"): the tags hold exactly the bytes those phases allocated, the activations
   go back to 0 once backward and `del` have freed them; the gradients, made on autograd's
   thread, are untagged.
4. oom: an accelerate-style find_executable_batch_size (catch the exception, match
   "CUDA out of memory.", halve) starting from a batch far beyond the GPU recovers at a smaller
   batch; the message and the exception type are printed; training then goes on.
4b. record_stream: a tensor used on a second, busy stream, `record_stream`ed there and
   deleted; a tensor of its size on the first stream must not get its block while the second
   stream runs (PyTorch passes record_stream to the function enable() set).
5. ranks: `torchrun --nproc_per_node 2` on one GPU (gloo for the barriers): each rank's agent
   serves /metrics on 9477 + LOCAL_RANK (another base when 9477-9478 are busy), and each rank
   fetches both ports and finds rank="0" and rank="1".

Prints what ran and PASS/FAIL per check; exit 0 when all passed, 77 when there is no CUDA
PyTorch."""
import argparse
import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ---------------------------------------------------------------- children


def model_and_data(torch, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 512))
    return model


COUNTED = [f"{s}.{k}.{f}" for s in ("allocated_bytes", "requested_bytes", "active_bytes",
                                    "allocation", "active")
           for k in ("all", "small_pool", "large_pool") for f in ("current", "peak")]
REPORTED = ["reserved_bytes.all.current", "reserved_bytes.all.peak", "segment.all.current"]


def child_train(mode, out, steps):
    import torch
    if mode == "gpupool":
        import gpupool.torch
        gpupool.torch.enable()
    # torch.cuda's own call in both runs: enable() makes it answer from gpupool's pools.
    read = torch.cuda.memory_stats
    records = []
    torch.cuda.memory._record_memory_history()  # the habit before a snapshot: events recorded

    def note(step, phase):
        torch.cuda.synchronize()
        s = read(0)
        records.append({"step": step, "phase": phase, **{k: s.get(k) for k in COUNTED + REPORTED}})

    model = model_and_data(torch).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    note(-1, "model")
    for step in range(steps):
        batch = 16 + 8 * (step % 4)  # shapes change: blocks are split, freed and reused
        x = torch.randn(batch, 512, generator=g).cuda()
        y = torch.randn(batch, 512, generator=g).cuda()
        loss = torch.nn.functional.mse_loss(model(x), y)
        note(step, "forward")
        loss.backward()
        note(step, "backward")
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss
        note(step, "step")
    # The other torch.cuda calls a training script makes, as their results.
    calls = {"max_memory_allocated": torch.cuda.max_memory_allocated() == read(0)[
                 "allocated_bytes.all.peak"],
             "summary": "memory summary" in torch.cuda.memory_summary()}
    del model, opt
    reserved = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    calls["empty_cache"] = torch.cuda.memory_reserved() < reserved
    path = out + ".pickle"
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    calls["dump_snapshot"] = "segments" in snap
    calls["device_traces"] = sum(len(t) for t in snap.get("device_traces", []))
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(out, "w") as f:
        json.dump({"records": records, "keys": list(read(0)), "calls": calls}, f)


def child_tags(out):
    import torch
    import gpupool
    import gpupool.torch
    gpupool.torch.enable()
    res = {}
    before = gpupool.memory_allocated()
    with gpupool.tag("weights"):
        model = model_and_data(torch).cuda()
    res["weights_delta"] = gpupool.memory_allocated() - before
    res["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    x = torch.randn(64, 512, device="cuda")
    model(x).sum().backward()  # warm-up, untagged: cuBLAS workspaces, first-use buffers
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    before = gpupool.memory_allocated()
    with gpupool.tag("activations"):
        out_t = model(x)
        loss = out_t.square().mean()
    torch.cuda.synchronize()
    res["forward_delta"] = gpupool.memory_allocated() - before
    res["after_forward"] = gpupool.memory_allocated_by_tag()
    loss.backward()  # frees the saved activations (on autograd's thread: still their tag)
    del out_t, loss
    torch.cuda.synchronize()
    res["after_backward"] = gpupool.memory_allocated_by_tag()
    res["allocated"] = gpupool.memory_allocated()
    with open(out, "w") as f:
        json.dump(res, f)


def child_oom(out):
    import torch
    import gpupool
    import gpupool.torch
    gpupool.torch.enable()
    tried, messages = [], []

    def find_executable_batch_size(function, starting_batch_size):
        batch_size = starting_batch_size
        while batch_size > 0:
            try:
                return function(batch_size)
            except RuntimeError as e:  # what accelerate's should_reduce_batch_size matches
                if len(e.args) == 1 and "CUDA out of memory." in e.args[0]:
                    messages.append((type(e).__module__ + "." + type(e).__qualname__, e.args[0]))
                    batch_size //= 2
                    continue
                raise
        raise RuntimeError("No executable batch size found, reached zero.")

    model = torch.nn.Linear(4096, 4096).cuda()

    def train_step(batch_size):
        tried.append(batch_size)
        x = torch.randn(batch_size, 1024, 4096, device="cuda")  # 16 MiB per sample
        y = model(x).square().mean()
        y.backward()
        return batch_size

    free, total = torch.cuda.mem_get_info()
    start = 1 << max(1, (4 * total // (16 << 20)).bit_length())  # beyond 4x the device
    found = find_executable_batch_size(train_step, start)
    # The pool and the program go on.
    z = torch.ones(1024, 1024, device="cuda") * 2
    res = {"start": start, "found": found, "tried": tried,
           "messages": [(t, m[:600]) for t, m in messages[:2]], "n_ooms": len(messages),
           "num_ooms": gpupool.memory_stats()["num_ooms"], "after": float(z.sum().item()),
           "torch_oom_error": bool(messages) and messages[0][0] == "torch.OutOfMemoryError"}
    with open(out, "w") as f:
        json.dump(res, f)


def child_streams(out):
    """x used on a second stream that is still busy, x.record_stream(s2), del x,
    then a tensor of x's size on the first stream: the pool must not hand out
    x's block while s2 may still read it. The kernels run once first: their
    first launch loads them (lazily, for a while), and s2 must still be busy
    when the block is asked for (s2.query() then, recorded)."""
    import torch
    import gpupool.torch
    gpupool.torch.enable()
    n = 1 << 22  # 16 MiB of float32

    def trial(cycles):
        x = torch.ones(n, device="cuda")
        s2 = torch.cuda.Stream()
        s2.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s2):
            torch.cuda._sleep(cycles)
            y = x * 2
        x.record_stream(s2)
        ptr = x.data_ptr()
        del x
        z = torch.zeros(n, device="cuda")  # the first stream, while s2 runs
        busy = not s2.query()
        reused = z.data_ptr() == ptr
        torch.cuda.synchronize()
        return busy, reused, float(y.sum())

    trial(1000)  # the kernels loaded
    busy, reused, y_sum = trial(1_000_000_000)  # about half a second on s2
    with open(out, "w") as f:
        json.dump({"busy": busy, "reused_while_busy": reused, "y_sum": y_sum, "n": n}, f)


def child_fraction(out):
    """The memory fraction through PyTorch's own C++ path
    (torch._C._cuda_setMemoryFraction, which calls the allocator's
    memory_fraction_fn) and through torch.cuda's function (the package's):
    a tensor of 3 % of the device fits under 5 %, a second one does not
    (torch.OutOfMemoryError naming the cap, while the device has room), and
    under 50 % it does. Then PyTorch's own empty_cache path (reset_fn)."""
    import torch
    import gpupool
    import gpupool.torch
    gpupool.torch.enable()
    observed = []

    def oom_observer(device, alloc, device_total, device_free):  # PyTorch's documented habit
        snapshot = torch.cuda.memory._snapshot()
        observed.append([device, alloc, device_total, device_free, len(snapshot["segments"])])

    torch._C._cuda_attach_out_of_memory_observer(oom_observer)
    torch._C._cuda_setMemoryFraction(0.05, 0)
    res = {"fraction_read": torch.cuda.get_per_process_memory_fraction()}
    free, total = torch.cuda.mem_get_info()
    n = int(0.03 * total) // 4
    a = torch.ones(n, device="cuda")
    try:
        b = torch.ones(n, device="cuda")
        res["refused"] = False
    except torch.OutOfMemoryError as e:
        res["refused"] = True
        res["message"] = str(e)[:900]
    res["device_free_after"] = torch.cuda.mem_get_info()[0]
    res["total"] = total
    res["observed"] = observed
    res["asked"] = n * 4
    torch.cuda.set_per_process_memory_fraction(0.5)
    b = torch.ones(n, device="cuda")
    res["fits_under_half"] = float(b[-1].item()) == 1.0
    del a, b
    before = gpupool.memory_reserved()
    torch._C._cuda_emptyCache()  # PyTorch's own path, not the package's empty_cache
    res["reserved_before_after"] = [before, gpupool.memory_reserved()]
    with open(out, "w") as f:
        json.dump(res, f)


def child_graph(out):
    """torch.cuda.graph under gpupool: the capture is refused before it
    begins (a RuntimeError naming CUDA graph capture), rather than captured
    with memory the pool would hand to other tensors; the program goes on."""
    import torch
    import gpupool.torch
    gpupool.torch.enable()
    x = torch.ones(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up, as PyTorch's docs ask
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    res = {"refused": False, "message": ""}
    try:
        with torch.cuda.graph(g):
            y = x * 2
    except RuntimeError as e:
        res["refused"] = True
        res["message"] = str(e)[:600]
    with torch.cuda.stream(torch.cuda.default_stream()):
        z = torch.ones(1 << 20, device="cuda") * 3
        res["after"] = float(z.sum().item())
    with open(out, "w") as f:
        json.dump(res, f)


def child_graph_unguarded(out, lib):
    """What the refusal prevents, shown (run by hand: --child graph-unguarded
    --lib PATH): gpupool as PyTorch's allocator without
    set_begin_allocate_to_pool, as enable() made it before. A graph captured
    on stream s frees its intermediate t inside the capture; a tensor made
    on s afterwards (victim, 7.0 everywhere) can get t's block, and each
    replay of the graph writes x * 2 there."""
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "gpupool_torch_malloc",
                                                     "gpupool_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    n = 1 << 20
    x = torch.ones(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: the blocks the capture takes are cached on s
        for _ in range(3):
            t = x * 2
            y = t + 1
            del t, y
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    t_ptr = None
    with torch.cuda.graph(g, stream=s):
        t = x * 2
        t_ptr = t.data_ptr()
        y = t + 1
        del t
    with torch.cuda.stream(s):
        victim = torch.full((n,), 7.0, device="cuda")
    torch.cuda.synchronize()
    before = float(victim.sum().item())
    g.replay()
    torch.cuda.synchronize()
    res = {"victim_on_t_block": victim.data_ptr() == t_ptr, "victim_before": before,
           "victim_after": float(victim.sum().item()), "expected": 7.0 * n,
           "y_sum": float(y.sum().item())}
    print(json.dumps(res))
    with open(out, "w") as f:
        json.dump(res, f)


def child_rank(base, out_dir):
    import urllib.request
    import torch
    import torch.distributed as dist
    import gpupool
    import gpupool.torch
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    gpupool.torch.enable(agent=True if base == 9477 else f"listen:127.0.0.1:{base}")
    dist.init_process_group("gloo")
    with gpupool.tag(f"rank{rank}"):
        t = torch.ones(1 << 20, device="cuda:0")  # both ranks on the one GPU
    dist.barrier()  # both agents are up (started with each rank's first pool)
    pages = {}
    for r in (0, 1):
        with urllib.request.urlopen(f"http://127.0.0.1:{base + r}/metrics", timeout=10) as resp:
            pages[r] = resp.read().decode()
    dist.barrier()
    dist.destroy_process_group()
    found = {r: [l for l in text.splitlines() if l.startswith("gpupool_allocated_bytes{")]
             for r, text in pages.items()}
    with open(os.path.join(out_dir, f"rank{local}.json"), "w") as f:
        json.dump({"rank": rank, "local": local, "lines": found,
                   "tag_lines": [l for l in pages[local].splitlines()
                                 if l.startswith("gpupool_tag_allocated_bytes{")],
                   "t": float(t[0].item())}, f)


# ---------------------------------------------------------------- orchestrator

results = []


def check(name, ok, detail):
    results.append((name, ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def run_child(env, args, timeout):
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print(f"child {' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p.returncode == 0


def child_json(env, work, child, name):
    """Runs this script's --child child and returns the JSON it wrote; None,
    with check name failed, when the child failed."""
    out = os.path.join(work, f"{child}.json")
    if run_child(env, ["--child", child, "--out", out], 300):
        return json.load(open(out))
    check(name, False, "the child failed")
    return None


def free_pair(base):
    for b in [base] + list(range(25000, 25498, 2)):
        try:
            for port in (b, b + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return b
        except OSError:
            continue
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(ROOT, "build-gpu", "libgpupool.so"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--child")
    ap.add_argument("--out")
    ap.add_argument("--base", type=int)
    a = ap.parse_args()
    children = {"torch": lambda: child_train(a.child, a.out, a.steps),
                "gpupool": lambda: child_train(a.child, a.out, a.steps),
                "tags": lambda: child_tags(a.out),
                "oom": lambda: child_oom(a.out),
                "rank": lambda: child_rank(a.base, a.out),
                "streams": lambda: child_streams(a.out),
                "fraction": lambda: child_fraction(a.out),
                "graph": lambda: child_graph(a.out),
                "graph-unguarded": lambda: child_graph_unguarded(a.out, a.lib)}
    if a.child:
        return children[a.child]()

    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no CUDA device")
    except ImportError as e:
        print(f"SKIP: no CUDA PyTorch: {e}")
        return 77
    print(f"pypkg_torch: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"library {a.lib}", flush=True)
    work = tempfile.mkdtemp(prefix="pypkg-torch-")
    site = os.path.join(work, "site")
    env = dict(os.environ, GPUPOOL_LIBRARY=os.path.abspath(a.lib))
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--target",
                        site, os.path.join(ROOT, "python")], env=env, capture_output=True,
                       text=True)
    check("install", p.returncode == 0 and
          os.path.exists(os.path.join(site, "gpupool", "libgpupool.so")),
          f"pip install --no-index --target {site} ./python (GPUPOOL_LIBRARY={a.lib}): "
          f"rc {p.returncode} {p.stderr.strip()[-500:]}")
    env = dict(os.environ, PYTHONPATH=site)
    env.pop("GPUPOOL_LIBRARY", None)  # the installed copy is used
    for k in ("GPUPOOL_CONF", "GPUPOOL_AGENT_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(k, None)

    # 2. stats, step by step
    outs = {m: os.path.join(work, f"{m}.json") for m in ("torch", "gpupool")}
    ok = all(run_child(env, ["--child", m, "--out", outs[m], "--steps", str(a.steps)], 300)
             for m in outs)
    if ok:
        (t, tkeys), (g, gkeys) = ((d["records"], d["keys"]) for d in
                                  (json.load(open(outs[m])) for m in ("torch", "gpupool")))
        check("keys", tkeys == gkeys,
              f"torch.cuda.memory_stats has {len(tkeys)} keys, gpupool.memory_stats {len(gkeys)}; "
              f"only in torch's: {sorted(set(tkeys) - set(gkeys))}; only in gpupool's: "
              f"{sorted(set(gkeys) - set(tkeys))}; same order: {tkeys == gkeys}")
        diffs = [(rt["step"], rt["phase"], k, rt[k], rg[k]) for rt, rg in zip(t, g)
                 for k in COUNTED if rt[k] != rg[k]]
        rdiffs = [(rt["step"], rt["phase"], k, rt[k], rg[k]) for rt, rg in zip(t, g)
                  for k in REPORTED if rt[k] != rg[k]]
        check("stats", len(t) == len(g) and not diffs,
              f"{len(t)} points x {len(COUNTED)} keys compared; differences: {diffs[:5]}; "
              f"last allocated_bytes.all.peak torch {t[-1]['allocated_bytes.all.peak']} "
              f"gpupool {g[-1]['allocated_bytes.all.peak']}")
        calls = json.load(open(outs["gpupool"]))["calls"]
        check("torch.cuda calls", all(calls.values()),
              f"with gpupool.torch.enable(), torch.cuda's memory_stats (the two runs above), "
              f"and: {calls}; with PyTorch's allocator: {json.load(open(outs['torch']))['calls']}")
        print(f"info reserved/segments: {len(rdiffs)} of {len(t) * len(REPORTED)} values differ; "
              f"first: {rdiffs[:4]}; last reserved torch {t[-1]['reserved_bytes.all.current']} "
              f"gpupool {g[-1]['reserved_bytes.all.current']}")
    else:
        check("stats", False, "a training child failed")

    # 3. tags
    r = child_json(env, work, "tags", "tags")
    if r:
        w, af, ab = r["weights_delta"], r["after_forward"], r["after_backward"]
        check("tags", af["weights"] == w and w >= r["param_bytes"] and
              af["activations"] == r["forward_delta"] > 0 and ab["activations"] == 0 and
              ab["weights"] == w and ab["untagged"] > 0,
              f"weights {af['weights']} (allocated by .cuda(): {w}, parameters {r['param_bytes']}); "
              f"activations after forward {af['activations']} (forward allocated "
              f"{r['forward_delta']}), after backward {ab['activations']}; by tag {ab}")

    # 4. OOM and the batch-size finder
    r = child_json(env, work, "oom", "oom")
    if r:
        msg = r["messages"][0][1] if r["messages"] else ""
        check("oom", r["found"] < r["start"] and r["n_ooms"] >= 1 and
              msg.startswith("CUDA out of memory.") and r["num_ooms"] == r["n_ooms"] and
              r["after"] == 2.0 * (1 << 20) and r["torch_oom_error"],
              f"batch sizes tried {r['tried']} -> {r['found']}; {r['n_ooms']} OOMs, "
              f"num_ooms {r['num_ooms']}; exception {r['messages'][0][0] if r['messages'] else '-'}"
              f" (torch.OutOfMemoryError: {r['torch_oom_error']}); message: {msg[:400]!r}")

    # 4b. tensor.record_stream reaches the pool
    r = child_json(env, work, "streams", "record_stream")
    if r:
        check("record_stream", r["busy"] and not r["reused_while_busy"] and
              r["y_sum"] == 2.0 * r["n"],
              f"the second stream busy when the block was asked for: {r['busy']}; a freed "
              f"block it still used handed out again: {r['reused_while_busy']}; its result "
              f"{r['y_sum']} (expected {2.0 * r['n']})")

    # 4c. set_per_process_memory_fraction caps the pool; PyTorch's empty_cache reaches it
    r = child_json(env, work, "fraction", "memory_fraction")
    if r:
        msg = r.get("message", "")
        rb, ra = r["reserved_before_after"]
        obs = r["observed"]
        check("memory_fraction", r["fraction_read"] == 0.05 and r["refused"] and
              msg.startswith("CUDA out of memory.") and "memory_fraction 0.05" in msg and
              "limit refused it" in msg and r["device_free_after"] > r["total"] // 2 and
              r["fits_under_half"] and rb > 0 and ra == 0,
              f"fraction read back {r['fraction_read']}; a second 3 % tensor under 5 % refused: "
              f"{r['refused']} with the device {r['device_free_after'] / r['total']:.0%} free; "
              f"fits under 50 %: {r['fits_under_half']}; reserved {rb} -> {ra} after "
              f"torch._C._cuda_emptyCache(); message: {msg[:500]!r}")
        check("oom_observer", len(obs) == 1 and obs[0][0] == 0 and obs[0][1] == r["asked"] and
              obs[0][2] == int(0.05 * r["total"]) and obs[0][3] > r["total"] // 2 and
              obs[0][4] >= 1,
              f"torch._C._cuda_attach_out_of_memory_observer's observer saw {obs} (device, bytes "
              f"asked {r['asked']}, the cap {int(0.05 * r['total'])}, free, segments in the "
              f"snapshot it took)")

    # 4d. CUDA graph capture is refused, not captured over memory the pool would reuse
    r = child_json(env, work, "graph", "cuda_graph")
    if r:
        check("cuda_graph", r["refused"] and
              "CUDA graph capture into a private memory pool" in r["message"] and
              r["after"] == 3.0 * (1 << 20),
              f"torch.cuda.graph refused: {r['refused']}; the program went on: "
              f"{r['after'] == 3.0 * (1 << 20)}; message: {r['message'][:300]!r}")

    # 5. two ranks with torchrun on the one GPU
    base = free_pair(9477)
    rank_dir = os.path.join(work, "ranks")
    os.makedirs(rank_dir)
    master = free_pair(29500) or 29500
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(master), os.path.abspath(__file__), "--child", "rank",
           "--base", str(base), "--out", rank_dir]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode == 0:
        rs = [json.load(open(os.path.join(rank_dir, f"rank{i}.json"))) for i in (0, 1)]
        ok = all(any(f'rank="{r}"' in l and 'pool="torch"' in l for l in rj["lines"][str(r)])
                 for rj in rs for r in (0, 1))
        check("ranks", ok, f"torchrun --nproc_per_node 2: agents on {base} and {base + 1}; "
              f"rank 0 sees {rs[0]['lines']['1'][:1]} on port {base + 1}; "
              f"tags of rank 1: {rs[1]['tag_lines'][:2]}")
    else:
        check("ranks", False, f"torchrun exited {p.returncode}: {p.stdout[-2000:]}"
              f"{p.stderr[-3000:]}")

    failed = [n for n, ok in results if not ok]
    print(f"pypkg_torch: {len(results) - len(failed)} of {len(results)} checks passed"
          + (f"; failed: {' '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
