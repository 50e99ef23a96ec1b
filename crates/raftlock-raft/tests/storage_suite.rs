//! openraft's storage conformance suite against the sled stores.

use openraft::testing::{StoreBuilder, Suite};
use raftlock_raft::{open, LogStore, StateMachineStore, StorageError, TypeConfig};
use tempfile::TempDir;

/// Each test case gets a fresh database in its own temporary directory; the directory is the
/// guard value, removed when the case ends.
struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, sm) = open(dir.path()).expect("open stores");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("storage suite failed: {e}");
    }
}
