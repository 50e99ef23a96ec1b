//! Wait groups and barriers through the state machine: each documented rule as a scenario,
//! and property tests over random operation sequences that check every invariant after
//! every step — a wait group never completes before its counter of distinct jobs, a barrier
//! never trips before its expected processes arrived.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{hier, World, T0};
use proptest::prelude::*;
use raftlock_core::barriers::{BarrierSpec, BarrierView};

use raftlock_core::command::HierOp;
use raftlock_core::spaces::Stored;
use raftlock_core::wait_groups::{GroupSpec, WaitGroupStatus, WaitGroupView};
use raftlock_core::{codec, Command, CoreError, Op, Outcome, Reply, StateMachine, SECOND};

const NS: &str = "pipelines";

impl World {
    fn group(
        &mut self,
        name: &str,
        counter: u64,
        expires_in: i64,
    ) -> Result<WaitGroupView, CoreError> {
        self.apply(hier(HierOp::CreateWaitGroup {
            namespace: NS.into(),
            name: name.into(),
            spec: GroupSpec {
                description: String::new(),
                counter,
                expires_at: self.t + expires_in * SECOND,
                delete_after_finished_seconds: 60,
                metadata: BTreeMap::new(),
            },
        }))
        .map(|r| match r {
            Reply::WaitGroup(g) => g,
            other => panic!("{other:?}"),
        })
    }

    fn complete(&mut self, name: &str, jobs: &[&str]) -> Result<WaitGroupView, CoreError> {
        let jobs = jobs
            .iter()
            .map(|j| (j.to_string(), BTreeMap::new()))
            .collect();
        self.apply(hier(HierOp::CompleteJobs {
            namespace: NS.into(),
            name: name.into(),
            jobs,
        }))
        .map(|r| match r {
            Reply::WaitGroup(g) => g,
            other => panic!("{other:?}"),
        })
    }

    fn get_group(&self, name: &str) -> Result<WaitGroupView, CoreError> {
        self.sm.wait_groups_in("p", NS)?.get("p", NS, name, self.t)
    }

    fn barrier(&mut self, name: &str, expected: u64) -> BarrierView {
        match self.apply(hier(HierOp::CreateBarrier {
            namespace: NS.into(),
            name: name.into(),
            spec: BarrierSpec {
                description: String::new(),
                expected_processes: expected,
                delete_inactive_after_seconds: 60,
                metadata: BTreeMap::new(),
            },
        })) {
            Ok(Reply::Barrier(b)) => b,
            other => panic!("{other:?}"),
        }
    }

    fn arrive(
        &mut self,
        name: &str,
        process: &str,
        generation: u64,
    ) -> Result<(BarrierView, bool), CoreError> {
        self.apply(hier(HierOp::ArriveAtBarrier {
            namespace: NS.into(),
            name: name.into(),
            process_id: process.into(),
            expected_generation: generation,
            metadata: BTreeMap::new(),
        }))
        .map(|r| match r {
            Reply::BarrierArrival {
                barrier,
                all_arrived,
            } => (barrier, all_arrived),
            other => panic!("{other:?}"),
        })
    }

    fn woken(&mut self) -> Vec<String> {
        self.sm.take_resolved_waiters()
    }
}

#[test]
fn a_wait_group_completes_exactly_at_its_counter_of_distinct_jobs() {
    let mut w = World::new(NS);
    let too_soon = w.group("g", 3, 30).unwrap_err();
    assert!(matches!(too_soon, CoreError::Invalid { ref field, .. } if field == "expires_at"));
    let g = w.group("g", 3, 3600).unwrap();
    assert_eq!(
        (g.status, g.completed_jobs, g.finished_at),
        (WaitGroupStatus::Active, 0, 0)
    );
    assert_eq!(
        w.group("g", 1, 3600).unwrap_err(),
        CoreError::AlreadyExists("wait group".into())
    );
    // Idempotent per job id, also within one batch.
    let g = w.complete("g", &["a", "b", "a"]).unwrap();
    assert_eq!(g.completed_jobs, 2);
    let g = w.complete("g", &["b"]).unwrap();
    assert_eq!((g.completed_jobs, g.status), (2, WaitGroupStatus::Active));
    // A batch that would pass the counter is refused whole.
    let over = w.complete("g", &["c", "d"]).unwrap_err();
    assert!(matches!(over, CoreError::Conflict { ref field, .. } if field == "jobs"));
    assert_eq!(w.get_group("g").unwrap().completed_jobs, 2);
    w.woken();
    w.t += SECOND;
    let g = w.complete("g", &["c"]).unwrap();
    assert_eq!(
        (g.status, g.completed_jobs, g.finished_at),
        (WaitGroupStatus::Completed, 3, w.t)
    );
    assert_eq!(w.woken(), ["wait-group/p/pipelines/g"]);
    // Finished: repeats are fine, new jobs and updates are not.
    assert!(w.complete("g", &["a"]).is_ok());
    assert!(w.complete("g", &["z"]).is_err());
    let s = w.sm.wait_groups_in("p", NS).unwrap();
    let (jobs, _, _) = s.list_jobs("p", NS, "g", "", 0, w.t).unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    // Kept for its retention, then gone.
    w.t += 59 * SECOND;
    assert!(w.get_group("g").is_ok());
    w.t += SECOND;
    assert_eq!(
        w.get_group("g").unwrap_err(),
        CoreError::NotFound("wait group".into())
    );
    w.apply(Op::Tick).unwrap();
    assert_eq!(w.sm.coordination_totals().0, 0);
}

#[test]
fn a_wait_group_expires_at_its_deadline_and_updates_follow_the_rules() {
    let mut w = World::new(NS);
    w.group("g", 5, 120).unwrap();
    w.complete("g", &["a", "b"]).unwrap();
    let update = |counter, expires_in: i64, version, t: i64| {
        hier(HierOp::UpdateWaitGroup {
            namespace: NS.into(),
            name: "g".into(),
            spec: GroupSpec {
                description: "more".into(),
                counter,
                expires_at: t + expires_in * SECOND,
                delete_after_finished_seconds: 120,
                metadata: BTreeMap::new(),
            },
            expected_version: version,
        })
    };
    // (update, field, refused by the group's state rather than by the request alone)
    for (op, field, by_state) in [
        (update(1, 60, Some(1), w.t), "counter", true),
        (update(6, 60, Some(9), w.t), "expected_version", true),
        (update(6, 60, None, w.t), "expected_version", false),
        (update(6, -1, Some(1), w.t), "expires_at", false),
    ] {
        let err = w.apply(op).unwrap_err();
        let refused = match (&err, by_state) {
            (CoreError::Conflict { field: f, .. }, true) => f == field,
            (CoreError::Invalid { field: f, .. }, false) => f == field,
            _ => false,
        };
        assert!(refused, "{err:?}");
    }
    let g = match w.apply(update(6, 200, Some(1), w.t)).unwrap() {
        Reply::WaitGroup(g) => g,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (g.version, g.counter, g.expires_at),
        (2, 6, T0 + 200 * SECOND)
    );
    // Past expires_at a query already sees it expired; the next apply marks it.
    w.t = T0 + 200 * SECOND;
    let g = w.get_group("g").unwrap();
    assert_eq!(
        (g.status, g.finished_at),
        (WaitGroupStatus::Expired, T0 + 200 * SECOND)
    );
    w.woken();
    w.apply(Op::Tick).unwrap();
    assert_eq!(w.woken(), ["wait-group/p/pipelines/g"]);
    assert!(
        w.complete("g", &["c"]).is_err(),
        "an expired group takes no new jobs"
    );
    assert!(w.apply(update(6, 60, Some(2), w.t)).is_err(), "nor updates");
    // Lowering the counter to what is in completes it at once.
    w.group("h", 5, 120).unwrap();
    w.complete("h", &["a"]).unwrap();
    let g = match w.apply(hier(HierOp::UpdateWaitGroup {
        namespace: NS.into(),
        name: "h".into(),
        spec: GroupSpec {
            description: String::new(),
            counter: 1,
            expires_at: w.t + 120 * SECOND,
            delete_after_finished_seconds: 60,
            metadata: BTreeMap::new(),
        },
        expected_version: Some(1),
    })) {
        Ok(Reply::WaitGroup(g)) => g,
        other => panic!("{other:?}"),
    };
    assert_eq!(g.status, WaitGroupStatus::Completed);
    // Deleting (also absent, also the namespace) wakes waiters and frees everything.
    w.apply(hier(HierOp::DeleteWaitGroup {
        namespace: NS.into(),
        name: "h".into(),
    }))
    .unwrap();
    w.apply(hier(HierOp::DeleteWaitGroup {
        namespace: NS.into(),
        name: "h".into(),
    }))
    .unwrap();
    w.apply(hier(HierOp::DeleteNamespace { name: NS.into() }))
        .unwrap();
    assert_eq!(w.sm.coordination_totals(), (0, 0, 0, 0));
}

#[test]
fn a_barrier_trips_only_when_every_expected_process_arrived() {
    let mut w = World::new(NS);
    let b = w.barrier("phase", 3);
    assert_eq!((b.generation, b.arrived_processes), (1, 0));
    assert!(!w.arrive("phase", "a", 1).unwrap().1);
    assert_eq!(
        w.arrive("phase", "a", 1).unwrap().0.arrived_processes,
        1,
        "idempotent"
    );
    assert!(!w.arrive("phase", "b", 1).unwrap().1);
    let ahead = w.arrive("phase", "c", 2).unwrap_err();
    assert!(
        matches!(ahead, CoreError::Conflict { ref field, .. } if field == "expected_generation")
    );
    w.woken();
    let (b, all) = w.arrive("phase", "c", 1).unwrap();
    assert!(all);
    assert_eq!((b.generation, b.arrived_processes), (2, 0));
    assert_eq!(w.woken(), ["barrier/p/pipelines/phase"]);
    // A retry of an arrival of the tripped generation is answered as tripped; a newcomer to
    // it is refused.
    assert!(w.arrive("phase", "a", 1).unwrap().1);
    assert!(w.arrive("phase", "z", 1).is_err());
    let s = w.sm.barriers_in("p", NS).unwrap();
    let (first, _, _) = s
        .list_participants("p", NS, "phase", 1, "", 0, w.t)
        .unwrap();
    let ids: Vec<&str> = first.iter().map(|p| p.process_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[test]
fn lowering_expected_processes_to_the_arrived_trips_and_idle_barriers_go() {
    let mut w = World::new(NS);
    w.barrier("phase", 4);
    w.arrive("phase", "a", 1).unwrap();
    w.arrive("phase", "b", 1).unwrap();
    let update = |expected, version| {
        hier(HierOp::UpdateBarrier {
            namespace: NS.into(),
            name: "phase".into(),
            spec: BarrierSpec {
                description: String::new(),
                expected_processes: expected,
                delete_inactive_after_seconds: 60,
                metadata: BTreeMap::new(),
            },
            expected_version: Some(version),
        })
    };
    let below = w.apply(update(1, 1)).unwrap_err();
    assert!(
        matches!(below, CoreError::Conflict { ref field, .. } if field == "expected_processes")
    );
    let b = match w.apply(update(2, 1)).unwrap() {
        Reply::Barrier(b) => b,
        other => panic!("{other:?}"),
    };
    assert_eq!((b.generation, b.arrived_processes, b.version), (2, 0, 2));
    // Only the last 8 generations' participants are kept.
    for generation in 2..=12 {
        w.arrive("phase", "a", generation).unwrap();
        w.arrive("phase", "b", generation).unwrap();
    }
    let s = w.sm.barriers_in("p", NS).unwrap();
    assert!(s
        .list_participants("p", NS, "phase", 4, "", 0, w.t)
        .unwrap()
        .0
        .is_empty());
    assert_eq!(
        s.list_participants("p", NS, "phase", 5, "", 0, w.t)
            .unwrap()
            .0
            .len(),
        2
    );
    // Idle for its window: gone.
    w.t += 60 * SECOND;
    assert_eq!(
        s.get("p", NS, "phase", w.t).unwrap_err(),
        CoreError::NotFound("barrier".into())
    );
    w.apply(Op::Tick).unwrap();
    assert_eq!(w.sm.coordination_totals(), (0, 0, 0, 0));
}

#[test]
fn byte_budgets_refuse_without_changing_anything() {
    let mut w = World::new(NS);
    w.sm = std::mem::take(&mut w.sm).with_byte_quotas(1 << 20, 2_000);
    w.sm.count_usage();
    w.group("g", 100, 3600).unwrap();
    let before = codec::encode(&w.sm).unwrap();
    let meta: BTreeMap<String, String> = (0..10)
        .map(|i| (format!("k{i}"), "v".repeat(200)))
        .collect();
    let jobs = vec![("j".to_string(), meta)];
    let err = w.apply(hier(HierOp::CompleteJobs {
        namespace: NS.into(),
        name: "g".into(),
        jobs,
    }));
    assert!(
        matches!(err, Err(CoreError::ResourceExhausted(_))),
        "{err:?}"
    );
    assert_eq!(before, codec::encode(&w.sm).unwrap());
}

// ---- properties ------------------------------------------------------------------------

const GROUPS: [&str; 2] = ["g1", "g2"];
const BARRIERS: [&str; 2] = ["b1", "b2"];
const JOBS: [&str; 5] = ["j1", "j2", "j3", "j4", "j5"];
const PROCS: [&str; 4] = ["p1", "p2", "p3", "p4"];

fn pick(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(items).prop_map(String::from)
}

fn op() -> impl Strategy<Value = HierOp> {
    let ns = || NS.to_string();
    prop_oneof![
        2 => (pick(&GROUPS), 1u64..=5, 30i64..400).prop_map(move |(name, counter, secs)| HierOp::CreateWaitGroup { namespace: ns(), name, spec: GroupSpec { description: String::new(), counter, expires_at: T0 + secs * SECOND, delete_after_finished_seconds: 60, metadata: BTreeMap::new() } }),
        1 => (pick(&GROUPS), 0u64..=6, 1u64..=4, 0i64..400).prop_map(move |(name, counter, v, secs)| HierOp::UpdateWaitGroup { namespace: NS.into(), name, spec: GroupSpec { description: String::new(), counter, expires_at: T0 + secs * SECOND, delete_after_finished_seconds: 60, metadata: BTreeMap::new() }, expected_version: Some(v) }),
        1 => pick(&GROUPS).prop_map(|name| HierOp::DeleteWaitGroup { namespace: NS.into(), name }),
        6 => (pick(&GROUPS), prop::collection::vec(pick(&JOBS), 1..4)).prop_map(|(name, jobs)| HierOp::CompleteJobs {
            namespace: NS.into(), name, jobs: jobs.into_iter().map(|j| (j, BTreeMap::new())).collect(),
        }),
        2 => (pick(&BARRIERS), 1u64..=4).prop_map(|(name, expected_processes)| HierOp::CreateBarrier { namespace: NS.into(), name, spec: BarrierSpec { description: String::new(), expected_processes, delete_inactive_after_seconds: 60, metadata: BTreeMap::new() } }),
        1 => (pick(&BARRIERS), 0u64..=4, 1u64..=4).prop_map(|(name, expected_processes, v)| HierOp::UpdateBarrier { namespace: NS.into(), name, spec: BarrierSpec { description: String::new(), expected_processes, delete_inactive_after_seconds: 60, metadata: BTreeMap::new() }, expected_version: Some(v) }),
        1 => pick(&BARRIERS).prop_map(|name| HierOp::DeleteBarrier { namespace: NS.into(), name }),
        8 => (pick(&BARRIERS), pick(&PROCS), 0u64..=4).prop_map(|(name, process_id, expected_generation)| HierOp::ArriveAtBarrier {
            namespace: NS.into(), name, process_id, expected_generation, metadata: BTreeMap::new(),
        }),
    ]
}

/// What clients were told, per group and barrier, to judge the machine against.
#[derive(Default)]
struct Model {
    /// Job ids acknowledged per wait group (since its creation).
    jobs: BTreeMap<String, BTreeSet<String>>,
    /// (generation, processes acknowledged in it) per barrier.
    arrivals: BTreeMap<String, (u64, BTreeSet<String>)>,
}

fn run(steps: &[(i64, HierOp)]) -> Result<(StateMachine, Vec<Outcome>), TestCaseError> {
    let mut w = World::new(NS);
    let mut model = Model::default();
    let mut outs = vec![];
    for (dt, op) in steps {
        w.t += dt * SECOND;
        let out =
            w.sm.apply(&Command {
                stamp: w.t,
                ops: vec![hier(op.clone())],
            })
            .remove(0);
        w.sm.check_usage().map_err(TestCaseError::fail)?;
        judge(&w, &mut model, op, &out)?;
        outs.push(out);
    }
    Ok((w.sm, outs))
}

fn judge(w: &World, model: &mut Model, op: &HierOp, out: &Outcome) -> Result<(), TestCaseError> {
    match (op, out) {
        (HierOp::CreateWaitGroup { name, .. }, Ok(_)) => {
            model.jobs.insert(name.clone(), BTreeSet::new());
        }
        (HierOp::CompleteJobs { name, jobs, .. }, Ok(Reply::WaitGroup(g))) => {
            let seen = model.jobs.entry(name.clone()).or_default();
            seen.extend(jobs.iter().map(|(j, _)| j.clone()));
            prop_assert_eq!(g.completed_jobs, seen.len() as u64);
        }
        (HierOp::CreateBarrier { name, .. }, Ok(_)) => {
            model.arrivals.insert(name.clone(), (1, BTreeSet::new()));
        }
        (
            HierOp::ArriveAtBarrier {
                name,
                process_id,
                expected_generation,
                ..
            },
            Ok(Reply::BarrierArrival {
                barrier,
                all_arrived,
            }),
        ) => {
            let (generation, arrived) = model
                .arrivals
                .entry(name.clone())
                .or_insert((1, BTreeSet::new()));
            if *expected_generation == *generation {
                arrived.insert(process_id.clone());
                if *all_arrived {
                    // Never early: every expected process was acknowledged in this generation.
                    prop_assert_eq!(arrived.len() as u64, barrier.expected_processes);
                    *generation += 1;
                    arrived.clear();
                }
            }
        }
        (HierOp::UpdateBarrier { name, .. }, Ok(Reply::Barrier(b))) => {
            if let Some((generation, arrived)) = model.arrivals.get_mut(name) {
                if b.generation > *generation {
                    prop_assert_eq!(arrived.len() as u64, b.expected_processes);
                    *generation = b.generation;
                    arrived.clear();
                }
            }
        }
        _ => {}
    }
    // Every group seen: completed never above counter, and complete only at the counter of
    // distinct acknowledged jobs.
    let groups = w.sm.wait_groups_in("p", NS).unwrap();
    let (views, _, _) = groups.list("p", NS, "", 0, w.t).unwrap();
    for g in views {
        prop_assert!(g.completed_jobs <= g.counter, "{g:?}");
        if g.status == WaitGroupStatus::Completed {
            let seen = model.jobs.get(&g.name).map_or(0, BTreeSet::len) as u64;
            prop_assert_eq!(seen, g.counter);
        }
    }
    let barriers = w.sm.barriers_in("p", NS).unwrap();
    for b in barriers.list("p", NS, "", 0, w.t).unwrap().0 {
        prop_assert!(b.arrived_processes < b.expected_processes, "{b:?}");
    }
    Ok(())
}

fn steps() -> impl Strategy<Value = Vec<(i64, HierOp)>> {
    prop::collection::vec((0i64..=20, op()), 1..150)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn wait_groups_never_complete_early_and_barriers_never_trip_early(steps in steps()) {
        run(&steps)?;
    }

    #[test]
    fn replicas_and_snapshots_agree(steps in steps(), cut in any::<prop::sample::Index>()) {
        common::replicas_and_snapshots_agree(&steps, cut, run)?;
    }
}
