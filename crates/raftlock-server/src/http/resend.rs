//! What a resend knows of its call's first attempt: the bound the state machine needs to tell
//! a resend it may answer from the id table from one it must refuse
//! (`raftlock_core::request_ids::RequestIds::check_resend`).
//!
//! A node resends a write (after a lost answer or a leader change) under the call's request
//! id, proposed as [`raftlock_core::Op::Resent`] with a cluster time of the call's group before
//! which its first attempt cannot have been applied. Two bounds travel with every forward of a
//! call that has an id, so that whichever node finally decides a resend has one:
//! * **after** ([`FIRST_AFTER_HEADER`], `group:nanoseconds`): the applied time of the group's
//!   replica on the node the client called, read before any attempt left it. Any copy of the
//!   call that commits is appended after every entry that replica had applied, so it is
//!   applied at that time or later: a bound from the log's order, no clock in it. Only the
//!   node the client called may take it (nothing of the call left before it arrived there),
//!   only from a replica that has applied something, and it holds only in that group's time.
//! * **within** ([`FIRST_WITHIN_HEADER`], milliseconds): how long before the receiver got the
//!   forward the first attempt can have gone out — each node adds the time from receiving
//!   the call to its own deadline, after which it sends nothing more. Turned into cluster time
//!   by the deciding node ([`FirstSent::after_in`]) as its applied time less that and
//!   [`CLOCK_SLACK`]: an estimate resting on the clock rule (cluster time gains about real
//!   time), used only where the log-order bound is missing — a node without a replica of the
//!   group called, or the bound is of another group.
//!
//! [`RESENT_HEADER`] marks a forward as a resend: an earlier attempt may have been proposed.

use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use raftlock_core::Nanos;
use raftlock_raft::GroupId;

use crate::headers::{FIRST_AFTER_HEADER, FIRST_WITHIN_HEADER, RESENT_HEADER};

/// What turning a real-time bound into cluster time leaves out: a stamp may trail its leader's
/// line by `MAX_LAG` (0.5 s), slew may add up to 0.5 s a term, a new leader's line starts from
/// its last applied time (which may lag), and a forward may sit in buffers past its sender's
/// deadline. Generous: it only widens what counts as "maybe forgotten".
pub const CLOCK_SLACK: Duration = Duration::from_secs(10);

/// The bounds on when a call's first attempt can have been applied (module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstSent {
    /// The called node's replica's applied time, in that group's cluster time.
    pub after: Option<(GroupId, Nanos)>,
    /// The first attempt went out at most this long before `Instant`, when this node
    /// received the call.
    pub within: Option<(Duration, Instant)>,
    /// From the call's arrival here to this node's deadline for it: a forward from here is
    /// received within that, or never.
    pub budget: Duration,
}

impl FirstSent {
    /// The bounds for a call that reached this node at `arrived` as forward number `hops`
    /// (0: from the client), with its deadline here at `deadline`. `local` is this node's
    /// replica of the call's group, when it hosts one: `(group, applied time)`.
    pub fn for_call(
        came: FirstSent,
        hops: u32,
        local: Option<(GroupId, Nanos)>,
        arrived: Instant,
        deadline: Instant,
    ) -> FirstSent {
        let after = match hops {
            // Nothing of the call left before it arrived here; a replica that has applied
            // nothing bounds nothing.
            0 => local.filter(|(_, applied)| *applied > 0),
            _ => came.after,
        };
        // From the client: the first attempt leaves after this arrival. From a peer: what it
        // said, or nothing when it said nothing usable (never taken as zero).
        let within = match hops {
            0 => Some((Duration::ZERO, arrived)),
            _ => came.within.map(|(within, _)| (within, arrived)),
        };
        FirstSent {
            after,
            within,
            budget: deadline.saturating_duration_since(arrived),
        }
    }

    /// The bound in `group`'s cluster time on a replica of it that has applied up to
    /// `applied_now`: the log-order bound when it is of this group, else the real-time one
    /// turned into cluster time, else the earliest time there is (the resend is then refused
    /// unless its id is remembered).
    pub fn after_in(&self, group: GroupId, applied_now: Nanos) -> Nanos {
        if let Some((of, after)) = self.after {
            if of == group {
                return after;
            }
        }
        match self.within {
            Some((within, arrived)) => {
                let since = within + arrived.elapsed() + CLOCK_SLACK;
                applied_now.saturating_sub(nanos(since))
            }
            None => Nanos::MIN,
        }
    }

    /// The bounds a peer's forward carries, and whether it is a resend. Read only from a
    /// forward whose cluster secret was checked; a malformed value counts as absent (the
    /// bound then falls back to the other, or to the earliest time: a refusal, never a
    /// second apply). `arrived`: when this node received it.
    pub fn from_peer(headers: &HeaderMap, arrived: Instant) -> (FirstSent, bool) {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let after = text(FIRST_AFTER_HEADER).and_then(|v| {
            let (group, time) = v.split_once(':')?;
            Some((group.parse().ok()?, time.parse().ok()?))
        });
        let within = text(FIRST_WITHIN_HEADER)
            .and_then(|v| v.parse().ok())
            .map(|ms| (Duration::from_millis(ms), arrived));
        let resent = headers.contains_key(RESENT_HEADER);
        let budget = Duration::ZERO;
        (
            FirstSent {
                after,
                within,
                budget,
            },
            resent,
        )
    }

    /// The headers a forward of the call carries (`resent`: it is a resend).
    pub fn headers(&self, resent: bool) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(3);
        if let Some((group, after)) = self.after {
            out.push((FIRST_AFTER_HEADER, format!("{group}:{after}")));
        }
        if let Some((within, _)) = self.within {
            // Rounded up: the receiver takes it as a bound.
            let ms = (within + self.budget).as_nanos().div_ceil(1_000_000);
            out.push((FIRST_WITHIN_HEADER, ms.to_string()));
        }
        if resent {
            out.push((RESENT_HEADER, "1".to_string()));
        }
        out
    }
}

/// `d` in the state machine's unit (saturating).
pub fn nanos(d: Duration) -> Nanos {
    Nanos::try_from(d.as_nanos()).unwrap_or(Nanos::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Nanos = 1_000_000_000;

    fn round_trip(first: FirstSent, resent: bool) -> (FirstSent, bool) {
        let mut headers = HeaderMap::new();
        for (name, value) in first.headers(resent) {
            headers.insert(name, value.parse().unwrap());
        }
        FirstSent::from_peer(&headers, Instant::now())
    }

    #[test]
    fn the_called_node_bounds_by_its_replica_and_peers_pass_it_on() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(2);
        let called = FirstSent::for_call(
            FirstSent::default(),
            0,
            Some((3, 50 * SECOND)),
            now,
            deadline,
        );
        assert_eq!(called.after, Some((3, 50 * SECOND)));
        assert_eq!(called.within.map(|(w, _)| w), Some(Duration::ZERO));
        assert_eq!(called.budget, Duration::from_secs(2));
        // A replica that applied nothing bounds nothing; a node without one neither.
        let empty = FirstSent::for_call(FirstSent::default(), 0, Some((3, 0)), now, deadline);
        assert_eq!(empty.after, None);

        let (came, resent) = round_trip(called, true);
        assert!(resent);
        assert_eq!(came.after, Some((3, 50 * SECOND)));
        let within = came.within.unwrap().0;
        assert!(within >= Duration::from_secs(2) && within < Duration::from_secs(3));
        // A peer's own replica never replaces the called node's bound.
        let at_peer = FirstSent::for_call(came, 1, Some((3, 90 * SECOND)), now, deadline);
        assert_eq!(at_peer.after, Some((3, 50 * SECOND)));
        assert_eq!(at_peer.after_in(3, 95 * SECOND), 50 * SECOND);
        let (onward, resent) = round_trip(at_peer, false);
        assert!(!resent);
        assert!(onward.within.unwrap().0 >= Duration::from_secs(4));
    }

    #[test]
    fn without_a_bound_of_its_own_group_the_real_time_one_is_turned_into_cluster_time() {
        let now = Instant::now();
        let first = FirstSent {
            after: Some((0, 50 * SECOND)),
            within: Some((Duration::from_secs(3), now)),
            budget: Duration::from_secs(2),
        };
        // Of the meta group (0), decided in shard 2: the real-time bound.
        let after = first.after_in(2, 100 * SECOND);
        let expected = 100 * SECOND - 3 * SECOND - nanos(CLOCK_SLACK);
        assert!(
            (expected - SECOND / 10..=expected).contains(&after),
            "{after}"
        );
        // No bound at all: the earliest time there is.
        assert_eq!(FirstSent::default().after_in(2, 100 * SECOND), Nanos::MIN);
    }

    #[test]
    fn malformed_bounds_count_as_absent() {
        let mut headers = HeaderMap::new();
        headers.insert(FIRST_AFTER_HEADER, "-5".parse().unwrap());
        headers.insert(FIRST_WITHIN_HEADER, "soon".parse().unwrap());
        let (first, resent) = FirstSent::from_peer(&headers, Instant::now());
        assert_eq!(first, FirstSent::default());
        assert!(!resent);
        // Passed on by a peer, an absent bound stays absent: a resend is then refused
        // unless its id is remembered, never judged by a bound of zero.
        let now = Instant::now();
        let at_peer = FirstSent::for_call(first, 1, Some((1, 90 * SECOND)), now, now);
        assert_eq!(at_peer.after_in(1, 90 * SECOND), Nanos::MIN);
        assert!(round_trip(at_peer, true).0.within.is_none());
        // A negative time of a group is a time (a state before any stamp would be 0).
        headers.insert(FIRST_AFTER_HEADER, "1:-5".parse().unwrap());
        let (first, _) = FirstSent::from_peer(&headers, Instant::now());
        assert_eq!(first.after, Some((1, -5)));
    }
}
