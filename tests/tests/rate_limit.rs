//! project-lock rate limit: fixed minute per project, every request counts, 429 with Retry-After.

use raftlock_tests::{token, Cluster, Locks};
use serde_json::json;

#[tokio::test]
async fn over_the_limit_answers_429_with_retry_after() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let other = cluster.project_key("globex", "service_role", &[]).await?;
    let patch = cluster
        .http
        .patch(cluster.url(1, "/admin/v1/projects/acme"))
        .bearer_auth(&cluster.platform)
        .json(&json!({ "lock_ops_per_minute": 20 }))
        .send()
        .await?;
    assert_eq!(patch.status().as_u16(), 200);
    let locks = Locks::new(&cluster, 2, &key);
    let mut limited = None;
    // Spread over nodes: the count is cluster-wide. A window boundary can reset the count
    // once, so allow up to two windows' worth before the first 429.
    for i in 0..41 {
        let node = cluster.ids()[i % 3];
        let a = locks.on(&cluster, node).read("k").await?;
        if a.status == 429 {
            limited = Some((i, a));
            break;
        }
        assert_eq!(a.status, 200);
    }
    let (count, a) = limited.expect("the limit was enforced");
    assert!(
        (20..=40).contains(&count),
        "first 429 after {count} requests"
    );
    assert_eq!(a.code(), "lock_rate_limited");
    let retry: u64 = a.headers["retry-after"].to_str()?.parse()?;
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    // Writes are counted and refused too; other projects are unaffected.
    assert_eq!(locks.acquire("k", &token(), 30).await?.status, 429);
    assert_eq!(
        Locks {
            key: other,
            ..locks.clone()
        }
        .read("k")
        .await?
        .status,
        200
    );
    Ok(())
}

#[tokio::test]
async fn hierarchical_routes_have_their_own_limit_off_by_default() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let api = Locks::new(&cluster, 1, &key);
    for _ in 0..30 {
        assert_eq!(
            api.rpc("ListNamespaces", json!({})).await?.status,
            200,
            "off by default"
        );
    }
    let patch = cluster
        .http
        .patch(cluster.url(1, "/admin/v1/projects/acme"))
        .bearer_auth(&cluster.platform)
        .json(&json!({ "hier_ops_per_minute": 5 }))
        .send()
        .await?;
    assert_eq!(patch.status().as_u16(), 200);
    let mut limited = None;
    for i in 0..11 {
        let a = api.rpc("ListNamespaces", json!({})).await?;
        if a.status == 429 {
            limited = Some((i, a));
            break;
        }
    }
    let (count, a) = limited.expect("the hierarchical limit was enforced");
    assert!((5..=10).contains(&count), "first 429 after {count} calls");
    assert_eq!(a.code(), "resource_exhausted");
    assert!(a.headers.contains_key("retry-after"));
    assert_eq!(
        api.read("k").await?.status,
        200,
        "project-lock routes count separately"
    );
    Ok(())
}
