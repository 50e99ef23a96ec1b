# Sourced by the benches that make each node a small machine of its own (scaleout.sh, ab.sh);
# does nothing on its own. Caps a process's CPU in a cgroup of its own, finds the processes of
# a `raftlock dev` cluster, reads how full their log entries were, and builds another
# revision's `raftlock` once to compare with.
#
# Before sourcing, a script sets ROOT (the checkout). Every cgroup made here is listed in
# CAPPED_CGROUPS; `uncap_all` removes them (call it from the script's EXIT trap).

CAPPED_CGROUPS=()

# cpu_period CPUS: the CPU period, in µs, for a cap of CPUS of a core — the shortest the kernel
# takes (a 1 ms quota: 3.3 ms at 0.3 CPU), not docker's 100 ms. A node that spends its quota
# early in a period waits out the rest of it, and a small machine of its own never stops for
# milliseconds; it runs slower. The stalls are not neutral: a client waits out every stall of
# every node its write passes through, so they cost the clients of a closed loop throughput
# wherever a node is not already saturated (measured: three shards 1.07-1.28x one data shard
# at a 10 ms period, 1.33-1.52x at 3.4 ms).
cpu_period() {
  awk -v c="$1" 'BEGIN { p = int(1000 / c); if (p * c < 1000) p++; if (p < 1000) p = 1000; print p }'
}

# cap_process PID NAME CPUS PERIOD_US: PID gets CPUS of a core per PERIOD_US, in the cgroup
# raftlock-NAME (cpu.max on cgroup v2, cfs_quota_us on v1).
cap_process() {
  local quota dir
  quota=$(awk -v c="$3" -v p="$4" 'BEGIN { printf "%d", c * p }')
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    dir=/sys/fs/cgroup/raftlock-$2
    mkdir -p "$dir" && echo "$quota $4" >"$dir/cpu.max"
  else
    dir=/sys/fs/cgroup/cpu/raftlock-$2
    mkdir -p "$dir" && echo "$4" >"$dir/cpu.cfs_period_us" && echo "$quota" >"$dir/cpu.cfs_quota_us"
  fi
  echo "$1" >"$dir/cgroup.procs"
  CAPPED_CGROUPS+=("$dir")
}

# uncap_all: removes every cgroup cap_process made (their processes must have exited).
uncap_all() {
  local cg
  for cg in "${CAPPED_CGROUPS[@]}"; do rmdir "$cg" 2>/dev/null || true; done
  CAPPED_CGROUPS=()
}

# dev_node_pid NODE DATA_DIR: the process serving node NODE of the `raftlock dev` cluster
# whose data directory is DATA_DIR.
dev_node_pid() { pgrep -f "serve --node-id $1 .*--data-dir $2/$1" | head -1; }

# writes_per_entry PORT: the writes per log entry the leaders of the 3-node cluster at PORT
# proposed since it started (every node's raftlock_proposal_batch_ops, summed): each entry
# costs each replica an fsync, a round trip and wake-ups whatever it holds, so this says how
# far those costs are shared. "-" for a release that does not export it.
writes_per_entry() {
  local i
  for i in 0 1 2; do
    curl -sf "http://127.0.0.1:$(($1 + i))/metrics" || true
  done | awk '/^raftlock_proposal_batch_ops_sum/ { s += $NF } /^raftlock_proposal_batch_ops_count/ { c += $NF }
    END { if (c > 0) printf "%.1f", s / c; else printf "-" }'
}

# baseline_raftlock REV: the path of REV's release `raftlock`, built once (from `git archive`,
# so the working tree is untouched) into target/baseline-REV.
baseline_raftlock() {
  local dir=$ROOT/target/baseline-$1
  if [[ ! -x $dir/target/release/raftlock ]]; then
    echo "[bench] building $1 once, into $dir" >&2
    rm -rf "$dir" && mkdir -p "$dir"
    git -C "$ROOT" archive "$1" | tar -x -C "$dir"
    (cd "$dir" && CARGO_TARGET_DIR=$dir/target cargo build --release -p raftlock-server >&2)
  fi
  echo "$dir/target/release/raftlock"
}
