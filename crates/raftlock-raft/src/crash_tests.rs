//! Simulated power loss at the storage layer: random sequences of log appends,
//! truncations, purges, vote saves and snapshot saves run over [`SimDir`]; the power fails
//! after a random number of file operations and a power cut keeps a random part of what was
//! not synced. After reopening, the store must hold exactly the state after the last
//! acknowledged operation, or after the one in flight when the power failed — never less,
//! never a mix, never a torn value.

use std::sync::Arc;

use openraft::{CommittedLeaderId, EntryPayload};
use proptest::prelude::*;

use crate::checked_file;
use crate::fs::Dir;
use crate::sim_fs::{Rng, SimDir};
use crate::typ::{Entry, LogId};
use crate::wal::{remove_segments, weight_of, LogContents, PendingFrame, Wal, WalOpRef};

const MAGIC_VOTE: &[u8; 8] = b"TESTVOTE";
const MAGIC_SNAP: &[u8; 8] = b"TESTSNAP";

/// What a test step asks of the store; sizes and positions are resolved against the current
/// state when the step runs, so every generated sequence is a valid openraft history.
#[derive(Debug, Clone)]
enum Step {
    /// Append this many entries (in a new term if the flag is set).
    Append(usize, bool),
    /// Truncate this many entries (at most all unpurged ones) off the end.
    Truncate(usize),
    /// Purge this fraction (per mille) of the entries.
    Purge(u16),
    /// Save a vote one term higher.
    Vote,
    /// Save a new, larger snapshot.
    Snapshot(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1usize..40, any::<bool>()).prop_map(|(n, t)| Step::Append(n, t)),
        1 => (1usize..10).prop_map(Step::Truncate),
        2 => (0u16..1000).prop_map(Step::Purge),
        2 => Just(Step::Vote),
        1 => (1usize..600).prop_map(Step::Snapshot),
    ]
}

/// The durable state the store is expected to hold.
#[derive(Clone, Debug, PartialEq, Default)]
struct Expected {
    log: Vec<LogId>,
    last_purged: Option<LogId>,
    vote: Option<u64>,
    snapshot: Option<Vec<u8>>,
}

/// The state `log` (whose older entries are read back from `dir`), `vote` and `snapshot` make.
fn observe(
    dir: &dyn Dir,
    log: &LogContents,
    vote: Option<u64>,
    snapshot: Option<Vec<u8>>,
) -> Expected {
    let entries = log.read(dir, ..).expect("every entry reads back");
    Expected {
        log: entries.iter().map(|e| e.log_id).collect(),
        last_purged: log.last_purged,
        vote,
        snapshot,
    }
}

/// An entry of `term` at `index`: blank, or carrying one or two ops, so entries weigh 1-3
/// against the decoded tail ([`crate::wal::entry_weight`]).
fn entry(term: u64, index: u64) -> Entry {
    let ops = (index % 3) as usize;
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: match ops {
            0 => EntryPayload::Blank,
            _ => EntryPayload::Normal(raftlock_core::Command {
                stamp: index as i64,
                ops: vec![raftlock_core::Op::Tick; ops],
            }),
        },
    }
}

/// The store under test: the WAL plus the vote and snapshot files, over one directory.
struct Store {
    dir: Arc<dyn Dir>,
    wal: Wal,
    /// A purge not written yet: as in the log store, it rides in the next frame, before that
    /// frame's own operation.
    unwritten_purge: Option<LogId>,
    /// The log as the running log store keeps it ([`DECODED_TAIL`] entries decoded, the rest
    /// read back from their frames), changed in the order the log store changes it: an
    /// append and a truncation before their frame is written, a purge at once (in memory
    /// only), each frame recorded once durable. After every step it must read back as the
    /// model, so the running path, not only a reopen, is checked against the disk.
    live: LogContents,
}

impl Store {
    /// Writes one frame: the unwritten purge (applied to `model` first), then `op` — as the
    /// log store does; then deletes the segments it made removable (there on another thread,
    /// here at once, so the power can fail in between or during).
    fn write(&mut self, model: &mut LogContents, op: WalOpRef<'_>) -> Result<(), String> {
        let purge = self.unwritten_purge.take();
        if let Some(upto) = purge {
            drop(model.purge(upto));
        }
        let frame = PendingFrame::after_purge(None, purge, op)?;
        let written = self.wal.write(&frame).map_err(|e| e.to_string())?;
        if let Some((first, loc)) = written {
            self.live.record_frame(first, loc);
        }
        let removable = self.wal.take_removable_segments();
        remove_segments(&*self.dir, &removable).map_err(|e| e.to_string())
    }

    /// The live log reads back as `model`, less the purge not yet written (the live log has
    /// made it already).
    fn check_live(&self, model: &LogContents) {
        let purged = self.unwritten_purge.map_or(0, |p| p.index + 1);
        let expected: Vec<LogId> = (model.read(&*self.dir, purged..).expect("model reads"))
            .iter()
            .map(|e| e.log_id)
            .collect();
        let live: Vec<LogId> = (self.live.read(&*self.dir, ..))
            .expect("the live log reads back")
            .iter()
            .map(|e| e.log_id)
            .collect();
        assert_eq!(live, expected, "the live log differs from the model");
        let kept = &self.live.entries;
        let weight = weight_of(kept.values());
        assert_eq!(
            self.live.decoded_weight(),
            weight,
            "the decoded tail's weight drifted from its entries'"
        );
        assert!(
            kept.len() <= 1 || weight <= DECODED_TAIL,
            "the live log keeps more than its tail decoded: {} entries weighing {weight}",
            kept.len()
        );
    }
}

const SEGMENT_BYTES: u64 = 1500;
/// Entries a reopened log keeps decoded: few, so most are read back from their frames.
const DECODED_TAIL: usize = 3;

fn reopen(dir: &SimDir) -> (Store, Expected) {
    let dir: Arc<dyn Dir> = Arc::new(dir.clone());
    // What a node's start does first: a crash inside a replacement may have left a second
    // name of a live file.
    crate::store::remove_leftover_temp_files_in_steps(&*dir, 64, std::time::Duration::ZERO)
        .expect("start-up clean-up");
    let (wal, log) =
        Wal::open(dir.clone(), SEGMENT_BYTES, DECODED_TAIL).expect("reopen after power cut");
    let vote = checked_file::load::<u64>(&*dir, "vote", MAGIC_VOTE).expect("vote is whole");
    let snap =
        checked_file::load::<Vec<u8>>(&*dir, "snapshot", MAGIC_SNAP).expect("snapshot is whole");
    let state = observe(&*dir, &log, vote, snap);
    (
        Store {
            dir,
            wal,
            unwritten_purge: None,
            live: log,
        },
        state,
    )
}

/// Runs `step` against the store and the in-memory model; `Err` means the power failed.
/// After a step that succeeded, the store's live log must read back as the model.
fn run_step(
    store: &mut Store,
    model: &mut LogContents,
    vote: &mut Option<u64>,
    snap: &mut Option<Vec<u8>>,
    step: &Step,
) -> Result<(), String> {
    let last = model.last_log_id();
    let next_index = last.map_or(0, |l| l.index + 1);
    let term = last.map_or(1, |l| l.leader_id.term);
    let first_unpurged = model.last_purged.map_or(0, |p| p.index + 1);
    let result = match step {
        Step::Append(n, new_term) => {
            let term = term + u64::from(*new_term);
            let entries: Vec<Entry> = (0..*n as u64)
                .map(|i| entry(term, next_index + i))
                .collect();
            // A refusal here is a bug of the live log, not a power cut: fail loudly.
            store
                .live
                .append(entries.clone())
                .expect("the live log appends");
            let result = store.write(model, WalOpRef::Append(&entries));
            model.append(entries)?;
            result
        }
        Step::Truncate(n) => {
            // openraft truncates only uncommitted entries, so never below a purge, written or not.
            let pending = store.unwritten_purge.map_or(0, |p| p.index + 1);
            let from = next_index
                .saturating_sub(*n as u64)
                .max(first_unpurged)
                .max(pending);
            store.live.truncate_from(from);
            let result = store.write(model, WalOpRef::TruncateFrom(from));
            model.truncate_from(from);
            result
        }
        Step::Purge(per_mille) => {
            let unpurged: Vec<LogId> = model.entries.values().map(|e| e.log_id).collect();
            if let Some(last) = unpurged.len().checked_sub(1) {
                let upto = unpurged[last * usize::from(*per_mille) / 1000];
                // No I/O: durable with the next frame, and only then part of the model.
                store.unwritten_purge = store.unwritten_purge.max(Some(upto));
                drop(store.live.purge(upto));
            }
            Ok(())
        }
        Step::Vote => {
            let v = vote.map_or(1, |v| v + 1);
            *vote = Some(v);
            checked_file::save(&*store.dir, "vote", MAGIC_VOTE, &v).map_err(|e| e.to_string())
        }
        Step::Snapshot(len) => {
            let bytes: Vec<u8> = (0..*len).map(|i| (i % 251) as u8).collect();
            *snap = Some(bytes.clone());
            checked_file::save(&*store.dir, "snapshot", MAGIC_SNAP, &bytes)
                .map_err(|e| e.to_string())
        }
    };
    if result.is_ok() {
        store.check_live(model);
    }
    result
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn a_power_cut_keeps_every_acknowledged_write_and_nothing_torn(
        setup in proptest::collection::vec(step(), 0..12),
        steps in proptest::collection::vec(step(), 1..25),
        fuel in 0u64..150,
        seed in any::<u64>(),
    ) {
        let disk = SimDir::new();
        let mut rng = Rng::new(seed);
        // A clean history first, so crashes also hit a store with old segments and files.
        let (mut store, _) = reopen(&disk);
        let (mut model, mut vote, mut snap) = (LogContents::default(), None, None);
        for s in &setup {
            run_step(&mut store, &mut model, &mut vote, &mut snap, s).expect("no failure yet");
        }
        drop(store);
        let (mut store, recovered) = reopen(&disk);
        let mut acked = observe(&disk, &model, vote, snap.clone());
        prop_assert_eq!(&recovered, &acked, "a clean reopen gives back the same state");

        disk.fail_after(fuel);
        let mut in_flight = None;
        for s in &steps {
            match run_step(&mut store, &mut model, &mut vote, &mut snap, s) {
                Ok(()) => acked = observe(&disk, &model, vote, snap.clone()),
                Err(_) => {
                    in_flight = Some(observe(&disk, &model, vote, snap.clone()));
                    break;
                }
            }
        }
        drop(store);
        disk.power_cut(&mut rng);
        let (mut store, recovered) = reopen(&disk);
        prop_assert!(
            recovered == acked || Some(&recovered) == in_flight.as_ref(),
            "recovered {:?}\nacknowledged {:?}\nin flight {:?}", recovered, acked, in_flight
        );

        // The recovered store takes new writes, and they survive the next power cut.
        let mut model = LogContents::default();
        model.last_purged = recovered.last_purged;
        model
            .append(recovered.log.iter().map(|id| entry(id.leader_id.term, id.index)))
            .expect("the recovered log appends");
        let (mut vote, mut snap) = (recovered.vote, recovered.snapshot.clone());
        run_step(&mut store, &mut model, &mut vote, &mut snap, &Step::Append(3, false))
            .expect("append after recovery");
        let expected = observe(&disk, &model, vote, snap);
        drop(store);
        disk.power_cut(&mut rng);
        let (_, recovered) = reopen(&disk);
        prop_assert_eq!(recovered, expected);
    }
}

/// A store on a fresh disk after `batches` clean appends of `each` entries, closed; returns the
/// disk and how many segment files it has.
fn disk_with_appends(batches: usize, each: usize) -> (SimDir, usize) {
    let disk = SimDir::new();
    let (mut store, _) = reopen(&disk);
    let mut model = LogContents::default();
    let (mut vote, mut snap) = (None, None);
    for _ in 0..batches {
        let step = Step::Append(each, false);
        run_step(&mut store, &mut model, &mut vote, &mut snap, &step).unwrap();
    }
    (disk, store.wal.segment_count())
}

/// Replaces the content of `name` with `bytes`.
fn overwrite(disk: &SimDir, name: &str, bytes: &[u8]) {
    let mut file = disk.create(name).unwrap();
    file.append(bytes).unwrap();
    file.sync().unwrap();
}

/// Opens the WAL on `disk`, which must be refused; returns the error.
fn refusal(disk: &SimDir) -> String {
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let err = Wal::open(dir, SEGMENT_BYTES, DECODED_TAIL)
        .err()
        .expect("refused");
    err.to_string()
}

/// The first segment file of a store.
const FIRST_SEGMENT: &str = "wal-0000000000000001.log";

/// Where the first append frame of a segment starts (its checkpoint frame comes first).
fn first_append_offset(bytes: &[u8]) -> usize {
    8 + u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize
}

/// Damage that is not a torn tail is refused with the file and offset, and the file is left
/// as it was.
#[test]
fn damage_in_a_closed_segment_is_refused_not_skipped() {
    let (disk, segments) = disk_with_appends(60, 20);
    assert!(segments > 2, "the test needs closed segments");
    let first = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("wal-"))
        .min()
        .unwrap();
    let mut bytes = disk.read(&first).unwrap().unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    overwrite(&disk, &first, &bytes);
    let err = refusal(&disk);
    assert!(
        err.contains(&first) && err.contains("damaged at byte"),
        "{err}"
    );
    assert_eq!(disk.read(&first).unwrap().unwrap(), bytes, "left untouched");
}

/// A bad frame followed by a valid one in the last segment had been synced: damage, refused.
#[test]
fn damage_before_a_valid_frame_in_the_last_segment_is_refused() {
    let (disk, segments) = disk_with_appends(3, 2);
    assert_eq!(segments, 1);
    let mut bytes = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    // Damage the payload of the first append.
    let at = first_append_offset(&bytes);
    bytes[at + 9] ^= 0xff;
    overwrite(&disk, FIRST_SEGMENT, &bytes);
    let err = refusal(&disk);
    assert!(err.contains(&format!("damaged at byte {at}")), "{err}");
}

/// A rotten length field in the middle of the last segment: the frame it claims ends on
/// garbage, but valid frames follow, so it is damage and refused — never cut as a torn tail.
#[test]
fn a_damaged_length_in_the_last_segment_is_refused_not_cut() {
    let (disk, _) = disk_with_appends(3, 2);
    let mut bytes = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    // The first append's length field now claims far more than the file holds.
    let at = first_append_offset(&bytes);
    bytes[at + 3] = 0x20;
    overwrite(&disk, FIRST_SEGMENT, &bytes);
    let err = refusal(&disk);
    assert!(err.contains("damaged at byte"), "{err}");
    assert_eq!(
        disk.read(FIRST_SEGMENT).unwrap().unwrap(),
        bytes,
        "nothing cut"
    );
}

/// Where the valid frames at the start of `bytes` end.
fn frames_end(bytes: &[u8]) -> usize {
    let mut at = 0;
    while let raftlock_core::codec::FrameRead::Frame { next, .. } =
        raftlock_core::codec::read_frame(bytes, at)
    {
        at = next;
    }
    at
}

/// The segment's entries, as a reopen reads them back.
fn reopened_log(disk: &SimDir) -> Vec<LogId> {
    reopen(disk).1.log
}

/// A segment is preallocated to the size limit, and a reopen writes its next frame right
/// after the last one, not at the file's end: the zeros between are not a frame, and no
/// warning-worthy torn tail either.
#[test]
fn a_segment_is_preallocated_and_the_next_frame_follows_the_last() {
    let (disk, segments) = disk_with_appends(3, 2);
    assert_eq!(segments, 1);
    let bytes = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    assert_eq!(bytes.len() as u64, SEGMENT_BYTES, "preallocated");
    let written = frames_end(&bytes);
    assert!(written < bytes.len() / 2, "three small frames: {written}");
    let before = reopened_log(&disk);
    assert_eq!(before.len(), 6);

    let (mut store, _) = reopen(&disk);
    let mut model = LogContents::default();
    model
        .append(before.iter().map(|id| entry(id.leader_id.term, id.index)))
        .unwrap();
    let (mut vote, mut snap) = (None, None);
    run_step(
        &mut store,
        &mut model,
        &mut vote,
        &mut snap,
        &Step::Append(2, false),
    )
    .unwrap();
    drop(store);
    let after = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    assert_eq!(after.len(), bytes.len(), "written inside the preallocation");
    assert_eq!(
        after[..written],
        bytes[..written],
        "earlier frames untouched"
    );
    assert!(
        frames_end(&after) > written,
        "the next frame starts at the end of the last"
    );
    assert_eq!(reopened_log(&disk).len(), 8);
}

/// A data directory written before preallocation (a segment as long as its frames) opens
/// with every entry, and its last segment is preallocated from then on.
#[test]
fn a_segment_written_before_preallocation_opens_and_is_preallocated() {
    let (disk, _) = disk_with_appends(3, 2);
    let bytes = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    let frames = frames_end(&bytes);
    overwrite(&disk, FIRST_SEGMENT, &bytes[..frames]);
    let log = reopened_log(&disk);
    assert_eq!(log.len(), 6, "every entry back");
    assert_eq!(
        disk.stat(FIRST_SEGMENT).unwrap().unwrap().len,
        SEGMENT_BYTES,
        "preallocated at open"
    );
    assert_eq!(reopened_log(&disk), log);
}

/// A torn write into preallocated space (a frame's first part on disk, its rest still zeros)
/// is cut: the entries before it stay, the space after them is zeros again, and the next
/// frame written there reads back.
#[test]
fn a_torn_frame_in_preallocated_space_is_cut_to_zeros() {
    let (disk, _) = disk_with_appends(3, 2);
    let clean = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    let end = frames_end(&clean);
    let torn = PendingFrame::new(None, &[WalOpRef::Append(&[entry(1, 6), entry(1, 7)])]).unwrap();
    let mut bytes = clean.clone();
    // Header and part of the payload: the rest of the frame never reached the disk.
    let kept = torn.len() / 2;
    bytes[end..end + kept].copy_from_slice(&torn.bytes()[..kept]);
    overwrite(&disk, FIRST_SEGMENT, &bytes);

    assert_eq!(
        reopened_log(&disk).len(),
        6,
        "the acknowledged entries stay"
    );
    let cut = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    assert_eq!(cut.len() as u64, SEGMENT_BYTES, "preallocated again");
    assert_eq!(cut, clean, "the torn bytes are zeros again");
}

/// A closed segment may end in preallocated zeros (one preallocated under a larger size limit
/// than the one that closed it): they end its frames, they are not damage.
#[test]
fn a_closed_segment_ending_in_preallocated_zeros_is_not_damage() {
    let (disk, _) = disk_with_appends(2, 2);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let smaller = 1;
    let (mut wal, mut log) = Wal::open(dir.clone(), smaller, DECODED_TAIL).unwrap();
    let entries = vec![entry(1, 4), entry(1, 5)];
    let frame = PendingFrame::new(None, &[WalOpRef::Append(&entries)]).unwrap();
    log.append(entries).unwrap();
    wal.write(&frame).unwrap();
    assert_eq!(wal.segment_count(), 2, "closed at the smaller limit");
    drop(wal);
    let first = disk.read(FIRST_SEGMENT).unwrap().unwrap();
    assert_eq!(first.len() as u64, SEGMENT_BYTES, "zeros after its frames");
    assert_eq!(reopened_log(&disk).len(), 6);
}
