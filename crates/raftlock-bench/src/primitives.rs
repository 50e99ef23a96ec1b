//! `raftlock-bench primitives`: Grackle's other primitives on a live cluster — acquires/s on
//! one hot semaphore, wait-group job completions/s, and the release latency of a 16-party
//! barrier. Every client connects to the leader and runs closed-loop; latencies are from the
//! moment a call is sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::conn::Conn;
use crate::systems::rpc;

/// Where and how long.
pub struct Setup {
    pub leader: String,
    pub key: String,
    pub namespace: String,
    pub seconds: f64,
}

impl Setup {
    fn conn(&self) -> Conn {
        Conn::new(&self.leader, Some(&self.key))
    }
}

/// One measured line of the table.
pub struct Line {
    pub what: String,
    pub clients: usize,
    pub ops: u64,
    pub per_second: f64,
    pub unit: &'static str,
    /// Latencies in µs, sorted.
    pub lat: Vec<u64>,
}

fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

impl Line {
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {:.0} {} | {:.2} | {:.2} | {:.2} |",
            self.what,
            self.clients,
            self.ops,
            self.per_second,
            self.unit,
            quantile_ms(&self.lat, 0.5),
            quantile_ms(&self.lat, 0.99),
            self.lat.last().copied().unwrap_or(0) as f64 / 1000.0
        )
    }
}

/// The markdown table of the lines.
pub fn table(lines: &[Line]) -> String {
    let mut out = String::from(
        "| primitive | clients | ops | throughput | p50 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for l in lines {
        out.push_str(&l.row());
        out.push('\n');
    }
    out
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

/// Runs `clients` closed loops of `op` for the configured time; collects their latencies.
async fn closed_loops<F, Fut>(
    s: &Setup,
    clients: usize,
    op: F,
) -> anyhow::Result<(u64, f64, Vec<u64>)>
where
    F: Fn(usize, u64, Conn) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (Conn, anyhow::Result<()>)> + Send,
{
    let end = Instant::now() + Duration::from_secs_f64(s.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let op = op.clone();
        let mut conn = s.conn();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0u64;
            while Instant::now() < end {
                n += 1;
                let t0 = Instant::now();
                let (c, r) = op(i, n, conn).await;
                conn = c;
                r?;
                lat.push(micros(t0));
            }
            anyhow::Ok(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    Ok((all.len() as u64, all.len() as f64 / elapsed, all))
}

/// `clients` semaphore leases acquiring weight 1 of `permits` (blocking, FIFO) and releasing.
pub async fn hot_semaphore(s: &Setup, permits: u64, clients: usize) -> anyhow::Result<Line> {
    let ns = s.namespace.clone();
    let name = format!("hot-{permits}-{clients}");
    let mut c = s.conn();
    rpc(
        &mut c,
        "CreateSemaphore",
        json!({ "namespace_name": ns, "semaphore_name": name, "permits": permits }),
    )
    .await?;
    let mut leases = Vec::new();
    for i in 0..clients {
        let v = rpc(
            &mut c,
            "CreateSemaphoreLease",
            json!({ "namespace_name": ns, "process_id": format!("bench-{i}"), "ttl_seconds": 300 }),
        )
        .await?;
        leases.push(
            v["lease"]["lease_id"]
                .as_str()
                .context("lease id")?
                .to_string(),
        );
    }
    let leases = Arc::new(leases);
    let (ops, rate, lat) = closed_loops(s, clients, move |i, _, mut c| {
        let (ns, name, lease) = (ns.clone(), name.clone(), leases[i].clone());
        async move {
            let r = async {
                let body = json!({ "namespace_name": ns, "semaphore_name": name, "lease_id": lease, "weight": 1, "timeout_seconds": 60 });
                let v = rpc(&mut c, "AcquireSemaphore", body).await?;
                if v["outcome"] != "ACQUIRE_OUTCOME_ACQUIRED" {
                    bail!("not acquired: {v}");
                }
                let body = json!({ "namespace_name": ns, "semaphore_name": name, "lease_id": lease });
                rpc(&mut c, "ReleaseSemaphore", body).await.map(|_| ())
            }
            .await;
            (c, r)
        }
    })
    .await?;
    Ok(Line {
        what: format!("semaphore, {permits} permits: acquire (waiting) + release"),
        clients,
        ops,
        per_second: rate,
        unit: "acquires/s",
        lat,
    })
}

/// `clients` reporters each completing one distinct job per call on one large wait group.
pub async fn wait_group_jobs(s: &Setup, clients: usize) -> anyhow::Result<Line> {
    let ns = s.namespace.clone();
    let name = format!("jobs-{clients}");
    let expires_at = (SystemTime::now().duration_since(UNIX_EPOCH)? + Duration::from_secs(3600))
        .as_nanos() as i64;
    let body = json!({ "namespace_name": ns, "wait_group_name": name, "counter": 100_000_000u64, "expires_at": expires_at, "delete_after_finished_seconds": 600 });
    rpc(&mut s.conn(), "CreateWaitGroup", body).await?;
    let (ops, rate, lat) = closed_loops(s, clients, move |i, n, mut c| {
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            let body = json!({ "namespace_name": ns, "wait_group_name": name, "jobs": [{ "job_id": format!("c{i}-j{n}") }] });
            let r = rpc(&mut c, "CompleteJobsFromWaitGroup", body).await.map(|_| ());
            (c, r)
        }
    })
    .await?;
    Ok(Line {
        what: "wait group: CompleteJobsFromWaitGroup, one new job per call".into(),
        clients,
        ops,
        per_second: rate,
        unit: "jobs/s",
        lat,
    })
}

/// `parties` processes meeting at one barrier `rounds` times: each arrives, then waits for
/// the trip. Latency: from the last arrival of a generation being sent to each waiting
/// party's `TRIPPED` answer.
pub async fn barrier_rounds(s: &Setup, parties: usize, rounds: u64) -> anyhow::Result<Line> {
    let ns = s.namespace.clone();
    let name = format!("meet-{parties}");
    let body = json!({ "namespace_name": ns, "barrier_name": name, "expected_processes": parties, "delete_inactive_after_seconds": 3600 });
    rpc(&mut s.conn(), "CreateBarrier", body).await?;
    let origin = Instant::now();
    // generation → latest arrival sent (µs since origin); (generation, released at) per wait.
    let sent: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let released: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for p in 0..parties {
        let (ns, name, sent, released) = (ns.clone(), name.clone(), sent.clone(), released.clone());
        let mut c = s.conn();
        tasks.push(tokio::spawn(async move {
            for g in 1..=rounds {
                let at = micros(origin);
                {
                    let mut m = sent.lock().unwrap();
                    let e = m.entry(g).or_default();
                    *e = (*e).max(at);
                }
                let body = json!({ "namespace_name": ns, "barrier_name": name, "process_id": format!("p{p}"), "expected_generation": g });
                let v: Value = rpc(&mut c, "ArriveAtBarrier", body).await?;
                if v["all_arrived"] == true {
                    continue;
                }
                let body = json!({ "namespace_name": ns, "barrier_name": name, "expected_generation": g, "timeout_seconds": 60 });
                let v = rpc(&mut c, "WaitAtBarrier", body).await?;
                if v["outcome"] != "BARRIER_WAIT_OUTCOME_TRIPPED" {
                    bail!("generation {g} did not trip: {v}");
                }
                released.lock().unwrap().push((g, micros(origin)));
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = origin.elapsed().as_secs_f64();
    let sent = sent.lock().unwrap();
    let mut lat: Vec<u64> = (released.lock().unwrap().iter())
        .map(|(g, at)| at.saturating_sub(sent[g]))
        .collect();
    lat.sort_unstable();
    Ok(Line {
        what: format!("barrier, {parties} parties: last arrival sent → each waiter released"),
        clients: parties,
        ops: rounds,
        per_second: rounds as f64 / elapsed,
        unit: "trips/s",
        lat,
    })
}
