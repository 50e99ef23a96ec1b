//! The HTTP surface of a node: one listener serves clients, operators and peers (or two,
//! with `--peer-listen`).
//!
//! Client routes (project locks, hierarchical locks, admin writes) pass through
//! [`forward::to_leader`]; health, metrics, this node's cluster view, backups, the web console
//! (`/ui/`) and the Raft RPCs are answered locally.
//!
//! ## Layout
//! - [`locks`]: the project-lock routes; [`rpc`]: the hierarchical-lock methods (and the
//!   dispatch of every `/v1beta` method); [`semaphores`]: the semaphore methods;
//!   [`coordination`]: the wait-group and barrier methods;
//!   `writes`: what each plain write proposes and answers with;
//!   [`admin`]: projects, keys, membership, cluster views, backups; [`console`]: `/ui/`.
//! - [`auth`]: credentials (platform token, project keys, peers) and rate counting.
//! - [`forward`]: sending a request to the leader within its one deadline.
//! - [`wait`]: what a blocking acquire keeps across forwards, and its guards.
//! - [`idempotency`]: request ids on writes (the client's, and the one a node mints).
//! - [`resend`]: what a resend knows of its call's first attempt (the bound the state machine
//!   needs to refuse a resend whose id it forgot).
//! - [`openapi`]: the OpenAPI document (`GET /openapi.json`), built from `raftlock-api`.
//! - [`errors`]: the two error dialects; [`decide`]: the one propose-and-map helper;
//!   `answers`: which apply reply each `/v1beta` response is made from;
//!   [`body`]: bounded, deadline-bound reading and JSON decoding.

pub mod admin;
mod answers;
pub mod auth;
pub mod body;
pub mod console;
pub mod coordination;
pub mod decide;
pub mod errors;
pub mod forward;
pub mod idempotency;
pub mod locks;
pub mod openapi;
pub mod resend;
pub mod rpc;
pub mod semaphores;
pub mod wait;
mod writes;

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use crate::node::SharedNode;
use crate::telemetry;
use errors::{ApiError, Dialect};

pub use crate::headers::REQUEST_ID_HEADER;

/// Builds the whole router of a node.
pub fn router(node: SharedNode) -> Router {
    let leader_routes = Router::new()
        .merge(locks::routes())
        .merge(rpc::routes())
        .merge(admin::leader_routes())
        .route_layer(middleware::from_fn_with_state(
            node.clone(),
            forward::to_leader,
        ));
    let local_routes = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .merge(admin::local_routes())
        .merge(console::routes())
        .merge(openapi::routes())
        .route(
            crate::handoff::CAMPAIGN_PATH,
            axum::routing::post(crate::handoff::campaign),
        )
        .route(
            crate::election::PREVOTE_PATH,
            axum::routing::post(crate::election::answer_prevote),
        )
        .route(
            crate::election::ALIVE_PATH,
            axum::routing::post(crate::election::answer_alive),
        )
        .route(crate::shards::STATE_PATH, get(crate::shards::answer_state));
    let internal = raftlock_raft::internal_router(
        node.peer_groups.clone(),
        node.config.cluster_secret.clone(),
        Some(node.identity.clone()),
    );
    let request_id = HeaderName::from_static(REQUEST_ID_HEADER);
    Router::new()
        .merge(leader_routes)
        .merge(local_routes)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .route_layer(middleware::from_fn(record_metrics))
        .with_state(node.clone())
        .merge(internal)
        .layer(middleware::from_fn_with_state(node, guard))
        .layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn(idempotency::note))
                .layer(SetRequestIdLayer::new(request_id.clone(), RandomRequestId))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(telemetry::request_span)
                        .on_response(telemetry::on_response)
                        .on_failure(telemetry::on_server_error),
                )
                .layer(PropagateRequestIdLayer::new(request_id)),
        )
}

/// The router of the client listener when peers have their own (`--peer-listen`): the
/// same routes, but node-to-node traffic is refused here, so it can only arrive on the peer
/// listener (and the peer routes need not be reachable from the client network).
pub fn client_router(node: SharedNode) -> Router {
    router(node).layer(middleware::from_fn(refuse_peer_traffic))
}

/// What every request passes first, from its head alone, before any handler or extractor
/// reads its body:
/// - a node-to-node route (`/internal/…`) needs the cluster secret: without it, `401` (as the
///   routes answer it) and the connection closed, the body unread — a client without
///   credentials cannot get the node to wait for a body it trickles;
/// - a request with the cluster secret frees its connection's slot: peers are counted apart
///   from clients (see [`crate::listener`]);
/// - on a connection accepted past `--max-connections` (`listener::PEER_RESERVE`), only
///   node-to-node requests are served: others get `503` and the connection closed;
/// - the body must then arrive within [`body::BODY_READ_TIMEOUT`] of the head, whoever
///   reads it ([`body::with_deadline`]).
///
/// Lock and admin routes check their credentials from the headers before reading the body
/// too (`forward::to_leader`, [`auth::admits_before_body`]).
async fn guard(State(node): State<SharedNode>, req: Request, next: Next) -> Response {
    let peer = auth::has_cluster_secret(&node, req.headers());
    let path = req.uri().path();
    if !peer && path.starts_with("/internal/") {
        return closing(auth::PeerRefusal::Secret.into_response());
    }
    if let Some(slot) = req.extensions().get::<crate::listener::ConnectionSlot>() {
        if peer {
            slot.release_for_peer();
        } else if slot.reserved() && slot.counted() {
            metrics::counter!("raftlock_connections_refused_total", "reason" => "max_connections")
                .increment(1);
            let d = Dialect::of_path(path);
            let message = "the node is at --max-connections; retry";
            return ApiError::new(d, StatusCode::SERVICE_UNAVAILABLE, message)
                .closing()
                .into_response();
        }
    }
    next.run(body::with_deadline(req)).await
}

/// Gives a request without an `X-Request-Id` a random UUID (version 4) from the thread's
/// CSPRNG. tower-http's `MakeRequestUuid` asks the kernel (`getrandom`) for every request:
/// ~700 system calls a second on a busy node, one per request.
#[derive(Clone, Copy)]
struct RandomRequestId;

impl MakeRequestId for RandomRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        let value = axum::http::HeaderValue::from_str(&id.to_string()).ok()?;
        Some(RequestId::new(value))
    }
}

/// `resp` with `Connection: close`: the request's body was not read.
fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    resp
}

async fn refuse_peer_traffic(req: Request, next: Next) -> Response {
    let peer = req.uri().path().starts_with("/internal/")
        || req.headers().contains_key(crate::headers::HOPS_HEADER);
    if peer {
        let d = Dialect::of_path(req.uri().path());
        let message = "node-to-node traffic is served on the peer listener (--peer-listen)";
        return ApiError::new(d, StatusCode::NOT_FOUND, message).into_response();
    }
    next.run(req).await
}

async fn method_not_allowed(req: Request) -> ApiError {
    let d = Dialect::of_path(req.uri().path());
    let message = format!(
        "method {} is not allowed on {}",
        req.method(),
        req.uri().path()
    );
    ApiError::new(d, StatusCode::METHOD_NOT_ALLOWED, message)
}

async fn not_found(req: Request) -> ApiError {
    let d = Dialect::of_path(req.uri().path());
    if req.uri().path().starts_with("/locks/") {
        // A project-lock path that matches no route has a key with '/' (or none): invalid input.
        let message = "key must be 1-128 characters of letters, digits, '.', '_', ':' or '-'";
        return ApiError::bad_request(d, message);
    }
    ApiError::new(
        d,
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
}

/// 200 while this node is a member of a cluster that has a leader.
async fn readyz(State(node): State<SharedNode>) -> Response {
    let m = node.meta.raft.metrics().borrow().clone();
    let member = m
        .membership_config
        .membership()
        .get_node(&node.config.node_id)
        .is_some();
    match (member, m.current_leader) {
        (true, Some(leader)) => (StatusCode::OK, format!("ready, leader {leader}")).into_response(),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "not ready: no leader").into_response(),
    }
}

async fn metrics_text(State(node): State<SharedNode>) -> Response {
    telemetry::refresh_gauges(&node);
    telemetry::render_metrics().into_response()
}

/// Counts requests by route and status and records their latency.
async fn record_metrics(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let method = telemetry::method_label(req.method());
    let start = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("raftlock_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!("raftlock_http_request_duration_seconds", "route" => route)
        .record(start.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_up_request_id_is_a_fresh_version_4_uuid() {
        let req = axum::http::Request::new(());
        let id = |maker: &mut RandomRequestId| {
            let made = maker.make_request_id(&req).expect("an id");
            uuid::Uuid::parse_str(made.header_value().to_str().unwrap()).unwrap()
        };
        let (a, b) = (id(&mut RandomRequestId), id(&mut RandomRequestId));
        assert_eq!(a.get_version(), Some(uuid::Version::Random));
        assert_eq!(a.get_variant(), uuid::Variant::RFC4122);
        assert_ne!(a, b);
    }
}
