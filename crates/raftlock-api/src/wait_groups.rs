//! Wait groups: a named counter of jobs inside a namespace that observers wait on until every
//! job is reported complete (Grackle's wait-group methods, on `POST /v1beta/{Method}`).
//! Wait groups use no leases; `expires_at` is their own absolute deadline.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::paging::{list_response, request};

/// Where a wait group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum WaitGroupStatus {
    /// Accepting completions; neither completed nor expired.
    #[serde(rename = "WAIT_GROUP_STATUS_ACTIVE")]
    Active,
    /// `completed_jobs` reached `counter` (terminal).
    #[serde(rename = "WAIT_GROUP_STATUS_COMPLETED")]
    Completed,
    /// `expires_at` passed before it completed (terminal).
    #[serde(rename = "WAIT_GROUP_STATUS_EXPIRED")]
    Expired,
}

/// A wait group as it is at the time of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitGroup {
    /// Name, 1–128 of `[-_0-9a-zA-Z]`.
    pub name: String,
    /// Up to 1024 bytes.
    pub description: String,
    /// Active, completed or expired.
    pub status: WaitGroupStatus,
    /// Jobs the group waits for.
    pub counter: u64,
    /// Distinct jobs reported complete.
    pub completed_jobs: u64,
    /// Starts at 1 and is bumped by every update; pass it as `expected_version`.
    pub version: u64,
    /// Creation time.
    pub created_at: i64,
    /// Last update time.
    pub updated_at: i64,
    /// The group expires at this time unless it completed before.
    pub expires_at: i64,
    /// Kept this long after it finished, then deleted.
    pub delete_after_finished_seconds: u64,
    /// When it completed or expired; 0 while active.
    pub finished_at: i64,
    /// Creation or the last report of jobs.
    pub last_activity_at: i64,
    /// Up to 32 entries.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
}

/// A job reported complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompletedJob {
    /// The caller's id of the job.
    pub job_id: String,
    /// When it was first reported.
    pub completed_at: i64,
    /// The metadata of its first report.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
    pub metadata: BTreeMap<String, String>,
}

/// How a `WaitForWaitGroup` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum WaitGroupWaitOutcome {
    /// Every job completed.
    #[serde(rename = "WAIT_GROUP_WAIT_OUTCOME_COMPLETED")]
    Completed,
    /// The group's `expires_at` passed while it was active.
    #[serde(rename = "WAIT_GROUP_WAIT_OUTCOME_EXPIRED")]
    Expired,
    /// `timeout_seconds` elapsed while the group was active.
    #[serde(rename = "WAIT_GROUP_WAIT_OUTCOME_TIMED_OUT")]
    TimedOut,
}

// ---- requests --------------------------------------------------------------------------

request! {
    /// `CreateWaitGroup`.
    CreateWaitGroupRequest {
        @namespace,
        @named wait_group_name: PrimitiveName "The new wait group's name.",
        @description "Up to 1024 bytes.",
        /// Jobs to wait for, 1–100,000,000.
        pub counter: u64 in 1..=100_000_000,
        /// Absolute deadline (ns since the epoch), at least 60 s after the time the leader
        /// applies the call (the cluster's clock): a schema cannot state a bound that moves, so
        /// a value in the past or less than a minute ahead is refused with `invalid_argument`.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        pub expires_at: i64,
        /// Retention after the group finishes, 60–2,592,000 s.
        pub delete_after_finished_seconds: u64 in 60..=2_592_000,
        @metadata "Up to 32 entries; keys 1–128 bytes, values up to 256 bytes.",
    }
}

request! {
    /// `GetWaitGroup` and `DeleteWaitGroup` (deleting an absent group is not an error).
    WaitGroupRequest {
        @namespace,
        @named wait_group_name: PrimitiveName "The wait group.",
    }
}

request! {
    /// `UpdateWaitGroup`: a full replacement of the mutable fields of an active group, applied
    /// only when `expected_version` (required) is the current version.
    UpdateWaitGroupRequest {
        @namespace,
        @named wait_group_name: PrimitiveName "The wait group.",
        @description "New description.",
        /// New total, at least `completed_jobs` (equal completes the group).
        pub counter: u64 in 1..=100_000_000,
        /// New deadline (ns since the epoch), after the time the leader applies the call (the
        /// cluster's clock); a past one is refused with `invalid_argument`.
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(required = true))]
        pub expires_at: i64,
        /// New retention, 60–2,592,000 s.
        pub delete_after_finished_seconds: u64 in 60..=2_592_000,
        @metadata "New metadata.",
        @expected_version,
    }
}

request! {
    /// `ListWaitGroups`.
    ListWaitGroupsRequest {
        @namespace,
        @page,
    }
}

request! {
    /// One job of a `CompleteJobsFromWaitGroup` batch.
    JobReport {
        /// The job's id, 1–128 of `[-_0-9a-zA-Z]`.
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::PrimitiveName))]
        pub job_id: String,
        @metadata "Kept from the first report of this id.",
    }
}

request! {
    /// `CompleteJobsFromWaitGroup`: idempotent per `job_id`; all of a batch or none of it.
    CompleteJobsFromWaitGroupRequest {
        @namespace,
        @named wait_group_name: PrimitiveName "The wait group.",
        /// 1–50 jobs.
        #[serde(default)]
        #[cfg_attr(
            feature = "openapi",
            schema(required = true, min_items = 1, max_items = 50)
        )]
        pub jobs: Vec<JobReport>,
    }
}

request! {
    /// `ListWaitGroupCompletedJobs`: the completed jobs by id.
    ListWaitGroupCompletedJobsRequest {
        @namespace,
        @named wait_group_name: PrimitiveName "The wait group.",
        @page,
    }
}

request! {
    /// `WaitForWaitGroup`: blocks on the server until the group completes or expires, or
    /// `timeout_seconds` pass.
    WaitForWaitGroupRequest {
        @namespace,
        @named wait_group_name: PrimitiveName "The wait group.",
        /// Seconds to wait, 0–300 (0: answer at once).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(maximum = 300))]
        pub timeout_seconds: u64,
    }
}

// ---- responses -------------------------------------------------------------------------

/// Answer of `CreateWaitGroup`, `GetWaitGroup`, `UpdateWaitGroup` and
/// `CompleteJobsFromWaitGroup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitGroupResponse {
    /// The wait group as it is now.
    pub wait_group: WaitGroup,
}

/// Answer of `WaitForWaitGroup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitForWaitGroupResponse {
    /// The wait group as it is now.
    pub wait_group: WaitGroup,
    /// Completed, expired or timed out.
    pub outcome: WaitGroupWaitOutcome,
}

list_response! {
/// Answer of `ListWaitGroups`.
ListWaitGroupsResponse {
    /// One page, by name.
        wait_groups: WaitGroup
    }
}

list_response! {
/// Answer of `ListWaitGroupCompletedJobs`.
ListWaitGroupCompletedJobsResponse {
    /// One page, by job id.
        jobs: CompletedJob
    }
}
