//! Wait groups and barriers end to end on a 3-node cluster (calls made through a follower):
//! every method, the documented errors, blocking waits woken by the write that ends them,
//! timeouts, expiry, and a barrier wait surviving a leader kill.

use std::time::{Duration, Instant};

use raftlock_tests::{unix_now, Cluster, Locks};
use serde_json::{json, Value};

const NS: &str = "pipelines";

async fn setup() -> anyhow::Result<(Cluster, Locks)> {
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let api = Locks::new(&cluster, cluster.other_than(&[leader]), &key);
    let ns = api.rpc("CreateNamespace", json!({ "name": NS })).await?;
    assert_eq!(ns.status, 200, "{ns:?}");
    Ok((cluster, api))
}

async fn call(api: &Locks, method: &str, body: Value) -> anyhow::Result<Value> {
    let r = api.rpc(method, body.clone()).await?;
    assert_eq!(r.status, 200, "{method} {body}: {r:?}");
    Ok(r.body)
}

async fn refused(
    api: &Locks,
    method: &str,
    body: Value,
    status: u16,
    code: &str,
) -> anyhow::Result<String> {
    let r = api.rpc(method, body.clone()).await?;
    assert_eq!(
        (r.status, r.code()),
        (status, code),
        "{method} {body}: {r:?}"
    );
    Ok(r.body["message"].as_str().unwrap_or("").to_string())
}

/// Nanoseconds since the epoch `secs` from now.
fn in_secs(secs: f64) -> i64 {
    ((unix_now() + secs) * 1e9) as i64
}

async fn wait_group(api: &Locks, name: &str, counter: u64) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "wait_group_name": name, "counter": counter, "expires_at": in_secs(3600.0), "delete_after_finished_seconds": 600, "metadata": { "team": "data" } });
    Ok(call(api, "CreateWaitGroup", body).await?["wait_group"].clone())
}

async fn complete(api: &Locks, name: &str, jobs: &[&str]) -> anyhow::Result<Value> {
    let jobs: Vec<Value> = jobs
        .iter()
        .map(|j| json!({ "job_id": j, "metadata": { "worker": "w7" } }))
        .collect();
    let body = json!({ "namespace_name": NS, "wait_group_name": name, "jobs": jobs });
    Ok(call(api, "CompleteJobsFromWaitGroup", body).await?["wait_group"].clone())
}

async fn barrier(api: &Locks, name: &str, expected: u64) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "barrier_name": name, "expected_processes": expected, "delete_inactive_after_seconds": 3600 });
    Ok(call(api, "CreateBarrier", body).await?["barrier"].clone())
}

async fn arrive(api: &Locks, name: &str, process: &str, generation: u64) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "barrier_name": name, "process_id": process, "expected_generation": generation });
    call(api, "ArriveAtBarrier", body).await
}

async fn wait_at(api: &Locks, name: &str, generation: u64, timeout: u64) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "barrier_name": name, "expected_generation": generation, "timeout_seconds": timeout });
    call(api, "WaitAtBarrier", body).await
}

#[tokio::test]
async fn every_wait_group_method_and_its_documented_errors() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let g = wait_group(&api, "batch", 3).await?;
    assert_eq!(
        (
            g["status"].as_str(),
            g["counter"].as_u64(),
            g["completed_jobs"].as_u64()
        ),
        (Some("WAIT_GROUP_STATUS_ACTIVE"), Some(3), Some(0))
    );
    let dup = json!({ "namespace_name": NS, "wait_group_name": "batch", "counter": 1, "expires_at": in_secs(3600.0), "delete_after_finished_seconds": 60 });
    refused(&api, "CreateWaitGroup", dup, 409, "already_exists").await?;
    let soon = json!({ "namespace_name": NS, "wait_group_name": "soon", "counter": 1, "expires_at": in_secs(10.0), "delete_after_finished_seconds": 60 });
    let message = refused(&api, "CreateWaitGroup", soon, 400, "invalid_argument").await?;
    assert!(message.contains("expires_at"), "{message}");
    let no_ns = json!({ "namespace_name": "nope", "wait_group_name": "x", "counter": 1, "expires_at": in_secs(3600.0), "delete_after_finished_seconds": 60 });
    refused(&api, "CreateWaitGroup", no_ns, 404, "not_found").await?;

    let g = complete(&api, "batch", &["shard-0", "shard-1", "shard-0"]).await?;
    assert_eq!(g["completed_jobs"], 2);
    let over = json!({ "namespace_name": NS, "wait_group_name": "batch", "jobs": [{ "job_id": "a" }, { "job_id": "b" }] });
    refused(
        &api,
        "CompleteJobsFromWaitGroup",
        over,
        409,
        "failed_precondition",
    )
    .await?;
    let jobs = call(
        &api,
        "ListWaitGroupCompletedJobs",
        json!({ "namespace_name": NS, "wait_group_name": "batch" }),
    )
    .await?;
    let ids: Vec<&str> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["shard-0", "shard-1"]);
    assert_eq!(jobs["jobs"][0]["metadata"]["worker"], "w7");

    let update = |counter: u64, version: Value| json!({ "namespace_name": NS, "wait_group_name": "batch", "description": "more", "counter": counter, "expires_at": in_secs(3600.0), "delete_after_finished_seconds": 600, "expected_version": version });
    refused(
        &api,
        "UpdateWaitGroup",
        update(5, json!(9)),
        409,
        "failed_precondition",
    )
    .await?;
    refused(
        &api,
        "UpdateWaitGroup",
        update(1, json!(1)),
        409,
        "failed_precondition",
    )
    .await?;
    let g = call(&api, "UpdateWaitGroup", update(4, json!(1))).await?;
    assert_eq!(
        (
            g["wait_group"]["version"].as_u64(),
            g["wait_group"]["counter"].as_u64()
        ),
        (Some(2), Some(4))
    );
    let got = call(
        &api,
        "GetWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "batch" }),
    )
    .await?;
    assert_eq!(got["wait_group"]["description"], "more");
    wait_group(&api, "another", 1).await?;
    let page = call(
        &api,
        "ListWaitGroups",
        json!({ "namespace_name": NS, "limit": 1 }),
    )
    .await?;
    assert_eq!(page["wait_groups"][0]["name"], "another");
    assert!(!page["next_pagination_token"].as_str().unwrap().is_empty());

    // Not complete yet: a wait of 1 s times out with the group as it is.
    let started = Instant::now();
    let timed_out = call(
        &api,
        "WaitForWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "batch", "timeout_seconds": 1 }),
    )
    .await?;
    assert_eq!(timed_out["outcome"], "WAIT_GROUP_WAIT_OUTCOME_TIMED_OUT");
    assert!(started.elapsed() >= Duration::from_secs(1));
    call(
        &api,
        "DeleteWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "batch" }),
    )
    .await?;
    call(
        &api,
        "DeleteWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "batch" }),
    )
    .await?;
    refused(
        &api,
        "GetWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "batch" }),
        404,
        "not_found",
    )
    .await?;
    refused(
        &api,
        "WaitForWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "batch", "timeout_seconds": 1 }),
        404,
        "not_found",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn waiters_on_a_wait_group_wake_on_its_last_job_or_its_expiry() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    wait_group(&api, "fan-in", 2).await?;
    let observers: Vec<_> = (0..3)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move {
                let body = json!({ "namespace_name": NS, "wait_group_name": "fan-in", "timeout_seconds": 30 });
                (call(&api, "WaitForWaitGroup", body).await, Instant::now())
            })
        })
        .collect();
    complete(&api, "fan-in", &["a"]).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        observers.iter().all(|o| !o.is_finished()),
        "one job of two: still waiting"
    );
    let done_at = Instant::now();
    let g = complete(&api, "fan-in", &["b"]).await?;
    assert_eq!(g["status"], "WAIT_GROUP_STATUS_COMPLETED");
    assert!(g["finished_at"].as_i64().unwrap() > 0);
    for o in observers {
        let (r, at) = o.await?;
        let r = r?;
        assert_eq!(r["outcome"], "WAIT_GROUP_WAIT_OUTCOME_COMPLETED", "{r}");
        assert_eq!(r["wait_group"]["completed_jobs"], 2);
        let latency = at.duration_since(done_at);
        assert!(
            latency < Duration::from_secs(1),
            "woken by the last job, not a poll: {latency:?}"
        );
    }
    // Expiry: an update brings expires_at 2 s ahead; a waiter is told EXPIRED when it passes.
    wait_group(&api, "late", 5).await?;
    let body = json!({ "namespace_name": NS, "wait_group_name": "late", "counter": 5, "expires_at": in_secs(2.0), "delete_after_finished_seconds": 60, "expected_version": 1 });
    call(&api, "UpdateWaitGroup", body).await?;
    let started = Instant::now();
    let r = call(
        &api,
        "WaitForWaitGroup",
        json!({ "namespace_name": NS, "wait_group_name": "late", "timeout_seconds": 30 }),
    )
    .await?;
    assert_eq!(r["outcome"], "WAIT_GROUP_WAIT_OUTCOME_EXPIRED", "{r}");
    assert_eq!(r["wait_group"]["status"], "WAIT_GROUP_STATUS_EXPIRED");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let late =
        json!({ "namespace_name": NS, "wait_group_name": "late", "jobs": [{ "job_id": "x" }] });
    refused(
        &api,
        "CompleteJobsFromWaitGroup",
        late,
        409,
        "failed_precondition",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_barrier_releases_every_waiter_when_the_last_process_arrives() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let b = barrier(&api, "phase", 3).await?;
    assert_eq!(
        (b["generation"].as_u64(), b["arrived_processes"].as_u64()),
        (Some(1), Some(0))
    );
    let peers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|p| {
            let api = api.clone();
            tokio::spawn(async move {
                let arrived = arrive(&api, "phase", p, 1).await?;
                assert_eq!(arrived["all_arrived"], false);
                let waited = wait_at(&api, "phase", 1, 30).await?;
                anyhow::Ok((waited, Instant::now()))
            })
        })
        .collect();
    raftlock_tests::eventually(Duration::from_secs(5), "two arrivals", || async {
        let b = api
            .rpc(
                "GetBarrier",
                json!({ "namespace_name": NS, "barrier_name": "phase" }),
            )
            .await
            .ok()?;
        (b.body["barrier"]["arrived_processes"] == 2).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        peers.iter().all(|p| !p.is_finished()),
        "two of three: nobody is released early"
    );
    let last_at = Instant::now();
    let last = arrive(&api, "phase", "c", 1).await?;
    assert_eq!(last["all_arrived"], true);
    assert_eq!(
        (
            last["barrier"]["generation"].as_u64(),
            last["barrier"]["arrived_processes"].as_u64()
        ),
        (Some(2), Some(0))
    );
    for p in peers {
        let (waited, at) = p.await??;
        assert_eq!(
            waited["outcome"], "BARRIER_WAIT_OUTCOME_TRIPPED",
            "{waited}"
        );
        let latency = at.duration_since(last_at);
        assert!(
            latency < Duration::from_secs(1),
            "woken by the last arrival: {latency:?}"
        );
    }
    // A retry of an arrival of the tripped generation is answered as tripped; a stale wait
    // answers at once; the next generation has not tripped.
    assert_eq!(arrive(&api, "phase", "a", 1).await?["all_arrived"], true);
    assert_eq!(
        wait_at(&api, "phase", 1, 30).await?["outcome"],
        "BARRIER_WAIT_OUTCOME_TRIPPED"
    );
    assert_eq!(
        wait_at(&api, "phase", 2, 1).await?["outcome"],
        "BARRIER_WAIT_OUTCOME_TIMED_OUT"
    );
    let wrong = json!({ "namespace_name": NS, "barrier_name": "phase", "process_id": "z", "expected_generation": 1 });
    refused(&api, "ArriveAtBarrier", wrong, 409, "failed_precondition").await?;
    let participants = call(
        &api,
        "ListBarrierParticipants",
        json!({ "namespace_name": NS, "barrier_name": "phase", "generation": 1 }),
    )
    .await?;
    let ids: Vec<&str> = participants["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["process_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);

    // Lowering expected_processes to the arrived trips the barrier.
    arrive(&api, "phase", "a", 2).await?;
    let update = |expected: u64| json!({ "namespace_name": NS, "barrier_name": "phase", "expected_processes": expected, "delete_inactive_after_seconds": 3600, "expected_version": 1 });
    refused(&api, "UpdateBarrier", update(0), 400, "invalid_argument").await?;
    let b = call(&api, "UpdateBarrier", update(1)).await?;
    assert_eq!(
        (
            b["barrier"]["generation"].as_u64(),
            b["barrier"]["version"].as_u64()
        ),
        (Some(3), Some(2))
    );
    let list = call(&api, "ListBarriers", json!({ "namespace_name": NS })).await?;
    assert_eq!(list["barriers"].as_array().map(Vec::len), Some(1));
    call(
        &api,
        "DeleteBarrier",
        json!({ "namespace_name": NS, "barrier_name": "phase" }),
    )
    .await?;
    refused(
        &api,
        "GetBarrier",
        json!({ "namespace_name": NS, "barrier_name": "phase" }),
        404,
        "not_found",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn every_coordination_validation_limit_is_invalid_argument_naming_the_field(
) -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    wait_group(&api, "g", 3).await?;
    barrier(&api, "b", 2).await?;
    let far = in_secs(3600.0);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "CreateWaitGroup",
            json!({ "namespace_name": NS, "wait_group_name": "x/y", "counter": 1, "expires_at": far, "delete_after_finished_seconds": 60 }),
            "wait_group_name",
        ),
        (
            "CreateWaitGroup",
            json!({ "namespace_name": NS, "wait_group_name": "x", "counter": 0, "expires_at": far, "delete_after_finished_seconds": 60 }),
            "counter",
        ),
        (
            "CreateWaitGroup",
            json!({ "namespace_name": NS, "wait_group_name": "x", "counter": 1, "expires_at": far, "delete_after_finished_seconds": 59 }),
            "delete_after_finished_seconds",
        ),
        (
            "CompleteJobsFromWaitGroup",
            json!({ "namespace_name": NS, "wait_group_name": "g", "jobs": [] }),
            "jobs",
        ),
        (
            "CompleteJobsFromWaitGroup",
            json!({ "namespace_name": NS, "wait_group_name": "g", "jobs": [{ "job_id": "a b" }] }),
            "job_id",
        ),
        (
            "WaitForWaitGroup",
            json!({ "namespace_name": NS, "wait_group_name": "g", "timeout_seconds": 301 }),
            "timeout_seconds",
        ),
        (
            "CreateBarrier",
            json!({ "namespace_name": NS, "barrier_name": "x", "expected_processes": 0, "delete_inactive_after_seconds": 60 }),
            "expected_processes",
        ),
        (
            "CreateBarrier",
            json!({ "namespace_name": NS, "barrier_name": "x", "expected_processes": 2, "delete_inactive_after_seconds": 0 }),
            "delete_inactive_after_seconds",
        ),
        (
            "ArriveAtBarrier",
            json!({ "namespace_name": NS, "barrier_name": "b", "process_id": "p", "expected_generation": 0 }),
            "expected_generation",
        ),
        (
            "WaitAtBarrier",
            json!({ "namespace_name": NS, "barrier_name": "b", "expected_generation": 0 }),
            "expected_generation",
        ),
        (
            "ListBarrierParticipants",
            json!({ "namespace_name": NS, "barrier_name": "b", "generation": 1, "limit": 251 }),
            "limit",
        ),
    ];
    for (method, body, field) in cases {
        let message = refused(&api, method, body.clone(), 400, "invalid_argument").await?;
        assert!(
            message.contains(field),
            "{method} {body}: {message:?} should name {field}"
        );
    }
    let groups = call(&api, "ListWaitGroups", json!({ "namespace_name": NS })).await?;
    assert_eq!(
        groups["wait_groups"].as_array().map(Vec::len),
        Some(1),
        "nothing was created"
    );
    let b = call(
        &api,
        "GetBarrier",
        json!({ "namespace_name": NS, "barrier_name": "b" }),
    )
    .await?;
    assert_eq!(b["barrier"]["arrived_processes"], 0, "nobody arrived");
    Ok(())
}

#[tokio::test]
async fn a_barrier_wait_survives_a_leader_kill() -> anyhow::Result<()> {
    let (mut cluster, api) = setup().await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    barrier(&api, "phase", 2).await?;
    arrive(&api, "phase", "a", 1).await?;
    let api_w = api.clone();
    let waiting = tokio::spawn(async move { wait_at(&api_w, "phase", 1, 30).await });
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the wait to reach the leader",
        || async { (cluster.metric(leader, "raftlock_waiters").await? == 1.0).then_some(()) },
    )
    .await?;
    cluster.kill(leader);
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    raftlock_tests::eventually(Duration::from_secs(10), "an arrival on the new leader", || async {
        let body = json!({ "namespace_name": NS, "barrier_name": "phase", "process_id": "b", "expected_generation": 1 });
        let r = api.rpc("ArriveAtBarrier", body).await.ok()?;
        (r.status == 200).then_some(())
    })
    .await?;
    let r = waiting.await??;
    assert_eq!(r["outcome"], "BARRIER_WAIT_OUTCOME_TRIPPED", "{r}");
    assert_eq!(r["barrier"]["generation"], 2);
    Ok(())
}

/// A wait forwarded again after a leader change keeps the deadline fixed when it first arrived:
/// the leader is killed 2 s into a 5 s wait, so a wait that started over at the new leader
/// would answer 2 s + the election + 5 s after it began.
#[tokio::test]
async fn a_barrier_wait_retried_at_a_new_leader_keeps_its_original_deadline() -> anyhow::Result<()>
{
    let (mut cluster, api) = setup().await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    barrier(&api, "slow", 2).await?;
    let started = std::time::Instant::now();
    let api_w = api.clone();
    let waiting = tokio::spawn(async move { wait_at(&api_w, "slow", 1, 5).await });
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the wait to reach the leader",
        || async { (cluster.metric(leader, "raftlock_waiters").await? == 1.0).then_some(()) },
    )
    .await?;
    // Places the fault 2 s into the wait (a point in time, not a synchronisation).
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
    cluster.kill(leader);
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let new_leader_seen = started.elapsed();
    let r = waiting.await??;
    let answered = started.elapsed();
    assert_eq!(r["outcome"], "BARRIER_WAIT_OUTCOME_TIMED_OUT", "{r}");
    let bound = new_leader_seen.max(Duration::from_secs(5)) + Duration::from_millis(1500);
    assert!(
        answered < bound,
        "answered after {answered:?}; the 5 s deadline (new leader seen at {new_leader_seen:?}) \
         allows {bound:?}"
    );
    Ok(())
}

#[tokio::test]
async fn the_sdk_and_the_cli_drive_a_wait_group_and_a_barrier() -> anyhow::Result<()> {
    use raftlock_client::{Client, JobReport, WaitGroupStatus};
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("sdk", "service_role", &[]).await?;
    let endpoints: Vec<String> = cluster.ids().iter().map(|id| cluster.addr(*id)).collect();
    let client = Client::new(endpoints.clone(), key.clone())?;
    client.create_namespace(NS, "", Default::default()).await?;
    let cli = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(raftlock_tests::binary());
        cmd.env("RAFTLOCK_ENDPOINTS", endpoints.join(","))
            .env("RAFTLOCK_KEY", &key)
            .env_remove("RAFTLOCK_PLATFORM_TOKEN")
            .args(args)
            .kill_on_drop(true);
        cmd
    };

    let status = cli(&["wg", "create", NS, "batch", "--counter", "2"])
        .status()
        .await?;
    assert!(status.success());
    let mut waiting = cli(&["wg", "wait", NS, "batch", "--timeout", "30"]).spawn()?;
    let job = |id: &str| JobReport {
        job_id: id.into(),
        metadata: Default::default(),
    };
    let g = client.complete_jobs(NS, "batch", vec![job("a")]).await?;
    assert_eq!(g.status, WaitGroupStatus::Active);
    let g = client
        .complete_jobs(NS, "batch", vec![job("a"), job("b")])
        .await?;
    assert_eq!(
        (g.status, g.completed_jobs),
        (WaitGroupStatus::Completed, 2)
    );
    assert_eq!(
        waiting.wait().await?.code(),
        Some(0),
        "the CLI's wait ends with the group"
    );
    let jobs = client
        .list_completed_jobs(NS, "batch", &Default::default())
        .await?;
    assert_eq!(jobs.items.len(), 2);

    let status = cli(&["barrier", "create", NS, "phase", "--expected", "2"])
        .status()
        .await?;
    assert!(status.success());
    let mut arriving = cli(&[
        "barrier",
        "arrive",
        NS,
        "phase",
        "--process-id",
        "a",
        "--wait",
        "30",
    ])
    .spawn()?;
    raftlock_tests::eventually(Duration::from_secs(10), "the CLI's arrival", || async {
        let b = client.get_barrier(NS, "phase").await.ok()?;
        (b.arrived_processes == 1).then_some(())
    })
    .await?;
    let r = client
        .arrive_at_barrier(NS, "phase", "b", 1, Default::default())
        .await?;
    assert!(r.all_arrived);
    assert_eq!(
        arriving.wait().await?.code(),
        Some(0),
        "the CLI's wait ends with the trip"
    );
    let r = client
        .wait_at_barrier(NS, "phase", 1, Duration::from_secs(5))
        .await?;
    assert_eq!(r.outcome, raftlock_client::BarrierWaitOutcome::Tripped);
    let status = cli(&[
        "barrier",
        "wait",
        NS,
        "phase",
        "--generation",
        "2",
        "--timeout",
        "1",
    ])
    .status()
    .await?;
    assert_eq!(status.code(), Some(75), "generation 2 does not trip");
    Ok(())
}

/// `timeout_seconds` written as `4` or `4.0` (what Python's `json` writes for a float) is the
/// same wait on every blocking method through a follower: each answers its timed-out outcome
/// after ~4 s. A follower that read only integers gave `4.0` the commit timeout alone and
/// answered 503 "leader unreachable" after 2 s.
#[tokio::test]
async fn every_blocking_wait_through_a_follower_reads_a_whole_float_timeout_as_seconds(
) -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let lease = |process: &str| {
        let api = api.clone();
        let body = json!({ "namespace_name": NS, "process_id": process, "ttl_seconds": 60 });
        async move {
            let r = call(&api, "CreateLockLease", body).await?;
            anyhow::Ok(r["lease"]["lease_id"].as_str().unwrap_or("").to_string())
        }
    };
    let (holder, waiter) = (lease("holder").await?, lease("waiter").await?);
    let lock = |lease: &str, timeout: Value| json!({ "namespace_name": NS, "lock_name": "jobs/a", "exclusive": true, "lease_id": lease, "timeout_seconds": timeout });
    call(&api, "AcquireLock", lock(&holder, json!(0))).await?;
    let sem = json!({ "namespace_name": NS, "semaphore_name": "s", "permits": 1 });
    call(&api, "CreateSemaphore", sem).await?;
    let sem_lease = |process: &str| {
        let api = api.clone();
        let body = json!({ "namespace_name": NS, "process_id": process, "ttl_seconds": 60 });
        async move {
            let r = call(&api, "CreateSemaphoreLease", body).await?;
            anyhow::Ok(r["lease"]["lease_id"].as_str().unwrap_or("").to_string())
        }
    };
    let (sem_holder, sem_waiter) = (sem_lease("holder").await?, sem_lease("waiter").await?);
    let acquire_sem = |lease: &str, timeout: Value| json!({ "namespace_name": NS, "semaphore_name": "s", "lease_id": lease, "weight": 1, "timeout_seconds": timeout });
    call(&api, "AcquireSemaphore", acquire_sem(&sem_holder, json!(0))).await?;
    wait_group(&api, "wg", 1).await?;
    barrier(&api, "b", 2).await?;

    for timeout in [json!(4), json!(4.0)] {
        let waits = [
            (
                "AcquireLock",
                lock(&waiter, timeout.clone()),
                "ACQUIRE_OUTCOME_TIMED_OUT",
            ),
            (
                "AcquireSemaphore",
                acquire_sem(&sem_waiter, timeout.clone()),
                "ACQUIRE_OUTCOME_TIMED_OUT",
            ),
            (
                "WaitForWaitGroup",
                json!({ "namespace_name": NS, "wait_group_name": "wg", "timeout_seconds": timeout }),
                "WAIT_GROUP_WAIT_OUTCOME_TIMED_OUT",
            ),
            (
                "WaitAtBarrier",
                json!({ "namespace_name": NS, "barrier_name": "b", "expected_generation": 1, "timeout_seconds": timeout }),
                "BARRIER_WAIT_OUTCOME_TIMED_OUT",
            ),
        ];
        let calls = waits.into_iter().map(|(method, body, outcome)| {
            let api = api.clone();
            async move {
                let started = Instant::now();
                let r = api.rpc(method, body).await?;
                anyhow::Ok((method, outcome, r, started.elapsed()))
            }
        });
        for answer in futures::future::join_all(calls).await {
            let (method, outcome, r, took) = answer?;
            assert_eq!(r.status, 200, "{method} timeout {timeout}: {r:?}");
            assert_eq!(
                r.body["outcome"], outcome,
                "{method} timeout {timeout}: {r:?}"
            );
            assert!(
                took >= Duration::from_secs(3) && took <= Duration::from_secs(5),
                "{method} timeout {timeout} answered after {took:?}"
            );
        }
    }
    Ok(())
}
