//! Helpers the core's property suites share: the time they start at, the project they act
//! in, a state machine with one namespace to act on, and the check that replicas and restored
//! snapshots agree.

use proptest::prelude::*;
use raftlock_core::command::HierOp;
use std::collections::BTreeMap;

use raftlock_core::{codec, Command, Limits, Op, Outcome, StateMachine, SECOND};

/// The clock every suite starts at.
pub const T0: i64 = 1_700_000_000 * SECOND;

/// `op` in project `p`.
pub fn hier(op: HierOp) -> Op {
    Op::Hier {
        project: "p".into(),
        op,
    }
}

/// A state machine with project `p` and one namespace, and the time the next command is
/// stamped with.
pub struct World {
    pub sm: StateMachine,
    pub t: i64,
}

impl World {
    /// Project `p` with the namespace `ns`, at [`T0`].
    pub fn new(ns: &str) -> World {
        let mut w = World {
            sm: StateMachine::new(Limits::default()),
            t: T0,
        };
        w.apply(Op::CreateProject { name: "p".into() }).unwrap();
        w.apply(hier(HierOp::CreateNamespace {
            name: ns.into(),
            description: String::new(),
            metadata: BTreeMap::new(),
        }))
        .unwrap();
        w
    }

    /// `op` alone, stamped `t`; every byte-accounting invariant holds after it.
    pub fn apply(&mut self, op: Op) -> Outcome {
        let out = self.sm.apply(&Command {
            stamp: self.t,
            ops: vec![op],
        });
        self.sm.check_usage().expect("invariants hold");
        out.into_iter().next().unwrap()
    }
}

/// Steps of (seconds to wait, operation), as the suites generate them.
pub type Steps = [(i64, HierOp)];

/// Applying `steps` twice gives the same state and answers (replicas agree), and restoring a
/// snapshot taken after `cut` of them, then applying the rest, gives the same state again, with
/// its byte accounting intact. `run` applies steps from an empty state.
pub fn replicas_and_snapshots_agree(
    steps: &Steps,
    cut: prop::sample::Index,
    run: impl Fn(&Steps) -> Result<(StateMachine, Vec<Outcome>), TestCaseError>,
) -> Result<(), TestCaseError> {
    let (a, outs_a) = run(steps)?;
    let (b, outs_b) = run(steps)?;
    prop_assert_eq!(&a, &b);
    prop_assert_eq!(outs_a, outs_b);
    let at = cut.index(steps.len());
    let (mid, _) = run(&steps[..at])?;
    let mut restored: StateMachine = codec::decode(&codec::encode(&mid).unwrap()).unwrap();
    restored.count_usage();
    let mut t = T0 + steps[..at].iter().map(|s| s.0).sum::<i64>() * SECOND;
    for (dt, op) in &steps[at..] {
        t += dt * SECOND;
        let command = Command {
            stamp: t,
            ops: vec![hier(op.clone())],
        };
        restored.apply(&command);
    }
    prop_assert_eq!(
        codec::encode(&restored).unwrap(),
        codec::encode(&a).unwrap()
    );
    restored.check_usage().map_err(TestCaseError::fail)
}
