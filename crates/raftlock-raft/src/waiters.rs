//! [`WaiterBoard`]: wakes the calls whose hierarchical blocking acquire left its queue.
//!
//! A call waiting in a replicated queue registers its waiter id here; after each applied
//! batch the state machine wrapper passes the ids the machine reports as resolved (granted,
//! dropped, cancelled) and only those calls wake to read their outcome. Re-checking every
//! waiting call after every apply costs O(waiters) per entry, which with thousands of waits
//! starved the node's runtime (heartbeats late, leadership lost).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Waiter id → the call waiting on it.
#[derive(Debug, Default)]
pub struct WaiterBoard {
    calls: Mutex<HashMap<String, Arc<Notify>>>,
}

/// A registration; unregisters when dropped.
pub struct Registration<'a> {
    board: &'a WaiterBoard,
    id: String,
    /// Notified when the waiter may have left its queue.
    pub notify: Arc<Notify>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        // Only its own entry: a repeat of the same call (a forward sent again) may have
        // registered the same waiter id since, and must keep its wake-ups.
        let mut calls = self.board.lock();
        if calls
            .get(&self.id)
            .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
        {
            calls.remove(&self.id);
        }
    }
}

impl WaiterBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the call waiting as `waiter_id`. Register before the first look at the
    /// state: a resolution between that look and the wait then leaves a stored permit.
    pub fn register(&self, waiter_id: &str) -> Registration<'_> {
        let notify = Arc::new(Notify::new());
        self.lock().insert(waiter_id.to_string(), notify.clone());
        Registration {
            board: self,
            id: waiter_id.to_string(),
            notify,
        }
    }

    /// Wakes the calls of `ids` (ids no call here waits on are ignored).
    pub fn resolved(&self, ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        let calls = self.lock();
        for id in ids {
            if let Some(n) = calls.get(id) {
                n.notify_one();
            }
        }
    }

    /// Wakes every registered call (the whole state was replaced by a snapshot).
    pub fn all(&self) {
        for n in self.lock().values() {
            n.notify_one();
        }
    }

    /// Calls registered now (metrics, tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn only_resolved_calls_wake_and_a_resolution_before_the_wait_is_kept() {
        let board = WaiterBoard::default();
        let a = board.register("a");
        let b = board.register("b");
        board.resolved(&["a".to_string(), "gone".to_string()]);
        // Resolved before anyone awaited: the permit is stored.
        tokio::time::timeout(Duration::from_secs(1), a.notify.notified())
            .await
            .expect("a woke");
        let b_woke = tokio::time::timeout(Duration::from_millis(50), b.notify.notified()).await;
        assert!(b_woke.is_err(), "b was not resolved");
        drop(a);
        assert_eq!(board.len(), 1);
        // A second registration of one id survives the first one's end.
        let first = board.register("c");
        let second = board.register("c");
        drop(first);
        board.resolved(&["c".to_string()]);
        tokio::time::timeout(Duration::from_secs(1), second.notify.notified())
            .await
            .expect("the newer registration still wakes");
        drop(second);
        board.all();
        tokio::time::timeout(Duration::from_secs(1), b.notify.notified())
            .await
            .expect("b woke");
    }
}
