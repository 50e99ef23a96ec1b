//! Idempotent retries: a write whose answer was lost, retried with the same
//! `X-Volcano-Request-Id`, takes effect once and is answered with its first outcome.
//!
//! The answer is lost for real: a fault proxy on the follower → leader link forwards the
//! request to the leader (which applies it) and throws the answer away.

use std::time::Duration;

use anyhow::Context;

use raftlock_tests::proxy::Rule;
use raftlock_tests::{token, Answer, Cluster, Locks};
use reqwest::Method;
use serde_json::{json, Value};

const REQUEST_ID: &str = "X-Volcano-Request-Id";

struct Setup {
    cluster: Cluster,
    api: Locks,
    leader: u64,
    follower: u64,
}

async fn setup() -> anyhow::Result<Setup> {
    setup_with(&[]).await
}

async fn setup_with(extra: &[&str]) -> anyhow::Result<Setup> {
    let cluster = Cluster::start_behind_proxy(3, extra).await?;
    let key = cluster.project_key("acme", "service_role", &[]).await?;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await?;
    let follower = cluster.other_than(&[leader]);
    let api = Locks::new(&cluster, follower, &key);
    for ns in ["with_id", "without_id"] {
        let r = api.rpc("CreateNamespace", json!({ "name": ns })).await?;
        assert_eq!(r.status, 200, "{r:?}");
    }
    Ok(Setup {
        cluster,
        api,
        leader,
        follower,
    })
}

async fn create_lease(api: &Locks, ns: &str, request_id: Option<&str>) -> anyhow::Result<Answer> {
    let body = json!({ "namespace_name": ns, "process_id": "worker", "ttl_seconds": 60 });
    let headers: Vec<(&str, &str)> = request_id.map(|id| (REQUEST_ID, id)).into_iter().collect();
    api.raw(
        Method::POST,
        "/v1beta/CreateLockLease",
        &headers,
        Some(serde_json::to_vec(&body)?),
    )
    .await
}

async fn lease_ids(api: &Locks, ns: &str) -> anyhow::Result<Vec<String>> {
    let r = api
        .rpc("ListLockLeases", json!({ "namespace_name": ns }))
        .await?;
    assert_eq!(r.status, 200, "{r:?}");
    let leases = r.body["leases"].as_array().context("leases")?;
    Ok(leases
        .iter()
        .filter_map(|l: &Value| l["lease_id"].as_str().map(str::to_string))
        .collect())
}

/// Sends `call` twice: first with the follower's answers from the leader lost, then again
/// once the link heals. Returns both answers.
async fn lost_then_retried<F, Fut>(s: &Setup, call: F) -> anyhow::Result<(Answer, Answer)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Answer>>,
{
    let proxy = s.cluster.proxy().expect("behind a proxy");
    proxy.set(s.follower, s.leader, Rule::LoseAnswer);
    let first = call().await?;
    let lost = proxy
        .stats()
        .answers_lost
        .load(std::sync::atomic::Ordering::Relaxed);
    proxy.heal();
    assert!(lost > 0, "the proxy lost no answer");
    let retry = call().await?;
    Ok((first, retry))
}

#[tokio::test]
async fn a_create_lease_retried_with_its_request_id_makes_one_lease() -> anyhow::Result<()> {
    let s = setup().await?;
    let id = uuid::Uuid::new_v4().to_string();
    let (first, retry) =
        lost_then_retried(&s, || create_lease(&s.api, "with_id", Some(&id))).await?;
    assert_eq!(first.status, 503, "the answer was lost: {first:?}");
    assert_eq!(retry.status, 200, "{retry:?}");
    let leases = lease_ids(&s.api, "with_id").await?;
    assert_eq!(leases.len(), 1, "one lease, not two: {leases:?}");
    assert_eq!(
        retry.body["lease"]["lease_id"].as_str(),
        Some(leases[0].as_str())
    );
    // The same id on another request is refused and creates nothing.
    let other = create_lease(&s.api, "without_id", Some(&id)).await?;
    assert_eq!(other.status, 400, "{other:?}");
    assert!(lease_ids(&s.api, "without_id").await?.is_empty());

    // Without a request id the retry is a new call: two leases (what the id prevents).
    let (first, retry) = lost_then_retried(&s, || create_lease(&s.api, "without_id", None)).await?;
    assert_eq!((first.status, retry.status), (503, 200));
    assert_eq!(lease_ids(&s.api, "without_id").await?.len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_release_retried_with_its_request_id_answers_as_it_did() -> anyhow::Result<()> {
    let s = setup().await?;
    let (a, b) = (token(), token());
    assert_eq!(s.api.acquire("job", &a, 30).await?.status, 200);
    let id = uuid::Uuid::new_v4().to_string();
    let headers = [
        ("X-Volcano-Lock-Token", a.as_str()),
        (REQUEST_ID, id.as_str()),
    ];
    let release = || {
        s.api
            .raw(Method::DELETE, "/locks/job/lease", &headers, None)
    };
    let proxy = s.cluster.proxy().expect("behind a proxy");
    proxy.set(s.follower, s.leader, Rule::LoseAnswer);
    let first = release().await?;
    proxy.heal();
    assert_eq!(first.status, 503, "the answer was lost: {first:?}");
    // The release took effect: another owner takes the lock before the retry.
    assert_eq!(s.api.acquire("job", &b, 30).await?.status, 200);
    let retry = release().await?;
    assert_eq!(retry.status, 204, "{retry:?}");
    // Without the id, the same release is judged anew: B owns the lock.
    assert_eq!(s.api.release("job", &a).await?.status, 409);
    let read = s.api.read("job").await?;
    assert_eq!(read.body["held"], true, "{read:?}");
    Ok(())
}

/// Answers the leader gave the follower that the proxy has thrown away so far.
fn answers_lost(s: &Setup) -> u64 {
    let proxy = s.cluster.proxy().expect("behind a proxy");
    proxy
        .stats()
        .answers_lost
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Starts `call` with every answer the leader gives the follower lost (until the proxy heals);
/// returns its task once the first answer was lost.
async fn started_with_answers_lost<C, CF>(
    s: &Setup,
    call: C,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Answer>>>
where
    C: FnOnce() -> CF,
    CF: std::future::Future<Output = anyhow::Result<Answer>> + Send + 'static,
{
    let proxy = s.cluster.proxy().expect("behind a proxy");
    proxy.set(s.follower, s.leader, Rule::LoseAnswer);
    let before = answers_lost(s);
    let pending = tokio::spawn(call());
    raftlock_tests::eventually(Duration::from_secs(5), "a lost answer", || async {
        (answers_lost(s) > before).then_some(())
    })
    .await?;
    Ok(pending)
}

/// That B (`token`) still holds `key`: the read says held and B's renewal succeeds.
async fn still_held_by(at_leader: &Locks, key: &str, token: &str, why: &str) -> anyhow::Result<()> {
    let read = at_leader.read(key).await?;
    assert_eq!(read.body["held"], true, "{why}: {read:?}");
    assert_eq!(at_leader.renew(key, token, 60).await?.status, 200, "{why}");
    Ok(())
}

/// Runs `call` (through the follower, no request id of the client's) while every answer the
/// leader gives the follower is lost, so the follower keeps resending it until its deadline.
/// As soon as the first answer is lost, `meanwhile` runs at the leader. Returns the call's
/// answer after checking that a resend reached the leader after `meanwhile` took effect.
async fn resent_around<C, CF, M, MF>(s: &Setup, call: C, meanwhile: M) -> anyhow::Result<Answer>
where
    C: FnOnce() -> CF,
    CF: std::future::Future<Output = anyhow::Result<Answer>> + Send + 'static,
    M: FnOnce() -> MF,
    MF: std::future::Future<Output = anyhow::Result<()>>,
{
    let proxy = s.cluster.proxy().expect("behind a proxy");
    let lost = || answers_lost(s);
    let pending = started_with_answers_lost(s, call).await?;
    meanwhile().await?;
    let after_meanwhile = lost();
    let answer = pending.await??;
    proxy.heal();
    assert!(
        lost() > after_meanwhile,
        "no resend reached the leader after the interleaved call: the test proves nothing"
    );
    Ok(answer)
}

#[tokio::test]
async fn a_force_release_resent_by_the_follower_does_not_release_the_next_holder(
) -> anyhow::Result<()> {
    let s = setup().await?;
    let at_leader = s.api.on(&s.cluster, s.leader);
    let (a, b) = (token(), token());
    assert_eq!(at_leader.acquire("job", &a, 60).await?.status, 200);
    let api = s.api.clone();
    let answer = resent_around(
        &s,
        move || async move { api.force_release("job").await },
        || async {
            // The first force release took effect: the next holder takes the key.
            let took = at_leader.acquire("job", &b, 60).await?;
            assert_eq!(took.status, 200, "{took:?}");
            Ok(())
        },
    )
    .await?;
    assert_eq!(answer.status, 503, "every answer was lost: {answer:?}");
    // The resends were answered with the first outcome, not applied again: B still holds.
    still_held_by(
        &at_leader,
        "job",
        &b,
        "a resent force release freed B's lock",
    )
    .await
}

#[tokio::test]
async fn an_acquire_resent_by_the_follower_does_not_take_a_freed_lock_again() -> anyhow::Result<()>
{
    let s = setup().await?;
    let at_leader = s.api.on(&s.cluster, s.leader);
    let a = token();
    let api = s.api.clone();
    let a2 = a.clone();
    let answer = resent_around(
        &s,
        move || async move { api.acquire("job", &a2, 60).await },
        || async {
            // The first acquire took effect; the lock is freed before the resend.
            let freed = at_leader.force_release("job").await?;
            assert_eq!(freed.status, 204, "{freed:?}");
            Ok(())
        },
    )
    .await?;
    assert_eq!(answer.status, 503, "every answer was lost: {answer:?}");
    let read = at_leader.read("job").await?;
    assert_eq!(
        read.body["held"], false,
        "a resent acquire took the lock again: {read:?}"
    );
    Ok(())
}

/// The force-release case in a busy project: between the first apply and a resend the project
/// writes more than its table of node-minted ids holds (10,000), so the first attempt's id is
/// forgotten by the time a resend arrives. The follower says its resends are resends
/// (`x-raftlock-resent`), and the leader's state machine refuses such a one rather
/// than apply it again: B keeps the lock, and the call ends with that final 503. (Before
/// resends said so, the resend found no id and released B's lock.) The commit timeout is long
/// so the follower resends throughout the flood, however slow the build.
#[tokio::test]
async fn a_force_release_resent_after_its_id_was_forgotten_does_not_release_the_next_holder(
) -> anyhow::Result<()> {
    use futures::StreamExt;
    use raftlock_core::request_ids::MAX_PER_PROJECT;
    let s = setup_with(&["--commit-timeout-ms", "60000"]).await?;
    s.cluster.lift_rate_limit("acme").await?;
    let at_leader = s.api.on(&s.cluster, s.leader);
    let (a, b) = (token(), token());
    assert_eq!(at_leader.acquire("job", &a, 120).await?.status, 200);

    let api = s.api.clone();
    let pending =
        started_with_answers_lost(&s, move || async move { api.force_release("job").await })
            .await?;
    // The first force release took effect: the next holder takes the key.
    let took = at_leader.acquire("job", &b, 120).await?;
    assert_eq!(took.status, 200, "{took:?}");
    // More writes without ids than the project's table of minted ids holds.
    let renewals = futures::stream::iter(0..MAX_PER_PROJECT + 100)
        .map(|_| at_leader.renew("job", &b, 120))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    for r in renewals {
        let r = r?;
        assert_eq!(r.status, 200, "B lost the lock: a resend freed it: {r:?}");
    }
    s.cluster.proxy().expect("behind a proxy").heal();
    let answer = tokio::time::timeout(Duration::from_secs(30), pending).await???;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(
        answer
            .body
            .to_string()
            .contains("outcome of this write is unknown"),
        "answered by a resend after the flood, refused: {answer:?}"
    );
    // Marked so a client (the Rust SDK) does not retry it.
    let marked = answer
        .headers
        .get(raftlock_client::OUTCOME_UNKNOWN_HEADER)
        .map(|v| v.as_bytes());
    assert_eq!(marked, Some(&b"true"[..]), "{answer:?}");
    assert!(answer.headers.get("retry-after").is_none(), "{answer:?}");
    still_held_by(
        &at_leader,
        "job",
        &b,
        "a resend whose id was forgotten freed B's lock",
    )
    .await
}
