//! Blocking waits (hierarchical `AcquireLock` with `timeout_seconds`): the identity a waiting
//! call keeps across forwards and leader changes, and the guards that dequeue an abandoned
//! waiter and count the calls waiting on this node. The waiting itself is in `rpc` (the
//! handler) and `raftlock_raft::WaiterBoard` (the wake-ups).

use axum::http::request::Parts;
use raftlock_core::command::HierOp;
use raftlock_core::Op;
use rand::distributions::{Alphanumeric, DistString};

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::group::Group;
use crate::headers::{WAITER_ID_HEADER, WAIT_LEFT_HEADER};

/// The identity of a blocking acquire, fixed by the node the client called and kept across
/// every retry at a new leader, so a retry keeps the call's place in the replicated queue
/// (and cannot queue twice) and its original deadline. Handlers read it as a request
/// extension; it is empty for every other request.
///
/// The deadline travels between nodes as the time *left*, measured on the forwarding node's
/// monotonic clock when it sends, never as a cluster-time instant: each node's estimate of
/// cluster time is a lower bound that may trail the leader's line (by up to
/// [`raftlock_core::clock::MAX_LAG`] under a slow leader clock, by more after a restart), so
/// a follower's "now + 1 s" in cluster time is less than 1 s from the leader's now, and a
/// forwarded 1 s wait ended early in real time (CI caught a `WaitForWaitGroup` of 1 s
/// answering `TIMED_OUT` in under 1 s through a follower; the clock suite saw 0.14 s).
#[derive(Debug, Clone, Default)]
pub struct WaitContext {
    /// The waiter's id in the replicated queue; `None` outside blocking calls.
    pub waiter_id: Option<String>,
    /// When the original call gives up, on this node's monotonic clock.
    pub ends: Option<Instant>,
}

impl WaitContext {
    /// When a wait of `timeout_seconds` starting at cluster time `now` ends (cluster-time
    /// nanoseconds): never later than the end fixed where the call first arrived, so a call
    /// retried at a new leader does not start its timeout over.
    pub(super) fn ends_at(&self, now: i64, timeout_seconds: u64) -> i64 {
        let own = Duration::from_secs(timeout_seconds);
        let left = self.ends.map_or(own, |ends| {
            own.min(ends.saturating_duration_since(Instant::now()))
        });
        now.saturating_add(left.as_nanos() as i64)
    }

    /// For a request that arrived at `arrived` with `hops` hops and asks to wait `wait_secs`.
    pub(super) fn for_request(
        parts: &Parts,
        wait_secs: u64,
        hops: u32,
        arrived: Instant,
    ) -> WaitContext {
        if wait_secs == 0 {
            return WaitContext::default();
        }
        if hops > 0 {
            // Set by the peer that forwarded it (its secret was checked).
            let text = |name: &str| {
                parts
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let left = text(WAIT_LEFT_HEADER).and_then(|d| d.parse::<u64>().ok());
            return WaitContext {
                waiter_id: text(WAITER_ID_HEADER),
                ends: left.map(|nanos| arrived + Duration::from_nanos(nanos)),
            };
        }
        WaitContext {
            waiter_id: Some(new_waiter_id()),
            ends: Some(arrived + Duration::from_secs(wait_secs)),
        }
    }

    /// The value of [`WAIT_LEFT_HEADER`] for a forward sent now: nanoseconds left.
    pub(super) fn left_header(&self) -> Option<String> {
        self.ends.map(|ends| {
            ends.saturating_duration_since(Instant::now())
                .as_nanos()
                .to_string()
        })
    }
}

/// The time from `now` to `deadline` (cluster-time nanoseconds), zero once it has passed.
pub(super) fn time_left(deadline: i64, now: i64) -> std::time::Duration {
    std::time::Duration::from_nanos((deadline - now).max(0) as u64)
}

/// A new waiter id: 22 random base62 characters.
pub fn new_waiter_id() -> String {
    Alphanumeric.sample_string(&mut rand::thread_rng(), 22)
}

/// Proposes a cancel if the waiting call goes away (client disconnect drops the handler),
/// so an abandoned waiter leaves the queue at once instead of at its deadline.
pub(super) struct CancelOnDrop {
    pending: Option<(Arc<Group>, String, HierOp)>,
}

impl CancelOnDrop {
    pub(super) fn new(group: Arc<Group>, project: String, cancel: HierOp) -> Self {
        CancelOnDrop {
            pending: Some((group, project, cancel)),
        }
    }

    pub(super) fn disarm(&mut self) {
        self.pending = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((group, project, op)) = self.pending.take() {
            tokio::spawn(async move {
                if let Err(e) = group.propose(Op::Hier { project, op }).await {
                    tracing::warn!(error = %e, "could not dequeue an abandoned waiter");
                }
            });
        }
    }
}

/// Tracks the number of calls waiting on this node (the `raftlock_waiters` gauge).
pub(super) struct WaiterGauge;

impl WaiterGauge {
    pub(super) fn new() -> Self {
        metrics::gauge!("raftlock_waiters").increment(1.0);
        WaiterGauge
    }
}

impl Drop for WaiterGauge {
    fn drop(&mut self) {
        metrics::gauge!("raftlock_waiters").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut req = Request::builder();
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(()).unwrap().into_parts().0
    }

    /// The wait a node gives a call, in cluster-time nanoseconds from its own `now`.
    fn wait_given(ctx: &WaitContext, now: i64, timeout_seconds: u64) -> Duration {
        Duration::from_nanos((ctx.ends_at(now, timeout_seconds) - now) as u64)
    }

    #[test]
    fn a_forwarded_wait_gets_the_time_left_whatever_the_nodes_cluster_time() {
        let sent = WaitContext {
            waiter_id: Some("w".into()),
            ends: Some(Instant::now() + Duration::from_secs(1)),
        };
        let left = sent.left_header().unwrap();
        let headers = [(WAITER_ID_HEADER, "w"), (WAIT_LEFT_HEADER, left.as_str())];
        let got = WaitContext::for_request(&parts(&headers), 1, 1, Instant::now());
        assert_eq!(got.waiter_id.as_deref(), Some("w"));
        // The leader's cluster time is unrelated to the follower's: the wait is the same.
        for leader_now in [0, 1_700_000_000_000_000_000, 1_700_000_000_500_000_000] {
            let given = wait_given(&got, leader_now, 1);
            assert!(given > Duration::from_millis(900), "{given:?}");
            assert!(given <= Duration::from_secs(1), "{given:?}");
        }
    }

    #[test]
    fn a_retry_never_waits_longer_than_the_call_has_left() {
        let arrived = Instant::now() - Duration::from_millis(600);
        let first = WaitContext::for_request(&parts(&[]), 1, 0, arrived);
        assert!(first.waiter_id.is_some());
        assert!(wait_given(&first, 42, 1) <= Duration::from_millis(400));
        // Past its end: no wait at all, not a negative one.
        let late = WaitContext::for_request(&parts(&[]), 1, 0, arrived - Duration::from_secs(2));
        assert_eq!(late.ends_at(42, 1), 42);
    }

    #[test]
    fn a_forward_without_the_header_waits_its_own_timeout() {
        let got = WaitContext::for_request(&parts(&[]), 3, 1, Instant::now());
        assert_eq!(got.ends, None);
        assert_eq!(wait_given(&got, 7, 3), Duration::from_secs(3));
        let none = WaitContext::for_request(&parts(&[]), 0, 0, Instant::now());
        assert!(none.waiter_id.is_none() && none.ends.is_none());
    }
}
