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
expect() {
  local want=$1 pattern=$2 out rc
  shift 2
  out=$("$bin" "$@" 2>&1)
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
expect 2 "--max-added-ms '-1' is not a time" --max-added-ms -1 "$work/lm.trace"
expect 2 'one HISTORY only' "$work/lm.trace" "$work/lm.trace"
expect 2 '--json or --csv, not both' --json --csv "$work/lm.trace"
expect 2 '--only tries --current and --conf' --only "$work/lm.trace"
expect 1 'cannot open' "$work/missing"
expect 1 "unknown history format 'xml'" --format xml "$work/lm.trace"
expect 1 'key backend' --conf backend:cuda "$work/lm.trace"
expect 1 'garbage_collection_threshold' --current garbage_collection_threshold:2 \
  "$work/lm.trace"
printf 'a 1 100 0\nq\n' > "$work/bad.record"
expect 1 'bad.record:2: expected' "$work/bad.record"
head -c 1000 "$work/snap.pickle" > "$work/cut.pickle"
expect 1 'cut.pickle: byte [0-9]+: truncated' "$work/cut.pickle"
# the json is a document programs can read
"$bin" --json --no-capacity "$work/lm.trace" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["candidates"]) >= 50, len(d["candidates"])
assert d["recommended"]["peak_reserved_bytes"] <= d["current"]["peak_reserved_bytes"]
' && echo "ok   --json parses" || { echo "FAIL --json"; failures=$((failures + 1)); }

[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
