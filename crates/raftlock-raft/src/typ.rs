//! The openraft type configuration of raftlock and short aliases for the generic openraft types.
//!
//! openraft is generic over a [`RaftTypeConfig`](openraft::RaftTypeConfig); every other module
//! and the server name these aliases instead of spelling out `<u64, BasicNode, ...>` each time.

use openraft::error::Infallible;
use std::io::Cursor;

use openraft::BasicNode;

openraft::declare_raft_types!(
    /// raftlock's Raft types: a log entry carries one [`raftlock_core::Command`] and applying it
    /// yields one [`raftlock_core::Outcome`] per op. Snapshots are plain bytes in memory because
    /// the whole state machine is in memory anyway.
    pub TypeConfig:
        D = raftlock_core::Command,
        R = Vec<raftlock_core::Outcome>,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A node's id in the cluster.
pub type NodeId = u64;
/// What the cluster knows about a node: its peer address (`host:port`).
pub type Node = BasicNode;

/// A Raft group of the cluster: each is its own openraft instance with its own voters, log,
/// cluster time and fencing tokens. Group [`META_GROUP`] holds projects, keys and the shard
/// map (and, in a cluster of one shard, every project's data); data shards are the others.
pub type GroupId = u32;
/// The group every node hosts a replica of, and the only group of a cluster started before
/// shards (its data directory is the node's).
pub const META_GROUP: GroupId = 0;

/// A running Raft node.
pub type Raft = openraft::Raft<TypeConfig>;
/// One log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// Term, leader and index of a log entry.
pub type LogId = openraft::LogId<NodeId>;
/// A term and the candidate voted for (and whether that vote is committed).
pub type Vote = openraft::Vote<NodeId>;
/// A membership config and the id of the log entry that introduced it.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Which state a snapshot covers.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
/// A snapshot: metadata plus the encoded state.
pub type Snapshot = openraft::Snapshot<TypeConfig>;
/// Raft metrics (leader, term, membership, applied index, ...).
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;

/// Failure of a storage operation; openraft stops the node when it sees one.
pub type StorageError = openraft::StorageError<NodeId>;
/// The node is shutting down or hit a storage error.
pub type Fatal = openraft::error::Fatal<NodeId>;
/// Error of a Raft API call: either the API's own error `E` or [`Fatal`].
pub type RaftError<E = Infallible> = openraft::error::RaftError<NodeId, E>;
/// Why a `client_write` did not happen here (not the leader, membership change in progress).
pub type ClientWriteError = openraft::error::ClientWriteError<NodeId, Node>;
/// Why `ensure_linearizable` failed (not the leader, or no quorum answered).
pub type CheckIsLeaderError = openraft::error::CheckIsLeaderError<NodeId, Node>;
/// Why `initialize` was refused.
pub type InitializeError = openraft::error::InitializeError<NodeId, Node>;
/// Why a membership change was refused.
pub type ChangeMembershipError = openraft::error::ChangeMembershipError<NodeId>;
/// Where to send a write instead (leader id and address, if known).
pub type ForwardToLeader = openraft::error::ForwardToLeader<NodeId, Node>;
/// Error of a snapshot-chunk RPC on the receiving node.
pub type InstallSnapshotError = openraft::error::InstallSnapshotError;
/// Error of an outgoing RPC: transport failure or the remote node's [`RaftError`].
pub type RPCError<E = Infallible> = openraft::error::RPCError<NodeId, Node, RaftError<E>>;

/// Answer of a committed and applied `client_write`: its log id and the apply result.
pub type ClientWriteResponse = openraft::raft::ClientWriteResponse<TypeConfig>;
/// Peer RPC messages (bodies of peer-stream frames, see [`crate::peer_stream`]).
pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
pub type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<NodeId>;
pub type VoteRequest = openraft::raft::VoteRequest<NodeId>;
pub type VoteResponse = openraft::raft::VoteResponse<NodeId>;
pub type InstallSnapshotRequest = openraft::raft::InstallSnapshotRequest<TypeConfig>;
pub type InstallSnapshotResponse = openraft::raft::InstallSnapshotResponse<NodeId>;
