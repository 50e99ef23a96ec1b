//! The durable Raft log and vote, in sled.
//!
//! Trees of the shared database:
//! - `logs`: key = big-endian `u64` index (so sled's byte order is index order), value = the
//!   codec-encoded [`Entry`].
//! - `meta`: the vote, the committed log id and the last purged log id, each codec-encoded.
//!
//! Raft's safety rests on the log and the vote surviving a crash once acknowledged, so an
//! append is reported complete only after a flush, and a vote is saved with a flush before
//! openraft may answer the candidate.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, StorageIOError};
use raftlock_core::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::typ::{Entry, LogId, StorageError, TypeConfig, Vote};

const LOGS_TREE: &str = "logs";
const META_TREE: &str = "meta";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The sled-backed Raft log. Cloning is cheap (sled handles are reference counted), and a
/// clone is what openraft gets as its [`RaftLogReader`] for replication tasks.
#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    logs: sled::Tree,
    meta: sled::Tree,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn map_bound(b: Bound<&u64>) -> Bound<[u8; 8]> {
    match b {
        Bound::Included(i) => Bound::Included(index_key(*i)),
        Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl LogStore {
    /// Opens the log trees of `db` (see [`crate::open`]).
    pub fn new(db: sled::Db) -> anyhow::Result<Self> {
        let logs = db.open_tree(LOGS_TREE)?;
        let meta = db.open_tree(META_TREE)?;
        Ok(LogStore { db, logs, meta })
    }

    fn read_meta<T: DeserializeOwned>(
        &self,
        key: &[u8],
        err: fn(&dyn std::error::Error) -> StorageIOError<u64>,
    ) -> Result<Option<T>, StorageError> {
        let Some(bytes) = self.meta.get(key).map_err(|e| err(&e))? else {
            return Ok(None);
        };
        let value = codec::decode(&bytes).map_err(|e| err(&e))?;
        Ok(Some(value))
    }

    fn write_meta<T: Serialize>(
        &self,
        key: &[u8],
        value: &T,
        err: fn(&dyn std::error::Error) -> StorageIOError<u64>,
    ) -> Result<(), StorageError> {
        let bytes = codec::encode(value).map_err(|e| err(&e))?;
        self.meta.insert(key, bytes).map_err(|e| err(&e))?;
        Ok(())
    }

    async fn flush(
        &self,
        err: fn(&dyn std::error::Error) -> StorageIOError<u64>,
    ) -> Result<(), StorageError> {
        self.db.flush_async().await.map_err(|e| err(&e))?;
        Ok(())
    }

    fn last_log_id(&self) -> Result<Option<LogId>, StorageError> {
        let Some((_, bytes)) = self.logs.last().map_err(|e| read_logs(&e))? else {
            return Ok(None);
        };
        let entry: Entry = codec::decode(&bytes).map_err(|e| read_logs(&e))?;
        Ok(Some(entry.log_id))
    }
}

// Error constructors with a uniform signature, so helpers above can take them as `fn` pointers.
fn read_logs(e: &dyn std::error::Error) -> StorageIOError<u64> {
    StorageIOError::read_logs(openraft::AnyError::error(e))
}
fn write_logs(e: &dyn std::error::Error) -> StorageIOError<u64> {
    StorageIOError::write_logs(openraft::AnyError::error(e))
}
fn read_vote(e: &dyn std::error::Error) -> StorageIOError<u64> {
    StorageIOError::read_vote(openraft::AnyError::error(e))
}
fn write_vote(e: &dyn std::error::Error) -> StorageIOError<u64> {
    StorageIOError::write_vote(openraft::AnyError::error(e))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let range = (map_bound(range.start_bound()), map_bound(range.end_bound()));
        self.logs
            .range(range)
            .map(|item| {
                let (_, bytes) = item.map_err(|e| read_logs(&e))?;
                codec::decode::<Entry>(&bytes).map_err(|e| read_logs(&e).into())
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.read_meta(KEY_LAST_PURGED, read_logs)?;
        // With every entry purged the last log id is the last purged one.
        let last_log_id = self.last_log_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.write_meta(KEY_VOTE, vote, write_vote)?;
        self.flush(write_vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read_meta(KEY_VOTE, read_vote)
    }

    /// Not flushed on its own: losing the latest committed id only delays re-applying entries
    /// after a restart until the leader repeats it. It becomes durable with the next flush.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.write_meta(KEY_COMMITTED, &committed, write_logs)
    }

    /// Lets openraft re-apply committed entries on start-up, on top of the latest snapshot.
    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self
            .read_meta::<Option<LogId>>(KEY_COMMITTED, read_logs)?
            .flatten())
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
        // One batch and one flush for everything openraft hands over at once, so concurrent
        // client writes share a single fsync.
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = codec::encode(&entry).map_err(|e| write_logs(&e))?;
            batch.insert(&index_key(entry.log_id.index), bytes);
        }
        self.logs.apply_batch(batch).map_err(|e| write_logs(&e))?;
        match self.db.flush_async().await {
            Ok(_) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = write_logs(&e);
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(err.into())
            }
        }
    }

    /// Removes the conflicting entries at and after `log_id`; flushed so a restart cannot
    /// resurrect them next to entries appended later.
    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for item in self.logs.range(index_key(log_id.index)..) {
            let (key, _) = item.map_err(|e| write_logs(&e))?;
            batch.remove(key);
        }
        self.logs.apply_batch(batch).map_err(|e| write_logs(&e))?;
        self.flush(write_logs).await
    }

    /// Drops entries up to and including `log_id`, which a persisted snapshot already covers.
    /// The purge marker is written first, so a crash in between leaves extra entries rather
    /// than a gap.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write_meta(KEY_LAST_PURGED, &log_id, write_logs)?;
        let mut batch = sled::Batch::default();
        for item in self.logs.range(..=index_key(log_id.index)) {
            let (key, _) = item.map_err(|e| write_logs(&e))?;
            batch.remove(key);
        }
        self.logs.apply_batch(batch).map_err(|e| write_logs(&e))?;
        self.flush(write_logs).await
    }
}
