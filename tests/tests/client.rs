//! The Rust SDK and the CLI against real clusters: renewal past several TTLs, cancellation on
//! forced release, release on panic and on drop, failover in the middle of `with_lock`
//! without a double holder, and `raftlock lock run` guarding a real command.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raftlock_client::{
    Acquire, Client, Contention, HierAcquire, LeaseKeeper, LockToken, LossReason, WithLock,
};
use raftlock_tests::{binary, eventually, Cluster};

const TTL: Duration = Duration::from_secs(5);

async fn setup(nodes: u64) -> anyhow::Result<(Cluster, Client)> {
    let cluster = Cluster::start(nodes).await?;
    let key = cluster.project_key("sdk", "service_role", &[]).await?;
    let endpoints: Vec<String> = cluster.ids().iter().map(|id| cluster.addr(*id)).collect();
    let client = Client::new(endpoints, key)?;
    Ok((cluster, client))
}

#[tokio::test]
async fn with_lock_renews_past_several_ttls() -> anyhow::Result<()> {
    let (_cluster, client) = setup(1).await?;
    let observer = client.clone();
    let out = client
        .with_lock("renewed", TTL, |guard| async move {
            let started = Instant::now();
            let first_expiry = guard.expires_at();
            // Hold for three TTLs; the lease must stay ours throughout.
            while started.elapsed() < 3 * TTL {
                tokio::select! {
                    _ = guard.cancelled() => anyhow::bail!("lock lost: {:?}", guard.loss_reason()),
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
                let other = observer.acquire("renewed", LockToken::new(), TTL).await?;
                anyhow::ensure!(
                    other == Acquire::Held,
                    "a second token got the lock: {other:?}"
                );
            }
            let status = observer.get("renewed").await?;
            anyhow::ensure!(status.held);
            anyhow::ensure!(status.fencing_token == Some(guard.fencing_token()));
            anyhow::ensure!(guard.expires_at() > first_expiry, "expiry moved forward");
            Ok(guard.fencing_token())
        })
        .await?;
    let WithLock::Completed(result) = out else {
        anyhow::bail!("not acquired: {out:?}");
    };
    result?;
    assert!(!client.get("renewed").await?.held, "released at the end");
    Ok(())
}

#[tokio::test]
async fn forced_release_cancels_the_callback_within_one_renewal_period() -> anyhow::Result<()> {
    let (_cluster, client) = setup(1).await?;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let holder = client.clone();
    let task = tokio::spawn(async move {
        holder
            .with_lock("forced", TTL, |guard| async move {
                let _ = ready_tx.send(());
                guard.cancelled().await;
                (Instant::now(), guard.loss_reason())
            })
            .await
    });
    ready_rx.await?;
    client.force_release("forced").await?;
    let released_at = Instant::now();
    let out = tokio::time::timeout(2 * TTL, task).await???;
    let WithLock::Completed((cancelled_at, reason)) = out else {
        anyhow::bail!("not acquired: {out:?}");
    };
    let after = cancelled_at.saturating_duration_since(released_at);
    println!("cancelled {after:?} after the forced release");
    // One renewal period is ~TTL/3 (+10 % jitter); allow for the renewal round trip.
    assert!(after <= TTL / 3 + Duration::from_millis(1200), "{after:?}");
    assert_eq!(reason, Some(LossReason::OwnershipLost));
    Ok(())
}

#[tokio::test]
async fn a_panicking_or_dropped_callback_releases_the_lock() -> anyhow::Result<()> {
    let (_cluster, client) = setup(1).await?;
    let long = Duration::from_secs(60);

    let c = client.clone();
    let panicked = tokio::spawn(async move {
        c.with_lock("panics", long, |_guard| async move {
            panic!("callback failed");
        })
        .await
    })
    .await;
    assert!(
        panicked.unwrap_err().is_panic(),
        "the panic reaches the caller"
    );
    // Released before the panic was resumed: no waiting needed.
    assert!(!client.get("panics").await?.held, "released on panic");

    // Early return with `?` inside the callback.
    let early: WithLock<Result<(), &str>> = client
        .with_lock("early", long, |_guard| async move {
            Err("gave up")?;
            Ok(())
        })
        .await?;
    assert_eq!(early, WithLock::Completed(Err("gave up")));
    assert!(!client.get("early").await?.held, "released on early return");

    // The caller drops the whole with_lock future (e.g. a timeout around it).
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let c = client.clone();
    let task = tokio::spawn(async move {
        c.with_lock("dropped", long, |_guard| async move {
            let _ = ready_tx.send(());
            std::future::pending::<()>().await
        })
        .await
    });
    ready_rx.await?;
    assert!(client.get("dropped").await?.held);
    task.abort();
    eventually(
        Duration::from_secs(5),
        "the dropped lock to be released",
        || async { (!client.get("dropped").await.ok()?.held).then_some(()) },
    )
    .await?;

    // A second holder is refused, and contention is a result, not an error.
    let second = client.clone();
    let held = client
        .with_lock("busy", long, |_guard| async move {
            second
                .with_lock("busy", long, |_| async {})
                .await
                .map(|r| matches!(r, WithLock::NotAcquired(Contention::Held)))
        })
        .await?;
    assert!(matches!(held, WithLock::Completed(Ok(true))), "{held:?}");
    Ok(())
}

#[tokio::test]
async fn failover_in_the_middle_of_with_lock_keeps_one_holder() -> anyhow::Result<()> {
    let (mut cluster, client) = setup(3).await?;
    // A TTL comfortably above the election time, so the lease is expected to survive the
    // failover (a shorter one may be cancelled — safely — on a loaded machine).
    const TTL: Duration = Duration::from_secs(10);
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let competitor = client.clone();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = client.clone();
    let task = tokio::spawn(async move {
        holder
            .with_lock("failover", TTL, |guard| async move {
                let _ = ready_tx.send(guard.clone());
                tokio::select! {
                    _ = guard.cancelled() => Err(guard.loss_reason()),
                    _ = go_rx => Ok(guard.fencing_token()),
                }
            })
            .await
    });
    let guard = ready_rx.await?;

    // A competitor keeps trying with its own token; it must never win while the guard holds.
    let stop = Arc::new(AtomicBool::new(false));
    let double = {
        let (stop, guard) = (stop.clone(), guard.clone());
        tokio::spawn(async move {
            let token = LockToken::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(Acquire::Acquired(l)) = competitor.acquire("failover", token, TTL).await {
                    let _ = competitor.release("failover", token).await;
                    if !guard.is_cancelled() {
                        return Some(l.fencing_token);
                    }
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            None
        })
    };

    cluster.kill(leader);
    let killed = std::time::SystemTime::now();
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    assert_ne!(new_leader, leader);
    // Wait for a renewal that happened after the kill to move the expiry past the old one.
    eventually(2 * TTL, "a renewal through the new leader", || async {
        (guard.expires_at() > killed + TTL).then_some(())
    })
    .await?;
    assert!(
        !guard.is_cancelled(),
        "the lock survived the failover: {:?}",
        guard.loss_reason()
    );

    let _ = go_tx.send(());
    let out = tokio::time::timeout(2 * TTL, task).await???;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(double.await?, None, "a second holder got the lock");
    let WithLock::Completed(Ok(fencing)) = out else {
        anyhow::bail!("with_lock did not complete while holding: {out:?}");
    };
    assert_eq!(fencing, guard.fencing_token());

    // Released at the end: the next holder gets a higher fencing token.
    let next = client.acquire("failover", LockToken::new(), TTL).await?;
    let Acquire::Acquired(lease) = next else {
        anyhow::bail!("released lock not acquirable: {next:?}");
    };
    assert!(lease.fencing_token > fencing);
    Ok(())
}

#[tokio::test]
async fn lease_keeper_and_hierarchical_guards() -> anyhow::Result<()> {
    let (_cluster, client) = setup(1).await?;
    client
        .create_namespace("jobs", "", Default::default())
        .await?;
    let ttl = Duration::from_secs(3);
    let keeper = LeaseKeeper::start(&client, "jobs", "worker-1", ttl).await?;
    let guard = match keeper
        .acquire("db/users", true, Duration::ZERO, Default::default())
        .await?
    {
        HierAcquire::Acquired(g) => g,
        HierAcquire::NotAcquired(a) => anyhow::bail!("not acquired: {a:?}"),
    };
    // Past two TTLs the lease is still alive (refreshed) and the lock still held.
    let first = keeper.lease().expires_at;
    eventually(3 * ttl, "two refreshes", || async {
        (keeper.lease().expires_at > first + 2 * ttl.as_nanos() as i64 - 1_000_000_000)
            .then_some(())
    })
    .await?;
    let other = LeaseKeeper::start(&client, "jobs", "worker-2", ttl).await?;
    match other
        .acquire("db", false, Duration::ZERO, Default::default())
        .await?
    {
        HierAcquire::NotAcquired(a) => {
            assert_eq!(a.reason, raftlock_client::ContentionReason::Descendant)
        }
        HierAcquire::Acquired(_) => anyhow::bail!("ancestor acquired over an exclusive hold"),
    }
    // Revoking the lease elsewhere cancels the keeper and its guards.
    client.revoke_lease("jobs", keeper.lease_id()).await?;
    tokio::time::timeout(2 * ttl, guard.cancelled()).await?;
    assert!(keeper.is_cancelled());
    drop(guard);
    other.revoke().await?;
    Ok(())
}

fn cli(cluster: &Cluster, key: &str) -> tokio::process::Command {
    let endpoints: Vec<String> = cluster.ids().iter().map(|id| cluster.addr(*id)).collect();
    let mut cmd = tokio::process::Command::new(binary());
    cmd.env("RAFTLOCK_ENDPOINTS", endpoints.join(","))
        .env("RAFTLOCK_KEY", key)
        .env_remove("RAFTLOCK_PLATFORM_TOKEN")
        .kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn lock_run_guards_a_real_command() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let key = cluster.project_key("cli", "service_role", &[]).await?;
    let client = Client::new([cluster.addr(1)], key.clone())?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("token");

    // The command runs with the fencing token and its status is ours.
    let status = cli(&cluster, &key)
        .args(["lock", "run", "cli-job", "--ttl", "5", "--"])
        .args(["sh", "-c", "echo $RAFTLOCK_FENCING_TOKEN > \"$1\"", "sh"])
        .arg(&file)
        .status()
        .await?;
    assert_eq!(status.code(), Some(0));
    let written: u64 = std::fs::read_to_string(&file)?.trim().parse()?;
    assert!(written > 1 << 52, "a fencing token: {written}");
    assert!(
        !client.get("cli-job").await?.held,
        "released after the command"
    );

    let status = cli(&cluster, &key)
        .args([
            "lock", "run", "cli-job", "--ttl", "5", "--", "sh", "-c", "exit 7",
        ])
        .status()
        .await?;
    assert_eq!(status.code(), Some(7), "the command's exit status");

    // Held by someone else: the command does not run; distinct status 75.
    let other = LockToken::new();
    assert!(matches!(
        client
            .acquire("cli-job", other, Duration::from_secs(60))
            .await?,
        Acquire::Acquired(_)
    ));
    std::fs::remove_file(&file)?;
    let out = cli(&cluster, &key)
        .args(["lock", "run", "cli-job", "--ttl", "5", "--", "touch"])
        .arg(&file)
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(75));
    assert!(!file.exists(), "the command did not run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("lock_held"), "{stderr}");
    client.release("cli-job", other).await?;

    // Ownership lost while running: the command is terminated, status 76.
    let mut child = cli(&cluster, &key)
        .args([
            "lock", "run", "cli-job", "--ttl", "5", "--grace", "2", "--", "sleep", "60",
        ])
        .spawn()?;
    eventually(
        Duration::from_secs(10),
        "lock run to hold the lock",
        || async { client.get("cli-job").await.ok()?.held.then_some(()) },
    )
    .await?;
    client.force_release("cli-job").await?;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await??;
    assert_eq!(status.code(), Some(76));

    // JSON output and one-line errors for the other lock commands.
    let out = cli(&cluster, &key)
        .args(["lock", "get", "cli-job", "--json"])
        .output()
        .await?;
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(v, serde_json::json!({ "held": false }));
    let out = cli(&cluster, &key)
        .args(["lock", "get", "not a valid key"])
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("raftlock: invalid_request"), "{stderr}");
    Ok(())
}

#[tokio::test]
async fn cluster_status_and_admin_commands() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let endpoints: Vec<String> = cluster.ids().iter().map(|id| cluster.addr(*id)).collect();
    let admin = |args: &[&str]| {
        let mut cmd = std::process::Command::new(binary());
        cmd.args(args)
            .arg("--json")
            .env("RAFTLOCK_ENDPOINTS", endpoints.join(","))
            .env("RAFTLOCK_PLATFORM_TOKEN", &cluster.platform);
        cmd.output()
    };
    let out = admin(&["cluster", "status"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(3));
    assert!(v["leader"].as_u64().is_some());
    assert!(v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["ready"] == true));

    let out = admin(&["admin", "project", "create", "cli-made"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = admin(&["admin", "key", "create", "cli-made"])?;
    let key: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let secret = key["secret"].as_str().expect("secret").to_string();
    let client = Client::new(endpoints.clone(), secret)?;
    assert!(!client.get("anything").await?.held, "the new key works");
    let out = admin(&[
        "admin",
        "key",
        "revoke",
        "cli-made",
        key["key_id"].as_str().unwrap(),
    ])?;
    assert!(out.status.success());
    let err = client.get("anything").await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    Ok(())
}

#[tokio::test]
async fn leader_election_campaign_resign_observe() -> anyhow::Result<()> {
    use futures::StreamExt;
    use raftlock_client::Election;

    let (_cluster, client) = setup(1).await?;
    let a = Election::new(client.clone(), "leader", TTL).poll_interval(Duration::from_millis(100));
    let b = a.clone();
    assert_eq!(a.leader().await?, None);
    let mut changes = Box::pin(a.observe());
    assert_eq!(
        changes.next().await.transpose()?,
        Some(None),
        "nobody leads yet"
    );

    let first = a.campaign().await?;
    let term = changes.next().await.transpose()?.flatten().expect("a term");
    assert_eq!(term.fencing_token, first.term());
    assert!(b.try_campaign().await?.is_none(), "one leader at a time");

    let waiting = tokio::spawn(async move { b.campaign().await });
    first.resign().await?;
    let second = tokio::time::timeout(2 * TTL, waiting).await???;
    assert!(second.term() > term.fencing_token, "terms increase");
    let want = second.term();
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(change) = changes.next().await {
            if change?.is_some_and(|t| t.fencing_token == want) {
                return Ok(true);
            }
        }
        anyhow::Ok(false)
    })
    .await??;
    assert!(seen, "the observer saw the new term");
    second.resign().await?;
    Ok(())
}
