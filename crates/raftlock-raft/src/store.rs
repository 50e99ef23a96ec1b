//! Opening a node's data directory: lock it, refuse what this release cannot read, and hand
//! out both openraft stores.
//!
//! Layout of a data directory:
//! - `LOCK`: held with an exclusive `flock` while a node runs, so two processes never share
//!   the files;
//! - `wal-<seq>.log`: the write-ahead log segments (see [`crate::wal`]);
//! - `vote`, `snapshot`: checked files (see [`crate::checked_file`]);
//! - `*.tmp`: leftovers of an interrupted atomic write, or a purged WAL segment whose removal
//!   a crash cut short; removed here (a large one piece by piece, as the janitor does).

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use raftlock_core::Limits;

use crate::error::StoreError;
use crate::fs::{Dir, OsDir, GRADUAL_PAUSE, GRADUAL_STEP_BYTES, TMP_SUFFIX};
use crate::log_store::LogStore;
use crate::state_machine::StateMachineStore;
use crate::wal::DEFAULT_SEGMENT_BYTES;

const LOCK_FILE: &str = "LOCK";

/// Opens (or creates) the data directory `dir` and returns both openraft stores, the state
/// machine already restored from the latest snapshot. A fresh state machine uses
/// [`Limits::default`].
///
/// The directory stays locked until the returned log store (and the `Raft` that owns it) is
/// dropped; opening it again before that fails.
pub fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StoreError> {
    open_timed(dir).map(|(log, state, _)| (log, state))
}

/// How long opening each store took: what a restart spends before Raft starts. The two are
/// opened at once, on two threads (they read different files and share nothing), so the
/// open takes about the longer of the two, not their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenTimes {
    /// Reading the log back: the WAL's segments replayed, the log's index rebuilt and its
    /// newest entries decoded.
    pub log: Duration,
    /// Restoring the state machine from the latest snapshot: decoding it and building the
    /// indexes it does not store.
    pub state: Duration,
}

/// [`open`], also saying how long each store took to open (a node reports its start-up phases).
pub fn open_timed(path: &Path) -> Result<(LogStore, StateMachineStore, OpenTimes), StoreError> {
    refuse_sled_layout(path)?;
    let dir: Arc<dyn Dir> =
        Arc::new(OsDir::open(path).map_err(|e| StoreError::io(path.display().to_string(), e))?);
    let lock = lock_dir(path)?;
    open_in_timed(dir, Limits::default(), DEFAULT_SEGMENT_BYTES, Some(lock))
}

/// Opens both stores over any [`Dir`] (the simulated disk of the crash tests, or a real one).
pub fn open_in(
    dir: Arc<dyn Dir>,
    limits: Limits,
    segment_bytes: u64,
    dir_lock: Option<File>,
) -> Result<(LogStore, StateMachineStore), StoreError> {
    open_in_timed(dir, limits, segment_bytes, dir_lock).map(|(log, state, _)| (log, state))
}

fn open_in_timed(
    dir: Arc<dyn Dir>,
    limits: Limits,
    segment_bytes: u64,
    dir_lock: Option<File>,
) -> Result<(LogStore, StateMachineStore, OpenTimes), StoreError> {
    remove_leftover_temp_files(&*dir)?;
    let log_dir = dir.clone();
    // Scoped: the replaying thread is joined whatever happens here (a panic included), so it
    // never outlives the open holding the directory's lock; its panic resumes here.
    let ((log_store, log), (sm_store, state)) = std::thread::scope(|scope| {
        let replay = std::thread::Builder::new()
            .name("wal-replay".into())
            .spawn_scoped(scope, move || {
                timed(|| LogStore::open(log_dir, segment_bytes, dir_lock))
            })
            .map_err(|e| StoreError::io("write-ahead log", e))?;
        let restored = timed(|| StateMachineStore::open(dir, limits));
        let replayed = replay
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok::<_, StoreError>((replayed, restored))
    })?;
    Ok((log_store?, sm_store?, OpenTimes { log, state }))
}

/// Runs `work`, also saying how long it took.
fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = work();
    (out, started.elapsed())
}

fn lock_dir(path: &Path) -> Result<File, StoreError> {
    let lock_path = path.join(LOCK_FILE);
    let name = lock_path.display().to_string();
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::io(&name, e))?;
    file.try_lock().map_err(|e| {
        StoreError::io(
            &name,
            std::io::Error::other(format!(
                "the data directory is in use by another process ({e})"
            )),
        )
    })?;
    Ok(file)
}

/// Removes what interrupted atomic writes left (`*.tmp`). A temporary name that is a second
/// name of a live file (a crash between [`crate::fs`]'s link and rename) is only unlinked:
/// [`Dir::remove_gradually`] checks.
pub(crate) fn remove_leftover_temp_files(dir: &dyn Dir) -> Result<(), StoreError> {
    remove_leftover_temp_files_in_steps(dir, GRADUAL_STEP_BYTES, GRADUAL_PAUSE)
}

/// [`remove_leftover_temp_files`] cutting `step` bytes at a time: the crash tests' files are
/// small, so they cut in small steps to go through the same cuts a large file gets.
pub(crate) fn remove_leftover_temp_files_in_steps(
    dir: &dyn Dir,
    step: u64,
    pause: std::time::Duration,
) -> Result<(), StoreError> {
    let names = dir
        .list()
        .map_err(|e| StoreError::io(dir.describe(""), e))?;
    for name in names.iter().filter(|n| n.ends_with(TMP_SUFFIX)) {
        dir.remove_gradually(name, step, pause)
            .map_err(|e| StoreError::io(dir.describe(name), e))?;
    }
    Ok(())
}

/// Releases up to 0.1 kept everything in a sled database, which never made writes durable
/// (see docs/architecture.md). Its files cannot be trusted to hold every acknowledged write, so
/// they are not migrated: the node refuses to start and says how to rejoin.
fn refuse_sled_layout(path: &Path) -> Result<(), StoreError> {
    if path.join("conf").is_file() && path.join("db").is_file() {
        return Err(StoreError::Foreign {
            file: path.display().to_string(),
            reason: "this data directory was written by raftlock 0.1 (sled layout), which this \
                     release does not read; move it aside and start the node with --join on an \
                     empty directory to catch up from the leader (docs/operations.md, \
                     \"Upgrading from 0.1\")"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{write_atomically, OsDir};
    use crate::sim_fs::SimDir;

    /// A crash between the link that retires the live file and the rename that replaces it
    /// leaves `snapshot.old.tmp` as a second name of the live `snapshot`.
    fn crash_between_link_and_rename(dir: &dyn Dir, live: &[u8]) {
        write_atomically(dir, "snapshot", &[live]).unwrap();
        dir.link("snapshot", "snapshot.old.tmp").unwrap();
        write_atomically(dir, "snapshot.tmp.partial", &[b"half"]).unwrap();
        dir.rename("snapshot.tmp.partial", "snapshot.tmp").unwrap();
        dir.sync().unwrap();
    }

    fn check_cleanup_keeps_the_live_file(dir: &dyn Dir) {
        let live = vec![7u8; 3 * GRADUAL_STEP_BYTES as usize + 11];
        crash_between_link_and_rename(dir, &live);
        remove_leftover_temp_files(dir).unwrap();
        assert_eq!(dir.list().unwrap(), ["snapshot"]);
        let kept = dir.read("snapshot").unwrap().unwrap();
        assert!(
            kept == live,
            "the live snapshot was cut to {} bytes",
            kept.len()
        );
    }

    #[test]
    fn start_up_clean_up_keeps_a_live_file_a_crash_left_a_second_name_of() {
        let root = tempfile::tempdir().unwrap();
        check_cleanup_keeps_the_live_file(&OsDir::open(root.path()).unwrap());
        check_cleanup_keeps_the_live_file(&SimDir::new());
    }

    #[test]
    fn a_temporary_file_with_one_name_is_still_removed() {
        let root = tempfile::tempdir().unwrap();
        let dir = OsDir::open(root.path()).unwrap();
        write_atomically(&dir, "wal-7.log.tmp", &[&[1u8; 5000]]).unwrap();
        remove_leftover_temp_files(&dir).unwrap();
        assert!(dir.list().unwrap().is_empty());
    }
}
