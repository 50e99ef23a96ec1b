//! The replicated FIFO waiter queue of hierarchical blocking acquires.

use std::collections::BTreeMap;

use raftlock_core::hierarchy::{
    AcquireOutcome, AcquireReply, Hierarchy, LockState, QueuedAcquire, WaitSpec, WaitState,
};
use raftlock_core::{CoreError, Nanos, SECOND};

const P: &str = "p";
const NS: &str = "ns";
const T0: Nanos = 1_700_000_000 * SECOND;

fn s(n: i64) -> Nanos {
    T0 + n * SECOND
}

fn setup(leases: &[&str]) -> Hierarchy {
    let mut h = Hierarchy::with_quotas(Default::default());
    h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(0))
        .unwrap();
    for l in leases {
        h.create_lease(P, NS, l, "proc", 300, s(0)).unwrap();
    }
    h
}

fn wait(id: &str, deadline: Nanos) -> WaitSpec {
    WaitSpec {
        waiter_id: id.into(),
        deadline,
    }
}

fn acq(
    h: &mut Hierarchy,
    lease: &str,
    name: &str,
    x: bool,
    t: Nanos,
    w: Option<&WaitSpec>,
) -> AcquireReply {
    let r = h
        .acquire(P, NS, name, x, lease, BTreeMap::new(), t, w)
        .unwrap();
    h.check_invariants().unwrap();
    r
}

/// The queued acquire of `name` under `lease`, exclusive or not, with waiter id `id`.
fn queued<'a>(name: &'a str, lease: &'a str, x: bool, id: &'a str) -> QueuedAcquire<'a, bool> {
    QueuedAcquire {
        name,
        lease_id: lease,
        asked: x,
        waiter_id: id,
    }
}

fn state(h: &Hierarchy, lease: &str, name: &str, x: bool, id: &str, t: Nanos) -> WaitState {
    h.waiter_state(P, NS, queued(name, lease, x, id), t)
        .unwrap()
}

#[test]
fn release_hands_the_lock_to_the_head_waiter_in_the_same_apply() {
    let mut h = setup(&["a", "b"]);
    assert_eq!(
        acq(&mut h, "a", "x", true, s(1), None).outcome,
        AcquireOutcome::Acquired
    );
    let w = wait("w1", s(100));
    assert_eq!(
        acq(&mut h, "b", "x", true, s(2), Some(&w)).outcome,
        AcquireOutcome::Unavailable
    );
    assert_eq!(state(&h, "b", "x", true, "w1", s(2)), WaitState::Queued);
    h.release(P, NS, "x", "a", s(3)).unwrap();
    h.check_invariants().unwrap();
    assert_eq!(state(&h, "b", "x", true, "w1", s(3)), WaitState::Granted);
    let lock = h.get_lock(P, NS, "x", s(3)).unwrap();
    assert_eq!(lock.lock_holders[0].lease_id, "b");
    assert_eq!(lock.state, LockState::ExclusiveLocked);
}

#[test]
fn an_exclusive_waiter_is_not_starved_by_later_shared_requests() {
    let mut h = setup(&["s1", "xw", "s2", "s3"]);
    acq(&mut h, "s1", "r", false, s(1), None);
    let xw = wait("x", s(100));
    acq(&mut h, "xw", "r", true, s(2), Some(&xw));
    // A later shared request would be compatible with the holder, but must queue behind.
    let later = acq(&mut h, "s2", "r", false, s(3), None);
    assert_eq!(
        later.outcome,
        AcquireOutcome::Unavailable,
        "no overtaking a queued waiter"
    );
    let s2w = wait("s2w", s(100));
    let s3w = wait("s3w", s(100));
    acq(&mut h, "s2", "r", false, s(3), Some(&s2w));
    acq(&mut h, "s3", "r", false, s(3), Some(&s3w));
    h.release(P, NS, "r", "s1", s(4)).unwrap();
    assert_eq!(
        state(&h, "xw", "r", true, "x", s(4)),
        WaitState::Granted,
        "exclusive served first"
    );
    assert_eq!(state(&h, "s2", "r", false, "s2w", s(4)), WaitState::Queued);
    h.release(P, NS, "r", "xw", s(5)).unwrap();
    h.check_invariants().unwrap();
    // Compatible shared waiters at the head are granted together.
    assert_eq!(state(&h, "s2", "r", false, "s2w", s(5)), WaitState::Granted);
    assert_eq!(state(&h, "s3", "r", false, "s3w", s(5)), WaitState::Granted);
    assert_eq!(h.get_lock(P, NS, "r", s(5)).unwrap().lock_holders.len(), 2);
}

#[test]
fn timeout_zero_never_queues() {
    let mut h = setup(&["a", "b"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", true, s(2), None);
    h.release(P, NS, "x", "a", s(3)).unwrap();
    assert_eq!(
        h.get_lock(P, NS, "x", s(3)).unwrap().state,
        LockState::Unlocked
    );
    assert_eq!(h.waiter_count(), 0);
}

#[test]
fn cancel_reports_a_grant_that_already_happened_and_otherwise_times_out() {
    let mut h = setup(&["a", "b", "c"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", true, s(1), Some(&wait("wb", s(100))));
    acq(&mut h, "c", "x", true, s(1), Some(&wait("wc", s(100))));
    h.release(P, NS, "x", "a", s(2)).unwrap();
    let granted = h
        .cancel_wait(P, NS, queued("x", "b", true, "wb"), s(3))
        .unwrap();
    assert_eq!(
        granted.outcome,
        AcquireOutcome::Acquired,
        "granted before the cancel arrived"
    );
    let timed_out = h
        .cancel_wait(P, NS, queued("x", "c", true, "wc"), s(3))
        .unwrap();
    assert_eq!(timed_out.outcome, AcquireOutcome::TimedOut);
    h.release(P, NS, "x", "b", s(4)).unwrap();
    assert_eq!(
        h.get_lock(P, NS, "x", s(4)).unwrap().state,
        LockState::Unlocked,
        "never granted after TIMED_OUT"
    );
    h.check_invariants().unwrap();
}

#[test]
fn waiters_past_their_deadline_are_dropped_and_never_granted() {
    let mut h = setup(&["a", "b"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", true, s(1), Some(&wait("wb", s(10))));
    h.reap(s(10));
    assert_eq!(state(&h, "b", "x", true, "wb", s(10)), WaitState::Dropped);
    h.release(P, NS, "x", "a", s(11)).unwrap();
    assert_eq!(
        h.get_lock(P, NS, "x", s(11)).unwrap().state,
        LockState::Unlocked
    );
}

#[test]
fn a_waiter_whose_lease_ends_leaves_the_queue_and_the_next_one_is_served() {
    let mut h = Hierarchy::with_quotas(Default::default());
    h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(0))
        .unwrap();
    h.create_lease(P, NS, "holder", "p", 300, s(0)).unwrap();
    h.create_lease(P, NS, "short", "p", 5, s(0)).unwrap();
    h.create_lease(P, NS, "long", "p", 300, s(0)).unwrap();
    acq(&mut h, "holder", "x", true, s(1), None);
    acq(&mut h, "short", "x", true, s(1), Some(&wait("ws", s(100))));
    acq(&mut h, "long", "x", true, s(1), Some(&wait("wl", s(100))));
    h.reap(s(5));
    h.check_invariants().unwrap();
    assert_eq!(
        h.waiter_state(P, NS, queued("x", "short", true, "ws"), s(5)),
        Err(CoreError::NotFound("lease".into()))
    );
    h.revoke_lease(P, NS, "holder", s(6)).unwrap();
    assert_eq!(state(&h, "long", "x", true, "wl", s(6)), WaitState::Granted);
}

#[test]
fn a_retry_with_the_same_waiter_id_keeps_its_place() {
    let mut h = setup(&["a", "b", "c"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", true, s(1), Some(&wait("wb", s(100))));
    acq(&mut h, "c", "x", true, s(2), Some(&wait("wc", s(100))));
    acq(&mut h, "b", "x", true, s(3), Some(&wait("wb", s(100))));
    assert_eq!(h.waiter_count(), 2, "no duplicate entry");
    h.release(P, NS, "x", "a", s(4)).unwrap();
    assert_eq!(
        state(&h, "b", "x", true, "wb", s(4)),
        WaitState::Granted,
        "still first"
    );
}

#[test]
fn a_waiter_blocked_by_an_ancestor_is_served_when_the_ancestor_is_released() {
    let mut h = setup(&["a", "b", "c"]);
    acq(&mut h, "a", "users", true, s(1), None);
    acq(
        &mut h,
        "b",
        "users/1/profile",
        false,
        s(1),
        Some(&wait("wb", s(100))),
    );
    acq(&mut h, "c", "users", false, s(1), Some(&wait("wc", s(100))));
    h.release(P, NS, "users", "a", s(2)).unwrap();
    h.check_invariants().unwrap();
    assert_eq!(
        state(&h, "b", "users/1/profile", false, "wb", s(2)),
        WaitState::Granted
    );
    assert_eq!(
        state(&h, "c", "users", false, "wc", s(2)),
        WaitState::Granted,
        "shared/shared is compatible"
    );
}

#[test]
fn a_downgrade_by_the_holder_bypasses_the_queue_and_wakes_shared_waiters() {
    let mut h = setup(&["a", "b"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", false, s(1), Some(&wait("wb", s(100))));
    assert_eq!(
        acq(&mut h, "a", "x", false, s(2), None).outcome,
        AcquireOutcome::Acquired
    );
    assert_eq!(state(&h, "b", "x", false, "wb", s(2)), WaitState::Granted);
    assert_eq!(
        h.get_lock(P, NS, "x", s(2)).unwrap().state,
        LockState::SharedLocked
    );
}

#[test]
fn deleting_the_namespace_ends_every_wait_with_not_found() {
    let mut h = setup(&["a", "b"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", true, s(1), Some(&wait("wb", s(100))));
    h.delete_namespace(P, NS).unwrap();
    assert_eq!(
        h.waiter_state(P, NS, queued("x", "b", true, "wb"), s(2)),
        Err(CoreError::NotFound("namespace".into()))
    );
    h.reap(s(200));
    assert_eq!(h.waiter_count(), 0);
}

#[test]
fn grants_from_the_queue_respect_the_lock_quota() {
    use raftlock_core::hierarchy::Quotas;
    let mut h = Hierarchy::with_quotas(Quotas {
        locks_per_namespace: 2,
        ..Quotas::default()
    });
    h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(0))
        .unwrap();
    for l in ["a", "b", "w"] {
        h.create_lease(P, NS, l, "proc", 300, s(0)).unwrap();
    }
    acq(&mut h, "a", "top", true, s(1), None);
    acq(&mut h, "b", "other", true, s(1), None);
    acq(
        &mut h,
        "w",
        "top/child",
        false,
        s(1),
        Some(&wait("ww", s(100))),
    );
    // The downgrade makes the waiter compatible, but granting it would be a third lock.
    assert_eq!(
        acq(&mut h, "a", "top", false, s(2), None).outcome,
        AcquireOutcome::Acquired
    );
    assert_eq!(
        state(&h, "w", "top/child", false, "ww", s(2)),
        WaitState::Dropped
    );
    assert_eq!(
        h.get_lock(P, NS, "top/child", s(2)).unwrap().state,
        LockState::Unlocked
    );
}

#[test]
fn a_cancel_touches_only_the_callers_own_waiter_and_a_refused_one_changes_nothing() {
    let mut h = setup(&["a", "b", "c"]);
    acq(&mut h, "a", "x", true, s(1), None);
    acq(&mut h, "b", "x", true, s(1), Some(&wait("wb", s(100))));
    let before = h.clone();
    // Another lease naming b's waiter id, and an unknown lease: neither removes it.
    let other = h
        .cancel_wait(P, NS, queued("x", "c", true, "wb"), s(2))
        .unwrap();
    assert_eq!(other.outcome, AcquireOutcome::TimedOut);
    assert_eq!(state(&h, "b", "x", true, "wb", s(2)), WaitState::Queued);
    assert_eq!(
        h.cancel_wait(P, NS, queued("x", "nope", true, "wb"), s(2)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(h, before, "nothing changed");
    h.check_invariants().unwrap();
}

#[test]
fn a_lease_may_queue_at_most_its_budget_of_blocking_acquires() {
    use raftlock_core::hierarchy::MAX_WAITERS_PER_LEASE;
    let mut h = setup(&["holder", "greedy", "other"]);
    let n = MAX_WAITERS_PER_LEASE;
    for i in 0..=n {
        acq(&mut h, "holder", &format!("l{i}"), true, s(1), None);
    }
    for i in 0..n {
        let w = wait(&format!("w{i}"), s(100));
        let r = acq(&mut h, "greedy", &format!("l{i}"), true, s(2), Some(&w));
        assert_eq!(r.outcome, AcquireOutcome::Unavailable);
    }
    let before = h.clone();
    let over = wait("one-too-many", s(100));
    let refused = h.acquire(
        P,
        NS,
        &format!("l{n}"),
        true,
        "greedy",
        BTreeMap::new(),
        s(2),
        Some(&over),
    );
    assert!(
        matches!(refused, Err(CoreError::ResourceExhausted(_))),
        "{refused:?}"
    );
    assert_eq!(h, before, "a refused wait changes nothing");
    // Another lease still queues; a waiter that leaves frees a place.
    let w = wait("fine", s(100));
    assert_eq!(
        acq(&mut h, "other", &format!("l{n}"), true, s(2), Some(&w)).outcome,
        AcquireOutcome::Unavailable
    );
    h.release(P, NS, "l0", "holder", s(3)).unwrap();
    assert_eq!(
        state(&h, "greedy", "l0", true, "w0", s(3)),
        WaitState::Granted
    );
    let again = acq(&mut h, "greedy", &format!("l{n}"), true, s(3), Some(&over));
    assert_eq!(again.outcome, AcquireOutcome::Unavailable);
}

/// Fills `project`'s waiter budget from `namespaces` namespaces, one holder lock per namespace
/// and `per_lease` waits per waiting lease. Returns how many waits were queued.
fn fill_project(h: &mut Hierarchy, namespaces: &[&str], meta: &BTreeMap<String, String>) -> usize {
    use raftlock_core::hierarchy::MAX_WAITERS_PER_LEASE;
    let mut queued = 0;
    for ns in namespaces {
        if *ns != NS {
            h.create_namespace(P, ns, String::new(), BTreeMap::new(), s(0))
                .unwrap();
        }
        h.create_lease(P, ns, "holder", "proc", 300, s(0)).unwrap();
        h.acquire(P, ns, "top", true, "holder", BTreeMap::new(), s(1), None)
            .unwrap();
    }
    for i in 0.. {
        let ns = namespaces[i % namespaces.len()];
        let lease = format!("w{i}");
        h.create_lease(P, ns, &lease, "proc", 300, s(1)).unwrap();
        for j in 0..MAX_WAITERS_PER_LEASE {
            let w = wait(&format!("{lease}-{j}"), s(100));
            let name = format!("top/{lease}/{j}");
            match h.acquire(P, ns, &name, true, &lease, meta.clone(), s(2), Some(&w)) {
                Ok(r) => {
                    assert_eq!(r.outcome, AcquireOutcome::Unavailable);
                    queued += 1;
                }
                Err(CoreError::ResourceExhausted(_)) => return queued,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    unreachable!()
}

#[test]
fn a_project_may_queue_at_most_its_budget_of_blocking_acquires_over_all_namespaces() {
    use raftlock_core::hierarchy::MAX_WAITERS_PER_PROJECT;
    let mut h = setup(&[]);
    let queued = fill_project(&mut h, &[NS, "second", "third"], &BTreeMap::new());
    assert_eq!(queued, MAX_WAITERS_PER_PROJECT);
    assert_eq!(h.waiter_usage(P).count, MAX_WAITERS_PER_PROJECT);
    // The server's pre-check refuses the next wait too, and admits one that is granted now.
    let w = wait("pre", s(100));
    h.create_lease(P, NS, "late", "proc", 300, s(2)).unwrap();
    let blocked = h.check_wait_budget(P, NS, "top/x", true, "late", &BTreeMap::new(), &w, s(2));
    assert!(
        matches!(blocked, Err(CoreError::ResourceExhausted(_))),
        "{blocked:?}"
    );
    let free = h.check_wait_budget(P, NS, "elsewhere", true, "late", &BTreeMap::new(), &w, s(2));
    assert_eq!(free, Ok(()));
    // Another project is not affected.
    h.create_namespace("q", NS, String::new(), BTreeMap::new(), s(2))
        .unwrap();
    assert_eq!(h.waiter_usage("q").count, 0);
    h.check_invariants().unwrap();
}

#[test]
fn waiters_with_large_metadata_are_bounded_by_bytes() {
    use raftlock_core::hierarchy::{MAX_WAITERS_PER_PROJECT, MAX_WAITER_BYTES_PER_PROJECT};
    let meta: BTreeMap<String, String> = (0..32)
        .map(|i| (format!("{i:0>128}"), "v".repeat(256)))
        .collect();
    let mut h = setup(&[]);
    let queued = fill_project(&mut h, &[NS], &meta);
    let usage = h.waiter_usage(P);
    assert!(queued < MAX_WAITERS_PER_PROJECT / 4, "{queued}");
    assert!(usage.bytes <= MAX_WAITER_BYTES_PER_PROJECT, "{usage:?}");
    assert!(
        usage.bytes > MAX_WAITER_BYTES_PER_PROJECT - 20_000,
        "{usage:?}"
    );
}

#[test]
fn every_waiter_that_leaves_its_queue_is_reported_once() {
    let mut h = setup(&["a", "b", "c", "d"]);
    acq(&mut h, "a", "x", true, s(1), None);
    for (lease, id) in [("b", "wb"), ("c", "wc"), ("d", "wd")] {
        let w = wait(id, if id == "wd" { s(5) } else { s(100) });
        acq(&mut h, lease, "x", true, s(2), Some(&w));
    }
    assert!(
        h.take_resolved_waiters().is_empty(),
        "queueing resolves nothing"
    );
    h.release(P, NS, "x", "a", s(3)).unwrap(); // granted to b
    assert_eq!(h.take_resolved_waiters(), vec!["wb".to_string()]);
    assert!(h.take_resolved_waiters().is_empty(), "reported once");
    h.reap(s(6)); // wd's deadline passed
    assert_eq!(h.take_resolved_waiters(), vec!["wd".to_string()]);
    h.delete_namespace(P, NS).unwrap(); // wc goes with its namespace
    assert_eq!(h.take_resolved_waiters(), vec!["wc".to_string()]);
}
