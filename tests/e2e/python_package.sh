#!/usr/bin/env bash
# The Python package (python/gpupool) on the host backend, without torch:
# tests/python/test_gpupool.py with python3's unittest, against the library
# of this build, with the C struct layout the ctypes declarations must match.
# Exit 77 (skip) without python3 or a C compiler.
set -uo pipefail
src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build/release}
for tool in python3 cc; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
bin=$(cd "$bin" && pwd) || { echo "FAIL: no build directory $bin"; exit 1; }
lib=$bin/libgpupool.so
[[ -f $lib ]] || { echo "FAIL: $lib is not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/layout.c" << 'C'
#include <stddef.h>
#include <stdio.h>
#include "gpupool/tag.h"
int main(void) {
  printf("%zu,%zu,%zu,%zu,%zu\n", sizeof(gpupool_stats), offsetof(gpupool_stats, num_ooms),
         offsetof(gpupool_stats, largest_free_block), offsetof(gpupool_stats, num_device_syncs),
         sizeof(gpupool_tag_stat));
  return 0;
}
C
cc -I "$src/include" -o "$tmp/layout" "$tmp/layout.c" || { echo "FAIL: layout probe"; exit 1; }
cd "$src/tests/python" &&
  GPUPOOL_LIBRARY=$lib GPUPOOL_CONF=backend:host,host_capacity_mb:64 \
  GPUPOOL_TEST_STATS_LAYOUT=$("$tmp/layout") PYTHONPATH=$src/python PYTHONDONTWRITEBYTECODE=1 \
  python3 -m unittest -v test_gpupool
