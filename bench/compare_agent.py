#!/usr/bin/env python3
"""The server time of one /metrics scrape, before and after a change, side by side.

    bench/compare_agent.py BEFORE AFTER [--rounds N]

BEFORE and AFTER are two bench_agent programs (e.g. main's build and yours, both
Release). They run in turns, N rounds (default 5), so that a slow phase of a shared
machine hits both alike; each run prints the median of its scrapes per row of its
"Server time of one /metrics scrape" table, and this prints per row the median of
those medians, before and after, and after / before. A bench_agent without
--scrape-only (older builds) runs with --quick: the hot-path part then runs too and
each row is a median of 200 scrapes instead of 2000.
"""
import argparse
import statistics
import subprocess
import sys


def run(program):
    for args in (["--scrape-only"], ["--quick"]):
        p = subprocess.run([program] + args, capture_output=True, text=True)
        if p.returncode == 2:  # usage: an older bench_agent
            continue
        if p.returncode != 0:
            sys.exit(f"compare_agent: {program} {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
        return parse(p.stdout)
    sys.exit(f"compare_agent: {program} takes neither --scrape-only nor --quick")


def parse(out):
    """{row: (median us, bytes)} of the scrape table."""
    rows, inside = {}, False
    for line in out.splitlines():
        if line.startswith("### Server time of one /metrics scrape"):
            inside = True
        elif inside and line.startswith("| ") and not line.startswith("| what"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 4 and cells[1] != "failed":
                rows[cells[0]] = (float(cells[1]), int(cells[3]))
        elif inside and line.startswith("- throughput"):
            break
    if not rows:
        sys.exit("compare_agent: no scrape table in the output")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if a.rounds < 1:
        sys.exit("compare_agent: --rounds must be at least 1")
    runs = {"before": [], "after": []}
    for _ in range(a.rounds):
        runs["before"].append(run(a.before))
        runs["after"].append(run(a.after))
    print(f"{a.rounds} rounds, each program in turn; median of the per-run medians, µs\n")
    print("| what | before µs | after µs | after / before | before bytes | after bytes |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in runs["after"][0]:
        if not all(row in r for r in runs["before"] + runs["after"]):
            continue
        b = statistics.median(r[row][0] for r in runs["before"])
        f = statistics.median(r[row][0] for r in runs["after"])
        print(f"| {row} | {b:.1f} | {f:.1f} | {f / b:.2f} | {runs['before'][0][row][1]} "
              f"| {runs['after'][0][row][1]} |")


if __name__ == "__main__":
    main()
