//! Semaphores: named counters of `permits` inside a namespace, held in `weight`s by semaphore
//! leases — Grackle's semaphore methods, served on the same `POST /v1beta/{Method}` route as
//! the lock methods ([`crate::methods::METHODS`] lists them all).
//!
//! Semaphore leases have the shape of lock leases and reuse their messages
//! ([`LockLease`](crate::hierarchy::LockLease), `CreateLockLeaseRequest`, `LeaseRequest`,
//! `RefreshLockLeaseRequest`, `ListLockLeasesRequest` and their responses); the two kinds are
//! kept apart by the server, so a lock lease cannot hold a semaphore or the reverse.
//!
//! Beyond Grackle: every grant carries a `fencing_token` (unique and increasing across the
//! cluster's semaphores), so a holder can fence the writes it makes under its permits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::paging::{list_response, request};

use crate::hierarchy::AcquireOutcome;

/// A semaphore as it is at the time of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Semaphore {
    /// Name, 1–128 of `[-_0-9a-zA-Z]`.
    pub name: String,
    /// Up to 1024 bytes.
    pub description: String,
    /// Capacity: the most weight held at one instant.
    pub permits: u64,
    /// Sum of the live holders' weights (never above `permits`).
    pub active_holds: u64,
    /// Number of live holders.
    pub active_holders_count: u64,
    /// Starts at 1 and is bumped by every update; pass it as `expected_version`.
    pub version: u64,
    /// Creation time.
    pub created_at: i64,
    /// Last update time.
    pub updated_at: i64,
    /// Last acquire (granted or not) or release.
    pub last_activity_at: i64,
    /// Up to 32 entries.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
}

/// One holder of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreHolder {
    /// The holding semaphore lease.
    pub lease_id: String,
    /// Permits it holds.
    pub weight: u64,
    /// When it was granted (a re-acquire moves it).
    pub locked_at: i64,
    /// The metadata given with its first grant.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
    /// Fencing token of this hold: fixed at its first grant, larger than every token granted
    /// before it.
    pub fencing_token: u64,
}

// ---- requests --------------------------------------------------------------------------

request! {
    /// `CreateSemaphore`.
    CreateSemaphoreRequest {
        @namespace,
        @named semaphore_name: SemaphoreName "The new semaphore's name.",
        @description "Up to 1024 bytes.",
        /// Capacity, 1–2^63-1.
        pub permits: u64 in 1..=9223372036854775807_i64,
        @metadata "Up to 32 entries; keys 1–128 bytes, values up to 256 bytes.",
    }
}

request! {
    /// `GetSemaphore` and `DeleteSemaphore` (deleting drops every holder and waiter; deleting an
    /// absent semaphore is not an error).
    SemaphoreRequest {
        @namespace,
        @named semaphore_name: SemaphoreName "The semaphore.",
    }
}

request! {
    /// `UpdateSemaphore`: a full replacement of description, permits and metadata, applied only
    /// when `expected_version` (required) is the current version. `permits` may not go below the
    /// current `active_holds`.
    UpdateSemaphoreRequest {
        @namespace,
        @named semaphore_name: SemaphoreName "The semaphore.",
        @description "New description.",
        /// New capacity, at least the current `active_holds`.
        pub permits: u64 in 1..=9223372036854775807_i64,
        @metadata "New metadata.",
        @expected_version,
    }
}

request! {
    /// `ListSemaphores`.
    ListSemaphoresRequest {
        @namespace,
        @page,
    }
}

request! {
    /// `ListSemaphoreHolders`: the live holders, in the order they were first granted.
    ListSemaphoreHoldersRequest {
        @namespace,
        @named semaphore_name: SemaphoreName "The semaphore.",
        @page,
    }
}

request! {
    /// `AcquireSemaphore`: all-or-none; with `timeout_seconds > 0` the call waits on the server in
    /// the semaphore's FIFO queue.
    AcquireSemaphoreRequest {
        @namespace,
        @named semaphore_name: SemaphoreName "The semaphore.",
        @lease "The holding semaphore lease.",
        /// Permits to hold, 1–`permits` (a re-acquire sets the holder's weight to this).
        pub weight: u64 in 1..=9223372036854775807_i64,
        /// Seconds to wait on the server in the semaphore's FIFO queue, 0–300 (0: answer at once).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(maximum = 300))]
        pub timeout_seconds: u64,
        @metadata "Holder metadata (kept from the first grant of this lease).",
    }
}

request! {
    /// `ReleaseSemaphore`: releasing what a live lease does not hold changes nothing.
    ReleaseSemaphoreRequest {
        @namespace,
        @named semaphore_name: SemaphoreName "The semaphore.",
        @lease "The holding semaphore lease.",
    }
}

// ---- responses -------------------------------------------------------------------------

/// Answer of `CreateSemaphore`, `GetSemaphore`, `UpdateSemaphore` and `ReleaseSemaphore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreResponse {
    /// The semaphore as it is now.
    pub semaphore: Semaphore,
}

/// Answer of `AcquireSemaphore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AcquireSemaphoreResponse {
    /// The semaphore as it is now.
    pub semaphore: Semaphore,
    /// Acquired, unavailable or timed out.
    pub outcome: AcquireOutcome,
    /// The hold's fencing token when acquired; 0 otherwise.
    pub fencing_token: u64,
}

impl AcquireSemaphoreResponse {
    /// True when the lease now holds the requested weight.
    pub fn acquired(&self) -> bool {
        self.outcome == AcquireOutcome::Acquired
    }
}

list_response! {
/// Answer of `ListSemaphores`.
ListSemaphoresResponse {
    /// One page, by name.
        semaphores: Semaphore
    }
}

list_response! {
/// Answer of `ListSemaphoreHolders`.
ListSemaphoreHoldersResponse {
    /// One page, in the order the holds were first granted.
        holders: SemaphoreHolder
    }
}
