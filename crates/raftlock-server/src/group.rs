//! One Raft group as this node runs it: its openraft instance, its applied state, the
//! batching proposer, linearizable reads, its cluster time and its snapshot policy.
//!
//! A node runs one [`Group`] per group it hosts a replica of: the meta group always (projects,
//! keys, the shard map), and the data shards placed on it. Everything here is per group —
//! leadership, term, log, clock, fencing tokens — so groups never wait on each other; what is
//! per node (configuration, peer clients, the stop signal, the rate limiter) stays in
//! [`crate::node::Node`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use raftlock_core::machine::StateMachine;
use raftlock_core::{Nanos, Op, Outcome};
use raftlock_raft::{GroupId, Raft, SharedState};

use crate::clock::{applied_time, NodeClock};
use crate::compaction::{snapshot_due, LogGrowth, SnapshotPolicy, SnapshotReason};
use crate::config::Config;
use crate::proposer::Proposer;
use crate::read_gate::ReadGate;
use crate::unavailable::Unavailable;

pub struct Group {
    /// Which group this is (named in its peer frames and forwarded requests).
    pub id: GroupId,
    /// This node's id in the group (the same in every group).
    node_id: u64,
    /// The Raft instance; the source of the group's leadership and commit.
    pub raft: Raft,
    /// The applied state machine, read by queries after `ensure_linearizable`.
    state: SharedState,
    /// Batches concurrent writes into one log entry (group commit).
    proposer: Proposer,
    /// Shares one leadership confirmation among concurrent linearizable reads.
    read_gate: Arc<ReadGate>,
    /// The group's cluster time: stamps for proposals, the time reads are judged at, the
    /// offset guard.
    pub clock: Arc<NodeClock>,
    /// When this replica last heard from the group's leader (for the pre-vote).
    pub contact: raftlock_raft::LeaderContact,
    /// When this replica last granted a pre-vote: it then leaves the campaign to that
    /// candidate for a while instead of racing it.
    pub prevote_granted_at: Mutex<Option<std::time::Instant>>,
    /// A handle on the log, for its last log id (the pre-vote compares logs).
    log: raftlock_raft::LogStore,
    /// Calls waiting in hierarchical queues; apply wakes exactly the ones whose waiter left
    /// its queue.
    pub waiters: Arc<raftlock_raft::WaiterBoard>,
    /// The group's data directory (log, vote, snapshot).
    dir: PathBuf,
    /// Time spent applying entries, which the compactor keeps within the replay budget, and
    /// the ops applied, which the rate meter turns into a write rate.
    apply_time: Arc<raftlock_raft::ApplyTime>,
    /// Ops this replica applied in the last whole second ([`Group::spawn_rate_meter`]).
    ops_per_second: AtomicU64,
    /// True once the node is stopping: the group never campaigns again.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Group {
    /// Opens the group's storage in `dir`, builds its Raft instance on `network` and starts
    /// its proposer and clock tasks.
    pub async fn start(
        config: &Config,
        id: GroupId,
        dir: PathBuf,
        network: raftlock_raft::Network,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Group> {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (mut log_store, sm_store, opened) = raftlock_raft::open_timed(&dir)?;
        let start_log_index = {
            use openraft::storage::RaftLogStorage;
            let log_state = log_store.get_log_state().await?;
            log_state.last_log_id.map_or(0, |id| id.index)
        };
        let clock_dir: Arc<dyn raftlock_raft::fs::Dir> =
            Arc::new(raftlock_raft::fs::OsDir::open(&dir)?);
        let clock = NodeClock::new(
            start_log_index,
            config.max_clock_offset,
            config.tick,
            clock_dir,
        )?;
        let applied_rx = sm_store.subscribe_applied();
        let waiters = sm_store.waiter_board();
        let state = sm_store.shared();
        let apply_time = sm_store.apply_time();
        let raft_config = raftlock_raft::raft_config(&config.raft_timing())?;
        let log = log_store.clone();
        let raft_started = std::time::Instant::now();
        let raft = Raft::new(config.node_id, raft_config, network, log_store, sm_store)
            .await
            .with_context(|| format!("starting raft group {id}"))?;
        crate::startup::report_group(id, opened, raft_started.elapsed());
        clock.spawn_tasks(raft.clone(), state.clone(), applied_rx);
        let stamper = {
            let (raft, state, clock) = (raft.clone(), state.clone(), clock.clone());
            Arc::new(move || {
                let term = raft.metrics().borrow().current_term;
                clock.stamp(term, applied_time(&state))
            })
        };
        let cpu_pressure = crate::cpu_pressure::CpuPressure::shared();
        let proposer = Proposer::start(
            raft.clone(),
            config.commit_timeout,
            stamper,
            Arc::new(move || cpu_pressure.held_to_quota()),
        );
        let read_gate = ReadGate::new(raft.clone(), config.commit_timeout);
        Ok(Group {
            id,
            node_id: config.node_id,
            raft,
            state,
            proposer,
            read_gate,
            clock,
            contact: raftlock_raft::LeaderContact::default(),
            prevote_granted_at: Mutex::new(None),
            log,
            waiters,
            dir,
            apply_time,
            ops_per_second: AtomicU64::new(0),
            stopping,
        })
    }

    /// Every node of the group's membership (voters and learners), as this replica knows it.
    pub fn known_nodes(&self) -> std::collections::BTreeSet<u64> {
        self.member_addresses().into_keys().collect()
    }

    /// Every member (voter or learner) with its address, as this replica knows them.
    pub fn member_addresses(&self) -> std::collections::BTreeMap<u64, String> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let nodes = m.membership_config.nodes();
        nodes.map(|(id, n)| (*id, n.addr.clone())).collect()
    }

    /// The group's voters, as this replica knows them.
    pub fn voters(&self) -> std::collections::BTreeSet<u64> {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.membership_config.membership().voter_ids().collect()
    }

    fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// The leader's id and address, if one is known.
    pub fn leader(&self) -> Option<(u64, String)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        let id = m.current_leader?;
        let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
        Some((id, addr))
    }

    pub fn is_leader(&self) -> bool {
        self.leader().is_some_and(|(id, _)| id == self.node_id)
    }

    /// Waits until `deadline` for some leader to be known.
    pub async fn wait_for_leader_until(
        &self,
        deadline: tokio::time::Instant,
    ) -> Option<(u64, String)> {
        let mut rx = self.raft.metrics();
        loop {
            if let Some(l) = self.leader() {
                return Some(l);
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return None;
            }
        }
    }

    /// Stops proposing writes until the guard is dropped (see [`Proposer::hold`]).
    pub async fn hold_writes(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.proposer.hold().await
    }

    /// How long this node's log write in progress has taken so far (`None`: none is).
    pub fn log_writing_for(&self) -> Option<std::time::Duration> {
        self.log.writing_for()
    }

    /// (term, index) of the last entry in this node's log, the order Raft's vote uses.
    pub async fn last_log(&self) -> (u64, u64) {
        use openraft::storage::RaftLogStorage;
        let mut log = self.log.clone();
        match log.get_log_state().await {
            Ok(state) => state
                .last_log_id
                .map_or((0, 0), |id| (id.leader_id.term, id.index)),
            Err(_) => (u64::MAX, u64::MAX),
        }
    }

    /// Whether this node's clock lets it lead now (see [`NodeClock::may_campaign`]).
    pub fn may_campaign(&self) -> bool {
        !self.is_stopping() && self.clock.may_campaign(applied_time(&self.state))
    }

    /// Proposes one op through the log and returns its outcome once applied.
    pub async fn propose(&self, op: Op) -> Result<Outcome, Unavailable> {
        self.proposer.propose(op).await
    }

    /// Runs `read` against the state after confirming leadership with a quorum, so the
    /// answer is linearizable. Bounded by the commit timeout.
    pub async fn linearizable<T>(
        &self,
        read: impl FnOnce(&StateMachine, Nanos) -> T,
    ) -> Result<T, Unavailable> {
        self.read_gate.confirm().await?;
        // Judged at the time the next write would be stamped at (never later): a read never
        // says free while the next write would still find the lock held.
        let term = self.raft.metrics().borrow().current_term;
        let guard = self.state.read().expect("state lock poisoned");
        let now = self.clock.stamp(term, guard.machine.time());
        Ok(read(&guard.machine, guard.machine.query_time(now)))
    }

    /// A copy of the applied state (cheap: the big maps are persistent), for backups.
    pub fn state_copy(&self) -> raftlock_raft::SmData {
        self.state.read().expect("state lock poisoned").clone()
    }

    /// The cluster time this replica has applied up to, or a little less (what its clock
    /// last saw, read without the state's lock): no entry appended from now on is applied at
    /// an earlier time (see `http::resend`).
    pub fn applied_time(&self) -> Nanos {
        self.clock.applied_seen()
    }

    /// Reads the locally applied state without any leadership check (auth lookups on the
    /// leader, metrics). Never use this to answer an ownership question.
    pub fn read_local<T>(&self, read: impl FnOnce(&StateMachine, Nanos) -> T) -> T {
        let guard = self.state.read().expect("state lock poisoned");
        let now = guard
            .machine
            .query_time(self.clock.estimate(guard.machine.time()));
        read(&guard.machine, now)
    }

    /// Once a second, how many ops this replica applied in that second: the group's write
    /// rate as `GET /admin/v1/shards` shows it (every replica applies what the leader commits,
    /// so any member's figure is the group's).
    pub fn spawn_rate_meter(self: &Arc<Self>) {
        let node = Arc::clone(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = (Instant::now(), node.apply_time.ops());
            loop {
                interval.tick().await;
                if node.is_stopping() {
                    return;
                }
                let now = (Instant::now(), node.apply_time.ops());
                let seconds = now.0.duration_since(last.0).as_secs_f64().max(0.001);
                let rate = (now.1.saturating_sub(last.1) as f64 / seconds).round() as u64;
                node.ops_per_second.store(rate, Ordering::Relaxed);
                last = now;
            }
        });
    }

    /// Ops applied per second, as last measured ([`Group::spawn_rate_meter`]).
    pub fn ops_per_second(&self) -> u64 {
        self.ops_per_second.load(Ordering::Relaxed)
    }

    /// Bytes this replica keeps on disk: its snapshot and its write-ahead log (the files of
    /// the group's directory). Read on a blocking thread: a directory on a slow disk must
    /// not stall the runtime's workers.
    pub async fn disk_bytes(&self) -> u64 {
        let dir = self.dir.clone();
        let sum_files = move || {
            let Ok(files) = std::fs::read_dir(&dir) else {
                return 0;
            };
            (files.flatten())
                .filter_map(|f| f.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        };
        tokio::task::spawn_blocking(sum_files).await.unwrap_or(0)
    }

    /// The snapshot policy (openraft's own is off): once a second, [`snapshot_due`] weighs
    /// what this node's log grew by since its last snapshot against `--snapshot-logs`,
    /// `--snapshot-bytes` and the size of the last snapshot file, and asks openraft for a
    /// snapshot when one is due; the snapshot lets the log be purged (whole WAL segments are
    /// deleted). On the same beat the log store lets go of the decoded entries older than
    /// [`raftlock_raft::log_store::DECODED_TAIL_AGE`].
    pub fn spawn_compactor(self: &Arc<Self>, policy: SnapshotPolicy) {
        let node = Arc::clone(self);
        let snapshot_file = node.dir.join(raftlock_raft::state_machine::SNAPSHOT_FILE);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_snapshot = node.raft.metrics().borrow().snapshot;
            let mut mark = node.log.bytes_written();
            // From zero, not from now: what applying took so far is the replay of the log
            // after the snapshot this node started from, which the next restart replays too.
            let mut apply_mark = Duration::ZERO;
            loop {
                interval.tick().await;
                if node.is_stopping() {
                    return;
                }
                node.log.release_aged_tail();
                let (snapshot, applied) = {
                    let m = node.raft.metrics();
                    let m = m.borrow();
                    (m.snapshot, m.last_applied)
                };
                let written = node.log.bytes_written();
                let applying = node.apply_time.total();
                if snapshot != last_snapshot {
                    last_snapshot = snapshot;
                    mark = written;
                    apply_mark = applying;
                }
                let growth = LogGrowth {
                    entries: applied
                        .map_or(0, |a| a.index)
                        .saturating_sub(snapshot.map_or(0, |s| s.index)),
                    bytes: written.saturating_sub(mark),
                    snapshot_bytes: std::fs::metadata(&snapshot_file).map_or(0, |m| m.len()),
                    apply: applying.saturating_sub(apply_mark),
                };
                let due = snapshot_due(node.node_id, &growth, &policy);
                let Some(reason) = due else {
                    continue;
                };
                tracing::info!(?reason, ?growth, "building a snapshot");
                match reason {
                    SnapshotReason::LogBytes => {
                        metrics::counter!("raftlock_snapshots_by_size_total").increment(1)
                    }
                    SnapshotReason::Replay => {
                        metrics::counter!("raftlock_snapshots_by_replay_total").increment(1)
                    }
                    SnapshotReason::Entries => {}
                }
                // Counted from now, so a slow build is not asked for again every second.
                mark = written;
                apply_mark = applying;
                if let Err(e) = node.raft.trigger().snapshot().await {
                    tracing::warn!(error = %e, "cannot trigger a snapshot");
                }
            }
        });
    }

    /// Proposes a tick every `tick` while leader, so leases expire without client traffic.
    pub fn spawn_ticker(self: &Arc<Self>, tick: Duration) {
        let node = Arc::clone(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if node.is_leader() {
                    if let Err(e) = node.propose(Op::Tick).await {
                        tracing::debug!(error = %e, "tick not committed");
                    }
                }
            }
        });
    }
}
