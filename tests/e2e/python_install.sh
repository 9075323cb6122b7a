#!/usr/bin/env bash
# `pip install ./python` as a user does it, offline: a clean clone of this
# repository, the library built as README says (build/release), a fresh
# venv, `pip install --no-index ./python` (no package index: the build
# backend is in the package and needs nothing), then, from another
# directory and without GPUPOOL_LIBRARY, the package imports, finds the
# library it was installed with and reads a pool on the host backend.
# Exit 77 (skip) when git, cmake or python3's venv module is missing.
set -uo pipefail
src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
for tool in git cmake python3; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
python3 -c "import venv, ensurepip" 2> /dev/null ||
  { echo "SKIP: python3's venv/ensurepip is not installed (Debian: python3-venv)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

git clone -q "$src" "$tmp/src" || fail "git clone $src"
cd "$tmp/src" || fail "no clone"
echo "clone at $(git log --oneline -1)"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DGPUPOOL_BENCH=OFF \
  -DGPUPOOL_WITH_CUDA=OFF > "$tmp/configure.log" 2>&1 || { tail -30 "$tmp/configure.log"; fail "cmake"; }
cmake --build build/release -j "${JOBS:-2}" --target gpupool > "$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log"; fail "build"; }
python3 -m venv "$tmp/venv" || fail "python3 -m venv"
"$tmp/venv/bin/python" -m pip install -q --no-index ./python > "$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; fail "pip install --no-index ./python"; }

cd "$tmp" || exit 1
rm -rf "$tmp/src/build" # the installed package must not need the build tree
env -u GPUPOOL_LIBRARY GPUPOOL_CONF=backend:host,host_capacity_mb:64 PYTHONDONTWRITEBYTECODE=1 \
  "$tmp/venv/bin/python" - << 'PY' || fail "the installed package"
import os, sys
import gpupool
from gpupool import _lib
path = gpupool.library_path()
assert path.startswith(sys.prefix) and path.endswith("gpupool/libgpupool.so"), path
assert "torch" not in sys.modules
lib = _lib.lib()
with gpupool.tag("weights"):
    p = lib.gpupool_torch_malloc(3 << 20, 0, None)  # as PyTorch's pluggable allocator calls it
assert p
s = gpupool.memory_stats(0)
assert s["allocated_bytes.all.current"] == 3 << 20, s["allocated_bytes.all.current"]
assert gpupool.memory_allocated_by_tag(0) == {"weights": 3 << 20, "untagged": 0}
lib.gpupool_torch_free(p, 0, 0, None)
assert gpupool.empty_cache() == 20 << 20
print(f"installed package ok: {path}")
PY
echo "ok"
