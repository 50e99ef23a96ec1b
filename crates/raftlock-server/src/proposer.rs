//! Group commit: concurrent writes are gathered into one [`Command`] (one log entry, one
//! replication round trip, one fsync per node), stamped with cluster time (`crate::clock`).
//!
//! A background task takes everything queued, proposes it as a batch, and hands each caller
//! its own outcome. Under light load a second batch may go out while one is in flight, so a
//! write need not wait a whole commit for the one before it; under load (a batch of
//! [`PIPELINE_BELOW`] or more) a batch goes alone and the next gathers until it lands,
//! because every entry costs each replica an fsync, a round trip and its wake-ups whatever it
//! holds, and fewer, fuller entries leave that CPU to the writes themselves. For the same
//! reason, on a node held to its CPU quota, the next batch under load waits briefly for the
//! writers of the batch that just landed ([`Landing`]), so the callers do not settle into two
//! half-sized batches taking turns.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use raftlock_core::{Command, Op, Outcome};
use raftlock_raft::Raft;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use raftlock_core::Nanos;

use crate::unavailable::Unavailable;

/// Gives the stamp of a batch about to be proposed (see [`crate::clock::NodeClock::stamp`]).
pub type Stamper = Arc<dyn Fn() -> Nanos + Send + Sync>;

/// Most ops in one log entry; bounds entry size (an op carries at most ~13 KB of names and
/// metadata, so an entry stays under ~3.5 MB) and apply latency.
pub const MAX_BATCH: usize = 256;
/// Batches proposed concurrently, at most.
///
/// Two, not more: openraft 0.9's core appends (and fsyncs) one `client_write` entry at a time
/// and waits for each flush, so a third or fourth batch queued behind the core only costs one
/// more fsync for fewer ops. With two, the next batch's leader fsync overlaps the previous
/// batch's replication. Measured (w1, 64 clients, `make bench`): 4 → 10.5 ops per log entry and
/// 0.130 ms of CPU per op over the three nodes; 2 → 20 ops/entry, 0.119 ms/op.
const MAX_IN_FLIGHT: usize = 2;

/// A batch of fewer ops than this leaves the other slot free, so the next batch may go while
/// it is in flight; a batch this large takes every free slot, so the next one waits for it
/// to land and gathers everything that arrives meanwhile. A small batch means light load,
/// where a second batch in flight saves its writes most of a commit's wait (4 clients, one
/// group: 1,893 acquires/s with every batch alone, 2,262 with two in flight, and as many with
/// this rule); a large one means a busy node, where one full entry instead of two half-full
/// ones saves each replica an entry's CPU (64 clients on 0.3-CPU nodes, this rule against two
/// always in flight: one group ~31 ops per entry against ~20 and +17 % acquires/s, three
/// data shards ~10 against ~7 and +9 %).
const PIPELINE_BELOW: usize = 4;

/// Longest a batch waits for the writers of the batch that just landed (see [`Landing`]).
const MAX_LINGER: Duration = Duration::from_millis(2);

/// Whether the node is held to its CPU quota (see [`crate::cpu_pressure`]).
pub type CpuBound = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the batch that landed last tells the next one, on a node held to its CPU quota: when
/// it held [`PIPELINE_BELOW`] or more writes, its callers are about to send their next
/// writes, and the next batch *lingers* for them — until it holds what was queued before the
/// landing plus as many writes as landed, for at most half as long as that batch took to
/// commit, and never over [`MAX_LINGER`] (tokio's timers tick in milliseconds, so at least
/// one).
///
/// Why: with one batch in flight, callers split into two groups taking turns — one waiting
/// for its batch to commit while the other's next writes gather — so each entry holds about
/// half of them. Lingering merges the groups: fewer, fuller entries, so less of a capped CPU
/// goes to each entry's fixed cost. Measured on 3 nodes capped at 0.2 CPU, 64 clients, two
/// clusters loaded at once (`make bench-ab`): one group 28 → 47 writes per entry and 1.09×
/// the acquires/s, three data shards 10 → 17 and 1.29×. Only where the CPU quota is the
/// limit: lingering always, on nodes with CPU to spare, only added latency (16 clients,
/// unconstrained: −20 to −35 % acquires/s, p50 +0.6–0.9 ms).
struct Landing {
    /// The last batch that committed: its writes, how long it took, and when it landed.
    last: Mutex<Option<Landed>>,
    /// Whether to linger at all: the node is held to its CPU quota.
    cpu_bound: CpuBound,
}

impl Landing {
    fn new(cpu_bound: CpuBound) -> Landing {
        Landing {
            last: Mutex::default(),
            cpu_bound,
        }
    }

    /// Records a batch of `writes` that committed, taking `took`. (A batch that failed is not
    /// recorded: its callers got a 503 and do not come straight back.)
    fn landed(&self, writes: usize, took: Duration) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Landed {
            writes,
            took,
            at: Instant::now(),
        });
    }

    /// What the next batch, holding `batch`, waits for: the writes of the landed batch that
    /// are not back yet — every write queued since the landing counts as one of them — and
    /// for how long at most (once: the batch after it waits only if another lands). The wait
    /// starts when that batch starts, not at the landing: on a capped node the first writer
    /// may come back after more than the wait (counted from the landing, lingering merged
    /// almost nothing: 10.8 writes per entry instead of 16.9).
    fn wait_for(&self, batch: &[Queued]) -> Option<(usize, Duration)> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        if last.writes < PIPELINE_BELOW || !(self.cpu_bound)() {
            return None;
        }
        let back = batch.iter().filter(|(_, _, at)| *at >= last.at).count();
        Some((
            last.writes.saturating_sub(back),
            (last.took / 2).min(MAX_LINGER),
        ))
    }
}

/// A batch that committed, as [`Landing`] keeps it.
struct Landed {
    /// Its writes: about as many callers come back with their next write.
    writes: usize,
    /// From its proposal to its commit.
    took: Duration,
    /// When it committed (before its callers had their answers).
    at: Instant,
}

type Reply = oneshot::Sender<Result<Outcome, Unavailable>>;
type Queued = (Op, Reply, Instant);

/// The client-facing reason a write was refused by Raft: no internals.
fn not_accepted(e: &raftlock_raft::RaftError<raftlock_raft::ClientWriteError>) -> Unavailable {
    use openraft::error::{ClientWriteError, RaftError};
    match e {
        // Not "never proposed": openraft 0.9 answers ForwardToLeader both for a write refused
        // before it was appended and for an entry it appended and then truncated — which a
        // later leader may still commit (Raft's figure 8). So it is resent only under the
        // call's request id (every lock write has one, `http::idempotency`).
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => {
            Unavailable::new("the leader changed; retry")
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(_)) => {
            Unavailable::new("a membership change is in progress; retry")
        }
        RaftError::Fatal(_) => Unavailable::new("this node is shutting down"),
    }
}

/// Handle to the batching task.
#[derive(Clone)]
pub struct Proposer {
    queue: mpsc::Sender<Queued>,
    /// How long a caller waits for its batch to commit before answering 503.
    timeout: Duration,
    /// The slots of the batches in flight (one each, or all of them for a batch of
    /// [`PIPELINE_BELOW`] or more); [`Proposer::hold`] takes them all.
    slots: Arc<Semaphore>,
}

impl Proposer {
    /// Starts the batching task of `raft`'s group; it lingers for fuller entries only while
    /// `cpu_bound` says so (see [`Landing`]).
    pub fn start(raft: Raft, timeout: Duration, stamper: Stamper, cpu_bound: CpuBound) -> Self {
        let (tx, rx) = mpsc::channel(16 * MAX_BATCH);
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let landing = Arc::new(Landing::new(cpu_bound));
        tokio::spawn(run(raft, rx, timeout, stamper, slots.clone(), landing));
        Proposer {
            queue: tx,
            timeout,
            slots,
        }
    }

    /// Stops proposing: returns once every batch in flight has its answer, and no new batch
    /// is proposed until the returned guard is dropped (writes wait in the queue meanwhile).
    /// A leader handing off uses it so its log stops growing while the target catches up.
    pub async fn hold(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.slots)
            .acquire_many_owned(MAX_IN_FLIGHT as u32)
            .await
            .expect("semaphore never closed")
    }

    /// Proposes `op` and waits (bounded) for its outcome.
    pub async fn propose(&self, op: Op) -> Result<Outcome, Unavailable> {
        let (tx, rx) = oneshot::channel();
        // One bound for queueing and committing: the caller gets its 503 within the commit
        // timeout even when the queue is full.
        let call = async {
            self.queue
                .send((op, tx, Instant::now()))
                .await
                .map_err(|_| Unavailable::not_proposed("node is shutting down"))?;
            rx.await
                .unwrap_or_else(|_| Err(Unavailable::new("proposal dropped")))
        };
        match tokio::time::timeout(self.timeout + Duration::from_millis(100), call).await {
            Ok(result) => result,
            Err(_) => Err(Unavailable::new("not committed in time")),
        }
    }
}

async fn run(
    raft: Raft,
    mut rx: mpsc::Receiver<Queued>,
    timeout: Duration,
    stamper: Stamper,
    slots: Arc<Semaphore>,
    landing: Arc<Landing>,
) {
    while let Some((mut batch, permit)) = next_batch(&mut rx, &slots, &landing).await {
        // A caller that already answered 503 (it waited for a slot past its timeout) must not
        // see its operation take effect afterwards: drop it before it is proposed.
        batch.retain(|(_, reply, _)| !reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        // How long the oldest write of the batch (the first: the queue is FIFO) waited behind
        // the batches in flight: a stall anywhere below shows up here first. Once per batch,
        // not per write, to keep the hot path as it was.
        let oldest = batch[0].2;
        metrics::histogram!("raftlock_proposer_queue_wait_seconds")
            .record(oldest.elapsed().as_secs_f64());
        let raft = raft.clone();
        let landing = landing.clone();
        let stamp = stamper();
        metrics::histogram!("raftlock_proposal_batch_ops").record(batch.len() as f64);
        tokio::spawn(async move {
            let (ops, replies): (Vec<Op>, Vec<Reply>) =
                batch.into_iter().map(|(op, reply, _)| (op, reply)).unzip();
            let cmd = Command { stamp, ops };
            let started = std::time::Instant::now();
            let result = match tokio::time::timeout(timeout, raft.client_write(cmd)).await {
                Ok(Ok(resp)) => Ok(resp.data),
                Ok(Err(e)) => {
                    // The details (leader ids, peer addresses) go to the log, not to clients.
                    tracing::debug!(error = %e, "write not accepted");
                    Err(not_accepted(&e))
                }
                Err(_) => Err(Unavailable::new("write not committed in time")),
            };
            if result.is_ok() {
                landing.landed(replies.len(), started.elapsed());
            }
            drop(permit);
            let outcome = if result.is_ok() {
                "committed"
            } else {
                "failed"
            };
            metrics::counter!("raftlock_proposals_total", "outcome" => outcome).increment(1);
            metrics::histogram!("raftlock_proposal_commit_seconds")
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        });
    }
}

/// Waits for a write and a slot, then takes what is queued behind it, up to [`MAX_BATCH`]
/// (writes that arrived while the slot was busy join it); under load it also waits a little
/// for the writers of the batch that just landed ([`Landing`]). A batch of
/// [`PIPELINE_BELOW`] or more also takes every free slot, so the next batch waits for it to
/// land. It never waits for those: a batch already in flight keeps its slot, and waiting for
/// a second slot while holding one could deadlock with [`Proposer::hold`], which takes them
/// all. `None` once every sender is gone.
async fn next_batch(
    rx: &mut mpsc::Receiver<Queued>,
    slots: &Arc<Semaphore>,
    landing: &Landing,
) -> Option<(Vec<Queued>, OwnedSemaphorePermit)> {
    let first = rx.recv().await?;
    let mut permit = Arc::clone(slots)
        .acquire_owned()
        .await
        .expect("semaphore never closed");
    let mut batch = vec![first];
    take_queued(rx, &mut batch);
    if let Some((coming, linger)) = landing.wait_for(&batch) {
        let want = (batch.len() + coming).min(MAX_BATCH);
        let until = tokio::time::Instant::now() + linger;
        while batch.len() < want {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(item)) => {
                    batch.push(item);
                    take_queued(rx, &mut batch);
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    if batch.len() >= PIPELINE_BELOW {
        let free = slots.available_permits() as u32;
        if let Ok(rest) = Arc::clone(slots).try_acquire_many_owned(free) {
            permit.merge(rest);
        }
    }
    Some((batch, permit))
}

/// Adds what is queued to `batch`, up to [`MAX_BATCH`] ops.
fn take_queued(rx: &mut mpsc::Receiver<Queued>, batch: &mut Vec<Queued>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued() -> Queued {
        (Op::Tick, oneshot::channel().0, Instant::now())
    }

    /// A landing on a node with CPU to spare: nothing lingers.
    fn never() -> Landing {
        Landing::new(Arc::new(|| false))
    }

    /// A queue holding `n` writes, and its sender.
    fn queue_of(n: usize) -> (mpsc::Sender<Queued>, mpsc::Receiver<Queued>) {
        let (tx, rx) = mpsc::channel(16 * MAX_BATCH);
        for _ in 0..n {
            tx.try_send(queued()).unwrap();
        }
        (tx, rx)
    }

    /// The slots, and the permit of a batch in flight.
    fn one_in_flight() -> (Arc<Semaphore>, OwnedSemaphorePermit) {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let in_flight = Arc::clone(&slots).try_acquire_owned().unwrap();
        (slots, in_flight)
    }

    #[tokio::test]
    async fn under_light_load_a_batch_leaves_a_slot_for_the_next() {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let (_tx, mut rx) = queue_of(PIPELINE_BELOW - 1);
        let (batch, permit) = next_batch(&mut rx, &slots, &never()).await.unwrap();
        assert_eq!(batch.len(), PIPELINE_BELOW - 1);
        assert_eq!(permit.num_permits(), 1);
        assert_eq!(slots.available_permits(), MAX_IN_FLIGHT - 1);
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_a_batch_goes_alone_and_the_next_gathers_until_it_lands() {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let (tx, mut rx) = queue_of(PIPELINE_BELOW);
        let (batch, in_flight) = next_batch(&mut rx, &slots, &never()).await.unwrap();
        assert_eq!(batch.len(), PIPELINE_BELOW);
        assert_eq!(
            in_flight.num_permits(),
            MAX_IN_FLIGHT,
            "nothing goes beside it"
        );

        let landing = tokio::spawn(async move {
            for _ in 0..3 {
                tx.send(queued()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(in_flight);
        });
        let started = tokio::time::Instant::now();
        let (batch, _permit) = next_batch(&mut rx, &slots, &never()).await.unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(3),
            "it waited for the landing"
        );
        assert_eq!(batch.len(), 3, "every write that came meanwhile is in it");
        landing.await.unwrap();
    }

    #[tokio::test]
    async fn a_full_batch_beside_one_in_flight_does_not_wait_for_its_slot() {
        let (slots, _in_flight) = one_in_flight();
        let (_tx, mut rx) = queue_of(PIPELINE_BELOW);
        let (batch, permit) = next_batch(&mut rx, &slots, &never()).await.unwrap();
        assert_eq!(batch.len(), PIPELINE_BELOW);
        assert_eq!(permit.num_permits(), 1, "took the free slot only");
    }

    /// Sends `n` writes at once, `after` from now (tokio's timers tick in milliseconds).
    fn arriving(
        tx: mpsc::Sender<Queued>,
        n: usize,
        after: Duration,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            for _ in 0..n {
                tx.send(queued()).await.unwrap();
            }
        })
    }

    /// On a node held to its quota (`cpu_bound`): `before` writes queued, then a batch of 8
    /// that took 20 ms lands, `after` more are queued, and `back` more arrive 1 ms later. The
    /// next batch's size, and how long it took to go.
    async fn next_batch_after_landing(
        cpu_bound: bool,
        before: usize,
        after: usize,
        back: usize,
    ) -> (usize, Duration) {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let landing = Landing::new(Arc::new(move || cpu_bound));
        let (tx, mut rx) = queue_of(before);
        landing.landed(8, Duration::from_millis(20));
        for _ in 0..after {
            tx.try_send(queued()).unwrap();
        }
        let coming = arriving(tx.clone(), back, Duration::from_millis(1));
        let started = tokio::time::Instant::now();
        let (batch, _permit) = next_batch(&mut rx, &slots, &landing).await.unwrap();
        let went = (batch.len(), started.elapsed());
        coming.await.unwrap();
        went
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_a_batch_waits_for_the_writers_of_the_one_that_landed() {
        assert_eq!(
            next_batch_after_landing(true, 2, 0, 8).await,
            (10, Duration::from_millis(1)),
            "the two queued before the landing and the eight that came back, not a moment longer"
        );
    }

    /// Writers that came back before the batch started are among those it waits for, not
    /// on top of them (it waited its whole 2 ms for writes that would never come).
    #[tokio::test(start_paused = true)]
    async fn writers_back_before_the_batch_starts_count_once() {
        assert_eq!(
            next_batch_after_landing(true, 0, 3, 5).await,
            (8, Duration::from_millis(1)),
            "done once all eight are back"
        );
    }

    /// ... and writes queued before the landing are not among them.
    #[tokio::test(start_paused = true)]
    async fn writers_queued_before_the_landing_are_not_the_ones_coming_back() {
        // Seven of the eight come back; the batch waits for the eighth until its time is up.
        assert_eq!(
            next_batch_after_landing(true, 2, 0, 7).await,
            (9, MAX_LINGER),
            "waited for 2 + 8, not done at 2 + 7"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn it_waits_at_most_half_the_last_commit_and_only_once() {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let landing = Landing::new(Arc::new(|| true));
        landing.landed(8, Duration::from_millis(2));
        let (tx, mut rx) = queue_of(1);
        // Three of the eight come back at once; the rest never do.
        let coming = arriving(tx.clone(), 3, Duration::ZERO);
        let started = tokio::time::Instant::now();
        let (batch, permit) = next_batch(&mut rx, &slots, &landing).await.unwrap();
        assert_eq!(batch.len(), 4);
        assert_eq!(started.elapsed(), Duration::from_millis(1), "half of 2 ms");
        coming.await.unwrap();
        drop(permit);
        // Nothing landed since: the next batch goes at once.
        tx.send(queued()).await.unwrap();
        let started = tokio::time::Instant::now();
        let (batch, _permit) = next_batch(&mut rx, &slots, &landing).await.unwrap();
        assert_eq!(batch.len(), 1);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn with_cpu_to_spare_nothing_lingers() {
        assert_eq!(
            next_batch_after_landing(false, 2, 0, 8).await,
            (2, Duration::ZERO)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn under_light_load_and_past_the_cap_nothing_waits_longer() {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let landing = Landing::new(Arc::new(|| true));
        landing.landed(PIPELINE_BELOW - 1, Duration::from_millis(10));
        let (tx, mut rx) = queue_of(1);
        let started = tokio::time::Instant::now();
        let (batch, permit) = next_batch(&mut rx, &slots, &landing).await.unwrap();
        assert_eq!(
            (batch.len(), started.elapsed()),
            (1, Duration::ZERO),
            "a small batch landed"
        );
        drop(permit);
        // A slow commit: the wait is still capped.
        landing.landed(64, Duration::from_secs(1));
        tx.send(queued()).await.unwrap();
        let started = tokio::time::Instant::now();
        let (batch, _permit) = next_batch(&mut rx, &slots, &landing).await.unwrap();
        assert_eq!((batch.len(), started.elapsed()), (1, MAX_LINGER));
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_max_batch_ops() {
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let (_tx, mut rx) = queue_of(MAX_BATCH + 3);
        let (batch, _permit) = next_batch(&mut rx, &slots, &never()).await.unwrap();
        assert_eq!(batch.len(), MAX_BATCH);
        assert_eq!(rx.len(), 3, "the rest waits for the next batch");
    }
}
