//! hierarchical-lock RPCs: `POST /v1beta/{Method}` with the request message as JSON body.
//!
//! Handlers run on the leader. Writes are proposed through the log; reads are linearizable.
//! A blocking `AcquireLock` joins the lock's replicated FIFO queue and waits on the server;
//! the apply that frees the lock grants it to the head waiter(s), and the waiting call sees
//! the grant on the next applied index — no polling tick.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use raftlock_api::barriers::{
    ArriveAtBarrierRequest, BarrierRequest, CreateBarrierRequest, UpdateBarrierRequest,
};
use raftlock_api::hierarchy::{
    AcquireLockRequest, CreateLockLeaseRequest, CreateNamespaceRequest, LeaseRequest,
    ListLockLeasesRequest, ListLockLeasesResponse, ListLocksRequest, ListLocksResponse,
    ListNamespacesRequest, ListNamespacesResponse, ListWaitersRequest, ListWaitersResponse,
    LockLeaseResponse, LockRequest, LockResponse, NamespaceRequest, NamespaceResponse,
    RefreshLockLeaseRequest, ReleaseLockRequest, UpdateNamespaceRequest, Waiter,
};
use raftlock_api::semaphores::{
    CreateSemaphoreRequest, ReleaseSemaphoreRequest, SemaphoreRequest, UpdateSemaphoreRequest,
};
use raftlock_api::wait_groups::{
    CompleteJobsFromWaitGroupRequest, CreateWaitGroupRequest, UpdateWaitGroupRequest,
    WaitGroupRequest,
};
use raftlock_api::Listing;
use raftlock_core::command::HierOp;
use raftlock_core::hierarchy::{
    AcquireOutcome, AcquireReply, ContentionReason, QueuedAcquire, WaitSpec, WaitState,
};
use raftlock_core::{validate, CoreError, Reply, StateMachine};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::answers::{answer, FromReply};
use super::auth;
use super::body::{self, PathParam};
use super::errors::{ApiError, Dialect};
use super::idempotency::ClientRequestId;
use super::wait::{new_waiter_id, time_left, CancelOnDrop, WaitContext, WaiterGauge};
use super::writes::{LockLeases, SemaphoreLeases, Write};
use crate::node::SharedNode;
use raftlock_api::methods;

pub(super) const D: Dialect = Dialect::Rpc;

pub fn routes() -> Router<SharedNode> {
    Router::new().route("/v1beta/{method}", post(dispatch))
}

/// The answer message as JSON.
fn reply<T: Serialize>(message: T) -> Response {
    Json(message).into_response()
}

/// A plain write ([`Write`]): parsed, proposed, answered.
async fn write<W: Write + DeserializeOwned>(
    call: &Call,
    bytes: &[u8],
) -> Result<Response, ApiError> {
    Ok(reply(call.submit(parse::<W>(bytes)?).await?))
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    body::json(bytes, D)
}

pub(super) fn core(e: CoreError) -> ApiError {
    ApiError::from_core(D, e)
}

/// A waiting call looks at its waiter this often even without a wake-up: a backstop, the
/// waiter board wakes it as soon as its waiter leaves the queue.
const WAIT_SAFETY_POLL: Duration = Duration::from_secs(1);

async fn dispatch(
    State(node): State<SharedNode>,
    PathParam(method): PathParam<String>,
    wait: Option<Extension<WaitContext>>,
    request_id: ClientRequestId,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let project = auth::lock_caller_counted(&node, &headers, D)?;
    // gRPC's Unimplemented, not NotFound: a client must not read it as "namespace not found".
    let Some(facts) = methods::method(&method) else {
        return Err(ApiError::new(
            D,
            StatusCode::NOT_IMPLEMENTED,
            format!("unknown method {method:?}"),
        ));
    };
    let bytes = body::read(b, D).await?;
    let ctx = wait.map(|Extension(w)| w).unwrap_or_default();
    let call = Call {
        group: super::decide::group_for(&node, &project, D)?,
        node,
        project,
        request_id,
        method: facts,
    };
    let answer = match method.as_str() {
        "CreateNamespace" => write::<CreateNamespaceRequest>(&call, &bytes).await?,
        "GetNamespace" => reply(call.get_namespace(parse(&bytes)?).await?),
        "UpdateNamespace" => write::<UpdateNamespaceRequest>(&call, &bytes).await?,
        "DeleteNamespace" => write::<NamespaceRequest>(&call, &bytes).await?,
        "ListNamespaces" => reply(call.list_namespaces(parse(&bytes)?).await?),
        "CreateLockLease" => write::<LockLeases<CreateLockLeaseRequest>>(&call, &bytes).await?,
        "RefreshLockLease" => write::<LockLeases<RefreshLockLeaseRequest>>(&call, &bytes).await?,
        "RevokeLockLease" => write::<LockLeases<LeaseRequest>>(&call, &bytes).await?,
        "GetLockLease" => reply(call.get_lease(parse(&bytes)?).await?),
        "ListLockLeases" => reply(call.list_leases(parse(&bytes)?).await?),
        "AcquireLock" => reply(call.acquire(parse(&bytes)?, ctx).await?),
        "ReleaseLock" => write::<ReleaseLockRequest>(&call, &bytes).await?,
        "GetLock" => reply(call.get_lock(parse(&bytes)?).await?),
        "DeleteLock" => write::<LockRequest>(&call, &bytes).await?,
        "ListLocks" => reply(call.list_locks(parse(&bytes)?).await?),
        // raftlock's extension: the queued blocking acquires of a namespace.
        "ListWaiters" => reply(call.list_waiters(parse(&bytes)?).await?),
        "CreateSemaphore" => write::<CreateSemaphoreRequest>(&call, &bytes).await?,
        "GetSemaphore" => reply(call.get_semaphore(parse(&bytes)?).await?),
        "UpdateSemaphore" => write::<UpdateSemaphoreRequest>(&call, &bytes).await?,
        "DeleteSemaphore" => write::<SemaphoreRequest>(&call, &bytes).await?,
        "ListSemaphores" => reply(call.list_semaphores(parse(&bytes)?).await?),
        "ListSemaphoreHolders" => reply(call.list_semaphore_holders(parse(&bytes)?).await?),
        "AcquireSemaphore" => reply(call.acquire_semaphore(parse(&bytes)?, ctx).await?),
        "ReleaseSemaphore" => write::<ReleaseSemaphoreRequest>(&call, &bytes).await?,
        "CreateSemaphoreLease" => {
            write::<SemaphoreLeases<CreateLockLeaseRequest>>(&call, &bytes).await?
        }
        "GetSemaphoreLease" => reply(call.get_semaphore_lease(parse(&bytes)?).await?),
        "RefreshSemaphoreLease" => {
            write::<SemaphoreLeases<RefreshLockLeaseRequest>>(&call, &bytes).await?
        }
        "RevokeSemaphoreLease" => write::<SemaphoreLeases<LeaseRequest>>(&call, &bytes).await?,
        "ListSemaphoreLeases" => reply(call.list_semaphore_leases(parse(&bytes)?).await?),
        "CreateWaitGroup" => write::<CreateWaitGroupRequest>(&call, &bytes).await?,
        "GetWaitGroup" => reply(call.get_wait_group(parse(&bytes)?).await?),
        "UpdateWaitGroup" => write::<UpdateWaitGroupRequest>(&call, &bytes).await?,
        "DeleteWaitGroup" => write::<WaitGroupRequest>(&call, &bytes).await?,
        "ListWaitGroups" => reply(call.list_wait_groups(parse(&bytes)?).await?),
        "CompleteJobsFromWaitGroup" => {
            write::<CompleteJobsFromWaitGroupRequest>(&call, &bytes).await?
        }
        "ListWaitGroupCompletedJobs" => reply(call.list_completed_jobs(parse(&bytes)?).await?),
        "WaitForWaitGroup" => reply(call.wait_for_wait_group(parse(&bytes)?, ctx).await?),
        "CreateBarrier" => write::<CreateBarrierRequest>(&call, &bytes).await?,
        "GetBarrier" => reply(call.get_barrier(parse(&bytes)?).await?),
        "UpdateBarrier" => write::<UpdateBarrierRequest>(&call, &bytes).await?,
        "DeleteBarrier" => write::<BarrierRequest>(&call, &bytes).await?,
        "ListBarriers" => reply(call.list_barriers(parse(&bytes)?).await?),
        "ArriveAtBarrier" => write::<ArriveAtBarrierRequest>(&call, &bytes).await?,
        "WaitAtBarrier" => reply(call.wait_at_barrier(parse(&bytes)?, ctx).await?),
        "ListBarrierParticipants" => reply(call.list_barrier_participants(parse(&bytes)?).await?),
        // A registered method without an arm here: the drift tests (OpenAPI, every method
        // called through a live node) catch it before a release.
        other => {
            return Err(ApiError::new(
                D,
                StatusCode::NOT_IMPLEMENTED,
                format!("method {other:?} is not served by this node"),
            ))
        }
    };
    Ok(answer)
}

/// One authenticated call: the node and the caller's project.
pub(super) struct Call {
    pub(super) node: SharedNode,
    /// The group that decides the project's calls: its shard's, on this node.
    pub(super) group: std::sync::Arc<crate::group::Group>,
    pub(super) project: String,
    /// The call's request ids (the client's, and one a node minted): writes under them are
    /// applied once.
    request_id: ClientRequestId,
    /// The method's facts: whether its writes go under a request id.
    method: &'static methods::Method,
}

impl Call {
    pub(super) async fn write(&self, op: HierOp) -> Result<Reply, ApiError> {
        // Refused for its shape: answer now, and keep it out of the log.
        op.validate().map_err(core)?;
        let op =
            super::idempotency::wrap_hier(self.request_id, self.method, self.project.clone(), op);
        let op = self.request_id.bound_in(&self.group, op);
        super::decide::decide(&self.group, op, D).await
    }

    /// Proposes a plain write and answers with its response.
    pub(super) async fn submit<W: Write>(&self, request: W) -> Result<W::Answer, ApiError> {
        request.check().map_err(core)?;
        self.write_as(request.op()).await
    }

    /// Proposes `op` and answers with the response its reply becomes.
    pub(super) async fn write_as<A: FromReply>(&self, op: HierOp) -> Result<A, ApiError> {
        answer(self.write(op).await?)
    }

    async fn read<T>(
        &self,
        f: impl FnOnce(&raftlock_core::hierarchy::Hierarchy, &str, i64) -> Result<T, CoreError>,
    ) -> Result<T, ApiError> {
        let project = self.project.as_str();
        let result = self
            .group
            .linearizable(|sm, now| f(sm.hierarchy(), project, now))
            .await
            .map_err(|e| ApiError::from_unavailable(D, e))?;
        result.map_err(core)
    }

    async fn get_namespace(&self, r: NamespaceRequest) -> Result<NamespaceResponse, ApiError> {
        let namespace = self
            .read(|h, p, _| h.get_namespace(p, &r.namespace_name))
            .await?;
        Ok(NamespaceResponse { namespace })
    }

    async fn list_namespaces(
        &self,
        r: ListNamespacesRequest,
    ) -> Result<ListNamespacesResponse, ApiError> {
        let page = self
            .read(|h, p, _| h.list_namespaces(p, &r.pagination_token, r.limit))
            .await?;
        Ok(ListNamespacesResponse::from_page(page))
    }

    async fn get_lease(&self, r: LeaseRequest) -> Result<LockLeaseResponse, ApiError> {
        let lease = self
            .read(|h, p, now| h.get_lease(p, &r.namespace_name, &r.lease_id, now))
            .await?;
        Ok(LockLeaseResponse { lease })
    }

    async fn list_leases(
        &self,
        r: ListLockLeasesRequest,
    ) -> Result<ListLockLeasesResponse, ApiError> {
        let page = self
            .read(|h, p, now| {
                h.list_leases(
                    p,
                    &r.namespace_name,
                    &r.process_id,
                    &r.pagination_token,
                    r.limit,
                    now,
                )
            })
            .await?;
        Ok(ListLockLeasesResponse::from_page(page))
    }

    async fn get_lock(&self, r: LockRequest) -> Result<LockResponse, ApiError> {
        let lock = self
            .read(|h, p, now| h.get_lock(p, &r.namespace_name, &r.lock_name, now))
            .await?;
        Ok(LockResponse { lock })
    }

    async fn list_locks(&self, r: ListLocksRequest) -> Result<ListLocksResponse, ApiError> {
        let page = self
            .read(|h, p, now| h.list_locks(p, &r.namespace_name, &r.pagination_token, r.limit, now))
            .await?;
        Ok(ListLocksResponse::from_page(page))
    }

    /// The queued acquires of a namespace, position 1 being the head of its lock's queue.
    async fn list_waiters(&self, r: ListWaitersRequest) -> Result<ListWaitersResponse, ApiError> {
        let items = self
            .read(|h, p, _| h.list_waiters(p, &r.namespace_name))
            .await?;
        let mut position = 0;
        let mut last_lock = String::new();
        let waiters = items
            .into_iter()
            .map(|(lock_name, lease_id, exclusive)| {
                position = if lock_name == last_lock {
                    position + 1
                } else {
                    1
                };
                last_lock.clone_from(&lock_name);
                Waiter {
                    lock_name,
                    lease_id,
                    exclusive,
                    position,
                }
            })
            .collect();
        Ok(ListWaitersResponse { waiters })
    }

    fn acquire_op(r: &AcquireLockRequest, wait: Option<WaitSpec>) -> HierOp {
        HierOp::AcquireLock {
            namespace: r.namespace_name.clone(),
            lock_name: r.lock_name.clone(),
            exclusive: r.exclusive,
            lease_id: r.lease_id.clone(),
            metadata: r.metadata.clone(),
            wait,
        }
    }

    async fn try_acquire(
        &self,
        r: &AcquireLockRequest,
        wait: Option<WaitSpec>,
    ) -> Result<AcquireReply, ApiError> {
        self.write_as(Self::acquire_op(r, wait)).await
    }

    /// Acquire. With `timeout_seconds > 0` an incompatible request joins the lock's
    /// replicated FIFO queue; a release hands the lock over in the same apply, and this call
    /// notices on the next applied index. At the deadline it proposes a cancel and answers
    /// from that result, so it never answers TIMED_OUT for a lock it was granted.
    async fn acquire(
        &self,
        r: AcquireLockRequest,
        ctx: WaitContext,
    ) -> Result<AcquireReply, ApiError> {
        validate::acquire_timeout(r.timeout_seconds).map_err(core)?;
        // Judge the deadline on the state machine's clock (never behind applied time), the
        // clock the replicated queue uses to drop expired waiters.
        let now = self.group.read_local(|_, now| now);
        let deadline = ctx.ends_at(now, r.timeout_seconds);
        // Counted from here, not from when the enqueue commits: a slow commit must not
        // lengthen the wait the client asked for.
        let until = tokio::time::Instant::now() + time_left(deadline, now);
        let wait = (r.timeout_seconds > 0).then(|| WaitSpec {
            waiter_id: ctx.waiter_id.clone().unwrap_or_else(new_waiter_id),
            deadline,
        });
        let Some(spec) = wait else {
            return self.try_acquire(&r, None).await;
        };
        // Refused for its shape or a full waiting budget before the cancel guard is armed:
        // such a call writes nothing (apply checks the budget again).
        Self::acquire_op(&r, Some(spec.clone()))
            .validate()
            .map_err(core)?;
        self.group
            .read_local(|sm, now| {
                sm.hierarchy().check_wait_budget(
                    &self.project,
                    &r.namespace_name,
                    &r.lock_name,
                    r.exclusive,
                    &r.lease_id,
                    &r.metadata,
                    &spec,
                    now,
                )
            })
            .map_err(core)?;
        let cancel = HierOp::CancelWait {
            namespace: r.namespace_name.clone(),
            lock_name: r.lock_name.clone(),
            lease_id: r.lease_id.clone(),
            exclusive: r.exclusive,
            waiter_id: spec.waiter_id.clone(),
        };
        // Armed before the enqueueing proposal: a client that goes away while it is in
        // flight must not leave a waiter behind (a cancel of an absent waiter is a no-op).
        let mut guard = CancelOnDrop::new(self.group.clone(), self.project.clone(), cancel.clone());
        let first = match self.try_acquire(&r, Some(spec.clone())).await {
            Ok(first) => first,
            Err(e) => {
                // Refused at apply (a 4xx): nothing was queued, so there is nothing to cancel.
                if e.status.is_client_error() {
                    guard.disarm();
                }
                return Err(e);
            }
        };
        if first.outcome == AcquireOutcome::Acquired {
            guard.disarm();
            return Ok(first);
        }
        let granted = self.wait_in_queue(&r, &spec.waiter_id, until).await?;
        let reply = match granted {
            Some(reply) => reply,
            None => self.write_as(cancel).await?,
        };
        guard.disarm();
        Ok(reply)
    }

    /// Follows the waiter on the applied state until it is granted (`Some`), dropped or the
    /// deadline passes (`None`); a lease or namespace that disappears ends the wait.
    async fn wait_in_queue(
        &self,
        r: &AcquireLockRequest,
        waiter_id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Option<AcquireReply>, ApiError> {
        let project = self.project.as_str();
        self.follow_waiter(waiter_id, deadline, |sm, now| {
            let h = sm.hierarchy();
            let queued = QueuedAcquire {
                name: &r.lock_name,
                lease_id: &r.lease_id,
                asked: r.exclusive,
                waiter_id,
            };
            let state = h.waiter_state(project, &r.namespace_name, queued, now)?;
            Ok(match state {
                WaitState::Queued => Look::Queued,
                WaitState::Dropped => Look::Dropped,
                WaitState::Granted => Look::Granted(AcquireReply {
                    lock: h.get_lock(project, &r.namespace_name, &r.lock_name, now)?,
                    outcome: AcquireOutcome::Acquired,
                    reason: ContentionReason::Unspecified,
                    blocking_locks: vec![],
                }),
            })
        })
        .await
    }

    /// Follows a queued acquire (a lock's or a semaphore's) on the applied state: `look` says
    /// where it stands; answers `Some` when granted, `None` when dropped or at `deadline`.
    /// Woken when apply resolves this waiter, when leadership changes, or by a slow safety
    /// poll — never by unrelated applies.
    pub(super) async fn follow_waiter<T>(
        &self,
        waiter_id: &str,
        deadline: tokio::time::Instant,
        look: impl Fn(&StateMachine, i64) -> Result<Look<T>, CoreError>,
    ) -> Result<Option<T>, ApiError> {
        let _gauge = WaiterGauge::new();
        // Registered before the first look, so a resolution in between is not missed.
        let registration = self.group.waiters.register(waiter_id);
        let mut server = self.group.raft.server_metrics();
        loop {
            let recheck = match self.group.read_local(&look).map_err(core)? {
                Look::Queued => WAIT_SAFETY_POLL,
                Look::QueuedFor(at_most) => at_most.min(WAIT_SAFETY_POLL),
                Look::Granted(answer) => return Ok(Some(answer)),
                Look::Dropped => return Ok(None),
            };
            if !self.group.is_leader() {
                // A deposed leader's applied state stops moving: answer 503 now, so the
                // forwarding follower (or the client) goes on with the new leader, where the
                // same waiter id keeps its place, instead of learning it at the deadline.
                return Err(ApiError::unavailable(D, "leadership lost while waiting"));
            }
            tokio::select! {
                _ = registration.notify.notified() => {}
                changed = server.changed() => {
                    if changed.is_err() {
                        return Err(ApiError::unavailable(D, "raft stopped while waiting"));
                    }
                }
                _ = tokio::time::sleep(recheck) => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
                // Answered (and its waiter cancelled by the guard) rather than cut at exit.
                _ = self.node.stopped() => {
                    return Err(ApiError::unavailable(D, "this node is stopping; retry on another"));
                }
            }
        }
    }
}

/// Where a waiting call stands on the applied state.
pub(super) enum Look<T> {
    /// Still waiting.
    Queued,
    /// Still waiting, but look again after at most this long even without a wake-up (a
    /// wait group expires at its `expires_at`, which no apply announces).
    QueuedFor(Duration),
    /// Granted, with the answer the waiting call gives.
    Granted(T),
    /// Left the queue ungranted (cancelled, past its deadline, or could never be granted).
    Dropped,
}
