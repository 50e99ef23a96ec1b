//! The fault plan and its driver: each cycle injects one fault, heals it, and checks
//! liveness, the no-quorum bound and the durability probes.

use super::*;

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

pub(super) const KINDS: &[Kind] = &[
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
pub(super) enum Probe {
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
    /// Per fault kind: the worst of each unavailability measure.
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
    pub(super) fn kind_mut(&mut self, kind: Kind) -> &mut KindUnavailability {
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
pub(super) struct Driver {
    pub(super) cluster: Cluster,
    pub(super) sh: Arc<Shared>,
    pub(super) rng: StdRng,
    pub(super) cfg: ChaosConfig,
    pub(super) summary: Summary,
    pub(super) probes: Vec<Probe>,
    pub(super) lin_last_fencing: u64,
    /// (kind, start us, end us) of each fault window.
    pub(super) windows: Vec<(Kind, i64, i64)>,
    /// Each node's wall-clock skew (libfaketime), 0 outside clock faults.
    pub(super) skews: BTreeMap<u64, Skew>,
    /// Holds the skew files.
    pub(super) _skew_dir: tempfile::TempDir,
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

    /// The group whose leader faults aim at: the project's shard (the meta group without
    /// shards).
    fn aimed_group(&self) -> u64 {
        u64::from(self.cfg.shards > 0)
    }

    async fn leader(&mut self) -> Option<u64> {
        let within = Duration::from_secs(20);
        let agreed = match self.aimed_group() {
            0 => self.cluster.wait_for_leader(within).await,
            group => self.cluster.wait_for_group_leader(group, within).await,
        };
        match agreed {
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

    pub(super) fn proxy(&self) -> &crate::proxy::FaultProxy {
        self.cluster.proxy().expect("started behind the proxy")
    }

    /// Waits until some running node other than `old` reports a leader other than `old`.
    async fn time_failover(&mut self, old: u64, since: Instant, kind: Kind) {
        let c = &self.cluster;
        let group = self.aimed_group();
        let r = eventually(Duration::from_secs(20), "a new leader", || async {
            for id in c
                .ids()
                .into_iter()
                .filter(|i| *i != old && c.is_running(*i))
            {
                let Some(l) = c.group_leader(id, group).await else {
                    continue;
                };
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
    pub(super) async fn check_probes(&mut self, all: bool) {
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
    pub(super) async fn measure_recovery(&mut self, healed: Instant, cycle: usize, kind: Kind) {
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
    pub(super) async fn lin_epoch(&mut self) {
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
    pub(super) fn next_kind(&mut self, cycle: usize, started: Instant, first: &[Kind]) -> Kind {
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
    pub(super) async fn inject(&mut self, kind: Kind, cycle: usize) -> Result<Instant> {
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
