//! The replicated FIFO queue of hierarchical blocking acquires: who waits for which lock, the budgets
//! that bound the queues, and the queue operations (enqueue, remove, grant in arrival order,
//! drop at the deadline) as methods of the namespace that owns the queues.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::namespace::{ancestors, Namespace};
use super::views::{Quotas, WaitSpec};
use super::Result;
use crate::error::CoreError;
use crate::Nanos;

/// One queued blocking acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Waiter {
    /// Chosen by the proposer; lets a retried call find its place instead of queueing twice.
    pub(super) id: String,
    pub(super) lease_id: String,
    pub(super) exclusive: bool,
    pub(super) metadata: BTreeMap<String, String>,
    /// After this state-machine time the waiter is dropped (never granted).
    pub(super) deadline: Nanos,
}

impl Waiter {
    /// Approximate bytes of replicated state this waiter keeps (names, ids, metadata, and
    /// the bookkeeping around them).
    pub(super) fn bytes(&self, lock_name: &str) -> usize {
        waiter_bytes(lock_name, &self.lease_id, &self.id, &self.metadata)
    }
}

pub(super) fn waiter_bytes(
    lock_name: &str,
    lease_id: &str,
    waiter_id: &str,
    metadata: &BTreeMap<String, String>,
) -> usize {
    let meta: usize = metadata.iter().map(|(k, v)| k.len() + v.len() + 48).sum();
    // The queue entry, the lease's index entry and the deadline index entry each name it.
    128 + 2 * lock_name.len() + 2 * waiter_id.len() + lease_id.len() + meta
}

/// Longest queue on one lock.
pub const MAX_WAITERS_PER_LOCK: usize = 10_000;
/// Most blocking acquires one lease may have queued at once: one process rarely needs more
/// than a handful, and each queued wait is replicated state (docs/operations.md, *Budgets*).
pub const MAX_WAITERS_PER_LEASE: usize = 64;
/// Most blocking acquires one project may have queued at once, over all its namespaces
/// (each also holds a connection open on some node).
pub const MAX_WAITERS_PER_PROJECT: usize = 4_096;
/// Most bytes those queued acquires may keep in replicated state: a waiter carries its
/// metadata (up to ~12 KB) until it is granted. See docs/operations.md, *Budgets*.
pub const MAX_WAITER_BYTES_PER_PROJECT: usize = 8 << 20;

/// What queued acquires of one project use: how many, and their bytes ([`Waiter::bytes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaiterUsage {
    pub count: usize,
    pub bytes: usize,
}

impl Namespace {
    /// Refuses a new waiter of `bytes` on `name` for `lease_id` that would exceed a budget:
    /// per lease, per lock, and the project's count and bytes (`project_usage`).
    pub(super) fn wait_budget(
        &self,
        lease_id: &str,
        name: &str,
        bytes: usize,
        project_usage: WaiterUsage,
    ) -> Result<()> {
        let lease_waits = self.leases.get(lease_id).map_or(0, |l| l.waiting.len());
        if lease_waits >= MAX_WAITERS_PER_LEASE {
            return Err(CoreError::ResourceExhausted(format!(
                "this lease already has {MAX_WAITERS_PER_LEASE} blocking acquires waiting"
            )));
        }
        if project_usage.count >= MAX_WAITERS_PER_PROJECT {
            return Err(CoreError::ResourceExhausted(format!(
                "this project already has {MAX_WAITERS_PER_PROJECT} blocking acquires waiting"
            )));
        }
        if project_usage.bytes + bytes > MAX_WAITER_BYTES_PER_PROJECT {
            return Err(CoreError::ResourceExhausted(
                "this project's waiting acquires hold too much metadata".into(),
            ));
        }
        if self.waiters.get(name).map_or(0, VecDeque::len) >= MAX_WAITERS_PER_LOCK {
            return Err(CoreError::ResourceExhausted(
                "too many waiters on this lock".into(),
            ));
        }
        Ok(())
    }

    /// What this namespace's queued acquires use.
    pub(super) fn waiter_usage(&self) -> WaiterUsage {
        self.usage.0.unwrap_or_else(|| self.count_waiter_usage())
    }

    /// [`Namespace::waiter_usage`] counted from the queues.
    pub(super) fn count_waiter_usage(&self) -> WaiterUsage {
        let mut usage = WaiterUsage::default();
        for (name, queue) in &self.waiters {
            usage.count += queue.len();
            usage.bytes += queue.iter().map(|w| w.bytes(name)).sum::<usize>();
        }
        usage
    }

    // ---- the waiter queue ------------------------------------------------------------------

    pub(super) fn is_queued(&self, name: &str, waiter_id: &str) -> bool {
        self.waiters
            .get(name)
            .is_some_and(|q| q.iter().any(|w| w.id == waiter_id))
    }

    pub(super) fn enqueue(
        &mut self,
        lease_id: &str,
        name: &str,
        exclusive: bool,
        metadata: BTreeMap<String, String>,
        spec: &WaitSpec,
        project_usage: WaiterUsage,
    ) -> Result<()> {
        let bytes = waiter_bytes(name, lease_id, &spec.waiter_id, &metadata);
        self.wait_budget(lease_id, name, bytes, project_usage)?;
        let usage = self.waiter_usage();
        self.usage.0 = Some(WaiterUsage {
            count: usage.count + 1,
            bytes: usage.bytes + bytes,
        });
        let queue = self.waiters.entry(name.to_string()).or_default();
        queue.push_back(Waiter {
            id: spec.waiter_id.clone(),
            lease_id: lease_id.to_string(),
            exclusive,
            metadata,
            deadline: spec.deadline,
        });
        let lease = self.leases.get_mut(lease_id).expect("checked live");
        lease
            .waiting
            .insert((name.to_string(), spec.waiter_id.clone()));
        Ok(())
    }

    /// Removes a waiter from its queue (and its lease's index); false when absent.
    pub(super) fn remove_waiter(&mut self, name: &str, waiter_id: &str) -> bool {
        let Some(queue) = self.waiters.get_mut(name) else {
            return false;
        };
        let Some(pos) = queue.iter().position(|w| w.id == waiter_id) else {
            return false;
        };
        let waiter = queue.remove(pos).expect("position is valid");
        self.resolved.0.push(waiter.id.clone());
        if let Some(usage) = self.usage.0 {
            // `None` (count it from the queues) if the bookkeeping ever went wrong.
            self.usage.0 = crate::budget::restated(usage.count, 1, 0).and_then(|count| {
                let bytes = crate::budget::restated(usage.bytes, waiter.bytes(name), 0)?;
                Some(WaiterUsage { count, bytes })
            });
        }
        if queue.is_empty() {
            self.waiters.remove(name);
        }
        if let Some(lease) = self.leases.get_mut(&waiter.lease_id) {
            lease
                .waiting
                .remove(&(name.to_string(), waiter_id.to_string()));
        }
        true
    }

    /// Grants waiters at the head of `name`'s queue while they are compatible, in arrival
    /// order; stops at the first that is not, so nobody overtakes it.
    pub(super) fn pump(&mut self, name: &str, t: Nanos) {
        loop {
            let Some(head) = self.waiters.get(name).and_then(|q| q.front()).cloned() else {
                return;
            };
            let live = self.lease_live(&head.lease_id, t) && t < head.deadline;
            if live
                && self
                    .contention(&head.lease_id, name, head.exclusive, t)
                    .is_some()
            {
                return;
            }
            self.remove_waiter(name, &head.id);
            if live {
                // A quota refusal leaves the waiter ungranted: its call sees Dropped and
                // answers TIMED_OUT with the current diagnostics.
                let quotas = Quotas {
                    locks_per_namespace: self.lock_quota,
                    ..Quotas::default()
                };
                let _ = self.grant(
                    &head.lease_id,
                    name,
                    head.exclusive,
                    head.metadata,
                    t,
                    &quotas,
                );
            }
        }
    }

    /// After something was released at `name`: pumps the queues that may have been waiting on
    /// it — the lock itself, its ancestors and its descendants.
    pub(super) fn pump_around(&mut self, name: &str, t: Nanos) {
        if self.waiters.is_empty() {
            return;
        }
        let prefix = format!("{name}/");
        let mut related: Vec<String> = ancestors(name)
            .filter(|a| self.waiters.contains_key(*a))
            .map(str::to_string)
            .collect();
        if self.waiters.contains_key(name) {
            related.push(name.to_string());
        }
        related.extend(
            self.waiters
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, _)| k.clone()),
        );
        for lock in related {
            self.pump(&lock, t);
        }
    }

    /// Drops every waiter whose deadline has passed (their calls answer TIMED_OUT).
    pub(super) fn drop_expired_waiters(&mut self, name: &str, t: Nanos) {
        let expired: Vec<String> = self
            .waiters
            .get(name)
            .map(|q| {
                q.iter()
                    .filter(|w| t >= w.deadline)
                    .map(|w| w.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        if expired.is_empty() {
            return;
        }
        for id in expired {
            self.remove_waiter(name, &id);
        }
        self.pump(name, t);
    }
}
