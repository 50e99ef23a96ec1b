//! The Raft timing and log-compaction settings raftlock runs with.
//!
//! Kept here, next to the stores and the network, because the numbers depend on them: the
//! heartbeat interval is also openraft's deadline for one `append_entries` round trip
//! (including the follower's fsync), and the snapshot chunk timeout must cover sending one
//! chunk over HTTP.

use std::sync::Arc;

use openraft::{Config, ConfigError, SnapshotPolicy};

/// Leader heartbeat period, and the timeout of each `append_entries` RPC.
pub const HEARTBEAT_MS: u64 = 100;
/// Lower bound of the randomized election timeout: three missed heartbeats.
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 300;
/// Upper bound of the randomized election timeout; the spread avoids split votes.
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 600;
/// Build a snapshot (and allow purging the log) after this many entries since the last one.
pub const SNAPSHOT_LOGS_SINCE_LAST: u64 = 10_000;
/// Entries kept behind a snapshot, so a briefly lagging follower catches up from the log
/// instead of receiving a whole snapshot.
pub const LOGS_KEPT_AFTER_SNAPSHOT: u64 = 1_000;
/// Timeout for sending one snapshot chunk (3 MiB by default); openraft's 200 ms default is too
/// tight for an HTTP POST of that size plus the receiver's decode.
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 5_000;

/// The validated openraft [`Config`] raftlock uses, ready for [`openraft::Raft::new`].
pub fn recommended_config(cluster_name: &str) -> Result<Arc<Config>, ConfigError> {
    let config = Config {
        cluster_name: cluster_name.to_string(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_LOGS_SINCE_LAST),
        max_in_snapshot_log_to_keep: LOGS_KEPT_AFTER_SNAPSHOT,
        ..Default::default()
    };
    Ok(Arc::new(config.validate()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recommended_config_is_valid() {
        let c = recommended_config("test").unwrap();
        assert_eq!(c.heartbeat_interval, HEARTBEAT_MS);
        assert_eq!(c.max_in_snapshot_log_to_keep, LOGS_KEPT_AFTER_SNAPSHOT);
    }
}
