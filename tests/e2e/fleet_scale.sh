#!/usr/bin/env bash
# A small simulated fleet (tools/fleet-bench --check): 20 agents with 4
# simulated GPUs and 16 pools each, discovered through file_sd by a real
# Prometheus that scrapes and evaluates the shipped rules every second.
# Asserts that every query of the fleet dashboard returns data (those fed
# by CUPTI or dcgm-exporter are skipped with the reason; fleet_e2e.sh has a
# dcgm-exporter stand-in), that every recording rule has values, that every
# rule evaluates without error and that no alert is pending or firing on
# the healthy fleet. Bounded: every wait polls with a limit; the agents stop
# by themselves after --max-seconds even if this script is killed.
# Exit 77 (skip) when prometheus is not installed.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
# A free block of ports for Prometheus, away from other tests' ranges.
exec timeout 300 python3 "$src/tools/fleet-bench" --check --agents 20 --scrape 1s \
  --max-seconds 240 --port $((30000 + RANDOM % 20000)) --build-dir "$bin"
