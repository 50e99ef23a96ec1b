//! The sending half of peer RPCs: openraft's [`RaftNetworkFactory`] ([`Network`], one per Raft
//! group), a small pool of [`peer_stream`](crate::peer_stream)s per peer shared by every
//! openraft connection of every group of this node, and one call at a time on a stream.

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::header;
use futures::FutureExt;
use openraft::error::{InstallSnapshotError, NetworkError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use raftlock_core::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::identity::{ClusterIdentity, CLUSTER_ID_HEADER};
use crate::peer_stream::{
    read_frame, write_request, Kind, Protocol, Status, STREAM_MAX_AGE, STREAM_PATH,
    STREAM_REUSE_LIMIT,
};
use crate::typ::{
    AppendEntriesRequest, AppendEntriesResponse, GroupId, InstallSnapshotRequest,
    InstallSnapshotResponse, Node, NodeId, RaftError, TypeConfig, VoteRequest, VoteResponse,
    META_GROUP,
};

use super::{CLUSTER_SECRET_HEADER, MAX_RPC_BODY, SOURCE_HEADER};

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

/// openraft's [`RaftNetworkFactory`] for one Raft group. openraft makes a
/// [`NetworkConnection`] for each follower's replication and a fresh one for every election
/// and every read-index confirmation, so streams are not owned by connections: every
/// connection of this node, of whichever group, takes an idle stream to its peer for one call
/// and gives it back after a whole answer.
#[derive(Clone)]
pub struct Network {
    dialer: Arc<Dialer>,
    /// The group whose RPCs this network carries (named in every request frame).
    group: GroupId,
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
            group: META_GROUP,
        }
    }

    /// The network of another group of this node: the same peers, secret and stream pool.
    pub fn for_group(&self, group: GroupId) -> Network {
        Network {
            dialer: self.dialer.clone(),
            group,
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
            group: self.group,
            target,
            node: node.clone(),
        }
    }
}

/// The RPC client of one group for one peer, on the node's
/// [`peer_stream`](crate::peer_stream)s to it.
pub struct NetworkConnection {
    dialer: Arc<Dialer>,
    group: GroupId,
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
    /// Its frame format: protocol 1 when the peer is a release before groups.
    protocol: Protocol,
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

    /// Opens a stream: an HTTP request upgraded to the current protocol, or to protocol 1 when
    /// the peer refuses it as unknown (a node of the release before groups, mid-upgrade).
    async fn open(
        &self,
        addr: &str,
        cluster_id: Option<Uuid>,
        slot: OwnedSemaphorePermit,
    ) -> Result<PeerStream, OpenError> {
        match self.open_as(Protocol::V2, addr, cluster_id).await {
            Err(Refusal::BadRequest(_)) => self.open_as(Protocol::V1, addr, cluster_id).await,
            opened => opened,
        }
        .map_err(Refusal::into_open_error)
        .map(|io| {
            metrics::counter!("raftlock_peer_streams_opened_total").increment(1);
            let now = Instant::now();
            PeerStream {
                io: BufStream::new(io.0),
                addr: addr.to_string(),
                _slot: slot,
                cluster_id,
                opened: now,
                last_used: now,
                protocol: io.1,
            }
        })
    }

    /// Asks `addr` to upgrade to `protocol` (through the same client, so TLS and its
    /// certificates apply unchanged).
    async fn open_as(
        &self,
        protocol: Protocol,
        addr: &str,
        cluster_id: Option<Uuid>,
    ) -> Result<(reqwest::Upgraded, Protocol), Refusal> {
        let url = format!("{}://{}{}", self.scheme, addr, STREAM_PATH);
        let mut request = self
            .client
            .get(&url)
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, protocol.token())
            .header(CLUSTER_SECRET_HEADER, &*self.secret);
        if let Some(source) = self.source {
            request = request.header(SOURCE_HEADER, source.to_string());
        }
        if let Some(id) = cluster_id {
            request = request.header(CLUSTER_ID_HEADER, id.to_string());
        }
        let res = request
            .send()
            .await
            .map_err(|e| Refusal::Open(open_error(e)))?;
        let status = res.status();
        if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let bytes = res.bytes().await.unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
            let msg = format!("{url}: HTTP {status}: {text}");
            return Err(match status {
                reqwest::StatusCode::BAD_REQUEST => Refusal::BadRequest(msg),
                _ => Refusal::Open(OpenError::Network(NetworkError::new(&TransportError(msg)))),
            });
        }
        let io = res
            .upgrade()
            .await
            .map_err(|e| Refusal::Open(open_error(e)))?;
        Ok((io, protocol))
    }
}

/// Why one upgrade attempt failed: a 400 (the peer does not speak that protocol) is worth
/// one more try with the older protocol; anything else is final.
enum Refusal {
    BadRequest(String),
    Open(OpenError),
}

impl Refusal {
    fn into_open_error(self) -> OpenError {
        match self {
            Refusal::BadRequest(msg) => OpenError::Network(NetworkError::new(&TransportError(msg))),
            Refusal::Open(e) => e,
        }
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
        if !stream.protocol.carries(self.group) {
            self.dialer.put_idle(self.target, stream);
            return Err(network_error(format!(
                "node {} speaks peer protocol 1, which carries group {META_GROUP} only",
                self.target
            )));
        }
        let broken = |e: std::io::Error| {
            network_error(format!("{} to node {}: {e}", kind.name(), self.target))
        };
        write_request(&mut stream.io, stream.protocol, kind, self.group, body)
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
            Some(Status::NotHosted) => {
                // A sound answer on a sound stream: keep it for the groups the peer hosts.
                stream.last_used = Instant::now();
                self.dialer.put_idle(self.target, stream);
                Err(network_error(format!(
                    "{} to node {}: {}",
                    kind.name(),
                    self.target,
                    String::from_utf8_lossy(&answer[..answer.len().min(300)])
                )))
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::Response;
    use axum::routing::get;
    use axum::Router;
    use hyper::upgrade::OnUpgrade;
    use hyper_util::rt::TokioIo;
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
                .header(header::UPGRADE, crate::peer_stream::STREAM_PROTOCOL)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let app = Router::new().route(STREAM_PATH, get(upgrade));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    /// A node of the release before groups: it upgrades protocol 1 and refuses anything else
    /// with 400, as that release did.
    async fn old_peer() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upgrade = |mut req: axum::extract::Request| async move {
            let asked = req.headers().get(header::UPGRADE).cloned();
            if asked.is_none_or(|p| p != crate::peer_stream::STREAM_PROTOCOL_V1) {
                return Response::builder()
                    .status(StatusCode::BAD_REQUEST)
                    .body(axum::body::Body::from(
                        "peer RPCs need Upgrade: raftlock-raft/1",
                    ))
                    .unwrap();
            }
            let on_upgrade = req.extensions_mut().remove::<OnUpgrade>().unwrap();
            tokio::spawn(async move {
                let mut io = TokioIo::new(on_upgrade.await.unwrap());
                let mut buf = [0u8; 64];
                while matches!(io.read(&mut buf).await, Ok(n) if n > 0) {}
            });
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, crate::peer_stream::STREAM_PROTOCOL_V1)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let app = Router::new().route(STREAM_PATH, get(upgrade));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    #[tokio::test]
    async fn an_older_peer_gets_a_protocol_1_stream_for_the_meta_group_only() {
        let network = Network::new("secret");
        let addr = old_peer().await;
        let stream = open(&network.dialer, 1, &addr).await.expect("opened");
        assert_eq!(stream.protocol, Protocol::V1, "fell back");
        network.dialer.put_idle(1, stream);
        let mut shard = network.for_group(1);
        let conn = shard.new_client(1, &Node::new(&addr)).await;
        let err = conn.exchange::<std::io::Error>(Kind::Vote, b"x").await;
        let Err(CallError::Network(e)) = err else {
            panic!("a group-1 request must not travel on a protocol-1 stream");
        };
        assert!(e.to_string().contains("protocol 1"), "{e}");
        let here = peer(false).await;
        let stream = open(&network.dialer, 2, &here).await.expect("opened");
        assert_eq!(
            stream.protocol,
            Protocol::V2,
            "a current peer speaks protocol 2"
        );
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
}
