#!/usr/bin/env bash
# `make bench-primitives` (issue 19): acquires/s on one hot semaphore, wait-group job
# completions/s and the release latency of a 16-party barrier, on a 3-node release cluster on
# loopback. Writes the table into docs/benchmarks.md between the primitives markers.
#
# Knobs: PRIM_SECONDS per semaphore/wait-group line (10), PRIM_ROUNDS barrier rounds (200),
# PRIM_DIR (target/primitives; must be on disk), PRIM_BIN (target/release; built when it is
# the default).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SECONDS_PER_LINE=${PRIM_SECONDS:-10}
ROUNDS=${PRIM_ROUNDS:-200}
WORK=${PRIM_DIR:-$ROOT/target/primitives}
BIN=${PRIM_BIN:-$ROOT/target/release}
SECRET=prim-cluster-secret
PLATFORM=prim-platform-token
EPS=127.0.0.1:7501,127.0.0.1:7502,127.0.0.1:7503
PEERS=1=127.0.0.1:7501,2=127.0.0.1:7502,3=127.0.0.1:7503
PIDS=()

log() { echo "[primitives $(date +%T)] $*" >&2; }
stop_all() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT

if [[ -z ${PRIM_BIN:-} ]]; then
  log "building release binaries"
  cargo build --release -p raftlock-server -p raftlock-bench
fi
rm -rf "$WORK" && mkdir -p "$WORK"
for i in 1 2 3; do
  mkdir -p "$WORK/n$i"
  RAFTLOCK_LOG=${RAFTLOCK_LOG:-warn} "$BIN/raftlock" serve --node-id "$i" --listen "127.0.0.1:750$i" \
    --data-dir "$WORK/n$i" --peers "$PEERS" --cluster-secret "$SECRET" \
    --platform-token "$PLATFORM" >>"$WORK/n$i.log" 2>&1 &
  PIDS+=($!)
done
"$BIN/raftlock-bench" --threads 2 primitives --endpoints "$EPS" --platform-token "$PLATFORM" \
  --seconds "$SECONDS_PER_LINE" --rounds "$ROUNDS" --md "$WORK/primitives.md"

python3 - "$WORK/primitives.md" "$SECONDS_PER_LINE" "$ROUNDS" <<'PY'
import sys, datetime, re
table, secs, rounds = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
path = "docs/benchmarks.md"
doc = open(path).read()
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
section = (f"<!-- primitives:begin -->\n_`make bench-primitives` on {when}: 3 nodes and the load "
           f"generator on this machine, clients on the leader, closed loop, {secs} s per "
           f"semaphore and wait-group line, {rounds} barrier rounds; fsync'd writes._\n\n"
           f"{table}<!-- primitives:end -->")
if "<!-- primitives:begin -->" in doc:
    doc = re.sub(r"<!-- primitives:begin -->.*?<!-- primitives:end -->", lambda _: section, doc, flags=re.S)
else:
    doc = doc.rstrip() + "\n\n## Semaphores, wait groups, barriers\n\n" + section + "\n"
open(path, "w").write(doc)
PY
log "wrote the primitives table into docs/benchmarks.md"
