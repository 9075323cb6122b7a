#!/usr/bin/env bash
# gpupool-advise from the command line: the table with the lines to paste,
# --json and --csv, the options, and clear usage errors (exit 2) and input
# errors (exit 1) with one line on stderr. Exit 77 (skip) when the program or
# python3 is missing.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}/tools/gpupool-advise
[ -x "$bin" ] || { echo "SKIP: $bin is not built"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$src/bench/make_trace.py" --steps 20 --out "$work/lm.trace" || exit 1
python3 "$src/tests/unit/advisor_snapshot.py" "$work/snap.pickle" "$work/snap.record" 4 || exit 1

failures=0
# expect STATUS PATTERN (stdout+stderr) -- args...
# (--limits SECONDS KB first: under timeout and ulimit -v, for inputs that must
# end quickly in bounded memory)
expect() {
  local want=$1 pattern=$2 out rc
  shift 2
  if [ "${1-}" = --limits ]; then
    local secs=$2 kb=$3
    shift 3
    out=$(ulimit -v "$kb" && timeout "$secs" "$bin" "$@" 2>&1)
  else
    out=$("$bin" "$@" 2>&1)
  fi
  rc=$?
  if [ "$rc" = "$want" ] && grep -qE -- "$pattern" <<< "$out"; then
    echo "ok   gpupool-advise $*"
  else
    echo "FAIL gpupool-advise $* (exit $rc, wanted $want and /$pattern/)"
    printf '%s\n' "$out" | tail -n 5 | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}

expect 0 '^  GPUPOOL_CONF=' --threads 2 "$work/lm.trace"
expect 0 'Smallest device without an OOM' --step 8 "$work/lm.trace"
expect 0 '^  PYTORCH_CUDA_ALLOC_CONF=' "$work/snap.pickle"
expect 0 '^role,gpupool_conf,' --csv --no-capacity "$work/lm.trace"
expect 0 '"recommended":\{"gpupool_conf"' --json --only --current strategy:round \
  --conf strategy:naive "$work/lm.trace"
expect 0 'Time bound: 0.0 ms' --max-added-ms 0 --no-capacity "$work/lm.trace"
expect 0 'usage: gpupool-advise' --help
expect 2 'usage: gpupool-advise'
expect 2 'unknown option --bogus' --bogus "$work/lm.trace"
expect 2 '--capacity needs a value' "$work/lm.trace" --capacity
expect 2 "--capacity 'x' is not a size in GiB" --capacity x "$work/lm.trace"
expect 2 "--threads '0' is not a number from 1 to 64" --threads 0 "$work/lm.trace"
expect 2 '--capacity 0.001 GiB is less than the --step of 2 MiB' --capacity 0.001 "$work/lm.trace"
expect 2 "--max-added-ms '-1' is not a time" --max-added-ms -1 "$work/lm.trace"
expect 2 'one HISTORY only' "$work/lm.trace" "$work/lm.trace"
expect 2 '--json or --csv, not both' --json --csv "$work/lm.trace"
expect 2 '--only tries --current and --conf' --only "$work/lm.trace"
expect 1 'cannot open' "$work/missing"
expect 2 "--format 'xml': unknown history format" --format xml "$work/lm.trace"
expect 2 "--format 'xyz': unknown history format" --format xyz "$work/missing"
expect 1 'key backend' --conf backend:cuda "$work/lm.trace"
expect 1 'key backend' --conf 'backend :cuda' "$work/lm.trace"
expect 1 'key host_capacity_mb' --conf $'strategy:bfc,\thost_capacity_mb\t:1' "$work/lm.trace"
expect 1 'garbage_collection_threshold' --current garbage_collection_threshold:2 \
  "$work/lm.trace"
printf 'a 1 100 0\nq\n' > "$work/bad.record"
expect 1 'bad.record:2: expected' "$work/bad.record"
head -c 1000 "$work/snap.pickle" > "$work/cut.pickle"
expect 1 'cut.pickle: byte [0-9]+: truncated' "$work/cut.pickle"
# an input without a newline: an error at line 1 at once, in bounded memory
# (a NUL byte at the first; other bytes at 64 KiB), not the whole input read
head -c 8000000 /dev/zero | tr '\0' 1 > "$work/long.record"
expect 1 'long.record:1: a line longer than 65536 bytes' "$work/long.record"
expect 1 '^gpupool-advise: /dev/zero:1: a NUL byte in the line$' \
  --limits 10 2000000 --threads 2 /dev/zero
# a process of two devices, a pool named bfc on each (docs/trace.md: pid is
# the device ordinal + 1): --pool bfc is ambiguous, bfc@DEVICE chooses one
cat > "$work/two.json" << 'EOF'
{"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":1,"args":{"name":"GPU 0"}},
{"ph":"M","name":"process_name","pid":2,"tid":2,"args":{"name":"GPU 1"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1000002,"args":{"name":"pool bfc (host, bfc)"}},
{"ph":"M","name":"thread_name","pid":2,"tid":1000004,"args":{"name":"pool bfc (host, bfc)"}},
{"ph":"b","cat":"alloc","pid":1,"tid":1000002,"ts":1,"id":"0x1000","args":{"requested":1000000,"stream":"0x0"}},
{"ph":"b","cat":"alloc","pid":2,"tid":1000004,"ts":2,"id":"0x1000","args":{"requested":4000000,"stream":"0x0"}},
{"ph":"b","cat":"alloc","pid":2,"tid":1000004,"ts":3,"id":"0x9000","args":{"requested":4000000,"stream":"0x0"}},
{"ph":"e","cat":"alloc","pid":1,"tid":1000002,"ts":4,"id":"0x1000","args":{}}
]}
EOF
expect 1 "two.json: 2 pools match 'bfc': bfc@0 \(1 allocation\), bfc@1 \(2 allocations\); choose one as NAME@DEVICE \(gpupool-advise --pool bfc@0\)" \
  --pool bfc "$work/two.json"
expect 0 'two.json \(pool bfc@1\) \(trace\): 2 events, 2 allocations' --pool bfc@1 \
  --no-capacity "$work/two.json"
expect 0 'two.json \(pool bfc@0\) \(trace\): 2 events, 1 allocations' --pool bfc@0 \
  --no-capacity "$work/two.json"
expect 1 "no pool named 'bfc@2' in the trace \(pools: bfc@0" --pool bfc@2 "$work/two.json"
# a device too small for the one allocation: every replay runs out of memory
# and nothing is recommended; the table, the CSV and the JSON say so alike
printf 'a 1 1073741824 0\nf 1\n' > "$work/big.record"
expect 0 '^current,' --csv --capacity 0.5 "$work/big.record"
expect 0 '^CUR ' --capacity 0.5 "$work/big.record"
expect 0 'Recommended: none: every configuration replayed ran out of memory' \
  --capacity 0.5 "$work/big.record"
expect 0 'Smallest device without an OOM \(granularity 2 MiB\): current does not fit the simulated device$' \
  --capacity 0.5 "$work/big.record"
expect 0 '"has_recommendation":false' --json --capacity 0.5 "$work/big.record"
for format in --csv --json ''; do # '': the table
  if "$bin" ${format:+"$format"} --capacity 0.5 "$work/big.record" 2>&1 |
    grep -qE '^(current\+recommended|recommended|REC|CUR\+REC)[ ,]|"has_recommendation":true'; then
    echo "FAIL gpupool-advise $format --capacity 0.5: a row is marked recommended"
    failures=$((failures + 1))
  else
    echo "ok   gpupool-advise $format --capacity 0.5: no row marked recommended"
  fi
done
# --capacity is rounded down to a multiple of --step: 1 GiB in steps of 3 MiB
# replays on 1023 MiB, which the table says as such (it said "1.0 GiB"), and
# the JSON carries the bytes
printf 'a 1 1048576 0\nf 1\n' > "$work/one.record"
expect 0 '^simulated device: 1023 MiB \(0\.999 GiB\); ' --capacity 1 --step 3 --only \
  --current strategy:bfc "$work/one.record"
expect 0 '\(granularity 3 MiB\): current 3 MiB \(0\.003 GiB\), recommended 3 MiB \(0\.003 GiB\)$' \
  --capacity 1 --step 3 --only --current strategy:bfc "$work/one.record"
expect 0 '"capacity_bytes":1072693248,"capacity_step_bytes":3145728,' --json --capacity 1 \
  --step 3 --only --current strategy:bfc "$work/one.record"
expect 0 '^simulated device: 80\.0 GiB; ' --no-capacity --only --current strategy:bfc \
  "$work/one.record"
# a text input that begins with a UTF-8 byte-order mark (a Windows tool's) is
# read as what follows it, from a file or from standard input; a broken mark
# is an error that says so
{ printf '\xef\xbb\xbf'; cat "$work/two.json"; } > "$work/bom.json"
expect 0 'bom.json \(pool bfc@1\) \(trace\): 2 events, 2 allocations' --no-capacity \
  "$work/bom.json"
{ printf '\xef\xbb\xbf'; cat "$work/one.record"; } > "$work/bom.record"
expect 0 'bom.record \(record\): 2 events, 1 allocations' --no-capacity "$work/bom.record"
if "$bin" --no-capacity --only --current strategy:bfc - < "$work/bom.json" 2>&1 |
  grep -q '^history: - (pool bfc@1) (trace): 2 events'; then
  echo "ok   gpupool-advise - < bom.json"
else
  echo "FAIL gpupool-advise - < bom.json: not read as a trace"
  failures=$((failures + 1))
fi
printf '\xef\xbb{"traceEvents":[]}' > "$work/broken.json"
expect 1 'broken.json: byte 2: a broken UTF-8 byte-order mark: the file begins with EF BB 7B' \
  "$work/broken.json"
# the current configuration can be the recommendation: both roles, one row
expect 0 '^current\+recommended,"strategy:naive"' --csv --only --current strategy:naive \
  --no-capacity "$work/lm.trace"
expect 0 '^CUR\+REC .* strategy:naive$' --only --current strategy:naive --no-capacity \
  "$work/lm.trace"
# the json is a document programs can read
"$bin" --json --no-capacity "$work/lm.trace" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["candidates"]) >= 50, len(d["candidates"])
assert d["recommended"]["peak_reserved_bytes"] <= d["current"]["peak_reserved_bytes"]
' && echo "ok   --json parses" || { echo "FAIL --json"; failures=$((failures + 1)); }
# a path is any bytes: the JSON names it in valid UTF-8 (RFC 8259), each
# byte that begins no character a U+FFFD, control characters escaped;
# Python's json reads bytes as strict UTF-8
odd="$work/run"$'\xff\x01'".record"
printf 'a 1 4096 0\nf 1\n' > "$odd"
"$bin" --json --only --current strategy:naive --no-capacity "$odd" | python3 -c '
import json, sys
d = json.loads(sys.stdin.buffer.read())
assert d["input"]["source"].endswith("run\ufffd\x01.record"), d["input"]["source"]
' && echo "ok   --json of a path that is not UTF-8" ||
  { echo "FAIL --json of a path that is not UTF-8"; failures=$((failures + 1)); }

[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
