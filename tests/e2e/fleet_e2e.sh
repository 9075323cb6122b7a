#!/usr/bin/env bash
# End to end: a simulated cluster (tools/run-demo --cluster 3: three demo
# processes host-0..2 with 2-4 simulated GPUs each) scraped by a real
# Prometheus with the shipped config and rules (1 s scrape and evaluation),
# plus a stand-in for dcgm-exporter serving DCGM_FI_DEV_FB_USED for the
# demos' UUIDs. Checks that every target is up, that every recording rule
# evaluates without error and yields series, then runs every PromQL
# expression of both dashboards (template variables substituted,
# $__rate_interval as 1m and as 15s) through /api/v1/query and asserts that
# each returns data; that the detail dashboard's Targets up follows the Host
# variable, and keeps a target that stops answering (one demo stopped with
# SIGSTOP) under its host as down. Finally stops run-demo and checks nothing
# is left listening. Bounded in time; everything it starts is stopped by the trap.
# Exit 77 (skip) when a tool is missing.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}
for tool in prometheus curl jq python3 timeout; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
demo=$bin/examples/gpupool-demo
[[ -x $demo ]] || { echo "FAIL: $demo is not built"; exit 1; }

port_busy() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
# Five consecutive free ports: three demos, Prometheus, the dcgm stand-in.
# Below Linux's ephemeral range (32768 and up by default), so that no
# outgoing connection is given one of them between this check and the bind.
pick_ports() {
  local tries base i
  for ((tries = 0; tries < 50; tries++)); do
    base=$((20000 + RANDOM % 12700))
    for ((i = 0; i < 5; i++)); do port_busy $((base + i)) && continue 2; done
    echo "$base"
    return 0
  done
  return 1
}
base=$(pick_ports) || { echo "FAIL: no free ports"; exit 1; }
prom_port=$((base + 3))
dcgm_port=$((base + 4))
prom=http://127.0.0.1:$prom_port

work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-fleet-e2e.XXXXXX") || exit 1
run_demo_pid=""
dcgm_pid=""
ok=0
cleanup() {
  [[ -n $dcgm_pid ]] && kill -TERM "$dcgm_pid" 2> /dev/null
  [[ -n $run_demo_pid ]] && kill -TERM "$run_demo_pid" 2> /dev/null
  wait 2> /dev/null
  if ((ok)); then
    rm -rf "$work"
  else
    echo "--- run-demo.log"
    tail -n 30 "$work/run-demo.log" 2> /dev/null
    echo "--- prometheus.log"
    tail -n 20 "$work/prometheus.log" 2> /dev/null
    echo "(files kept in $work)"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }

q() { # instant query -> the API's JSON answer
  curl -sS --max-time 10 "$prom/api/v1/query" --data-urlencode "query=$1"
}

wait_for() { # seconds, description, command...
  local limit=$1 what=$2 t
  shift 2
  for ((t = 0; t < limit * 4; t++)); do
    "$@" && return 0
    sleep 0.25
  done
  fail "timed out after ${limit}s waiting for $what"
}

# The dcgm-exporter stand-in is listed before Prometheus starts.
mkdir -p "$work/sd/dcgm-exporter" "$work/dcgm"
printf '[{"targets": ["127.0.0.1:%d"], "labels": {"__metrics_path__": "/metrics.txt"}}]\n' \
  "$dcgm_port" > "$work/sd/dcgm-exporter/fake.json"

"$src/tools/run-demo" --cluster 3 --seconds 150 --scrape-interval 1s --base-port "$base" \
  --prometheus-port "$prom_port" --build-dir "$bin" --no-build --workdir "$work" \
  > "$work/run-demo.log" 2>&1 &
run_demo_pid=$!

ready() {
  kill -0 "$run_demo_pid" 2> /dev/null || fail "run-demo exited early"
  curl -fs -o /dev/null --max-time 1 "$prom/-/ready"
}
wait_for 60 "run-demo to start the demos and Prometheus" ready

# dcgm-exporter's framebuffer gauge (MiB) for every GPU the demos report.
uuids=$(for ((i = 0; i < 3; i++)); do
  curl -fsS --max-time 5 "http://127.0.0.1:$((base + i))/metrics" |
    grep -o 'UUID="[^"]*"' | sort -u
done)
[[ $(wc -l <<< "$uuids") -ge 6 ]] || fail "expected at least 6 GPUs (2-4 per demo), got: $uuids"
{
  echo "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB)."
  echo "# TYPE DCGM_FI_DEV_FB_USED gauge"
  n=0
  while read -r u; do
    echo "DCGM_FI_DEV_FB_USED{gpu=\"$n\",$u,modelName=\"stand-in\"} $((4000 + n))"
    n=$((n + 1))
  done <<< "$uuids"
} > "$work/dcgm/metrics.txt"
timeout 200 python3 -m http.server --bind 127.0.0.1 --directory "$work/dcgm" "$dcgm_port" \
  > "$work/dcgm.log" 2>&1 &
dcgm_pid=$!

# One error answer per agent, so that the HTTP error counter has series.
for ((i = 0; i < 3; i++)); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((base + i))/no-such-page")
  [[ $code == 404 ]] || fail "agent $i answered $code to an unknown path"
done

targets_up() {
  [[ $(q 'count(up{job="gpupool"} == 1)' | jq -r '.data.result[0].value[1]') == 3 ]] &&
    [[ $(q 'count(up{job="dcgm-exporter"} == 1)' | jq -r '.data.result[0].value[1]') == 1 ]]
}
wait_for 60 "3 demo targets and the dcgm stand-in to be up" targets_up
echo "ok   targets up: 3 demos, dcgm-exporter stand-in"

# Every recording rule yields series and no rule reports an error.
rules=$(grep -o 'record: *[^ ]*' "$src/deploy/prometheus/rules/gpupool-recording.yml" |
  sed 's/record: *//')
has_data() { [[ $(q "$1" | jq -r '.data.result | length') -gt 0 ]]; }
for r in $rules; do
  wait_for 30 "recording rule $r" has_data "$r"
done
echo "ok   $(wc -w <<< "$rules") recording rules have values"
bad_rules=$(curl -sS "$prom/api/v1/rules" |
  jq -r '.data.groups[].rules[] | select(.health != "ok") | "\(.name): \(.lastError)"')
[[ -z $bad_rules ]] || fail "rules with errors: $bad_rules"
echo "ok   every rule evaluates without error"

# Two more scrapes of every target, so that every rate window holds samples
# of all series (polled: the count of `up` samples of the least scraped one).
scrapes() { q 'min(count_over_time(up[1h]))' | jq -r '.data.result[0].value[1] // "0"'; }
scrapes0=$(scrapes)
two_more_scrapes() { (($(scrapes) >= scrapes0 + 2)); }
wait_for 30 "two more scrapes of every target" two_more_scrapes

cupti_up=$(q 'max(gpupool_cupti_up)' | jq -r '.data.result[0].value[1] // "0"')

# Every expression of every dashboard panel, and each query variable's
# selector, with the template variables substituted.
substitute() { # expr, rate interval
  local e=$1
  e=${e//'$__rate_interval'/$2}
  e=${e//'$__interval'/15s}
  e=${e//'$__range'/5m}
  for v in job instance hostname UUID pool; do e=${e//"\$$v"/.+}; done
  printf '%s' "$e"
}
exprs=$(jq -r '
  ([.panels[] | ., (.panels[]?)] | .[] | select(.targets) | .title as $t |
     .targets[] | [$t, .expr] | @tsv),
  (.templating.list[] | select(.definition) |
     [("variable " + .name), (.definition | capture("^label_values\\((?<s>.*), *[A-Za-z_]+\\)$").s)]
     | @tsv)' "$src"/dashboards/*.json)
[[ -n $exprs ]] || fail "no expressions found in dashboards/"

passed=0 failed=0 skipped=0
while IFS=$'\t' read -r title expr; do
  for interval in 1m 15s; do
    query=$(substitute "$expr" "$interval")
    if [[ $query == *'$'* ]]; then
      echo "FAIL [$title] unknown template variable in: $expr"
      failed=$((failed + 1))
      continue
    fi
    answer=$(q "$query")
    status=$(jq -r '.status' <<< "$answer")
    count=$(jq -r '.data.result | length' <<< "$answer" 2> /dev/null)
    if [[ $status == success && ${count:-0} -gt 0 ]]; then
      passed=$((passed + 1))
    elif [[ $query == *gpupool_cuda_memory_bytes* && $cupti_up != 1 ]]; then
      # Only CUPTI (a GPU with a driver) produces this family.
      echo "skip [$title] needs CUPTI recording (gpupool_cupti_up is 0 here): $query"
      skipped=$((skipped + 1))
    else
      echo "FAIL [$title] ($interval) $status, $count series: $query"
      jq -c '.error // empty' <<< "$answer"
      failed=$((failed + 1))
    fi
  done
done <<< "$exprs"
echo "dashboard queries: $passed returned data, $failed failed, $skipped skipped"
((failed == 0)) || fail "$failed dashboard queries returned no data"
((passed > 80)) || fail "only $passed dashboard queries ran"

# The detail dashboard's "Targets up" follows the Host variable: host-1
# alone is one target, its own; All is the three agents (not the dcgm
# stand-in, which is no gpupool agent).
targets_expr=$(jq -r '.panels[] | select(.title == "Targets up") | .targets[0].expr' \
  "$src"/dashboards/gpupool-detail.json)
[[ -n $targets_expr ]] || fail "no Targets up panel in gpupool-detail.json"
host1=$(substitute "${targets_expr//'$hostname'/host-1}" 1m)
host1_instances=$(q "$host1" | jq -r '[.data.result[].metric.instance] | join(" ")')
want_instance=$(q 'gpupool_build_info{hostname="host-1"}' | jq -r '.data.result[0].metric.instance')
[[ $host1_instances == "$want_instance" ]] ||
  fail "Targets up with Host host-1: '$host1_instances', want '$want_instance' alone"
all_count=$(q "$(substitute "$targets_expr" 1m)" | jq -r '.data.result | length')
((all_count == 3)) || fail "Targets up with Host All: $all_count targets, want the 3 agents"
echo "ok   Targets up follows Host: host-1 is $want_instance; All is the 3 agents"

# A target that stops answering (its series gone stale) stays on the panel
# under its host, as down: this run's host-2 demo is stopped, then resumed
# (resumed before any verdict, so that a failure leaves nothing stopped).
demo2=
for cmdline in /proc/[0-9]*/cmdline; do
  line=$(tr '\0' ' ' < "$cmdline" 2> /dev/null) || continue
  # the demo itself, not the `timeout` that runs it
  if [[ ${line%% *} == */gpupool-demo &&
    $line == *"--listen 127.0.0.1:$((base + 2)) --sd-dir $work/"* ]]; then
    demo2=${cmdline#/proc/}
    demo2=${demo2%/cmdline}
    break
  fi
done
[[ -n $demo2 ]] || fail "no demo process listening on port $((base + 2)) (host-2)"
host2=$(substitute "${targets_expr//'$hostname'/host-2}" 1m)
host2_up() { q "$host2" | jq -r '[.data.result[].value[1]] | join(" ")'; }
kill -STOP "$demo2"
seen=
for ((t = 0; t < 120; t++)); do
  seen=$(host2_up)
  [[ $seen == 0 ]] && break
  sleep 0.25
done
kill -CONT "$demo2"
[[ $seen == 0 ]] || fail "host-2 stopped for 30 s: Targets up with Host host-2 gave '$seen', want 0"
host2_is_up() { [[ $(host2_up) == 1 ]]; }
wait_for 30 "host-2's target to show up again" host2_is_up
echo "ok   a target that stops answering shows down under its host, and up again"

# Stopping run-demo stops everything it started.
kill -TERM "$run_demo_pid"
stopped() { ! kill -0 "$run_demo_pid" 2> /dev/null; }
wait_for 20 "run-demo to stop" stopped
wait "$run_demo_pid"
rc=$?
run_demo_pid=""
((rc == 0)) || fail "run-demo exited with status $rc on SIGTERM"
for p in "$base" $((base + 1)) $((base + 2)) "$prom_port"; do
  port_busy "$p" && fail "port $p still served after run-demo stopped"
done
echo "ok   run-demo stopped; nothing left listening"
ok=1
