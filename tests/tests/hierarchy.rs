//! hierarchical end to end on a 3-node cluster: namespaces, leases, path locks, blocking acquire.

use std::time::{Duration, Instant};

use raftlock_tests::{Cluster, Locks};
use serde_json::{json, Value};

async fn setup() -> anyhow::Result<(Cluster, Locks)> {
    let cluster = Cluster::start(3).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let api = Locks::new(&cluster, follower, &key);
    let ns = api
        .rpc(
            "CreateNamespace",
            json!({ "name": "UserObjects", "description": "d" }),
        )
        .await?;
    assert_eq!(ns.status, 200, "{ns:?}");
    Ok((cluster, api))
}

/// Length of the replicated waiter queue, from the leader's `raftlock_queued_waiters` gauge.
async fn queued_waiters(cluster: &Cluster) -> Option<u64> {
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await.ok()?;
    let value = cluster.metric(leader, "raftlock_queued_waiters").await?;
    Some(value as u64)
}

async fn lease(api: &Locks, process: &str, ttl: u64) -> anyhow::Result<String> {
    let r = api
        .rpc(
            "CreateLockLease",
            json!({ "namespace_name": "UserObjects", "process_id": process, "ttl_seconds": ttl }),
        )
        .await?;
    assert_eq!(r.status, 200, "{r:?}");
    Ok(r.body["lease"]["lease_id"].as_str().unwrap().to_string())
}

async fn acquire(
    api: &Locks,
    lease: &str,
    name: &str,
    exclusive: bool,
    timeout: u64,
) -> anyhow::Result<Value> {
    let r = api
        .rpc(
            "AcquireLock",
            json!({ "namespace_name": "UserObjects", "lock_name": name, "exclusive": exclusive, "lease_id": lease, "timeout_seconds": timeout, "metadata": { "host": "n1" } }),
        )
        .await?;
    assert_eq!(r.status, 200, "{r:?}");
    Ok(r.body)
}

#[tokio::test]
async fn path_rules_and_diagnostics() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let a = lease(&api, "worker-a", 60).await?;
    let b = lease(&api, "worker-b", 60).await?;
    assert!(a.starts_with("ls_") && a.len() == 31);

    let got = acquire(&api, &a, "users/123", true, 0).await?;
    assert_eq!(got["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    assert_eq!(got["lock"]["state"], "LOCK_STATE_EXCLUSIVE_LOCKED");
    assert_eq!(got["lock"]["lock_holders"][0]["metadata"]["host"], "n1");

    for (name, exclusive, reason) in [
        ("users/123", false, "CONTENTION_REASON_PEER"),
        ("users/123/profile", false, "CONTENTION_REASON_ANCESTOR"),
        ("users", true, "CONTENTION_REASON_DESCENDANT"),
    ] {
        let r = acquire(&api, &b, name, exclusive, 0).await?;
        assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_UNAVAILABLE", "{name}");
        assert_eq!(r["reason"], reason, "{name}");
        let blocking = r["blocking_locks"].as_array().unwrap();
        if reason == "CONTENTION_REASON_PEER" {
            assert!(blocking.is_empty());
        } else {
            assert_eq!(blocking[0]["name"], "users/123", "{name}");
        }
    }
    assert_eq!(
        acquire(&api, &b, "users/456", true, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED",
        "sibling"
    );
    assert_eq!(
        acquire(&api, &a, "users/123/profile", true, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED",
        "own descendant"
    );

    let list = api
        .rpc("ListLocks", json!({ "namespace_name": "UserObjects" }))
        .await?;
    assert_eq!(list.body["locks"].as_array().unwrap().len(), 3);
    let never = api
        .rpc(
            "GetLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "never/used" }),
        )
        .await?;
    assert_eq!(never.body["lock"]["state"], "LOCK_STATE_UNLOCKED");
    assert_eq!(never.body["lock"]["locked_at"], 0);

    let revoke = api
        .rpc(
            "RevokeLockLease",
            json!({ "namespace_name": "UserObjects", "lease_id": a }),
        )
        .await?;
    assert_eq!(revoke.status, 200);
    let list = api
        .rpc("ListLocks", json!({ "namespace_name": "UserObjects" }))
        .await?;
    assert_eq!(
        list.body["locks"].as_array().unwrap().len(),
        1,
        "revoke released everything"
    );
    let gone = api
        .rpc(
            "GetLockLease",
            json!({ "namespace_name": "UserObjects", "lease_id": a }),
        )
        .await?;
    assert_eq!((gone.status, gone.code()), (404, "not_found"));
    Ok(())
}

#[tokio::test]
async fn a_blocked_acquire_through_a_follower_wakes_on_release() -> anyhow::Result<()> {
    let (cluster, api) = setup().await?;
    let holder = lease(&api, "holder", 60).await?;
    let waiter = lease(&api, "waiter", 60).await?;
    assert_eq!(
        acquire(&api, &holder, "jobs/x", true, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED"
    );

    let api2 = api.clone();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move {
        let r = acquire(&api2, &w, "jobs/x", true, 30).await;
        (r, Instant::now())
    });
    // Release only once the waiter is in the replicated queue (the leader's gauge says so).
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the waiter to be queued",
        || async { (queued_waiters(&cluster).await? == 1).then_some(()) },
    )
    .await?;
    assert!(
        !waiting.is_finished(),
        "the waiter must block while the lock is held"
    );
    let released_at = Instant::now();
    let rel = api
        .rpc(
            "ReleaseLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "jobs/x", "lease_id": holder }),
        )
        .await?;
    assert_eq!(rel.status, 200);
    let (r, granted_at) = waiting.await?;
    let r = r?;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    assert_eq!(r["lock"]["lock_holders"][0]["lease_id"], waiter.as_str());
    let latency = granted_at.duration_since(released_at);
    println!("blocked acquire granted {latency:?} after the release");
    assert!(
        latency < Duration::from_secs(1),
        "woken by the release, not a poll: {latency:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_timed_out_waiter_is_told_so_and_never_granted_later() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let holder = lease(&api, "holder", 60).await?;
    let waiter = lease(&api, "waiter", 60).await?;
    acquire(&api, &holder, "a", false, 0).await?;
    let started = Instant::now();
    let r = acquire(&api, &waiter, "a/b", true, 1).await?;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_TIMED_OUT");
    assert_eq!(r["reason"], "CONTENTION_REASON_ANCESTOR");
    assert!(started.elapsed() >= Duration::from_secs(1));
    api.rpc(
        "ReleaseLock",
        json!({ "namespace_name": "UserObjects", "lock_name": "a", "lease_id": holder }),
    )
    .await?;
    let get = api
        .rpc(
            "GetLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "a/b" }),
        )
        .await?;
    assert_eq!(
        get.body["lock"]["state"], "LOCK_STATE_UNLOCKED",
        "never granted after TIMED_OUT"
    );
    Ok(())
}

#[tokio::test]
async fn errors_use_grpc_codes() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let dup = api
        .rpc("CreateNamespace", json!({ "name": "UserObjects" }))
        .await?;
    assert_eq!((dup.status, dup.code()), (409, "already_exists"));
    let missing = api
        .rpc(
            "CreateLockLease",
            json!({ "namespace_name": "Nope", "process_id": "p", "ttl_seconds": 10 }),
        )
        .await?;
    assert_eq!((missing.status, missing.code()), (404, "not_found"));
    let bad = api
        .rpc(
            "CreateLockLease",
            json!({ "namespace_name": "UserObjects", "process_id": "p", "ttl_seconds": 301 }),
        )
        .await?;
    assert_eq!((bad.status, bad.code()), (400, "invalid_argument"));
    assert!(
        bad.body["message"]
            .as_str()
            .unwrap()
            .contains("ttl_seconds"),
        "names the field"
    );
    let bad_name = api
        .rpc(
            "GetLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "a//b" }),
        )
        .await?;
    assert_eq!(
        (bad_name.status, bad_name.code()),
        (400, "invalid_argument")
    );
    let unknown = api.rpc("Frobnicate", json!({})).await?;
    assert_eq!((unknown.status, unknown.code()), (501, "unimplemented"));
    let ver = api
        .rpc(
            "UpdateNamespace",
            json!({ "namespace_name": "UserObjects", "description": "x", "expected_version": 7 }),
        )
        .await?;
    // A well-formed update that the namespace's current version refuses: 409, not 400
    // (docs/semantics.md, deliberate differences).
    assert_eq!((ver.status, ver.code()), (409, "failed_precondition"));
    // An update is always conditional (Grackle: versions start at 1, <= 0 is invalid):
    // without expected_version, or with 0, it is refused and changes nothing.
    let before = api
        .rpc("GetNamespace", json!({ "namespace_name": "UserObjects" }))
        .await?;
    for blind in [
        json!({ "namespace_name": "UserObjects", "description": "blind" }),
        json!({ "namespace_name": "UserObjects", "description": "blind", "expected_version": 0 }),
    ] {
        let r = api.rpc("UpdateNamespace", blind).await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_argument"),
            "{:?}",
            r.body
        );
        assert!(r.body["message"]
            .as_str()
            .unwrap_or("")
            .contains("expected_version"));
    }
    let after = api
        .rpc("GetNamespace", json!({ "namespace_name": "UserObjects" }))
        .await?;
    assert_eq!(
        before.body, after.body,
        "a refused update changed the namespace"
    );
    let version = after.body["namespace"]["version"].as_u64().unwrap();
    let updated = api
        .rpc(
            "UpdateNamespace",
            json!({ "namespace_name": "UserObjects", "description": "x", "expected_version": version }),
        )
        .await?;
    assert_eq!(updated.status, 200, "{:?}", updated.body);
    assert_eq!(
        updated.body["namespace"]["version"].as_u64(),
        Some(version + 1)
    );
    Ok(())
}

#[tokio::test]
async fn fifo_an_exclusive_waiter_is_served_before_a_later_shared_request() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let s1 = lease(&api, "reader-1", 60).await?;
    let x = lease(&api, "writer", 60).await?;
    let s2 = lease(&api, "reader-2", 60).await?;
    assert_eq!(
        acquire(&api, &s1, "doc", false, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED"
    );

    let (api_x, x_id) = (api.clone(), x.clone());
    let writer = tokio::spawn(async move { acquire(&api_x, &x_id, "doc", true, 20).await });
    // Wait until the writer is queued: a newcomer's shared request (timeout 0) is refused
    // only once a waiter is ahead of it. A probe that got through is released again.
    let probe = lease(&api, "probe", 60).await?;
    raftlock_tests::eventually(Duration::from_secs(5), "writer to queue", || async {
        let got = acquire(&api, &probe, "doc", false, 0).await.ok()?;
        if got["outcome"] == "ACQUIRE_OUTCOME_UNAVAILABLE" {
            return Some(());
        }
        let release =
            json!({ "namespace_name": "UserObjects", "lock_name": "doc", "lease_id": probe });
        api.rpc("ReleaseLock", release).await.ok()?;
        None
    })
    .await?;
    let (api_s, s2_id) = (api.clone(), s2.clone());
    let reader = tokio::spawn(async move { acquire(&api_s, &s2_id, "doc", false, 20).await });
    api.rpc(
        "ReleaseLock",
        json!({ "namespace_name": "UserObjects", "lock_name": "doc", "lease_id": s1 }),
    )
    .await?;
    let w = writer.await??;
    assert_eq!(
        w["outcome"], "ACQUIRE_OUTCOME_ACQUIRED",
        "exclusive waiter first"
    );
    assert!(
        !reader.is_finished(),
        "the later shared request still waits behind the writer"
    );
    let get = api
        .rpc(
            "GetLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "doc" }),
        )
        .await?;
    assert_eq!(get.body["lock"]["state"], "LOCK_STATE_EXCLUSIVE_LOCKED");
    api.rpc(
        "ReleaseLock",
        json!({ "namespace_name": "UserObjects", "lock_name": "doc", "lease_id": x }),
    )
    .await?;
    assert_eq!(reader.await??["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    Ok(())
}

#[tokio::test]
async fn lease_expiry_releases_holders_and_wakes_waiters() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let short = lease(&api, "dies", 2).await?;
    let waiter = lease(&api, "waits", 60).await?;
    assert_eq!(
        acquire(&api, &short, "j", true, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED"
    );
    let started = Instant::now();
    let r = acquire(&api, &waiter, "j", true, 15).await?;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "granted after the 2 s lease lapsed, took {waited:?}"
    );
    let gone = api
        .rpc(
            "RefreshLockLease",
            json!({ "namespace_name": "UserObjects", "lease_id": short, "ttl_seconds": 10 }),
        )
        .await?;
    assert_eq!(
        (gone.status, gone.code()),
        (404, "not_found"),
        "refresh of an expired lease"
    );
    Ok(())
}

#[tokio::test]
async fn a_waiting_call_survives_a_leader_kill() -> anyhow::Result<()> {
    let (mut cluster, api) = setup().await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let holder = lease(&api, "holder", 60).await?;
    let waiter = lease(&api, "waiter", 60).await?;
    assert_eq!(
        acquire(&api, &holder, "w", true, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED"
    );
    let (api_w, w_id) = (api.clone(), waiter.clone());
    let waiting = tokio::spawn(async move { acquire(&api_w, &w_id, "w", true, 30).await });
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the waiter to be queued",
        || async { (queued_waiters(&cluster).await? == 1).then_some(()) },
    )
    .await?;
    cluster.kill(leader);
    cluster.wait_for_leader(Duration::from_secs(10)).await?;
    let rel = raftlock_tests::eventually(Duration::from_secs(10), "release on the new leader", || async {
        let r = api.rpc("ReleaseLock", json!({ "namespace_name": "UserObjects", "lock_name": "w", "lease_id": holder })).await.ok()?;
        (r.status == 200).then_some(r)
    })
    .await?;
    assert_eq!(rel.status, 200);
    let r = waiting.await??;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{r}");
    assert_eq!(
        r["lock"]["lock_holders"].as_array().map(Vec::len),
        Some(1),
        "exactly one holder"
    );
    Ok(())
}

#[tokio::test]
async fn the_path_compatibility_matrix_end_to_end() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let relations = [
        ("same path", "m/a", "m/a", "CONTENTION_REASON_PEER"),
        (
            "ancestor held",
            "m/a",
            "m/a/b",
            "CONTENTION_REASON_ANCESTOR",
        ),
        (
            "descendant held",
            "m/a/b",
            "m/a",
            "CONTENTION_REASON_DESCENDANT",
        ),
        (
            "deep descendant held",
            "m/a/b/c/d",
            "m/a",
            "CONTENTION_REASON_DESCENDANT",
        ),
        ("sibling", "m/a/b", "m/a/c", ""),
        ("unrelated", "m/a/b/c", "m/d/e", ""),
    ];
    let mut case = 0;
    for (what, held, wanted) in relations
        .iter()
        .map(|(w, h, r, reason)| (w, (h, reason), r))
    {
        for holder_x in [true, false] {
            for requester_x in [true, false] {
                case += 1;
                let ns = format!("Matrix{case}");
                let created = api.rpc("CreateNamespace", json!({ "name": ns })).await?;
                assert_eq!(created.status, 200);
                let mk = |p: &'static str| {
                    let api = api.clone();
                    let ns = ns.clone();
                    async move {
                        let r = api
                            .rpc(
                                "CreateLockLease",
                                json!({ "namespace_name": ns, "process_id": p, "ttl_seconds": 60 }),
                            )
                            .await?;
                        anyhow::Ok(r.body["lease"]["lease_id"].as_str().unwrap().to_string())
                    }
                };
                let (a, b) = (mk("a").await?, mk("b").await?);
                let acq = |lease: &str, name: &str, x: bool| {
                    api.rpc("AcquireLock", json!({ "namespace_name": ns, "lock_name": name, "exclusive": x, "lease_id": lease, "timeout_seconds": 0 }))
                };
                assert_eq!(
                    acq(&a, held.0, holder_x).await?.body["outcome"],
                    "ACQUIRE_OUTCOME_ACQUIRED"
                );
                let r = acq(&b, wanted, requester_x).await?;
                let compatible = held.1.is_empty() || (!holder_x && !requester_x);
                let label = format!("{what}: holder X={holder_x}, requester X={requester_x}");
                if compatible {
                    assert_eq!(r.body["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{label}");
                    assert_eq!(r.body["reason"], "CONTENTION_REASON_UNSPECIFIED", "{label}");
                } else {
                    assert_eq!(r.body["outcome"], "ACQUIRE_OUTCOME_UNAVAILABLE", "{label}");
                    assert_eq!(r.body["reason"], *held.1, "{label}");
                }
                if compatible {
                    let release =
                        json!({ "namespace_name": ns, "lock_name": wanted, "lease_id": b });
                    assert_eq!(api.rpc("ReleaseLock", release).await?.status, 200);
                }
                let own = acq(&a, wanted, requester_x).await?;
                assert_eq!(
                    own.body["outcome"], "ACQUIRE_OUTCOME_ACQUIRED",
                    "{label}: a lease never blocks itself"
                );
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn blocking_locks_are_capped_at_50() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let holder = lease(&api, "many", 60).await?;
    let other = lease(&api, "blocked", 60).await?;
    for i in 0..60 {
        assert_eq!(
            acquire(&api, &holder, &format!("tree/leaf{i:02}"), true, 0).await?["outcome"],
            "ACQUIRE_OUTCOME_ACQUIRED"
        );
    }
    let r = acquire(&api, &other, "tree", false, 0).await?;
    assert_eq!(r["reason"], "CONTENTION_REASON_DESCENDANT");
    assert_eq!(r["blocking_locks"].as_array().unwrap().len(), 50);
    Ok(())
}

#[tokio::test]
async fn every_validation_limit_is_invalid_argument_naming_the_field() -> anyhow::Result<()> {
    let (_c, api) = setup().await?;
    let l = lease(&api, "v", 60).await?;
    let long = |n: usize| "a".repeat(n);
    let meta33: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases: Vec<(&str, Value, &str)> = vec![
        ("CreateNamespace", json!({ "name": "" }), "name"),
        ("CreateNamespace", json!({ "name": long(129) }), "name"),
        ("CreateNamespace", json!({ "name": "bad.name" }), "name"),
        (
            "CreateNamespace",
            json!({ "name": "ok1", "description": long(1025) }),
            "description",
        ),
        (
            "CreateNamespace",
            json!({ "name": "ok2", "metadata": meta33 }),
            "metadata",
        ),
        (
            "CreateNamespace",
            json!({ "name": "ok3", "metadata": { "k": long(257) } }),
            "metadata",
        ),
        (
            "CreateNamespace",
            json!({ "name": "ok4", "metadata": { long(129): "v" } }),
            "metadata",
        ),
        (
            "CreateLockLease",
            json!({ "namespace_name": "UserObjects", "process_id": "", "ttl_seconds": 10 }),
            "process_id",
        ),
        (
            "CreateLockLease",
            json!({ "namespace_name": "UserObjects", "process_id": long(129), "ttl_seconds": 10 }),
            "process_id",
        ),
        (
            "CreateLockLease",
            json!({ "namespace_name": "UserObjects", "process_id": "p", "ttl_seconds": 0 }),
            "ttl_seconds",
        ),
        (
            "RefreshLockLease",
            json!({ "namespace_name": "UserObjects", "lease_id": l, "ttl_seconds": 301 }),
            "ttl_seconds",
        ),
        (
            "AcquireLock",
            json!({ "namespace_name": "UserObjects", "lock_name": long(257), "lease_id": l }),
            "lock_name",
        ),
        (
            "AcquireLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "a/", "lease_id": l }),
            "lock_name",
        ),
        (
            "AcquireLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "a", "lease_id": l, "timeout_seconds": 301 }),
            "timeout_seconds",
        ),
        (
            "AcquireLock",
            json!({ "namespace_name": "UserObjects", "lock_name": "a", "lease_id": l, "metadata": meta33 }),
            "metadata",
        ),
        (
            "ListLocks",
            json!({ "namespace_name": "UserObjects", "limit": 251 }),
            "limit",
        ),
        (
            "ListLocks",
            json!({ "namespace_name": "UserObjects", "pagination_token": "zz" }),
            "pagination_token",
        ),
        (
            "AcquireLock",
            json!({ "namespace_name": "UserObjects", "lock_name": 5, "lease_id": l }),
            "lock_name",
        ),
    ];
    for (method, body, field) in cases {
        let r = api.rpc(method, body.clone()).await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_argument"),
            "{method} {body}"
        );
        let message = r.body["message"].as_str().unwrap_or("");
        assert!(
            message.contains(field),
            "{method}: message {message:?} should name {field}"
        );
    }
    let list = api.rpc("ListNamespaces", json!({})).await?;
    assert_eq!(
        list.body["namespaces"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );
    let locks = api
        .rpc("ListLocks", json!({ "namespace_name": "UserObjects" }))
        .await?;
    assert!(
        locks.body["locks"].as_array().unwrap().is_empty(),
        "nothing was acquired"
    );
    Ok(())
}

#[tokio::test]
async fn a_waiting_call_moves_on_when_its_leader_is_cut_off() -> anyhow::Result<()> {
    use raftlock_tests::proxy::Rule;
    let cluster = Cluster::start_behind_proxy(3, &[]).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let api = Locks::new(&cluster, follower, &key);
    let ns = api
        .rpc("CreateNamespace", json!({ "name": "UserObjects" }))
        .await?;
    assert_eq!(ns.status, 200);
    let holder = lease(&api, "holder", 120).await?;
    let waiter = lease(&api, "waiter", 120).await?;
    assert_eq!(
        acquire(&api, &holder, "p", true, 0).await?["outcome"],
        "ACQUIRE_OUTCOME_ACQUIRED"
    );
    let (api_w, w_id) = (api.clone(), waiter.clone());
    let waiting = tokio::spawn(async move { acquire(&api_w, &w_id, "p", true, 60).await });
    raftlock_tests::eventually(
        Duration::from_secs(5),
        "the waiter to be queued",
        || async { (queued_waiters(&cluster).await? == 1).then_some(()) },
    )
    .await?;

    // Cut the leader off from both peers; it stays alive and keeps the forwarded call.
    let cut_at = Instant::now();
    cluster
        .proxy()
        .expect("proxied cluster")
        .isolate(leader, &cluster.ids(), Rule::Drop);
    raftlock_tests::eventually(
        Duration::from_secs(10),
        "a new leader on the majority side",
        || async {
            let l = cluster.view(follower).await?["leader"].as_u64()?;
            (l != leader).then_some(())
        },
    )
    .await?;
    let release = json!({ "namespace_name": "UserObjects", "lock_name": "p", "lease_id": holder });
    raftlock_tests::eventually(
        Duration::from_secs(10),
        "the release on the new leader",
        || async {
            (api.rpc("ReleaseLock", release.clone()).await.ok()?.status == 200).then_some(())
        },
    )
    .await?;
    let r = tokio::time::timeout(Duration::from_secs(20), waiting).await???;
    assert_eq!(r["outcome"], "ACQUIRE_OUTCOME_ACQUIRED", "{r}");
    let waited = cut_at.elapsed();
    println!("waiter granted {waited:?} after its leader was cut off");
    assert!(
        waited < Duration::from_secs(20),
        "the call went on with the new leader, not at its 60 s deadline"
    );
    cluster.proxy().unwrap().heal();
    Ok(())
}
