//! Faults on a 3-node cluster: leader kill, loss of quorum, full restart.

use std::time::{Duration, Instant};

use raftlock_tests::{eventually, token, Cluster, Locks};

#[tokio::test]
async fn killing_the_leader_keeps_the_lock_and_a_new_leader_serves_within_3s() -> anyhow::Result<()>
{
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    let t = token();
    let held = locks.acquire("survivor", &t, 60).await?;
    assert_eq!(held.status, 200);

    cluster.kill(leader);
    let killed_at = Instant::now();
    let survivor = locks.on(&cluster, cluster.other_than(&[leader]));
    let read = eventually(
        Duration::from_secs(3),
        "a new leader to serve a read",
        || async {
            let r = survivor.read("survivor").await.ok()?;
            (r.status == 200).then_some(r)
        },
    )
    .await?;
    println!("failover read served after {:?}", killed_at.elapsed());
    assert_eq!(read.body["held"], true);
    assert_eq!(
        read.body["fencing_token"].as_u64(),
        Some(held.fencing()),
        "same fencing token"
    );
    assert_eq!(
        survivor.renew("survivor", &t, 60).await?.status,
        200,
        "the owner can keep renewing"
    );
    assert_eq!(
        survivor.acquire("survivor", &token(), 60).await?.code(),
        "lock_held"
    );
    Ok(())
}

#[tokio::test]
async fn without_quorum_every_call_answers_503_within_5s() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    let t = token();
    assert_eq!(locks.acquire("q", &t, 60).await?.status, 200);

    let survivor = cluster.other_than(&[leader]);
    let lost = cluster.other_than(&[survivor]);
    cluster.kill(lost);
    let third = cluster.other_than(&[survivor]);
    cluster.kill(third);
    let lonely = locks.on(&cluster, survivor);
    for (what, call) in [
        ("read", lonely.read("q").await),
        ("acquire", lonely.acquire("q2", &token(), 60).await),
        ("renew", lonely.renew("q", &t, 60).await),
        ("release", lonely.release("q", &t).await),
        ("force release", lonely.force_release("q").await),
    ] {
        let a = call?;
        assert_eq!(
            (a.status, a.code()),
            (503, "lock_service_unavailable"),
            "{what}: {a:?}"
        );
        let text = a.body.to_string();
        for internal in ["BasicNode", "Some(", "127.0.0.1", "http://"] {
            assert!(
                !text.contains(internal),
                "{what}: the 503 names internals: {text}"
            );
        }
        assert!(
            a.headers.get("retry-after").is_some(),
            "{what}: 503 without Retry-After"
        );
    }
    // Time one call from start to answer.
    let started = Instant::now();
    let a = lonely.read("q").await?;
    assert_eq!(a.status, 503);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "503 took {:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn a_full_restart_keeps_locks_and_fencing_order() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    let t = token();
    let before = locks.acquire("durable", &t, 300).await?;
    assert_eq!(before.status, 200);
    let other = locks.acquire("other", &token(), 300).await?;
    assert_eq!(locks.release("other", &token()).await?.status, 409);

    for id in cluster.ids() {
        cluster.kill(id);
    }
    for id in cluster.ids() {
        cluster.restart(id)?;
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(15)).await?;
    let locks = locks.on(&cluster, leader);
    let read = eventually(Duration::from_secs(10), "reads after restart", || async {
        let r = locks.read("durable").await.ok()?;
        (r.status == 200).then_some(r)
    })
    .await?;
    assert_eq!(read.body["held"], true);
    assert_eq!(read.body["fencing_token"].as_u64(), Some(before.fencing()));
    assert_eq!(
        locks.acquire("durable", &t, 300).await?.fencing(),
        before.fencing(),
        "owner re-acquires its lease"
    );
    assert_eq!(locks.force_release("other").await?.status, 204);
    let next = locks.acquire("other", &token(), 300).await?;
    assert!(
        next.fencing() > other.fencing().max(before.fencing()),
        "tokens keep rising after restart"
    );
    Ok(())
}

#[tokio::test]
async fn a_node_that_lost_its_disk_rejoins_from_a_snapshot() -> anyhow::Result<()> {
    // Snapshot (and compact the log) every 20 entries so the wiped node must install one.
    let mut cluster = Cluster::start_with(3, &["--snapshot-logs", "20"]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    let mut held = Vec::new();
    for i in 0..60 {
        let a = locks.acquire(&format!("k{i}"), &token(), 300).await?;
        assert_eq!(a.status, 200);
        held.push(a.fencing());
    }
    let lost = cluster.other_than(&[leader]);
    cluster.kill(lost);
    cluster.wipe(lost)?;
    // More writes while it is away, so the log it must catch up on is compacted.
    for i in 60..100 {
        assert_eq!(
            locks.acquire(&format!("k{i}"), &token(), 300).await?.status,
            200
        );
    }
    // A node that lost its disk restarts with --join: it never initializes a new cluster.
    cluster.restart_with(lost, &["--join"])?;
    // Once caught up, the rejoined node serves (forwarding) and its own applied index
    // reaches the leader's.
    let target = cluster.view(leader).await.expect("leader view")["applied_index"]
        .as_u64()
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the wiped node to catch up",
        || async {
            let applied = cluster.view(lost).await?["applied_index"].as_u64()?;
            (applied >= target).then_some(())
        },
    )
    .await?;
    // Then lose one of the nodes that kept their disks: the survivors' quorum includes the
    // rejoined node, so the data must really be on it again.
    let r = locks.on(&cluster, lost).read("k0").await?;
    assert_eq!(r.body["fencing_token"].as_u64(), Some(held[0]));
    let remaining = cluster.other_than(&[lost]);
    let third = cluster
        .ids()
        .into_iter()
        .find(|i| *i != lost && *i != remaining)
        .unwrap();
    cluster.kill(third);
    let r = eventually(
        Duration::from_secs(10),
        "a read served by the survivors",
        || async {
            let r = locks.on(&cluster, lost).read("k59").await.ok()?;
            (r.status == 200).then_some(r)
        },
    )
    .await?;
    assert_eq!(
        r.body["fencing_token"].as_u64(),
        Some(held[59]),
        "data came back with the snapshot"
    );
    Ok(())
}
