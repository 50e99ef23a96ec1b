//! Time that no wall clock can break. Real processes run on skewed or stepping wall
//! clocks (libfaketime, monotonic clocks untouched) and every judgement uses the test
//! machine's one true clock: a second holder never gets a lock before the first holder's
//! `expires_at` has passed, and a lease taken under a skewed leader frees within TTL + 1 s
//! grace + 2 s.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use raftlock_tests::{
    eventually, rfc3339_ns, token, unix_now as now, Answer, Cluster, Locks, Skew,
};
use serde_json::json;

fn parse_time(s: &str) -> Result<f64> {
    let ns = rfc3339_ns(s).with_context(|| format!("not an RFC 3339 time: {s}"))?;
    Ok(ns as f64 / 1e9)
}

/// Polls `acquire` of `key` on `locks` until it succeeds; returns the true time the winning
/// request was sent.
async fn acquire_when_free(locks: &Locks, key: &str, within: Duration) -> Result<f64> {
    let deadline = now() + within.as_secs_f64();
    let t = token();
    while now() < deadline {
        let sent = now();
        if let Ok(a) = locks.acquire(key, &t, 30).await {
            match a.status {
                200 => return Ok(sent),
                409 | 503 => {}
                other => bail!("acquire {key}: unexpected {other} {:?}", a.body),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{key} never became free within {within:?}")
}

#[tokio::test]
async fn two_fast_nodes_never_let_a_second_client_take_a_held_lock() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fast2 = Skew::new(dir.path().join("s2"), 60_000)?;
    let fast3 = Skew::new(dir.path().join("s3"), 60_000)?;
    let env = BTreeMap::from([(2, fast2.env()), (3, fast3.env())]);
    let cluster = Cluster::start_with_env(3, env).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    assert_eq!(leader, 1, "node 1 (true clock) initializes and leads first");
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let a = Locks::new(&cluster, 1, &key);
    let granted = a.acquire("job", &token(), 10).await?;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let promise = parse_time(granted.body["expires_at"].as_str().context("expires_at")?)?;
    for id in [2, 3] {
        let offset = eventually(Duration::from_secs(10), "the skew to show", || async {
            cluster
                .metric(id, "raftlock_clock_offset_seconds")
                .await
                .filter(|o| *o > 30.0)
        })
        .await?;
        println!("node {id}: raftlock_clock_offset_seconds {offset:.1}");
    }

    // The true-clock leader stops; the fast nodes must not hand the lock to B early.
    cluster.pause(1)?;
    let b = Locks::new(&cluster, 2, &key);
    let resume = tokio::spawn({
        let pid = cluster.pid(1).context("node 1 runs")?;
        async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            // SAFETY: SIGCONT to the node process this test paused.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        }
    });
    let b_sent = acquire_when_free(&b, "job", Duration::from_secs(30)).await?;
    resume.await?;
    println!(
        "B acquired {:.2} s after A's expires_at (A's promise)",
        b_sent - promise
    );
    assert!(
        b_sent >= promise,
        "B took the lock {:.2} s before A's expires_at on the true clock",
        promise - b_sent
    );
    assert!(
        b_sent <= promise + 1.0 + 2.0,
        "the lock stayed held {:.2} s past expires_at + 1 s grace",
        b_sent - promise - 1.0
    );
    Ok(())
}

/// Three nodes, each on its own wall-clock skew (kept in `dir`), all at 0 to begin with.
async fn three_on_skews(dir: &std::path::Path) -> Result<(BTreeMap<u64, Skew>, Cluster)> {
    let skews: BTreeMap<u64, Skew> = (1..=3)
        .map(|id| Ok((id, Skew::new(dir.join(format!("s{id}")), 0)?)))
        .collect::<Result<_>>()?;
    let env = skews.iter().map(|(id, s)| (*id, s.env())).collect();
    let cluster = Cluster::start_with_env(3, env).await?;
    Ok((skews, cluster))
}

/// A lease taken while the leader's clock is stepped by `step_ms` frees on time — whether that
/// leader keeps leading (`kill_leader == false`) or a true-clock node takes over.
async fn stepped_leader_lease_frees_on_time(step_ms: i64, kill_leader: bool) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (skews, mut cluster) = three_on_skews(dir.path()).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    skews[&leader].set(step_ms)?;
    let a = Locks::new(&cluster, leader, &key);
    let sent = now();
    let granted = a.acquire("job", &token(), 5).await?;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let promise = parse_time(granted.body["expires_at"].as_str().context("expires_at")?)?;
    assert!(
        (promise - (sent + 5.0)).abs() < 2.0, // whole seconds, rounded down; up to MAX_LAG behind
        "expires_at is {:.2} s off the true clock's TTL",
        promise - (sent + 5.0)
    );
    let read = a.read("job").await?;
    assert_eq!(
        read.body["held"], true,
        "a read right after the grant: {:?}",
        read.body
    );
    let serving = if kill_leader {
        cluster.kill(leader);
        cluster.wait_for_leader(Duration::from_secs(10)).await?
    } else {
        leader
    };
    let b = Locks::new(&cluster, serving, &key);
    let b_sent = acquire_when_free(&b, "job", Duration::from_secs(90)).await?;
    println!(
        "step {step_ms} ms, leader killed: {kill_leader}: B acquired {:.2} s after A's request (TTL 5 s)",
        b_sent - sent
    );
    assert!(b_sent >= promise, "B took the lock before A's expires_at");
    assert!(
        b_sent - sent <= 5.0 + 1.0 + 2.0,
        "the 5 s lease stayed held {:.2} s",
        b_sent - sent
    );
    Ok(())
}

#[tokio::test]
async fn a_lease_under_a_leader_stepped_60s_ahead_frees_on_time_after_failover() -> Result<()> {
    stepped_leader_lease_frees_on_time(60_000, true).await
}

#[tokio::test]
async fn a_lease_under_a_leader_stepped_60s_ahead_is_not_cut_short() -> Result<()> {
    stepped_leader_lease_frees_on_time(60_000, false).await
}

#[tokio::test]
async fn a_lease_under_a_leader_stepped_60s_back_frees_on_time() -> Result<()> {
    stepped_leader_lease_frees_on_time(-60_000, false).await
}

#[tokio::test]
async fn a_lease_under_a_leader_stepped_60s_back_frees_on_time_after_failover() -> Result<()> {
    stepped_leader_lease_frees_on_time(-60_000, true).await
}

/// After a whole-cluster restart, the first leader may be a node whose wall clock is 10 min
/// fast. It starts its line from its restart hint (cluster time before the stop, carried over
/// the downtime by its *own* clock, so its constant error cancels), not from its wall clock:
/// A's lease is still held, and cluster time did not lose the downtime either (without the
/// hint it resumed 6.8 s behind in this scenario).
#[tokio::test]
async fn a_cold_start_leader_with_a_fast_clock_does_not_end_leases_early() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fast = Skew::new(dir.path().join("s3"), 600_000)?;
    let mut cluster = Cluster::start_with_env(3, BTreeMap::from([(3, fast.env())])).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    assert_ne!(
        leader, 3,
        "the fast node does not lead while a true clock can"
    );
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let a = Locks::new(&cluster, leader, &key);
    let granted = a.acquire("job", &token(), 60).await?;
    assert_eq!(granted.status, 200);
    let granted_at = SystemTime::now();
    cluster
        .wait_for_clock_hint(3, Some(granted_at), Duration::from_secs(10))
        .await?;

    for id in cluster.ids() {
        cluster.kill(id);
    }
    // The scenario's downtime: long enough that losing it (cluster time resuming from the
    // last entry) would show in every new expires_at.
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Node 3 comes back first: once the cluster has been still for 2 s its clock rule lets
    // it campaign, and node 2 (just started, its own clock rule still waiting) grants its
    // pre-vote and vote.
    cluster.restart(3)?;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    cluster.restart(2)?;
    // A restarted node shows the leader it last knew (node 1, still down) until an election.
    let leader = eventually(
        Duration::from_secs(20),
        "a running leader after the cold start",
        || async {
            let leader = cluster.view(3).await?.get("leader")?.as_u64()?;
            cluster.is_running(leader).then_some(leader)
        },
    )
    .await?;
    assert_eq!(leader, 3, "the fast node leads after the cold start");
    let b = Locks::new(&cluster, 3, &key);
    let answer = eventually(Duration::from_secs(10), "node 3 to answer", || async {
        let r = b.acquire("job", &token(), 30).await.ok()?;
        (r.status != 503).then_some(r)
    })
    .await?;
    assert_eq!(
        answer.status, 409,
        "B took A's 60 s lease right after a restart: {:?}",
        answer.body
    );
    // And cluster time went on through the downtime: a new lease ends TTL after now, on the
    // true clock (expires_at is whole seconds, rounded down).
    let sent = now();
    let fresh = b.acquire("fresh", &token(), 30).await?;
    assert_eq!(fresh.status, 200);
    let expires = parse_time(fresh.body["expires_at"].as_str().context("expires_at")?)?;
    assert!(
        (expires - (sent + 30.0)).abs() < 2.0,
        "cluster time is {:.1} s off the true clock after the cold start",
        expires - (sent + 30.0)
    );
    Ok(())
}

/// A follower restarted on a wall clock stepped 60 s ahead while it was down carries its
/// restart hint 60 s ahead. The first entry it sees from the running leader must replace that
/// hint: the node then knows its clock is off (offset ≈ +60 s, so it may not lead), and even
/// when asked to lead, cluster time — every new `expires_at` — stays true.
#[tokio::test]
async fn a_follower_restarted_on_a_stepped_clock_does_not_move_cluster_time() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut cluster = Cluster::start(3).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let follower = cluster.other_than(&[leader]);
    cluster
        .wait_for_clock_hint(follower, None, Duration::from_secs(10))
        .await?;
    cluster.kill(follower);
    let fast = Skew::new(dir.path().join("fast"), 60_000)?;
    cluster.restart_with_env(follower, &[], fast.env())?;
    let offset = eventually(Duration::from_secs(10), "the skew to show", || async {
        cluster
            .metric(follower, "raftlock_clock_offset_seconds")
            .await
            .filter(|o| o.abs() > 1.0)
    })
    .await?;
    println!("restarted follower: raftlock_clock_offset_seconds {offset:.1}");
    assert!(offset > 30.0, "it knows its clock is ahead: {offset}");
    // Asked to lead, it refuses (its clock is unfit); whoever leads, cluster time stays true.
    let moved = cluster
        .admin_post(
            leader,
            "/admin/v1/cluster/leader",
            json!({ "node_id": follower }),
        )
        .await?;
    println!("move leader to the skewed node: {}", moved.status());
    assert_ne!(
        moved.status(),
        200,
        "a node whose clock is 60 s off does not take leadership"
    );
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let locks = Locks::new(&cluster, leader, &key);
    let sent = now();
    let a = locks.acquire("after-restart", &token(), 30).await?;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let expires = parse_time(a.body["expires_at"].as_str().context("expires_at")?)?;
    assert!(
        (expires - (sent + 30.0)).abs() < 3.0,
        "expires_at {:.1} s from true time + TTL (leader {leader})",
        expires - (sent + 30.0)
    );
    Ok(())
}

/// A blocking call made through a follower whose cluster-time estimate trails the leader's
/// line (here by ~0.45 s: the leader's clock was stepped back within `MAX_LAG`, so its stamps
/// follow its slow wall clock, and the follower restarted without its clock hint sees only
/// those) still waits the `timeout_seconds` it asked for, on the true clock. Before waits were
/// forwarded as the time left, the follower's deadline in cluster time made both waits end
/// early at the leader (seen: the follower 0.87 s behind, `WaitForWaitGroup` and
/// `AcquireLock` of 1 s answering `TIMED_OUT` after 0.14 s).
#[tokio::test]
async fn a_wait_through_a_follower_behind_on_cluster_time_lasts_its_whole_timeout() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (skews, mut cluster) = three_on_skews(dir.path()).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let follower = cluster.other_than(&[leader]);
    let at_leader = Locks::new(&cluster, leader, &key);
    let ok = |r: Answer| -> Result<serde_json::Value> {
        if r.status != 200 {
            bail!("{r:?}");
        }
        Ok(r.body)
    };
    ok(at_leader
        .rpc("CreateNamespace", json!({ "name": "ns" }))
        .await?)?;
    let in_an_hour = ((now() + 3600.0) * 1e9) as i64;
    ok(at_leader
        .rpc(
            "CreateWaitGroup",
            json!({ "namespace_name": "ns", "wait_group_name": "batch", "counter": 1, "expires_at": in_an_hour, "delete_after_finished_seconds": 600 }),
        )
        .await?)?;
    let lease = |process: &str| json!({ "namespace_name": "ns", "process_id": process, "ttl_seconds": 300 });
    let holder = ok(at_leader.rpc("CreateLockLease", lease("holder")).await?)?;
    let waiter = ok(at_leader.rpc("CreateLockLease", lease("waiter")).await?)?;
    let acquire = |lease: &serde_json::Value, timeout: u64| json!({ "namespace_name": "ns", "lock_name": "job", "exclusive": true, "lease_id": lease["lease"]["lease_id"], "timeout_seconds": timeout });
    let held = ok(at_leader.rpc("AcquireLock", acquire(&holder, 0)).await?)?;
    assert_eq!(held["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{held}");

    // The follower comes back with no hint and the leader's stamps 0.45 s behind its line.
    cluster
        .wait_for_clock_hint(follower, None, Duration::from_secs(10))
        .await?;
    cluster.kill(follower);
    std::fs::remove_file(cluster.clock_hint(follower))?;
    skews[&leader].set(-450)?;
    // The follower comes back only once the leader's stamps trail, so that every entry it
    // replays or catches up on was stamped ~0.45 s or more before it sees it. Restarted at
    // once, a fast machine replayed the entries stamped just before the step within 0.3 s;
    // that observation kept its estimate near the true clock, and the trailing stamps after
    // it extrapolate lower and say nothing new (CI failed so, 20 s without a trailing view).
    eventually(
        Duration::from_secs(10),
        "the leader's stamps to trail",
        || async {
            let sent = now();
            let tick = at_leader.rpc("CreateLockLease", lease("tick")).await.ok()?;
            // Cluster time, in nanoseconds since the epoch.
            let created = tick.body["lease"]["created_at"].as_i64()? as f64 / 1e9;
            (created < sent - 0.3).then_some(())
        },
    )
    .await?;
    cluster.restart_with_env(follower, &[], skews[&follower].env())?;
    let lag = eventually(
        Duration::from_secs(20),
        "the follower's estimate to trail",
        || async {
            // Live entries, stamped by the stepped leader, for the follower to observe.
            at_leader.rpc("CreateLockLease", lease("tick")).await.ok()?;
            cluster
                .metric(follower, "raftlock_clock_offset_seconds")
                .await
                .filter(|o| *o > 0.3)
        },
    )
    .await?;
    println!("follower {follower}: cluster time {lag:.2} s behind its (true) wall clock");

    let through_follower = Locks::new(&cluster, follower, &key);
    let started = std::time::Instant::now();
    let waited = ok(through_follower
        .rpc(
            "WaitForWaitGroup",
            json!({ "namespace_name": "ns", "wait_group_name": "batch", "timeout_seconds": 1 }),
        )
        .await?)?;
    let group_wait = started.elapsed();
    assert_eq!(
        waited["outcome"], "WAIT_GROUP_WAIT_OUTCOME_TIMED_OUT",
        "{waited}"
    );
    let started = std::time::Instant::now();
    let queued = ok(through_follower
        .rpc("AcquireLock", acquire(&waiter, 1))
        .await?)?;
    let lock_wait = started.elapsed();
    assert_eq!(queued["outcome"], "ACQUIRE_OUTCOME_TIMED_OUT", "{queued}");
    println!("1 s waits through the follower: wait group {group_wait:?}, lock {lock_wait:?}");
    assert!(
        group_wait >= Duration::from_secs(1),
        "wait group: {group_wait:?}"
    );
    assert!(lock_wait >= Duration::from_secs(1), "lock: {lock_wait:?}");
    Ok(())
}
