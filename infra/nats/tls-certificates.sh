#!/bin/sh
# TLS for evertune's NATS cluster (docs/operations.md, "NATS credentials and TLS"), with openssl:
#
#   infra/nats/tls-certificates.sh OUT_DIR [NAMESPACE [NODES]]     (defaults: evertune, 3)
#
# writes into OUT_DIR (mode 0600 files):
#   nats-ca.crt, nats-ca.key        a CA (ECDSA P-256, 10 years), made only when nats-ca.key is not
#                                   there yet: keep the key out of the cluster (no Secret reads it)
#   nats-server.crt, nats-server.key  the nodes' certificate (1 year), signed by that CA, for client
#                                   connections and, as client and server, the routes between nodes
#                                   (verify: true). Names: nats-<i>.nats[.NAMESPACE[.svc[.cluster.local]]]
#                                   for each node, nats and its service names, localhost and
#                                   127.0.0.1 (kubectl port-forward; the tests' nodes).
# Run again to renew the nodes' certificate under the same CA: services need no restart.
set -eu

if [ $# -lt 1 ] || [ $# -gt 3 ]; then
  echo "usage: $0 OUT_DIR [NAMESPACE [NODES]]" >&2
  exit 2
fi
out=$1
namespace=${2:-evertune}
nodes=${3:-3}
case $nodes in '' | *[!0-9]*) echo "$0: NODES must be a number, got '$nodes'" >&2; exit 2 ;; esac

umask 077
mkdir -p "$out"
work=$(mktemp -d "$out/.tls.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ ! -f "$out/nats-ca.key" ]; then
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha256 -days 3650 \
    -subj "/CN=evertune NATS CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$work/nats-ca.key" -out "$work/nats-ca.crt"
  mv "$work/nats-ca.key" "$work/nats-ca.crt" "$out/"
  echo "made a CA: $out/nats-ca.crt (its key: $out/nats-ca.key)"
fi

names="DNS:nats,DNS:nats.$namespace,DNS:nats.$namespace.svc,DNS:nats.$namespace.svc.cluster.local"
i=0
while [ "$i" -lt "$nodes" ]; do
  node="nats-$i.nats"
  names="$names,DNS:$node,DNS:$node.$namespace,DNS:$node.$namespace.svc,DNS:$node.$namespace.svc.cluster.local"
  i=$((i + 1))
done
names="$names,DNS:localhost,IP:127.0.0.1"

cat >"$work/extensions.cnf" <<EXTENSIONS
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = $names
EXTENSIONS
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=nats" \
  -keyout "$work/nats-server.key" -out "$work/nats-server.csr"
openssl x509 -req -in "$work/nats-server.csr" -CA "$out/nats-ca.crt" -CAkey "$out/nats-ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -sha256 -days 365 -extfile "$work/extensions.cnf" \
  -out "$work/nats-server.crt"
mv "$work/nats-server.key" "$work/nats-server.crt" "$out/"
echo "made the nodes' certificate: $out/nats-server.crt (key $out/nats-server.key), $nodes nodes in namespace $namespace"
