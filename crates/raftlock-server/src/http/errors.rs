//! The two error dialects of the public API and how core errors map onto them.
//!
//! §4 routes and the admin API answer `{"error":"…","code":"…"}`; §5 routes answer
//! `{"code":"…","message":"…"}` with gRPC status names. Codes are stable strings.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use raftlock_core::CoreError;
use serde_json::json;

use crate::unavailable::Unavailable;

/// Which API a request belongs to, which decides the error body shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// §4 project locks and the admin API.
    Locks,
    /// §5 RPC-style routes.
    Rpc,
}

impl Dialect {
    /// Infers the dialect from a request path.
    pub fn of_path(path: &str) -> Dialect {
        if path.starts_with("/v1beta/") {
            Dialect::Rpc
        } else {
            Dialect::Locks
        }
    }
}

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub dialect: Dialect,
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for `Retry-After` (rate limiting, unavailability).
    pub retry_after: Option<u64>,
    /// The request was never proposed, so the forwarding layer may send it to a new leader
    /// (see [`NotProposed`]).
    pub not_proposed: bool,
}

/// Response extension on a 503 whose request was never proposed (this node lost
/// leadership first): [`super::forward`] sends such a request on to the new leader instead
/// of answering the client. Never leaves the node.
#[derive(Debug, Clone, Copy)]
pub struct NotProposed;

impl ApiError {
    pub fn new(dialect: Dialect, status: StatusCode, message: impl Into<String>) -> Self {
        let code = match (dialect, status) {
            (Dialect::Locks, StatusCode::UNAUTHORIZED) => "unauthorized",
            (Dialect::Locks, StatusCode::FORBIDDEN) => "forbidden",
            (Dialect::Locks, StatusCode::TOO_MANY_REQUESTS) => "lock_rate_limited",
            (Dialect::Locks, StatusCode::SERVICE_UNAVAILABLE) => "lock_service_unavailable",
            (Dialect::Locks, StatusCode::NOT_FOUND) => "not_found",
            (Dialect::Locks, StatusCode::CONFLICT) => "conflict",
            (Dialect::Locks, StatusCode::INTERNAL_SERVER_ERROR) => "internal",
            (Dialect::Locks, _) => "invalid_request",
            (Dialect::Rpc, StatusCode::UNAUTHORIZED) => "unauthenticated",
            (Dialect::Rpc, StatusCode::FORBIDDEN) => "permission_denied",
            (Dialect::Rpc, StatusCode::NOT_FOUND) => "not_found",
            (Dialect::Rpc, StatusCode::CONFLICT) => "already_exists",
            (Dialect::Rpc, StatusCode::TOO_MANY_REQUESTS) => "resource_exhausted",
            (Dialect::Rpc, StatusCode::SERVICE_UNAVAILABLE) => "unavailable",
            (Dialect::Rpc, StatusCode::INTERNAL_SERVER_ERROR) => "internal",
            (Dialect::Rpc, StatusCode::NOT_IMPLEMENTED) => "unimplemented",
            (Dialect::Rpc, _) => "invalid_argument",
        };
        ApiError {
            dialect,
            status,
            code,
            message: message.into(),
            retry_after: None,
            not_proposed: false,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    pub fn bad_request(dialect: Dialect, message: impl Into<String>) -> Self {
        ApiError::new(dialect, StatusCode::BAD_REQUEST, message)
    }

    /// 503 with `Retry-After: 1`: unavailability here is a leader change or a lost quorum,
    /// which either heals within about a second or needs an operator.
    pub fn unavailable(dialect: Dialect, why: impl std::fmt::Display) -> Self {
        let mut e = ApiError::new(
            dialect,
            StatusCode::SERVICE_UNAVAILABLE,
            format!("lock service unavailable: {why}"),
        );
        e.retry_after = Some(1);
        e
    }

    pub fn rate_limited(dialect: Dialect, retry_after: u64) -> Self {
        let mut e = ApiError::new(
            dialect,
            StatusCode::TOO_MANY_REQUESTS,
            "rate limit exceeded for this project",
        );
        e.retry_after = Some(retry_after);
        e
    }

    /// Maps a state-machine refusal onto the dialect's status and code.
    pub fn from_core(dialect: Dialect, err: CoreError) -> Self {
        let message = err.to_string();
        match (&err, dialect) {
            (CoreError::Invalid { .. }, _) => ApiError::bad_request(dialect, message),
            (CoreError::LockHeld, _) => ApiError::new(dialect, StatusCode::CONFLICT, message)
                .with_code(match dialect {
                    Dialect::Locks => "lock_held",
                    Dialect::Rpc => "failed_precondition",
                }),
            (CoreError::OwnershipLost, _) => ApiError::new(dialect, StatusCode::CONFLICT, message)
                .with_code(match dialect {
                    Dialect::Locks => "lock_ownership_lost",
                    Dialect::Rpc => "failed_precondition",
                }),
            (CoreError::NotFound(_), _) => ApiError::new(dialect, StatusCode::NOT_FOUND, message),
            (CoreError::AlreadyExists(_), Dialect::Locks) => {
                ApiError::new(dialect, StatusCode::CONFLICT, message).with_code("already_exists")
            }
            (CoreError::AlreadyExists(_), Dialect::Rpc) => {
                ApiError::new(dialect, StatusCode::CONFLICT, message)
            }
            (CoreError::ResourceExhausted(_), _) => {
                let mut e = ApiError::new(dialect, StatusCode::TOO_MANY_REQUESTS, message)
                    .with_code("resource_exhausted");
                // Budgets free up as waits end and locks go; a second is a fair pause.
                e.retry_after = Some(1);
                e
            }
        }
    }

    /// Proposes `op` through `node` and maps both kinds of refusal — not decided (503) and
    /// refused by the rules (4xx) — into `dialect`'s errors: the one propose-and-map helper
    /// of the HTTP layer.
    pub async fn decide(
        node: &crate::node::Node,
        op: raftlock_core::Op,
        dialect: Dialect,
    ) -> Result<raftlock_core::Reply, ApiError> {
        let outcome = node
            .propose(op)
            .await
            .map_err(|e| ApiError::from_unavailable(dialect, e))?;
        outcome.map_err(|e| ApiError::from_core(dialect, e))
    }

    pub fn from_unavailable(dialect: Dialect, err: Unavailable) -> Self {
        let mut e = ApiError::unavailable(dialect, &err.message);
        e.not_proposed = err.not_proposed;
        e
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.dialect {
            Dialect::Locks => json!({ "error": self.message, "code": self.code }),
            Dialect::Rpc => json!({ "code": self.code, "message": self.message }),
        };
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.not_proposed {
            resp.extensions_mut().insert(NotProposed);
        }
        resp
    }
}
