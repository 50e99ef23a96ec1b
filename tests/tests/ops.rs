//! Operating surface: health, readiness, metrics, the cluster status endpoint, request ids.

use std::time::Duration;

use raftlock_tests::{eventually, token, Cluster, Locks};
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

/// Every series on `/metrics` has a `# HELP` line, and every raftlock series the Grafana
/// dashboard and the Prometheus alert rules use exists on a live node (so a renamed metric
/// fails here, not silently on a dashboard).
#[tokio::test]
async fn every_series_is_described_and_the_dashboard_and_alerts_use_real_ones() -> anyhow::Result<()>
{
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    // Traffic through a follower, so forwarding and proposal series carry data.
    let follower = cluster.other_than(&[leader]);
    assert_eq!(
        Locks::new(&cluster, follower, &key)
            .acquire("d", &token(), 30)
            .await?
            .status,
        200
    );
    let mut names = std::collections::BTreeSet::new();
    let mut described = std::collections::BTreeSet::new();
    for id in cluster.ids() {
        let text = cluster
            .http
            .get(cluster.url(id, "/metrics"))
            .send()
            .await?
            .text()
            .await?;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                names.insert(rest.split_whitespace().next().unwrap_or("").to_string());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                assert!(!help.trim().is_empty(), "empty help for {name}");
                described.insert(name.to_string());
            }
        }
    }
    let undescribed: Vec<_> = names.difference(&described).collect();
    assert!(
        undescribed.is_empty(),
        "series without # HELP: {undescribed:?}"
    );
    assert!(names.len() >= 30, "only {} series: {names:?}", names.len());

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in [
        "deploy/grafana/raftlock-dashboard.json",
        "deploy/prometheus/alerts.yml",
    ] {
        let text = std::fs::read_to_string(root.join(file))?;
        let used = series_named_in(&text);
        assert!(!used.is_empty(), "{file} names no raftlock series");
        for series in used {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| series.strip_suffix(s))
                .unwrap_or(&series);
            assert!(
                names.contains(base),
                "{file} uses {series}, which no node exports"
            );
        }
    }
    Ok(())
}

/// Every `raftlock_…` identifier in a text.
fn series_named_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("raftlock_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        found.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    found
}

/// Memory an operator can read: the node counts the bytes it holds (its global allocator is
/// the counting one) and its resident memory, and it keeps transparent huge pages off: the
/// process has them disabled (`THP_enabled: 0`, on kernels that show it) and no mapping is
/// advised into them — mimalloc advises its arena (`MADV_HUGEPAGE`, VmFlags `hg`) unless
/// built with `no_thp`; khugepaged then turns any 2 MiB region with a single page in use into
/// a resident huge page, minutes later — in `make soak` followers' RSS stepped +16 and +20 MiB
/// for good while the bytes they held did not move (docs/benchmarks.md, *Soak*).
#[tokio::test]
async fn the_heap_is_counted_and_never_advised_into_huge_pages() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let locks = Locks::new(&cluster, 1, &key);
    for i in 0..200 {
        assert_eq!(
            locks
                .acquire(&format!("mem-{i}"), &token(), 30)
                .await?
                .status,
            200
        );
    }
    let live = cluster
        .metric(1, "raftlock_heap_live_bytes")
        .await
        .unwrap_or(0.0);
    let resident = cluster
        .metric(1, "raftlock_resident_bytes")
        .await
        .unwrap_or(0.0);
    assert!(
        live > 1e5 && live < resident,
        "live heap {live} B, resident {resident} B"
    );

    let pid = cluster.pid(1).expect("node 1 runs");
    // Off for the whole process, whatever the host's THP mode (`always` would collapse
    // unadvised memory too).
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    if let Some(thp) = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")) {
        assert_eq!(
            thp.trim(),
            "0",
            "transparent huge pages are on for the node"
        );
    }
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut mapping = "";
    for line in smaps.lines() {
        if line
            .split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-'))
        {
            mapping = line;
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            assert!(
                !flags.split_whitespace().any(|f| f == "hg"),
                "{mapping} is advised into huge pages (VmFlags:{flags})"
            );
        }
    }
    Ok(())
}

/// A node says how long each phase of its start took: for its group, reading the log back,
/// restoring the snapshot and starting Raft; for itself, the time until it was ready. Each
/// is one log line (target `raftlock_server::startup`) and one `raftlock_startup_seconds`
/// series, so a slow restart says where its time went.
#[tokio::test]
async fn a_restarted_node_reports_each_phase_of_its_start() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    for i in 0..50 {
        assert_eq!(
            locks.acquire(&format!("k{i}"), &token(), 300).await?.status,
            200
        );
    }
    let node = cluster.other_than(&[leader]);
    cluster.kill(node);
    let startup_log = (
        "RAFTLOCK_LOG".to_string(),
        "warn,raftlock_server::startup=info".to_string(),
    );
    cluster.restart_with_env(node, &[], vec![startup_log])?;

    let phases = ["wal_replay", "snapshot_restore", "raft_start", "ready"];
    let text = eventually(
        Duration::from_secs(15),
        "every start-up phase in the metrics",
        || async {
            let text = cluster.metrics_text(node).await?;
            phases
                .iter()
                .all(|p| text.contains(&format!("phase=\"{p}\"")))
                .then_some(text)
        },
    )
    .await?;
    let ready: f64 = text
        .lines()
        .find(|l| l.starts_with("raftlock_startup_seconds") && l.contains("phase=\"ready\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("the ready phase's value");
    assert!(ready > 0.0 && ready < 15.0, "ready after {ready} s");

    let lines = cluster.log_lines(node);
    for phase in phases {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("start-up phase") && l.contains(phase)),
            "no log line for phase {phase} in {lines:?}"
        );
    }
    Ok(())
}
