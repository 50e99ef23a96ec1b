//! Idempotent retries: the first outcome of each client request id, remembered for a bounded
//! window in replicated state.
//!
//! A client that lost an answer (cut connection, 503 after a leader change) cannot know whether
//! its call was applied. When the call carries a request id (`X-Volcano-Request-Id`, a UUID
//! reused on retries), apply answers a repeat with the outcome of the first application instead
//! of applying it again — so a retried `CreateLockLease` yields one lease, not two, and a
//! retried project-lock release answers `204` even if someone else took the lock meanwhile.
//!
//! The table is part of the state machine (and of every snapshot), so every node answers a
//! repeat the same way, also after a leader change. It is bounded per project: ids older than
//! [`REMEMBER_FOR`] of state-machine time are forgotten, and at most [`MAX_PER_PROJECT`] are
//! kept (the oldest go first). Both bounds are deterministic functions of the log.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::command::Outcome;
use crate::error::CoreError;
use crate::{Nanos, SECOND};

/// How long (state-machine time) a request id is remembered.
pub const REMEMBER_FOR: Nanos = 600 * SECOND;
/// At most this many request ids are remembered per project (the oldest are forgotten first).
pub const MAX_PER_PROJECT: usize = 10_000;
/// And at most this many bytes of remembered outcomes per project (a namespace's answer
/// carries its metadata, up to ~13 KB), so one tenant's retries cannot grow the state unbounded.
pub const MAX_BYTES_PER_PROJECT: usize = 4 << 20;

/// A remembered first application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Remembered {
    /// When it was applied; the id is forgotten `REMEMBER_FOR` later.
    at: Nanos,
    /// Checksum of what was asked, so an id reused for a different request is refused rather
    /// than answered with another call's outcome.
    fingerprint: u32,
    /// The answer the first application gave.
    outcome: Outcome,
    /// Its encoded size, counted against [`MAX_BYTES_PER_PROJECT`].
    bytes: usize,
}

/// One project's remembered ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ProjectIds {
    by_id: BTreeMap<u128, Remembered>,
    /// Ids in the order they were remembered (time never runs backwards in apply), so the
    /// oldest are forgotten in time proportional to what is forgotten.
    order: VecDeque<u128>,
    /// Sum of `bytes` over `by_id`.
    bytes: usize,
}

impl ProjectIds {
    /// Drops ids older than the window at `t`, then the oldest until at most `keep` ids and
    /// `keep_bytes` bytes remain.
    fn forget(&mut self, t: Nanos, keep: usize, keep_bytes: usize) {
        while let Some(id) = self.order.front() {
            let stale = self.by_id.get(id).is_none_or(|r| r.at + REMEMBER_FOR <= t);
            if !stale && self.order.len() <= keep && self.bytes <= keep_bytes {
                break;
            }
            let id = *id;
            self.order.pop_front();
            if let Some(r) = self.by_id.remove(&id) {
                self.bytes -= r.bytes;
            }
        }
    }
}

/// What [`RequestIds::check`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not remembered: apply the request.
    New,
    /// Applied before with this outcome: answer it again.
    Repeat(Outcome),
}

/// Every project's remembered request ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestIds {
    projects: BTreeMap<String, ProjectIds>,
}

impl RequestIds {
    /// Whether `id` of `project` was applied within the window at `t`; a remembered id whose
    /// fingerprint differs is refused as `Invalid`.
    pub fn check(
        &self,
        project: &str,
        id: u128,
        fingerprint: u32,
        t: Nanos,
    ) -> Result<Seen, CoreError> {
        let live = self
            .projects
            .get(project)
            .and_then(|p| p.by_id.get(&id))
            .filter(|r| r.at + REMEMBER_FOR > t);
        match live {
            None => Ok(Seen::New),
            Some(r) if r.fingerprint == fingerprint => Ok(Seen::Repeat(r.outcome.clone())),
            Some(_) => Err(CoreError::invalid(
                "request_id",
                "this request id was already used for a different request",
            )),
        }
    }

    /// Remembers the first outcome of `id`. Refusals that a later retry may not meet again
    /// (a quota that may have room by then) are not remembered.
    pub fn remember(
        &mut self,
        project: &str,
        id: u128,
        fingerprint: u32,
        outcome: &Outcome,
        t: Nanos,
    ) {
        if matches!(outcome, Err(CoreError::ResourceExhausted(_))) {
            return;
        }
        // Encoded size plus the id and the bookkeeping around it.
        let bytes = crate::codec::encode(outcome).map_or(0, |b| b.len()) + 64;
        let ids = self.projects.entry(project.to_string()).or_default();
        ids.forget(
            t,
            MAX_PER_PROJECT - 1,
            MAX_BYTES_PER_PROJECT.saturating_sub(bytes),
        );
        let remembered = Remembered {
            at: t,
            fingerprint,
            outcome: outcome.clone(),
            bytes,
        };
        ids.bytes += bytes;
        if let Some(old) = ids.by_id.insert(id, remembered) {
            ids.bytes -= old.bytes;
        } else {
            ids.order.push_back(id);
        }
    }

    /// How many ids are remembered across all projects (for metrics and tests).
    pub fn len(&self) -> usize {
        self.projects.values().map(|p| p.by_id.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Reply;

    const P: &str = "p";

    fn done() -> Outcome {
        Ok(Reply::Done)
    }

    #[test]
    fn a_repeat_within_the_window_gets_the_first_outcome() {
        let mut ids = RequestIds::default();
        assert_eq!(ids.check(P, 1, 7, 0).unwrap(), Seen::New);
        ids.remember(P, 1, 7, &Err(CoreError::LockHeld), 0);
        assert_eq!(
            ids.check(P, 1, 7, REMEMBER_FOR - 1).unwrap(),
            Seen::Repeat(Err(CoreError::LockHeld))
        );
        assert_eq!(ids.check(P, 1, 7, REMEMBER_FOR).unwrap(), Seen::New);
        assert_eq!(ids.check("other", 1, 7, 0).unwrap(), Seen::New);
    }

    #[test]
    fn an_id_reused_for_another_request_is_refused() {
        let mut ids = RequestIds::default();
        ids.remember(P, 1, 7, &done(), 0);
        assert!(matches!(
            ids.check(P, 1, 8, 1),
            Err(CoreError::Invalid { .. })
        ));
    }

    #[test]
    fn quota_refusals_are_not_remembered() {
        let mut ids = RequestIds::default();
        ids.remember(
            P,
            1,
            7,
            &Err(CoreError::ResourceExhausted("full".into())),
            0,
        );
        assert_eq!(ids.check(P, 1, 7, 1).unwrap(), Seen::New);
        assert!(ids.is_empty());
    }

    #[test]
    fn old_and_excess_ids_are_forgotten_oldest_first() {
        let mut ids = RequestIds::default();
        for id in 0..MAX_PER_PROJECT as u128 + 5 {
            ids.remember(P, id, 0, &done(), id as Nanos);
        }
        assert_eq!(ids.len(), MAX_PER_PROJECT);
        assert_eq!(ids.check(P, 4, 0, 10).unwrap(), Seen::New);
        assert!(matches!(ids.check(P, 5, 0, 10).unwrap(), Seen::Repeat(_)));
        assert!(ids.projects[P].bytes <= MAX_BYTES_PER_PROJECT);
        // Past the window, the next remember sweeps everything that aged out.
        ids.remember(P, u128::MAX, 0, &done(), REMEMBER_FOR + 100 * SECOND);
        assert_eq!(ids.len(), 1);
    }

    #[test]
    fn large_outcomes_are_bounded_by_bytes() {
        let mut ids = RequestIds::default();
        let big: Outcome = Err(CoreError::invalid("f", "x".repeat(100_000)));
        for id in 0..100 {
            ids.remember(P, id, 0, &big, 0);
        }
        let p = &ids.projects[P];
        assert!(p.bytes <= MAX_BYTES_PER_PROJECT, "{}", p.bytes);
        assert_eq!(p.bytes, p.by_id.values().map(|r| r.bytes).sum::<usize>());
        assert!(ids.len() < 100 && ids.len() >= 40, "{}", ids.len());
        assert!(matches!(ids.check(P, 99, 0, 1).unwrap(), Seen::Repeat(_)));
    }
}
