#!/usr/bin/env bash
# `make bench-scaleout`: what data shards buy, side by side in one run. Two parts:
#
# memory — capacity per node:
#   1. one group: a 3-node cluster (no data shard) holds N project locks in one project;
#   2. two data shards on six nodes (`raftlock dev --nodes 6 --shards 2`: nodes 1-3 and 4-6)
#      hold the same N locks in two projects, N/2 on each shard.
#   For each, the RSS of every node 5 s after the locks are held, and its peak (VmHWM, the
#   load included); the figures are the largest node of (2) against the largest of (1).
# throughput — write rate with every node a small machine of its own: each node's process
#   is capped at SCALEOUT_CPUS of a core (a cgroup of its own: cpu.max, or cfs_quota_us on
#   cgroup v1), so the nodes do not share these cores' spare time. The default cap, 0.3, leaves
#   a 2-core host room for the load generator and the kernel beside three capped nodes: at
#   0.5 the three sharded nodes hit their caps in only 13-28 % of periods (the host's two cores
#   were the limit, not the nodes). Each row shows the share of periods each node was held at
#   its cap, so a reader sees which limit a figure measures, the CPU each node spent per
#   acquire of the whole cluster (what decides how far shards can scale), and how many writes
#   each log entry carried (what shares an entry's fixed cost). 3 nodes, 64 clients
#   acquiring fresh project locks, each client talking to the leader of its project's shard:
#   - the release before shards (SCALEOUT_BASELINE_REV, built once into target/; empty skips);
#   - this build with one group (the default deployment: projects on the meta group);
#   - this build with one data shard beside the meta group;
#   - this build with three data shards, leaders spread (one per node).
#   Rounds alternate the clusters, so a slow minute of the machine hits all of them.
# Prints markdown tables.
#
# Knobs: SCALEOUT_PARTS ("memory throughput"), SCALEOUT_LOCKS (1000000), SCALEOUT_DIR
# (target/scaleout; on disk), SCALEOUT_CPUS (0.3), SCALEOUT_ROUNDS (2), SCALEOUT_CLIENTS (64),
# SCALEOUT_SECONDS (10), SCALEOUT_BASELINE_REV (c4ecf19, the last commit before shards),
# SCALEOUT_PERIOD_US (each node's CPU period; default the shortest the kernel allows, see
# cpu_period in capped.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=capped.sh
source "$ROOT/crates/raftlock-bench/capped.sh"
LOCKS=${SCALEOUT_LOCKS:-1000000}
WORK=${SCALEOUT_DIR:-$ROOT/target/scaleout}
BIN=$ROOT/target/release
TOKEN=scaleout-platform-token
PARTS=${SCALEOUT_PARTS:-memory throughput}
CPUS=${SCALEOUT_CPUS:-0.3}
ROUNDS=${SCALEOUT_ROUNDS:-2}
CLIENTS=${SCALEOUT_CLIENTS:-64}
SECS=${SCALEOUT_SECONDS:-10}
WARMUP=2 # seconds of load before the measured ones (raftlock-bench's default)
BASE_REV=${SCALEOUT_BASELINE_REV-c4ecf19}

log() { echo "[scaleout] $*" >&2; }
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }
# peak_mib PID: the most the process was ever resident (VmHWM), loading included.
peak_mib() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }

log "building release binaries"
cargo build --release -p raftlock-server -p raftlock-bench

DEV_PID=
stop() {
  if [[ -n $DEV_PID ]]; then
    kill -INT "$DEV_PID" 2>/dev/null || true
    wait "$DEV_PID" 2>/dev/null || true
    DEV_PID=
  fi
  uncap_all
}
trap stop EXIT

# start NODES SHARDS PORT [RAFTLOCK]: a dev cluster, waiting until it printed its banner.
# SHARDS "-" passes no --shards (a release before shards).
start() {
  local dir=$WORK/n$1-s$2 bin=${4:-$BIN/raftlock} shards=()
  [[ $2 == - ]] || shards=(--shards "$2")
  rm -rf "$dir" && mkdir -p "$dir"
  "$bin" dev --nodes "$1" "${shards[@]}" --base-port "$3" --data-dir "$dir" \
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

# rss NODES DIR [FN]: every node's RSS in MiB (or FN's figure: peak_mib), space-separated.
rss() {
  local out=() of=${3:-rss_mib}
  for ((i = 1; i <= $1; i++)); do
    out+=("$($of "$(dev_node_pid "$i" "$2")")")
  done
  echo "${out[*]}"
}

max() { tr ' ' '\n' | sort -n | tail -1; }

# Each node's CPU period (see cpu_period in capped.sh).
PERIOD_US=${SCALEOUT_PERIOD_US:-$(cpu_period "$CPUS")}
# cap PID NAME: PID gets $CPUS of a core, in a cgroup of its own.
cap() { cap_process "$1" "scaleout-$2" "$CPUS" "$PERIOD_US"; }

memory() {
log "one group, 3 nodes, $LOCKS locks"
start 3 0 7301
load 3 7301 "$LOCKS"
sleep 5
ONE=$(rss 3 "$WORK/n3-s0")
ONE_PEAK=$(rss 3 "$WORK/n3-s0" peak_mib)
stop

log "two data shards on 6 nodes, $LOCKS locks over two projects"
start 6 2 7401
load 6 7401 $((LOCKS / 2))
load 6 7401 $((LOCKS / 2))
sleep 5
TWO=$(rss 6 "$WORK/n6-s2")
TWO_PEAK=$(rss 6 "$WORK/n6-s2" peak_mib)
SHARDS=$("$BIN/raftlock" admin --endpoints 127.0.0.1:7401 --platform-token "$TOKEN" shard list)
stop

ONE_MAX=$(echo "$ONE" | max)
TWO_MAX=$(echo "$TWO" | max)
RATIO=$(awk -v a="$TWO_MAX" -v b="$ONE_MAX" 'BEGIN { printf "%.2f", a / b }')
ONE_PEAK_MAX=$(echo "$ONE_PEAK" | max)
TWO_PEAK_MAX=$(echo "$TWO_PEAK" | max)
PEAK_RATIO=$(awk -v a="$TWO_PEAK_MAX" -v b="$ONE_PEAK_MAX" 'BEGIN { printf "%.2f", a / b }')
cat <<MD
## Scale-out: memory per node ($LOCKS held project locks)

| cluster | RSS per node, locks held (MiB) | largest node | peak while loading (MiB) | largest peak |
|---|---|---|---|---|
| 3 nodes, one group | $ONE | $ONE_MAX MiB | $ONE_PEAK | $ONE_PEAK_MAX MiB |
| 6 nodes, two data shards of 3 | $TWO | $TWO_MAX MiB ($RATIO×) | $TWO_PEAK | $TWO_PEAK_MAX MiB ($PEAK_RATIO×) |

\`\`\`
$SHARDS
\`\`\`
MD
}

# measure LABEL SHARDS PORT [RAFTLOCK]: one capped 3-node cluster, one cell; appends
# "label<TAB>acquires/s<TAB>p50<TAB>p99<TAB>errors" to $CELLS and "label<TAB>periods at the
# cap per node<TAB>CPU µs per acquire per node<TAB>writes per log entry" to $THROTTLED.
measure() {
  start 3 "$2" "$3" "${4:-}"
  local i pids=() before=() used=()
  for i in 1 2 3; do
    pids+=("$(dev_node_pid "$i" "$WORK/n3-s$2")")
    cap "${pids[-1]}" "n$i"
    before+=("$(cpu_ticks "${pids[-1]}")")
  done
  "$BIN/raftlock-bench" --threads 1 scaleout --endpoints "$(endpoints 3 "$3")" \
    --platform-token "$TOKEN" --label "$1" --clients "$CLIENTS" --seconds "$SECS" \
    --warmup "$WARMUP" --round "$ROUND" >>"$CELLS"
  local ops held per_entry
  ops=$(tail -1 "$CELLS" | cut -f2)
  for i in 0 1 2; do
    used+=("$(awk -v a="${before[i]}" -v b="$(cpu_ticks "${pids[i]}")" -v o="$ops" -v s="$((SECS + WARMUP))" \
      -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (b - a) / hz * 1e6 / (o * s) }')")
  done
  held=$(throttled)
  per_entry=$(writes_per_entry "$3")
  log "  share of periods each node was throttled in: $held; CPU µs per acquire: ${used[*]}; writes per log entry: $per_entry"
  printf '%s\t%s\t%s\t%s\n' "$1" "${held// //}" "$(IFS=/; echo "${used[*]}")" "$per_entry" >>"$THROTTLED"
  stop
}

# cpu_ticks PID: the CPU time PID has used (user + system), in clock ticks. Counted from
# before the load's setup and its warm-up, over the acquires of the warm-up and the measured
# seconds (at the measured rate), so the figure per acquire includes the setup's little.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# throttled: per capped node, the share of its CPU periods in which it hit its cap (so the cap,
# not the load generator, was what limited it).
throttled() {
  local cg out=()
  for cg in "${CAPPED_CGROUPS[@]}"; do
    out+=("$(awk '/^nr_periods/ {p=$2} /^nr_throttled/ {t=$2} END {printf "%.0f%%", p ? 100*t/p : 0}' "$cg/cpu.stat")")
  done
  echo "${out[*]}"
}

throughput() {
  local base=
  [[ -z $BASE_REV ]] || base=$(baseline_raftlock "$BASE_REV")
  mkdir -p "$WORK"
  CELLS=$WORK/throughput.tsv
  THROTTLED=$WORK/throttled.tsv
  : >"$CELLS"
  : >"$THROTTLED"
  for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    log "throughput round $ROUND of $ROUNDS: 3 nodes at $CPUS CPU each, $CLIENTS clients"
    [[ -z $base ]] || measure "release before shards ($BASE_REV), one group" - 7501 "$base"
    measure "one group (default)" 0 7511
    measure "1 data shard" 1 7521
    measure "3 data shards" 3 7531
  done
  # Mean of the rounds per cluster, its ratio to the default one-group cluster, and the
  # share of periods each node spent at its cap (per round).
  awk -F'\t' -v cpus="$CPUS" -v clients="$CLIENTS" '
    FNR == NR { capped[$1] = capped[$1] (capped[$1] == "" ? "" : ", ") $2
                cpu[$1] = cpu[$1] (cpu[$1] == "" ? "" : ", ") $3
                entry[$1] = entry[$1] (entry[$1] == "" ? "" : ", ") $4; next }
    { if (!($1 in n)) order[++k] = $1; n[$1]++; ops[$1] += $2; p50[$1] += $3; p99[$1] += $4
      err[$1] += $5; runs[$1] = runs[$1] (runs[$1] == "" ? "" : ", ") $2 }
    END {
      one = ops["one group (default)"] / n["one group (default)"]
      printf "## Scale-out: acquires/s, 3 nodes capped at %s CPU each, %d clients\n\n", cpus, clients
      print "| cluster | acquires/s (rounds) | mean | vs one group | p50 ms | p99 ms | errors | periods at the cap, per node | CPU µs per acquire, per node | writes per log entry |"
      print "|---|---|---|---|---|---|---|---|---|---|"
      for (i = 1; i <= k; i++) {
        l = order[i]; m = ops[l] / n[l]
        printf "| %s | %s | %.0f | %.2f× | %.2f | %.2f | %d | %s | %s | %s |\n", l, runs[l], m, m / one, p50[l] / n[l], p99[l] / n[l], err[l], capped[l], cpu[l], entry[l]
      }
    }' "$THROTTLED" "$CELLS"
}

for part in $PARTS; do
  case $part in
    memory) memory ;;
    throughput) throughput ;;
    *) echo "unknown part $part (memory, throughput)" >&2; exit 2 ;;
  esac
done
