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
    let addrs: Vec<String> = (0..args.nodes)
        .map(|i| format!("127.0.0.1:{}", args.base_port + i as u16))
        .collect();
    let peers = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let exe = std::env::current_exe().context("locating the raftlock binary")?;
    let mut children: Vec<Child> = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let id = i + 1;
        let dir = args.data_dir.join(id.to_string());
        let child = Command::new(&exe)
            .args([
                "serve",
                "--node-id",
                &id.to_string(),
                "--listen",
                addr,
                "--peers",
                &peers,
            ])
            .arg("--data-dir")
            .arg(&dir)
            .args(["--cluster-secret", &secret, "--platform-token", &platform])
            .env("RAFTLOCK_LOG", "warn,openraft=error")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        children.push(child);
    }
    let result = setup(&addrs, &platform).await;
    match result {
        Ok(key) => print_banner(&addrs, &platform, &key),
        Err(e) => {
            eprintln!("raftlock dev: cluster did not come up: {e:#}");
            return Err(e);
        }
    }
    tokio::signal::ctrl_c().await.ok();
    eprintln!("stopping nodes");
    for child in &mut children {
        child.kill().await.ok();
    }
    Ok(())
}

/// Waits for a leader, then creates (or reuses) project `default` and a service-role key.
async fn setup(addrs: &[String], platform: &str) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let base = format!("http://{}", addrs[0]);
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

fn print_banner(addrs: &[String], platform: &str, key: &str) {
    println!("raftlock dev cluster is up ({} nodes)", addrs.len());
    for (i, a) in addrs.iter().enumerate() {
        println!("  node {}: http://{a}", i + 1);
    }
    println!("platform token:            {platform}");
    println!("project `default` key:     {key}");
    println!();
    println!("try it:");
    println!(
        "  curl -s -X POST http://{}/locks/my-job/lease -H 'Authorization: Bearer {key}' \\\n    -H \"X-Volcano-Lock-Token: $(cat /proc/sys/kernel/random/uuid)\" -H 'Content-Type: application/json' -d '{{\"ttl_seconds\":30}}'",
        addrs[0]
    );
    println!(
        "  curl -s http://{}/locks/my-job -H 'Authorization: Bearer {key}'",
        addrs[addrs.len() - 1]
    );
    println!();
    println!("Ctrl-C stops the cluster (data stays in the data directory).");
}
