//! Property tests of the whole state machine over random command sequences on a small key
//! space: mutual exclusion, rising fencing tokens, snapshot/restore equivalence and
//! determinism of replicated apply.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use raftlock_core::budget;
use raftlock_core::command::{HierOp, LockAction};
use raftlock_core::hierarchy::{AcquireOutcome, ContentionReason, LockState, LockView, WaitSpec};
use raftlock_core::{codec, Command, CoreError, Limits, Op, Outcome, Reply, StateMachine, SECOND};

const T0: i64 = 1_700_000_000 * SECOND;
const PROJECTS: [&str; 2] = ["p1", "p2"];
const KEYS: [&str; 3] = ["k1", "k2", "k3"];
const NAMESPACES: [&str; 2] = ["n1", "n2"];
const PATHS: [&str; 6] = ["a", "a/b", "a/b/c", "a/d", "e", "ab"];
const LEASES: [&str; 4] = ["l1", "l2", "l3", "l4"];
const GRACE: i64 = SECOND;
/// Byte budgets small enough to be met: two project-lock keys per project; a few hierarchical leases and holds.
const LOCK_BYTES: usize = 700;
const HIER_BYTES: usize = 12_000;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    }
}

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &[T]) -> impl Strategy<Value = T> {
    prop::sample::select(items.to_vec())
}

fn lock_action() -> impl Strategy<Value = LockAction> {
    // TTLs 3 and 4 are invalid (minimum 5 s): refused commands must change nothing.
    prop_oneof![
        6 => (1u128..=3, 3u64..=12)
            .prop_map(|(token, ttl_seconds)| LockAction::Acquire { token, ttl_seconds }),
        3 => (1u128..=3, 3u64..=12)
            .prop_map(|(token, ttl_seconds)| LockAction::Renew { token, ttl_seconds }),
        3 => (1u128..=3).prop_map(|token| LockAction::Release { token }),
        1 => Just(LockAction::ForceRelease),
    ]
}

/// Mostly valid hierarchical lease TTLs (1–300 s); 0 and 301 are refused.
fn lease_ttl() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 1 => Just(301), 18 => 1u64..=120]
}

fn hier_op() -> impl Strategy<Value = HierOp> {
    // Mostly one namespace, so leases and locks meet.
    let ns = || prop::sample::select(vec!["n1", "n1", "n1", "n2"]).prop_map(String::from);
    let lease = || pick(&LEASES).prop_map(String::from);
    let path = || pick(&PATHS).prop_map(String::from);
    prop_oneof![
        4 => pick(&["n1", "n2", "bad.ns"]).prop_map(|name| HierOp::CreateNamespace {
            name: name.into(),
            description: String::new(),
            metadata: BTreeMap::new(),
        }),
        2 => (ns(), 0u64..4).prop_map(|(name, v)| HierOp::UpdateNamespace {
            name,
            description: "d".into(),
            metadata: BTreeMap::new(),
            expected_version: (v > 0).then_some(v),
        }),
        // Deleting n1 (where most traffic goes) wipes a run's hierarchical state: keep it rare.
        1 => pick(&["n1", "n2", "n2", "n2"])
            .prop_map(|name| HierOp::DeleteNamespace { name: name.into() }),
        16 => (ns(), lease(), pick(&["w1", "w2"]), lease_ttl()).prop_map(
            |(namespace, lease_id, process_id, ttl_seconds)| HierOp::CreateLease {
                namespace,
                lease_id,
                process_id: process_id.into(),
                ttl_seconds,
            }
        ),
        10 => (ns(), lease(), lease_ttl()).prop_map(|(namespace, lease_id, ttl_seconds)| {
            HierOp::RefreshLease {
                namespace,
                lease_id,
                ttl_seconds,
            }
        }),
        3 => (ns(), lease())
            .prop_map(|(namespace, lease_id)| HierOp::RevokeLease { namespace, lease_id }),
        40 => (ns(), path(), any::<bool>(), lease(), prop::bool::weighted(0.05), wait()).prop_map(
            |(namespace, lock_name, exclusive, lease_id, bad, wait)| HierOp::AcquireLock {
                namespace,
                lock_name: if bad { format!("{lock_name}/") } else { lock_name },
                exclusive,
                lease_id,
                metadata: BTreeMap::new(),
                wait,
            }
        ),
        6 => (ns(), path(), any::<bool>(), lease(), pick(&["q1", "q2", "q3"])).prop_map(
            |(namespace, lock_name, exclusive, lease_id, waiter)| HierOp::CancelWait {
                namespace,
                lock_name,
                lease_id,
                exclusive,
                waiter_id: waiter.into(),
            }
        ),
        12 => (ns(), path(), lease()).prop_map(|(namespace, lock_name, lease_id)| {
            HierOp::ReleaseLock {
                namespace,
                lock_name,
                lease_id,
            }
        }),
        2 => (ns(), path())
            .prop_map(|(namespace, lock_name)| HierOp::DeleteLock { namespace, lock_name }),
    ]
}

/// Half of the acquires queue when blocked, with deadlines spread over the run.
fn wait() -> impl Strategy<Value = Option<WaitSpec>> {
    prop::option::weighted(0.5, (pick(&["q1", "q2", "q3"]), 0i64..120)).prop_map(|w| {
        w.map(|(id, secs)| WaitSpec {
            waiter_id: id.into(),
            deadline: T0 + secs * 1_000_000_000,
        })
    })
}

fn op() -> impl Strategy<Value = Op> {
    let project = || pick(&PROJECTS).prop_map(String::from);
    // hierarchical traffic mostly in p1 so leases and locks meet; p2 checks tenants stay apart.
    let hier_project = || prop::sample::select(vec!["p1", "p1", "p1", "p2"]).prop_map(String::from);
    prop_oneof![
        1 => Just(Op::Tick),
        8 => (project(), pick(&KEYS), lock_action()).prop_map(|(project, key, action)| {
            Op::ProjectLock {
                project,
                key: key.into(),
                action,
            }
        }),
        10 => (hier_project(), hier_op()).prop_map(|(project, op)| Op::Hier { project, op }),
    ]
}

/// Commands of 1–3 ops with stamps that mostly rise (0–3 s past the latest stamp) and
/// sometimes fall behind it (a leader with a slower clock).
fn commands(max_len: usize) -> impl Strategy<Value = Vec<Command>> {
    let step = prop_oneof![
        9 => 0i64..1_500,
        1 => -8_000i64..0,
    ];
    prop::collection::vec((step, prop::collection::vec(op(), 1..=3)), 1..=max_len).prop_map(
        |steps| {
            // Every run starts with both namespaces in both projects (the generated
            // commands may still delete and re-create them).
            let prelude = Command {
                stamp: T0,
                ops: PROJECTS
                    .iter()
                    .flat_map(|p| NAMESPACES.iter().map(move |n| (p, n)))
                    .map(|(p, n)| Op::Hier {
                        project: p.to_string(),
                        op: HierOp::CreateNamespace {
                            name: n.to_string(),
                            description: String::new(),
                            metadata: BTreeMap::new(),
                        },
                    })
                    .collect(),
            };
            let mut latest = T0;
            let rest = steps.into_iter().map(|(ms, ops)| {
                let stamp = latest + ms * 1_000_000;
                latest = latest.max(stamp);
                Command { stamp, ops }
            });
            std::iter::once(prelude).chain(rest).collect()
        },
    )
}

/// Expected project-lock state of one key, learnt from answers only.
#[derive(Debug, Clone, Copy)]
struct Held {
    token: u128,
    fencing: u64,
    since: i64,
    expires_at: i64,
}

#[derive(Default)]
struct LockModel {
    current: HashMap<(String, String), Held>,
    /// Highest fencing token ever handed out per key.
    last_fencing: HashMap<(String, String), u64>,
}

impl LockModel {
    /// Whether `project`'s stored keys (live, or lapsed within the grace) leave room for one
    /// more within [`LOCK_BYTES`].
    fn room_for_a_key(&self, project: &str, t: i64) -> bool {
        let stored = (self.current.iter())
            .filter(|((p, _), h)| p == project && t < h.expires_at + GRACE)
            .count();
        (stored + 1) * budget::lock_key_bytes("k1") <= LOCK_BYTES
    }

    /// Checks one project-lock answer against the rules and updates the model.
    fn check(
        &mut self,
        project: &str,
        key: &str,
        action: &LockAction,
        t: i64,
        out: &Outcome,
    ) -> Result<(), TestCaseError> {
        let id = (project.to_string(), key.to_string());
        // A lease stops blocking once takeover-eligible; the machine forgets it then.
        let cur = self
            .current
            .get(&id)
            .copied()
            .filter(|h| t < h.expires_at + GRACE);
        match (action.clone(), out) {
            (LockAction::Acquire { ttl_seconds, .. }, Err(CoreError::Invalid { .. }))
            | (LockAction::Renew { ttl_seconds, .. }, Err(CoreError::Invalid { .. })) => {
                prop_assert!(ttl_seconds < 5, "valid input refused: {out:?}");
            }
            (
                LockAction::Acquire { token, ttl_seconds },
                Ok(Reply::Lease {
                    expires_at,
                    fencing_token,
                }),
            ) => {
                prop_assert!(ttl_seconds >= 5);
                prop_assert_eq!(*expires_at, t + ttl_seconds as i64 * SECOND);
                prop_assert!(
                    *fencing_token > 1 << 52 && *fencing_token < 1 << 53,
                    "fencing token {} out of (2^52, 2^53)",
                    fencing_token
                );
                match cur {
                    Some(h) => {
                        // Mutual exclusion: nobody else may acquire while the previous
                        // holder's validity interval [since, expires_at) (+ grace) lasts.
                        prop_assert_eq!(
                            h.token,
                            token,
                            "token {} acquired {}/{} at {} while token {} held it over [{}, {})",
                            token,
                            project,
                            key,
                            t,
                            h.token,
                            h.since,
                            h.expires_at
                        );
                        prop_assert!(t < h.expires_at, "re-acquire of a lapsed lease");
                        prop_assert_eq!(*fencing_token, h.fencing, "re-acquire keeps fencing");
                        self.current.insert(
                            id,
                            Held {
                                expires_at: *expires_at,
                                ..h
                            },
                        );
                    }
                    None => {
                        prop_assert!(self.room_for_a_key(project, t), "byte budget overrun");
                        let last = self.last_fencing.get(&id).copied().unwrap_or(0);
                        prop_assert!(
                            *fencing_token > last,
                            "fencing went from {} to {} on {}/{}",
                            last,
                            fencing_token,
                            project,
                            key
                        );
                        self.last_fencing.insert(id.clone(), *fencing_token);
                        self.current.insert(
                            id,
                            Held {
                                token,
                                fencing: *fencing_token,
                                since: t,
                                expires_at: *expires_at,
                            },
                        );
                    }
                }
            }
            (LockAction::Acquire { .. }, Err(CoreError::ResourceExhausted(_))) => {
                prop_assert!(
                    cur.is_none() && !self.room_for_a_key(project, t),
                    "byte budget refused {}/{} with room left",
                    project,
                    key
                );
            }
            (LockAction::Acquire { token, .. }, Err(CoreError::LockHeld)) => {
                prop_assert!(
                    cur.is_some_and(|h| h.token != token),
                    "lock_held without another holder"
                );
            }
            (LockAction::Acquire { token, .. }, Err(CoreError::OwnershipLost)) => {
                prop_assert!(
                    cur.is_some_and(|h| h.token == token && t >= h.expires_at),
                    "ownership_lost on acquire without a lapsed own lease"
                );
            }
            (
                LockAction::Renew { token, ttl_seconds },
                Ok(Reply::Lease {
                    expires_at,
                    fencing_token,
                }),
            ) => {
                let Some(h) = cur.filter(|h| h.token == token && t < h.expires_at) else {
                    return Err(TestCaseError::fail("renew succeeded for a non-owner"));
                };
                prop_assert_eq!(*fencing_token, h.fencing);
                prop_assert_eq!(*expires_at, t + ttl_seconds as i64 * SECOND);
                self.current.insert(
                    id,
                    Held {
                        expires_at: *expires_at,
                        ..h
                    },
                );
            }
            (LockAction::Renew { token, .. }, Err(CoreError::OwnershipLost)) => {
                prop_assert!(
                    !cur.is_some_and(|h| h.token == token && t < h.expires_at),
                    "live owner could not renew"
                );
            }
            (LockAction::Release { token }, Ok(Reply::Done)) => {
                prop_assert!(
                    cur.filter(|h| h.token != token).is_none(),
                    "release by a non-owner succeeded"
                );
                self.current.remove(&id);
            }
            (LockAction::Release { token }, Err(CoreError::OwnershipLost)) => {
                prop_assert!(cur.is_some_and(|h| h.token != token));
            }
            (LockAction::ForceRelease, Ok(Reply::Done)) => {
                self.current.remove(&id);
            }
            (action, out) => {
                return Err(TestCaseError::fail(format!(
                    "unexpected answer {out:?} to {action:?}"
                )))
            }
        }
        Ok(())
    }
}

fn related(a: &str, b: &str) -> bool {
    a == b
        || (b.len() > a.len() && b.starts_with(a) && b.as_bytes()[a.len()] == b'/')
        || (a.len() > b.len() && a.starts_with(b) && a.as_bytes()[b.len()] == b'/')
}

/// Mutual exclusion of hierarchical judged from the public views alone (independent of
/// `check_invariants`): no two leases hold incompatible locks on related paths.
fn check_hier_views(sm: &StateMachine, t: i64) -> Result<(), TestCaseError> {
    let h = sm.hierarchy();
    h.check_invariants().map_err(TestCaseError::fail)?;
    for project in PROJECTS {
        let (spaces, _, _) = h.list_namespaces(project, "", 0).unwrap();
        for ns in spaces {
            let (locks, next, _) = h.list_locks(project, &ns.name, "", 0, t).unwrap();
            prop_assert!(next.is_empty());
            for l in &locks {
                prop_assert!(!l.lock_holders.is_empty());
                prop_assert!(
                    l.state != LockState::ExclusiveLocked || l.lock_holders.len() == 1,
                    "exclusive lock {} with several holders",
                    l.name
                );
                for holder in &l.lock_holders {
                    prop_assert!(
                        h.get_lease(project, &ns.name, &holder.lease_id, t).is_ok(),
                        "holder {} of {} has no live lease",
                        holder.lease_id,
                        l.name
                    );
                }
            }
            for a in &locks {
                for b in &locks {
                    if a.name >= b.name || !related(&a.name, &b.name) {
                        continue;
                    }
                    let excl = |l: &LockView| l.state == LockState::ExclusiveLocked;
                    if !(excl(a) || excl(b)) {
                        continue;
                    }
                    for ha in &a.lock_holders {
                        for hb in &b.lock_holders {
                            prop_assert_eq!(
                                &ha.lease_id,
                                &hb.lease_id,
                                "{} and {} held incompatibly by different leases",
                                a.name,
                                b.name
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn check_hier_answer(op: &HierOp, out: &Outcome) -> Result<(), TestCaseError> {
    if let (HierOp::AcquireLock { lease_id, .. }, Ok(Reply::Acquire(r))) = (op, out) {
        prop_assert!(r.blocking_locks.len() <= 50);
        match r.outcome {
            AcquireOutcome::Acquired => {
                prop_assert_eq!(r.reason, ContentionReason::Unspecified);
                prop_assert!(r.blocking_locks.is_empty());
                prop_assert!(r.lock.lock_holders.iter().any(|h| &h.lease_id == lease_id));
            }
            AcquireOutcome::Unavailable => match r.reason {
                ContentionReason::Peer => prop_assert!(r.blocking_locks.is_empty()),
                ContentionReason::Ancestor | ContentionReason::Descendant => {
                    prop_assert!(!r.blocking_locks.is_empty())
                }
                ContentionReason::Unspecified => {
                    return Err(TestCaseError::fail("unavailable without a reason"))
                }
            },
            AcquireOutcome::TimedOut => {
                return Err(TestCaseError::fail("the core never times out"))
            }
        }
    }
    Ok(())
}

/// A refused op changes nothing: compares against the same command reduced to a Tick.
fn refused_changes_nothing(
    before: &StateMachine,
    cmd: &Command,
    after: &StateMachine,
    outs: &[Outcome],
) -> Result<(), TestCaseError> {
    if cmd.ops.len() == 1 && outs[0].is_err() {
        let mut ticked = before.clone();
        ticked.apply(&Command {
            stamp: cmd.stamp,
            ops: vec![Op::Tick],
        });
        prop_assert!(
            &ticked == after,
            "refused {:?} ({:?}) changed the state",
            cmd.ops[0],
            outs[0]
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// (1) mutual exclusion and (2) rising fencing tokens, after every command.
    #[test]
    fn mutual_exclusion_and_fencing(cmds in commands(200)) {
        // Small byte budgets, so refusals for them happen too (and must change nothing).
        let mut sm = StateMachine::new(Limits::default()).with_byte_quotas(LOCK_BYTES, HIER_BYTES);
        let mut model = LockModel::default();
        for cmd in &cmds {
            let before = sm.clone();
            let outs = sm.apply(cmd);
            prop_assert_eq!(outs.len(), cmd.ops.len());
            let t = sm.time();
            prop_assert_eq!(t, before.time().max(cmd.stamp), "time never runs backwards");
            for (op, out) in cmd.ops.iter().zip(&outs) {
                match op {
                    Op::ProjectLock { project, key, action } => {
                        model.check(project, key, action, t, out)?
                    }
                    Op::Hier { op, .. } => check_hier_answer(op, out)?,
                    _ => {}
                }
            }
            check_hier_views(&sm, t)?;
            sm.check_usage().map_err(TestCaseError::fail)?;
            refused_changes_nothing(&before, cmd, &sm, &outs)?;
        }
    }

    /// (3) snapshot → restore at any point gives an identical machine that answers the rest
    /// of the log identically.
    #[test]
    fn snapshot_restore_is_transparent(cmds in commands(200), cut in any::<prop::sample::Index>()) {
        let cut = cut.index(cmds.len() + 1);
        let mut sm = StateMachine::default();
        for cmd in &cmds[..cut] {
            sm.apply(cmd);
        }
        let bytes = codec::encode(&sm).unwrap();
        let mut restored: StateMachine = codec::decode(&bytes).unwrap();
        restored.count_usage();
        prop_assert!(restored == sm, "restored state differs");
        prop_assert_eq!(codec::encode(&restored).unwrap(), bytes, "re-encoding is stable");
        for cmd in &cmds[cut..] {
            prop_assert_eq!(sm.apply(cmd), restored.apply(cmd));
        }
        prop_assert!(restored == sm, "states diverged after restore");
    }

    /// (4) two machines fed the same log answer identically and end equal.
    #[test]
    fn replicas_agree(cmds in commands(200)) {
        let mut a = StateMachine::new(Limits::default()).with_byte_quotas(LOCK_BYTES, HIER_BYTES);
        let mut b = StateMachine::new(Limits::default()).with_byte_quotas(LOCK_BYTES, HIER_BYTES);
        for cmd in &cmds {
            // Replicas receive the log entry as bytes.
            let entry: Command = codec::decode(&codec::encode(cmd).unwrap()).unwrap();
            prop_assert_eq!(a.apply(cmd), b.apply(&entry));
        }
        prop_assert!(a == b, "replicas diverged");
    }
}
