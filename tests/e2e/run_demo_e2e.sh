#!/usr/bin/env bash
# End to end: tools/run-demo as a new user meets it (issue 19).
#  - both --help texts (run-demo's, the demo's) describe the four pools;
#  - with GPUPOOL_CONF=expandable_segments:True the demo runs: the pools that
#    refuse it (round, naive) say so in one line each and run without it;
#  - every http://127.0.0.1 URL it prints (the demo's endpoints, Prometheus'
#    graph, targets, rules and alerts pages) answers 200 as printed, without
#    following a redirect (Debian's Prometheus has them under /classic/);
#  - Ctrl-C, i.e. SIGINT to the whole process group as a terminal sends it:
#    status 0, "run-demo: stopped", no "exited" line, the temporary directory
#    removed, and no process it started left alive.
# Waits are polls with a bound. Exit 77 (skip) when a tool is missing.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build/release}
for tool in prometheus curl setsid ps timeout; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
demo=$bin/examples/gpupool-demo
[[ -x $demo ]] || { echo "FAIL: $demo is not built"; exit 1; }

fail() { echo "FAIL: $*" >&2; exit 1; }

port_busy() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
pick_ports() { # two consecutive free ports in 21500-21999
  local tries base
  for ((tries = 0; tries < 50; tries++)); do
    base=$((21500 + RANDOM % 499))
    port_busy "$base" || port_busy $((base + 1)) || { echo "$base"; return 0; }
  done
  return 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-run-demo-e2e.XXXXXX") || exit 1
mkdir -p "$work/tmp"
pid=""
ok=0
cleanup() {
  # Only what this test started: run-demo's process group, then anything
  # of it still alive.
  if [[ -n $pid ]] && kill -0 "$pid" 2> /dev/null; then
    kill -TERM -- "-$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
  fi
  if ((ok)); then
    rm -rf "$work"
  else
    echo "--- run-demo output"
    cat "$work/out" 2> /dev/null
    echo "(files kept in $work)"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

poll() { # seconds, description, command...: runs command until it succeeds
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for $what"
    sleep 0.1
  done
}

# --- the help texts ----------------------------------------------------------
"$demo" --help > "$work/demo-help" || fail "gpupool-demo --help failed"
grep -q "four pools on each" "$work/demo-help" || fail "gpupool-demo --help: $(cat "$work/demo-help")"
grep -q "bfc, round, naive and bfc-expandable" "$work/demo-help" ||
  fail "gpupool-demo --help does not name the four pools"
grep -qi "three" "$work/demo-help" && fail "gpupool-demo --help still says three"
"$src/tools/run-demo" --help > "$work/run-demo-help" || fail "run-demo --help failed"
grep -q -- "--prometheus-port" "$work/run-demo-help" || fail "run-demo --help"
echo "ok   --help texts"

# --- run it --------------------------------------------------------------------
base=$(pick_ports) || fail "no free ports in 21500-21999"
# As a shell runs a command from a terminal: its own process group (setsid;
# run-demo leads it, so the group's id is $pid) and SIGINT not ignored (bash
# starts background commands with SIGINT ignored, which a script cannot trap).
TMPDIR=$work/tmp GPUPOOL_CONF=expandable_segments:True \
  setsid env --default-signal=INT "$src/tools/run-demo" --no-build --build-dir "$bin" --base-port "$base" \
  --prometheus-port $((base + 1)) > "$work/out" 2>&1 < /dev/null &
pid=$!
# run-demo's own last lines (the demo prints a "Stop with Ctrl-C." first).
printed_all() { awk '/^  logs: /{f=1} f && /Stop with Ctrl-C/{x=1} END{exit !x}' "$work/out"; }
started() { printed_all || ! kill -0 "$pid" 2> /dev/null; }
poll 60 "run-demo to start" started
kill -0 "$pid" 2> /dev/null || fail "run-demo ended before it served"
[[ $(ps -o pgid= -p "$pid" | tr -d ' ') == "$pid" ]] || fail "run-demo does not lead its group"
printed_all || fail "run-demo did not print its URLs and 'Stop with Ctrl-C.'"
echo "ok   run-demo serves (ports $base, $((base + 1)))"

# GPUPOOL_CONF=expandable_segments:True: round and naive refuse it, say so,
# and run; the bfc pools take it.
for p in round naive; do
  grep -q "pool $p on device 0 refused GPUPOOL_CONF's 'expandable_segments:True'" "$work/out" ||
    fail "no line saying that pool $p refused expandable_segments:True"
done
grep -q "pool bfc\(-expandable\)\? on device 0 refused" "$work/out" &&
  fail "a bfc pool refused a setting it takes"
metrics=$(curl -fsS --max-time 5 "http://127.0.0.1:$base/metrics") || fail "no /metrics"
for p in bfc round naive bfc-expandable; do
  grep -q "^gpupool_reserved_bytes{.*pool=\"$p\"" <<< "$metrics" || fail "pool $p not in /metrics"
done
echo "ok   GPUPOOL_CONF=expandable_segments:True: round and naive say they refuse it, all four run"

# Every local URL printed answers 200 as printed.
mapfile -t urls < <(grep -o 'http://127\.0\.0\.1[^ )]*' "$work/out" | sort -u)
((${#urls[@]} >= 9)) || fail "only ${#urls[@]} URLs printed: ${urls[*]}"
for u in "${urls[@]}"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$u")
  [[ $code == 200 ]] || fail "$u answers $code, not 200"
done
for page in targets rules alerts graph; do
  grep -q "http://127.0.0.1:$((base + 1))/[a-z/]*$page" <<< "${urls[*]}" ||
    fail "no link to Prometheus' $page page"
done
echo "ok   all ${#urls[@]} URLs printed answer 200"

# --- Ctrl-C ----------------------------------------------------------------------
# Everything run-demo started, found through the process tree.
descendants() { # pid -> its descendants, one per line
  local c
  for c in $(ps -o pid= --ppid "$1"); do
    echo "$c"
    descendants "$c"
  done
}
mapfile -t children < <(descendants "$pid")
((${#children[@]} >= 2)) || fail "expected the demo and Prometheus under run-demo: ${children[*]}"
tmpdirs=$(find "$work/tmp" -mindepth 1 -maxdepth 1 | wc -l)
((tmpdirs == 1)) || fail "expected one temporary directory, found $tmpdirs"

kill -INT -- "-$pid"
gone() { ! kill -0 "$pid" 2> /dev/null; }
poll 30 "run-demo to stop after SIGINT" gone
wait "$pid"
status=$?
pid=""
((status == 0)) || fail "status $status after Ctrl-C"
grep -q "exited" "$work/out" && fail "a misleading 'exited' line after Ctrl-C"
grep -q "stopped with status" "$work/out" && fail "a process stopped with an error"
grep -q "^run-demo: stopped$" "$work/out" || fail "no 'run-demo: stopped' line"
left=$(find "$work/tmp" -mindepth 1 | head -5)
[[ -z $left ]] || fail "left behind in TMPDIR: $left"
alive() { kill -0 "$1" 2> /dev/null && [[ $(ps -o stat= -p "$1") != Z* ]]; }
for c in "${children[@]}"; do
  alive "$c" && fail "process $c ($(ps -o args= -p "$c")) survived Ctrl-C"
done
port_busy "$base" && fail "port $base still served"
port_busy $((base + 1)) && fail "port $((base + 1)) still served"
echo "ok   Ctrl-C: status 0, 'run-demo: stopped', tmp dir removed, ${#children[@]} processes gone"
ok=1
