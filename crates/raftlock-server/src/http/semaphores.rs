//! Semaphore RPCs (`POST /v1beta/{Method}`, dispatched by `rpc`): semaphores and semaphore
//! leases. Writes go through the log, reads are linearizable, and a blocking
//! `AcquireSemaphore` waits in the semaphore's replicated FIFO queue exactly as a blocking
//! `AcquireLock` waits in a lock's (same waiter identity across forwards and leader changes,
//! same cancel at the deadline, same cancel when the client goes away).

use raftlock_api::hierarchy::{
    LeaseRequest, ListLockLeasesRequest, ListLockLeasesResponse, LockLeaseResponse,
};
use raftlock_api::semaphores::{
    AcquireSemaphoreRequest, AcquireSemaphoreResponse, ListSemaphoreHoldersRequest,
    ListSemaphoreHoldersResponse, ListSemaphoresRequest, ListSemaphoresResponse, SemaphoreRequest,
    SemaphoreResponse,
};
use raftlock_api::Listing;
use raftlock_core::command::HierOp;
use raftlock_core::hierarchy::{AcquireOutcome, QueuedAcquire, WaitSpec, WaitState};
use raftlock_core::semaphores::{self, Semaphores};
use raftlock_core::{validate, CoreError};

use super::answers::answer;
use super::errors::ApiError;
use super::rpc::{core, Call, Look, D};
use super::wait::{new_waiter_id, time_left, CancelOnDrop, WaitContext};

/// A call that did not get its permits while `permits` is below its weight (lowered while it
/// waited: the state machine dropped its waiter) is refused as a new acquire of that weight is
/// (`409`), not answered `TIMED_OUT`: waiting again cannot help.
fn refuse_beyond_permits(
    reply: AcquireSemaphoreResponse,
    weight: u64,
) -> Result<AcquireSemaphoreResponse, ApiError> {
    if reply.outcome == AcquireOutcome::TimedOut {
        semaphores::check_weight_fits(weight, reply.semaphore.permits).map_err(core)?;
    }
    Ok(reply)
}

impl Call {
    /// A linearizable read of a namespace's semaphores (`not_found` for a missing namespace).
    async fn read_semaphores<T>(
        &self,
        namespace: &str,
        f: impl FnOnce(&Semaphores, &str, i64) -> Result<T, CoreError>,
    ) -> Result<T, ApiError> {
        let project = self.project.as_str();
        let result = self
            .group
            .linearizable(|sm, now| f(sm.semaphores_in(project, namespace)?, project, now))
            .await
            .map_err(|e| ApiError::from_unavailable(D, e))?;
        result.map_err(core)
    }

    pub(super) async fn get_semaphore(
        &self,
        r: SemaphoreRequest,
    ) -> Result<SemaphoreResponse, ApiError> {
        validate::simple_name("semaphore_name", &r.semaphore_name).map_err(core)?;
        let semaphore = self
            .read_semaphores(&r.namespace_name, |s, p, now| {
                s.get_semaphore(p, &r.namespace_name, &r.semaphore_name, now)
            })
            .await?;
        Ok(SemaphoreResponse { semaphore })
    }

    pub(super) async fn list_semaphores(
        &self,
        r: ListSemaphoresRequest,
    ) -> Result<ListSemaphoresResponse, ApiError> {
        let page = self
            .read_semaphores(&r.namespace_name, |s, p, now| {
                s.list_semaphores(p, &r.namespace_name, &r.pagination_token, r.limit, now)
            })
            .await?;
        Ok(ListSemaphoresResponse::from_page(page))
    }

    pub(super) async fn list_semaphore_holders(
        &self,
        r: ListSemaphoreHoldersRequest,
    ) -> Result<ListSemaphoreHoldersResponse, ApiError> {
        validate::simple_name("semaphore_name", &r.semaphore_name).map_err(core)?;
        let page = self
            .read_semaphores(&r.namespace_name, |s, p, now| {
                let ns = &r.namespace_name;
                s.list_holders(p, ns, &r.semaphore_name, &r.pagination_token, r.limit, now)
            })
            .await?;
        Ok(ListSemaphoreHoldersResponse::from_page(page))
    }

    pub(super) async fn get_semaphore_lease(
        &self,
        r: LeaseRequest,
    ) -> Result<LockLeaseResponse, ApiError> {
        let lease = self
            .read_semaphores(&r.namespace_name, |s, p, now| {
                s.get_lease(p, &r.namespace_name, &r.lease_id, now)
            })
            .await?;
        Ok(LockLeaseResponse { lease })
    }

    pub(super) async fn list_semaphore_leases(
        &self,
        r: ListLockLeasesRequest,
    ) -> Result<ListLockLeasesResponse, ApiError> {
        let page = self
            .read_semaphores(&r.namespace_name, |s, p, now| {
                let ns = &r.namespace_name;
                s.list_leases(p, ns, &r.process_id, &r.pagination_token, r.limit, now)
            })
            .await?;
        Ok(ListLockLeasesResponse::from_page(page))
    }

    fn acquire_semaphore_op(r: &AcquireSemaphoreRequest, wait: Option<WaitSpec>) -> HierOp {
        HierOp::AcquireSemaphore {
            namespace: r.namespace_name.clone(),
            name: r.semaphore_name.clone(),
            lease_id: r.lease_id.clone(),
            weight: r.weight,
            metadata: r.metadata.clone(),
            wait,
        }
    }

    /// Acquire. With `timeout_seconds > 0` an acquire that cannot be granted joins the
    /// semaphore's replicated FIFO queue; whatever frees permits grants it in the same apply,
    /// and this call notices on the next applied index. At the deadline it proposes a cancel
    /// and answers from that result, so it never answers TIMED_OUT for permits it was granted.
    /// A waiter dropped because `permits` fell below its weight is refused with 409 at once
    /// ([`refuse_beyond_permits`]).
    pub(super) async fn acquire_semaphore(
        &self,
        r: AcquireSemaphoreRequest,
        ctx: WaitContext,
    ) -> Result<AcquireSemaphoreResponse, ApiError> {
        validate::acquire_timeout(r.timeout_seconds).map_err(core)?;
        if r.timeout_seconds == 0 {
            return answer(self.write(Self::acquire_semaphore_op(&r, None)).await?);
        }
        // Judged on the state machine's clock, the one the replicated queue drops waiters by.
        let now = self.group.read_local(|_, now| now);
        let deadline = ctx.ends_at(now, r.timeout_seconds);
        // Counted from here, not from when the enqueue commits (see `rpc::acquire`).
        let until = tokio::time::Instant::now() + time_left(deadline, now);
        let spec = WaitSpec {
            waiter_id: ctx.waiter_id.clone().unwrap_or_else(new_waiter_id),
            deadline,
        };
        let op = Self::acquire_semaphore_op(&r, Some(spec.clone()));
        // Refused for its shape or a full queue before the cancel guard is armed: such a call
        // writes nothing (apply checks again).
        op.validate().map_err(core)?;
        self.group
            .read_local(|sm, now| {
                let s = sm.semaphores_in(&self.project, &r.namespace_name)?;
                s.check_wait_budget(
                    &self.project,
                    &r.namespace_name,
                    &r.semaphore_name,
                    &r.lease_id,
                    now,
                )
            })
            .map_err(core)?;
        let cancel = HierOp::CancelSemaphoreWait {
            namespace: r.namespace_name.clone(),
            name: r.semaphore_name.clone(),
            lease_id: r.lease_id.clone(),
            weight: r.weight,
            waiter_id: spec.waiter_id.clone(),
        };
        // Armed before the enqueueing proposal: a client that goes away while it is in flight
        // must not leave a waiter behind (a cancel of an absent waiter changes nothing).
        let mut guard = CancelOnDrop::new(self.group.clone(), self.project.clone(), cancel.clone());
        let first = match self
            .write(op)
            .await
            .and_then(answer::<AcquireSemaphoreResponse>)
        {
            Ok(first) => first,
            Err(e) => {
                // Refused at apply (a 4xx): nothing was queued, so there is nothing to cancel.
                if e.status.is_client_error() {
                    guard.disarm();
                }
                return Err(e);
            }
        };
        if first.outcome != AcquireOutcome::Unavailable {
            guard.disarm();
            return Ok(first);
        }
        let granted = self.wait_for_permits(&r, &spec.waiter_id, until).await?;
        let reply = match granted {
            Some(reply) => reply,
            None => answer(self.write(cancel).await?)?,
        };
        guard.disarm();
        refuse_beyond_permits(reply, r.weight)
    }

    async fn wait_for_permits(
        &self,
        r: &AcquireSemaphoreRequest,
        waiter_id: &str,
        until: tokio::time::Instant,
    ) -> Result<Option<AcquireSemaphoreResponse>, ApiError> {
        let project = self.project.as_str();
        let ns = r.namespace_name.as_str();
        let name = r.semaphore_name.as_str();
        self.follow_waiter(waiter_id, until, |sm, now| {
            let s = sm.semaphores_in(project, ns)?;
            let queued = QueuedAcquire {
                name,
                lease_id: &r.lease_id,
                asked: r.weight,
                waiter_id,
            };
            let (state, fencing_token) = s.waiter_state(project, ns, queued, now)?;
            Ok(match state {
                WaitState::Queued => Look::Queued,
                WaitState::Dropped => Look::Dropped,
                WaitState::Granted => Look::Granted(AcquireSemaphoreResponse {
                    semaphore: s.get_semaphore(project, ns, name, now)?,
                    outcome: AcquireOutcome::Acquired,
                    fencing_token,
                }),
            })
        })
        .await
    }
}
