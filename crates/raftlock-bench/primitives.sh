#!/usr/bin/env bash
# `make bench-primitives`: acquires/s on one hot semaphore, wait-group job
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
LOG_TAG=primitives
# shellcheck source=cluster.sh
source "$ROOT/crates/raftlock-bench/cluster.sh"
trap stop_all EXIT
RL_BIN=$BIN RL_DIR=$WORK RL_PORT=750 RL_SECRET=prim-cluster-secret RL_PLATFORM=prim-platform-token
PLATFORM=$RL_PLATFORM
EPS=$(endpoints 750)

if [[ -z ${PRIM_BIN:-} ]]; then
  log "building release binaries"
  cargo build --release -p raftlock-server -p raftlock-bench
fi
rm -rf "$WORK" && mkdir -p "$WORK"
start_raftlock
"$BIN/raftlock-bench" --threads 2 primitives --endpoints "$EPS" --platform-token "$PLATFORM" \
  --seconds "$SECONDS_PER_LINE" --rounds "$ROUNDS" --md "$WORK/primitives.md"

{
  echo "_\`make bench-primitives\` on $(date -u '+%Y-%m-%d %H:%M UTC'): 3 nodes and the load generator on this machine, clients on the leader, closed loop, $SECONDS_PER_LINE s per semaphore and wait-group line, $ROUNDS barrier rounds; fsync'd writes._"
  echo
  cat "$WORK/primitives.md"
} >"$WORK/section.md"
splice_into_benchmarks primitives "$WORK/section.md" "## Semaphores, wait groups, barriers"
log "wrote the primitives table into docs/benchmarks.md"
