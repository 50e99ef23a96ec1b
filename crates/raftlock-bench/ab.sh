#!/usr/bin/env bash
# `make bench-ab AB_REV=<rev>`: this build against the build of <rev>, loaded at the same
# time. The machine's speed drifts by ±15–50 % from minute to minute, so clusters measured one
# after another differ by more than most changes do; two clusters loaded at once share every
# slow second. Each is 3 nodes, every node's process capped at AB_CPUS of a core in a cgroup of
# its own (as in `make bench-scaleout`), with AB_SHARDS data shards (0: one group); two load
# generators run AB_CLIENTS clients each against the leaders, AB_ROUNDS rounds of AB_SECONDS.
# Prints acquires/s per round, the ratio this build / <rev>, and the writes per log entry.
#
# Knobs: AB_REV (required), AB_SHARDS (0), AB_CPUS (0.2: six capped nodes and two generators
# fit on 2 cores), AB_CLIENTS (64), AB_SECONDS (15), AB_ROUNDS (6), AB_DIR (target/ab).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
REV=${AB_REV:?AB_REV names the build to compare with (a git revision)}
SHARDS=${AB_SHARDS:-0}
CPUS=${AB_CPUS:-0.2}
CLIENTS=${AB_CLIENTS:-64}
SECS=${AB_SECONDS:-15}
ROUNDS=${AB_ROUNDS:-6}
WORK=${AB_DIR:-$ROOT/target/ab}
BIN=$ROOT/target/release
TOKEN=ab-platform-token
# shellcheck source=capped.sh
source "$ROOT/crates/raftlock-bench/capped.sh"
cargo build --release -p raftlock-server -p raftlock-bench
BASE_BIN=$(baseline_raftlock "$REV")
PERIOD=$(cpu_period "$CPUS")
rm -rf "$WORK" && mkdir -p "$WORK"
DEVS=()
stop() {
  local pid
  for pid in "${DEVS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${DEVS[@]}"; do wait "$pid" 2>/dev/null || true; done
  uncap_all
}
trap stop EXIT
# start NAME RAFTLOCK PORT: a capped 3-node dev cluster.
start() {
  local i shards=()
  # No flag for one group: a release before shards has none.
  ((SHARDS == 0)) || shards=(--shards "$SHARDS")
  "$2" dev --nodes 3 "${shards[@]}" --base-port "$3" --data-dir "$WORK/$1" \
    --platform-token "$TOKEN" >"$WORK/$1.out" 2>&1 &
  DEVS+=($!)
  until grep -q "cluster is up" "$WORK/$1.out" 2>/dev/null; do
    kill -0 "${DEVS[-1]}" 2>/dev/null || { cat "$WORK/$1.out"; exit 1; }
    sleep 0.2
  done
  for i in 1 2 3; do
    cap_process "$(dev_node_pid "$i" "$WORK/$1")" "ab-$1-$i" "$CPUS" "$PERIOD"
  done
}
endpoints() { echo "127.0.0.1:$1,127.0.0.1:$(($1 + 1)),127.0.0.1:$(($1 + 2))"; }
# load PORT LABEL ROUND: one cell; prints acquires/s.
load() {
  "$BIN/raftlock-bench" --threads 1 scaleout --endpoints "$(endpoints "$1")" \
    --platform-token "$TOKEN" --label "$2" --clients "$CLIENTS" --seconds "$SECS" \
    --round "$3" 2>/dev/null | cut -f2
}
start base "$BASE_BIN" 7711
start this "$BIN/raftlock" 7721
echo "| round | $REV acquires/s | this build | ratio |"
echo "|---|---|---|---|"
for ((round = 1; round <= ROUNDS; round++)); do
  load 7711 "$REV" "$round" >"$WORK/base.$round" &
  base_load=$!
  load 7721 this "$round" >"$WORK/this.$round"
  wait "$base_load"
  awk -v r="$round" -v a="$(cat "$WORK/base.$round")" -v b="$(cat "$WORK/this.$round")" \
    'BEGIN { printf "| %d | %s | %s | %.3f |\n", r, a, b, b / a }'
done
echo
echo "writes per log entry: $REV $(writes_per_entry 7711), this build $(writes_per_entry 7721)"
