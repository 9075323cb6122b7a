#!/usr/bin/env bash
# The injection library where there is no CUDA driver (issue 19). The driver
# loads CUDA_INJECTION64_PATH inside cuInit, so without one nothing loads it;
# loaded another way (LD_PRELOAD, as docs/cupti.md suggests to check a
# setup) while CUDA_INJECTION64_PATH is set, it says in one line why the agent
# will not start, and the program runs on. And InitializeInjection, called
# with a configuration the agent refuses, says that the agent did not start.
# Exit 77 (skip) where a CUDA driver is installed (tests/gpu covers that).
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build/release}
lib=$bin/inject/libgpupool_inject.so
[[ -f $lib ]] || { echo "FAIL: $lib is not built"; exit 1; }
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
if python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2> /dev/null; then
  echo "SKIP: a CUDA driver is installed here"
  exit 77
fi
fail() { echo "FAIL: $*" >&2; exit 1; }
err=$(mktemp "${TMPDIR:-/tmp}/gpupool-inject-e2e.XXXXXX") || exit 1
trap 'rm -f "$err"' EXIT

# Preloaded into a program, with CUDA_INJECTION64_PATH set: one line.
env -u GPUPOOL_AGENT_CONF CUDA_INJECTION64_PATH="$lib" LD_PRELOAD="$lib" /bin/echo ran \
  > "$err.out" 2> "$err" || fail "the program failed with the library preloaded"
out=$(cat "$err.out"); rm -f "$err.out"
[[ $out == ran ]] || fail "the program's output changed: '$out'"
lines=$(wc -l < "$err")
((lines == 1)) || fail "expected one line on stderr, got $lines: $(cat "$err")"
grep -q "^gpupool inject: the agent will not start: no CUDA driver: libcuda.so.1" "$err" ||
  fail "the line does not say why: $(cat "$err")"
echo "ok   without a driver: $(cat "$err")"

# Without CUDA_INJECTION64_PATH nobody asked for injection: silence.
env -u CUDA_INJECTION64_PATH LD_PRELOAD="$lib" /bin/true 2> "$err" || fail "status"
[[ ! -s $err ]] || fail "output without CUDA_INJECTION64_PATH: $(cat "$err")"
echo "ok   silent without CUDA_INJECTION64_PATH"

# InitializeInjection (what the driver calls) with a configuration the agent
# refuses: the program goes on (it returns 1) and a line says why.
rc=$(env -u CUDA_INJECTION64_PATH GPUPOOL_AGENT_CONF=no_such_key:1 \
  python3 -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).InitializeInjection())' "$lib" \
  2> "$err") || fail "InitializeInjection crashed: $(cat "$err")"
[[ $rc == 1 ]] || fail "InitializeInjection returned '$rc', not 1"
grep -q "^gpupool inject: agent not started: " "$err" ||
  fail "no 'agent not started' line: $(cat "$err")"
echo "ok   a refused configuration: $(grep '^gpupool inject' "$err")"
