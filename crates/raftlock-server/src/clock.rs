//! This node's cluster clock: the [`raftlock_core::clock`] rule fed with real clock readings,
//! the watcher that records every applied cluster time, and the guard that keeps a node whose
//! wall clock is off from campaigning.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use raftlock_core::clock::ClusterClock;
use raftlock_core::Nanos;
use raftlock_raft::fs::Dir;
use raftlock_raft::{Raft, SharedState};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The restart hint: this node's estimate of cluster time and its own clocks at that moment,
/// saved every second while it has a live view (see [`ClusterClock::restore`]).
#[derive(Serialize, Deserialize)]
struct ClockHint {
    cluster: Nanos,
    /// The wall clock: measures the downtime only after a reboot.
    wall: Nanos,
    /// The kernel's boot id and time since boot (`CLOCK_BOOTTIME`, which counts suspend and
    /// which no wall-clock step moves): within one boot they measure the downtime exactly.
    /// Measured by the wall clock alone, a clock stepped while the node was down shifted the
    /// hint by the step — the chaos suite's durability probes caught cluster time 30 s ahead
    /// after a node restarted on a skewed clock led.
    boot_id: String,
    since_boot: Nanos,
}

const HINT_FILE: &str = "clock_hint";
/// Version 2 (with the boot clock); a version-1 hint is ignored.
const HINT_MAGIC: &[u8; 8] = b"RLCLKHN2";

/// This boot's id (`/proc/sys/kernel/random/boot_id`), empty where there is none.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Time since boot (`/proc/uptime`, `CLOCK_BOOTTIME` in 10 ms steps), 0 where unknown.
fn since_boot() -> Nanos {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |secs| (secs * 1e9) as Nanos)
}

/// How long the node was down since `hint` was saved: by the boot clock within one boot,
/// else by the wall clock.
fn downtime(hint: &ClockHint) -> Nanos {
    let same_boot = !hint.boot_id.is_empty() && hint.boot_id == boot_id();
    if same_boot {
        (since_boot() - hint.since_boot).max(0)
    } else {
        (wall_clock() - hint.wall).max(0)
    }
}
/// How often the hint is saved (in guard periods).
const HINT_EVERY: u32 = 10;

/// How long a node whose clock is unfit (off by more than the bound, or no live view of
/// cluster time since it started) waits without seeing the cluster make progress before it
/// campaigns anyway: long enough for any fit node to win first, short enough that clocks cost
/// seconds of availability, not all of it. (Safety never depends on who leads: stamps follow
/// the line whatever the leader's wall clock says.)
pub const UNFIT_GRACE: Duration = Duration::from_secs(2);

/// How often the guard re-checks the clock offset.
const GUARD_PERIOD: Duration = Duration::from_millis(100);

/// The wall clock, in nanoseconds since the Unix epoch.
pub fn wall_clock() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as Nanos)
}

/// Shared by the proposer (stamps), reads (judging time) and the guard.
pub struct NodeClock {
    /// The rule's state.
    rule: Mutex<ClusterClock>,
    /// Origin of this node's monotonic readings.
    origin: Instant,
    /// The last index this node held when the process started — its log's end, or the
    /// snapshot it loaded when that is further ([`NodeClock::spawn_tasks`]): entries above it
    /// were committed while the process ran, so the time they carry is fresh; the time of
    /// anything at or below it was replayed from disk.
    start_index: AtomicU64,
    /// The latest cluster time replayed from disk (applied at or below `start_index`): an
    /// entry committed since that carries no stamp of its own — a new leader's blank entry, a
    /// membership change — leaves the machine's time here, and that time is not fresh.
    replayed_time: AtomicI64,
    /// The latest applied cluster time this node has seen (0 before any): the machine's time
    /// or a little behind it, read without the state's lock on every write a node forwards
    /// (`http::resend`), where a lower value is the safe direction.
    applied_seen: AtomicI64,
    /// Largest tolerated |wall − cluster time| before the node stops campaigning.
    max_offset: Nanos,
    /// When this node last saw an entry applied (or started): no progress for a while means
    /// no working leader.
    last_progress: Mutex<Instant>,
    /// How long without progress counts as leaderless: [`UNFIT_GRACE`], or two ticks when
    /// ticks are slower.
    stall: Duration,
    /// The data directory, for the restart hint.
    dir: Arc<dyn Dir>,
}

impl NodeClock {
    /// A clock for a node whose log ended at `start_log_index` when it started; a restart
    /// hint found in `dir` carries cluster time over the downtime.
    pub fn new(
        start_log_index: u64,
        max_offset: Duration,
        tick: Duration,
        dir: Arc<dyn Dir>,
    ) -> anyhow::Result<Arc<Self>> {
        let mut rule = ClusterClock::new();
        // The hint is advice, not data: one that cannot be read (an older version, damage)
        // is ignored, as if there were none.
        match raftlock_raft::checked_file::load::<ClockHint>(&*dir, HINT_FILE, HINT_MAGIC) {
            Ok(Some(hint)) => rule.restore(hint.cluster + downtime(&hint), 0),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "ignoring the clock hint"),
        }
        Ok(Arc::new(NodeClock {
            rule: Mutex::new(rule),
            origin: Instant::now(),
            start_index: AtomicU64::new(start_log_index),
            replayed_time: AtomicI64::new(0),
            applied_seen: AtomicI64::new(0),
            max_offset: max_offset.as_nanos() as Nanos,
            last_progress: Mutex::new(Instant::now()),
            stall: UNFIT_GRACE.max(2 * tick),
            dir,
        }))
    }

    /// Saves the restart hint (on a blocking thread: it syncs a file).
    async fn save_hint(self: &Arc<Self>) {
        let (cluster, live) = {
            let rule = self.rule();
            (rule.estimate(self.mono()), rule.is_live())
        };
        let Some(cluster) = cluster.filter(|_| live) else {
            return;
        };
        let hint = ClockHint {
            cluster,
            wall: wall_clock(),
            boot_id: boot_id(),
            since_boot: since_boot(),
        };
        let dir = self.dir.clone();
        let saved = tokio::task::spawn_blocking(move || {
            raftlock_raft::checked_file::save(&*dir, HINT_FILE, HINT_MAGIC, &hint)
        })
        .await;
        if let Ok(Err(e)) = saved {
            tracing::warn!(error = %e, "cannot save the clock hint");
        }
    }

    fn mono(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    fn rule(&self) -> std::sync::MutexGuard<'_, ClusterClock> {
        self.rule.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The latest applied cluster time seen ([`NodeClock::observe_applied`]; 0 before any):
    /// never ahead of the state machine's time.
    pub fn applied_seen(&self) -> Nanos {
        self.applied_seen.load(Ordering::Relaxed)
    }

    /// Records the cluster time of the state machine after applying entry `index`. It is a
    /// live view only when a leader stamped it while this process ran: the entry is above
    /// what the node started with, and the time is past every time replayed from disk (an
    /// unstamped entry — the blank entry each new leader commits first — repeats the replayed
    /// time; after a cold start of every node, or a restore, anchoring the first leader's
    /// line on it put the cluster behind real time by the downtime or the backup's age).
    pub fn observe_applied(&self, time: Nanos, index: u64) {
        *self.last_progress.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.applied_seen.fetch_max(time, Ordering::Relaxed);
        let mono = self.mono();
        let live = if index > self.start_index.load(Ordering::Relaxed) {
            time > self.replayed_time.load(Ordering::Relaxed)
        } else {
            self.replayed_time.fetch_max(time, Ordering::Relaxed);
            false
        };
        self.rule().observe(time, mono, live);
    }

    /// Records that the state this node started from was applied up to `index`: a snapshot
    /// can reach past the log's end — a restored data directory holds a snapshot and no log
    /// at all — and its time is the backup's (or the restore's), replayed, not a live
    /// observation. Taken as live, a restored cluster's first leader drew its line from it and
    /// the cluster ran behind real time by the backup's age (`clock_offset_ms` 20,074 after
    /// a restore 20 s after the save, a 30 s lease promised 9 s ahead).
    fn started_at(&self, index: u64, time: Nanos) {
        self.applied_seen.fetch_max(time, Ordering::Relaxed);
        self.start_index.fetch_max(index, Ordering::Relaxed);
        self.replayed_time.fetch_max(time, Ordering::Relaxed);
    }

    /// The time for an entry proposed, or a read judged, now by the leader of `term` whose
    /// machine has applied up to `applied`.
    pub fn stamp(&self, term: u64, applied: Nanos) -> Nanos {
        let (wall, mono) = (wall_clock(), self.mono());
        self.rule().stamp(term, wall, mono, applied)
    }

    /// Best estimate of cluster time on any node (for deadlines and local checks).
    pub fn estimate(&self, applied: Nanos) -> Nanos {
        let mono = self.mono();
        self.rule().estimate(mono).unwrap_or(applied).max(applied)
    }

    /// `wall − cluster time` on this node, once it has seen cluster time.
    pub fn offset(&self) -> Option<Nanos> {
        let (wall, mono) = (wall_clock(), self.mono());
        self.rule().offset(wall, mono)
    }

    /// Whether this node should campaign: its clock is fit (a live view of cluster time and an
    /// offset within the bound), or the cluster has made no progress for `stall` (no fit node
    /// is leading), or the cluster is new (nothing to protect yet).
    pub fn may_campaign(&self, applied: Nanos) -> bool {
        if applied == 0 {
            return true;
        }
        let rule = self.rule();
        let fit = rule.is_live()
            && rule
                .offset(wall_clock(), self.mono())
                .is_some_and(|o| o.abs() <= self.max_offset);
        let stalled = self
            .last_progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
            >= self.stall;
        fit || stalled
    }

    /// Starts the watcher of applied entries and the campaign guard. Called as the node
    /// starts, before it serves peers: whatever `state` has applied by then was loaded or
    /// replayed from this node's own disk, never committed while it ran.
    pub fn spawn_tasks(
        self: &Arc<Self>,
        raft: Raft,
        state: SharedState,
        applied_rx: watch::Receiver<u64>,
    ) {
        self.started_at(applied_index(&state), applied_time(&state));
        tokio::spawn(watch_applied(Arc::clone(self), state.clone(), applied_rx));
        tokio::spawn(guard(Arc::clone(self), raft, state));
    }
}

/// The cluster time the state machine has applied up to (0 before any stamped entry).
pub fn applied_time(state: &SharedState) -> Nanos {
    state.read().map_or(0, |s| s.machine.time())
}

/// The index the state machine has applied up to (0 before any).
fn applied_index(state: &SharedState) -> u64 {
    state
        .read()
        .map_or(0, |s| s.last_applied.map_or(0, |id| id.index))
}

async fn watch_applied(clock: Arc<NodeClock>, state: SharedState, mut rx: watch::Receiver<u64>) {
    loop {
        let index = *rx.borrow_and_update();
        let time = applied_time(&state);
        // Time 0: nothing stamped applied yet (only membership or blank entries).
        if time > 0 {
            clock.observe_applied(time, index);
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Every [`GUARD_PERIOD`]: publishes the offset, warns when it crosses the bound (the
/// election driver does not campaign while the clock is unfit), and drops the leader line
/// after losing leadership.
async fn guard(clock: Arc<NodeClock>, raft: Raft, state: SharedState) {
    let mut interval = tokio::time::interval(GUARD_PERIOD);
    let mut electing = true;
    let mut periods = 0u32;
    loop {
        interval.tick().await;
        periods = periods.wrapping_add(1);
        if periods.is_multiple_of(HINT_EVERY) {
            clock.save_hint().await;
        }
        let (leader, me) = {
            let m = raft.metrics();
            let m = m.borrow();
            (m.current_leader, m.id)
        };
        if leader != Some(me) {
            clock.rule().step_down();
        }
        if let Some(offset) = clock.offset() {
            metrics::gauge!("raftlock_clock_offset_seconds").set(offset as f64 / 1e9);
        }
        let fit = clock.may_campaign(applied_time(&state));
        if fit != electing {
            // The election driver (crate::election) asks `may_campaign` before each election.
            electing = fit;
            if fit {
                tracing::info!(
                    node = me,
                    "clock within bound: campaigning for leadership again"
                );
            } else {
                tracing::warn!(
                    node = me,
                    leader = ?leader,
                    offset_ms = clock.offset().map(|o| o / 1_000_000),
                    max_ms = clock.max_offset / 1_000_000,
                    live = clock.rule().is_live(),
                    "wall clock off cluster time (or no live view of it yet): not campaigning unless the cluster stalls"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn clock(start_log_index: u64) -> (Arc<NodeClock>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let os: Arc<dyn Dir> = Arc::new(raftlock_raft::fs::OsDir::open(dir.path()).unwrap());
        let clock = NodeClock::new(
            start_log_index,
            Duration::from_millis(500),
            Duration::from_secs(1),
            os,
        )
        .unwrap();
        (clock, dir)
    }

    #[test]
    fn the_applied_time_seen_only_rises_and_starts_from_what_was_loaded() {
        let (clock, _dir) = clock(0);
        assert_eq!(clock.applied_seen(), 0);
        clock.started_at(10, 5 * S);
        assert_eq!(clock.applied_seen(), 5 * S);
        clock.observe_applied(7 * S, 11);
        clock.observe_applied(6 * S, 12); // an observation that arrives late
        assert_eq!(clock.applied_seen(), 7 * S);
    }

    /// A restored data directory: a snapshot at index 42 and no log (the log ends at 0). The
    /// snapshot's time is the backup's, 20 s old: not a live view, so the node is not fit to
    /// campaign on it, and a cold-start leader's line starts from its wall clock, not from it.
    #[test]
    fn a_snapshot_beyond_the_log_is_replayed_time_not_a_live_view() {
        let (clock, _dir) = clock(0);
        let old = wall_clock() - 20 * S;
        clock.started_at(42, old);
        clock.observe_applied(old, 42);
        assert!(!clock.rule().is_live());
        assert!(!clock.may_campaign(old), "fit on a 20 s old time");
        // The first leader's blank entry (43) carries no stamp: the machine's time is still
        // the snapshot's.
        clock.observe_applied(old, 43);
        assert!(
            !clock.rule().is_live(),
            "an unstamped entry taken as a live view"
        );
        let stamp = clock.stamp(1, old);
        assert!(
            (wall_clock() - stamp).abs() < S,
            "the first leader stamped {} ms behind its wall clock",
            (wall_clock() - stamp) / 1_000_000
        );
        // The first stamped entry committed while the node runs is live.
        clock.observe_applied(stamp, 44);
        assert!(clock.rule().is_live());
        assert!(clock.offset().unwrap().abs() < S);
    }

    /// A whole cluster restarted from its logs (no restart hint): the new leader's blank entry
    /// repeats the last replayed time, which is as old as the downtime; only a stamped entry
    /// makes the view live.
    #[test]
    fn a_blank_entry_after_a_cold_start_is_not_a_live_view() {
        let (clock, _dir) = clock(100);
        let old = wall_clock() - 60 * S;
        clock.started_at(90, 0); // the snapshot is below the log's end
        clock.observe_applied(old - S, 90);
        clock.observe_applied(old, 100);
        clock.observe_applied(old, 101);
        assert!(!clock.rule().is_live());
        let stamp = clock.stamp(4, old);
        assert!((wall_clock() - stamp).abs() < S);
        clock.observe_applied(stamp, 102);
        assert!(clock.rule().is_live());
    }
}
