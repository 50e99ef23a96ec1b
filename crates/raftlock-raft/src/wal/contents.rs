//! The Raft log as the node holds it between writes: the newest entries decoded (a tail
//! bounded by [`DECODED_TAIL_OPS`]), the older ones as log ids and the places of their WAL
//! frames, read back from disk when a follower needs them. [`super::Wal`] builds it by replay
//! and keeps it in step with every frame it writes.

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};

use openraft::EntryPayload;

use super::{segment_name, FrameOwned, WalOp};
use raftlock_core::codec::{self, FrameRead};

use crate::error::StoreError;
use crate::fs::Dir;
use crate::typ::{Entry, LogId};

/// How much of the newest log the log keeps decoded in memory, in ops (an entry weighs its
/// ops plus one, see [`entry_weight`]). Older entries are read back from their WAL frame when
/// asked for (a follower catching up): the log between two snapshots of a large state is
/// ~50 MB on disk and ~4x that decoded, and keeping all of it made each node's memory climb by
/// ~200 MiB between snapshots. Replication and apply read entries within moments of their
/// append, from this tail: 8,192 ops is ~0.5 s of writes at a node's full rate (~17,000
/// ops/s). It was 32,768: while writing at full speed a leader then held ~12 MiB more heap
/// than it needed, about half of what a sharded node's peak RSS exceeded its
/// resting figure by (docs/benchmarks.md, *Scale-out: memory*).
///
/// Counted in ops, not entries, because an entry is a proposer batch whose size follows the
/// disk: when fsyncs slow down, batches grow, and a tail of a fixed number of entries grew with
/// them (4,096 entries held 9-15 MiB as batches went from ~8 to ~11 ops in a soak, and the
/// node's RSS drifted up by 11 %).
pub const DECODED_TAIL_OPS: usize = 8_192;

/// What one decoded entry counts against [`DECODED_TAIL_OPS`]: its ops, plus one for the entry
/// itself (a blank or membership entry weighs 1).
pub fn entry_weight(entry: &Entry) -> usize {
    match &entry.payload {
        EntryPayload::Normal(command) => command.ops.len() + 1,
        _ => 1,
    }
}

/// The summed [`entry_weight`] of `entries`.
pub(crate) fn weight_of<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> usize {
    entries.into_iter().map(entry_weight).sum()
}

/// Where a WAL frame lies, so the entries it appended can be read back once they are no longer
/// kept decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLoc {
    /// The segment file's sequence number.
    pub seq: u64,
    /// Where the frame's header starts in that file.
    pub offset: u64,
    /// The frame's length, header included.
    pub len: u64,
    /// The last entry of the frame still in the log: a truncation lowers it, so a frame is
    /// never asked for an entry a later frame replaced.
    pub last: u64,
}

/// The Raft log as replayed from disk (and as kept in memory while the node runs): the newest
/// entries decoded, the older ones as log ids and the places of their frames.
#[derive(Debug, Clone)]
pub struct LogContents {
    /// The newest entries, by index, without holes: the newest that fit in
    /// [`Self::decoded_tail`] and were not released for their age ([`Self::evict_upto`]; at
    /// least one), and every one whose frame's place is not yet known (its write is in
    /// flight). Changed only by the methods below, which keep
    /// `decoded_weight` in step.
    pub(crate) entries: BTreeMap<u64, Entry>,
    /// The summed [`entry_weight`] of `entries`.
    decoded_weight: usize,
    /// The ids of the entries between the last purged one and the first of `entries`, in
    /// order: the log's terms are needed without reading the disk (a truncation's new last
    /// id, a replication's consistency check); 24 bytes an entry.
    evicted: VecDeque<LogId>,
    /// The frames the `evicted` entries are read back from, by the index of the first entry
    /// each holds (a frame cut by a purge keeps its key; entries at or below the purge are
    /// never read).
    pub(super) frames: BTreeMap<u64, FrameLoc>,
    /// The last entry a snapshot covers and the log no longer holds.
    pub last_purged: Option<LogId>,
    /// The latest committed log id written with a frame (openraft's optional `save_committed`).
    pub committed: Option<LogId>,
    /// The weight of entries to keep decoded ([`DECODED_TAIL_OPS`]; the default, unbounded,
    /// is for a log that is only ever held in memory, like the crash tests' model).
    decoded_tail: usize,
}

impl Default for LogContents {
    fn default() -> Self {
        LogContents {
            entries: BTreeMap::new(),
            decoded_weight: 0,
            evicted: VecDeque::new(),
            frames: BTreeMap::new(),
            last_purged: None,
            committed: None,
            decoded_tail: usize::MAX,
        }
    }
}

impl LogContents {
    /// An empty log that keeps entries of at most `decoded_tail` weight decoded (at least one
    /// entry).
    pub fn with_decoded_tail(decoded_tail: usize) -> Self {
        LogContents {
            decoded_tail: decoded_tail.max(1),
            ..Default::default()
        }
    }

    /// The id of the last entry, or the last purged one when the log is empty.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.evicted.back().copied())
            .or(self.last_purged)
    }

    /// The index of the first entry, if the log holds any.
    fn first_index(&self) -> Option<u64> {
        self.evicted
            .front()
            .map(|id| id.index)
            .or_else(|| self.entries.keys().next().copied())
    }

    /// The number of entries the log holds (decoded or not).
    pub fn len(&self) -> usize {
        self.evicted.len() + self.entries.len()
    }

    /// Whether the log holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `entries`, which must follow the current last entry. On an empty log the first
    /// entry may start anywhere after the last purged one: while replaying, the purge that
    /// explains the start of the oldest remaining segment may come later in the same segment
    /// ([`Self::check_starts_after_purge`] checks the end result).
    pub fn append(&mut self, entries: impl IntoIterator<Item = Entry>) -> Result<(), String> {
        for entry in entries {
            let index = entry.log_id.index;
            if self.last_purged.is_some_and(|p| index <= p.index) {
                continue; // replaying a segment older than the latest purge
            }
            if let Some(last) = self.last_log_id().filter(|_| !self.is_empty()) {
                if index > last.index + 1 {
                    return Err(format!(
                        "entry {index} follows entry {}: a hole",
                        last.index
                    ));
                }
                if index <= last.index {
                    self.truncate_from(index);
                }
            }
            self.decoded_weight += entry_weight(&entry);
            self.entries.insert(index, entry);
        }
        Ok(())
    }

    /// Removes the entries at and after `index`.
    pub fn truncate_from(&mut self, index: u64) {
        let removed = self.entries.split_off(&index);
        self.decoded_weight -= weight_of(removed.values());
        if let Some(first) = self.evicted.front().map(|id| id.index) {
            let kept = index.saturating_sub(first).min(self.evicted.len() as u64);
            self.evicted.truncate(kept as usize);
        }
        self.frames.split_off(&index);
        if let Some((_, frame)) = self.frames.iter_mut().next_back() {
            frame.last = frame.last.min(index.saturating_sub(1));
        }
    }

    /// Removes the entries up to and including `upto` and remembers it as the last purged.
    /// Returns the removed decoded entries, so the caller can free them outside its locks.
    pub fn purge(&mut self, upto: LogId) -> BTreeMap<u64, Entry> {
        if self.last_purged.is_some_and(|p| p.index >= upto.index) {
            return BTreeMap::new();
        }
        while self
            .evicted
            .front()
            .is_some_and(|id| id.index <= upto.index)
        {
            self.evicted.pop_front();
        }
        while let Some(entry) = self.frames.first_entry() {
            if entry.get().last > upto.index {
                break;
            }
            entry.remove();
        }
        let kept = self.entries.split_off(&(upto.index + 1));
        self.last_purged = Some(upto);
        let removed = std::mem::replace(&mut self.entries, kept);
        self.decoded_weight -= weight_of(removed.values());
        removed
    }

    /// Records that the entries `first..=loc.last` are durable in the frame at `loc`, then
    /// stops keeping decoded the entries beyond the tail whose frames are known. Entries
    /// purged or truncated meanwhile are not recorded.
    pub fn record_frame(&mut self, first: u64, loc: FrameLoc) {
        let first = first.max(self.last_purged.map_or(0, |p| p.index + 1));
        let last = loc.last.min(self.last_log_id().map_or(0, |l| l.index));
        if first <= last && !self.is_empty() {
            self.frames.insert(first, FrameLoc { last, ..loc });
        }
        self.evict();
    }

    /// Moves the oldest decoded entries beyond the tail's weight to `evicted`
    /// ([`Self::evict_oldest_while`]).
    fn evict(&mut self) {
        let tail = self.decoded_tail;
        self.evict_oldest_while(|weight, _| weight > tail, drop);
    }

    /// Stops keeping decoded the entries up to `index` (a log store releases the entries
    /// older than a few seconds: replication and apply have read them), as far as
    /// [`Self::evict_oldest_while`] may. Returns them, for the caller to drop once it no
    /// longer holds the log's lock (a second's worth of entries takes a while to free).
    pub fn evict_upto(&mut self, index: u64) -> Vec<Entry> {
        let mut gone = Vec::new();
        self.evict_oldest_while(|_, oldest| oldest <= index, |entry| gone.push(entry));
        gone
    }

    /// Moves the oldest decoded entry to `evicted` while `more(decoded weight, its index)`
    /// holds, keeping at least the newest, and only entries a known frame can read back.
    /// Hands each entry it moved to `gone` (the append path drops them at once; no list is
    /// built on it).
    fn evict_oldest_while(
        &mut self,
        more: impl Fn(usize, u64) -> bool,
        mut gone: impl FnMut(Entry),
    ) {
        let on_disk_upto = self.frames.values().next_back().map(|f| f.last);
        while self.entries.len() > 1 {
            let Some((&index, _)) = self.entries.first_key_value() else {
                break;
            };
            if !more(self.decoded_weight, index) || on_disk_upto.is_none_or(|upto| index > upto) {
                break;
            }
            let (_, entry) = self.entries.pop_first().expect("a first entry");
            self.decoded_weight -= entry_weight(&entry);
            self.evicted.push_back(entry.log_id);
            gone(entry);
        }
    }

    /// The summed [`entry_weight`] of the entries kept decoded.
    pub fn decoded_weight(&self) -> usize {
        self.decoded_weight
    }

    /// After a replay: the first entry must directly follow the last purged one.
    pub(super) fn check_starts_after_purge(&self) -> Result<(), String> {
        let (Some(purged), Some(first)) = (self.last_purged, self.first_index()) else {
            return Ok(());
        };
        if first != purged.index + 1 {
            return Err(format!(
                "the log resumes at entry {first} but the last purged entry is {}: entries are \
                 missing",
                purged.index
            ));
        }
        Ok(())
    }

    pub(super) fn replay(&mut self, frame: FrameOwned, loc: FrameLoc) -> Result<(), String> {
        for op in frame.ops {
            match op {
                WalOp::Append(entries) => {
                    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
                        continue;
                    };
                    let (first, last) = (first.log_id.index, last.log_id.index);
                    self.append(entries)?;
                    self.record_frame(first, FrameLoc { last, ..loc });
                }
                WalOp::TruncateFrom(index) => self.truncate_from(index),
                WalOp::Purge(upto) => drop(self.purge(upto)),
            }
        }
        if frame.committed > self.committed {
            self.committed = frame.committed;
        }
        Ok(())
    }

    /// The entries with indexes in `range` that the log holds, in order: the decoded ones
    /// copied, the older ones read back from their frames in `dir`.
    pub fn read(
        &self,
        dir: &dyn Dir,
        range: impl RangeBounds<u64>,
    ) -> Result<Vec<Entry>, StoreError> {
        let Some(first) = self.first_index() else {
            return Ok(Vec::new());
        };
        let start = start_index(range.start_bound()).max(first);
        let end = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        };
        let end = end.min(self.last_log_id().map_or(0, |l| l.index + 1));
        let decoded_from = self.entries.keys().next().copied().unwrap_or(u64::MAX);
        let mut out = Vec::new();
        if start < end.min(decoded_from) {
            self.read_evicted(dir, start, end.min(decoded_from), &mut out)?;
        }
        out.extend(
            self.entries
                .range(start.max(decoded_from)..end.max(start.max(decoded_from)))
                .map(|(_, e)| e.clone()),
        );
        Ok(out)
    }

    /// Whether reading from `start` on needs the disk: it asks for an entry older than the
    /// decoded tail.
    pub fn reads_disk_from(&self, start: Bound<&u64>) -> bool {
        let start = start_index(start);
        self.evicted.back().is_some_and(|last| start <= last.index)
    }

    /// Reads the evicted entries `start..end` from their frames into `out`.
    fn read_evicted(
        &self,
        dir: &dyn Dir,
        start: u64,
        end: u64,
        out: &mut Vec<Entry>,
    ) -> Result<(), StoreError> {
        let first = self.evicted.front().map_or(start, |id| id.index);
        let name_of = |seq| dir.describe(&segment_name(seq));
        let mut index = start;
        while index < end {
            let Some((_, loc)) = self.frames.range(..=index).next_back() else {
                return Err(StoreError::corrupt(
                    dir.describe("wal"),
                    0,
                    format!("no frame is known to hold entry {index}"),
                ));
            };
            if loc.last < index {
                // A hole in the frame index: fail rather than loop on a frame that ends before.
                return Err(StoreError::corrupt(
                    name_of(loc.seq),
                    loc.offset,
                    format!("the frame ends at entry {}, before entry {index}", loc.last),
                ));
            }
            let upto = end.min(loc.last + 1);
            let entries = read_frame_entries(dir, loc)?;
            for entry in entries {
                let i = entry.log_id.index;
                if i < index || i >= upto {
                    continue;
                }
                let expected = self.evicted.get((i - first) as usize);
                if expected != Some(&entry.log_id) {
                    return Err(StoreError::corrupt(
                        name_of(loc.seq),
                        loc.offset,
                        format!(
                            "entry {i} is {} on disk, {expected:?} in the log",
                            entry.log_id
                        ),
                    ));
                }
                out.push(entry);
            }
            if out.last().map(|e| e.log_id.index) != Some(upto - 1) {
                return Err(StoreError::corrupt(
                    name_of(loc.seq),
                    loc.offset,
                    format!("the frame does not hold entries {index}..{upto}"),
                ));
            }
            index = upto;
        }
        Ok(())
    }
}

/// The first index a range's start bound admits.
fn start_index(start: Bound<&u64>) -> u64 {
    match start {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    }
}

/// The entries the frame at `loc` appended, read from its segment and checked.
fn read_frame_entries(dir: &dyn Dir, loc: &FrameLoc) -> Result<Vec<Entry>, StoreError> {
    let name = segment_name(loc.seq);
    let file = dir.describe(&name);
    let bytes = dir
        .read_range(&name, loc.offset, loc.len as usize)
        .map_err(|e| StoreError::io(&file, e))?;
    let payload = match codec::read_frame(&bytes, 0) {
        FrameRead::Frame { payload, .. } => payload,
        FrameRead::End => return Err(StoreError::corrupt(file, loc.offset, "no frame")),
        FrameRead::Bad { reason, .. } => return Err(StoreError::corrupt(file, loc.offset, reason)),
    };
    let frame: FrameOwned = codec::decode(payload)
        .map_err(|e| StoreError::corrupt(&file, loc.offset, e.to_string()))?;
    Ok(frame
        .ops
        .into_iter()
        .flat_map(|op| match op {
            WalOp::Append(entries) => entries,
            _ => Vec::new(),
        })
        .collect())
}
