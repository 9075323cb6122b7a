#!/usr/bin/env bash
# End to end, on loopback: the agent (gpupool-demo on the host backend) with
# a web configuration file in exporter-toolkit's format — TLS, client
# certificates required and verified (RequireAndVerifyClientCert), basic auth
# with a bcrypt hash, a header — scraped by a real Prometheus:
#  - a job with the right CA, client certificate and password is up;
#  - jobs with a wrong password, without the CA, or with a client certificate
#    from another CA are down, and the agent's counters (401s, failed TLS
#    handshakes) show it;
#  - plain HTTP to the TLS port is refused and the agent keeps serving;
#  - 10^4 requests with wrong credentials (4 keep-alive connections, some
#    with one wrong password, some with a new one each time) get 401 or 429,
#    never 200, while every Prometheus scrape across the flood succeeds;
#  - the file is re-read: a new user works, a malformed file keeps the last
#    good configuration (reload metric 0), a new server certificate is served
#    after a rotation.
# Bounded polling only; everything it starts is stopped by the trap. Exit 77
# (skip) when a tool is missing.
set -uo pipefail

src=${GPUPOOL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${GPUPOOL_BINARY_DIR:-$src/build}
for tool in prometheus curl jq python3 certtool timeout; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
demo=$bin/examples/gpupool-demo
[[ -x $demo ]] || { echo "FAIL: $demo is not built"; exit 1; }

port_busy() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
free_port() { # a free port in 22500-22999 (this project's test range)
  local p tries
  for ((tries = 0; tries < 100; tries++)); do
    p=$((22500 + RANDOM % 500))
    port_busy "$p" || { echo "$p"; return 0; }
  done
  return 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-tls-e2e.XXXXXX") || exit 1
demo_pid="" prom_pid="" ok=0
cleanup() {
  [[ -n $prom_pid ]] && kill -TERM "$prom_pid" 2> /dev/null
  [[ -n $demo_pid ]] && kill -TERM "$demo_pid" 2> /dev/null
  wait 2> /dev/null
  if ((ok)); then
    rm -rf "$work"
  else
    echo "--- agent (stderr)"
    tail -n 30 "$work/demo.log" 2> /dev/null
    echo "--- prometheus.log"
    tail -n 20 "$work/prometheus.log" 2> /dev/null
    echo "(files kept in $work)"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }
wait_for() { # seconds, description, command...
  local limit=$1 what=$2 t
  shift 2
  for ((t = 0; t < limit * 4; t++)); do
    "$@" && return 0
    sleep 0.25
  done
  fail "timed out after ${limit}s waiting for $what"
}

bash "$src/tests/e2e/lib/tls_certs.sh" "$work" || fail "could not write the test certificates"
bcrypt() { # password -> a bcrypt hash (cost 10, as htpasswd -nBC 10)
  python3 -W ignore -c 'import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1024)))' "$1"
}
hash=$(bcrypt 'scrape-secret') || fail "python3 cannot write a bcrypt hash"
printf 'scrape-secret' > "$work/password"
printf 'not-the-password' > "$work/wrong-password"
write_config() { # extra user lines...
  {
    echo "tls_server_config:"
    echo "  cert_file: server.crt"
    echo "  key_file: server.key"
    echo "  client_ca_file: ca.crt"
    echo "  client_auth_type: RequireAndVerifyClientCert"
    echo "  min_version: TLS12"
    [[ -z ${tls_extra:-} ]] || echo "$tls_extra"
    echo "http_server_config:"
    echo "  headers:"
    echo "    X-Content-Type-Options: nosniff"
    echo "    Content-Security-Policy: \"default-src 'self'\""
    echo "basic_auth_users:"
    echo "  prometheus: '$hash'"
    printf '%s\n' "$@"
  } > "$work/web.yml.new"
  mv "$work/web.yml.new" "$work/web.yml"
}
write_config

agent_port=$(free_port) || fail "no free port"
agent=https://127.0.0.1:$agent_port
GPUPOOL_CONF=backend:host \
  GPUPOOL_AGENT_CONF="listen:127.0.0.1:$agent_port,web_config:$work/web.yml,cupti:off,healthz_open:1" \
  "$demo" --seconds 900 --quiet > "$work/demo.log" 2>&1 &
demo_pid=$!

client=(--cacert "$work/ca.crt" --cert "$work/client.crt" --key "$work/client.key")
code() { # user:password, path -> HTTP status ("000" when no answer)
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 "${client[@]}" -u "$1" "$agent$2"
}
metric() { # name{labels} -> value from the agent
  curl -fsS --max-time 10 "${client[@]}" -u prometheus:scrape-secret "$agent/metrics" |
    awk -v m="$1" '!v && (index($0, m " ") == 1 || index($0, m "{") == 1) { v = $NF } END { print v }'
}
agent_ready() {
  kill -0 "$demo_pid" 2> /dev/null || fail "the agent exited: $(tail -3 "$work/demo.log")"
  [[ $(code prometheus:scrape-secret /metrics) == 200 ]]
}
wait_for 30 "the agent to serve HTTPS" agent_ready
echo "ok   HTTPS with a client certificate and basic auth: 200"
scrape=$(curl -fsS --max-time 10 "${client[@]}" -u prometheus:scrape-secret "$agent/metrics")
for c in 401 429; do # their series exist before the first such answer, at 0
  grep -Eq "^gpupool_agent_http_errors_total\{(.*,)?code=\"$c\"(,.*)?\} 0\$" <<< "$scrape" ||
    fail "no gpupool_agent_http_errors_total{code=\"$c\"} 0 before the first $c"
done

[[ $(code prometheus:wrong /metrics) == 401 ]] || fail "a wrong password was not answered 401"
www=$(curl -s -D - -o /dev/null "${client[@]}" "$agent/metrics" | tr -d '\r' |
  grep -i '^WWW-Authenticate:')
[[ $www == 'WWW-Authenticate: Basic realm="gpupool"' ]] || fail "401 without WWW-Authenticate: $www"
[[ $(code x:y /healthz) == 200 ]] || fail "/healthz is not open with healthz_open:1"
hdr=$(curl -s -D - -o /dev/null "${client[@]}" "$agent/nope" | tr -d '\r' |
  grep -i '^X-Content-Type-Options:')
[[ $hdr == 'X-Content-Type-Options: nosniff' ]] || fail "the configured header is missing: $hdr"
# /ui sends these two headers of its own: the configured values replace them, once each.
ui_headers=$(curl -s -D - -o /dev/null "${client[@]}" -u prometheus:scrape-secret "$agent/ui" |
  tr -d '\r')
[[ $(grep -ci '^X-Content-Type-Options:' <<< "$ui_headers") == 1 ]] ||
  fail "/ui: X-Content-Type-Options not sent once: $ui_headers"
csp=$(grep -i '^Content-Security-Policy:' <<< "$ui_headers")
[[ $csp == "Content-Security-Policy: default-src 'self'" ]] ||
  fail "/ui: not the configured Content-Security-Policy alone: $csp"
echo "ok   401 with WWW-Authenticate; /healthz open; configured headers on a 404 and on /ui, once"

# No client certificate, one from another CA, plain HTTP: refused; still serving.
curl -s -o /dev/null --max-time 10 --cacert "$work/ca.crt" -u prometheus:scrape-secret \
  "$agent/metrics" && fail "served without a client certificate"
curl -s -o /dev/null --max-time 10 --cacert "$work/ca.crt" --cert "$work/other-client.crt" \
  --key "$work/other-client.key" -u prometheus:scrape-secret "$agent/metrics" &&
  fail "served a client certificate from another CA"
curl -s -o /dev/null --max-time 10 --cacert "$work/ca.crt" --cert "$work/server.crt" \
  --key "$work/server.key" -u prometheus:scrape-secret "$agent/metrics" &&
  fail "served a certificate of the CA whose key usage is TLS server only"
plain=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$agent_port/metrics")
[[ $plain == 000 ]] || fail "plain HTTP to the TLS port got an HTTP answer ($plain)"
[[ $(code prometheus:scrape-secret /metrics) == 200 ]] || fail "not serving after refused clients"
failures=$(metric gpupool_agent_tls_handshake_failures_total)
((${failures:-0} >= 4)) || fail "failed handshakes counted: ${failures:-none}, want >= 4"
echo "ok   no client certificate, another CA's, a server-only one, plain HTTP: refused ($failures failed handshakes); still serving"

# A real Prometheus: one good job and three that must fail.
prom_port=$(free_port) || fail "no free port"
while [[ $prom_port == "$agent_port" ]]; do prom_port=$(free_port); done
prom=http://127.0.0.1:$prom_port
job() { # name, basic_auth password file, tls_config lines...
  local name=$1 pw=$2
  shift 2
  printf '  - job_name: %s\n    scheme: https\n' "$name"
  printf '    basic_auth: {username: prometheus, password_file: %s}\n' "$pw"
  printf '    tls_config:\n'
  printf '      %s\n' "$@"
  printf "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" "$agent_port"
}
{
  printf 'global: {scrape_interval: 2s, scrape_timeout: 2s}\nscrape_configs:\n'
  job good "$work/password" "ca_file: $work/ca.crt" "cert_file: $work/client.crt" \
    "key_file: $work/client.key"
  job wrong_password "$work/wrong-password" "ca_file: $work/ca.crt" \
    "cert_file: $work/client.crt" "key_file: $work/client.key"
  job no_ca "$work/password" "cert_file: $work/client.crt" "key_file: $work/client.key"
  job other_ca_client "$work/password" "ca_file: $work/ca.crt" \
    "cert_file: $work/other-client.crt" "key_file: $work/other-client.key"
} > "$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn > "$work/prometheus.log" 2>&1 &
prom_pid=$!

q() { curl -sS --max-time 10 "$prom/api/v1/query" --data-urlencode "query=$1"; }
value() { q "$1" | jq -r '.data.result[0].value[1] // empty'; }
targets() { curl -s --max-time 10 "$prom/api/v1/targets"; }
health() { # job -> up/down/unknown and the last error
  targets | jq -r --arg j "$1" '.data.activeTargets[] | select(.labels.job == $j) |
    "\(.health)\t\(.lastError)"'
}
all_scraped() {
  kill -0 "$prom_pid" 2> /dev/null || fail "prometheus exited: $(tail -3 "$work/prometheus.log")"
  [[ $(targets | jq '[.data.activeTargets[] | select(.health != "unknown")] | length') == 4 ]]
}
wait_for 90 "Prometheus to scrape all four jobs" all_scraped
good_up() { [[ $(health good | cut -f1) == up ]]; }
wait_for 30 "the good job to be up" good_up
echo "ok   Prometheus scrapes over TLS with basic_auth and tls_config: up"
for j in wrong_password no_ca other_ca_client; do
  h=$(health "$j")
  [[ ${h%%$'\t'*} == down ]] || fail "job $j is not down: $h"
  echo "ok   job $j: down (${h#*$'\t'})"
done
[[ $(health wrong_password | cut -f2) == *401* ]] || fail "wrong_password did not fail with 401"
[[ $(value 'up{job="good"}') == 1 ]] || fail "up{job=good} is not 1"
n401=$(curl -fsS "${client[@]}" -u prometheus:scrape-secret "$agent/metrics" |
  awk '/^gpupool_agent_http_errors_total\{.*code="401"/ { print $NF }')
((${n401:-0} >= 1)) || fail "the agent did not count the 401s (${n401:-none})"
failures_now=$(metric gpupool_agent_tls_handshake_failures_total)
((${failures_now:-0} > failures)) ||
  fail "the no_ca and other_ca_client scrapes left no failed handshake (${failures_now:-none})"
echo "ok   the agent counts them: $n401 answers 401, failed handshakes $failures -> $failures_now"

# 10^4 requests with wrong credentials while Prometheus scrapes.
t0=$(date +%s)
flood=$(python3 - "$agent_port" "$work" << 'EOF'
import base64, http.client, ssl, sys, threading, collections, time
port, work = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=f"{work}/ca.crt")
ctx.load_cert_chain(f"{work}/client.crt", f"{work}/client.key")
counts = collections.Counter()
lock = threading.Lock()
# The repeated wrong password is answered from the failure cache once bcrypt
# has seen it; until then a flood of new passwords keeps bcrypt's budget
# spent (429). Bounded retries, then the flood.
for attempt in range(60):
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    c.request("GET", "/metrics", headers={"Authorization": "Basic " + base64.b64encode(b"prometheus:wrong").decode()})
    r = c.getresponse(); r.read(); c.close()
    if r.status == 401:
        break
    time.sleep(0.5)
def worker(w, n):
    conn = None
    for i in range(n):
        # Half the workers repeat one wrong password, half send a new one each time.
        pw = "wrong" if w % 2 == 0 else f"wrong-{w}-{i}"
        auth = base64.b64encode(f"prometheus:{pw}".encode()).decode()
        try:
            if conn is None:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
            conn.request("GET", "/metrics", headers={"Authorization": "Basic " + auth})
            r = conn.getresponse()
            r.read()
            status = r.status
        except Exception as e:
            status = type(e).__name__
            conn = None
        with lock:
            counts[status] += 1
threads = [threading.Thread(target=worker, args=(w, 2500)) for w in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(" ".join(f"{k}={v}" for k, v in sorted(counts.items(), key=str)))
EOF
)
t1=$(date +%s)
echo "     flood answers: $flood ($((t1 - t0)) s)"
for kv in $flood; do
  [[ ${kv%%=*} == 401 || ${kv%%=*} == 429 ]] || fail "flood answer ${kv%%=*} (want only 401 and 429): $flood"
done
total=0
for kv in $flood; do total=$((total + ${kv#*=})); done
((total == 10000)) || fail "the flood sent $total requests, want 10000"
# Two more scrapes, then every scrape of the good job during the flood was up.
sleep_until=$(($(date +%s) + 2))
after() { (($(date +%s) >= sleep_until)); }
wait_for 10 "two more scrape intervals" after
window=$(($(date +%s) - t0 + 1))
min_up=$(value "min_over_time(up{job=\"good\"}[${window}s])")
count_up=$(value "count_over_time(up{job=\"good\"}[${window}s])")
[[ $min_up == 1 ]] ||
  fail "a scrape of the good job failed during the flood (min up = $min_up; last error: $(health good | cut -f2))"
((${count_up:-0} >= 1)) || fail "no scrape of the good job during the flood"
echo "ok   10^4 wrong-credential requests: only 401/429; $count_up scrapes across it, all up"

# Reload: a new user works without a restart.
hash2=$(bcrypt 'second-secret')
write_config "  second: '$hash2'"
second_ok() { [[ $(code second:second-secret /metrics) == 200 ]]; }
wait_for 20 "the reloaded file's new user" second_ok
echo "ok   reload: a user added to the file is accepted"

# A malformed file: the last good configuration stays, the metric says so.
printf 'tls_server_config:\n  cert_file: [unclosed\n' > "$work/web.yml"
reload_failed() { [[ $(metric gpupool_agent_web_config_last_reload_successful) == 0 ]]; }
wait_for 20 "the reload metric to turn 0" reload_failed
[[ $(code second:second-secret /metrics) == 200 ]] || fail "the last good configuration was dropped"
grep -q "keeping the last good configuration" "$work/demo.log" || fail "no stderr line for the bad file"
echo "ok   a malformed file: last good configuration kept, reload metric 0, a line on stderr"

# cipher_suites: a TLS 1.2 handshake gets a listed suite or none, though
# GnuTLS's priority string also allows the key exchange with TLS 1.3's
# ciphers (AES-GCM); TLS 1.3 is served as before.
tls_extra="  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA]" write_config
tls12() { # OpenSSL cipher names -> HTTP status over TLS 1.2 ("000": no handshake)
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 --tls-max 1.2 --ciphers "$1" \
    "${client[@]}" -u prometheus:scrape-secret "$agent/metrics"
}
gcm_refused() { [[ $(tls12 ECDHE-ECDSA-AES128-GCM-SHA256) == 000 ]]; }
wait_for 20 "a TLS 1.2 suite outside cipher_suites to be refused" gcm_refused
[[ $(tls12 ECDHE-ECDSA-AES128-SHA) == 200 ]] || fail "the listed TLS 1.2 suite was refused"
[[ $(tls12 ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-SHA) == 200 ]] ||
  fail "a client offering the listed suite after an unlisted one was refused"
[[ $(code prometheus:scrape-secret /metrics) == 200 ]] || fail "TLS 1.3 refused with cipher_suites"
echo "ok   cipher_suites: TLS 1.2 gets only the listed suite (AES-GCM refused); TLS 1.3 served"

# The client's order (prefer_server_cipher_suites: false): a client whose
# first choice is unlisted gets the listed suite it offers after it, and
# among two listed suites its own first.
tls_extra="  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA]
  prefer_server_cipher_suites: false" write_config
tls12_suite() { # OpenSSL cipher names -> the suite curl reports, over TLS 1.2
  curl -sv -o /dev/null --max-time 10 --tls-max 1.2 --ciphers "$1" "${client[@]}" \
    -u prometheus:scrape-secret "$agent/metrics" 2>&1 | sed -n 's/.*SSL connection using TLSv1.2 \/ //p'
}
client_order() { [[ $(tls12_suite ECDHE-ECDSA-AES256-SHA:ECDHE-ECDSA-AES128-SHA) == ECDHE-ECDSA-AES256-SHA ]]; }
wait_for 20 "the client's order among listed suites" client_order
[[ $(tls12 ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-SHA) == 200 ]] ||
  fail "client order: an unlisted first choice refused the listed suite offered after it"
[[ $(tls12_suite ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-SHA) == ECDHE-ECDSA-AES128-SHA ]] ||
  fail "client order: not the listed suite"
[[ $(tls12 ECDHE-ECDSA-AES128-GCM-SHA256) == 000 ]] || fail "client order: an unlisted suite served"
# The server's order (the default): the list's first the client offers.
tls_extra="  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA]" write_config
server_order() { [[ $(tls12_suite ECDHE-ECDSA-AES256-SHA:ECDHE-ECDSA-AES128-SHA) == ECDHE-ECDSA-AES128-SHA ]]; }
wait_for 20 "the list's order with prefer_server_cipher_suites" server_order
echo "ok   cipher_suites: the client's or the list's order picks among the listed suites offered"

# client_allowed_sans where a certificate is only verified if given: a
# client that gives none names none and is refused (as exporter-toolkit);
# one with an allowed name is served.
tls_extra="  client_allowed_sans: [prometheus.example]" write_config
sed -i 's/RequireAndVerifyClientCert/VerifyClientCertIfGiven/' "$work/web.yml"
no_cert() { # HTTP status of a client without a certificate
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$work/ca.crt" \
    -u prometheus:scrape-secret "$agent/metrics"
}
no_cert_refused() { [[ $(no_cert) == 000 ]]; }
wait_for 20 "a client without a certificate to be refused under client_allowed_sans" no_cert_refused
[[ $(code prometheus:scrape-secret /metrics) == 200 ]] || fail "the allowed client was refused"
echo "ok   client_allowed_sans with VerifyClientCertIfGiven: no certificate, no entry"

# Certificate rotation: a new server certificate is served, on the same port.
write_config
reload_ok() { [[ $(metric gpupool_agent_web_config_last_reload_successful) == 1 ]]; }
wait_for 20 "the reload metric to turn 1" reload_ok
(cd "$work" && certtool --generate-privkey --key-type=ecdsa --outfile server2.key 2> /dev/null &&
  printf '%s\n' "cn = rotated" "ip_address = 127.0.0.1" "tls_www_server" "signing_key" \
    "expiration_days = 30" > server2.tmpl &&
  certtool --generate-certificate --load-privkey server2.key --load-ca-certificate ca.crt \
    --load-ca-privkey ca.key --template server2.tmpl --outfile server2.crt 2> /dev/null) ||
  fail "could not issue the rotated certificate"
cp "$work/server2.key" "$work/server.key.new"
cp "$work/server2.crt" "$work/server.crt.new"
mv "$work/server.crt.new" "$work/server.crt"
mv "$work/server.key.new" "$work/server.key"
rotated() {
  curl -sv -o /dev/null --max-time 10 "${client[@]}" -u prometheus:scrape-secret "$agent/healthz" 2>&1 |
    grep -q 'subject: CN=rotated'
}
wait_for 40 "the rotated certificate to be served" rotated
wait_for 30 "the good job to be up after the rotation" good_up
echo "ok   certificate rotation: the new certificate is served on the same port; Prometheus still up"

kill -0 "$demo_pid" 2> /dev/null || fail "the agent exited"
ok=1
echo "PASS"
