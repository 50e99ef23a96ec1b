//! A node that stops and reopens its data directory comes back with its vote, its log and its
//! state machine (latest snapshot plus re-applied committed entries).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    BasicNode, CommittedLeaderId, EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder,
};
use raftlock_core::{Command, Op};
use raftlock_raft::{
    open, raft_config, Entry, LogId, Network, Raft, RaftTiming, SharedState, Vote,
};

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn create_project(name: &str) -> Command {
    Command {
        stamp: 1_000,
        ops: vec![Op::CreateProject {
            name: name.to_string(),
        }],
    }
}

fn normal(term: u64, index: u64, project: &str) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(create_project(project)),
    }
}

#[tokio::test]
async fn stores_recover_vote_logs_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let membership = Membership::new(vec![BTreeSet::from([1])], None);
    let mut entries = vec![Entry {
        log_id: log_id(1, 1),
        payload: EntryPayload::Membership(membership.clone()),
    }];
    entries.extend((2..=6).map(|i| normal(1, i, &format!("p{i}"))));

    let snapshot_meta = {
        let (mut log, mut sm) = open(dir.path()).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        log.blocking_append(entries.clone()).await.unwrap();

        let replies = sm.apply(entries[..3].to_vec()).await.unwrap();
        assert_eq!(replies.len(), 3);
        assert!(replies[0].is_empty(), "membership entry has no outcome");
        assert!(
            matches!(replies[1][..], [Ok(_)]),
            "create project succeeds: {replies:?}"
        );
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(log_id(1, 3)));

        // Applied but only recoverable through the log: not in the snapshot.
        sm.apply(entries[3..5].to_vec()).await.unwrap();
        assert_eq!(*sm.subscribe_applied().borrow(), 5);
        log.save_committed(Some(log_id(1, 5))).await.unwrap();
        log.purge(log_id(1, 2)).await.unwrap();
        // The purge and the committed id are written with the next frame.
        log.blocking_append(entries[5..].to_vec()).await.unwrap();
        snap.meta
    };

    let (mut log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(1, 6)));
    assert_eq!(
        log.try_get_log_entries(0..10).await.unwrap(),
        entries[2..].to_vec()
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 5)));

    let (applied, mem) = sm.applied_state().await.unwrap();
    assert_eq!(
        applied,
        Some(log_id(1, 3)),
        "state machine restarts from the snapshot"
    );
    assert_eq!(mem.membership(), &membership);
    assert_eq!(*sm.subscribe_applied().borrow(), 3);
    {
        let shared = sm.shared();
        let data = shared.read().unwrap();
        assert!(data.machine.project("p2").is_some());
        assert!(data.machine.project("p3").is_some());
        assert!(data.machine.project("p4").is_none());
    }
    let current = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("snapshot persisted");
    assert_eq!(current.meta, snapshot_meta);

    // Truncation survives a restart too.
    log.truncate(log_id(1, 4)).await.unwrap();
    drop((log, sm));
    let (mut log, _sm) = open(dir.path()).unwrap();
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 3))
    );
}

async fn start_single_node(dir: &std::path::Path) -> (Raft, SharedState) {
    let (log, sm) = open(dir).unwrap();
    let state = sm.shared();
    let config = raft_config(&RaftTiming::default()).unwrap();
    let raft = Raft::new(1, config, Network::new("secret"), log, sm)
        .await
        .unwrap();
    (raft, state)
}

/// A whole node: committed writes survive shutdown, both from the log alone and from a
/// snapshot plus the log after it.
#[tokio::test]
async fn raft_node_recovers_state_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (raft, _) = start_single_node(dir.path()).await;
    raft.initialize(BTreeMap::from([(1, BasicNode::new("127.0.0.1:1"))]))
        .await
        .unwrap();
    raft.wait(Some(Duration::from_secs(5)))
        .current_leader(1, "leader")
        .await
        .unwrap();
    for i in 0..3 {
        let resp = raft
            .client_write(create_project(&format!("a{i}")))
            .await
            .unwrap();
        assert!(matches!(resp.data[..], [Ok(_)]), "{:?}", resp.data);
    }
    raft.trigger().snapshot().await.unwrap();
    let last = raft.metrics().borrow().last_applied.unwrap().index;
    raft.wait(Some(Duration::from_secs(5)))
        .metrics(|m| m.snapshot.is_some_and(|s| s.index == last), "snapshot")
        .await
        .unwrap();
    let after_snapshot = raft.client_write(create_project("b")).await.unwrap();
    raft.shutdown().await.unwrap();
    drop(raft);

    let (raft, state) = start_single_node(dir.path()).await;
    raft.wait(Some(Duration::from_secs(5)))
        .applied_index_at_least(Some(after_snapshot.log_id.index), "re-applied")
        .await
        .unwrap();
    {
        let data = state.read().unwrap();
        for name in ["a0", "a1", "a2", "b"] {
            assert!(data.machine.project(name).is_some(), "{name} recovered");
        }
    }
    let dup = raft.client_write(create_project("b")).await.unwrap();
    assert!(
        matches!(dup.data[..], [Err(_)]),
        "project b already exists: {:?}",
        dup.data
    );
    let dup = raft.client_write(create_project("a0")).await.unwrap();
    assert!(
        matches!(dup.data[..], [Err(_)]),
        "project a0 already exists: {:?}",
        dup.data
    );
    raft.shutdown().await.unwrap();
}
