//! # raftlock-server
//!
//! A raftlock node: the HTTP APIs (project locks, hierarchical locks, admin; docs/api.md) on
//! top of the replicated state machine.
//!
//! ## Layout
//! - [`balance`]: spreads the leaderships of the groups a node shares with its peers.
//! - [`config`]: flags, `RAFTLOCK_*` environment and `--config` TOML into one [`config::Config`].
//! - [`node`]: the running node — the groups it hosts, peer clients, the stop signal.
//! - [`group`]: one Raft group on this node — Raft instance, applied state, leader checks,
//!   linearizable reads, its clock and snapshot policy.
//! - [`compaction`]: when a group's log is long enough to snapshot.
//! - [`clock`]: cluster time on this node — stamps, read times, the clock-offset guard.
//! - [`shards`]: the data shards this node runs a replica of, started from the shard map.
//! - [`proposer`]: group commit; concurrent writes share one log entry and one fsync.
//! - [`cpu_pressure`]: whether the node's CPU quota is what limits it (the proposer then
//!   batches harder).
//! - [`read_gate`]: linearizable reads, sharing one leadership confirmation.
//! - [`unavailable`]: the "not decided" (503) error every layer shares.
//! - [`election`]: elections started by this node after a pre-vote, never by openraft's timer.
//! - [`headers`]: every HTTP header name, in one place (the client-facing ones come from
//!   `raftlock-api`).
//! - [`handoff`]: leadership hand-off before a stop (SIGTERM) or on an operator's request.
//! - [`listener`]: the HTTP/1 server with a header-read timeout and a connection cap.
//! - [`open_files`]: the open-files limit raised at start, and the connection cap that fits it.
//! - [`http`]: routes — project locks, hierarchical-lock methods, admin, health, metrics,
//!   the web console, the OpenAPI document — plus auth, error dialects, body limits, blocking
//!   waits and forwarding to the leader.
//! - [`startup`]: how long each phase of the node's start took (log and metrics).
//! - [`telemetry`]: tracing logs and Prometheus metrics.
//! - [`heap`]: the global allocator (mimalloc) with a count of the bytes held, so memory the
//!   program holds is told from memory the allocator keeps.
//! - [`tls`]: HTTPS for clients and mutual TLS between nodes, following the certificate
//!   files for rotation.
//! - [`dev`]: `raftlock dev`, a local multi-node cluster in one command.
//! - [`certs`]: `raftlock certs`, a private CA and node certificates for TLS.
//! - [`cli`]: the client commands of the binary (`lock`, `ns`, `lease`, `hlock`, `admin`,
//!   `cluster`, `snapshot`), built on `raftlock-client`.

pub mod balance;
pub mod certs;
pub mod cli;
pub mod clock;
pub mod compaction;
pub mod config;
pub mod cpu_pressure;
pub mod dev;
pub mod election;
pub mod group;
pub mod handoff;
pub mod headers;
pub mod heap;
pub mod http;
pub mod listener;
pub mod node;
pub mod open_files;
pub mod proposer;
pub mod read_gate;
pub mod shards;
pub mod startup;
pub mod telemetry;
pub mod tls;
pub mod unavailable;

use anyhow::Context;

/// Runs one node until the process is told to stop.
pub async fn serve(config: config::Config) -> anyhow::Result<()> {
    telemetry::init_metrics();
    // Certificates first: a bad file stops the node before it binds anything.
    let client_tls = match &config.client_tls {
        Some(files) => Some(tls::ServerTls::load(files.clone())?),
        None => None,
    };
    let peer_tls = match &config.peer_tls {
        Some(files) => Some(tls::ServerTls::load(files.clone())?),
        None => None,
    };
    warn_if_plaintext(&config);
    let listener = listener::bind(&config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(node_id = config.node_id, listen = %config.listen, data_dir = %config.data_dir.display(), "starting raftlock node");
    let peer_listener = match &config.peer_listen {
        Some(addr) => Some(
            listener::bind(addr)
                .await
                .with_context(|| format!("binding the peer listener {addr}"))?,
        ),
        None => None,
    };
    let listeners = 1 + usize::from(peer_listener.is_some());
    let max_connections = open_files::fit_connection_cap(config.max_connections, listeners);
    let node = node::Node::start(config).await?;
    let (stop_listening, stopped) = tokio::sync::watch::channel(false);
    let serve_on = |listener, app, tls| {
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let stop = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            listener::serve(listener, app, max_connections, tls, stop).await
        })
    };
    let mut servers = Vec::new();
    match peer_listener {
        Some(peers) => {
            let client_app = http::client_router(node.clone());
            servers.push(serve_on(listener, client_app, client_tls.clone()));
            servers.push(serve_on(
                peers,
                http::router(node.clone()),
                peer_tls.clone(),
            ));
        }
        None => servers.push(serve_on(
            listener,
            http::router(node.clone()),
            client_tls.clone(),
        )),
    }
    tls::watch(tls::Reloadable {
        servers: client_tls.into_iter().chain(peer_tls).collect(),
        peer_client: node.peer_tls.clone(),
    });
    telemetry::spawn_leader_watch(node.meta.raft.clone());
    election::spawn(node.clone(), node.meta.clone(), node.election_timing);
    node.bootstrap().await?;
    node.meta.spawn_ticker(node.config.tick);
    (node.meta).spawn_compactor(node.config.snapshot_policy());
    (node.meta).spawn_rate_meter();
    shards::spawn_keeper(node.clone());
    balance::spawn(node.clone());
    shutdown_signal().await;
    step_down(&node).await;
    // Stop accepting; open connections finish what they carry (a request that arrives now
    // is still forwarded to the new leader), then Raft stops.
    let _ = stop_listening.send(true);
    for server in servers {
        server.await??;
    }
    for group in node.groups() {
        group.raft.shutdown().await.ok();
    }
    Ok(())
}

/// Logs a warning for each listener that serves plaintext on an address other than loopback:
/// keys, the platform token and the cluster secret would cross the network in clear.
fn warn_if_plaintext(config: &config::Config) {
    if config.client_tls.is_none() && exposed(&config.listen) {
        tracing::warn!(listen = %config.listen, "serving the client API in plaintext on a non-loopback address: keys travel in clear (set --tls-cert/--tls-key)");
    }
    let peer_addr = config.peer_listen.as_deref().unwrap_or(&config.listen);
    if config.peer_tls.is_none() && exposed(peer_addr) {
        tracing::warn!(listen = %peer_addr, "peer traffic is plaintext on a non-loopback address: the cluster secret travels in clear (set --peer-tls-cert/--peer-tls-key/--peer-ca)");
    }
}

/// Whether a listen address reaches beyond this machine (anything but loopback).
fn exposed(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => !ip.is_loopback(),
        Err(_) => host != "localhost",
    }
}

/// How long a stopping leader tries to hand leadership over before it just stops.
const HANDOFF_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// Before a stop: never campaign again, and hand leadership to a caught-up follower if this
/// node leads (see [`handoff`]), so the cluster keeps serving without an election timeout.
async fn step_down(node: &node::SharedNode) {
    tracing::info!("stopping");
    node.begin_stop();
    // Every group this node leads is handed over at once, each to its own most caught-up
    // member, within the one bound.
    let led: Vec<_> = (node.groups().into_iter())
        .filter(|group| group.is_leader())
        .collect();
    let hand_offs = led.iter().map(|group| async move {
        if let Err(e) = handoff::hand_off(node, group, None, HANDOFF_BOUND).await {
            tracing::warn!(group = group.id, error = %e, "stopping without a hand-off");
        }
    });
    futures::future::join_all(hand_offs).await;
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    ctrl_c.await.ok();
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_loopback_listeners_count_as_private() {
        for private in [
            "127.0.0.1:7001",
            "127.0.0.2:1",
            "[::1]:7001",
            "localhost:7001",
        ] {
            assert!(!super::exposed(private), "{private}");
        }
        for public in [
            "0.0.0.0:7001",
            "10.0.0.5:7002",
            "[::]:7001",
            "raftlock-0.raftlock:7002",
        ] {
            assert!(super::exposed(public), "{public}");
        }
    }
}
