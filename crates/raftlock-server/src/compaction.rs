//! When a group snapshots: the pure policy its compactor (`Group::spawn_compactor`) applies
//! once a second to how much the log grew since the last snapshot, and how long applying it
//! took.

use std::time::Duration;

/// How much a node's log grew since its last snapshot (what [`snapshot_due`] weighs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogGrowth {
    /// Entries applied since the last snapshot.
    pub entries: u64,
    /// Bytes this node wrote to its log since the last snapshot (or since it started).
    pub bytes: u64,
    /// Size of the last snapshot file (0 when there is none).
    pub snapshot_bytes: u64,
    /// Time this node spent applying entries since the last snapshot: about what a restart
    /// spends applying them again after restoring that snapshot.
    pub apply: Duration,
}

/// The operator's bounds on the log since the last snapshot (`--snapshot-logs`,
/// `--snapshot-bytes`, `--snapshot-replay-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Entries, once the log is also large enough (see [`SNAPSHOT_LOG_RATIO`]).
    pub logs: u64,
    /// Bytes written to the log.
    pub bytes: u64,
    /// Apply time: what a restart may spend replaying the log after its snapshot (zero: no
    /// snapshot for this reason).
    pub replay: Duration,
}

/// Why a snapshot is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotReason {
    /// `--snapshot-bytes` written to the log: bounds the disk whatever the entries hold.
    LogBytes,
    /// `--snapshot-logs` entries, and a log at least [`SNAPSHOT_LOG_RATIO`] of the last
    /// snapshot's size.
    Entries,
    /// Applying the log since the last snapshot took `--snapshot-replay-ms`: a restart now
    /// would spend that long replaying it, on top of restoring the snapshot. Waits for a log
    /// of at least [`REPLAY_LOG_RATIO`] of the snapshot, so a slow apply never makes the node
    /// snapshot back to back.
    Replay,
}

/// A snapshot for the replay budget waits until the log since the last one is at least the
/// last snapshot's size divided by this: snapshots for this reason then write at most this
/// many times the bytes the log wrote (with 1M locks held, ~50k acquires between ~50 MB
/// snapshots), where the entry rule writes at most twice.
pub const REPLAY_LOG_RATIO: u64 = 16;

/// A snapshot built on entry count alone waits until the log since the last one is at least
/// the last snapshot's size divided by this (plus the node's [`stagger`]). A snapshot costs in proportion to the state, not
/// to the entries: with 1M locks held one is ~100 MB to encode, write and fsync, and building
/// it every 10,000 entries (every 2–3 s at 5,000 writes/s) kept the disk and a core busy and
/// the p99 at ~400 ms. Spacing snapshots by write volume bounds what they add to the disk to
/// twice what the log writes, and the log kept in memory (and replayed at a restart) to half a
/// snapshot; with a small state nothing changes (the log passes half a small snapshot long
/// before the entry count).
pub const SNAPSHOT_LOG_RATIO: u64 = 2;

/// Extra log, in 1/8ths of [`SNAPSHOT_LOG_RATIO`]'s share, that node `node_id` waits for
/// before a snapshot on entry count: 0, 1/8 or 2/8 by node id. Every node's log grows by the
/// same bytes, so without it all nodes build their (large) snapshots in the same second; with
/// it, while one follower builds, the other still acknowledges at full speed.
pub fn stagger(node_id: u64) -> u64 {
    node_id % 3
}

/// Whether a snapshot is due on node `node_id` after `growth`, under `policy`.
pub fn snapshot_due(
    node_id: u64,
    growth: &LogGrowth,
    policy: &SnapshotPolicy,
) -> Option<SnapshotReason> {
    if growth.bytes >= policy.bytes {
        return Some(SnapshotReason::LogBytes);
    }
    let share = growth.snapshot_bytes / SNAPSHOT_LOG_RATIO;
    let log_large_enough = growth.bytes >= share + share / 8 * stagger(node_id);
    if growth.entries >= policy.logs && log_large_enough {
        return Some(SnapshotReason::Entries);
    }
    // Staggered like the entry rule: every node applies the same entries, so without it all
    // would build in the same second.
    let budget = policy.replay + policy.replay / 8 * stagger(node_id) as u32;
    let replay_log = growth.bytes >= growth.snapshot_bytes / REPLAY_LOG_RATIO;
    let replay_due = !policy.replay.is_zero() && growth.apply >= budget && replay_log;
    replay_due.then_some(SnapshotReason::Replay)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOGS: u64 = 10_000;
    const BYTES: u64 = 64 << 20;
    const POLICY: SnapshotPolicy = SnapshotPolicy {
        logs: LOGS,
        bytes: BYTES,
        replay: Duration::from_millis(200),
    };

    fn growth(entries: u64, bytes: u64, snapshot_bytes: u64) -> LogGrowth {
        LogGrowth {
            entries,
            bytes,
            snapshot_bytes,
            apply: Duration::ZERO,
        }
    }

    fn applied_for(ms: u64, growth: LogGrowth) -> LogGrowth {
        LogGrowth {
            apply: Duration::from_millis(ms),
            ..growth
        }
    }

    #[test]
    fn a_log_that_would_replay_past_the_budget_is_snapshotted_early() {
        let snapshot = 50 << 20;
        // 10 MiB of log: far from half the snapshot, but it took 200 ms to apply.
        let log = growth(40_000, 10 << 20, snapshot);
        assert_eq!(snapshot_due(3, &applied_for(199, log), &POLICY), None);
        assert_eq!(
            snapshot_due(3, &applied_for(200, log), &POLICY),
            Some(SnapshotReason::Replay)
        );
    }

    #[test]
    fn nodes_wait_for_different_replay_times() {
        let log = growth(40_000, 10 << 20, 50 << 20);
        let due = |node, ms| snapshot_due(node, &applied_for(ms, log), &POLICY);
        assert_eq!(due(3, 200), Some(SnapshotReason::Replay));
        assert_eq!(due(1, 224), None);
        assert_eq!(due(1, 225), Some(SnapshotReason::Replay));
        assert_eq!(due(2, 249), None);
        assert_eq!(due(2, 250), Some(SnapshotReason::Replay));
    }

    #[test]
    fn a_zero_replay_budget_is_off() {
        let off = SnapshotPolicy {
            replay: Duration::ZERO,
            ..POLICY
        };
        let log = applied_for(5_000, growth(100, 1 << 20, 0));
        assert_eq!(snapshot_due(3, &log, &off), None);
    }

    #[test]
    fn a_slow_apply_waits_for_a_sixteenth_of_the_snapshot() {
        let snapshot = 64 << 20;
        let slow = |mib: u64| applied_for(5_000, growth(100, mib << 20, snapshot));
        assert_eq!(snapshot_due(3, &slow(3), &POLICY), None);
        assert_eq!(
            snapshot_due(3, &slow(4), &POLICY),
            Some(SnapshotReason::Replay)
        );
    }

    #[test]
    fn a_small_state_snapshots_on_the_entry_count() {
        assert_eq!(
            snapshot_due(3, &growth(9_999, 2 << 20, 50_000), &POLICY),
            None
        );
        assert_eq!(
            snapshot_due(3, &growth(10_000, 2 << 20, 50_000), &POLICY),
            Some(SnapshotReason::Entries)
        );
        assert_eq!(
            snapshot_due(3, &growth(10_000, 0, 0), &POLICY),
            Some(SnapshotReason::Entries),
            "no snapshot yet"
        );
    }

    #[test]
    fn a_large_state_waits_for_a_log_half_its_snapshot() {
        let snapshot = 100 << 20;
        assert_eq!(
            snapshot_due(3, &growth(40_000, 49 << 20, snapshot), &POLICY),
            None
        );
        assert_eq!(
            snapshot_due(3, &growth(40_000, 50 << 20, snapshot), &POLICY),
            Some(SnapshotReason::Entries)
        );
    }

    #[test]
    fn nodes_wait_for_different_log_sizes() {
        let snapshot = 80 << 20;
        let due =
            |node, mib: u64| snapshot_due(node, &growth(40_000, mib << 20, snapshot), &POLICY);
        assert_eq!(due(3, 40), Some(SnapshotReason::Entries));
        assert_eq!(due(1, 40), None);
        assert_eq!(due(1, 45), Some(SnapshotReason::Entries));
        assert_eq!(due(2, 49), None);
        assert_eq!(due(2, 50), Some(SnapshotReason::Entries));
    }

    #[test]
    fn log_bytes_alone_bound_the_disk() {
        assert_eq!(
            snapshot_due(3, &growth(3, BYTES, 1 << 30), &POLICY),
            Some(SnapshotReason::LogBytes)
        );
    }
}
