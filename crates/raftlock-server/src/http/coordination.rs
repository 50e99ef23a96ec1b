//! Wait-group and barrier RPCs (`POST /v1beta/{Method}`, dispatched by `rpc`). Writes go
//! through the log, reads are linearizable. `WaitForWaitGroup` and `WaitAtBarrier` are
//! blocking reads: one linearizable look, then the call follows the object on the leader's
//! applied state, woken by the apply that finishes, trips, changes or deletes it (its topic
//! on the waiter board) — nothing is queued in the replicated state, so a call that goes away
//! leaves nothing behind, and a retry after a leader change simply looks again.

use std::time::Duration;

use raftlock_api::barriers::{
    BarrierRequest, BarrierResponse, BarrierWaitOutcome, ListBarrierParticipantsRequest,
    ListBarrierParticipantsResponse, ListBarriersRequest, ListBarriersResponse,
    WaitAtBarrierRequest, WaitAtBarrierResponse,
};
use raftlock_api::wait_groups::{
    ListWaitGroupCompletedJobsRequest, ListWaitGroupCompletedJobsResponse, ListWaitGroupsRequest,
    ListWaitGroupsResponse, WaitForWaitGroupRequest, WaitForWaitGroupResponse, WaitGroupRequest,
    WaitGroupResponse, WaitGroupStatus, WaitGroupWaitOutcome,
};
use raftlock_api::Listing;
use raftlock_core::spaces::{Record, Stored};
use raftlock_core::{barriers, validate, wait_groups, CoreError, StateMachine};

use super::errors::ApiError;
use super::rpc::{core, Call, Look, D};
use super::wait::{time_left, WaitContext};

/// A namespace's store of one primitive (`StateMachine::wait_groups_in`, `barriers_in`):
/// `not_found` when the namespace is missing.
type StoreIn<S> = for<'a> fn(&'a StateMachine, &str, &str) -> Result<&'a S, CoreError>;

/// How `Get…` and `List…` show a record of the store `S`.
type View<S> = <<S as Stored>::Rec as Record>::View;

/// One look of a blocking read: what it answers if the wait ends now, and whether it has.
struct Seen<T> {
    /// The answer (with a timed-out outcome while the wait is not over).
    answer: T,
    /// The awaited state is reached: answer at once.
    over: bool,
    /// Look again after at most this long even without a wake-up (an expiry, which no apply
    /// announces).
    recheck_within: Option<Duration>,
}

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

    /// `Get<Record>`: one record of the namespace's store, named in the request's field
    /// `field`.
    async fn get_from<S: Stored>(
        &self,
        store: StoreIn<S>,
        ns: &str,
        (field, name): (&'static str, &str),
    ) -> Result<View<S>, ApiError> {
        validate::simple_name(field, name).map_err(core)?;
        self.read_in(|sm, p, now| store(sm, p, ns)?.get(p, ns, name, now))
            .await
    }

    /// `List<Records>`: one page of the namespace's store.
    async fn list_from<S: Stored, L: Listing<Item = View<S>>>(
        &self,
        store: StoreIn<S>,
        ns: &str,
        (token, limit): (&str, u32),
    ) -> Result<L, ApiError> {
        let page = self
            .read_in(|sm, p, now| store(sm, p, ns)?.list(p, ns, token, limit, now))
            .await?;
        Ok(L::from_page(page))
    }

    /// Looks until the wait is over or `timeout_seconds` pass, woken by applies that report
    /// `topic`, and answers with the last look. The first look is linearizable.
    async fn wait_on<T>(
        &self,
        topic: &str,
        timeout_seconds: u64,
        ctx: &WaitContext,
        look: impl Fn(&StateMachine, i64) -> Result<Seen<T>, CoreError>,
    ) -> Result<T, ApiError> {
        validate::acquire_timeout(timeout_seconds).map_err(core)?;
        let now = self.group.read_local(|_, now| now);
        let deadline = ctx.ends_at(now, timeout_seconds);
        let until = tokio::time::Instant::now() + time_left(deadline, now);
        let as_waiter = |sm: &StateMachine, now: i64| {
            let seen = look(sm, now)?;
            Ok(match seen.recheck_within {
                _ if seen.over => Look::Granted(seen.answer),
                Some(at_most) => Look::QueuedFor(at_most),
                None => Look::Queued,
            })
        };
        // Registered before the first look (follow_waiter registers again, harmlessly), so an
        // apply between the two is not missed.
        let _early = self.group.waiters.register(topic);
        let first = self.read_in(|sm, _, now| look(sm, now)).await?;
        if first.over || timeout_seconds == 0 {
            return Ok(first.answer);
        }
        if let Some(answer) = self.follow_waiter(topic, until, as_waiter).await? {
            return Ok(answer);
        }
        let last = self.group.read_local(look).map_err(core)?;
        Ok(last.answer)
    }

    // ---- wait groups -------------------------------------------------------------------

    pub(super) async fn get_wait_group(
        &self,
        r: WaitGroupRequest,
    ) -> Result<WaitGroupResponse, ApiError> {
        let name = ("wait_group_name", r.wait_group_name.as_str());
        let wait_group =
            (self.get_from(StateMachine::wait_groups_in, &r.namespace_name, name)).await?;
        Ok(WaitGroupResponse { wait_group })
    }

    pub(super) async fn list_wait_groups(
        &self,
        r: ListWaitGroupsRequest,
    ) -> Result<ListWaitGroupsResponse, ApiError> {
        let page = (r.pagination_token.as_str(), r.limit);
        self.list_from(StateMachine::wait_groups_in, &r.namespace_name, page)
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
                let groups = sm.wait_groups_in(p, ns)?;
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
        let look = |sm: &StateMachine, now: i64| {
            let wait_group = sm
                .wait_groups_in(project, ns)?
                .get(project, ns, name, now)?;
            let outcome = finished(wait_group.status);
            Ok(Seen {
                over: outcome.is_some(),
                // Its expiry is announced by no apply: look again when it is due.
                recheck_within: Some(Duration::from_nanos(
                    (wait_group.expires_at - now).max(0) as u64
                )),
                answer: WaitForWaitGroupResponse {
                    wait_group,
                    outcome: outcome.unwrap_or(WaitGroupWaitOutcome::TimedOut),
                },
            })
        };
        let topic = wait_groups::topic(project, ns, name);
        self.wait_on(&topic, r.timeout_seconds, &ctx, look).await
    }

    // ---- barriers ----------------------------------------------------------------------

    pub(super) async fn get_barrier(&self, r: BarrierRequest) -> Result<BarrierResponse, ApiError> {
        let name = ("barrier_name", r.barrier_name.as_str());
        let barrier = (self.get_from(StateMachine::barriers_in, &r.namespace_name, name)).await?;
        Ok(BarrierResponse { barrier })
    }

    pub(super) async fn list_barriers(
        &self,
        r: ListBarriersRequest,
    ) -> Result<ListBarriersResponse, ApiError> {
        let page = (r.pagination_token.as_str(), r.limit);
        self.list_from(StateMachine::barriers_in, &r.namespace_name, page)
            .await
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
        let look = |sm: &StateMachine, now: i64| {
            let barrier = sm.barriers_in(project, ns)?.get(project, ns, name, now)?;
            let tripped = barrier.generation > r.expected_generation;
            let outcome = match tripped {
                true => BarrierWaitOutcome::Tripped,
                false => BarrierWaitOutcome::TimedOut,
            };
            Ok(Seen {
                over: tripped,
                recheck_within: None,
                answer: WaitAtBarrierResponse { barrier, outcome },
            })
        };
        let topic = barriers::topic(project, ns, name);
        self.wait_on(&topic, r.timeout_seconds, &ctx, look).await
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
