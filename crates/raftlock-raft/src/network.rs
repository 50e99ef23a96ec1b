//! Peer RPCs: [`Network`] sends them, [`internal_router`] receives them.
//!
//! Each node keeps a small pool of [`peer_stream`](crate::peer_stream)s per peer, shared by all
//! its openraft connections (each follower's replication, every election and read-index
//! confirmation): an HTTP request to `GET /internal/raft/stream` upgraded to length-framed,
//! codec-encoded RPCs. The upgrade
//! carries the cluster secret in [`CLUSTER_SECRET_HEADER`] (without it anyone reaching the
//! port could rewrite the log) and the cluster id; snapshots travel in chunks (openraft's
//! default transport), one chunk per frame.

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::FutureExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use openraft::error::{InstallSnapshotError, NetworkError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use raftlock_core::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::identity::{ClusterIdentity, CLUSTER_ID_HEADER};
use crate::peer_stream::{
    read_frame, write_frame, Kind, Status, STREAM_IDLE_TIMEOUT, STREAM_MAX_AGE, STREAM_PATH,
    STREAM_PROTOCOL, STREAM_REUSE_LIMIT,
};
use crate::typ::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    Node, NodeId, Raft, RaftError, TypeConfig, Vote, VoteRequest, VoteResponse,
};

/// Header carrying the shared cluster secret when a peer stream is opened.
pub const CLUSTER_SECRET_HEADER: &str = "x-raftlock-cluster-secret";

/// Header naming the sending node's id on every node-to-node request (peer stream upgrades
/// and forwarded client requests). Informational only — never trusted for authorization; the
/// chaos suite's per-link fault proxy uses it to tell which link a stream travels on.
pub const SOURCE_HEADER: &str = "x-raftlock-from";

/// Largest accepted frame. Well above one snapshot chunk (3 MiB by default) and a full
/// `append_entries` batch, so the limit never stalls replication.
pub const MAX_RPC_BODY: usize = 256 * 1024 * 1024;

/// Most idle streams kept per peer. One carries replication; the rest serve what runs beside
/// it (the read-index confirmations of linearizable reads, elections).
const IDLE_STREAMS_PER_PEER: usize = 8;

/// Most streams to one peer, in use and idle. openraft leaves a read-index confirmation to a
/// slow follower running after the quorum answered, so a stalled peer would otherwise get a
/// new stream (a socket here, a task there) for every confirmation; past this cap such calls
/// fail at once and the quorum is reached without them.
const STREAMS_PER_PEER: usize = 16;

/// Bound on opening a stream (connect, TLS, upgrade). It runs apart from the RPC that asked
/// for it, so a slow open is not lost when that RPC's (heartbeat-sized) deadline passes.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// openraft's [`RaftNetworkFactory`]. openraft makes a [`NetworkConnection`] for each
/// follower's replication and a fresh one for every election and every read-index
/// confirmation, so streams are not owned by connections: every connection of this node takes
/// an idle stream to its peer for one call and gives it back after a whole answer.
#[derive(Clone)]
pub struct Network {
    dialer: Arc<Dialer>,
}

/// What opening and pooling streams needs: shared by every connection of one [`Network`].
#[derive(Clone)]
struct Dialer {
    client: reqwest::Client,
    secret: Arc<str>,
    /// This node's id, sent in [`SOURCE_HEADER`] when set (see [`Network::with_source`]).
    source: Option<NodeId>,
    /// The cluster id sent in [`CLUSTER_ID_HEADER`], once known (see
    /// [`Network::with_identity`]).
    identity: Option<ClusterIdentity>,
    /// `http`, or `https` when the client speaks (mutual) TLS to peers.
    scheme: &'static str,
    /// Streams not in use, by peer.
    idle: Arc<Mutex<HashMap<NodeId, Vec<PeerStream>>>>,
    /// Per peer, one permit per open stream (see [`STREAMS_PER_PEER`]).
    slots: Arc<Mutex<HashMap<NodeId, Arc<Semaphore>>>>,
}

impl Network {
    /// A network presenting `secret` to peers over plain HTTP, `TCP_NODELAY` (heartbeats are
    /// small and latency-bound).
    pub fn new(secret: impl Into<String>) -> Self {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(1))
            .build()
            .expect("building the reqwest client (rustls) cannot fail");
        Self::with_client(client, secret)
    }

    /// A network opening its streams through an existing client (e.g. one shared with request
    /// forwarding, configured for TLS).
    pub fn with_client(client: reqwest::Client, secret: impl Into<String>) -> Self {
        Network {
            dialer: Arc::new(Dialer {
                client,
                secret: Arc::from(secret.into()),
                source: None,
                identity: None,
                scheme: "http",
                idle: Arc::default(),
                slots: Arc::default(),
            }),
        }
    }

    fn dialer_mut(&mut self) -> &mut Dialer {
        Arc::make_mut(&mut self.dialer)
    }

    /// Calls peers over `scheme` (`https` for a client configured for mutual TLS).
    pub fn with_scheme(mut self, scheme: &'static str) -> Self {
        self.dialer_mut().scheme = scheme;
        self
    }

    /// Presents this node's cluster id whenever it opens a stream.
    pub fn with_identity(mut self, identity: ClusterIdentity) -> Self {
        self.dialer_mut().identity = Some(identity);
        self
    }

    /// Names this node (`id`) in [`SOURCE_HEADER`] whenever it opens a stream.
    pub fn with_source(mut self, id: NodeId) -> Self {
        self.dialer_mut().source = Some(id);
        self
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = NetworkConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        NetworkConnection {
            dialer: self.dialer.clone(),
            target,
            node: node.clone(),
        }
    }
}

/// The RPC client for one peer, on the node's [`peer_stream`](crate::peer_stream)s to it.
pub struct NetworkConnection {
    dialer: Arc<Dialer>,
    target: NodeId,
    node: Node,
}

/// An open stream to a peer.
struct PeerStream {
    io: BufStream<reqwest::Upgraded>,
    /// The address it was opened to: a node id re-added at another address must not be
    /// served by streams to the old one.
    addr: String,
    /// Its place under [`STREAMS_PER_PEER`], given back when the stream is dropped.
    _slot: OwnedSemaphorePermit,
    /// The cluster id presented when the stream was opened: the peer checks it on every
    /// frame, so a stream opened before this node learnt its id is replaced once it knows it.
    cluster_id: Option<Uuid>,
    /// When it was opened (see [`STREAM_MAX_AGE`]).
    opened: Instant,
    /// When the last answer arrived (see [`STREAM_REUSE_LIMIT`]).
    last_used: Instant,
}

impl PeerStream {
    /// Whether the next call to `addr` may use this stream.
    fn reusable(&mut self, addr: &str, cluster_id: Option<Uuid>) -> bool {
        self.fresh(addr, cluster_id) && self.still_open()
    }

    /// [`Self::reusable`] short of asking the socket: for pruning the pool cheaply.
    fn fresh(&self, addr: &str, cluster_id: Option<Uuid>) -> bool {
        self.cluster_id == cluster_id
            && self.addr == addr
            && self.last_used.elapsed() < STREAM_REUSE_LIMIT
            && self.opened.elapsed() < STREAM_MAX_AGE
    }

    /// Whether the peer has not closed or broken the stream. Between calls nothing is due on
    /// it, so a read must find nothing yet; end of file (a peer that restarted), an error or
    /// stray bytes all mean the stream is done. Checked before each use so that a peer's
    /// restart does not cost the next RPC (an election's vote, say).
    fn still_open(&mut self) -> bool {
        self.io.fill_buf().now_or_never().is_none()
    }
}

/// Why a stream could not be opened.
enum OpenError {
    /// Connection refused, DNS, ...: openraft backs off.
    Unreachable(Unreachable),
    /// Anything else (refused upgrade, timeout).
    Network(NetworkError),
}

impl<E> From<OpenError> for CallError<E> {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Unreachable(u) => CallError::Unreachable(u),
            OpenError::Network(n) => CallError::Network(n),
        }
    }
}

fn open_error(e: reqwest::Error) -> OpenError {
    if e.is_connect() {
        OpenError::Unreachable(Unreachable::new(&e))
    } else {
        OpenError::Network(NetworkError::new(&e))
    }
}

impl Dialer {
    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Vec<PeerStream>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle stream to `target` at `addr` fit for the next call, if any (unfit ones are
    /// dropped).
    fn take_idle(
        &self,
        target: NodeId,
        addr: &str,
        cluster_id: Option<Uuid>,
    ) -> Option<PeerStream> {
        let mut idle = self.idle();
        let streams = idle.get_mut(&target)?;
        while let Some(mut stream) = streams.pop() {
            if stream.reusable(addr, cluster_id) {
                return Some(stream);
            }
        }
        None
    }

    /// Keeps `stream` for the next call to `target` (or closes it if enough are kept), first
    /// closing kept ones that are no longer fit (idle too long, too old, another address or
    /// cluster id; one the peer closed is found when taken).
    fn put_idle(&self, target: NodeId, stream: PeerStream) {
        let mut idle = self.idle();
        let streams = idle.entry(target).or_default();
        let (addr, cluster_id) = (stream.addr.clone(), stream.cluster_id);
        streams.retain(|kept| kept.fresh(&addr, cluster_id));
        if streams.len() < IDLE_STREAMS_PER_PEER {
            streams.push(stream);
        }
    }

    /// A place for one more stream to `target`, if it has fewer than [`STREAMS_PER_PEER`].
    fn slot(&self, target: NodeId) -> Option<OwnedSemaphorePermit> {
        let semaphore = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(target)
            .or_insert_with(|| Arc::new(Semaphore::new(STREAMS_PER_PEER)))
            .clone();
        semaphore.try_acquire_owned().ok()
    }

    /// Opens a stream to `target` on a task of its own: if the call waiting for it gives up
    /// first, the stream is kept for the next call instead of being thrown away half-made.
    async fn open_detached(
        self: &Arc<Self>,
        target: NodeId,
        addr: &str,
        cluster_id: Option<Uuid>,
    ) -> Result<PeerStream, OpenError> {
        let Some(slot) = self.slot(target) else {
            let msg = format!("{STREAMS_PER_PEER} streams to node {target} are in use");
            return Err(OpenError::Network(NetworkError::new(&TransportError(msg))));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (dialer, addr) = (self.clone(), addr.to_string());
        tokio::spawn(async move {
            let opened = tokio::time::timeout(OPEN_TIMEOUT, dialer.open(&addr, cluster_id, slot))
                .await
                .unwrap_or_else(|_| {
                    let msg = format!("opening a stream to {addr}: no answer in {OPEN_TIMEOUT:?}");
                    Err(OpenError::Network(NetworkError::new(&TransportError(msg))))
                });
            if let Err(Ok(stream)) = tx.send(opened) {
                dialer.put_idle(target, stream);
            }
        });
        rx.await.unwrap_or_else(|_| {
            let msg = "the stream opener stopped".to_string();
            Err(OpenError::Network(NetworkError::new(&TransportError(msg))))
        })
    }

    /// Opens a stream: an HTTP request upgraded to [`STREAM_PROTOCOL`] (through the same client,
    /// so TLS and its certificates apply unchanged).
    async fn open(
        &self,
        addr: &str,
        cluster_id: Option<Uuid>,
        slot: OwnedSemaphorePermit,
    ) -> Result<PeerStream, OpenError> {
        let url = format!("{}://{}{}", self.scheme, addr, STREAM_PATH);
        let mut request = self
            .client
            .get(&url)
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, STREAM_PROTOCOL)
            .header(CLUSTER_SECRET_HEADER, &*self.secret);
        if let Some(source) = self.source {
            request = request.header(SOURCE_HEADER, source.to_string());
        }
        if let Some(id) = cluster_id {
            request = request.header(CLUSTER_ID_HEADER, id.to_string());
        }
        let res = request.send().await.map_err(open_error)?;
        let status = res.status();
        if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let bytes = res.bytes().await.unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
            let msg = format!("{url}: HTTP {status}: {text}");
            return Err(OpenError::Network(NetworkError::new(&TransportError(msg))));
        }
        let io = res.upgrade().await.map_err(open_error)?;
        metrics::counter!("raftlock_peer_streams_opened_total").increment(1);
        let now = Instant::now();
        Ok(PeerStream {
            io: BufStream::new(io),
            addr: addr.to_string(),
            _slot: slot,
            cluster_id,
            opened: now,
            last_used: now,
        })
    }
}

/// Outcome of one RPC, before it is shaped into openraft's error type.
enum CallError<E> {
    /// The peer could not be reached (connection refused, DNS, ...): openraft backs off.
    Unreachable(Unreachable),
    /// Anything else on the way (timeout, refusal, broken stream, undecodable answer).
    Network(NetworkError),
    /// The peer's Raft answered with an error.
    Remote(RaftError<E>),
}

/// A transport error described by a message (HTTP status, refusal, codec failure).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

fn network_error<E>(message: String) -> CallError<E> {
    CallError::Network(NetworkError::new(&TransportError(message)))
}

impl NetworkConnection {
    async fn call<Req, Resp, E>(
        &self,
        kind: Kind,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, CallError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let body = codec::encode(req).map_err(|e| CallError::Network(NetworkError::new(&e)))?;
        let exchanged = match tokio::time::timeout(timeout, self.exchange(kind, &body)).await {
            Ok(exchanged) => exchanged,
            Err(_) => Err(network_error(format!(
                "{} to node {}: no answer within {timeout:?}",
                kind.name(),
                self.target
            ))),
        };
        let bytes = exchanged.inspect_err(|_| {
            metrics::counter!("raftlock_peer_rpc_errors_total", "rpc" => kind.name()).increment(1);
        })?;
        let answer: Result<Resp, RaftError<E>> =
            codec::decode(&bytes).map_err(|e| CallError::Network(NetworkError::new(&e)))?;
        answer.map_err(CallError::Remote)
    }

    /// Sends one request frame and reads its answer on an idle stream to the peer (opening
    /// one if there is none). The stream goes back to the pool only after a whole answer, so
    /// a call that fails, times out or is cancelled half-way never leaves a stream in the
    /// middle of a frame for the next call.
    async fn exchange<E>(&self, kind: Kind, body: &[u8]) -> Result<Vec<u8>, CallError<E>> {
        let cluster_id = self.dialer.identity.as_ref().and_then(ClusterIdentity::get);
        let idle = self
            .dialer
            .take_idle(self.target, &self.node.addr, cluster_id);
        let mut stream = match idle {
            Some(stream) => stream,
            None => {
                self.dialer
                    .open_detached(self.target, &self.node.addr, cluster_id)
                    .await?
            }
        };
        let broken = |e: std::io::Error| {
            network_error(format!("{} to node {}: {e}", kind.name(), self.target))
        };
        write_frame(&mut stream.io, kind as u8, body)
            .await
            .map_err(broken)?;
        let (tag, answer) = read_frame(&mut stream.io, MAX_RPC_BODY)
            .await
            .map_err(broken)?;
        match Status::from_tag(tag) {
            Some(Status::Answer) => {
                stream.last_used = Instant::now();
                self.dialer.put_idle(self.target, stream);
                Ok(answer)
            }
            status => Err(network_error(format!(
                "{} to node {}: {status:?}: {}",
                kind.name(),
                self.target,
                String::from_utf8_lossy(&answer[..answer.len().min(300)])
            ))),
        }
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

impl RaftNetwork<TypeConfig> for NetworkConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, crate::typ::RPCError> {
        self.call(Kind::Append, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse, crate::typ::RPCError<InstallSnapshotError>> {
        self.call(Kind::Snapshot, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, crate::typ::RPCError> {
        self.call(Kind::Vote, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }
}

/// When this node last heard from a leader it accepts (an `append_entries` that arrived with
/// at least this node's vote or was not refused for a stale one, or an accepted snapshot
/// chunk). openraft 0.9 keeps this to itself; the server's
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

/// The receiving side of peer RPCs: `GET` [`STREAM_PATH`] upgraded to a peer stream. The
/// cluster secret is checked before anything else (401 if missing or wrong), the cluster id at
/// the upgrade (409) and again on every frame; frames are then answered one by one (see
/// [`crate::peer_stream`]).
///
/// Merge this router so that no smaller body-limit or timeout layer of the public API wraps
/// it: an upgraded stream outlives the request that opened it.
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
        .route(STREAM_PATH, get(open_stream))
        // Outermost: refuse a request without the secret before anything else.
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

impl Internal {
    /// Whether a peer presenting `presented` (its cluster id header) may be served now.
    fn check_identity(&self, presented: Option<&[u8]>) -> Result<(), String> {
        match &self.identity {
            Some(identity) => identity.check_peer(presented).map_err(|r| r.to_string()),
            None => Ok(()),
        }
    }
}

/// Answers an upgrade request (its secret already checked): `101` and a task serving the
/// stream, or why not.
async fn open_stream(
    State(state): State<Arc<Internal>>,
    mut req: axum::extract::Request,
) -> Response {
    let upgrade = req.headers().get(header::UPGRADE).map(|v| v.as_bytes());
    if upgrade.is_none_or(|u| !u.eq_ignore_ascii_case(STREAM_PROTOCOL.as_bytes())) {
        let msg = format!("peer RPCs need Upgrade: {STREAM_PROTOCOL}");
        return (StatusCode::BAD_REQUEST, msg).into_response();
    }
    let presented = req
        .headers()
        .get(CLUSTER_ID_HEADER)
        .map(|v| v.as_bytes().to_vec());
    if let Err(refusal) = state.check_identity(presented.as_deref()) {
        return (StatusCode::CONFLICT, refusal).into_response();
    }
    let Some(on_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        let msg = "this listener cannot upgrade connections";
        return (StatusCode::INTERNAL_SERVER_ERROR, msg).into_response();
    };
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = BufStream::new(TokioIo::new(upgraded));
                serve_stream(&state, io, presented.as_deref()).await;
            }
            Err(e) => tracing::debug!(error = %e, "peer stream upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, STREAM_PROTOCOL)
        .body(axum::body::Body::empty())
        .expect("a static response head is valid")
}

/// Answers frames until the peer closes the stream, goes idle for [`STREAM_IDLE_TIMEOUT`],
/// breaks it, or sends a frame that is refused.
async fn serve_stream<S>(state: &Internal, mut io: BufStream<S>, presented: Option<&[u8]>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    metrics::gauge!("raftlock_peer_streams").increment(1.0);
    loop {
        let read = tokio::time::timeout(STREAM_IDLE_TIMEOUT, read_frame(&mut io, MAX_RPC_BODY));
        let Ok(Ok((tag, body))) = read.await else {
            break;
        };
        let (status, answer) = answer_frame(state, presented, tag, &body).await;
        if write_frame(&mut io, status as u8, &answer).await.is_err() || status != Status::Answer {
            break;
        }
    }
    metrics::gauge!("raftlock_peer_streams").decrement(1.0);
}

/// Runs one request frame through the local Raft.
async fn answer_frame(
    state: &Internal,
    presented: Option<&[u8]>,
    tag: u8,
    body: &[u8],
) -> (Status, Vec<u8>) {
    if let Err(refusal) = state.check_identity(presented) {
        return (Status::Refused, refusal.into_bytes());
    }
    let raft = state.raft.clone();
    let contact = &state.contact;
    match Kind::from_tag(tag) {
        Some(Kind::Append) => {
            answer(body, |req: AppendEntriesRequest| async move {
                // Contact counts from the request's arrival, not only its answer: the answer
                // waits for this node's own log flush, and a disk that stalls for longer than
                // the lease made a follower that was hearing its leader every 100 ms take the
                // leader for silent (both followers at once on a shared disk, which then
                // granted each other's pre-vote and deposed a working leader). A request that
                // does not carry at least the vote this node holds is no leader's it follows.
                if carries_current_vote(&raft, &req.vote) {
                    contact.touch();
                }
                let answer = raft.append_entries(req).await;
                if matches!(&answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                    contact.touch();
                }
                answer
            })
            .await
        }
        Some(Kind::Vote) => {
            answer(body, |req: VoteRequest| async move { raft.vote(req).await }).await
        }
        Some(Kind::Snapshot) => {
            answer(body, |req: InstallSnapshotRequest| async move {
                let answer = raft.install_snapshot(req).await;
                if answer.is_ok() {
                    contact.touch();
                }
                answer
            })
            .await
        }
        None => (
            Status::Undecodable,
            format!("unknown peer frame kind {tag}").into_bytes(),
        ),
    }
}

/// Whether `vote` (a leader's, on an append or a beacon) is at least the vote this node holds:
/// the saved one and the term it is saving (metrics show the saved vote, while the term
/// already moved in memory when a vote for a higher one is being written).
pub fn carries_current_vote(raft: &Raft, vote: &Vote) -> bool {
    let m = raft.metrics();
    let m = m.borrow();
    *vote >= m.vote && vote.leader_id.term >= m.current_term
}

/// Decodes a request, calls the Raft, encodes its answer.
async fn answer<Req, Resp, E, F, Fut>(body: &[u8], call: F) -> (Status, Vec<u8>)
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: Error + Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, RaftError<E>>>,
{
    let req: Req = match codec::decode(body) {
        Ok(req) => req,
        Err(e) => {
            let msg = format!("undecodable raft rpc: {e}");
            return (Status::Undecodable, msg.into_bytes());
        }
    };
    let answer = call(req).await;
    match codec::encode(&answer) {
        Ok(bytes) => (Status::Answer, bytes),
        Err(e) => {
            // Cannot happen for well-formed openraft types; closing the stream tells the
            // sender as much as an answer could.
            tracing::error!(error = %e, "encoding raft rpc answer");
            let msg = format!("encoding raft rpc answer: {e}");
            (Status::Undecodable, msg.into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A peer that upgrades every stream request, then holds the stream until the other side
    /// closes it — or closes it at once.
    async fn peer(close_at_once: bool) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upgrade = move |mut req: axum::extract::Request| async move {
            let on_upgrade = req.extensions_mut().remove::<OnUpgrade>().unwrap();
            tokio::spawn(async move {
                let mut io = TokioIo::new(on_upgrade.await.unwrap());
                let mut buf = [0u8; 64];
                while !close_at_once && matches!(io.read(&mut buf).await, Ok(n) if n > 0) {}
            });
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, STREAM_PROTOCOL)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let app = Router::new().route(STREAM_PATH, get(upgrade));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    async fn open(dialer: &Arc<Dialer>, target: NodeId, addr: &str) -> Option<PeerStream> {
        dialer.open_detached(target, addr, None).await.ok()
    }

    #[tokio::test]
    async fn the_pool_reuses_only_live_streams_to_the_same_address() {
        let dialer = Network::new("secret").dialer;
        let (here, there) = (peer(false).await, peer(false).await);
        let stream = open(&dialer, 1, &here).await.expect("opened");
        dialer.put_idle(1, stream);
        assert!(
            dialer.take_idle(1, &there, None).is_none(),
            "node 1 moved: not reused"
        );
        let stream = open(&dialer, 1, &here).await.expect("opened");
        dialer.put_idle(1, stream);
        let other_cluster = Some(Uuid::from_u128(7));
        assert!(
            dialer.take_idle(1, &here, other_cluster).is_none(),
            "other cluster id"
        );
        let stream = open(&dialer, 1, &here).await.expect("opened");
        dialer.put_idle(1, stream);
        assert!(dialer.take_idle(1, &here, None).is_some(), "reused");

        // A stream its peer closed (say, the peer restarted) is not reused.
        let closing = peer(true).await;
        let mut stream = open(&dialer, 2, &closing).await.expect("opened");
        let seen_closed = tokio::time::timeout(Duration::from_secs(5), async {
            while stream.still_open() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        seen_closed.await.expect("the close is seen");
        dialer.put_idle(2, stream);
        assert!(dialer.take_idle(2, &closing, None).is_none());
    }

    #[tokio::test]
    async fn streams_to_one_peer_are_capped_and_freed_when_dropped() {
        let dialer = Network::new("secret").dialer;
        let addr = peer(false).await;
        let mut held = Vec::new();
        for _ in 0..STREAMS_PER_PEER {
            held.push(open(&dialer, 1, &addr).await.expect("under the cap"));
        }
        assert!(open(&dialer, 1, &addr).await.is_none(), "over the cap");
        assert!(
            open(&dialer, 2, &addr).await.is_some(),
            "the cap is per peer"
        );
        held.pop();
        assert!(
            open(&dialer, 1, &addr).await.is_some(),
            "a dropped stream frees its place"
        );
    }

    #[test]
    fn constant_time_eq_compares_bytes() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
