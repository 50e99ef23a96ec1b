//! Availability through faults and upgrades: one deadline per forwarded request,
//! leadership hand-off on SIGTERM, rolling restarts, and a Volcano-style client that renews
//! through a follower while leaders are killed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use raftlock_client::{Acquire, Client, LockToken, Release};
use raftlock_tests::disk_probe::{stalled_within, DiskProbe};
use raftlock_tests::{eventually, token, Cluster, Locks};
use serde_json::json;
use tokio::sync::watch;

/// These tests measure gaps and failover times in wall-clock terms; on a 2-core machine two
/// of them at once (cargo runs a binary's tests in parallel) stretch each other's numbers.
/// Each holds this for its whole run.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Moves leadership off `node` with the admin API, if it leads.
async fn lead_elsewhere(cluster: &Cluster, node: u64) -> anyhow::Result<u64> {
    let mut leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    if leader == node {
        let r = cluster
            .admin_post(node, "/admin/v1/cluster/leader", json!({}))
            .await?;
        anyhow::ensure!(r.status() == 200, "move leader: {}", r.status());
        leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
        anyhow::ensure!(leader != node, "leadership did not move");
    }
    Ok(leader)
}

/// Kong's Volcano SDK renews a held lock every TTL/3 and aborts the caller's work on the
/// first renewal that fails. Such a client, talking to one follower, must keep its 6 s lock
/// while the leader is killed -9 three times: every renewal the follower receives during a
/// failover is forwarded to the new leader within its deadline.
#[tokio::test]
async fn a_volcano_style_client_on_a_follower_keeps_its_lock_through_three_leader_kills(
) -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let locks = Locks::new(&cluster, follower, &key);
    let t = token();
    let held = locks.acquire("job", &t, 6).await?;
    assert_eq!(held.status, 200, "{:?}", held.body);

    let (stop, stopped) = watch::channel(false);
    let renewals = Arc::new(Mutex::new(0u32));
    let (renewed, mut renewed_rx) = watch::channel(());
    let renewer = {
        let (locks, t, renewals, mut stopped) =
            (locks.clone(), t.clone(), renewals.clone(), stopped);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = stopped.changed() => return Ok(()),
                }
                let started = Instant::now();
                let r = locks.renew("job", &t, 6).await?;
                if r.status != 200 {
                    anyhow::bail!(
                        "renewal failed after {:?}: {} {:?} (the SDK would abort the work)",
                        started.elapsed(),
                        r.status,
                        r.body
                    );
                }
                *renewals.lock().unwrap() += 1;
                renewed.send_replace(());
            }
        })
    };

    for round in 0..3 {
        let leader = lead_elsewhere(&cluster, follower).await?;
        // Kill the leader 200 ms before the next renewal is due, so that renewal reaches the
        // follower inside the failover (which takes at least lease + timeout = 625 ms).
        renewed_rx.borrow_and_update();
        renewed_rx.changed().await?;
        tokio::time::sleep(Duration::from_millis(1800)).await;
        cluster.kill(leader);
        let before = *renewals.lock().unwrap();
        // Two renewals through the new leader, so the next kill falls on a settled cluster.
        eventually(
            Duration::from_secs(15),
            "two renewals after the kill",
            || async { (*renewals.lock().unwrap() >= before + 2).then_some(()) },
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!("round {round}: {e} (the renewer stops at its first failed renewal)")
        })?;
        cluster.restart(leader)?;
        cluster.wait_for_leader(Duration::from_secs(10)).await?;
    }
    stop.send(true)?;
    renewer.await??;
    let read = locks.read("job").await?;
    assert_eq!(read.body["held"], true);
    assert_eq!(read.body["fencing_token"].as_u64(), Some(held.fencing()));
    Ok(())
}

/// With the leader frozen (SIGSTOP: connections accepted, nothing answered), a call through a
/// follower answers within the commit timeout (2 s) + 10 %; a renewal, which is safe to
/// repeat, and a create, resent under the request id the follower minted for it (applied
/// once however often it is sent), are answered 200 by the new leader rather than 503.
#[tokio::test]
async fn with_the_leader_frozen_a_follower_answers_within_the_deadline() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let locks = Locks::new(&cluster, follower, &key);
    let t = token();
    assert_eq!(locks.acquire("frozen", &t, 30).await?.status, 200);
    let ns = locks
        .rpc("CreateNamespace", json!({ "name": "frozen-ns" }))
        .await?;
    assert_eq!(ns.status, 200, "{:?}", ns.body);

    cluster.pause(leader)?;
    let started = Instant::now();
    let (renew, create) = tokio::join!(
        locks.renew("frozen", &t, 30),
        locks.rpc(
            "CreateLockLease",
            json!({ "namespace_name": "frozen-ns", "process_id": "worker", "ttl_seconds": 30 })
        ),
    );
    let elapsed = started.elapsed();
    cluster.resume(leader)?;
    let (renew, create) = (renew?, create?);
    println!(
        "renew {} / create {} answered within {elapsed:?}",
        renew.status, create.status
    );
    assert!(
        elapsed <= Duration::from_millis(2200),
        "answered after {elapsed:?}"
    );
    assert_eq!(renew.status, 200, "renewal: {:?}", renew.body);
    assert_eq!(create.status, 200, "create: {:?}", create.body);
    // Once, however many times it was sent.
    let leases = locks
        .rpc("ListLockLeases", json!({ "namespace_name": "frozen-ns" }))
        .await?;
    let leases = leases.body["leases"].as_array().map_or(0, Vec::len);
    assert_eq!(leases, 1, "one lease");
    Ok(())
}

/// Successful writes of SDK workers, timestamped; errors are collected, not retried.
struct Load {
    successes: Arc<Mutex<Vec<Instant>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: watch::Sender<bool>,
    workers: Vec<tokio::task::JoinHandle<u64>>,
    /// The disk's own stalls meanwhile: a pause the disk caused is not the cluster's.
    disk: DiskProbe,
}

/// What a finished [`Load`] saw.
struct LoadOutcome {
    errors: Vec<String>,
    /// The time with no successful write anywhere that lasted longest beyond the disk's own
    /// stall within it.
    worst_gap: Duration,
    /// How much of that gap the disk under the nodes was stalled (a synced write took ≥ 20 ms).
    disk_stalled: Duration,
    cycles: u64,
}

impl LoadOutcome {
    /// Asserts no client error, and writes paused at most `bound` beyond the disk's own stall.
    fn assert_pauses_within(&self, bound: Duration, cluster: &Cluster) {
        assert!(self.errors.is_empty(), "client errors: {:#?}", self.errors);
        assert!(
            self.worst_gap <= bound + self.disk_stalled,
            "writes paused for {:?}, the disk was stalled {:?} of it; node logs: {}",
            self.worst_gap,
            self.disk_stalled,
            node_logs(cluster)
        );
    }
}

/// Every node's log (warnings and errors, all incarnations), for a failure's report.
fn node_logs(cluster: &Cluster) -> String {
    cluster
        .ids()
        .iter()
        .map(|id| format!("\n--- node {id} ---\n{}", cluster.log_lines(*id).join("\n")))
        .collect()
}

impl Load {
    /// `n` workers, each acquiring and releasing its own lock in a loop through an SDK client
    /// that knows every node.
    fn start(cluster: &Cluster, key: &str, n: usize) -> anyhow::Result<Load> {
        let disk = DiskProbe::start(cluster.dir())?;
        let endpoints: Vec<String> = cluster.ids().iter().map(|id| cluster.addr(*id)).collect();
        let successes = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = watch::channel(false);
        let mut workers = Vec::new();
        for w in 0..n {
            // Workers start at different endpoints, so some talk to the leader.
            let mut ordered = endpoints.clone();
            ordered.rotate_left(w % endpoints.len());
            let client = Client::new(ordered, key)?;
            let (successes, errors, stopped) = (successes.clone(), errors.clone(), stopped.clone());
            workers.push(tokio::spawn(async move {
                let name = format!("worker-{w}");
                let mut last_fencing = 0;
                let mut cycles = 0;
                while !*stopped.borrow() {
                    let token = LockToken::new();
                    match client.acquire(&name, token, Duration::from_secs(30)).await {
                        Ok(Acquire::Acquired(lease)) => {
                            if lease.fencing_token <= last_fencing {
                                errors.lock().unwrap().push(format!(
                                    "{name}: fencing {} after {last_fencing}",
                                    lease.fencing_token
                                ));
                            }
                            last_fencing = lease.fencing_token;
                            successes.lock().unwrap().push(Instant::now());
                        }
                        other => {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("{name} acquire: {other:?}"));
                            continue;
                        }
                    }
                    match client.release(&name, token).await {
                        Ok(Release::Released) => successes.lock().unwrap().push(Instant::now()),
                        other => errors
                            .lock()
                            .unwrap()
                            .push(format!("{name} release: {other:?}")),
                    }
                    cycles += 1;
                }
                cycles
            }));
        }
        Ok(Load {
            successes,
            errors,
            stop,
            workers,
            disk,
        })
    }

    /// Stops the workers and the disk probe; reports the errors and, of the times with no
    /// successful write anywhere between `from` and the end, the one that lasted longest
    /// beyond the disk's own stall within it.
    async fn finish(self, from: Instant) -> anyhow::Result<LoadOutcome> {
        self.stop.send(true)?;
        let mut cycles = 0;
        for w in self.workers {
            cycles += w.await?;
        }
        let stalls = self.disk.finish();
        let mut times: Vec<Instant> = self
            .successes
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|t| *t >= from)
            .collect();
        times.sort();
        let mut gaps: Vec<(Duration, Instant)> =
            times.windows(2).map(|w| (w[1] - w[0], w[0])).collect();
        gaps.sort();
        gaps.reverse();
        let shown: Vec<_> = gaps
            .iter()
            .take(5)
            .map(|(len, at)| (len, *at - from))
            .collect();
        println!("largest gaps (length, at): {shown:?}");
        // Every gap is judged by what it lasted beyond the disk's own stall within it; the
        // one with the largest excess is reported (the longest may be mostly disk).
        let (worst_gap, disk_stalled) = gaps
            .iter()
            .map(|&(len, at)| (len, stalled_within(&stalls, at, at + len)))
            .max_by_key(|&(len, stalled)| len.saturating_sub(stalled))
            .unwrap_or((Duration::MAX, Duration::ZERO));
        let slowest = stalls.iter().map(|s| s.1).max().unwrap_or_default();
        println!(
            "disk: {} synced writes ≥ 20 ms, slowest {slowest:?}; worst gap beyond the disk: \
             {worst_gap:?} with {disk_stalled:?} stalled",
            stalls.len()
        );
        let errors = self.errors.lock().unwrap().clone();
        Ok(LoadOutcome {
            errors,
            worst_gap,
            disk_stalled,
            cycles,
        })
    }

    /// Waits until the load has run for `at_least` since `since` with more than 50
    /// successful writes in that time.
    async fn running(&self, since: Instant, at_least: Duration) -> anyhow::Result<()> {
        eventually(Duration::from_secs(10), "load running", || async {
            (since.elapsed() >= at_least && self.successes_since(since).await > 50).then_some(())
        })
        .await
    }

    async fn successes_since(&self, t: Instant) -> usize {
        self.successes
            .lock()
            .unwrap()
            .iter()
            .filter(|s| **s >= t)
            .count()
    }
}

/// SIGTERM to the leader under load: it hands leadership over, answers or forwards what it
/// accepted, then exits. No client sees an error and writes pause only briefly: ≤ 300 ms with
/// 3 voters; with 5, one more follower must grant once its lease (375 ms) lapses.
// Multi-threaded: `terminate` waits for the process on the test's thread, and the load must
// keep running meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_off_without_a_client_error() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    sigterm_hand_off(3, Duration::from_millis(300)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_of_5_voters_hands_off_without_a_client_error() -> anyhow::Result<()>
{
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    sigterm_hand_off(5, Duration::from_millis(800)).await
}

async fn sigterm_hand_off(voters: u64, max_gap: Duration) -> anyhow::Result<()> {
    let mut cluster = Cluster::start(voters).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let load = Load::start(&cluster, &key, 6)?;
    // A running cluster, not one just elected: a leader hands off at once only after its
    // own leader lease (375 ms from its election) has passed (docs/operations.md).
    load.running(Instant::now(), Duration::from_secs(1)).await?;

    let stopped_at = Instant::now();
    cluster.terminate(leader)?;
    println!(
        "leader {leader} exited {:?} after SIGTERM",
        stopped_at.elapsed()
    );
    let new_leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    assert_ne!(new_leader, leader);
    load.running(Instant::now(), Duration::ZERO).await?;
    let outcome = load.finish(stopped_at).await?;
    println!(
        "{voters} voters, {} cycles; worst gap beyond the disk's stall: {:?}",
        outcome.cycles, outcome.worst_gap
    );
    outcome.assert_pauses_within(max_gap, &cluster);
    Ok(())
}

/// Under steady load and no fault, nobody campaigns: the term does not move (no spurious
/// election with the 250 ms election timeout on this 2-core machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_cluster_under_load_keeps_its_term() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let term = cluster.metric(leader, "raftlock_raft_term").await;
    let load = Load::start(&cluster, &key, 16)?;
    let began = Instant::now();
    // The observation window itself: 30 s of load (STEADY_SECS=600 for the 10-minute run).
    let secs = std::env::var("STEADY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let outcome = load.finish(began).await?;
    println!("{} cycles in {secs} s", outcome.cycles);
    assert!(
        outcome.errors.is_empty(),
        "client errors: {:#?}",
        outcome.errors
    );
    for id in cluster.ids() {
        assert_eq!(
            cluster.metric(id, "raftlock_raft_term").await,
            term,
            "node {id} saw an election"
        );
    }
    Ok(())
}

/// Every node restarted in turn (SIGTERM, start again, next node), twice over, under load: no
/// client error, no unanswered request, fencing tokens keep increasing per lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_twice_over_costs_no_client_error() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let load = Load::start(&cluster, &key, 6)?;
    let began = Instant::now();
    load.running(began, Duration::from_secs(1)).await?;
    for _ in 0..2 {
        for id in cluster.ids() {
            let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
            println!("{:?}: terminating {id} (leader {leader})", began.elapsed());
            cluster.terminate(id)?;
            println!("{:?}: {id} exited", began.elapsed());
            cluster.restart(id)?;
            cluster.wait_for_leader(Duration::from_secs(10)).await?;
            // The restarted node has caught up before the next one stops.
            caught_up(&cluster, id).await?;
        }
    }
    let outcome = load.finish(began).await?;
    println!(
        "{} cycles; worst gap beyond the disk's stall: {:?}",
        outcome.cycles, outcome.worst_gap
    );
    outcome.assert_pauses_within(Duration::from_millis(500), &cluster);
    Ok(())
}

/// `kill -9` of the leader, 20 times: time from the kill to the first write answered 200
/// through a surviving node. Goal: worst ≤ 1 s — measured 0.76 s here, but one
/// slow kill on a loaded CI machine must not fail the build, so the test holds the median
/// (0.66 s measured; 1.10 s with the old 400/800 ms timeouts) under 0.9 s and the worst
/// under the chaos goal of 1.5 s, and prints the figures.
#[tokio::test]
async fn killing_the_leader_20_times_serving_again_in_under_a_second() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let t = token();
    let mut times = Vec::new();
    for _ in 0..20 {
        let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
        let survivor = Locks::new(&cluster, cluster.other_than(&[leader]), &key);
        assert_eq!(survivor.acquire("kill-20", &t, 60).await?.status, 200);
        // Past the new leader's own lease, as in a cluster that has been running.
        tokio::time::sleep(Duration::from_millis(700)).await;
        cluster.kill(leader);
        let killed = Instant::now();
        eventually(
            Duration::from_secs(5),
            "a write through a survivor",
            || async {
                let r = survivor.renew("kill-20", &t, 60).await.ok()?;
                (r.status == 200).then_some(())
            },
        )
        .await?;
        times.push(killed.elapsed());
        cluster.restart(leader)?;
        cluster.wait_for_leader(Duration::from_secs(10)).await?;
    }
    times.sort();
    let (median, worst) = (times[times.len() / 2], times[times.len() - 1]);
    println!("kill -9 → serving: median {median:?}, worst {worst:?}; all {times:?}");
    assert!(
        median <= Duration::from_millis(900),
        "median failover {median:?}"
    );
    assert!(
        worst <= Duration::from_millis(1500),
        "worst failover {worst:?}"
    );
    Ok(())
}

/// Neither a follower cut off for 10 s and healed, nor a follower restarted, deposes a healthy
/// leader: the leader and its term stay the same (pre-vote).
#[tokio::test]
async fn a_partitioned_or_restarted_follower_does_not_depose_the_leader() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    use raftlock_tests::proxy::Rule;
    let mut cluster = Cluster::start_behind_proxy(3, &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let term_before = cluster.metric(leader, "raftlock_raft_term").await;
    let follower = cluster.other_than(&[leader]);
    let ids = cluster.ids();
    let proxy = cluster.proxy().expect("behind a proxy");
    proxy.isolate(follower, &ids, Rule::Drop);
    // The fault itself lasts 10 s (many election timeouts of the cut-off node).
    tokio::time::sleep(Duration::from_secs(10)).await;
    proxy.heal();
    caught_up(&cluster, follower).await?;
    assert_eq!(
        cluster.wait_for_leader(Duration::from_secs(5)).await?,
        leader
    );
    assert_eq!(
        cluster.metric(leader, "raftlock_raft_term").await,
        term_before,
        "the healed follower bumped the term"
    );

    cluster.kill(follower);
    cluster.restart(follower)?;
    caught_up(&cluster, follower).await?;
    assert_eq!(
        cluster.wait_for_leader(Duration::from_secs(5)).await?,
        leader
    );
    assert_eq!(
        cluster.metric(leader, "raftlock_raft_term").await,
        term_before,
        "the restarted follower bumped the term"
    );
    Ok(())
}

/// Waits until `id` has applied everything the leader had when called.
async fn caught_up(cluster: &Cluster, id: u64) -> anyhow::Result<()> {
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let target = cluster
        .metric(leader, "raftlock_raft_last_log_index")
        .await
        .unwrap_or(0.0);
    eventually(Duration::from_secs(10), "the node caught up", || async {
        let applied = cluster.metric(id, "raftlock_raft_applied_index").await?;
        (applied >= target).then_some(())
    })
    .await?;
    Ok(())
}

/// The Rust SDK's `with_lock` and the CLI's `lock run`, both talking to one follower only,
/// hold a 6 s lock through three leader kills without losing it.
#[tokio::test]
async fn sdk_with_lock_and_cli_lock_run_keep_their_locks_through_three_leader_kills(
) -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let client = Client::new([cluster.addr(follower)], key.clone())?;
    let (done, mut finish) = watch::channel(false);
    let sdk = tokio::spawn(async move {
        client
            .with_lock("sdk-job", Duration::from_secs(6), |guard| async move {
                tokio::select! {
                    _ = guard.cancelled() => Err(format!("lock lost: {:?}", guard.loss_reason())),
                    _ = finish.wait_for(|d| *d) => Ok(guard.fencing_token()),
                }
            })
            .await
    });
    let mut cli = tokio::process::Command::new(raftlock_tests::binary())
        .env("RAFTLOCK_ENDPOINTS", cluster.addr(follower))
        .env("RAFTLOCK_KEY", &key)
        .env_remove("RAFTLOCK_PLATFORM_TOKEN")
        .args(["lock", "run", "cli-job", "--ttl", "6", "--", "sleep", "30"])
        .kill_on_drop(true)
        .spawn()?;
    let observer = Locks::new(&cluster, follower, &key);
    eventually(Duration::from_secs(10), "both locks held", || async {
        let sdk = observer.read("sdk-job").await.ok()?.body["held"] == true;
        let cli = observer.read("cli-job").await.ok()?.body["held"] == true;
        (sdk && cli).then_some(())
    })
    .await?;

    for _ in 0..3 {
        let leader = lead_elsewhere(&cluster, follower).await?;
        cluster.kill(leader);
        // Renewals (every ~2 s) go through the follower during and after the failover.
        let killed = Instant::now();
        eventually(
            Duration::from_secs(10),
            "a leader and 2.5 s of renewals",
            || async {
                let serving = observer.read("sdk-job").await.ok()?.status == 200;
                (serving && killed.elapsed() > Duration::from_millis(2500)).then_some(())
            },
        )
        .await?;
        cluster.restart(leader)?;
        caught_up(&cluster, leader).await?;
    }
    assert!(
        cli.try_wait()?.is_none(),
        "lock run ended early (lock lost)"
    );
    done.send(true)?;
    match sdk.await?? {
        raftlock_client::WithLock::Completed(Ok(_)) => {}
        other => panic!("with_lock: {other:?}"),
    }
    // The CLI's command is still running under its lock: stop it.
    cli.start_kill()?;
    cli.wait().await?;
    Ok(())
}

/// Both followers' disks stall at once (every `fdatasync` held 900 ms, injected by strace)
/// while the leader's is fine — what a shared disk did in the 30-minute soak, where six
/// elections in one minute stopped every write for 2 s. The followers keep receiving the
/// leader's heartbeats; only their answers wait for their flushes. Nobody campaigns: the term
/// does not move, and writes go on at the followers' disk speed.
#[tokio::test]
async fn followers_whose_disks_stall_keep_their_working_leader() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let term = cluster.metric(leader, "raftlock_raft_term").await;
    for follower in cluster.ids().into_iter().filter(|id| *id != leader) {
        cluster.kill(follower);
        cluster.restart_wrapped(follower, slow_disk())?;
    }
    let locks = Locks::new(&cluster, leader, &key);
    // Back and caught up (slowly: every flush of theirs takes 900 ms).
    let first = token();
    eventually(
        Duration::from_secs(60),
        "a write with the slow followers",
        || async {
            // One token throughout: an attempt that timed out may still have been applied.
            let a = locks.acquire("first", &first, 60).await.ok()?;
            (a.status == 200).then_some(())
        },
    )
    .await?;
    writes_go_on_in_one_term(&cluster, &locks, term, "followers'").await?;
    Ok(())
}

/// Writes through `locks` for 10 s with some node's flushes held 900 ms (`whose` names it): at
/// least 3 succeed, their median takes at least 800 ms (so the flushes were slow), and no
/// node's term moves from `term`. A write that waited for two slow flushes in a row may miss
/// the commit timeout (503); a fresh lock per attempt, as one answered 503 may still apply.
async fn writes_go_on_in_one_term(
    cluster: &Cluster,
    locks: &Locks,
    term: Option<f64>,
    whose: &str,
) -> anyhow::Result<()> {
    let (mut took, mut unavailable) = (Vec::new(), 0);
    let began = Instant::now();
    let mut attempt = 0;
    while began.elapsed() < Duration::from_secs(10) {
        let sent = Instant::now();
        attempt += 1;
        let a = locks
            .acquire(&format!("slow-{attempt}"), &token(), 60)
            .await?;
        match a.status {
            200 => took.push(sent.elapsed()),
            503 => unavailable += 1,
            other => panic!("{other}: {:?}", a.body),
        }
    }
    took.sort();
    println!(
        "{} writes in 10 s ({unavailable} × 503), sorted: {took:?}",
        took.len()
    );
    assert!(took.len() >= 3, "writes stopped: {took:?}");
    let median = took[took.len() / 2];
    assert!(
        median >= Duration::from_millis(800),
        "the {whose} flushes were not slow: median write {median:?}"
    );
    for id in cluster.ids() {
        assert_eq!(
            cluster.metric(id, "raftlock_raft_term").await,
            term,
            "node {id} saw an election"
        );
    }
    Ok(())
}

/// A wrapper that holds every `fdatasync` of the node 900 ms (strace fault injection): a disk
/// that stalls on every flush.
fn slow_disk() -> Vec<String> {
    disk_held(Duration::from_millis(900))
}

/// A wrapper that holds every `fdatasync` of the node `by`.
fn disk_held(by: Duration) -> Vec<String> {
    [
        "strace",
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=fdatasync",
        "-e",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("inject=fdatasync:delay_enter={}ms", by.as_millis())])
    .collect()
}

/// Attaches `wrapper` (an strace command line) to the running node `id`; killing the tracer
/// detaches it, and the cluster's drop kills the node.
async fn attach(
    cluster: &Cluster,
    id: u64,
    wrapper: &[String],
) -> anyhow::Result<std::process::Child> {
    let pid = cluster.pid(id).context("the node's pid")?;
    let tracer = std::process::Command::new(&wrapper[0])
        .args(&wrapper[1..])
        .args(["-p", &pid.to_string()])
        .stdin(std::process::Stdio::null())
        .spawn()
        .context("strace")?;
    eventually(Duration::from_secs(10), "strace to attach", || async {
        traced(pid).then_some(())
    })
    .await?;
    Ok(tracer)
}

/// Whether every thread of `pid` has a tracer.
fn traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("status"))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("TracerPid:"))?;
                Some(line.split_whitespace().nth(1)? != "0")
            })
            .unwrap_or(false)
    })
}

/// The leader's own disk stalls on every flush (900 ms). openraft 0.9's core waits for the
/// leader's flush and sends no heartbeat meanwhile, so the followers heard nothing for longer
/// than lease + election timeout and replaced a working leader on every write; the leader's
/// beacon (`raftlock_server::election`) keeps them: the term does not move.
#[tokio::test]
async fn a_leader_whose_disk_stalls_keeps_leading() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let slow = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    // Attached to the running leader: restarted slow, it would lose every election to a
    // fast node.
    let mut tracer = attach(&cluster, slow, &slow_disk()).await?;
    let term = cluster.metric(slow, "raftlock_raft_term").await;
    let locks = Locks::new(&cluster, slow, &key);
    writes_go_on_in_one_term(&cluster, &locks, term, "leader's").await?;
    let beacons = cluster.metric(slow, "raftlock_leader_beacons_total").await;
    println!("beacons sent by the slow leader: {beacons:?}");
    if std::env::var_os("RAFTLOCK_TEST_LOG").is_none() {
        // The operator reading why writes paused sees the disk named in the node's log.
        let named = cluster.log_lines(slow);
        assert!(
            named.iter().any(|l| l.contains("slow WAL write")),
            "the slow leader's log does not name its disk: {named:#?}"
        );
    }
    let _ = tracer.kill();
    let _ = tracer.wait();
    Ok(())
}

/// A leader whose disk hangs (every `fdatasync` held 20 s) is still replaced: its beacon
/// stops once a write has taken `WRITE_PATIENCE` (2 s), and the followers elect as after a
/// crash — a write is served by a new leader within patience + failover + slack.
#[tokio::test]
async fn a_leader_whose_disk_hangs_is_still_replaced() -> anyhow::Result<()> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    cluster.lift_rate_limit("acme").await?;
    let hung = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let mut tracer = attach(&cluster, hung, &disk_held(Duration::from_secs(20))).await?;
    let via = cluster.other_than(&[hung]);
    let locks = Locks::new(&cluster, via, &key);
    let began = Instant::now();
    let mut attempt = 0;
    // Served means a new leader: the hung one's core waits for its disk and commits nothing.
    eventually(
        Duration::from_secs(20),
        "a write under a new leader",
        || {
            attempt += 1;
            let name = format!("after-hang-{attempt}");
            let locks = &locks;
            async move {
                let a = locks.acquire(&name, &token(), 60).await.ok()?;
                (a.status == 200).then_some(())
            }
        },
    )
    .await?;
    let took = began.elapsed();
    let term = cluster.metric(via, "raftlock_raft_term").await;
    println!("a write served {took:?} after node {hung}'s disk hung (term now {term:?})");
    assert!(
        took <= Duration::from_secs(6),
        "a leader with a hung disk held the cluster for {took:?}"
    );
    let _ = tracer.kill();
    let _ = tracer.wait();
    Ok(())
}
