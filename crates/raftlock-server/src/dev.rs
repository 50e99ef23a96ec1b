//! `raftlock dev`: a working local cluster in one command. Starts N `raftlock serve` child
//! processes on consecutive ports, waits for a leader, creates the project `default` with a
//! service-role key, prints how to use it, and stops the nodes on Ctrl-C.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use rand::distributions::{Alphanumeric, DistString};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Port of node 1; node i listens on base-port + i - 1.
    #[arg(long, default_value_t = 7001)]
    pub base_port: u16,
    /// Parent of the nodes' data directories.
    #[arg(long, default_value = "./data/dev")]
    pub data_dir: PathBuf,
    /// Platform token for the admin API (random when omitted).
    #[arg(long, env = "RAFTLOCK_PLATFORM_TOKEN")]
    pub platform_token: Option<String>,
    /// Serve HTTPS and use mutual TLS between nodes, with a throw-away CA made in
    /// `<data-dir>/tls` (peers listen on base-port + 100 + i - 1).
    #[arg(long)]
    pub tls: bool,
    /// Data shards to create (each a Raft group on three consecutive nodes, or all nodes when
    /// fewer); 0 keeps every project on the meta group. Existing shards are kept.
    #[arg(long, default_value_t = 0)]
    pub shards: u32,
}

/// The voters of data shard `index` (0-based) of a dev cluster of `nodes` nodes: three
/// consecutive nodes (wrapping), or one node in a cluster of fewer than three (a voter set
/// is odd).
pub fn shard_members(index: u32, nodes: u64) -> Vec<u64> {
    let size = if nodes >= 3 { 3 } else { 1 };
    let first = (u64::from(index) * size) % nodes;
    (0..size).map(|k| (first + k) % nodes + 1).collect()
}

/// Where a dev node listens and which certificate it uses.
struct DevNode {
    addr: String,
    peer_addr: String,
    /// (certificate, key) when `--tls`.
    cert: Option<(PathBuf, PathBuf)>,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    if args.nodes == 0 || args.nodes > 7 {
        bail!("--nodes must be between 1 and 7");
    }
    let secret = Alphanumeric.sample_string(&mut rand::thread_rng(), 32);
    let platform = args
        .platform_token
        .clone()
        .unwrap_or_else(|| Alphanumeric.sample_string(&mut rand::thread_rng(), 32));
    let tls_dir = args.data_dir.join("tls");
    let ca = match args.tls {
        true => Some(crate::certs::Ca::open_or_create(&tls_dir, 3650)?),
        false => None,
    };
    let nodes: Vec<DevNode> = (0..args.nodes as u16)
        .map(|i| {
            let addr = format!("127.0.0.1:{}", args.base_port + i);
            let peer_addr = format!("127.0.0.1:{}", args.base_port + 100 + i);
            let sans = ["127.0.0.1".to_string(), "localhost".to_string()];
            let cert = match &ca {
                Some(ca) => Some(ca.issue(&tls_dir, &format!("node{}", i + 1), &sans, 365)?),
                None => None,
            };
            let peer_addr = if args.tls { peer_addr } else { addr.clone() };
            Ok(DevNode {
                addr,
                peer_addr,
                cert,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let peers = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}={}", i + 1, n.peer_addr))
        .collect::<Vec<_>>()
        .join(",");
    let exe = std::env::current_exe().context("locating the raftlock binary")?;
    let mut children: Vec<Child> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let id = i + 1;
        let dir = args.data_dir.join(id.to_string());
        let mut cmd = Command::new(&exe);
        cmd.args([
            "serve",
            "--node-id",
            &id.to_string(),
            "--listen",
            &node.addr,
            "--peers",
            &peers,
        ])
        .arg("--data-dir")
        .arg(&dir)
        .args(["--cluster-secret", &secret, "--platform-token", &platform])
        // The nodes share this machine: CPUs ÷ nodes workers each (see `--worker-threads`).
        .args([
            "--worker-threads",
            &workers_per_node(nodes.len()).to_string(),
        ]);
        if let Some((cert, key)) = &node.cert {
            cmd.args(["--peer-listen", &node.peer_addr])
                .arg("--tls-cert")
                .arg(cert)
                .arg("--tls-key")
                .arg(key)
                .arg("--peer-tls-cert")
                .arg(cert)
                .arg("--peer-tls-key")
                .arg(key)
                .arg("--peer-ca")
                .arg(tls_dir.join("ca.pem"));
        }
        let child = cmd
            .env("RAFTLOCK_LOG", "warn,openraft=error")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        children.push(child);
    }
    let scheme = if args.tls { "https" } else { "http" };
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("{scheme}://{}", n.addr))
        .collect();
    let cacert = args.tls.then(|| tls_dir.join("ca.pem"));
    let stop = StopSignals::install()?;
    let result = setup(&urls, cacert.as_deref(), &platform, args.shards).await;
    match result {
        Ok(key) => print_banner(&urls, cacert.as_deref(), &platform, &key),
        Err(e) => {
            eprintln!("raftlock dev: cluster did not come up: {e:#}");
            return Err(e);
        }
    }
    stop.wait().await;
    eprintln!("stopping nodes");
    for child in &mut children {
        child.kill().await.ok();
    }
    Ok(())
}

/// Ctrl-C, SIGTERM (`kill`, a supervisor) or SIGHUP (the terminal went away): without a
/// handler the last two would end this process at once and leave its nodes running. The
/// handlers are installed before the cluster is announced, so no signal falls in between.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }
}

/// Creates the data shards the cluster does not have yet, up to `wanted`.
async fn create_shards(
    client: &reqwest::Client,
    base: &str,
    platform: &str,
    wanted: u32,
    nodes: u64,
) -> anyhow::Result<()> {
    let listed: Value = (client.get(format!("{base}/admin/v1/shards")))
        .bearer_auth(platform)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    // The meta group is listed too.
    let have = listed["shards"]
        .as_array()
        .map_or(0, |s| s.len().saturating_sub(1)) as u32;
    for index in have..wanted {
        let members = shard_members(index, nodes);
        (client.post(format!("{base}/admin/v1/shards")))
            .bearer_auth(platform)
            .json(&json!({ "members": members }))
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("creating shard {} on {members:?}", index + 1))?;
    }
    Ok(())
}

/// Waits for a leader, then creates the data shards asked for and (or reuses) project
/// `default` and a service-role key.
async fn setup(
    urls: &[String],
    cacert: Option<&std::path::Path>,
    platform: &str,
    shards: u32,
) -> anyhow::Result<String> {
    let mut client = reqwest::Client::builder();
    if let Some(path) = cacert {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
    }
    let client = client.build()?;
    let base = &urls[0];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .map(|r| r.status().is_success());
        if matches!(ready, Ok(true)) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no leader after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    create_shards(&client, base, platform, shards, urls.len() as u64).await?;
    let created = client
        .post(format!("{base}/admin/v1/projects"))
        .bearer_auth(platform)
        .json(&json!({ "name": "default" }))
        .send()
        .await?;
    if !(created.status().is_success() || created.status().as_u16() == 409) {
        bail!(
            "creating project: {} {}",
            created.status(),
            created.text().await.unwrap_or_default()
        );
    }
    let key: Value = client
        .post(format!("{base}/admin/v1/projects/default/keys"))
        .bearer_auth(platform)
        .json(&json!({ "kind": "service_role" }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    key["secret"]
        .as_str()
        .map(str::to_string)
        .context("no secret in key answer")
}

fn print_banner(urls: &[String], cacert: Option<&std::path::Path>, platform: &str, key: &str) {
    println!("raftlock dev cluster is up ({} nodes)", urls.len());
    for (i, url) in urls.iter().enumerate() {
        println!("  node {}: {url}", i + 1);
    }
    println!("platform token:            {platform}");
    println!("project `default` key:     {key}");
    let curl = match cacert {
        Some(ca) => {
            println!(
                "CA certificate:            {} (--cacert, RAFTLOCK_CACERT)",
                ca.display()
            );
            format!("curl -s --cacert {}", ca.display())
        }
        None => "curl -s".to_string(),
    };
    println!();
    println!("try it:");
    println!(
        "  {curl} -X POST {}/locks/my-job/lease -H 'Authorization: Bearer {key}' \\\n    -H \"X-Volcano-Lock-Token: $(cat /proc/sys/kernel/random/uuid)\" -H 'Content-Type: application/json' -d '{{\"ttl_seconds\":30}}'",
        urls[0]
    );
    println!(
        "  {curl} {}/locks/my-job -H 'Authorization: Bearer {key}'",
        urls[urls.len() - 1]
    );
    println!();
    println!("Ctrl-C stops the cluster (data stays in the data directory).");
}

/// Worker threads for each of `nodes` nodes sharing this machine: CPUs ÷ nodes, at least 1.
fn workers_per_node(nodes: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus / nodes.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_shards_take_three_consecutive_nodes() {
        assert_eq!(shard_members(0, 6), vec![1, 2, 3]);
        assert_eq!(shard_members(1, 6), vec![4, 5, 6]);
        assert_eq!(shard_members(2, 3), vec![1, 2, 3]);
        assert_eq!(shard_members(1, 5), vec![4, 5, 1]);
        assert_eq!(shard_members(1, 2), vec![2]);
    }
}
