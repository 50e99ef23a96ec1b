//! hierarchical rules of the hierarchy, through its public operations: compatibility on related
//! paths, holders and diagnostics, leases and expiry, namespaces, quotas and pagination.

use std::collections::BTreeMap;

use raftlock_core::command::{Command, HierOp, Op};
use raftlock_core::hierarchy::*;
use raftlock_core::{CoreError, Nanos, StateMachine, SECOND};

const T0: Nanos = 1_700_000_000 * SECOND;
const P: &str = "p";
const NS: &str = "ns";

fn s(n: i64) -> Nanos {
    T0 + n * SECOND
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn inv(h: &Hierarchy) {
    h.check_invariants().expect("invariants hold");
}

/// A project with namespace `ns` and the given leases (process `proc`, TTL 300 s, at s(0)).
fn setup(leases: &[&str]) -> Hierarchy {
    let mut h = Hierarchy::with_quotas(Quotas::default());
    h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(0))
        .unwrap();
    for id in leases {
        h.create_lease(P, NS, id, "proc", 300, s(0)).unwrap();
    }
    inv(&h);
    h
}

fn acq(h: &mut Hierarchy, lease: &str, name: &str, exclusive: bool, t: Nanos) -> AcquireReply {
    let r = h
        .acquire(P, NS, name, exclusive, lease, BTreeMap::new(), t, None)
        .unwrap();
    inv(h);
    r
}

/// Setup acquire that must succeed.
#[track_caller]
fn hold(h: &mut Hierarchy, lease: &str, name: &str, exclusive: bool, t: Nanos) {
    let r = acq(h, lease, name, exclusive, t);
    assert!(
        acquired(&r),
        "setup acquire of {name} by {lease} refused: {r:?}"
    );
}

fn acquired(r: &AcquireReply) -> bool {
    r.outcome == AcquireOutcome::Acquired
}

fn holder_ids(v: &LockView) -> Vec<&str> {
    v.lock_holders.iter().map(|h| h.lease_id.as_str()).collect()
}

fn is_invalid(r: &std::result::Result<impl std::fmt::Debug, CoreError>, field: &str) -> bool {
    matches!(r, Err(CoreError::Invalid { field: f, .. }) if f == field)
}

// ---- namespaces ----------------------------------------------------------------------

#[test]
fn namespace_create_duplicate_get() {
    let mut h = Hierarchy::with_quotas(Quotas::default());
    let v = h
        .create_namespace(P, NS, "d".into(), meta(&[("k", "v")]), s(1))
        .unwrap();
    assert_eq!(
        v,
        NamespaceView {
            name: NS.into(),
            description: "d".into(),
            metadata: meta(&[("k", "v")]),
            version: 1,
            created_at: s(1),
            updated_at: s(1),
        }
    );
    let before = h.clone();
    assert_eq!(
        h.create_namespace(P, NS, "other".into(), BTreeMap::new(), s(2)),
        Err(CoreError::AlreadyExists("namespace".into()))
    );
    assert_eq!(h, before, "a duplicate changes nothing");
    assert_eq!(h.get_namespace(P, NS), Ok(v));
    assert_eq!(
        h.get_namespace(P, "missing"),
        Err(CoreError::NotFound("namespace".into()))
    );
    assert_eq!(
        h.get_namespace("other-project", NS),
        Err(CoreError::NotFound("namespace".into()))
    );
    // Another project may use the same name independently.
    assert!(h
        .create_namespace("q", NS, String::new(), BTreeMap::new(), s(3))
        .is_ok());
    inv(&h);
}

#[test]
fn namespace_update_replaces_bumps_version_and_checks_expected_version() {
    let mut h = Hierarchy::with_quotas(Quotas::default());
    h.create_namespace(P, NS, "d".into(), meta(&[("a", "1"), ("b", "2")]), s(0))
        .unwrap();
    let v = h
        .update_namespace(P, NS, "d2".into(), meta(&[("c", "3")]), Some(1), s(5))
        .unwrap();
    assert_eq!(v.version, 2);
    assert_eq!(v.description, "d2");
    assert_eq!(v.metadata, meta(&[("c", "3")]), "full replacement");
    assert_eq!((v.created_at, v.updated_at), (s(0), s(5)));

    let before = h.clone();
    let stale = h.update_namespace(P, NS, "d3".into(), BTreeMap::new(), Some(1), s(6));
    let by_state = |r: &std::result::Result<NamespaceView, CoreError>| matches!(r, Err(CoreError::Conflict { field, .. }) if field == "expected_version");
    assert!(by_state(&stale), "{stale:?}");
    let ahead = h.update_namespace(P, NS, "d3".into(), BTreeMap::new(), Some(7), s(6));
    assert!(by_state(&ahead), "{ahead:?}");
    assert_eq!(h, before, "a version mismatch changes nothing");

    // No expected version (absent or 0) always applies.
    assert_eq!(
        h.update_namespace(P, NS, "d3".into(), BTreeMap::new(), None, s(7))
            .unwrap()
            .version,
        3
    );
    assert_eq!(
        h.update_namespace(P, NS, "d4".into(), BTreeMap::new(), Some(0), s(8))
            .unwrap()
            .version,
        4
    );
    assert_eq!(
        h.update_namespace(P, "missing", String::new(), BTreeMap::new(), None, s(9)),
        Err(CoreError::NotFound("namespace".into()))
    );
    assert_eq!(h.get_namespace(P, NS).unwrap().version, 4);
    inv(&h);
}

#[test]
fn namespace_delete_removes_everything_and_is_idempotent() {
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a/b", true, s(1));
    hold(&mut h, "l2", "c", false, s(1));
    h.delete_namespace(P, NS).unwrap();
    inv(&h);
    assert_eq!(
        h.get_namespace(P, NS),
        Err(CoreError::NotFound("namespace".into()))
    );
    assert_eq!(h.leases_tracked(), 0, "expiry index forgets its leases");
    assert!(h.is_empty());
    assert_eq!(h.totals(), (0, 0, 0));
    // Idempotent.
    let before = h.clone();
    h.delete_namespace(P, NS).unwrap();
    h.delete_namespace("nobody", NS).unwrap();
    assert_eq!(h, before);
    // A namespace re-created with the same name starts empty.
    h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(2))
        .unwrap();
    assert_eq!(
        h.get_lease(P, NS, "l1", s(2)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(
        h.get_lock(P, NS, "a/b", s(2)).unwrap(),
        LockView::unlocked("a/b")
    );
    assert_eq!(h.reap(s(1000)), 0, "nothing left to reap");
    inv(&h);
}

#[test]
fn namespace_list_paginates() {
    let mut h = Hierarchy::with_quotas(Quotas::default());
    for i in 0..5 {
        h.create_namespace(P, &format!("n{i}"), String::new(), BTreeMap::new(), s(0))
            .unwrap();
    }
    h.create_namespace("q", "other", String::new(), BTreeMap::new(), s(0))
        .unwrap();
    let names = |v: &[NamespaceView]| v.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
    let (p1, next, prev) = h.list_namespaces(P, "", 2).unwrap();
    assert_eq!(names(&p1), ["n0", "n1"]);
    assert!(prev.is_empty());
    let (p2, next, _) = h.list_namespaces(P, &next, 2).unwrap();
    assert_eq!(names(&p2), ["n2", "n3"]);
    let (p3, next3, prev3) = h.list_namespaces(P, &next, 2).unwrap();
    assert_eq!(names(&p3), ["n4"]);
    assert!(next3.is_empty());
    let (back, _, _) = h.list_namespaces(P, &prev3, 2).unwrap();
    assert_eq!(names(&back), ["n2", "n3"]);
    let (all, next, prev) = h.list_namespaces(P, "", 0).unwrap();
    assert_eq!(all.len(), 5, "0 means the maximum page");
    assert!(next.is_empty() && prev.is_empty());
    assert!(h.list_namespaces("nobody", "", 0).unwrap().0.is_empty());
    assert!(is_invalid(&h.list_namespaces(P, "", 251), "limit"));
    assert!(is_invalid(
        &h.list_namespaces(P, "zz", 1),
        "pagination_token"
    ));
}

// ---- leases --------------------------------------------------------------------------

#[test]
fn lease_create_and_get() {
    let mut h = setup(&[]);
    let v = h.create_lease(P, NS, "l1", "worker 1", 30, s(2)).unwrap();
    assert_eq!(
        v,
        LeaseView {
            lease_id: "l1".into(),
            process_id: "worker 1".into(),
            created_at: s(2),
            expires_at: s(32),
        }
    );
    assert_eq!(h.get_lease(P, NS, "l1", s(31)), Ok(v));
    assert_eq!(
        h.get_lease(P, NS, "l1", s(32)),
        Err(CoreError::NotFound("lease".into())),
        "expired at expires_at"
    );
    assert_eq!(
        h.get_lease(P, NS, "nope", s(3)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(
        h.create_lease(P, "missing", "l2", "w", 30, s(2)),
        Err(CoreError::NotFound("namespace".into()))
    );
    let before = h.clone();
    assert_eq!(
        h.create_lease(P, NS, "l1", "w", 30, s(3)),
        Err(CoreError::AlreadyExists("lease".into()))
    );
    assert_eq!(h, before);
    inv(&h);
}

#[test]
fn lease_refresh_sets_absolute_expiry() {
    let mut h = setup(&[]);
    h.create_lease(P, NS, "l1", "w", 30, s(0)).unwrap();
    hold(&mut h, "l1", "a", true, s(1));
    let v = h.refresh_lease(P, NS, "l1", 5, s(20)).unwrap();
    assert_eq!(v.expires_at, s(25), "t + ttl, not additive, may shorten");
    assert_eq!(v.created_at, s(0));
    assert_eq!(h.reap(s(25) - 1), 0);
    assert_eq!(
        h.get_lock(P, NS, "a", s(24)).unwrap().state,
        LockState::ExclusiveLocked,
        "locks follow the lease"
    );
    // Refresh does not count as lock activity.
    assert_eq!(
        h.get_lock(P, NS, "a", s(24)).unwrap().last_activity_at,
        s(1)
    );
    assert_eq!(h.reap(s(25)), 1, "the expiry index moved with the lease");
    assert_eq!(
        h.get_lock(P, NS, "a", s(25)).unwrap().state,
        LockState::Unlocked
    );
    inv(&h);
}

#[test]
fn lease_refresh_of_expired_lease_releases_holders_and_is_not_found() {
    // Through the state machine: apply reaps before running the op.
    let mut sm = StateMachine::default();
    let hier = |op| Op::Hier {
        project: P.into(),
        op,
    };
    let out = sm.apply(&Command {
        stamp: s(0),
        ops: vec![
            hier(HierOp::CreateNamespace {
                name: NS.into(),
                description: String::new(),
                metadata: BTreeMap::new(),
            }),
            hier(HierOp::CreateLease {
                namespace: NS.into(),
                lease_id: "l1".into(),
                process_id: "w".into(),
                ttl_seconds: 10,
            }),
            hier(HierOp::AcquireLock {
                namespace: NS.into(),
                lock_name: "a/b".into(),
                exclusive: true,
                lease_id: "l1".into(),
                metadata: BTreeMap::new(),
                wait: None,
            }),
        ],
    });
    assert!(out.iter().all(|o| o.is_ok()), "{out:?}");
    // Queried after expiry but before any apply: the holder is already hidden.
    let h = sm.hierarchy();
    assert_eq!(
        h.get_lock(P, NS, "a/b", s(10)).unwrap().state,
        LockState::Unlocked
    );
    assert!(h.list_locks(P, NS, "", 0, s(10)).unwrap().0.is_empty());
    let out = sm.apply(&Command {
        stamp: s(10),
        ops: vec![hier(HierOp::RefreshLease {
            namespace: NS.into(),
            lease_id: "l1".into(),
            ttl_seconds: 10,
        })],
    });
    assert_eq!(out, vec![Err(CoreError::NotFound("lease".into()))]);
    let h = sm.hierarchy();
    inv(h);
    assert_eq!(h.totals(), (1, 0, 0), "lease and its holds are gone");
    assert_eq!(
        h.get_lock(P, NS, "a/b", s(10)).unwrap().state,
        LockState::Unlocked
    );

    // Directly on the hierarchy, after the reap apply performs.
    let mut h = setup(&[]);
    h.create_lease(P, NS, "l1", "w", 10, s(0)).unwrap();
    hold(&mut h, "l1", "x", false, s(0));
    assert_eq!(
        h.refresh_lease(P, NS, "l1", 10, s(10)),
        Err(CoreError::NotFound("lease".into())),
        "expired even before the reap"
    );
    assert_eq!(h.reap(s(10)), 1);
    assert_eq!(
        h.refresh_lease(P, NS, "l1", 10, s(10)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(h.totals(), (1, 0, 0));
    inv(&h);
}

#[test]
fn lease_revoke_releases_everything() {
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", false, s(1));
    hold(&mut h, "l1", "z/b/c", true, s(1));
    hold(&mut h, "l1", "d", true, s(1));
    assert!(acquired(&acq(&mut h, "l2", "a", false, s(1))));
    h.revoke_lease(P, NS, "l1", s(2)).unwrap();
    inv(&h);
    assert_eq!(
        h.get_lease(P, NS, "l1", s(2)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(
        h.get_lock(P, NS, "z/b/c", s(2)).unwrap().state,
        LockState::Unlocked
    );
    assert_eq!(
        h.get_lock(P, NS, "d", s(2)).unwrap().state,
        LockState::Unlocked
    );
    let a = h.get_lock(P, NS, "a", s(2)).unwrap();
    assert_eq!(holder_ids(&a), ["l2"]);
    assert_eq!(a.last_activity_at, s(2));
    assert_eq!(h.leases_tracked(), 1);
    // l2 may now take what l1 held.
    assert!(acquired(&acq(&mut h, "l2", "z", true, s(3))));
    assert!(acquired(&acq(&mut h, "l2", "d", true, s(3))));
    assert_eq!(
        h.revoke_lease(P, NS, "l1", s(4)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(
        h.revoke_lease(P, "missing", "l2", s(4)),
        Err(CoreError::NotFound("namespace".into()))
    );
    inv(&h);
}

#[test]
fn lease_list_filters_expired_and_by_process() {
    let mut h = setup(&[]);
    h.create_lease(P, NS, "l1", "A", 10, s(0)).unwrap();
    h.create_lease(P, NS, "l2", "B", 300, s(0)).unwrap();
    h.create_lease(P, NS, "l3", "A", 300, s(0)).unwrap();
    h.create_lease(P, NS, "l4", "A", 300, s(0)).unwrap();
    let ids = |v: &[LeaseView]| v.iter().map(|l| l.lease_id.clone()).collect::<Vec<_>>();
    let (all, _, _) = h.list_leases(P, NS, "", "", 0, s(5)).unwrap();
    assert_eq!(ids(&all), ["l1", "l2", "l3", "l4"]);
    let (live, _, _) = h.list_leases(P, NS, "", "", 0, s(10)).unwrap();
    assert_eq!(
        ids(&live),
        ["l2", "l3", "l4"],
        "expired lease hidden before reap"
    );
    let (a, _, _) = h.list_leases(P, NS, "A", "", 0, s(10)).unwrap();
    assert_eq!(ids(&a), ["l3", "l4"]);
    let (a1, next, prev) = h.list_leases(P, NS, "A", "", 1, s(10)).unwrap();
    assert_eq!(ids(&a1), ["l3"]);
    assert!(
        prev.is_empty(),
        "the expired l1 does not count as a previous page"
    );
    let (a2, next2, _) = h.list_leases(P, NS, "A", &next, 1, s(10)).unwrap();
    assert_eq!(ids(&a2), ["l4"]);
    assert!(next2.is_empty());
    assert!(h
        .list_leases(P, NS, "C", "", 0, s(10))
        .unwrap()
        .0
        .is_empty());
    assert_eq!(
        h.list_leases(P, "missing", "", "", 0, s(10)),
        Err(CoreError::NotFound("namespace".into()))
    );
}

#[test]
fn expired_lease_cannot_acquire() {
    let mut h = setup(&[]);
    h.create_lease(P, NS, "l1", "w", 5, s(0)).unwrap();
    assert_eq!(
        h.acquire(P, NS, "a", true, "l1", BTreeMap::new(), s(5), None),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(
        h.acquire(P, NS, "a", true, "nope", BTreeMap::new(), s(1), None),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(
        h.acquire(P, "missing", "a", true, "l1", BTreeMap::new(), s(1), None),
        Err(CoreError::NotFound("namespace".into()))
    );
    inv(&h);
}

// ---- compatibility -------------------------------------------------------------------

/// How the held lock relates to the requested one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rel {
    Same,
    Ancestor,
    DeepAncestor,
    Descendant,
    DeepDescendant,
    Sibling,
    DeepSibling,
    Unrelated,
    NamePrefix,
}

const RELS: [Rel; 9] = [
    Rel::Same,
    Rel::Ancestor,
    Rel::DeepAncestor,
    Rel::Descendant,
    Rel::DeepDescendant,
    Rel::Sibling,
    Rel::DeepSibling,
    Rel::Unrelated,
    Rel::NamePrefix,
];

/// (held path, requested path).
fn paths(rel: Rel) -> (&'static str, &'static str) {
    match rel {
        Rel::Same => ("a/b", "a/b"),
        Rel::Ancestor => ("a", "a/b"),
        Rel::DeepAncestor => ("a", "a/b/c/d"),
        Rel::Descendant => ("a/b", "a"),
        Rel::DeepDescendant => ("a/b/c/d", "a"),
        Rel::Sibling => ("a/b", "a/c"),
        Rel::DeepSibling => ("a/b/c", "a/d/e"),
        Rel::Unrelated => ("x/y", "a/b"),
        // String prefixes that are not path prefixes never interfere.
        Rel::NamePrefix => ("a/b", "a/bc"),
    }
}

#[test]
fn compatibility_matrix() {
    for holder_x in [true, false] {
        for req_x in [true, false] {
            for rel in RELS {
                let (held, wanted) = paths(rel);
                let case = format!("holder x={holder_x} requester x={req_x} {rel:?}");
                let mut h = setup(&["l1", "l2"]);
                assert!(acquired(&acq(&mut h, "l1", held, holder_x, s(1))));
                let held_view = h.get_lock(P, NS, held, s(1)).unwrap();
                let before = h.clone();
                let r = acq(&mut h, "l2", wanted, req_x, s(2));
                let related = !matches!(
                    rel,
                    Rel::Sibling | Rel::DeepSibling | Rel::Unrelated | Rel::NamePrefix
                );
                if related && (holder_x || req_x) {
                    let reason = match rel {
                        Rel::Same => ContentionReason::Peer,
                        Rel::Ancestor | Rel::DeepAncestor => ContentionReason::Ancestor,
                        _ => ContentionReason::Descendant,
                    };
                    assert_eq!(r.outcome, AcquireOutcome::Unavailable, "{case}");
                    assert_eq!(r.reason, reason, "{case}");
                    if reason == ContentionReason::Peer {
                        assert!(r.blocking_locks.is_empty(), "{case}");
                        assert_eq!(r.lock, held_view, "{case}");
                    } else {
                        assert_eq!(r.blocking_locks, vec![held_view.clone()], "{case}");
                        assert_eq!(r.lock, LockView::unlocked(wanted), "{case}");
                    }
                    assert_eq!(h, before, "{case}: a refused acquire changes nothing");
                } else {
                    assert_eq!(r.outcome, AcquireOutcome::Acquired, "{case}");
                    assert_eq!(r.reason, ContentionReason::Unspecified, "{case}");
                    assert!(r.blocking_locks.is_empty(), "{case}");
                    assert!(holder_ids(&r.lock).contains(&"l2"), "{case}");
                    let state = if req_x {
                        LockState::ExclusiveLocked
                    } else {
                        LockState::SharedLocked
                    };
                    assert_eq!(r.lock.state, state, "{case}");
                    if rel == Rel::Same {
                        assert_eq!(holder_ids(&r.lock), ["l1", "l2"], "{case}");
                        assert_eq!(r.lock.locked_at, s(1), "{case}");
                        assert_eq!(r.lock.last_activity_at, s(2), "{case}");
                    }
                }
                // The same lease is never blocked by its own hold, in any mode.
                let mut h = setup(&["l1"]);
                hold(&mut h, "l1", held, holder_x, s(1));
                let r = acq(&mut h, "l1", wanted, req_x, s(2));
                assert!(acquired(&r), "{case} (same lease): {r:?}");
            }
        }
    }
}

#[test]
fn same_lease_reacquire_refreshes_locked_at_and_keeps_metadata() {
    let mut h = setup(&["l1", "l2"]);
    let r = h
        .acquire(P, NS, "a", true, "l1", meta(&[("v", "1")]), s(1), None)
        .unwrap();
    assert_eq!(
        r.lock,
        LockView {
            name: "a".into(),
            state: LockState::ExclusiveLocked,
            locked_at: s(1),
            last_activity_at: s(1),
            lock_holders: vec![HolderView {
                lease_id: "l1".into(),
                locked_at: s(1),
                metadata: meta(&[("v", "1")]),
            }],
        }
    );
    let r = h
        .acquire(P, NS, "a", true, "l1", meta(&[("v", "2")]), s(4), None)
        .unwrap();
    assert!(acquired(&r));
    assert_eq!(r.lock.lock_holders.len(), 1);
    assert_eq!(
        r.lock.lock_holders[0].locked_at,
        s(4),
        "holder locked_at refreshed"
    );
    assert_eq!(
        r.lock.lock_holders[0].metadata,
        meta(&[("v", "1")]),
        "a re-acquire keeps the metadata the hold was taken with"
    );
    assert_eq!(r.lock.last_activity_at, s(4));
    inv(&h);
    // Shared, alongside another holder.
    hold(&mut h, "l1", "s", false, s(5));
    hold(&mut h, "l2", "s", false, s(6));
    let r = acq(&mut h, "l1", "s", false, s(7));
    assert!(acquired(&r));
    let l1 = r
        .lock
        .lock_holders
        .iter()
        .find(|x| x.lease_id == "l1")
        .unwrap();
    let l2 = r
        .lock
        .lock_holders
        .iter()
        .find(|x| x.lease_id == "l2")
        .unwrap();
    assert_eq!((l1.locked_at, l2.locked_at), (s(7), s(6)));
    assert_eq!(r.lock.state, LockState::SharedLocked);
}

#[test]
fn downgrade_always_succeeds() {
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", true, s(1));
    hold(&mut h, "l1", "a/b", true, s(1));
    hold(&mut h, "l1", "a/b/c", true, s(1));
    for (name, t) in [("a/b", 2), ("a", 3), ("a/b/c", 4)] {
        let r = acq(&mut h, "l1", name, false, s(t));
        assert!(acquired(&r), "{name}");
        assert_eq!(r.lock.state, LockState::SharedLocked);
        assert_eq!(r.lock.lock_holders.len(), 1);
    }
    // Now only shared holds: others may share anywhere but not take exclusives.
    assert!(acquired(&acq(&mut h, "l2", "a/b", false, s(5))));
    assert!(acquired(&acq(&mut h, "l2", "a/b/c/d", false, s(5))));
    let r = acq(&mut h, "l2", "a/x", true, s(5));
    assert_eq!(
        (r.outcome, r.reason),
        (AcquireOutcome::Unavailable, ContentionReason::Ancestor)
    );
    assert_eq!(r.blocking_locks.len(), 1);
    assert_eq!(r.blocking_locks[0].name, "a");
    // Downgrade also succeeds while another lease shares a descendant.
    let r = acq(&mut h, "l1", "a", false, s(6));
    assert!(acquired(&r));
}

#[test]
fn upgrade_succeeds_only_without_other_conflicting_holders() {
    // Alone: upgrade works.
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", false, s(1));
    hold(&mut h, "l1", "a/b", false, s(1));
    let r = acq(&mut h, "l1", "a", true, s(2));
    assert!(acquired(&r), "own shared descendant does not block");
    assert_eq!(r.lock.state, LockState::ExclusiveLocked);
    let r = acq(&mut h, "l1", "a/b", true, s(2));
    assert!(acquired(&r), "own exclusive ancestor does not block");

    // Peer: another shared holder on the same path.
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", false, s(1));
    hold(&mut h, "l2", "a", false, s(1));
    let before = h.clone();
    let r = acq(&mut h, "l1", "a", true, s(2));
    assert_eq!(
        (r.outcome, r.reason),
        (AcquireOutcome::Unavailable, ContentionReason::Peer)
    );
    assert!(r.blocking_locks.is_empty());
    assert_eq!(r.lock.state, LockState::SharedLocked);
    assert_eq!(h, before, "the shared hold stays as it was");

    // Descendant shared by another lease.
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", false, s(1));
    hold(&mut h, "l2", "a/b/c", false, s(1));
    let r = acq(&mut h, "l1", "a", true, s(2));
    assert_eq!(r.reason, ContentionReason::Descendant);
    assert_eq!(r.blocking_locks.len(), 1);
    assert_eq!(r.blocking_locks[0].name, "a/b/c");
    assert_eq!(holder_ids(&r.blocking_locks[0]), ["l2"]);

    // Ancestor shared by another lease.
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a/b", false, s(1));
    hold(&mut h, "l2", "a", false, s(1));
    let r = acq(&mut h, "l1", "a/b", true, s(2));
    assert_eq!(r.reason, ContentionReason::Ancestor);
    assert_eq!(r.blocking_locks[0].name, "a");
    // After the other lease lets go, the upgrade goes through.
    h.release(P, NS, "a", "l2", s(3)).unwrap();
    assert!(acquired(&acq(&mut h, "l1", "a/b", true, s(4))));
}

#[test]
fn a_lease_never_blocks_itself() {
    let mut h = setup(&["l1", "l2"]);
    for (name, x) in [
        ("a", true),
        ("a/b", true),
        ("a/b/c", false),
        ("a/d", true),
        ("a/b/c/d", true),
        ("a", false),
        ("a", true),
        ("a/b/c", true),
    ] {
        assert!(acquired(&acq(&mut h, "l1", name, x, s(1))), "{name} x={x}");
    }
    for (name, reason) in [
        ("a", ContentionReason::Peer),
        ("a/b/c", ContentionReason::Peer),
        ("a/e", ContentionReason::Ancestor),
    ] {
        for x in [true, false] {
            let r = acq(&mut h, "l2", name, x, s(2));
            assert_eq!(
                (r.outcome, r.reason),
                (AcquireOutcome::Unavailable, reason),
                "{name}"
            );
        }
    }
    // The nearest-first order is not promised, but every blocking ancestor is listed.
    let r = acq(&mut h, "l2", "a/b/c/d/e", false, s(2));
    let mut names: Vec<_> = r.blocking_locks.iter().map(|l| l.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["a", "a/b", "a/b/c", "a/b/c/d"]);
    assert!(acquired(&acq(&mut h, "l2", "b", true, s(2))));
    // Releasing the ancestor keeps the descendants held.
    h.release(P, NS, "a", "l1", s(3)).unwrap();
    inv(&h);
    let r = acq(&mut h, "l2", "a", false, s(4));
    assert_eq!(r.reason, ContentionReason::Descendant);
    let mut names: Vec<_> = r.blocking_locks.iter().map(|l| l.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["a/b", "a/b/c", "a/b/c/d", "a/d"]);
}

#[test]
fn blocking_locks_are_capped_at_50() {
    let mut h = setup(&["x", "req"]);
    for i in 0..60 {
        hold(&mut h, "x", &format!("root/c{i:02}"), i % 2 == 0, s(1));
    }
    // Shared request: only the 30 exclusive descendants block.
    let r = acq(&mut h, "req", "root", false, s(2));
    assert_eq!(r.reason, ContentionReason::Descendant);
    assert_eq!(r.blocking_locks.len(), 30);
    // Exclusive request: all 60 block, 50 are reported.
    let r = acq(&mut h, "req", "root", true, s(2));
    assert_eq!(r.reason, ContentionReason::Descendant);
    assert_eq!(r.blocking_locks.len(), MAX_BLOCKING_LOCKS);
    assert!(r.blocking_locks.iter().all(|l| holder_ids(l) == ["x"]));

    // Sixty distinct leases, each holding one descendant.
    let ids: Vec<String> = (0..60).map(|i| format!("l{i}")).collect();
    let mut h = setup(&[]);
    for id in ids.iter().map(String::as_str).chain(["req"]) {
        h.create_lease(P, NS, id, "w", 300, s(0)).unwrap();
    }
    for (i, id) in ids.iter().enumerate() {
        hold(&mut h, id, &format!("root/x/c{i}"), true, s(1));
    }
    let r = acq(&mut h, "req", "root", false, s(2));
    assert_eq!(r.blocking_locks.len(), MAX_BLOCKING_LOCKS);
    assert_eq!(r.lock, LockView::unlocked("root"));
}

#[test]
fn quotas_are_resource_exhausted() {
    let quotas = Quotas {
        locks_per_namespace: 2,
        leases_per_namespace: 2,
        namespaces_per_project: 2,
    };
    let mut h = Hierarchy::with_quotas(quotas);
    h.create_namespace(P, "n1", String::new(), BTreeMap::new(), s(0))
        .unwrap();
    h.create_namespace(P, "n2", String::new(), BTreeMap::new(), s(0))
        .unwrap();
    let before = h.clone();
    assert!(matches!(
        h.create_namespace(P, "n3", String::new(), BTreeMap::new(), s(0)),
        Err(CoreError::ResourceExhausted(_))
    ));
    assert_eq!(h, before);
    assert!(
        h.create_namespace("q", "n3", String::new(), BTreeMap::new(), s(0))
            .is_ok(),
        "quota is per project"
    );

    h.create_lease(P, "n1", "l1", "w", 300, s(0)).unwrap();
    h.create_lease(P, "n1", "l2", "w", 300, s(0)).unwrap();
    let before = h.clone();
    assert!(matches!(
        h.create_lease(P, "n1", "l3", "w", 300, s(0)),
        Err(CoreError::ResourceExhausted(_))
    ));
    assert_eq!(h, before);
    assert!(
        h.create_lease(P, "n2", "l3", "w", 300, s(0)).is_ok(),
        "per namespace"
    );
    h.revoke_lease(P, "n1", "l2", s(0)).unwrap();
    assert!(
        h.create_lease(P, "n1", "l3", "w", 300, s(0)).is_ok(),
        "room again"
    );

    let lock = |h: &mut Hierarchy, lease: &str, name: &str, x: bool| {
        h.acquire(P, "n1", name, x, lease, BTreeMap::new(), s(1), None)
    };
    assert!(lock(&mut h, "l1", "a", false).is_ok());
    assert!(lock(&mut h, "l1", "b", true).is_ok());
    let before = h.clone();
    assert!(matches!(
        lock(&mut h, "l1", "c", true),
        Err(CoreError::ResourceExhausted(_))
    ));
    assert_eq!(h, before);
    assert!(
        lock(&mut h, "l3", "a", false).is_ok(),
        "a new holder is not a new lock"
    );
    assert!(
        lock(&mut h, "l1", "b", false).is_ok(),
        "re-acquire is not a new lock"
    );
    // Contention is reported before the quota.
    let r = lock(&mut h, "l3", "b/x", true).unwrap();
    assert_eq!(r.reason, ContentionReason::Ancestor);
    h.release(P, "n1", "b", "l1", s(2)).unwrap();
    assert!(lock(&mut h, "l1", "c", true).is_ok());
    inv(&h);
}

#[test]
fn release_of_what_is_not_held_is_a_no_op() {
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", true, s(1));
    let before = h.clone();
    let v = h.release(P, NS, "a", "l2", s(2)).unwrap();
    assert_eq!(holder_ids(&v), ["l1"]);
    assert_eq!(v.last_activity_at, s(1));
    let v = h.release(P, NS, "never", "l1", s(2)).unwrap();
    assert_eq!(v, LockView::unlocked("never"));
    h.release(P, NS, "a/b", "l1", s(2)).unwrap();
    // A lease that does not exist is not_found (as Grackle documents), and changes nothing.
    assert_eq!(
        h.release(P, NS, "a", "unknown-lease", s(2)),
        Err(CoreError::NotFound("lease".into()))
    );
    assert_eq!(h, before);
    assert_eq!(
        h.release(P, "missing", "a", "l1", s(2)),
        Err(CoreError::NotFound("namespace".into()))
    );
    // A real release.
    let v = h.release(P, NS, "a", "l1", s(3)).unwrap();
    assert_eq!(v.state, LockState::Unlocked);
    assert!(v.lock_holders.is_empty());
    inv(&h);
    assert_eq!(h.totals(), (1, 2, 0));
}

#[test]
fn release_of_one_shared_holder_keeps_the_others() {
    let mut h = setup(&["l1", "l2"]);
    hold(&mut h, "l1", "a", false, s(1));
    hold(&mut h, "l2", "a", false, s(2));
    let v = h.release(P, NS, "a", "l1", s(3)).unwrap();
    assert_eq!(holder_ids(&v), ["l2"]);
    assert_eq!((v.locked_at, v.last_activity_at), (s(1), s(3)));
    inv(&h);
}

#[test]
fn delete_lock_drops_all_holders() {
    let mut h = setup(&["l1", "l2", "l3"]);
    for id in ["l1", "l2", "l3"] {
        hold(&mut h, id, "a", false, s(1));
    }
    hold(&mut h, "l1", "a/b", false, s(1));
    h.delete_lock(P, NS, "a", s(2)).unwrap();
    inv(&h);
    assert_eq!(
        h.get_lock(P, NS, "a", s(2)).unwrap(),
        LockView::unlocked("a")
    );
    assert_eq!(
        h.get_lock(P, NS, "a/b", s(2)).unwrap().state,
        LockState::SharedLocked
    );
    // The former holders no longer count as holders anywhere.
    let r = acq(&mut h, "l2", "a", true, s(3));
    assert_eq!(
        r.reason,
        ContentionReason::Descendant,
        "a/b still shared by l1"
    );
    h.delete_lock(P, NS, "a/b", s(3)).unwrap();
    assert!(acquired(&acq(&mut h, "l2", "a", true, s(3))));
    let before = h.clone();
    h.delete_lock(P, NS, "absent", s(4)).unwrap();
    assert_eq!(h, before, "absent is not an error");
    assert_eq!(
        h.delete_lock(P, "missing", "a", s(4)),
        Err(CoreError::NotFound("namespace".into()))
    );
    inv(&h);
}

#[test]
fn list_locks_lists_held_only() {
    let mut h = setup(&["l1", "l2"]);
    h.create_lease(P, NS, "short", "w", 5, s(0)).unwrap();
    for name in ["a", "b", "c", "d"] {
        hold(&mut h, "l1", name, true, s(1));
    }
    hold(&mut h, "short", "e", true, s(1));
    h.release(P, NS, "b", "l1", s(2)).unwrap();
    let names = |v: &[LockView]| v.iter().map(|l| l.name.clone()).collect::<Vec<_>>();
    let (all, _, _) = h.list_locks(P, NS, "", 0, s(2)).unwrap();
    assert_eq!(names(&all), ["a", "c", "d", "e"]);
    let (after, _, _) = h.list_locks(P, NS, "", 0, s(5)).unwrap();
    assert_eq!(
        names(&after),
        ["a", "c", "d"],
        "holders of expired leases are hidden"
    );
    let (p1, next, _) = h.list_locks(P, NS, "", 2, s(5)).unwrap();
    assert_eq!(names(&p1), ["a", "c"]);
    let (p2, next2, prev2) = h.list_locks(P, NS, &next, 2, s(5)).unwrap();
    assert_eq!(names(&p2), ["d"]);
    assert!(next2.is_empty(), "the expired e does not make a next page");
    assert!(!prev2.is_empty());
    assert!(all.iter().all(|l| l.state == LockState::ExclusiveLocked));
    assert_eq!(
        h.list_locks(P, "missing", "", 0, s(5)),
        Err(CoreError::NotFound("namespace".into()))
    );
}

#[test]
fn get_lock_of_never_acquired_is_unlocked_with_zero_times() {
    let h = setup(&["l1"]);
    let v = h.get_lock(P, NS, "never/acquired", s(1)).unwrap();
    assert_eq!(
        v,
        LockView {
            name: "never/acquired".into(),
            state: LockState::Unlocked,
            locked_at: 0,
            last_activity_at: 0,
            lock_holders: vec![],
        }
    );
    assert_eq!(
        h.get_lock(P, "missing", "a", s(1)),
        Err(CoreError::NotFound("namespace".into()))
    );
}

/// `op` of project `P`, applied alone at `t`.
fn apply_one(sm: &mut StateMachine, op: HierOp, t: Nanos) -> raftlock_core::Outcome {
    let op = Op::Hier {
        project: P.into(),
        op,
    };
    sm.apply(&Command {
        stamp: t,
        ops: vec![op],
    })
    .remove(0)
}

fn create_namespace(name: &str, description: &str, metadata: BTreeMap<String, String>) -> HierOp {
    HierOp::CreateNamespace {
        name: name.into(),
        description: description.into(),
        metadata,
    }
}

fn update_namespace(name: &str, description: &str, metadata: BTreeMap<String, String>) -> HierOp {
    HierOp::UpdateNamespace {
        name: name.into(),
        description: description.into(),
        metadata,
        expected_version: None,
    }
}

fn create_lease(namespace: &str, process_id: &str, ttl_seconds: u64) -> HierOp {
    HierOp::CreateLease {
        namespace: namespace.into(),
        lease_id: "l2".into(),
        process_id: process_id.into(),
        ttl_seconds,
    }
}

fn refresh_lease(ttl_seconds: u64) -> HierOp {
    HierOp::RefreshLease {
        namespace: NS.into(),
        lease_id: "l1".into(),
        ttl_seconds,
    }
}

fn acquire(namespace: &str, lock_name: &str, metadata: BTreeMap<String, String>) -> HierOp {
    HierOp::AcquireLock {
        namespace: namespace.into(),
        lock_name: lock_name.into(),
        exclusive: true,
        lease_id: "l1".into(),
        metadata,
        wait: None,
    }
}

/// Every call of the wrong shape is refused with the field it names and changes nothing:
/// writes through apply (which checks them with `HierOp::validate`, as the server does before
/// proposing; the hierarchy trusts what it is given), reads on the hierarchy itself.
#[test]
fn invalid_input_is_invalid_and_changes_nothing() {
    let mut sm = StateMachine::default();
    for op in [
        create_namespace(NS, "", BTreeMap::new()),
        HierOp::CreateLease {
            namespace: NS.into(),
            lease_id: "l1".into(),
            process_id: "proc".into(),
            ttl_seconds: 300,
        },
        acquire(NS, "held", BTreeMap::new()),
    ] {
        assert!(apply_one(&mut sm, op, s(1)).is_ok());
    }
    let before = sm.hierarchy().clone();
    let big_meta: BTreeMap<String, String> =
        (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
    let long_value = meta(&[("k", &"v".repeat(257))]);
    let empty_key = meta(&[("", "v")]);
    let long_desc = "d".repeat(1025);
    let none = BTreeMap::new;

    let writes: Vec<(&str, HierOp)> = vec![
        ("name", create_namespace("bad name", "", none())),
        ("name", create_namespace("", "", none())),
        ("name", create_namespace(&"n".repeat(129), "", none())),
        ("description", create_namespace("n2", &long_desc, none())),
        ("metadata", create_namespace("n2", "", big_meta.clone())),
        ("metadata", create_namespace("n2", "", long_value.clone())),
        ("metadata", create_namespace("n2", "", empty_key.clone())),
        ("description", update_namespace(NS, &long_desc, none())),
        ("metadata", update_namespace(NS, "", big_meta.clone())),
        ("namespace_name", update_namespace("a.b", "", none())),
        (
            "namespace_name",
            HierOp::DeleteNamespace { name: "a/b".into() },
        ),
        ("namespace_name", create_lease("x y", "w", 10)),
        ("process_id", create_lease(NS, "", 10)),
        ("process_id", create_lease(NS, "bad\nid", 10)),
        ("process_id", create_lease(NS, &"p".repeat(129), 10)),
        ("ttl_seconds", create_lease(NS, "w", 0)),
        ("ttl_seconds", create_lease(NS, "w", 301)),
        ("ttl_seconds", refresh_lease(0)),
        ("ttl_seconds", refresh_lease(301)),
        (
            "namespace_name",
            HierOp::RevokeLease {
                namespace: String::new(),
                lease_id: "l1".into(),
            },
        ),
        ("lock_name", acquire(NS, "a//b", none())),
        ("lock_name", acquire(NS, "/a", none())),
        ("lock_name", acquire(NS, "a/", none())),
        ("lock_name", acquire(NS, "a.b", none())),
        ("lock_name", acquire(NS, &"a".repeat(257), none())),
        ("metadata", acquire(NS, "a", big_meta)),
        ("metadata", acquire(NS, "held", long_value)),
        ("metadata", acquire(NS, "a", empty_key)),
        ("namespace_name", acquire("b@d", "a", none())),
        (
            "lock_name",
            HierOp::ReleaseLock {
                namespace: NS.into(),
                lock_name: "held/".into(),
                lease_id: "l1".into(),
            },
        ),
        (
            "lock_name",
            HierOp::DeleteLock {
                namespace: NS.into(),
                lock_name: "he ld".into(),
            },
        ),
    ];
    for (i, (field, op)) in writes.into_iter().enumerate() {
        let r = apply_one(&mut sm, op, s(2));
        assert!(
            is_invalid(&r, field),
            "write {i}: expected Invalid on {field}, got {r:?}"
        );
    }
    let h = sm.hierarchy();
    let reads: Vec<(&str, std::result::Result<(), CoreError>)> = vec![
        ("lock_name", h.get_lock(P, NS, "", s(2)).map(drop)),
        ("limit", h.list_locks(P, NS, "", 251, s(2)).map(drop)),
        (
            "pagination_token",
            h.list_locks(P, NS, "nonsense", 1, s(2)).map(drop),
        ),
        ("limit", h.list_leases(P, NS, "", "", 251, s(2)).map(drop)),
        (
            "pagination_token",
            h.list_leases(P, NS, "", "6", 1, s(2)).map(drop),
        ),
    ];
    for (i, (field, r)) in reads.iter().enumerate() {
        assert!(
            is_invalid(r, field),
            "read {i}: expected Invalid on {field}, got {r:?}"
        );
    }
    assert_eq!(*h, before, "invalid input changed the state");
    // Boundaries that are valid.
    let longest_name = "a".repeat(256);
    let longest_value = meta(&[("k", &"v".repeat(256))]);
    for op in [
        create_lease(NS, &"p".repeat(128), 300),
        acquire(NS, &longest_name, longest_value),
    ] {
        let r = apply_one(&mut sm, op, s(2));
        assert!(r.is_ok(), "{r:?}");
    }
    inv(sm.hierarchy());
}

#[test]
fn reap_releases_only_expired_leases() {
    let mut h = setup(&["long"]);
    h.create_lease(P, NS, "short", "w", 10, s(0)).unwrap();
    hold(&mut h, "short", "a", true, s(1));
    hold(&mut h, "long", "b", false, s(1));
    // Not yet reaped, queries at a later time already hide the expired holder.
    assert_eq!(
        h.get_lock(P, NS, "a", s(10)).unwrap().state,
        LockState::Unlocked
    );
    assert_eq!(h.reap(s(10) - 1), 0);
    assert_eq!(h.reap(s(10)), 1);
    inv(&h);
    assert_eq!(h.totals(), (1, 1, 1));
    assert!(acquired(&acq(&mut h, "long", "a/x", true, s(11))));
}

#[test]
fn holders_are_listed_in_arrival_order() {
    let mut h = setup(&["zz", "mm", "aa", "bb"]);
    for (i, lease) in ["zz", "mm", "aa"].into_iter().enumerate() {
        hold(&mut h, lease, "shared", false, s(i as i64 + 1));
    }
    let ids = |h: &Hierarchy| {
        let v = h.get_lock(P, NS, "shared", s(10)).unwrap();
        holder_ids(&v)
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&h),
        ["zz", "mm", "aa"],
        "arrival order, not lease-id order"
    );
    // A re-acquire keeps its place; a holder that left and came back is last.
    hold(&mut h, "mm", "shared", false, s(5));
    assert_eq!(ids(&h), ["zz", "mm", "aa"]);
    h.release(P, NS, "shared", "zz", s(6)).unwrap();
    hold(&mut h, "bb", "shared", false, s(7));
    hold(&mut h, "zz", "shared", false, s(8));
    inv(&h);
    assert_eq!(ids(&h), ["mm", "aa", "bb", "zz"]);
}
