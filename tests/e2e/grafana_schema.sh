#!/usr/bin/env bash
# Both dashboards against Grafana's published Dashboard type (npm
# @grafana/schema, pinned below): installs the package into the build
# directory (once; quiet; reused while the pinned version is there), then
# runs grafana_schema.mjs on dashboards/*.json. A dashboard with the old
# `"current": {}` variables must fail, so the check itself is checked.
# No network is an error, not a skip: CI reaches npm. Exit 77 only where node
# or npm is not installed outside CI.
set -uo pipefail

version=13.2.3
src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}
for tool in node npm jq; do
  if ! command -v "$tool" > /dev/null; then
    [[ -n ${CI:-} ]] && { echo "FAIL: $tool is not installed (tools/ci-packages.txt)"; exit 1; }
    echo "SKIP: $tool is not installed"
    exit 77
  fi
done

prefix=$bin/npm
pkg=$prefix/node_modules/@grafana/schema/package.json
if [[ $(jq -r .version "$pkg" 2> /dev/null) != "$version" ]]; then
  mkdir -p "$prefix" || exit 1
  if ! out=$(npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error \
    "@grafana/schema@$version" 2>&1); then
    echo "$out" | tail -n 5
    echo "FAIL: npm install @grafana/schema@$version into $prefix"
    exit 1
  fi
fi
[[ $(jq -r .version "$pkg") == "$version" ]] || { echo "FAIL: $pkg is not $version"; exit 1; }

check=$src/tests/e2e/grafana_schema.mjs
node "$check" "$prefix/node_modules" "$src"/dashboards/*.json || exit 1

# The checker finds what Grafana's type rejects.
tmp=$(mktemp "${TMPDIR:-/tmp}/gpupool-schema.XXXXXX.json") || exit 1
trap 'rm -f "$tmp"' EXIT
jq '.templating.list[1].current = {} | .graphTooltip = 7' "$src/dashboards/gpupool-fleet.json" > "$tmp"
out=$(node "$check" "$prefix/node_modules" "$tmp")
rc=$?
((rc == 1)) || { echo "$out"; echo "FAIL: a broken dashboard passed (status $rc)"; exit 1; }
grep -q "list\[1\].current: required member 'text' is missing" <<< "$out" &&
  grep -q 'graphTooltip: 7 is not one of' <<< "$out" ||
  { echo "$out"; echo "FAIL: the checker missed an error of the broken dashboard"; exit 1; }
echo "ok   a dashboard with current: {} and a bad enum fails the check"
