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
//! ## Replay
//! The seed is printed first; `CHAOS_SEED=<seed>` replays the same fault plan (and the same
//! per-worker random choices; the interleaving with real processes is not reproducible).

use std::collections::{BTreeMap, HashMap};
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
    pub lin_workers: usize,
    /// Largest absolute clock offset given to a skewed node.
    pub max_skew_ms: i64,
    /// `--snapshot-logs` of every node: small, so restarts and lagging nodes go through
    /// snapshots (build, compaction, install) many times per run.
    pub snapshot_logs: u64,
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
            lin_workers: 3,
            max_skew_ms: 60_000,
            snapshot_logs: env("CHAOS_SNAPSHOT_LOGS").unwrap_or(500),
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

/// An acknowledged project-lock lease, with its conservative holding interval.
#[derive(Debug, Clone)]
pub struct Hold4 {
    pub key: String,
    pub worker: usize,
    pub fencing: u64,
    pub invoked: i64,
    pub acked: i64,
    pub end: i64,
}

/// A write to the protected resource.
#[derive(Debug, Clone)]
pub struct Write {
    pub key: String,
    pub fencing: u64,
    pub worker: usize,
    pub at: i64,
    pub accepted: bool,
    /// Made inside the writer's conservative holding interval.
    pub within_hold: bool,
}

/// An acknowledged hierarchical hold.
#[derive(Debug, Clone)]
pub struct Hold5 {
    pub path: String,
    pub lease: String,
    pub exclusive: bool,
    pub acked: i64,
    pub end: i64,
}

/// The protected resource: accepts a write unless its fencing token is lower than the
/// highest it has seen for the key; records every accepted write.
#[derive(Default)]
pub struct Resource {
    highest: HashMap<String, u64>,
    pub accepted: Vec<(String, u64)>,
    pub rejected: u64,
}

impl Resource {
    pub fn write(&mut self, key: &str, fencing: u64) -> bool {
        let h = self.highest.entry(key.to_string()).or_insert(0);
        if fencing < *h {
            self.rejected += 1;
            return false;
        }
        *h = fencing;
        self.accepted.push((key.to_string(), fencing));
        true
    }
}

fn overlap(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

/// No two acknowledged project-lock holders of one key with overlapping intervals.
pub fn check_mutual_exclusion(holds: &[Hold4]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Hold4>> = BTreeMap::new();
    for h in holds {
        by_key.entry(&h.key).or_default().push(h);
    }
    for (key, mut hs) in by_key {
        hs.sort_by_key(|h| h.acked);
        let mut active: Vec<&Hold4> = Vec::new();
        for h in hs {
            active.retain(|a| a.end > h.acked);
            for a in &active {
                if overlap((a.acked, a.end), (h.acked, h.end)) {
                    out.push(format!(
                        "mutual exclusion on {key}: fencing {} (worker {}, {}..{} us) overlaps fencing {} (worker {}, {}..{} us)",
                        a.fencing, a.worker, a.acked, a.end, h.fencing, h.worker, h.acked, h.end
                    ));
                }
            }
            if h.end > h.acked {
                active.push(h);
            }
        }
    }
    out
}

/// Per key, every new lease has its own fencing token, and a lease acknowledged before
/// another was requested has the lower token.
pub fn check_fencing(holds: &[Hold4]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Hold4>> = BTreeMap::new();
    for h in holds {
        by_key.entry(&h.key).or_default().push(h);
    }
    for (key, hs) in by_key {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for h in &hs {
            if let Some(w) = seen.insert(h.fencing, h.worker) {
                out.push(format!(
                    "fencing token {} on {key} given to two leases (workers {w} and {})",
                    h.fencing, h.worker
                ));
            }
        }
        let mut by_ack = hs.clone();
        by_ack.sort_by_key(|h| h.acked);
        let mut by_inv = hs.clone();
        by_inv.sort_by_key(|h| h.invoked);
        let (mut p, mut max) = (0, None::<&Hold4>);
        for h in by_inv {
            while p < by_ack.len() && by_ack[p].acked < h.invoked {
                if max.is_none_or(|m| by_ack[p].fencing > m.fencing) {
                    max = Some(by_ack[p]);
                }
                p += 1;
            }
            if let Some(m) = max.filter(|m| m.fencing >= h.fencing) {
                out.push(format!(
                    "fencing on {key}: token {} acknowledged at {} us, yet a later acquire (invoked {} us) got {}",
                    m.fencing, m.acked, h.invoked, h.fencing
                ));
            }
        }
    }
    out
}

/// The resource never accepted a lower token after a higher one, and never turned away a
/// writer inside its holding interval (that would need a newer holder during it).
pub fn check_writes(resource: &Resource, writes: &[Write]) -> Vec<String> {
    let mut out = Vec::new();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    for (key, f) in &resource.accepted {
        let h = highest.entry(key).or_insert(0);
        if f < h {
            out.push(format!("resource accepted {f} on {key} after {h}"));
        }
        *h = (*h).max(*f);
    }
    for w in writes.iter().filter(|w| !w.accepted && w.within_hold) {
        out.push(format!(
            "worker {} was fenced off {} with token {} at {} us while its lease was valid",
            w.worker, w.key, w.fencing, w.at
        ));
    }
    out
}

/// `a` and `b` are the same path or one is an ancestor of the other.
pub fn related(a: &str, b: &str) -> bool {
    a == b
        || (b.len() > a.len() && b.starts_with(a) && b.as_bytes()[a.len()] == b'/')
        || (a.len() > b.len() && a.starts_with(b) && a.as_bytes()[b.len()] == b'/')
}

/// No two leases held incompatible locks on related paths at overlapping times.
pub fn check_hierarchy(holds: &[Hold5]) -> Vec<String> {
    let mut out = Vec::new();
    let mut hs: Vec<&Hold5> = holds.iter().collect();
    hs.sort_by_key(|h| h.acked);
    let mut active: Vec<&Hold5> = Vec::new();
    for h in hs {
        active.retain(|a| a.end > h.acked);
        for a in &active {
            if a.lease != h.lease
                && (a.exclusive || h.exclusive)
                && related(&a.path, &h.path)
                && overlap((a.acked, a.end), (h.acked, h.end))
            {
                out.push(format!(
                    "hierarchical exclusion: {} {} ({}, {}..{} us) and {} {} ({}, {}..{} us)",
                    if a.exclusive { "X" } else { "S" },
                    a.path,
                    a.lease,
                    a.acked,
                    a.end,
                    if h.exclusive { "X" } else { "S" },
                    h.path,
                    h.lease,
                    h.acked,
                    h.end
                ));
            }
        }
        if h.end > h.acked {
            active.push(h);
        }
    }
    out
}

/// Operation counters.
#[derive(Default, Debug)]
pub struct Counters {
    pub acquired: AtomicU64,
    pub contended: AtomicU64,
    pub released: AtomicU64,
    pub unknown: AtomicU64,
    pub other: AtomicU64,
    pub hier_acquired: AtomicU64,
    pub hier_contended: AtomicU64,
    pub hier_released: AtomicU64,
    pub hier_leases: AtomicU64,
    pub lin_ops: AtomicU64,
    pub probes: AtomicU64,
}

impl Counters {
    fn total(&self) -> u64 {
        [
            &self.acquired,
            &self.contended,
            &self.released,
            &self.unknown,
            &self.other,
            &self.hier_acquired,
            &self.hier_contended,
            &self.hier_released,
            &self.hier_leases,
            &self.lin_ops,
            &self.probes,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

type LinOp = Operation<LockInput, LockOutput>;

/// Everything the workers share.
struct Shared {
    clock: Clock,
    apis: Vec<Locks>,
    stop: AtomicBool,
    skew_us: i64,
    holds4: Mutex<Vec<Hold4>>,
    writes: Mutex<Vec<Write>>,
    holds5: Mutex<Vec<Hold5>>,
    resource: Mutex<Resource>,
    counters: Counters,
    successes: Mutex<Vec<i64>>,
    violations: Mutex<Vec<String>>,
    lin_gate: tokio::sync::RwLock<()>,
    lin_ops: Mutex<Vec<LinOp>>,
    lin_tokens: AtomicU32,
}

/// A call's outcome: a definite answer, or unknown (transport error, timeout, 5xx).
fn definite(r: Result<Answer>) -> Option<Answer> {
    r.ok().filter(|a| a.status < 500)
}

fn rfc3339_ns(v: &Value) -> Option<i128> {
    crate::rfc3339_ns(v.as_str()?)
}

impl Shared {
    fn api(&self, rng: &mut StdRng) -> &Locks {
        &self.apis[rng.gen_range(0..self.apis.len())]
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn success(&self) {
        let now = self.clock.now();
        self.successes.lock().unwrap().push(now);
    }
    fn violation(&self, v: String) {
        eprintln!("VIOLATION: {v}");
        self.violations.lock().unwrap().push(v);
    }

    /// Releases `key` for `tok` until a definite answer (or `give_up`); returns when the
    /// first attempt was sent and whether the release was acknowledged with 204.
    async fn release4(&self, rng: &mut StdRng, key: &str, tok: &str) -> (i64, bool) {
        let first = self.clock.now();
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(a) = definite(self.api(rng).release(key, tok).await) {
                bump(&self.counters.released);
                self.success();
                return (first, a.status == 204);
            }
            bump(&self.counters.unknown);
            if Instant::now() > give_up {
                return (first, false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn release5(&self, rng: &mut StdRng, path: &str, lease: &str) -> i64 {
        let first = self.clock.now();
        let give_up = Instant::now() + Duration::from_secs(60);
        let body = json!({ "namespace_name": NAMESPACE, "lock_name": path, "lease_id": lease });
        loop {
            if definite(self.api(rng).rpc("ReleaseLock", body.clone()).await).is_some() {
                bump(&self.counters.hier_released);
                self.success();
                return first;
            }
            bump(&self.counters.unknown);
            if Instant::now() > give_up {
                return first;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// project-lock load: acquire → write with the fencing token → release.
async fn project_worker(sh: Arc<Shared>, worker: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !sh.stopped() {
        let key = *PROJECT_KEYS.choose(&mut rng).unwrap();
        let tok = token();
        let ttl = rng.gen_range(5..=10);
        let invoked = sh.clock.now();
        let r = sh.api(&mut rng).acquire(key, &tok, ttl).await;
        let acked = sh.clock.now();
        match definite(r) {
            Some(a) if a.status == 200 => {
                bump(&sh.counters.acquired);
                sh.success();
                let fencing = a.fencing();
                let Some(exp) = rfc3339_ns(&a.body["expires_at"]) else {
                    sh.violation(format!("acquire answer without expires_at: {:?}", a.body));
                    continue;
                };
                // Takeover needs t ≥ expires_at + 1 s on the state machine's clock.
                let mut hold = Hold4 {
                    key: key.to_string(),
                    worker,
                    fencing,
                    invoked,
                    acked,
                    end: sh.clock.server_time(exp) + 1_000_000 - sh.skew_us,
                };
                let at = sh.clock.now();
                let accepted = sh.resource.lock().unwrap().write(key, fencing);
                sh.writes.lock().unwrap().push(Write {
                    key: key.to_string(),
                    fencing,
                    worker,
                    at,
                    accepted,
                    within_hold: at < hold.end,
                });
                let work = rng.gen_range(0..30);
                tokio::time::sleep(Duration::from_millis(work)).await;
                let (sent, _) = sh.release4(&mut rng, key, &tok).await;
                hold.end = hold.end.min(sent);
                sh.holds4.lock().unwrap().push(hold);
            }
            Some(a) if a.status == 409 => {
                bump(&sh.counters.contended);
                sh.success();
            }
            Some(_) => bump(&sh.counters.other),
            None => {
                bump(&sh.counters.unknown);
                // It may have taken effect: give it back so the key does not stay taken.
                sh.release4(&mut rng, key, &tok).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// hierarchical load: leases and shared/exclusive locks on related paths.
async fn hier_worker(sh: Arc<Shared>, worker: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lease: Option<(String, i64)> = None;
    while !sh.stopped() {
        let now = sh.clock.now();
        let (lease_id, lease_end) = match &lease {
            Some((id, end)) if end - now > 8_000_000 => (id.clone(), *end),
            _ => {
                let body = json!({ "namespace_name": NAMESPACE, "process_id": format!("w{worker}"), "ttl_seconds": 20 });
                match definite(sh.api(&mut rng).rpc("CreateLockLease", body).await) {
                    Some(a) if a.status == 200 => {
                        bump(&sh.counters.hier_leases);
                        sh.success();
                        let id = a.body["lease"]["lease_id"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        let exp = a.body["lease"]["expires_at"].as_i64().unwrap_or(0);
                        let end = sh.clock.server_time(exp as i128) - sh.skew_us;
                        lease = Some((id, end));
                    }
                    _ => {
                        bump(&sh.counters.unknown);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                continue;
            }
        };
        let path = *PATHS.choose(&mut rng).unwrap();
        let exclusive = rng.gen_bool(0.6);
        let timeout = *[0, 0, 1].choose(&mut rng).unwrap();
        let body = json!({ "namespace_name": NAMESPACE, "lock_name": path, "exclusive": exclusive, "lease_id": lease_id, "timeout_seconds": timeout });
        let r = sh.api(&mut rng).rpc("AcquireLock", body).await;
        let acked = sh.clock.now();
        match definite(r) {
            Some(a) if a.status == 200 && a.body["outcome"] == "ACQUIRE_OUTCOME_ACQUIRED" => {
                bump(&sh.counters.hier_acquired);
                sh.success();
                let work = rng.gen_range(0..30);
                tokio::time::sleep(Duration::from_millis(work)).await;
                let sent = sh.release5(&mut rng, path, &lease_id).await;
                sh.holds5.lock().unwrap().push(Hold5 {
                    path: path.to_string(),
                    lease: lease_id,
                    exclusive,
                    acked,
                    end: lease_end.min(sent),
                });
            }
            Some(a) if a.status == 200 => {
                bump(&sh.counters.hier_contended);
                sh.success();
            }
            Some(a) if a.status == 404 => {
                // The lease expired (e.g. the run stalled); take a new one.
                bump(&sh.counters.other);
                lease = None;
            }
            Some(_) => bump(&sh.counters.other),
            None => {
                bump(&sh.counters.unknown);
                sh.release5(&mut rng, path, &lease_id).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One recorded call on the linearizability key.
async fn lin_call(
    sh: &Shared,
    rng: &mut StdRng,
    client: usize,
    input: LockInput,
    tok: &str,
) -> Option<LockOutput> {
    let api = sh.api(rng).clone();
    let invoked = sh.clock.now() as u64;
    let r = match input {
        LockInput::Acquire(_) => api.acquire(LIN_KEY, tok, 300).await,
        LockInput::Release(_) => api.release(LIN_KEY, tok).await,
        LockInput::Read => api.read(LIN_KEY).await,
        LockInput::ForceRelease => api.force_release(LIN_KEY).await,
    };
    let returned = sh.clock.now() as u64;
    bump(&sh.counters.lin_ops);
    let output = definite(r).and_then(|a| match (input, a.status, a.code()) {
        (LockInput::Acquire(_), 200, _) => Some(LockOutput::Acquired(a.fencing())),
        (LockInput::Acquire(_), 409, "lock_held") => Some(LockOutput::Held),
        (_, 409, "lock_ownership_lost") => Some(LockOutput::OwnershipLost),
        (LockInput::Release(_) | LockInput::ForceRelease, 204, _) => Some(LockOutput::Released),
        (LockInput::Read, 200, _) if a.body["held"] == true => {
            Some(LockOutput::HeldBy(a.body["fencing_token"].as_u64()?))
        }
        (LockInput::Read, 200, _) => Some(LockOutput::Free),
        // 429 and other 4xx change nothing: leave them out of the history.
        _ => None,
    });
    let definite_ok = output.is_some();
    if definite_ok {
        sh.success();
    }
    sh.lin_ops.lock().unwrap().push(Operation {
        client,
        invoked,
        returned: output.map(|_| returned),
        input,
        output,
    });
    output
}

/// Linearizability load on [`LIN_KEY`]: acquire (fresh token) → read → release.
async fn lin_worker(sh: Arc<Shared>, client: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !sh.stopped() {
        let _cycle = sh.lin_gate.read().await;
        let id = sh.lin_tokens.fetch_add(1, Ordering::Relaxed);
        let tok = token();
        match lin_call(&sh, &mut rng, client, LockInput::Acquire(id), &tok).await {
            Some(LockOutput::Acquired(_)) => {
                if rng.gen_bool(0.5) {
                    lin_call(&sh, &mut rng, client, LockInput::Read, &tok).await;
                }
            }
            Some(_) => {
                lin_call(&sh, &mut rng, client, LockInput::Read, &tok).await;
                continue;
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
        // Release until definite (also after an unknown acquire, which may have happened).
        let give_up = Instant::now() + Duration::from_secs(60);
        while lin_call(&sh, &mut rng, client, LockInput::Release(id), &tok)
            .await
            .is_none()
            && Instant::now() < give_up
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The fault kinds of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    KillLeader,
    KillFollower,
    PauseLeader,
    PauseFollower,
    LeaderIsolated,
    LeaderMinority,
    FollowerMinority,
    OneWayLeaderOut,
    OneWayToLeader,
    SlowLinks,
    NoQuorumKill,
    NoQuorumPartition,
    /// A follower restarted with its wall clock ±0.5–60 s off.
    SkewedNode,
    /// The leader's wall clock stepped ±0.5–60 s while it leads.
    ClockStep,
}

const KINDS: &[Kind] = &[
    Kind::KillLeader,
    Kind::KillFollower,
    Kind::PauseLeader,
    Kind::PauseFollower,
    Kind::LeaderIsolated,
    Kind::LeaderMinority,
    Kind::FollowerMinority,
    Kind::OneWayLeaderOut,
    Kind::OneWayToLeader,
    Kind::SlowLinks,
    Kind::NoQuorumKill,
    Kind::NoQuorumPartition,
    Kind::SkewedNode,
    Kind::ClockStep,
];

/// A durability probe: acknowledged, then checked after every later heal.
#[derive(Debug, Clone)]
enum Probe {
    /// project-lock key held with this fencing token until `valid_until` (client clock, conservative).
    Held {
        key: String,
        fencing: u64,
        valid_until: i64,
    },
    /// project-lock key acquired and released (204); must read free.
    Released { key: String },
    /// hierarchical exclusive lock held by `lease` until `valid_until`.
    HierHeld {
        path: String,
        lease: String,
        valid_until: i64,
    },
}

/// What the run found.
#[derive(Debug, Default)]
pub struct Summary {
    pub seed: u64,
    pub nodes: u64,
    pub elapsed: Duration,
    pub faults: BTreeMap<String, usize>,
    pub leader_kills: usize,
    /// Nodes with a skewed or stepped clock that were leader when the fault ended.
    pub skewed_leaders: usize,
    pub operations: u64,
    pub detail: String,
    pub violations: Vec<String>,
    pub worst_recovery: (Duration, String),
    pub worst_gap: (Duration, String),
    pub worst_failover: Duration,
    /// Per fault kind: the worst of each unavailability measure (issue 13).
    pub per_kind: BTreeMap<String, KindUnavailability>,
    pub no_quorum_calls: usize,
    pub slowest_503: Duration,
    pub lin_epochs: usize,
    pub lin_checked_ops: usize,
    pub lin_inconclusive: usize,
    pub probes_checked: usize,
    pub proxy: String,
}

/// The worst unavailability one kind of fault caused.
#[derive(Debug, Default, Clone, Copy)]
pub struct KindUnavailability {
    /// Longest gap without a successful operation that ended after such a fault began
    /// (gaps overlapping a no-quorum fault excluded).
    pub gap: Duration,
    /// Heal → every node served a write.
    pub recovery: Duration,
    /// Leader lost → another node names a new leader.
    pub failover: Duration,
}

impl Summary {
    fn kind_mut(&mut self, kind: Kind) -> &mut KindUnavailability {
        self.per_kind.entry(format!("{kind:?}")).or_default()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "=== chaos summary: seed {} (replay: CHAOS_SEED={}), {} nodes, {:.0?} ===",
            self.seed, self.seed, self.nodes, self.elapsed
        )?;
        let total: usize = self.faults.values().sum();
        writeln!(
            f,
            "faults injected: {total} (leader kills: {}; skewed nodes leading at the end of a clock fault: {})",
            self.leader_kills, self.skewed_leaders
        )?;
        for (k, n) in &self.faults {
            writeln!(f, "  {k:<18} {n}")?;
        }
        writeln!(f, "operations: {} ({})", self.operations, self.detail)?;
        writeln!(
            f,
            "linearizability: {} epochs, {} operations checked, {} inconclusive",
            self.lin_epochs, self.lin_checked_ops, self.lin_inconclusive
        )?;
        writeln!(f, "durability probe checks: {}", self.probes_checked)?;
        writeln!(
            f,
            "without quorum: {} calls answered 503, slowest {:.2?} (bound {:?})",
            self.no_quorum_calls, self.slowest_503, NO_QUORUM_BOUND
        )?;
        writeln!(f, "worst unavailability: heal→every node serving {:.2?} ({}); longest gap without a successful operation outside no-quorum faults {:.2?} ({}); slowest leader failover {:.2?}",
            self.worst_recovery.0, self.worst_recovery.1, self.worst_gap.0, self.worst_gap.1, self.worst_failover)?;
        writeln!(
            f,
            "  {:<18} {:>9} {:>9} {:>9}",
            "per fault kind", "gap", "heal→all", "failover"
        )?;
        let ms = |d: Duration| {
            if d.is_zero() {
                "-".to_string()
            } else {
                format!("{:.2}s", d.as_secs_f64())
            }
        };
        for (k, u) in &self.per_kind {
            writeln!(
                f,
                "  {k:<18} {:>9} {:>9} {:>9}",
                ms(u.gap),
                ms(u.recovery),
                ms(u.failover)
            )?;
        }
        writeln!(f, "proxy: {}", self.proxy)?;
        writeln!(f, "violations: {}", self.violations.len())?;
        for v in self.violations.iter().take(30) {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}

/// The driver's own state.
struct Driver {
    cluster: Cluster,
    sh: Arc<Shared>,
    rng: StdRng,
    cfg: ChaosConfig,
    summary: Summary,
    probes: Vec<Probe>,
    lin_last_fencing: u64,
    /// (kind, start us, end us) of each fault window.
    windows: Vec<(Kind, i64, i64)>,
    /// Each node's wall-clock skew (libfaketime), 0 outside clock faults.
    skews: BTreeMap<u64, Skew>,
    /// Holds the skew files.
    _skew_dir: tempfile::TempDir,
}

fn name(kind: Kind) -> String {
    format!("{kind:?}")
}

impl Driver {
    /// A clock error of 0.5 s up to `max_skew_ms`, either way.
    fn clock_offset(&mut self) -> i64 {
        let mag = self.rng.gen_range(500..=self.cfg.max_skew_ms);
        if self.rng.gen_bool(0.5) {
            mag
        } else {
            -mag
        }
    }

    fn ids(&self) -> Vec<u64> {
        self.cluster.ids()
    }

    async fn leader(&mut self) -> Option<u64> {
        match self.cluster.wait_for_leader(Duration::from_secs(20)).await {
            Ok(l) => Some(l),
            Err(e) => {
                self.sh
                    .violation(format!("no agreed leader before a fault: {e}"));
                None
            }
        }
    }

    fn follower(&mut self, leader: u64) -> u64 {
        let others: Vec<u64> = self.ids().into_iter().filter(|i| *i != leader).collect();
        *others.choose(&mut self.rng).unwrap()
    }

    fn rule(&mut self) -> Rule {
        *[Rule::Drop, Rule::Blackhole, Rule::Refuse503]
            .choose(&mut self.rng)
            .unwrap()
    }

    fn hold_ms(&mut self) -> u64 {
        self.rng.gen_range(1200..3500)
    }

    fn proxy(&self) -> &crate::proxy::FaultProxy {
        self.cluster.proxy().expect("started behind the proxy")
    }

    /// Waits until some running node other than `old` reports a leader other than `old`.
    async fn time_failover(&mut self, old: u64, since: Instant, kind: Kind) {
        let c = &self.cluster;
        let r = eventually(Duration::from_secs(20), "a new leader", || async {
            for id in c
                .ids()
                .into_iter()
                .filter(|i| *i != old && c.is_running(*i))
            {
                let l = c.view(id).await?.get("leader")?.as_u64()?;
                if l != old {
                    return Some(());
                }
            }
            None
        })
        .await;
        match r {
            Ok(()) => {
                let took = since.elapsed();
                self.summary.worst_failover = self.summary.worst_failover.max(took);
                let per_kind = self.summary.kind_mut(kind);
                per_kind.failover = per_kind.failover.max(took);
            }
            Err(e) => self
                .sh
                .violation(format!("failover after losing leader {old}: {e}")),
        }
    }

    /// Every call on every running node in `nodes` answers 503 within the bound. All calls
    /// run at once, each timed on its own.
    async fn check_no_quorum(&mut self, nodes: &[u64]) {
        const CALLS: &[&str] = &[
            "acquire",
            "read",
            "renew",
            "release",
            "force release",
            "AcquireLock",
            "GetLock",
            "CreateLockLease",
        ];
        let mut calls = Vec::new();
        for &id in nodes {
            for &what in CALLS {
                let api = self.sh.apis[(id - 1) as usize].clone();
                calls.push(tokio::spawn(async move {
                    let t = token();
                    let lock = json!({ "namespace_name": NAMESPACE, "lock_name": "a", "lease_id": "ls_0000000000000000000000000000", "exclusive": true, "timeout_seconds": 0 });
                    let started = Instant::now();
                    let r = match what {
                        "acquire" => api.acquire("nq", &t, 10).await,
                        "read" => api.read("k0").await,
                        "renew" => api.renew("nq", &t, 10).await,
                        "release" => api.release("nq", &t).await,
                        "force release" => api.force_release("nq").await,
                        "AcquireLock" => api.rpc("AcquireLock", lock).await,
                        "GetLock" => {
                            let name = json!({ "namespace_name": NAMESPACE, "lock_name": "a" });
                            api.rpc("GetLock", name).await
                        }
                        _ => {
                            let lease = json!({ "namespace_name": NAMESPACE, "process_id": "nq", "ttl_seconds": 10 });
                            api.rpc("CreateLockLease", lease).await
                        }
                    };
                    (id, what, started.elapsed(), r)
                }));
            }
        }
        for c in calls {
            let Ok((id, what, took, r)) = c.await else {
                continue;
            };
            self.summary.no_quorum_calls += 1;
            self.summary.slowest_503 = self.summary.slowest_503.max(took);
            let code = if what.starts_with(char::is_uppercase) {
                "unavailable"
            } else {
                "lock_service_unavailable"
            };
            match r {
                Ok(a) if a.status == 503 && a.code() == code && took <= NO_QUORUM_BOUND => {}
                Ok(a) => self.sh.violation(format!(
                    "without quorum, {what} on node {id} answered {} {:?} after {took:?}",
                    a.status, a.body
                )),
                Err(e) => self.sh.violation(format!(
                    "without quorum, {what} on node {id} failed after {took:?}: {e}"
                )),
            }
        }
    }

    /// Acknowledged writes made during a fault, to be checked after every heal.
    async fn probe(sh: Arc<Shared>, cycle: usize, until: Instant, seed: u64) -> Vec<Probe> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut out = Vec::new();
        let held = format!("dur-{cycle}-h");
        let t = token();
        while Instant::now() < until {
            bump(&sh.counters.probes);
            if let Some(a) = definite(sh.api(&mut rng).acquire(&held, &t, 120).await) {
                if a.status == 200 {
                    let exp = rfc3339_ns(&a.body["expires_at"]).unwrap_or(0);
                    out.push(Probe::Held {
                        key: held.clone(),
                        fencing: a.fencing(),
                        valid_until: sh.clock.server_time(exp) - sh.skew_us - 2_000_000,
                    });
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Only a release whose acquire had no unknown attempt: a late-applied attempt could
        // legitimately re-take the key afterwards.
        let rel = format!("dur-{cycle}-r");
        let t = token();
        bump(&sh.counters.probes);
        if let Some(a) = definite(sh.api(&mut rng).acquire(&rel, &t, 120).await) {
            if a.status == 200 {
                bump(&sh.counters.probes);
                if let Some(r) = definite(sh.api(&mut rng).release(&rel, &t).await) {
                    if r.status == 204 {
                        out.push(Probe::Released { key: rel });
                    }
                }
            }
        }
        let body =
            json!({ "namespace_name": NAMESPACE, "process_id": "probe", "ttl_seconds": 120 });
        bump(&sh.counters.probes);
        if let Some(a) = definite(sh.api(&mut rng).rpc("CreateLockLease", body).await) {
            let lease = a.body["lease"]["lease_id"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let exp = a.body["lease"]["expires_at"].as_i64().unwrap_or(0);
            let path = format!("dur/{cycle}");
            bump(&sh.counters.probes);
            let body = json!({ "namespace_name": NAMESPACE, "lock_name": path, "lease_id": lease, "exclusive": true, "timeout_seconds": 0 });
            if let Some(a) = definite(sh.api(&mut rng).rpc("AcquireLock", body).await) {
                if a.body["outcome"] == "ACQUIRE_OUTCOME_ACQUIRED" {
                    out.push(Probe::HierHeld {
                        path,
                        lease,
                        valid_until: sh.clock.server_time(exp as i128) - sh.skew_us - 2_000_000,
                    });
                }
            }
        }
        out
    }

    /// Reads until a definite answer (or the liveness bound).
    async fn read_definite(
        &mut self,
        f: impl Fn(Locks) -> futures::future::BoxFuture<'static, Result<Answer>>,
    ) -> Option<Answer> {
        let deadline = Instant::now() + LIVENESS_BOUND;
        while Instant::now() < deadline {
            let api = self.sh.api(&mut self.rng).clone();
            bump(&self.sh.counters.probes);
            if let Some(a) = definite(f(api).await) {
                return Some(a);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// Checks the durability probes: the last few, a random sample of older ones, or all.
    async fn check_probes(&mut self, all: bool) {
        let n = self.probes.len();
        let mut pick: Vec<usize> = if all {
            (0..n).collect()
        } else {
            (n.saturating_sub(6)..n).collect()
        };
        if !all && n > 6 {
            for _ in 0..3 {
                pick.push(self.rng.gen_range(0..n - 6));
            }
        }
        for i in pick {
            let probe = self.probes[i].clone();
            let now = self.sh.clock.now();
            match probe {
                Probe::Held {
                    key,
                    fencing,
                    valid_until,
                } if now < valid_until => {
                    let k = key.clone();
                    let a = self
                        .read_definite(move |api| {
                            let k = k.clone();
                            Box::pin(async move { api.read(&k).await })
                        })
                        .await;
                    self.summary.probes_checked += 1;
                    match a {
                        Some(a)
                            if a.body["held"] == true
                                && a.body["fencing_token"].as_u64() == Some(fencing) => {}
                        Some(a) if self.sh.clock.now() >= valid_until => {
                            let _ = a;
                        }
                        Some(a) => {
                            let diag = self.time_diag().await;
                            self.sh.violation(format!(
                                "durability: {key} acknowledged with fencing {fencing}, now reads {:?} ({:.1}s before its valid_until; {diag})",
                                a.body,
                                (valid_until - now) as f64 / 1e6
                            ))
                        }
                        None => self.sh.violation(format!(
                            "liveness: no definite read of {key} within {LIVENESS_BOUND:?}"
                        )),
                    }
                }
                Probe::Released { key } => {
                    let k = key.clone();
                    let a = self
                        .read_definite(move |api| {
                            let k = k.clone();
                            Box::pin(async move { api.read(&k).await })
                        })
                        .await;
                    self.summary.probes_checked += 1;
                    match a {
                        Some(a) if a.body == json!({ "held": false }) => {}
                        Some(a) => self.sh.violation(format!(
                            "durability: acknowledged release of {key} undone: {:?}",
                            a.body
                        )),
                        None => self.sh.violation(format!(
                            "liveness: no definite read of {key} within {LIVENESS_BOUND:?}"
                        )),
                    }
                }
                Probe::HierHeld {
                    path,
                    lease,
                    valid_until,
                } if now < valid_until => {
                    let body = json!({ "namespace_name": NAMESPACE, "lock_name": path });
                    let a = self
                        .read_definite(move |api| {
                            let b = body.clone();
                            Box::pin(async move { api.rpc("GetLock", b).await })
                        })
                        .await;
                    self.summary.probes_checked += 1;
                    match a {
                        Some(a)
                            if a.body["lock"]["lock_holders"].as_array().is_some_and(|hs| {
                                hs.iter().any(|h| h["lease_id"] == lease.as_str())
                            }) => {}
                        Some(_) if self.sh.clock.now() >= valid_until => {}
                        Some(a) => self.sh.violation(format!(
                            "durability: hierarchical lock {path} acknowledged for {lease}, now {:?}",
                            a.body
                        )),
                        None => self.sh.violation(format!(
                            "liveness: no definite GetLock of {path} within {LIVENESS_BOUND:?}"
                        )),
                    }
                }
                _ => {}
            }
        }
    }

    /// For a violation report: how far cluster time (a fresh 120 s lease's `expires_at`
    /// minus 120 s) is from the true clock now, so a time jump tells itself from a lost write.
    async fn time_diag(&self) -> String {
        let api = self.sh.apis[0].clone();
        let t = token();
        let now = self.sh.clock.now();
        match api.acquire("diag-time", &t, 120).await {
            Ok(a) if a.status == 200 => {
                let _ = api.release("diag-time", &t).await;
                let exp = rfc3339_ns(&a.body["expires_at"]).unwrap_or(0);
                let ahead = self.sh.clock.server_time(exp) - 120_000_000 - now;
                format!("cluster time − true time ≈ {:.1}s", ahead as f64 / 1e6)
            }
            other => format!("time diagnostic failed: {other:?}"),
        }
    }

    /// After a heal: time until every node has served a write again.
    async fn measure_recovery(&mut self, healed: Instant, cycle: usize, kind: Kind) {
        for id in self.ids() {
            let api = self.sh.apis[(id - 1) as usize].clone();
            let key = format!("live-{cycle}-{id}");
            let r = eventually(LIVENESS_BOUND, "a write served after the heal", || async {
                let t = token();
                let a = api.acquire(&key, &t, 5).await.ok()?;
                if a.status != 200 {
                    return None;
                }
                let _ = api.release(&key, &t).await;
                Some(())
            })
            .await;
            if let Err(e) = r {
                self.sh.violation(format!(
                    "liveness after {kind:?} (cycle {cycle}): node {id}: {e}"
                ));
            }
        }
        let took = healed.elapsed();
        let per_kind = self.summary.kind_mut(kind);
        per_kind.recovery = per_kind.recovery.max(took);
        if took > self.summary.worst_recovery.0 {
            self.summary.worst_recovery = (took, format!("after {kind:?}, cycle {cycle}"));
        }
    }

    /// Quiesces the linearizability workers, pins the key's state with definite calls,
    /// checks the epoch's history and starts a new epoch.
    async fn lin_epoch(&mut self) {
        let sh = self.sh.clone();
        let _quiet = sh.lin_gate.write().await;
        let mut rng = StdRng::seed_from_u64(self.rng.gen());
        let boundary = 1000;
        let mut pinned = false;
        for _ in 0..50 {
            match lin_call(&sh, &mut rng, boundary, LockInput::Read, "").await {
                Some(LockOutput::Free) => {
                    pinned = true;
                    break;
                }
                Some(LockOutput::HeldBy(_)) => {
                    lin_call(&sh, &mut rng, boundary, LockInput::ForceRelease, "").await;
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        if !pinned {
            // Keep accumulating: the next epoch cannot start from a known state.
            return;
        }
        let ops = std::mem::take(&mut *sh.lin_ops.lock().unwrap());
        let max_seen = ops
            .iter()
            .filter_map(|o| match o.output {
                Some(LockOutput::Acquired(f) | LockOutput::HeldBy(f)) => Some(f),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let init = LockModel::free(self.lin_last_fencing);
        let n = ops.len();
        let verdict = tokio::task::spawn_blocking(move || {
            let v = linearizability::check(init, &ops, LIN_BUDGET);
            (v, ops)
        })
        .await
        .expect("checker panicked");
        self.summary.lin_epochs += 1;
        self.summary.lin_checked_ops += n;
        match verdict {
            (Verdict::Linearizable, _) => {}
            (Verdict::Inconclusive { steps }, _) => {
                eprintln!("linearizability: epoch of {n} ops inconclusive after {steps} states");
                self.summary.lin_inconclusive += 1;
            }
            (Verdict::NotLinearizable { stuck_at, placed }, ops) => {
                let around: Vec<String> = ops
                    .iter()
                    .filter(|o| {
                        stuck_at < n && o.invoked.abs_diff(ops[stuck_at].invoked) < 3_000_000
                    })
                    .map(|o| format!("{o:?}"))
                    .collect();
                self.sh.violation(format!(
                    "history of {LIN_KEY} not linearizable: {placed} ops placed, stuck at {:?}; nearby: {}",
                    ops.get(stuck_at),
                    around.join("; ")
                ));
            }
        }
        self.lin_last_fencing = self.lin_last_fencing.max(max_seen);
    }

    /// Picks the next fault: every kind once (in seeded order), then weighted at random,
    /// with leader kills forced when behind the required count.
    fn next_kind(&mut self, cycle: usize, started: Instant, first: &[Kind]) -> Kind {
        if cycle < first.len() {
            return first[cycle];
        }
        let elapsed = started.elapsed().as_secs_f64() / self.cfg.duration.as_secs_f64();
        let target = (self.cfg.min_leader_kills as f64 * elapsed.min(1.0) * 1.15) as usize;
        if self.summary.leader_kills
            < target.max(if elapsed >= 1.0 {
                self.cfg.min_leader_kills
            } else {
                0
            })
        {
            return Kind::KillLeader;
        }
        if self.rng.gen_bool(0.35) {
            Kind::KillLeader
        } else {
            *KINDS.choose(&mut self.rng).unwrap()
        }
    }

    /// Injects one fault and heals it. Returns when the heal happened.
    async fn inject(&mut self, kind: Kind, cycle: usize) -> Result<Instant> {
        let Some(leader) = self.leader().await else {
            return Ok(Instant::now());
        };
        let all = self.ids();
        let hold = self.hold_ms();
        let start = self.sh.clock.now();
        let probe = tokio::spawn(Self::probe(
            self.sh.clone(),
            cycle,
            Instant::now() + Duration::from_millis(hold),
            self.rng.gen(),
        ));
        let desc: String;
        match kind {
            Kind::KillLeader | Kind::KillFollower => {
                let victim = if kind == Kind::KillLeader {
                    leader
                } else {
                    self.follower(leader)
                };
                let down = self.rng.gen_range(200..2500);
                desc = format!("kill -9 node {victim} (leader {leader}) for {down} ms");
                self.cluster.kill(victim);
                let killed = Instant::now();
                if victim == leader {
                    self.summary.leader_kills += 1;
                    self.time_failover(leader, killed, kind).await;
                }
                tokio::time::sleep(Duration::from_millis(down).saturating_sub(killed.elapsed()))
                    .await;
                self.cluster.restart(victim)?;
            }
            Kind::PauseLeader | Kind::PauseFollower => {
                let victim = if kind == Kind::PauseLeader {
                    leader
                } else {
                    self.follower(leader)
                };
                desc = format!("SIGSTOP node {victim} (leader {leader}) for {hold} ms");
                self.cluster.pause(victim)?;
                tokio::time::sleep(Duration::from_millis(hold)).await;
                self.cluster.resume(victim)?;
            }
            Kind::LeaderIsolated
            | Kind::LeaderMinority
            | Kind::FollowerMinority
            | Kind::NoQuorumPartition => {
                let rule = self.rule();
                let minority = (all.len() - 1) / 2;
                let mut others: Vec<u64> = all.iter().copied().filter(|i| *i != leader).collect();
                others.shuffle(&mut self.rng);
                if kind == Kind::NoQuorumPartition {
                    for &a in &all {
                        self.proxy().isolate(a, &all, rule);
                    }
                    desc = format!("every node isolated ({rule:?}) for {hold} ms");
                    self.check_no_quorum(&all).await;
                } else {
                    let side: Vec<u64> = match kind {
                        Kind::LeaderIsolated => vec![leader],
                        Kind::LeaderMinority => std::iter::once(leader)
                            .chain(others.iter().copied().take(minority.saturating_sub(1)))
                            .collect(),
                        _ => others.iter().copied().take(minority.max(1)).collect(),
                    };
                    let rest: Vec<u64> =
                        all.iter().copied().filter(|i| !side.contains(i)).collect();
                    desc = format!(
                        "partition {side:?} | {rest:?} ({rule:?}, leader {leader}) for {hold} ms"
                    );
                    self.proxy().partition(&side, &rest, rule);
                    if side.contains(&leader) {
                        self.time_failover(leader, Instant::now(), kind).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(hold)).await;
                self.proxy().heal();
            }
            Kind::OneWayLeaderOut => {
                let rule = self.rule();
                desc = format!("one-way: leader {leader} cannot send ({rule:?}) for {hold} ms");
                self.proxy().one_way(&[leader], &all, rule);
                tokio::time::sleep(Duration::from_millis(hold)).await;
                self.proxy().heal();
            }
            Kind::OneWayToLeader => {
                let f = self.follower(leader);
                let rule = self.rule();
                desc = format!(
                    "one-way: node {f} cannot send to leader {leader} ({rule:?}) for {hold} ms"
                );
                self.proxy().one_way(&[f], &[leader], rule);
                tokio::time::sleep(Duration::from_millis(hold)).await;
                self.proxy().heal();
            }
            Kind::SlowLinks => {
                let delay = self.rng.gen_range(20..250);
                for &a in &all {
                    for &b in &all {
                        if a != b {
                            let d = self.rng.gen_range(delay / 2..=delay);
                            self.proxy().set(a, b, Rule::Delay(d));
                        }
                    }
                }
                desc = format!("every link delayed up to {delay} ms for {hold} ms");
                tokio::time::sleep(Duration::from_millis(hold)).await;
                self.proxy().heal();
            }
            Kind::NoQuorumKill => {
                let mut order = all.clone();
                order.shuffle(&mut self.rng);
                let majority = all.len() / 2 + 1;
                let (dead, alive) = order.split_at(majority);
                desc = format!("kill -9 {dead:?} (leader {leader}), no quorum for {hold} ms");
                for &d in dead {
                    self.cluster.kill(d);
                }
                if dead.contains(&leader) {
                    self.summary.leader_kills += 1;
                }
                let t = Instant::now();
                self.check_no_quorum(alive).await;
                tokio::time::sleep(Duration::from_millis(hold).saturating_sub(t.elapsed())).await;
                for &d in dead {
                    self.cluster.restart(d)?;
                }
            }
            Kind::SkewedNode => {
                let s = self.follower(leader);
                let offset = self.clock_offset();
                self.skews[&s].set(offset)?;
                self.cluster.kill(s);
                self.cluster.restart(s)?;
                tokio::time::sleep(Duration::from_millis(hold)).await;
                let now = self
                    .cluster
                    .wait_for_leader(Duration::from_secs(20))
                    .await
                    .ok();
                if now == Some(s) {
                    self.summary.skewed_leaders += 1;
                }
                desc = format!("node {s} restarted with its clock {offset} ms off, for {hold} ms (leader at the end: {now:?})");
                // Back to a true clock, with a restart like an operator fixing NTP would do.
                self.skews[&s].set(0)?;
                self.cluster.kill(s);
                self.cluster.restart(s)?;
            }
            Kind::ClockStep => {
                let offset = self.clock_offset();
                self.skews[&leader].set(offset)?;
                tokio::time::sleep(Duration::from_millis(hold)).await;
                let now = self
                    .cluster
                    .wait_for_leader(Duration::from_secs(20))
                    .await
                    .ok();
                if now == Some(leader) {
                    self.summary.skewed_leaders += 1;
                }
                desc = format!("leader {leader}'s clock stepped {offset} ms for {hold} ms (leader at the end: {now:?})");
                self.skews[&leader].set(0)?;
            }
        }
        let healed = Instant::now();
        let end = self.sh.clock.now();
        self.windows.push((kind, start, end));
        *self.summary.faults.entry(name(kind)).or_default() += 1;
        println!(
            "[{:>7.1}s] cycle {cycle}: {kind:?}: {desc}",
            start as f64 / 1e6
        );
        if let Ok(Ok(p)) = tokio::time::timeout(Duration::from_secs(30), probe).await {
            self.probes.extend(p);
        }
        Ok(healed)
    }
}

/// Runs the suite and returns its summary (violations inside).
pub async fn run(cfg: ChaosConfig) -> Result<Summary> {
    println!(
        "chaos: seed {} (replay with CHAOS_SEED={}), {:?}, {} nodes, ≥{} leader kills",
        cfg.seed, cfg.seed, cfg.duration, cfg.nodes, cfg.min_leader_kills
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
    let sh = Arc::new(Shared {
        clock: Clock::new(),
        apis,
        stop: AtomicBool::new(false),
        skew_us: 0,
        holds4: Mutex::default(),
        writes: Mutex::default(),
        holds5: Mutex::default(),
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
    let writes = sh.writes.lock().unwrap().clone();
    let mut found = check_mutual_exclusion(&holds4);
    found.extend(check_fencing(&holds4));
    found.extend(check_writes(&sh.resource.lock().unwrap(), &writes));
    found.extend(check_hierarchy(&holds5));
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
        "project-lock acquired {} / held {} / released {}; hierarchical acquired {} / contended {} / released {} / leases {}; linearizability-key calls {}; probes {}; unknown outcome {}; other 4xx {}; resource writes accepted {} rejected {}; holds checked project-lock {} hierarchical {}",
        ld(&c.acquired), ld(&c.contended), ld(&c.released), ld(&c.hier_acquired), ld(&c.hier_contended), ld(&c.hier_released), ld(&c.hier_leases), ld(&c.lin_ops), ld(&c.probes), ld(&c.unknown), ld(&c.other), res.accepted.len(), res.rejected, holds4.len(), holds5.len()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn h4(key: &str, fencing: u64, invoked: i64, acked: i64, end: i64) -> Hold4 {
        Hold4 {
            key: key.into(),
            worker: fencing as usize,
            fencing,
            invoked,
            acked,
            end,
        }
    }

    #[test]
    fn overlapping_holders_of_one_key_are_violations() {
        let ok = [
            h4("k", 1, 0, 10, 20),
            h4("k", 2, 15, 20, 30),
            h4("j", 3, 0, 12, 25),
        ];
        assert!(check_mutual_exclusion(&ok).is_empty());
        let bad = [h4("k", 1, 0, 10, 20), h4("k", 2, 15, 19, 30)];
        assert_eq!(check_mutual_exclusion(&bad).len(), 1);
        // An interval emptied by the skew allowance never counts.
        let empty = [h4("k", 1, 0, 10, 5), h4("k", 2, 0, 6, 30)];
        assert!(check_mutual_exclusion(&empty).is_empty());
    }

    #[test]
    fn fencing_must_follow_real_time_order() {
        let ok = [
            h4("k", 5, 0, 10, 20),
            h4("k", 7, 5, 25, 30),
            h4("k", 6, 12, 22, 24),
        ];
        assert!(check_fencing(&ok).is_empty(), "{:?}", check_fencing(&ok));
        let lower_later = [h4("k", 5, 0, 10, 20), h4("k", 4, 11, 25, 30)];
        assert_eq!(check_fencing(&lower_later).len(), 1);
        let reused = [h4("k", 5, 0, 10, 20), h4("k", 5, 0, 25, 30)];
        assert!(!check_fencing(&reused).is_empty());
        // Concurrent acquisitions may be acknowledged in either order.
        let concurrent = [h4("k", 5, 0, 30, 40), h4("k", 4, 1, 20, 25)];
        assert!(check_fencing(&concurrent).is_empty());
    }

    #[test]
    fn the_resource_fences_off_lower_tokens() {
        let mut r = Resource::default();
        assert!(r.write("k", 5));
        assert!(r.write("k", 5));
        assert!(r.write("k", 9));
        assert!(!r.write("k", 7));
        assert!(r.write("j", 1));
        assert_eq!(r.rejected, 1);
        let fenced_late = Write {
            key: "k".into(),
            fencing: 7,
            worker: 0,
            at: 0,
            accepted: false,
            within_hold: false,
        };
        assert!(check_writes(&r, std::slice::from_ref(&fenced_late)).is_empty());
        let fenced_while_valid = Write {
            within_hold: true,
            ..fenced_late
        };
        assert_eq!(check_writes(&r, &[fenced_while_valid]).len(), 1);
    }

    #[test]
    fn hierarchy_conflicts_need_related_paths_and_an_exclusive_hold() {
        let h = |path: &str, lease: &str, exclusive: bool, acked: i64, end: i64| Hold5 {
            path: path.into(),
            lease: lease.into(),
            exclusive,
            acked,
            end,
        };
        assert!(related("a", "a/b") && related("a/b/c", "a") && related("a", "a"));
        assert!(!related("a", "ab") && !related("a/b", "a/c"));
        let fine = [
            h("a/b", "l1", true, 0, 10),
            h("a/c", "l2", true, 0, 10),
            h("e", "l3", false, 0, 10),
            h("e/f", "l4", false, 0, 10),
            h("a", "l5", true, 10, 20),
            h("a/b", "l1", true, 5, 8),
        ];
        assert!(check_hierarchy(&fine).is_empty());
        assert_eq!(
            check_hierarchy(&[h("a", "l1", true, 0, 10), h("a/b/c", "l2", false, 5, 15)]).len(),
            1
        );
        assert_eq!(
            check_hierarchy(&[h("e/f", "l1", false, 0, 10), h("e", "l2", true, 5, 15)]).len(),
            1
        );
    }
}
