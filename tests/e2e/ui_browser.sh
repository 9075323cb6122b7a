#!/usr/bin/env bash
# End to end: the agent's /ui page in a real headless Chromium (Debian's
# chromium), driven over the DevTools protocol by ui_browser.py (Python
# standard library): first from gpupool-demo on the host backend, then from
# tests/ui/ui_fixture with pools frozen in a known state, a pool of 10^5
# blocks, tagged blocks and an OOM. Asserts on the rendered DOM and canvas
# (pools listed, segment bars to scale, values equal to /metrics', the OOM
# card, the tag legend and colours, no console errors, a destroyed pool, a
# hung and a stopped agent, basic auth and its 401 and 429, the agent
# restarted on its port, a page whose name was rebound to 127.0.0.1 refused) and saves screenshots in $GPUPOOL_BINARY_DIR/ui-test/.
# Prints the time from navigation to a drawn map of 10^5 blocks (a figure,
# not an assertion). Exit 77 (skip) when chromium or python3 is missing.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}
for tool in chromium python3 timeout; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
for exe in "$bin/examples/gpupool-demo" "$bin/tests/ui_fixture"; do
  [[ -x $exe ]] || { echo "FAIL: $exe is not built"; exit 1; }
done
# Bounded: the driver's own waits are bounded too; this catches a hung browser.
timeout -k 10 540 python3 "$src/tests/e2e/ui_browser.py" --chromium "$(command -v chromium)" \
  --demo "$bin/examples/gpupool-demo" --fixture "$bin/tests/ui_fixture" --out "$bin/ui-test"
