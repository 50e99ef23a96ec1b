//! The API-facing types of the hierarchical locks: quotas and how a blocking acquire waits,
//! plus the lock/lease/namespace views, which are the wire types of `raftlock-api` (under the
//! names the core has always used). Plain data; the rules that produce them live in the
//! sibling modules.

use serde::{Deserialize, Serialize};

pub use raftlock_api::hierarchy::{
    AcquireLockResponse as AcquireReply, AcquireOutcome, ContentionReason, Lock as LockView,
    LockHolder as HolderView, LockLease as LeaseView, LockState, Namespace as NamespaceView,
};

use crate::Nanos;

/// Quotas of hierarchical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    pub locks_per_namespace: usize,
    pub leases_per_namespace: usize,
    pub namespaces_per_project: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            locks_per_namespace: 1_000_000,
            leases_per_namespace: 1_000_000,
            namespaces_per_project: 100_000,
        }
    }
}

/// How a blocking acquire should wait when it cannot be granted at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitSpec {
    pub waiter_id: String,
    /// State-machine time after which the waiter leaves the queue ungranted.
    pub deadline: Nanos,
}

/// A queued acquire as the call that queued it names it — when it asks where its waiter
/// stands, or gives up waiting: the lock or semaphore, the lease it waits under, what it
/// asked for (`exclusive` for a lock, the `weight` for a semaphore) and its waiter id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedAcquire<'a, Asked> {
    pub name: &'a str,
    pub lease_id: &'a str,
    pub asked: Asked,
    pub waiter_id: &'a str,
}

/// Where a queued acquire stands (see [`Hierarchy::waiter_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitState {
    /// Still in the queue.
    Queued,
    /// Not queued and the lease holds the lock in (at least) the requested mode.
    Granted,
    /// Not queued and not granted (cancelled or past its deadline).
    Dropped,
}
