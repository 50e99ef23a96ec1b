//! The receiving half of peer RPCs: [`internal_router`] upgrades `GET` to a peer stream
//! (cluster secret, then cluster id, checked) and answers its frames one by one, each with the
//! Raft of the group it names ([`PeerGroups`]).

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use raftlock_core::codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, BufStream};

use crate::identity::{ClusterIdentity, CLUSTER_ID_HEADER};
use crate::peer_stream::{
    read_frame, write_frame, Kind, Protocol, Status, STREAM_IDLE_TIMEOUT, STREAM_PATH,
    STREAM_PROTOCOL,
};
use crate::typ::{
    AppendEntriesRequest, AppendEntriesResponse, GroupId, InstallSnapshotRequest, Raft, RaftError,
    Vote, VoteRequest,
};

use super::{CLUSTER_SECRET_HEADER, MAX_RPC_BODY};

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

/// One group's replica on this node, as peer RPCs reach it.
#[derive(Clone)]
struct Hosted {
    raft: Raft,
    /// Touched by every accepted append or snapshot chunk of this group.
    contact: LeaderContact,
}

/// The groups this node hosts a replica of, by id: where peer frames are delivered. A node
/// adds a group when it starts its replica (at start-up, or when a shard is created while it
/// runs) and removes it when the replica stops; a frame for a group not here is answered
/// [`Status::NotHosted`].
#[derive(Clone, Default)]
pub struct PeerGroups(Arc<RwLock<HashMap<GroupId, Hosted>>>);

impl PeerGroups {
    /// Delivers `group`'s frames to `raft` from now on.
    pub fn host(&self, group: GroupId, raft: Raft, contact: LeaderContact) {
        let mut groups = self.0.write().unwrap_or_else(|p| p.into_inner());
        groups.insert(group, Hosted { raft, contact });
    }

    /// Stops delivering `group`'s frames (its replica stopped).
    pub fn remove(&self, group: GroupId) {
        let mut groups = self.0.write().unwrap_or_else(|p| p.into_inner());
        groups.remove(&group);
    }

    fn get(&self, group: GroupId) -> Option<Hosted> {
        let groups = self.0.read().unwrap_or_else(|p| p.into_inner());
        groups.get(&group).cloned()
    }
}

/// State of the internal routes.
struct Internal {
    groups: PeerGroups,
    secret: String,
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
    groups: PeerGroups,
    secret: String,
    identity: Option<ClusterIdentity>,
) -> Router {
    let state = Arc::new(Internal {
        groups,
        secret,
        identity,
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
    let Some(protocol) = upgrade.and_then(Protocol::from_token) else {
        let msg = format!("peer RPCs need Upgrade: {STREAM_PROTOCOL}");
        return (StatusCode::BAD_REQUEST, msg).into_response();
    };
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
                serve_stream(&state, io, protocol, presented.as_deref()).await;
            }
            Err(e) => tracing::debug!(error = %e, "peer stream upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, protocol.token())
        .body(axum::body::Body::empty())
        .expect("a static response head is valid")
}

/// Answers frames until the peer closes the stream, goes idle for [`STREAM_IDLE_TIMEOUT`],
/// breaks it, or sends a frame that is refused.
async fn serve_stream<S>(
    state: &Internal,
    mut io: BufStream<S>,
    protocol: Protocol,
    presented: Option<&[u8]>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    metrics::gauge!("raftlock_peer_streams").increment(1.0);
    loop {
        let read = tokio::time::timeout(STREAM_IDLE_TIMEOUT, read_frame(&mut io, MAX_RPC_BODY));
        let Ok(Ok((tag, body))) = read.await else {
            break;
        };
        let (status, answer) = answer_frame(state, protocol, presented, tag, &body).await;
        let keeps_open = matches!(status, Status::Answer | Status::NotHosted);
        if write_frame(&mut io, status as u8, &answer).await.is_err() || !keeps_open {
            break;
        }
    }
    metrics::gauge!("raftlock_peer_streams").decrement(1.0);
}

/// Runs one request frame through the local Raft of its group.
async fn answer_frame(
    state: &Internal,
    protocol: Protocol,
    presented: Option<&[u8]>,
    tag: u8,
    body: &[u8],
) -> (Status, Vec<u8>) {
    if let Err(refusal) = state.check_identity(presented) {
        return (Status::Refused, refusal.into_bytes());
    }
    let Some((group, body)) = protocol.split_request(body) else {
        let msg = "a request frame shorter than its group id";
        return (Status::Undecodable, msg.as_bytes().to_vec());
    };
    let Some(Hosted { raft, contact }) = state.groups.get(group) else {
        let msg = format!("this node hosts no replica of group {group}");
        return (Status::NotHosted, msg.into_bytes());
    };
    let contact = &contact;
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

    #[test]
    fn constant_time_eq_compares_bytes() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
