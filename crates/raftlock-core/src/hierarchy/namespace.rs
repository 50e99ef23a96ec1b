//! One namespace and the rules inside it: compatibility of shared and exclusive holds on
//! related paths, the descendant counters that make the check O(depth), granting and
//! releasing holds, ending leases, and what each namespace is charged against its project's
//! byte budget.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use super::views::{
    AcquireOutcome, AcquireReply, ContentionReason, HolderView, LockState, LockView, NamespaceView,
    Quotas, WaitSpec,
};
use super::waiters::{Waiter, WaiterUsage};
use super::{storage_exhausted, Result, MAX_BLOCKING_LOCKS};
use crate::budget::{self, Scratch};
use crate::error::CoreError;
use crate::Nanos;

/// Holders strictly below a path, by mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Counts {
    pub(super) shared: u32,
    pub(super) exclusive: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Holder {
    pub(super) exclusive: bool,
    pub(super) locked_at: Nanos,
    pub(super) metadata: BTreeMap<String, String>,
    /// Order of arrival among the lock's holders (one more than the latest when granted;
    /// a re-acquire keeps it): holders are listed in this order, as Grackle lists them.
    pub(super) arrival: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LockRecord {
    /// When the lock went from unlocked to locked.
    pub(super) locked_at: Nanos,
    /// Last acquire or release.
    pub(super) last_activity_at: Nanos,
    /// lease id → its hold. Never empty: a record is dropped with its last holder.
    pub(super) holders: BTreeMap<String, Holder>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Lease {
    pub(super) process_id: String,
    pub(super) created_at: Nanos,
    pub(super) expires_at: Nanos,
    /// lock name → exclusive?; what must be released when the lease ends.
    pub(super) holds: OrdMap<String, bool>,
    /// This lease's own holders below each path, subtracted from the namespace counters so a
    /// lease never blocks itself.
    pub(super) below: OrdMap<String, Counts>,
    /// (lock name, waiter id) of this lease's queued acquires, removed when the lease ends.
    #[serde(default)]
    pub(super) waiting: BTreeSet<(String, String)>,
}

/// One namespace and everything inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    pub(super) description: String,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) version: u64,
    pub(super) created_at: Nanos,
    pub(super) updated_at: Nanos,
    pub(super) leases: OrdMap<String, Lease>,
    /// Only held locks have a record.
    pub(super) locks: OrdMap<String, LockRecord>,
    /// All holders strictly below each path (the descendant index).
    pub(super) below: OrdMap<String, Counts>,
    /// lock name → FIFO of blocking acquires waiting for it. Part of the replicated state, so
    /// the order survives leader changes; never holds an empty queue.
    #[serde(default)]
    pub(super) waiters: OrdMap<String, VecDeque<Waiter>>,
    /// Ids of waiters that left a queue here (granted, dropped, cancelled) since the server
    /// last collected them ([`Hierarchy::take_resolved_waiters`]): it wakes exactly those
    /// calls instead of re-checking every waiting call after every apply.
    #[serde(skip)]
    pub(super) resolved: Scratch<Vec<String>>,
    /// What `waiters` use, kept up to date by enqueue and removal so the budget check costs
    /// O(1) per namespace; `None` (after decoding a snapshot) means "count it".
    #[serde(skip)]
    pub(super) usage: Scratch<Option<WaiterUsage>>,
    /// Bytes this namespace is charged against its project's byte budget (itself, its
    /// leases and holds; see [`budget`]), kept up to date by every change; `None` (after
    /// decoding) means "count it".
    #[serde(skip)]
    pub(super) stored: Scratch<Option<usize>>,
    /// The lock quota in force, so grants made while pumping the queue respect it too.
    #[serde(default = "default_lock_quota")]
    pub(super) lock_quota: usize,
}

pub(super) fn default_lock_quota() -> usize {
    Quotas::default().locks_per_namespace
}

/// The proper ancestors of a lock path, nearest last: `a/b/c` → `a`, `a/b`.
pub(super) fn ancestors(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('/').map(move |(i, _)| &name[..i])
}

/// Whether a hold is being recorded or forgotten in the descendant indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Add,
    Remove,
}

pub(super) fn bump(map: &mut OrdMap<String, Counts>, path: &str, exclusive: bool, change: Change) {
    let c = map.entry(path.to_string()).or_default();
    let slot = if exclusive {
        &mut c.exclusive
    } else {
        &mut c.shared
    };
    *slot = match change {
        Change::Add => *slot + 1,
        Change::Remove => slot.saturating_sub(1),
    };
    if *c == Counts::default() {
        map.remove(path);
    }
}

impl Namespace {
    /// What this namespace is charged against its project's byte budget.
    pub(super) fn stored_bytes(&self) -> usize {
        self.stored.0.unwrap_or_else(|| self.count_stored())
    }

    /// [`Namespace::stored_bytes`] counted from the records.
    pub(super) fn count_stored(&self) -> usize {
        let own = budget::namespace_bytes(&self.description, &self.metadata);
        let leases: usize = (self.leases.iter())
            .map(|(id, l)| budget::lease_bytes(id, &l.process_id))
            .sum();
        let holds: usize = (self.locks.iter())
            .flat_map(|(name, r)| r.holders.iter().map(move |(id, h)| (name, id, h)))
            .map(|(name, id, h)| budget::holder_bytes(name, id, &h.metadata))
            .sum();
        own + leases + holds
    }

    /// Records a change of `before` → `after` bytes in the kept total (if kept).
    pub(super) fn restate(&mut self, before: usize, after: usize) {
        if let Some(stored) = self.stored.0 {
            self.stored.0 = budget::restated(stored, before, after);
        }
    }

    pub(super) fn view(&self, name: &str) -> NamespaceView {
        NamespaceView {
            name: name.to_string(),
            description: self.description.clone(),
            metadata: self.metadata.clone(),
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    pub(super) fn lease_live(&self, lease_id: &str, now: Nanos) -> bool {
        self.leases
            .get(lease_id)
            .is_some_and(|l| now < l.expires_at)
    }

    /// The lock as seen at `now`: holders of leases that expired since the last apply are
    /// hidden (they will be reaped by the next command).
    pub(super) fn lock_view(&self, name: &str, now: Nanos) -> LockView {
        let Some(rec) = self.locks.get(name) else {
            return LockView::unlocked(name);
        };
        let mut holders: Vec<_> = rec
            .holders
            .iter()
            .filter(|(id, _)| self.lease_live(id, now))
            .collect();
        holders.sort_by_key(|(_, h)| h.arrival);
        if holders.is_empty() {
            return LockView {
                last_activity_at: rec.last_activity_at,
                ..LockView::unlocked(name)
            };
        }
        let state = if holders.iter().any(|(_, h)| h.exclusive) {
            LockState::ExclusiveLocked
        } else {
            LockState::SharedLocked
        };
        LockView {
            name: name.to_string(),
            state,
            locked_at: rec.locked_at,
            last_activity_at: rec.last_activity_at,
            lock_holders: holders
                .into_iter()
                .map(|(id, h)| HolderView {
                    lease_id: id.clone(),
                    locked_at: h.locked_at,
                    metadata: h.metadata.clone(),
                })
                .collect(),
        }
    }

    pub(super) fn conflicts(rec: &LockRecord, lease_id: &str, exclusive: bool) -> bool {
        rec.holders
            .iter()
            .any(|(id, h)| id != lease_id && (exclusive || h.exclusive))
    }

    /// Why `lease_id` may not take `name` in the given mode right now, with the blocking
    /// ancestor or descendant locks (at most 50); `None` when compatible.
    pub(super) fn contention(
        &self,
        lease_id: &str,
        name: &str,
        exclusive: bool,
        now: Nanos,
    ) -> Option<(ContentionReason, Vec<LockView>)> {
        if self
            .locks
            .get(name)
            .is_some_and(|r| Self::conflicts(r, lease_id, exclusive))
        {
            return Some((ContentionReason::Peer, vec![]));
        }
        let blocking: Vec<_> = ancestors(name)
            .filter(|a| {
                self.locks
                    .get(*a)
                    .is_some_and(|r| Self::conflicts(r, lease_id, exclusive))
            })
            .take(MAX_BLOCKING_LOCKS)
            .map(|a| self.lock_view(a, now))
            .collect();
        if !blocking.is_empty() {
            return Some((ContentionReason::Ancestor, blocking));
        }
        let total = self.below.get(name).copied().unwrap_or_default();
        let own = self
            .leases
            .get(lease_id)
            .and_then(|l| l.below.get(name).copied())
            .unwrap_or_default();
        let others_x = total.exclusive - own.exclusive;
        let others_s = total.shared - own.shared;
        let blocked = if exclusive {
            others_x + others_s > 0
        } else {
            others_x > 0
        };
        if !blocked {
            return None;
        }
        let prefix = format!("{name}/");
        let blocking = self
            .locks
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(_, r)| Self::conflicts(r, lease_id, exclusive))
            .take(MAX_BLOCKING_LOCKS)
            .map(|(k, _)| self.lock_view(k, now))
            .collect();
        Some((ContentionReason::Descendant, blocking))
    }

    /// Adds or removes one hold in both descendant indexes.
    pub(super) fn index_hold(
        &mut self,
        lease_id: &str,
        name: &str,
        exclusive: bool,
        change: Change,
    ) {
        let lease = self
            .leases
            .get_mut(lease_id)
            .expect("holder's lease exists");
        for a in ancestors(name) {
            bump(&mut self.below, a, exclusive, change);
            bump(&mut lease.below, a, exclusive, change);
        }
        match change {
            Change::Add => lease.holds.insert(name.to_string(), exclusive),
            Change::Remove => lease.holds.remove(name),
        };
    }

    /// Removes `lease_id`'s hold on `name` (no-op when it holds nothing there).
    pub(super) fn drop_hold(&mut self, lease_id: &str, name: &str, t: Nanos) {
        let Some(rec) = self.locks.get_mut(name) else {
            return;
        };
        let Some(holder) = rec.holders.remove(lease_id) else {
            return;
        };
        rec.last_activity_at = t;
        if rec.holders.is_empty() {
            self.locks.remove(name);
        }
        self.restate(budget::holder_bytes(name, lease_id, &holder.metadata), 0);
        self.index_hold(lease_id, name, holder.exclusive, Change::Remove);
        self.pump_around(name, t);
    }

    /// Releases every hold of a lease, drops its queued acquires, and forgets it.
    pub(super) fn end_lease(&mut self, lease_id: &str, t: Nanos) -> Option<Lease> {
        let waiting = std::mem::take(&mut self.leases.get_mut(lease_id)?.waiting);
        for (name, waiter_id) in waiting {
            self.remove_waiter(&name, &waiter_id);
            self.pump(&name, t);
        }
        let names: Vec<String> = self.leases.get(lease_id)?.holds.keys().cloned().collect();
        for name in names {
            self.drop_hold(lease_id, &name, t);
        }
        let lease = self.leases.remove(lease_id)?;
        self.restate(budget::lease_bytes(lease_id, &lease.process_id), 0);
        Some(lease)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn acquire(
        &mut self,
        lease_id: &str,
        name: &str,
        exclusive: bool,
        metadata: BTreeMap<String, String>,
        t: Nanos,
        quotas: &Quotas,
        wait: Option<(&WaitSpec, WaiterUsage)>,
        room: usize,
    ) -> Result<AcquireReply> {
        if !self.lease_live(lease_id, t) {
            return Err(CoreError::NotFound("lease".into()));
        }
        if let Some((spec, _)) = wait {
            if self.is_queued(name, &spec.waiter_id) {
                // A retry of a call that is already waiting keeps its place.
                return Ok(self.unavailable(lease_id, name, exclusive, t));
            }
        }
        // Holders change mode or refresh without queueing (a downgrade always succeeds); a
        // newcomer queues behind earlier waiters even when the holders would admit it.
        if self.would_wait(lease_id, name, exclusive, t) {
            if let Some((spec, usage)) = wait {
                self.enqueue(lease_id, name, exclusive, metadata, spec, usage)?;
            }
            return Ok(self.unavailable(lease_id, name, exclusive, t));
        }
        // Only a new holder adds bytes (a re-acquire keeps the holder's metadata).
        let new_holder = self
            .locks
            .get(name)
            .is_none_or(|r| !r.holders.contains_key(lease_id));
        if new_holder && budget::holder_bytes(name, lease_id, &metadata) > room {
            return Err(storage_exhausted());
        }
        self.grant(lease_id, name, exclusive, metadata, t, quotas)
    }

    /// Whether an acquire of `name` by `lease_id` cannot be granted now: a conflicting hold,
    /// or (for a newcomer) earlier waiters — a newcomer queues behind them even when the
    /// holders would admit it; holders change mode or refresh without queueing.
    pub(super) fn would_wait(&self, lease_id: &str, name: &str, exclusive: bool, t: Nanos) -> bool {
        let queued_ahead = self.holds(lease_id, name).is_none() && self.waiters.contains_key(name);
        queued_ahead || self.contention(lease_id, name, exclusive, t).is_some()
    }

    /// Which mode `lease_id` holds `name` in, if any.
    pub(super) fn holds(&self, lease_id: &str, name: &str) -> Option<bool> {
        self.leases.get(lease_id)?.holds.get(name).copied()
    }

    /// Whether `lease_id` holds `name` in the requested mode or a stronger one (an exclusive
    /// hold satisfies a shared request): what a granted waiter looks like.
    pub(super) fn holds_mode(&self, lease_id: &str, name: &str, exclusive: bool) -> bool {
        self.holds(lease_id, name).is_some_and(|x| x || !exclusive)
    }

    /// The UNAVAILABLE answer with current diagnostics (PEER when only the queue is ahead).
    pub(super) fn unavailable(
        &self,
        lease_id: &str,
        name: &str,
        exclusive: bool,
        t: Nanos,
    ) -> AcquireReply {
        let (reason, blocking_locks) = self
            .contention(lease_id, name, exclusive, t)
            .unwrap_or((ContentionReason::Peer, vec![]));
        AcquireReply {
            lock: self.lock_view(name, t),
            outcome: AcquireOutcome::Unavailable,
            reason,
            blocking_locks,
        }
    }

    /// Adds the hold (the caller has checked compatibility).
    pub(super) fn grant(
        &mut self,
        lease_id: &str,
        name: &str,
        exclusive: bool,
        metadata: BTreeMap<String, String>,
        t: Nanos,
        quotas: &Quotas,
    ) -> Result<AcquireReply> {
        if !self.locks.contains_key(name) && self.locks.len() >= quotas.locks_per_namespace {
            return Err(CoreError::ResourceExhausted(
                "namespace lock quota reached".into(),
            ));
        }
        let previous = self
            .locks
            .get(name)
            .and_then(|r| r.holders.get(lease_id))
            .map(|h| h.exclusive);
        let downgrade = previous == Some(true) && !exclusive;
        match previous {
            Some(was) if was != exclusive => {
                self.index_hold(lease_id, name, was, Change::Remove);
                self.index_hold(lease_id, name, exclusive, Change::Add);
            }
            Some(_) => {}
            None => self.index_hold(lease_id, name, exclusive, Change::Add),
        }
        let rec = self
            .locks
            .entry(name.to_string())
            .or_insert_with(|| LockRecord {
                locked_at: t,
                last_activity_at: t,
                holders: BTreeMap::new(),
            });
        rec.last_activity_at = t;
        // A re-acquire under the same lease refreshes `locked_at` (and the mode) only: the
        // holder keeps the metadata it acquired with, as Grackle documents.
        let (metadata, arrival) = match rec.holders.get(lease_id) {
            Some(h) => (h.metadata.clone(), h.arrival),
            None => {
                let latest = rec.holders.values().map(|h| h.arrival).max();
                (metadata, latest.map_or(0, |a| a + 1))
            }
        };
        let charge = budget::holder_bytes(name, lease_id, &metadata);
        let replaced = rec.holders.insert(
            lease_id.to_string(),
            Holder {
                exclusive,
                locked_at: t,
                metadata,
                arrival,
            },
        );
        let refund = replaced.map_or(0, |h| budget::holder_bytes(name, lease_id, &h.metadata));
        self.restate(refund, charge);
        if downgrade {
            self.pump_around(name, t);
        }
        Ok(AcquireReply {
            lock: self.lock_view(name, t),
            outcome: AcquireOutcome::Acquired,
            reason: ContentionReason::Unspecified,
            blocking_locks: vec![],
        })
    }
}
