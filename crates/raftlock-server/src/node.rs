//! One running raftlock node: its Raft instance, the applied state, the batching proposer,
//! the leader-side rate limiter and the client used to forward requests to the leader.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use openraft::BasicNode;
use raftlock_core::machine::StateMachine;
use raftlock_core::ratelimit::FixedWindow;
use raftlock_core::{Nanos, Op, Outcome};
use raftlock_raft::{Raft, SharedState};

use crate::clock::{applied_time, wall_clock, NodeClock};
use crate::config::Config;
use crate::proposer::Proposer;
use crate::read_gate::ReadGate;
pub use crate::unavailable::Unavailable;

/// Shared handle to everything a request handler needs.
pub type SharedNode = Arc<Node>;

pub struct Node {
    /// Resolved configuration (ids, secrets, timeouts).
    pub config: Config,
    /// The Raft instance; the source of leadership and commit.
    pub raft: Raft,
    /// The applied state machine, read by queries after `ensure_linearizable`.
    state: SharedState,
    /// Batches concurrent writes into one log entry (group commit).
    proposer: Proposer,
    /// Shares one leadership confirmation among concurrent linearizable reads.
    read_gate: Arc<ReadGate>,
    /// Rate-limit windows; only meaningful on the leader, where every request is decided.
    limiter: Mutex<FixedWindow>,
    /// Client for node-to-node requests (forwarding, hand-off, pre-vote, cluster status);
    /// speaks mutual TLS when peer TLS is configured.
    pub forward_client: reqwest::Client,
    /// `https` with peer TLS, else `http`: the scheme of every node-to-node URL.
    pub peer_scheme: &'static str,
    /// This node's peer certificate and peer CA, which follow their files (`crate::tls`).
    pub peer_tls: Option<Arc<crate::tls::PeerClientTls>>,
    /// This node's cluster id, checked on every node-to-node request.
    pub identity: raftlock_raft::ClusterIdentity,
    /// Cluster time: stamps for proposals, the time reads are judged at, the offset guard.
    pub clock: Arc<NodeClock>,
    /// True once the node is stopping (SIGTERM): long waits answer instead of being cut.
    stopping: tokio::sync::watch::Sender<bool>,
    /// When this node last heard from a leader (for the pre-vote, `crate::election`).
    pub contact: raftlock_raft::LeaderContact,
    /// When the process started: a node that never heard from a leader counts from here.
    pub started: std::time::Instant,
    /// The lease and election timeout the pre-vote works with.
    pub election_timing: crate::config::ElectionTiming,
    /// When this node last granted a pre-vote: it then leaves the campaign to that candidate
    /// for a while instead of racing it.
    pub prevote_granted_at: Mutex<Option<std::time::Instant>>,
    /// The Raft groups this node hosts, by id: where incoming peer frames are delivered.
    pub peer_groups: raftlock_raft::PeerGroups,
    /// A handle on the log, for its last log id (the pre-vote compares logs).
    log: raftlock_raft::LogStore,
    /// Calls waiting in hierarchical queues; apply wakes exactly the ones whose waiter left its queue.
    pub waiters: Arc<raftlock_raft::WaiterBoard>,
}

/// An HTTP client for node-to-node requests: kept-alive connections with `TCP_NODELAY`
/// (heartbeats are small and latency-bound), and mutual TLS when configured.
fn peer_client(
    tls: Option<&Arc<crate::tls::PeerClientTls>>,
    connect_timeout: Duration,
) -> anyhow::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .tcp_nodelay(true)
        // Shorter than the peers' header-read timeout (10 s), which also closes idle
        // connections: this side lets go first, so a reused connection is never one the
        // server is closing.
        .pool_idle_timeout(Duration::from_secs(5))
        .connect_timeout(connect_timeout);
    let builder = match tls {
        Some(tls) => builder.use_preconfigured_tls(tls.client_config()?),
        None => builder.use_rustls_tls(),
    };
    Ok(builder.build()?)
}

impl Node {
    /// The URL of `path` on the peer listening at `addr`.
    pub fn peer_url(&self, addr: &str, path: &str) -> String {
        format!("{}://{addr}{path}", self.peer_scheme)
    }

    /// Opens storage, builds the Raft instance and starts the proposer.
    pub async fn start(config: Config) -> anyhow::Result<SharedNode> {
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating {}", config.data_dir.display()))?;
        let (mut log_store, sm_store) = raftlock_raft::open(&config.data_dir)?;
        let identity = raftlock_raft::ClusterIdentity::open(&config.data_dir)?;
        let start_log_index = {
            use openraft::storage::RaftLogStorage;
            let log_state = log_store.get_log_state().await?;
            log_state.last_log_id.map_or(0, |id| id.index)
        };
        let clock_dir: Arc<dyn raftlock_raft::fs::Dir> =
            Arc::new(raftlock_raft::fs::OsDir::open(&config.data_dir)?);
        let clock = NodeClock::new(
            start_log_index,
            config.max_clock_offset,
            config.tick,
            clock_dir,
        )?;
        let applied_rx = sm_store.subscribe_applied();
        let waiters = sm_store.waiter_board();
        let state = sm_store.shared();
        let timing = raftlock_raft::RaftTiming {
            heartbeat: config.heartbeat,
            election_timeout: config.election_timeout,
            // The compactor (`spawn_compactor`) decides when to snapshot.
            snapshot_logs: 0,
        };
        let election_timing = crate::config::ElectionTiming {
            lease: timing.leader_lease(),
            timeout_min: timing.election_timeout,
        };
        let raft_config = raftlock_raft::raft_config(&timing)?;
        // Names this node on every peer RPC (x-raftlock-from), so a per-link fault proxy can
        // tell links apart (chaos suite).
        let log_reader = log_store.clone();
        let peer_tls = match &config.peer_tls {
            Some(files) => Some(crate::tls::PeerClientTls::load(files.clone())?),
            None => None,
        };
        let peer_scheme = if peer_tls.is_some() { "https" } else { "http" };
        let network = raftlock_raft::Network::with_client(
            peer_client(peer_tls.as_ref(), Duration::from_secs(1))?,
            config.cluster_secret.clone(),
        )
        .with_scheme(peer_scheme)
        .with_source(config.node_id)
        .with_identity(identity.clone());
        let raft = Raft::new(config.node_id, raft_config, network, log_store, sm_store)
            .await
            .context("starting raft")?;
        clock.spawn_tasks(raft.clone(), state.clone(), applied_rx);
        let stamper = {
            let (raft, state, clock) = (raft.clone(), state.clone(), clock.clone());
            Arc::new(move || {
                let term = raft.metrics().borrow().current_term;
                clock.stamp(term, applied_time(&state))
            })
        };
        let proposer = Proposer::start(raft.clone(), config.commit_timeout, stamper);
        let forward_client = peer_client(peer_tls.as_ref(), Duration::from_secs(2))?;
        let read_gate = ReadGate::new(raft.clone(), config.commit_timeout);
        let contact = raftlock_raft::LeaderContact::default();
        let peer_groups = raftlock_raft::PeerGroups::default();
        peer_groups.host(raftlock_raft::META_GROUP, raft.clone(), contact.clone());
        Ok(Arc::new(Node {
            config,
            raft,
            state,
            proposer,
            read_gate,
            limiter: Mutex::new(FixedWindow::default()),
            forward_client,
            peer_scheme,
            peer_tls,
            identity,
            clock,
            stopping: tokio::sync::watch::Sender::new(false),
            contact,
            peer_groups,
            started: std::time::Instant::now(),
            election_timing,
            prevote_granted_at: Mutex::new(None),
            log: log_reader,
            waiters,
        }))
    }

    /// Initializes the cluster from `--peers` when this node has the lowest id and the
    /// cluster has never been initialized; everyone else waits to be contacted.
    pub async fn bootstrap(&self) -> anyhow::Result<()> {
        let lowest = *self
            .config
            .peers
            .keys()
            .next()
            .expect("peers include this node");
        if self.config.join || lowest != self.config.node_id || self.raft.is_initialized().await? {
            return Ok(());
        }
        let members: BTreeMap<u64, BasicNode> = self
            .config
            .peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        let cluster_id = self.identity.get_or_create()?;
        tracing::info!(%cluster_id, "initializing a new cluster");
        match self.raft.initialize(members).await {
            Ok(()) => tracing::info!("initialized cluster from --peers"),
            Err(e) => tracing::info!(error = %e, "cluster already initialized"),
        }
        Ok(())
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
        self.leader()
            .is_some_and(|(id, _)| id == self.config.node_id)
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

    /// A request to a peer at `url`, carrying the node-to-node credentials: the cluster
    /// secret, the cluster id once known, and this node's id (so a per-link fault proxy sees
    /// which link a request travels on; never trusted for authorization).
    pub fn peer_request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self
            .forward_client
            .request(method, url)
            .header(
                raftlock_raft::CLUSTER_SECRET_HEADER,
                self.config.cluster_secret.as_str(),
            )
            .header(
                raftlock_raft::SOURCE_HEADER,
                self.config.node_id.to_string(),
            );
        match self.identity.get() {
            Some(id) => req.header(raftlock_raft::CLUSTER_ID_HEADER, id.to_string()),
            None => req,
        }
    }

    /// Marks the node as stopping: it never campaigns again (the election driver and
    /// [`Node::may_campaign`] check this) and long waits answer now.
    pub fn begin_stop(&self) {
        self.stopping.send_replace(true);
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once the node is stopping.
    pub async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|stopping| *stopping).await;
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

    /// Reads the locally applied state without any leadership check (auth lookups on the
    /// leader, metrics). Never use this to answer an ownership question.
    pub fn read_local<T>(&self, read: impl FnOnce(&StateMachine, Nanos) -> T) -> T {
        let guard = self.state.read().expect("state lock poisoned");
        let now = guard
            .machine
            .query_time(self.clock.estimate(guard.machine.time()));
        read(&guard.machine, now)
    }

    /// Counts one request of `bucket` against `limit` per minute (0 = unlimited).
    pub fn count_request(&self, bucket: &str, limit: u32) -> Result<(), u64> {
        // Rate-limit windows are local and approximate: the wall clock is fine here.
        let now = wall_clock();
        self.limiter
            .lock()
            .expect("limiter poisoned")
            .count(bucket, limit, now)
    }

    /// The snapshot policy (openraft's own is off): once a second, [`snapshot_due`] weighs
    /// what this node's log grew by since its last snapshot against `--snapshot-logs`,
    /// `--snapshot-bytes` and the size of the last snapshot file, and asks openraft for a
    /// snapshot when one is due; the snapshot lets the log be purged (whole WAL segments are
    /// deleted).
    pub fn spawn_compactor(self: &Arc<Self>) {
        let node = Arc::clone(self);
        let snapshot_file = node
            .config
            .data_dir
            .join(raftlock_raft::state_machine::SNAPSHOT_FILE);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_snapshot = node.raft.metrics().borrow().snapshot;
            let mut mark = node.log.bytes_written();
            loop {
                interval.tick().await;
                if node.is_stopping() {
                    return;
                }
                let (snapshot, applied) = {
                    let m = node.raft.metrics();
                    let m = m.borrow();
                    (m.snapshot, m.last_applied)
                };
                let written = node.log.bytes_written();
                if snapshot != last_snapshot {
                    last_snapshot = snapshot;
                    mark = written;
                }
                let growth = LogGrowth {
                    entries: applied
                        .map_or(0, |a| a.index)
                        .saturating_sub(snapshot.map_or(0, |s| s.index)),
                    bytes: written.saturating_sub(mark),
                    snapshot_bytes: std::fs::metadata(&snapshot_file).map_or(0, |m| m.len()),
                };
                let due = snapshot_due(
                    node.config.node_id,
                    &growth,
                    node.config.snapshot_logs,
                    node.config.snapshot_bytes,
                );
                let Some(reason) = due else {
                    continue;
                };
                tracing::info!(?reason, ?growth, "building a snapshot");
                if reason == SnapshotReason::LogBytes {
                    metrics::counter!("raftlock_snapshots_by_size_total").increment(1);
                }
                // Counted from now, so a slow build is not asked for again every second.
                mark = written;
                if let Err(e) = node.raft.trigger().snapshot().await {
                    tracing::warn!(error = %e, "cannot trigger a snapshot");
                }
            }
        });
    }

    /// Proposes a tick every `tick` while leader, so leases expire without client traffic.
    pub fn spawn_ticker(self: &Arc<Self>) {
        let node = Arc::clone(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(node.config.tick);
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
