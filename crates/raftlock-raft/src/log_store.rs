//! The durable Raft log and vote: openraft's [`RaftLogStorage`] over the [`Wal`] and a vote
//! file.
//!
//! Entries are kept in memory as well as in the WAL (the log between two snapshots is small),
//! so replication tasks read them without touching the disk and without waiting for the sync
//! of the batch being written. Every change is synced before openraft hears it is done:
//! - `append`: one WAL frame and one `fdatasync` per batch, then the callback;
//! - `truncate`, `purge`: one WAL frame each, synced before returning;
//! - `save_vote`: the `vote` file replaced atomically (temp file, sync, rename, directory sync)
//!   before returning, so a node never forgets whom it voted for in a term.
//!
//! The committed log id is not synced on its own: it rides in the next frame, which is enough
//! for openraft (on restart it re-applies up to the last committed id it finds, and learns the
//! rest from the leader).

use std::fmt::Debug;
use std::fs::File;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, StorageIOError};

use crate::checked_file;
use crate::error::StoreError;
use crate::fs::Dir;
use crate::typ::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::wal::{LogContents, PendingFrame, Wal, WalOpRef};

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
    /// The last vote saved.
    vote: Mutex<Option<Vote>>,
    /// Bytes written to the WAL by this process (for compaction by size).
    written: std::sync::atomic::AtomicU64,
    /// Holds the data directory's lock file open (and locked) for as long as the store lives.
    _dir_lock: Option<File>,
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
        let (wal, contents) = Wal::open(dir.clone(), segment_bytes)?;
        let vote = checked_file::load::<Vote>(&*dir, VOTE_FILE, VOTE_MAGIC)?;
        Ok(LogStore {
            inner: Arc::new(Inner {
                dir,
                mem: RwLock::new(contents),
                wal: Mutex::new(wal),
                vote: Mutex::new(vote),
                written: std::sync::atomic::AtomicU64::new(0),
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

    /// Writes `frame` and syncs it on a blocking thread.
    async fn write_frame(&self, frame: PendingFrame) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut wal = inner.wal.lock().unwrap_or_else(|p| p.into_inner());
            wal.write(&frame)?;
            inner
                .written
                .fetch_add(frame.len() as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
        .await
        .map_err(|e| StoreError::io("write-ahead log", std::io::Error::other(e)))?
    }

    /// Bytes this process has written to the WAL so far.
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
        Ok(self
            .mem()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
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
            let frame = PendingFrame::new(mem.committed, &[WalOpRef::Append(&entries)])
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
            PendingFrame::new(mem.committed, &[WalOpRef::TruncateFrom(log_id.index)])
                .map_err(write_logs_err)?
        };
        self.write_frame(frame).await.map_err(write_logs_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        let frame = {
            let mut mem = self.mem_mut();
            mem.purge(log_id);
            PendingFrame::new(mem.committed, &[WalOpRef::Purge(log_id)]).map_err(write_logs_err)?
        };
        let written = self.write_frame(frame).await.map_err(write_logs_err);
        metrics::histogram!("raftlock_log_purge_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        written
    }
}

fn write_vote_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_vote(openraft::AnyError::error(e.to_string())).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_fs::SimDir;

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
