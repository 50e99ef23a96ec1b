//! Operating surface: health, readiness, metrics, the cluster status endpoint, request ids.

use std::time::Duration;

use raftlock_tests::{token, Cluster, Locks};
use serde_json::Value;

#[tokio::test]
async fn health_metrics_status_and_request_ids() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let locks = Locks::new(&cluster, 2, &key);
    assert_eq!(locks.acquire("m", &token(), 30).await?.status, 200);

    for id in cluster.ids() {
        assert_eq!(
            cluster
                .http
                .get(cluster.url(id, "/healthz"))
                .send()
                .await?
                .status()
                .as_u16(),
            200
        );
        assert_eq!(
            cluster
                .http
                .get(cluster.url(id, "/readyz"))
                .send()
                .await?
                .status()
                .as_u16(),
            200
        );
    }

    // A caller-chosen request id is echoed; a missing one is generated.
    let rid = uuid::Uuid::new_v4().to_string();
    let r = cluster
        .http
        .get(cluster.url(3, "/locks/m"))
        .bearer_auth(&key)
        .header("X-Volcano-Request-Id", &rid)
        .send()
        .await?;
    assert_eq!(r.headers()["x-volcano-request-id"].to_str()?, rid);
    let r = cluster
        .http
        .get(cluster.url(3, "/locks/m"))
        .bearer_auth(&key)
        .send()
        .await?;
    assert!(uuid::Uuid::parse_str(r.headers()["x-volcano-request-id"].to_str()?).is_ok());

    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let text = cluster
        .http
        .get(cluster.url(leader, "/metrics"))
        .send()
        .await?
        .text()
        .await?;
    for metric in [
        "raftlock_http_requests_total",
        "raftlock_http_request_duration_seconds",
        "raftlock_raft_term",
        "raftlock_raft_leader",
        "raftlock_raft_commit_index",
        "raftlock_raft_applied_index",
        "raftlock_project_locks 1",
        "raftlock_lock_leases",
        "raftlock_queued_waiters",
    ] {
        assert!(text.contains(metric), "metrics lack {metric}:\n{text}");
    }
    assert!(
        text.contains("route=\"/locks/{key}/lease\""),
        "requests are labelled by route"
    );

    // Cluster status gathers every member's view; a dead member shows as unreachable.
    let dead = cluster.other_than(&[leader]);
    cluster.kill(dead);
    let status: Value = cluster
        .http
        .get(cluster.url(leader, "/admin/v1/cluster/status"))
        .bearer_auth(&cluster.platform)
        .send()
        .await?
        .json()
        .await?;
    let nodes = status["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        let id = n["id"].as_u64().unwrap();
        assert_eq!(n["reachable"], id != dead, "{n}");
    }
    assert_eq!(status["leader"].as_u64(), Some(leader));
    Ok(())
}
