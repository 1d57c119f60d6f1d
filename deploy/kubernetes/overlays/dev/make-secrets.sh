#!/usr/bin/env bash
# Makes the files overlays/dev's secretGenerator reads (kustomization.yaml), in secrets/ beside
# this script: a cluster CA for SPACE alone, the nodes' server certificate, the gateway's client
# certificate towards the nodes, a certificate for the gateway's public port, and the shared
# snapshot sealing key. For a development cluster: the CA key stays in secrets/ca.key on this
# machine (keep it there, or somewhere safer, to issue more certificates; it is in no Secret).
# README.md ("Certificates") explains each step and what to do differently in production.
#
#   deploy/kubernetes/overlays/dev/make-secrets.sh
#   NODE_IPS=10.0.0.5,10.0.0.6 GATEWAY_NAMES=space.example.com make-secrets.sh
#
# NODE_IPS: extra IP addresses for the nodes' certificate; GATEWAY_NAMES: extra DNS names for
# the gateway's. Existing files are kept (delete one to make it again); s3.json and
# tokens.json are written as REPLACE_ME templates for you to fill in.
set -euo pipefail

out="$(cd "$(dirname "$0")" && pwd)/secrets"
mkdir -p "$out"
cd "$out"
umask 077
days=825

key() {  # key FILE: a P-256 private key, PKCS#8 PEM, mode 0600
  [[ -e $1 ]] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
}

cert() {  # cert NAME CN EXTENSIONS: NAME.key and NAME.pem signed by the CA
  local name=$1 cn=$2 ext=$3
  [[ -e $name.pem ]] && return 0
  key "$name.key"
  openssl req -new -key "$name.key" -subj "/O=SPACE/CN=$cn" -out "$name.csr"
  printf '%s\n' "$ext" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -days "$days" -sha256 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

sans() {  # sans PREFIX LIST: "PREFIX:a,PREFIX:b" from "a,b"
  local prefix=$1 list=$2 item outl=""
  IFS=, read -ra items <<<"$list"
  for item in "${items[@]}"; do
    [[ -n $item ]] && outl+=",$prefix:$item"
  done
  printf '%s' "$outl"
}

# The cluster CA: signs the nodes' server certificate and the gateway's client certificate.
# Every node accepts any client certificate it signed, so it signs nothing else.
if [[ ! -e ca.pem ]]; then
  key ca.key
  openssl req -x509 -new -key ca.key -subj "/O=SPACE/CN=SPACE cluster CA" -days "$days" \
    -sha256 -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
fi

# The nodes' server certificate, shared by every node pod. The gateway dials pod IPs, which
# change with every pod; README.md ("Certificates") says how the name is checked.
cert node space-nodes \
  "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:space-nodes.space.svc,DNS:space-nodes.space.svc.cluster.local,DNS:*.space-nodes.space.svc$(sans IP "${NODE_IPS:-}")"

# The gateway's client certificate towards the nodes (mutual TLS on port 7443).
cert client space-gateway \
  "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"

# The gateway's public certificate. Signed by the same CA here for a development cluster only
# (serverAuth alone, so it cannot act as a client towards the nodes); in production use one
# from the CA your clients already trust.
cert gateway space-gateway \
  "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:space-gateway.space.svc,DNS:space-gateway.space.svc.cluster.local,DNS:localhost$(sans DNS "${GATEWAY_NAMES:-}")"
rm -f ca.srl

# The manifest sealing key all nodes share (32 random bytes, docs/snapshots.md).
[[ -e snapshot.key ]] || openssl rand -out snapshot.key 32

# Templates to fill in: the store's credentials and the gateway's API tokens.
[[ -e s3.json ]] ||
  printf '{"access_key_id": "REPLACE_ME", "secret_access_key": "REPLACE_ME"}\n' >s3.json
[[ -e tokens.json ]] || printf 'REPLACE_ME\n' >tokens.json

echo "make-secrets: files in $out; fill in s3.json and tokens.json, then:"
echo "  kubectl apply -k $(dirname "$out")"
