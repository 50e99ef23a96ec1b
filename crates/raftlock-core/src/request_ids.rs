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
//!
//! Ids a node minted ([`node_minted`]) for a write that came without one are kept apart: a
//! node sends such a write again only within the call's own deadline (after a lost answer,
//! or after openraft answered `ForwardToLeader` for an entry that a later leader may still
//! commit), so they are remembered for [`NODE_MINTED_REMEMBER_FOR`], in a table of their own
//! per project with the same caps. A flood of writes without ids thus never pushes a
//! client's own ids out early. Which table an id belongs to follows from the id itself, so
//! the choice is as deterministic as the log.
//!
//! Under a high write rate the caps forget ids within seconds (10,000 ids last 0.7 s at
//! 15,000 writes a second), sooner than a node's resend of a call may arrive. So a node
//! proposes its resends as such ([`crate::Op::Resent`], with a cluster time its first attempt
//! cannot have been applied before): a resend whose id is not in the table, of a table that
//! may have forgotten an id applied since then, is refused as
//! [`CoreError::OutcomeUnknown`] rather than applied a second time
//! ([`RequestIds::check_resend`]). Whether it may have is read from the table as it is — a
//! table at one of its caps forgot only ids older than its oldest — so the rule needs no state
//! of its own and every node of any release that decodes `Resent` decides it alike.

use std::collections::{BTreeMap, HashMap, VecDeque};

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

/// How long (state-machine time) an id a node minted is remembered: longer than any call's
/// deadline (the commit timeout plus the longest wait), within which alone it is resent.
pub const NODE_MINTED_REMEMBER_FOR: Nanos = 360 * SECOND;

/// More than any one remembered answer weighs ([`Remembered::bytes`]): answers are to requests
/// of at most 64 KiB (the server's body limit) under the core's own field limits, a namespace's
/// the largest at ~13 KB. A table the byte cap trimmed holds more than the cap less this.
const LARGEST_OUTCOME: usize = 1 << 20;

/// The top 32 bits of every id a node mints: `rlnd`. With the UUID version nibble set to 8
/// (custom), a node-minted id is a valid UUID that a client's random (version 4) id never is.
const NODE_MINTED_TAG: u128 = 0x726c_6e64 << 96;
const TAG_MASK: u128 = 0xffff_ffff << 96;
/// The UUID version nibble (bits 76..80) and variant bits (126..128 counted from the top).
const VERSION_MASK: u128 = 0xf << 76;
const VERSION_8: u128 = 0x8 << 76;
const VARIANT_MASK: u128 = 0b11 << 62;
const VARIANT_RFC: u128 = 0b10 << 62;

/// The request id a node gives a write that came without one, from 128 random bits: the
/// same random bits give the same id.
pub fn node_minted(random: u128) -> u128 {
    let payload = random & !(TAG_MASK | VERSION_MASK | VARIANT_MASK);
    payload | NODE_MINTED_TAG | VERSION_8 | VARIANT_RFC
}

/// Whether `id` was minted by a node ([`node_minted`]) rather than sent by a client.
pub fn is_node_minted(id: u128) -> bool {
    id & (TAG_MASK | VERSION_MASK | VARIANT_MASK) == NODE_MINTED_TAG | VERSION_8 | VARIANT_RFC
}

/// How long `id` is remembered.
fn window(id: u128) -> Nanos {
    if is_node_minted(id) {
        NODE_MINTED_REMEMBER_FOR
    } else {
        REMEMBER_FOR
    }
}

/// The table `id` of `project` lives in: the project's own, or (for a node-minted id) the
/// project's table of minted ids. A project name is a simple name, never holding `/`.
fn table_key(project: &str, id: u128) -> std::borrow::Cow<'_, str> {
    if is_node_minted(id) {
        format!("{project}/node-minted").into()
    } else {
        project.into()
    }
}

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
    /// Looked up by every write that carries an id (and a node gives one to every write):
    /// hashed, as a B-tree of a full table's 10,000 ids cost a follower ~15 % of its CPU
    /// under `raftlock-bench scaleout` (a cache miss per level, three walks per write).
    /// Nothing is decided by its order (`order` is): it is encoded in id order, as the
    /// B-tree it replaced was, so every node writes a snapshot the same, and snapshots of
    /// either decode into either.
    #[serde(serialize_with = "in_id_order")]
    by_id: HashMap<u128, Remembered>,
    /// Ids in the order they were remembered (time never runs backwards in apply), so the
    /// oldest are forgotten in time proportional to what is forgotten.
    order: VecDeque<u128>,
    /// Sum of `bytes` over `by_id`.
    bytes: usize,
}

/// Encodes `by_id` as a map in ascending id order.
fn in_id_order<S: serde::Serializer>(
    by_id: &HashMap<u128, Remembered>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut sorted: Vec<(&u128, &Remembered)> = by_id.iter().collect();
    sorted.sort_unstable_by_key(|(id, _)| **id);
    s.collect_map(sorted)
}

impl ProjectIds {
    /// Whether this table may have forgotten, by a cap, an id applied at or after `earliest`.
    /// A cap forgets the oldest id first, and what it keeps is newer; until those age out
    /// (minutes) the table stays at the cap: at [`MAX_PER_PROJECT`] ids, or within the
    /// largest answer of [`MAX_BYTES_PER_PROJECT`]. So a table at neither cap forgot nothing
    /// by one within that time, and one at a cap forgot nothing newer than its oldest id.
    fn may_have_forgotten_since(&self, earliest: Nanos) -> bool {
        let at_a_cap = self.order.len() >= MAX_PER_PROJECT
            || self.bytes + LARGEST_OUTCOME > MAX_BYTES_PER_PROJECT;
        let oldest = self.order.front().and_then(|id| self.by_id.get(id));
        at_a_cap && oldest.is_some_and(|r| r.at >= earliest)
    }

    /// Drops ids older than their window at `t`, then the oldest until at most `keep` ids and
    /// `keep_bytes` bytes remain.
    fn forget(&mut self, t: Nanos, keep: usize, keep_bytes: usize) {
        while let Some(id) = self.order.front() {
            // The caps first: a full table (every write of a busy project) then forgets its
            // oldest id without also looking it up for its age.
            let over = self.order.len() > keep || self.bytes > keep_bytes;
            if !over && self.by_id.get(id).is_some_and(|r| r.at + window(*id) > t) {
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
            .get(table_key(project, id).as_ref())
            .and_then(|p| p.by_id.get(&id))
            .filter(|r| r.at + window(id) > t);
        match live {
            None => Ok(Seen::New),
            Some(r) if r.fingerprint == fingerprint => Ok(Seen::Repeat(r.outcome.clone())),
            Some(_) => Err(CoreError::invalid(
                "request_id",
                "this request id was already used for a different request",
            )),
        }
    }

    /// [`Self::check`] for a node's resend of a call whose first attempt, if applied at all,
    /// was applied at or after `after`: an id not remembered is new only if its table cannot
    /// have forgotten an id applied since then — by a cap
    /// ([`ProjectIds::may_have_forgotten_since`]), or by age, when `after` lies beyond the
    /// id's window; otherwise the first attempt may have been applied and forgotten, and the
    /// resend is refused with [`CoreError::OutcomeUnknown`].
    pub fn check_resend(
        &self,
        project: &str,
        id: u128,
        fingerprint: u32,
        t: Nanos,
        after: Nanos,
    ) -> Result<Seen, CoreError> {
        if let Seen::Repeat(first) = self.check(project, id, fingerprint, t)? {
            return Ok(Seen::Repeat(first));
        }
        let aged_out = after <= t.saturating_sub(window(id));
        let table = self.projects.get(table_key(project, id).as_ref());
        let trimmed = table.is_some_and(|p| p.may_have_forgotten_since(after));
        if aged_out || trimmed {
            return Err(CoreError::OutcomeUnknown);
        }
        Ok(Seen::New)
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
        let bytes = crate::codec::encoded_len(outcome).unwrap_or(0) + 64;
        let table = table_key(project, id);
        // Found without making the name a `String` (the entry API would, for every write).
        if !self.projects.contains_key(table.as_ref()) {
            self.projects
                .insert(table.to_string(), ProjectIds::default());
        }
        let ids = self
            .projects
            .get_mut(table.as_ref())
            .expect("inserted just above");
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
    fn node_minted_ids_are_told_apart_and_kept_apart() {
        let minted = node_minted(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
        assert!(is_node_minted(minted));
        assert!(is_node_minted(node_minted(0)) && is_node_minted(node_minted(u128::MAX)));
        let client = 0x4f83efc2_8fe7_42e8_8347_43493dc5bd8f_u128; // a version-4 UUID
        assert!(!is_node_minted(client));
        assert_eq!(
            uuid_version(minted),
            8,
            "a minted id is a valid version-8 UUID"
        );

        let mut ids = RequestIds::default();
        ids.remember(P, minted, 7, &done(), 0);
        assert!(matches!(
            ids.check(P, minted, 7, NODE_MINTED_REMEMBER_FOR - 1),
            Ok(Seen::Repeat(_))
        ));
        assert_eq!(
            ids.check(P, minted, 7, NODE_MINTED_REMEMBER_FOR).unwrap(),
            Seen::New
        );
        // A flood of minted ids never pushes a client's own id out.
        ids.remember(P, client, 7, &done(), 0);
        for n in 0..MAX_PER_PROJECT as u128 + 10 {
            ids.remember(P, node_minted(n), 0, &done(), 1);
        }
        assert!(matches!(ids.check(P, client, 7, 2), Ok(Seen::Repeat(_))));
        assert_eq!(ids.len(), MAX_PER_PROJECT + 1);
    }

    fn uuid_version(id: u128) -> u128 {
        (id >> 76) & 0xf
    }

    #[test]
    fn a_resend_is_refused_once_its_table_forgot_an_id_applied_since_it_first_went_out() {
        let mut ids = RequestIds::default();
        let first = node_minted(1);
        // The resend's first attempt was applied, if at all, at or after `after`.
        let after = 99 * SECOND;
        let t1 = 100 * SECOND;
        ids.remember(P, first, 7, &done(), t1);
        let resend_at = t1 + 2 * SECOND;
        // Remembered: the first outcome, however busy the project.
        assert!(matches!(
            ids.check_resend(P, first, 7, resend_at, after),
            Ok(Seen::Repeat(_))
        ));
        // Never applied, nothing forgotten: new.
        let unseen = node_minted(2);
        assert_eq!(
            ids.check_resend(P, unseen, 7, resend_at, after).unwrap(),
            Seen::New
        );
        // A flood a second later pushes the first id out by the count cap.
        for n in 0..MAX_PER_PROJECT as u128 {
            ids.remember(P, node_minted(1000 + n), 0, &done(), t1 + SECOND);
        }
        assert_eq!(ids.check(P, first, 7, resend_at).unwrap(), Seen::New);
        assert_eq!(
            ids.check_resend(P, first, 7, resend_at, after),
            Err(CoreError::OutcomeUnknown),
            "applied and forgotten: refused, not applied again"
        );
        assert_eq!(
            ids.check_resend(P, unseen, 7, resend_at, after),
            Err(CoreError::OutcomeUnknown),
            "from the table alone this cannot be told from the forgotten one"
        );
        // A resend whose first attempt came after the table's oldest id was applied is judged
        // by the table alone: what the cap forgot is older.
        let after_oldest = t1 + SECOND + 1;
        assert_eq!(
            ids.check_resend(P, unseen, 7, resend_at, after_oldest)
                .unwrap(),
            Seen::New
        );
        // Client ids keep a table of their own: the minted flood forgot none of them.
        ids.remember(P, 5, 7, &done(), t1);
        assert_eq!(
            ids.check_resend(P, 6, 7, resend_at, after).unwrap(),
            Seen::New
        );
    }

    #[test]
    fn a_table_the_byte_cap_trimmed_refuses_resends_it_cannot_vouch_for() {
        let mut ids = RequestIds::default();
        let big: Outcome = Err(CoreError::invalid("f", "x".repeat(60_000)));
        let t = 100 * SECOND;
        let first = node_minted(0);
        ids.remember(P, first, 0, &big, t);
        let (after, resend_at) = (t - SECOND, t + SECOND);
        assert_eq!(
            ids.check_resend(P, node_minted(1_000), 0, resend_at, after)
                .unwrap(),
            Seen::New
        );
        // ~70 answers of 60 KB fill 4 MiB: the first is forgotten by bytes, not by count.
        for n in 1..100 {
            ids.remember(P, node_minted(n), 0, &big, t);
        }
        assert!(ids.len() < 100);
        assert_eq!(ids.check(P, first, 0, resend_at).unwrap(), Seen::New);
        assert_eq!(
            ids.check_resend(P, first, 0, resend_at, after),
            Err(CoreError::OutcomeUnknown)
        );
    }

    #[test]
    fn a_resend_whose_first_attempt_may_have_aged_out_is_refused() {
        let mut ids = RequestIds::default();
        let id = node_minted(1);
        ids.remember(P, id, 7, &done(), 0);
        let t = NODE_MINTED_REMEMBER_FOR;
        assert_eq!(ids.check(P, id, 7, t).unwrap(), Seen::New);
        assert_eq!(
            ids.check_resend(P, id, 7, t, 0),
            Err(CoreError::OutcomeUnknown)
        );
        // Forgotten by age on the next remember: still refused.
        ids.remember(P, node_minted(2), 0, &done(), t);
        assert_eq!(
            ids.check_resend(P, id, 7, t, 0),
            Err(CoreError::OutcomeUnknown)
        );
        // A first attempt no older than the window is judged by the table.
        assert_eq!(ids.check_resend(P, id, 7, t, 1).unwrap(), Seen::New);
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

    /// `ProjectIds` as it was encoded before its ids were hashed.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct ProjectIdsInBTree {
        by_id: BTreeMap<u128, Remembered>,
        order: VecDeque<u128>,
        bytes: usize,
    }

    #[test]
    fn ids_encode_in_id_order_as_the_btree_did() {
        let mut ids = RequestIds::default();
        // Ids in an order no hash keeps, some of them forgotten again.
        for n in 0..500u128 {
            let id = n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
            ids.remember(P, id, n as u32, &done(), n as Nanos);
        }
        ids.projects
            .get_mut(P)
            .unwrap()
            .forget(100, 450, usize::MAX);
        let table = &ids.projects[P];
        let in_btree = ProjectIdsInBTree {
            by_id: table.by_id.iter().map(|(k, v)| (*k, v.clone())).collect(),
            order: table.order.clone(),
            bytes: table.bytes,
        };
        let encoded = crate::codec::encode(table).unwrap();
        assert_eq!(encoded, crate::codec::encode(&in_btree).unwrap());
        // A copy decoded from either answers as the original did.
        let decoded: ProjectIds = crate::codec::decode(&encoded).unwrap();
        assert_eq!(&decoded, table);
        let back: ProjectIdsInBTree = crate::codec::decode(&encoded).unwrap();
        assert_eq!(back, in_btree);
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
