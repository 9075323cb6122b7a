#!/usr/bin/env python3
"""DistributedDataParallel over NCCL with gpupool as every rank's allocator, on
however many GPUs this machine has (issue 20):

  python3 tests/gpu/ddp_one_gpu.py --lib build-gpu/libgpupool.so [--nproc 2]

Runs `torchrun --nproc_per_node N` twice with the same seeds: once with
PyTorch's allocator, once with gpupool (CUDAPluggableAllocator). Rank r uses
device r % (number of GPUs). Each rank prints its losses; the two runs must
agree exactly. With gpupool, each rank's agent serves 9477 + LOCAL_RANK (or
another base when those ports are busy) and the rank checks its own /metrics.

On a machine with fewer GPUs than ranks, NCCL refuses two ranks on one
device ("Duplicate GPU detected"); the script then prints NCCL's words and
exits 77 (skipped), which is the answer to "where NCCL allows it"."""
import argparse
import os
import socket
import subprocess
import sys
import tempfile

CHILD = r'''
import os, sys, json, urllib.request
import torch
lib = os.environ.get("DDP_GPUPOOL_LIB")
if lib:
    a = torch.cuda.memory.CUDAPluggableAllocator(lib, "gpupool_torch_malloc", "gpupool_torch_free")
    torch.cuda.memory.change_current_allocator(a)
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
dev = local % torch.cuda.device_count()
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)
losses = []
for step in range(20):
    x = torch.randn(64, 256, generator=g).cuda()
    y = torch.randint(0, 10, (64,), generator=g).cuda()
    loss = torch.nn.functional.cross_entropy(ddp(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
out = {"rank": rank, "device": dev, "losses": losses}
if lib:
    port = int(os.environ["DDP_PORT_BASE"]) + local
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out["metrics_pool_lines"] = sum(1 for l in body.splitlines()
                                    if l.startswith("gpupool_allocated_bytes{") and 'pool="torch"' in l)
    out["cupti_other"] = [l for l in body.splitlines()
                          if l.startswith("gpupool_cuda_memory_bytes{") and 'owner="other"' in l]
print("DDPRESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
'''


def free_base():
    for base in range(9477, 9677, 2):
        ok = True
        for p in (base, base + 1):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return base
    return 0


def run(nproc, lib, workdir):
    script = os.path.join(workdir, "ddp_child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    env = dict(os.environ)
    env.pop("GPUPOOL_CONF", None)
    if lib:
        base = free_base()
        env["DDP_GPUPOOL_LIB"] = lib
        env["DDP_PORT_BASE"] = str(base)
        env["GPUPOOL_AGENT_CONF"] = f"listen:127.0.0.1:{base}"
    else:
        env.pop("DDP_GPUPOOL_LIB", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", script]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    results = {}
    for line in p.stdout.splitlines():
        if line.startswith("DDPRESULT "):
            import json
            r = json.loads(line[len("DDPRESULT "):])
            results[r["rank"]] = r
    return p, results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: no torch")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for PyTorch")
        return 77
    ngpu = torch.cuda.device_count()
    print(f"ddp: torch {torch.__version__}, {ngpu} GPU(s), {a.nproc} ranks, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    with tempfile.TemporaryDirectory() as work:
        p0, torch_res = run(a.nproc, None, work)
        if p0.returncode != 0:
            text = p0.stdout + p0.stderr
            dup = [l for l in text.splitlines() if "Duplicate GPU" in l or "duplicate" in l.lower()]
            print(f"ddp: PyTorch's own allocator: torchrun exited {p0.returncode}")
            print("\n".join((dup or text.splitlines()[-15:])[:5]))
            if ngpu < a.nproc:
                print(f"SKIP: NCCL does not run {a.nproc} ranks on {ngpu} GPU(s) (see above)")
                return 77
            return 1
        p1, pool_res = run(a.nproc, a.lib, work)
        if p1.returncode != 0:
            print(f"FAIL: gpupool run: torchrun exited {p1.returncode}\n{(p1.stdout + p1.stderr)[-3000:]}")
            return 1
    ok = True
    for r in sorted(torch_res):
        same = torch_res[r]["losses"] == pool_res.get(r, {}).get("losses")
        ok &= same
        pr = pool_res.get(r, {})
        print(f"rank {r} (device {torch_res[r]['device']}): losses equal: {same}; "
              f"last {torch_res[r]['losses'][-1]:.6f}; /metrics torch pool lines "
              f"{pr.get('metrics_pool_lines')}; CUPTI other: {pr.get('cupti_other')}")
        ok &= bool(pr.get("metrics_pool_lines"))
    print("ddp: ok" if ok else "ddp: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
