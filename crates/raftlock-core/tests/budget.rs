//! Per-project byte budgets: what a project stores is charged, a change past the budget is
//! refused with `resource_exhausted` and changes nothing, and freeing state frees budget.

use std::collections::BTreeMap;

use raftlock_core::budget;
use raftlock_core::hierarchy::{AcquireOutcome, Hierarchy, Quotas};
use raftlock_core::project_locks::ProjectLocks;
use raftlock_core::{codec, CoreError, Nanos, StateMachine, SECOND};

const T0: Nanos = 1_700_000_000 * SECOND;

fn exhausted<T: std::fmt::Debug>(r: Result<T, CoreError>) -> bool {
    matches!(r, Err(CoreError::ResourceExhausted(_)))
}

fn meta(bytes: usize) -> BTreeMap<String, String> {
    (0..bytes.div_ceil(256))
        .map(|i| (format!("k{i}"), "v".repeat(256)))
        .collect()
}

/// A hierarchical hierarchy with one namespace in projects "p" and "q", budget `quota` bytes.
fn hierarchy(quota: usize) -> Hierarchy {
    let mut h = Hierarchy::with_quotas(Quotas::default()).with_byte_quota(quota);
    for p in ["p", "q"] {
        h.create_namespace(p, "ns", String::new(), BTreeMap::new(), T0)
            .unwrap();
    }
    h
}

#[test]
fn a_project_past_its_byte_budget_is_refused_and_changes_nothing() {
    let mut h = hierarchy(16 << 10);
    let mut leases: usize = 0;
    loop {
        let id = format!("lease-{leases}");
        match h.create_lease("p", "ns", &id, "proc", 300, T0) {
            Ok(_) => leases += 1,
            Err(e) => {
                assert!(matches!(e, CoreError::ResourceExhausted(_)), "{e:?}");
                break;
            }
        }
        h.check_invariants().unwrap();
    }
    let fit = ((16 << 10) - budget::namespace_bytes("", &BTreeMap::new()))
        / budget::lease_bytes("lease-00", "proc");
    assert!(
        leases.abs_diff(fit) <= 1,
        "{leases} leases fit, {fit} expected"
    );
    assert!(h.stored_bytes("p") <= 16 << 10);
    let before = (h.clone(), h.stored_bytes("p"));
    assert!(exhausted(
        h.create_lease("p", "ns", "one-more", "proc", 300, T0)
    ));
    assert!(exhausted(h.create_namespace(
        "p",
        "ns2",
        String::new(),
        BTreeMap::new(),
        T0
    )));
    assert!(exhausted(h.acquire(
        "p",
        "ns",
        "a/b",
        true,
        "lease-0",
        meta(1024),
        T0,
        None
    )));
    assert!(exhausted(h.update_namespace(
        "p",
        "ns",
        "x".repeat(1024),
        BTreeMap::new(),
        None,
        T0
    )));
    assert_eq!(
        (h.clone(), h.stored_bytes("p")),
        before,
        "refusals change nothing"
    );
    h.check_invariants().unwrap();

    // Another project has its own budget.
    h.create_lease("q", "ns", "l", "proc", 300, T0).unwrap();
    // Freeing state frees budget.
    h.revoke_lease("p", "ns", "lease-0", T0).unwrap();
    h.create_lease("p", "ns", "lease-again", "proc", 300, T0)
        .unwrap();
    h.check_invariants().unwrap();
}

#[test]
fn a_holder_at_the_budget_keeps_its_hold_and_releasing_frees_it() {
    let mut h = hierarchy(8 << 10);
    h.create_lease("p", "ns", "l", "proc", 300, T0).unwrap();
    let big = meta(4 << 10);
    let r = h
        .acquire("p", "ns", "job", true, "l", big.clone(), T0, None)
        .unwrap();
    assert_eq!(r.outcome, AcquireOutcome::Acquired);
    let room = (8 << 10) - h.stored_bytes("p");
    // A second hold as big no longer fits…
    assert!(room < budget::holder_bytes("job2", "l", &big));
    assert!(exhausted(h.acquire(
        "p",
        "ns",
        "job2",
        true,
        "l",
        big.clone(),
        T0,
        None
    )));
    // …but re-acquiring (a refresh, even a mode change) costs nothing: the holder keeps its
    // metadata; releasing frees it.
    let full = h.stored_bytes("p");
    h.acquire("p", "ns", "job", true, "l", big, T0, None)
        .unwrap();
    h.acquire("p", "ns", "job", false, "l", BTreeMap::new(), T0, None)
        .unwrap();
    assert_eq!(h.stored_bytes("p"), full);
    h.release("p", "ns", "job", "l", T0).unwrap();
    assert!(h.stored_bytes("p") < full);
    h.check_invariants().unwrap();
    // Expiry frees the lease and its holds.
    h.reap(T0 + 301 * SECOND);
    h.check_invariants().unwrap();
    assert_eq!(
        h.stored_bytes("p"),
        budget::namespace_bytes("", &BTreeMap::new())
    );
}

#[test]
fn deleting_a_namespace_returns_its_bytes() {
    let mut h = hierarchy(1 << 20);
    h.create_lease("p", "ns", "l", "proc", 300, T0).unwrap();
    h.acquire("p", "ns", "a/b/c", true, "l", meta(512), T0, None)
        .unwrap();
    assert!(h.stored_bytes("p") > 1024);
    h.delete_namespace("p", "ns").unwrap();
    assert_eq!(h.stored_bytes("p"), 0);
    h.check_invariants().unwrap();
}

#[test]
fn section_4_keys_are_charged_and_refused_past_the_budget() {
    let quota = 4 << 10;
    let mut locks = ProjectLocks::with_byte_quota(quota);
    let mut keys = 0;
    while locks
        .acquire("p", &format!("key-{keys:04}"), 1, 60, T0)
        .is_ok()
    {
        keys += 1;
    }
    assert_eq!(keys, quota / budget::lock_key_bytes("key-0000"));
    let before = locks.clone();
    assert!(exhausted(locks.acquire("p", "one-more", 1, 60, T0)));
    assert_eq!(locks, before, "a refusal changes nothing");
    // The holder renews and re-acquires; another project is untouched.
    locks.renew("p", "key-0000", 1, 60, T0).unwrap();
    locks.acquire("p", "key-0000", 1, 60, T0).unwrap();
    locks.acquire("q", "key-0000", 1, 60, T0).unwrap();
    // A release, and expiry, free budget.
    locks.release("p", "key-0000", 1, T0).unwrap();
    locks.acquire("p", "fresh", 1, 60, T0).unwrap();
    locks.reap(T0 + 62 * SECOND);
    assert_eq!(locks.stored_bytes("p"), 0);
    assert_eq!(locks.stored_bytes("q"), 0);
}

#[test]
fn counts_survive_encoding_and_match_counting_from_scratch() {
    let mut sm = StateMachine::default();
    let mut h_cmds = Vec::new();
    for p in ["p", "q"] {
        h_cmds.push(raftlock_core::Op::Hier {
            project: p.into(),
            op: raftlock_core::command::HierOp::CreateNamespace {
                name: "ns".into(),
                description: "d".repeat(100),
                metadata: meta(300),
            },
        });
        h_cmds.push(raftlock_core::Op::ProjectLock {
            project: p.into(),
            key: "k".into(),
            action: raftlock_core::command::LockAction::Acquire {
                token: 7,
                ttl_seconds: 60,
            },
        });
    }
    for out in sm.apply(&raftlock_core::Command {
        stamp: T0,
        ops: h_cmds,
    }) {
        out.unwrap();
    }
    let stored = sm.stored_bytes("p");
    assert_eq!(stored.0, budget::lock_key_bytes("k"));
    assert_eq!(
        stored.1,
        budget::namespace_bytes(&"d".repeat(100), &meta(300))
    );
    let bytes = codec::encode(&sm).unwrap();
    let mut decoded: StateMachine = codec::decode(&bytes).unwrap();
    // Counted on demand before `count_usage`, kept after it: the same either way.
    assert_eq!(decoded.stored_bytes("p"), stored);
    decoded.count_usage();
    assert_eq!(decoded.stored_bytes("p"), stored);
    assert_eq!(decoded.stored_bytes("q"), stored);
    decoded.hierarchy().check_invariants().unwrap();
}
