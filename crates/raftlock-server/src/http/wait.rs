//! Blocking waits (hierarchical `AcquireLock` with `timeout_seconds`): the identity a waiting
//! call keeps across forwards and leader changes, and the guards that dequeue an abandoned
//! waiter and count the calls waiting on this node. The waiting itself is in `rpc` (the
//! handler) and `raftlock_raft::WaiterBoard` (the wake-ups).

use axum::http::request::Parts;
use raftlock_core::command::HierOp;
use raftlock_core::Op;
use rand::distributions::{Alphanumeric, DistString};

use super::forward::{DEADLINE_HEADER, WAITER_ID_HEADER};
use crate::node::SharedNode;

/// The identity of a blocking acquire, fixed by the node the client called and kept across
/// every retry at a new leader, so a retry keeps the call's place in the replicated queue
/// (and cannot queue twice) and its original deadline. Handlers read it as a request
/// extension; it is empty for every other request.
#[derive(Debug, Clone, Default)]
pub struct WaitContext {
    pub waiter_id: Option<String>,
    /// Cluster-time nanoseconds at which the original call gives up.
    pub deadline: Option<i64>,
}

impl WaitContext {
    /// When a wait of `timeout_seconds` starting at `now` ends (cluster-time nanoseconds):
    /// never later than the deadline fixed where the call first arrived, so a call retried at
    /// a new leader does not start its timeout over.
    pub(super) fn ends_at(&self, now: i64, timeout_seconds: u64) -> i64 {
        let own = now + timeout_seconds as i64 * 1_000_000_000;
        self.deadline.map_or(own, |original| own.min(original))
    }

    /// For a request that arrived with `hops` hops and asks to wait `wait_secs`.
    pub(super) fn for_request(
        node: &SharedNode,
        parts: &Parts,
        wait_secs: u64,
        hops: u32,
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
            return WaitContext {
                waiter_id: text(WAITER_ID_HEADER),
                deadline: text(DEADLINE_HEADER).and_then(|d| d.parse().ok()),
            };
        }
        WaitContext {
            waiter_id: Some(new_waiter_id()),
            deadline: Some(node.cluster_now() + wait_secs as i64 * 1_000_000_000),
        }
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
    pending: Option<(SharedNode, String, HierOp)>,
}

impl CancelOnDrop {
    pub(super) fn new(node: SharedNode, project: String, cancel: HierOp) -> Self {
        CancelOnDrop {
            pending: Some((node, project, cancel)),
        }
    }

    pub(super) fn disarm(&mut self) {
        self.pending = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((node, project, op)) = self.pending.take() {
            tokio::spawn(async move {
                if let Err(e) = node.propose(Op::Hier { project, op }).await {
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
