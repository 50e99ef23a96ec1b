//! One running raftlock node: the Raft groups it hosts (the meta group always; see
//! [`crate::group`]), the leader-side rate limiter, the client used to reach peers, and the
//! stop signal every group and long wait watches.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use openraft::BasicNode;
use raftlock_core::ratelimit::FixedWindow;

use crate::clock::wall_clock;
use crate::config::Config;
use crate::group::Group;
pub use crate::unavailable::Unavailable;
use raftlock_raft::{GroupId, META_GROUP};

/// Shared handle to everything a request handler needs.
pub type SharedNode = Arc<Node>;

pub struct Node {
    /// Resolved configuration (ids, secrets, timeouts).
    pub config: Config,
    /// The meta group's replica: projects, keys and (until shards are placed) every
    /// project's locks. Every node hosts one.
    pub meta: Arc<Group>,
    /// Rate-limit windows; only meaningful on the leader, where every request is decided.
    limiter: Mutex<FixedWindow>,
    /// Client for node-to-node requests (forwarding, hand-off, pre-vote, cluster status);
    /// speaks mutual TLS when peer TLS is configured.
    pub forward_client: reqwest::Client,
    /// `https` with peer TLS, else `http`: the scheme of every node-to-node URL.
    pub peer_scheme: &'static str,
    /// This node's peer certificate and peer CA, which follow their files (`crate::tls`).
    pub peer_tls: Option<Arc<crate::tls::PeerClientTls>>,
    /// This node's cluster id, checked on every node-to-node request.
    pub identity: raftlock_raft::ClusterIdentity,
    /// True once the node is stopping (SIGTERM): long waits answer instead of being cut.
    stopping: tokio::sync::watch::Sender<bool>,
    /// When the process started: a node that never heard from a leader counts from here.
    pub started: std::time::Instant,
    /// The lease and election timeout the pre-vote works with.
    pub election_timing: crate::config::ElectionTiming,
    /// The Raft groups this node hosts, by id: where incoming peer frames are delivered.
    pub peer_groups: raftlock_raft::PeerGroups,
    /// The data shards this node hosts a replica of (started by `crate::shards`), by id.
    pub shards: std::sync::RwLock<BTreeMap<GroupId, Arc<Group>>>,
    /// The meta group's network; every other group's is derived from it (one stream pool).
    pub network: raftlock_raft::Network,
}

/// An HTTP client for node-to-node requests: kept-alive connections with `TCP_NODELAY`
/// (heartbeats are small and latency-bound), and mutual TLS when configured.
fn peer_client(
    tls: Option<&Arc<crate::tls::PeerClientTls>>,
    connect_timeout: Duration,
) -> anyhow::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .tcp_nodelay(true)
        // Shorter than the peers' header-read timeout (10 s), which also closes idle
        // connections: this side lets go first, so a reused connection is never one the
        // server is closing.
        .pool_idle_timeout(Duration::from_secs(5))
        .connect_timeout(connect_timeout);
    let builder = match tls {
        Some(tls) => builder.use_preconfigured_tls(tls.client_config()?),
        None => builder.use_rustls_tls(),
    };
    Ok(builder.build()?)
}

impl Node {
    /// The URL of `path` on the peer listening at `addr`.
    pub fn peer_url(&self, addr: &str, path: &str) -> String {
        format!("{}://{addr}{path}", self.peer_scheme)
    }

    /// Opens the meta group's storage (the data directory itself), starts its replica and
    /// makes it reachable by peers.
    pub async fn start(config: Config) -> anyhow::Result<SharedNode> {
        let started = std::time::Instant::now();
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating {}", config.data_dir.display()))?;
        let identity = raftlock_raft::ClusterIdentity::open(&config.data_dir)?;
        let timing = config.raft_timing();
        let election_timing = crate::config::ElectionTiming {
            lease: timing.leader_lease(),
            timeout_min: timing.election_timeout,
        };
        let peer_tls = match &config.peer_tls {
            Some(files) => Some(crate::tls::PeerClientTls::load(files.clone())?),
            None => None,
        };
        let peer_scheme = if peer_tls.is_some() { "https" } else { "http" };
        // Names this node on every peer RPC (x-raftlock-from), so a per-link fault proxy can
        // tell links apart (chaos suite).
        let network = raftlock_raft::Network::with_client(
            peer_client(peer_tls.as_ref(), Duration::from_secs(1))?,
            config.cluster_secret.clone(),
        )
        .with_scheme(peer_scheme)
        .with_source(config.node_id)
        .with_identity(identity.clone());
        let stopping = tokio::sync::watch::Sender::new(false);
        let meta = Group::start(
            &config,
            META_GROUP,
            config.data_dir.clone(),
            network.clone(),
            stopping.subscribe(),
        )
        .await?;
        let meta = Arc::new(meta);
        let peer_groups = raftlock_raft::PeerGroups::default();
        peer_groups.host(meta.id, meta.raft.clone(), meta.contact.clone());
        let forward_client = peer_client(peer_tls.as_ref(), Duration::from_secs(2))?;
        crate::startup::spawn_ready_report(meta.raft.clone(), config.node_id, started);
        Ok(Arc::new(Node {
            config,
            meta,
            limiter: Mutex::new(FixedWindow::default()),
            forward_client,
            peer_scheme,
            peer_tls,
            identity,
            stopping,
            peer_groups,
            started: std::time::Instant::now(),
            election_timing,
            shards: Default::default(),
            network,
        }))
    }

    /// A group this node hosts: the meta group, or a data shard it runs a replica of.
    pub fn group(&self, id: GroupId) -> Option<Arc<Group>> {
        if id == META_GROUP {
            return Some(self.meta.clone());
        }
        let shards = self.shards.read().unwrap_or_else(|p| p.into_inner());
        shards.get(&id).cloned()
    }

    /// Every group this node hosts, the meta group first.
    pub fn groups(&self) -> Vec<Arc<Group>> {
        let shards = self.shards.read().unwrap_or_else(|p| p.into_inner());
        std::iter::once(self.meta.clone())
            .chain(shards.values().cloned())
            .collect()
    }

    /// The shard `project` lives on, from this node's meta replica (see docs/semantics.md,
    /// *Shards*: a project's shard never changes, so a stale replica cannot misplace it).
    pub fn shard_of(&self, project: &str) -> GroupId {
        self.meta.read_local(|sm, _| sm.shards().shard_of(project))
    }

    /// The voters of data shard `shard` with their addresses (from the meta group's
    /// membership, which every node joins), for reaching a shard this node does not host.
    pub fn shard_members(&self, shard: GroupId) -> Vec<(u64, String)> {
        let members = self.meta.read_local(|sm, _| {
            (sm.shards().get(shard)).map_or_else(Default::default, |s| s.members.clone())
        });
        let metrics = self.meta.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        (members.iter())
            .filter_map(|id| Some((*id, membership.get_node(id)?.addr.clone())))
            .collect()
    }

    /// The group that decides `project`'s calls, if this node hosts it.
    pub fn group_for(&self, project: &str) -> Result<Arc<Group>, Unavailable> {
        let shard = self.shard_of(project);
        self.group(shard).ok_or_else(|| {
            Unavailable::not_proposed(format!("this node hosts no replica of shard {shard}"))
        })
    }

    /// Initializes the cluster from `--peers` when this node has the lowest id and the
    /// cluster has never been initialized; everyone else waits to be contacted.
    pub async fn bootstrap(&self) -> anyhow::Result<()> {
        let lowest = *self
            .config
            .peers
            .keys()
            .next()
            .expect("peers include this node");
        let raft = &self.meta.raft;
        if self.config.join || lowest != self.config.node_id || raft.is_initialized().await? {
            return Ok(());
        }
        let members: BTreeMap<u64, BasicNode> = self
            .config
            .peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
            .collect();
        let cluster_id = self.identity.get_or_create()?;
        tracing::info!(%cluster_id, "initializing a new cluster");
        match raft.initialize(members).await {
            Ok(()) => tracing::info!("initialized cluster from --peers"),
            Err(e) => tracing::info!(error = %e, "cluster already initialized"),
        }
        Ok(())
    }

    /// A request to a peer at `url`, carrying the node-to-node credentials: the cluster
    /// secret, the cluster id once known, and this node's id (so a per-link fault proxy sees
    /// which link a request travels on; never trusted for authorization).
    pub fn peer_request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let req = self
            .forward_client
            .request(method, url)
            .header(
                raftlock_raft::CLUSTER_SECRET_HEADER,
                self.config.cluster_secret.as_str(),
            )
            .header(
                raftlock_raft::SOURCE_HEADER,
                self.config.node_id.to_string(),
            );
        match self.identity.get() {
            Some(id) => req.header(raftlock_raft::CLUSTER_ID_HEADER, id.to_string()),
            None => req,
        }
    }

    /// Marks the node as stopping: no group of it campaigns again (the election driver and
    /// [`Group::may_campaign`] check this) and long waits answer now.
    pub fn begin_stop(&self) {
        self.stopping.send_replace(true);
    }

    /// A watch that turns true when the node starts stopping (for each group it runs).
    pub fn stop_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once the node is stopping.
    pub async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|stopping| *stopping).await;
    }

    /// Counts one request of `bucket` against `limit` per minute (0 = unlimited).
    pub fn count_request(&self, bucket: &str, limit: u32) -> Result<(), u64> {
        // Rate-limit windows are local and approximate: the wall clock is fine here.
        let now = wall_clock();
        self.limiter
            .lock()
            .expect("limiter poisoned")
            .count(bucket, limit, now)
    }
}
