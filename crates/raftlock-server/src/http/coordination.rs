//! Wait-group and barrier RPCs (`POST /v1beta/{Method}`, dispatched by `rpc`). Writes go
//! through the log, reads are linearizable. `WaitForWaitGroup` and `WaitAtBarrier` are
//! blocking reads: one linearizable look, then the call follows the object on the leader's
//! applied state, woken by the apply that finishes, trips, changes or deletes it (its topic
//! on the waiter board) — nothing is queued in the replicated state, so a call that goes away
//! leaves nothing behind, and a retry after a leader change simply looks again.

use std::time::Duration;

use raftlock_api::barriers::{
    ArriveAtBarrierRequest, ArriveAtBarrierResponse, BarrierRequest, BarrierResponse,
    BarrierWaitOutcome, CreateBarrierRequest, ListBarrierParticipantsRequest,
    ListBarrierParticipantsResponse, ListBarriersRequest, ListBarriersResponse,
    UpdateBarrierRequest, WaitAtBarrierRequest, WaitAtBarrierResponse,
};
use raftlock_api::hierarchy::EmptyResponse;
use raftlock_api::wait_groups::{
    CompleteJobsFromWaitGroupRequest, CreateWaitGroupRequest, ListWaitGroupCompletedJobsRequest,
    ListWaitGroupCompletedJobsResponse, ListWaitGroupsRequest, ListWaitGroupsResponse,
    UpdateWaitGroupRequest, WaitForWaitGroupRequest, WaitForWaitGroupResponse, WaitGroupRequest,
    WaitGroupResponse, WaitGroupStatus, WaitGroupWaitOutcome,
};
use raftlock_api::Listing;
use raftlock_core::barriers::{self, BarrierSpec, Barriers};
use raftlock_core::command::HierOp;
use raftlock_core::spaces::Stored;
use raftlock_core::wait_groups::{self, GroupSpec, WaitGroups};
use raftlock_core::{validate, CoreError, Reply, StateMachine};

use super::errors::ApiError;
use super::rpc::{core, unexpected, Call, Look, D};
use super::wait::{time_left, WaitContext};

/// The outcome a wait group's status gives a waiting call (`None`: still active).
fn finished(status: WaitGroupStatus) -> Option<WaitGroupWaitOutcome> {
    match status {
        WaitGroupStatus::Active => None,
        WaitGroupStatus::Completed => Some(WaitGroupWaitOutcome::Completed),
        WaitGroupStatus::Expired => Some(WaitGroupWaitOutcome::Expired),
    }
}

impl Call {
    /// A linearizable read of something in an existing namespace of the caller's project.
    async fn read_in<T>(
        &self,
        f: impl FnOnce(&StateMachine, &str, i64) -> Result<T, CoreError>,
    ) -> Result<T, ApiError> {
        let project = self.project.as_str();
        let result = self
            .group
            .linearizable(|sm, now| f(sm, project, now))
            .await
            .map_err(|e| ApiError::from_unavailable(D, e))?;
        result.map_err(core)
    }

    /// Waits until `look` answers (`Some`) or `timeout_seconds` pass (`None`), woken by
    /// applies that report `topic`. The first look is linearizable.
    async fn wait_on<T>(
        &self,
        topic: &str,
        timeout_seconds: u64,
        ctx: &WaitContext,
        look: impl Fn(&StateMachine, i64) -> Result<Look<T>, CoreError>,
    ) -> Result<Option<T>, ApiError> {
        validate::acquire_timeout(timeout_seconds).map_err(core)?;
        let now = self.group.read_local(|_, now| now);
        let deadline = ctx.ends_at(now, timeout_seconds);
        let until = tokio::time::Instant::now() + time_left(deadline, now);
        // Registered before the first look (follow_waiter registers again, harmlessly), so an
        // apply between the two is not missed.
        let _early = self.group.waiters.register(topic);
        match self.read_in(|sm, _, now| look(sm, now)).await? {
            Look::Granted(answer) => return Ok(Some(answer)),
            Look::Dropped => return Ok(None),
            Look::Queued | Look::QueuedFor(_) if timeout_seconds == 0 => return Ok(None),
            Look::Queued | Look::QueuedFor(_) => {}
        }
        self.follow_waiter(topic, until, look).await
    }

    // ---- wait groups -------------------------------------------------------------------

    pub(super) async fn create_wait_group(
        &self,
        r: CreateWaitGroupRequest,
    ) -> Result<WaitGroupResponse, ApiError> {
        self.write_as(HierOp::CreateWaitGroup {
            namespace: r.namespace_name,
            name: r.wait_group_name,
            spec: GroupSpec {
                description: r.description,
                counter: r.counter,
                expires_at: r.expires_at,
                delete_after_finished_seconds: r.delete_after_finished_seconds,
                metadata: r.metadata,
            },
        })
        .await
    }

    pub(super) async fn get_wait_group(
        &self,
        r: WaitGroupRequest,
    ) -> Result<WaitGroupResponse, ApiError> {
        validate::simple_name("wait_group_name", &r.wait_group_name).map_err(core)?;
        let (ns, name) = (&r.namespace_name, &r.wait_group_name);
        let wait_group = self
            .read_in(|sm, p, now| sm.wait_groups_in(p, ns)?.get(p, ns, name, now))
            .await?;
        Ok(WaitGroupResponse { wait_group })
    }

    pub(super) async fn update_wait_group(
        &self,
        r: UpdateWaitGroupRequest,
    ) -> Result<WaitGroupResponse, ApiError> {
        self.write_as(HierOp::UpdateWaitGroup {
            namespace: r.namespace_name,
            name: r.wait_group_name,
            spec: GroupSpec {
                description: r.description,
                counter: r.counter,
                expires_at: r.expires_at,
                delete_after_finished_seconds: r.delete_after_finished_seconds,
                metadata: r.metadata,
            },
            expected_version: r.expected_version,
        })
        .await
    }

    pub(super) async fn delete_wait_group(
        &self,
        r: WaitGroupRequest,
    ) -> Result<EmptyResponse, ApiError> {
        self.write_as(HierOp::DeleteWaitGroup {
            namespace: r.namespace_name,
            name: r.wait_group_name,
        })
        .await
    }

    pub(super) async fn list_wait_groups(
        &self,
        r: ListWaitGroupsRequest,
    ) -> Result<ListWaitGroupsResponse, ApiError> {
        let ns = &r.namespace_name;
        let page = self
            .read_in(|sm, p, now| {
                sm.wait_groups_in(p, ns)?
                    .list(p, ns, &r.pagination_token, r.limit, now)
            })
            .await?;
        Ok(ListWaitGroupsResponse::from_page(page))
    }

    pub(super) async fn complete_jobs(
        &self,
        r: CompleteJobsFromWaitGroupRequest,
    ) -> Result<WaitGroupResponse, ApiError> {
        let jobs = r.jobs.into_iter().map(|j| (j.job_id, j.metadata)).collect();
        self.write_as(HierOp::CompleteJobs {
            namespace: r.namespace_name,
            name: r.wait_group_name,
            jobs,
        })
        .await
    }

    pub(super) async fn list_completed_jobs(
        &self,
        r: ListWaitGroupCompletedJobsRequest,
    ) -> Result<ListWaitGroupCompletedJobsResponse, ApiError> {
        validate::simple_name("wait_group_name", &r.wait_group_name).map_err(core)?;
        let (ns, name) = (&r.namespace_name, &r.wait_group_name);
        let page = self
            .read_in(|sm, p, now| {
                let groups: &WaitGroups = sm.wait_groups_in(p, ns)?;
                groups.list_jobs(p, ns, name, &r.pagination_token, r.limit, now)
            })
            .await?;
        Ok(ListWaitGroupCompletedJobsResponse::from_page(page))
    }

    /// Blocks until the group completes or expires, or `timeout_seconds` pass.
    pub(super) async fn wait_for_wait_group(
        &self,
        r: WaitForWaitGroupRequest,
        ctx: WaitContext,
    ) -> Result<WaitForWaitGroupResponse, ApiError> {
        validate::simple_name("namespace_name", &r.namespace_name).map_err(core)?;
        validate::simple_name("wait_group_name", &r.wait_group_name).map_err(core)?;
        let project = self.project.as_str();
        let (ns, name) = (r.namespace_name.as_str(), r.wait_group_name.as_str());
        let topic = wait_groups::topic(project, ns, name);
        let look = |sm: &StateMachine, now: i64| {
            let wait_group = sm
                .wait_groups_in(project, ns)?
                .get(project, ns, name, now)?;
            Ok(match finished(wait_group.status) {
                Some(outcome) => Look::Granted(WaitForWaitGroupResponse {
                    wait_group,
                    outcome,
                }),
                // Its expiry is announced by no apply: look again when it is due.
                None => Look::QueuedFor(Duration::from_nanos(
                    (wait_group.expires_at - now).max(0) as u64
                )),
            })
        };
        if let Some(answer) = self.wait_on(&topic, r.timeout_seconds, &ctx, look).await? {
            return Ok(answer);
        }
        let wait_group = self
            .group
            .read_local(|sm, now| sm.wait_groups_in(project, ns)?.get(project, ns, name, now))
            .map_err(core)?;
        let outcome = finished(wait_group.status).unwrap_or(WaitGroupWaitOutcome::TimedOut);
        Ok(WaitForWaitGroupResponse {
            wait_group,
            outcome,
        })
    }

    // ---- barriers ----------------------------------------------------------------------

    pub(super) async fn create_barrier(
        &self,
        r: CreateBarrierRequest,
    ) -> Result<BarrierResponse, ApiError> {
        self.write_as(HierOp::CreateBarrier {
            namespace: r.namespace_name,
            name: r.barrier_name,
            spec: BarrierSpec {
                description: r.description,
                expected_processes: r.expected_processes,
                delete_inactive_after_seconds: r.delete_inactive_after_seconds,
                metadata: r.metadata,
            },
        })
        .await
    }

    pub(super) async fn get_barrier(&self, r: BarrierRequest) -> Result<BarrierResponse, ApiError> {
        validate::simple_name("barrier_name", &r.barrier_name).map_err(core)?;
        let (ns, name) = (&r.namespace_name, &r.barrier_name);
        let barrier = self
            .read_in(|sm, p, now| sm.barriers_in(p, ns)?.get(p, ns, name, now))
            .await?;
        Ok(BarrierResponse { barrier })
    }

    pub(super) async fn update_barrier(
        &self,
        r: UpdateBarrierRequest,
    ) -> Result<BarrierResponse, ApiError> {
        self.write_as(HierOp::UpdateBarrier {
            namespace: r.namespace_name,
            name: r.barrier_name,
            spec: BarrierSpec {
                description: r.description,
                expected_processes: r.expected_processes,
                delete_inactive_after_seconds: r.delete_inactive_after_seconds,
                metadata: r.metadata,
            },
            expected_version: r.expected_version,
        })
        .await
    }

    pub(super) async fn delete_barrier(
        &self,
        r: BarrierRequest,
    ) -> Result<EmptyResponse, ApiError> {
        self.write_as(HierOp::DeleteBarrier {
            namespace: r.namespace_name,
            name: r.barrier_name,
        })
        .await
    }

    pub(super) async fn list_barriers(
        &self,
        r: ListBarriersRequest,
    ) -> Result<ListBarriersResponse, ApiError> {
        let ns = &r.namespace_name;
        let page = self
            .read_in(|sm, p, now| {
                let barriers: &Barriers = sm.barriers_in(p, ns)?;
                barriers.list(p, ns, &r.pagination_token, r.limit, now)
            })
            .await?;
        Ok(ListBarriersResponse::from_page(page))
    }

    pub(super) async fn arrive_at_barrier(
        &self,
        r: ArriveAtBarrierRequest,
    ) -> Result<ArriveAtBarrierResponse, ApiError> {
        let reply = self
            .write(HierOp::ArriveAtBarrier {
                namespace: r.namespace_name,
                name: r.barrier_name,
                process_id: r.process_id,
                expected_generation: r.expected_generation,
                metadata: r.metadata,
            })
            .await?;
        match reply {
            Reply::BarrierArrival {
                barrier,
                all_arrived,
            } => Ok(ArriveAtBarrierResponse {
                barrier,
                all_arrived,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Blocks until generation `expected_generation` has tripped, or `timeout_seconds` pass.
    pub(super) async fn wait_at_barrier(
        &self,
        r: WaitAtBarrierRequest,
        ctx: WaitContext,
    ) -> Result<WaitAtBarrierResponse, ApiError> {
        validate::simple_name("namespace_name", &r.namespace_name).map_err(core)?;
        validate::simple_name("barrier_name", &r.barrier_name).map_err(core)?;
        validate::generation("expected_generation", r.expected_generation).map_err(core)?;
        let project = self.project.as_str();
        let (ns, name) = (r.namespace_name.as_str(), r.barrier_name.as_str());
        let topic = barriers::topic(project, ns, name);
        let look = |sm: &StateMachine, now: i64| {
            let barrier = sm.barriers_in(project, ns)?.get(project, ns, name, now)?;
            Ok(if barrier.generation > r.expected_generation {
                Look::Granted(WaitAtBarrierResponse {
                    barrier,
                    outcome: BarrierWaitOutcome::Tripped,
                })
            } else {
                Look::Queued
            })
        };
        if let Some(answer) = self.wait_on(&topic, r.timeout_seconds, &ctx, look).await? {
            return Ok(answer);
        }
        let barrier = self
            .group
            .read_local(|sm, now| sm.barriers_in(project, ns)?.get(project, ns, name, now))
            .map_err(core)?;
        let outcome = if barrier.generation > r.expected_generation {
            BarrierWaitOutcome::Tripped
        } else {
            BarrierWaitOutcome::TimedOut
        };
        Ok(WaitAtBarrierResponse { barrier, outcome })
    }

    pub(super) async fn list_barrier_participants(
        &self,
        r: ListBarrierParticipantsRequest,
    ) -> Result<ListBarrierParticipantsResponse, ApiError> {
        validate::simple_name("barrier_name", &r.barrier_name).map_err(core)?;
        validate::generation("generation", r.generation).map_err(core)?;
        let (ns, name) = (&r.namespace_name, &r.barrier_name);
        let page = self
            .read_in(|sm, p, now| {
                sm.barriers_in(p, ns)?.list_participants(
                    p,
                    ns,
                    name,
                    r.generation,
                    &r.pagination_token,
                    r.limit,
                    now,
                )
            })
            .await?;
        Ok(ListBarrierParticipantsResponse::from_page(page))
    }
}
