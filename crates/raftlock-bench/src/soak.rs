//! `soak`: a fixed-rate (open-loop) mixed load for many minutes, reported minute by minute.
//!
//! Jobs are scheduled at `rate` per second whatever the cluster does, and a request's latency
//! counts from the moment its job was *scheduled*, not from when a connection was free to
//! send it — so a stall shows up in full for every job it delayed (no coordinated omission).
//! A job is one of: project lock acquire → renew → release on a fresh key, or a hierarchical
//! `AcquireLock` → `ReleaseLock` under the worker's lease (a new lease every minute; the old
//! one expires).
//!
//! Each minute prints throughput, p50/p99/p99.9/max, errors, and per node: the peak RSS
//! (`/proc/<pid>/status`, sampled every second: a memory spike shorter than the minute, such
//! as a snapshot's buffer, is seen), leader changes, snapshots built and fsyncs (from
//! `/metrics`), and the longest any thread of the node waited in the kernel (state `D`,
//! sampled every 100 ms): when every node shows the same long wait in the same minute, the
//! stall was the disk they share.
//!
//! The same soak drives etcd (`--system etcd`): a job there is the same number of requests —
//! create a key under the worker's lease (a `txn` on `create_revision == 0`, how etcd's own
//! mutex takes a lock) → keep the lease alive → delete the key, or create → delete — so both
//! systems meet the same rate on the same disk, and a stall both see in the same minutes is
//! the machine's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use tokio::sync::{mpsc, Mutex};

use crate::conn::Conn;
use crate::systems::{
    etcd_create, etcd_delete, etcd_grant, etcd_keepalive, hier_namespace, rl_lease, rl_release,
    rpc, scrape, series_sum, System, Target,
};

/// How many jobs may wait for a free connection before the generator counts them as
/// errors (a cluster that stopped answering must not grow the queue without bound).
const MAX_BACKLOG: usize = 100_000;
/// The namespace of the hierarchical jobs.
const NAMESPACE: &str = "soak";

/// One job: when it should have started.
struct Job {
    scheduled: Instant,
    seq: u64,
}

/// What one minute measured.
#[derive(Default)]
pub struct Minute {
    pub minute: usize,
    pub requests: usize,
    pub errors: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// The longest a job waited for a connection to take it up (see [`Window`]).
    pub max_queued_ms: f64,
    /// The latest this generator's scheduler woke for a job's start: a stall of the load
    /// generator itself (it shares the machine), not of the cluster.
    pub max_late_ms: f64,
    /// Per node, in `endpoints` order: the highest RSS sampled this minute.
    pub rss_mib: Vec<f64>,
    pub leader_changes: f64,
    pub snapshots: f64,
    pub fsyncs: f64,
    /// The mean time of this minute's log fsyncs, all nodes, in ms (raftlock times the WAL
    /// write with its sync, etcd the sync alone): a disk that slows down shows here first
    /// (batches grow, fsyncs get fewer, p50 rises), whatever the cluster does.
    pub fsync_mean_ms: f64,
    /// Slow events this minute, all nodes, per stall source of the system's [`SoakMetrics`].
    pub slow: Vec<f64>,
    /// Per node at the minute's end: the bytes it holds from its allocator, in MiB (empty
    /// when the system exports no such gauge).
    pub heap_live_mib: Vec<f64>,
    /// Per node at the minute's end: its resident memory in transparent huge pages, in MiB
    /// (`AnonHugePages`). khugepaged turns a 2 MiB region with a single page in use into a
    /// whole resident huge page, minutes after the fact: an RSS step no allocation made.
    pub huge_pages_mib: Vec<f64>,
    /// Per node: the longest any of its threads stayed in uninterruptible sleep this minute
    /// (see [`spawn_disk_wait_sampler`]). The same long wait on every node at once is the
    /// shared disk, not one node's work.
    pub disk_wait_ms: Vec<f64>,
}

/// What a system's `/metrics` calls the figures a soak reports each minute.
pub struct SoakMetrics {
    /// Counter of leader changes (a node counts its first known leader as one).
    leader_changes: &'static str,
    /// Counter of snapshots taken.
    snapshots: &'static str,
    /// Counter of log fsyncs.
    fsyncs: &'static str,
    /// Total seconds spent in log fsyncs.
    fsync_seconds: &'static str,
    /// The bucket bound (seconds, as the histograms spell it) above which an event is slow:
    /// 50 ms for raftlock; etcd's buckets are powers of two, so 64 ms there.
    slow_above: &'static str,
    /// The stall histograms: label and series.
    stall_sources: &'static [(&'static str, &'static str)],
    /// Gauge of the bytes the program holds from its allocator, if the system exports one:
    /// beside RSS it tells memory held from memory the allocator keeps.
    heap_live: Option<&'static str>,
}

impl SoakMetrics {
    pub fn of(system: System) -> &'static SoakMetrics {
        match system {
            System::Raftlock => &RAFTLOCK_METRICS,
            System::Etcd => &ETCD_METRICS,
            System::Zookeeper | System::ZookeeperMulti => {
                unreachable!("the soak refuses ZooKeeper before it starts")
            }
        }
    }

    /// The table's heading of the slow-event column, e.g. `over 50 ms (apply/queue/...)`.
    fn slow_heading(&self) -> String {
        let ms = self.slow_above.parse::<f64>().unwrap_or(0.0) * 1000.0;
        let labels: Vec<&str> = self.stall_sources.iter().map(|(l, _)| *l).collect();
        format!("over {ms:.0} ms ({})", labels.join("/"))
    }
}

const RAFTLOCK_METRICS: SoakMetrics = SoakMetrics {
    leader_changes: "raftlock_leader_changes_total",
    snapshots: "raftlock_snapshot_duration_seconds_count",
    fsyncs: "raftlock_wal_fsync_duration_seconds_count",
    fsync_seconds: "raftlock_wal_fsync_duration_seconds_sum",
    slow_above: "0.05",
    stall_sources: &[
        ("apply", "raftlock_apply_duration_seconds"),
        ("queue", "raftlock_proposer_queue_wait_seconds"),
        ("fsync", "raftlock_wal_fsync_duration_seconds"),
        ("snapshot", "raftlock_snapshot_duration_seconds"),
        ("purge", "raftlock_log_purge_duration_seconds"),
    ],
    heap_live: Some("raftlock_heap_live_bytes"),
};

const ETCD_METRICS: SoakMetrics = SoakMetrics {
    leader_changes: "etcd_server_leader_changes_seen_total",
    snapshots: "etcd_debugging_snap_save_total_duration_seconds_count",
    fsyncs: "etcd_disk_wal_fsync_duration_seconds_count",
    fsync_seconds: "etcd_disk_wal_fsync_duration_seconds_sum",
    slow_above: "0.064",
    stall_sources: &[
        ("fsync", "etcd_disk_wal_fsync_duration_seconds"),
        (
            "backend commit",
            "etcd_disk_backend_commit_duration_seconds",
        ),
    ],
    heap_live: None,
};

/// Latencies (µs) and errors of the current minute, shared by the workers.
#[derive(Default)]
struct Window {
    latencies_us: Vec<u64>,
    errors: usize,
    /// The longest a job waited between its scheduled start and a connection taking it up:
    /// tells a stall of every connection (or of this generator) from one slow request.
    max_queued_us: u64,
}

fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// A `Field:   N kB` line of `/proc/<pid>/<file>`, in MiB (0 when absent).
fn proc_kib_field_mib(pid: u32, file: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A process's resident memory in transparent huge pages.
fn anon_huge_pages_mib(pid: u32) -> f64 {
    proc_kib_field_mib(pid, "smaps_rollup", "AnonHugePages")
}

fn rss_mib(pid: u32) -> f64 {
    proc_kib_field_mib(pid, "status", "VmRSS")
}

/// Samples each node's RSS every second into `peaks` (per node, the highest since the minute
/// began), until aborted.
fn spawn_rss_sampler(
    pids: Vec<u32>,
    peaks: Arc<std::sync::Mutex<Vec<f64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let now: Vec<f64> = pids.iter().map(|p| rss_mib(*p)).collect();
            let mut peaks = peaks.lock().expect("rss peaks");
            for (peak, rss) in peaks.iter_mut().zip(now) {
                *peak = peak.max(rss);
            }
        }
    })
}

/// What a per-node sampler raised during the minute, zeroed for the next one.
fn take_minute(per_node: &std::sync::Mutex<Vec<f64>>) -> Vec<f64> {
    let mut values = per_node.lock().expect("per-node samples");
    let nodes = values.len();
    std::mem::replace(&mut *values, vec![0.0; nodes])
}

/// Per-node figures rounded for a console line.
pub fn rounded(values: &[f64]) -> Vec<i64> {
    values.iter().map(|v| v.round() as i64).collect()
}

/// The threads of `pid` in uninterruptible sleep (state `D` in `/proc/<pid>/task/*/stat`):
/// waiting in the kernel, for a node almost always on its disk (an `fdatasync`, a page under
/// writeback). Each with its count of context switches, which tells one long wait from many
/// short ones (see [`spawn_disk_wait_sampler`]).
fn threads_in_disk_wait(pid: u32) -> Vec<(u32, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            if thread_state(&stat)? != 'D' {
                return None;
            }
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            Some((
                t.file_name().to_str()?.parse().ok()?,
                context_switches(&status)?,
            ))
        })
        .collect()
}

/// The state letter of a `/proc/.../stat` line. It follows the command name, which is in
/// parentheses and may itself hold spaces and parentheses, so it is found from the last `)`.
fn thread_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}

/// Voluntary plus involuntary context switches of a `/proc/.../status` text: a thread that
/// has not switched since it was last seen waiting is still in the same wait.
fn context_switches(status: &str) -> Option<u64> {
    let count = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].trim().parse().ok()
    };
    Some(count("voluntary_ctxt_switches:")? + count("nonvoluntary_ctxt_switches:")?)
}

/// Every 100 ms, notes each node thread in uninterruptible sleep; per node, `longest` holds the
/// longest such wait seen since it was last reset (a wait still going counts as far as it got,
/// so one spanning minutes shows in each). Sampled, so a wait is seen to within 100 ms. A
/// thread seen waiting at two samples is one wait only if it has not switched in between: the
/// thread that writes the log waits on ~3,000 short fsyncs a second, so it is in `D` at most
/// samples, and counting those as one wait showed 100–200 ms "waits" in minutes whose
/// slowest fsync (traced) was 13 ms.
fn spawn_disk_wait_sampler(
    pids: Vec<u32>,
    longest: Arc<std::sync::Mutex<Vec<f64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Per waiting thread: when its current wait was first seen, and its switch count then.
        let mut since: HashMap<(usize, u32), (Instant, u64)> = HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let now = Instant::now();
            let mut waiting = HashSet::new();
            for (node, pid) in pids.iter().enumerate() {
                for (tid, switches) in threads_in_disk_wait(*pid) {
                    waiting.insert((node, tid));
                    let seen = since.entry((node, tid)).or_insert((now, switches));
                    if seen.1 != switches {
                        *seen = (now, switches);
                    }
                }
            }
            since.retain(|key, _| waiting.contains(key));
            let mut longest = longest.lock().expect("disk waits");
            for ((node, _), (start, _)) in &since {
                let ms = now.duration_since(*start).as_secs_f64() * 1000.0;
                longest[*node] = longest[*node].max(ms);
            }
        }
    })
}

/// One scrape of each node: the cumulative counters, all nodes (leader changes, snapshots,
/// fsyncs, fsync seconds, then per stall source the slow events), and per node its live heap in MiB.
async fn counters(metrics: &SoakMetrics, endpoints: &[String]) -> (Vec<f64>, Vec<f64>) {
    let texts = scrape(endpoints).await;
    let heap_live = metrics.heap_live.map_or_else(Vec::new, |gauge| {
        texts
            .iter()
            .map(|t| series_sum(std::slice::from_ref(t), gauge) / (1 << 20) as f64)
            .collect()
    });
    let mut values = vec![
        series_sum(&texts, metrics.leader_changes),
        series_sum(&texts, metrics.snapshots),
        series_sum(&texts, metrics.fsyncs),
        series_sum(&texts, metrics.fsync_seconds),
    ];
    for (_, series) in metrics.stall_sources {
        let all = series_sum(&texts, &format!("{series}_count"));
        let bucket = format!("{series}_bucket{{le=\"{}\"}}", metrics.slow_above);
        values.push(all - series_sum(&texts, &bucket));
    }
    (values, heap_live)
}

/// Waits (at most 10 s) until each node has seen a leader. A node counts its first known
/// leader as a leader change; on a cluster that just formed, a follower may learn of the
/// leader after the baseline is taken, and minute 1 would report that as a change.
async fn until_every_node_knows_a_leader(metrics: &SoakMetrics, endpoints: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let texts = scrape(endpoints).await;
        let knows =
            |text: &String| series_sum(std::slice::from_ref(text), metrics.leader_changes) >= 1.0;
        if texts.iter().all(knows) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a soak runs.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Jobs scheduled per second.
    pub rate: f64,
    /// Minutes measured and reported.
    pub minutes: usize,
    /// Minutes run at the same rate before them and not reported: a cluster that was just
    /// preloaded with 1M locks is still writing the snapshots and freeing the memory of the
    /// preload for some seconds (RSS 307 → 406 → 347 MiB within 20 s of the preload's end),
    /// which is the preload's cost, not the steady state the soak measures.
    pub warmup_minutes: usize,
    /// Connections the jobs are spread over (each runs one job at a time).
    pub connections: usize,
}

/// Runs the soak; `on_minute` sees each measured minute as it completes.
pub async fn run(
    target: &Target,
    endpoints: &[String],
    pids: &[u32],
    plan: &Plan,
    mut on_minute: impl FnMut(&Minute),
) -> anyhow::Result<Vec<Minute>> {
    let Plan {
        rate,
        minutes,
        warmup_minutes,
        connections,
    } = *plan;
    let metrics = SoakMetrics::of(target.system);
    if target.system == System::Raftlock {
        hier_namespace(&mut target.conn(), NAMESPACE).await?;
    }
    let window = Arc::new(Mutex::new(Window::default()));
    let (tx, rx) = mpsc::channel::<Job>(MAX_BACKLOG);
    let rx = Arc::new(Mutex::new(rx));
    for worker in 0..connections {
        let (target, window, rx) = (target.clone(), window.clone(), rx.clone());
        tokio::spawn(async move { work(worker, target, window, rx).await });
    }
    until_every_node_knows_a_leader(metrics, endpoints).await;
    let peaks = Arc::new(std::sync::Mutex::new(vec![0.0; pids.len()]));
    let sampler = spawn_rss_sampler(pids.to_vec(), peaks.clone());
    let disk_waits = Arc::new(std::sync::Mutex::new(vec![0.0; pids.len()]));
    let disk_sampler = spawn_disk_wait_sampler(pids.to_vec(), disk_waits.clone());
    let start = Instant::now();
    let (mut before, _) = counters(metrics, endpoints).await;
    let late_us = Arc::new(AtomicU64::new(0));
    let total = warmup_minutes + minutes;
    // Ends by itself with the last minute.
    spawn_scheduler(
        start,
        rate,
        start + Duration::from_secs(60 * total as u64),
        tx,
        window.clone(),
        late_us.clone(),
    )?;
    let mut results = Vec::new();
    for minute in 1..=total {
        let minute_end = start + Duration::from_secs(60 * minute as u64);
        tokio::time::sleep_until(minute_end.into()).await;
        let late_us = late_us.swap(0, Ordering::Relaxed);
        let taken = std::mem::take(&mut *window.lock().await);
        let mut lat = taken.latencies_us;
        lat.sort_unstable();
        let (after, heap_live_mib) = counters(metrics, endpoints).await;
        let m = Minute {
            minute: minute.saturating_sub(warmup_minutes),
            requests: lat.len(),
            errors: taken.errors,
            p50_ms: quantile(&lat, 0.50),
            p99_ms: quantile(&lat, 0.99),
            p999_ms: quantile(&lat, 0.999),
            max_ms: lat.last().map_or(0.0, |v| *v as f64 / 1000.0),
            max_queued_ms: taken.max_queued_us as f64 / 1000.0,
            max_late_ms: late_us as f64 / 1000.0,
            rss_mib: take_minute(&peaks),
            leader_changes: after[0] - before[0],
            snapshots: after[1] - before[1],
            fsyncs: after[2] - before[2],
            fsync_mean_ms: 1000.0 * (after[3] - before[3]) / (after[2] - before[2]).max(1.0),
            slow: (4..after.len()).map(|i| after[i] - before[i]).collect(),
            heap_live_mib,
            huge_pages_mib: pids.iter().map(|p| anon_huge_pages_mib(*p)).collect(),
            disk_wait_ms: take_minute(&disk_waits),
        };
        before = after;
        if minute <= warmup_minutes {
            eprintln!(
                "[soak] warm-up minute {minute} of {warmup_minutes} (not reported): p99 {:.2} ms, max {:.1} ms, rss {:?} MiB",
                m.p99_ms,
                m.max_ms,
                rounded(&m.rss_mib)
            );
            continue;
        }
        on_minute(&m);
        results.push(m);
    }
    sampler.abort();
    disk_sampler.abort();
    Ok(results)
}

/// Hands out jobs at `rate` per second from `start` until `end`, each at its exact time, and
/// keeps in `late_us` the latest it woke for one since the reader last took it. It runs on a
/// thread of its own, so nothing else the generator does delays a job's start — a job's
/// latency counts from its scheduled time. As a task of the generator's runtime it waited
/// behind the minute's report (scraping every node's `/metrics`, ~10 ms: it woke 12–16 ms
/// late in every minute of a small-state run) and, after a disk stall, behind the connections
/// working off the backlog (50–137 ms late in a 1M-held run).
fn spawn_scheduler(
    start: Instant,
    rate: f64,
    end: Instant,
    jobs: mpsc::Sender<Job>,
    window: Arc<Mutex<Window>>,
    late_us: Arc<AtomicU64>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("soak-scheduler".into())
        .spawn(move || {
            for seq in 0u64.. {
                let due = start + Duration::from_secs_f64(seq as f64 / rate);
                if due >= end {
                    return;
                }
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                late_us.fetch_max(micros(due), Ordering::Relaxed);
                if jobs
                    .try_send(Job {
                        scheduled: due,
                        seq,
                    })
                    .is_err()
                {
                    window.blocking_lock().errors += 1;
                }
            }
        })
}

/// One connection: takes jobs in order and runs them.
async fn work(
    worker: usize,
    target: Target,
    window: Arc<Mutex<Window>>,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
) {
    let mut c = target.conn();
    let token = uuid::Uuid::new_v4().to_string();
    let mut lease: Option<(String, Instant)> = None;
    // Read once: the environment is locked and copied on each read, and this loop is the
    // generator's hot path.
    // Only `1` turns it on: `SOAK_TRACE_SLOW=0` must not print every job of a saturated probe.
    let trace_slow = std::env::var("SOAK_TRACE_SLOW").is_ok_and(|v| v == "1");
    loop {
        let Some(job) = jobs.lock().await.recv().await else {
            return;
        };
        let queued = micros(job.scheduled);
        let mut latencies = Vec::with_capacity(3);
        let ok = match (target.system, job.seq % 2 == 0) {
            (System::Raftlock, true) => {
                project_job(&mut c, worker, job, &token, &mut latencies).await
            }
            (System::Raftlock, false) => {
                hier_job(&mut c, worker, job, &mut lease, &mut latencies).await
            }
            (System::Etcd, renews) => {
                etcd_job(&mut c, worker, job, renews, &mut lease, &mut latencies).await
            }
            (System::Zookeeper | System::ZookeeperMulti, _) => {
                unreachable!("the soak refuses ZooKeeper before it starts")
            }
        };
        if trace_slow && latencies.iter().any(|l| *l > 100_000) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            eprintln!(
                "[slow] at {now:.3} worker {worker} queued {queued} us latencies {latencies:?}"
            );
        }
        let mut w = window.lock().await;
        w.latencies_us.extend(latencies);
        w.max_queued_us = w.max_queued_us.max(queued);
        w.errors += usize::from(!ok);
    }
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

async fn project_job(
    c: &mut Conn,
    worker: usize,
    job: Job,
    token: &str,
    lat: &mut Vec<u64>,
) -> bool {
    let key = format!("soak-{worker}-{}", job.seq);
    let acquired = rl_lease(c, Method::POST, &key, token, 30).await;
    lat.push(micros(job.scheduled));
    let t = Instant::now();
    let renewed = rl_lease(c, Method::PATCH, &key, token, 30).await;
    lat.push(micros(t));
    let t = Instant::now();
    let released = rl_release(c, &key, token).await;
    lat.push(micros(t));
    matches!(acquired, Ok(StatusCode::OK))
        && matches!(renewed, Ok(StatusCode::OK))
        && matches!(released, Ok(StatusCode::NO_CONTENT))
}

async fn hier_job(
    c: &mut Conn,
    worker: usize,
    job: Job,
    lease: &mut Option<(String, Instant)>,
    lat: &mut Vec<u64>,
) -> bool {
    if !lease_is_fresh(lease) {
        let created = rpc(
            c,
            "CreateLockLease",
            json!({ "namespace_name": NAMESPACE, "process_id": format!("soak-{worker}"), "ttl_seconds": 120 }),
        )
        .await;
        match created
            .ok()
            .and_then(|v| v["lease"]["lease_id"].as_str().map(String::from))
        {
            Some(id) => *lease = Some((id, Instant::now())),
            None => return false,
        }
    }
    let lease_id = lease.as_ref().map(|(id, _)| id.clone()).unwrap_or_default();
    let lock = json!({
        "namespace_name": NAMESPACE,
        // One lock per worker: its jobs run one after another, so it never contends.
        "lock_name": format!("w{worker}/job"),
        "lease_id": lease_id,
        "exclusive": true,
    });
    let acquired = rpc(c, "AcquireLock", lock.clone()).await;
    lat.push(micros(job.scheduled));
    let t = Instant::now();
    let mut release = lock;
    release.as_object_mut().map(|o| o.remove("exclusive"));
    let released = rpc(c, "ReleaseLock", release).await;
    lat.push(micros(t));
    let granted = acquired
        .as_ref()
        .is_ok_and(|v| v["outcome"] == "ACQUIRE_OUTCOME_ACQUIRED");
    granted && released.is_ok()
}

/// etcd's job: create a key under the worker's lease (a new lease every minute, TTL 120 s, as
/// in [`hier_job`]) → keep the lease alive when `renews` → delete the key: the requests of a
/// project job (acquire → renew → release) or of a hierarchical one (acquire → release).
async fn etcd_job(
    c: &mut Conn,
    worker: usize,
    job: Job,
    renews: bool,
    lease: &mut Option<(String, Instant)>,
    lat: &mut Vec<u64>,
) -> bool {
    if !lease_is_fresh(lease) {
        match etcd_grant(c, 120).await {
            Ok(id) => *lease = Some((id, Instant::now())),
            Err(_) => return false,
        }
    }
    let lease_id = lease.as_ref().map(|(id, _)| id.clone()).unwrap_or_default();
    let key = format!("soak-{worker}-{}", job.seq);
    let created = etcd_create(c, &key, &lease_id).await;
    lat.push(micros(job.scheduled));
    let mut ok = matches!(created, Ok(true));
    if renews {
        let t = Instant::now();
        ok &= etcd_keepalive(c, &lease_id).await.is_ok();
        lat.push(micros(t));
    }
    let t = Instant::now();
    ok &= etcd_delete(c, &key).await.is_ok();
    lat.push(micros(t));
    ok
}

/// A worker's lease is replaced by a new one once a minute (its TTL of 120 s lets the old one
/// expire on its own).
fn lease_is_fresh(lease: &Option<(String, Instant)>) -> bool {
    lease
        .as_ref()
        .is_some_and(|(_, at)| at.elapsed() < Duration::from_secs(60))
}

/// Per-node figures as one cell, `n1/n2/n3`.
fn per_node_cell(values: &[f64]) -> String {
    let cells: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
    cells.join("/")
}

/// The minutes as a markdown table.
pub fn markdown(minutes: &[Minute], nodes: usize, metrics: &SoakMetrics) -> String {
    let rss: Vec<String> = (1..=nodes)
        .map(|n| format!("peak RSS n{n} (MiB)"))
        .collect();
    let names = (1..=nodes)
        .map(|n| format!("n{n}"))
        .collect::<Vec<_>>()
        .join("/");
    let mut out = format!(
        "| minute | req/s | p50 (ms) | p99 (ms) | p99.9 (ms) | max (ms) | errors | {} | leader changes | snapshots | fsyncs | mean fsync (ms) | {} | longest disk wait ({names}, ms) | live heap at the end ({names}, MiB) | huge pages at the end ({names}, MiB) |\n",
        rss.join(" | "),
        metrics.slow_heading(),
    );
    out += &format!("|{}\n", " --- |".repeat(15 + nodes));
    for m in minutes {
        let rss: Vec<String> = m.rss_mib.iter().map(|r| format!("{r:.0}")).collect();
        out += &format!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} |\n",
            m.minute,
            m.requests as f64 / 60.0,
            m.p50_ms,
            m.p99_ms,
            m.p999_ms,
            m.max_ms,
            m.errors,
            rss.join(" | "),
            m.leader_changes,
            m.snapshots,
            m.fsyncs,
            m.fsync_mean_ms,
            m.slow
                .iter()
                .map(|v| format!("{v}"))
                .collect::<Vec<_>>()
                .join("/"),
            per_node_cell(&m.disk_wait_ms),
            if m.heap_live_mib.is_empty() {
                "–".to_string()
            } else {
                per_node_cell(&m.heap_live_mib)
            },
            per_node_cell(&m.huge_pages_mib)
        );
    }
    out + &rss_band(minutes, nodes)
}

/// Per node, the lowest and highest of the minutes' peak RSS and how far they are from their
/// midpoint: "flat ± 5 %" holds when that is at most 5 %.
fn rss_band(minutes: &[Minute], nodes: usize) -> String {
    let bands: Vec<String> = (0..nodes)
        .filter_map(|n| {
            let peaks = minutes.iter().filter_map(|m| m.rss_mib.get(n).copied());
            let (lo, hi) = peaks.fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
            (hi > 0.0).then(|| {
                let spread = (hi - lo) / (hi + lo) * 100.0;
                format!("n{} {lo:.0}–{hi:.0} MiB (± {spread:.1} %)", n + 1)
            })
        })
        .collect();
    format!(
        "\nPeak RSS over the minutes: {}.{}\n",
        bands.join(", "),
        rss_drift(minutes, nodes)
    )
}

/// How many minutes at each end of a run [`rss_drift`] averages.
const DRIFT_MINUTES: usize = 5;

/// Per node, the mean peak RSS of the last [`DRIFT_MINUTES`] against the first: growth (a
/// leak, a cache without bound) shows here, while the band above also counts the swing
/// between snapshots that comes back. Empty for a run too short to have two ends.
fn rss_drift(minutes: &[Minute], nodes: usize) -> String {
    if minutes.len() < 2 * DRIFT_MINUTES {
        return String::new();
    }
    let mean = |ms: &[Minute], n: usize| {
        let read: Vec<f64> = ms
            .iter()
            .filter_map(|m| m.rss_mib.get(n).copied())
            .filter(|r| *r > 0.0)
            .collect();
        (!read.is_empty()).then(|| read.iter().sum::<f64>() / read.len() as f64)
    };
    let (first, last) = (
        &minutes[..DRIFT_MINUTES],
        &minutes[minutes.len() - DRIFT_MINUTES..],
    );
    let drifts: Vec<String> = (0..nodes)
        .filter_map(|n| {
            let (a, b) = (mean(first, n)?, mean(last, n)?);
            Some(format!(
                "n{} {a:.1} → {b:.1} MiB ({:+.1} %)",
                n + 1,
                (b - a) / a * 100.0
            ))
        })
        .collect();
    format!(
        " Drift, mean of the last {DRIFT_MINUTES} minutes against the first {DRIFT_MINUTES}: {}.",
        drifts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute_with_rss(rss_mib: Vec<f64>) -> Minute {
        Minute {
            rss_mib,
            ..Minute::default()
        }
    }

    #[test]
    fn drift_compares_the_ends_of_a_run_and_ignores_the_swing_between() {
        // A node that swings up 4 MiB every fifth minute has no drift; one that grows 1 MiB a
        // minute does.
        let minutes: Vec<Minute> = (0..12)
            .map(|i| {
                let swing = if i % 5 == 2 { 4.0 } else { 0.0 };
                // A third node without readings (0: its /proc was gone) is left out.
                minute_with_rss(vec![40.0 + swing, 30.0 + i as f64, 0.0])
            })
            .collect();
        let drift = rss_drift(&minutes, 3);
        assert!(!drift.contains("n3"), "{drift}");
        assert!(drift.contains("n1 40.8 → 40.8 MiB (+0.0 %)"), "{drift}");
        assert!(drift.contains("n2 32.0 → 39.0 MiB (+21.9 %)"), "{drift}");
        assert_eq!(rss_drift(&minutes[..9], 3), "");
    }

    #[test]
    fn a_thread_state_is_read_past_any_command_name() {
        assert_eq!(thread_state("42 (tokio-rt-worker) D 1 2 3"), Some('D'));
        assert_eq!(thread_state("42 (a) D (b) S 1 2 3"), Some('S'));
        assert_eq!(thread_state("42 (no end"), None);
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(context_switches(status), Some(15));
        assert_eq!(context_switches("Name:\tx\n"), None);
    }
}
