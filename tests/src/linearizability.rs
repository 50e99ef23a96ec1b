//! A linearizability checker: a Wing–Gong search with Lowe's memoization ("WGL").
//!
//! A history is a set of [`Operation`]s, each with an invocation time, and either a return
//! time and an observed output (a *definite* operation) or neither (an operation whose
//! outcome the client never learned: a timeout, a 503, a reset connection). The history is
//! linearizable if some total order of all definite operations plus any subset of the
//! unknown ones (a) respects real time — an operation that returned before another was
//! invoked comes first; unknown operations may take effect at any point after their
//! invocation, or never — and (b) is a legal run of the sequential [`Model`].
//!
//! The search extends a linearized prefix one operation at a time. An operation may come
//! next only if it was invoked no later than the earliest return among the definite
//! operations not yet linearized. Pairs (set of linearized operations, model state) already
//! explored are cached, which is what keeps the search tractable on long histories with
//! little concurrency. Unknown operations that would not change the model state are never
//! tried: taking effect without an observable output, they are indistinguishable from not
//! happening.
//!
//! [`LockModel`] is the project-lock register of one project-lock key as the chaos suite exercises it:
//! acquire (with a fresh lock token per attempt and a TTL long enough never to lapse within
//! a checked epoch), release, read and force release.

use std::collections::HashSet;
use std::hash::Hash;

/// One operation of a history. Times are in any common unit (the suite uses microseconds
/// of one client clock).
#[derive(Debug, Clone)]
pub struct Operation<I, O> {
    /// Which client issued it (for reports only).
    pub client: usize,
    pub invoked: u64,
    /// `None` when the outcome is unknown.
    pub returned: Option<u64>,
    pub input: I,
    /// `None` when the outcome is unknown (then `returned` is `None` too).
    pub output: Option<O>,
}

/// A sequential specification.
pub trait Model: Clone + Eq + Hash {
    type Input;
    type Output;

    /// The state after applying `input` that produced `output`, or `None` if that output is
    /// impossible from this state. With `output == None` (unknown), the state after the
    /// operation took effect with whatever output it had.
    fn step(&self, input: &Self::Input, output: Option<&Self::Output>) -> Option<Self>;
}

/// Result of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// No valid order exists. `stuck_at` is the index (into the given slice) of the definite
    /// operation with the earliest return that the deepest search could not place.
    NotLinearizable {
        stuck_at: usize,
        placed: usize,
    },
    /// The search budget ran out before a verdict.
    Inconclusive {
        steps: u64,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn with(&self, i: usize) -> Bits {
        let mut b = self.clone();
        b.0[i / 64] |= 1 << (i % 64);
        b
    }
}

struct Frame<M> {
    state: M,
    done: Bits,
    /// Definite operations linearized so far.
    placed: usize,
    /// Earliest return among definite operations not yet linearized.
    horizon: u64,
    /// Position in return order before which every definite operation is linearized.
    ret_start: usize,
    /// Position in invocation order before which every operation is linearized.
    inv_start: usize,
    /// Next position (in invocation order) to try.
    cursor: usize,
}

/// Checks `ops` against `init`, giving up after `budget` explored states.
pub fn check<M: Model>(init: M, ops: &[Operation<M::Input, M::Output>], budget: u64) -> Verdict {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (ops[i].invoked, i));
    let mut by_return: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].output.is_some())
        .collect();
    by_return.sort_by_key(|&i| (ops[i].returned.unwrap_or(u64::MAX), i));
    let definite = by_return.len();
    // (horizon, ret_start) for `done`, scanning on from `from` (done only grows on a path).
    let horizon = |done: &Bits, from: usize| {
        let mut at = from;
        while at < by_return.len() && done.get(by_return[at]) {
            at += 1;
        }
        let h = by_return
            .get(at)
            .map_or(u64::MAX, |&i| ops[i].returned.unwrap_or(u64::MAX));
        (h, at)
    };
    let empty = Bits::new(ops.len());
    let (h, ret_start) = horizon(&empty, 0);
    let mut stack = vec![Frame {
        state: init,
        horizon: h,
        ret_start,
        inv_start: 0,
        done: empty,
        placed: 0,
        cursor: 0,
    }];
    let mut seen: HashSet<(Bits, M)> = HashSet::new();
    let mut steps = 0u64;
    let mut deepest = (0usize, usize::MAX);
    while let Some(top) = stack.last_mut() {
        if top.placed == definite {
            return Verdict::Linearizable;
        }
        if top.placed > deepest.0 || deepest.1 == usize::MAX {
            deepest = (
                top.placed,
                by_return.get(top.ret_start).copied().unwrap_or(usize::MAX),
            );
        }
        let mut next = None;
        while top.cursor < order.len() {
            let i = order[top.cursor];
            top.cursor += 1;
            if ops[i].invoked > top.horizon {
                top.cursor = order.len();
                break;
            }
            if top.done.get(i) {
                continue;
            }
            let op = &ops[i];
            let Some(state) = top.state.step(&op.input, op.output.as_ref()) else {
                continue;
            };
            if op.output.is_none() && state == top.state {
                continue;
            }
            let done = top.done.with(i);
            if seen.insert((done.clone(), state.clone())) {
                next = Some((i, state, done));
                break;
            }
        }
        match next {
            None => {
                stack.pop();
            }
            Some((i, state, done)) => {
                steps += 1;
                if steps > budget {
                    return Verdict::Inconclusive { steps };
                }
                let placed = top.placed + usize::from(ops[i].output.is_some());
                let (h, ret_start) = horizon(&done, top.ret_start);
                let mut inv_start = top.inv_start;
                while inv_start < order.len() && done.get(order[inv_start]) {
                    inv_start += 1;
                }
                stack.push(Frame {
                    state,
                    done,
                    placed,
                    horizon: h,
                    ret_start,
                    inv_start,
                    cursor: inv_start,
                });
            }
        }
    }
    Verdict::NotLinearizable {
        stuck_at: deepest.1,
        placed: deepest.0,
    }
}

/// An operation on one project-lock key. Lock tokens are small integers standing for the UUIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockInput {
    Acquire(u32),
    Release(u32),
    Read,
    ForceRelease,
}

/// What the client observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockOutput {
    /// `200` with this fencing token.
    Acquired(u64),
    /// `409 lock_held`.
    Held,
    /// `409 lock_ownership_lost` (acquire, or release by a non-owner).
    OwnershipLost,
    /// `204` (release, force release).
    Released,
    /// Read: `{"held":false}`.
    Free,
    /// Read: held with this fencing token.
    HeldBy(u64),
}

/// The register behind one key: who holds it (token, fencing token if known) and a lower
/// bound of the highest fencing token ever issued for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LockModel {
    pub holder: Option<(u32, Option<u64>)>,
    pub last_fencing: u64,
}

impl LockModel {
    /// A free key whose tokens so far were at most `last_fencing`.
    pub fn free(last_fencing: u64) -> LockModel {
        LockModel {
            holder: None,
            last_fencing,
        }
    }
}

impl Model for LockModel {
    type Input = LockInput;
    type Output = LockOutput;

    fn step(&self, input: &LockInput, output: Option<&LockOutput>) -> Option<LockModel> {
        use LockOutput as O;
        let mut next = self.clone();
        match (*input, self.holder) {
            (LockInput::Acquire(t), None) => match output {
                Some(&O::Acquired(f)) if f > self.last_fencing => {
                    next.holder = Some((t, Some(f)));
                    next.last_fencing = f;
                }
                None => {
                    next.holder = Some((t, None));
                    next.last_fencing += 1;
                }
                _ => return None,
            },
            (LockInput::Acquire(t), Some((h, f))) if h == t => match (output, f) {
                (None, _) => {}
                (Some(&O::Acquired(g)), Some(f)) if g == f => {}
                (Some(&O::Acquired(g)), None) if g >= self.last_fencing => {
                    next.holder = Some((t, Some(g)));
                    next.last_fencing = g;
                }
                _ => return None,
            },
            (LockInput::Acquire(_), Some(_)) => match output {
                None | Some(O::Held) => {}
                _ => return None,
            },
            (LockInput::Release(t), Some((h, _))) if h == t => match output {
                None | Some(O::Released) => next.holder = None,
                _ => return None,
            },
            (LockInput::Release(_), None) => match output {
                None | Some(O::Released) => {}
                _ => return None,
            },
            (LockInput::Release(_), Some(_)) => match output {
                None | Some(O::OwnershipLost) => {}
                _ => return None,
            },
            (LockInput::Read, None) => match output {
                None | Some(O::Free) => {}
                _ => return None,
            },
            (LockInput::Read, Some((h, f))) => match (output, f) {
                (None, _) => {}
                (Some(&O::HeldBy(g)), Some(f)) if g == f => {}
                (Some(&O::HeldBy(g)), None) if g >= self.last_fencing => {
                    next.holder = Some((h, Some(g)));
                    next.last_fencing = g;
                }
                _ => return None,
            },
            (LockInput::ForceRelease, _) => match output {
                None | Some(O::Released) => next.holder = None,
                _ => return None,
            },
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::LockInput::*;
    use super::LockOutput::*;
    use super::*;

    type Op = Operation<LockInput, LockOutput>;

    fn op(client: usize, invoked: u64, returned: u64, input: LockInput, output: LockOutput) -> Op {
        Operation {
            client,
            invoked,
            returned: Some(returned),
            input,
            output: Some(output),
        }
    }

    fn unknown(client: usize, invoked: u64, input: LockInput) -> Op {
        Operation {
            client,
            invoked,
            returned: None,
            input,
            output: None,
        }
    }

    fn verdict(ops: &[Op]) -> Verdict {
        check(LockModel::free(100), ops, 1_000_000)
    }

    #[test]
    fn a_sequential_history_is_linearizable() {
        let h = [
            op(0, 0, 1, Acquire(1), Acquired(101)),
            op(1, 2, 3, Acquire(2), Held),
            op(1, 4, 5, Read, HeldBy(101)),
            op(0, 6, 7, Release(1), Released),
            op(1, 8, 9, Read, Free),
            op(1, 10, 11, Acquire(2), Acquired(105)),
            op(0, 12, 13, Release(1), OwnershipLost),
            op(2, 14, 15, ForceRelease, Released),
            op(2, 16, 17, Release(2), Released),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn concurrent_operations_may_take_effect_in_either_order() {
        // The read overlaps the acquire and may see it; the release overlaps the read.
        let h = [
            op(0, 0, 10, Acquire(1), Acquired(101)),
            op(1, 1, 12, Read, HeldBy(101)),
            op(0, 11, 20, Release(1), Released),
            op(1, 13, 14, Acquire(2), Held),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // Two overlapping acquires: one wins, the other sees it held.
        let h = [
            op(0, 0, 10, Acquire(1), Held),
            op(1, 1, 9, Acquire(2), Acquired(101)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn two_holders_at_once_are_caught() {
        let h = [
            op(0, 0, 1, Acquire(1), Acquired(101)),
            op(1, 2, 3, Acquire(2), Acquired(102)),
        ];
        assert!(matches!(
            verdict(&h),
            Verdict::NotLinearizable { stuck_at: 1, .. }
        ));
    }

    #[test]
    fn a_stale_read_is_caught() {
        let h = [
            op(0, 0, 1, Acquire(1), Acquired(101)),
            op(1, 2, 3, Read, Free),
        ];
        assert!(matches!(verdict(&h), Verdict::NotLinearizable { .. }));
        // Concurrent with the acquire, the same read is fine.
        let h = [
            op(0, 0, 3, Acquire(1), Acquired(101)),
            op(1, 2, 4, Read, Free),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn fencing_tokens_must_rise() {
        let h = [
            op(0, 0, 1, Acquire(1), Acquired(105)),
            op(0, 2, 3, Release(1), Released),
            op(1, 4, 5, Acquire(2), Acquired(104)),
        ];
        assert!(matches!(verdict(&h), Verdict::NotLinearizable { .. }));
        // Below the epoch's starting bound.
        let h = [op(0, 0, 1, Acquire(1), Acquired(100))];
        assert!(matches!(verdict(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn an_undone_release_is_caught() {
        let h = [
            op(0, 0, 1, Acquire(1), Acquired(101)),
            op(0, 2, 3, Release(1), Released),
            op(1, 4, 5, Read, HeldBy(101)),
        ];
        assert!(matches!(verdict(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn unknown_operations_may_or_may_not_have_happened() {
        // An acquire that timed out but took effect explains `Held` and the later read.
        let h = [
            unknown(0, 0, Acquire(1)),
            op(1, 5, 6, Acquire(2), Held),
            op(1, 7, 8, Read, HeldBy(103)),
            op(0, 9, 10, Release(1), Released),
            op(1, 11, 12, Acquire(2), Acquired(104)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // One that never took effect.
        let h = [
            unknown(0, 0, Acquire(1)),
            op(1, 5, 6, Acquire(2), Acquired(101)),
            unknown(0, 7, Release(1)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // An unknown op cannot act before it was invoked.
        let h = [op(1, 0, 1, Acquire(2), Held), unknown(0, 5, Acquire(1))];
        assert!(matches!(verdict(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn a_long_history_with_little_concurrency_is_fast() {
        let mut h = Vec::new();
        let mut t = 0;
        let mut fencing = 100;
        for round in 0..2_000u32 {
            fencing += 3;
            h.push(op(0, t, t + 3, Acquire(round), Acquired(fencing)));
            h.push(op(1, t + 1, t + 4, Acquire(round + 10_000), Held));
            h.push(unknown(2, t + 2, Acquire(round + 20_000)));
            h.push(op(0, t + 5, t + 6, Release(round), Released));
            h.push(op(2, t + 7, t + 8, Release(round + 20_000), Released));
            t += 10;
        }
        assert_eq!(
            check(LockModel::free(100), &h, 2_000_000),
            Verdict::Linearizable
        );
    }

    #[test]
    fn the_budget_bounds_the_search() {
        let h = [
            op(0, 0, 1, Acquire(1), Acquired(101)),
            op(1, 2, 3, Acquire(2), Acquired(102)),
        ];
        assert!(matches!(
            check(LockModel::free(100), &h, 0),
            Verdict::Inconclusive { .. }
        ));
    }
}
