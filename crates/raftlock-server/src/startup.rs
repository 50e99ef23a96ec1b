//! What a node's start costs, phase by phase: for each group it opens, reading its log back
//! (`wal_replay`), restoring its state machine from the latest snapshot (`snapshot_restore`;
//! the two run at once on two threads, so they overlap) and starting its Raft instance
//! (`raft_start`: openraft re-applies the log after the snapshot); for the node, the time from its start until
//! it is ready (`ready`: a member of the meta group that knows its leader, what `/readyz`
//! answers 200 for). Each phase is logged once (target `raftlock_server::startup`, level
//! info) and kept as `raftlock_startup_seconds{shard, phase}`, so a slow restart says where
//! its time went.

use std::time::{Duration, Instant};

use raftlock_raft::{OpenTimes, Raft};

/// Records the phases of opening group `shard`.
pub fn report_group(shard: u32, opened: OpenTimes, raft_start: Duration) {
    record(shard, "wal_replay", opened.log);
    record(shard, "snapshot_restore", opened.state);
    record(shard, "raft_start", raft_start);
}

/// Records, once the node is ready, how long it took from `started`.
pub fn spawn_ready_report(meta: Raft, node_id: u64, started: Instant) {
    tokio::spawn(async move {
        let ready = meta
            .wait(None)
            .metrics(
                |m| {
                    let member = m.membership_config.membership().get_node(&node_id);
                    member.is_some() && m.current_leader.is_some()
                },
                "node ready",
            )
            .await;
        // An error means Raft shut down first: the node never became ready.
        if ready.is_ok() {
            record(raftlock_raft::META_GROUP, "ready", started.elapsed());
        }
    });
}

fn record(shard: u32, phase: &'static str, took: Duration) {
    let ms = took.as_secs_f64() * 1000.0;
    tracing::info!(target: "raftlock_server::startup", shard, phase, ms, "start-up phase");
    metrics::gauge!("raftlock_startup_seconds", "shard" => shard.to_string(), "phase" => phase)
        .set(took.as_secs_f64());
}
