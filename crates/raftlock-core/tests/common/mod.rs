//! Helpers the core's property suites share: the time they start at, the project they act
//! in, and the check that replicas and restored snapshots agree.

use proptest::prelude::*;
use raftlock_core::command::HierOp;
use raftlock_core::{codec, Command, Op, Outcome, StateMachine, SECOND};

/// The clock every suite starts at.
pub const T0: i64 = 1_700_000_000 * SECOND;

/// `op` in project `p`.
pub fn hier(op: HierOp) -> Op {
    Op::Hier {
        project: "p".into(),
        op,
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
