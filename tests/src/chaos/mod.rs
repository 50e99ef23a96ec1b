//! The chaos suite: a live cluster behind the fault proxy, concurrent load, a seeded fault
//! plan, and a checker over the recorded history.
//!
//! ## Time
//! Every recorded time is microseconds on one client clock ([`Clock`], monotonic): the test
//! machine's one true clock. Server times (`expires_at`) are converted with the wall clock read
//! once at start. Every node runs under libfaketime ([`Skew`]) so the plan can skew a node's
//! wall clock at start (`SkewedNode`) or step the leader's while it leads (`ClockStep`), by
//! ±0.5–60 s. The checker gives no skew allowance: a recorded holding interval is
//! `[ack of acquire, min(first release sent, expires_at)]` on the true clock, and two of them
//! overlapping is a violation — cluster time must never let a lease end early.
//!
//! ## Layout
//! - this file: configuration, the one client clock and [`run`], which ties the rest together;
//! - [`workload`]: the workers (project locks, hierarchical locks, semaphores, the
//!   linearizability key);
//! - [`faults`]: the fault kinds, the plan's driver (inject, heal, probe) and the summary;
//! - [`coordination`]: the barrier parties and wait-group rounds, and their checks (never
//!   released or completed early);
//! - [`checks`]: the recorded history and the checkers (exclusion, fencing, the fenced
//!   resource, hierarchical conflicts, semaphore permits at every instant) with their unit
//!   tests.
//!
//! ## Replay
//! The seed is printed first; `CHAOS_SEED=<seed>` replays the same fault plan (and the same
//! per-worker random choices; the interleaving with real processes is not reproducible).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::linearizability::{self, LockInput, LockModel, LockOutput, Operation, Verdict};
use crate::proxy::Rule;
use crate::{eventually, token, Answer, Cluster, Locks, Skew};

/// Keys the project-lock workers contend on.
const PROJECT_KEYS: &[&str] = &["k0", "k1", "k2"];
/// hierarchical paths with ancestor/descendant and sibling relations.
const PATHS: &[&str] = &["a", "a/b", "a/b/c", "a/d", "e", "e/f"];
const NAMESPACE: &str = "chaos";
/// The semaphore the semaphore workers share, and its permits (fewer than the workers' total
/// weight, so they contend).
const SEMAPHORE: &str = "pool";
const SEMAPHORE_PERMITS: u64 = 3;
/// The single key whose history is checked for linearizability.
const LIN_KEY: &str = "lin";
/// After each heal, every node must serve a write again within this.
const LIVENESS_BOUND: Duration = Duration::from_secs(15);
/// Without quorum, every call must be answered 503 within this.
const NO_QUORUM_BOUND: Duration = Duration::from_secs(5);
/// WGL search budget per epoch (explored states).
const LIN_BUDGET: u64 = 5_000_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub seed: u64,
    pub duration: Duration,
    pub nodes: u64,
    /// Keep injecting faults past `duration` until this many leader kills happened.
    pub min_leader_kills: usize,
    pub project_workers: usize,
    pub hier_workers: usize,
    pub semaphore_workers: usize,
    pub lin_workers: usize,
    /// Largest absolute clock offset given to a skewed node.
    pub max_skew_ms: i64,
    /// `--snapshot-logs` of every node: small, so restarts and lagging nodes go through
    /// snapshots (build, compaction, install) many times per run.
    pub snapshot_logs: u64,
    /// Data shards created on every node before the load (0: the meta group holds the
    /// project). With shards, the project lives on shard 1, and "the leader" a fault aims at
    /// is shard 1's.
    pub shards: u32,
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

impl ChaosConfig {
    /// Defaults overridden by `CHAOS_SEED`, `CHAOS_DURATION_SECS`, `CHAOS_NODES`,
    /// `CHAOS_MIN_LEADER_KILLS`. A run of 10 minutes or more wants 100 leader kills unless
    /// told otherwise.
    pub fn from_env(default_duration: Duration) -> ChaosConfig {
        let seed = env("CHAOS_SEED").unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                ^ u64::from(std::process::id())
        });
        let duration = env("CHAOS_DURATION_SECS")
            .map(Duration::from_secs)
            .unwrap_or(default_duration);
        let min_leader_kills =
            env("CHAOS_MIN_LEADER_KILLS").unwrap_or(if duration >= Duration::from_secs(600) {
                100
            } else {
                0
            });
        ChaosConfig {
            seed,
            duration,
            nodes: env("CHAOS_NODES").unwrap_or(3),
            min_leader_kills,
            project_workers: 4,
            hier_workers: 4,
            semaphore_workers: 3,
            lin_workers: 3,
            max_skew_ms: 60_000,
            snapshot_logs: env("CHAOS_SNAPSHOT_LOGS").unwrap_or(500),
            shards: env("CHAOS_SHARDS").unwrap_or(0),
        }
    }
}

/// One client clock: microseconds since the run started.
struct Clock {
    start: Instant,
    wall0_ns: i128,
}

impl Clock {
    fn new() -> Clock {
        let start = Instant::now();
        let wall0_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        Clock { start, wall0_ns }
    }
    fn now(&self) -> i64 {
        self.start.elapsed().as_micros() as i64
    }
    /// A server wall-clock time (ns since the epoch) on this clock.
    fn server_time(&self, ns: i128) -> i64 {
        ((ns - self.wall0_ns) / 1000) as i64
    }
}

mod checks;
mod coordination;
mod faults;
mod workload;

pub use checks::*;
pub use coordination::*;
pub use faults::*;
use workload::*;

/// Creates `shards` data shards on every node (the largest odd number of them), and waits
/// until each has a leader; the first project created afterwards lands on shard 1.
async fn create_shards(cluster: &Cluster, shards: u32) -> Result<()> {
    let mut members = cluster.ids();
    if members.len().is_multiple_of(2) {
        members.pop();
    }
    for _ in 0..shards {
        cluster.create_shard(&members).await?;
    }
    for shard in 1..=u64::from(shards) {
        cluster
            .wait_for_group_leader(shard, Duration::from_secs(20))
            .await?;
    }
    Ok(())
}

/// Runs the suite and returns its summary (violations inside).
pub async fn run(cfg: ChaosConfig) -> Result<Summary> {
    println!(
        "chaos: seed {} (replay with CHAOS_SEED={}), {:?}, {} nodes, {} data shards, ≥{} leader kills",
        cfg.seed, cfg.seed, cfg.duration, cfg.nodes, cfg.shards, cfg.min_leader_kills
    );
    let snapshot_logs = format!("--snapshot-logs={}", cfg.snapshot_logs);
    let skew_dir = tempfile::tempdir()?;
    let skews: BTreeMap<u64, Skew> = (1..=cfg.nodes)
        .map(|id| {
            Ok((
                id,
                Skew::new(skew_dir.path().join(format!("skew-{id}")), 0)?,
            ))
        })
        .collect::<Result<_>>()?;
    let env = skews.iter().map(|(id, s)| (*id, s.env())).collect();
    let cluster = Cluster::start_behind_proxy_with_env(cfg.nodes, &[&snapshot_logs], env).await?;
    create_shards(&cluster, cfg.shards).await?;
    let key = cluster.project_key("chaos", "service_role", &[]).await?;
    let r = cluster
        .http
        .patch(cluster.url(cluster.ids()[0], "/admin/v1/projects/chaos"))
        .bearer_auth(&cluster.platform)
        .json(&json!({ "lock_ops_per_minute": 0 }))
        .send()
        .await?;
    anyhow::ensure!(
        r.status().is_success(),
        "lifting the rate limit: {}",
        r.status()
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(64)
        .build()?;
    let apis: Vec<Locks> = cluster
        .ids()
        .into_iter()
        .map(|id| Locks {
            http: http.clone(),
            base: format!("http://{}", cluster.addr(id)),
            key: key.clone(),
        })
        .collect();
    let ns = apis[0]
        .rpc("CreateNamespace", json!({ "name": NAMESPACE }))
        .await?;
    anyhow::ensure!(ns.status == 200, "CreateNamespace: {ns:?}");
    let body = json!({ "namespace_name": NAMESPACE, "semaphore_name": SEMAPHORE, "permits": SEMAPHORE_PERMITS });
    let sem = apis[0].rpc("CreateSemaphore", body).await?;
    anyhow::ensure!(sem.status == 200, "CreateSemaphore: {sem:?}");
    create_barrier(&apis[0]).await?;
    let sh = Arc::new(Shared {
        clock: Clock::new(),
        apis,
        stop: AtomicBool::new(false),
        skew_us: 0,
        holds4: Mutex::default(),
        writes: Mutex::default(),
        holds5: Mutex::default(),
        semaphore_holds: Mutex::default(),
        coordination: Mutex::default(),
        resource: Mutex::default(),
        counters: Counters::default(),
        successes: Mutex::default(),
        violations: Mutex::default(),
        lin_gate: tokio::sync::RwLock::new(()),
        lin_ops: Mutex::default(),
        lin_tokens: AtomicU32::new(0),
    });
    let mut seeder = StdRng::seed_from_u64(cfg.seed);
    let mut workers = Vec::new();
    for w in 0..cfg.project_workers {
        workers.push(tokio::spawn(project_worker(sh.clone(), w, seeder.gen())));
    }
    for w in 0..cfg.hier_workers {
        workers.push(tokio::spawn(hier_worker(sh.clone(), w, seeder.gen())));
    }
    for w in 0..cfg.semaphore_workers {
        workers.push(tokio::spawn(semaphore_worker(sh.clone(), w, seeder.gen())));
    }
    for w in 0..BARRIER_PARTIES {
        workers.push(tokio::spawn(barrier_worker(sh.clone(), w, seeder.gen())));
    }
    workers.push(tokio::spawn(wait_group_rounds(sh.clone(), seeder.gen())));
    for w in 0..cfg.lin_workers {
        workers.push(tokio::spawn(lin_worker(sh.clone(), w, seeder.gen())));
    }
    let mut d = Driver {
        cluster,
        skews,
        _skew_dir: skew_dir,
        sh: sh.clone(),
        rng: StdRng::seed_from_u64(seeder.gen()),
        summary: Summary {
            seed: cfg.seed,
            nodes: cfg.nodes,
            ..Summary::default()
        },
        cfg: cfg.clone(),
        probes: Vec::new(),
        lin_last_fencing: 0,
        windows: Vec::new(),
    };
    let mut first = KINDS.to_vec();
    first.shuffle(&mut d.rng);
    let started = Instant::now();
    let mut cycle = 0;
    // Let the load warm up before the first fault.
    tokio::time::sleep(Duration::from_secs(2)).await;
    while started.elapsed() < cfg.duration
        || d.summary.leader_kills < cfg.min_leader_kills
        || cycle < KINDS.len()
    {
        let kind = d.next_kind(cycle, started, &first);
        let healed = d
            .inject(kind, cycle)
            .await
            .with_context(|| format!("injecting {kind:?}"))?;
        d.measure_recovery(healed, cycle, kind).await;
        d.check_probes(false).await;
        d.lin_epoch().await;
        cycle += 1;
        // Some fault-free load between faults.
        let calm = d.rng.gen_range(300..1500);
        tokio::time::sleep(Duration::from_millis(calm)).await;
    }
    sh.stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(90), w).await;
    }
    d.check_probes(true).await;
    d.lin_epoch().await;

    // The history checks.
    let holds4 = sh.holds4.lock().unwrap().clone();
    let holds5 = sh.holds5.lock().unwrap().clone();
    let semaphore_holds = sh.semaphore_holds.lock().unwrap().clone();
    let writes = sh.writes.lock().unwrap().clone();
    let mut found = check_mutual_exclusion(&holds4);
    found.extend(check_fencing(&holds4));
    found.extend(check_writes(&sh.resource.lock().unwrap(), &writes));
    found.extend(check_hierarchy(&holds5));
    found.extend(check_semaphore(&semaphore_holds, SEMAPHORE_PERMITS));
    let coordination = std::mem::take(&mut *sh.coordination.lock().unwrap());
    found.extend(check_barrier(&coordination, BARRIER_PARTIES));
    found.extend(check_wait_groups(&coordination, WAIT_GROUP_COUNTER));
    for v in found {
        sh.violation(v);
    }

    // Worst gap between successful operations, outside no-quorum faults.
    let mut succ = sh.successes.lock().unwrap().clone();
    succ.sort_unstable();
    let no_quorum: Vec<(i64, i64)> = d
        .windows
        .iter()
        .filter(|w| matches!(w.0, Kind::NoQuorumKill | Kind::NoQuorumPartition))
        .map(|w| (w.1, w.2))
        .collect();
    for pair in succ.windows(2) {
        let gap = (pair[0], pair[1]);
        if no_quorum.iter().any(|w| overlap(*w, gap)) {
            continue;
        }
        let took = Duration::from_micros((gap.1 - gap.0) as u64);
        if let Some(w) = d.windows.iter().rfind(|w| w.1 <= gap.1) {
            let per_kind = d.summary.kind_mut(w.0);
            per_kind.gap = per_kind.gap.max(took);
        }
        if took > d.summary.worst_gap.0 {
            let during = d.windows.iter().rfind(|w| w.1 <= gap.1).map_or(
                "before any fault".to_string(),
                |w| {
                    format!(
                        "{:.1}s..{:.1}s, after {:?} injected at {:.1}s",
                        gap.0 as f64 / 1e6,
                        gap.1 as f64 / 1e6,
                        w.0,
                        w.1 as f64 / 1e6
                    )
                },
            );
            d.summary.worst_gap = (took, during);
        }
    }
    let c = &sh.counters;
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let res = sh.resource.lock().unwrap();
    d.summary.detail = format!(
        "project-lock acquired {} / held {} / released {}; hierarchical acquired {} / contended {} / released {} / leases {}; semaphore acquired {} / contended {}; barrier trips seen {} (generations {}); wait-group jobs {} / groups completed {}; linearizability-key calls {}; probes {}; unknown outcome {}; other 4xx {}; resource writes accepted {} rejected {}; holds checked project-lock {} hierarchical {} semaphore {}",
        ld(&c.acquired), ld(&c.contended), ld(&c.released), ld(&c.hier_acquired), ld(&c.hier_contended), ld(&c.hier_released), ld(&c.hier_leases), ld(&c.sem_acquired), ld(&c.sem_contended), ld(&c.barrier_trips), coordination.releases.iter().map(|r| r.generation).max().unwrap_or(0), ld(&c.jobs_reported), ld(&c.wait_groups_completed), ld(&c.lin_ops), ld(&c.probes), ld(&c.unknown), ld(&c.other), res.accepted.len(), res.rejected, holds4.len(), holds5.len(), semaphore_holds.len()
    );
    drop(res);
    d.summary.operations = c.total();
    d.summary.elapsed = started.elapsed();
    let s = d.proxy().stats();
    d.summary.proxy = format!(
        "passed {}, dropped {}, refused {}, delayed {}, blackholed {}, upstream errors {}",
        ld(&s.passed),
        ld(&s.dropped),
        ld(&s.refused),
        ld(&s.delayed),
        ld(&s.blackholed),
        ld(&s.upstream_errors)
    );
    d.summary.violations = sh.violations.lock().unwrap().clone();
    Ok(d.summary)
}
