#!/usr/bin/env python3
"""The advisor against PyTorch's own allocator, on a GPU (issue 21's check).

1. Trains an LSTM language model whose sequence length changes every step,
   with PyTorch's caching allocator and torch.cuda.memory._record_memory_history
   on, and dumps the snapshot (torch.cuda.memory._dump_snapshot).
2. Runs gpupool-advise --json on the snapshot (capacity: this GPU's memory).
3. Trains the same model again, in fresh processes, under PyTorch's default
   configuration and under the recommended PYTORCH_CUDA_ALLOC_CONF.
4. Prints predicted vs measured peak reserved bytes (torch.cuda.max_memory_reserved)
   for both.

    advisor_torch.py --advise build/tools/gpupool-advise [--steps 40] [--outdir DIR]

Exit status: 0 when every run finished and the prediction for PyTorch's
default configuration is within --tolerance (default 2 %) of the measurement
(the advisor's bfc reproduces PyTorch's allocator); 1 otherwise; 77 (skip)
without PyTorch or a GPU. Each training process is bounded by --timeout.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(a):
    import torch
    import torch.nn as nn

    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    vocab, emb, hidden, layers, batch = 16384, 512, 1536, 2, 48

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, emb)
            self.lstm = nn.LSTM(emb, hidden, layers, batch_first=True)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, x):
            y, _ = self.lstm(self.emb(x))
            return self.out(y)

    if a.record:  # before the first CUDA allocation: the parameters belong to the history
        torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    model = LM().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(a.seed)
    for _ in range(a.steps):
        seq = int(torch.randint(16, 320, (1,), generator=gen))
        x = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(dev)
        logits = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del logits, loss, x
    torch.cuda.synchronize()
    if a.record:
        torch.cuda.memory._dump_snapshot(a.record)
        torch.cuda.memory._record_memory_history(enabled=None)
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({"max_reserved": torch.cuda.max_memory_reserved(),
                      "max_allocated": torch.cuda.max_memory_allocated(),
                      "device_total": total,
                      "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                      "torch": torch.__version__}))


def run_child(a, conf, record=None):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    cmd = [sys.executable, "-u", __file__, "--child", "--steps", str(a.steps),
           "--seed", str(a.seed)]
    if record:
        cmd += ["--record", record]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"advisor_torch: training under '{conf or 'defaults'}' passed {a.timeout} s")
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        sys.exit(f"advisor_torch: training under '{conf or 'defaults'}' failed "
                 f"(exit {p.returncode})")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"  trained under PYTORCH_CUDA_ALLOC_CONF='{conf}' in {time.time() - t0:.1f} s: "
          f"peak reserved {out['max_reserved']}, allocated {out['max_allocated']}")
    return out


def gib(b):
    return f"{b / (1 << 30):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--advise", help="the gpupool-advise program")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--outdir", default=None)
    ap.add_argument("--timeout", type=float, default=90, help="seconds per training process")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not a.advise or not os.access(a.advise, os.X_OK):
        sys.exit("advisor_torch: --advise must name the gpupool-advise program")
    probe = subprocess.run([sys.executable, "-c",
                            "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        print("advisor_torch: skipped: no PyTorch with CUDA in this python3")
        return 77
    outdir = a.outdir or tempfile.mkdtemp(prefix="advisor_torch.")
    os.makedirs(outdir, exist_ok=True)
    snap = os.path.join(outdir, "lstm_snapshot.pickle")
    print(f"advisor_torch: LSTM LM, {a.steps} steps of varying sequence length")
    rec = run_child(a, "", record=snap)
    cap_gib = rec["device_total"] / (1 << 30)
    cmd = [a.advise, "--json", "--format", "torch", "--capacity", f"{cap_gib:.3f}", snap]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"advisor_torch: {' '.join(cmd)} failed: {p.stderr.strip()}")
    adv = json.loads(p.stdout)
    with open(os.path.join(outdir, "advice.json"), "w") as f:
        f.write(p.stdout)
    print(f"  gpupool-advise: {adv['input']['events']} events, {len(adv['candidates'])} "
          f"configurations in {time.time() - t0:.1f} s")
    cur, best = adv["current"], adv["recommended"]
    torch_conf = best["pytorch_cuda_alloc_conf"]
    if torch_conf is None:  # the best one has no PyTorch equivalent: the best that has
        ok = [c for c in adv["candidates"]
              if c["pytorch_cuda_alloc_conf"] is not None and c["replayed"] and not c["ooms"]
              and c["added_ms"] <= adv["max_added_ms"]]
        best = min(ok, key=lambda c: (c["peak_reserved_bytes"], c["device_ms"]))
        torch_conf = best["pytorch_cuda_alloc_conf"]
        print("  (the recommendation has no PyTorch equivalent; using the best one that has)")
    default = run_child(a, "")
    recommended = run_child(a, torch_conf) if torch_conf else default
    rows = [("PyTorch default", "", cur["peak_reserved_bytes"], default["max_reserved"],
             rec["max_reserved"]),
            ("recommended", torch_conf, best["peak_reserved_bytes"],
             recommended["max_reserved"], None)]
    print(f"\ntorch {rec['torch']}, device {gib(rec['device_total'])} GiB, peak allocated "
          f"{gib(rec['max_allocated'])} GiB (recorded run)\n")
    print("| configuration | PYTORCH_CUDA_ALLOC_CONF | predicted peak reserved (GiB) | "
          "measured (GiB) | predicted / measured |")
    print("|---|---|---:|---:|---:|")
    for name, conf, pred, meas, _ in rows:
        print(f"| {name} | `{conf}` | {gib(pred)} | {gib(meas)} | {pred / meas:.4f} |")
    print(f"\nrecorded run (history on) measured {gib(rec['max_reserved'])} GiB under the "
          f"default; smallest device without an OOM: current "
          f"{cur.get('min_capacity_bytes')}, recommended {best.get('min_capacity_bytes')} bytes")
    err = abs(cur["peak_reserved_bytes"] / default["max_reserved"] - 1)
    if err > a.tolerance:
        print(f"advisor_torch: FAIL: the prediction for the default is off by {err:.1%}")
        return 1
    print("advisor_torch: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
