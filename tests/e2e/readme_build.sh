#!/usr/bin/env bash
# README's PyTorch section, followed literally in a fresh copy of the
# repository (issue 19): every command of its sh blocks is run as written,
# then every build/release/... path that README.md, docs/torch.md,
# docs/cupti.md and examples/torch_gpupool.py name must exist. Also: the
# example, given a PyTorch older than 2.0, says which version it needs.
# The copy holds the files git tracks or would track (the working tree as
# it is, without build directories). Exit 77 (skip) when a tool is missing.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
for tool in git tar cmake python3; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
python3 -c "import venv, ensurepip" 2> /dev/null ||
  { echo "SKIP: python3's venv/ensurepip is not installed (Debian: python3-venv)"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-readme.XXXXXX") || exit 1
ok=0
cleanup() {
  if ((ok)); then rm -rf "$work"; else echo "(files kept in $work)"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

clone=$work/gpupool
mkdir -p "$clone"
(cd "$src" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$clone" || fail "cannot copy the repository"
[[ -f $clone/README.md ]] || fail "no README.md in the copy"

# The "## PyTorch" section of README.md, up to the next "## " heading.
section=$(awk '/^## /{on = ($0 == "## PyTorch")} on' "$clone/README.md")
[[ -n $section ]] || fail "README.md has no '## PyTorch' section"
# Its sh blocks' commands, comments removed.
mapfile -t commands < <(awk '/^```sh$/{b=1; next} /^```/{b=0} b' <<< "$section" |
  sed 's/[[:space:]]#.*$//; s/^#.*$//' | grep -v '^[[:space:]]*$')
((${#commands[@]} > 0)) || fail "README's PyTorch section has no sh command"
# A user's `pip` is that of their environment: here a fresh venv's, first on PATH.
python3 -m venv "$work/venv" || fail "python3 -m venv"
for c in "${commands[@]}"; do
  echo "run  $c"
  (cd "$clone" && PATH="$work/venv/bin:$PATH" bash -c "$c") > "$work/command.log" 2>&1 ||
    { tail -n 30 "$work/command.log"; fail "README's command '$c' failed"; }
done

# Every build/release path named in the user-facing text exists now.
files=(README.md docs/torch.md docs/cupti.md examples/torch_gpupool.py)
mapfile -t paths < <(cd "$clone" && grep -oh 'build/release/[A-Za-z0-9_./-]*[A-Za-z0-9_]' \
  "${files[@]}" | sort -u)
((${#paths[@]} >= 2)) || fail "expected README to name build/release/libgpupool.so and the injection library"
for p in "${paths[@]}"; do
  [[ -e $clone/$p ]] || fail "$p is named in ${files[*]} but does not exist after README's commands"
  echo "ok   $p"
done
# The section names a library that exists, and the package it installed finds its own copy.
lib=$(grep -o '"build/release/[^"]*\.so"' <<< "$section" | head -1 | tr -d '"')
[[ -n $lib && -e $clone/$lib ]] || fail "README's PyTorch section names '$lib', which does not exist"
(cd "$work" && env -u GPUPOOL_LIBRARY "$work/venv/bin/python" -c \
  'import gpupool, os; p = gpupool.library_path(); assert os.path.exists(p), p; print(p)') \
  > "$work/pkg.out" 2>&1 || fail "the package README installed: $(cat "$work/pkg.out")"
echo "ok   the installed package finds $(cat "$work/pkg.out")"
for must in build/release/libgpupool.so build/release/inject/libgpupool_inject.so; do
  printf '%s\n' "${paths[@]}" | grep -qx "$must" || fail "the docs do not name $must"
done

# A PyTorch without CUDAPluggableAllocator (1.13): a clear message, no trace.
mkdir -p "$work/oldtorch/torch/cuda"
printf '__version__ = "1.13.1"\nfrom . import cuda\n' > "$work/oldtorch/torch/__init__.py"
printf 'from . import memory\n' > "$work/oldtorch/torch/cuda/__init__.py"
printf '# 1.13: no CUDAPluggableAllocator\n' > "$work/oldtorch/torch/cuda/memory.py"
PYTHONPATH=$work/oldtorch python3 "$clone/examples/torch_gpupool.py" "$clone/$lib" \
  > "$work/old.out" 2>&1 && fail "the example ran with torch 1.13"
grep -q "needs PyTorch >= 2.0.*this is torch 1.13.1" "$work/old.out" ||
  fail "with torch 1.13 the example said: $(cat "$work/old.out")"
grep -q Traceback "$work/old.out" && fail "a traceback with torch 1.13: $(cat "$work/old.out")"
echo "ok   the example names the PyTorch it needs"
ok=1
