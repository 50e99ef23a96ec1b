//! `scaleout`: write throughput of a cluster as it is sharded (`make bench-scaleout`).
//!
//! A project is placed on every data shard and the clients are dealt out over them, each
//! talking straight to its shard's leader — what a client that knows where its project lives
//! gets. A cluster without data shards gets one project on the meta group's leader, which is
//! the one-group cluster every release before shards ran.

use std::time::{Duration, Instant};

use anyhow::bail;
use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::conn::Conn;
use crate::systems::{find_leader, raftlock_project_on, System, Target};

/// One shard the benchmark drives: its id, the address of its leader and the projects placed
/// on it.
#[derive(Debug, Clone)]
pub struct ShardLeader {
    pub shard: u32,
    pub leader: String,
    pub projects: Vec<String>,
}

/// The data shards of the cluster and their leaders, waiting up to `wait` for each to have
/// one — and, with `spread`, for no node to lead two while another leads none (the
/// balancer's settled state). Empty when the cluster has no data shard — or is a release
/// that has no shards.
pub async fn shard_leaders(
    endpoints: &[String],
    platform: &str,
    spread: bool,
    wait: Duration,
) -> anyhow::Result<Vec<ShardLeader>> {
    let deadline = Instant::now() + wait;
    loop {
        let found = leaders_once(endpoints, platform).await?;
        match found {
            Some(found) if !spread || evenly_led(&found, endpoints.len()) => return Ok(found),
            _ if Instant::now() >= deadline => bail!("data shard leaders not settled: {found:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Whether the leaderships of `shards` differ by at most one between the `nodes` nodes.
fn evenly_led(shards: &[ShardLeader], nodes: usize) -> bool {
    let mut led = std::collections::BTreeMap::<&str, usize>::new();
    for s in shards {
        *led.entry(s.leader.as_str()).or_default() += 1;
    }
    let most = led.values().copied().max().unwrap_or(0);
    let fewest = match led.len() < nodes.min(shards.len()) {
        true => 0,
        false => led.values().copied().min().unwrap_or(0),
    };
    most <= fewest + 1
}

/// Every data shard's leader as its members see it; `None` while one has none or no node
/// answered.
async fn leaders_once(
    endpoints: &[String],
    platform: &str,
) -> anyhow::Result<Option<Vec<ShardLeader>>> {
    let mut shards: Vec<ShardLeader> = Vec::new();
    let mut ids: Vec<u32> = Vec::new();
    let mut answered = false;
    for ep in endpoints {
        // A node that does not answer yet (just started, or busy) is asked again next round.
        let Ok((status, body)) = Conn::new(ep, Some(platform))
            .call(Method::GET, "/admin/v1/shards", &[], "")
            .await
        else {
            continue;
        };
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if status == StatusCode::NOT_FOUND {
            return Ok(Some(Vec::new())); // a release before shards
        }
        if status != StatusCode::OK {
            continue;
        }
        answered = true;
        for s in v["shards"].as_array().into_iter().flatten() {
            let Some(id) = s["id"].as_u64().map(|id| id as u32) else {
                continue;
            };
            if id == 0 {
                continue; // the meta group holds no benchmark project once shards exist
            }
            if !ids.contains(&id) {
                ids.push(id);
            }
            let leader = s["leader"].as_u64().map(|n| n as usize);
            if let Some(addr) = leader.and_then(|n| endpoints.get(n.wrapping_sub(1))) {
                if !shards.iter().any(|k| k.shard == id) {
                    shards.push(ShardLeader {
                        shard: id,
                        leader: addr.clone(),
                        projects: project_names(s),
                    });
                }
            }
        }
    }
    if !answered || shards.len() < ids.len() {
        return Ok(None);
    }
    shards.sort_by_key(|s| s.shard);
    Ok(Some(shards))
}

/// The names in a shard's `projects` list.
fn project_names(shard: &Value) -> Vec<String> {
    let names = shard["projects"].as_array().into_iter().flatten();
    names.filter_map(|p| p.as_str().map(String::from)).collect()
}

/// The address of the leader of the data shard that holds project `name`, waiting up to
/// 30 s for every data shard to have one; `None` when the project is on the meta group (a
/// cluster without data shards, or a release before them).
pub async fn leader_of_project(
    endpoints: &[String],
    platform: &str,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let shards = shard_leaders(endpoints, platform, false, Duration::from_secs(30)).await?;
    let holder = shards
        .into_iter()
        .find(|s| s.projects.iter().any(|p| p == name));
    Ok(holder.map(|s| s.leader))
}

/// The targets of a run named `run`: a project on each data shard at its leader, or one
/// project at the meta leader when there is no data shard.
pub async fn targets(
    endpoints: &[String],
    platform: &str,
    run: &str,
) -> anyhow::Result<Vec<Target>> {
    let wait = Duration::from_secs(60);
    let meta = find_leader(System::Raftlock, endpoints, wait).await?;
    let shards = shard_leaders(endpoints, platform, true, wait).await?;
    if shards.is_empty() {
        let key = raftlock_project_on(&meta, platform, run, None).await?;
        return Ok(vec![target(meta, key)]);
    }
    let mut out = Vec::with_capacity(shards.len());
    for s in shards {
        let name = format!("{run}-s{}", s.shard);
        let key = raftlock_project_on(&meta, platform, &name, Some(s.shard)).await?;
        eprintln!("  shard {} led by {}: project {name}", s.shard, s.leader);
        out.push(target(s.leader, key));
    }
    Ok(out)
}

fn target(leader: String, key: String) -> Target {
    Target {
        system: System::Raftlock,
        leader,
        key: Some(key),
    }
}
