//! The openraft configuration raftlock runs with, built in this one place (the server passes
//! its flags in [`RaftTiming`]; tests use the defaults).
//!
//! Kept here, next to the stores and the network, because the numbers depend on them: the
//! heartbeat interval is also openraft's deadline for one `append_entries` round trip
//! (including the follower's fsync), the snapshot chunk timeout must cover sending one chunk
//! on a peer stream, and the entries per append must keep one frame under the peers' limit.

use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, ConfigError, SnapshotPolicy};

/// Entries kept behind a snapshot, so a briefly lagging follower catches up from the log
/// instead of receiving a whole snapshot.
pub const LOGS_KEPT_AFTER_SNAPSHOT: u64 = 1_000;
/// Timeout for sending one snapshot chunk (3 MiB by default); openraft's 200 ms default is too
/// tight for a frame of that size plus the receiver's decode.
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 10_000;
/// Most entries in one `append_entries`: with at most the proposer's batch of ops per entry,
/// one append stays well under the peers' 256 MiB RPC body limit, even for a follower
/// catching up.
pub const MAX_PAYLOAD_ENTRIES: u64 = 32;

/// The timing a node runs with (`--heartbeat-ms`, `--election-timeout-ms`,
/// `--snapshot-logs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Leader heartbeat period, and the timeout of each `append_entries` RPC.
    pub heartbeat: Duration,
    /// A follower's election timeout: how long it waits after the leader lease before it
    /// campaigns.
    pub election_timeout: Duration,
    /// Build a snapshot (and allow purging the log) after this many entries since the last;
    /// 0: openraft never builds one on its own and the caller triggers them (the server's
    /// compactor, which also weighs the state's size).
    pub snapshot_logs: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(250),
            snapshot_logs: 10_000,
        }
    }
}

impl RaftTiming {
    /// The leader lease: openraft uses the upper bound of the election timeout as the lease
    /// (a follower that heard from its leader within it refuses to vote, and campaigns only
    /// after the lease plus its own timeout). With the defaults (250 ms, heartbeat 100 ms) a
    /// dead leader is replaced after 625–750 ms of silence (six missed heartbeats before
    /// anyone campaigns), and a hand-off waits at most one 375 ms lease.
    pub fn leader_lease(&self) -> Duration {
        self.election_timeout * 3 / 2
    }
}

/// The validated openraft [`Config`] for `timing`, ready for [`openraft::Raft::new`].
pub fn raft_config(timing: &RaftTiming) -> Result<Arc<Config>, ConfigError> {
    let config = Config {
        cluster_name: "raftlock".to_string(),
        heartbeat_interval: timing.heartbeat.as_millis() as u64,
        election_timeout_min: timing.election_timeout.as_millis() as u64,
        election_timeout_max: timing.leader_lease().as_millis() as u64,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        snapshot_policy: match timing.snapshot_logs {
            0 => SnapshotPolicy::Never,
            logs => SnapshotPolicy::LogsSinceLast(logs),
        },
        max_in_snapshot_log_to_keep: LOGS_KEPT_AFTER_SNAPSHOT,
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        ..Default::default()
    };
    Ok(Arc::new(config.validate()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_timing_is_valid() {
        let c = raft_config(&RaftTiming::default()).unwrap();
        assert_eq!(c.heartbeat_interval, 100);
        assert_eq!((c.election_timeout_min, c.election_timeout_max), (250, 375));
        assert_eq!(c.max_in_snapshot_log_to_keep, LOGS_KEPT_AFTER_SNAPSHOT);
    }

    #[test]
    fn zero_snapshot_logs_leaves_snapshots_to_the_caller() {
        let timing = RaftTiming {
            snapshot_logs: 0,
            ..RaftTiming::default()
        };
        let c = raft_config(&timing).unwrap();
        assert_eq!(c.snapshot_policy, SnapshotPolicy::Never);
        let c = raft_config(&RaftTiming::default()).unwrap();
        assert_eq!(c.snapshot_policy, SnapshotPolicy::LogsSinceLast(10_000));
    }

    #[test]
    fn a_heartbeat_slower_than_the_election_timeout_is_refused() {
        let timing = RaftTiming {
            heartbeat: Duration::from_millis(500),
            ..RaftTiming::default()
        };
        assert!(raft_config(&timing).is_err());
    }
}
