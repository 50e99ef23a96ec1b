//! Authentication: who is calling, and may they call this route.
//!
//! Keys look like `rlk_<key_id>_<secret>`; the key id locates the record and the SHA-256 of
//! the whole string is compared in constant time with the stored hash. Missing or unknown
//! credentials get 401; known credentials of the wrong kind or scope get 403. Neither
//! response says whether a given key exists.

use axum::http::{header, HeaderMap, StatusCode};
use raftlock_core::machine::KeyCheck;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::errors::{ApiError, Dialect};
use crate::node::Node;

/// Prefix of every API key secret.
pub const KEY_PREFIX: &str = "rlk_";

/// What the bearer token turned out to be.
enum Credential {
    Missing,
    Platform,
    /// A three-segment JWT-shaped token (auth-user access token); never valid for locks.
    UserJwt,
    Key {
        key_id: String,
        hash: [u8; 32],
    },
    Garbage,
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// SHA-256 of a presented secret.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The key id of a presented project key, its secret unread: what routing needs to find the
/// call's project (the handler then checks the secret).
pub fn presented_key_id(headers: &HeaderMap) -> Option<&str> {
    let rest = bearer(headers)?.strip_prefix(KEY_PREFIX)?;
    rest.split_once('_').map(|(key_id, _)| key_id)
}

fn classify(node: &Node, headers: &HeaderMap) -> Credential {
    let Some(token) = bearer(headers) else {
        return Credential::Missing;
    };
    if bool::from(
        token
            .as_bytes()
            .ct_eq(node.config.platform_token.as_bytes()),
    ) {
        return Credential::Platform;
    }
    if let Some(rest) = token.strip_prefix(KEY_PREFIX) {
        if let Some((key_id, _)) = rest.split_once('_') {
            return Credential::Key {
                key_id: key_id.to_string(),
                hash: hash_secret(token),
            };
        }
    }
    if looks_like_jwt(token) {
        return Credential::UserJwt;
    }
    Credential::Garbage
}

fn unauthorized(d: Dialect) -> ApiError {
    ApiError::new(
        d,
        StatusCode::UNAUTHORIZED,
        "missing or invalid credentials",
    )
}

fn forbidden(d: Dialect, why: &str) -> ApiError {
    ApiError::new(d, StatusCode::FORBIDDEN, why)
}

/// The check a request passes before its body is read, from its headers alone: an admin
/// route needs the platform token; a lock route a credential of a kind that could call it
/// (a project key, whose hash the handler checks against the replicated keys once the body
/// is in — a key created a moment ago may not have reached this follower yet). A client
/// without credentials so never gets the node to read, or wait for, a body.
pub fn admits_before_body(node: &Node, headers: &HeaderMap, path: &str) -> Result<(), ApiError> {
    if path.starts_with("/admin/") {
        return platform(node, headers);
    }
    let d = Dialect::of_path(path);
    match classify(node, headers) {
        Credential::Missing | Credential::Garbage => Err(unauthorized(d)),
        _ => Ok(()),
    }
}

/// Authenticates a lock-API caller and returns its project.
pub fn lock_caller(node: &Node, headers: &HeaderMap, d: Dialect) -> Result<String, ApiError> {
    match classify(node, headers) {
        Credential::Missing | Credential::Garbage => Err(unauthorized(d)),
        Credential::Platform => Err(forbidden(d, "platform tokens may not call lock endpoints")),
        Credential::UserJwt => Err(forbidden(
            d,
            "auth-user access tokens may not call lock endpoints",
        )),
        Credential::Key { key_id, hash } => {
            node.meta
                .read_local(|sm, _| match sm.check_key(&key_id, &hash) {
                    KeyCheck::Unknown => Err(unauthorized(d)),
                    KeyCheck::Known { key, .. } if !key.may_manage_locks() => Err(forbidden(
                        d,
                        "this key may not manage locks (needs service_role or scope locks.manage)",
                    )),
                    KeyCheck::Known { project, .. } => Ok(project.to_string()),
                })
        }
    }
}

/// Authenticates a lock-API caller and counts the request against its project's limit for that
/// API (project-lock and hierarchical have separate windows); returns the caller's project.
pub fn lock_caller_counted(
    node: &Node,
    headers: &HeaderMap,
    d: Dialect,
) -> Result<String, ApiError> {
    let project = lock_caller(node, headers, d)?;
    let (locks_limit, hier_limit) = node.meta.read_local(|sm, _| sm.rate_limits(&project));
    let (bucket, limit, api) = match d {
        Dialect::Locks => (project.clone(), locks_limit, "locks"),
        Dialect::Rpc => (format!("{project}#hier"), hier_limit, "hierarchy"),
    };
    if let Err(retry_after) = node.count_request(&bucket, limit) {
        metrics::counter!("raftlock_rate_limited_total", "api" => api).increment(1);
        return Err(ApiError::rate_limited(d, retry_after));
    }
    Ok(project)
}

/// Authenticates an admin caller (platform token only).
pub fn platform(node: &Node, headers: &HeaderMap) -> Result<(), ApiError> {
    let d = Dialect::Locks;
    match classify(node, headers) {
        Credential::Platform => Ok(()),
        Credential::Missing | Credential::Garbage => Err(unauthorized(d)),
        Credential::UserJwt => Err(forbidden(
            d,
            "only the platform token may call the admin API",
        )),
        Credential::Key { key_id, hash } => {
            node.meta
                .read_local(|sm, _| match sm.check_key(&key_id, &hash) {
                    KeyCheck::Unknown => Err(unauthorized(d)),
                    KeyCheck::Known { .. } => Err(forbidden(
                        d,
                        "only the platform token may call the admin API",
                    )),
                })
        }
    }
}

/// Why a node-to-node request (a forwarded client call, a campaign or pre-vote request) was
/// refused.
#[derive(Debug)]
pub enum PeerRefusal {
    /// No or a wrong cluster secret: 401.
    Secret,
    /// Another cluster's id, or none where one is required: 409 (see `raftlock_raft::identity`).
    Cluster(String),
}

impl axum::response::IntoResponse for PeerRefusal {
    fn into_response(self) -> axum::response::Response {
        match self {
            PeerRefusal::Secret => {
                (StatusCode::UNAUTHORIZED, "missing or wrong cluster secret").into_response()
            }
            PeerRefusal::Cluster(why) => (StatusCode::CONFLICT, why).into_response(),
        }
    }
}

/// Admits a node-to-node request: the cluster secret (compared in constant time), then the
/// cluster id.
pub fn admit_peer(node: &Node, headers: &HeaderMap) -> Result<(), PeerRefusal> {
    if !has_cluster_secret(node, headers) {
        return Err(PeerRefusal::Secret);
    }
    let presented = headers.get(raftlock_raft::CLUSTER_ID_HEADER);
    node.identity
        .check_peer(presented.map(|v| v.as_bytes()))
        .map_err(|refusal| PeerRefusal::Cluster(refusal.to_string()))
}

/// Whether a request presents the cluster secret (compared in constant time): the header
/// check that every node-to-node request passes before anything else of it is read. Unlike
/// [`admit_peer`] it neither checks nor adopts a cluster id, so it may run on any request.
pub fn has_cluster_secret(node: &Node, headers: &HeaderMap) -> bool {
    headers
        .get(raftlock_raft::CLUSTER_SECRET_HEADER)
        .is_some_and(|v| bool::from(v.as_bytes().ct_eq(node.config.cluster_secret.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a..c"));
        assert!(!looks_like_jwt("rlk_abc_def"));
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "bearer  ".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }
}
