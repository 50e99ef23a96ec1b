#!/usr/bin/env bash
# `make bench-cost`: what one acquire costs. For each build or setting named in
# COST_SETUPS, a fresh 3-node release cluster on loopback (fsync on) runs workload 1 (acquire
# on fresh keys) at each of COST_CLIENTS; printed per cell: acquires/s, p50/p99, and CPU time
# and context switches per acquire summed over the three node processes (from /proc). When
# etcd is installed, a 3-member etcd cluster runs the same cells (CPU only). Rounds alternate.
#
# Knobs: COST_ROUNDS (2), COST_SECONDS (5), COST_CLIENTS (1,64,256), COST_DIR (target/cost;
# on disk), COST_SETUPS (space-separated `label=bin_dir[:worker_threads]`; default
# `default=target/release one-worker=target/release:1`, built first), COST_ETCD (1; 0 skips).
# Results are printed, not written into docs/benchmarks.md (its former *Peer transport* table came
# from this script).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
ROUNDS=${COST_ROUNDS:-2}
SECS=${COST_SECONDS:-5}
CLIENTS=${COST_CLIENTS:-1,64,256}
WORK=${COST_DIR:-$ROOT/target/cost}
SETUPS=${COST_SETUPS:-"default=$ROOT/target/release one-worker=$ROOT/target/release:1"}
BENCH=$ROOT/target/release/raftlock-bench
LOG_TAG=cost
# shellcheck source=cluster.sh
source "$ROOT/crates/raftlock-bench/cluster.sh"
trap stop_all EXIT
RL_DIR=$WORK/rl RL_PORT=760 RL_SECRET=cost-secret RL_PLATFORM=cost-platform
EPS=$(endpoints 760)
ETCD_EPS=$(endpoints 2779)

if [[ -z ${COST_SETUPS:-} ]]; then
  log "building release binaries"
  cargo build --release -p raftlock-server -p raftlock-bench
fi

# CPU ticks (1/100 s) and context switches of every started process, summed.
cpu_ticks() {
  local t=0 p
  for p in "${PIDS[@]}"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}
switches() {
  local t=0 p
  for p in "${PIDS[@]}"; do
    t=$((t + $(cat /proc/"$p"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}')))
  done
  echo "$t"
}

# A 3-node cluster of the raftlock in bin_dir, with `workers` Tokio worker threads if given,
# ready before this returns.
start_cost_raftlock() { # bin_dir workers
  local extra=()
  [[ -n $2 ]] && extra=(--worker-threads "$2")
  RL_BIN=$1 RAFTLOCK_LOG=warn start_raftlock "${extra[@]}"
  wait_for http://127.0.0.1:760{1,2,3}/readyz
}

cells() { # label system endpoints
  local label=$1 system=$2 eps=$3 c c0 s0
  for c in ${CLIENTS//,/ }; do
    c0=$(cpu_ticks) s0=$(switches)
    "$BENCH" run --system "$system" --endpoints "$eps" --platform-token cost-platform \
      --workloads 1 --clients "$c" --seconds "$SECS" --warmup 0 --out "$WORK/r.jsonl" >/dev/null 2>&1
    python3 - "$WORK/r.jsonl" "$label" "$c" $(($(cpu_ticks) - c0)) $(($(switches) - s0)) <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
ops = r["ops"]
print("%-12s clients %4s  %8.0f/s  p50 %6.3f ms  p99 %7.3f ms  CPU %.3f ms/op  %5.1f switches/op"
      % (sys.argv[2], sys.argv[3], r["throughput"], r["p50_ms"], r["p99_ms"],
         int(sys.argv[4]) * 10.0 / ops, int(sys.argv[5]) / ops))
PY
  done
}

ETCD=${COST_ETCD:-1}
command -v etcd >/dev/null || ETCD=0
log "load average $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, $SECS s per cell"
for ((r = 1; r <= ROUNDS; r++)); do
  for setup in $SETUPS; do
    label=${setup%%=*} spec=${setup#*=}
    bin=${spec%%:*} workers=
    [[ $spec == *:* ]] && workers=${spec#*:}
    rm -rf "$WORK" && mkdir -p "$WORK"
    start_cost_raftlock "$bin" "$workers"
    cells "$label" raftlock "$EPS"
    stop_all
  done
  if [[ $ETCD == 1 ]]; then
    rm -rf "$WORK" && mkdir -p "$WORK"
    start_etcd "$WORK/etcd" 2779 2780 cost
    wait_for http://127.0.0.1:2779{1,2,3}/health
    cells etcd etcd "$ETCD_EPS"
    stop_all
  fi
done
