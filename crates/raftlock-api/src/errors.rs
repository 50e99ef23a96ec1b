//! The two error bodies and their stable codes.
//!
//! Project-lock and admin routes answer [`LocksError`] (`{"error","code"}`); hierarchical
//! methods answer [`RpcError`] (`{"code","message"}`, gRPC status names in snake_case). The
//! server takes every code it sends from [`LocksErrorCode`] or [`RpcErrorCode`], so the
//! lists below are complete.

use serde::{Deserialize, Serialize};

/// Error body of the project-lock and admin APIs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LocksError {
    /// What went wrong, for humans.
    pub error: String,
    /// Stable machine-readable code.
    #[cfg_attr(feature = "openapi", schema(value_type = LocksErrorCode))]
    pub code: String,
}

/// Error body of the hierarchical-lock API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RpcError {
    /// Stable machine-readable code: the gRPC status name in snake_case.
    #[cfg_attr(feature = "openapi", schema(value_type = RpcErrorCode))]
    pub code: String,
    /// What went wrong, for humans.
    pub message: String,
}

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every code, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The code as it appears on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }
    };
}

codes! {
    /// Codes of [`LocksError`].
    LocksErrorCode {
        /// 400 (and 413): malformed body, key, TTL, header or query.
        InvalidRequest = "invalid_request",
        /// 401: missing or unknown credential.
        Unauthorized = "unauthorized",
        /// 408: the request body did not arrive within the body-read deadline.
        RequestTimeout = "request_timeout",
        /// 403: a credential of a kind or scope that may not call the route.
        Forbidden = "forbidden",
        /// 404: no such project (admin API).
        NotFound = "not_found",
        /// 409: an admin change that conflicts with the current state.
        Conflict = "conflict",
        /// 409: the project or key already exists (admin API).
        AlreadyExists = "already_exists",
        /// 409: another token holds the lock, or its lapsed lease is still in its grace second.
        LockHeld = "lock_held",
        /// 409: the caller's lease lapsed, was taken over, or never existed.
        LockOwnershipLost = "lock_ownership_lost",
        /// 429: the project's requests-per-minute limit; see `Retry-After`.
        LockRateLimited = "lock_rate_limited",
        /// 429: a byte or count budget of the project is full.
        ResourceExhausted = "resource_exhausted",
        /// 503: no quorum or no leader within the commit timeout; nothing was decided.
        LockServiceUnavailable = "lock_service_unavailable",
        /// 409: a membership change was refused (admin API).
        MembershipChangeFailed = "membership_change_failed",
        /// 409: leadership could not be moved (admin API).
        LeaderNotMoved = "leader_not_moved",
        /// 500: a bug; nothing to retry differently.
        Internal = "internal",
    }
}

codes! {
    /// Codes of [`RpcError`].
    RpcErrorCode {
        /// 400: a field is missing, malformed or out of range (also 413 for a large body).
        InvalidArgument = "invalid_argument",
        /// 401: missing or unknown credential.
        Unauthenticated = "unauthenticated",
        /// 408: the request body did not arrive within the body-read deadline.
        DeadlineExceeded = "deadline_exceeded",
        /// 403: a credential that may not call lock methods.
        PermissionDenied = "permission_denied",
        /// 404: no such namespace, lease or lock.
        NotFound = "not_found",
        /// 409: the namespace already exists.
        AlreadyExists = "already_exists",
        /// 409: the state does not allow the call.
        FailedPrecondition = "failed_precondition",
        /// 429: a quota or rate limit; see `Retry-After`.
        ResourceExhausted = "resource_exhausted",
        /// 503: no quorum or no leader within the commit timeout; nothing was decided.
        Unavailable = "unavailable",
        /// 501: no such method.
        Unimplemented = "unimplemented",
        /// 500: a bug.
        Internal = "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text `as_str` gives is the one serde writes (and the schema lists).
    #[test]
    fn codes_serialize_as_their_text() {
        fn check<T: Serialize + Copy>(all: &[T], text: fn(T) -> &'static str) {
            for &code in all {
                let quoted = format!("{:?}", text(code));
                assert_eq!(serde_json::to_string(&code).unwrap(), quoted);
            }
        }
        check(LocksErrorCode::ALL, LocksErrorCode::as_str);
        check(RpcErrorCode::ALL, RpcErrorCode::as_str);
    }
}
