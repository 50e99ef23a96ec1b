//! The hierarchical-lock API: `POST /v1beta/{Method}` with the request message as the JSON
//! body and the response message as the answer, in the field names and enum strings of the
//! Grackle lock API.
//!
//! Names: namespaces 1–128 of `[-_0-9a-zA-Z]`; lock names `/`-separated paths of such
//! segments. Timestamps are int64 nanoseconds since the Unix epoch ([`Nanos`]); durations are
//! whole seconds. A non-acquired `AcquireLock` is a normal answer (an [`AcquireOutcome`]), not
//! an error.

use serde::{Deserialize, Serialize};

use crate::paging::{list_response, request};

use std::collections::BTreeMap;

// ---- views -----------------------------------------------------------------------------

/// A namespace: the container of leases and locks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Namespace {
    /// Name, 1–128 of `[-_0-9a-zA-Z]`.
    pub name: String,
    /// Up to 1024 bytes.
    pub description: String,
    /// Up to 32 entries.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
    /// Starts at 1 and is bumped by every update; pass it as `expected_version`.
    pub version: u64,
    /// Creation time.
    pub created_at: i64,
    /// Last update time.
    pub updated_at: i64,
}

/// A server-side lease that holds locks (a lock lease) or semaphore permits (a semaphore
/// lease: same shape, kept apart — one kind cannot be used for the other).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockLease {
    /// `ls_` + 28 base62 characters.
    pub lease_id: String,
    /// The owner's self-chosen process id.
    pub process_id: String,
    /// Creation time.
    pub created_at: i64,
    /// Expiry; a refresh moves it to now + TTL.
    pub expires_at: i64,
}

/// State of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum LockState {
    /// No holder.
    #[serde(rename = "LOCK_STATE_UNLOCKED")]
    Unlocked,
    /// One or more shared holders.
    #[serde(rename = "LOCK_STATE_SHARED_LOCKED")]
    SharedLocked,
    /// One exclusive holder.
    #[serde(rename = "LOCK_STATE_EXCLUSIVE_LOCKED")]
    ExclusiveLocked,
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockHolder {
    /// The holding lease.
    pub lease_id: String,
    /// When this holder acquired.
    pub locked_at: i64,
    /// The metadata given at its first acquire.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
}

/// A lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lock {
    /// Path, `/`-separated.
    pub name: String,
    /// Current state.
    pub state: LockState,
    /// When it was first locked by its current holders (0 when unlocked).
    pub locked_at: i64,
    /// Last acquire or release.
    pub last_activity_at: i64,
    /// Current holders, in arrival order.
    pub lock_holders: Vec<LockHolder>,
}

impl Lock {
    /// The view of a lock nobody holds.
    pub fn unlocked(name: &str) -> Self {
        Lock {
            name: name.to_string(),
            state: LockState::Unlocked,
            locked_at: 0,
            last_activity_at: 0,
            lock_holders: vec![],
        }
    }
}

/// How an acquire ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AcquireOutcome {
    /// The lease holds the lock.
    #[serde(rename = "ACQUIRE_OUTCOME_ACQUIRED")]
    Acquired,
    /// `timeout_seconds` was 0 and the lock is held incompatibly.
    #[serde(rename = "ACQUIRE_OUTCOME_UNAVAILABLE")]
    Unavailable,
    /// The call waited `timeout_seconds` without acquiring.
    #[serde(rename = "ACQUIRE_OUTCOME_TIMED_OUT")]
    TimedOut,
}

/// What blocked an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ContentionReason {
    /// Not blocked.
    #[serde(rename = "CONTENTION_REASON_UNSPECIFIED")]
    Unspecified,
    /// A holder of the same path.
    #[serde(rename = "CONTENTION_REASON_PEER")]
    Peer,
    /// A holder of an ancestor path.
    #[serde(rename = "CONTENTION_REASON_ANCESTOR")]
    Ancestor,
    /// A holder of a descendant path.
    #[serde(rename = "CONTENTION_REASON_DESCENDANT")]
    Descendant,
}

// ---- requests --------------------------------------------------------------------------

request! {
    /// `CreateNamespace`.
    CreateNamespaceRequest {
        /// Name, 1–128 of `[-_0-9a-zA-Z]`.
        #[serde(alias = "namespace_name")]
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::NamespaceName))]
        pub name: String,
        @description "Up to 1024 bytes.",
        @metadata "Up to 32 entries; keys 1–128 bytes, values up to 256 bytes.",
    }
}

request! {
    /// `GetNamespace` and `DeleteNamespace` (deleting an absent namespace is not an error).
    NamespaceRequest {
        /// The namespace.
        #[serde(alias = "name")]
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::NamespaceName))]
        pub namespace_name: String,
    }
}

request! {
    /// `UpdateNamespace`: a full replacement of description and metadata, applied only when
    /// `expected_version` (required) is the current version.
    UpdateNamespaceRequest {
        /// The namespace.
        #[serde(alias = "name")]
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::NamespaceName))]
        pub namespace_name: String,
        @description "New description.",
        @metadata "New metadata.",
        @expected_version,
    }
}

request! {
    /// `ListNamespaces`.
    ListNamespacesRequest {
        @page,
    }
}

request! {
    /// `CreateLockLease`: every call makes a new lease.
    CreateLockLeaseRequest {
        @namespace,
        /// The owner's self-chosen id, 1–128 characters, none of them a control character.
        #[serde(default)]
        #[cfg_attr(
            feature = "openapi",
            schema(
                required = true,
                min_length = 1,
                max_length = 128,
                pattern = r"^[^\x00-\x1F\x7F-\x9F]{1,128}$"
            )
        )]
        pub process_id: String,
        @ttl "Lease length, 1–300 seconds.",
    }
}

request! {
    /// `RefreshLockLease`: `expires_at = now + ttl` for the lease and its locks; an expired lease
    /// is released and answers `not_found`.
    RefreshLockLeaseRequest {
        @namespace,
        @lease "The lease.",
        @ttl "New lease length, 1–300 seconds.",
    }
}

request! {
    /// `GetLockLease` and `RevokeLockLease` (revoking releases every lock the lease holds).
    LeaseRequest {
        @namespace,
        @lease "The lease.",
    }
}

request! {
    /// `ListLockLeases`.
    ListLockLeasesRequest {
        @namespace,
        /// Only this process's leases (empty: all).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(max_length = 128))]
        pub process_id: String,
        @page,
    }
}

request! {
    /// `AcquireLock`.
    AcquireLockRequest {
        @namespace,
        @named lock_name: LockName "Lock path, `/`-separated.",
        @lease "The holding lease.",
        /// Exclusive (true) or shared (false).
        #[serde(default)]
        pub exclusive: bool,
        /// Seconds to wait on the server in the lock's FIFO queue, 0–300 (0: answer at once).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(maximum = 300))]
        pub timeout_seconds: u64,
        @metadata "Holder metadata (kept from the first acquire of this lease).",
    }
}

request! {
    /// `ReleaseLock`: `not_found` when the lease does not exist.
    ReleaseLockRequest {
        @namespace,
        @named lock_name: LockName "Lock path.",
        @lease "The holding lease.",
    }
}

request! {
    /// `GetLock` and `DeleteLock` (deleting drops every holder and waiter of the lock).
    LockRequest {
        @namespace,
        @named lock_name: LockName "Lock path.",
    }
}

request! {
    /// `ListLocks` (only locked locks are listed).
    ListLocksRequest {
        @namespace,
        @page,
    }
}

request! {
    /// `ListWaiters` (raftlock's extension): the queued blocking acquires of a namespace.
    ListWaitersRequest {
        @namespace,
    }
}

// ---- responses -------------------------------------------------------------------------

/// Answer of `CreateNamespace`, `GetNamespace` and `UpdateNamespace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NamespaceResponse {
    /// The namespace as it is now.
    pub namespace: Namespace,
}

/// Answer of `CreateLockLease`, `GetLockLease` and `RefreshLockLease`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockLeaseResponse {
    /// The lease as it is now.
    pub lease: LockLease,
}

/// Answer of `GetLock` and `ReleaseLock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockResponse {
    /// The lock as it is now.
    pub lock: Lock,
}

/// Answer of the delete and revoke methods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EmptyResponse {}

/// Answer of `AcquireLock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AcquireLockResponse {
    /// The lock as it is now.
    pub lock: Lock,
    /// Acquired, unavailable or timed out.
    pub outcome: AcquireOutcome,
    /// What blocked it (`CONTENTION_REASON_UNSPECIFIED` on success).
    pub reason: ContentionReason,
    /// Blocking ancestor or descendant locks (empty for a peer), at most 50.
    pub blocking_locks: Vec<Lock>,
}

impl AcquireLockResponse {
    /// True when the lease now holds the lock.
    pub fn acquired(&self) -> bool {
        self.outcome == AcquireOutcome::Acquired
    }
}

list_response! {
/// Answer of `ListNamespaces`.
ListNamespacesResponse {
    /// One page, by name.
        namespaces: Namespace
    }
}

list_response! {
/// Answer of `ListLockLeases`.
ListLockLeasesResponse {
    /// One page, by lease id.
        leases: LockLease
    }
}

list_response! {
/// Answer of `ListLocks`.
ListLocksResponse {
    /// One page, by name.
        locks: Lock
    }
}

/// Answer of `ListWaiters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListWaitersResponse {
    /// Queued acquires by lock, each lock's queue head first.
    pub waiters: Vec<Waiter>,
}

/// One queued blocking acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Waiter {
    /// The lock it waits for.
    pub lock_name: String,
    /// The lease that will hold it.
    pub lease_id: String,
    /// Exclusive (true) or shared (false).
    pub exclusive: bool,
    /// Place in the lock's queue, 1 being the head.
    pub position: u32,
}
