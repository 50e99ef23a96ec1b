//! Wait-group and barrier load for the chaos suite, and the checks of what it recorded:
//! a barrier never releases a generation before every expected process sent its arrival, a
//! wait group never reports completion before its counter of distinct jobs were sent. Times
//! are the one client clock; a call's "sent" time is when its first attempt left.

use super::*;

/// Processes meeting at the chaos barrier (one per barrier worker).
pub(super) const BARRIER_PARTIES: usize = 3;
const BARRIER: &str = "rendezvous";
/// Jobs per wait-group round, and reporters sharing them.
const ROUND_JOBS: usize = 6;
const REPORTERS: usize = 3;

/// An arrival sent for a barrier generation.
#[derive(Debug, Clone)]
pub struct BarrierArrival {
    pub process: String,
    pub generation: u64,
    pub sent: i64,
}

/// A `TRIPPED` answer for a generation, received at `at`.
#[derive(Debug, Clone)]
pub struct BarrierRelease {
    pub generation: u64,
    pub at: i64,
}

/// A job report sent (`sent`) to a wait group.
#[derive(Debug, Clone)]
pub struct JobSent {
    pub group: String,
    pub job: String,
    pub sent: i64,
}

/// A `COMPLETED` answer for a wait group, received at `at`.
#[derive(Debug, Clone)]
pub struct GroupCompleted {
    pub group: String,
    pub at: i64,
}

/// What the coordination workers recorded.
#[derive(Debug, Default)]
pub struct CoordinationHistory {
    pub arrivals: Vec<BarrierArrival>,
    pub releases: Vec<BarrierRelease>,
    pub jobs: Vec<JobSent>,
    pub completions: Vec<GroupCompleted>,
}

impl Shared {
    /// Calls `method` until a definite answer or the run stops; `None` if it stopped first.
    async fn until_definite(&self, rng: &mut StdRng, method: &str, body: &Value) -> Option<Answer> {
        while !self.stop.load(Ordering::Relaxed) {
            match definite(self.api(rng).rpc(method, body.clone()).await) {
                Some(a) => {
                    self.success();
                    return Some(a);
                }
                None => {
                    bump(&self.counters.unknown);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        None
    }
}

/// Creates the barrier the barrier workers share.
pub(super) async fn create_barrier(api: &Locks) -> Result<()> {
    let body = json!({ "namespace_name": NAMESPACE, "barrier_name": BARRIER, "expected_processes": BARRIER_PARTIES, "delete_inactive_after_seconds": 3600 });
    let r = api.rpc("CreateBarrier", body).await?;
    anyhow::ensure!(r.status == 200, "CreateBarrier: {r:?}");
    Ok(())
}

/// One barrier party: arrive at generation g, wait until it trips, go on with g + 1.
pub(super) async fn barrier_worker(sh: Arc<Shared>, worker: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let process = format!("party-{worker}");
    let mut generation = 1u64;
    while !sh.stopped() {
        let sent = sh.clock.now();
        sh.coordination
            .lock()
            .unwrap()
            .arrivals
            .push(BarrierArrival {
                process: process.clone(),
                generation,
                sent,
            });
        let body = json!({ "namespace_name": NAMESPACE, "barrier_name": BARRIER, "process_id": process, "expected_generation": generation });
        let Some(a) = sh.until_definite(&mut rng, "ArriveAtBarrier", &body).await else {
            return;
        };
        if a.status != 200 {
            sh.violation(format!(
                "{process} could not arrive at generation {generation}: {a:?}"
            ));
            return;
        }
        let body = json!({ "namespace_name": NAMESPACE, "barrier_name": BARRIER, "expected_generation": generation, "timeout_seconds": 2 });
        loop {
            let Some(w) = sh.until_definite(&mut rng, "WaitAtBarrier", &body).await else {
                return;
            };
            if w.status != 200 {
                sh.violation(format!("WaitAtBarrier generation {generation}: {w:?}"));
                return;
            }
            if w.body["outcome"] == "BARRIER_WAIT_OUTCOME_TRIPPED" {
                let at = sh.clock.now();
                sh.coordination
                    .lock()
                    .unwrap()
                    .releases
                    .push(BarrierRelease { generation, at });
                bump(&sh.counters.barrier_trips);
                break;
            }
        }
        generation += 1;
    }
}

/// Wait-group rounds: a group of [`ROUND_JOBS`] jobs reported by [`REPORTERS`] tasks while an
/// observer waits for it; then the next round.
pub(super) async fn wait_group_rounds(sh: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut round = 0u64;
    while !sh.stopped() {
        round += 1;
        let group = format!("round-{round}");
        let expires_at = (SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
            + Duration::from_secs(3600))
        .as_nanos() as i64;
        let body = json!({ "namespace_name": NAMESPACE, "wait_group_name": group, "counter": ROUND_JOBS, "expires_at": expires_at, "delete_after_finished_seconds": 600 });
        match sh.until_definite(&mut rng, "CreateWaitGroup", &body).await {
            Some(a) if a.status == 200 || a.status == 409 => {}
            Some(a) => {
                sh.violation(format!("CreateWaitGroup {group}: {a:?}"));
                return;
            }
            None => return,
        }
        let mut tasks = vec![tokio::spawn(observe(sh.clone(), group.clone(), rng.gen()))];
        for r in 0..REPORTERS {
            tasks.push(tokio::spawn(report(
                sh.clone(),
                group.clone(),
                r,
                rng.gen(),
            )));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// Reports this reporter's share of the round's jobs, one call each.
async fn report(sh: Arc<Shared>, group: String, reporter: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for job in (reporter..ROUND_JOBS).step_by(REPORTERS) {
        let job = format!("job-{job}");
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..40))).await;
        let sent = sh.clock.now();
        sh.coordination.lock().unwrap().jobs.push(JobSent {
            group: group.clone(),
            job: job.clone(),
            sent,
        });
        let body = json!({ "namespace_name": NAMESPACE, "wait_group_name": group, "jobs": [{ "job_id": job }] });
        match sh
            .until_definite(&mut rng, "CompleteJobsFromWaitGroup", &body)
            .await
        {
            Some(a) if a.status == 200 => bump(&sh.counters.jobs_reported),
            Some(a) => sh.violation(format!("CompleteJobsFromWaitGroup {group}/{job}: {a:?}")),
            None => return,
        }
    }
}

/// Waits for the round's group to complete.
async fn observe(sh: Arc<Shared>, group: String, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let body =
        json!({ "namespace_name": NAMESPACE, "wait_group_name": group, "timeout_seconds": 2 });
    loop {
        let Some(a) = sh.until_definite(&mut rng, "WaitForWaitGroup", &body).await else {
            return;
        };
        if a.body["outcome"] == "WAIT_GROUP_WAIT_OUTCOME_COMPLETED" {
            let at = sh.clock.now();
            sh.coordination
                .lock()
                .unwrap()
                .completions
                .push(GroupCompleted { group, at });
            bump(&sh.counters.wait_groups_completed);
            return;
        }
        if a.status != 200 {
            sh.violation(format!("WaitForWaitGroup {group}: {a:?}"));
            return;
        }
    }
}

/// No generation released before all its parties had sent their arrival.
pub fn check_barrier(h: &CoordinationHistory, parties: usize) -> Vec<String> {
    let mut out = Vec::new();
    for r in &h.releases {
        let sent: BTreeSet<&str> = (h.arrivals.iter())
            .filter(|a| a.generation == r.generation && a.sent < r.at)
            .map(|a| a.process.as_str())
            .collect();
        if sent.len() < parties {
            out.push(format!(
                "barrier released generation {} at {} us after only {} of {parties} arrivals were sent",
                r.generation,
                r.at,
                sent.len()
            ));
        }
    }
    out
}

/// No wait group reported complete before `counter` distinct jobs had been sent to it.
pub fn check_wait_groups(h: &CoordinationHistory, counter: usize) -> Vec<String> {
    let mut out = Vec::new();
    for c in &h.completions {
        let sent: BTreeSet<&str> = (h.jobs.iter())
            .filter(|j| j.group == c.group && j.sent < c.at)
            .map(|j| j.job.as_str())
            .collect();
        if sent.len() < counter {
            out.push(format!(
                "wait group {} reported complete at {} us after only {} of {counter} jobs were sent",
                c.group,
                c.at,
                sent.len()
            ));
        }
    }
    out
}

/// The round size the checks judge wait groups by.
pub(super) const WAIT_GROUP_COUNTER: usize = ROUND_JOBS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_early_release_or_completion_is_a_violation() {
        let arrival = |p: &str, sent| BarrierArrival {
            process: p.into(),
            generation: 1,
            sent,
        };
        let mut h = CoordinationHistory {
            arrivals: vec![arrival("a", 1), arrival("b", 2), arrival("c", 3)],
            releases: vec![BarrierRelease {
                generation: 1,
                at: 5,
            }],
            ..Default::default()
        };
        assert!(check_barrier(&h, 3).is_empty());
        h.releases.push(BarrierRelease {
            generation: 1,
            at: 3,
        });
        assert_eq!(check_barrier(&h, 3).len(), 1, "c had not arrived at 3");
        let job = |j: &str, sent| JobSent {
            group: "g".into(),
            job: j.into(),
            sent,
        };
        h.jobs = vec![job("1", 1), job("2", 2), job("2", 3)];
        h.completions = vec![GroupCompleted {
            group: "g".into(),
            at: 10,
        }];
        assert!(check_wait_groups(&h, 2).is_empty());
        assert_eq!(
            check_wait_groups(&h, 3).len(),
            1,
            "a repeated job is not a distinct one"
        );
    }
}
