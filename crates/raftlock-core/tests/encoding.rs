//! The state's encoding is the snapshot format: a change of in-memory representation (such as
//! persistent maps in place of `BTreeMap`s) must encode every state to the same bytes, or
//! nodes of different releases could not read each other's snapshots.
//!
//! `fixtures/state-format-2.bin` was written by the release whose hierarchical state still used
//! `BTreeMap`s; it must still decode (as [`StateMachineV2`]) and convert to the same state.
//! `fixtures/state-format-3.bin` was written by the first release with semaphores, wait groups
//! and barriers; it must still decode (as [`StateMachineV3`]) and convert to the same state.
//! `fixtures/state-format-4.bin` was written by the first release that leaves the project-lock
//! eligibility index out of the encoding; it must still decode (as [`StateMachineV4`]) and
//! convert to the same state, with no shards. `fixtures/state-format-5.bin` is the current
//! format, with the shard map
//! (`RAFTLOCK_WRITE_FIXTURE=1 cargo test -p raftlock-core --test encoding`).

use std::collections::BTreeMap;

use raftlock_core::barriers::BarrierSpec;
use raftlock_core::command::{HierOp, LockAction};
use raftlock_core::hierarchy::WaitSpec;
use raftlock_core::semaphores::SemaphoreSpec;
use raftlock_core::wait_groups::GroupSpec;
use raftlock_core::{
    codec, Command, Limits, Op, StateMachine, StateMachineV2, StateMachineV3, StateMachineV4,
    SECOND,
};

const T0: i64 = 1_700_000_000 * SECOND;
const FIXTURE_V2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/state-format-2.bin"
);
const FIXTURE_V3: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/state-format-3.bin"
);
const FIXTURE_V4: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/state-format-4.bin"
);
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/state-format-5.bin"
);

fn hier(project: &str, op: HierOp) -> Op {
    Op::Hier {
        project: project.into(),
        op,
    }
}

/// A state touching every part of project-lock and hierarchical: namespaces with metadata, leases, shared and
/// exclusive holds on nested paths, a queued waiter, expiry indexes.
fn sample_state() -> StateMachine {
    let mut sm = StateMachine::new(Limits::default());
    let meta: BTreeMap<String, String> = [("owner".to_string(), "team-a".to_string())].into();
    let mut ops = vec![Op::CreateProject { name: "p".into() }];
    for ns in ["alpha", "beta"] {
        ops.push(hier(
            "p",
            HierOp::CreateNamespace {
                name: ns.into(),
                description: format!("{ns} jobs"),
                metadata: meta.clone(),
            },
        ));
        for (i, lease) in ["l1", "l2", "l3"].iter().enumerate() {
            ops.push(hier(
                "p",
                HierOp::CreateLease {
                    namespace: ns.into(),
                    lease_id: lease.to_string(),
                    process_id: format!("worker-{i}"),
                    ttl_seconds: 60 + i as u64,
                },
            ));
        }
        for (lock, lease, exclusive) in [
            ("a", "l1", false),
            ("a/b", "l2", false),
            ("a/b/c", "l2", true),
            ("d", "l3", true),
        ] {
            ops.push(hier(
                "p",
                HierOp::AcquireLock {
                    namespace: ns.into(),
                    lock_name: lock.into(),
                    exclusive,
                    lease_id: lease.into(),
                    metadata: meta.clone(),
                    wait: None,
                },
            ));
        }
        ops.push(hier(
            "p",
            HierOp::AcquireLock {
                namespace: ns.into(),
                lock_name: "d".into(),
                exclusive: true,
                lease_id: "l1".into(),
                metadata: BTreeMap::new(),
                wait: Some(WaitSpec {
                    waiter_id: format!("w-{ns}"),
                    deadline: T0 + 30 * SECOND,
                }),
            },
        ));
    }
    for key in ["job-1", "job-2"] {
        ops.push(Op::ProjectLock {
            project: "p".into(),
            key: key.into(),
            action: LockAction::Acquire {
                token: 42,
                ttl_seconds: 30,
            },
        });
    }
    for out in sm.apply(&Command { stamp: T0, ops }) {
        out.expect("the sample's commands succeed");
    }
    sm
}

/// [`sample_state`] plus semaphores (two semaphores with holders of two leases, one queued
/// acquire, one lease with nothing held), two shared holders of one lock in an arrival order
/// other than their lease ids, a wait group with two of three jobs in, and a barrier that
/// tripped once and has one arrival in its second generation.
fn sample_state_with_semaphores() -> StateMachine {
    let mut sm = sample_state();
    let meta: BTreeMap<String, String> = [("vendor".to_string(), "partner-1".to_string())].into();
    let mut ops = vec![];
    for (name, permits) in [("partner_1", 5), ("partner_2", 2)] {
        ops.push(hier(
            "p",
            HierOp::CreateSemaphore {
                namespace: "alpha".into(),
                name: name.into(),
                spec: SemaphoreSpec {
                    description: format!("{name} API"),
                    permits,
                    metadata: meta.clone(),
                },
            },
        ));
    }
    for (i, lease) in ["s1", "s2", "s3"].iter().enumerate() {
        ops.push(hier(
            "p",
            HierOp::CreateSemaphoreLease {
                namespace: "alpha".into(),
                lease_id: lease.to_string(),
                process_id: format!("worker-{i}"),
                ttl_seconds: 60,
            },
        ));
    }
    for (name, lease, weight, wait) in [
        ("partner_1", "s1", 3, None),
        ("partner_1", "s2", 2, None),
        ("partner_2", "s1", 1, None),
        ("partner_1", "s3", 4, Some("sw-1")),
    ] {
        ops.push(hier(
            "p",
            HierOp::AcquireSemaphore {
                namespace: "alpha".into(),
                name: name.into(),
                lease_id: lease.into(),
                weight,
                metadata: meta.clone(),
                wait: wait.map(|id| WaitSpec {
                    waiter_id: id.into(),
                    deadline: T0 + 40 * SECOND,
                }),
            },
        ));
    }
    let ns = || "alpha".to_string();
    // Two shared holders whose arrival order is not their lease-id order.
    for lease in ["l3", "l1"] {
        ops.push(hier(
            "p",
            HierOp::AcquireLock {
                namespace: ns(),
                lock_name: "x".into(),
                exclusive: false,
                lease_id: lease.into(),
                metadata: BTreeMap::new(),
                wait: None,
            },
        ));
    }
    ops.push(hier(
        "p",
        HierOp::CreateWaitGroup {
            namespace: ns(),
            name: "batch".into(),
            spec: GroupSpec {
                description: "nightly".into(),
                counter: 3,
                expires_at: T0 + 3600 * SECOND,
                delete_after_finished_seconds: 600,
                metadata: meta.clone(),
            },
        },
    ));
    ops.push(hier(
        "p",
        HierOp::CompleteJobs {
            namespace: ns(),
            name: "batch".into(),
            jobs: vec![
                ("shard-0".into(), meta.clone()),
                ("shard-1".into(), BTreeMap::new()),
            ],
        },
    ));
    ops.push(hier(
        "p",
        HierOp::CreateBarrier {
            namespace: ns(),
            name: "phase".into(),
            spec: BarrierSpec {
                description: "end of map".into(),
                expected_processes: 2,
                delete_inactive_after_seconds: 3600,
                metadata: meta.clone(),
            },
        },
    ));
    for (process, generation) in [("a", 1), ("b", 1), ("a", 2)] {
        ops.push(hier(
            "p",
            HierOp::ArriveAtBarrier {
                namespace: ns(),
                name: "phase".into(),
                process_id: process.into(),
                expected_generation: generation,
                metadata: meta.clone(),
            },
        ));
    }
    for out in sm.apply(&Command {
        stamp: T0 + SECOND,
        ops,
    }) {
        out.expect("the sample's semaphore, wait-group and barrier commands succeed");
    }
    sm
}

/// The sample with semaphores, plus two data shards and a project placed on one.
fn sample_state_with_shards() -> StateMachine {
    let mut sm = sample_state_with_semaphores();
    let members = |ids: &[u64]| ids.iter().copied().collect();
    let ops = vec![
        Op::CreateShard {
            members: members(&[4, 5, 6]),
        },
        Op::CreateShard {
            members: members(&[1, 2, 3]),
        },
        Op::CreateProjectOn {
            name: "placed".into(),
            shard: 2,
        },
    ];
    for out in sm.apply(&Command {
        stamp: T0 + 2 * SECOND,
        ops,
    }) {
        out.expect("the sample's shard commands succeed");
    }
    sm
}

#[test]
fn a_format_4_state_converts_to_the_same_state_without_shards() {
    let fixture = std::fs::read(FIXTURE_V4).expect("fixture present");
    let v4: StateMachineV4 = codec::decode(&fixture).unwrap();
    let mut converted = StateMachine::from(v4);
    converted.count_usage();
    assert_eq!(converted, sample_state_with_semaphores());
    converted.check_usage().unwrap();
}

#[test]
fn the_state_encodes_to_the_bytes_of_the_format_5_release() {
    let state = sample_state_with_shards();
    assert_eq!(state.shards().shard_of("placed"), 2);
    let bytes = codec::encode(&state).unwrap();
    if std::env::var_os("RAFTLOCK_WRITE_FIXTURE").is_some() {
        std::fs::create_dir_all(std::path::Path::new(FIXTURE).parent().unwrap()).unwrap();
        std::fs::write(FIXTURE, &bytes).unwrap();
    }
    let fixture = std::fs::read(FIXTURE).expect("fixture present");
    assert_eq!(bytes, fixture, "the snapshot encoding changed");
    // The eligibility index is not in the bytes; decoding builds it.
    let mut decoded: StateMachine = codec::decode(&fixture).unwrap();
    assert_eq!(decoded, state);
    decoded.count_usage();
    decoded.check_usage().unwrap();
}

#[test]
fn a_format_3_state_converts_to_the_same_state() {
    let fixture = std::fs::read(FIXTURE_V3).expect("fixture present");
    let v3: StateMachineV3 = codec::decode(&fixture).unwrap();
    let mut converted = StateMachine::from(v3);
    converted.count_usage();
    assert_eq!(converted, sample_state_with_semaphores());
    converted.check_usage().unwrap();
    assert!(
        codec::encode(&converted).unwrap().len() < fixture.len(),
        "format 4 leaves the index out"
    );
}

#[test]
fn a_format_2_state_converts_to_the_same_state_without_semaphores() {
    let fixture = std::fs::read(FIXTURE_V2).expect("fixture present");
    let v2: StateMachineV2 = codec::decode(&fixture).unwrap();
    let mut converted = StateMachine::from(v2);
    assert_eq!(converted, sample_state());
    converted.count_usage();
    converted.check_usage().unwrap();
}

/// The create and update commands of semaphores, wait groups and barriers carry their fields
/// in a nested spec. The log's bytes must stay those of the flat fields earlier releases
/// wrote — the variant's index, the namespace, the name, the fields in order, then the
/// expected version — or a log written before could not be replayed.
#[test]
fn nested_specs_encode_as_the_flat_fields_of_earlier_releases() {
    let meta: BTreeMap<String, String> = [("vendor".to_string(), "partner-1".to_string())].into();
    let (ns, name) = ("alpha".to_string(), "x".to_string());
    let same = |op: HierOp, flat: Vec<u8>| {
        assert_eq!(codec::encode(&op).unwrap(), flat, "{op:?}");
        assert_eq!(codec::decode::<HierOp>(&flat).unwrap(), op);
    };
    let version = Some(3u64);

    let sem = SemaphoreSpec {
        description: "partner API".into(),
        permits: 5,
        metadata: meta.clone(),
    };
    let flat = (&ns, &name, &sem.description, sem.permits, &meta);
    let (namespace, n) = (ns.clone(), name.clone());
    same(
        HierOp::CreateSemaphore {
            namespace,
            name: n,
            spec: sem.clone(),
        },
        codec::encode(&(10u32, flat)).unwrap(),
    );
    let (namespace, n) = (ns.clone(), name.clone());
    same(
        HierOp::UpdateSemaphore {
            namespace,
            name: n,
            spec: sem.clone(),
            expected_version: version,
        },
        codec::encode(&(11u32, flat, version)).unwrap(),
    );

    let group = GroupSpec {
        description: "nightly".into(),
        counter: 3,
        expires_at: T0 + 3600 * SECOND,
        delete_after_finished_seconds: 600,
        metadata: meta.clone(),
    };
    let g = &group;
    let flat = (
        &ns,
        &name,
        &g.description,
        g.counter,
        g.expires_at,
        g.delete_after_finished_seconds,
        &meta,
    );
    let (namespace, n) = (ns.clone(), name.clone());
    same(
        HierOp::CreateWaitGroup {
            namespace,
            name: n,
            spec: group.clone(),
        },
        codec::encode(&(19u32, flat)).unwrap(),
    );
    let (namespace, n) = (ns.clone(), name.clone());
    same(
        HierOp::UpdateWaitGroup {
            namespace,
            name: n,
            spec: group.clone(),
            expected_version: version,
        },
        codec::encode(&(20u32, flat, version)).unwrap(),
    );

    let barrier = BarrierSpec {
        description: "end of map".into(),
        expected_processes: 2,
        delete_inactive_after_seconds: 3600,
        metadata: meta.clone(),
    };
    let b = &barrier;
    let flat = (
        &ns,
        &name,
        &b.description,
        b.expected_processes,
        b.delete_inactive_after_seconds,
        &meta,
    );
    let (namespace, n) = (ns.clone(), name.clone());
    same(
        HierOp::CreateBarrier {
            namespace,
            name: n,
            spec: barrier.clone(),
        },
        codec::encode(&(23u32, flat)).unwrap(),
    );
    let (namespace, n) = (ns.clone(), name.clone());
    same(
        HierOp::UpdateBarrier {
            namespace,
            name: n,
            spec: barrier.clone(),
            expected_version: version,
        },
        codec::encode(&(24u32, flat, version)).unwrap(),
    );
}
