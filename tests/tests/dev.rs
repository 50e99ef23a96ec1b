//! `raftlock dev` (what `make run` starts): it brings up a working cluster, and stopping it —
//! Ctrl-C, or SIGTERM from `kill` or a supervisor — stops every node it started.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use raftlock_tests::{binary, eventually};

/// Three consecutive free ports on 127.0.0.1 (`dev` puts node i on base + i - 1), below the
/// kernel's ephemeral range (32768+), so no outgoing connection takes one before `dev` binds it.
fn free_base_port() -> u16 {
    use rand::Rng;
    loop {
        let base = rand::thread_rng().gen_range(15_000..30_000);
        if (base..base + 3).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
}

/// Sends SIGTERM to a `dev` process left running by a failed assertion, so its nodes stop.
struct TermOnDrop(Option<u32>);

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
    }
}

/// How many of the three dev nodes answer `/healthz`.
async fn serving(http: &reqwest::Client, base: u16) -> usize {
    let mut up = 0;
    for port in base..base + 3 {
        let url = format!("http://127.0.0.1:{port}/healthz");
        up += usize::from(matches!(http.get(url).send().await, Ok(r) if r.status().is_success()));
    }
    up
}

async fn dev_cluster_stops_on(signal: libc::c_int) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let base = free_base_port();
    let mut dev = Command::new(binary())
        .args(["dev", "--nodes", "3", "--platform-token", "dev-test-token"])
        .arg("--base-port")
        .arg(base.to_string())
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting raftlock dev")?;
    let mut guard = TermOnDrop(Some(dev.id()));
    // The banner says the cluster is up (after a leader and the `default` key exist). The
    // pipe is read to its end, so the rest of the banner never meets a closed pipe.
    let stdout = dev.stdout.take().context("stdout")?;
    let (up_tx, up_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut up_tx = Some(up_tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("cluster is up") {
                if let Some(tx) = up_tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    let up = tokio::time::timeout(Duration::from_secs(60), up_rx).await;
    ensure!(matches!(up, Ok(Ok(()))), "raftlock dev did not come up");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    // The banner needs a quorum, not every node: the last one may still be starting.
    eventually(Duration::from_secs(10), "every dev node serving", || {
        let http = http.clone();
        async move { (serving(&http, base).await == 3).then_some(()) }
    })
    .await?;

    // SAFETY: plain kill(2) on a child we started and have not reaped.
    let rc = unsafe { libc::kill(dev.id() as libc::pid_t, signal) };
    ensure!(rc == 0, "kill failed");
    let status = tokio::task::spawn_blocking(move || dev.wait()).await??;
    guard.0 = None;
    ensure!(status.success(), "raftlock dev exited with {status}");
    eventually(Duration::from_secs(10), "every dev node stopped", || {
        let http = http.clone();
        async move { (serving(&http, base).await == 0).then_some(()) }
    })
    .await
}

#[tokio::test]
async fn sigterm_stops_every_node() -> Result<()> {
    dev_cluster_stops_on(libc::SIGTERM).await
}

#[tokio::test]
async fn ctrl_c_stops_every_node() -> Result<()> {
    dev_cluster_stops_on(libc::SIGINT).await
}
