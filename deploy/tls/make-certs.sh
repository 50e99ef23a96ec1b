#!/usr/bin/env bash
# Makes a private CA and node certificates for a raftlock cluster, with `raftlock certs`
# (rcgen; no OpenSSL needed). Re-running keeps the CA and renews the node certificates,
# which running nodes pick up by themselves (see docs/operations.md, "TLS").
#
#   deploy/tls/make-certs.sh compose      # deploy/tls/out/node{1,2,3}.pem for docker-compose
#   deploy/tls/make-certs.sh kubernetes   # deploy/tls/out/raftlock.pem for the StatefulSet
#
# RAFTLOCK_BIN: the raftlock binary (default: `raftlock` on PATH, else target/release).
# OUT: output directory (default deploy/tls/out). DAYS: node certificate lifetime (365).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$here/out}
days=${DAYS:-365}
bin=${RAFTLOCK_BIN:-$(command -v raftlock || echo "$root/target/release/raftlock")}
[ -x "$bin" ] || { echo "no raftlock binary at $bin (cargo build --release, or set RAFTLOCK_BIN)" >&2; exit 1; }

case "${1:-compose}" in
  compose)
    # Clients reach node N as nodeN (edge network) or localhost; peers as nodeN.cluster.
    args=()
    for n in 1 2 3; do
      args+=(--node "node$n=node$n,node$n.cluster,localhost,127.0.0.1")
    done
    ;;
  kubernetes)
    # One certificate for every pod of the StatefulSet `raftlock` behind the headless
    # service `raftlock` (pods raftlock-0…4), and for the client service.
    ns=${NAMESPACE:-default}
    sans="raftlock-client,raftlock-client.$ns.svc,raftlock-client.$ns.svc.cluster.local,localhost,127.0.0.1"
    for i in 0 1 2 3 4; do
      sans+=",raftlock-$i.raftlock,raftlock-$i.raftlock.$ns.svc,raftlock-$i.raftlock.$ns.svc.cluster.local"
    done
    args=(--node "raftlock=$sans")
    ;;
  *)
    echo "usage: $0 [compose|kubernetes]" >&2
    exit 2
    ;;
esac
"$bin" certs --out "$out" --days "$days" "${args[@]}"
if [ "${1:-compose}" = compose ]; then
  # The image runs as uid 65532; keys are written 0600.
  if [ "$(id -u)" = 0 ]; then
    chown 65532:65532 "$out"/node?-key.pem
  else
    echo "note: the containers run as uid 65532; let it read $out/node?-key.pem (sudo chown 65532 …)" >&2
  fi
fi
echo "CA for clients: $out/ca.pem (raftlock --cacert, RAFTLOCK_CACERT, curl --cacert)"
