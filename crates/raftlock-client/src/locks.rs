//! project locks: typed calls for the five routes.
//!
//! Contention is a normal result: [`Acquire::Held`], [`Acquire::OwnershipLost`],
//! [`Renew::OwnershipLost`], [`Release::OwnershipLost`]. Every other non-2xx answer is an
//! [`Error`](crate::Error).

use std::fmt;
use std::time::{Duration, SystemTime};

use raftlock_api::locks::TtlRequest;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::transport::{Call, Client, LOCK_TOKEN_HEADER, REQUEST_ID_HEADER};

/// The caller-chosen ownership token of one lease (`X-Volcano-Lock-Token`): a UUID made once
/// per lease and reused on its renewals, re-acquires and release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LockToken(pub uuid::Uuid);

impl LockToken {
    /// A fresh random token.
    pub fn new() -> LockToken {
        LockToken(uuid::Uuid::new_v4())
    }
}

impl Default for LockToken {
    fn default() -> Self {
        LockToken::new()
    }
}

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for LockToken {
    type Err = uuid::Error;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s.trim()).map(LockToken)
    }
}

/// A live lease as the server reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// When the lease lapses (server time, whole seconds rounded down).
    #[serde(with = "crate::rfc3339")]
    pub expires_at: SystemTime,
    /// Fencing token: rises whenever the key changes hands; pass it to the resources the lock
    /// protects so they can refuse a stale holder.
    pub fencing_token: u64,
}

/// Result of an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Acquire {
    /// The caller holds the lock (new lease, or its own lease re-acquired).
    Acquired(Lease),
    /// `409 lock_held`: another token's lease is live or not yet takeover-eligible.
    Held,
    /// `409 lock_ownership_lost`: the caller's own lease lapsed and is not yet reclaimable,
    /// or reached its 90-day deadline.
    OwnershipLost,
}

impl Acquire {
    /// The lease, when acquired.
    pub fn lease(&self) -> Option<Lease> {
        match self {
            Acquire::Acquired(l) => Some(*l),
            _ => None,
        }
    }
}

/// Result of a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Renew {
    /// The lease now runs until the new `expires_at`.
    Renewed(Lease),
    /// The token is not the live owner any more (lapsed, released, taken over).
    OwnershipLost,
}

/// Result of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Release {
    /// Deleted, or already absent.
    Released,
    /// Another token owns the key now; nothing changed.
    OwnershipLost,
}

/// What `GET /locks/{key}` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockStatus {
    /// True while the lock is held or not yet takeover-eligible; false means an acquire
    /// would succeed now.
    pub held: bool,
    /// Expiry of the current lease, when held.
    #[serde(
        default,
        with = "crate::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<SystemTime>,
    /// Fencing token of the current lease, when held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

fn lease_path(key: &str) -> String {
    format!("/locks/{}/lease", encode(key))
}

/// Percent-encodes a path segment (keys are validated by the server; this only keeps odd
/// input from changing the route).
pub(crate) fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn contention(e: &Error) -> Option<&str> {
    match e {
        Error::Api(a) if a.status == 409 => Some(a.code.as_str()),
        _ => None,
    }
}

impl Client {
    /// `POST /locks/{key}/lease`: acquires (or re-acquires with the same token) for `ttl`.
    ///
    /// An uncertain attempt (no answer after sending, or `503`) is retried with the same lock
    /// token: re-acquiring with the token of a live lease keeps its fencing token, so a lost
    /// answer cannot leave a lease the caller does not know about.
    pub async fn acquire(&self, key: &str, token: LockToken, ttl: Duration) -> Result<Acquire> {
        let call = Call::new(Method::POST, lease_path(key))
            .header(LOCK_TOKEN_HEADER, token.to_string())
            .header(REQUEST_ID_HEADER, uuid::Uuid::new_v4().to_string())
            .message(&TtlRequest {
                ttl_seconds: ttl.as_secs(),
            });
        match self.send(call).await {
            Ok(reply) => Ok(Acquire::Acquired(reply.decode()?)),
            Err(e) => match contention(&e) {
                Some("lock_held") => Ok(Acquire::Held),
                Some("lock_ownership_lost") => Ok(Acquire::OwnershipLost),
                _ => Err(e),
            },
        }
    }

    /// `PATCH /locks/{key}/lease`: extends the caller's live lease to now + `ttl`.
    pub async fn renew(&self, key: &str, token: LockToken, ttl: Duration) -> Result<Renew> {
        let call = Call::new(Method::PATCH, lease_path(key))
            .header(LOCK_TOKEN_HEADER, token.to_string())
            .message(&TtlRequest {
                ttl_seconds: ttl.as_secs(),
            });
        match self.send(call).await {
            Ok(reply) => Ok(Renew::Renewed(reply.decode()?)),
            Err(e) if contention(&e) == Some("lock_ownership_lost") => Ok(Renew::OwnershipLost),
            Err(e) => Err(e),
        }
    }

    /// `DELETE /locks/{key}/lease`: releases the caller's lease (idempotent).
    pub async fn release(&self, key: &str, token: LockToken) -> Result<Release> {
        let call =
            Call::new(Method::DELETE, lease_path(key)).header(LOCK_TOKEN_HEADER, token.to_string());
        match self.send(call).await {
            Ok(_) => Ok(Release::Released),
            Err(e) if contention(&e) == Some("lock_ownership_lost") => Ok(Release::OwnershipLost),
            Err(e) => Err(e),
        }
    }

    /// `GET /locks/{key}`: a linearizable read of the lock.
    pub async fn get(&self, key: &str) -> Result<LockStatus> {
        let call = Call::new(Method::GET, format!("/locks/{}", encode(key)));
        self.send(call).await?.decode()
    }

    /// `DELETE /locks/{key}`: deletes the lease whoever holds it (`Ok` also when absent).
    pub async fn force_release(&self, key: &str) -> Result<()> {
        let call = Call::new(Method::DELETE, format!("/locks/{}", encode(key)));
        self.send(call).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_and_status_decode() {
        let l: Lease = serde_json::from_str(
            r#"{"expires_at":"2026-07-20T14:00:10Z","fencing_token":9007199254740000}"#,
        )
        .unwrap();
        assert_eq!(l.fencing_token, 9007199254740000);
        let secs = l
            .expires_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(secs, 1_784_556_010);
        let s: LockStatus = serde_json::from_str(r#"{"held":false}"#).unwrap();
        assert_eq!(
            s,
            LockStatus {
                held: false,
                expires_at: None,
                fencing_token: None
            }
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"held":false}"#);
        let a = serde_json::to_value(Acquire::Acquired(l)).unwrap();
        assert_eq!(a["result"], "acquired");
        assert_eq!(a["expires_at"], "2026-07-20T14:00:10Z");
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(encode("jobs:nightly-1.x"), "jobs:nightly-1.x");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }
}
