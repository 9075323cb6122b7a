#!/usr/bin/env python3
"""The demo on a real GPU, as a user would see it: start gpupool-demo (cuda
backend: a GPU is present), then read /metrics, /trace and /snapshot and check
that the GPU is named with its real UUID, that CUPTI records, that the pools'
device memory is attributed to them, and that the documents parse.

    tests/gpu/demo_check.py BUILD_DIR      (exit 0 pass, 1 fail, 77 skip)
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def samples(text, name):
    """(labels, value) of every sample of family name."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
        if m:
            out.append((m.group(1) or "", float(m.group(2))))
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build-gpu"
    demo = os.path.join(build, "examples", "gpupool-demo")
    if not os.path.exists(demo):
        print(f"SKIP: {demo} not built")
        return 77
    port = free_port()
    env = dict(os.environ)
    env.pop("GPUPOOL_CONF", None)
    proc = subprocess.Popen([demo, "--seconds", "40", "--listen", f"127.0.0.1:{port}", "--quiet"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    failures = []
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                get(base + "/healthz")
                break
            except OSError:
                time.sleep(0.2)
        time.sleep(8)  # a few samples and CUPTI flushes
        metrics = get(base + "/metrics")
        info = samples(metrics, "gpupool_device_info")
        print("device_info:", info)
        if not any(re.search(r'UUID="GPU-[0-9a-f]{8}-', l) and "NVIDIA" in l for l, _ in info):
            failures.append("gpupool_device_info has no real GPU UUID and NVIDIA name")
        backends = set(re.findall(r'backend="([^"]+)"', metrics))
        print("backends:", backends)
        if "cuda" not in backends:
            failures.append(f"the demo does not run on the cuda backend: {backends}")
        total = samples(metrics, "gpupool_device_memory_total_bytes")
        free = samples(metrics, "gpupool_device_memory_free_bytes")
        print("device memory total/free:", total, free)
        if not total or total[0][1] < 1e9 or not free:
            failures.append("no device memory total/free from the driver")
        up = samples(metrics, "gpupool_cupti_up")
        print("cupti_up:", up)
        if not up or up[0][1] != 1:
            failures.append(f"CUPTI is not recording: {up}")
        owned = sum(v for l, v in samples(metrics, "gpupool_cuda_memory_bytes") if 'owner="pool"' in l)
        reserved = sum(v for l, v in samples(metrics, "gpupool_reserved_bytes"))
        print(f"CUPTI owner=pool bytes {owned:.0f}, pools' reserved bytes {reserved:.0f}")
        if owned <= 0 or reserved <= 0:
            failures.append("CUPTI attributes no device memory to the pools")
        trace = json.loads(get(base + "/trace?limit=20000"))
        events = trace.get("traceEvents", [])
        counters = [e for e in events if e.get("ph") == "C"]
        print(f"/trace: {len(events)} events, {len(counters)} counter samples")
        if not counters:
            failures.append("/trace has no counter samples")
        snap = json.loads(get(base + "/snapshot"))
        segs = sum(len(p.get("segments", [])) for p in snap.get("pools", []))
        print(f"/snapshot: {len(snap.get('pools', []))} pools, {segs} segments")
        if not segs:
            failures.append("/snapshot lists no segment")
    except Exception as e:  # noqa: BLE001 - any failure to read is a failed check
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        proc.terminate()
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed after 30 s"
        out = proc.stdout.read()
        print("demo output (tail):", out[-1500:])
        if rc != 0:
            failures.append(f"the demo exited with {rc} on SIGTERM")
    for f in failures:
        print("FAIL:", f)
    print("PASS: demo on the GPU" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
