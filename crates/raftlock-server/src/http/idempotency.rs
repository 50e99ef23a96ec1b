//! Client request ids: a write that carries the client's own `X-Volcano-Request-Id` (a UUID it
//! reuses on retries) is proposed as [`Op::Once`], so the state machine applies it once and
//! answers every retry within ten minutes with the first outcome
//! ([`raftlock_core::request_ids`]). It also makes the call safe for a follower to repeat at a
//! new leader when its first attempt's fate is unknown ([`super::forward`]).
//!
//! Only an id the client sent counts: the id the server makes up for a request without one is
//! new on every retry. [`note`] runs before that id is made; between nodes the client's id
//! travels in [`FORWARDED_REQUEST_ID_HEADER`].

use std::convert::Infallible;

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use raftlock_core::Op;

use super::forward::HOPS_HEADER;
use super::REQUEST_ID_HEADER;

pub use crate::headers::FORWARDED_REQUEST_ID_HEADER;

/// The request id the client sent, when it is a UUID.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientRequestId(pub Option<u128>);

impl ClientRequestId {
    /// `op` as proposed: wrapped in [`Op::Once`] when the client sent an id.
    pub fn wrap(self, op: Op) -> Op {
        match self.0 {
            Some(request_id) => Op::Once {
                request_id,
                op: Box::new(op),
            },
            None => op,
        }
    }
}

/// Middleware (outermost, before the server makes up ids): records the client's own id.
pub async fn note(mut req: Request, next: Next) -> Response {
    // A peer's forward carries the client's id in its own header (the request id header it
    // relays may have been made up by that peer); the peer's secret is checked later.
    let from = if req.headers().contains_key(HOPS_HEADER) {
        FORWARDED_REQUEST_ID_HEADER
    } else {
        REQUEST_ID_HEADER
    };
    let id = req
        .headers()
        .get(from)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| uuid::Uuid::try_parse(v.trim()).ok())
        .map(|u| u.as_u128());
    req.extensions_mut().insert(ClientRequestId(id));
    next.run(req).await
}

impl<S: Send + Sync> FromRequestParts<S> for ClientRequestId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(parts.extensions.get().copied().unwrap_or_default())
    }
}

/// Whether `method path` is applied once per client request id: the writes whose repeat
/// could change state or answer differently — project-lock release and force release; hierarchical creates,
/// updates, deletes, revoke and release. Not acquire, renew, `RefreshLockLease` or
/// `AcquireLock`: they are already safe to repeat, and remembering them would let a client
/// that reuses one id across renewals get a stale answer while its lease is not extended.
pub fn remembers(method: &Method, path: &str) -> bool {
    if path.starts_with("/locks/") {
        return method == Method::DELETE;
    }
    match path.strip_prefix("/v1beta/") {
        Some(rpc) => matches!(
            rpc,
            "CreateNamespace"
                | "UpdateNamespace"
                | "DeleteNamespace"
                | "CreateLockLease"
                | "RevokeLockLease"
                | "ReleaseLock"
                | "DeleteLock"
                | "CreateSemaphore"
                | "UpdateSemaphore"
                | "DeleteSemaphore"
                | "CreateSemaphoreLease"
                | "RevokeSemaphoreLease"
                | "ReleaseSemaphore"
                | "CreateWaitGroup"
                | "UpdateWaitGroup"
                | "DeleteWaitGroup"
                | "CreateBarrier"
                | "UpdateBarrier"
                | "DeleteBarrier"
        ),
        None => false,
    }
}

/// Whether `op` (a hierarchical write) is proposed under the client's id; see [`remembers`].
pub fn remembers_hier(op: &raftlock_core::command::HierOp) -> bool {
    use raftlock_core::command::HierOp;
    !matches!(
        op,
        HierOp::AcquireLock { .. }
            | HierOp::CancelWait { .. }
            | HierOp::RefreshLease { .. }
            | HierOp::AcquireSemaphore { .. }
            | HierOp::CancelSemaphoreWait { .. }
            | HierOp::RefreshSemaphoreLease { .. }
            | HierOp::CompleteJobs { .. }
            | HierOp::ArriveAtBarrier { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_remembered_and_reads_and_acquires_are_not() {
        assert!(remembers(&Method::DELETE, "/locks/a/lease"));
        assert!(remembers(&Method::DELETE, "/locks/a"));
        assert!(remembers(&Method::POST, "/v1beta/CreateLockLease"));
        assert!(!remembers(&Method::POST, "/locks/a/lease"));
        assert!(!remembers(&Method::PATCH, "/locks/a/lease"));
        assert!(!remembers(&Method::POST, "/v1beta/RefreshLockLease"));
        assert!(!remembers(&Method::GET, "/locks/a"));
        assert!(!remembers(&Method::POST, "/v1beta/AcquireLock"));
        assert!(!remembers(&Method::POST, "/v1beta/GetLock"));
        assert!(!remembers(&Method::POST, "/admin/v1/projects"));
    }
}
