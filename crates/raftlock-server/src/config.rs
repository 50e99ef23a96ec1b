//! Node configuration: defaults, then a `--config` TOML file, then `RAFTLOCK_*` environment
//! variables and flags (clap reads both), later sources winning.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde::Deserialize;

use crate::tls::TlsFiles;

/// Flags of `raftlock serve`. Every one may also come from the environment or the file.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeArgs {
    /// TOML file with any of the options below (flags and environment override it).
    #[arg(long, env = "RAFTLOCK_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// This node's id; must appear in --peers.
    #[arg(long, env = "RAFTLOCK_NODE_ID")]
    pub node_id: Option<u64>,
    /// Address serving clients and peers, e.g. 127.0.0.1:7001.
    #[arg(long, env = "RAFTLOCK_LISTEN")]
    pub listen: Option<String>,
    /// Where log, vote and snapshots live.
    #[arg(long, env = "RAFTLOCK_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Initial cluster: `1=host:port,2=host:port,...`.
    #[arg(long, env = "RAFTLOCK_PEERS")]
    pub peers: Option<String>,
    /// Shared secret authenticating node-to-node traffic.
    #[arg(long, env = "RAFTLOCK_CLUSTER_SECRET")]
    pub cluster_secret: Option<String>,
    /// Operator credential for the admin API.
    #[arg(long, env = "RAFTLOCK_PLATFORM_TOKEN")]
    pub platform_token: Option<String>,
    /// How long a write or linearizable read may wait for the leader before answering 503.
    #[arg(long, env = "RAFTLOCK_COMMIT_TIMEOUT_MS")]
    pub commit_timeout_ms: Option<u64>,
    /// How often the leader proposes a tick so leases expire without client traffic.
    #[arg(long, env = "RAFTLOCK_TICK_MS")]
    pub tick_ms: Option<u64>,
    /// Raft heartbeat interval.
    #[arg(long, env = "RAFTLOCK_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Lower bound of the randomized election timeout (upper bound is 1.5 × this, which is
    /// also the leader lease during which followers refuse to vote for anyone else).
    #[arg(long, env = "RAFTLOCK_ELECTION_TIMEOUT_MS")]
    pub election_timeout_ms: Option<u64>,
    /// Build a snapshot (and compact the log) after this many entries.
    #[arg(long, env = "RAFTLOCK_SNAPSHOT_LOGS")]
    pub snapshot_logs: Option<u64>,
    /// Also build one once this many bytes were written to the log since the last (entries
    /// can be large: a count alone does not bound the disk).
    #[arg(long, env = "RAFTLOCK_SNAPSHOT_BYTES")]
    pub snapshot_bytes: Option<u64>,
    /// And once applying the log since the last snapshot took this many milliseconds: a
    /// restart replays that log after restoring the snapshot, so this bounds what it adds to
    /// a restart (0: no snapshot for this reason).
    #[arg(long, env = "RAFTLOCK_SNAPSHOT_REPLAY_MS")]
    pub snapshot_replay_ms: Option<u64>,
    /// `text` or `json`.
    #[arg(long, env = "RAFTLOCK_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// tracing filter, e.g. `info` or `raftlock=debug,openraft=warn`.
    #[arg(long, env = "RAFTLOCK_LOG")]
    pub log: Option<String>,
    /// Start as a node that joins an existing cluster through the admin API: never
    /// initialize a cluster, even when this node has the lowest id in --peers.
    #[arg(long, env = "RAFTLOCK_JOIN")]
    #[serde(default)]
    pub join: bool,
    /// Largest tolerated distance between this node's wall clock and cluster time, in ms
    /// (default 500). Above it the node logs a warning and does not campaign for leadership
    /// until its clock is back (docs/semantics.md, "Time").
    #[arg(long, env = "RAFTLOCK_MAX_CLOCK_OFFSET_MS")]
    pub max_clock_offset_ms: Option<u64>,
    /// Most open client and peer connections on the listener (default 8192); more wait in
    /// the kernel's accept queue.
    #[arg(long, env = "RAFTLOCK_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Threads running the node's async work (default: one per CPU). Nodes sharing a machine
    /// (a dev or test cluster) do better with CPUs ÷ nodes: fewer idle workers to wake per
    /// request (the peer-transport measurements of 2026-12-01 in the git history of docs/benchmarks.md).
    #[arg(long, env = "RAFTLOCK_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// A separate address for node-to-node traffic (Raft RPCs, forwarded requests,
    /// hand-off, pre-vote), e.g. 10.0.0.5:7002. When set, `--peers` names these addresses,
    /// the client listener refuses peer traffic, and Raft never queues behind clients (each
    /// listener has its own accept loop and connection cap). Default: one listener for both.
    #[arg(long, env = "RAFTLOCK_PEER_LISTEN")]
    pub peer_listen: Option<String>,
    /// PEM certificate chain for the client API: with --tls-key, clients connect over
    /// HTTPS. Re-read when the file changes or on SIGHUP.
    #[arg(long, env = "RAFTLOCK_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "RAFTLOCK_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// PEM certificate chain this node presents to its peers (mutual TLS; needs
    /// --peer-listen, --peer-tls-key and --peer-ca). Its names must include this node's
    /// peer address as the other nodes dial it.
    #[arg(long, env = "RAFTLOCK_PEER_TLS_CERT")]
    pub peer_tls_cert: Option<PathBuf>,
    /// PEM private key of --peer-tls-cert.
    #[arg(long, env = "RAFTLOCK_PEER_TLS_KEY")]
    pub peer_tls_key: Option<PathBuf>,
    /// PEM CA certificate(s) every peer certificate must chain to; peers without one are
    /// refused at the handshake, and plaintext peer traffic is refused.
    #[arg(long, env = "RAFTLOCK_PEER_CA")]
    pub peer_ca: Option<PathBuf>,
}

/// The resolved configuration of one node.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: u64,
    pub listen: String,
    pub data_dir: PathBuf,
    /// node id → address, the static initial membership.
    pub peers: BTreeMap<u64, String>,
    pub cluster_secret: String,
    pub platform_token: String,
    pub commit_timeout: Duration,
    pub tick: Duration,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    pub snapshot_logs: u64,
    /// See [`ServeArgs::snapshot_bytes`].
    pub snapshot_bytes: u64,
    /// See [`ServeArgs::snapshot_replay_ms`].
    pub snapshot_replay: Duration,
    pub log_format: String,
    pub log: String,
    /// See [`ServeArgs::max_clock_offset_ms`].
    pub max_clock_offset: Duration,
    /// See [`ServeArgs::max_connections`].
    pub max_connections: usize,
    /// See [`ServeArgs::worker_threads`]; `None`: one per CPU.
    pub worker_threads: Option<usize>,
    /// See [`ServeArgs::peer_listen`].
    pub peer_listen: Option<String>,
    /// HTTPS for the client API (`--tls-cert`, `--tls-key`).
    pub client_tls: Option<TlsFiles>,
    /// Mutual TLS between nodes (`--peer-tls-cert`, `--peer-tls-key`, `--peer-ca`).
    pub peer_tls: Option<TlsFiles>,
    /// Never initialize; wait to be added as a learner.
    pub join: bool,
}

/// On Kubernetes a StatefulSet pod `name-N` is node `N + 1`: read from
/// `RAFTLOCK_NODE_ID_FROM_POD` (set it to the pod name through the downward API).
fn node_id_from_pod() -> anyhow::Result<Option<u64>> {
    let Ok(pod) = std::env::var("RAFTLOCK_NODE_ID_FROM_POD") else {
        return Ok(None);
    };
    let ordinal = pod.rsplit('-').next().and_then(|n| n.parse::<u64>().ok());
    match ordinal {
        Some(n) => Ok(Some(n + 1)),
        None => bail!("RAFTLOCK_NODE_ID_FROM_POD={pod:?} does not end in -<ordinal>"),
    }
}

/// Parses `1=host:port,2=host:port`.
pub fn parse_peers(text: &str) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .with_context(|| format!("peer {part:?}: want id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .with_context(|| format!("peer {part:?}: bad id"))?;
        if peers.insert(id, addr.trim().to_string()).is_some() {
            bail!("peer id {id} listed twice");
        }
    }
    Ok(peers)
}

impl Config {
    /// When each group of this node snapshots.
    pub fn snapshot_policy(&self) -> crate::compaction::SnapshotPolicy {
        crate::compaction::SnapshotPolicy {
            logs: self.snapshot_logs,
            bytes: self.snapshot_bytes,
            replay: self.snapshot_replay,
        }
    }

    /// The openraft timing every group of this node runs with.
    pub fn raft_timing(&self) -> raftlock_raft::RaftTiming {
        raftlock_raft::RaftTiming {
            heartbeat: self.heartbeat,
            election_timeout: self.election_timeout,
            // Each group's compactor (`Group::spawn_compactor`) decides when to snapshot.
            snapshot_logs: 0,
        }
    }
}

impl ServeArgs {
    /// Fills unset fields from `other` (used to layer flags/env over the file).
    fn or(self, other: ServeArgs) -> ServeArgs {
        ServeArgs {
            config: self.config.or(other.config),
            node_id: self.node_id.or(other.node_id),
            listen: self.listen.or(other.listen),
            data_dir: self.data_dir.or(other.data_dir),
            peers: self.peers.or(other.peers),
            cluster_secret: self.cluster_secret.or(other.cluster_secret),
            platform_token: self.platform_token.or(other.platform_token),
            commit_timeout_ms: self.commit_timeout_ms.or(other.commit_timeout_ms),
            tick_ms: self.tick_ms.or(other.tick_ms),
            heartbeat_ms: self.heartbeat_ms.or(other.heartbeat_ms),
            election_timeout_ms: self.election_timeout_ms.or(other.election_timeout_ms),
            snapshot_logs: self.snapshot_logs.or(other.snapshot_logs),
            snapshot_bytes: self.snapshot_bytes.or(other.snapshot_bytes),
            snapshot_replay_ms: self.snapshot_replay_ms.or(other.snapshot_replay_ms),
            log_format: self.log_format.or(other.log_format),
            log: self.log.or(other.log),
            max_clock_offset_ms: self.max_clock_offset_ms.or(other.max_clock_offset_ms),
            max_connections: self.max_connections.or(other.max_connections),
            worker_threads: self.worker_threads.or(other.worker_threads),
            peer_listen: self.peer_listen.or(other.peer_listen),
            tls_cert: self.tls_cert.or(other.tls_cert),
            tls_key: self.tls_key.or(other.tls_key),
            peer_tls_cert: self.peer_tls_cert.or(other.peer_tls_cert),
            peer_tls_key: self.peer_tls_key.or(other.peer_tls_key),
            peer_ca: self.peer_ca.or(other.peer_ca),
            join: self.join || other.join,
        }
    }

    /// Resolves flags + environment + file + defaults into a [`Config`].
    pub fn resolve(self) -> anyhow::Result<Config> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => ServeArgs::default(),
        };
        let a = self.or(file);
        let node_id = match a.node_id {
            Some(id) => id,
            None => node_id_from_pod()?.unwrap_or(1),
        };
        let listen = a.listen.unwrap_or_else(|| "127.0.0.1:7001".to_string());
        let peers = match &a.peers {
            Some(text) => parse_peers(text)?,
            None => BTreeMap::from([(node_id, a.peer_listen.clone().unwrap_or(listen.clone()))]),
        };
        if !peers.contains_key(&node_id) {
            bail!("--peers must list this node's id {node_id}");
        }
        let cluster_secret = a
            .cluster_secret
            .context("--cluster-secret (or RAFTLOCK_CLUSTER_SECRET) is required")?;
        let platform_token = a
            .platform_token
            .context("--platform-token (or RAFTLOCK_PLATFORM_TOKEN) is required")?;
        if cluster_secret.is_empty() || platform_token.is_empty() {
            bail!("the cluster secret and platform token must not be empty");
        }
        let client_tls = match (a.tls_cert.clone(), a.tls_key.clone()) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                ca: None,
            }),
            (None, None) => None,
            _ => bail!("--tls-cert and --tls-key go together"),
        };
        let peer_tls = match (
            a.peer_tls_cert.clone(),
            a.peer_tls_key.clone(),
            a.peer_ca.clone(),
        ) {
            (Some(cert), Some(key), Some(ca)) => Some(TlsFiles {
                cert,
                key,
                ca: Some(ca),
            }),
            (None, None, None) => None,
            _ => bail!("--peer-tls-cert, --peer-tls-key and --peer-ca go together"),
        };
        if peer_tls.is_some() && a.peer_listen.is_none() {
            bail!("peer TLS needs --peer-listen: peer traffic gets its own (mutual TLS) listener");
        }
        Ok(Config {
            node_id,
            listen,
            data_dir: a
                .data_dir
                .unwrap_or_else(|| PathBuf::from(format!("./data/{node_id}"))),
            peers,
            cluster_secret,
            platform_token,
            commit_timeout: Duration::from_millis(a.commit_timeout_ms.unwrap_or(2000)),
            tick: Duration::from_millis(a.tick_ms.unwrap_or(1000)),
            heartbeat: Duration::from_millis(a.heartbeat_ms.unwrap_or(100)),
            election_timeout: Duration::from_millis(a.election_timeout_ms.unwrap_or(250)),
            snapshot_logs: a.snapshot_logs.unwrap_or(10_000),
            snapshot_bytes: a.snapshot_bytes.unwrap_or(64 << 20),
            snapshot_replay: Duration::from_millis(a.snapshot_replay_ms.unwrap_or(200)),
            log_format: a.log_format.unwrap_or_else(|| "text".to_string()),
            log: a.log.unwrap_or_else(|| "info,openraft=warn".to_string()),
            max_clock_offset: Duration::from_millis(a.max_clock_offset_ms.unwrap_or(500)),
            max_connections: a.max_connections.unwrap_or(8192),
            worker_threads: a.worker_threads.filter(|n| *n > 0),
            peer_listen: a.peer_listen,
            client_tls,
            peer_tls,
            join: a.join,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse() {
        let p = parse_peers("1=127.0.0.1:7001, 2=127.0.0.1:7002").unwrap();
        assert_eq!(p[&2], "127.0.0.1:7002");
        assert!(parse_peers("1=a,1=b").is_err());
        assert!(parse_peers("x=a").is_err());
        assert!(parse_peers("1").is_err());
    }

    #[test]
    fn flags_override_file_and_defaults_fill_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "node_id = 2\nlisten = \"127.0.0.1:9002\"\npeers = \"2=127.0.0.1:9002\"\ncluster_secret = \"s\"\nplatform_token = \"file\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            platform_token: Some("flag".into()),
            ..Default::default()
        };
        let c = args.resolve().unwrap();
        assert_eq!(
            (c.node_id, c.listen.as_str(), c.platform_token.as_str()),
            (2, "127.0.0.1:9002", "flag")
        );
        assert_eq!(c.commit_timeout, Duration::from_secs(2));
    }

    #[test]
    fn missing_secret_and_foreign_peers_are_refused() {
        let args = ServeArgs {
            platform_token: Some("t".into()),
            ..Default::default()
        };
        assert!(args.resolve().is_err());
        let args = ServeArgs {
            node_id: Some(4),
            peers: Some("1=a:1".into()),
            cluster_secret: Some("s".into()),
            platform_token: Some("t".into()),
            ..Default::default()
        };
        assert!(args.resolve().is_err());
    }
}

/// The timing the election driver and the pre-vote share (`crate::election`).
#[derive(Debug, Clone, Copy)]
pub struct ElectionTiming {
    /// openraft's leader lease: a follower refuses to vote while it heard from its leader
    /// within it (the upper bound of the election timeout).
    pub lease: Duration,
    /// The election timeout's lower bound; each wait is drawn from [min, lease).
    pub timeout_min: Duration,
}
