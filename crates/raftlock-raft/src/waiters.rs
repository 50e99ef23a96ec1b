//! [`WaiterBoard`]: wakes the calls whose blocking wait may have ended.
//!
//! A call waiting in a replicated queue (a lock or semaphore acquire) registers its waiter id
//! here; a call waiting for a wait group or a barrier registers that object's topic. After
//! each applied batch the state machine wrapper passes the ids and topics the machine reports
//! (waiters granted, dropped or cancelled; groups finished, barriers tripped, either changed
//! or deleted) and only those calls wake to look again. Re-checking every
//! waiting call after every apply costs O(waiters) per entry, which with thousands of waits
//! starved the node's runtime (heartbeats late, leadership lost).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Waiter id or topic → the calls waiting on it.
#[derive(Debug, Default)]
pub struct WaiterBoard {
    calls: Mutex<HashMap<String, Vec<Arc<Notify>>>>,
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
        // Only its own entry: another call (a repeat of a forward, or another observer of the
        // same topic) may be registered under the same key and keeps its wake-ups.
        let mut calls = self.board.lock();
        if let Some(list) = calls.get_mut(&self.id) {
            list.retain(|n| !Arc::ptr_eq(n, &self.notify));
            if list.is_empty() {
                calls.remove(&self.id);
            }
        }
    }
}

impl WaiterBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Arc<Notify>>>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a call waiting as `waiter_id` (or on a topic; many calls may share one).
    /// Register before the first look at the state: a resolution between that look and the
    /// wait then leaves a stored permit.
    pub fn register(&self, waiter_id: &str) -> Registration<'_> {
        let notify = Arc::new(Notify::new());
        let mut calls = self.lock();
        calls
            .entry(waiter_id.to_string())
            .or_default()
            .push(notify.clone());
        drop(calls);
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
            for n in calls.get(id).into_iter().flatten() {
                n.notify_one();
            }
        }
    }

    /// Wakes every registered call (the whole state was replaced by a snapshot).
    pub fn all(&self) {
        for n in self.lock().values().flatten() {
            n.notify_one();
        }
    }

    /// Calls registered now (metrics, tests).
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
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
        // Every call on one topic wakes.
        let watchers: Vec<_> = (0..3).map(|_| board.register("barrier/p/n/b")).collect();
        board.resolved(&["barrier/p/n/b".to_string()]);
        for w in &watchers {
            tokio::time::timeout(Duration::from_secs(1), w.notify.notified())
                .await
                .expect("each watcher of the topic woke");
        }
        drop(watchers);
        board.all();
        tokio::time::timeout(Duration::from_secs(1), b.notify.notified())
            .await
            .expect("b woke");
    }
}
