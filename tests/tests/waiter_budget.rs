//! Memory: a project that tries to open 100,000 blocking waits gets
//! `resource_exhausted` past its budget, the refused attempts write nothing to the log, and
//! the leader's memory stays under a stated bound.
//!
//! Its own test binary: it holds ~4,600 sockets open (see `connections.rs`). The nodes run
//! the release build ([`raftlock_tests::release_binary`]): the bound is the shipped binary's
//! (a debug build's futures make a pending wait ~85 KB of heap instead of ~45 KB).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use raftlock_core::hierarchy::{MAX_WAITERS_PER_LEASE, MAX_WAITERS_PER_PROJECT};
use raftlock_tests::{raise_fd_limit, Cluster, Locks};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

fn attempts() -> usize {
    std::env::var("WAIT_ATTEMPTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}
/// Bound on the leader's resident memory with the budget full (stated in
/// docs/operations.md, *Budgets*).
const LEADER_RSS_BOUND_MB: u64 = 256;

fn rss_mb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .context("VmRSS")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kb / 1024)
}

async fn rpc_ok(api: &Locks, method: &str, body: Value) -> Result<Value> {
    let r = api.rpc(method, body).await?;
    anyhow::ensure!(r.status == 200, "{method}: {r:?}");
    Ok(r.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_opening_100k_blocking_waits_is_held_to_its_budget() -> Result<()> {
    raise_fd_limit(16_384);
    let cluster = Cluster::start_release(3).await?;
    let key = cluster.project_key("greedy", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let api = Locks::new(&cluster, leader, &key);
    rpc_ok(&api, "CreateNamespace", json!({ "name": "ns" })).await?;
    let lease = |body: Value| rpc_ok(&api, "CreateLockLease", body);
    let holder = lease(json!({ "namespace_name": "ns", "process_id": "h", "ttl_seconds": 300 }))
        .await?["lease"]["lease_id"]
        .as_str()
        .context("lease id")?
        .to_string();
    let held = rpc_ok(&api, "AcquireLock", json!({ "namespace_name": "ns", "lock_name": "top", "lease_id": holder, "exclusive": true })).await?;
    assert_eq!(held["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    // Enough leases that the per-lease budget is not what stops them.
    let n_leases = MAX_WAITERS_PER_PROJECT / MAX_WAITERS_PER_LEASE + 8;
    let mut leases = Vec::new();
    for i in 0..n_leases {
        let body =
            json!({ "namespace_name": "ns", "process_id": format!("w{i}"), "ttl_seconds": 300 });
        leases.push(
            lease(body).await?["lease"]["lease_id"]
                .as_str()
                .context("id")?
                .to_string(),
        );
    }
    let pid = cluster.pid(leader).context("leader pid")?;
    let rss_before = rss_mb(pid)?;
    let wal_before = cluster
        .metric(leader, "raftlock_wal_bytes_total")
        .await
        .context("wal")?;
    let index_before = cluster
        .metric(leader, "raftlock_raft_last_log_index")
        .await
        .context("index")?;

    // Kept-alive connections: a refused attempt's connection carries the next attempt, so
    // ~4,600 sockets serve all 100,000 (fresh ones for each churned ephemeral ports and the
    // listener's backlog: connects timed out on a loaded machine, and the test measured its
    // speed instead of the budget).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        // Below the node's 10 s idle close, so a kept connection is never reused as it closes.
        .pool_idle_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(300))
        .build()?;
    let url = cluster.url(leader, "/v1beta/AcquireLock");
    // The queued waits must outlast the refusals of every other attempt (87 s for 100,000 on
    // a loaded CI machine; a 60 s wait once timed out first): the longest wait the API takes.
    // Every queued wait holds a request open; the rest of the permits churn through refusals.
    let permits = Arc::new(Semaphore::new(MAX_WAITERS_PER_PROJECT + 512));
    let (refused, other) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let mut waits = Vec::new();
    let attempts = attempts();
    for i in 0..attempts {
        let permit = permits.clone().acquire_owned().await?;
        let (http, url, key) = (http.clone(), url.clone(), key.clone());
        let lease = leases[i % leases.len()].clone();
        let (refused, other) = (refused.clone(), other.clone());
        waits.push(tokio::spawn(async move {
            let body = json!({ "namespace_name": "ns", "lock_name": format!("top/{i}"), "lease_id": lease, "exclusive": true, "timeout_seconds": 300 });
            let r = http.post(&url).bearer_auth(&key).json(&body).send().await;
            match r {
                Ok(r) if r.status() == 429 => {
                    let retry_after = r.headers().contains_key("retry-after");
                    let body: Value = r.json().await.unwrap_or_default();
                    if body["code"] == "resource_exhausted" && retry_after {
                        refused.fetch_add(1, Ordering::Relaxed);
                    } else if other.fetch_add(1, Ordering::Relaxed) < 5 {
                        eprintln!("unexpected 429: {body}");
                    }
                }
                r => {
                    if other.fetch_add(1, Ordering::Relaxed) < 5 {
                        match r {
                            Ok(r) => eprintln!("unexpected: {} {:?}", r.status(), r.text().await),
                            Err(e) => eprintln!("unexpected: {e:?}"),
                        }
                    }
                }
            }
            drop(permit);
        }));
    }
    // All attempts sent: the budget's worth are waiting, everything else was refused.
    let want_refused = (attempts - MAX_WAITERS_PER_PROJECT) as u64;
    let answered = || refused.load(Ordering::Relaxed) + other.load(Ordering::Relaxed);
    raftlock_tests::eventually(Duration::from_secs(240), "refusals", || async {
        (answered() >= want_refused).then_some(())
    })
    .await?;
    let elapsed = started.elapsed();
    let queued = cluster
        .metric(leader, "raftlock_queued_waiters")
        .await
        .unwrap_or(0.0) as usize;
    let rss_full = rss_mb(pid)?;
    let heap_full = cluster
        .metric(leader, "raftlock_heap_live_bytes")
        .await
        .unwrap_or(0.0) as u64
        >> 20;
    let connections = cluster
        .metric(leader, "raftlock_http_connections")
        .await
        .unwrap_or(0.0);
    let index_after = cluster
        .metric(leader, "raftlock_raft_last_log_index")
        .await
        .context("index")?;
    let entries = (index_after - index_before) as usize;
    let wal_bytes = cluster
        .metric(leader, "raftlock_wal_bytes_total")
        .await
        .context("wal")?
        - wal_before;
    println!(
        "{attempts} blocking acquires in {elapsed:.1?}: {} refused (resource_exhausted + Retry-After), {} other, {queued} queued; \
         log +{entries} entries, +{wal_bytes} WAL bytes; leader RSS {rss_before} MB -> {rss_full} MB (heap {heap_full} MiB, {connections} connections)",
        refused.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed)
    );
    assert_eq!(
        other.load(Ordering::Relaxed),
        0,
        "every answer so far is a budget refusal"
    );
    assert_eq!(refused.load(Ordering::Relaxed), want_refused);
    assert_eq!(queued, MAX_WAITERS_PER_PROJECT);
    // Each queued wait is one op of ~100 bytes in the WAL. Refused ones would add as much
    // again each, batched into few entries — so the bytes, not the entry count, tell.
    assert!(entries <= MAX_WAITERS_PER_PROJECT, "+{entries} entries");
    let budget = (MAX_WAITERS_PER_PROJECT * 400) as f64;
    assert!(
        wal_bytes <= budget,
        "refused waits reached the log: +{wal_bytes} WAL bytes > {budget}"
    );
    assert!(
        rss_full <= LEADER_RSS_BOUND_MB,
        "leader RSS {rss_full} MB > {LEADER_RSS_BOUND_MB} MB"
    );
    // A wait of another project is unaffected.
    let other_key = cluster.project_key("modest", "service_role", &[]).await?;
    let modest = Locks::new(&cluster, leader, &other_key);
    rpc_ok(&modest, "CreateNamespace", json!({ "name": "ns" })).await?;
    let l = rpc_ok(
        &modest,
        "CreateLockLease",
        json!({ "namespace_name": "ns", "process_id": "m", "ttl_seconds": 60 }),
    )
    .await?;
    let r = rpc_ok(&modest, "AcquireLock", json!({ "namespace_name": "ns", "lock_name": "x", "lease_id": l["lease"]["lease_id"], "exclusive": true, "timeout_seconds": 5 })).await?;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    for w in waits {
        w.abort();
    }
    Ok(())
}
