//! Wait groups and barriers: typed calls for their methods of `POST /v1beta/{Method}`.
//! `wait_for_wait_group` and `wait_at_barrier` block on the server up to their timeout; how
//! they ended is their answer's `outcome`, not an error.

use raftlock_api::barriers::{
    BarrierResponse, ListBarrierParticipantsResponse, ListBarriersResponse,
};
use raftlock_api::wait_groups::{
    ListWaitGroupCompletedJobsResponse, ListWaitGroupsResponse, WaitGroupResponse,
};
use std::time::Duration;

use raftlock_api::barriers::{
    ArriveAtBarrierRequest, BarrierRequest, CreateBarrierRequest, ListBarrierParticipantsRequest,
    ListBarriersRequest, WaitAtBarrierRequest,
};
pub use raftlock_api::barriers::{
    ArriveAtBarrierResponse, Barrier, BarrierParticipant, BarrierWaitOutcome, UpdateBarrierRequest,
    WaitAtBarrierResponse,
};
use raftlock_api::wait_groups::{
    CompleteJobsFromWaitGroupRequest, CreateWaitGroupRequest, ListWaitGroupCompletedJobsRequest,
    ListWaitGroupsRequest, WaitForWaitGroupRequest, WaitGroupRequest,
};
pub use raftlock_api::wait_groups::{
    CompletedJob, JobReport, UpdateWaitGroupRequest, WaitForWaitGroupResponse, WaitGroup,
    WaitGroupStatus, WaitGroupWaitOutcome,
};

use crate::error::Result;
use crate::hierarchy::{Metadata, Nanos, Page, PageRequest};
use crate::transport::Client;

impl Client {
    /// `CreateWaitGroup` for `counter` jobs, expiring at `expires_at` (ns since the epoch, at
    /// least 60 s ahead), kept `retention` after it finishes.
    pub async fn create_wait_group(
        &self,
        namespace: &str,
        name: &str,
        counter: u64,
        expires_at: Nanos,
        retention: Duration,
        metadata: Metadata,
    ) -> Result<WaitGroup> {
        let body = CreateWaitGroupRequest {
            namespace_name: namespace.to_string(),
            wait_group_name: name.to_string(),
            description: String::new(),
            counter,
            expires_at,
            delete_after_finished_seconds: retention.as_secs(),
            metadata,
        };
        self.rpc_field("CreateWaitGroup", &body, |r: WaitGroupResponse| {
            r.wait_group
        })
        .await
    }

    /// `GetWaitGroup`.
    pub async fn get_wait_group(&self, namespace: &str, name: &str) -> Result<WaitGroup> {
        let body = WaitGroupRequest {
            namespace_name: namespace.to_string(),
            wait_group_name: name.to_string(),
        };
        self.rpc_field("GetWaitGroup", &body, |r: WaitGroupResponse| r.wait_group)
            .await
    }

    /// `UpdateWaitGroup`: a full replacement of an active group, only at `expected_version`.
    pub async fn update_wait_group(&self, req: &UpdateWaitGroupRequest) -> Result<WaitGroup> {
        self.rpc_field("UpdateWaitGroup", req, |r: WaitGroupResponse| r.wait_group)
            .await
    }

    /// `DeleteWaitGroup` (absent → `Ok`).
    pub async fn delete_wait_group(&self, namespace: &str, name: &str) -> Result<()> {
        let body = WaitGroupRequest {
            namespace_name: namespace.to_string(),
            wait_group_name: name.to_string(),
        };
        self.rpc("DeleteWaitGroup", &body, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `ListWaitGroups`, by name.
    pub async fn list_wait_groups(
        &self,
        namespace: &str,
        page: &PageRequest,
    ) -> Result<Page<WaitGroup>> {
        let body = ListWaitGroupsRequest {
            namespace_name: namespace.to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListWaitGroupsResponse>("ListWaitGroups", &body)
            .await
    }

    /// `CompleteJobsFromWaitGroup`: idempotent per job id, so retried freely.
    pub async fn complete_jobs(
        &self,
        namespace: &str,
        name: &str,
        jobs: Vec<JobReport>,
    ) -> Result<WaitGroup> {
        let body = CompleteJobsFromWaitGroupRequest {
            namespace_name: namespace.to_string(),
            wait_group_name: name.to_string(),
            jobs,
        };
        self.rpc_field(
            "CompleteJobsFromWaitGroup",
            &body,
            |r: WaitGroupResponse| r.wait_group,
        )
        .await
    }

    /// `ListWaitGroupCompletedJobs`, by job id.
    pub async fn list_completed_jobs(
        &self,
        namespace: &str,
        name: &str,
        page: &PageRequest,
    ) -> Result<Page<CompletedJob>> {
        let body = ListWaitGroupCompletedJobsRequest {
            namespace_name: namespace.to_string(),
            wait_group_name: name.to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListWaitGroupCompletedJobsResponse>("ListWaitGroupCompletedJobs", &body)
            .await
    }

    /// `WaitForWaitGroup`: blocks on the server until the group completes or expires, or
    /// `timeout` (≤ 300 s) passes.
    pub async fn wait_for_wait_group(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<WaitForWaitGroupResponse> {
        let body = WaitForWaitGroupRequest {
            namespace_name: namespace.to_string(),
            wait_group_name: name.to_string(),
            timeout_seconds: timeout.as_secs(),
        };
        let v = self.rpc("WaitForWaitGroup", &body, timeout).await?;
        serde_json::from_value(v).map_err(|e| self.protocol("WaitForWaitGroup", e))
    }

    /// `CreateBarrier` for `expected_processes`, deleted after `idle` without activity.
    pub async fn create_barrier(
        &self,
        namespace: &str,
        name: &str,
        expected_processes: u64,
        idle: Duration,
        metadata: Metadata,
    ) -> Result<Barrier> {
        let body = CreateBarrierRequest {
            namespace_name: namespace.to_string(),
            barrier_name: name.to_string(),
            description: String::new(),
            expected_processes,
            delete_inactive_after_seconds: idle.as_secs(),
            metadata,
        };
        self.rpc_field("CreateBarrier", &body, |r: BarrierResponse| r.barrier)
            .await
    }

    /// `GetBarrier`.
    pub async fn get_barrier(&self, namespace: &str, name: &str) -> Result<Barrier> {
        let body = BarrierRequest {
            namespace_name: namespace.to_string(),
            barrier_name: name.to_string(),
        };
        self.rpc_field("GetBarrier", &body, |r: BarrierResponse| r.barrier)
            .await
    }

    /// `UpdateBarrier`: a full replacement, only at `expected_version`.
    pub async fn update_barrier(&self, req: &UpdateBarrierRequest) -> Result<Barrier> {
        self.rpc_field("UpdateBarrier", req, |r: BarrierResponse| r.barrier)
            .await
    }

    /// `DeleteBarrier` (absent → `Ok`).
    pub async fn delete_barrier(&self, namespace: &str, name: &str) -> Result<()> {
        let body = BarrierRequest {
            namespace_name: namespace.to_string(),
            barrier_name: name.to_string(),
        };
        self.rpc("DeleteBarrier", &body, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `ListBarriers`, by name.
    pub async fn list_barriers(
        &self,
        namespace: &str,
        page: &PageRequest,
    ) -> Result<Page<Barrier>> {
        let body = ListBarriersRequest {
            namespace_name: namespace.to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListBarriersResponse>("ListBarriers", &body)
            .await
    }

    /// `ArriveAtBarrier` at `generation`: idempotent per (generation, process), so retried
    /// freely; answers at once.
    pub async fn arrive_at_barrier(
        &self,
        namespace: &str,
        name: &str,
        process_id: &str,
        generation: u64,
        metadata: Metadata,
    ) -> Result<ArriveAtBarrierResponse> {
        let body = ArriveAtBarrierRequest {
            namespace_name: namespace.to_string(),
            barrier_name: name.to_string(),
            process_id: process_id.to_string(),
            expected_generation: generation,
            metadata,
        };
        let v = self.rpc("ArriveAtBarrier", &body, Duration::ZERO).await?;
        serde_json::from_value(v).map_err(|e| self.protocol("ArriveAtBarrier", e))
    }

    /// `WaitAtBarrier`: blocks on the server until `generation` has tripped or `timeout`
    /// (≤ 300 s) passes.
    pub async fn wait_at_barrier(
        &self,
        namespace: &str,
        name: &str,
        generation: u64,
        timeout: Duration,
    ) -> Result<WaitAtBarrierResponse> {
        let body = WaitAtBarrierRequest {
            namespace_name: namespace.to_string(),
            barrier_name: name.to_string(),
            expected_generation: generation,
            timeout_seconds: timeout.as_secs(),
        };
        let v = self.rpc("WaitAtBarrier", &body, timeout).await?;
        serde_json::from_value(v).map_err(|e| self.protocol("WaitAtBarrier", e))
    }

    /// `ListBarrierParticipants` of `generation`, by process id.
    pub async fn list_barrier_participants(
        &self,
        namespace: &str,
        name: &str,
        generation: u64,
        page: &PageRequest,
    ) -> Result<Page<BarrierParticipant>> {
        let body = ListBarrierParticipantsRequest {
            namespace_name: namespace.to_string(),
            barrier_name: name.to_string(),
            generation,
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListBarrierParticipantsResponse>("ListBarrierParticipants", &body)
            .await
    }
}
