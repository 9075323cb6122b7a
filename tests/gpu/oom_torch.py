#!/usr/bin/env python3
"""A PyTorch training job driven into CUDA out-of-memory through gpupool's
pluggable allocator, then gpupool's OOM report and its PyTorch memory
snapshots read by torch's own tools (issue 13).

    python3 tests/gpu/oom_torch.py --lib build-gpu/libgpupool.so [--outdir DIR]

1. The allocator is gpupool (CUDAPluggableAllocator, backend cuda on the real
   device) with the agent on an ephemeral port (GPUPOOL_AGENT_CONF); an MLP
   trains with the batch doubled each step until an allocation fails (at
   most 24 doublings or 180 s). The exception must be a torch.OutOfMemoryError
   (what PyTorch's own allocator raises, a RuntimeError) whose message starts
   with "CUDA out of memory." (what Hugging Face accelerate and PyTorch
   Lightning batch-size finders look for), and training must go on at a
   smaller batch afterwards.
2. From the agent: /oom (one report at least), /oom/<id> (JSON with the
   explanation), /oom/<id>?format=torch, /snapshot?format=torch and
   /snapshot (JSON).
3. `python3 -m torch.cuda._memory_viz stats|trace|segments|memory FILE` on
   both pickles must exit 0. segments and memory pipe through flamegraph.pl,
   which _memory_viz downloads; offline (the GPU machine), a stand-in that
   checks the folded lines and writes a stub SVG is put at the path it looks
   for, and the run says so.
4. The live pickle's totals (segments, reserved, allocated) must equal
   /snapshot's, and the report pickle's those of the report JSON.
5. In a second process (--expandable), with expandable_segments:True: the
   live pickle's segments are the pool's mapped runs (their total_size adds
   up to /snapshot's mapped bytes, not to the ranges' address space), its
   trace holds no segment_alloc/segment_free of a range, and _memory_viz
   reads it (stats, trace).

Prints every command it ran and a PASS/FAIL line per check; exit 0 when all
passed, 77 when there is no CUDA (skipped).
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import urllib.request

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def fetch(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def totals(segments, size_key, alloc_key):
    return (len(segments), sum(s[size_key] for s in segments), sum(s[alloc_key] for s in segments))


FLAMEGRAPH_STANDIN = r'''#!/usr/bin/env python3
# Stand-in for flamegraph.pl written by tests/gpu/oom_torch.py (no network):
# checks that each folded line is "frames count" and writes a stub SVG.
import sys
n = 0
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        continue
    stack, _, count = line.rpartition(" ")
    if not stack or not count.isdigit():
        sys.exit(f"flamegraph stand-in: bad folded line {line!r}")
    n += 1
print(f'<svg xmlns="http://www.w3.org/2000/svg"><!-- {n} folded lines --></svg>')
'''


def memory_viz(cmd, path, outdir):
    """Runs one _memory_viz command on path; True when it exits 0."""
    argv = [sys.executable, "-m", "torch.cuda._memory_viz", cmd, path]
    if cmd in ("segments", "memory"):
        argv += ["-o", os.path.join(outdir, f"{os.path.basename(path)}.{cmd}.svg")]
    print("$ " + " ".join(argv), flush=True)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    out = (p.stdout + p.stderr).strip().splitlines()
    for line in out[:12] + (["..."] + out[-6:] if len(out) > 18 else out[12:]):
        print("    " + line)
    return check(f"_memory_viz {cmd} {os.path.basename(path)}", p.returncode == 0,
                 f"exit {p.returncode}")


def expandable(lib_path, outdir):
    """Step 5, in a process of its own (the allocator is chosen once)."""
    import ctypes
    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "gpupool_torch_malloc",
                                                     "gpupool_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    lib = ctypes.CDLL(lib_path)
    side = torch.cuda.Stream()
    keep = [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (3, 7, 1, 40)]
    with torch.cuda.stream(side):
        keep.append(torch.empty(5 << 20, dtype=torch.uint8, device="cuda"))
    del keep[1]  # a free block over mapped pages, inside the range
    torch.cuda.synchronize()
    port = lib.gpupool_agent_port()
    _, _, lpickle = fetch(port, "/snapshot?format=torch")
    _, _, body = fetch(port, "/snapshot")
    snap = json.loads(body)
    live = pickle.loads(lpickle)
    mapped = sum(s["mapped"] for p in snap["pools"] for s in p["segments"])
    segs = live["segments"]
    check("expandable: the pickle's segments are the mapped runs",
          segs and all(s["is_expandable"] for s in segs) and
          sum(s["total_size"] for s in segs) == mapped,
          f"{len(segs)} segments, {sum(s['total_size'] for s in segs)} bytes, "
          f"/snapshot mapped {mapped}")
    actions = {e["action"] for t in live["device_traces"] for e in t}
    check("expandable: pages are segment_map entries, ranges no segment_alloc",
          "segment_map" in actions and "segment_alloc" not in actions, str(sorted(actions)))
    path = os.path.join(outdir, "expandable.pickle")
    with open(path, "wb") as f:
        f.write(lpickle)
    for cmd in ("stats", "trace"):  # segments and memory want flamegraph.pl (step 3)
        memory_viz(cmd, path, outdir)
    failed = [n for n, ok in RESULTS if not ok]
    print(f"oom_torch --expandable: {len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--outdir", default=None)
    ap.add_argument("--max-seconds", type=float, default=180)
    ap.add_argument("--expandable", action="store_true", help="step 5 alone (a child process)")
    a = ap.parse_args()
    outdir = a.outdir or tempfile.mkdtemp(prefix="gpupool-oom-torch.")
    os.makedirs(outdir, exist_ok=True)
    if a.expandable:
        return expandable(a.lib, outdir)

    os.environ["GPUPOOL_AGENT_CONF"] = "listen:127.0.0.1:0,oom_reports:8"
    os.environ.pop("GPUPOOL_CONF", None)
    os.environ.pop("LOCAL_RANK", None)
    import ctypes
    import torch
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for PyTorch")
        return 77
    # The allocator must be swapped before anything initialises CUDA
    # (get_device_name does).
    alloc = torch.cuda.memory.CUDAPluggableAllocator(a.lib, "gpupool_torch_malloc",
                                                     "gpupool_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}, lib {a.lib}, outdir {outdir}", flush=True)
    lib = ctypes.CDLL(a.lib)

    # 1. Train, doubling the batch until it does not fit.
    d = 8192
    model = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU(), torch.nn.Linear(d, d),
                                torch.nn.ReLU(), torch.nn.Linear(d, d)).cuda()
    opt = torch.optim.AdamW(model.parameters())

    def step(batch):
        x = torch.randn(batch, d, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    batch, err, t0 = 1024, None, time.time()
    for _ in range(24):
        if time.time() - t0 > a.max_seconds:
            break
        try:
            step(batch)
        except RuntimeError as e:  # torch.OutOfMemoryError is one too
            err = e
            break
        print(f"batch {batch}: ok", flush=True)
        batch *= 2
    if not check("training reached an OOM", err is not None,
                 f"batch {batch}" if err else "no OOM within the bound"):
        return 1
    msg = str(err)
    print("exception: " + type(err).__name__ + ": " + msg[:1500], flush=True)
    check("torch.OutOfMemoryError (torch.cuda.OutOfMemoryError)",
          isinstance(err, torch.OutOfMemoryError) and
          isinstance(err, torch.cuda.OutOfMemoryError), type(err).__name__)
    check("message starts with 'CUDA out of memory.'", msg.startswith("CUDA out of memory."))
    check("accelerate would reduce the batch",
          isinstance(err, RuntimeError) and len(err.args) == 1 and
          "CUDA out of memory." in err.args[0])
    check("Lightning sees a CUDA OOM", "CUDA" in err.args[0] and "out of memory" in err.args[0])
    err = None
    try:
        step(max(batch // 4, 1))
        check("training goes on at a smaller batch", True)
    except RuntimeError as e:
        check("training goes on at a smaller batch", False, str(e)[:300])

    # 2. The agent's reports and snapshots.
    port = lib.gpupool_agent_port()
    if not check("agent is serving", port > 0, f"port {port}"):
        return 1
    torch.cuda.synchronize()
    st, _, body = fetch(port, "/oom")
    reports = json.loads(body)
    check("/oom lists the report", st == 200 and len(reports) >= 1, f"{len(reports)} report(s)")
    rid = reports[-1]["id"]
    st, _, body = fetch(port, f"/oom/{rid}")
    report = json.loads(body)
    print(f"/oom/{rid}: {report['message'][:1200]}")
    print("explanation: " + json.dumps(report["explanation"]))
    print("device_memory: " + json.dumps(report["device_memory"]) +
          ", other_cuda_memory: " + json.dumps(report["other_cuda_memory"]))
    check(f"/oom/{rid} explains", st == 200 and "remedies" in report["explanation"])
    st, ctype, rpickle = fetch(port, f"/oom/{rid}?format=torch")
    check(f"/oom/{rid}?format=torch", st == 200 and ctype == "application/octet-stream",
          f"{len(rpickle)} bytes")
    st, ctype, lpickle = fetch(port, "/snapshot?format=torch")
    check("/snapshot?format=torch", st == 200 and ctype == "application/octet-stream",
          f"{len(lpickle)} bytes")
    st, _, body = fetch(port, "/snapshot")
    snap = json.loads(body)
    rpath, lpath = os.path.join(outdir, "oom_report.pickle"), os.path.join(outdir, "live.pickle")
    with open(rpath, "wb") as f:
        f.write(rpickle)
    with open(lpath, "wb") as f:
        f.write(lpickle)
    with open(os.path.join(outdir, "oom_report.json"), "w") as f:
        json.dump(report, f)

    # 4. Totals (the job is idle now: the snapshots agree).
    live = pickle.loads(lpickle)
    jsegs = [s for p in snap["pools"] for s in p["segments"]]
    check("live pickle totals equal /snapshot's",
          totals(live["segments"], "total_size", "allocated_size") ==
          totals(jsegs, "size", "allocated"),
          f"{totals(live['segments'], 'total_size', 'allocated_size')} vs "
          f"{totals(jsegs, 'size', 'allocated')}")
    rep = pickle.loads(rpickle)
    check("report pickle totals equal the report's",
          totals(rep["segments"], "total_size", "allocated_size") ==
          totals(report["segments"], "size", "allocated"))
    check("report pickle traces the OOM",
          any(e["action"] == "oom" for t in rep["device_traces"] for e in t))

    # 3. torch's own reader.
    # torch < 2.6 looks for /tmp/<uid>_flamegraph.pl, later ones for
    # ~/.cache/flamegraph.pl; without network, a stand-in goes where none is.
    places = [f"/tmp/{os.getuid()}_flamegraph.pl",
              os.path.join(os.path.expanduser("~/.cache"), "flamegraph.pl")]
    standins = []
    missing = [fg for fg in places if not os.path.exists(fg)]
    if missing:
        try:
            urllib.request.urlopen("https://raw.githubusercontent.com", timeout=5)
        except Exception:
            for fg in missing:
                os.makedirs(os.path.dirname(fg), exist_ok=True)
                with open(fg, "w") as f:
                    f.write(FLAMEGRAPH_STANDIN)
                os.chmod(fg, 0o755)
                standins.append(fg)
            print(f"no network: flamegraph.pl stand-ins at {', '.join(standins)} "
                  "(segments/memory read the pickle; their SVG is a stub)", flush=True)
    try:
        for path in (lpath, rpath):
            for cmd in ("stats", "trace", "segments", "memory"):
                memory_viz(cmd, path, outdir)
    finally:
        for fg in standins:
            os.unlink(fg)

    # 5. An expandable pool's snapshot, in a process of its own.
    env = dict(os.environ, GPUPOOL_CONF="expandable_segments:True",
               GPUPOOL_AGENT_CONF="listen:127.0.0.1:0")
    child = subprocess.run([sys.executable, "-u", os.path.abspath(__file__), "--lib", a.lib,
                            "--outdir", outdir, "--expandable"], env=env, capture_output=True,
                           text=True, timeout=300)
    print(child.stdout + child.stderr, end="", flush=True)
    check("expandable snapshot (step 5)", child.returncode == 0, f"exit {child.returncode}")

    failed = [n for n, ok in RESULTS if not ok]
    print(f"oom_torch: {len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
