//! A node held to its CPU quota says so (`raftlock_cpu_quota_held`), which is the proposer's
//! cue to linger for fuller log entries (docs/architecture.md, *Group commit*); a node
//! without a quota never does, however busy.
//!
//! The quota is a real cgroup of the node's own (cgroup v1 `cpu` or v2), as `docker --cpus`
//! or a Kubernetes CPU limit makes; where this machine does not let the test make one, it
//! says so and checks only the unconstrained half.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use raftlock_tests::{eventually, Cluster, Locks};
use serde_json::json;

/// A cgroup holding one process to `cpus` of a core; the process goes back to the root
/// cgroup and the cgroup is removed on drop.
struct CpuCap {
    dir: PathBuf,
    root: PathBuf,
    pid: u32,
}

/// Whether cgroup v2 is mounted at the usual place (else v1's `cpu` hierarchy is used).
fn unified() -> bool {
    std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// Whether the cgroup this test runs in (a container's, say) already has a CPU quota: then
/// the node it starts is held to one from the start.
fn under_a_quota_already() -> bool {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    if unified() {
        let max = read("/sys/fs/cgroup/cpu.max");
        !max.is_empty() && !max.trim_start().starts_with("max")
    } else {
        read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
            .trim()
            .parse::<i64>()
            .unwrap_or(-1)
            > 0
    }
}

impl CpuCap {
    fn new(pid: u32, cpus: f64) -> Option<CpuCap> {
        let period: u64 = 10_000;
        let quota = (cpus * period as f64) as u64;
        let root = PathBuf::from(if unified() {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/cpu"
        });
        let dir = root.join(format!("raftlock-test-quota-{pid}"));
        std::fs::create_dir_all(&dir).ok()?;
        // From here the directory is removed on drop, whatever fails next.
        let cap = CpuCap { dir, root, pid };
        let limits = if unified() {
            std::fs::write(cap.dir.join("cpu.max"), format!("{quota} {period}"))
        } else {
            std::fs::write(cap.dir.join("cpu.cfs_period_us"), period.to_string())
                .and_then(|()| std::fs::write(cap.dir.join("cpu.cfs_quota_us"), quota.to_string()))
        };
        limits.ok()?;
        std::fs::write(cap.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(cap)
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let _ = std::fs::write(self.root.join("cgroup.procs"), self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Writes as fast as `writers` callers can, until `stop`.
fn load(api: Locks, writers: usize, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..writers)
        .map(|w| {
            let (api, stop) = (api.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let body = json!({ "namespace_name": "ns", "process_id": format!("w{w}-{i}"), "ttl_seconds": 60 });
                    let _ = api.rpc("CreateLockLease", body).await;
                    i += 1;
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_held_to_its_cpu_quota_says_so_and_one_without_does_not() -> Result<()> {
    let cluster = Cluster::start(1).await?;
    let node = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let key = cluster.project_key("quota", "service_role", &[]).await?;
    let api = Locks::new(&cluster, node, &key);
    let created = api.rpc("CreateNamespace", json!({ "name": "ns" })).await?;
    anyhow::ensure!(created.status == 200, "{created:?}");
    let held = || async { cluster.metric(node, "raftlock_cpu_quota_held").await };

    // Busy without a quota: never held.
    let stop = Arc::new(AtomicBool::new(false));
    let writers = load(api.clone(), 32, stop.clone());
    if under_a_quota_already() {
        eprintln!("this test runs under a CPU quota already; the unconstrained half skipped");
    } else {
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert_eq!(held().await, Some(0.0), "no quota, yet held to one");
        }
    }

    let pid = cluster.pid(node).context("node pid")?;
    let Some(cap) = CpuCap::new(pid, 0.1) else {
        eprintln!("this machine does not let the test make a cgroup; the quota half skipped");
        stop.store(true, Ordering::Relaxed);
        return Ok(());
    };
    eventually(
        Duration::from_secs(20),
        "the node says it is held",
        || async { (held().await == Some(1.0)).then_some(()) },
    )
    .await?;

    // The quota lifted: no longer held, under the same load.
    drop(cap);
    eventually(
        Duration::from_secs(20),
        "the node no longer held",
        || async { (held().await == Some(0.0)).then_some(()) },
    )
    .await?;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await?;
    }
    Ok(())
}
