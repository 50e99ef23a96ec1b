//! The read gate: linearizable reads confirm leadership with a quorum, and concurrent reads
//! share one confirmation (ReadIndex batching).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use raftlock_raft::Raft;
use tokio::sync::oneshot;

use crate::unavailable::Unavailable;

type ReadWaiter = oneshot::Sender<Result<(), Unavailable>>;

/// ReadIndex batching: concurrent linearizable reads share one leadership confirmation.
///
/// A read may only be answered by a confirmation that *started after the read arrived*
/// (otherwise a leader deposed in between could answer from stale state). So at most one
/// confirmation runs at a time; reads arriving meanwhile queue, and the next confirmation,
/// started only after taking the whole queue, answers all of them at once. A lone read costs
/// what it did before (one `ensure_linearizable`); N concurrent reads cost about one
/// heartbeat round to a quorum instead of N.
pub struct ReadGate {
    raft: Raft,
    timeout: Duration,
    /// (a confirmation loop is running, reads waiting for the next confirmation)
    queue: Mutex<(bool, Vec<ReadWaiter>)>,
}

impl ReadGate {
    pub fn new(raft: Raft, timeout: Duration) -> Arc<Self> {
        Arc::new(ReadGate {
            raft,
            timeout,
            queue: Mutex::new((false, Vec::new())),
        })
    }

    /// Returns once leadership was confirmed by a quorum (and the read index applied) after
    /// this call began.
    pub async fn confirm(self: &Arc<Self>) -> Result<(), Unavailable> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = self.queue.lock().expect("read gate poisoned");
            q.1.push(tx);
            !std::mem::replace(&mut q.0, true)
        };
        if start {
            let gate = Arc::clone(self);
            tokio::spawn(async move { gate.drive().await });
        }
        rx.await
            .unwrap_or_else(|_| Err(Unavailable::new("read check dropped")))
    }

    /// Confirms leadership for everyone queued, again and again, until nobody is waiting.
    async fn drive(&self) {
        loop {
            let batch = {
                let mut q = self.queue.lock().expect("read gate poisoned");
                if q.1.is_empty() {
                    q.0 = false;
                    return;
                }
                std::mem::take(&mut q.1)
            };
            let result =
                match tokio::time::timeout(self.timeout, self.raft.ensure_linearizable()).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "cannot confirm leadership");
                        Err(Unavailable::new(
                            "cannot confirm leadership (the leader changed or lost its quorum)",
                        ))
                    }
                    Err(_) => Err(Unavailable::new("leadership not confirmed in time")),
                };
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    }
}
