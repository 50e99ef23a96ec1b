#!/usr/bin/env bash
# `make bench`: raftlock, etcd and ZooKeeper on this machine, side by side.
#
# Builds release binaries, installs Debian's etcd-server, zookeeper and fio when missing,
# measures the disk's fsync latency, then runs the load generator against a 3-node raftlock
# cluster, a 3-node etcd cluster and a 3-server ZooKeeper ensemble on loopback — one at a
# time — in alternating rounds (raftlock, etcd, ZooKeeper, raftlock, …), and finally measures
# raftlock's memory with 1,000,000 held locks and its restart-to-ready time.
# Writes docs/benchmarks.md (the generated region only) and docs/benchmarks.svg.
#
# Knobs (environment): BENCH_ROUNDS (2), BENCH_SECONDS per cell (5), BENCH_WARMUP (1),
# BENCH_SYSTEM_WARMUP (10: unmeasured seconds of load on each system before its cells),
# BENCH_CLIENTS (1,64,256), BENCH_WORKLOADS (1,2,3,3h,4,5,6), BENCH_HELD (100000),
# BENCH_MEM_LOCKS (1000000; 0 skips the memory phase), BENCH_TLS_ROUNDS (2; 0 skips the TLS
# phase), BENCH_DIR (target/bench; must be on disk). BENCH_ONLY=tls runs only the TLS phase
# (and prints its table instead of rewriting docs/benchmarks.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
ROUNDS=${BENCH_ROUNDS:-2}
SECS=${BENCH_SECONDS:-5}
WARMUP=${BENCH_WARMUP:-1}
SYSTEM_WARMUP=${BENCH_SYSTEM_WARMUP:-10}
CLIENTS=${BENCH_CLIENTS:-1,64,256}
WORKLOADS=${BENCH_WORKLOADS:-1,2,3,3h,4,5,6}
HELD=${BENCH_HELD:-100000}
MEM_LOCKS=${BENCH_MEM_LOCKS:-1000000}
TLS_ROUNDS=${BENCH_TLS_ROUNDS:-2}
ONLY=${BENCH_ONLY:-}
WORK=${BENCH_DIR:-$ROOT/target/bench}
RESULTS=$WORK/results.jsonl
BIN=$ROOT/target/release
LOG_TAG=bench
# shellcheck source=cluster.sh
source "$ROOT/crates/raftlock-bench/cluster.sh"
trap stop_all EXIT
RL_BIN=$BIN RL_DIR=$WORK/rl RL_PORT=710 RL_SECRET=bench-cluster-secret
# Each round starts from empty data directories; the logs of every round are kept beside them.
RL_LOGS=$WORK/rl-n ETCD_LOGS=$WORK/etcd-e ZK_LOGS=$WORK/zk-z
PLATFORM=bench-platform-token RL_PLATFORM=$PLATFORM
RL_EPS=$(endpoints 710)
ETCD_EPS=$(endpoints 2379)
ZK_EPS=$(endpoints 218)

# ---- tools ----
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v fio >/dev/null || need+=(fio)
[[ -f /usr/share/java/zookeeper.jar ]] || need+=(zookeeper)
if ((${#need[@]})); then
  log "installing ${need[*]} from Debian"
  apt-get update && apt-get install -y "${need[@]}"
fi
ETCD_VERSION=$(etcd --version | sed -n 's/^etcd Version: //p')
case "$ETCD_VERSION" in
  3.4.*|3.5.*) ;;
  *) log "etcd $ETCD_VERSION: expected 3.4 or 3.5"; exit 1 ;;
esac

ZK_VERSION=$(dpkg-query -W -f '${Version}' zookeeper | sed 's/-.*//')

log "building release binaries"
cargo build --release -p raftlock-server -p raftlock-bench

rm -rf "$WORK" && mkdir -p "$WORK"

# ---- machine ----
log "measuring fsync latency with fio"
fio --name=fsync --directory="$WORK" --rw=write --bs=4k --size=8m --fdatasync=1 \
  --ioengine=sync --output-format=json >"$WORK/fio.json" 2>/dev/null || true
FSYNC_P99=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]["sync"]["lat_ns"]; p=j["percentile"]; print("p50 %.2f ms, p99 %.2f ms" % (p["50.000000"]/1e6, p["99.000000"]/1e6))' "$WORK/fio.json" 2>/dev/null || echo "n/a")
CPU_MODEL=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
MEM_TOTAL=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)

# ---- clusters ----
# TLS on: HTTPS for clients and mutual TLS between nodes on their peer listeners (:720i).
start_raftlock_tls() {
  RL_PEERS=1=127.0.0.1:7201,2=127.0.0.1:7202,3=127.0.0.1:7203 start_raftlock \
    --peer-listen "127.0.0.1:720{i}" \
    --tls-cert "$WORK/tls/node.pem" --tls-key "$WORK/tls/node-key.pem" \
    --peer-tls-cert "$WORK/tls/node.pem" --peer-tls-key "$WORK/tls/node-key.pem" \
    --peer-ca "$WORK/tls/ca.pem"
}

# One cell (workload 2, acquire+release cycles, 64 clients) with TLS off or on; prints
# "cycles/s p99_ms".
tls_cell() { # off|on round
  local mode=$1 round=$2 ca=()
  rm -rf "$WORK/rl"
  if [[ $mode == on ]]; then start_raftlock_tls; ca=(--cacert "$WORK/tls/ca.pem"); else start_raftlock; fi
  "$BIN/raftlock-bench" "${ca[@]}" run --system raftlock --endpoints "$RL_EPS" \
    --platform-token "$PLATFORM" --workloads 2 --clients 64 --seconds "$SECS" --warmup "$WARMUP" \
    --round "$round" --out "$WORK/tls-$mode.jsonl" >/dev/null 2>&1
  stop_all
  python3 - "$WORK/tls-$mode.jsonl" <<'PY'
import json, sys
c = [json.loads(l) for l in open(sys.argv[1])][-1]
print("%.0f %.2f" % (c["throughput"], c["p99_ms"]))
PY
}

# One system's cells for a round, on a cluster started fresh (empty data directories).
run_system() { # variant round start-function endpoints
  local variant=$1 round=$2 start=$3 eps=$4
  rm -rf "$WORK/rl" "$WORK/etcd" "$WORK/zk"
  "$start"
  # Unmeasured: lets each system settle (ZooKeeper's JVM compiles its hot paths, every
  # system's caches and files fill) before its first measured cell.
  "$BIN/raftlock-bench" run --system "$variant" --endpoints "$eps" --platform-token "$PLATFORM" \
    --workloads 2 --clients 16 --seconds "$SYSTEM_WARMUP" --warmup 0 --round 0 >/dev/null 2>&1
  log "round $round: $variant (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  "$BIN/raftlock-bench" run --system "$variant" --endpoints "$eps" --platform-token "$PLATFORM" \
    --workloads "$WORKLOADS" --clients "$CLIENTS" --seconds "$SECS" --warmup "$WARMUP" \
    --held "$HELD" --round "$round" --out "$RESULTS" --server-pids "$(pids_csv)"
  stop_all
}

start_etcd_bench() { start_etcd "$WORK/etcd" 2379 2380 bench; }
start_zookeeper_bench() { start_zookeeper "$WORK/zk"; }

run_round() { # system round
  local system=$1 round=$2
  case $system in
    raftlock) run_system raftlock "$round" start_raftlock "$RL_EPS" ;;
    etcd) run_system etcd "$round" start_etcd_bench "$ETCD_EPS" ;;
    # Each lock recipe on an ensemble of its own: what one leaves behind (sessions closing
    # with their ephemeral nodes, empty containers to reap) stays out of the other's cells.
    zookeeper)
      run_system zookeeper "$round" start_zookeeper_bench "$ZK_EPS"
      run_system zookeeper-multi "$round" start_zookeeper_bench "$ZK_EPS"
      ;;
  esac
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ -z $ONLY ]]; then
  for ((r = 1; r <= ROUNDS; r++)); do
    run_round raftlock "$r"
    run_round etcd "$r"
    run_round zookeeper "$r"
  done
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- TLS (raftlock) ----
TLS_MD=$WORK/tls.md
: >"$TLS_MD"
if ((TLS_ROUNDS > 0)) && [[ -z $ONLY || $ONLY == tls ]]; then
  "$BIN/raftlock" certs --out "$WORK/tls" --node node=127.0.0.1,localhost >/dev/null
  {
    echo "## TLS (raftlock)"
    echo
    echo "Workload 2 (acquire+release cycles), 64 clients, kept-alive connections; TLS on = HTTPS"
    echo "to clients and mutual TLS between nodes (each on its peer listener); rounds alternate."
    echo
    echo "| round | TLS off: cycles/s | p99 (ms) | TLS on: cycles/s | p99 (ms) |"
    echo "| ---: | ---: | ---: | ---: | ---: |"
  } >>"$TLS_MD"
  for ((r = 1; r <= TLS_ROUNDS; r++)); do
    log "TLS round $r: off"
    read -r off_tp off_p99 < <(tls_cell off "$r")
    log "TLS round $r: on"
    read -r on_tp on_p99 < <(tls_cell on "$r")
    echo "| $r | $off_tp | $off_p99 | $on_tp | $on_p99 |" >>"$TLS_MD"
  done
  echo >>"$TLS_MD"
fi
if [[ $ONLY == tls ]]; then
  cat "$TLS_MD"
  exit 0
fi

# ---- memory and recovery (raftlock) ----
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# The node's start, phase by phase, from its raftlock_startup_seconds series.
startup_phases() { # addr
  local text _
  # `ready` is recorded by the node as /readyz turns 200; give it a moment.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    text=$(curl -s "http://$1/metrics")
    grep -q 'phase="ready"' <<<"$text" && break
    sleep 0.2
  done
  python3 -c '
import re, sys
order = ["wal_replay", "snapshot_restore", "raft_start", "ready"]
found = dict(re.findall(r"^raftlock_startup_seconds\{shard=\"0\",phase=\"(\w+)\"\} (\S+)", sys.stdin.read(), re.M))
print(", ".join("%s %.0f ms" % (p, float(found[p]) * 1000) for p in order if p in found))' <<<"$text"
}
ready_and_read() { # addr key -> 0 once /readyz is 200 and a read of a held lock answers held:true
  curl -sf "http://$1/readyz" >/dev/null &&
    curl -sf -H "Authorization: Bearer $2" "http://$1/locks/mem-1" | grep -q '"held":true'
}

FOOTER=$WORK/footer.md
: >"$FOOTER"
cat "$TLS_MD" >"$FOOTER"
if ((MEM_LOCKS > 0)); then
  rm -rf "$WORK/rl"
  start_raftlock
  log "memory: holding $MEM_LOCKS project locks"
  t0=$(now_ms)
  KEY=$("$BIN/raftlock-bench" --threads 1 load --endpoints "$RL_EPS" --platform-token "$PLATFORM" \
    --locks "$MEM_LOCKS" --clients 256 2>"$WORK/load.log")
  LOAD_S=$(( ($(now_ms) - t0) / 1000 ))
  sleep 5
  RSS=()
  for i in 0 1 2; do RSS+=("$(rss_mib "${PIDS[$i]}")"); done
  DISK=$(du -sh "$WORK/rl/n1" | cut -f1)
  log "snapshot stall: 16 clients read/acquire/release for 30 s while the leader snapshots"
  STALL=$("$BIN/raftlock-bench" --threads 1 stall --endpoints "$RL_EPS" --key "$KEY" \
    --held "$MEM_LOCKS" --clients 16 --seconds 30)
  leader=$(curl -s http://127.0.0.1:7101/readyz | awk '{print $NF}')
  f=1; [[ $leader == 1 ]] && f=2
  log "restarting follower node $f (SIGKILL)"
  kill -9 "${PIDS[$((f - 1))]}"; wait "${PIDS[$((f - 1))]}" 2>/dev/null || true
  t0=$(now_ms)
  start_raftlock_node "$f"
  until ready_and_read "127.0.0.1:710$f" "$KEY"; do sleep 0.02; done
  FOLLOWER_MS=$(( $(now_ms) - t0 ))
  FOLLOWER_RSS=$(rss_mib "${PIDS[$((f - 1))]}")
  PHASES=$(startup_phases "127.0.0.1:710$f")
  log "restarting the whole cluster (SIGTERM)"
  stop_all
  t0=$(now_ms)
  start_raftlock
  until ready_and_read 127.0.0.1:7101 "$KEY" && ready_and_read 127.0.0.1:7102 "$KEY" \
    && ready_and_read 127.0.0.1:7103 "$KEY"; do sleep 0.02; done
  CLUSTER_MS=$(( $(now_ms) - t0 ))
  sleep 2
  RSS2=()
  for i in 0 1 2; do RSS2+=("$(rss_mib "${PIDS[$i]}")"); done
  stop_all
  cat >>"$FOOTER" <<MD
## Memory and recovery (raftlock, $MEM_LOCKS held project locks)

Loaded by 256 concurrent acquirers (TTL 1 day) in ${LOAD_S} s; data directory of one node: ${DISK}.

| measure | node 1 | node 2 | node 3 | target |
| --- | ---: | ---: | ---: | --- |
| RSS after loading (MiB) | ${RSS[0]} | ${RSS[1]} | ${RSS[2]} | ≤ 256 |
| RSS after a full-cluster restart (MiB) | ${RSS2[0]} | ${RSS2[1]} | ${RSS2[2]} | ≤ 256 |

- Follower node $f killed with SIGKILL and restarted: ready (\`/readyz\` 200 and a read of a held
  lock answered through it) after **${FOLLOWER_MS} ms**; its RSS then ${FOLLOWER_RSS} MiB. Target ≤ 1 s.
  Its start, phase by phase (\`raftlock_startup_seconds\`; \`ready\` counts from the process's
  start): ${PHASES}.
- Latency while snapshots of that state are built (\`raftlock-bench stall\`): ${STALL}.
  Target: p99 < 50 ms.
- Whole cluster stopped (SIGTERM) and restarted: every node ready and serving that read after
  **${CLUSTER_MS} ms** (includes an election).
MD
fi

# ---- report ----
HEADER=$WORK/header.md
cat >"$HEADER" <<MD
## How it was run

\`make bench\` (\`crates/raftlock-bench/run.sh\`), $(date -u +%Y-%m-%dT%H:%MZ), rounds: $ROUNDS per system
(raftlock, etcd, ZooKeeper, raftlock, …), $SECS s measured per cell after $WARMUP s of warm-up;
each system first takes $SYSTEM_WARMUP s of unmeasured load (acquire+release, 16 clients).

- Machine: $(nproc) CPUs ($CPU_MODEL), $MEM_TOTAL memory; fsync (fio, 4 KiB writes + fdatasync,
  data directory's disk): $FSYNC_P99. Load average before / after: $LOAD_BEFORE / $LOAD_AFTER.
  The machine is shared; other work may have run at the same time.
- raftlock: 3 nodes on loopback, release build, fsync on (every acknowledged write flushed on a
  quorum), data on disk, default settings except \`RAFTLOCK_LOG=warn\`.
- etcd $ETCD_VERSION (Debian's \`etcd-server\`): 3 members on loopback, default settings (fsync on).
- ZooKeeper $ZK_VERSION (Debian's \`zookeeper\`, OpenJDK $(java -version 2>&1 | sed -n '1s/.*version "\([^"]*\)".*/\1/p'), \`-Xmx2g\`): 3 servers on
  loopback, \`forceSync=yes\` (the default: every transaction fdatasync'd before it is
  acknowledged), data on disk; clients speak its own protocol (the \`zookeeper-client\` crate),
  one session each, connected to the leader. Two lock recipes: \`zookeeper\` is Apache
  Curator's \`InterProcessMutex\` (ephemeral-sequential child + list the children, watch the
  one below), \`zookeeper-multi\` takes a fresh lock in one round trip (\`multi\`: create the
  lock's node and the child) — see \`crates/raftlock-bench/src/zk.rs\`.
- Load generator: \`raftlock-bench\` (one process, one thread, one kept-alive HTTP/1.1
  connection per client, hyper), talking to the leader of each system. etcd is driven through
  its JSON gRPC gateway (\`/v3/...\`).
MD
"$BIN/raftlock-bench" report --results "$RESULTS" --md docs/benchmarks.md --svg docs/benchmarks.svg \
  --header "$HEADER" --footer "$FOOTER"
log "wrote docs/benchmarks.md and docs/benchmarks.svg"
