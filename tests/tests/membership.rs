//! Membership changes while serving: 3 → 5 voters → 3.

use std::time::Duration;

use raftlock_tests::{eventually, token, Cluster, Locks};
use serde_json::json;

#[tokio::test]
async fn grow_to_five_and_shrink_back_to_three_while_serving() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let locks = Locks::new(&cluster, 1, &key);
    let t = token();
    let first = locks.acquire("m", &t, 120).await?;
    assert_eq!(first.status, 200);

    for id in [4, 5] {
        let addr = cluster.spawn_extra(id)?;
        let health = format!("http://{addr}/healthz");
        eventually(
            Duration::from_secs(10),
            "the new node to listen",
            || async {
                cluster
                    .http
                    .get(&health)
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status().is_success())
            },
        )
        .await?;
        let r = cluster
            .admin_post(
                2,
                "/admin/v1/cluster/learners",
                json!({ "node_id": id, "addr": addr }),
            )
            .await?;
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().await?);
        assert_eq!(
            locks.renew("m", &t, 120).await?.status,
            200,
            "serving while adding {id}"
        );
    }
    let r = cluster
        .http
        .put(cluster.url(3, "/admin/v1/cluster/voters"))
        .bearer_auth(&cluster.platform)
        .json(&json!({ "voters": [1, 2, 3, 4, 5] }))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await?);
    let view = cluster.view(5).await.expect("node 5 answers");
    let voters = view["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["voter"] == true)
        .count();
    assert_eq!(voters, 5, "{view}");

    // The new nodes serve reads with the same fencing token.
    let read = eventually(Duration::from_secs(5), "node 5 to serve", || async {
        let r = locks.on(&cluster, 5).read("m").await.ok()?;
        (r.status == 200).then_some(r)
    })
    .await?;
    assert_eq!(read.body["fencing_token"].as_u64(), Some(first.fencing()));

    // Shrink back: remove 1 and 2, keep 3, 4, 5.
    // Removing the leader makes the cluster elect another one; an admin call that lands in
    // that window answers 503 (no leader) and is retried, as an operator would.
    for id in [1, 2] {
        let url = cluster.url(4, &format!("/admin/v1/cluster/nodes/{id}"));
        let status = eventually(Duration::from_secs(15), "the node removal", || async {
            let r = cluster
                .http
                .delete(&url)
                .bearer_auth(&cluster.platform)
                .send()
                .await
                .ok()?;
            let status = r.status().as_u16();
            (status != 503).then_some(status)
        })
        .await?;
        assert_eq!(status, 200, "removing node {id}");
    }
    cluster.kill(1);
    cluster.kill(2);
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    assert!([3, 4, 5].contains(&leader));
    let after = locks.on(&cluster, leader).renew("m", &t, 120).await?;
    assert_eq!(
        (after.status, after.fencing()),
        (200, first.fencing()),
        "three nodes keep serving"
    );
    let view = cluster.view(leader).await.expect("leader answers");
    assert_eq!(view["members"].as_array().unwrap().len(), 3, "{view}");
    Ok(())
}
