//! Backup and restore from outside: `raftlock snapshot save` from a loaded cluster, every node
//! destroyed, `raftlock snapshot restore` into a new 3-node cluster, and everything checked.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};
use raftlock_tests::{binary, eventually, token, Cluster, Locks};
use serde_json::{json, Value};

/// Runs the `raftlock` CLI; returns stdout, or the failure with stderr.
fn cli(args: &[&str]) -> Result<String> {
    let out = Command::new(binary()).args(args).output()?;
    if !out.status.success() {
        bail!(
            "raftlock {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn endpoints(cluster: &Cluster) -> String {
    cluster
        .ids()
        .iter()
        .map(|id| cluster.addr(*id))
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_cluster_has_every_lock_lease_namespace_key_and_waiter_and_higher_tokens(
) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cluster.backup");
    let mut tokens = Vec::new();
    let (key, scoped, ns_lease, waiter_lease, old_cluster_id);
    {
        let cluster = Cluster::start(3).await?;
        key = cluster.project_key("acme", "service_role", &[]).await?;
        scoped = cluster
            .project_key("acme", "scoped", &["locks.manage"])
            .await?;
        cluster.lift_rate_limit("acme").await?;
        let locks = Locks::new(&cluster, 1, &key);
        for i in 0..20 {
            let t = token();
            let got = locks.acquire(&format!("job-{i}"), &t, 300).await?;
            assert_eq!(got.status, 200);
            tokens.push((format!("job-{i}"), t, got.fencing()));
        }
        // Hierarchical: a namespace, two leases, a shared and an exclusive hold, and a third
        // call queued behind the exclusive one.
        assert_eq!(
            locks
                .rpc(
                    "CreateNamespace",
                    json!({ "name": "Jobs", "description": "d" })
                )
                .await?
                .status,
            200
        );
        let lease = |process: &'static str| {
            let locks = locks.clone();
            async move {
                let r = locks
                    .rpc("CreateLockLease", json!({ "namespace_name": "Jobs", "process_id": process, "ttl_seconds": 300 }))
                    .await?;
                anyhow::ensure!(r.status == 200, "{r:?}");
                Ok::<_, anyhow::Error>(r.body["lease"]["lease_id"].as_str().unwrap().to_string())
            }
        };
        ns_lease = lease("worker-1").await?;
        waiter_lease = lease("worker-2").await?;
        for (name, exclusive) in [("reports", false), ("reports/daily", true)] {
            let r = locks
                .rpc("AcquireLock", json!({ "namespace_name": "Jobs", "lock_name": name, "exclusive": exclusive, "lease_id": ns_lease }))
                .await?;
            assert_eq!(r.body["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{r:?}");
        }
        let blocked = {
            let locks = locks.clone();
            let lease = waiter_lease.clone();
            tokio::spawn(async move {
                locks
                    .rpc("AcquireLock", json!({ "namespace_name": "Jobs", "lock_name": "reports/daily", "exclusive": true, "lease_id": lease, "timeout_seconds": 120 }))
                    .await
            })
        };
        eventually(Duration::from_secs(10), "the waiter queued", || async {
            let n = cluster.metric(1, "raftlock_queued_waiters").await?;
            (n >= 1.0).then_some(())
        })
        .await?;

        let saved = cli(&[
            "snapshot",
            "save",
            file.to_str().unwrap(),
            "--endpoints",
            &endpoints(&cluster),
            "--platform-token",
            &cluster.platform,
            "--json",
        ])?;
        let saved: Value = serde_json::from_str(&saved)?;
        assert!(saved["index"].as_u64().unwrap() > 0, "{saved}");
        blocked.abort();
        old_cluster_id = cluster.view(1).await.unwrap()["cluster_id"].clone();
        // `cluster` is dropped here: every node killed, every data directory deleted.
    }

    let inspected: Value = serde_json::from_str(&cli(&[
        "snapshot",
        "inspect",
        file.to_str().unwrap(),
        "--json",
    ])?)?;
    let counts = &inspected["counts"];
    assert_eq!(counts["projects"], 1, "{inspected}");
    assert_eq!(counts["keys"], 2, "{inspected}");
    assert_eq!(counts["project_locks"], 20, "{inspected}");
    assert_eq!(
        (counts["namespaces"].as_u64(), counts["leases"].as_u64()),
        (Some(1), Some(2)),
        "{inspected}"
    );
    assert_eq!(
        (counts["held_locks"].as_u64(), counts["waiters"].as_u64()),
        (Some(2), Some(1)),
        "{inspected}"
    );

    // A damaged file is refused by restore, naming the problem, and writes nothing.
    let mut damaged = std::fs::read(&file)?;
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    let bad = dir.path().join("damaged.backup");
    std::fs::write(&bad, damaged)?;
    let target = dir.path().join("never");
    let err = cli(&[
        "snapshot",
        "restore",
        bad.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
        "--node-id",
        "1",
        "--peers",
        "1=127.0.0.1:1",
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("damaged"), "{err}");
    assert!(!target.join("snapshot").exists());

    let restore = |id: u64, data_dir: &Path, peers: &str| -> Result<()> {
        cli(&[
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--node-id",
            &id.to_string(),
            "--peers",
            peers,
        ])?;
        Ok(())
    };
    let cluster = Cluster::start_prepared(3, &restore).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let follower = cluster.other_than(&[leader]);
    let locks = Locks::new(&cluster, follower, &key);
    for (name, _, fencing) in &tokens {
        let r = locks.read(name).await?;
        assert_eq!(
            (r.status, r.body["fencing_token"].as_u64()),
            (200, Some(*fencing)),
            "{name}: {r:?}"
        );
    }
    // The old owner still owns its lock in the restored cluster.
    let (name, t, fencing) = &tokens[3];
    let renewed = locks.renew(name, t, 300).await?;
    assert_eq!((renewed.status, renewed.fencing()), (200, *fencing));
    // Keys work, scoped ones included.
    assert_eq!(
        Locks::new(&cluster, leader, &scoped)
            .read("job-0")
            .await?
            .status,
        200
    );
    // Namespace, leases, holds and the queued waiter are back.
    let ns = locks.rpc("GetNamespace", json!({ "name": "Jobs" })).await?;
    assert_eq!(
        (ns.status, ns.body["namespace"]["description"].as_str()),
        (200, Some("d")),
        "{ns:?}"
    );
    for lease in [&ns_lease, &waiter_lease] {
        let r = locks
            .rpc(
                "GetLockLease",
                json!({ "namespace_name": "Jobs", "lease_id": lease }),
            )
            .await?;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let held = locks
        .rpc(
            "GetLock",
            json!({ "namespace_name": "Jobs", "lock_name": "reports/daily" }),
        )
        .await?;
    assert_eq!(
        held.body["lock"]["lock_holders"][0]["lease_id"].as_str(),
        Some(ns_lease.as_str()),
        "{held:?}"
    );
    let waiting = cluster.metric(leader, "raftlock_queued_waiters").await;
    assert_eq!(waiting, Some(1.0));
    // The next fencing token is above every token issued before the backup (and above any
    // the old cluster could have issued since).
    let newest = tokens.iter().map(|(_, _, f)| *f).max().unwrap();
    let fresh = locks.acquire("after-restore", &token(), 30).await?;
    assert_eq!(fresh.status, 200);
    assert!(
        fresh.fencing() > newest + 1_000_000,
        "{} vs {newest}",
        fresh.fencing()
    );
    // A new cluster id: a node of the old cluster could not talk to this one.
    let view = cluster.view(leader).await.unwrap();
    assert!(
        view["cluster_id"].is_string() && view["cluster_id"] != old_cluster_id,
        "{view}"
    );
    println!(
        "restored: leader {leader}, term {}, new token {}",
        view["term"],
        fresh.fencing()
    );
    Ok(())
}
