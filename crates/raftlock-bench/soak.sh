#!/usr/bin/env bash
# `make soak` (issue 18): a 3-node cluster under a fixed-rate mixed load for SOAK_MINUTES,
# reported minute by minute — throughput, p50/p99/p99.9/max (from each job's scheduled start:
# no coordinated omission), the longest a job queued for a connection and how late the
# generator itself woke, errors, each node's peak RSS (sampled every second), leader changes,
# snapshots, fsyncs, the stall sources over 50 ms and each node's longest wait in the kernel
# (threads in state D: the disk). Plots the minutes into docs/soak-{small,large}.svg and writes
# the table into docs/benchmarks.md between that variant's markers.
#
# Knobs: SOAK_MINUTES (30), SOAK_RATE jobs/s (4000; a job is 3 project-lock requests or 2
# hierarchical ones, so ~10,000 requests/s: half of the ~20,000/s this mix sustains on the
# 2-vCPU machine of docs/benchmarks.md), SOAK_CONNECTIONS (64), SOAK_HELD project locks
# held in the background while it runs (0; 1000000 for large snapshots), SOAK_DIR
# (target/soak; must be on disk), SOAK_BIN (target/release; built when it is the default),
# SOAK_TRACE_SLOW=1 (print every job slower than 100 ms with its wall-clock time, to line
# it up with node logs or a profile), SOAK_WARMUP minutes run first at the same rate and not
# reported (1: the preload's last snapshots and freed memory settle within seconds of its end,
# and would otherwise be counted as the soak's first minute). SOAK_SYSTEM=etcd runs the same
# jobs against a 3-member etcd cluster (Debian's etcd-server) on the same disk instead: a stall
# both systems see in the same minutes is the machine's (its table goes between the soak-etcd
# markers; SOAK_HELD must be 0).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
MINUTES=${SOAK_MINUTES:-30}
WARMUP=${SOAK_WARMUP:-1}
RATE=${SOAK_RATE:-4000}
CONNECTIONS=${SOAK_CONNECTIONS:-64}
HELD=${SOAK_HELD:-0}
WORK=${SOAK_DIR:-$ROOT/target/soak}
BIN=${SOAK_BIN:-$ROOT/target/release}
SECRET=soak-cluster-secret
PLATFORM=soak-platform-token
EPS=127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403
PEERS=1=127.0.0.1:7401,2=127.0.0.1:7402,3=127.0.0.1:7403
SYSTEM=${SOAK_SYSTEM:-raftlock}
ETCD_EPS=127.0.0.1:27491,127.0.0.1:27492,127.0.0.1:27493
ETCD_CLUSTER=e1=http://127.0.0.1:27481,e2=http://127.0.0.1:27482,e3=http://127.0.0.1:27483
PIDS=()

log() { echo "[soak $(date +%T)] $*" >&2; }
stop_all() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT

case $SYSTEM in
  raftlock) ;;
  etcd)
    command -v etcd >/dev/null || { log "etcd missing: apt-get install etcd-server"; exit 1; }
    ((HELD == 0)) || { log "SOAK_HELD is for raftlock only"; exit 1; }
    ;;
  *) log "SOAK_SYSTEM: raftlock or etcd, not $SYSTEM"; exit 1 ;;
esac
if [[ -z ${SOAK_BIN:-} ]]; then
  log "building release binaries"
  cargo build --release -p raftlock-server -p raftlock-bench
fi
rm -rf "$WORK" && mkdir -p "$WORK"
start_raftlock() {
  for i in 1 2 3; do
    mkdir -p "$WORK/n$i"
    RAFTLOCK_LOG=${RAFTLOCK_LOG:-warn} "$BIN/raftlock" serve --node-id "$i" --listen "127.0.0.1:740$i" \
      --data-dir "$WORK/n$i" --peers "$PEERS" --cluster-secret "$SECRET" \
      --platform-token "$PLATFORM" >>"$WORK/n$i.log" 2>&1 &
    PIDS+=($!)
  done
}
# etcd as an operator runs it for locks: defaults (fsync'd WAL, snapshot every 100,000
# entries), plus the history compaction every deployment sets (here each minute), without
# which its database grows with every write.
start_etcd() {
  for i in 1 2 3; do
    etcd --name "e$i" --data-dir "$WORK/e$i" \
      --listen-client-urls "http://127.0.0.1:2749$i" --advertise-client-urls "http://127.0.0.1:2749$i" \
      --listen-peer-urls "http://127.0.0.1:2748$i" --initial-advertise-peer-urls "http://127.0.0.1:2748$i" \
      --initial-cluster "$ETCD_CLUSTER" --initial-cluster-state new --initial-cluster-token soak \
      --auto-compaction-mode periodic --auto-compaction-retention 1m \
      --logger zap --log-level warn >>"$WORK/e$i.log" 2>&1 &
    PIDS+=($!)
  done
  EPS=$ETCD_EPS
}
if [[ $SYSTEM == etcd ]]; then start_etcd; else start_raftlock; fi
if ((HELD > 0)); then
  log "holding $HELD project locks in the background"
  "$BIN/raftlock-bench" --threads 2 load --endpoints "$EPS" --platform-token "$PLATFORM" --locks "$HELD"
fi
log "soak: $RATE jobs/s for $MINUTES min"
"$BIN/raftlock-bench" --threads 2 soak --endpoints "$EPS" --platform-token "$PLATFORM" \
  --rate "$RATE" --minutes "$MINUTES" --warmup-minutes "$WARMUP" --connections "$CONNECTIONS" \
  --pids "$(IFS=,; echo "${PIDS[*]}")" --md "$WORK/soak.md" --system "$SYSTEM" | tee "$WORK/soak.log"

# Plot the minutes, then splice table and plot into docs/benchmarks.md between this
# variant's markers (small state and 1M held are kept side by side; appended the first time).
VARIANT=$([[ $HELD -gt 0 ]] && echo large || echo small)
LABEL="make soak"
[[ $SYSTEM == etcd ]] && VARIANT=etcd LABEL="make soak (etcd)"
"$BIN/raftlock-bench" soak-plot --table "$WORK/soak.md" --svg "docs/soak-$VARIANT.svg" \
  --title "$LABEL: $RATE jobs/s, $HELD locks held, latency per minute"
python3 - "$WORK/soak.md" "$MINUTES" "$RATE" "$HELD" "$VARIANT" "$WARMUP" "$SYSTEM" <<'SPLICE'
import sys, datetime, re
table, minutes, rate, held, variant, warmup, system = open(sys.argv[1]).read(), *sys.argv[2:8]
path = "docs/benchmarks.md"
doc = open(path).read()
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
begin, end = f"<!-- soak-{variant}:begin -->", f"<!-- soak-{variant}:end -->"
against = "" if system == "raftlock" else f" against {system}"
section = (f"{begin}\n_`make soak`{against} on {when}: {rate} jobs/s for {minutes} min after {warmup} min of warm-up, "
           f"{held} project locks held in the background; latency from each job's scheduled "
           f"start (open loop)._\n\n![latency per minute](soak-{variant}.svg)\n\n{table}{end}")
if begin in doc:
    doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, doc, flags=re.S)
else:
    doc = doc.rstrip() + "\n\n" + section + "\n"
open(path, "w").write(doc)
SPLICE
log "wrote the soak table and docs/soak-$VARIANT.svg into docs/benchmarks.md"
