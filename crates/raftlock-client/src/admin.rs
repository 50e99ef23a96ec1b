//! Admin API (platform token): projects, keys, membership, and the cluster view with each
//! node's health — what `raftlock admin` and `raftlock cluster status` use.

use std::collections::BTreeSet;

use reqwest::Method;
use serde::{Deserialize, Serialize};

pub use raftlock_api::admin::{
    ClusterView, KeyInfo, KeyKind, Member, NewKey, Project, ProjectPatch as ProjectUpdate, Shard,
};
use raftlock_api::admin::{
    NewKeyRequest, NewLearnerRequest, NewProjectRequest, NewShardRequest, ProjectList, ShardList,
    VotersRequest,
};

use crate::error::Result;
use crate::locks::encode;
use crate::transport::{Call, Client, Retry};

/// One member as seen by `cluster status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The member.
    pub member: Member,
    /// `GET /healthz` answered 200.
    pub healthy: bool,
    /// `GET /readyz` answered 200.
    pub ready: bool,
    /// `/readyz` text, or why the node could not be reached.
    pub detail: String,
    /// The node's own view, when it answered.
    pub view: Option<ClusterView>,
}

/// Members, leader, term, indexes and each node's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The leader most nodes agree on (from the first answering node).
    pub leader: Option<u64>,
    /// The highest term seen.
    pub term: u64,
    /// Every member.
    pub nodes: Vec<NodeStatus>,
    /// The meta group (id 0) and every data shard, each with the leader and term the members
    /// hosting it report (the highest term wins).
    pub shards: Vec<Shard>,
}

impl Client {
    /// `POST /admin/v1/projects`: on the least-loaded shard.
    pub async fn create_project(&self, name: &str) -> Result<Project> {
        self.create_project_on(name, None).await
    }

    /// `POST /admin/v1/projects` on `shard` (`None`: the least-loaded one). A project's
    /// shard is fixed for its life.
    pub async fn create_project_on(&self, name: &str, shard: Option<u32>) -> Result<Project> {
        let call = Call::new(Method::POST, "/admin/v1/projects")
            .message(&NewProjectRequest {
                name: name.to_string(),
                shard,
            })
            .retry(Retry::Once);
        self.send(call).await?.decode()
    }

    /// `POST /admin/v1/shards`: a new data shard on these nodes (1, 3, 5 or 7).
    pub async fn create_shard(&self, members: &BTreeSet<u64>) -> Result<Shard> {
        let call = Call::new(Method::POST, "/admin/v1/shards")
            .message(&NewShardRequest {
                members: members.clone(),
            })
            .retry(Retry::Once);
        self.send(call).await?.decode()
    }

    /// `GET /admin/v1/shards`: the meta group (id 0) and every data shard.
    pub async fn list_shards(&self) -> Result<Vec<Shard>> {
        let l: ShardList = self
            .send(Call::new(Method::GET, "/admin/v1/shards"))
            .await?
            .decode()?;
        Ok(l.shards)
    }

    /// `GET /admin/v1/projects`.
    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        let l: ProjectList = self
            .send(Call::new(Method::GET, "/admin/v1/projects"))
            .await?
            .decode()?;
        Ok(l.projects)
    }

    /// `GET /admin/v1/projects/{name}`.
    pub async fn get_project(&self, name: &str) -> Result<Project> {
        let call = Call::new(Method::GET, format!("/admin/v1/projects/{}", encode(name)));
        self.send(call).await?.decode()
    }

    /// `PATCH /admin/v1/projects/{name}`.
    pub async fn update_project(&self, name: &str, update: ProjectUpdate) -> Result<Project> {
        let call = Call::new(
            Method::PATCH,
            format!("/admin/v1/projects/{}", encode(name)),
        )
        .json(serde_json::to_value(update).expect("serializable"));
        self.send(call).await?.decode()
    }

    /// `POST /admin/v1/projects/{name}/keys`.
    pub async fn create_key(
        &self,
        project: &str,
        kind: KeyKind,
        scopes: &[String],
    ) -> Result<NewKey> {
        let call = Call::new(
            Method::POST,
            format!("/admin/v1/projects/{}/keys", encode(project)),
        )
        .message(&NewKeyRequest {
            kind,
            scopes: scopes.to_vec(),
        })
        .retry(Retry::Once);
        self.send(call).await?.decode()
    }

    /// `DELETE /admin/v1/projects/{name}/keys/{key_id}`.
    pub async fn revoke_key(&self, project: &str, key_id: &str) -> Result<()> {
        let call = Call::new(
            Method::DELETE,
            format!(
                "/admin/v1/projects/{}/keys/{}",
                encode(project),
                encode(key_id)
            ),
        );
        self.send(call).await.map(|_| ())
    }

    /// A backup of the whole state (`GET /admin/v1/snapshot`): only the leader answers
    /// (followers say 503, so the call fails over until it reaches it). `extra` is added to
    /// the request timeout, for a large state.
    pub async fn snapshot(&self, extra: std::time::Duration) -> Result<Vec<u8>> {
        let call = Call::new(Method::GET, "/admin/v1/snapshot").extra_timeout(extra);
        Ok(self.send(call).await?.body)
    }

    /// The cluster view of the first node that answers.
    pub async fn cluster_view(&self) -> Result<ClusterView> {
        self.send(Call::new(Method::GET, "/admin/v1/cluster"))
            .await?
            .decode()
    }

    /// The cluster view of one node (`endpoint` as `host:port` or URL).
    pub async fn node_view(&self, endpoint: &str) -> Result<ClusterView> {
        let endpoint = self.url_of(endpoint);
        self.send_to(&endpoint, Call::new(Method::GET, "/admin/v1/cluster"))
            .await?
            .decode()
    }

    fn url_of(&self, addr: &str) -> String {
        if addr.contains("://") {
            return addr.trim_end_matches('/').to_string();
        }
        let scheme = self
            .endpoints()
            .first()
            .and_then(|e| e.split_once("://"))
            .map(|(s, _)| s)
            .unwrap_or("http");
        format!("{scheme}://{addr}")
    }

    /// Members, leader, term, indexes, and each member's `/healthz`, `/readyz` and view.
    pub async fn cluster_status(&self) -> Result<ClusterStatus> {
        let first = self.cluster_view().await?;
        let probes = first.members.iter().map(|m| async move {
            let url = self.url_of(&m.addr);
            let healthy = matches!(self.probe(&url, "/healthz").await, Ok((200, _)));
            let (ready, detail) = match self.probe(&url, "/readyz").await {
                Ok((status, text)) => (status == 200, text),
                Err(e) => (false, format!("unreachable: {e}")),
            };
            let view = self.node_view(&url).await.ok();
            NodeStatus {
                member: m.clone(),
                healthy,
                ready,
                detail,
                view,
            }
        });
        let nodes = futures::future::join_all(probes).await;
        let shards = self.merged_shards(&first.members).await;
        let term = nodes
            .iter()
            .filter_map(|n| n.view.as_ref().map(|v| v.term))
            .chain([first.term])
            .max()
            .unwrap_or(first.term);
        Ok(ClusterStatus {
            leader: first.leader,
            term,
            nodes,
            shards,
        })
    }

    /// The meta group and every data shard with what its members report — leader, term,
    /// bytes on disk and ops/s (`raftlock admin shard list`): `GET /admin/v1/shards` of every
    /// member, merged. [`Client::list_shards`] answers with one node's view only.
    pub async fn shard_status(&self) -> Result<Vec<Shard>> {
        let members = self.cluster_view().await?.members;
        Ok(self.merged_shards(&members).await)
    }

    /// Every member's list of shards, merged: members and projects from the first answer,
    /// leader, term, bytes and rate from the member hosting each group with the highest term.
    async fn merged_shards(&self, members: &[Member]) -> Vec<Shard> {
        let asks = members.iter().map(|m| async move {
            let url = self.url_of(&m.addr);
            let answer = self.send_to(&url, Call::new(Method::GET, "/admin/v1/shards"));
            let list: Option<ShardList> = answer.await.ok()?.decode().ok();
            list.map(|l| l.shards)
        });
        let lists: Vec<Vec<Shard>> = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        raftlock_api::admin::merge_shard_lists(&lists)
    }

    /// `POST /admin/v1/cluster/learners`: adds a learner and waits for it to catch up.
    pub async fn add_learner(&self, node_id: u64, addr: &str) -> Result<ClusterView> {
        let call = Call::new(Method::POST, "/admin/v1/cluster/learners")
            .message(&NewLearnerRequest {
                node_id,
                addr: addr.to_string(),
            })
            .retry(Retry::Once);
        self.send(call).await?.decode()
    }

    /// `PUT /admin/v1/cluster/voters`: replaces the voter set.
    pub async fn change_voters(&self, voters: &BTreeSet<u64>) -> Result<ClusterView> {
        let call = Call::new(Method::PUT, "/admin/v1/cluster/voters")
            .message(&VotersRequest {
                voters: voters.clone(),
            })
            .retry(Retry::Once);
        self.send(call).await?.decode()
    }

    /// `DELETE /admin/v1/cluster/nodes/{id}`: removes a node from the cluster.
    pub async fn remove_node(&self, node_id: u64) -> Result<ClusterView> {
        let call = Call::new(Method::DELETE, format!("/admin/v1/cluster/nodes/{node_id}"))
            .retry(Retry::Once);
        self.send(call).await?.decode()
    }
}
