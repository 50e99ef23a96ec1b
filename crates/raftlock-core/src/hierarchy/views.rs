//! The API-facing types of §5: quotas, lock/lease/namespace views, acquire answers, and how
//! a blocking acquire waits. Plain data; the rules that produce them live in the sibling
//! modules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Nanos;

/// Quotas of §5.
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

/// State of a lock as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockState {
    #[serde(rename = "LOCK_STATE_UNLOCKED")]
    Unlocked,
    #[serde(rename = "LOCK_STATE_SHARED_LOCKED")]
    SharedLocked,
    #[serde(rename = "LOCK_STATE_EXCLUSIVE_LOCKED")]
    ExclusiveLocked,
}

/// Result of an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcquireOutcome {
    #[serde(rename = "ACQUIRE_OUTCOME_ACQUIRED")]
    Acquired,
    #[serde(rename = "ACQUIRE_OUTCOME_UNAVAILABLE")]
    Unavailable,
    #[serde(rename = "ACQUIRE_OUTCOME_TIMED_OUT")]
    TimedOut,
}

/// What blocked an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentionReason {
    #[serde(rename = "CONTENTION_REASON_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "CONTENTION_REASON_PEER")]
    Peer,
    #[serde(rename = "CONTENTION_REASON_ANCESTOR")]
    Ancestor,
    #[serde(rename = "CONTENTION_REASON_DESCENDANT")]
    Descendant,
}

/// One holder as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    pub lease_id: String,
    pub locked_at: Nanos,
    pub metadata: BTreeMap<String, String>,
}

/// A lock as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockView {
    pub name: String,
    pub state: LockState,
    pub locked_at: Nanos,
    pub last_activity_at: Nanos,
    pub lock_holders: Vec<HolderView>,
}

impl LockView {
    /// The view of a lock nobody holds.
    pub fn unlocked(name: &str) -> Self {
        LockView {
            name: name.to_string(),
            state: LockState::Unlocked,
            locked_at: 0,
            last_activity_at: 0,
            lock_holders: vec![],
        }
    }
}

/// Answer of `AcquireLock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireReply {
    pub lock: LockView,
    pub outcome: AcquireOutcome,
    pub reason: ContentionReason,
    pub blocking_locks: Vec<LockView>,
}

/// A lease as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    pub lease_id: String,
    pub process_id: String,
    pub created_at: Nanos,
    pub expires_at: Nanos,
}

/// A namespace as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceView {
    pub name: String,
    pub description: String,
    pub metadata: BTreeMap<String, String>,
    pub version: u64,
    pub created_at: Nanos,
    pub updated_at: Nanos,
}

/// How a blocking acquire should wait when it cannot be granted at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitSpec {
    pub waiter_id: String,
    /// State-machine time after which the waiter leaves the queue ungranted.
    pub deadline: Nanos,
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
