//! project-lock end to end on a 3-node cluster of real processes: every node serves every call,
//! followers forward, reads are linearizable, and each rule answers with the spec's codes.

use std::time::Duration;

use raftlock_tests::{token, Cluster, Locks};

async fn setup() -> anyhow::Result<(Cluster, Locks, u64, Vec<u64>)> {
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let followers: Vec<u64> = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    let locks = Locks::new(&cluster, followers[0], &key);
    Ok((cluster, locks, leader, followers))
}

#[tokio::test]
async fn acquire_through_a_follower_and_read_through_another_node() -> anyhow::Result<()> {
    let (cluster, via_follower, leader, followers) = setup().await?;
    let t = token();
    let a = via_follower.acquire("job-1", &t, 30).await?;
    assert_eq!(a.status, 200, "{a:?}");
    let fencing = a.fencing();
    assert!(fencing > 1 << 52 && fencing < 1 << 53);
    let expires = a.body["expires_at"].as_str().unwrap().to_string();
    assert!(
        expires.ends_with('Z') && !expires.contains('.'),
        "whole seconds UTC: {expires}"
    );
    assert!(
        a.headers.get("x-volcano-request-id").is_some(),
        "request id echoed"
    );

    for node in [leader, followers[1]] {
        let r = via_follower.on(&cluster, node).read("job-1").await?;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["held"], true);
        assert_eq!(r.body["fencing_token"].as_u64(), Some(fencing));
        assert_eq!(r.body["expires_at"].as_str(), Some(expires.as_str()));
    }
    Ok(())
}

#[tokio::test]
async fn lease_rules_end_to_end() -> anyhow::Result<()> {
    let (cluster, locks, leader, _) = setup().await?;
    let (a, b) = (token(), token());
    let first = locks.acquire("k", &a, 30).await?;
    assert_eq!(first.status, 200);

    let again = locks.acquire("k", &a, 10).await?;
    assert_eq!(
        (again.status, again.fencing()),
        (200, first.fencing()),
        "same token keeps fencing"
    );

    let other = locks.on(&cluster, leader).acquire("k", &b, 30).await?;
    assert_eq!((other.status, other.code()), (409, "lock_held"));

    let renew = locks.renew("k", &a, 20).await?;
    assert_eq!((renew.status, renew.fencing()), (200, first.fencing()));
    let stale = locks.renew("k", &b, 20).await?;
    assert_eq!((stale.status, stale.code()), (409, "lock_ownership_lost"));

    let wrong_release = locks.release("k", &b).await?;
    assert_eq!(
        (wrong_release.status, wrong_release.code()),
        (409, "lock_ownership_lost")
    );
    assert_eq!(
        locks.read("k").await?.body["held"],
        true,
        "a stale release changes nothing"
    );

    assert_eq!(locks.release("k", &a).await?.status, 204);
    assert_eq!(
        locks.release("k", &a).await?.status,
        204,
        "release is idempotent"
    );
    let free = locks.read("k").await?;
    assert_eq!(
        (free.status, &free.body),
        (200, &serde_json::json!({ "held": false }))
    );

    let next = locks.acquire("k", &b, 30).await?;
    assert!(
        next.fencing() > first.fencing(),
        "a new holder gets a higher fencing token"
    );
    assert_eq!(locks.force_release("k").await?.status, 204);
    assert_eq!(
        locks.force_release("k").await?.status,
        204,
        "force release of absent is 204"
    );
    let after = locks.acquire("k", &a, 30).await?;
    assert!(
        after.fencing() > next.fencing(),
        "force release does not reset the sequence"
    );
    Ok(())
}

#[tokio::test]
async fn a_lease_lapses_on_its_own_and_can_then_be_taken_over() -> anyhow::Result<()> {
    let (_cluster, locks, _, _) = setup().await?;
    let (a, b) = (token(), token());
    let first = locks.acquire("short", &a, 5).await?;
    assert_eq!(first.status, 200);
    assert_eq!(locks.acquire("short", &b, 5).await?.code(), "lock_held");
    // Held until expires_at + 1 s; wait for the read to say it is free (≤ ~6 s + slack).
    raftlock_tests::eventually(Duration::from_secs(10), "lease to lapse", || async {
        (locks.read("short").await.ok()?.body["held"] == false).then_some(())
    })
    .await?;
    let late = locks.renew("short", &a, 5).await?;
    assert_eq!(
        (late.status, late.code()),
        (409, "lock_ownership_lost"),
        "late owner"
    );
    let taken = locks.acquire("short", &b, 5).await?;
    assert_eq!(taken.status, 200);
    assert!(taken.fencing() > first.fencing());
    Ok(())
}

#[tokio::test]
async fn projects_are_isolated() -> anyhow::Result<()> {
    let (cluster, acme, _, _) = setup().await?;
    let other_key = cluster.project_key("globex", "service_role", &[]).await?;
    let globex = Locks {
        key: other_key,
        ..acme.clone()
    };
    assert_eq!(acme.acquire("shared-name", &token(), 30).await?.status, 200);
    assert_eq!(globex.read("shared-name").await?.body["held"], false);
    assert_eq!(
        globex.acquire("shared-name", &token(), 30).await?.status,
        200
    );
    Ok(())
}
