//! The systems under test, as the handful of calls the workloads make.
//!
//! raftlock: project locks (`/locks/...`) and hierarchical RPCs (`/v1beta/...`) on the leader.
//! etcd: the JSON gRPC gateway (`/v3/...`), keys and values base64, on the leader. A lock is
//! a key created if absent (`txn` comparing `create_revision == 0`) under a granted lease,
//! which is how etcd's own `concurrency.Mutex` takes one, minus the waiting.
//! ZooKeeper: its own protocol, see [`crate::zk`].

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use crate::conn::Conn;

pub const LOCK_TOKEN: &str = "x-volcano-lock-token";

/// Which system a run drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum System {
    Raftlock,
    Etcd,
    /// ZooKeeper with Apache Curator's lock recipe.
    Zookeeper,
    /// ZooKeeper with one-round-trip `multi` locks.
    ZookeeperMulti,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Raftlock => "raftlock",
            System::Etcd => "etcd",
            System::Zookeeper => "zookeeper",
            System::ZookeeperMulti => "zookeeper-multi",
        }
    }

    pub fn is_zookeeper(self) -> bool {
        matches!(self, System::Zookeeper | System::ZookeeperMulti)
    }
}

/// Where to send requests, discovered once per run.
#[derive(Clone, Debug)]
pub struct Target {
    pub system: System,
    /// The leader's `host:port`.
    pub leader: String,
    /// raftlock: a service-role key of a fresh project with the rate limit off.
    pub key: Option<String>,
}

impl Target {
    pub fn conn(&self) -> Conn {
        Conn::new(&self.leader, self.key.as_deref())
    }

    /// Runs `clients` project-lock clients at once — client `i` with a connection of its
    /// own and a lock token of its own — and gathers what each returns, in order.
    pub async fn lock_clients<T, F, Fut>(&self, clients: usize, client: F) -> anyhow::Result<Vec<T>>
    where
        F: Fn(usize, Conn, String) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let tasks: Vec<_> = (0..clients)
            .map(|i| tokio::spawn(client(i, self.conn(), uuid::Uuid::new_v4().to_string())))
            .collect();
        let mut out = Vec::with_capacity(clients);
        for t in tasks {
            out.push(t.await??);
        }
        Ok(out)
    }
}

/// Waits (up to `wait`) for a leader among `endpoints` and returns its address.
pub async fn find_leader(
    system: System,
    endpoints: &[String],
    wait: Duration,
) -> anyhow::Result<String> {
    if system.is_zookeeper() {
        return crate::zk::find_leader(endpoints, wait).await;
    }
    let deadline = Instant::now() + wait;
    loop {
        match leader_once(system, endpoints).await {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => {}
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            bail!("no {} leader among {endpoints:?}", system.name());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn leader_once(system: System, endpoints: &[String]) -> anyhow::Result<Option<String>> {
    for ep in endpoints {
        let mut c = Conn::new(ep, None);
        match system {
            System::Raftlock => {
                // "ready, leader N"; node ids are the 1-based positions in `endpoints`.
                let (status, body) = c.call(Method::GET, "/readyz", &[], "").await?;
                if status != StatusCode::OK {
                    continue;
                }
                let text = String::from_utf8_lossy(&body);
                if let Some(id) = text
                    .rsplit(' ')
                    .next()
                    .and_then(|s| s.trim().parse::<usize>().ok())
                {
                    if let Some(addr) = endpoints.get(id.wrapping_sub(1)) {
                        return Ok(Some(addr.clone()));
                    }
                }
            }
            System::Zookeeper | System::ZookeeperMulti => unreachable!("asked with srvr"),
            System::Etcd => {
                let (status, v) = c
                    .json(Method::POST, "/v3/maintenance/status", &[], &json!({}))
                    .await?;
                if status != StatusCode::OK {
                    continue;
                }
                let me = v["header"]["member_id"].as_str().unwrap_or("");
                let leader = v["leader"].as_str().unwrap_or("-");
                if me == leader {
                    return Ok(Some(ep.clone()));
                }
            }
        }
    }
    Ok(None)
}

/// Creates a project with the rate limit off and a service-role key for it (raftlock).
pub async fn raftlock_project(leader: &str, platform: &str, name: &str) -> anyhow::Result<String> {
    raftlock_project_on(leader, platform, name, None).await
}

/// [`raftlock_project`] placed on data shard `shard` (None: where raftlock places it).
pub async fn raftlock_project_on(
    leader: &str,
    platform: &str,
    name: &str,
    shard: Option<u32>,
) -> anyhow::Result<String> {
    let mut c = Conn::new(leader, Some(platform));
    let mut body = json!({ "name": name });
    if let Some(shard) = shard {
        body["shard"] = json!(shard);
    }
    let (s, v) = admin_write(&mut c, Method::POST, "/admin/v1/projects", &body).await?;
    if !s.is_success() && s != StatusCode::CONFLICT {
        bail!("creating project {name}: {s} {v}");
    }
    let limit = json!({ "lock_ops_per_minute": 0 });
    let path = format!("/admin/v1/projects/{name}");
    let (s, v) = admin_write(&mut c, Method::PATCH, &path, &limit).await?;
    if !s.is_success() {
        bail!("lifting the rate limit of {name}: {s} {v}");
    }
    let path = format!("/admin/v1/projects/{name}/keys");
    let kind = json!({ "kind": "service_role" });
    let (s, v) = admin_write(&mut c, Method::POST, &path, &kind).await?;
    if !s.is_success() {
        bail!("creating a key for {name}: {s} {v}");
    }
    v["secret"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no secret in {v}"))
}

/// How long [`admin_write`] retries a `503`: a few elections' worth.
const ADMIN_RETRY_FOR: Duration = Duration::from_secs(15);

/// One admin write, retried while it answers `503` (no leader, or the leader changed — the
/// meta group's leadership moves while a fresh dev cluster spreads its leaders) with the same
/// `X-Volcano-Request-Id`, so a retry of a write that did commit gets its first answer instead
/// of applying twice, as the SDK retries.
async fn admin_write(
    c: &mut Conn,
    method: Method,
    path: &str,
    body: &serde_json::Value,
) -> anyhow::Result<(StatusCode, serde_json::Value)> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let headers = [("x-volcano-request-id", request_id.as_str())];
    let give_up = Instant::now() + ADMIN_RETRY_FOR;
    loop {
        let (s, v) = c.json(method.clone(), path, &headers, body).await?;
        if s != StatusCode::SERVICE_UNAVAILABLE || Instant::now() >= give_up {
            return Ok((s, v));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---- raftlock project-lock ----

pub async fn rl_lease(
    c: &mut Conn,
    method: Method,
    key: &str,
    token: &str,
    ttl: u64,
) -> anyhow::Result<StatusCode> {
    let body = format!("{{\"ttl_seconds\":{ttl}}}");
    let (s, _) = c
        .call(
            method,
            &format!("/locks/{key}/lease"),
            &[(LOCK_TOKEN, token)],
            body,
        )
        .await?;
    Ok(s)
}

pub async fn rl_release(c: &mut Conn, key: &str, token: &str) -> anyhow::Result<StatusCode> {
    let (s, _) = c
        .call(
            Method::DELETE,
            &format!("/locks/{key}/lease"),
            &[(LOCK_TOKEN, token)],
            "",
        )
        .await?;
    Ok(s)
}

pub async fn rl_read(c: &mut Conn, key: &str) -> anyhow::Result<StatusCode> {
    let (s, _) = c
        .call(Method::GET, &format!("/locks/{key}"), &[], "")
        .await?;
    Ok(s)
}

// ---- raftlock metrics ----

/// Every node's `/metrics` text (an empty text for a node that did not answer).
pub async fn scrape(endpoints: &[String]) -> Vec<String> {
    let mut texts = Vec::with_capacity(endpoints.len());
    for ep in endpoints {
        let mut c = Conn::new(ep, None);
        let text = match c.call(Method::GET, "/metrics", &[], "").await {
            Ok((StatusCode::OK, body)) => String::from_utf8_lossy(&body).into_owned(),
            _ => String::new(),
        };
        texts.push(text);
    }
    texts
}

/// Sum over the nodes' texts of the named series (counters; histogram `_count`s and
/// buckets).
pub fn series_sum(texts: &[String], name: &str) -> f64 {
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---- raftlock hierarchical ----

pub async fn rpc(c: &mut Conn, method: &str, body: Value) -> anyhow::Result<Value> {
    let (s, v) = c
        .json(Method::POST, &format!("/v1beta/{method}"), &[], &body)
        .await?;
    if !s.is_success() {
        bail!("{method}: {s} {v}");
    }
    Ok(v)
}

pub async fn hier_namespace(c: &mut Conn, ns: &str) -> anyhow::Result<()> {
    let (s, v) = c
        .json(
            Method::POST,
            "/v1beta/CreateNamespace",
            &[],
            &json!({ "name": ns }),
        )
        .await?;
    if !s.is_success() && s != StatusCode::CONFLICT {
        bail!("CreateNamespace {ns}: {s} {v}");
    }
    Ok(())
}

pub async fn hier_lease(c: &mut Conn, ns: &str, ttl: u64) -> anyhow::Result<String> {
    let v = rpc(
        c,
        "CreateLockLease",
        json!({ "namespace_name": ns, "process_id": "bench", "ttl_seconds": ttl }),
    )
    .await?;
    v["lease"]["lease_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no lease id in {v}"))
}

/// `AcquireLock` exclusive; true when acquired.
pub async fn hier_acquire(
    c: &mut Conn,
    ns: &str,
    lock: &str,
    lease: &str,
    timeout_seconds: u64,
) -> anyhow::Result<bool> {
    let v = rpc(
        c,
        "AcquireLock",
        json!({ "namespace_name": ns, "lock_name": lock, "lease_id": lease,
                "exclusive": true, "timeout_seconds": timeout_seconds }),
    )
    .await?;
    Ok(v["outcome"] == "ACQUIRE_OUTCOME_ACQUIRED")
}

pub async fn hier_release(c: &mut Conn, ns: &str, lock: &str, lease: &str) -> anyhow::Result<()> {
    rpc(
        c,
        "ReleaseLock",
        json!({ "namespace_name": ns, "lock_name": lock, "lease_id": lease }),
    )
    .await?;
    Ok(())
}

// ---- etcd ----

fn b64(s: &str) -> String {
    B64.encode(s)
}

async fn etcd(c: &mut Conn, path: &str, body: Value) -> anyhow::Result<Value> {
    let (s, v) = c.json(Method::POST, path, &[], &body).await?;
    if s != StatusCode::OK {
        bail!("{path}: {s} {v}");
    }
    if v.get("error").is_some() {
        bail!("{path}: {v}");
    }
    Ok(v)
}

/// Grants a lease; returns its id (a decimal string, as the gateway writes int64s).
pub async fn etcd_grant(c: &mut Conn, ttl: u64) -> anyhow::Result<String> {
    let v = etcd(c, "/v3/lease/grant", json!({ "TTL": ttl })).await?;
    v["ID"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no lease ID in {v}"))
}

/// Creates `key` under `lease` if absent; true when this call created it.
pub async fn etcd_create(c: &mut Conn, key: &str, lease: &str) -> anyhow::Result<bool> {
    let k = b64(key);
    let v = etcd(
        c,
        "/v3/kv/txn",
        json!({
            "compare": [{ "key": k, "result": "EQUAL", "target": "CREATE", "create_revision": "0" }],
            "success": [{ "request_put": { "key": k, "value": b64(lease), "lease": lease } }],
        }),
    )
    .await?;
    Ok(v["succeeded"].as_bool().unwrap_or(false))
}

pub async fn etcd_delete(c: &mut Conn, key: &str) -> anyhow::Result<()> {
    etcd(c, "/v3/kv/deleterange", json!({ "key": b64(key) })).await?;
    Ok(())
}

pub async fn etcd_keepalive(c: &mut Conn, lease: &str) -> anyhow::Result<()> {
    let v = etcd(c, "/v3/lease/keepalive", json!({ "ID": lease })).await?;
    if v["result"]["TTL"].as_str().is_none_or(|t| t == "0") && v["result"]["TTL"].as_i64().is_none()
    {
        bail!("keepalive of {lease} refused: {v}");
    }
    Ok(())
}

/// Linearizable range read of one key; true when present.
pub async fn etcd_get(c: &mut Conn, key: &str) -> anyhow::Result<bool> {
    let v = etcd(c, "/v3/kv/range", json!({ "key": b64(key) })).await?;
    Ok(v["kvs"].as_array().is_some_and(|a| !a.is_empty()))
}

/// Maps a non-success raftlock status to an error.
pub fn expect(s: StatusCode, want: StatusCode, what: &str) -> anyhow::Result<()> {
    if s == want {
        Ok(())
    } else {
        Err(anyhow!("{what}: HTTP {s}")).context("unexpected status")
    }
}
