//! The load: project-lock, hierarchical and linearizability workers sharing one cluster,
//! recording what the checkers judge.

use super::*;

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
    pub sem_acquired: AtomicU64,
    pub sem_contended: AtomicU64,
    pub barrier_trips: AtomicU64,
    pub jobs_reported: AtomicU64,
    pub wait_groups_completed: AtomicU64,
    pub lin_ops: AtomicU64,
    pub probes: AtomicU64,
}

impl Counters {
    pub(super) fn total(&self) -> u64 {
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
            &self.sem_acquired,
            &self.sem_contended,
            &self.barrier_trips,
            &self.jobs_reported,
            &self.wait_groups_completed,
            &self.lin_ops,
            &self.probes,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

type LinOp = Operation<LockInput, LockOutput>;

/// Everything the workers share.
pub(super) struct Shared {
    pub(super) clock: Clock,
    pub(super) apis: Vec<Locks>,
    pub(super) stop: AtomicBool,
    pub(super) skew_us: i64,
    pub(super) holds4: Mutex<Vec<Hold4>>,
    pub(super) writes: Mutex<Vec<Write>>,
    pub(super) holds5: Mutex<Vec<Hold5>>,
    pub(super) semaphore_holds: Mutex<Vec<SemaphoreHold>>,
    pub(super) coordination: Mutex<CoordinationHistory>,
    pub(super) resource: Mutex<Resource>,
    pub(super) counters: Counters,
    pub(super) successes: Mutex<Vec<i64>>,
    pub(super) violations: Mutex<Vec<String>>,
    pub(super) lin_gate: tokio::sync::RwLock<()>,
    pub(super) lin_ops: Mutex<Vec<LinOp>>,
    pub(super) lin_tokens: AtomicU32,
}

/// A call's outcome: a definite answer, or unknown (transport error, timeout, 5xx).
pub(super) fn definite(r: Result<Answer>) -> Option<Answer> {
    r.ok().filter(|a| a.status < 500)
}

pub(super) fn rfc3339_ns(v: &Value) -> Option<i128> {
    crate::rfc3339_ns(v.as_str()?)
}

impl Shared {
    pub(super) fn api(&self, rng: &mut StdRng) -> &Locks {
        &self.apis[rng.gen_range(0..self.apis.len())]
    }
    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    pub(super) fn success(&self) {
        let now = self.clock.now();
        self.successes.lock().unwrap().push(now);
    }
    pub(super) fn violation(&self, v: String) {
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
pub(super) async fn project_worker(sh: Arc<Shared>, worker: usize, seed: u64) {
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
pub(super) async fn hier_worker(sh: Arc<Shared>, worker: usize, seed: u64) {
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

/// Semaphore load: lease → acquire weight 1–2 of the shared semaphore (waiting up to 1 s at
/// times) → hold a moment → release; every acknowledged hold is recorded with its weight.
pub(super) async fn semaphore_worker(sh: Arc<Shared>, worker: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lease: Option<(String, i64)> = None;
    while !sh.stopped() {
        let now = sh.clock.now();
        let (lease_id, lease_end) = match &lease {
            Some((id, end)) if end - now > 8_000_000 => (id.clone(), *end),
            _ => {
                lease = sh.semaphore_lease(&mut rng, worker).await;
                continue;
            }
        };
        let weight = rng.gen_range(1..=2u64);
        let timeout = *[0, 0, 1].choose(&mut rng).unwrap();
        let body = json!({ "namespace_name": NAMESPACE, "semaphore_name": SEMAPHORE, "lease_id": lease_id, "weight": weight, "timeout_seconds": timeout });
        let r = sh.api(&mut rng).rpc("AcquireSemaphore", body).await;
        let acked = sh.clock.now();
        match definite(r) {
            Some(a) if a.status == 200 && a.body["outcome"] == "ACQUIRE_OUTCOME_ACQUIRED" => {
                bump(&sh.counters.sem_acquired);
                sh.success();
                let fencing = a.body["fencing_token"].as_u64().unwrap_or(0);
                if fencing == 0 {
                    sh.violation(format!(
                        "semaphore grant without a fencing token: {}",
                        a.body
                    ));
                }
                let work = rng.gen_range(0..30);
                tokio::time::sleep(Duration::from_millis(work)).await;
                let sent = sh.release_semaphore(&mut rng, &lease_id).await;
                sh.semaphore_holds.lock().unwrap().push(SemaphoreHold {
                    lease: lease_id,
                    weight,
                    acked,
                    end: lease_end.min(sent),
                });
            }
            Some(a) if a.status == 200 => {
                bump(&sh.counters.sem_contended);
                sh.success();
            }
            Some(a) if a.status == 404 => {
                bump(&sh.counters.other);
                lease = None;
            }
            Some(_) => bump(&sh.counters.other),
            None => {
                bump(&sh.counters.unknown);
                sh.release_semaphore(&mut rng, &lease_id).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Shared {
    /// A new semaphore lease and its conservative end on the client clock, or `None` after a
    /// pause when the call did not succeed.
    async fn semaphore_lease(&self, rng: &mut StdRng, worker: usize) -> Option<(String, i64)> {
        let body = json!({ "namespace_name": NAMESPACE, "process_id": format!("s{worker}"), "ttl_seconds": 20 });
        match definite(self.api(rng).rpc("CreateSemaphoreLease", body).await) {
            Some(a) if a.status == 200 => {
                self.success();
                let id = a.body["lease"]["lease_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let exp = a.body["lease"]["expires_at"].as_i64().unwrap_or(0);
                Some((id, self.clock.server_time(exp as i128) - self.skew_us))
            }
            _ => {
                bump(&self.counters.unknown);
                tokio::time::sleep(Duration::from_millis(50)).await;
                None
            }
        }
    }

    /// Releases the lease's permits until a definite answer; returns when the first attempt
    /// was sent.
    async fn release_semaphore(&self, rng: &mut StdRng, lease: &str) -> i64 {
        let first = self.clock.now();
        let give_up = Instant::now() + Duration::from_secs(60);
        let body =
            json!({ "namespace_name": NAMESPACE, "semaphore_name": SEMAPHORE, "lease_id": lease });
        loop {
            if definite(self.api(rng).rpc("ReleaseSemaphore", body.clone()).await).is_some() {
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

/// One recorded call on the linearizability key.
pub(super) async fn lin_call(
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
pub(super) async fn lin_worker(sh: Arc<Shared>, client: usize, seed: u64) {
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
