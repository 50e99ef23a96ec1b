//! Leader routing: a client request is decided by the leader. A follower proxies it there
//! (same method, path, headers and body, plus the cluster secret) and relays the answer; with
//! no leader known within the commit timeout, or the leader unreachable, the answer is 503.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth;
use super::body;
use super::errors::{ApiError, Dialect};
use crate::node::SharedNode;

/// Marks a request forwarded by a peer; its value is the number of hops so far.
pub const HOPS_HEADER: &str = "x-raftlock-hops";
/// Waiter id of a forwarded blocking acquire, stable across retries to a new leader.
pub const WAITER_ID_HEADER: &str = "x-raftlock-waiter-id";
/// Wall-clock deadline (ns) of a forwarded blocking acquire, stable across retries.
pub const DEADLINE_HEADER: &str = "x-raftlock-deadline";
/// A request is forwarded at most this many times (a leader change mid-flight may need two).
const MAX_HOPS: u32 = 2;

/// Hop-by-hop headers that must not be copied onto the forwarded request or the reply.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "content-length"
            | "transfer-encoding"
            | "keep-alive"
            | "upgrade"
            | "te"
            | "trailer"
    )
}

/// Middleware on every route that needs the leader.
pub async fn to_leader(State(node): State<SharedNode>, req: Request, next: Next) -> Response {
    let dialect = Dialect::of_path(req.uri().path());
    let hops: u32 = match req.headers().get(HOPS_HEADER) {
        None => 0,
        Some(v) => {
            if !auth::cluster_secret_ok(&node, req.headers()) {
                return ApiError::new(
                    dialect,
                    StatusCode::UNAUTHORIZED,
                    "forwarded request without cluster secret",
                )
                .into_response();
            }
            let presented = req.headers().get(raftlock_raft::CLUSTER_ID_HEADER);
            if let Err(refusal) = node.identity.admit(presented.map(|v| v.as_bytes())) {
                return ApiError::new(dialect, StatusCode::CONFLICT, refusal.to_string())
                    .into_response();
            }
            v.to_str()
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(MAX_HOPS)
        }
    };
    let Some((leader_id, addr)) = node.wait_for_leader().await else {
        return ApiError::unavailable(dialect, "no leader").into_response();
    };
    if leader_id == node.config.node_id {
        return next.run(req).await;
    }
    if hops >= MAX_HOPS {
        return ApiError::unavailable(dialect, "leader changed while forwarding").into_response();
    }
    match forward(&node, req, &addr, hops + 1, dialect).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// What is needed to (re)send a client request to the leader.
struct Outgoing {
    method: axum::http::Method,
    /// Path and query, relayed unchanged.
    path: String,
    headers: axum::http::HeaderMap,
    body: Bytes,
    /// Transport timeout: the commit bound, plus the wait a blocking acquire asked for.
    timeout: Duration,
}

async fn forward(
    node: &SharedNode,
    req: Request,
    addr: &str,
    hops: u32,
    d: Dialect,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let body = body::read(body, d).await?;
    let blocking = parts.uri.path().ends_with("/AcquireLock");
    // The transport timeout is bounded by what this call may wait (found by the chaos
    // suite: a forwarded AcquireLock to a leader that accepts connections but never
    // answers — paused, or behind a blackholed link — hung for the 305 s maximum even with
    // `timeout_seconds: 0`, instead of answering 503 within the commit bound).
    let wait_secs = if blocking { blocking_timeout(&body) } else { 0 };
    let out = Outgoing {
        method: parts.method,
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_string(),
        headers: parts.headers,
        body,
        timeout: Duration::from_secs(wait_secs)
            + 2 * node.config.commit_timeout
            + Duration::from_millis(500),
    };
    // Only the first hop manages retries across leader changes.
    if wait_secs == 0 || hops != 1 {
        return send(node, &out, addr, hops, &[], d).await;
    }
    forward_blocking_acquire(node, out, addr, wait_secs, d).await
}

/// `timeout_seconds` of an AcquireLock body (0 when absent or unreadable).
fn blocking_timeout(body: &[u8]) -> u64 {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("timeout_seconds").and_then(|t| t.as_u64()))
        .unwrap_or(0)
        .min(300)
}

/// A blocking acquire survives a leader change: the follower that received it keeps one
/// waiter id and deadline for the whole call and, if the leader dies or steps down
/// mid-wait, sends the call again to the new leader until the deadline. The queue entry is
/// keyed by the waiter id and re-acquire under one lease is idempotent, so a retry can
/// neither queue twice nor double-grant.
async fn forward_blocking_acquire(
    node: &SharedNode,
    out: Outgoing,
    first_addr: &str,
    wait_secs: u64,
    d: Dialect,
) -> Result<Response, ApiError> {
    let waiter_id = super::rpc::new_waiter_id();
    let deadline_nanos = node.cluster_now() + wait_secs as i64 * 1_000_000_000;
    let give_up =
        tokio::time::Instant::now() + Duration::from_secs(wait_secs) + node.config.commit_timeout;
    let extra = [
        (WAITER_ID_HEADER, waiter_id),
        (DEADLINE_HEADER, deadline_nanos.to_string()),
    ];
    let mut addr = first_addr.to_string();
    loop {
        // A leader that is cut off but alive keeps the call until the deadline; as soon as
        // this node learns of another leader, abandon that attempt and go on there.
        let result = tokio::select! {
            r = send(node, &out, &addr, 1, &extra, d) => r,
            _ = leader_moved_from(node, &addr) => {
                Err(ApiError::unavailable(d, "the leader changed while waiting"))
            }
        };
        let retry = match &result {
            Ok(resp) => resp.status() == StatusCode::SERVICE_UNAVAILABLE,
            Err(_) => true,
        };
        if !retry || tokio::time::Instant::now() >= give_up {
            return result;
        }
        // Wait for the cluster to settle on a (possibly new) leader, then try again.
        let mut metrics = node.raft.metrics();
        let _ = tokio::time::timeout(Duration::from_millis(200), metrics.changed()).await;
        match node.wait_for_leader().await {
            Some((_, leader_addr)) => addr = leader_addr,
            None => continue,
        }
    }
}

/// Resolves once this node knows a leader at an address other than `addr`.
async fn leader_moved_from(node: &SharedNode, addr: &str) {
    let mut metrics = node.raft.metrics();
    loop {
        if node.leader().is_some_and(|(_, a)| a != addr) {
            return;
        }
        if metrics.changed().await.is_err() {
            // Raft stopped: never resolve; the send itself will fail or time out.
            std::future::pending::<()>().await;
        }
    }
}

async fn send(
    node: &SharedNode,
    out: &Outgoing,
    addr: &str,
    hops: u32,
    extra: &[(&str, String)],
    d: Dialect,
) -> Result<Response, ApiError> {
    let url = format!("http://{addr}{}", out.path);
    let mut req = node
        .forward_client
        .request(out.method.clone(), &url)
        .timeout(out.timeout)
        .body(out.body.clone());
    for (name, value) in out.headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        if !is_internal(name.as_str()) {
            req = req.header(name, value);
        }
    }
    for (name, value) in extra {
        req = req.header(*name, value.as_str());
    }
    // The source header names this node (not the original client) so a per-link fault
    // proxy sees which node-to-node link the forwarded request travels on.
    req = req
        .header(HOPS_HEADER, hops.to_string())
        .header(
            raftlock_raft::CLUSTER_SECRET_HEADER,
            node.config.cluster_secret.as_str(),
        )
        .header(
            raftlock_raft::SOURCE_HEADER,
            node.config.node_id.to_string(),
        );
    if let Some(id) = node.identity.get() {
        req = req.header(raftlock_raft::CLUSTER_ID_HEADER, id.to_string());
    }
    let resp = req.send().await.map_err(|e| {
        tracing::debug!(error = %e, "forward to the leader failed");
        ApiError::unavailable(d, "leader unreachable")
    })?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.map_err(|e| {
        tracing::debug!(error = %e, "leader reply lost");
        ApiError::unavailable(d, "leader reply lost")
    })?;
    // A gateway error that is not one of ours came from something on the link (a proxy or
    // sidecar between the nodes), not from the leader: answer in the API's error format.
    if matches!(status.as_u16(), 502..=504)
        && serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("code").cloned())
            .is_none()
    {
        return Err(ApiError::unavailable(
            d,
            format!("leader link answered {status}"),
        ));
    }
    let mut reply = Response::new(Body::from(body));
    *reply.status_mut() = status;
    for (name, value) in headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        reply.headers_mut().append(name.clone(), value.clone());
    }
    metrics::counter!("raftlock_forwarded_total").increment(1);
    Ok(reply)
}

/// Node-to-node headers a client may not smuggle through a forward.
fn is_internal(name: &str) -> bool {
    name == HOPS_HEADER
        || name == WAITER_ID_HEADER
        || name == DEADLINE_HEADER
        || name == raftlock_raft::CLUSTER_SECRET_HEADER
        || name == raftlock_raft::SOURCE_HEADER
        || name == raftlock_raft::CLUSTER_ID_HEADER
}
