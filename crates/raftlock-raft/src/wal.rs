//! The segmented write-ahead log that holds the Raft log on disk.
//!
//! The log is a sequence of segment files `wal-<seq as 16 hex digits>.log`, each a sequence of
//! [`codec::frame`]s. One frame is one [`Wal::write`]: it carries the log operations of one
//! openraft call (an append batch, a truncation or a purge) plus the latest committed log id,
//! and it is written with one `write` and made durable with one `fdatasync` before the call is
//! acknowledged. Because every frame is synced before the next one is written, only the last
//! frame of the last segment can ever be half on disk; that is what lets recovery tell a torn
//! tail (cut off, it was never acknowledged) from damage (refused, see [`Wal::open`]).
//!
//! A segment's file is preallocated to the size limit when it is created (`fallocate`; zeros
//! that have their blocks reserved), and frames are written into it at their offsets: a write
//! that does not grow the file needs no file size written by its `fdatasync`, which makes
//! a small write of the log ~30 % cheaper in CPU and wall time on ext4 (`make bench-wal`;
//! docs/architecture.md, *The write-ahead log's preallocated segments*). So a segment's
//! frames end where only zeros follow, not at the end of the file; a frame header is never
//! zeros (its checksum covers its length), so the two are never confused.
//!
//! A segment is closed once it passes the size limit and a new one starts with a checkpoint
//! frame (the last purged log id and the committed id), so the oldest segments can be deleted
//! whole once a snapshot covers them, and the remaining suffix still replays to the same log.
//! [`Wal::write`] does not delete them itself: it hands the names out
//! ([`Wal::take_removable_segments`]) and the owner removes them ([`remove_segments`]) off the
//! write path — an unlink and a directory sync can take tens of milliseconds, and every write
//! of the log waits in openraft's core loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use raftlock_core::codec::{self, FrameRead};
use serde::{Deserialize, Serialize};

mod contents;

#[cfg(test)]
pub(crate) use contents::weight_of;
pub use contents::{entry_weight, FrameLoc, LogContents, DECODED_TAIL_OPS};

use crate::error::StoreError;
use crate::fs::{Dir, DirFile, GRADUAL_PAUSE, GRADUAL_STEP_BYTES, TMP_SUFFIX};
use crate::typ::{Entry, LogId};

/// A segment is closed and a new one started once it is this large. A restart replays every
/// segment a snapshot does not wholly cover, so up to a segment of log older than the
/// snapshot is read and decoded for nothing: with 64 MiB segments that was up to 0.77 s of a
/// restart; a new segment costs a file creation and a directory sync, about once a second
/// at the highest write rates measured.
pub const DEFAULT_SEGMENT_BYTES: u64 = 16 << 20;

/// A write + fsync this slow is logged as a warning: it is the default election timeout, so a
/// leader whose log is held that long is at the edge of being replaced, and an operator
/// reading why writes paused needs to see the disk named (etcd warns on slow fdatasync too).
const SLOW_WRITE: Duration = Duration::from_millis(250);
const SEGMENT_PREFIX: &str = "wal-";
const SEGMENT_SUFFIX: &str = ".log";

/// One change to the log, as written to and replayed from disk.
#[derive(Debug, Serialize, Deserialize)]
enum WalOp {
    /// Entries appended after the current last entry.
    Append(Vec<Entry>),
    /// Entries at and after this index are removed (openraft's `truncate`).
    TruncateFrom(u64),
    /// Entries up to and including this log id are covered by a snapshot and removed.
    Purge(LogId),
}

/// [`WalOp`] borrowing its entries, so an append is encoded without copying them. Serializes
/// exactly as the owned type.
#[derive(Serialize)]
pub enum WalOpRef<'a> {
    Append(&'a [Entry]),
    TruncateFrom(u64),
    Purge(LogId),
}

/// The payload of one frame.
#[derive(Serialize)]
struct FrameRef<'a> {
    committed: Option<LogId>,
    ops: &'a [WalOpRef<'a>],
}

#[derive(Deserialize)]
struct FrameOwned {
    committed: Option<LogId>,
    ops: Vec<WalOp>,
}

/// One frame, encoded and ready to write, with what the WAL must know about it.
pub struct PendingFrame {
    bytes: Vec<u8>,
    /// The first index appended by the frame, to find the entry in it later.
    min_index: Option<u64>,
    /// The highest index appended by the frame, to know when its segment may be deleted.
    max_index: Option<u64>,
    /// The purge the frame records, if any, to carry into the next segment's checkpoint.
    purged: Option<LogId>,
    committed: Option<LogId>,
}

impl PendingFrame {
    /// Encodes `ops` together with the latest `committed` id.
    pub fn new(committed: Option<LogId>, ops: &[WalOpRef<'_>]) -> Result<Self, String> {
        let payload = codec::encode(&FrameRef { committed, ops }).map_err(|e| e.to_string())?;
        let mut min_index = None;
        let mut max_index = None;
        let mut purged = None;
        for op in ops {
            match op {
                WalOpRef::Append(entries) => {
                    min_index = min_index.or(entries.first().map(|e| e.log_id.index));
                    max_index = max_index.max(entries.last().map(|e| e.log_id.index))
                }
                WalOpRef::Purge(upto) => purged = Some(*upto),
                WalOpRef::TruncateFrom(_) => {}
            }
        }
        Ok(PendingFrame {
            bytes: codec::frame(&payload),
            min_index,
            max_index,
            purged,
            committed,
        })
    }

    /// One frame for `op`, preceded by `purge` if there is one (the log store writes a purge
    /// with the next frame). The purge goes first so that after a purge past the log's end
    /// (a follower that installed a snapshot) the frame's append replays without a hole.
    pub fn after_purge(
        committed: Option<LogId>,
        purge: Option<LogId>,
        op: WalOpRef<'_>,
    ) -> Result<Self, String> {
        let ops: Vec<WalOpRef> = purge.map(WalOpRef::Purge).into_iter().chain([op]).collect();
        Self::new(committed, &ops)
    }

    /// Encoded size, header included.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The encoded frame, as written.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Never true: even an empty frame has a header.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// What the WAL knows about one segment file.
struct Segment {
    seq: u64,
    /// The highest entry index appended in this segment; the segment may be deleted once a
    /// purge reaches it.
    max_index: Option<u64>,
}

fn segment_name(seq: u64) -> String {
    format!("{SEGMENT_PREFIX}{seq:016x}{SEGMENT_SUFFIX}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// The open write-ahead log: the segment being appended to and the list of older ones.
pub struct Wal {
    /// Bytes of all segment files found at open (after cutting a torn tail): what this node
    /// wrote to its log before this process, at most, since its last snapshot.
    replayed_bytes: u64,
    dir: Arc<dyn Dir>,
    /// Oldest first; the last one is `current`.
    segments: Vec<Segment>,
    /// The last segment, open for appending.
    current: Box<dyn DirFile>,
    /// Bytes in `current`, to know when to start a new segment.
    current_len: u64,
    /// Size at which a segment is closed.
    segment_bytes: u64,
    /// Latest purge, written into each new segment's checkpoint.
    last_purged: Option<LogId>,
    /// Latest committed id written, likewise.
    committed: Option<LogId>,
}

impl Wal {
    /// Opens the WAL in `dir` (creating the first segment if there is none) and replays it.
    ///
    /// A bad frame in the last segment that nothing valid follows is the torn tail of a write
    /// that was never acknowledged: it is cut off (and the cut synced) with a warning. A bad
    /// frame anywhere else, a valid frame that does not decode, or a hole in the entries is
    /// damage: the open fails with the file and offset, and nothing is changed.
    ///
    /// The returned log keeps entries of `decoded_tail` weight decoded ([`DECODED_TAIL_OPS`]).
    pub fn open(
        dir: Arc<dyn Dir>,
        segment_bytes: u64,
        decoded_tail: usize,
    ) -> Result<(Wal, LogContents), StoreError> {
        let mut seqs: Vec<u64> = dir
            .list()
            .map_err(|e| StoreError::io(dir.describe(""), e))?
            .iter()
            .filter_map(|n| parse_segment_name(n))
            .collect();
        seqs.sort_unstable();
        let mut contents = LogContents::with_decoded_tail(decoded_tail);
        let mut segments = Vec::new();
        let mut current_len = 0;
        let mut replayed_bytes = 0;
        for (i, &seq) in seqs.iter().enumerate() {
            let is_last = i + 1 == seqs.len();
            let (max_index, len) = replay_segment(&*dir, seq, is_last, &mut contents)?;
            segments.push(Segment { seq, max_index });
            current_len = len;
            replayed_bytes += len;
        }
        if let Some(&first) = seqs.first() {
            contents.check_starts_after_purge().map_err(|reason| {
                StoreError::corrupt(dir.describe(&segment_name(first)), 0, reason)
            })?;
        }
        if let Some(committed) = contents.committed {
            // A committed id is only ever written next to or after its entry; one beyond the
            // log would be a bug, so forget it rather than apply entries that are not there.
            if contents
                .last_log_id()
                .is_none_or(|l| l.index < committed.index)
            {
                contents.committed = None;
            }
        }
        let current = match segments.last() {
            Some(last) => {
                let name = segment_name(last.seq);
                let mut file = dir
                    .open_write(&name)
                    .map_err(|e| StoreError::io(dir.describe(&name), e))?;
                // A segment written before preallocation, or one whose torn tail was cut.
                preallocate(&*dir, &name, &mut *file, segment_bytes);
                file
            }
            None => {
                let (file, len) = create_segment(&*dir, 1, segment_bytes, None, None)?;
                segments.push(Segment {
                    seq: 1,
                    max_index: None,
                });
                current_len = len;
                file
            }
        };
        let wal = Wal {
            replayed_bytes,
            dir,
            segments,
            current,
            current_len,
            segment_bytes,
            last_purged: contents.last_purged,
            committed: contents.committed,
        };
        Ok((wal, contents))
    }

    /// Writes `frame` after the last one and syncs it; when this returns `Ok` the frame
    /// survives any crash. Any error leaves the file in an unknown state: the caller must stop
    /// using the WAL. Returns the index of the first entry the frame appended and where the
    /// frame lies, for [`LogContents::record_frame`].
    pub fn write(&mut self, frame: &PendingFrame) -> Result<Option<(u64, FrameLoc)>, StoreError> {
        let name = segment_name(self.current_seq());
        let loc = FrameLoc {
            seq: self.current_seq(),
            offset: self.current_len,
            len: frame.bytes.len() as u64,
            last: frame.max_index.unwrap_or(0),
        };
        let started = Instant::now();
        self.current
            .overwrite(self.current_len, &frame.bytes)
            .and_then(|_| self.current.sync())
            .map_err(|e| StoreError::io(self.dir.describe(&name), e))?;
        let took = started.elapsed();
        metrics::histogram!("raftlock_wal_fsync_duration_seconds").record(took.as_secs_f64());
        if took >= SLOW_WRITE {
            tracing::warn!(
                file = %self.dir.describe(&name),
                bytes = frame.bytes.len(),
                took_ms = took.as_millis() as u64,
                "slow WAL write: the disk held this node's log longer than an election timeout"
            );
        }
        metrics::counter!("raftlock_wal_bytes_total").increment(frame.bytes.len() as u64);
        self.current_len += frame.bytes.len() as u64;
        let segment = self.segments.last_mut().expect("a current segment");
        segment.max_index = segment.max_index.max(frame.max_index);
        if let Some(purged) = frame.purged {
            self.last_purged = self.last_purged.max(Some(purged));
        }
        self.committed = self.committed.max(frame.committed);
        if self.current_len >= self.segment_bytes {
            self.rotate()?;
        }
        Ok(frame.min_index.map(|first| (first, loc)))
    }

    /// Bytes of the segment files found at open.
    pub fn replayed_bytes(&self) -> u64 {
        self.replayed_bytes
    }

    /// The number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn current_seq(&self) -> u64 {
        self.segments.last().expect("a current segment").seq
    }

    /// Starts the next segment with a checkpoint of the purge and commit state.
    fn rotate(&mut self) -> Result<(), StoreError> {
        let seq = self.current_seq() + 1;
        let (file, len) = create_segment(
            &*self.dir,
            seq,
            self.segment_bytes,
            self.last_purged,
            self.committed,
        )?;
        self.segments.push(Segment {
            seq,
            max_index: None,
        });
        self.current = file;
        self.current_len = len;
        Ok(())
    }

    /// The oldest closed segments whose entries are all purged by a purge already written and
    /// synced, oldest first, forgotten by the WAL from now on: the caller deletes them with
    /// [`remove_segments`]. Until it does, a restart replays them (their entries are skipped as
    /// purged), so a late or failed deletion costs disk space, never correctness.
    pub fn take_removable_segments(&mut self) -> Vec<String> {
        let Some(purged) = self.last_purged else {
            return Vec::new();
        };
        let removable = self.segments[..self.segments.len() - 1]
            .iter()
            .take_while(|s| s.max_index.is_none_or(|m| m <= purged.index))
            .count();
        self.segments
            .drain(..removable)
            .map(|s| segment_name(s.seq))
            .collect()
    }
}

/// Deletes segment files handed out by [`Wal::take_removable_segments`], in that order (oldest
/// first). Each leaves the log by a rename to a temporary name, synced (the directory) before
/// the next one: a crash can then only leave a suffix of segments, which always replays to
/// the same log (a file system may persist unsynced renames in any order). After an error
/// the caller must delete nothing newer, ever: a segment left behind an older, deleted one is
/// a suffix, one left before a deleted newer one is a hole. The renamed file is then freed a
/// piece at a time ([`Dir::remove_gradually`]); one a crash leaves behind is deleted at the
/// next start with every other temporary file. A failure to free it is logged and is not an
/// error: the segment is out of the log by then, so deleting newer ones leaves no hole, and
/// stopping would keep every later segment on disk until the next start for a file that
/// start deletes anyway.
pub fn remove_segments(dir: &dyn Dir, names: &[String]) -> Result<(), StoreError> {
    for name in names {
        let doomed = format!("{name}{TMP_SUFFIX}");
        dir.rename(name, &doomed)
            .map_err(|e| StoreError::io(dir.describe(name), e))?;
        dir.sync()
            .map_err(|e| StoreError::io(dir.describe(""), e))?;
        if let Err(e) = dir.remove_gradually(&doomed, GRADUAL_STEP_BYTES, GRADUAL_PAUSE) {
            tracing::warn!(
                file = %dir.describe(&doomed),
                error = %e,
                "cannot free a purged WAL segment; it is out of the log and the next start \
                 deletes it"
            );
        }
    }
    Ok(())
}

/// Creates segment `seq`, preallocated to `segment_bytes`, holding one checkpoint frame,
/// durably (file and directory).
fn create_segment(
    dir: &dyn Dir,
    seq: u64,
    segment_bytes: u64,
    last_purged: Option<LogId>,
    committed: Option<LogId>,
) -> Result<(Box<dyn DirFile>, u64), StoreError> {
    let name = segment_name(seq);
    let file_err = |e| StoreError::io(dir.describe(&name), e);
    let ops: Vec<WalOpRef> = last_purged.map(WalOpRef::Purge).into_iter().collect();
    let checkpoint = PendingFrame::new(committed, &ops)
        .map_err(|e| StoreError::corrupt(dir.describe(&name), 0, e))?;
    let mut file = dir.create(&name).map_err(file_err)?;
    preallocate(dir, &name, &mut *file, segment_bytes);
    file.overwrite(0, &checkpoint.bytes).map_err(file_err)?;
    file.sync().map_err(file_err)?;
    dir.sync()
        .map_err(|e| StoreError::io(dir.describe(""), e))?;
    Ok((file, checkpoint.bytes.len() as u64))
}

/// Grows segment file `name` to `len` bytes of reserved zeros ([`DirFile::preallocate`]). A
/// failure only costs the speed-up (writes past the end still work), so it is a warning, not
/// an error: a disk too full to reserve the space fails the write that needs it instead.
fn preallocate(dir: &dyn Dir, name: &str, file: &mut dyn DirFile, len: u64) {
    match file.preallocate(len) {
        Ok(true) => {}
        Ok(false) => tracing::debug!(file = %dir.describe(name),
            "the file system cannot preallocate; WAL writes grow the segment instead"),
        Err(e) => tracing::warn!(file = %dir.describe(name), error = %e,
            "cannot preallocate a WAL segment; its writes grow it instead"),
    }
}

/// Replays segment `seq` into `contents`; returns its highest appended index and where its
/// frames end (after cutting a torn tail): the offset the next frame is written at.
fn replay_segment(
    dir: &dyn Dir,
    seq: u64,
    is_last: bool,
    contents: &mut LogContents,
) -> Result<(Option<u64>, u64), StoreError> {
    let name = segment_name(seq);
    let file = dir.describe(&name);
    let bytes = dir
        .read(&name)
        .map_err(|e| StoreError::io(&file, e))?
        .unwrap_or_default();
    let mut at = 0;
    let mut max_index = None;
    loop {
        match codec::read_frame(&bytes, at) {
            FrameRead::End => return Ok((max_index, at as u64)),
            FrameRead::Frame { payload, next } => {
                let frame: FrameOwned = codec::decode(payload)
                    .map_err(|e| StoreError::corrupt(&file, at as u64, e.to_string()))?;
                for op in &frame.ops {
                    if let WalOp::Append(entries) = op {
                        max_index = max_index.max(entries.last().map(|e| e.log_id.index));
                    }
                }
                let loc = FrameLoc {
                    seq,
                    offset: at as u64,
                    len: (next - at) as u64,
                    last: 0,
                };
                contents
                    .replay(frame, loc)
                    .map_err(|reason| StoreError::corrupt(&file, at as u64, reason))?;
                at = next;
            }
            FrameRead::Bad { reason, .. } => {
                let written = written_len(&bytes);
                if at >= written {
                    // Only zeros from here on: preallocated space no frame reached yet.
                    return Ok((max_index, at as u64));
                }
                if !is_last || valid_frame_after(&bytes, at, written) {
                    return Err(StoreError::corrupt(&file, at as u64, reason));
                }
                tracing::warn!(
                    file,
                    offset = at,
                    dropped_bytes = written - at,
                    reason,
                    "cutting the torn tail of the write-ahead log (a write that was never acknowledged)"
                );
                let mut f = dir
                    .open_append(&name)
                    .map_err(|e| StoreError::io(&file, e))?;
                f.truncate(at as u64)
                    .map_err(|e| StoreError::io(&file, e))?;
                return Ok((max_index, at as u64));
            }
        }
    }
}

/// Whether a whole valid frame starts anywhere after the bad frame at `at` and before
/// `written`. Only the last write can be unsynced, and it is one frame, so a valid frame after
/// a bad one proves the bad one had been synced: damage, not a torn tail. Every offset is
/// tried because the bad frame's own length field may be what is damaged; none from
/// `written` on, where only zeros are, which no frame starts with.
fn valid_frame_after(bytes: &[u8], at: usize, written: usize) -> bool {
    (at + 1..written.min(bytes.len().saturating_sub(codec::FRAME_HEADER_LEN)))
        .any(|off| matches!(codec::read_frame(bytes, off), FrameRead::Frame { .. }))
}

/// The length of `bytes` without its trailing zeros: where the preallocated space that no
/// write has reached begins.
fn written_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_fs::SimDir;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    /// An entry carrying `ops` ticks, as the proposer batches them.
    fn batch_entry(index: u64, ops: usize) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(raftlock_core::Command {
                stamp: 0,
                ops: vec![raftlock_core::Op::Tick; ops],
            }),
        }
    }

    /// Appends `entries` to `log` and writes their frame, as the log store does.
    fn append_durably(wal: &mut Wal, log: &mut LogContents, entries: Vec<Entry>) {
        let frame = PendingFrame::new(None, &[WalOpRef::Append(&entries)]).unwrap();
        log.append(entries).unwrap();
        let (first, loc) = wal.write(&frame).unwrap().expect("a frame that appends");
        log.record_frame(first, loc);
    }

    /// The decoded tail is bounded by the ops it holds, not by its entries: when batches grow
    /// (a slower disk), it holds fewer of them and its memory stays the same; its weight stays
    /// exact through truncation and purge, and all of the log still reads back.
    #[test]
    fn the_decoded_tail_holds_ops_not_entries() {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new());
        let (mut wal, mut log) = Wal::open(dir.clone(), 1 << 20, 100).unwrap();
        for index in 1..=40 {
            append_durably(&mut wal, &mut log, vec![batch_entry(index, 9)]);
        }
        assert_eq!(log.entries.len(), 10, "10 entries of 9 ops weigh 100");
        for index in 41..=80 {
            append_durably(&mut wal, &mut log, vec![batch_entry(index, 19)]);
        }
        assert_eq!(
            log.entries.len(),
            5,
            "twice the ops per entry, half the entries"
        );
        assert_eq!(log.decoded_weight(), 100);

        let exact = |log: &LogContents| weight_of(log.entries.values());
        log.truncate_from(79);
        assert_eq!((log.entries.len(), log.decoded_weight()), (3, exact(&log)));
        drop(log.purge(LogId::new(CommittedLeaderId::new(1, 1), 77)));
        assert_eq!((log.entries.len(), log.decoded_weight()), (1, exact(&log)));
        append_durably(&mut wal, &mut log, vec![batch_entry(79, 500)]);
        assert_eq!(
            log.entries.len(),
            1,
            "an entry heavier than the tail is still kept"
        );
        let read: Vec<u64> = log
            .read(&*dir, ..)
            .unwrap()
            .iter()
            .map(|e| e.log_id.index)
            .collect();
        assert_eq!(read, vec![78, 79]);
    }

    /// An entry whose frame is not known is an error, not a wait: a hole in the frame index
    /// (no write path leaves one) must not spin a reader on the frame before it while it
    /// holds the log.
    #[test]
    fn an_entry_no_frame_holds_is_an_error_not_a_hang() {
        let dir: Arc<dyn Dir> = Arc::new(SimDir::new());
        let (mut wal, mut log) = Wal::open(dir.clone(), 1 << 20, 1).unwrap();
        for index in 1..=3 {
            append_durably(&mut wal, &mut log, vec![entry(index)]);
        }
        assert_eq!(log.entries.len(), 1, "entries 1 and 2 are evicted");
        assert_eq!(log.read(&*dir, 1..3).unwrap().len(), 2, "read back");
        log.frames.remove(&2);
        let err = log.read(&*dir, 1..3).unwrap_err().to_string();
        assert!(err.contains("before entry 2"), "{err}");
    }
}
