//! Peer RPCs: [`Network`] sends them, [`internal_router`] receives them.
//!
//! Each node keeps a small pool of [`peer_stream`](crate::peer_stream)s per peer, shared by all
//! its openraft connections (each follower's replication, every election and read-index
//! confirmation): an HTTP request to `GET /internal/raft/stream` upgraded to length-framed,
//! codec-encoded RPCs. The upgrade
//! carries the cluster secret in [`CLUSTER_SECRET_HEADER`] (without it anyone reaching the
//! port could rewrite the log) and the cluster id; snapshots travel in chunks (openraft's
//! default transport), one chunk per frame.
//!
//! ## Layout
//! - [`client`]: the sending half — openraft's network factory, the per-peer stream pool,
//!   one call at a time on a stream.
//! - [`router`]: the receiving half — the stream upgrade (secret and cluster id checked) and
//!   the answer to each frame.

mod client;
mod router;

pub use client::{Network, NetworkConnection};
pub use router::{carries_current_vote, internal_router, LeaderContact, PeerGroups};

/// Header carrying the shared cluster secret when a peer stream is opened.
pub const CLUSTER_SECRET_HEADER: &str = "x-raftlock-cluster-secret";

/// Header naming the sending node's id on every node-to-node request (peer stream upgrades
/// and forwarded client requests). Informational only — never trusted for authorization; the
/// chaos suite's per-link fault proxy uses it to tell which link a stream travels on.
pub const SOURCE_HEADER: &str = "x-raftlock-from";

/// Largest accepted frame. Well above one snapshot chunk (3 MiB by default) and a full
/// `append_entries` batch, so the limit never stalls replication.
pub const MAX_RPC_BODY: usize = 256 * 1024 * 1024;
