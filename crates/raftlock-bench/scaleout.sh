#!/usr/bin/env bash
# `make bench-scaleout`: capacity per node with data shards, side by side in one run.
#
# 1. one group: a 3-node cluster (no data shard) holds N project locks in one project;
# 2. two data shards on six nodes (`raftlock dev --nodes 6 --shards 2`: nodes 1-3 and 4-6)
#    hold the same N locks in two projects, N/2 on each shard.
# For each, the peak RSS of every node once the locks are held; the figure is the largest
# node of (2) against the largest of (1). Prints a markdown table.
#
# Knobs: SCALEOUT_LOCKS (1000000), SCALEOUT_DIR (target/scaleout; on disk).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
LOCKS=${SCALEOUT_LOCKS:-1000000}
WORK=${SCALEOUT_DIR:-$ROOT/target/scaleout}
BIN=$ROOT/target/release
TOKEN=scaleout-platform-token

log() { echo "[scaleout] $*" >&2; }
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }

log "building release binaries"
cargo build --release -p raftlock-server -p raftlock-bench

DEV_PID=
stop() {
  if [[ -n $DEV_PID ]]; then
    kill -INT "$DEV_PID" 2>/dev/null || true
    wait "$DEV_PID" 2>/dev/null || true
    DEV_PID=
  fi
}
trap stop EXIT

# start NODES SHARDS PORT: a dev cluster, waiting until it printed its banner.
start() {
  local dir=$WORK/n$1-s$2
  rm -rf "$dir" && mkdir -p "$dir"
  "$BIN/raftlock" dev --nodes "$1" --shards "$2" --base-port "$3" --data-dir "$dir" \
    --platform-token "$TOKEN" >"$dir.out" 2>&1 &
  DEV_PID=$!
  until grep -q "cluster is up" "$dir.out" 2>/dev/null; do
    kill -0 "$DEV_PID" 2>/dev/null || { cat "$dir.out"; exit 1; }
    sleep 0.2
  done
}

# endpoints NODES PORT
endpoints() {
  local eps=()
  for ((i = 0; i < $1; i++)); do eps+=("127.0.0.1:$(($2 + i))"); done
  (IFS=,; echo "${eps[*]}")
}

# load NODES PORT COUNT: one project holding COUNT locks (placed by raftlock: least loaded).
load() {
  "$BIN/raftlock-bench" --threads 1 load --endpoints "$(endpoints "$1" "$2")" \
    --platform-token "$TOKEN" --locks "$3" --clients 256 >/dev/null
  sleep 1.1 # project names carry the second
}

# rss NODES DIR: every node's RSS in MiB, space-separated.
rss() {
  local out=()
  for ((i = 1; i <= $1; i++)); do
    out+=("$(rss_mib "$(pgrep -f "serve --node-id $i .*--data-dir $2/$i" | head -1)")")
  done
  echo "${out[*]}"
}

max() { tr ' ' '\n' | sort -n | tail -1; }

log "one group, 3 nodes, $LOCKS locks"
start 3 0 7301
load 3 7301 "$LOCKS"
sleep 5
ONE=$(rss 3 "$WORK/n3-s0")
stop

log "two data shards on 6 nodes, $LOCKS locks over two projects"
start 6 2 7401
load 6 7401 $((LOCKS / 2))
load 6 7401 $((LOCKS / 2))
sleep 5
TWO=$(rss 6 "$WORK/n6-s2")
SHARDS=$("$BIN/raftlock" admin --endpoints 127.0.0.1:7401 --platform-token "$TOKEN" shard list)
stop

ONE_MAX=$(echo "$ONE" | max)
TWO_MAX=$(echo "$TWO" | max)
RATIO=$(awk -v a="$TWO_MAX" -v b="$ONE_MAX" 'BEGIN { printf "%.2f", a / b }')
cat <<MD
## Scale-out: memory per node ($LOCKS held project locks)

| cluster | RSS per node (MiB) | largest node |
|---|---|---|
| 3 nodes, one group | $ONE | $ONE_MAX MiB |
| 6 nodes, two data shards of 3 | $TWO | $TWO_MAX MiB ($RATIO×) |

\`\`\`
$SHARDS
\`\`\`
MD
