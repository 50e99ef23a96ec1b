//! The admin API (`/admin/v1/…`, platform token only): projects, keys, membership, the
//! cluster view and backups.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// What a project key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum KeyKind {
    /// Full access to the project's locks.
    ServiceRole,
    /// Access according to its scopes (`locks.manage` for locks).
    Scoped,
    /// Public key; always refused by lock endpoints.
    Anon,
}

/// A key as the admin API shows it (never with its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyInfo {
    /// Owning project.
    pub project: String,
    /// Key id (16 hex characters), for revocation.
    pub key_id: String,
    /// Kind.
    pub kind: KeyKind,
    /// Scopes of a scoped key.
    pub scopes: Vec<String>,
    /// A revoked key stops working on every node once the revocation is committed.
    pub revoked: bool,
}

/// A project (tenant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Project {
    /// Name.
    pub name: String,
    /// Creation time, ns since the epoch.
    pub created_at: i64,
    /// Project-lock requests per fixed clock minute.
    pub lock_ops_per_minute: u32,
    /// Hierarchical-lock requests per fixed clock minute (0 = unlimited).
    pub hier_ops_per_minute: u32,
    /// Its keys.
    pub keys: Vec<KeyInfo>,
}

/// Answer of `GET /admin/v1/projects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectList {
    /// Every project, by name.
    pub projects: Vec<Project>,
}

/// Body of `POST /admin/v1/projects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewProjectRequest {
    /// 1–128 of `[-_0-9a-zA-Z]`.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::ProjectName))]
    pub name: String,
    /// The shard it lives on, for good (absent: the data shard with the fewest projects, or
    /// the meta group, 0, when the cluster has no other shard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

/// Body of `PATCH /admin/v1/projects/{name}` (an absent field keeps its value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectPatch {
    /// Project-lock requests per minute (0 = unlimited), up to 2^32-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Option<u64>, minimum = 0, maximum = 4294967295_i64)
    )]
    pub lock_ops_per_minute: Option<u32>,
    /// Hierarchical-lock requests per minute (0 = unlimited), up to 2^32-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Option<u64>, minimum = 0, maximum = 4294967295_i64)
    )]
    pub hier_ops_per_minute: Option<u32>,
}

/// Body of `POST /admin/v1/projects/{name}/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewKeyRequest {
    /// Kind.
    pub kind: KeyKind,
    /// Scopes of a scoped key: at most 32 of 1–64 bytes.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Vec<crate::schemas::Scope>, max_items = 32)
    )]
    pub scopes: Vec<String>,
}

/// Answer of a key creation: the only time its secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewKey {
    /// Key id, for revocation.
    pub key_id: String,
    /// The bearer secret.
    pub secret: String,
    /// Kind.
    pub kind: KeyKind,
    /// Scopes.
    pub scopes: Vec<String>,
}

/// One cluster member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    /// Node id.
    pub id: u64,
    /// Address (`host:port`).
    pub addr: String,
    /// Voter, or learner.
    pub voter: bool,
}

/// One node's view of the cluster (`GET /admin/v1/cluster`, and the answer of membership
/// changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterView {
    /// The answering node.
    pub node_id: u64,
    /// The cluster's id (null before the node has one).
    pub cluster_id: Option<String>,
    /// The node's wall clock minus its estimate of cluster time, in ms (null before the node
    /// has seen cluster time).
    pub clock_offset_ms: Option<i64>,
    /// The leader it knows, if any.
    pub leader: Option<u64>,
    /// Raft term.
    pub term: u64,
    /// Quorum-acknowledged index as this node sees it.
    pub commit_index: u64,
    /// Applied index.
    pub applied_index: u64,
    /// Last log index.
    pub last_log_index: u64,
    /// Raft role (`Leader`, `Follower`, `Candidate`, `Learner`, `Shutdown`).
    pub state: String,
    /// Members.
    pub members: Vec<Member>,
    /// On a 202: `in_progress` (the change was accepted and may still complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// On a 202: what is still in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// On `POST /admin/v1/cluster/learners`: the learner holds the log up to its own
    /// membership entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learner_caught_up: Option<bool>,
}

/// Answer of `GET /admin/v1/cluster/status`: every member's own view and health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterHealth {
    /// The leader the answering node knows.
    pub leader: Option<u64>,
    /// Its term.
    pub term: u64,
    /// The members.
    pub members: Vec<Member>,
    /// Each member as probed by the answering node (1 s per probe).
    pub nodes: Vec<NodeProbe>,
    /// The meta group (id 0) and every data shard, each with the leader and term of the
    /// member hosting it that reports the highest term ([`merge_shard_lists`]).
    #[serde(default)]
    pub shards: Vec<Shard>,
}

/// Every member's `GET /admin/v1/shards` answer merged into one list: members and projects
/// from the first list; leader, term, bytes and rate from the member hosting each group with
/// the highest term (a node answers those only for the groups it hosts a replica of).
pub fn merge_shard_lists(lists: &[Vec<Shard>]) -> Vec<Shard> {
    let mut merged: Vec<Shard> = lists.first().cloned().unwrap_or_default();
    for shard in &mut merged {
        let seen = lists.iter().flatten().filter(|s| s.id == shard.id);
        if let Some(best) = seen.filter(|s| s.term.is_some()).max_by_key(|s| s.term) {
            (shard.leader, shard.term) = (best.leader, best.term);
            (shard.bytes, shard.ops_per_second) = (best.bytes, best.ops_per_second);
        }
    }
    merged
}

/// One member as probed by `GET /admin/v1/cluster/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeProbe {
    /// Node id.
    pub id: u64,
    /// Address.
    pub addr: String,
    /// Its `/admin/v1/cluster` answered.
    pub reachable: bool,
    /// Its `/readyz` answered 200.
    pub ready: bool,
    /// Its own view, when it answered.
    pub view: Option<ClusterView>,
}

/// Body of `POST /admin/v1/cluster/learners`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewLearnerRequest {
    /// The new node's id.
    pub node_id: u64,
    /// Its peer address (`host:port`).
    pub addr: String,
}

/// Body of `PUT /admin/v1/cluster/voters`: the new voter set (members already).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VotersRequest {
    /// Node ids, not empty.
    pub voters: BTreeSet<u64>,
}

/// Body of `POST /admin/v1/cluster/leader`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MoveLeaderRequest {
    /// The voter to lead; the most caught-up other voter when absent.
    #[serde(default)]
    pub node_id: Option<u64>,
}

/// A data shard: one Raft group of its own on some of the cluster's nodes, holding the
/// projects placed on it. Shard 0 is the meta group itself (projects, keys, the shard map),
/// which holds the projects of a cluster that has no other shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Shard {
    /// Its group id (0: the meta group).
    pub id: u32,
    /// The node ids of its voters.
    pub members: BTreeSet<u64>,
    /// Creation time, ns since the epoch (0 for the meta group).
    pub created_at: i64,
    /// The projects placed on it, by name (for the meta group: those not placed on a data
    /// shard).
    pub projects: Vec<String>,
    /// The leader's node id, as the answering node knows it (absent: it hosts no replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<u64>,
    /// The group's current term on the answering node (absent: it hosts no replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// Bytes its replica on the answering node keeps on disk: snapshot and write-ahead log
    /// (absent: it hosts no replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Ops (lock calls and other writes) the group applied in the last second, as its
    /// replica on the answering node counted them (absent: it hosts no replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_second: Option<u64>,
}

/// Answer of `GET /admin/v1/shards`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShardList {
    /// The meta group (id 0) and every data shard, by id.
    pub shards: Vec<Shard>,
}

/// Body of `POST /admin/v1/shards`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewShardRequest {
    /// Node ids of its voters: 1, 3, 5 or 7 nodes of the cluster.
    pub members: BTreeSet<u64>,
}
