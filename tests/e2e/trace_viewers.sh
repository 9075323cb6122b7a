#!/usr/bin/env bash
# /trace of a running gpupool-demo through third-party viewers' own code
# (issue 15): Chrome DevTools' trace engine and speedscope's importer, pinned
# below and installed with npm into the build directory (once; quiet; reused
# while the pinned versions are there). trace_viewers.mjs says what each
# draws and fails on any warning or nesting. Also: /trace answers gzip when
# asked, and a trace with two overlapping device calls fails the check (the
# check itself is checked). No network is an error, not a skip: CI reaches
# npm. Exit 77 only where node or npm is not installed outside CI.
set -uo pipefail

trace_engine_version=0.0.65
speedscope_version=1.25.0
src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}
for tool in node npm jq curl; do
  if ! command -v "$tool" > /dev/null; then
    [[ -n ${CI:-} ]] && { echo "FAIL: $tool is not installed (tools/ci-packages.txt)"; exit 1; }
    echo "SKIP: $tool is not installed"
    exit 77
  fi
done
demo=$bin/examples/gpupool-demo
[[ -x $demo ]] || { echo "FAIL: $demo is not built"; exit 1; }

# A prefix of its own (npm prunes what its package.json does not list), with
# the engine's unpinned dependencies ("latest") pinned by overrides.
prefix=$bin/npm-trace-viewers
installed() {
  [[ $(jq -r .version "$prefix/node_modules/@paulirish/trace_engine/package.json" 2> /dev/null) == "$trace_engine_version" &&
    $(jq -r .version "$prefix/node_modules/speedscope/package.json" 2> /dev/null) == "$speedscope_version" ]]
}
if ! installed; then
  mkdir -p "$prefix" || exit 1
  cat > "$prefix/package.json" << EOF
{"private": true,
 "dependencies": {"@paulirish/trace_engine": "$trace_engine_version", "speedscope": "$speedscope_version"},
 "overrides": {"third-party-web": "0.30.0", "legacy-javascript": "0.0.1"}}
EOF
  if ! out=$(npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error 2>&1); then
    echo "$out" | tail -n 5
    echo "FAIL: npm install into $prefix"
    exit 1
  fi
  installed || { echo "FAIL: $prefix does not hold the pinned versions"; exit 1; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-trace-viewers.XXXXXX") || exit 1
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2> /dev/null && wait "$pid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

poll() { # seconds, description, command...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || { echo "FAIL: $what"; cat "$work/demo.out"; return 1; }
    sleep 0.2
  done
}

# An ephemeral port: the demo prints it.
"$demo" --listen 127.0.0.1:0 --seconds 120 --quiet > "$work/demo.out" 2>&1 &
pid=$!
port() { sed -n 's|^  metrics   http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$work/demo.out"; }
has_port() { [[ -n $(port) ]]; }
poll 30 "the demo printed no address" has_port || exit 1
url=http://127.0.0.1:$(port)
# Expandable segments map pages while the pools grow, in the first seconds.
has_pages() {
  curl -sf "$url/metrics" -o "$work/metrics" &&
    awk '/^gpupool_trace_events_total\{.*pool="bfc-expandable"/ { exit !($2 >= 20000) }' "$work/metrics"
}
poll 60 "the demo recorded no events" has_pages || exit 1

curl -sf -H 'Accept-Encoding: gzip' -D "$work/headers" "$url/trace?since=-30" -o "$work/trace.json.gz" ||
  { echo "FAIL: GET /trace"; exit 1; }
grep -qi '^Content-Encoding: gzip' "$work/headers" || { cat "$work/headers"; echo "FAIL: /trace not gzip'd"; exit 1; }
gzip -dc "$work/trace.json.gz" > "$work/trace.json" || { echo "FAIL: /trace is not a gzip stream"; exit 1; }
echo "ok   /trace?since=-30 gzip'd: $(stat -c %s "$work/trace.json.gz") bytes for $(stat -c %s "$work/trace.json")"
jq -e '[.traceEvents[] | select(.ph == "X" and .name == "pages map")] | length > 0' "$work/trace.json" > /dev/null ||
  { echo "FAIL: no \"pages map\" call in the trace"; exit 1; }

node "$src/tests/e2e/trace_viewers.mjs" "$prefix/node_modules" "$work/trace.json" || exit 1

# A call drawn inside another on one track: both viewers must object.
jq '.traceEvents += [
      {"ph":"X","name":"pages unmap","cat":"device","pid":1,"tid":1000003,"ts":1.000,"dur":3.000,"args":{}},
      {"ph":"X","name":"pages map","cat":"device","pid":1,"tid":1000003,"ts":2.000,"dur":1.000,"args":{}},
      {"ph":"X","name":"segment free","cat":"device","pid":1,"tid":1000003,"ts":4.5,"dur":1.000,"args":{}},
      {"ph":"X","name":"segment alloc","cat":"device","pid":1,"tid":1000003,"ts":5.000,"dur":1.000,"args":{}}]' \
  "$work/trace.json" > "$work/bad.json" || exit 1
out=$(node "$src/tests/e2e/trace_viewers.mjs" "$prefix/node_modules" "$work/bad.json")
rc=$?
((rc == 1)) || { echo "$out"; echo "FAIL: overlapping calls passed (status $rc)"; exit 1; }
grep -q 'trace_engine: .* nests device calls' <<< "$out" && grep -q 'console warn: .*Tried to end "segment free' <<< "$out" ||
  { echo "$out"; echo "FAIL: the check missed the overlap in one of the viewers"; exit 1; }
echo "ok   a trace with nested and overlapping device calls fails the check in both viewers"
