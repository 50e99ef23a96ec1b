//! Hardening: requests refused for their shape never reach the log, so a flood of
//! bad requests cannot fill the disks.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use raftlock_tests::{Cluster, Locks};
use serde_json::{json, Value};

/// `raftlock_raft_last_log_index` of node `id`.
async fn last_log_index(cluster: &Cluster, id: u64) -> Result<u64> {
    let v = cluster
        .metric(id, "raftlock_raft_last_log_index")
        .await
        .context("the gauge")?;
    Ok(v as u64)
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        total += entry?.metadata()?.len();
    }
    Ok(total)
}

/// One bad request of each shape, in turn.
fn bad_request(i: usize) -> (&'static str, Value) {
    let big = "x".repeat(60_000);
    let many: serde_json::Map<String, Value> =
        (0..40).map(|k| (format!("k{k}"), json!("v"))).collect();
    match i % 12 {
        0 => (
            "CreateNamespace",
            json!({ "name": "ok-ns-x", "description": big }),
        ),
        1 => ("CreateNamespace", json!({ "name": "bad name!" })),
        2 => (
            "CreateNamespace",
            json!({ "name": "ok-ns-y", "metadata": many }),
        ),
        3 => (
            "UpdateNamespace",
            json!({ "name": "ns", "description": big }),
        ),
        4 => ("DeleteNamespace", json!({ "name": "" })),
        5 => (
            "CreateLockLease",
            json!({ "namespace_name": "ns", "process_id": "p", "ttl_seconds": 0 }),
        ),
        6 => (
            "CreateLockLease",
            json!({ "namespace_name": "ns", "process_id": "", "ttl_seconds": 10 }),
        ),
        7 => (
            "RefreshLockLease",
            json!({ "namespace_name": "ns", "lease_id": "l", "ttl_seconds": 100000 }),
        ),
        8 => (
            "AcquireLock",
            json!({ "namespace_name": "ns", "lock_name": "//bad", "lease_id": "l" }),
        ),
        9 => (
            "AcquireLock",
            json!({ "namespace_name": "ns", "lock_name": "a/b", "lease_id": "l",
                                      "timeout_seconds": 5, "metadata": many }),
        ),
        10 => (
            "ReleaseLock",
            json!({ "namespace_name": "bad name", "lock_name": "a", "lease_id": "l" }),
        ),
        _ => (
            "DeleteLock",
            json!({ "namespace_name": "ns", "lock_name": "" }),
        ),
    }
}

#[tokio::test]
async fn ten_thousand_invalid_requests_add_no_log_entry() -> Result<()> {
    // No ticks, so the log only grows if a request reaches it.
    let cluster = Cluster::start_with(3, &["--tick-ms", "3600000"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    assert_eq!(
        locks
            .rpc("CreateNamespace", json!({ "name": "ns" }))
            .await?
            .status,
        200
    );
    let before = last_log_index(&cluster, leader).await?;
    let sizes: Vec<u64> = cluster
        .ids()
        .iter()
        .map(|&id| dir_bytes(&cluster.data_dir(id)))
        .collect::<Result<_>>()?;

    const N: usize = 10_000;
    const WORKERS: usize = 16;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let locks = Locks::new(&cluster, cluster.ids()[w % 3], &key);
            tokio::spawn(async move {
                for i in (w..N).step_by(WORKERS) {
                    let (method, body) = bad_request(i);
                    let a = locks.rpc(method, body).await?;
                    anyhow::ensure!(
                        a.status == 400,
                        "{method} #{i}: expected 400, got {} {:?}",
                        a.status,
                        a.body
                    );
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }

    assert_eq!(
        last_log_index(&cluster, leader).await?,
        before,
        "{N} refused requests added log entries"
    );
    for (id, size) in cluster.ids().into_iter().zip(sizes) {
        let grown = dir_bytes(&cluster.data_dir(id))?.saturating_sub(size);
        assert!(
            grown < 1 << 20,
            "node {id}'s data directory grew {grown} bytes"
        );
    }
    Ok(())
}

/// Compaction by replay time: with the entry-count and size thresholds far away, a log that
/// took `--snapshot-replay-ms` to apply gets a snapshot, so a restart never replays more.
#[tokio::test]
async fn a_log_that_took_the_replay_budget_to_apply_is_snapshotted() -> Result<()> {
    let cluster = Cluster::start_with(
        1,
        &[
            "--snapshot-logs",
            "1000000",
            "--snapshot-bytes",
            "1073741824",
            "--snapshot-replay-ms",
            "1",
        ],
    )
    .await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    let built = raftlock_tests::eventually(Duration::from_secs(30), "a snapshot", || async {
        // Each acquire is applied; a millisecond of applying comes within some dozens (paced
        // by the polling, under the project's rate limit).
        for _ in 0..5 {
            let token = raftlock_tests::token();
            let r = locks.acquire(&format!("replay-{token}"), &token, 60).await;
            let r = r.expect("an answer");
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        cluster
            .metric(leader, "raftlock_snapshots_by_replay_total")
            .await
            .filter(|n| *n >= 1.0)
    })
    .await?;
    println!("snapshots asked for by replay time: {built}");
    Ok(())
}

/// Compaction by size: with an entry-count threshold far away, a log that grows past
/// `--snapshot-bytes` still gets a snapshot (so its segments can be purged).
#[tokio::test]
async fn a_log_grown_past_snapshot_bytes_is_snapshotted() -> Result<()> {
    let cluster = Cluster::start_with(
        1,
        &["--snapshot-logs", "1000000", "--snapshot-bytes", "1048576"],
    )
    .await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    assert_eq!(
        locks
            .rpc("CreateNamespace", json!({ "name": "big" }))
            .await?
            .status,
        200
    );
    // ~11 KB of metadata per update (the most a namespace may carry), 300 updates: ~3 MB.
    let metadata: serde_json::Map<String, Value> = (0..32)
        .map(|i| (format!("{i:0>100}"), Value::String("v".repeat(250))))
        .collect();
    for version in 1..=300 {
        let r = locks
            .rpc(
                "UpdateNamespace",
                json!({ "name": "big", "description": "d", "metadata": metadata, "expected_version": version }),
            )
            .await?;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    let built = raftlock_tests::eventually(Duration::from_secs(15), "a snapshot", || async {
        cluster
            .metric(leader, "raftlock_snapshots_by_size_total")
            .await
            .filter(|n| *n >= 1.0)
    })
    .await?;
    println!("snapshots asked for by size: {built}");
    raftlock_tests::eventually(Duration::from_secs(15), "the snapshot file", || async {
        cluster
            .data_dir(leader)
            .join("snapshot")
            .exists()
            .then_some(())
    })
    .await?;
    Ok(())
}
