//! Admin API (platform token only): projects, keys, membership, and this node's view of the
//! cluster. Key secrets are generated here, shown once in the 201 answer, and only their
//! SHA-256 is replicated.

use std::collections::BTreeSet;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use axum::{Json, Router};
use openraft::{BasicNode, ChangeMembers};
use raftlock_api::admin::{
    ClusterHealth, ClusterView, Member, MoveLeaderRequest, NewKey, NewKeyRequest,
    NewLearnerRequest, NewProjectRequest, NewShardRequest, NodeProbe, ProjectList, ProjectPatch,
    Shard, ShardList, VotersRequest,
};
use raftlock_api::errors::LocksErrorCode;
use raftlock_core::{Op, Reply};
use rand::distributions::{Alphanumeric, DistString};
use rand::Rng;
use serde::de::DeserializeOwned;

use super::auth;
use super::body::{self, PathParam};
use super::errors::{ApiError, Code, Dialect};
use crate::node::{Node, SharedNode};

const D: Dialect = Dialect::Locks;

/// The caller of an admin route, authenticated as the platform (before any body is read:
/// extractors of the head run first), with the node it called.
struct Platform(SharedNode);

impl FromRequestParts<SharedNode> for Platform {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, node: &SharedNode) -> Result<Self, ApiError> {
        auth::platform(node, &parts.headers)?;
        Ok(Platform(node.clone()))
    }
}

/// An admin request's JSON body, read and decoded with the body rules of every route.
struct AdminJson<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AdminJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        Ok(AdminJson(body::json(
            &body::read(req.into_body(), D).await?,
            D,
        )?))
    }
}

/// Reads the meta group's state once its leader confirmed its leadership with a quorum.
async fn read_meta<T>(
    node: &Node,
    read: impl FnOnce(&raftlock_core::StateMachine, raftlock_core::Nanos) -> T,
) -> Result<T, ApiError> {
    (node.meta.linearizable(read).await).map_err(|e| ApiError::from_unavailable(D, e))
}

/// How long a membership call waits before answering 202 "still in progress": inside the
/// request's one deadline (the commit timeout, see `forward`), so a call through a follower
/// gets the leader's honest answer instead of a 503 from the follower.
fn membership_bound(node: &Node) -> std::time::Duration {
    node.config.commit_timeout * 3 / 4
}

/// 202 with the current view: the change was accepted and may still complete.
fn in_progress(node: &Node, what: &str) -> Response {
    let mut view = cluster_view(node);
    view.status = Some("in_progress".to_string());
    view.message = Some(format!(
        "{what} is still in progress; GET /admin/v1/cluster shows when it completes"
    ));
    (StatusCode::ACCEPTED, Json(view)).into_response()
}

/// Routes that must be decided by the leader (forwarded by followers).
pub fn leader_routes() -> Router<SharedNode> {
    Router::new()
        .route(
            "/admin/v1/projects",
            post(create_project).get(list_projects),
        )
        .route(
            "/admin/v1/projects/{name}",
            patch(update_project).get(get_project),
        )
        .route("/admin/v1/projects/{name}/keys", post(create_key))
        .route(
            "/admin/v1/projects/{name}/keys/{key_id}",
            delete(revoke_key),
        )
        .route("/admin/v1/cluster/learners", post(add_learner))
        .route("/admin/v1/cluster/voters", put(change_voters))
        .route("/admin/v1/cluster/leader", post(move_leader))
        .route("/admin/v1/cluster/nodes/{id}", delete(remove_node))
        .route("/admin/v1/shards", post(create_shard))
}

/// `POST /admin/v1/shards`: a new data shard on `members` (nodes of the cluster); answers
/// 201 and the shard once its creation is committed — each member then starts its replica
/// and the lowest one initializes the group (`crate::shards`).
async fn create_shard(
    Platform(node): Platform,
    AdminJson(NewShardRequest { members }): AdminJson<NewShardRequest>,
) -> Result<Response, ApiError> {
    let known = node.meta.known_nodes();
    if let Some(stranger) = members.iter().find(|id| !known.contains(id)) {
        return Err(ApiError::bad_request(
            D,
            format!(
                "node {stranger} is not in the cluster: add it first (raftlock admin node add)"
            ),
        ));
    }
    match decide(&node, Op::CreateShard { members }).await? {
        Reply::Shard(id) => {
            let shard = shard_view(&node, id).await;
            Ok((StatusCode::CREATED, Json(shard)).into_response())
        }
        other => Err(unexpected(other)),
    }
}

/// `GET /admin/v1/shards`, answered by the node asked: the meta group and every data shard
/// as its meta replica has them, and — for each group it hosts a replica of — the leader and
/// term it sees (ask a member for a shard's).
async fn list_shards(Platform(node): Platform) -> Result<Response, ApiError> {
    let ids = node.meta.read_local(|sm, _| {
        let data: Vec<u32> = sm.shards().iter().map(|(id, _)| id).collect();
        std::iter::once(raftlock_raft::META_GROUP)
            .chain(data)
            .collect::<Vec<_>>()
    });
    let mut shards = Vec::with_capacity(ids.len());
    for id in ids {
        shards.push(shard_view(&node, id).await);
    }
    Ok(Json(ShardList { shards }).into_response())
}

/// One shard as the admin API shows it, from this node's meta replica and its own replica
/// of the shard (if any).
async fn shard_view(node: &Node, id: u32) -> Shard {
    let (members, created_at, projects) = node.meta.read_local(|sm, _| {
        let shards = sm.shards();
        match shards.get(id) {
            Some(shard) => (
                shard.members.clone(),
                shard.created_at,
                shards.projects_on(id),
            ),
            None => {
                let unplaced = (sm.projects().into_iter())
                    .map(|p| p.name)
                    .filter(|name| shards.shard_of(name) == raftlock_raft::META_GROUP)
                    .collect();
                (Default::default(), 0, unplaced)
            }
        }
    });
    let members = match id {
        raftlock_raft::META_GROUP => node.meta.voters(),
        _ => members,
    };
    let (leader, term, bytes, ops_per_second) = match node.group(id) {
        Some(group) => {
            let (leader, term) = {
                let m = group.raft.metrics();
                let m = m.borrow();
                (m.current_leader, m.current_term)
            };
            let bytes = group.disk_bytes().await;
            (
                leader,
                Some(term),
                Some(bytes),
                Some(group.ops_per_second()),
            )
        }
        None => (None, None, None, None),
    };
    Shard {
        id,
        members,
        created_at,
        projects,
        leader,
        term,
        bytes,
        ops_per_second,
    }
}

/// Routes answered by whichever node receives them.
pub fn local_routes() -> Router<SharedNode> {
    Router::new()
        .route("/admin/v1/cluster", get(cluster))
        .route("/admin/v1/cluster/status", get(cluster_status))
        .route("/admin/v1/snapshot", get(snapshot))
        .route("/admin/v1/shards", get(list_shards))
}

/// `GET /admin/v1/snapshot`: a backup of the whole state (`raftlock snapshot save`). Only
/// the leader answers, after confirming its leadership with a quorum, so the state is at an
/// applied (hence committed) index no later than anything acknowledged before the call; a
/// follower answers 503 (the state can be large: it is not forwarded). The copy is O(1)
/// (persistent maps) and is encoded off the async workers.
async fn snapshot(Platform(node): Platform) -> Result<Response, ApiError> {
    if !node.meta.is_leader() {
        return Err(ApiError::unavailable(
            D,
            "not the leader: ask the leader for a snapshot",
        ));
    }
    read_meta(&node, |_, _| ()).await?;
    let state = node.meta.state_copy();
    // Each data shard's state, each at an index its leader applied after this call began
    // (no operation spans two groups, so each group on its own is what a restore needs).
    let mut shards = Vec::new();
    for id in state.machine.shards().iter().map(|(id, _)| id) {
        let shard = crate::shards::state_for_backup(&node, id)
            .await
            .map_err(|e| ApiError::from_unavailable(D, e))?;
        shards.push(shard);
    }
    let cluster_id = node.identity.get();
    let taken_at_ms = crate::clock::wall_clock() / 1_000_000;
    let bytes = tokio::task::spawn_blocking(move || {
        raftlock_raft::backup::write_with_shards(&state, &shards, cluster_id, taken_at_ms)
    })
    .await
    .map_err(|e| ApiError::new(D, StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError::new(D, StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    metrics::counter!("raftlock_backups_total").increment(1);
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, "application/octet-stream"),
            (
                axum::http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"raftlock.backup\"",
            ),
        ],
        bytes,
    )
        .into_response())
}

async fn decide(node: &Node, op: Op) -> Result<Reply, ApiError> {
    super::decide::decide(&node.meta, op, D).await
}

async fn create_project(
    Platform(node): Platform,
    AdminJson(NewProjectRequest { name, shard }): AdminJson<NewProjectRequest>,
) -> Result<Response, ApiError> {
    // Decided on the meta leader: the least-loaded shard is read from its own state.
    let shard = shard.unwrap_or_else(|| node.meta.read_local(|sm, _| sm.shards().least_loaded()));
    match decide(&node, Op::CreateProjectOn { name, shard }).await? {
        Reply::Project(p) => Ok((StatusCode::CREATED, Json(p)).into_response()),
        other => Err(unexpected(other)),
    }
}

async fn list_projects(Platform(node): Platform) -> Result<Response, ApiError> {
    let projects = read_meta(&node, |sm, _| sm.projects()).await?;
    Ok(Json(ProjectList { projects }).into_response())
}

async fn get_project(
    Platform(node): Platform,
    PathParam(name): PathParam<String>,
) -> Result<Response, ApiError> {
    let project = read_meta(&node, |sm, _| sm.project(&name)).await?;
    project
        .map(|p| Json(p).into_response())
        .ok_or_else(|| ApiError::new(D, StatusCode::NOT_FOUND, "project not found"))
}

async fn update_project(
    Platform(node): Platform,
    PathParam(name): PathParam<String>,
    AdminJson(p): AdminJson<ProjectPatch>,
) -> Result<Response, ApiError> {
    let op = Op::UpdateProject {
        name,
        lock_ops_per_minute: p.lock_ops_per_minute,
        hier_ops_per_minute: p.hier_ops_per_minute,
    };
    match decide(&node, op).await? {
        Reply::Project(p) => Ok(Json(p).into_response()),
        other => Err(unexpected(other)),
    }
}

/// A new key id (16 hex chars) and its full secret `rlk_<id>_<40 random alphanumerics>`.
fn generate_key() -> (String, String) {
    let mut rng = rand::thread_rng();
    let key_id = format!("{:016x}", rng.gen::<u64>());
    let secret = format!(
        "{}{key_id}_{}",
        auth::KEY_PREFIX,
        Alphanumeric.sample_string(&mut rng, 40)
    );
    (key_id, secret)
}

async fn create_key(
    Platform(node): Platform,
    PathParam(project): PathParam<String>,
    AdminJson(NewKeyRequest { kind, scopes }): AdminJson<NewKeyRequest>,
) -> Result<Response, ApiError> {
    // Checked before proposing (apply checks again): a refused key writes nothing.
    raftlock_core::validate::key_scopes(&scopes).map_err(|e| ApiError::from_core(D, e))?;
    let (key_id, secret) = generate_key();
    let op = Op::CreateKey {
        project,
        key_id,
        kind,
        scopes,
        secret_hash: auth::hash_secret(&secret),
    };
    match decide(&node, op).await? {
        Reply::Key(k) => Ok((
            StatusCode::CREATED,
            Json(NewKey {
                key_id: k.key_id,
                secret,
                kind: k.kind,
                scopes: k.scopes,
            }),
        )
            .into_response()),
        other => Err(unexpected(other)),
    }
}

async fn revoke_key(
    Platform(node): Platform,
    PathParam((project, key_id)): PathParam<(String, String)>,
) -> Result<StatusCode, ApiError> {
    decide(&node, Op::RevokeKey { project, key_id }).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn unexpected(reply: Reply) -> ApiError {
    ApiError::new(
        D,
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("unexpected reply {reply:?}"),
    )
}

fn membership_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        D,
        StatusCode::CONFLICT,
        format!("membership change refused: {e}"),
    )
    .with_code(Code::Locks(LocksErrorCode::MembershipChangeFailed))
}

/// Adds a learner and waits until it has caught up with the log.
async fn add_learner(
    Platform(node): Platform,
    AdminJson(NewLearnerRequest { node_id, addr }): AdminJson<NewLearnerRequest>,
) -> Result<Response, ApiError> {
    let added = node
        .meta
        .raft
        .add_learner(node_id, BasicNode { addr }, false)
        .await
        .map_err(membership_error)?;
    let target = added.log_id.index;
    // Wait (bounded) until the learner holds the log up to its own membership entry, so a
    // voter change right after this call does not count an empty node.
    let caught_up = node
        .meta
        .raft
        .wait(Some(membership_bound(&node)))
        .metrics(
            |m| {
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&node_id).copied().flatten());
                matched.is_some_and(|l| l.index >= target)
            },
            "learner caught up",
        )
        .await
        .is_ok();
    let mut view = cluster_view(&node);
    view.learner_caught_up = Some(caught_up);
    let status = if caught_up {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(view)).into_response())
}

/// Replaces the voter set (joint consensus); nodes must already be members (learners).
async fn change_voters(
    Platform(node): Platform,
    AdminJson(VotersRequest { voters }): AdminJson<VotersRequest>,
) -> Result<Response, ApiError> {
    if voters.is_empty() {
        return Err(ApiError::bad_request(D, "voters must not be empty"));
    }
    let change = node
        .meta
        .raft
        .change_membership(ChangeMembers::ReplaceAllVoters(voters), true);
    match tokio::time::timeout(membership_bound(&node), change).await {
        Ok(result) => {
            result.map_err(membership_error)?;
            Ok(Json(cluster_view(&node)).into_response())
        }
        Err(_) => Ok(in_progress(&node, "the voter change")),
    }
}

/// How long `POST /admin/v1/cluster/leader` may take before answering 503.
const MOVE_LEADER_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// Hands leadership to another voter (see [`crate::handoff`]); answers the new view.
async fn move_leader(
    Platform(node): Platform,
    AdminJson(MoveLeaderRequest { node_id }): AdminJson<MoveLeaderRequest>,
) -> Result<Response, ApiError> {
    use crate::handoff::{hand_off, HandOffError};
    if node_id == Some(node.config.node_id) {
        return Ok(Json(cluster_view(&node)).into_response());
    }
    match hand_off(&node, &node.meta, node_id, MOVE_LEADER_BOUND).await {
        Ok(leader) if node_id.is_some_and(|wanted| wanted != leader) => Err(ApiError::new(
            D,
            StatusCode::CONFLICT,
            format!(
                "node {} did not take leadership (is its clock off? see clock_offset_ms); node {leader} leads now",
                node_id.unwrap_or_default()
            ),
        )
        .with_code(Code::Locks(LocksErrorCode::LeaderNotMoved))),
        Ok(_) => Ok(Json(cluster_view(&node)).into_response()),
        Err(e @ (HandOffError::NotAVoter(_) | HandOffError::NoCandidate)) => {
            Err(ApiError::bad_request(D, e.to_string()))
        }
        Err(e) => Err(ApiError::unavailable(D, e)),
    }
}

/// Removes a node: demotes it if it votes, then drops it from the membership.
async fn remove_node(
    Platform(node): Platform,
    PathParam(id): PathParam<u64>,
) -> Result<Response, ApiError> {
    let is_voter = node.meta.voters().contains(&id);
    // Two changes in a row: run them on their own task, so both happen even when this call
    // answers "in progress" first.
    let removal = tokio::spawn({
        let node = node.clone();
        async move {
            if is_voter {
                let remove = ChangeMembers::RemoveVoters(BTreeSet::from([id]));
                node.meta.raft.change_membership(remove, true).await?;
            }
            let drop = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
            node.meta
                .raft
                .change_membership(drop, false)
                .await
                .map(|_| ())
        }
    });
    match tokio::time::timeout(membership_bound(&node), removal).await {
        Ok(Ok(Ok(()))) => Ok(Json(cluster_view(&node)).into_response()),
        Ok(Ok(Err(e))) => Err(membership_error(e)),
        Ok(Err(e)) => Err(ApiError::new(
            D,
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("removal task failed: {e}"),
        )),
        Err(_) => Ok(in_progress(&node, "the removal")),
    }
}

async fn cluster(Platform(node): Platform) -> Result<Response, ApiError> {
    Ok(Json(cluster_view(&node)).into_response())
}

/// This node's view of the cluster.
pub fn cluster_view(node: &Node) -> ClusterView {
    let m = node.meta.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let members = membership
        .nodes()
        .map(|(id, n)| Member {
            id: *id,
            addr: n.addr.clone(),
            voter: voters.contains(id),
        })
        .collect();
    ClusterView {
        node_id: node.config.node_id,
        cluster_id: node.identity.get().map(|id| id.to_string()),
        clock_offset_ms: node.meta.clock.offset().map(|o| o / 1_000_000),
        leader: m.current_leader,
        term: m.current_term,
        commit_index: commit_index(&m, node.config.node_id).unwrap_or(0),
        applied_index: m.last_applied.map(|l| l.index).unwrap_or(0),
        last_log_index: m.last_log_index.unwrap_or(0),
        state: format!("{:?}", m.state),
        members,
        status: None,
        message: None,
        learner_caught_up: None,
    }
}

/// A member's admin answer of type `T`, or `None` when it does not give one in time.
async fn admin_get<T: serde::de::DeserializeOwned>(
    node: &Node,
    token: &str,
    addr: &str,
    path: &str,
    timeout: std::time::Duration,
) -> Option<T> {
    let answer = (node.forward_client.get(node.peer_url(addr, path)))
        .bearer_auth(token)
        .timeout(timeout)
        .send()
        .await
        .ok()?;
    answer.error_for_status().ok()?.json::<T>().await.ok()
}

/// Every member's own view and health, gathered by this node (members that do not answer
/// within a second are reported unreachable).
async fn cluster_status(Platform(node): Platform) -> Result<Response, ApiError> {
    let local = cluster_view(&node);
    let members = node.meta.member_addresses();
    let probes = members.into_iter().map(|(id, addr)| {
        let node = node.clone();
        let token = node.config.platform_token.clone();
        async move {
            let client = &node.forward_client;
            let timeout = std::time::Duration::from_secs(1);
            let view: Option<ClusterView> =
                admin_get(&node, &token, &addr, "/admin/v1/cluster", timeout).await;
            let ready = client
                .get(node.peer_url(&addr, "/readyz"))
                .timeout(timeout)
                .send()
                .await;
            let ready = ready.map(|r| r.status().is_success()).unwrap_or(false);
            let shards: Option<ShardList> =
                admin_get(&node, &token, &addr, "/admin/v1/shards", timeout).await;
            let probe = NodeProbe {
                id,
                addr,
                reachable: view.is_some(),
                ready,
                view,
            };
            (probe, shards.map(|l| l.shards))
        }
    });
    let (nodes, lists): (Vec<NodeProbe>, Vec<Option<Vec<Shard>>>) =
        futures::future::join_all(probes).await.into_iter().unzip();
    let lists: Vec<Vec<Shard>> = lists.into_iter().flatten().collect();
    Ok(Json(ClusterHealth {
        leader: local.leader,
        term: local.term,
        members: local.members,
        nodes,
        shards: raftlock_api::admin::merge_shard_lists(&lists),
    })
    .into_response())
}

/// The quorum-acknowledged log index as seen by node `me` (the applied index off the leader).
pub fn commit_index(m: &raftlock_raft::RaftMetrics, me: u64) -> Option<u64> {
    // openraft 0.9 does not expose the commit index in metrics; the applied index trails it
    // by at most the entries being applied right now, and the leader's replication metrics
    // give the quorum-acknowledged index.
    match &m.replication {
        Some(repl) => {
            let membership = m.membership_config.membership();
            let mut matched: Vec<u64> = membership
                .voter_ids()
                .map(|id| match id == me {
                    true => m.last_log_index.unwrap_or(0),
                    false => repl
                        .get(&id)
                        .copied()
                        .flatten()
                        .map(|l| l.index)
                        .unwrap_or(0),
                })
                .collect();
            matched.sort_unstable_by(|a, b| b.cmp(a));
            matched
                .get(matched.len() / 2)
                .copied()
                .or(m.last_applied.map(|l| l.index))
        }
        None => m.last_applied.map(|l| l.index),
    }
}
