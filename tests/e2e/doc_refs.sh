#!/usr/bin/env bash
# Every .md file that a source, script or document of the repository cites
# by path exists in the repository (issue 19: a test helper cited a file
# under /tmp that nobody has). A path is checked from the repository's root
# and from the citing file's directory; an absolute path is an error; URLs
# are not checked. Exit 77 (skip) without git or python3.
set -uo pipefail
src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
for tool in git python3; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
[[ -e $src/.git ]] || { echo "SKIP: $src is not a git checkout"; exit 77; }
exec python3 - "$src" << 'PY'
import os, re, subprocess, sys

root = sys.argv[1]
files = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, text=True, check=True).stdout.splitlines()
text_file = re.compile(r"(\.(c|h|md|sh|py|cmake|yml|yaml|txt)|^tools/[\w-]+)$")
cited = re.compile(r"(?<![\w/.:@~$-])(/?(?:[\w.-]+/)+[\w.-]+\.md)\b")
bad, n = [], 0
for f in files:
    path = os.path.join(root, f)
    if not text_file.search(f) or not os.path.isfile(path):
        continue
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except UnicodeDecodeError:
        continue
    for lineno, line in enumerate(lines, 1):
        for m in cited.finditer(line):
            token_start = max(line.rfind(c, 0, m.start()) for c in " \t(<[\"'`") + 1
            if "://" in line[token_start:m.start()]:
                continue  # a URL
            ref, n = m.group(1), n + 1
            if ref.startswith("/"):
                bad.append(f"{f}:{lineno}: cites {ref}, outside the repository")
            elif not any(os.path.exists(os.path.join(base, ref))
                         for base in (root, os.path.join(root, os.path.dirname(f)))):
                bad.append(f"{f}:{lineno}: cites {ref}, which does not exist")
for b in bad:
    print("FAIL:", b)
print(f"{'FAIL' if bad else 'ok  '} {n} citations of .md files, {len(bad)} broken")
sys.exit(1 if bad else 0)
PY
