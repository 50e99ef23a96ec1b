//! Peer RPCs over HTTP: [`Network`] sends them, [`internal_router`] receives them.
//!
//! Each RPC is one `POST http(s)://{addr}/internal/raft/{append,vote,snapshot}` whose body is the
//! codec-encoded request and whose `200` answer is the codec-encoded
//! `Result<Response, RaftError>` returned by the remote `Raft`. Requests carry the cluster
//! secret in [`CLUSTER_SECRET_HEADER`]; without it anyone reaching the port could rewrite the
//! log. Snapshots travel in chunks (openraft's default transport), one chunk per request.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use openraft::error::{InstallSnapshotError, NetworkError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use raftlock_core::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::identity::{ClusterIdentity, CLUSTER_ID_HEADER};
use crate::typ::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    Node, NodeId, Raft, RaftError, TypeConfig, VoteRequest, VoteResponse,
};

/// Header carrying the shared cluster secret on every peer RPC.
pub const CLUSTER_SECRET_HEADER: &str = "x-raftlock-cluster-secret";

/// Header naming the sending node's id on every node-to-node request (Raft RPCs and
/// forwarded client requests). Informational only — never trusted for authorization; the
/// chaos suite's per-link fault proxy uses it to tell which link a request travels on.
pub const SOURCE_HEADER: &str = "x-raftlock-from";

/// Path of the `append_entries` RPC.
pub const APPEND_PATH: &str = "/internal/raft/append";
/// Path of the `vote` RPC.
pub const VOTE_PATH: &str = "/internal/raft/vote";
/// Path of the snapshot-chunk RPC.
pub const SNAPSHOT_PATH: &str = "/internal/raft/snapshot";

/// Largest accepted RPC body. Well above one snapshot chunk (3 MiB by default) and a full
/// `append_entries` batch, so the server's client body limit never stalls replication.
pub const MAX_RPC_BODY: usize = 256 * 1024 * 1024;

const OCTET_STREAM: &str = "application/octet-stream";

/// openraft's [`RaftNetworkFactory`]: one [`NetworkConnection`] per peer, all sharing one
/// HTTP client (and so one connection pool).
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
    secret: Arc<str>,
    /// This node's id, sent in [`SOURCE_HEADER`] when set (see [`Network::with_source`]).
    source: Option<NodeId>,
    /// The cluster id sent in [`CLUSTER_ID_HEADER`], once known (see
    /// [`Network::with_identity`]).
    identity: Option<ClusterIdentity>,
    /// `http`, or `https` when the client speaks (mutual) TLS to peers.
    scheme: &'static str,
}

impl Network {
    /// A network presenting `secret` to peers. Plain HTTP with kept-alive connections and
    /// `TCP_NODELAY`, since heartbeats are small and latency-bound.
    pub fn new(secret: impl Into<String>) -> Self {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tcp_nodelay(true)
            // Below the peers' header-read timeout (10 s), which also closes idle connections.
            .pool_idle_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(1))
            .build()
            .expect("building the reqwest client (rustls) cannot fail");
        Self::with_client(client, secret)
    }

    /// A network using an existing client (e.g. one shared with request forwarding).
    pub fn with_client(client: reqwest::Client, secret: impl Into<String>) -> Self {
        Network {
            client,
            secret: Arc::from(secret.into()),
            source: None,
            identity: None,
            scheme: "http",
        }
    }

    /// Calls peers over `scheme` (`https` for a client configured for mutual TLS).
    pub fn with_scheme(mut self, scheme: &'static str) -> Self {
        self.scheme = scheme;
        self
    }

    /// Sends this node's cluster id on every RPC.
    pub fn with_identity(mut self, identity: ClusterIdentity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Names this node (`id`) in [`SOURCE_HEADER`] on every RPC it sends.
    pub fn with_source(mut self, id: NodeId) -> Self {
        self.source = Some(id);
        self
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = NetworkConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        NetworkConnection {
            client: self.client.clone(),
            secret: self.secret.clone(),
            source: self.source,
            identity: self.identity.clone(),
            scheme: self.scheme,
            target,
            node: node.clone(),
        }
    }
}

/// The RPC client for one peer.
pub struct NetworkConnection {
    client: reqwest::Client,
    secret: Arc<str>,
    source: Option<NodeId>,
    identity: Option<ClusterIdentity>,
    scheme: &'static str,
    target: NodeId,
    node: Node,
}

/// Outcome of one RPC, before it is shaped into openraft's error type.
enum CallError<E> {
    /// The peer could not be reached (connection refused, DNS, ...): openraft backs off.
    Unreachable(Unreachable),
    /// Anything else on the way (timeout, bad status, undecodable body): retried normally.
    Network(NetworkError),
    /// The peer's Raft answered with an error.
    Remote(RaftError<E>),
}

/// A transport error described by a message (HTTP status, codec failure).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

/// A short label for a Raft RPC path (metrics).
fn rpc_name(path: &str) -> &'static str {
    if path.ends_with("append") {
        "append"
    } else if path.ends_with("vote") {
        "vote"
    } else {
        "snapshot"
    }
}

impl NetworkConnection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let body = codec::encode(req).map_err(|e| CallError::Network(NetworkError::new(&e)))?;
        let url = format!("{}://{}{}", self.scheme, self.node.addr, path);
        let mut request = self
            .client
            .post(&url)
            .header(header::CONTENT_TYPE, OCTET_STREAM)
            .header(CLUSTER_SECRET_HEADER, &*self.secret);
        if let Some(source) = self.source {
            request = request.header(SOURCE_HEADER, source.to_string());
        }
        if let Some(id) = self.identity.as_ref().and_then(ClusterIdentity::get) {
            request = request.header(CLUSTER_ID_HEADER, id.to_string());
        }
        let res = request
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                metrics::counter!("raftlock_peer_rpc_errors_total", "rpc" => rpc_name(path))
                    .increment(1);
                transport_error(e)
            })?;
        let status = res.status();
        let bytes = res.bytes().await.map_err(transport_error)?;
        if status != reqwest::StatusCode::OK {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
            let msg = format!("{url}: HTTP {status}: {text}");
            return Err(CallError::Network(NetworkError::new(&TransportError(msg))));
        }
        let answer: Result<Resp, RaftError<E>> =
            codec::decode(&bytes).map_err(|e| CallError::Network(NetworkError::new(&e)))?;
        answer.map_err(CallError::Remote)
    }

    fn rpc_error<E: Error>(
        &self,
        e: CallError<E>,
    ) -> openraft::error::RPCError<NodeId, Node, RaftError<E>> {
        match e {
            CallError::Unreachable(u) => u.into(),
            CallError::Network(n) => n.into(),
            CallError::Remote(r) => {
                RemoteError::new_with_node(self.target, self.node.clone(), r).into()
            }
        }
    }
}

fn transport_error<E>(e: reqwest::Error) -> CallError<E> {
    if e.is_connect() {
        CallError::Unreachable(Unreachable::new(&e))
    } else {
        CallError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for NetworkConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, crate::typ::RPCError> {
        self.call(APPEND_PATH, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse, crate::typ::RPCError<InstallSnapshotError>> {
        self.call(SNAPSHOT_PATH, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, crate::typ::RPCError> {
        self.call(VOTE_PATH, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }
}

/// When this node last heard from a leader it accepts (an `append_entries` or snapshot chunk
/// that was not refused for a stale vote). openraft 0.9 keeps this to itself; the server's
/// pre-vote (`raftlock_server::election`) needs it to tell "no leader" from "a leader I
/// cannot see".
#[derive(Clone, Default)]
pub struct LeaderContact(Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl LeaderContact {
    /// Records contact now.
    pub fn touch(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }

    /// Time since the last contact; `None` if there was none since the process started.
    pub fn since(&self) -> Option<Duration> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|t| t.elapsed())
    }
}

/// State of the internal routes.
struct Internal {
    raft: Raft,
    secret: String,
    /// Touched by every accepted append or snapshot chunk.
    contact: LeaderContact,
    /// When set, requests must carry this cluster's id (see [`crate::identity`]); 409 if not.
    identity: Option<ClusterIdentity>,
}

/// The receiving side of peer RPCs: `POST /internal/raft/{append,vote,snapshot}`, each
/// checking [`CLUSTER_SECRET_HEADER`] (401 if missing or wrong), decoding the body (400 if it
/// does not decode) and answering `200` with the codec-encoded `Result<Resp, RaftError>`.
///
/// The routes carry their own [`DefaultBodyLimit`] of [`MAX_RPC_BODY`]; merge this router so
/// that no smaller body-limit layer of the public API wraps it.
pub fn internal_router(
    raft: Raft,
    secret: String,
    identity: Option<ClusterIdentity>,
    contact: LeaderContact,
) -> Router {
    let state = Arc::new(Internal {
        raft,
        secret,
        identity,
        contact,
    });
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .layer(DefaultBodyLimit::max(MAX_RPC_BODY))
        // Outermost: refuse a request without the secret before its body is read, so an
        // unauthenticated caller cannot make the node buffer up to MAX_RPC_BODY.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_secret,
        ))
        .with_state(state)
}

async fn require_secret(
    State(state): State<Arc<Internal>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !authorized(&state, req.headers()) {
        return (StatusCode::UNAUTHORIZED, "missing or wrong cluster secret").into_response();
    }
    next.run(req).await
}

/// Compares without an early exit, so response time does not reveal how much of a guessed
/// secret was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn authorized(state: &Internal, headers: &HeaderMap) -> bool {
    headers
        .get(CLUSTER_SECRET_HEADER)
        .is_some_and(|v| constant_time_eq(v.as_bytes(), state.secret.as_bytes()))
}

/// Runs one RPC handler: authenticate, decode, call, encode.
async fn handle<Req, Resp, E, F, Fut>(
    state: &Internal,
    headers: &HeaderMap,
    body: &[u8],
    call: F,
) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: Error + Serialize,
    F: FnOnce(Raft, Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, RaftError<E>>>,
{
    if !authorized(state, headers) {
        return (StatusCode::UNAUTHORIZED, "missing or wrong cluster secret").into_response();
    }
    if let Some(identity) = &state.identity {
        let presented = headers.get(CLUSTER_ID_HEADER).map(|v| v.as_bytes());
        if let Err(refusal) = identity.check_peer(presented) {
            return (StatusCode::CONFLICT, refusal.to_string()).into_response();
        }
    }
    let req: Req = match codec::decode(body) {
        Ok(req) => req,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("undecodable raft rpc: {e}"),
            )
                .into_response()
        }
    };
    let answer = call(state.raft.clone(), req).await;
    match codec::encode(&answer) {
        Ok(bytes) => ([(header::CONTENT_TYPE, OCTET_STREAM)], bytes).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding raft rpc answer");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding raft rpc answer",
            )
                .into_response()
        }
    }
}

async fn append(State(state): State<Arc<Internal>>, headers: HeaderMap, body: Bytes) -> Response {
    let contact = state.contact.clone();
    handle(
        &state,
        &headers,
        &body,
        |raft, req: AppendEntriesRequest| async move {
            let answer = raft.append_entries(req).await;
            if matches!(&answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                contact.touch();
            }
            answer
        },
    )
    .await
}

async fn vote(State(state): State<Arc<Internal>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(
        &state,
        &headers,
        &body,
        |raft, req: VoteRequest| async move { raft.vote(req).await },
    )
    .await
}

async fn snapshot(State(state): State<Arc<Internal>>, headers: HeaderMap, body: Bytes) -> Response {
    let contact = state.contact.clone();
    handle(
        &state,
        &headers,
        &body,
        |raft, req: InstallSnapshotRequest| async move {
            let answer = raft.install_snapshot(req).await;
            if answer.is_ok() {
                contact.touch();
            }
            answer
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_bytes() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
