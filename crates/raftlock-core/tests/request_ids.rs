//! Client request ids: a retried call is applied once and answered with its first outcome.

use raftlock_core::command::{HierOp, LockAction};
use raftlock_core::{Command, CoreError, Nanos, Op, Outcome, Reply, StateMachine, SECOND};

const P: &str = "p";
const T0: Nanos = 1_700_000_000 * SECOND;

fn apply(m: &mut StateMachine, t: Nanos, op: Op) -> Outcome {
    m.apply(&Command {
        stamp: t,
        ops: vec![op],
    })
    .remove(0)
}

fn once(request_id: u128, op: Op) -> Op {
    Op::Once {
        request_id,
        op: Box::new(op),
    }
}

fn create_lease(lease_id: &str) -> Op {
    Op::Hier {
        project: P.into(),
        op: HierOp::CreateLease {
            namespace: "ns".into(),
            lease_id: lease_id.into(),
            process_id: "worker".into(),
            ttl_seconds: 60,
        },
    }
}

fn machine() -> StateMachine {
    let mut m = StateMachine::default();
    apply(&mut m, T0, Op::CreateProject { name: P.into() }).unwrap();
    let ns = Op::Hier {
        project: P.into(),
        op: HierOp::CreateNamespace {
            name: "ns".into(),
            description: String::new(),
            metadata: Default::default(),
        },
    };
    apply(&mut m, T0, ns).unwrap();
    m
}

fn lease_count(m: &StateMachine, t: Nanos) -> usize {
    let (leases, _, _) = m.hierarchy().list_leases(P, "ns", "", "", 100, t).unwrap();
    leases.len()
}

#[test]
fn a_retried_create_lease_makes_one_lease_and_answers_the_first() {
    let mut m = machine();
    let first = apply(&mut m, T0 + SECOND, once(9, create_lease("ls_first"))).unwrap();
    // The retry drew a new lease id, as every CreateLockLease call does.
    let retry = apply(&mut m, T0 + 2 * SECOND, once(9, create_lease("ls_retry"))).unwrap();
    assert_eq!(first, retry);
    assert!(matches!(&first, Reply::LockLease(l) if l.lease_id == "ls_first"));
    assert_eq!(lease_count(&m, T0 + 3 * SECOND), 1);
    // Without an id, the same call makes a second lease.
    apply(&mut m, T0 + 3 * SECOND, create_lease("ls_other")).unwrap();
    assert_eq!(lease_count(&m, T0 + 3 * SECOND), 2);
}

#[test]
fn a_retried_release_answers_as_the_first_even_after_a_takeover() {
    let mut m = StateMachine::default();
    let lock = |token, action| Op::ProjectLock {
        project: P.into(),
        key: "job".into(),
        action: match action {
            0 => LockAction::Acquire {
                token,
                ttl_seconds: 30,
            },
            _ => LockAction::Release { token },
        },
    };
    apply(&mut m, T0, once(1, lock(0xA, 0))).unwrap();
    assert_eq!(apply(&mut m, T0, once(2, lock(0xA, 1))), Ok(Reply::Done));
    apply(&mut m, T0, lock(0xB, 0)).unwrap();
    // Applied again, the release would be refused: B owns the lock now.
    assert_eq!(
        apply(&mut m, T0, lock(0xA, 1)),
        Err(CoreError::OwnershipLost)
    );
    assert_eq!(apply(&mut m, T0, once(2, lock(0xA, 1))), Ok(Reply::Done));
}

#[test]
fn an_id_reused_for_another_call_is_refused_and_changes_nothing() {
    let mut m = machine();
    apply(&mut m, T0, once(9, create_lease("ls_a"))).unwrap();
    let before = m.clone();
    let other = Op::Hier {
        project: P.into(),
        op: HierOp::DeleteNamespace { name: "ns".into() },
    };
    let err = apply(&mut m, T0, once(9, other)).unwrap_err();
    assert!(matches!(err, CoreError::Invalid { ref field, .. } if field == "request_id"));
    assert_eq!(m, before);
}

#[test]
fn after_the_window_the_id_is_forgotten() {
    let mut m = machine();
    apply(&mut m, T0, once(9, create_lease("ls_a"))).unwrap();
    let later = T0 + raftlock_core::request_ids::REMEMBER_FOR;
    apply(&mut m, later, once(9, create_lease("ls_b"))).unwrap();
    // The first lease expired long ago; the second is new.
    let (leases, _, _) = m
        .hierarchy()
        .list_leases(P, "ns", "", "", 100, later)
        .unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].lease_id, "ls_b");
}

fn lock(key: &str, action: LockAction) -> Op {
    Op::ProjectLock {
        project: P.into(),
        key: key.into(),
        action,
    }
}

/// Raft's figure-8 case, as the log sees it: a force release proposed under a node-minted id
/// was truncated on its leader (openraft answered `ForwardToLeader`), resent to the next
/// leader, and the truncated copy was committed after all by a later one. Between the two
/// copies another client took the key. The second copy must change nothing.
#[test]
fn a_minted_write_that_reaches_the_log_twice_applies_once() {
    use raftlock_core::request_ids::node_minted;
    let mut m = machine();
    let (a, b) = (1u128, 2u128);
    let acquire = |token| LockAction::Acquire {
        token,
        ttl_seconds: 60,
    };
    apply(&mut m, T0, lock("job", acquire(a))).unwrap();
    let minted = node_minted(0xfeed);
    let force = || once(minted, lock("job", LockAction::ForceRelease));
    assert_eq!(apply(&mut m, T0 + SECOND, force()), Ok(Reply::Done));
    let took = apply(&mut m, T0 + 2 * SECOND, lock("job", acquire(b)));
    assert!(took.is_ok(), "{took:?}");
    assert_eq!(apply(&mut m, T0 + 3 * SECOND, force()), Ok(Reply::Done));
    // B still holds: its renew succeeds, and A's acquire is refused.
    let renew = LockAction::Renew {
        token: b,
        ttl_seconds: 60,
    };
    assert!(apply(&mut m, T0 + 4 * SECOND, lock("job", renew)).is_ok());
    assert!(apply(&mut m, T0 + 4 * SECOND, lock("job", acquire(a))).is_err());
}

/// The same case in a busy project: between the two copies the project wrote more than its
/// table holds, so the first copy's id was forgotten. Proposed as a resend (`Op::Resent`), the
/// second copy is refused as `OutcomeUnknown` and B keeps the key; as a first attempt
/// (`Op::Once`, what every resend was before) it would have released B's lock.
#[test]
fn a_resend_after_its_id_was_forgotten_is_refused_and_changes_nothing() {
    use raftlock_core::request_ids::{node_minted, MAX_PER_PROJECT};
    let (a, b) = (1u128, 2u128);
    let acquire = |token| LockAction::Acquire {
        token,
        ttl_seconds: 60,
    };
    let minted = node_minted(0xfeed);
    let mut m = machine();
    apply(&mut m, T0, lock("job", acquire(a))).unwrap();
    let force = lock("job", LockAction::ForceRelease);
    assert_eq!(
        apply(&mut m, T0 + SECOND, once(minted, force.clone())),
        Ok(Reply::Done)
    );
    apply(&mut m, T0 + SECOND, lock("job", acquire(b))).unwrap();
    // The busy project: as many other minted writes as its table holds, in one entry.
    let flood = (0..MAX_PER_PROJECT as u128)
        .map(|n| once(node_minted(n), lock(&format!("other-{n}"), acquire(7))))
        .collect();
    let outs = m.apply(&Command {
        stamp: T0 + SECOND,
        ops: flood,
    });
    assert!(outs.iter().all(Result::is_ok));

    // Its first attempt went out when the machine had applied up to T0.
    let resend = Op::Resent {
        request_id: minted,
        after: T0,
        op: Box::new(force.clone()),
    };
    let mut as_first_attempt = m.clone();
    assert_eq!(
        apply(&mut m, T0 + 2 * SECOND, resend),
        Err(CoreError::OutcomeUnknown)
    );
    let renew = LockAction::Renew {
        token: b,
        ttl_seconds: 60,
    };
    assert!(apply(&mut m, T0 + 3 * SECOND, lock("job", renew.clone())).is_ok());
    // What the resend did before it said it was one: released B's lock.
    let again = apply(&mut as_first_attempt, T0 + 2 * SECOND, once(minted, force));
    assert_eq!(again, Ok(Reply::Done));
    let lost = apply(&mut as_first_attempt, T0 + 3 * SECOND, lock("job", renew));
    assert_eq!(lost, Err(CoreError::OwnershipLost));
}

/// A resend in a quiet project is judged by its id alone: applied once if its first attempt
/// never was, answered with the first outcome if it was.
#[test]
fn a_resend_in_a_quiet_project_is_applied_once() {
    use raftlock_core::request_ids::node_minted;
    let mut m = machine();
    let acquire = LockAction::Acquire {
        token: 1,
        ttl_seconds: 60,
    };
    let resend = |id| Op::Resent {
        request_id: id,
        after: T0,
        op: Box::new(lock("job", acquire.clone())),
    };
    let first = apply(&mut m, T0 + SECOND, resend(node_minted(1)));
    assert!(matches!(first, Ok(Reply::Lease { .. })), "{first:?}");
    assert_eq!(
        apply(&mut m, T0 + 2 * SECOND, resend(node_minted(1))),
        first
    );
}
