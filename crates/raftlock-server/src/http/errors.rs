//! The two error dialects of the public API and how core errors map onto them.
//!
//! project-lock routes and the admin API answer `{"error":"…","code":"…"}`; hierarchical routes answer
//! `{"code":"…","message":"…"}` with gRPC status names. Codes are stable strings.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use raftlock_api::errors::{LocksError, LocksErrorCode, RpcError, RpcErrorCode};
use raftlock_core::CoreError;

use crate::unavailable::Unavailable;

/// A precise error code of one dialect (see [`ApiError::with_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Locks(LocksErrorCode),
    Rpc(RpcErrorCode),
}

/// Which API a request belongs to, which decides the error body shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// project locks and the admin API.
    Locks,
    /// hierarchical RPC-style routes.
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
    /// A 503 that sending the call again cannot change (see [`is_settled`]).
    pub settled: bool,
    /// Answer with `Connection: close` (see [`ApiError::closing`]).
    pub close: bool,
}

/// Response extension on a 503 whose request was never proposed (this node lost
/// leadership first): [`super::forward`] sends such a request on to the new leader instead
/// of answering the client. Never leaves the node.
#[derive(Debug, Clone, Copy)]
pub struct NotProposed;

/// Whether `resp` is a final 503: the state machine refused a resend whose first attempt may
/// have been applied ([`CoreError::OutcomeUnknown`]), and the answer says so in
/// `x-raftlock-outcome-unknown` — to the client, and to a forwarding peer, which relays it. The
/// answer is the one a client is owed (its write's fate is unknown) and a further resend could
/// at best find the first attempt committed late, so [`super::forward`] relays it at once
/// instead of resending until the deadline.
pub fn is_settled(resp: &Response) -> bool {
    resp.headers()
        .contains_key(raftlock_api::headers::OUTCOME_UNKNOWN_HEADER)
}

impl ApiError {
    pub fn new(dialect: Dialect, status: StatusCode, message: impl Into<String>) -> Self {
        use raftlock_api::errors::{LocksErrorCode as L, RpcErrorCode as R};
        let code = match (dialect, status) {
            (Dialect::Locks, StatusCode::UNAUTHORIZED) => L::Unauthorized.as_str(),
            (Dialect::Locks, StatusCode::REQUEST_TIMEOUT) => L::RequestTimeout.as_str(),
            (Dialect::Locks, StatusCode::FORBIDDEN) => L::Forbidden.as_str(),
            (Dialect::Locks, StatusCode::TOO_MANY_REQUESTS) => L::LockRateLimited.as_str(),
            (Dialect::Locks, StatusCode::SERVICE_UNAVAILABLE) => L::LockServiceUnavailable.as_str(),
            (Dialect::Locks, StatusCode::NOT_FOUND) => L::NotFound.as_str(),
            (Dialect::Locks, StatusCode::CONFLICT) => L::Conflict.as_str(),
            (Dialect::Locks, StatusCode::INTERNAL_SERVER_ERROR) => L::Internal.as_str(),
            (Dialect::Locks, _) => L::InvalidRequest.as_str(),
            (Dialect::Rpc, StatusCode::UNAUTHORIZED) => R::Unauthenticated.as_str(),
            (Dialect::Rpc, StatusCode::REQUEST_TIMEOUT) => R::DeadlineExceeded.as_str(),
            (Dialect::Rpc, StatusCode::FORBIDDEN) => R::PermissionDenied.as_str(),
            (Dialect::Rpc, StatusCode::NOT_FOUND) => R::NotFound.as_str(),
            (Dialect::Rpc, StatusCode::CONFLICT) => R::AlreadyExists.as_str(),
            (Dialect::Rpc, StatusCode::TOO_MANY_REQUESTS) => R::ResourceExhausted.as_str(),
            (Dialect::Rpc, StatusCode::SERVICE_UNAVAILABLE) => R::Unavailable.as_str(),
            (Dialect::Rpc, StatusCode::INTERNAL_SERVER_ERROR) => R::Internal.as_str(),
            (Dialect::Rpc, StatusCode::NOT_IMPLEMENTED) => R::Unimplemented.as_str(),
            (Dialect::Rpc, _) => R::InvalidArgument.as_str(),
        };
        ApiError {
            dialect,
            status,
            code,
            message: message.into(),
            retry_after: None,
            not_proposed: false,
            settled: false,
            close: false,
        }
    }

    /// Closes the connection after this answer: the request's body was not read (or not
    /// whole), so the connection cannot carry another request.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// Replaces the status's default code by a more precise one of the dialect.
    pub fn with_code(mut self, code: Code) -> Self {
        self.code = match (self.dialect, code) {
            (Dialect::Locks, Code::Locks(c)) => c.as_str(),
            (Dialect::Rpc, Code::Rpc(c)) => c.as_str(),
            // A code of the other dialect would break its clients: keep the default.
            _ => {
                debug_assert!(false, "{code:?} is not a code of {:?}", self.dialect);
                self.code
            }
        };
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
            (CoreError::Conflict { .. }, _) => {
                ApiError::new(dialect, StatusCode::CONFLICT, message).with_code(match dialect {
                    Dialect::Locks => Code::Locks(LocksErrorCode::Conflict),
                    Dialect::Rpc => Code::Rpc(RpcErrorCode::FailedPrecondition),
                })
            }
            (CoreError::LockHeld, _) => ApiError::new(dialect, StatusCode::CONFLICT, message)
                .with_code(match dialect {
                    Dialect::Locks => Code::Locks(LocksErrorCode::LockHeld),
                    Dialect::Rpc => Code::Rpc(RpcErrorCode::FailedPrecondition),
                }),
            (CoreError::OwnershipLost, _) => ApiError::new(dialect, StatusCode::CONFLICT, message)
                .with_code(match dialect {
                    Dialect::Locks => Code::Locks(LocksErrorCode::LockOwnershipLost),
                    Dialect::Rpc => Code::Rpc(RpcErrorCode::FailedPrecondition),
                }),
            (CoreError::NotFound(_), _) => ApiError::new(dialect, StatusCode::NOT_FOUND, message),
            (CoreError::AlreadyExists(_), Dialect::Locks) => {
                ApiError::new(dialect, StatusCode::CONFLICT, message)
                    .with_code(Code::Locks(LocksErrorCode::AlreadyExists))
            }
            (CoreError::AlreadyExists(_), Dialect::Rpc) => {
                ApiError::new(dialect, StatusCode::CONFLICT, message)
            }
            // Nothing was applied; whether the first attempt was is not known (503, as for
            // any write whose fate is unknown).
            (CoreError::OutcomeUnknown, _) => {
                let mut e = ApiError::unavailable(dialect, message);
                e.settled = true;
                // Not an invitation to retry (a retry may apply the write twice).
                e.retry_after = None;
                e
            }
            (CoreError::ResourceExhausted(_), _) => {
                let mut e = ApiError::new(dialect, StatusCode::TOO_MANY_REQUESTS, message);
                if dialect == Dialect::Locks {
                    e = e.with_code(Code::Locks(LocksErrorCode::ResourceExhausted));
                }
                // Budgets free up as waits end and locks go; a second is a fair pause.
                e.retry_after = Some(1);
                e
            }
        }
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
            Dialect::Locks => Json(LocksError {
                error: self.message,
                code: self.code.to_string(),
            })
            .into_response(),
            Dialect::Rpc => Json(RpcError {
                code: self.code.to_string(),
                message: self.message,
            })
            .into_response(),
        };
        let mut resp = (self.status, body).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.not_proposed {
            resp.extensions_mut().insert(NotProposed);
        }
        if self.settled {
            // For the client (the Rust SDK does not retry it) and for a forwarding peer (it
            // relays the answer rather than resend): see [`is_settled`].
            resp.headers_mut().insert(
                raftlock_api::headers::OUTCOME_UNKNOWN_HEADER,
                HeaderValue::from_static("true"),
            );
        }
        if self.close {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}
