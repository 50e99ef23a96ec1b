//! `--peer-listen`: node-to-node traffic on its own listener, refused on the
//! client one, and never queued behind clients.

use std::time::Duration;

use anyhow::Result;
use raftlock_tests::{token, Cluster, Locks};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_use_their_own_listener_and_clients_cannot_starve_raft() -> Result<()> {
    // A small connection cap per listener, so the client side is easy to fill.
    let (cluster, peer_addrs) =
        Cluster::start_with_peer_listeners(3, &["--max-connections", "64"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let via_follower = Locks::new(&cluster, follower, &key);
    assert_eq!(
        via_follower.acquire("a", &token(), 30).await?.status,
        200,
        "forwarded over the peer listener"
    );

    // The client listener refuses node-to-node routes and forwarded requests.
    let http = reqwest::Client::new();
    let raft = http
        .get(cluster.url(leader, "/internal/raft/stream"))
        .body(Vec::<u8>::new())
        .send()
        .await?;
    assert_eq!(raft.status(), 404, "Raft RPC on the client listener");
    let hop = http
        .get(cluster.url(leader, "/locks/a"))
        .header("x-raftlock-hops", "1")
        .bearer_auth(&key)
        .send()
        .await?;
    assert_eq!(
        hop.status(),
        404,
        "a forwarded request on the client listener"
    );
    // ... and the peer listener serves them (a stream without the secret is refused, not 404).
    let peer_vote = http
        .get(format!(
            "http://{}/internal/raft/stream",
            peer_addrs[&leader]
        ))
        .body(Vec::<u8>::new())
        .send()
        .await?;
    assert_ne!(peer_vote.status(), 404);

    starve_clients_then_restart_a_follower(cluster, &key, leader, follower).await
}

/// With one listener for clients and peers, the same: the leader's client slots full of
/// blocking waits, a restarted follower still reaches the leader — on the connections kept
/// past `--max-connections` for peers — catches up and serves, with no election. (Before
/// that reserve its forwards queued behind the waits and timed out: seen failing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_listener_clients_cannot_starve_raft_either() -> Result<()> {
    let cluster = Cluster::start_with(3, &["--max-connections", "64"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    starve_clients_then_restart_a_follower(cluster, &key, leader, follower).await
}

/// Fills the leader's client slots with clients that legitimately hold their connections
/// (blocking acquires waiting on a held lock; idle sockets would be closed by the header
/// timeout), restarts `follower`, and checks that it serves and catches up without an
/// election.
async fn starve_clients_then_restart_a_follower(
    mut cluster: Cluster,
    key: &str,
    leader: u64,
    follower: u64,
) -> Result<()> {
    let http = reqwest::Client::new();
    let witness = cluster.other_than(&[leader, follower]);
    let term = cluster.metric(witness, "raftlock_raft_term").await;
    let direct = Locks::new(&cluster, leader, key);
    let ok = |r: raftlock_tests::Answer| {
        assert_eq!(r.status, 200, "{r:?}");
        r.body
    };
    ok(direct
        .rpc("CreateNamespace", json!({ "name": "ns" }))
        .await?);
    let lease = |p: &str| json!({ "namespace_name": "ns", "process_id": p, "ttl_seconds": 120 });
    let holder =
        ok(direct.rpc("CreateLockLease", lease("holder")).await?)["lease"]["lease_id"].clone();
    let held = json!({ "namespace_name": "ns", "lock_name": "top", "lease_id": holder, "exclusive": true });
    ok(direct.rpc("AcquireLock", held).await?);
    // Two waiting leases: a lease may queue at most 64 waits.
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let waiter = ok(direct.rpc("CreateLockLease", lease("waiter")).await?);
        waiters.push(waiter["lease"]["lease_id"].clone());
    }
    let url = cluster.url(leader, "/v1beta/AcquireLock");
    let mut waits = Vec::new();
    for i in 0..80 {
        let body = json!({ "namespace_name": "ns", "lock_name": format!("top/{i}"), "lease_id": waiters[i / 40], "exclusive": true, "timeout_seconds": 60 });
        let req = http.post(&url).bearer_auth(key).json(&body);
        waits.push(tokio::spawn(
            async move { req.send().await.map(|r| r.status()) },
        ));
    }
    // Saturated: the leader's client listener takes no new connection.
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(0) // a new connection per probe
        .timeout(Duration::from_millis(500))
        .build()?;
    let health = cluster.url(leader, "/healthz");
    // (A new connection then waits in the accept queue, or lands on the peers' reserve,
    // which answers a client 503 at once.)
    raftlock_tests::eventually(Duration::from_secs(10), "client listener full", || async {
        let refused = match probe.get(&health).send().await {
            Err(_) => true,
            Ok(r) => r.status() == 503,
        };
        refused.then_some(())
    })
    .await?;
    // A follower restarted now needs new connections to the leader (pre-vote, forwards):
    // they go to the leader's peer listener, which the hogs cannot reach. (With one listener
    // for both, its forwards queue behind the hogs and time out: seen failing.)
    cluster.kill(follower);
    cluster.restart(follower)?;
    let via_follower = Locks::new(&cluster, follower, key);
    raftlock_tests::eventually(
        Duration::from_secs(10),
        "restarted follower serving",
        || async {
            let r = via_follower.read("a").await.ok()?;
            (r.status == 200).then_some(())
        },
    )
    .await?;
    // And the leader reaches the restarted node's peer listener: it catches up.
    let target = cluster
        .metric(witness, "raftlock_raft_last_log_index")
        .await
        .unwrap_or(0.0);
    raftlock_tests::eventually(
        Duration::from_secs(10),
        "restarted follower caught up",
        || async {
            let applied = cluster
                .metric(follower, "raftlock_raft_applied_index")
                .await?;
            (applied >= target).then_some(())
        },
    )
    .await?;
    for i in 0..20 {
        let r = via_follower.acquire(&format!("k{i}"), &token(), 30).await?;
        assert_eq!(r.status, 200, "{r:?}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // many heartbeats and election timeouts
    assert_eq!(
        cluster.wait_for_leader(Duration::from_secs(1)).await?,
        leader
    );
    assert_eq!(
        cluster.metric(leader, "raftlock_raft_term").await,
        term,
        "no election"
    );
    for w in waits {
        w.abort();
    }
    Ok(())
}

/// Raft RPCs ride on kept-open peer streams: hundreds of replicated writes (each several
/// appends per follower) open no new stream once replication runs, and linearizable reads
/// (each a read-index confirmation on a connection openraft makes afresh) only a few.
#[tokio::test]
async fn writes_and_reads_reuse_the_open_peer_streams() -> Result<()> {
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let api = Locks::new(&cluster, leader, &key);
    assert_eq!(api.acquire("warm", &token(), 30).await?.status, 200);
    let opened = |id| cluster.metric(id, "raftlock_peer_streams_opened_total");
    let before = opened(leader).await.expect("the leader counts its streams");
    assert!(before >= 2.0, "one stream per follower at least: {before}");
    for i in 0..300 {
        assert_eq!(
            api.acquire(&format!("k{i}"), &token(), 30).await?.status,
            200
        );
    }
    assert_eq!(
        opened(leader).await,
        Some(before),
        "300 writes opened new peer streams"
    );
    // Replication and read-index confirmations (on connections openraft makes afresh, and
    // left running to the slower follower after the quorum answered) each take a stream per
    // follower at times, so the pool grows to what runs at once. Allowing for a follower that
    // lags for a while on a loaded machine: far fewer than one per read (before the pool, 2
    // new connections per read: 344 here). Reads of one project are rate-limited; these stay
    // under the default limit.
    for _ in 0..170 {
        let read = api.read("warm").await?;
        assert_eq!(read.status, 200, "{read:?}");
    }
    let after = opened(leader).await.expect("counted");
    assert!(
        after <= before + 30.0,
        "{after} peer streams opened (from {before}) for 2 followers by 170 reads"
    );
    for follower in cluster.ids().into_iter().filter(|id| *id != leader) {
        let served = cluster.metric(follower, "raftlock_peer_streams").await;
        assert!(
            served >= Some(1.0),
            "node {follower} serves the leader's stream: {served:?}"
        );
    }
    Ok(())
}
