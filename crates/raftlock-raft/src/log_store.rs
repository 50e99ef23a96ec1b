//! The durable Raft log and vote: openraft's [`RaftLogStorage`] over the [`Wal`] and a vote
//! file.
//!
//! The newest entries (up to [`wal::DECODED_TAIL_OPS`] ops, for [`DECODED_TAIL_AGE`]) are
//! kept decoded in memory as well as in the WAL, so replication tasks and apply read them
//! without touching the disk and without waiting for the sync of the batch being written;
//! older ones are read back from their frame (a follower catching up), so memory does not
//! grow with the log. openraft 0.9 awaits every call below in its core loop, so each one's
//! disk time is time no node-wide progress is made; they do as little as safety allows:
//! - `append`: one WAL frame and one `fdatasync` per batch, then the callback;
//! - `truncate`: one WAL frame, synced before returning;
//! - `save_vote`: the `vote` file replaced atomically (temp file, sync, rename, directory sync)
//!   before returning, so a node never forgets whom it voted for in a term;
//! - `purge`: memory only. The purge record rides in the next frame (before that frame's own
//!   operation, so the frame replays as "purge, then append" even after a snapshot install
//!   that jumped past the log's end). Forgetting a purge in a crash only leaves entries a
//!   snapshot already covers, which openraft purges again at start; it can never lose an
//!   acknowledged entry. WAL segments the purge frees are deleted by a janitor thread after
//!   that frame is synced (an unlink plus a directory sync took up to 140 ms in the soak, all
//!   of it spent inside the core loop when the purge deleted them itself).
//!
//! The committed log id is not synced on its own either: it rides in the next frame, which is
//! enough for openraft (on restart it re-applies up to the last committed id it finds, and
//! learns the rest from the leader).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::fs::File;
use std::ops::RangeBounds;
use std::sync::{mpsc, Arc, Mutex, RwLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, StorageIOError};

use crate::checked_file;
use crate::error::StoreError;
use crate::fs::Dir;
use crate::typ::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::wal::{self, LogContents, PendingFrame, Wal, WalOpRef};

/// The age at which a decoded entry is released (checked once a second, so 1–2 s after its
/// append; within [`wal::DECODED_TAIL_OPS`] either way): replication and apply read it within
/// moments, and a follower further behind reads it back from its frame. Without an age, a
/// group that went quiet kept its last ops decoded for good: 8–11 MiB of heap per group that
/// was ever busy when the tail was 32,768 ops (measured with 1M locks held: 165 → 153 MiB on a
/// one-group node, 88–94 → 83 on a node of a two-shard cluster).
pub const DECODED_TAIL_AGE: Duration = Duration::from_secs(1);

/// Name of the vote file in the data directory.
pub const VOTE_FILE: &str = "vote";
const VOTE_MAGIC: &[u8; 8] = b"RLVOTE01";

/// The Raft log store. Cloning is cheap; a clone is what openraft gets as its
/// [`RaftLogReader`] for replication tasks.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The data directory, for the vote file.
    dir: Arc<dyn Dir>,
    /// What readers see: every appended entry, including those whose sync is in flight
    /// (openraft may replicate an entry while the leader is still syncing it).
    mem: RwLock<LogContents>,
    /// The files. Held for the whole write + sync, which serializes disk writes in call order.
    wal: Mutex<Wal>,
    /// A purge done in memory but not yet written: the next frame carries it. Changed only
    /// with `mem` write-locked, so a frame and the memory it describes agree.
    unwritten_purge: Mutex<Option<LogId>>,
    /// Deletes the WAL segments purges free, off the write path.
    janitor: Janitor,
    /// The last vote saved.
    vote: Mutex<Option<Vote>>,
    /// Bytes written to the WAL by this process (for compaction by size).
    written: std::sync::atomic::AtomicU64,
    /// When the WAL write + sync in progress began, if one is: openraft 0.9's core waits for
    /// it in its loop and sends no heartbeat meanwhile, so the server tells followers the
    /// leader is alive while this is young (`raftlock_server::election`).
    writing_since: Mutex<Option<std::time::Instant>>,
    /// The last log index at each [`LogStore::release_aged_tail`] of the last
    /// [`DECODED_TAIL_AGE`]: every entry up to a mark's index was appended by its time.
    tail_marks: Mutex<VecDeque<(Instant, u64)>>,
    /// Holds the data directory's lock file open (and locked) for as long as the store lives.
    _dir_lock: Option<File>,
}

/// Marks a WAL write in progress for [`LogStore::writing_for`] until dropped (also when the
/// write fails or its future is dropped).
struct WritingNow<'a>(&'a Mutex<Option<std::time::Instant>>);

impl<'a> WritingNow<'a> {
    fn start(slot: &'a Mutex<Option<std::time::Instant>>) -> Self {
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
        WritingNow(slot)
    }
}

impl Drop for WritingNow<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

fn write_logs_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(openraft::AnyError::error(e.to_string())).into()
}

impl LogStore {
    /// Replays the WAL and loads the vote from `dir`. `dir_lock` is kept open with the store.
    pub fn open(
        dir: Arc<dyn Dir>,
        segment_bytes: u64,
        dir_lock: Option<File>,
    ) -> Result<Self, StoreError> {
        Self::open_keeping(dir, segment_bytes, wal::DECODED_TAIL_OPS, dir_lock)
    }

    /// [`Self::open`], keeping entries of `decoded_tail` weight ([`wal::entry_weight`]) decoded
    /// in memory (tests use a short tail to read most entries back from disk).
    pub fn open_keeping(
        dir: Arc<dyn Dir>,
        segment_bytes: u64,
        decoded_tail: usize,
        dir_lock: Option<File>,
    ) -> Result<Self, StoreError> {
        let (wal, contents) = Wal::open(dir.clone(), segment_bytes, decoded_tail)?;
        let vote = checked_file::load::<Vote>(&*dir, VOTE_FILE, VOTE_MAGIC)?;
        let janitor = Janitor::spawn(dir.clone())?;
        // Counted from what is on disk, so compaction by size also sees log written before a
        // restart (a node restarted often would otherwise never reach the threshold).
        let written = wal.replayed_bytes();
        Ok(LogStore {
            inner: Arc::new(Inner {
                dir,
                mem: RwLock::new(contents),
                wal: Mutex::new(wal),
                unwritten_purge: Mutex::new(None),
                janitor,
                vote: Mutex::new(vote),
                written: std::sync::atomic::AtomicU64::new(written),
                writing_since: Mutex::new(None),
                tail_marks: Mutex::new(VecDeque::new()),
                _dir_lock: dir_lock,
            }),
        })
    }

    fn mem(&self) -> std::sync::RwLockReadGuard<'_, LogContents> {
        self.inner.mem.read().unwrap_or_else(|p| p.into_inner())
    }

    fn mem_mut(&self) -> std::sync::RwLockWriteGuard<'_, LogContents> {
        self.inner.mem.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The purge done in memory but not yet written. Lock it only with `mem` write-locked.
    fn unwritten_purge(&self) -> std::sync::MutexGuard<'_, Option<LogId>> {
        self.inner
            .unwritten_purge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes one frame: the unwritten purge, if any, then `op`. Call with `mem` write-locked
    /// (`committed` is read from it).
    fn frame(&self, committed: Option<LogId>, op: WalOpRef<'_>) -> Result<PendingFrame, String> {
        PendingFrame::after_purge(committed, self.unwritten_purge().take(), op)
    }

    /// Writes `frame` and syncs it on a blocking thread; hands the segments that frees to
    /// the janitor. Once it is durable, the entries it appended may leave memory (they can be
    /// read back from it).
    async fn write_frame(&self, frame: PendingFrame) -> Result<(), StoreError> {
        let _writing = WritingNow::start(&self.inner.writing_since);
        let inner = self.inner.clone();
        let written = tokio::task::spawn_blocking(move || {
            let mut wal = inner.wal.lock().unwrap_or_else(|p| p.into_inner());
            let written = wal.write(&frame)?;
            inner.janitor.remove(wal.take_removable_segments());
            inner
                .written
                .fetch_add(frame.len() as u64, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, StoreError>(written)
        })
        .await
        .map_err(|e| StoreError::io("write-ahead log", std::io::Error::other(e)))??;
        if let Some((first, loc)) = written {
            // openraft makes one log call at a time, so nothing truncated or purged these
            // entries since the frame was encoded.
            self.mem_mut().record_frame(first, loc);
        }
        Ok(())
    }

    /// Stops keeping decoded the entries appended more than [`DECODED_TAIL_AGE`] ago, as
    /// these calls see it (a group's compactor makes one a second, so an entry leaves memory
    /// 1–2 s after its append, or earlier when newer ones outweigh it).
    pub fn release_aged_tail(&self) {
        self.release_tail_older_than(Instant::now(), DECODED_TAIL_AGE);
    }

    fn release_tail_older_than(&self, now: Instant, age: Duration) {
        let last = self.mem().last_log_id().map(|id| id.index);
        let aged = {
            let mut marks = self
                .inner
                .tail_marks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            marks.extend(last.map(|index| (now, index)));
            let mut aged = None;
            while let Some(&(at, index)) = marks.front() {
                if now.saturating_duration_since(at) < age {
                    break;
                }
                aged = Some(index);
                marks.pop_front();
            }
            aged
        };
        let Some(index) = aged else {
            return;
        };
        // Called on a runtime worker: while a reader holds the log (a follower fed from
        // disk), skip this second rather than wait; a later mark covers these entries.
        let mut mem = match self.inner.mem.try_write() {
            Ok(mem) => mem,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let released = mem.evict_upto(index);
        drop(mem);
        drop(released); // freed after the lock is let go: readers and appends wait less
    }

    /// How long the WAL write + sync in progress has taken so far; `None` when none is.
    pub fn writing_for(&self) -> Option<std::time::Duration> {
        self.inner
            .writing_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|since| since.elapsed())
    }

    /// Bytes written to the WAL: the segment files found at open plus what this process wrote.
    pub fn bytes_written(&self) -> u64 {
        self.inner
            .written
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The number of WAL segment files (for tests of segment rotation and deletion).
    pub fn segment_count(&self) -> usize {
        self.inner
            .wal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .segment_count()
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let read_err =
            |e: StoreError| StorageIOError::read_logs(openraft::AnyError::error(e.to_string()));
        {
            // One guard for the check and the read: an append in between could evict the start.
            let mem = self.mem();
            if !mem.reads_disk_from(range.start_bound()) {
                return mem
                    .read(&*self.inner.dir, range)
                    .map_err(|e| read_err(e).into());
            }
        }
        // Entries older than the decoded tail (only a follower catching up asks for them) are
        // read from disk with the log read-locked, so no purge can free their segment
        // meanwhile; on a blocking thread, so no runtime worker waits for the disk.
        let inner = self.inner.clone();
        let owned = (range.start_bound().cloned(), range.end_bound().cloned());
        let entries = tokio::task::spawn_blocking(move || {
            let mem = inner.mem.read().unwrap_or_else(|p| p.into_inner());
            mem.read(&*inner.dir, owned)
        })
        .await
        .map_err(|e| read_err(StoreError::io("write-ahead log", std::io::Error::other(e))))?
        .map_err(read_err)?;
        // Counted so an operator sees when the decoded tail is too short for the load.
        metrics::counter!("raftlock_log_entries_read_from_disk_total")
            .increment(entries.len() as u64);
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let mem = self.mem();
        Ok(LogState {
            last_purged_log_id: mem.last_purged,
            last_log_id: mem.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let inner = self.inner.clone();
        let to_save = *vote;
        tokio::task::spawn_blocking(move || {
            checked_file::save(&*inner.dir, VOTE_FILE, VOTE_MAGIC, &to_save)
        })
        .await
        .map_err(write_vote_err)?
        .map_err(write_vote_err)?;
        *self.inner.vote.lock().unwrap_or_else(|p| p.into_inner()) = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(*self.inner.vote.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Kept in memory and written with the next frame (see the module doc).
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let mut mem = self.mem_mut();
        if committed > mem.committed {
            mem.committed = committed;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.mem().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let frame = {
            let mut mem = self.mem_mut();
            let frame = self
                .frame(mem.committed, WalOpRef::Append(&entries))
                .map_err(write_logs_err)?;
            mem.append(entries).map_err(write_logs_err)?;
            frame
        };
        match self.write_frame(frame).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write_logs_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let frame = {
            let mut mem = self.mem_mut();
            mem.truncate_from(log_id.index);
            self.frame(mem.committed, WalOpRef::TruncateFrom(log_id.index))
                .map_err(write_logs_err)?
        };
        self.write_frame(frame).await.map_err(write_logs_err)
    }

    /// In memory only; the next frame writes it (see the module doc).
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let started = Instant::now();
        let purged = {
            let mut mem = self.mem_mut();
            let purged = mem.purge(log_id);
            let mut unwritten = self.unwritten_purge();
            *unwritten = (*unwritten).max(Some(log_id));
            purged
        };
        // Freeing them took over 50 ms in the core loop with 1M locks held (a purge follows
        // a snapshot, when the log is at its longest).
        if !purged.is_empty() {
            tokio::task::spawn_blocking(move || drop(purged));
        }
        metrics::histogram!("raftlock_log_purge_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }
}

/// A thread that deletes freed WAL segments in the order it is given them (oldest first, as
/// [`wal::remove_segments`] requires), so neither the write path nor openraft's core loop ever
/// waits for an unlink or a directory sync.
struct Janitor {
    /// Batches of segment names to delete; `None` once dropped, which ends the thread.
    tx: Option<mpsc::Sender<Vec<String>>>,
    /// Joined on drop, so a store reopened on the same directory in this process never races
    /// a deletion of the previous one.
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    fn spawn(dir: Arc<dyn Dir>) -> Result<Janitor, StoreError> {
        let (tx, rx) = mpsc::channel::<Vec<String>>();
        let thread = std::thread::Builder::new()
            .name("wal-janitor".into())
            .spawn(move || run_janitor(&*dir, rx))
            .map_err(|e| StoreError::io("the wal-janitor thread", e))?;
        Ok(Janitor {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn remove(&self, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            // Fails only once the thread is gone; the files then wait for the next start.
            let _ = tx.send(names);
        }
    }
}

/// Deletes each batch of segment names received, oldest first, until the first segment that
/// cannot leave the log; after it, nothing more (see [`wal::remove_segments`]): that segment
/// and every newer one stay, a suffix that replays (purged entries skipped) at the next
/// start. A segment that left the log but could not be freed stops nothing. Each segment
/// takes ~0.7 s (freed piece by piece), so dropping the store after a large purge waits that
/// long per segment.
fn run_janitor(dir: &dyn Dir, batches: mpsc::Receiver<Vec<String>>) {
    let mut failed = false;
    for names in batches {
        if failed {
            continue;
        }
        let started = Instant::now();
        if let Err(e) = wal::remove_segments(dir, &names) {
            tracing::warn!(
                error = %e,
                "cannot delete a purged WAL segment; keeping it and every newer one until the \
                 next start"
            );
            failed = true;
        }
        metrics::histogram!("raftlock_wal_segment_removal_duration_seconds")
            .record(started.elapsed().as_secs_f64());
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_vote_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_vote(openraft::AnyError::error(e.to_string())).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_fs::SimDir;
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn log_id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn entries(indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
        indexes
            .map(|i| Entry {
                log_id: log_id(i),
                payload: EntryPayload::Blank,
            })
            .collect()
    }

    /// Blank entries at `indexes` written by leader 2 in term 2.
    fn term_2_entries(indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
        indexes
            .map(|i| Entry {
                log_id: LogId::new(CommittedLeaderId::new(2, 2), i),
                payload: EntryPayload::Blank,
            })
            .collect()
    }

    /// Reopens `disk` as a restart would see it: the indexes held and the last purged one.
    async fn reopened(disk: &SimDir) -> (Vec<u64>, Option<u64>) {
        let mut store = LogStore::open(Arc::new(disk.clone()), 1 << 20, None).unwrap();
        let held = store.try_get_log_entries(..).await.unwrap();
        let state = store.get_log_state().await.unwrap();
        (
            held.iter().map(|e| e.log_id.index).collect(),
            state.last_purged_log_id.map(|l| l.index),
        )
    }

    fn ids(held: &[Entry]) -> Vec<(u64, u64)> {
        held.iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect()
    }

    /// Entries beyond the decoded tail leave memory and are read back from their frames: the
    /// same log as kept whole, through a truncation into them, a purge, and a restart.
    #[tokio::test]
    async fn entries_beyond_the_decoded_tail_read_back_from_disk() {
        let disk = SimDir::new();
        let open = || LogStore::open_keeping(Arc::new(disk.clone()), 256, 2, None).unwrap();
        let mut store = open();
        for batch in [1..=3, 4..=4, 5..=9, 10..=12] {
            store.blocking_append(entries(batch)).await.unwrap();
        }
        assert_eq!(store.mem().entries.len(), 2, "only the tail stays decoded");
        let all: Vec<(u64, u64)> = (1..=12).map(|i| (1, i)).collect();
        assert_eq!(ids(&store.try_get_log_entries(..).await.unwrap()), all);
        assert_eq!(
            ids(&store.try_get_log_entries(4..8).await.unwrap()),
            all[3..7].to_vec(),
            "a range inside evicted frames"
        );

        // A new leader's entries replace 7.. (in the middle of the frame holding 5..=9).
        store.truncate(log_id(7)).await.unwrap();
        store.blocking_append(term_2_entries(7..=8)).await.unwrap();
        store.blocking_append(term_2_entries(9..=9)).await.unwrap();
        let mut expected: Vec<(u64, u64)> = (1..=6).map(|i| (1, i)).collect();
        expected.extend((7..=9).map(|i| (2, i)));
        assert_eq!(ids(&store.try_get_log_entries(..).await.unwrap()), expected);

        store.purge(log_id(4)).await.unwrap();
        assert_eq!(
            ids(&store.try_get_log_entries(..).await.unwrap()),
            expected[4..].to_vec()
        );
        store
            .blocking_append(term_2_entries(10..=10))
            .await
            .unwrap();
        expected.push((2, 10));
        drop(store);

        let mut store = open();
        assert_eq!(
            ids(&store.try_get_log_entries(..).await.unwrap()),
            expected[4..].to_vec(),
            "after a restart"
        );
        assert!(store.mem().entries.len() <= 2);
    }

    /// Entries older than the tail's age leave memory even while the tail's weight has room
    /// (a group gone quiet keeps none of its busy seconds decoded); newer ones, and always the
    /// newest, stay; every entry still reads back.
    #[tokio::test]
    async fn entries_older_than_the_tail_age_leave_memory() {
        let disk = SimDir::new();
        let mut store = LogStore::open(Arc::new(disk.clone()), 1 << 20, None).unwrap();
        let decoded = |store: &LogStore| store.mem().entries.keys().copied().collect::<Vec<_>>();
        let (t0, age) = (Instant::now(), DECODED_TAIL_AGE);
        store.blocking_append(entries(1..=5)).await.unwrap();
        store.release_tail_older_than(t0, age);
        store.blocking_append(entries(6..=8)).await.unwrap();
        store.release_tail_older_than(t0 + age / 2, age);
        assert_eq!(
            decoded(&store),
            (1..=8).collect::<Vec<_>>(),
            "none is old yet"
        );

        store.release_tail_older_than(t0 + age, age);
        assert_eq!(decoded(&store), vec![6, 7, 8], "1..=5 were appended by t0");
        store.release_tail_older_than(t0 + 10 * age, age);
        assert_eq!(decoded(&store), vec![8], "the newest stays");

        store.blocking_append(entries(9..=10)).await.unwrap();
        assert_eq!(decoded(&store), vec![8, 9, 10]);
        let all: Vec<(u64, u64)> = (1..=10).map(|i| (1, i)).collect();
        assert_eq!(ids(&store.try_get_log_entries(..).await.unwrap()), all);
    }

    /// `raftlock_log_entries_read_from_disk_total` counts the entries a read took from the WAL
    /// (older than the decoded tail), and nothing for a read the tail answered: an operator
    /// reads it to see whether the tail is too short for the load.
    #[test]
    fn entries_read_back_from_disk_are_counted() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let read_from_disk = || {
            let metrics = snapshotter.snapshot().into_vec();
            let counted = metrics.into_iter().find_map(|(key, _, _, value)| {
                let ours = key.key().name() == "raftlock_log_entries_read_from_disk_total";
                match value {
                    DebugValue::Counter(n) if ours => Some(n),
                    _ => None,
                }
            });
            counted.unwrap_or(0)
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                let disk = SimDir::new();
                let mut store =
                    LogStore::open_keeping(Arc::new(disk.clone()), 1 << 20, 2, None).unwrap();
                for batch in [1..=3, 4..=9, 10..=12] {
                    store.blocking_append(entries(batch)).await.unwrap();
                }
                assert_eq!(store.try_get_log_entries(11..13).await.unwrap().len(), 2);
                assert_eq!(read_from_disk(), 0, "the decoded tail answered");
                assert_eq!(store.try_get_log_entries(2..7).await.unwrap().len(), 5);
                assert_eq!(read_from_disk(), 5, "five entries came from their frames");
            })
        });
    }

    #[tokio::test]
    async fn a_purge_is_written_with_the_next_frame_and_harmless_until_then() {
        let disk = SimDir::new();
        let mut store = LogStore::open(Arc::new(disk.clone()), 1 << 20, None).unwrap();
        store.blocking_append(entries(1..=5)).await.unwrap();
        store.purge(log_id(3)).await.unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_purged_log_id,
            Some(log_id(3))
        );
        // Not written yet: a restart finds the whole log, which a snapshot covers anyway.
        assert_eq!(reopened(&disk).await, (vec![1, 2, 3, 4, 5], None));
        store.blocking_append(entries(6..=6)).await.unwrap();
        assert_eq!(reopened(&disk).await, (vec![4, 5, 6], Some(3)));
    }

    /// A follower that installs a snapshot past its log's end purges beyond its last entry,
    /// then appends after the snapshot: the frame must replay the purge first, or the log
    /// would have a hole and the node would refuse to start.
    #[tokio::test]
    async fn a_purge_past_the_end_then_an_append_replays_without_a_hole() {
        let disk = SimDir::new();
        let mut store = LogStore::open(Arc::new(disk.clone()), 1 << 20, None).unwrap();
        store.blocking_append(entries(1..=3)).await.unwrap();
        store.purge(log_id(10)).await.unwrap();
        store.blocking_append(entries(11..=12)).await.unwrap();
        assert_eq!(reopened(&disk).await, (vec![11, 12], Some(10)));
    }

    /// A `Dir` whose `remove` or `rename` of one name fails.
    struct FailingRemove {
        inner: SimDir,
        fails: &'static str,
    }

    impl Dir for FailingRemove {
        fn list(&self) -> std::io::Result<Vec<String>> {
            self.inner.list()
        }
        fn read(&self, name: &str) -> std::io::Result<Option<Vec<u8>>> {
            self.inner.read(name)
        }
        fn stat(&self, name: &str) -> std::io::Result<Option<crate::fs::FileStat>> {
            self.inner.stat(name)
        }
        fn set_len(&self, name: &str, len: u64) -> std::io::Result<()> {
            self.inner.set_len(name, len)
        }
        fn create(&self, name: &str) -> std::io::Result<Box<dyn crate::fs::DirFile>> {
            self.inner.create(name)
        }
        fn open_append(&self, name: &str) -> std::io::Result<Box<dyn crate::fs::DirFile>> {
            self.inner.open_append(name)
        }
        fn open_write(&self, name: &str) -> std::io::Result<Box<dyn crate::fs::DirFile>> {
            self.inner.open_write(name)
        }
        fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
            if from == self.fails {
                return Err(std::io::Error::other("injected"));
            }
            self.inner.rename(from, to)
        }
        fn link(&self, existing: &str, new: &str) -> std::io::Result<()> {
            self.inner.link(existing, new)
        }
        fn remove(&self, name: &str) -> std::io::Result<()> {
            if name == self.fails {
                return Err(std::io::Error::other("injected"));
            }
            self.inner.remove(name)
        }
        fn sync(&self) -> std::io::Result<()> {
            self.inner.sync()
        }
        fn describe(&self, name: &str) -> String {
            self.inner.describe(name)
        }
    }

    /// Runs the janitor over segments `wal-1`..`wal-3`, handed to it one batch each, on a
    /// disk where renaming or removing `fails` fails; returns what is left, in name order.
    fn janitor_leaves(fails: &'static str) -> Vec<String> {
        let disk = SimDir::new();
        for name in ["wal-1", "wal-2", "wal-3"] {
            disk.create(name).unwrap().sync().unwrap();
        }
        let dir = FailingRemove {
            inner: disk.clone(),
            fails,
        };
        let (tx, rx) = mpsc::channel();
        for name in ["wal-1", "wal-2", "wal-3"] {
            tx.send(vec![name.to_string()]).unwrap();
        }
        drop(tx);
        run_janitor(&dir, rx);
        let mut left = disk.list().unwrap();
        left.sort();
        left
    }

    /// After a failed deletion the janitor deletes nothing newer: a newer segment deleted
    /// behind an older one left on disk would be a hole the next start refuses.
    #[test]
    fn the_janitor_stops_at_the_first_failed_deletion() {
        assert_eq!(janitor_leaves("wal-2"), ["wal-2", "wal-3"]);
    }

    /// A segment that has left the log (renamed to its temporary name, the directory synced)
    /// but cannot be freed stops nothing: deleting newer segments then leaves no hole, and
    /// the next start deletes the temporary file.
    #[test]
    fn a_segment_out_of_the_log_that_cannot_be_freed_does_not_stop_the_janitor() {
        assert_eq!(janitor_leaves("wal-2.tmp"), ["wal-2.tmp"]);
    }

    /// A store on `disk` holding entries 1..=200 in 128-byte segments: many closed ones.
    async fn store_with_closed_segments(disk: &SimDir) -> LogStore {
        let mut store = LogStore::open(Arc::new(disk.clone()), 128, None).unwrap();
        for i in 0..40 {
            store
                .blocking_append(entries(i * 5 + 1..=i * 5 + 5))
                .await
                .unwrap();
        }
        store
    }

    /// The WAL segment files on `disk` (and any being freed), in name order.
    fn wal_files(disk: &SimDir) -> Vec<String> {
        let mut names: Vec<String> = disk
            .list()
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with("wal-"))
            .collect();
        names.sort();
        names
    }

    /// A purged segment leaves the log by a rename before it is freed piece by piece; the
    /// power failing in between leaves it under a temporary name, which the next start deletes
    /// without changing the log.
    #[tokio::test]
    async fn a_segment_whose_removal_a_crash_cut_short_is_deleted_at_the_next_start() {
        let disk = SimDir::new();
        let mut store = store_with_closed_segments(&disk).await;
        let oldest = wal_files(&disk)[0].clone();
        let oldest_bytes = disk.read(&oldest).unwrap().unwrap();
        store.purge(log_id(190)).await.unwrap();
        store.blocking_append(entries(201..=201)).await.unwrap();
        drop(store);
        let log_before = reopened(&disk).await;
        assert_eq!(log_before.1, Some(190));
        assert!(!wal_files(&disk).contains(&oldest), "the janitor freed it");
        // What `wal::remove_segments` leaves if the power fails half-way through freeing the
        // oldest segment: its first bytes, under the temporary name.
        let mut half = disk
            .create(&format!("{oldest}{}", crate::fs::TMP_SUFFIX))
            .unwrap();
        half.append(&oldest_bytes[..oldest_bytes.len() / 2])
            .unwrap();
        half.sync().unwrap();
        disk.sync().unwrap();

        crate::store::open_in(Arc::new(disk.clone()), Default::default(), 128, None).unwrap();
        let left = wal_files(&disk);
        assert!(
            left.iter().all(|n| !n.ends_with(crate::fs::TMP_SUFFIX)),
            "{left:?}"
        );
        assert_eq!(reopened(&disk).await, log_before);
    }

    /// Segments a purge frees are deleted by the janitor, not by the write; dropping the store
    /// waits for it.
    #[tokio::test]
    async fn freed_segments_are_deleted_by_the_janitor() {
        let disk = SimDir::new();
        let segments = |disk: &SimDir| wal_files(disk).len();
        let mut store = store_with_closed_segments(&disk).await;
        let before = segments(&disk);
        assert!(before > 3, "the test needs closed segments: {before}");
        store.purge(log_id(190)).await.unwrap();
        store.blocking_append(entries(201..=201)).await.unwrap();
        drop(store);
        assert!(
            segments(&disk) < before,
            "{} of {before} left",
            segments(&disk)
        );
        assert_eq!(reopened(&disk).await.1, Some(190));
    }

    #[tokio::test]
    async fn an_inverted_range_reads_nothing_instead_of_panicking() {
        let mut store = LogStore::open(Arc::new(SimDir::new()), 1 << 20, None).unwrap();
        #[allow(clippy::reversed_empty_ranges)]
        let entries = store.try_get_log_entries(5..3).await.unwrap();
        assert!(entries.is_empty());
        assert!(store
            .try_get_log_entries(0..=u64::MAX)
            .await
            .unwrap()
            .is_empty());
    }
}
