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
use openraft::BasicNode;
use raftlock_raft::GroupId;

use crate::group::Group;
use crate::node::SharedNode;

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
    group.spawn_compactor(node.config.snapshot_logs, node.config.snapshot_bytes);
    tracing::info!(shard = id, ?members, "shard replica started");
    let lowest = members.first().copied();
    if lowest == Some(node.config.node_id) && !group.raft.is_initialized().await? {
        let voters = addresses(node, members)?;
        group
            .raft
            .initialize(voters)
            .await
            .with_context(|| format!("initializing shard {id}"))?;
        tracing::info!(shard = id, "initialized a new shard");
    }
    Ok(())
}

/// `members` with their addresses from the meta group's membership (every node is in it).
fn addresses(
    node: &SharedNode,
    members: &BTreeSet<u64>,
) -> anyhow::Result<BTreeMap<u64, BasicNode>> {
    let metrics = node.meta.raft.metrics();
    let metrics = metrics.borrow();
    let membership = metrics.membership_config.membership();
    members
        .iter()
        .map(|id| {
            let addr = (membership.get_node(id))
                .with_context(|| format!("node {id} is not in the cluster"))?;
            Ok((*id, addr.clone()))
        })
        .collect()
}
