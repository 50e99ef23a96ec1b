//! project-lock routes. Handlers run on the leader (followers forward): authenticate,
//! count the request against the project's rate limit, validate, then propose or read.

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use raftlock_api::locks::{
    HoldState, LeaseResponse, ListLocksQuery, LockList, LockStatus, LockSummary, TtlRequest,
};
use raftlock_core::command::LockAction;
use raftlock_core::project_locks::LockRead;
use raftlock_core::{validate, Nanos, Op, Reply};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::errors::{ApiError, Dialect};
use super::idempotency::ClientRequestId;
use super::{auth, body};
use crate::node::SharedNode;

const D: Dialect = Dialect::Locks;

pub use crate::headers::LOCK_TOKEN_HEADER;

pub fn routes() -> Router<SharedNode> {
    Router::new()
        .route(
            "/locks/{key}/lease",
            post(lease_call).patch(lease_call).delete(release),
        )
        .route("/locks/{key}", get(read).delete(force_release))
        .route("/locks", get(list))
}

/// `GET /locks` (an extension of the project-lock API, for operators and the console): the
/// project's locks in key order, each `{key, state: "held"|"grace", expires_at,
/// fencing_token, holder}` where `holder` is the first 8 hex digits of the owner's token (a
/// hint for operators, not enough to act as the owner) and `grace` means expired but still
/// blocking a new owner for the takeover grace. `next` continues the listing.
async fn list(
    State(node): State<SharedNode>,
    query: Result<axum::extract::Query<ListLocksQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let project = caller_project(&node, &headers)?;
    let axum::extract::Query(q) = query.map_err(|e| ApiError::bad_request(D, e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(D, "limit must be between 1 and 1000"));
    }
    let after = q.after.unwrap_or_default();
    if !after.is_empty() {
        check_key(&after)?;
    }
    let page = super::decide::group_for(&node, &project, D)?
        .linearizable(|sm, now| sm.list_locks(&project, &after, limit + 1, now))
        .await
        .map_err(|e| ApiError::from_unavailable(D, e))?;
    let more = page.len() > limit;
    let locks: Vec<_> = page
        .iter()
        .take(limit)
        .map(|(key, lease, live)| LockSummary {
            key: key.clone(),
            state: if *live {
                HoldState::Held
            } else {
                HoldState::Grace
            },
            expires_at: rfc3339_floor(lease.expires_at),
            fencing_token: lease.fencing_token,
            holder: format!("{:032x}", u128::from(lease.token))[..8].to_string(),
        })
        .collect();
    let next = more.then(|| locks.last().map(|l| l.key.clone())).flatten();
    Ok(Json(LockList { locks, next }).into_response())
}

/// RFC 3339 UTC, whole seconds rounded down (an owner never believes in a later expiry).
pub fn rfc3339_floor(t: Nanos) -> String {
    let secs = t.div_euclid(1_000_000_000);
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|d| d.format(&Rfc3339).ok())
        .unwrap_or_else(|| "invalid".to_string())
}

fn lock_token(headers: &HeaderMap) -> Result<u128, ApiError> {
    let raw = headers
        .get(LOCK_TOKEN_HEADER)
        .ok_or_else(|| ApiError::bad_request(D, "missing X-Volcano-Lock-Token header"))?;
    let text = raw
        .to_str()
        .map_err(|_| ApiError::bad_request(D, "X-Volcano-Lock-Token must be a UUID"))?;
    uuid::Uuid::parse_str(text.trim())
        .map(|u| u.as_u128())
        .map_err(|_| ApiError::bad_request(D, "X-Volcano-Lock-Token must be a UUID"))
}

/// Authenticates and counts the request; returns the caller's project.
fn caller_project(node: &SharedNode, headers: &HeaderMap) -> Result<String, ApiError> {
    auth::lock_caller_counted(node, headers, D)
}

/// The `{key}` path segment; a malformed one (bad percent-encoding) is a JSON 400 too.
fn key_of(
    key: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<String, ApiError> {
    key.map(|Path(k)| k)
        .map_err(|e| ApiError::bad_request(D, format!("key: {e}")))
}

fn check_key(key: &str) -> Result<(), ApiError> {
    validate::lock_key(key).map_err(|e| ApiError::from_core(D, e))
}

/// A call on one project lock: the caller authenticated (and counted against its project's
/// rate limit), then the `{key}` read and checked.
struct KeyCall {
    node: SharedNode,
    project: String,
    key: String,
}

impl FromRequestParts<SharedNode> for KeyCall {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, node: &SharedNode) -> Result<Self, ApiError> {
        let project = caller_project(node, &parts.headers)?;
        let key = key_of(Path::<String>::from_request_parts(parts, node).await)?;
        check_key(&key)?;
        let node = node.clone();
        Ok(KeyCall { node, project, key })
    }
}

/// Decides `op`, a write wrapped under `ids`, in its project's group.
async fn decide(node: &SharedNode, ids: ClientRequestId, op: Op) -> Result<Reply, ApiError> {
    let group = super::decide::group_for(node, op.project().unwrap_or_default(), D)?;
    super::decide::decide(&group, ids.bound_in(&group, op), D).await
}

fn lease_body(reply: Reply) -> Result<Response, ApiError> {
    match reply {
        Reply::Lease {
            expires_at,
            fencing_token,
        } => Ok(Json(LeaseResponse {
            expires_at: rfc3339_floor(expires_at),
            fencing_token,
        })
        .into_response()),
        other => Err(ApiError::new(
            D,
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unexpected reply {other:?}"),
        )),
    }
}

/// `POST /locks/{key}/lease` acquires, `PATCH` renews: the same token, body and rules.
async fn lease_call(
    method: Method,
    id: ClientRequestId,
    KeyCall { node, project, key }: KeyCall,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let token = lock_token(&headers)?;
    let TtlRequest { ttl_seconds } = body::json(&body::read(body, D).await?, D)?;
    let action = match method {
        Method::PATCH => LockAction::Renew { token, ttl_seconds },
        _ => LockAction::Acquire { token, ttl_seconds },
    };
    action
        .validate(&key)
        .map_err(|e| ApiError::from_core(D, e))?;
    // Not under the client's request id: acquire and renew are already safe for a client
    // to repeat (the token names the lease), and a client that reused one id across renewals
    // would otherwise get the first renewal's answer back and its lease would silently not
    // be extended. Under an id this node minted (never reused) they are: a resend after a
    // lost answer must not acquire again a lock that was released or expired meanwhile.
    let op = Op::ProjectLock {
        project,
        key,
        action,
    };
    let reply = decide(&node, id, id.wrap_if(false, op)).await?;
    lease_body(reply)
}

async fn release(
    id: ClientRequestId,
    KeyCall { node, project, key }: KeyCall,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let token = lock_token(&headers)?;
    decide(
        &node,
        id,
        id.wrap(Op::ProjectLock {
            project,
            key,
            action: LockAction::Release { token },
        }),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn force_release(
    id: ClientRequestId,
    KeyCall { node, project, key }: KeyCall,
) -> Result<StatusCode, ApiError> {
    decide(
        &node,
        id,
        id.wrap(Op::ProjectLock {
            project,
            key,
            action: LockAction::ForceRelease,
        }),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn read(KeyCall { node, project, key }: KeyCall) -> Result<Response, ApiError> {
    let read = super::decide::group_for(&node, &project, D)?
        .linearizable(|sm, now| sm.read_lock(&project, &key, now))
        .await
        .map_err(|e| ApiError::from_unavailable(D, e))?
        .map_err(|e| ApiError::from_core(D, e))?;
    let status = match read {
        LockRead::Free => LockStatus {
            held: false,
            expires_at: None,
            fencing_token: None,
        },
        LockRead::Held {
            expires_at,
            fencing_token,
        } => LockStatus {
            held: true,
            expires_at: Some(rfc3339_floor(expires_at)),
            fencing_token: Some(fencing_token),
        },
    };
    Ok(Json(status).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_rounded_down_to_whole_seconds() {
        let t = 1_784_556_010 * 1_000_000_000 + 999_999_999;
        assert_eq!(rfc3339_floor(t), "2026-07-20T14:00:10Z");
    }

    #[test]
    fn lock_token_must_be_a_uuid() {
        let mut h = HeaderMap::new();
        assert!(lock_token(&h).is_err());
        h.insert(LOCK_TOKEN_HEADER, "not-a-uuid".parse().unwrap());
        assert!(lock_token(&h).is_err());
        h.insert(
            LOCK_TOKEN_HEADER,
            "4f83efc2-8fe7-42e8-8347-43493dc5bd8f".parse().unwrap(),
        );
        assert_eq!(
            lock_token(&h).unwrap(),
            0x4f83efc2_8fe7_42e8_8347_43493dc5bd8f
        );
    }
}
