#!/usr/bin/env bash
# `make bench-ab AB_REV=<rev>`: this build against the build of <rev>, loaded at the same
# time. The machine's speed drifts by ±15–50 % from minute to minute, so clusters measured one
# after another differ by more than most changes do; two clusters loaded at once share every
# slow second. Each is 3 nodes, every node's process capped at AB_CPUS of a core in a cgroup of
# its own (as in `make bench-scaleout`), with AB_SHARDS data shards (0: one group); two load
# generators run AB_CLIENTS clients each against the leaders, AB_ROUNDS rounds of AB_SECONDS.
# Prints acquires/s per round and the ratio this build / <rev>.
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
cargo build --release -p raftlock-server -p raftlock-bench
BASE_DIR=$ROOT/target/baseline-$REV
if [[ ! -x $BASE_DIR/target/release/raftlock ]]; then
  echo "[ab] building $REV once, into $BASE_DIR" >&2
  rm -rf "$BASE_DIR" && mkdir -p "$BASE_DIR"
  git archive "$REV" | tar -x -C "$BASE_DIR"
  (cd "$BASE_DIR" && CARGO_TARGET_DIR=$BASE_DIR/target cargo build --release -p raftlock-server >&2)
fi
# The shortest period the kernel takes (a 1 ms quota), as bench-scaleout's cap says why.
PERIOD=$(awk -v c="$CPUS" 'BEGIN { p = int(1000 / c); if (p * c < 1000) p++; if (p < 1000) p = 1000; print p }')
QUOTA=$(awk -v c="$CPUS" -v p="$PERIOD" 'BEGIN { printf "%d", c * p }')
rm -rf "$WORK" && mkdir -p "$WORK"
DEVS=()
CGROUPS=()
stop() {
  local pid cg
  for pid in "${DEVS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${DEVS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for cg in "${CGROUPS[@]}"; do rmdir "$cg" 2>/dev/null || true; done
}
trap stop EXIT
# cap PID NAME
cap() {
  local dir
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    dir=/sys/fs/cgroup/raftlock-ab-$2
    mkdir -p "$dir" && echo "$QUOTA $PERIOD" >"$dir/cpu.max"
  else
    dir=/sys/fs/cgroup/cpu/raftlock-ab-$2
    mkdir -p "$dir" && echo "$PERIOD" >"$dir/cpu.cfs_period_us" && echo "$QUOTA" >"$dir/cpu.cfs_quota_us"
  fi
  echo "$1" >"$dir/cgroup.procs"
  CGROUPS+=("$dir")
}
# start NAME RAFTLOCK PORT: a capped 3-node dev cluster.
start() {
  local i pid shards=()
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
    pid=$(pgrep -f "serve --node-id $i .*--data-dir $WORK/$1/$i" | head -1)
    cap "$pid" "$1-$i"
  done
}
endpoints() { echo "127.0.0.1:$1,127.0.0.1:$(($1 + 1)),127.0.0.1:$(($1 + 2))"; }
# load PORT LABEL ROUND: one cell; prints acquires/s.
load() {
  "$BIN/raftlock-bench" --threads 1 scaleout --endpoints "$(endpoints "$1")" \
    --platform-token "$TOKEN" --label "$2" --clients "$CLIENTS" --seconds "$SECS" \
    --round "$3" 2>/dev/null | cut -f2
}
start base "$BASE_DIR/target/release/raftlock" 7711
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
