//! `raftlock dev` (what `make run` starts): it brings up a working cluster, and stopping it —
//! Ctrl-C, or SIGTERM from `kill` or a supervisor — stops every node it started.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use raftlock_tests::{binary, eventually};

/// Three consecutive free ports on 127.0.0.1 (`dev` puts node i on base + i - 1).
fn free_base_port() -> u16 {
    loop {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = first.local_addr().unwrap().port();
        drop(first);
        if base < 60_000 && (base..base + 3).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
}

async fn serves(http: &reqwest::Client, port: u16) -> bool {
    let url = format!("http://127.0.0.1:{port}/healthz");
    matches!(http.get(url).send().await, Ok(r) if r.status().is_success())
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
    // The banner says the cluster is up (after a leader and the `default` key exist).
    let stdout = dev.stdout.take().context("stdout")?;
    let banner = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("cluster is up"))
    });
    let up = tokio::time::timeout(Duration::from_secs(60), banner).await;
    ensure!(
        matches!(up, Ok(Ok(Some(_)))),
        "raftlock dev did not come up"
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    for port in base..base + 3 {
        ensure!(serves(&http, port).await, "node on {port} is not serving");
    }

    // SAFETY: plain kill(2) on a child we started and have not reaped.
    let rc = unsafe { libc::kill(dev.id() as libc::pid_t, signal) };
    ensure!(rc == 0, "kill failed");
    let status = tokio::task::spawn_blocking(move || dev.wait()).await??;
    ensure!(status.success(), "raftlock dev exited with {status}");
    eventually(Duration::from_secs(10), "every dev node stopped", || {
        let http = http.clone();
        async move {
            for port in base..base + 3 {
                if serves(&http, port).await {
                    return None;
                }
            }
            Some(())
        }
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
