#!/usr/bin/env bash
# Writes the certificates the TLS tests use into the directory $1, with
# certtool (gnutls-bin): ECDSA P-256 keys, a CA, a server certificate for
# 127.0.0.1 and localhost, a client certificate from that CA, a second CA
# with its own client certificate, a server certificate that expired and
# one that is not valid yet. Quiet; non-zero on failure.
set -euo pipefail
d=$1
mkdir -p "$d"
cd "$d"
key() { certtool --generate-privkey --key-type=ecdsa --curve=secp256r1 --outfile "$1" 2> /dev/null; }
tmpl() { # file, lines...
  local f=$1
  shift
  printf '%s\n' "$@" > "$f"
}
for ca in ca other-ca; do
  key "$ca.key"
  tmpl "$ca.tmpl" "cn = gpupool test $ca" "ca" "cert_signing_key" "expiration_days = 30"
  certtool --generate-self-signed --load-privkey "$ca.key" --template "$ca.tmpl" \
    --outfile "$ca.crt" 2> /dev/null
done
# issue name, ca, template lines...
issue() {
  local name=$1 ca=$2
  shift 2
  key "$name.key"
  tmpl "$name.tmpl" "$@"
  certtool --generate-certificate --load-privkey "$name.key" --load-ca-certificate "$ca.crt" \
    --load-ca-privkey "$ca.key" --template "$name.tmpl" --outfile "$name.crt" 2> /dev/null
}
server=("cn = 127.0.0.1" "ip_address = 127.0.0.1" "dns_name = localhost" "tls_www_server"
  "signing_key" "encryption_key")
issue server ca "${server[@]}" "expiration_days = 30"
issue expired ca "${server[@]}" "activation_date = \"2020-01-01 00:00:00 UTC\"" \
  "expiration_date = \"2020-02-01 00:00:00 UTC\""
issue future ca "${server[@]}" "activation_date = \"2099-01-01 00:00:00 UTC\"" \
  "expiration_date = \"2099-02-01 00:00:00 UTC\""
client=("cn = prometheus" "dns_name = prometheus.example" "tls_www_client" "signing_key")
issue client ca "${client[@]}" "expiration_days = 30"
issue other-client other-ca "${client[@]}" "expiration_days = 30"
rm -f ./*.tmpl
