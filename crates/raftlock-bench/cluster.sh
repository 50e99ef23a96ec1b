# Sourced by the bench scripts (run.sh, soak.sh, cost.sh, primitives.sh); does nothing on its
# own. The one way they start and stop the local 3-node clusters they measure, and splice a
# generated section into docs/benchmarks.md.
#
# Before sourcing, a script sets LOG_TAG (the prefix of its log lines); before starting
# raftlock nodes it sets RL_BIN (the directory of the `raftlock` binary), RL_DIR (node i keeps
# its data in $RL_DIR/n<i>), RL_PORT (node i listens on 127.0.0.1:${RL_PORT}<i>, e.g. 740 ->
# 7401), RL_SECRET and RL_PLATFORM. Optional: RL_PEERS overrides the peer list (the TLS bench
# gives nodes separate peer listeners); RL_LOGS and ETCD_LOGS are the log files' prefixes
# (node i appends to ${RL_LOGS}<i>.log; default $RL_DIR/n and <etcd dir>/e), for a script that
# wipes the data between clusters but keeps every log.

PIDS=()

log() { echo "[${LOG_TAG:-bench} $(date +%T)] $*" >&2; }

# Stops every process started here: SIGTERM to all, then waits for each.
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

# host:port of the three nodes whose ports are <prefix>1..3, comma-separated.
endpoints() { echo "127.0.0.1:${1}1,127.0.0.1:${1}2,127.0.0.1:${1}3"; }

# start_raftlock_node I [serve flags...]: node I in the background, its pid in slot I-1 of
# PIDS (so a restarted node replaces its own). `{i}` in a flag becomes the node's number.
start_raftlock_node() {
  local i=$1
  shift
  mkdir -p "$RL_DIR/n$i"
  RAFTLOCK_LOG=${RAFTLOCK_LOG:-warn} "$RL_BIN/raftlock" serve --node-id "$i" \
    --listen "127.0.0.1:${RL_PORT}$i" --data-dir "$RL_DIR/n$i" \
    --peers "${RL_PEERS:-1=127.0.0.1:${RL_PORT}1,2=127.0.0.1:${RL_PORT}2,3=127.0.0.1:${RL_PORT}3}" \
    --cluster-secret "$RL_SECRET" --platform-token "$RL_PLATFORM" "${@//\{i\}/$i}" \
    >>"${RL_LOGS:-$RL_DIR/n}$i.log" 2>&1 &
  PIDS[$((i - 1))]=$!
}

# start_raftlock [serve flags...]: nodes 1-3 (on an empty PIDS).
start_raftlock() {
  local i
  for i in 1 2 3; do start_raftlock_node "$i" "$@"; done
}

# start_etcd DIR CLIENT_PORT PEER_PORT TOKEN [etcd flags...]: members e1-e3 as an operator runs
# them (defaults: fsync'd WAL), member i serving clients on 127.0.0.1:${CLIENT_PORT}<i> and
# peers on ${PEER_PORT}<i>, data in DIR/e<i>, log ${ETCD_LOGS:-DIR/e}<i>.log.
start_etcd() {
  local dir=$1 client=$2 peer=$3 token=$4 i
  shift 4
  local cluster="e1=http://127.0.0.1:${peer}1,e2=http://127.0.0.1:${peer}2,e3=http://127.0.0.1:${peer}3"
  mkdir -p "$dir"
  for i in 1 2 3; do
    etcd --name "e$i" --data-dir "$dir/e$i" \
      --listen-client-urls "http://127.0.0.1:${client}$i" \
      --advertise-client-urls "http://127.0.0.1:${client}$i" \
      --listen-peer-urls "http://127.0.0.1:${peer}$i" \
      --initial-advertise-peer-urls "http://127.0.0.1:${peer}$i" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "$token" \
      --logger zap --log-level warn "$@" >>"${ETCD_LOGS:-$dir/e}$i.log" 2>&1 &
    PIDS+=($!)
  done
}

# start_zookeeper DIR [java flags...]: a 3-server ensemble as an operator runs one (Debian's
# zookeeper 3.8, forceSync=yes — the default: every transaction fdatasync'd before it is
# acknowledged), server i serving clients on 127.0.0.1:218<i> and peers on 288<i>/388<i>,
# data in DIR/z<i>, log ${ZK_LOGS:-DIR/z}<i>.log. `srvr` is the one four-letter word allowed
# (how the load generator finds the leader); the admin HTTP server is off.
start_zookeeper() {
  local dir=$1 i
  shift
  for i in 1 2 3; do
    mkdir -p "$dir/z$i"
    echo "$i" >"$dir/z$i/myid"
    cat >"$dir/z$i.cfg" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/z$i
clientPort=218$i
clientPortAddress=127.0.0.1
forceSync=yes
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr
server.1=127.0.0.1:2881:3881
server.2=127.0.0.1:2882:3882
server.3=127.0.0.1:2883:3883
CFG
    # Debian's package has no logging backend for slf4j: the servers log nothing.
    java -Xmx2g "$@" -cp /usr/share/java/zookeeper.jar \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/z$i.cfg" \
      >>"${ZK_LOGS:-$dir/z}$i.log" 2>&1 &
    PIDS+=($!)
  done
}

# The pids of the processes started here, comma-separated.
pids_csv() { local IFS=,; echo "${PIDS[*]}"; }

# wait_for URL...: until each answers 2xx; fails after 60 s.
wait_for() {
  local url deadline=$((SECONDS + 60))
  for url in "$@"; do
    until curl -sf "$url" >/dev/null; do
      ((SECONDS < deadline)) || { log "$url not ready after 60 s"; return 1; }
      sleep 0.2
    done
  done
}

# splice_into_benchmarks NAME FILE [HEADING]: the text of FILE becomes docs/benchmarks.md's
# section between <!-- NAME:begin --> and <!-- NAME:end -->; the first time, the section is
# appended (under HEADING, if given).
splice_into_benchmarks() {
  python3 - "$1" "$2" "${3:-}" <<'PY'
import re, sys
name, body, heading = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
path = "docs/benchmarks.md"
doc = open(path).read()
begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
section = f"{begin}\n{body}{end}"
if begin in doc:
    doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, doc, flags=re.S)
else:
    doc = doc.rstrip() + "\n\n" + (f"{heading}\n\n" if heading else "") + section + "\n"
open(path, "w").write(doc)
PY
}
