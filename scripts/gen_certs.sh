#!/usr/bin/env bash
# Generates the certificates for Tessel's mutual TLS (tests, demos, a first
# deployment): a CA, a server certificate, a client certificate, role
# certificates, and an "untrusted" CA with a certificate of its own for
# negative tests.
#
#   scripts/gen_certs.sh OUTDIR [WORKER_JOB...]
#
# OUTDIR/ca.crt                     the CA every process trusts (--tls_ca)
# OUTDIR/server.crt, server.key     registry and shard servers (--tls_cert/--tls_key);
#                                   also usable as a client (they call each other)
# OUTDIR/client.crt, client.key     workers, launchers and tesselctl
# OUTDIR/untrusted-ca.crt           a CA nobody trusts, and
# OUTDIR/untrusted.crt, .key        a certificate it issued: must be refused
#
# Role certificates (docs/operations.md, Roles and credentials): the role is
# the subject's O (organization) "tessel:ROLE", and a worker's CN
# "worker:JOB" scopes it to one job (Kubernetes' convention: O = group,
# CN = user). server.crt and client.crt carry no role.
# OUTDIR/admin.crt, admin.key       O=tessel:admin: tesselctl, an operator
# OUTDIR/worker.crt, worker.key     O=tessel:worker, CN=tessel-worker: a worker of any job
# OUTDIR/reader.crt, reader.key     O=tessel:reader: stats and listings
# OUTDIR/server-role.crt, .key      O=tessel:server: registry and shard servers (server
#                                   and client use, like server.crt)
# OUTDIR/worker-JOB.crt, .key       O=tessel:worker, CN=worker:JOB, for each WORKER_JOB
#                                   given (letters, digits, '.', '_', '-')
#
# Keys are ECDSA P-256, certificates valid 365 days, leaf certificates carry
# subjectAltName DNS:localhost, IP:127.0.0.1 (and IP:::1), so a client that
# dials 127.0.0.1:PORT or localhost:PORT verifies the server's name without an
# override. For other hosts set TESSEL_CERT_SANS, e.g.
#   TESSEL_CERT_SANS="DNS:shard-0.tessel.svc,IP:10.0.0.5" scripts/gen_certs.sh certs
# (added to the defaults).
#
# Idempotent: files that exist are kept (delete OUTDIR to start over); a leaf
# is re-issued only when it is missing.
set -euo pipefail

usage() {
  cat >&2 <<EOF
usage: $0 OUTDIR [WORKER_JOB...]
Writes ca.crt, server.{crt,key}, client.{crt,key}, the role certificates
admin, worker, reader and server-role .{crt,key}, worker-JOB.{crt,key} for
each WORKER_JOB, untrusted-ca.crt and untrusted.{crt,key} into OUTDIR
(created if needed). Needs openssl.
EOF
  exit 2
}

[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage ;; esac
out=$1
shift
jobs=("$@")
for job in "${jobs[@]}"; do
  [[ "$job" =~ ^[A-Za-z0-9._-]{1,64}$ ]] || {
    echo "gen_certs: WORKER_JOB '$job': use 1 to 64 letters, digits, '.', '_' or '-'" >&2
    exit 2
  }
done
command -v openssl >/dev/null || {
  echo "gen_certs: openssl not found; install Debian's openssl package (scripts/install_deps.sh)" >&2
  exit 1
}

mkdir -p "$out"
umask 077
days=365
sans="DNS:localhost,IP:127.0.0.1,IP:::1${TESSEL_CERT_SANS:+,$TESSEL_CERT_SANS}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

key() {  # key FILE
  [ -s "$1" ] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

ca() {  # ca NAME SUBJECT
  local name=$1 subject=$2
  key "$out/$name.key"
  [ -s "$out/$name.crt" ] && return
  openssl req -x509 -new -key "$out/$name.key" -sha256 -days "$days" -subj "$subject" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/$name.crt"
  echo "gen_certs: wrote $out/$name.crt"
}

leaf() {  # leaf NAME CA SUBJECT EXTENDED_KEY_USAGE
  local name=$1 ca=$2 subject=$3 eku=$4
  key "$out/$name.key"
  [ -s "$out/$name.crt" ] && return
  cat >"$tmp/$name.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku
subjectAltName=$sans
EOF
  openssl req -new -key "$out/$name.key" -subj "$subject" -out "$tmp/$name.csr"
  openssl x509 -req -in "$tmp/$name.csr" -CA "$out/$ca.crt" -CAkey "$out/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
    -extfile "$tmp/$name.ext" -out "$out/$name.crt" 2>/dev/null
  echo "gen_certs: wrote $out/$name.crt (issued by $ca, $sans)"
}

ca ca "/CN=Tessel test CA"
leaf server ca "/CN=tessel-server" "serverAuth,clientAuth"
leaf client ca "/CN=tessel-client" "clientAuth"
leaf admin ca "/O=tessel:admin/CN=tessel-admin" "clientAuth"
leaf worker ca "/O=tessel:worker/CN=tessel-worker" "clientAuth"
leaf reader ca "/O=tessel:reader/CN=tessel-reader" "clientAuth"
leaf server-role ca "/O=tessel:server/CN=tessel-server" "serverAuth,clientAuth"
for job in "${jobs[@]}"; do
  leaf "worker-$job" ca "/O=tessel:worker/CN=worker:$job" "clientAuth"
done
ca untrusted-ca "/CN=Untrusted test CA"
leaf untrusted untrusted-ca "/CN=tessel-untrusted" "serverAuth,clientAuth"

# Certificates are public; keys stay owner-only.
chmod 644 "$out"/*.crt
chmod 600 "$out"/*.key
openssl verify -CAfile "$out/ca.crt" "$out/server.crt" "$out/client.crt" "$out/admin.crt" \
  "$out/worker.crt" "$out/reader.crt" "$out/server-role.crt" >/dev/null
echo "gen_certs: certificates in $out are ready (CA: $out/ca.crt)"
