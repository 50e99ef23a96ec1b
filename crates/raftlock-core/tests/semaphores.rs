//! Semaphores through the state machine: each documented rule as a scenario, and property
//! tests over random operation sequences (with lease expiries, deadlines, updates, deletes)
//! that check every invariant after every step — above all that the weight held never
//! exceeds `permits` at any instant of the machine's time.

mod common;

use std::collections::BTreeMap;

use common::{hier, World, T0};
use proptest::prelude::*;
use raftlock_core::command::HierOp;
use raftlock_core::hierarchy::{AcquireOutcome, QueuedAcquire, WaitSpec};
use raftlock_core::semaphores::{
    SemAcquireReply, SemaphoreSpec, SemaphoreView, MAX_HOLDERS_PER_SEMAPHORE,
};
use raftlock_core::{codec, Command, CoreError, Op, Outcome, Reply, StateMachine, SECOND};

const NS: &str = "jobs";

impl World {
    fn ok(&mut self, op: Op) -> Reply {
        self.apply(op).expect("succeeds")
    }

    fn create(&mut self, name: &str, permits: u64) -> SemaphoreView {
        match self.ok(hier(HierOp::CreateSemaphore {
            namespace: NS.into(),
            name: name.into(),
            spec: SemaphoreSpec {
                description: String::new(),
                permits,
                metadata: BTreeMap::new(),
            },
        })) {
            Reply::Semaphore(s) => s,
            other => panic!("{other:?}"),
        }
    }

    fn lease(&mut self, id: &str, ttl: u64) {
        self.ok(hier(HierOp::CreateSemaphoreLease {
            namespace: NS.into(),
            lease_id: id.into(),
            process_id: format!("proc-{id}"),
            ttl_seconds: ttl,
        }));
    }

    fn acquire(
        &mut self,
        sem: &str,
        lease: &str,
        weight: u64,
        wait: Option<&str>,
    ) -> Result<SemAcquireReply, CoreError> {
        let wait = wait.map(|id| WaitSpec {
            waiter_id: id.into(),
            deadline: self.t + 30 * SECOND,
        });
        self.apply(hier(HierOp::AcquireSemaphore {
            namespace: NS.into(),
            name: sem.into(),
            lease_id: lease.into(),
            weight,
            metadata: [("who".to_string(), lease.to_string())].into(),
            wait,
        }))
        .map(|r| match r {
            Reply::SemaphoreAcquire(a) => a,
            other => panic!("{other:?}"),
        })
    }

    fn release(&mut self, sem: &str, lease: &str) -> Outcome {
        self.apply(hier(HierOp::ReleaseSemaphore {
            namespace: NS.into(),
            name: sem.into(),
            lease_id: lease.into(),
        }))
    }

    fn get(&self, sem: &str) -> SemaphoreView {
        let s = self.sm.semaphores_in("p", NS).unwrap();
        s.get_semaphore("p", NS, sem, self.t).unwrap()
    }

    fn holders(&self, sem: &str) -> Vec<(String, u64)> {
        let s = self.sm.semaphores_in("p", NS).unwrap();
        let (holders, _, _) = s.list_holders("p", NS, sem, "", 0, self.t).unwrap();
        holders
            .into_iter()
            .map(|h| (h.lease_id, h.weight))
            .collect()
    }

    fn resolved(&mut self) -> Vec<String> {
        self.sm.take_resolved_waiters()
    }
}

#[test]
fn create_get_list_and_their_errors() {
    let mut w = World::new(NS);
    let s = w.create("partner_1", 20);
    assert_eq!((s.permits, s.active_holds, s.version), (20, 0, 1));
    assert_eq!(s.last_activity_at, w.t);
    let again = w.apply(hier(HierOp::CreateSemaphore {
        namespace: NS.into(),
        name: "partner_1".into(),
        spec: SemaphoreSpec {
            description: String::new(),
            permits: 1,
            metadata: BTreeMap::new(),
        },
    }));
    assert_eq!(again, Err(CoreError::AlreadyExists("semaphore".into())));
    let zero = w.apply(hier(HierOp::CreateSemaphore {
        namespace: NS.into(),
        name: "z".into(),
        spec: SemaphoreSpec {
            description: String::new(),
            permits: 0,
            metadata: BTreeMap::new(),
        },
    }));
    assert!(matches!(zero, Err(CoreError::Invalid { ref field, .. }) if field == "permits"));
    let no_ns = w.apply(Op::Hier {
        project: "p".into(),
        op: HierOp::CreateSemaphore {
            namespace: "nope".into(),
            name: "x".into(),
            spec: SemaphoreSpec {
                description: String::new(),
                permits: 1,
                metadata: BTreeMap::new(),
            },
        },
    });
    assert_eq!(no_ns, Err(CoreError::NotFound("namespace".into())));
    w.create("partner_0", 1);
    let s = w.sm.semaphores_in("p", NS).unwrap();
    let (page, next, _) = s.list_semaphores("p", NS, "", 1, w.t).unwrap();
    assert_eq!(page[0].name, "partner_0");
    let (page, _, _) = s.list_semaphores("p", NS, &next, 1, w.t).unwrap();
    assert_eq!(page[0].name, "partner_1");
    assert_eq!(
        w.sm.semaphores_in("p", "nope").unwrap_err(),
        CoreError::NotFound("namespace".into())
    );
}

#[test]
fn acquires_are_all_or_none_and_weight_above_permits_is_refused() {
    let mut w = World::new(NS);
    w.create("s", 5);
    for l in ["a", "b", "c"] {
        w.lease(l, 60);
    }
    let a = w.acquire("s", "a", 3, None).unwrap();
    assert_eq!(
        (a.outcome, a.semaphore.active_holds),
        (AcquireOutcome::Acquired, 3)
    );
    assert!(a.fencing_token > 0);
    let b = w.acquire("s", "b", 3, None).unwrap();
    assert_eq!(
        (b.outcome, b.fencing_token),
        (AcquireOutcome::Unavailable, 0)
    );
    assert_eq!(
        b.semaphore.active_holds, 3,
        "nothing of an all-or-none acquire is held"
    );
    let b = w.acquire("s", "b", 2, None).unwrap();
    assert_eq!(b.outcome, AcquireOutcome::Acquired);
    assert!(b.fencing_token > a.fencing_token);
    assert_eq!(
        (b.semaphore.active_holds, b.semaphore.active_holders_count),
        (5, 2)
    );
    let too_heavy = w.acquire("s", "c", 6, None).unwrap_err();
    assert!(matches!(too_heavy, CoreError::Conflict { ref field, .. } if field == "weight"));
    assert_eq!(
        w.acquire("nope", "c", 1, None).unwrap_err(),
        CoreError::NotFound("semaphore".into())
    );
    assert_eq!(
        w.acquire("s", "ghost", 1, None).unwrap_err(),
        CoreError::NotFound("lease".into())
    );
}

#[test]
fn a_re_acquire_keeps_the_token_and_sets_the_weight() {
    let mut w = World::new(NS);
    w.create("s", 5);
    w.lease("a", 60);
    w.lease("b", 60);
    let first = w.acquire("s", "a", 4, None).unwrap();
    let down = w.acquire("s", "a", 1, None).unwrap();
    assert_eq!(down.fencing_token, first.fencing_token);
    assert_eq!(down.semaphore.active_holds, 1);
    assert_eq!(
        w.acquire("s", "b", 3, None).unwrap().outcome,
        AcquireOutcome::Acquired
    );
    // Up to 2 fits beside b's 3; 3 does not.
    assert_eq!(
        w.acquire("s", "a", 3, None).unwrap().outcome,
        AcquireOutcome::Unavailable
    );
    assert_eq!(w.get("s").active_holds, 4);
    let up = w.acquire("s", "a", 2, None).unwrap();
    assert_eq!(
        (up.outcome, up.fencing_token),
        (AcquireOutcome::Acquired, first.fencing_token)
    );
    assert_eq!(w.holders("s"), vec![("a".into(), 2), ("b".into(), 3)]);
}

#[test]
fn holders_are_listed_in_arrival_order() {
    let mut w = World::new(NS);
    w.create("s", 10);
    for l in ["zz", "mm", "aa"] {
        w.lease(l, 60);
        w.acquire("s", l, 1, None).unwrap();
    }
    let order: Vec<String> = w.holders("s").into_iter().map(|h| h.0).collect();
    assert_eq!(order, ["zz", "mm", "aa"]);
    let s = w.sm.semaphores_in("p", NS).unwrap();
    let (page, next, prev) = s.list_holders("p", NS, "s", "", 2, w.t).unwrap();
    assert_eq!((page.len(), prev.is_empty()), (2, true));
    let (rest, next2, _) = s.list_holders("p", NS, "s", &next, 2, w.t).unwrap();
    assert_eq!((rest[0].lease_id.as_str(), next2.is_empty()), ("aa", true));
}

#[test]
fn the_queue_is_fifo_and_nobody_overtakes_its_head() {
    let mut w = World::new(NS);
    w.create("s", 5);
    for l in ["a", "b", "c", "d", "e"] {
        w.lease(l, 60);
    }
    w.acquire("s", "a", 3, None).unwrap();
    w.acquire("s", "b", 2, None).unwrap();
    let c = w.acquire("s", "c", 4, Some("wc")).unwrap();
    assert_eq!(c.outcome, AcquireOutcome::Unavailable);
    let d = w.acquire("s", "d", 1, Some("wd")).unwrap();
    assert_eq!(d.outcome, AcquireOutcome::Unavailable);
    // A retry of a queued call neither queues twice nor moves it.
    assert_eq!(
        w.acquire("s", "c", 4, Some("wc")).unwrap().outcome,
        AcquireOutcome::Unavailable
    );
    w.resolved();
    // 3 free, the head wants 4: nobody is granted, not even d (1 would fit).
    w.release("s", "a").unwrap();
    assert_eq!(w.holders("s"), vec![("b".into(), 2)]);
    // A newcomer does not overtake the queue either, though it would fit.
    assert_eq!(
        w.acquire("s", "e", 1, None).unwrap().outcome,
        AcquireOutcome::Unavailable
    );
    assert!(w.resolved().is_empty());
    // 5 free: c (4) then d (1), in one apply.
    w.release("s", "b").unwrap();
    assert_eq!(w.holders("s"), vec![("c".into(), 4), ("d".into(), 1)]);
    assert_eq!(w.resolved(), ["wc", "wd"]);
    let s = w.sm.semaphores_in("p", NS).unwrap();
    let state = s
        .waiter_state("p", NS, queued("s", "c", 4, "wc"), w.t)
        .unwrap();
    assert_eq!(state.0, raftlock_core::hierarchy::WaitState::Granted);
    // The cancel of a granted wait answers ACQUIRED with the hold's token.
    let cancel = w.ok(hier(HierOp::CancelSemaphoreWait {
        namespace: NS.into(),
        name: "s".into(),
        lease_id: "c".into(),
        weight: 4,
        waiter_id: "wc".into(),
    }));
    assert!(
        matches!(cancel, Reply::SemaphoreAcquire(ref a) if a.outcome == AcquireOutcome::Acquired && a.fencing_token == state.1)
    );
}

#[test]
fn a_cancelled_or_expired_waiter_leaves_and_the_next_one_is_granted() {
    let mut w = World::new(NS);
    w.create("s", 2);
    for l in ["a", "b", "c"] {
        w.lease(l, 120);
    }
    w.acquire("s", "a", 1, None).unwrap();
    w.acquire("s", "b", 2, Some("wb")).unwrap();
    w.acquire("s", "c", 1, Some("wc")).unwrap();
    let cancel = w.ok(hier(HierOp::CancelSemaphoreWait {
        namespace: NS.into(),
        name: "s".into(),
        lease_id: "b".into(),
        weight: 2,
        waiter_id: "wb".into(),
    }));
    assert!(
        matches!(cancel, Reply::SemaphoreAcquire(ref a) if a.outcome == AcquireOutcome::TimedOut)
    );
    // b's leaving made c the head, and c fits.
    assert_eq!(w.holders("s"), vec![("a".into(), 1), ("c".into(), 1)]);
    // A waiter past its deadline is dropped by the next apply.
    w.acquire("s", "b", 2, Some("wb2")).unwrap();
    w.resolved();
    w.t += 31 * SECOND;
    w.ok(Op::Tick);
    assert_eq!(w.resolved(), ["wb2"]);
    assert_eq!(w.sm.semaphores_in("p", NS).unwrap().totals().3, 0);
}

#[test]
fn expiry_and_revoke_release_everything_a_lease_holds() {
    let mut w = World::new(NS);
    w.create("s", 3);
    w.create("t", 3);
    w.lease("short", 10);
    w.lease("long", 100);
    w.acquire("s", "short", 3, None).unwrap();
    w.acquire("t", "short", 1, None).unwrap();
    w.acquire("s", "long", 2, Some("wl")).unwrap();
    // Queries after the expiry but before any apply already hide the expired holder.
    w.t += 10 * SECOND;
    assert_eq!(w.get("s").active_holds, 0);
    w.ok(Op::Tick);
    assert_eq!(w.holders("s"), vec![("long".into(), 2)]);
    assert_eq!(w.get("t").active_holds, 0);
    let refresh = w.apply(hier(HierOp::RefreshSemaphoreLease {
        namespace: NS.into(),
        lease_id: "short".into(),
        ttl_seconds: 10,
    }));
    assert_eq!(refresh, Err(CoreError::NotFound("lease".into())));
    w.ok(hier(HierOp::RevokeSemaphoreLease {
        namespace: NS.into(),
        lease_id: "long".into(),
    }));
    assert_eq!(w.get("s").active_holds, 0);
    let again = w.apply(hier(HierOp::RevokeSemaphoreLease {
        namespace: NS.into(),
        lease_id: "long".into(),
    }));
    assert_eq!(again, Err(CoreError::NotFound("lease".into())));
    assert_eq!(
        w.release("s", "long"),
        Err(CoreError::NotFound("lease".into()))
    );
}

#[test]
fn a_refresh_moves_the_expiry_of_every_hold() {
    let mut w = World::new(NS);
    w.create("s", 1);
    w.lease("a", 10);
    w.acquire("s", "a", 1, None).unwrap();
    w.t += 9 * SECOND;
    w.ok(hier(HierOp::RefreshSemaphoreLease {
        namespace: NS.into(),
        lease_id: "a".into(),
        ttl_seconds: 10,
    }));
    w.t += 5 * SECOND;
    w.ok(Op::Tick);
    assert_eq!(w.get("s").active_holds, 1);
}

#[test]
fn releasing_what_a_live_lease_does_not_hold_changes_nothing_but_the_activity_time() {
    let mut w = World::new(NS);
    let before = w.create("s", 1);
    w.lease("a", 60);
    w.t += SECOND;
    let after = match w.release("s", "a").unwrap() {
        Reply::Semaphore(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(after.active_holds, 0);
    assert_eq!(after.last_activity_at, before.last_activity_at + SECOND);
    assert_eq!(after.version, 1);
}

#[test]
fn updates_are_conditional_and_cannot_shrink_below_what_is_held() {
    let mut w = World::new(NS);
    w.create("s", 4);
    w.lease("a", 60);
    w.lease("b", 60);
    w.acquire("s", "a", 3, None).unwrap();
    w.acquire("s", "b", 3, Some("wb")).unwrap();
    let update = |permits, expected_version| {
        hier(HierOp::UpdateSemaphore {
            namespace: NS.into(),
            name: "s".into(),
            spec: SemaphoreSpec {
                description: "more".into(),
                permits,
                metadata: BTreeMap::new(),
            },
            expected_version,
        })
    };
    // (permits, expected version, field, refused by the semaphore's state)
    for (permits, version, field, by_state) in [
        (8, None, "expected_version", false),
        (8, Some(2), "expected_version", true),
        (2, Some(1), "permits", true),
    ] {
        let err = w.apply(update(permits, version)).unwrap_err();
        let refused = match (&err, by_state) {
            (CoreError::Conflict { field: f, .. }, true) => f == field,
            (CoreError::Invalid { field: f, .. }, false) => f == field,
            _ => false,
        };
        assert!(refused, "{err:?}");
    }
    assert_eq!(w.get("s").version, 1, "refused updates change nothing");
    w.resolved();
    // Raising permits grants the head of the queue in the same apply.
    let s = match w.ok(update(6, Some(1))) {
        Reply::Semaphore(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (s.version, s.permits, s.active_holds, s.description.as_str()),
        (2, 6, 6, "more")
    );
    assert_eq!(w.resolved(), ["wb"]);
    // Lowering to what is held is allowed; a queued acquire heavier than the new permits
    // can never be granted and is dropped.
    w.lease("c", 60);
    w.acquire("s", "c", 6, Some("wc")).unwrap();
    w.ok(update(6, Some(2)));
    assert!(w.resolved().is_empty());
    w.ok(hier(HierOp::RevokeSemaphoreLease {
        namespace: NS.into(),
        lease_id: "b".into(),
    }));
    w.ok(update(3, Some(3)));
    assert_eq!(w.resolved(), ["wc"]);
}

#[test]
fn lowering_permits_drops_every_queued_acquire_that_could_never_fit() {
    let mut w = World::new(NS);
    w.create("s", 10);
    for l in ["a", "b", "c"] {
        w.lease(l, 60);
    }
    w.acquire("s", "a", 6, None).unwrap();
    w.acquire("s", "b", 5, Some("wb")).unwrap();
    w.acquire("s", "c", 9, Some("wc")).unwrap();
    w.resolved();
    w.ok(hier(HierOp::UpdateSemaphore {
        namespace: NS.into(),
        name: "s".into(),
        spec: SemaphoreSpec {
            description: String::new(),
            permits: 8,
            metadata: BTreeMap::new(),
        },
        expected_version: Some(1),
    }));
    // c (9 > 8) leaves although it is not the head; b (5) still waits for a's 6.
    assert_eq!(w.resolved(), ["wc"]);
    assert_eq!(w.sm.semaphores_in("p", NS).unwrap().totals().3, 1);
}

#[test]
fn two_queued_calls_of_one_lease_are_both_acquired_and_the_hold_never_shrinks() {
    let mut w = World::new(NS);
    w.create("s", 5);
    w.lease("x", 60);
    w.lease("l", 60);
    w.acquire("s", "x", 5, None).unwrap();
    w.acquire("s", "l", 4, Some("big")).unwrap();
    w.acquire("s", "l", 1, Some("small")).unwrap();
    w.release("s", "x").unwrap();
    assert_eq!(w.holders("s"), vec![("l".into(), 4)]);
    let s = w.sm.semaphores_in("p", NS).unwrap();
    for (weight, id) in [(4, "big"), (1, "small")] {
        let state = s
            .waiter_state("p", NS, queued("s", "l", weight, id), w.t)
            .unwrap()
            .0;
        assert_eq!(state, raftlock_core::hierarchy::WaitState::Granted, "{id}");
    }
}

#[test]
fn a_lease_that_expired_in_the_same_apply_is_never_granted() {
    let mut w = World::new(NS);
    w.create("s", 2);
    w.lease("a", 60);
    w.lease("x", 60);
    w.lease("short", 4);
    let first = w.acquire("s", "a", 1, None).unwrap().fencing_token;
    // x (2) waits 5 s at the head; behind it, short (1) whose lease ends at 4 s.
    let wait = |id: &str, secs| WaitSpec {
        waiter_id: id.into(),
        deadline: w.t + secs * SECOND,
    };
    let (wx, ws) = (wait("wx", 5), wait("ws", 30));
    for (lease, weight, spec) in [("x", 2, wx), ("short", 1, ws)] {
        w.apply(hier(HierOp::AcquireSemaphore {
            namespace: NS.into(),
            name: "s".into(),
            lease_id: lease.into(),
            weight,
            metadata: BTreeMap::new(),
            wait: Some(spec),
        }))
        .unwrap();
    }
    // At 6 s x's deadline and short's lease are both due: nobody is granted.
    w.t += 6 * SECOND;
    w.apply(Op::Tick).unwrap();
    assert_eq!(w.holders("s"), vec![("a".into(), 1)]);
    // No fencing token was spent on the dead lease.
    let next = w.acquire("s", "x", 1, None).unwrap().fencing_token;
    assert_eq!(next, first + 1);
}

#[test]
fn deleting_a_semaphore_or_its_namespace_drops_holders_and_waiters() {
    let mut w = World::new(NS);
    w.create("s", 1);
    w.lease("a", 60);
    w.lease("b", 60);
    w.acquire("s", "a", 1, None).unwrap();
    w.acquire("s", "b", 1, Some("wb")).unwrap();
    w.ok(hier(HierOp::DeleteSemaphore {
        namespace: NS.into(),
        name: "s".into(),
    }));
    assert_eq!(w.resolved(), ["wb"]);
    // Deleting an absent semaphore is not an error.
    w.ok(hier(HierOp::DeleteSemaphore {
        namespace: NS.into(),
        name: "s".into(),
    }));
    w.create("s", 1);
    assert_eq!(
        w.acquire("s", "a", 1, None).unwrap().outcome,
        AcquireOutcome::Acquired
    );
    w.acquire("s", "b", 1, Some("wb2")).unwrap();
    w.ok(hier(HierOp::DeleteNamespace { name: NS.into() }));
    assert_eq!(w.resolved(), ["wb2"]);
    assert_eq!(
        w.sm.semaphores_in("p", NS).unwrap_err(),
        CoreError::NotFound("namespace".into())
    );
    assert_eq!(w.sm.stored_bytes("p").1, 0);
    w.ok(hier(HierOp::CreateNamespace {
        name: NS.into(),
        description: String::new(),
        metadata: BTreeMap::new(),
    }));
    let s = w.sm.semaphores_in("p", NS).unwrap();
    assert_eq!(
        s.totals(),
        (0, 0, 0, 0),
        "a re-created namespace starts empty"
    );
}

#[test]
fn the_holder_quota_and_the_byte_budget_refuse_without_changing_anything() {
    let mut w = World::new(NS);
    w.create("s", 10_000);
    for i in 0..MAX_HOLDERS_PER_SEMAPHORE {
        w.lease(&format!("l{i}"), 60);
        w.acquire("s", &format!("l{i}"), 1, None).unwrap();
    }
    w.lease("one-more", 60);
    let err = w.acquire("s", "one-more", 1, None).unwrap_err();
    assert!(matches!(err, CoreError::ResourceExhausted(_)));
    assert_eq!(
        w.get("s").active_holders_count,
        MAX_HOLDERS_PER_SEMAPHORE as u64
    );

    let mut small = World::new(NS);
    small.sm = std::mem::take(&mut small.sm).with_byte_quotas(1 << 20, 3_000);
    small.sm.count_usage();
    small.create("s", 1);
    let before = codec::encode(&small.sm).unwrap();
    let err = small.apply(hier(HierOp::CreateSemaphore {
        namespace: NS.into(),
        name: "big".into(),
        spec: SemaphoreSpec {
            description: "x".repeat(1024),
            permits: 1,
            metadata: (0..10)
                .map(|i| (format!("k{i}"), "v".repeat(200)))
                .collect(),
        },
    }));
    assert!(
        matches!(err, Err(CoreError::ResourceExhausted(_))),
        "{err:?}"
    );
    let after = codec::encode(&small.sm).unwrap();
    assert_eq!(before, after, "a refused create changes nothing");
}

// ---- properties ------------------------------------------------------------------------

const SEMS: [&str; 3] = ["s1", "s2", "s3"];
const LEASES: [&str; 4] = ["l1", "l2", "l3", "l4"];

fn pick(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(items).prop_map(String::from)
}

fn sem_op() -> impl Strategy<Value = HierOp> {
    let ns = || Just(NS.to_string());
    prop_oneof![
        2 => (pick(&SEMS), 1u64..=6).prop_map(|(name, permits)| HierOp::CreateSemaphore { namespace: NS.into(), name, spec: SemaphoreSpec { description: String::new(), permits, metadata: BTreeMap::new() } }),
        2 => (pick(&SEMS), 0u64..=7, 1u64..=4).prop_map(|(name, permits, v)| HierOp::UpdateSemaphore { namespace: NS.into(), name, spec: SemaphoreSpec { description: String::new(), permits, metadata: BTreeMap::new() }, expected_version: Some(v) }),
        1 => pick(&SEMS).prop_map(|name| HierOp::DeleteSemaphore { namespace: NS.into(), name }),
        3 => (ns(), pick(&LEASES), 1u64..=30).prop_map(|(namespace, lease_id, ttl_seconds)| HierOp::CreateSemaphoreLease {
            namespace, lease_id, process_id: "w".into(), ttl_seconds,
        }),
        2 => (pick(&LEASES), 1u64..=30).prop_map(|(lease_id, ttl_seconds)| HierOp::RefreshSemaphoreLease {
            namespace: NS.into(), lease_id, ttl_seconds,
        }),
        1 => pick(&LEASES).prop_map(|lease_id| HierOp::RevokeSemaphoreLease { namespace: NS.into(), lease_id }),
        8 => (pick(&SEMS), pick(&LEASES), 1u64..=5, prop::option::of((0u32..6, 1i64..20))).prop_map(
            |(name, lease_id, weight, wait)| HierOp::AcquireSemaphore {
                namespace: NS.into(), name, lease_id, weight, metadata: BTreeMap::new(),
                wait: wait.map(|(id, secs)| WaitSpec { waiter_id: format!("w{id}"), deadline: T0 + secs * SECOND }),
            }),
        2 => (pick(&SEMS), pick(&LEASES), 1u64..=5, 0u32..6).prop_map(|(name, lease_id, weight, id)| HierOp::CancelSemaphoreWait {
            namespace: NS.into(), name, lease_id, weight, waiter_id: format!("w{id}"),
        }),
        4 => (pick(&SEMS), pick(&LEASES)).prop_map(|(name, lease_id)| HierOp::ReleaseSemaphore {
            namespace: NS.into(), name, lease_id,
        }),
    ]
}

/// (time step in seconds, op) pairs; time runs forward in steps of 0–4 s.
fn steps() -> impl Strategy<Value = Vec<(i64, HierOp)>> {
    prop::collection::vec((0i64..=4, sem_op()), 1..150)
}

fn run(steps: &[(i64, HierOp)]) -> Result<(StateMachine, Vec<Outcome>), TestCaseError> {
    let mut w = World::new(NS);
    let mut outs = vec![];
    let mut t = T0;
    for (dt, op) in steps {
        t += dt * SECOND;
        w.t = t;
        let out = w.sm.apply(&Command {
            stamp: t,
            ops: vec![hier(op.clone())],
        });
        w.sm.check_usage().map_err(TestCaseError::fail)?;
        // At every instant: nobody holds more than permits, counted as a client would see.
        if let Ok(s) = w.sm.semaphores_in("p", NS) {
            let (views, _, _) = s.list_semaphores("p", NS, "", 0, t).unwrap();
            for v in views {
                prop_assert!(v.active_holds <= v.permits, "{v:?}");
                let (holders, _, _) = s.list_holders("p", NS, &v.name, "", 0, t).unwrap();
                prop_assert_eq!(
                    holders.iter().map(|h| h.weight).sum::<u64>(),
                    v.active_holds
                );
                prop_assert!(holders
                    .windows(2)
                    .all(|p| p[0].fencing_token < p[1].fencing_token));
            }
        }
        if let (HierOp::AcquireSemaphore { weight, .. }, Ok(Reply::SemaphoreAcquire(a))) =
            (op, &out[0])
        {
            prop_assert!(a.semaphore.active_holds <= a.semaphore.permits);
            prop_assert_eq!(a.fencing_token > 0, a.outcome == AcquireOutcome::Acquired);
            prop_assert!(
                a.outcome != AcquireOutcome::Acquired || a.semaphore.active_holds >= *weight
            );
        }
        outs.extend(out);
    }
    Ok((w.sm, outs))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn permits_are_never_exceeded_and_every_invariant_holds(steps in steps()) {
        run(&steps)?;
    }

    #[test]
    fn replicas_and_snapshots_agree(steps in steps(), cut in any::<prop::sample::Index>()) {
        common::replicas_and_snapshots_agree(&steps, cut, run)?;
    }
}

/// The queued acquire of semaphore `name` under `lease`, of `weight`, with waiter id `id`.
fn queued<'a>(name: &'a str, lease: &'a str, weight: u64, id: &'a str) -> QueuedAcquire<'a, u64> {
    QueuedAcquire {
        name,
        lease_id: lease,
        asked: weight,
        waiter_id: id,
    }
}
