#!/usr/bin/env bash
# An unmodified CUDA program with the agent injected (CUDA_INJECTION64_PATH)
# serves /metrics with its allocations. Exit 0 pass, 1 fail, 77 skip.
#   cupti_inject.sh LIBGPUPOOL_INJECT_SO PLAIN_APP
# curl may be absent on GPU machines: /metrics is read with python3 urllib.
set -u
inject=${1:?libgpupool_inject.so}
app=${2:?plain_app}
tmp=$(mktemp -d)
trap 'touch "$tmp/release"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read /metrics"; exit 77; }
port=$((20000 + $$ % 20000))

CUDA_INJECTION64_PATH="$inject" GPUPOOL_AGENT_CONF="listen:127.0.0.1:$port" \
  "$app" "$tmp/ready" "$tmp/release" >"$tmp/app.log" 2>&1 &
pid=$!

for _ in $(seq 600); do
  [ -s "$tmp/ready" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?
    [ "$rc" = 77 ] && { echo "SKIP: no CUDA device visible"; exit 77; }
    echo "FAIL: the program exited with $rc before allocating"; cat "$tmp/app.log"; exit 1
  fi
  sleep 0.1
done
[ -s "$tmp/ready" ] || { echo "FAIL: the program never got ready"; cat "$tmp/app.log"; exit 1; }
held=$(cat "$tmp/ready")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/[gpu] /'

# Poll up to 10 s: the flush thread delivers records every 250 ms.
python3 - "$port" "$held" <<'PY'
import re, sys, time, urllib.request
port, held = sys.argv[1], int(sys.argv[2])
url = f"http://127.0.0.1:{port}/metrics"
text, why = "", ""
for _ in range(100):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception as e:
        why = str(e); time.sleep(0.1); continue
    up = re.search(r'^gpupool_cupti_up\{[^}]*reason="([^"]*)"[^}]*\} (\S+)$', text, re.M)
    other = sum(float(v) for v in re.findall(
        r'^gpupool_cuda_memory_bytes\{(?=[^}]*kind="device")(?=[^}]*owner="other")[^}]*\} (\S+)$',
        text, re.M))
    allocs = sum(float(v) for v in re.findall(
        r'^gpupool_cuda_allocations_total\{(?=[^}]*kind="device")[^}]*\} (\S+)$', text, re.M))
    if up and up.group(2) == "1" and other >= held and allocs >= 8 + 200:
        print(f"PASS: /metrics shows {int(other)} live device bytes (owner=other, program holds {held}),"
              f" {int(allocs)} device allocations, cupti_up 1")
        for line in text.splitlines():
            if line.startswith(("gpupool_cupti_up", "gpupool_cuda_memory_bytes", "gpupool_cupti_records")):
                print("  " + line)
        sys.exit(0)
    why = f"cupti_up={up.groups() if up else None} other={other} allocations={allocs}"
    time.sleep(0.1)
print(f"FAIL: /metrics never showed the program's allocations: {why}")
print("\n".join(l for l in text.splitlines() if "cupti" in l or "cuda_" in l))
sys.exit(1)
PY
rc=$?
touch "$tmp/release"
wait "$pid"; app_rc=$?
if [ "$app_rc" != 0 ]; then echo "FAIL: the program exited with $app_rc"; cat "$tmp/app.log"; exit 1; fi
pid=
exit $rc
