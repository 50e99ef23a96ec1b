//! Leader routing: a client request is decided by the leader. A follower proxies it there
//! (same method, path, headers and body, plus the cluster secret) and relays the answer; with
//! no leader known within the commit timeout, or the leader unreachable, the answer is 503.

use std::time::Duration;

use axum::body::Body;
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
/// A request is forwarded at most this many times (a leader change mid-flight may need two).
const MAX_HOPS: u32 = 2;
/// Longest blocking acquire plus slack.
const LONG_CALL: Duration = Duration::from_secs(300 + 5);

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

async fn forward(
    node: &SharedNode,
    req: Request,
    addr: &str,
    hops: u32,
    d: Dialect,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = body::read(body, d).await?;
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = format!("http://{addr}{path}");
    let timeout = if parts.uri.path().ends_with("/AcquireLock") {
        LONG_CALL + node.config.commit_timeout
    } else {
        2 * node.config.commit_timeout + Duration::from_millis(500)
    };
    let mut out = node
        .forward_client
        .request(parts.method.clone(), &url)
        .timeout(timeout)
        .body(bytes);
    for (name, value) in parts.headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        if name.as_str() != HOPS_HEADER && name.as_str() != raftlock_raft::CLUSTER_SECRET_HEADER {
            out = out.header(name, value);
        }
    }
    out = out.header(HOPS_HEADER, hops.to_string()).header(
        raftlock_raft::CLUSTER_SECRET_HEADER,
        node.config.cluster_secret.as_str(),
    );
    let resp = out
        .send()
        .await
        .map_err(|e| ApiError::unavailable(d, format!("leader unreachable: {e}")))?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .bytes()
        .await
        .map_err(|e| ApiError::unavailable(d, format!("leader reply lost: {e}")))?;
    let mut reply = Response::new(Body::from(body));
    *reply.status_mut() = status;
    for (name, value) in headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        reply.headers_mut().append(name.clone(), value.clone());
    }
    metrics::counter!("raftlock_forwarded_total").increment(1);
    Ok(reply)
}
