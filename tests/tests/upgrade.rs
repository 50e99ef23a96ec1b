//! A data directory written by the release before shards (`tests/fixtures/data-before-shards/`,
//! made by `tests/fixtures/make-data-before-shards.sh` with that release's binary: a one-node
//! cluster with a project, its key, a project lock, a namespace and a semaphore, all in its
//! write-ahead log) starts under this release as a cluster with one shard, the meta group:
//! the key authenticates, the namespace and the semaphore are there, the project lock's next
//! fencing token is above the one handed out before, and the cluster grows a data shard.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use raftlock_tests::{copy_data_dir, eventually, token, Cluster, Locks};
use serde_json::{json, Value};

fn fixture() -> Result<(std::path::PathBuf, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let facts = std::fs::read_to_string(root.join("data-before-shards.json"))?;
    Ok((
        root.join("data-before-shards"),
        serde_json::from_str(&facts)?,
    ))
}

#[tokio::test]
async fn a_data_directory_of_the_release_before_shards_is_a_one_shard_cluster() -> Result<()> {
    let (dir, facts) = fixture()?;
    let prepare = |_: u64, data_dir: &Path, _: &str| copy_data_dir(&dir, data_dir);
    let cluster = Cluster::start_prepared(1, &prepare).await?;
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let key = facts["key"].as_str().context("key")?;
    let locks = Locks::new(&cluster, 1, key);

    // The old key authenticates; what it created is there.
    let ns = locks
        .rpc("GetNamespace", json!({ "name": facts["namespace"] }))
        .await?;
    assert_eq!(ns.status, 200, "{:?}", ns.body);
    let sem = locks
        .rpc(
            "GetSemaphore",
            json!({ "namespace_name": facts["namespace"], "semaphore_name": facts["semaphore"] }),
        )
        .await?;
    assert_eq!(sem.status, 200, "{:?}", sem.body);
    assert_eq!(sem.body["semaphore"]["permits"], 3);

    // The project lock is kept while its lease runs (a run within 5 minutes of making the
    // fixture), and its tokens go on from where the old release left them once it lapsed.
    let lock = facts["lock"].as_str().context("lock")?;
    let old_token = facts["fencing_token"].as_u64().context("token")?;
    let read = locks.read(lock).await?;
    if read.body["held"] == true {
        assert_eq!(read.body["fencing_token"].as_u64(), Some(old_token), "kept");
    } else {
        let taken = eventually(Duration::from_secs(10), "the old lock is taken", || async {
            let r = locks.acquire(lock, &token(), 30).await.ok()?;
            (r.status == 200).then_some(r)
        })
        .await?;
        assert!(
            taken.fencing() > old_token,
            "{} after {old_token}",
            taken.fencing()
        );
    }

    // One shard, the meta group, holding the old project; and the cluster can grow one.
    let shards = cluster.shards(1).await.context("shards")?;
    assert_eq!(shards.len(), 1, "{shards:?}");
    assert_eq!(shards[0]["projects"], json!([facts["project"]]));
    cluster.create_shard(&[1]).await?;
    let fresh = cluster.project_key("fresh", "service_role", &[]).await?;
    let held = eventually(Duration::from_secs(10), "the new shard serves", || async {
        let r = Locks::new(&cluster, 1, &fresh)
            .acquire("first", &token(), 30)
            .await
            .ok()?;
        (r.status == 200).then_some(r)
    })
    .await?;
    assert!(held.fencing() > 0);
    let shards = cluster.shards(1).await.context("shards")?;
    assert_eq!(shards[1]["projects"], json!(["fresh"]), "{shards:?}");
    Ok(())
}
