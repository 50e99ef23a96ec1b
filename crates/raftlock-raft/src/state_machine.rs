//! The replicated state machine: committed entries go into [`raftlock_core::StateMachine`].
//!
//! The applied state lives in memory behind a shared lock so the server can answer reads
//! from it directly ([`StateMachineStore::shared`]) and wake waiters when the applied index
//! moves ([`StateMachineStore::subscribe_applied`]). Durability comes from snapshots: the
//! latest one is the `snapshot` file of the data directory (a checked file: magic, format,
//! checksum, replaced atomically), and on start-up the machine is restored from it while
//! openraft re-applies the committed log after it.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use raftlock_core::{codec, Limits, Outcome, StateMachine};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::sync::watch;

use crate::checked_file;
use crate::error::StoreError;
use crate::fs::Dir;
use crate::typ::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::waiters::WaiterBoard;

/// Name of the snapshot file in the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot";
pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"RLSNAP01";

/// Everything a snapshot holds: the core machine plus what openraft needs to resume from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmData {
    /// The last entry applied to `machine`.
    pub last_applied: Option<LogId>,
    /// The membership in effect as of `last_applied`.
    pub last_membership: StoredMembership,
    /// raftlock's own state.
    pub machine: StateMachine,
}

/// The applied state, shared with the server for queries. Hold the read lock briefly: apply
/// takes the write lock for each batch of committed entries.
pub type SharedState = Arc<RwLock<SmData>>;

/// The snapshot kept on disk: its metadata and the codec-encoded [`SmData`].
#[derive(Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    pub(crate) meta: SnapshotMeta,
    #[serde(with = "codec::bytes")]
    pub(crate) data: Vec<u8>,
}

/// What a snapshot file is written from.
enum SnapshotBody {
    /// The encoded state, as a leader sent it.
    Encoded(Vec<u8>),
    /// A copy of the applied state, encoded straight into the file: a snapshot of a large
    /// state (~100 MB encoded) is never held encoded in memory, which is most of a node's
    /// memory swing when it builds one.
    State(Box<SmData>),
}

impl SnapshotBody {
    /// Writes the snapshot file of `meta` with this body; returns the encoded state's size.
    fn write(self, dir: &dyn Dir, meta: &SnapshotMeta) -> Result<usize, StoreError> {
        match self {
            SnapshotBody::Encoded(data) => {
                checked_file::save_with_bytes(dir, SNAPSHOT_FILE, SNAPSHOT_MAGIC, meta, &data)?;
                Ok(data.len())
            }
            SnapshotBody::State(state) => checked_file::save_streamed(
                dir,
                SNAPSHOT_FILE,
                SNAPSHOT_MAGIC,
                meta,
                &(STATE_FORMAT, &*state),
            ),
        }
    }
}

/// The time this node spent applying committed entries, in total since it started: what the
/// entries after a snapshot cost to apply is about what replaying them costs at a restart, so
/// the compactor snapshots before that grows past its budget (`--snapshot-replay-ms`). And
/// the ops those entries carried, from which the group's write rate is told.
#[derive(Debug, Default)]
pub struct ApplyTime {
    nanos: AtomicU64,
    ops: AtomicU64,
}

impl ApplyTime {
    fn add(&self, took: Duration, ops: usize) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.ops.fetch_add(ops as u64, Ordering::Relaxed);
    }

    /// The total so far.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Ops applied so far that someone asked for (each op of a batched entry counts; the
    /// leader's ticks, blank and membership entries do not).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }
}

/// Storage shared by the state machine and its snapshot builders.
#[derive(Clone)]
struct Shared {
    state: SharedState,
    applied_tx: Arc<watch::Sender<u64>>,
    /// The data directory holding the snapshot file.
    dir: Arc<dyn Dir>,
    /// Serializes snapshot writes and remembers what the file holds: openraft builds
    /// snapshots on their own task, so a build of an older state can finish after an install
    /// of a newer one; it must neither share the temporary file nor replace the newer file.
    persisted: Arc<tokio::sync::Mutex<Option<LogId>>>,
    /// Calls waiting in hierarchical queues, woken when the machine reports their waiter resolved.
    waiters: Arc<WaiterBoard>,
    /// Time spent in [`RaftStateMachine::apply`] (read by the compactor).
    apply_time: Arc<ApplyTime>,
}

/// openraft's [`RaftStateMachine`] for raftlock.
pub struct StateMachineStore {
    shared: Shared,
}

fn snap_write(meta: &SnapshotMeta, e: &dyn std::error::Error) -> StorageError {
    StorageIOError::write_snapshot(Some(meta.signature()), openraft::AnyError::error(e)).into()
}
fn snap_read(e: &dyn std::error::Error) -> StorageError {
    StorageIOError::read_snapshot(None, openraft::AnyError::error(e)).into()
}
fn join_err(e: tokio::sync::oneshot::error::RecvError) -> StoreError {
    StoreError::io(
        SNAPSHOT_FILE,
        std::io::Error::other(format!("the snapshot thread ended without an answer: {e}")),
    )
}

/// How much nicer than the node the threads that encode and write snapshots run: a snapshot
/// of a large state takes a core for a second or two, and on a busy node the request path
/// should win that core.
const SNAPSHOT_THREAD_NICENESS: i32 = 10;

/// Runs `work` on a thread of its own at a lower CPU priority ([`SNAPSHOT_THREAD_NICENESS`]).
/// A fresh thread, not tokio's blocking pool: a pool thread would keep the lower priority for
/// whatever runs on it next (a process without privileges cannot raise it back), and
/// snapshots are rare enough for a thread each.
async fn in_snapshot_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("snapshot".into())
        .spawn(move || {
            lower_this_threads_priority();
            let _ = tx.send(work());
        })
        .map_err(|e| StoreError::io("a snapshot thread", e))?;
    rx.await.map_err(join_err)
}

#[cfg(target_os = "linux")]
fn lower_this_threads_priority() {
    // On Linux a thread is a task of its own: PRIO_PROCESS with who = 0 renices the calling
    // thread only (setpriority(2), NOTES). Best effort: a refusal leaves the default priority.
    // Relative to the node's own nice value, which an operator may have set.
    // SAFETY: getpriority/setpriority take plain integers and touch no memory of ours.
    unsafe {
        let current = libc::getpriority(libc::PRIO_PROCESS, 0);
        let _ = libc::setpriority(libc::PRIO_PROCESS, 0, current + SNAPSHOT_THREAD_NICENESS);
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_this_threads_priority() {}

/// Version of the snapshot payload layout (`SmData` and everything in it). Bump it whenever
/// the encoded state changes shape: bincode is not self-describing, so a node must refuse a
/// snapshot of another layout with a clear error rather than misread it.
pub const STATE_FORMAT: u32 = 5;

/// [`SmData`] in an older format whose machine is laid out as `M` (e.g.
/// [`raftlock_core::StateMachineV3`]); read and converted ([`SmData::from_older`]).
#[derive(Deserialize)]
struct OlderSmData<M> {
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    machine: M,
}

impl SmData {
    /// Decodes `bytes` (format-prefixed) as an older format whose machine is laid out as `M`.
    fn from_older<M: DeserializeOwned + Into<StateMachine>>(
        bytes: &[u8],
    ) -> Result<SmData, BoxError> {
        let (_, older): (u32, OlderSmData<M>) = codec::decode(bytes)?;
        Ok(SmData {
            last_applied: older.last_applied,
            last_membership: older.last_membership,
            machine: older.machine.into(),
        })
    }
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Encodes the state prefixed with [`STATE_FORMAT`].
pub(crate) fn encode_state(state: &SmData) -> Result<Vec<u8>, BoxError> {
    Ok(codec::encode(&(STATE_FORMAT, state))?)
}

/// Decodes a state written by [`encode_state`], refusing other layouts, with the usage
/// counts (not encoded) counted again.
pub(crate) fn decode_state(bytes: &[u8]) -> Result<SmData, BoxError> {
    let mut state = decode_state_as_written(bytes)?;
    state.machine.count_usage();
    Ok(state)
}

fn decode_state_as_written(bytes: &[u8]) -> Result<SmData, BoxError> {
    use raftlock_core::{StateMachineV1, StateMachineV2, StateMachineV3, StateMachineV4};
    let format: u32 = codec::decode(bytes)?;
    match format {
        // Before the machine remembered request ids.
        1 => SmData::from_older::<StateMachineV1>(bytes),
        // Before semaphores, wait groups and barriers.
        2 => SmData::from_older::<StateMachineV2>(bytes),
        // With the project-lock eligibility index encoded.
        3 => SmData::from_older::<StateMachineV3>(bytes),
        // Before the shard map.
        4 => SmData::from_older::<StateMachineV4>(bytes),
        STATE_FORMAT => {
            let (_, state): (u32, SmData) = codec::decode(bytes)?;
            Ok(state)
        }
        _ => Err(format!(
            "snapshot has state format {format}, this binary reads format {STATE_FORMAT}; \
             upgrade every node to a release that can convert it"
        )
        .into()),
    }
}

impl Shared {
    fn read_snapshot(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        checked_file::load(&*self.dir, SNAPSHOT_FILE, SNAPSHOT_MAGIC)
    }

    /// Makes the snapshot of `meta` with `body` the current one, durably (temp file, sync,
    /// rename, directory sync), so the log before it may be purged; on a snapshot thread.
    async fn persist_snapshot(
        &self,
        meta: &SnapshotMeta,
        body: SnapshotBody,
    ) -> Result<(), StorageError> {
        let mut persisted = self.persisted.lock().await;
        if persisted.is_some() && *persisted >= meta.last_log_id {
            tracing::debug!(snapshot = %meta.snapshot_id, "not replacing a newer snapshot file");
            return Ok(());
        }
        let dir = self.dir.clone();
        let started = Instant::now();
        let owned_meta = meta.clone();
        let written = in_snapshot_thread(move || body.write(&*dir, &owned_meta))
            .await
            .and_then(|r| r)
            .map_err(|e| snap_write(meta, &e))?;
        metrics::gauge!("raftlock_snapshot_bytes").set(written as f64);
        metrics::histogram!("raftlock_snapshot_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        *persisted = meta.last_log_id;
        Ok(())
    }

    fn publish_applied(&self, last_applied: Option<&LogId>) {
        let index = last_applied.map_or(0, |id| id.index);
        self.applied_tx.send_if_modified(|cur| {
            let changed = *cur != index;
            *cur = index;
            changed
        });
    }
}

impl StateMachineStore {
    /// Restores the machine from the snapshot file in `dir`, or starts an empty machine with
    /// `limits` (see [`crate::open`]).
    pub fn open(dir: Arc<dyn Dir>, limits: Limits) -> Result<Self, StoreError> {
        let (applied_tx, _) = watch::channel(0);
        let shared = Shared {
            state: Arc::new(RwLock::new(SmData {
                machine: StateMachine::new(limits),
                ..Default::default()
            })),
            applied_tx: Arc::new(applied_tx),
            dir,
            persisted: Arc::new(tokio::sync::Mutex::new(None)),
            waiters: Arc::new(WaiterBoard::default()),
            apply_time: Arc::default(),
        };
        if let Some(snap) = shared.read_snapshot()? {
            *shared.persisted.try_lock().expect("not shared yet") = snap.meta.last_log_id;
            let mut data = decode_state(&snap.data).map_err(|e| StoreError::Foreign {
                file: shared.dir.describe(SNAPSHOT_FILE),
                reason: e.to_string(),
            })?;
            data.last_applied = snap.meta.last_log_id;
            data.last_membership = snap.meta.last_membership;
            shared.publish_applied(data.last_applied.as_ref());
            *shared.state.write().unwrap_or_else(|p| p.into_inner()) = data;
        }
        Ok(StateMachineStore { shared })
    }

    /// The applied state, for queries. Reads see every entry applied so far on this node;
    /// linearizable reads must first go through `Raft::ensure_linearizable`.
    pub fn shared(&self) -> SharedState {
        self.shared.state.clone()
    }

    /// The index of the last applied entry (0 before any), updated after each applied batch
    /// and after installing a snapshot.
    pub fn subscribe_applied(&self) -> watch::Receiver<u64> {
        self.shared.applied_tx.subscribe()
    }

    /// Where calls waiting in hierarchical queues register to be woken when their waiter is resolved.
    pub fn waiter_board(&self) -> Arc<WaiterBoard> {
        self.shared.waiters.clone()
    }

    /// How long this node has spent applying entries (see [`ApplyTime`]).
    pub fn apply_time(&self) -> Arc<ApplyTime> {
        self.shared.apply_time.clone()
    }
}

/// Builds snapshots from the shared state; openraft runs it on its own task.
pub struct SnapshotBuilder {
    shared: Shared,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Copy under the read lock, encode the copy on a snapshot thread: apply and reads
        // wait only for the copy. project-lock locks live in persistent maps, so their copy is O(1)
        // however many there are (docs/architecture.md, *Snapshots*).
        let copied = std::time::Instant::now();
        let state = self
            .shared
            .state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        metrics::histogram!("raftlock_snapshot_copy_seconds")
            .record(copied.elapsed().as_secs_f64());
        let meta = snapshot_meta(&state);
        self.shared
            .persist_snapshot(&meta, SnapshotBody::State(Box::new(state)))
            .await?;
        // openraft 0.9 keeps only the metadata of a snapshot it had built (core/sm/worker.rs,
        // `build_snapshot`): the data is dropped unread. It is in the file, which
        // `get_current_snapshot` reads when a follower needs it; reading it back here would
        // bring back the very ~100 MB buffer encoding into the file avoids.
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

/// The metadata of a snapshot of `state`, with an id unique to this build.
fn snapshot_meta(state: &SmData) -> SnapshotMeta {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let snapshot_id = match &state.last_applied {
        Some(id) => format!("{}-{}-{}", id.leader_id, id.index, nanos),
        None => format!("none-{nanos}"),
    };
    SnapshotMeta {
        last_log_id: state.last_applied,
        last_membership: state.last_membership.clone(),
        snapshot_id,
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let state = self.shared.state.read().unwrap_or_else(|p| p.into_inner());
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Outcome>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let (replies, last_applied, resolved, applying, ops) = {
            let mut state = self.shared.state.write().unwrap_or_else(|p| p.into_inner());
            // What a replay would cost: the applying, not the wait for the lock.
            let applying = Instant::now();
            let mut replies = Vec::new();
            let mut ops = 0;
            for entry in entries {
                let reply = match &entry.payload {
                    EntryPayload::Normal(cmd) => {
                        ops += cmd.requested_ops();
                        state.machine.apply(cmd)
                    }
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Membership(m) => {
                        state.last_membership =
                            StoredMembership::new(Some(entry.log_id), m.clone());
                        Vec::new()
                    }
                };
                state.last_applied = Some(entry.log_id);
                replies.push(reply);
            }
            let resolved = state.machine.take_resolved_waiters();
            (
                replies,
                state.last_applied,
                resolved,
                applying.elapsed(),
                ops,
            )
        };
        // The state was write-locked this long: linearizable reads waited as much.
        metrics::histogram!("raftlock_apply_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        self.shared.apply_time.add(applying, ops);
        self.shared.publish_applied(last_applied.as_ref());
        self.shared.waiters.resolved(&resolved);
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let mut data = decode_state(&bytes).map_err(|e| snap_read(&*e))?;
        // The metadata is authoritative for where the snapshot puts this node.
        data.last_applied = meta.last_log_id;
        data.last_membership = meta.last_membership.clone();
        // Persist before replacing the state, so the log openraft purges next is covered.
        self.shared
            .persist_snapshot(meta, SnapshotBody::Encoded(bytes))
            .await?;
        let last_applied = data.last_applied;
        *self.shared.state.write().unwrap_or_else(|p| p.into_inner()) = data;
        self.shared.publish_applied(last_applied.as_ref());
        // Every queue may have changed: let each waiting call look again.
        self.shared.waiters.all();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let stored = self.shared.read_snapshot().map_err(|e| snap_read(&e))?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn state_round_trips_and_other_formats_are_refused() {
        let state = SmData::default();
        let bytes = encode_state(&state).unwrap();
        assert_eq!(decode_state(&bytes).unwrap().machine, state.machine);
        let foreign = codec::encode(&(STATE_FORMAT + 1, &state)).unwrap();
        let err = decode_state(&foreign).unwrap_err().to_string();
        assert!(err.contains("state format"), "{err}");
    }

    /// A state with one project and no project locks laid out as `format`: format 3 also
    /// held the (empty) eligibility index, one zero byte before the fencing-token counter;
    /// formats 1 and 2 also lack the `trailing` bytes later formats added at the end (all of
    /// them encode empty tables: one zero byte each).
    fn older_format(format: u32, trailing: usize) -> (SmData, Vec<u8>) {
        use raftlock_core::project_locks::FIRST_FENCING_TOKEN;
        use raftlock_core::{Command, Op};
        let mut state = SmData::default();
        state.machine.apply(&Command {
            stamp: 5,
            ops: vec![Op::CreateProject { name: "p".into() }],
        });
        let mut bytes = codec::encode(&(format, &state)).unwrap();
        let counter = codec::encode(&FIRST_FENCING_TOKEN).unwrap();
        let found: Vec<usize> = (0..bytes.len())
            .filter(|at| bytes[*at..].starts_with(&counter))
            .collect();
        let [at] = found[..] else {
            panic!("the counter is encoded once, not at {found:?}")
        };
        assert_eq!(bytes[at - 1], 0, "no leases: an empty map");
        bytes.insert(at, 0);
        for _ in 0..trailing {
            assert_eq!(bytes.pop(), Some(0));
        }
        (state, bytes)
    }

    #[test]
    fn a_format_4_snapshot_is_read_and_converted() {
        // Format 4 is format 5 without the shard map, last and (empty) two bytes.
        let mut state = SmData::default();
        state.machine.apply(&raftlock_core::Command {
            stamp: 5,
            ops: vec![raftlock_core::Op::CreateProject { name: "p".into() }],
        });
        let mut v4 = codec::encode(&(4u32, &state)).unwrap();
        assert_eq!(v4.split_off(v4.len() - 2), vec![0, 0]);
        assert_eq!(decode_state(&v4).unwrap().machine, state.machine);
    }

    #[test]
    fn a_format_3_snapshot_is_read_and_converted() {
        let (state, v3) = older_format(3, 2);
        assert_eq!(decode_state(&v3).unwrap().machine, state.machine);
    }

    #[test]
    fn a_format_2_snapshot_is_read_and_converted() {
        // Format 2 is format 3 without the semaphores, wait groups and barriers, which are
        // last and (empty) nine bytes: semaphores 4 (no namespaces, two empty indexes, token
        // counter 0), wait groups 3 (no namespaces, two empty indexes), barriers 2.
        let (state, v2) = older_format(2, 11);
        assert_eq!(decode_state(&v2).unwrap().machine, state.machine);
    }

    #[test]
    fn a_format_1_snapshot_is_read_and_converted() {
        // Format 1 is format 2 without the request-id table, one more (empty) byte.
        let (state, v1) = older_format(1, 12);
        assert_eq!(decode_state(&v1).unwrap().machine, state.machine);
    }
}

#[cfg(test)]
mod persist_tests {
    use super::*;
    use crate::sim_fs::SimDir;
    use openraft::CommittedLeaderId;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn snapshot_work_runs_at_a_lower_priority_than_its_caller() {
        // SAFETY: getpriority only reads the calling thread's nice value.
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let caller = nice();
        let worker = in_snapshot_thread(nice).await.unwrap();
        let expected = (caller + SNAPSHOT_THREAD_NICENESS).min(19);
        assert_eq!(worker, expected, "caller at {caller}");
        assert_eq!(nice(), caller, "the caller keeps its priority");
    }

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("s{index}"),
        }
    }

    fn empty_state() -> SnapshotBody {
        SnapshotBody::Encoded(encode_state(&SmData::default()).unwrap())
    }

    /// The snapshot file is written from the metadata and the state bytes where they lie;
    /// it must be the very file that saving the whole value writes (what earlier releases
    /// wrote and every release reads), larger than a sync chunk so the pieces are cut.
    #[tokio::test]
    async fn a_snapshot_written_in_pieces_is_the_file_written_whole() {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new());
        let store = StateMachineStore::open(dir.clone(), Limits::default()).unwrap();
        let data: Vec<u8> = (0..3 * crate::fs::SYNC_CHUNK_BYTES + 5)
            .map(|i| (i % 251) as u8)
            .collect();
        let snap = StoredSnapshot {
            meta: meta(7),
            data: data.clone(),
        };
        let whole_dir = SimDir::new();
        checked_file::save(&whole_dir, SNAPSHOT_FILE, SNAPSHOT_MAGIC, &snap).unwrap();
        let expected = whole_dir.read(SNAPSHOT_FILE).unwrap().unwrap();
        store
            .shared
            .persist_snapshot(&snap.meta, SnapshotBody::Encoded(data))
            .await
            .unwrap();
        assert_eq!(dir.read(SNAPSHOT_FILE).unwrap().unwrap(), expected);
        let back = store.shared.read_snapshot().unwrap().unwrap();
        assert_eq!(back.meta.snapshot_id, "s7");
        assert_eq!(back.data.len(), 3 * crate::fs::SYNC_CHUNK_BYTES + 5);
    }

    /// A state of a few sync chunks, with locks in two projects.
    fn a_state_of_some_megabytes() -> SmData {
        use raftlock_core::command::LockAction;
        use raftlock_core::{Command, Op};
        let mut state = SmData::default();
        let apply = |state: &mut SmData, stamp, op| {
            let outcome = state.machine.apply(&Command {
                stamp,
                ops: vec![op],
            });
            assert!(outcome.iter().all(|o| o.is_ok()), "{outcome:?}");
        };
        for p in ["a", "b"] {
            apply(&mut state, 1, Op::CreateProject { name: p.into() });
        }
        let mut state_bytes = 0;
        let mut i = 0u64;
        while state_bytes < 3 * crate::fs::SYNC_CHUNK_BYTES {
            i += 1;
            let project = if i.is_multiple_of(2) { "a" } else { "b" };
            let acquire = Op::ProjectLock {
                project: project.into(),
                key: format!("job-{i:08}"),
                action: LockAction::Acquire {
                    token: u128::from(i),
                    ttl_seconds: 600,
                },
            };
            apply(&mut state, 2, acquire);
            if i.is_multiple_of(4096) {
                state_bytes = encode_state(&state).unwrap().len();
            }
        }
        state
    }

    /// A snapshot built from the state is encoded straight into the file: the file must be
    /// byte for byte the one saving the encoded state whole writes, and read back as the state.
    #[tokio::test]
    async fn a_snapshot_encoded_into_its_file_is_the_file_written_whole() {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new());
        let mut store = StateMachineStore::open(dir.clone(), Limits::default()).unwrap();
        let state = a_state_of_some_megabytes();
        *store.shared.state.write().unwrap() = state.clone();
        let built = store
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();

        let whole = StoredSnapshot {
            meta: built.meta.clone(),
            data: encode_state(&state).unwrap(),
        };
        assert!(whole.data.len() > 3 * crate::fs::SYNC_CHUNK_BYTES);
        let whole_dir = SimDir::new();
        checked_file::save(&whole_dir, SNAPSHOT_FILE, SNAPSHOT_MAGIC, &whole).unwrap();
        assert!(
            dir.read(SNAPSHOT_FILE).unwrap().unwrap()
                == whole_dir.read(SNAPSHOT_FILE).unwrap().unwrap(),
            "the streamed file differs from the file written whole"
        );

        let current = store.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, built.meta);
        let back = decode_state(&current.snapshot.into_inner()).unwrap();
        assert_eq!(back.machine, state.machine);
        let reopened = StateMachineStore::open(dir, Limits::default()).unwrap();
        assert_eq!(reopened.shared.state.read().unwrap().machine, state.machine);
    }

    /// A build of an older state that finishes after an install of a newer snapshot must not
    /// put the older one back on disk.
    #[tokio::test]
    async fn an_older_snapshot_never_replaces_a_newer_file() {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new());
        let store = StateMachineStore::open(dir.clone(), Limits::default()).unwrap();
        let persist = |store: &StateMachineStore, index| {
            let shared = store.shared.clone();
            async move { shared.persist_snapshot(&meta(index), empty_state()).await }
        };
        persist(&store, 100).await.unwrap();
        persist(&store, 50).await.unwrap();
        let on_disk = store.shared.read_snapshot().unwrap().unwrap();
        assert_eq!(on_disk.meta.snapshot_id, "s100");
        let reopened = StateMachineStore::open(dir, Limits::default()).unwrap();
        persist(&reopened, 70).await.unwrap();
        assert_eq!(
            reopened
                .shared
                .read_snapshot()
                .unwrap()
                .unwrap()
                .meta
                .snapshot_id,
            "s100"
        );
    }
}
