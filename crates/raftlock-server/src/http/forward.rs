//! Leader routing: a client request is decided by the leader. A follower proxies it there
//! (same method, path, headers and body, plus the cluster secret) and relays the answer.
//!
//! Every request has one deadline, the commit timeout (plus the wait a blocking acquire
//! asked for), counted from its arrival. It covers waiting for a leader, forwarding and
//! committing. When the leader dies or changes mid-forward, the follower waits for the new
//! leader and sends the request again within that deadline, if it is safe to repeat
//! ([`repeatable`]) or was provably never sent; otherwise, and once the deadline passes, it
//! answers 503 (docs/semantics.md, *Forwarding*).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::auth;
use super::body;
use super::errors::{is_settled, ApiError, Dialect, NotProposed};
use super::idempotency::ClientRequestId;
use super::resend::FirstSent;
use super::wait::WaitContext;
use crate::group::Group;
use crate::node::{Node, SharedNode};

use crate::headers::{
    FIRST_AFTER_HEADER, FIRST_WITHIN_HEADER, FORWARDED_REQUEST_ID_HEADER, HOPS_HEADER,
    NODE_REQUEST_ID_HEADER, NOT_PROPOSED_HEADER, RESENT_HEADER, WAITER_ID_HEADER, WAIT_LEFT_HEADER,
};
/// A request is forwarded at most this many times (a leader change mid-flight may need two).
const MAX_HOPS: u32 = 2;
/// After a failed attempt, how long to wait for news of a leader before trying again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

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

/// Whether sending `method path` twice gives the same state *and the same answer* as
/// sending it once, so a follower may repeat it at a new leader when the first attempt's
/// fate is unknown, without a request id: reads and the repeatable writes of the method
/// registry ([`raftlock_api::methods::Effect`]). A once-only write (a release, a create, a
/// force release) is resent only under one of the call's request ids (see `Call::new`):
/// every lock write has one, minted by the node the client called when it sent none.
pub fn repeatable(method: &Method, path: &str) -> bool {
    use raftlock_api::methods::{effect_of, Effect};
    method == Method::GET
        || matches!(
            effect_of(method.as_str(), path),
            Some(Effect::Read | Effect::Repeatable)
        )
}

/// Where a call is decided: by a group this node hosts (at that group's leader, which may
/// be this node), or — for a shard this node hosts no replica of — by one of the shard's
/// members, which takes it on to its leader. The shard comes from the caller's project on
/// this node's meta replica (admin and unauthenticated calls: the meta group).
enum Route {
    Hosted(std::sync::Arc<Group>),
    Remote { members: Vec<(u64, String)> },
}

impl Route {
    fn of(node: &Node, headers: &axum::http::HeaderMap) -> Route {
        // Routing reads the key's project without hashing its secret: the handler that
        // decides the call authenticates it (an unknown or forged key goes to the meta group,
        // which refuses it).
        let shard = auth::presented_key_id(headers)
            .and_then(|key_id| {
                node.meta.read_local(|sm, _| {
                    let project = sm.project_of_key(key_id)?;
                    Some(sm.shards().shard_of(project))
                })
            })
            .unwrap_or(raftlock_raft::META_GROUP);
        match node.group(shard) {
            Some(group) => Route::Hosted(group),
            None => {
                // A member whose replica is not started yet (the shard was just created)
                // sends the call to the others rather than to itself.
                let mut members = node.shard_members(shard);
                members.retain(|(id, _)| *id != node.config.node_id);
                Route::Remote { members }
            }
        }
    }

    /// Where attempt number `attempt` goes: the group's leader (waiting until `deadline` for
    /// one to be known), or the shard's members in turn.
    async fn stop(&self, attempt: usize, deadline: Instant) -> Option<(u64, String)> {
        match self {
            Route::Hosted(group) => group.wait_for_leader_until(deadline).await,
            Route::Remote { members } if members.is_empty() => None,
            Route::Remote { members } => Some(members[attempt % members.len()].clone()),
        }
    }

    /// Resolves once this node knows the group's leader to be elsewhere than `leader_id`
    /// (never, for a group it does not host).
    async fn leader_news(&self, leader_id: u64) {
        let Route::Hosted(group) = self else {
            return std::future::pending().await;
        };
        let mut metrics = group.raft.metrics();
        // News may already be here (the attempt failed because of it).
        if metrics.borrow_and_update().current_leader != Some(leader_id) {
            return;
        }
        while metrics.changed().await.is_ok() {
            if metrics.borrow().current_leader != Some(leader_id) {
                return;
            }
        }
        std::future::pending().await
    }
}

/// Middleware on every route that needs the leader.
pub async fn to_leader(State(node): State<SharedNode>, req: Request, next: Next) -> Response {
    let arrived = Instant::now();
    let dialect = Dialect::of_path(req.uri().path());
    let hops = match forwarded_hops(&node, &req, dialect) {
        Ok(hops) => hops,
        Err(refusal) => return refusal.into_response(),
    };
    if hops == 0 {
        if let Err(refused) = auth::admits_before_body(&node, req.headers(), req.uri().path()) {
            // The body stays unread: the connection cannot carry another request.
            return refused.closing().into_response();
        }
    }
    let first_deadline = arrived + node.config.commit_timeout;
    let target = Route::of(&node, req.headers());
    let Some(leader) = target.stop(0, first_deadline).await else {
        return ApiError::unavailable(dialect, "no leader").into_response();
    };
    let (mut parts, body) = req.into_parts();
    let body = match body::read(body, dialect).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let call = Call::new(&node, &parts, body, (hops, arrived), &target, dialect);
    parts.extensions.insert(call.wait.clone());
    let mut resp = route(&node, &call, &target, leader, parts, next).await;
    if hops > 0 && resp.extensions().get::<NotProposed>().is_some() {
        // Tell the forwarding peer it may send this request on to the new leader.
        resp.headers_mut()
            .insert(NOT_PROPOSED_HEADER, HeaderValue::from_static("1"));
    }
    resp
}

/// Decides `call` here while this node leads, or forwards it to the leader; goes on to each
/// new leader while the call's fate allows a retry and its deadline has not passed. Only the
/// node the client called retries; a forwarded call gets one more hop at most.
async fn route(
    node: &SharedNode,
    call: &Call,
    target: &Route,
    (mut leader_id, mut addr): (u64, String),
    parts: Parts,
    next: Next,
) -> Response {
    let mut local = Some((parts, next));
    let mut attempt_no = 0;
    let mut remote_attempts = if call.hops == 1 { u32::MAX } else { 1 };
    // Whether an attempt of this node may have been proposed: every later one is a resend.
    let mut proposed_maybe = false;
    loop {
        let (last, may_retry) = if leader_id == node.config.node_id {
            let Some((mut parts, next)) = local.take() else {
                return ApiError::unavailable(call.dialect, "the leader changed").into_response();
            };
            // A resend decided here (after a forward that may have been proposed, this node
            // leads; or it came as one): proposed as one, with the bounds it has.
            if call.is_resend(proposed_maybe) {
                let mut ids = call.request_id;
                ids.resent = Some(call.first_sent);
                parts.extensions.insert(ids);
            }
            let resp = next
                .run(Request::from_parts(parts, Body::from(call.body.clone())))
                .await;
            let not_proposed = resp.extensions().get::<NotProposed>().is_some();
            proposed_maybe |= !not_proposed;
            let unanswered = resp.status() == StatusCode::SERVICE_UNAVAILABLE
                && (call.repeatable || not_proposed)
                && !is_settled(&resp);
            (resp, unanswered && call.hops <= MAX_HOPS)
        } else {
            if call.hops > MAX_HOPS || remote_attempts == 0 {
                return ApiError::unavailable(call.dialect, "leader changed while forwarding")
                    .into_response();
            }
            remote_attempts -= 1;
            let resent = call.is_resend(proposed_maybe);
            match attempt(node, call, target, &addr, resent).await {
                Ok(resp) => return resp,
                Err(failed) => {
                    proposed_maybe |= failed.sent;
                    (failed.resp, failed.may_retry && remote_attempts > 0)
                }
            }
        };
        if !may_retry || Instant::now() >= call.deadline {
            return last;
        }
        // Let the cluster settle (a new leader, or the same one back), then try again. Only
        // news of the leader ends the pause early: other metrics change on every heartbeat,
        // and a leader whose answers keep getting lost must not be hammered.
        let pause = (Instant::now() + RETRY_PAUSE).min(call.deadline);
        let _ = tokio::time::timeout_at(pause, target.leader_news(leader_id)).await;
        attempt_no += 1;
        match target.stop(attempt_no, call.deadline).await {
            Some((id, leader_addr)) => (leader_id, addr) = (id, leader_addr),
            None => return last,
        }
        metrics::counter!("raftlock_forward_retries_total").increment(1);
    }
}

/// A forward that got no answer to relay as it is.
struct Unanswered {
    /// The 503 to relay unless the call goes on elsewhere.
    resp: Response,
    /// Whether the call may go on to the next leader.
    may_retry: bool,
    /// Whether the leader may have proposed it (so a next attempt is a resend).
    sent: bool,
}

/// One forward to the leader at `addr`; `resent`: see [`send`]. `Ok`: the answer to relay.
async fn attempt(
    node: &SharedNode,
    call: &Call,
    target: &Route,
    addr: &str,
    resent: bool,
) -> Result<Response, Unanswered> {
    // A leader that is cut off but alive may hold the call until the deadline; as soon as
    // this node learns of another leader, a repeatable call goes on there.
    let result = tokio::select! {
        r = send(node, call, addr, resent) => r,
        _ = leader_moved_from(target, addr), if call.repeatable => Err(Failed {
            sent: true,
            error: ApiError::unavailable(call.dialect, "the leader changed"),
        }),
        // A stopping node answers a long wait now rather than have it cut at exit; dropping
        // the forward makes the leader cancel the waiter.
        _ = node.stopped(), if call.waits() => {
            let resp = ApiError::unavailable(call.dialect, "this node is stopping; retry on another").into_response();
            return Err(Unanswered { resp, may_retry: false, sent: true });
        }
    };
    match result {
        Ok(resp) if resp.status() != StatusCode::SERVICE_UNAVAILABLE || is_settled(&resp) => {
            Ok(resp)
        }
        // The leader's own 503 (it lost leadership, or could not commit in time): the write
        // may still commit, so only a repeatable call goes on.
        Ok(resp) => Err(Unanswered {
            resp,
            may_retry: call.repeatable,
            sent: true,
        }),
        Err(failed) => Err(Unanswered {
            resp: failed.error.into_response(),
            may_retry: call.repeatable || !failed.sent,
            sent: failed.sent,
        }),
    }
}

/// For a request forwarded by a peer: checks the cluster secret and id, returns the hops so
/// far. A client request (no hops header) has 0.
fn forwarded_hops(node: &SharedNode, req: &Request, dialect: Dialect) -> Result<u32, ApiError> {
    let Some(v) = req.headers().get(HOPS_HEADER) else {
        return Ok(0);
    };
    auth::admit_peer(node, req.headers()).map_err(|refusal| match refusal {
        auth::PeerRefusal::Secret => ApiError::new(
            dialect,
            StatusCode::UNAUTHORIZED,
            "forwarded request without cluster secret",
        ),
        auth::PeerRefusal::Cluster(why) => ApiError::new(dialect, StatusCode::CONFLICT, why),
    })?;
    Ok(v.to_str()
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(MAX_HOPS))
}

/// A client request on its way to the leader: what is needed to (re)send it, and its bound.
struct Call {
    method: Method,
    /// Path and query, relayed unchanged.
    path: String,
    headers: axum::http::HeaderMap,
    body: Bytes,
    /// Hops this call carries when forwarded (1 from the node the client called).
    hops: u32,
    /// A blocking acquire's waiter id and deadline, sent along on every attempt.
    wait: WaitContext,
    /// The one deadline of the whole call.
    deadline: Instant,
    /// What bounds the apply time of the call's first attempt ([`super::resend`]), fixed
    /// before any attempt from here; sent along on every forward.
    first_sent: FirstSent,
    /// The call came from a peer as a resend.
    came_resent: bool,
    /// Safe to send again when an attempt's fate is unknown.
    repeatable: bool,
    /// The call's request id (the client's own, or minted here), sent along on every
    /// attempt so the leader applies the call once.
    request_id: ClientRequestId,
    dialect: Dialect,
}

impl Call {
    /// Whether an attempt now is a resend: an earlier one may have been proposed (by this
    /// node, `proposed_maybe`, or before the call reached it).
    fn is_resend(&self, proposed_maybe: bool) -> bool {
        proposed_maybe || self.came_resent
    }

    /// A blocking acquire (it may wait far longer than a commit).
    fn waits(&self) -> bool {
        self.wait.waiter_id.is_some()
    }

    fn new(
        node: &SharedNode,
        parts: &Parts,
        body: Bytes,
        (arrived_hops, arrived): (u32, Instant),
        target: &Route,
        dialect: Dialect,
    ) -> Call {
        let path = parts.uri.path();
        let wait_secs = blocking_timeout(path, &body, dialect);
        let request_id: ClientRequestId = parts.extensions.get().copied().unwrap_or_default();
        // A write under one of the call's ids is applied once, so a repeat answers as the
        // first.
        let once = request_id.covers(&parts.method, path);
        let deadline = arrived + Duration::from_secs(wait_secs) + node.config.commit_timeout;
        let (came, came_resent) = match arrived_hops {
            0 => Default::default(),
            _ => FirstSent::from_peer(&parts.headers, arrived.into_std()),
        };
        let local = match target {
            // The bounds travel with every call that has an id (`send`).
            Route::Hosted(group) if request_id.covers_any() => {
                Some((group.id, group.applied_time()))
            }
            _ => None,
        };
        let first_sent = FirstSent::for_call(
            came,
            arrived_hops,
            local,
            arrived.into_std(),
            deadline.into_std(),
        );
        Call {
            method: parts.method.clone(),
            path: parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/")
                .to_string(),
            headers: parts.headers.clone(),
            body,
            hops: arrived_hops + 1,
            wait: WaitContext::for_request(parts, wait_secs, arrived_hops, arrived),
            deadline,
            first_sent,
            came_resent,
            repeatable: once || repeatable(&parts.method, path),
            request_id,
            dialect,
        }
    }
}

/// `timeout_seconds` of a blocking method's body (0 for any other request, or when absent).
///
/// Read by the same decoder the leader's handler uses ([`body::json`]), so `4`, `4.0` and
/// `4e0` mean the same wait here and there: a follower that read only integers gave a
/// `4.0` wait the commit timeout alone and answered 503 after 2 s.
fn blocking_timeout(path: &str, body: &[u8], dialect: Dialect) -> u64 {
    #[derive(serde::Deserialize)]
    struct Wait {
        #[serde(default)]
        timeout_seconds: u64,
    }
    let blocks = path
        .strip_prefix("/v1beta/")
        .and_then(raftlock_api::methods::method)
        .is_some_and(|m| m.blocks);
    if !blocks {
        return 0;
    }
    body::json::<Wait>(body, dialect)
        .map_or(0, |w| w.timeout_seconds)
        .min(raftlock_core::validate::MAX_ACQUIRE_TIMEOUT)
}

/// Resolves once this node knows the group's leader at an address other than `addr` (never,
/// for a group it does not host).
async fn leader_moved_from(target: &Route, addr: &str) {
    let Route::Hosted(group) = target else {
        return std::future::pending().await;
    };
    let mut metrics = group.raft.metrics();
    loop {
        if group.leader().is_some_and(|(_, a)| a != addr) {
            return;
        }
        if metrics.changed().await.is_err() {
            // Raft stopped: never resolve; the send itself will fail or time out.
            std::future::pending::<()>().await;
        }
    }
}

/// A forward attempt that got no answer from the leader.
struct Failed {
    /// Whether the request may have reached the leader (false: the connection was refused).
    sent: bool,
    error: ApiError,
}

/// Sends `call` to the leader at `addr`; `resent`: an earlier attempt may have been proposed
/// (see [`super::resend`]).
async fn send(
    node: &SharedNode,
    call: &Call,
    addr: &str,
    resent: bool,
) -> Result<Response, Failed> {
    let d = call.dialect;
    let url = node.peer_url(addr, &call.path);
    // At least a few milliseconds, so an attempt at the deadline fails as a timeout.
    let timeout = call
        .deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(10));
    let mut req = node
        .peer_request(call.method.clone(), &url)
        .timeout(timeout)
        .body(call.body.clone());
    for (name, value) in call.headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        if !is_internal(name.as_str()) {
            req = req.header(name, value);
        }
    }
    if let Some(id) = &call.wait.waiter_id {
        req = req.header(WAITER_ID_HEADER, id.as_str());
    }
    if let Some(left) = call.wait.left_header() {
        req = req.header(WAIT_LEFT_HEADER, left);
    }
    if let Some(id) = call.request_id.client {
        req = req.header(
            FORWARDED_REQUEST_ID_HEADER,
            uuid::Uuid::from_u128(id).to_string(),
        );
    }
    if let Some(id) = call.request_id.minted {
        req = req.header(
            NODE_REQUEST_ID_HEADER,
            uuid::Uuid::from_u128(id).to_string(),
        );
    }
    if call.request_id.covers_any() {
        for (name, value) in call.first_sent.headers(resent) {
            req = req.header(name, value);
        }
    }
    req = req.header(HOPS_HEADER, call.hops.to_string());
    let started = Instant::now();
    let resp = req.send().await.map_err(|e| {
        tracing::debug!(error = %e, "forward to the leader failed");
        metrics::counter!("raftlock_forward_failures_total").increment(1);
        Failed {
            // A refused connection carried nothing; anything later may have.
            sent: !e.is_connect(),
            error: ApiError::unavailable(d, forward_failure(&e)),
        }
    })?;
    let status = resp.status();
    let mut headers = resp.headers().clone();
    if headers.remove(NOT_PROPOSED_HEADER).is_some() {
        return Err(Failed {
            sent: false,
            error: ApiError::unavailable(d, "the leader changed"),
        });
    }
    let body = resp.bytes().await.map_err(|e| {
        tracing::debug!(error = %e, "leader reply lost");
        Failed {
            sent: true,
            error: ApiError::unavailable(
                d,
                if e.is_timeout() {
                    "the deadline passed before the leader answered"
                } else {
                    "leader reply lost"
                },
            ),
        }
    })?;
    // A gateway error that is not one of ours came from something on the link (a proxy or
    // sidecar between the nodes), not from the leader: answer in the API's error format.
    if matches!(status.as_u16(), 502..=504)
        && serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("code").cloned())
            .is_none()
    {
        return Err(Failed {
            sent: true,
            error: ApiError::unavailable(d, format!("leader link answered {status}")),
        });
    }
    let mut reply = Response::new(Body::from(body));
    *reply.status_mut() = status;
    for (name, value) in headers.iter().filter(|(n, _)| !is_hop_by_hop(n)) {
        reply.headers_mut().append(name.clone(), value.clone());
    }
    metrics::counter!("raftlock_forwarded_total").increment(1);
    metrics::histogram!("raftlock_forward_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    Ok(reply)
}

/// What a client is told when a forward got no answer: what happened, not a guess.
fn forward_failure(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "the deadline passed before the leader answered"
    } else if e.is_connect() {
        "leader unreachable"
    } else {
        "the connection to the leader broke before it answered"
    }
}

/// Node-to-node headers a client may not smuggle through a forward.
fn is_internal(name: &str) -> bool {
    name == HOPS_HEADER
        || name == WAITER_ID_HEADER
        || name == WAIT_LEFT_HEADER
        // The cluster-time deadline older nodes send and read instead: kept out of a
        // mixed-version cluster's forwards too.
        || name == "x-raftlock-deadline"
        || name == NOT_PROPOSED_HEADER
        || name == FORWARDED_REQUEST_ID_HEADER
        || name == NODE_REQUEST_ID_HEADER
        || name == FIRST_AFTER_HEADER
        || name == FIRST_WITHIN_HEADER
        || name == RESENT_HEADER
        || name == raftlock_raft::CLUSTER_SECRET_HEADER
        || name == raftlock_raft::SOURCE_HEADER
        || name == raftlock_raft::CLUSTER_ID_HEADER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_written_as_a_whole_float_is_the_same_wait() {
        let d = Dialect::Rpc;
        for body in [
            &br#"{"timeout_seconds":4}"#[..],
            br#"{"timeout_seconds":4.0}"#,
            br#"{"timeout_seconds":4e0}"#,
            br#"{"namespace_name":"n","timeout_seconds":4.0,"exclusive":true}"#,
        ] {
            for method in [
                "AcquireLock",
                "AcquireSemaphore",
                "WaitForWaitGroup",
                "WaitAtBarrier",
            ] {
                let path = format!("/v1beta/{method}");
                assert_eq!(
                    blocking_timeout(&path, body, d),
                    4,
                    "{path} {}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        assert_eq!(blocking_timeout("/v1beta/AcquireLock", b"{}", d), 0);
        assert_eq!(
            blocking_timeout("/v1beta/AcquireLock", br#"{"timeout_seconds":4.5}"#, d),
            0
        );
        assert_eq!(
            blocking_timeout("/v1beta/GetLock", br#"{"timeout_seconds":4}"#, d),
            0
        );
    }

    #[test]
    fn only_calls_whose_repeat_answers_the_same_are_repeatable() {
        let yes = [
            (Method::GET, "/locks/k"),
            (Method::POST, "/locks/k/lease"),
            (Method::PATCH, "/locks/k/lease"),
            (Method::POST, "/v1beta/RefreshLockLease"),
            (Method::POST, "/v1beta/AcquireLock"),
            (Method::POST, "/v1beta/GetLock"),
        ];
        let no = [
            (Method::DELETE, "/locks/k/lease"),
            (Method::DELETE, "/locks/k"),
            (Method::POST, "/v1beta/ReleaseLock"),
            (Method::POST, "/v1beta/RevokeLockLease"),
            (Method::POST, "/v1beta/DeleteLock"),
            (Method::POST, "/v1beta/CreateLockLease"),
            (Method::POST, "/v1beta/CreateNamespace"),
            (Method::POST, "/admin/v1/projects"),
        ];
        for (m, p) in yes {
            assert!(repeatable(&m, p), "{m} {p}");
        }
        for (m, p) in no {
            assert!(!repeatable(&m, p), "{m} {p}");
        }
    }
}
