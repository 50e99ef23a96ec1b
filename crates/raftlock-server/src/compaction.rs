//! When a group snapshots: the pure policy its compactor (`Group::spawn_compactor`) applies
//! once a second to how much the log grew since the last snapshot.

/// How much a node's log grew since its last snapshot (what [`snapshot_due`] weighs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogGrowth {
    /// Entries applied since the last snapshot.
    pub entries: u64,
    /// Bytes this node wrote to its log since the last snapshot (or since it started).
    pub bytes: u64,
    /// Size of the last snapshot file (0 when there is none).
    pub snapshot_bytes: u64,
}

/// Why a snapshot is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotReason {
    /// `--snapshot-bytes` written to the log: bounds the disk whatever the entries hold.
    LogBytes,
    /// `--snapshot-logs` entries, and a log at least [`SNAPSHOT_LOG_RATIO`] of the last
    /// snapshot's size.
    Entries,
}

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

/// Whether a snapshot is due on node `node_id` after `growth`, with `--snapshot-logs` and
/// `--snapshot-bytes`.
pub fn snapshot_due(
    node_id: u64,
    growth: &LogGrowth,
    snapshot_logs: u64,
    snapshot_bytes: u64,
) -> Option<SnapshotReason> {
    if growth.bytes >= snapshot_bytes {
        return Some(SnapshotReason::LogBytes);
    }
    let share = growth.snapshot_bytes / SNAPSHOT_LOG_RATIO;
    let log_large_enough = growth.bytes >= share + share / 8 * stagger(node_id);
    (growth.entries >= snapshot_logs && log_large_enough).then_some(SnapshotReason::Entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOGS: u64 = 10_000;
    const BYTES: u64 = 64 << 20;

    fn growth(entries: u64, bytes: u64, snapshot_bytes: u64) -> LogGrowth {
        LogGrowth {
            entries,
            bytes,
            snapshot_bytes,
        }
    }

    #[test]
    fn a_small_state_snapshots_on_the_entry_count() {
        assert_eq!(
            snapshot_due(3, &growth(9_999, 2 << 20, 50_000), LOGS, BYTES),
            None
        );
        assert_eq!(
            snapshot_due(3, &growth(10_000, 2 << 20, 50_000), LOGS, BYTES),
            Some(SnapshotReason::Entries)
        );
        assert_eq!(
            snapshot_due(3, &growth(10_000, 0, 0), LOGS, BYTES),
            Some(SnapshotReason::Entries),
            "no snapshot yet"
        );
    }

    #[test]
    fn a_large_state_waits_for_a_log_half_its_snapshot() {
        let snapshot = 100 << 20;
        assert_eq!(
            snapshot_due(3, &growth(40_000, 49 << 20, snapshot), LOGS, BYTES),
            None
        );
        assert_eq!(
            snapshot_due(3, &growth(40_000, 50 << 20, snapshot), LOGS, BYTES),
            Some(SnapshotReason::Entries)
        );
    }

    #[test]
    fn nodes_wait_for_different_log_sizes() {
        let snapshot = 80 << 20;
        let due =
            |node, mib: u64| snapshot_due(node, &growth(40_000, mib << 20, snapshot), LOGS, BYTES);
        assert_eq!(due(3, 40), Some(SnapshotReason::Entries));
        assert_eq!(due(1, 40), None);
        assert_eq!(due(1, 45), Some(SnapshotReason::Entries));
        assert_eq!(due(2, 49), None);
        assert_eq!(due(2, 50), Some(SnapshotReason::Entries));
    }

    #[test]
    fn log_bytes_alone_bound_the_disk() {
        assert_eq!(
            snapshot_due(3, &growth(3, BYTES, 1 << 30), LOGS, BYTES),
            Some(SnapshotReason::LogBytes)
        );
    }
}
