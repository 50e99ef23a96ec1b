//! The data shards on this node: it runs a replica of every shard the meta group's shard map
//! places on it, and the lowest-numbered member initializes a new shard's Raft group.
//!
//! A shard's replica lives in `<data dir>/groups/<id>/` (its own WAL, vote and snapshot), is
//! reached through the node's one peer transport (frames name the group), elects its own
//! leader with the node's pre-vote driver, and keeps its own cluster time and fencing tokens.
//! The keeper looks at the meta replica's shard map whenever the meta group applies, so a
//! shard created while the node runs is started within one apply; at start-up every shard
//! this node is a member of starts again from its directory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use openraft::BasicNode;
use raftlock_raft::backup::GroupBackup;
use raftlock_raft::GroupId;

use crate::group::Group;
use crate::http::auth;
use crate::node::{SharedNode, Unavailable};

/// Internal route answering a shard's state to the node taking a backup (cluster secret).
pub const STATE_PATH: &str = "/internal/groups/{id}/state";
/// How long a backup waits for one shard's state.
const STATE_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the keeper looks again when the meta group applied nothing (a shard whose first
/// start failed is tried again this often).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The directory of group `id`'s replica under the node's data directory.
pub fn group_dir(data_dir: &std::path::Path, id: GroupId) -> std::path::PathBuf {
    data_dir.join("groups").join(id.to_string())
}

/// Starts the keeper of `node`'s shard replicas.
pub fn spawn_keeper(node: SharedNode) {
    tokio::spawn(async move {
        let mut applied = node.meta.raft.metrics();
        loop {
            if node.is_stopping() {
                return;
            }
            for (id, members) in shards_placed_here(&node) {
                if node.group(id).is_none() {
                    if let Err(e) = start(&node, id, &members).await {
                        tracing::warn!(shard = id, error = %e, "cannot start a shard replica");
                    }
                }
            }
            let _ = tokio::time::timeout(LOOK_EVERY, applied.changed()).await;
        }
    });
}

/// The shards of the map (as this node's meta replica has it) this node is a member of.
fn shards_placed_here(node: &SharedNode) -> Vec<(GroupId, BTreeSet<u64>)> {
    let me = node.config.node_id;
    node.meta.read_local(|sm, _| {
        (sm.shards().iter())
            .filter(|(_, shard)| shard.members.contains(&me))
            .map(|(id, shard)| (id, shard.members.clone()))
            .collect()
    })
}

/// Starts this node's replica of shard `id`, makes it reachable, and initializes the group
/// when this node is its lowest member and nobody has yet.
async fn start(node: &SharedNode, id: GroupId, members: &BTreeSet<u64>) -> anyhow::Result<()> {
    let dir = group_dir(&node.config.data_dir, id);
    let network = node.network.for_group(id);
    let group = Group::start(&node.config, id, dir, network, node.stop_signal()).await?;
    let group = Arc::new(group);
    node.peer_groups
        .host(id, group.raft.clone(), group.contact.clone());
    node.shards
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, group.clone());
    crate::election::spawn(node.clone(), group.clone(), node.election_timing);
    group.spawn_ticker(node.config.tick);
    group.spawn_compactor(node.config.snapshot_policy());
    group.spawn_rate_meter();
    tracing::info!(shard = id, ?members, "shard replica started");
    let lowest = members.first().copied();
    if lowest == Some(node.config.node_id) && !group.raft.is_initialized().await? {
        // Addresses from the meta group's membership, which every node is in.
        let voters: BTreeMap<u64, BasicNode> = (node.shard_members(id).into_iter())
            .map(|(member, addr)| (member, BasicNode::new(addr)))
            .collect();
        if voters.len() != members.len() {
            anyhow::bail!("shard {id}: a member of {members:?} is not in the cluster");
        }
        group
            .raft
            .initialize(voters)
            .await
            .with_context(|| format!("initializing shard {id}"))?;
        tracing::info!(shard = id, "initialized a new shard");
    }
    Ok(())
}

/// `GET /internal/groups/{id}/state`: this node's state of shard `id`, at an index it applied
/// while it led the shard (leadership confirmed with a quorum first, as for a linearizable
/// read), encoded as a snapshot holds it; 503 from a node that does not lead it.
pub async fn answer_state(
    State(node): State<SharedNode>,
    Path(id): Path<GroupId>,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = auth::admit_peer(&node, &headers) {
        return refusal.into_response();
    }
    match leader_state(&node, id).await {
        Ok(Some(shard)) => shard.state.into_response(),
        Ok(None) => (StatusCode::SERVICE_UNAVAILABLE, "not this shard's leader").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// Shard `id`'s state if this node leads it (`None` otherwise).
async fn leader_state(node: &SharedNode, id: GroupId) -> Result<Option<GroupBackup>, Unavailable> {
    let Some(group) = node.group(id).filter(|g| g.is_leader()) else {
        return Ok(None);
    };
    group.linearizable(|_, _| ()).await?;
    let state = group.state_copy();
    let encoded = tokio::task::spawn_blocking(move || GroupBackup::new(id, &state)).await;
    match encoded {
        Ok(Ok(shard)) => Ok(Some(shard)),
        Ok(Err(e)) => Err(Unavailable::new(e.to_string())),
        Err(e) => Err(Unavailable::new(e.to_string())),
    }
}

/// Shard `id`'s state for a backup: from this node if it leads the shard, else from whichever
/// member answers as its leader.
pub async fn state_for_backup(node: &SharedNode, id: GroupId) -> Result<GroupBackup, Unavailable> {
    if let Some(shard) = leader_state(node, id).await? {
        return Ok(shard);
    }
    let path = STATE_PATH.replace("{id}", &id.to_string());
    for (_, addr) in node.shard_members(id) {
        let asked = node
            .peer_request(reqwest::Method::GET, &node.peer_url(&addr, &path))
            .timeout(STATE_TIMEOUT)
            .send()
            .await;
        let Ok(answer) = asked else { continue };
        if !answer.status().is_success() {
            continue;
        }
        if let Ok(state) = answer.bytes().await {
            return Ok(GroupBackup {
                group: id,
                state: state.to_vec(),
            });
        }
    }
    Err(Unavailable::new(format!(
        "no leader of shard {id} answered for the backup"
    )))
}
