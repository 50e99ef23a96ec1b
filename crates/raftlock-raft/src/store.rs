//! Opening the node's storage: one sled database holding the log, the vote and the snapshot.
//!
//! One database (rather than one per store) means one write-ahead log and one fsync covers
//! everything written before it, and the data directory is a single unit to back up or wipe.

use std::path::Path;

use raftlock_core::Limits;

use crate::log_store::LogStore;
use crate::state_machine::StateMachineStore;

/// Opens (or creates) the database in `dir` and returns both openraft stores, the state
/// machine already restored from the latest persisted snapshot. A fresh state machine uses
/// [`Limits::default`].
///
/// sled locks the directory: the previous stores (and the `Raft` that owns them) must be
/// dropped before the same directory is opened again.
pub fn open(dir: &Path) -> anyhow::Result<(LogStore, StateMachineStore)> {
    open_with_limits(dir, Limits::default())
}

/// Like [`open`], with the limits of a state machine that starts empty. Once a snapshot
/// exists the limits come from it, since they are part of the replicated state.
pub fn open_with_limits(
    dir: &Path,
    limits: Limits,
) -> anyhow::Result<(LogStore, StateMachineStore)> {
    // No periodic flush: durability comes from the explicit flush after every append, vote
    // and snapshot, which is also when the callers are told the data is safe.
    let db = sled::Config::new()
        .path(dir)
        .flush_every_ms(None)
        .open()
        .map_err(|e| anyhow::anyhow!("opening sled database at {}: {e}", dir.display()))?;
    let log_store = LogStore::new(db.clone())?;
    let sm_store = StateMachineStore::new(db, limits)?;
    Ok((log_store, sm_store))
}
