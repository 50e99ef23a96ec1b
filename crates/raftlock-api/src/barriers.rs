//! Barriers: named N-party rendezvous points inside a namespace, reusable across generations
//! (Grackle's barrier methods, on `POST /v1beta/{Method}`). Barriers use no leases; an idle
//! barrier is deleted `delete_inactive_after_seconds` after its last activity.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::paging::{list_response, request};

/// A barrier as it is at the time of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Barrier {
    /// Name, 1–128 of `[-_0-9a-zA-Z]`.
    pub name: String,
    /// Up to 1024 bytes.
    pub description: String,
    /// Distinct processes that must arrive for the barrier to trip.
    pub expected_processes: u64,
    /// Distinct processes arrived in the current generation.
    pub arrived_processes: u64,
    /// The current generation: starts at 1, +1 per trip.
    pub generation: u64,
    /// Starts at 1 and is bumped by every update; pass it as `expected_version`.
    pub version: u64,
    /// Creation time.
    pub created_at: i64,
    /// Last update time.
    pub updated_at: i64,
    /// Creation or the last arrival.
    pub last_activity_at: i64,
    /// Deleted this long after its last activity.
    pub delete_inactive_after_seconds: u64,
    /// Up to 32 entries.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
}

/// A process that arrived in a generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BarrierParticipant {
    /// The caller's id of the process.
    pub process_id: String,
    /// When it arrived.
    pub arrived_at: i64,
    /// The metadata of its arrival.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
}

/// How a `WaitAtBarrier` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum BarrierWaitOutcome {
    /// The awaited generation tripped.
    #[serde(rename = "BARRIER_WAIT_OUTCOME_TRIPPED")]
    Tripped,
    /// `timeout_seconds` elapsed first.
    #[serde(rename = "BARRIER_WAIT_OUTCOME_TIMED_OUT")]
    TimedOut,
}

// ---- requests --------------------------------------------------------------------------

request! {
    /// `CreateBarrier`.
    CreateBarrierRequest {
        @namespace,
        @named barrier_name: PrimitiveName "The new barrier's name.",
        @description "Up to 1024 bytes.",
        /// Processes that must arrive, 1–1,000,000.
        pub expected_processes: u64 in 1..=1_000_000,
        /// Idle time before deletion, 60–2,592,000 s.
        pub delete_inactive_after_seconds: u64 in 60..=2_592_000,
        @metadata "Up to 32 entries; keys 1–128 bytes, values up to 256 bytes.",
    }
}

request! {
    /// `GetBarrier` and `DeleteBarrier` (deleting an absent barrier is not an error).
    BarrierRequest {
        @namespace,
        @named barrier_name: PrimitiveName "The barrier.",
    }
}

request! {
    /// `UpdateBarrier`: a full replacement, applied only when `expected_version` (required) is
    /// the current version. Lowering `expected_processes` to `arrived_processes` trips it.
    UpdateBarrierRequest {
        @namespace,
        @named barrier_name: PrimitiveName "The barrier.",
        @description "New description.",
        /// New count, at least `arrived_processes`.
        pub expected_processes: u64 in 1..=1_000_000,
        /// New idle time before deletion, 60–2,592,000 s.
        pub delete_inactive_after_seconds: u64 in 60..=2_592_000,
        @metadata "New metadata.",
        @expected_version,
    }
}

request! {
    /// `ListBarriers`.
    ListBarriersRequest {
        @namespace,
        @page,
    }
}

request! {
    /// `ArriveAtBarrier`: records an arrival for `expected_generation` (the current one) and
    /// answers at once; idempotent per (generation, process).
    ArriveAtBarrierRequest {
        @namespace,
        @named barrier_name: PrimitiveName "The barrier.",
        /// The arriving process, 1–128 of `[-_0-9a-zA-Z]`.
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::PrimitiveName))]
        pub process_id: String,
        /// The generation the process arrives at (≥ 1).
        pub expected_generation: u64 in 1..,
        @metadata "Participant metadata.",
    }
}

request! {
    /// `WaitAtBarrier`: blocks on the server until generation `expected_generation` has tripped
    /// or `timeout_seconds` pass; registers no arrival.
    WaitAtBarrierRequest {
        @namespace,
        @named barrier_name: PrimitiveName "The barrier.",
        /// The generation waited for (≥ 1).
        pub expected_generation: u64 in 1..,
        /// Seconds to wait, 0–300 (0: answer at once).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(maximum = 300))]
        pub timeout_seconds: u64,
    }
}

request! {
    /// `ListBarrierParticipants` of one generation (the current one or one of the 8 before it),
    /// by process id.
    ListBarrierParticipantsRequest {
        @namespace,
        @named barrier_name: PrimitiveName "The barrier.",
        /// The generation (≥ 1).
        pub generation: u64 in 1..,
        @page,
    }
}

// ---- responses -------------------------------------------------------------------------

/// Answer of `CreateBarrier`, `GetBarrier` and `UpdateBarrier`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BarrierResponse {
    /// The barrier as it is now.
    pub barrier: Barrier,
}

/// Answer of `ArriveAtBarrier`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArriveAtBarrierResponse {
    /// The barrier as it is now (after a trip: the next generation, nobody arrived).
    pub barrier: Barrier,
    /// True when the generation arrived at has tripped.
    pub all_arrived: bool,
}

/// Answer of `WaitAtBarrier`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitAtBarrierResponse {
    /// The barrier as it is now.
    pub barrier: Barrier,
    /// Tripped or timed out.
    pub outcome: BarrierWaitOutcome,
}

list_response! {
/// Answer of `ListBarriers`.
ListBarriersResponse {
    /// One page, by name.
        barriers: Barrier
    }
}

list_response! {
/// Answer of `ListBarrierParticipants`.
ListBarrierParticipantsResponse {
    /// One page, by process id.
        participants: BarrierParticipant
    }
}
