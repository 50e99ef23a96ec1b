//! The project-lock API: `POST|PATCH|DELETE /locks/{key}/lease`, `GET|DELETE /locks/{key}`
//! and `GET /locks`.
//!
//! `expires_at` is RFC 3339 UTC in whole seconds, rounded down (an owner never believes in a
//! later expiry than the server). Fencing tokens lie in (2^52, 2^53), exact in JavaScript.

use serde::{Deserialize, Serialize};

/// Body of acquire and renew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TtlRequest {
    /// Lease length in seconds, 5–7,776,000.
    #[cfg_attr(feature = "openapi", schema(minimum = 5, maximum = 7_776_000))]
    pub ttl_seconds: u64,
}

/// Answer of a successful acquire or renew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseResponse {
    /// When the lease lapses unless renewed (RFC 3339, whole seconds, rounded down).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
    /// Rises whenever the key changes hands; the same across renewals of one lease.
    pub fencing_token: u64,
}

/// Answer of `GET /locks/{key}`: exactly `{"held":false}` for a free lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockStatus {
    /// True while an acquire by another token would be refused.
    pub held: bool,
    /// Expiry of the current lease (absent when not held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: Option<String>,
    /// Fencing token of the current lease (absent when not held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

/// What a project-lock key is: 1–128 of letters, digits, `.`, `_`, `:`, `-` (the document's
/// pattern for the `{key}` path parameter and the `after` cursor).
pub const KEY_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

/// Query of `GET /locks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ListLocksQuery {
    /// Continue after this key (the `next` of the previous page); empty or absent: from the
    /// first key. A key's pattern ([`KEY_PATTERN`]) allowing the empty string (utoipa takes a
    /// literal here; a test checks they agree).
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        param(pattern = "^[A-Za-z0-9._:-]{0,128}$", max_length = 128)
    )]
    pub after: Option<String>,
    /// Page size, 1–1000 (default 100).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    pub limit: Option<usize>,
}

/// Answer of `GET /locks` (an extension for operators and the web console).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockList {
    /// The project's locks in key order.
    pub locks: Vec<LockSummary>,
    /// Pass as `after` for the next page; null on the last page.
    pub next: Option<String>,
}

/// One lock of [`LockList`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockSummary {
    /// The lock's key.
    pub key: String,
    /// Live, or lapsed but still blocking a new owner for the takeover grace.
    pub state: HoldState,
    /// Expiry of the lease (RFC 3339, whole seconds, rounded down).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: String,
    /// Fencing token of the lease.
    pub fencing_token: u64,
    /// First 8 hex digits of the owner's token: a hint for operators, not enough to act as
    /// the owner.
    pub holder: String,
}

/// State of a listed lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum HoldState {
    /// The lease is live.
    Held,
    /// Expired, inside the one-second takeover grace.
    Grace,
}
