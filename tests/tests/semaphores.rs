//! Semaphores end to end on a 3-node cluster (calls made through a follower): every method,
//! every documented error, blocking acquires woken by a release, timed out for good, and
//! surviving a leader kill.

use std::time::{Duration, Instant};

use raftlock_tests::{Cluster, Locks};
use serde_json::{json, Value};

const NS: &str = "third_parties";

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

/// `method` answers `status` with `code`.
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

async fn semaphore(api: &Locks, name: &str, permits: u64) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "semaphore_name": name, "description": "API", "permits": permits, "metadata": { "vendor": "v1" } });
    Ok(call(api, "CreateSemaphore", body).await?["semaphore"].clone())
}

async fn lease(api: &Locks, process: &str, ttl: u64) -> anyhow::Result<String> {
    let body = json!({ "namespace_name": NS, "process_id": process, "ttl_seconds": ttl });
    let r = call(api, "CreateSemaphoreLease", body).await?;
    Ok(r["lease"]["lease_id"].as_str().unwrap().to_string())
}

async fn acquire(
    api: &Locks,
    sem: &str,
    lease: &str,
    weight: u64,
    timeout: u64,
) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "semaphore_name": sem, "lease_id": lease, "weight": weight, "timeout_seconds": timeout, "metadata": { "host": "worker-7" } });
    call(api, "AcquireSemaphore", body).await
}

async fn release(api: &Locks, sem: &str, lease: &str) -> anyhow::Result<Value> {
    let body = json!({ "namespace_name": NS, "semaphore_name": sem, "lease_id": lease });
    call(api, "ReleaseSemaphore", body).await
}

async fn queued_waiters(cluster: &Cluster) -> Option<u64> {
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await.ok()?;
    Some(cluster.metric(leader, "raftlock_queued_waiters").await? as u64)
}

#[tokio::test]
async fn every_semaphore_method_and_its_documented_errors() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let s = semaphore(&api, "partner_1", 5).await?;
    assert_eq!(
        (
            s["permits"].as_u64(),
            s["active_holds"].as_u64(),
            s["version"].as_u64()
        ),
        (Some(5), Some(0), Some(1))
    );
    assert_eq!(s["metadata"]["vendor"], "v1");
    let dup = json!({ "namespace_name": NS, "semaphore_name": "partner_1", "permits": 1 });
    refused(&api, "CreateSemaphore", dup, 409, "already_exists").await?;
    let no_ns = json!({ "namespace_name": "nope", "semaphore_name": "x", "permits": 1 });
    refused(&api, "CreateSemaphore", no_ns, 404, "not_found").await?;

    let a = lease(&api, "host-1/pid-1", 60).await?;
    let b = lease(&api, "host-2/pid-2", 60).await?;
    assert!(a.starts_with("ls_") && a.len() == 31);
    let got = call(
        &api,
        "GetSemaphoreLease",
        json!({ "namespace_name": NS, "lease_id": a }),
    )
    .await?;
    assert_eq!(got["lease"]["process_id"], "host-1/pid-1");
    let leases = call(
        &api,
        "ListSemaphoreLeases",
        json!({ "namespace_name": NS, "process_id": "host-2/pid-2" }),
    )
    .await?;
    assert_eq!(leases["leases"].as_array().map(Vec::len), Some(1));
    assert_eq!(leases["leases"][0]["lease_id"], b.as_str());

    let first = acquire(&api, "partner_1", &a, 3, 0).await?;
    assert_eq!(first["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    assert_eq!(first["semaphore"]["active_holds"], 3);
    let token_a = first["fencing_token"].as_u64().unwrap();
    assert!(token_a > 0);
    let busy = acquire(&api, "partner_1", &b, 3, 0).await?;
    assert_eq!(
        (busy["outcome"].as_str(), busy["fencing_token"].as_u64()),
        (Some("ACQUIRE_OUTCOME_UNAVAILABLE"), Some(0))
    );
    let second = acquire(&api, "partner_1", &b, 2, 0).await?;
    assert_eq!(second["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    assert!(second["fencing_token"].as_u64().unwrap() > token_a);
    let too_heavy =
        json!({ "namespace_name": NS, "semaphore_name": "partner_1", "lease_id": a, "weight": 6 });
    let message = refused(
        &api,
        "AcquireSemaphore",
        too_heavy,
        409,
        "failed_precondition",
    )
    .await?;
    assert!(
        message.contains("weight: exceeds semaphore permits"),
        "{message}"
    );

    // A lock lease is not a semaphore lease.
    let lock_lease = call(
        &api,
        "CreateLockLease",
        json!({ "namespace_name": NS, "process_id": "p", "ttl_seconds": 60 }),
    )
    .await?;
    let lock_lease = lock_lease["lease"]["lease_id"]
        .as_str()
        .unwrap()
        .to_string();
    let wrong_kind = json!({ "namespace_name": NS, "semaphore_name": "partner_1", "lease_id": lock_lease, "weight": 1 });
    refused(&api, "AcquireSemaphore", wrong_kind, 404, "not_found").await?;

    let holders = call(
        &api,
        "ListSemaphoreHolders",
        json!({ "namespace_name": NS, "semaphore_name": "partner_1" }),
    )
    .await?;
    let ids: Vec<&str> = holders["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["lease_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [a.as_str(), b.as_str()], "arrival order");
    assert_eq!(holders["holders"][0]["weight"], 3);
    assert_eq!(holders["holders"][0]["metadata"]["host"], "worker-7");

    let update = |permits: u64, version: Value| json!({ "namespace_name": NS, "semaphore_name": "partner_1", "description": "raised", "permits": permits, "expected_version": version });
    refused(
        &api,
        "UpdateSemaphore",
        update(10, json!(7)),
        409,
        "failed_precondition",
    )
    .await?;
    refused(
        &api,
        "UpdateSemaphore",
        update(10, Value::Null),
        400,
        "invalid_argument",
    )
    .await?;
    let message = refused(
        &api,
        "UpdateSemaphore",
        update(4, json!(1)),
        409,
        "failed_precondition",
    )
    .await?;
    assert!(message.contains("permits"), "{message}");
    let updated = call(&api, "UpdateSemaphore", update(10, json!(1))).await?;
    assert_eq!(
        (
            updated["semaphore"]["version"].as_u64(),
            updated["semaphore"]["permits"].as_u64()
        ),
        (Some(2), Some(10))
    );
    assert!(
        updated["semaphore"]["metadata"]
            .as_object()
            .unwrap()
            .is_empty(),
        "a full replacement"
    );

    let released = release(&api, "partner_1", &a).await?;
    assert_eq!(released["semaphore"]["active_holds"], 2);
    let again = release(&api, "partner_1", &a).await?;
    assert_eq!(
        again["semaphore"]["active_holds"], 2,
        "releasing what is not held changes nothing"
    );
    let ghost = json!({ "namespace_name": NS, "semaphore_name": "partner_1", "lease_id": "ls_0000000000000000000000000000" });
    refused(&api, "ReleaseSemaphore", ghost, 404, "not_found").await?;

    let refreshed = call(
        &api,
        "RefreshSemaphoreLease",
        json!({ "namespace_name": NS, "lease_id": b, "ttl_seconds": 120 }),
    )
    .await?;
    assert!(refreshed["lease"]["expires_at"].as_i64() > got["lease"]["expires_at"].as_i64());
    call(
        &api,
        "RevokeSemaphoreLease",
        json!({ "namespace_name": NS, "lease_id": b }),
    )
    .await?;
    let after = call(
        &api,
        "GetSemaphore",
        json!({ "namespace_name": NS, "semaphore_name": "partner_1" }),
    )
    .await?;
    assert_eq!(
        (
            after["semaphore"]["active_holds"].as_u64(),
            after["semaphore"]["active_holders_count"].as_u64()
        ),
        (Some(0), Some(0))
    );
    refused(
        &api,
        "RevokeSemaphoreLease",
        json!({ "namespace_name": NS, "lease_id": b }),
        404,
        "not_found",
    )
    .await?;
    refused(
        &api,
        "GetSemaphoreLease",
        json!({ "namespace_name": NS, "lease_id": b }),
        404,
        "not_found",
    )
    .await?;

    semaphore(&api, "partner_0", 1).await?;
    let page = call(
        &api,
        "ListSemaphores",
        json!({ "namespace_name": NS, "limit": 1 }),
    )
    .await?;
    assert_eq!(page["semaphores"][0]["name"], "partner_0");
    let token = page["next_pagination_token"].as_str().unwrap();
    let next = call(
        &api,
        "ListSemaphores",
        json!({ "namespace_name": NS, "limit": 1, "pagination_token": token }),
    )
    .await?;
    assert_eq!(next["semaphores"][0]["name"], "partner_1");

    call(
        &api,
        "DeleteSemaphore",
        json!({ "namespace_name": NS, "semaphore_name": "partner_1" }),
    )
    .await?;
    call(
        &api,
        "DeleteSemaphore",
        json!({ "namespace_name": NS, "semaphore_name": "partner_1" }),
    )
    .await?;
    refused(
        &api,
        "GetSemaphore",
        json!({ "namespace_name": NS, "semaphore_name": "partner_1" }),
        404,
        "not_found",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn every_semaphore_validation_limit_is_invalid_argument_naming_the_field(
) -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    semaphore(&api, "s", 3).await?;
    let l = lease(&api, "v", 60).await?;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "CreateSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "a/b", "permits": 1 }),
            "semaphore_name",
        ),
        (
            "CreateSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "x".repeat(129), "permits": 1 }),
            "semaphore_name",
        ),
        (
            "CreateSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "z", "permits": 0 }),
            "permits",
        ),
        (
            "CreateSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "z", "permits": 1, "description": "d".repeat(1025) }),
            "description",
        ),
        (
            "AcquireSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "s", "lease_id": l, "weight": 0 }),
            "weight",
        ),
        (
            "AcquireSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "s", "lease_id": l, "weight": 1, "timeout_seconds": 301 }),
            "timeout_seconds",
        ),
        (
            "CreateSemaphoreLease",
            json!({ "namespace_name": NS, "process_id": "p", "ttl_seconds": 301 }),
            "ttl_seconds",
        ),
        (
            "ListSemaphores",
            json!({ "namespace_name": NS, "limit": 251 }),
            "limit",
        ),
        (
            "ListSemaphoreHolders",
            json!({ "namespace_name": NS, "semaphore_name": "s", "pagination_token": "zz" }),
            "pagination_token",
        ),
        (
            "AcquireSemaphore",
            json!({ "namespace_name": NS, "semaphore_name": "s", "lease_id": l, "weight": 1, "exclusive": true }),
            "exclusive",
        ),
    ];
    for (method, body, field) in cases {
        let message = refused(&api, method, body.clone(), 400, "invalid_argument").await?;
        assert!(
            message.contains(field),
            "{method} {body}: {message:?} should name {field}"
        );
    }
    let list = call(&api, "ListSemaphores", json!({ "namespace_name": NS })).await?;
    assert_eq!(
        list["semaphores"].as_array().map(Vec::len),
        Some(1),
        "nothing was created"
    );
    assert_eq!(
        list["semaphores"][0]["active_holds"], 0,
        "nothing was acquired"
    );
    Ok(())
}

#[tokio::test]
async fn a_blocked_semaphore_acquire_wakes_on_release_in_fifo_order() -> anyhow::Result<()> {
    let (cluster, api) = setup().await?;
    semaphore(&api, "pool", 2).await?;
    let holder = lease(&api, "holder", 60).await?;
    let heavy = lease(&api, "heavy", 60).await?;
    let light = lease(&api, "light", 60).await?;
    acquire(&api, "pool", &holder, 1, 0).await?;
    let (api2, h) = (api.clone(), heavy.clone());
    let heavy_call =
        tokio::spawn(async move { (acquire(&api2, "pool", &h, 2, 30).await, Instant::now()) });
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the heavy acquire to be queued",
        || async { (queued_waiters(&cluster).await? == 1).then_some(()) },
    )
    .await?;
    // One permit is free, but the head of the queue wants two: a newcomer does not overtake.
    let newcomer = acquire(&api, "pool", &light, 1, 0).await?;
    assert_eq!(newcomer["outcome"], "ACQUIRE_OUTCOME_UNAVAILABLE");
    assert!(
        !heavy_call.is_finished(),
        "the heavy acquire waits while a permit is held"
    );
    let released_at = Instant::now();
    release(&api, "pool", &holder).await?;
    let (r, granted_at) = heavy_call.await?;
    let r = r?;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{r}");
    assert_eq!(r["semaphore"]["active_holds"], 2);
    assert!(r["fencing_token"].as_u64().unwrap() > 0);
    let latency = granted_at.duration_since(released_at);
    println!("blocked semaphore acquire granted {latency:?} after the release");
    assert!(
        latency < Duration::from_secs(1),
        "woken by the release, not a poll: {latency:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_timed_out_semaphore_waiter_is_never_granted_later() -> anyhow::Result<()> {
    let (cluster, api) = setup().await?;
    semaphore(&api, "pool", 1).await?;
    let holder = lease(&api, "holder", 60).await?;
    let waiter = lease(&api, "waiter", 60).await?;
    acquire(&api, "pool", &holder, 1, 0).await?;
    let started = Instant::now();
    let r = acquire(&api, "pool", &waiter, 1, 1).await?;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_TIMED_OUT");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        queued_waiters(&cluster).await,
        Some(0),
        "the cancel left the queue empty"
    );
    release(&api, "pool", &holder).await?;
    let holders = call(
        &api,
        "ListSemaphoreHolders",
        json!({ "namespace_name": NS, "semaphore_name": "pool" }),
    )
    .await?;
    assert!(
        holders["holders"].as_array().unwrap().is_empty(),
        "never granted after TIMED_OUT: {holders}"
    );
    Ok(())
}

/// A waiter whose weight a lowered `permits` can no longer hold is refused at once as a new
/// acquire of that weight is (409), not answered `TIMED_OUT` after its timeout.
#[tokio::test]
async fn lowering_permits_below_a_waiting_weight_refuses_the_waiter() -> anyhow::Result<()> {
    let (cluster, api) = setup().await?;
    let created = semaphore(&api, "pool", 3).await?;
    let holder = lease(&api, "holder", 60).await?;
    let waiter = lease(&api, "waiter", 60).await?;
    acquire(&api, "pool", &holder, 2, 0).await?;
    let heavy = {
        let (api, waiter) = (api.clone(), waiter.clone());
        tokio::spawn(async move {
            let body = json!({ "namespace_name": NS, "semaphore_name": "pool", "lease_id": waiter, "weight": 3, "timeout_seconds": 30 });
            api.rpc("AcquireSemaphore", body).await
        })
    };
    raftlock_tests::eventually(Duration::from_secs(5), "the waiter queued", || async {
        (queued_waiters(&cluster).await? == 1).then_some(())
    })
    .await?;
    let started = Instant::now();
    call(
        &api,
        "UpdateSemaphore",
        json!({ "namespace_name": NS, "semaphore_name": "pool", "description": "API", "permits": 2, "metadata": {}, "expected_version": created["version"] }),
    )
    .await?;
    let r = heavy.await??;
    assert_eq!((r.status, r.code()), (409, "failed_precondition"), "{r:?}");
    assert!(
        r.body["message"].as_str().unwrap_or("").contains("permits"),
        "{r:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered when dropped, not at its timeout"
    );
    Ok(())
}

#[tokio::test]
async fn a_waiting_semaphore_call_survives_a_leader_kill() -> anyhow::Result<()> {
    let (mut cluster, api) = setup().await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    semaphore(&api, "pool", 3).await?;
    let holder = lease(&api, "holder", 60).await?;
    let waiter = lease(&api, "waiter", 60).await?;
    acquire(&api, "pool", &holder, 3, 0).await?;
    let (api_w, w) = (api.clone(), waiter.clone());
    let waiting = tokio::spawn(async move { acquire(&api_w, "pool", &w, 2, 30).await });
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the waiter to be queued",
        || async { (queued_waiters(&cluster).await? == 1).then_some(()) },
    )
    .await?;
    cluster.kill(leader);
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    raftlock_tests::eventually(
        Duration::from_secs(10),
        "release on the new leader",
        || async {
            let body =
                json!({ "namespace_name": NS, "semaphore_name": "pool", "lease_id": holder });
            let r = api.rpc("ReleaseSemaphore", body).await.ok()?;
            (r.status == 200).then_some(())
        },
    )
    .await?;
    let r = waiting.await??;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{r}");
    let holders = call(
        &api,
        "ListSemaphoreHolders",
        json!({ "namespace_name": NS, "semaphore_name": "pool" }),
    )
    .await?;
    let holders = holders["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "exactly one holder: {holders:?}");
    assert_eq!(
        (
            holders[0]["lease_id"].as_str(),
            holders[0]["weight"].as_u64()
        ),
        (Some(waiter.as_str()), Some(2))
    );
    Ok(())
}

#[tokio::test]
async fn the_sdk_and_the_cli_drive_a_semaphore() -> anyhow::Result<()> {
    use raftlock_client::{AcquireSemaphoreRequest, Client, PageRequest};
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("sdk", "service_role", &[]).await?;
    let endpoints: Vec<String> = cluster.ids().iter().map(|id| cluster.addr(*id)).collect();
    let client = Client::new(endpoints.clone(), key.clone())?;
    client.create_namespace(NS, "", Default::default()).await?;
    let sem = client
        .create_semaphore(NS, "pool", "", 2, Default::default())
        .await?;
    assert_eq!(sem.permits, 2);
    let ttl = Duration::from_secs(60);
    let mine = client.create_semaphore_lease(NS, "sdk", ttl).await?;
    let req = AcquireSemaphoreRequest {
        namespace_name: NS.into(),
        semaphore_name: "pool".into(),
        lease_id: mine.lease_id.clone(),
        weight: 2,
        ..Default::default()
    };
    let got = client.acquire_semaphore(&req).await?;
    assert!(got.acquired() && got.fencing_token > 0);

    let cli = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(raftlock_tests::binary());
        cmd.env("RAFTLOCK_ENDPOINTS", endpoints.join(","))
            .env("RAFTLOCK_KEY", &key)
            .env_remove("RAFTLOCK_PLATFORM_TOKEN")
            .args(args)
            .kill_on_drop(true);
        cmd
    };
    let out = cli(&[
        "sem",
        "lease",
        "create",
        NS,
        "--process-id",
        "cli",
        "--json",
    ])
    .output()
    .await?;
    assert!(out.status.success(), "{out:?}");
    let lease: Value = serde_json::from_slice(&out.stdout)?;
    let theirs = lease["lease_id"].as_str().unwrap().to_string();
    // Full: the CLI's acquire is not granted and exits 75.
    let status = cli(&["sem", "acquire", NS, "pool", "--lease", &theirs])
        .status()
        .await?;
    assert_eq!(status.code(), Some(75));
    client.release_semaphore(NS, "pool", &mine.lease_id).await?;
    let out = cli(&[
        "sem", "acquire", NS, "pool", "--lease", &theirs, "--weight", "2", "--json",
    ])
    .output()
    .await?;
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout)?;
    assert!(answer["fencing_token"].as_u64().unwrap() > got.fencing_token);
    let holders = client
        .list_semaphore_holders(NS, "pool", &PageRequest::default())
        .await?;
    assert_eq!(holders.items.len(), 1);
    assert_eq!(holders.items[0].lease_id, theirs);
    let status = cli(&["sem", "update", NS, "pool", "--permits", "1"])
        .status()
        .await?;
    assert_eq!(status.code(), Some(1), "cannot shrink below what is held");
    let status = cli(&["sem", "update", NS, "pool", "--permits", "5"])
        .status()
        .await?;
    assert!(status.success());
    assert_eq!(client.get_semaphore(NS, "pool").await?.permits, 5);
    Ok(())
}
