//! The workloads of `make bench` and the harness that runs one (system, workload, clients) cell:
//! every client connects and prepares, all start together, the first `warmup` is discarded,
//! and each operation's latency inside the measured window is kept (µs) for percentiles.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use hyper::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Barrier};

use crate::conn::Conn;
use crate::systems::*;
use crate::zk;

/// Workload ids, in report order.
pub const ALL: &[&str] = &["1", "2", "3", "3h", "4", "5", "6"];

pub fn title(w: &str) -> &'static str {
    match w {
        "1" => "acquire, fresh keys",
        "2" => "acquire+release cycle, distinct keys",
        "3" => "hot key hand-offs (spin)",
        "3h" => "hot key hand-offs, server-side queue, 64 waiters",
        "4" => "renew",
        "5" => "linearizable read",
        "6" => "hierarchical acquire+release, 100k held",
        _ => "?",
    }
}

/// What one op of the workload is, for the table's unit column.
pub fn unit(w: &str) -> &'static str {
    match w {
        "2" | "6" => "cycles/s",
        "3" | "3h" => "hand-offs/s",
        _ => "ops/s",
    }
}

/// Whether workload `w` runs on `system`: etcd has no server-side queue through its gateway
/// (3h); ZooKeeper has no per-lock renew (4, its sessions are kept alive by pings), Curator's
/// recipe never spins (3: its hot key is 3h, a queue of watchers) and the `multi` variant has
/// no queue (3h) nor a read of its own (5: the same `sync` + read as Curator's).
pub fn runs_on(w: &str, system: System) -> bool {
    match system {
        System::Raftlock => true,
        System::Etcd => w != "3h",
        System::Zookeeper => ["1", "2", "3h", "5", "6"].contains(&w),
        System::ZookeeperMulti => ["1", "2", "3", "6"].contains(&w),
    }
}

/// Concurrency levels a workload runs at.
pub fn levels(w: &str, wanted: &[usize]) -> Vec<usize> {
    if w == "3h" {
        vec![64]
    } else {
        wanted.to_vec()
    }
}

/// One measured cell, a line of the results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub system: String,
    pub workload: String,
    pub clients: usize,
    pub round: u32,
    pub ops: u64,
    pub seconds: f64,
    pub throughput: f64,
    /// Latency percentiles; NaN (written as `null`) when the cell completed no operation.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p999_ms: f64,
    pub errors: u64,
    /// CPU time (user + system) the system's server processes spent in the measured window,
    /// per operation, in µs; absent when their process ids were not given.
    #[serde(default)]
    pub cpu_us_per_op: Option<f64>,
}

/// A percentile as JSON has it: serde writes NaN as `null`.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[derive(Clone, Copy)]
struct Window {
    from: Instant,
    end: Instant,
}

/// Per-client recorder.
struct Rec {
    w: Window,
    lat: Vec<u32>,
    errors: u64,
}

impl Rec {
    /// The start time of the next op, or `None` once the run is over.
    fn next(&self) -> Option<Instant> {
        let now = Instant::now();
        (now < self.w.end).then_some(now)
    }
    fn done(&mut self, t0: Instant) {
        if t0 >= self.w.from {
            self.lat
                .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
        }
    }
    fn error(&mut self, t0: Instant, e: &anyhow::Error) {
        if t0 >= self.w.from {
            self.errors += 1;
        }
        if self.errors < 3 {
            eprintln!("  error: {e:#}");
        }
    }
}

/// Shared, per-run state of a system under test.
pub struct Ctx {
    pub target: Target,
    pub round: u32,
    pub warmup: Duration,
    pub measure: Duration,
    /// hierarchical namespace holding 100,000 locks (workload 6, raftlock), or "" for etcd.
    pub ns6: String,
    /// etcd: a lease holding the 100,000 preloaded keys (workload 6).
    pub run_id: String,
    /// `scaleout`: one target per data shard (its leader, a project placed on it); client
    /// `i` drives `spread[i % len]`, so every shard's leader takes an equal share. Empty:
    /// every client drives `target`.
    pub spread: Vec<Target>,
    /// The server processes of the system under test, whose CPU time each cell reports.
    pub server_pids: Vec<u32>,
    /// ZooKeeper: the session holding workload 6's preloaded nodes (they live as long as it).
    pub zk_holder: std::sync::OnceLock<zookeeper_client::Client>,
}

impl Ctx {
    /// ZooKeeper: this run's node, below which every path of the run lies.
    fn zk_dir(&self) -> String {
        format!("{}/{}", zk::ROOT, self.run_id)
    }

    /// The system client `i` sends its requests to.
    fn client_target(&self, i: usize) -> &Target {
        match self.spread.len() {
            0 => &self.target,
            n => &self.spread[i % n],
        }
    }
}

/// Runs one cell.
pub async fn run_cell(ctx: Arc<Ctx>, w: &'static str, clients: usize) -> anyhow::Result<Cell> {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let (tx, rx) = watch::channel(None::<Window>);
    let mut tasks = Vec::with_capacity(clients);
    // Hot-key workloads: one key (or hierarchical namespace) per cell.
    let ns3 = format!("{}-w{w}-c{clients}", ctx.run_id);
    if w == "3h" && ctx.target.system == System::Raftlock {
        hier_namespace(&mut ctx.target.conn(), &ns3).await?;
    }
    for i in 0..clients {
        let ctx = ctx.clone();
        let barrier = barrier.clone();
        let mut rx = rx.clone();
        let ns3 = ns3.clone();
        tasks.push(tokio::spawn(async move {
            let prefix = format!("{}-w{w}-c{clients}-{i}", ctx.run_id);
            if ctx.target.system.is_zookeeper() {
                let zk = zk::connect(&ctx.client_target(i).leader).await;
                let prep = match &zk {
                    Ok(zk) => zk_prepare(&ctx, w, zk, &prefix).await,
                    Err(e) => Err(anyhow::anyhow!("{e:#}")),
                };
                let mut rec = start(&barrier, &mut rx).await?;
                let (zk, prep) = (zk?, prep?);
                zk_loop(&ctx, w, &zk, &prefix, &ns3, i, prep, &mut rec).await;
                return anyhow::Ok(rec);
            }
            let mut c = ctx.client_target(i).conn();
            let prep = prepare(&ctx, w, &mut c, &prefix, &ns3).await;
            let mut rec = start(&barrier, &mut rx).await?;
            let prep = prep?;
            client_loop(&ctx, w, &mut c, &prefix, &ns3, i, prep, &mut rec).await;
            anyhow::Ok(rec)
        }));
    }
    barrier.wait().await;
    let from = Instant::now() + ctx.warmup;
    let window = Window {
        from,
        end: from + ctx.measure,
    };
    tx.send(Some(window))?;
    let cpu = tokio::spawn(server_cpu_seconds(ctx.server_pids.clone(), window));
    let mut lat = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let rec = t.await??;
        lat.extend_from_slice(&rec.lat);
        errors += rec.errors;
    }
    lat.sort_unstable();
    let cpu_seconds = cpu.await?;
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    let seconds = ctx.measure.as_secs_f64();
    Ok(Cell {
        system: ctx.target.system.name().into(),
        workload: w.into(),
        clients,
        round: ctx.round,
        ops: lat.len() as u64,
        seconds,
        throughput: lat.len() as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        p999_ms: pct(0.999),
        errors,
        cpu_us_per_op: cpu_seconds
            .filter(|_| !lat.is_empty())
            .map(|s| s * 1e6 / lat.len() as f64),
    })
}

/// Waits until every client of the cell is prepared, then for the measured window; the
/// client's recorder for it.
async fn start(barrier: &Barrier, rx: &mut watch::Receiver<Option<Window>>) -> anyhow::Result<Rec> {
    barrier.wait().await;
    let window = *rx.wait_for(Option::is_some).await?;
    Ok(Rec {
        w: window.expect("set"),
        lat: Vec::with_capacity(4096),
        errors: 0,
    })
}

/// CPU seconds (user + system) `pids` spent inside `window`, read from `/proc` at its start
/// and its end; `None` without pids or when a process could not be read.
async fn server_cpu_seconds(pids: Vec<u32>, window: Window) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    tokio::time::sleep_until(window.from.into()).await;
    let before = cpu_ticks(&pids)?;
    tokio::time::sleep_until(window.end.into()).await;
    let after = cpu_ticks(&pids)?;
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(after.saturating_sub(before) as f64 / ticks_per_second)
}

/// utime + stime of every process in `pids`, in clock ticks (fields 14 and 15 of
/// `/proc/<pid>/stat`, counted after the parenthesised command name).
fn cpu_ticks(pids: &[u32]) -> Option<u64> {
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let (utime, stime) = (fields.get(11)?, fields.get(12)?);
            Some(utime.parse::<u64>().ok()? + stime.parse::<u64>().ok()?)
        })
        .sum()
}

/// What a client prepared before the start: a lock token (raftlock) or lease id.
struct Prep {
    token: String,
}

async fn prepare(
    ctx: &Ctx,
    w: &str,
    c: &mut Conn,
    prefix: &str,
    ns3: &str,
) -> anyhow::Result<Prep> {
    let token = uuid::Uuid::new_v4().to_string();
    match ctx.target.system {
        System::Raftlock => match w {
            "4" | "5" => {
                let s = rl_lease(c, Method::POST, &format!("{prefix}-k"), &token, 300).await?;
                expect(s, StatusCode::OK, "acquire")?;
                Ok(Prep { token })
            }
            "3h" => Ok(Prep {
                token: hier_lease(c, ns3, 300).await?,
            }),
            "6" => Ok(Prep {
                token: hier_lease(c, &ctx.ns6, 300).await?,
            }),
            _ => {
                // Opens the connection before the clock starts.
                c.call(Method::GET, "/healthz", &[], "").await?;
                Ok(Prep { token })
            }
        },
        System::Etcd => {
            let lease = etcd_grant(c, 300).await?;
            if w == "5" && !etcd_create(c, &format!("{prefix}-k"), &lease).await? {
                bail!("etcd: could not create the read key");
            }
            Ok(Prep { token: lease })
        }
        System::Zookeeper | System::ZookeeperMulti => {
            bail!("ZooKeeper clients speak its own protocol (zk_prepare)")
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn client_loop(
    ctx: &Ctx,
    w: &str,
    c: &mut Conn,
    prefix: &str,
    ns3: &str,
    idx: usize,
    prep: Prep,
    rec: &mut Rec,
) {
    let tok = prep.token.as_str();
    let hot = format!("{ns3}-hot");
    let mut n: u64 = 0;
    while let Some(t0) = rec.next() {
        n += 1;
        let key = format!("{prefix}-{n}");
        let r: anyhow::Result<()> = match (ctx.target.system, w) {
            (System::Raftlock, "1") => rl_lease(c, Method::POST, &key, tok, 60)
                .await
                .and_then(|s| expect(s, StatusCode::OK, "acquire")),
            (System::Raftlock, "2") => {
                async {
                    expect(
                        rl_lease(c, Method::POST, &key, tok, 60).await?,
                        StatusCode::OK,
                        "acquire",
                    )?;
                    expect(
                        rl_release(c, &key, tok).await?,
                        StatusCode::NO_CONTENT,
                        "release",
                    )
                }
                .await
            }
            (System::Raftlock, "3") => {
                async {
                    loop {
                        let s = rl_lease(c, Method::POST, &hot, tok, 10).await?;
                        if s == StatusCode::OK {
                            break;
                        }
                        expect(s, StatusCode::CONFLICT, "acquire hot")?;
                        if rec.next().is_none() {
                            bail!("run over");
                        }
                    }
                    expect(
                        rl_release(c, &hot, tok).await?,
                        StatusCode::NO_CONTENT,
                        "release",
                    )
                }
                .await
            }
            (System::Raftlock, "3h") => {
                async {
                    if !hier_acquire(c, ns3, "hot/lock", tok, 30).await? {
                        bail!("blocking acquire did not acquire");
                    }
                    hier_release(c, ns3, "hot/lock", tok).await
                }
                .await
            }
            (System::Raftlock, "4") => rl_lease(c, Method::PATCH, &format!("{prefix}-k"), tok, 300)
                .await
                .and_then(|s| expect(s, StatusCode::OK, "renew")),
            (System::Raftlock, "5") => rl_read(c, &format!("{prefix}-k"))
                .await
                .and_then(|s| expect(s, StatusCode::OK, "read")),
            (System::Raftlock, "6") => {
                async {
                    let lock = format!("held/g{}/x{prefix}-{n}", idx % 100);
                    if !hier_acquire(c, &ctx.ns6, &lock, tok, 0).await? {
                        bail!("acquire in the 100k namespace refused");
                    }
                    hier_release(c, &ctx.ns6, &lock, tok).await
                }
                .await
            }
            (System::Etcd, "1") => etcd_create(c, &key, tok).await.and_then(|ok| {
                if ok {
                    Ok(())
                } else {
                    bail!("fresh key exists")
                }
            }),
            (System::Etcd, "2" | "6") => {
                async {
                    if !etcd_create(c, &key, tok).await? {
                        bail!("fresh key exists");
                    }
                    etcd_delete(c, &key).await
                }
                .await
            }
            (System::Etcd, "3") => {
                async {
                    while !etcd_create(c, &hot, tok).await? {
                        if rec.next().is_none() {
                            bail!("run over");
                        }
                    }
                    etcd_delete(c, &hot).await
                }
                .await
            }
            (System::Etcd, "4") => etcd_keepalive(c, tok).await,
            (System::Etcd, "5") => etcd_get(c, &format!("{prefix}-k")).await.and_then(|ok| {
                if ok {
                    Ok(())
                } else {
                    bail!("read key missing")
                }
            }),
            (s, w) => Err(anyhow::anyhow!("workload {w} does not run on {}", s.name())),
        };
        if settle(rec, t0, r).is_break() {
            break;
        }
    }
}

/// Records how one operation ended; `Break` when the client should stop (the run is over, or
/// the workload does not run on this system).
fn settle(rec: &mut Rec, t0: Instant, r: anyhow::Result<()>) -> ControlFlow<()> {
    match r {
        Ok(()) => rec.done(t0),
        Err(e) if e.to_string() == "run over" => return ControlFlow::Break(()),
        Err(e) => {
            rec.error(t0, &e);
            if e.to_string().contains("does not run") {
                return ControlFlow::Break(());
            }
        }
    }
    ControlFlow::Continue(())
}

/// Prepares a ZooKeeper client: workload 5 holds the node it then reads.
async fn zk_prepare(
    ctx: &Ctx,
    w: &str,
    zk: &zookeeper_client::Client,
    prefix: &str,
) -> anyhow::Result<Prep> {
    let token = match w {
        "5" => zk::curator_acquire(zk, &format!("{}/{prefix}-k", ctx.zk_dir())).await?,
        _ => String::new(),
    };
    Ok(Prep { token })
}

/// A ZooKeeper client's operations until the window ends (see [`crate::zk`] for the recipes).
#[allow(clippy::too_many_arguments)]
async fn zk_loop(
    ctx: &Ctx,
    w: &str,
    zk: &zookeeper_client::Client,
    prefix: &str,
    ns3: &str,
    idx: usize,
    prep: Prep,
    rec: &mut Rec,
) {
    let dir = ctx.zk_dir();
    let hot = format!("{dir}/{ns3}-hot");
    let mut n: u64 = 0;
    while let Some(t0) = rec.next() {
        n += 1;
        // The lock this operation takes: a fresh one, or the cell's hot one.
        let key = match w {
            "3" | "3h" => hot.clone(),
            "6" => format!("{dir}/w6/g{}/x{prefix}-{n}", idx % 100),
            _ => format!("{dir}/{prefix}-{n}"),
        };
        let r: anyhow::Result<()> = match (ctx.target.system, w) {
            (System::Zookeeper, "1") => zk::curator_acquire(zk, &key).await.map(drop),
            (System::Zookeeper, "2" | "3h" | "6") => {
                async {
                    let child = zk::curator_acquire(zk, &key).await?;
                    zk::curator_release(zk, &child).await
                }
                .await
            }
            (System::Zookeeper, "5") => match zk::read(zk, &prep.token).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(anyhow::anyhow!("read node missing")),
                Err(e) => Err(e),
            },
            (System::ZookeeperMulti, "1") => zk::multi_acquire(zk, &key).await.map(drop),
            (System::ZookeeperMulti, "2" | "6") => {
                async {
                    let child = zk::multi_acquire(zk, &key).await?;
                    zk::multi_release(zk, &key, &child).await
                }
                .await
            }
            (System::ZookeeperMulti, "3") => {
                async {
                    while !zk::try_ephemeral(zk, &key).await? {
                        if rec.next().is_none() {
                            bail!("run over");
                        }
                    }
                    zk.delete(&key, None).await.map_err(Into::into)
                }
                .await
            }
            (s, w) => Err(anyhow::anyhow!("workload {w} does not run on {}", s.name())),
        };
        if settle(rec, t0, r).is_break() {
            break;
        }
    }
}

/// Creates what every client of a run shares: ZooKeeper's node of the run.
pub async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    if ctx.target.system.is_zookeeper() {
        let zk = zk::connect(&ctx.target.leader).await?;
        zk::mkdir(&zk, &ctx.zk_dir()).await?;
    }
    Ok(())
}

/// Workload 6 setup: 100,000 locks held in one hierarchical namespace (raftlock) or 100,000 keys
/// held under one lease (etcd), loaded by `clients` concurrent callers.
pub async fn preload(ctx: &Ctx, count: usize, clients: usize) -> anyhow::Result<()> {
    let t = Instant::now();
    if ctx.target.system.is_zookeeper() {
        let dir = format!("{}/w6", ctx.zk_dir());
        let holder = zk::preload(&ctx.target.leader, &dir, count, clients).await?;
        // A second preload of the same run would find its nodes taken: there is none.
        let _ = ctx.zk_holder.set(holder);
        eprintln!(
            "  preloaded {count} held nodes in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let mut setup = ctx.target.conn();
    let holder = match ctx.target.system {
        System::Raftlock => {
            hier_namespace(&mut setup, &ctx.ns6).await?;
            hier_lease(&mut setup, &ctx.ns6, 300).await?
        }
        System::Etcd => etcd_grant(&mut setup, 600).await?,
        System::Zookeeper | System::ZookeeperMulti => unreachable!("preloaded above"),
    };
    let mut tasks = Vec::new();
    for i in 0..clients {
        let target = ctx.target.clone();
        let holder = holder.clone();
        let ns = ctx.ns6.clone();
        let run = ctx.run_id.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = target.conn();
            let mut j = i;
            while j < count {
                let ok = match target.system {
                    System::Raftlock => {
                        hier_acquire(&mut c, &ns, &format!("held/g{}/l{j}", j % 100), &holder, 0)
                            .await?
                    }
                    System::Etcd => {
                        etcd_create(&mut c, &format!("{run}-held-{j}"), &holder).await?
                    }
                    System::Zookeeper | System::ZookeeperMulti => unreachable!("preloaded above"),
                };
                if !ok {
                    bail!("preload of lock {j} refused");
                }
                j += clients;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    eprintln!(
        "  preloaded {count} held locks in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Holds `count` project locks (long TTL) with `clients` concurrent acquirers; returns
/// the rate achieved.
pub async fn load_project_locks(
    target: &Target,
    count: usize,
    clients: usize,
    ttl: u64,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    target
        .lock_clients(clients, |i, mut c, token| async move {
            let mut j = i;
            while j < count {
                let key = format!("mem-{j}");
                match rl_lease(&mut c, Method::POST, &key, &token, ttl).await {
                    Ok(StatusCode::OK) => j += clients,
                    Ok(s) if s.is_server_error() => {
                        tokio::time::sleep(Duration::from_millis(50)).await
                    }
                    Ok(s) => bail!("acquire {key}: HTTP {s}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            anyhow::Ok(())
        })
        .await?;
    Ok(count as f64 / t.elapsed().as_secs_f64())
}
