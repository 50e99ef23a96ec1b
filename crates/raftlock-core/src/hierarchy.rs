//! §5 hierarchical locks: namespaces, lock leases and shared/exclusive locks on `/` paths.
//!
//! Compatibility: an exclusive hold on P blocks every other lease on P, its ancestors and its
//! descendants; a shared hold blocks other leases' exclusive locks there. A lease never blocks
//! itself. Checking ancestors costs O(depth) map lookups; descendants are checked through
//! per-path counters of the holders strictly below each path (minus the caller's own holds),
//! so no subtree is scanned unless a conflict exists and blockers must be listed.
//!
//! Expired leases are reaped at the start of every apply (through an index ordered by expiry),
//! so during an apply every stored holder belongs to a live lease. Queries take a `now` and
//! hide holders whose lease expired after the last apply.
//!
//! The big maps are persistent (`imbl::OrdMap`/`OrdSet`, structurally shared), so a
//! snapshot copies the whole hierarchy in O(1) and encodes the copy off the state lock; they
//! encode exactly as `BTreeMap`/`BTreeSet` (tests/encoding.rs). Small per-record maps stay
//! plain.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use imbl::{OrdMap, OrdSet};

use serde::{Deserialize, Serialize};

use crate::budget::{self, ProjectTotals, Scratch};
use crate::error::CoreError;
use crate::paging::{paginate, Page};
use crate::{validate, Nanos, SECOND};

/// Most blocking locks an acquire reports.
pub const MAX_BLOCKING_LOCKS: usize = 50;

type Result<T> = std::result::Result<T, CoreError>;

/// Quotas of §5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    pub locks_per_namespace: usize,
    pub leases_per_namespace: usize,
    pub namespaces_per_project: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            locks_per_namespace: 1_000_000,
            leases_per_namespace: 1_000_000,
            namespaces_per_project: 100_000,
        }
    }
}

/// State of a lock as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockState {
    #[serde(rename = "LOCK_STATE_UNLOCKED")]
    Unlocked,
    #[serde(rename = "LOCK_STATE_SHARED_LOCKED")]
    SharedLocked,
    #[serde(rename = "LOCK_STATE_EXCLUSIVE_LOCKED")]
    ExclusiveLocked,
}

/// Result of an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcquireOutcome {
    #[serde(rename = "ACQUIRE_OUTCOME_ACQUIRED")]
    Acquired,
    #[serde(rename = "ACQUIRE_OUTCOME_UNAVAILABLE")]
    Unavailable,
    #[serde(rename = "ACQUIRE_OUTCOME_TIMED_OUT")]
    TimedOut,
}

/// What blocked an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentionReason {
    #[serde(rename = "CONTENTION_REASON_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "CONTENTION_REASON_PEER")]
    Peer,
    #[serde(rename = "CONTENTION_REASON_ANCESTOR")]
    Ancestor,
    #[serde(rename = "CONTENTION_REASON_DESCENDANT")]
    Descendant,
}

/// One holder as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    pub lease_id: String,
    pub locked_at: Nanos,
    pub metadata: BTreeMap<String, String>,
}

/// A lock as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockView {
    pub name: String,
    pub state: LockState,
    pub locked_at: Nanos,
    pub last_activity_at: Nanos,
    pub lock_holders: Vec<HolderView>,
}

impl LockView {
    fn unlocked(name: &str) -> Self {
        LockView {
            name: name.to_string(),
            state: LockState::Unlocked,
            locked_at: 0,
            last_activity_at: 0,
            lock_holders: vec![],
        }
    }
}

/// Answer of `AcquireLock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireReply {
    pub lock: LockView,
    pub outcome: AcquireOutcome,
    pub reason: ContentionReason,
    pub blocking_locks: Vec<LockView>,
}

/// A lease as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    pub lease_id: String,
    pub process_id: String,
    pub created_at: Nanos,
    pub expires_at: Nanos,
}

/// A namespace as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceView {
    pub name: String,
    pub description: String,
    pub metadata: BTreeMap<String, String>,
    pub version: u64,
    pub created_at: Nanos,
    pub updated_at: Nanos,
}

/// Holders strictly below a path, by mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Counts {
    shared: u32,
    exclusive: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Holder {
    exclusive: bool,
    locked_at: Nanos,
    metadata: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LockRecord {
    /// When the lock went from unlocked to locked.
    locked_at: Nanos,
    /// Last acquire or release.
    last_activity_at: Nanos,
    /// lease id → its hold. Never empty: a record is dropped with its last holder.
    holders: BTreeMap<String, Holder>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lease {
    process_id: String,
    created_at: Nanos,
    expires_at: Nanos,
    /// lock name → exclusive?; what must be released when the lease ends.
    holds: OrdMap<String, bool>,
    /// This lease's own holders below each path, subtracted from the namespace counters so a
    /// lease never blocks itself.
    below: OrdMap<String, Counts>,
    /// (lock name, waiter id) of this lease's queued acquires, removed when the lease ends.
    #[serde(default)]
    waiting: BTreeSet<(String, String)>,
}

/// One queued blocking acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Waiter {
    /// Chosen by the proposer; lets a retried call find its place instead of queueing twice.
    id: String,
    lease_id: String,
    exclusive: bool,
    metadata: BTreeMap<String, String>,
    /// After this state-machine time the waiter is dropped (never granted).
    deadline: Nanos,
}

impl Waiter {
    /// Approximate bytes of replicated state this waiter keeps (names, ids, metadata, and
    /// the bookkeeping around them).
    fn bytes(&self, lock_name: &str) -> usize {
        waiter_bytes(lock_name, &self.lease_id, &self.id, &self.metadata)
    }
}

fn waiter_bytes(
    lock_name: &str,
    lease_id: &str,
    waiter_id: &str,
    metadata: &BTreeMap<String, String>,
) -> usize {
    let meta: usize = metadata.iter().map(|(k, v)| k.len() + v.len() + 48).sum();
    // The queue entry, the lease's index entry and the deadline index entry each name it.
    128 + 2 * lock_name.len() + 2 * waiter_id.len() + lease_id.len() + meta
}

/// How a blocking acquire should wait when it cannot be granted at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitSpec {
    pub waiter_id: String,
    /// State-machine time after which the waiter leaves the queue ungranted.
    pub deadline: Nanos,
}

/// Where a queued acquire stands (see [`Hierarchy::waiter_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitState {
    /// Still in the queue.
    Queued,
    /// Not queued and the lease holds the lock in (at least) the requested mode.
    Granted,
    /// Not queued and not granted (cancelled or past its deadline).
    Dropped,
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

/// (project, namespace) pairs whose `resolved` lists may hold ids, and the ids of waiters in
/// namespaces deleted since the server last collected them.
type Touched = (BTreeSet<(String, String)>, Vec<String>);

/// One namespace and everything inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    description: String,
    metadata: BTreeMap<String, String>,
    version: u64,
    created_at: Nanos,
    updated_at: Nanos,
    leases: OrdMap<String, Lease>,
    /// Only held locks have a record.
    locks: OrdMap<String, LockRecord>,
    /// All holders strictly below each path (the descendant index).
    below: OrdMap<String, Counts>,
    /// lock name → FIFO of blocking acquires waiting for it. Part of the replicated state, so
    /// the order survives leader changes; never holds an empty queue.
    #[serde(default)]
    waiters: OrdMap<String, VecDeque<Waiter>>,
    /// Ids of waiters that left a queue here (granted, dropped, cancelled) since the server
    /// last collected them ([`Hierarchy::take_resolved_waiters`]): it wakes exactly those
    /// calls instead of re-checking every waiting call after every apply.
    #[serde(skip)]
    resolved: Scratch<Vec<String>>,
    /// What `waiters` use, kept up to date by enqueue and removal so the budget check costs
    /// O(1) per namespace; `None` (after decoding a snapshot) means "count it".
    #[serde(skip)]
    usage: Scratch<Option<WaiterUsage>>,
    /// Bytes this namespace is charged against its project's byte budget (itself, its
    /// leases and holds; see [`budget`]), kept up to date by every change; `None` (after
    /// decoding) means "count it".
    #[serde(skip)]
    stored: Scratch<Option<usize>>,
    /// The lock quota in force, so grants made while pumping the queue respect it too.
    #[serde(default = "default_lock_quota")]
    lock_quota: usize,
}

fn default_lock_quota() -> usize {
    Quotas::default().locks_per_namespace
}

/// The proper ancestors of a lock path, nearest last: `a/b/c` → `a`, `a/b`.
fn ancestors(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('/').map(move |(i, _)| &name[..i])
}

fn bump(map: &mut OrdMap<String, Counts>, path: &str, exclusive: bool, up: bool) {
    let c = map.entry(path.to_string()).or_default();
    let slot = if exclusive {
        &mut c.exclusive
    } else {
        &mut c.shared
    };
    *slot = if up {
        *slot + 1
    } else {
        slot.saturating_sub(1)
    };
    if *c == Counts::default() {
        map.remove(path);
    }
}

impl Namespace {
    /// What this namespace is charged against its project's byte budget.
    fn stored_bytes(&self) -> usize {
        self.stored.0.unwrap_or_else(|| self.count_stored())
    }

    /// [`Namespace::stored_bytes`] counted from the records.
    fn count_stored(&self) -> usize {
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
    fn restate(&mut self, before: usize, after: usize) {
        if let Some(stored) = &mut self.stored.0 {
            *stored = *stored + after - before;
        }
    }

    fn view(&self, name: &str) -> NamespaceView {
        NamespaceView {
            name: name.to_string(),
            description: self.description.clone(),
            metadata: self.metadata.clone(),
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    fn lease_live(&self, lease_id: &str, now: Nanos) -> bool {
        self.leases
            .get(lease_id)
            .is_some_and(|l| now < l.expires_at)
    }

    /// The lock as seen at `now`: holders of leases that expired since the last apply are
    /// hidden (they will be reaped by the next command).
    fn lock_view(&self, name: &str, now: Nanos) -> LockView {
        let Some(rec) = self.locks.get(name) else {
            return LockView::unlocked(name);
        };
        let holders: Vec<_> = rec
            .holders
            .iter()
            .filter(|(id, _)| self.lease_live(id, now))
            .collect();
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

    fn conflicts(rec: &LockRecord, lease_id: &str, exclusive: bool) -> bool {
        rec.holders
            .iter()
            .any(|(id, h)| id != lease_id && (exclusive || h.exclusive))
    }

    /// Why `lease_id` may not take `name` in the given mode right now, with the blocking
    /// ancestor or descendant locks (at most 50); `None` when compatible.
    fn contention(
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
    fn index_hold(&mut self, lease_id: &str, name: &str, exclusive: bool, up: bool) {
        let lease = self
            .leases
            .get_mut(lease_id)
            .expect("holder's lease exists");
        for a in ancestors(name) {
            bump(&mut self.below, a, exclusive, up);
            bump(&mut lease.below, a, exclusive, up);
        }
        if up {
            lease.holds.insert(name.to_string(), exclusive);
        } else {
            lease.holds.remove(name);
        }
    }

    /// Removes `lease_id`'s hold on `name` (no-op when it holds nothing there).
    fn drop_hold(&mut self, lease_id: &str, name: &str, t: Nanos) {
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
        self.index_hold(lease_id, name, holder.exclusive, false);
        self.pump_around(name, t);
    }

    /// Releases every hold of a lease, drops its queued acquires, and forgets it.
    fn end_lease(&mut self, lease_id: &str, t: Nanos) -> Option<Lease> {
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
    fn acquire(
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
        let held = (self.locks.get(name))
            .and_then(|r| r.holders.get(lease_id))
            .map_or(0, |h| budget::holder_bytes(name, lease_id, &h.metadata));
        if budget::holder_bytes(name, lease_id, &metadata).saturating_sub(held) > room {
            return Err(storage_exhausted());
        }
        self.grant(lease_id, name, exclusive, metadata, t, quotas)
    }

    /// Whether an acquire of `name` by `lease_id` cannot be granted now: a conflicting hold,
    /// or (for a newcomer) earlier waiters — a newcomer queues behind them even when the
    /// holders would admit it; holders change mode or refresh without queueing.
    fn would_wait(&self, lease_id: &str, name: &str, exclusive: bool, t: Nanos) -> bool {
        let queued_ahead = self.holds(lease_id, name).is_none() && self.waiters.contains_key(name);
        queued_ahead || self.contention(lease_id, name, exclusive, t).is_some()
    }

    /// Refuses a new waiter of `bytes` on `name` for `lease_id` that would exceed a budget:
    /// per lease, per lock, and the project's count and bytes (`project_usage`).
    fn wait_budget(
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
    fn waiter_usage(&self) -> WaiterUsage {
        self.usage.0.unwrap_or_else(|| self.count_waiter_usage())
    }

    /// [`Namespace::waiter_usage`] counted from the queues.
    fn count_waiter_usage(&self) -> WaiterUsage {
        let mut usage = WaiterUsage::default();
        for (name, queue) in &self.waiters {
            usage.count += queue.len();
            usage.bytes += queue.iter().map(|w| w.bytes(name)).sum::<usize>();
        }
        usage
    }

    /// Which mode `lease_id` holds `name` in, if any.
    fn holds(&self, lease_id: &str, name: &str) -> Option<bool> {
        self.leases.get(lease_id)?.holds.get(name).copied()
    }

    /// Whether `lease_id` holds `name` in the requested mode or a stronger one (an exclusive
    /// hold satisfies a shared request): what a granted waiter looks like.
    fn holds_mode(&self, lease_id: &str, name: &str, exclusive: bool) -> bool {
        self.holds(lease_id, name).is_some_and(|x| x || !exclusive)
    }

    /// The UNAVAILABLE answer with current diagnostics (PEER when only the queue is ahead).
    fn unavailable(&self, lease_id: &str, name: &str, exclusive: bool, t: Nanos) -> AcquireReply {
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
    fn grant(
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
                self.index_hold(lease_id, name, was, false);
                self.index_hold(lease_id, name, exclusive, true);
            }
            Some(_) => {}
            None => self.index_hold(lease_id, name, exclusive, true),
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
        let charge = budget::holder_bytes(name, lease_id, &metadata);
        let replaced = rec.holders.insert(
            lease_id.to_string(),
            Holder {
                exclusive,
                locked_at: t,
                metadata,
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

    // ---- the waiter queue ------------------------------------------------------------------

    fn is_queued(&self, name: &str, waiter_id: &str) -> bool {
        self.waiters
            .get(name)
            .is_some_and(|q| q.iter().any(|w| w.id == waiter_id))
    }

    fn enqueue(
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
    fn remove_waiter(&mut self, name: &str, waiter_id: &str) -> bool {
        let Some(queue) = self.waiters.get_mut(name) else {
            return false;
        };
        let Some(pos) = queue.iter().position(|w| w.id == waiter_id) else {
            return false;
        };
        let waiter = queue.remove(pos).expect("position is valid");
        self.resolved.0.push(waiter.id.clone());
        if let Some(usage) = &mut self.usage.0 {
            usage.count -= 1;
            usage.bytes -= waiter.bytes(name);
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
    fn pump(&mut self, name: &str, t: Nanos) {
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
    fn pump_around(&mut self, name: &str, t: Nanos) {
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
    fn drop_expired_waiters(&mut self, name: &str, t: Nanos) {
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

/// All namespaces of all projects, plus the lease-expiry index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    /// project → namespace name → namespace.
    projects: OrdMap<String, OrdMap<String, Namespace>>,
    /// (expires_at, project, namespace, lease id), ordered by expiry so reaping costs what
    /// expires, not what exists.
    by_expiry: OrdSet<(Nanos, String, String, String)>,
    pub quotas: Quotas,
    /// (deadline, project, namespace, lock, waiter id) of queued acquires. Entries of waiters
    /// that were granted or cancelled earlier are skipped when their deadline comes.
    #[serde(default)]
    waiter_deadlines: OrdSet<(Nanos, String, String, String, String)>,
    /// Namespaces that had waiters when last changed, whose `resolved` lists may be non-empty;
    /// plus the waiter ids of deleted namespaces. Side channel, not state.
    #[serde(skip)]
    touched: Scratch<Touched>,
    /// What each project uses (stored bytes, queued waiters), so budget checks cost a
    /// lookup. Not state: counted again after decoding ([`Hierarchy::count_usage`]).
    #[serde(skip)]
    usage: Scratch<ProjectUsage>,
    /// The per-project byte budget: `None` is the release's
    /// [`budget::MAX_HIERARCHY_BYTES_PER_PROJECT`], the same on every node; tests lower it.
    #[serde(skip)]
    byte_quota: Scratch<Option<usize>>,
}

/// Per-project totals kept by [`Hierarchy::with_ns`], one per budget.
#[derive(Debug, Clone, Default)]
struct ProjectUsage {
    /// Bytes charged for namespaces, leases and holds ([`budget`]).
    stored: ProjectTotals,
    /// Queued blocking acquires.
    waiters: ProjectTotals,
    /// Bytes those waiters keep ([`Waiter::bytes`]).
    waiter_bytes: ProjectTotals,
}

impl ProjectUsage {
    /// Adds (or with [`ProjectUsage::remove`], takes away) what one namespace uses.
    fn add(&mut self, project: &str, ns: &Namespace) {
        let waiting = ns.waiter_usage();
        self.stored.add(project, ns.stored_bytes());
        self.waiters.add(project, waiting.count);
        self.waiter_bytes.add(project, waiting.bytes);
    }

    fn remove(&mut self, project: &str, ns: &Namespace) {
        let waiting = ns.waiter_usage();
        self.stored.sub(project, ns.stored_bytes());
        self.waiters.sub(project, waiting.count);
        self.waiter_bytes.sub(project, waiting.bytes);
    }

    fn counted() -> Self {
        ProjectUsage {
            stored: ProjectTotals::counted(BTreeMap::new()),
            waiters: ProjectTotals::counted(BTreeMap::new()),
            waiter_bytes: ProjectTotals::counted(BTreeMap::new()),
        }
    }
}

fn storage_exhausted() -> CoreError {
    CoreError::ResourceExhausted(
        "this project's namespaces, leases and locks use up its storage budget".into(),
    )
}

fn ns_not_found() -> CoreError {
    CoreError::NotFound("namespace".into())
}

fn lease_not_found() -> CoreError {
    CoreError::NotFound("lease".into())
}

impl Hierarchy {
    pub fn with_quotas(quotas: Quotas) -> Self {
        Hierarchy {
            quotas,
            usage: Scratch(ProjectUsage::counted()),
            ..Default::default()
        }
    }

    /// Lowers the per-project byte budget (tests).
    pub fn with_byte_quota(mut self, bytes: usize) -> Self {
        self.byte_quota.0 = Some(bytes);
        self
    }

    /// Bytes `project` is charged for its namespaces, leases and holds.
    pub fn stored_bytes(&self, project: &str) -> usize {
        self.usage.0.stored.get(project).unwrap_or_else(|| {
            let spaces = self
                .projects
                .get(project)
                .into_iter()
                .flat_map(|p| p.values());
            spaces.map(Namespace::stored_bytes).sum()
        })
    }

    /// Bytes `project` may still add within its budget.
    fn room(&self, project: &str) -> usize {
        let quota = (self.byte_quota.0).unwrap_or(budget::MAX_HIERARCHY_BYTES_PER_PROJECT);
        quota.saturating_sub(self.stored_bytes(project))
    }

    /// Counts every namespace's and project's bytes from the state, so later checks cost a
    /// lookup (after a snapshot was decoded).
    pub fn count_usage(&mut self) {
        let mut usage = ProjectUsage::counted();
        // Rebuilt rather than changed in place: a persistent map has no `values_mut`.
        let counted = self.projects.iter().map(|(project, spaces)| {
            let spaces: OrdMap<String, Namespace> = (spaces.iter())
                .map(|(name, ns)| {
                    let mut ns = ns.clone();
                    ns.stored.0 = Some(ns.count_stored());
                    ns.usage.0 = Some(ns.count_waiter_usage());
                    (name.clone(), ns)
                })
                .collect();
            for ns in spaces.values() {
                usage.add(project, ns);
            }
            (project.clone(), spaces)
        });
        self.projects = counted.collect();
        self.usage.0 = usage;
    }

    fn ns(&self, project: &str, name: &str) -> Result<&Namespace> {
        self.projects
            .get(project)
            .and_then(|p| p.get(name))
            .ok_or_else(ns_not_found)
    }

    /// Runs `change` on a namespace and charges its project for what that adds or frees:
    /// the one way to change a namespace, so the per-project byte totals stay exact.
    fn with_ns<R>(
        &mut self,
        project: &str,
        name: &str,
        change: impl FnOnce(&mut Namespace) -> Result<R>,
    ) -> Result<R> {
        let ns = self
            .projects
            .get_mut(project)
            .and_then(|p| p.get_mut(name))
            .ok_or_else(ns_not_found)?;
        // Only a namespace with waiters can resolve one.
        if !ns.waiters.is_empty() {
            self.touched
                .0
                 .0
                .insert((project.to_string(), name.to_string()));
        }
        let (bytes, waiting) = (ns.stored_bytes(), ns.waiter_usage());
        let out = change(ns);
        let usage = &mut self.usage.0;
        usage.stored.adjust(project, bytes, ns.stored_bytes());
        let now_waiting = ns.waiter_usage();
        usage
            .waiters
            .adjust(project, waiting.count, now_waiting.count);
        usage
            .waiter_bytes
            .adjust(project, waiting.bytes, now_waiting.bytes);
        out
    }

    /// Ids of queued acquires that left their queue (granted, dropped, cancelled, namespace
    /// deleted) since the last call. Not state: the server uses it to wake those calls.
    pub fn take_resolved_waiters(&mut self) -> Vec<String> {
        let (touched, deleted) = &mut self.touched.0;
        let mut ids = std::mem::take(deleted);
        for (project, name) in std::mem::take(touched) {
            if let Some(ns) = self
                .projects
                .get_mut(&project)
                .and_then(|p| p.get_mut(&name))
            {
                ids.append(&mut ns.resolved.0);
            }
        }
        ids
    }

    /// Ends every lease that expired at or before `t` (releasing its holds and queued
    /// acquires), and drops every queued acquire whose deadline has passed.
    pub fn reap(&mut self, t: Nanos) -> usize {
        while self
            .waiter_deadlines
            .get_min()
            .is_some_and(|first| first.0 <= t)
        {
            let (_, project, ns, lock, _) = self.waiter_deadlines.remove_min().expect("non-empty");
            // An absent namespace took its waiters with it.
            let _ = self.with_ns(&project, &ns, |ns| {
                ns.drop_expired_waiters(&lock, t);
                Ok(())
            });
        }
        let mut reaped = 0;
        while self.by_expiry.get_min().is_some_and(|first| first.0 <= t) {
            let (_, project, ns, lease_id) = self.by_expiry.remove_min().expect("non-empty");
            let _ = self.with_ns(&project, &ns, |ns| Ok(ns.end_lease(&lease_id, t)));
            reaped += 1;
        }
        reaped
    }

    pub fn create_namespace(
        &mut self,
        project: &str,
        name: &str,
        description: String,
        metadata: BTreeMap<String, String>,
        t: Nanos,
    ) -> Result<NamespaceView> {
        validate::simple_name("name", name)?;
        validate::description(&description)?;
        validate::metadata(&metadata)?;
        let quota = self.quotas.namespaces_per_project;
        let quota_locks = self.quotas.locks_per_namespace;
        let bytes = budget::namespace_bytes(&description, &metadata);
        let room = self.room(project);
        let spaces = self.projects.entry(project.to_string()).or_default();
        if spaces.contains_key(name) {
            return Err(CoreError::AlreadyExists("namespace".into()));
        }
        if spaces.len() >= quota {
            return Err(CoreError::ResourceExhausted(
                "project namespace quota reached".into(),
            ));
        }
        if bytes > room {
            return Err(storage_exhausted());
        }
        let ns = Namespace {
            description,
            metadata,
            version: 1,
            created_at: t,
            updated_at: t,
            leases: OrdMap::new(),
            locks: OrdMap::new(),
            below: OrdMap::new(),
            waiters: OrdMap::new(),
            resolved: Scratch::default(),
            usage: Scratch(Some(WaiterUsage::default())),
            stored: Scratch(Some(bytes)),
            lock_quota: quota_locks,
        };
        let view = ns.view(name);
        self.usage.0.add(project, &ns);
        spaces.insert(name.to_string(), ns);
        Ok(view)
    }

    pub fn update_namespace(
        &mut self,
        project: &str,
        name: &str,
        description: String,
        metadata: BTreeMap<String, String>,
        expected_version: Option<u64>,
        t: Nanos,
    ) -> Result<NamespaceView> {
        validate::simple_name("namespace_name", name)?;
        validate::description(&description)?;
        validate::metadata(&metadata)?;
        let room = self.room(project);
        self.with_ns(project, name, |ns| {
            let before = budget::namespace_bytes(&ns.description, &ns.metadata);
            let after = budget::namespace_bytes(&description, &metadata);
            if after.saturating_sub(before) > room {
                return Err(storage_exhausted());
            }
            if let Some(expected) = expected_version.filter(|v| *v != 0) {
                if expected != ns.version {
                    return Err(CoreError::invalid(
                        "expected_version",
                        format!(
                            "is {expected} but the namespace is at version {}",
                            ns.version
                        ),
                    ));
                }
            }
            ns.description = description;
            ns.metadata = metadata;
            ns.restate(before, after);
            ns.version += 1;
            ns.updated_at = t;
            Ok(ns.view(name))
        })
    }

    /// Deletes a namespace and everything in it; absent is not an error.
    pub fn delete_namespace(&mut self, project: &str, name: &str) -> Result<()> {
        validate::simple_name("namespace_name", name)?;
        let Some(spaces) = self.projects.get_mut(project) else {
            return Ok(());
        };
        let Some(ns) = spaces.remove(name) else {
            return Ok(());
        };
        self.usage.0.remove(project, &ns);
        let deleted = &mut self.touched.0 .1;
        deleted.extend(ns.resolved.0);
        deleted.extend(ns.waiters.values().flatten().map(|w| w.id.clone()));
        for (id, lease) in ns.leases {
            self.by_expiry
                .remove(&(lease.expires_at, project.to_string(), name.to_string(), id));
        }
        if spaces.is_empty() {
            self.projects.remove(project);
        }
        Ok(())
    }

    pub fn get_namespace(&self, project: &str, name: &str) -> Result<NamespaceView> {
        validate::simple_name("namespace_name", name)?;
        Ok(self.ns(project, name)?.view(name))
    }

    pub fn list_namespaces(
        &self,
        project: &str,
        token: &str,
        limit: u32,
    ) -> Result<(Vec<NamespaceView>, String, String)> {
        let limit = validate::page_limit(limit)?;
        let empty = OrdMap::new();
        let spaces = self.projects.get(project).unwrap_or(&empty);
        let Page {
            items,
            next_token,
            previous_token,
        } = paginate(spaces, token, limit, |_| true)?;
        Ok((
            items.into_iter().map(|(k, ns)| ns.view(k)).collect(),
            next_token,
            previous_token,
        ))
    }

    pub fn create_lease(
        &mut self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        process_id: &str,
        ttl_seconds: u64,
        t: Nanos,
    ) -> Result<LeaseView> {
        validate::simple_name("namespace_name", namespace)?;
        validate::process_id(process_id)?;
        validate::lease_ttl(ttl_seconds)?;
        let quota = self.quotas.leases_per_namespace;
        let room = self.room(project);
        let expires_at = t + ttl_seconds as Nanos * SECOND;
        self.with_ns(project, namespace, |ns| {
            if ns.leases.contains_key(lease_id) {
                return Err(CoreError::AlreadyExists("lease".into()));
            }
            if ns.leases.len() >= quota {
                return Err(CoreError::ResourceExhausted(
                    "namespace lease quota reached".into(),
                ));
            }
            let bytes = budget::lease_bytes(lease_id, process_id);
            if bytes > room {
                return Err(storage_exhausted());
            }
            let lease = Lease {
                process_id: process_id.to_string(),
                created_at: t,
                expires_at,
                holds: OrdMap::new(),
                below: OrdMap::new(),
                waiting: BTreeSet::new(),
            };
            ns.leases.insert(lease_id.to_string(), lease);
            ns.restate(0, bytes);
            Ok(())
        })?;
        self.by_expiry.insert((
            expires_at,
            project.into(),
            namespace.into(),
            lease_id.into(),
        ));
        Ok(LeaseView {
            lease_id: lease_id.to_string(),
            process_id: process_id.to_string(),
            created_at: t,
            expires_at,
        })
    }

    /// Extends a live lease to `t + ttl`. Expired leases are reaped before any apply, so an
    /// expired lease is already gone (its holders released) and this answers `not_found`.
    pub fn refresh_lease(
        &mut self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        ttl_seconds: u64,
        t: Nanos,
    ) -> Result<LeaseView> {
        validate::simple_name("namespace_name", namespace)?;
        validate::lease_ttl(ttl_seconds)?;
        let (old, view) = self.with_ns(project, namespace, |ns| {
            let lease = ns
                .leases
                .get_mut(lease_id)
                .filter(|l| t < l.expires_at)
                .ok_or_else(lease_not_found)?;
            let old = lease.expires_at;
            lease.expires_at = t + ttl_seconds as Nanos * SECOND;
            let view = LeaseView {
                lease_id: lease_id.to_string(),
                process_id: lease.process_id.clone(),
                created_at: lease.created_at,
                expires_at: lease.expires_at,
            };
            Ok((old, view))
        })?;
        let key = |at| {
            (
                at,
                project.to_string(),
                namespace.to_string(),
                lease_id.to_string(),
            )
        };
        self.by_expiry.remove(&key(old));
        self.by_expiry.insert(key(view.expires_at));
        Ok(view)
    }

    pub fn revoke_lease(
        &mut self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        t: Nanos,
    ) -> Result<()> {
        validate::simple_name("namespace_name", namespace)?;
        let lease = self.with_ns(project, namespace, |ns| {
            ns.end_lease(lease_id, t).ok_or_else(lease_not_found)
        })?;
        self.by_expiry.remove(&(
            lease.expires_at,
            project.into(),
            namespace.into(),
            lease_id.into(),
        ));
        Ok(())
    }

    pub fn get_lease(
        &self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        now: Nanos,
    ) -> Result<LeaseView> {
        validate::simple_name("namespace_name", namespace)?;
        let ns = self.ns(project, namespace)?;
        let lease = ns
            .leases
            .get(lease_id)
            .filter(|l| now < l.expires_at)
            .ok_or_else(lease_not_found)?;
        Ok(LeaseView {
            lease_id: lease_id.to_string(),
            process_id: lease.process_id.clone(),
            created_at: lease.created_at,
            expires_at: lease.expires_at,
        })
    }

    pub fn list_leases(
        &self,
        project: &str,
        namespace: &str,
        process_id: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<LeaseView>, String, String)> {
        validate::simple_name("namespace_name", namespace)?;
        let limit = validate::page_limit(limit)?;
        let ns = self.ns(project, namespace)?;
        let keep =
            |l: &Lease| now < l.expires_at && (process_id.is_empty() || l.process_id == process_id);
        let page = paginate(&ns.leases, token, limit, keep)?;
        let items = page
            .items
            .into_iter()
            .map(|(id, l)| LeaseView {
                lease_id: id.clone(),
                process_id: l.process_id.clone(),
                created_at: l.created_at,
                expires_at: l.expires_at,
            })
            .collect();
        Ok((items, page.next_token, page.previous_token))
    }

    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        exclusive: bool,
        lease_id: &str,
        metadata: BTreeMap<String, String>,
        t: Nanos,
        wait: Option<&WaitSpec>,
    ) -> Result<AcquireReply> {
        validate::simple_name("namespace_name", namespace)?;
        validate::lock_name(lock_name)?;
        validate::metadata(&metadata)?;
        if let Some(spec) = wait {
            validate::waiter_id(&spec.waiter_id)?;
        }
        let quotas = self.quotas;
        let usage = wait.map(|w| (w, self.waiter_usage(project)));
        let room = self.room(project);
        let (reply, newly_queued) = self.with_ns(project, namespace, |ns| {
            let queued_before = wait.is_some_and(|w| ns.is_queued(lock_name, &w.waiter_id));
            let reply = ns.acquire(
                lease_id, lock_name, exclusive, metadata, t, &quotas, usage, room,
            )?;
            let newly_queued =
                wait.filter(|w| !queued_before && ns.is_queued(lock_name, &w.waiter_id));
            Ok((reply, newly_queued))
        })?;
        if let Some(spec) = newly_queued {
            self.waiter_deadlines.insert((
                spec.deadline,
                project.to_string(),
                namespace.to_string(),
                lock_name.to_string(),
                spec.waiter_id.clone(),
            ));
        }
        Ok(reply)
    }

    /// Ends a queued acquire (its call reached its deadline or went away). Answers ACQUIRED
    /// when the waiter had already been granted, TIMED_OUT (with current diagnostics) when it
    /// is removed ungranted, so a call never reports TIMED_OUT for a lock it was given.
    #[allow(clippy::too_many_arguments)]
    pub fn cancel_wait(
        &mut self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        lease_id: &str,
        exclusive: bool,
        waiter_id: &str,
        t: Nanos,
    ) -> Result<AcquireReply> {
        validate::simple_name("namespace_name", namespace)?;
        validate::lock_name(lock_name)?;
        self.with_ns(project, namespace, |ns| {
            // Refuse before touching anything: a refused command changes nothing. (An expired
            // lease's waiters already left with it.)
            if !ns.lease_live(lease_id, t) {
                return Err(lease_not_found());
            }
            // Only the caller's own waiter may be cancelled, whatever id it names.
            let owned = ns.waiters.get(lock_name).is_some_and(|q| {
                q.iter()
                    .any(|w| w.id == waiter_id && w.lease_id == lease_id)
            });
            if owned && ns.remove_waiter(lock_name, waiter_id) {
                ns.pump(lock_name, t);
            }
            if ns.holds_mode(lease_id, lock_name, exclusive) {
                return Ok(AcquireReply {
                    lock: ns.lock_view(lock_name, t),
                    outcome: AcquireOutcome::Acquired,
                    reason: ContentionReason::Unspecified,
                    blocking_locks: vec![],
                });
            }
            let mut reply = ns.unavailable(lease_id, lock_name, exclusive, t);
            reply.outcome = AcquireOutcome::TimedOut;
            Ok(reply)
        })
    }

    /// Where a queued acquire stands, judged on the applied state at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn waiter_state(
        &self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        lease_id: &str,
        exclusive: bool,
        waiter_id: &str,
        now: Nanos,
    ) -> Result<WaitState> {
        let ns = self.ns(project, namespace)?;
        if !ns.lease_live(lease_id, now) {
            return Err(lease_not_found());
        }
        if ns.is_queued(lock_name, waiter_id) {
            return Ok(WaitState::Queued);
        }
        if ns.holds_mode(lease_id, lock_name, exclusive) {
            return Ok(WaitState::Granted);
        }
        Ok(WaitState::Dropped)
    }

    /// What `project`'s queued acquires use, over all its namespaces.
    pub fn waiter_usage(&self, project: &str) -> WaiterUsage {
        let kept = &self.usage.0;
        if let (Some(count), Some(bytes)) =
            (kept.waiters.get(project), kept.waiter_bytes.get(project))
        {
            return WaiterUsage { count, bytes };
        }
        let mut total = WaiterUsage::default();
        for ns in self
            .projects
            .get(project)
            .into_iter()
            .flat_map(|p| p.values())
        {
            let usage = ns.waiter_usage();
            total.count += usage.count;
            total.bytes += usage.bytes;
        }
        total
    }

    /// The budget check a blocking acquire meets when it has to wait, run by the server
    /// before proposing so a refused wait never reaches the log (apply checks again). `Ok`
    /// when the acquire would be granted now, or would queue within every budget.
    #[allow(clippy::too_many_arguments)]
    pub fn check_wait_budget(
        &self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        exclusive: bool,
        lease_id: &str,
        metadata: &BTreeMap<String, String>,
        spec: &WaitSpec,
        now: Nanos,
    ) -> Result<()> {
        let Ok(ns) = self.ns(project, namespace) else {
            return Ok(()); // apply answers not_found
        };
        if ns.is_queued(lock_name, &spec.waiter_id)
            || !ns.would_wait(lease_id, lock_name, exclusive, now)
        {
            return Ok(());
        }
        let bytes = waiter_bytes(lock_name, lease_id, &spec.waiter_id, metadata);
        ns.wait_budget(lease_id, lock_name, bytes, self.waiter_usage(project))
    }

    /// Number of queued acquires in all namespaces (metrics).
    pub fn waiter_count(&self) -> usize {
        let spaces = self.projects.values().flat_map(|p| p.values());
        spaces.map(|ns| ns.waiter_usage().count).sum()
    }

    /// Would `lease_id` be blocked on `lock_name` at `now`? (Used by waiting servers.)
    pub fn probe(
        &self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        exclusive: bool,
        lease_id: &str,
        now: Nanos,
    ) -> Result<Option<AcquireReply>> {
        let ns = self.ns(project, namespace)?;
        if !ns.lease_live(lease_id, now) {
            return Err(lease_not_found());
        }
        Ok(ns
            .contention(lease_id, lock_name, exclusive, now)
            .map(|(reason, blocking_locks)| AcquireReply {
                lock: ns.lock_view(lock_name, now),
                outcome: AcquireOutcome::Unavailable,
                reason,
                blocking_locks,
            }))
    }

    /// Releases the lease's hold on the lock; releasing what it does not hold is a no-op.
    pub fn release(
        &mut self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        lease_id: &str,
        t: Nanos,
    ) -> Result<LockView> {
        validate::simple_name("namespace_name", namespace)?;
        validate::lock_name(lock_name)?;
        self.with_ns(project, namespace, |ns| {
            let held = ns.holds(lease_id, lock_name).is_some();
            ns.drop_hold(lease_id, lock_name, t);
            let mut view = ns.lock_view(lock_name, t);
            if held && view.state == LockState::Unlocked {
                // The record went with its last holder; the answer still reports this release.
                view.last_activity_at = t;
            }
            Ok(view)
        })
    }

    /// Drops every holder of the lock; absent is not an error.
    pub fn delete_lock(
        &mut self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        t: Nanos,
    ) -> Result<()> {
        validate::simple_name("namespace_name", namespace)?;
        validate::lock_name(lock_name)?;
        self.with_ns(project, namespace, |ns| {
            let holders: Vec<String> = ns
                .locks
                .get(lock_name)
                .map(|r| r.holders.keys().cloned().collect())
                .unwrap_or_default();
            for lease_id in holders {
                ns.drop_hold(&lease_id, lock_name, t);
            }
            Ok(())
        })
    }

    pub fn get_lock(
        &self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        now: Nanos,
    ) -> Result<LockView> {
        validate::simple_name("namespace_name", namespace)?;
        validate::lock_name(lock_name)?;
        Ok(self.ns(project, namespace)?.lock_view(lock_name, now))
    }

    /// Held locks only.
    pub fn list_locks(
        &self,
        project: &str,
        namespace: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<LockView>, String, String)> {
        validate::simple_name("namespace_name", namespace)?;
        let limit = validate::page_limit(limit)?;
        let ns = self.ns(project, namespace)?;
        let keep = |r: &LockRecord| r.holders.keys().any(|id| ns.lease_live(id, now));
        let page = paginate(&ns.locks, token, limit, keep)?;
        let items = page
            .items
            .into_iter()
            .map(|(k, _)| ns.lock_view(k, now))
            .collect();
        Ok((items, page.next_token, page.previous_token))
    }

    /// Counts for metrics: (namespaces, live leases, held locks).
    pub fn totals(&self) -> (usize, usize, usize) {
        let spaces = self.projects.values().flat_map(|p| p.values());
        spaces.fold((0, 0, 0), |(n, l, k), ns| {
            (n + 1, l + ns.leases.len(), k + ns.locks.len())
        })
    }

    /// Every mutual-exclusion invariant, checked from scratch (tests and debug checks):
    /// no two leases hold incompatible locks on related paths, and the indexes match.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        for (project, spaces) in &self.projects {
            for (ns_name, ns) in spaces {
                if ns.waiter_usage() != ns.count_waiter_usage() {
                    return Err(format!("{project}/{ns_name}: waiter usage out of step"));
                }
                if ns.stored_bytes() != ns.count_stored() {
                    return Err(format!("{project}/{ns_name}: stored bytes out of step"));
                }
                let mut below: OrdMap<String, Counts> = OrdMap::new();
                for (name, rec) in &ns.locks {
                    if rec.holders.is_empty() {
                        return Err(format!("{project}/{ns_name}: empty record {name}"));
                    }
                    let x = rec.holders.values().filter(|h| h.exclusive).count();
                    if x > 0 && rec.holders.len() > 1 {
                        return Err(format!("{project}/{ns_name}: {name} exclusive with others"));
                    }
                    for (id, h) in &rec.holders {
                        if ns.leases.get(id).and_then(|l| l.holds.get(name)) != Some(&h.exclusive) {
                            return Err(format!("{name}: holder {id} not mirrored in its lease"));
                        }
                        for a in ancestors(name) {
                            bump(&mut below, a, h.exclusive, true);
                            if let Some(arec) = ns.locks.get(a) {
                                if arec
                                    .holders
                                    .iter()
                                    .any(|(aid, ah)| aid != id && (ah.exclusive || h.exclusive))
                                {
                                    return Err(format!(
                                        "{name} held by {id} conflicts with ancestor {a}"
                                    ));
                                }
                            }
                        }
                    }
                }
                for (name, queue) in &ns.waiters {
                    if queue.is_empty() {
                        return Err(format!("{project}/{ns_name}: empty queue on {name}"));
                    }
                    for w in queue {
                        let mirrored = ns
                            .leases
                            .get(&w.lease_id)
                            .is_some_and(|l| l.waiting.contains(&(name.clone(), w.id.clone())));
                        if !mirrored {
                            return Err(format!(
                                "{name}: waiter {} not mirrored in its lease",
                                w.id
                            ));
                        }
                    }
                }
                if below != ns.below {
                    return Err(format!("{project}/{ns_name}: descendant index out of date"));
                }
            }
            let counted: usize = spaces.values().map(Namespace::count_stored).sum();
            if self.stored_bytes(project) != counted {
                return Err(format!("{project}: stored bytes out of step"));
            }
            let mut waiting = WaiterUsage::default();
            for ns in spaces.values() {
                let usage = ns.count_waiter_usage();
                waiting.count += usage.count;
                waiting.bytes += usage.bytes;
            }
            if self.waiter_usage(project) != waiting {
                return Err(format!("{project}: waiter usage out of step"));
            }
        }
        let kept = &self.usage.0;
        let projects = (kept.stored.kept_projects())
            .chain(kept.waiters.kept_projects())
            .chain(kept.waiter_bytes.kept_projects());
        if let Some(p) = projects
            .into_iter()
            .find(|p| !self.projects.contains_key(*p))
        {
            return Err(format!("{p}: usage kept for a project with no namespace"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, HierOp, Op};
    use crate::StateMachine;

    const T0: Nanos = 1_700_000_000 * SECOND;
    const P: &str = "p";
    const NS: &str = "ns";

    fn s(n: i64) -> Nanos {
        T0 + n * SECOND
    }

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn inv(h: &Hierarchy) {
        h.check_invariants().expect("invariants hold");
    }

    /// A project with namespace `ns` and the given leases (process `proc`, TTL 300 s, at s(0)).
    fn setup(leases: &[&str]) -> Hierarchy {
        let mut h = Hierarchy::default();
        h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(0))
            .unwrap();
        for id in leases {
            h.create_lease(P, NS, id, "proc", 300, s(0)).unwrap();
        }
        inv(&h);
        h
    }

    fn acq(h: &mut Hierarchy, lease: &str, name: &str, exclusive: bool, t: Nanos) -> AcquireReply {
        let r = h
            .acquire(P, NS, name, exclusive, lease, BTreeMap::new(), t, None)
            .unwrap();
        inv(h);
        r
    }

    /// Setup acquire that must succeed.
    #[track_caller]
    fn hold(h: &mut Hierarchy, lease: &str, name: &str, exclusive: bool, t: Nanos) {
        let r = acq(h, lease, name, exclusive, t);
        assert!(
            acquired(&r),
            "setup acquire of {name} by {lease} refused: {r:?}"
        );
    }

    fn acquired(r: &AcquireReply) -> bool {
        r.outcome == AcquireOutcome::Acquired
    }

    fn holder_ids(v: &LockView) -> Vec<&str> {
        v.lock_holders.iter().map(|h| h.lease_id.as_str()).collect()
    }

    fn is_invalid(r: &std::result::Result<impl std::fmt::Debug, CoreError>, field: &str) -> bool {
        matches!(r, Err(CoreError::Invalid { field: f, .. }) if f == field)
    }

    // ---- namespaces ----------------------------------------------------------------------

    #[test]
    fn namespace_create_duplicate_get() {
        let mut h = Hierarchy::default();
        let v = h
            .create_namespace(P, NS, "d".into(), meta(&[("k", "v")]), s(1))
            .unwrap();
        assert_eq!(
            v,
            NamespaceView {
                name: NS.into(),
                description: "d".into(),
                metadata: meta(&[("k", "v")]),
                version: 1,
                created_at: s(1),
                updated_at: s(1),
            }
        );
        let before = h.clone();
        assert_eq!(
            h.create_namespace(P, NS, "other".into(), BTreeMap::new(), s(2)),
            Err(CoreError::AlreadyExists("namespace".into()))
        );
        assert_eq!(h, before, "a duplicate changes nothing");
        assert_eq!(h.get_namespace(P, NS), Ok(v));
        assert_eq!(
            h.get_namespace(P, "missing"),
            Err(CoreError::NotFound("namespace".into()))
        );
        assert_eq!(
            h.get_namespace("other-project", NS),
            Err(CoreError::NotFound("namespace".into()))
        );
        // Another project may use the same name independently.
        assert!(h
            .create_namespace("q", NS, String::new(), BTreeMap::new(), s(3))
            .is_ok());
        inv(&h);
    }

    #[test]
    fn namespace_update_replaces_bumps_version_and_checks_expected_version() {
        let mut h = Hierarchy::default();
        h.create_namespace(P, NS, "d".into(), meta(&[("a", "1"), ("b", "2")]), s(0))
            .unwrap();
        let v = h
            .update_namespace(P, NS, "d2".into(), meta(&[("c", "3")]), Some(1), s(5))
            .unwrap();
        assert_eq!(v.version, 2);
        assert_eq!(v.description, "d2");
        assert_eq!(v.metadata, meta(&[("c", "3")]), "full replacement");
        assert_eq!((v.created_at, v.updated_at), (s(0), s(5)));

        let before = h.clone();
        let stale = h.update_namespace(P, NS, "d3".into(), BTreeMap::new(), Some(1), s(6));
        assert!(is_invalid(&stale, "expected_version"), "{stale:?}");
        let ahead = h.update_namespace(P, NS, "d3".into(), BTreeMap::new(), Some(7), s(6));
        assert!(is_invalid(&ahead, "expected_version"), "{ahead:?}");
        assert_eq!(h, before, "a version mismatch changes nothing");

        // No expected version (absent or 0) always applies.
        assert_eq!(
            h.update_namespace(P, NS, "d3".into(), BTreeMap::new(), None, s(7))
                .unwrap()
                .version,
            3
        );
        assert_eq!(
            h.update_namespace(P, NS, "d4".into(), BTreeMap::new(), Some(0), s(8))
                .unwrap()
                .version,
            4
        );
        assert_eq!(
            h.update_namespace(P, "missing", String::new(), BTreeMap::new(), None, s(9)),
            Err(CoreError::NotFound("namespace".into()))
        );
        assert_eq!(h.get_namespace(P, NS).unwrap().version, 4);
        inv(&h);
    }

    #[test]
    fn namespace_delete_removes_everything_and_is_idempotent() {
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a/b", true, s(1));
        hold(&mut h, "l2", "c", false, s(1));
        h.delete_namespace(P, NS).unwrap();
        inv(&h);
        assert_eq!(
            h.get_namespace(P, NS),
            Err(CoreError::NotFound("namespace".into()))
        );
        assert!(h.by_expiry.is_empty(), "expiry index forgets its leases");
        assert!(h.projects.is_empty());
        assert_eq!(h.totals(), (0, 0, 0));
        // Idempotent.
        let before = h.clone();
        h.delete_namespace(P, NS).unwrap();
        h.delete_namespace("nobody", NS).unwrap();
        assert_eq!(h, before);
        // A namespace re-created with the same name starts empty.
        h.create_namespace(P, NS, String::new(), BTreeMap::new(), s(2))
            .unwrap();
        assert_eq!(
            h.get_lease(P, NS, "l1", s(2)),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(
            h.get_lock(P, NS, "a/b", s(2)).unwrap(),
            LockView::unlocked("a/b")
        );
        assert_eq!(h.reap(s(1000)), 0, "nothing left to reap");
        inv(&h);
    }

    #[test]
    fn namespace_list_paginates() {
        let mut h = Hierarchy::default();
        for i in 0..5 {
            h.create_namespace(P, &format!("n{i}"), String::new(), BTreeMap::new(), s(0))
                .unwrap();
        }
        h.create_namespace("q", "other", String::new(), BTreeMap::new(), s(0))
            .unwrap();
        let names = |v: &[NamespaceView]| v.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        let (p1, next, prev) = h.list_namespaces(P, "", 2).unwrap();
        assert_eq!(names(&p1), ["n0", "n1"]);
        assert!(prev.is_empty());
        let (p2, next, _) = h.list_namespaces(P, &next, 2).unwrap();
        assert_eq!(names(&p2), ["n2", "n3"]);
        let (p3, next3, prev3) = h.list_namespaces(P, &next, 2).unwrap();
        assert_eq!(names(&p3), ["n4"]);
        assert!(next3.is_empty());
        let (back, _, _) = h.list_namespaces(P, &prev3, 2).unwrap();
        assert_eq!(names(&back), ["n2", "n3"]);
        let (all, next, prev) = h.list_namespaces(P, "", 0).unwrap();
        assert_eq!(all.len(), 5, "0 means the maximum page");
        assert!(next.is_empty() && prev.is_empty());
        assert!(h.list_namespaces("nobody", "", 0).unwrap().0.is_empty());
        assert!(is_invalid(&h.list_namespaces(P, "", 101), "limit"));
        assert!(is_invalid(
            &h.list_namespaces(P, "zz", 1),
            "pagination_token"
        ));
    }

    // ---- leases --------------------------------------------------------------------------

    #[test]
    fn lease_create_and_get() {
        let mut h = setup(&[]);
        let v = h.create_lease(P, NS, "l1", "worker 1", 30, s(2)).unwrap();
        assert_eq!(
            v,
            LeaseView {
                lease_id: "l1".into(),
                process_id: "worker 1".into(),
                created_at: s(2),
                expires_at: s(32),
            }
        );
        assert_eq!(h.get_lease(P, NS, "l1", s(31)), Ok(v));
        assert_eq!(
            h.get_lease(P, NS, "l1", s(32)),
            Err(CoreError::NotFound("lease".into())),
            "expired at expires_at"
        );
        assert_eq!(
            h.get_lease(P, NS, "nope", s(3)),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(
            h.create_lease(P, "missing", "l2", "w", 30, s(2)),
            Err(CoreError::NotFound("namespace".into()))
        );
        let before = h.clone();
        assert_eq!(
            h.create_lease(P, NS, "l1", "w", 30, s(3)),
            Err(CoreError::AlreadyExists("lease".into()))
        );
        assert_eq!(h, before);
        inv(&h);
    }

    #[test]
    fn lease_refresh_sets_absolute_expiry() {
        let mut h = setup(&[]);
        h.create_lease(P, NS, "l1", "w", 30, s(0)).unwrap();
        hold(&mut h, "l1", "a", true, s(1));
        let v = h.refresh_lease(P, NS, "l1", 5, s(20)).unwrap();
        assert_eq!(v.expires_at, s(25), "t + ttl, not additive, may shorten");
        assert_eq!(v.created_at, s(0));
        assert_eq!(h.reap(s(25) - 1), 0);
        assert_eq!(
            h.get_lock(P, NS, "a", s(24)).unwrap().state,
            LockState::ExclusiveLocked,
            "locks follow the lease"
        );
        // Refresh does not count as lock activity.
        assert_eq!(
            h.get_lock(P, NS, "a", s(24)).unwrap().last_activity_at,
            s(1)
        );
        assert_eq!(h.reap(s(25)), 1, "the expiry index moved with the lease");
        assert_eq!(
            h.get_lock(P, NS, "a", s(25)).unwrap().state,
            LockState::Unlocked
        );
        inv(&h);
    }

    #[test]
    fn lease_refresh_of_expired_lease_releases_holders_and_is_not_found() {
        // Through the state machine: apply reaps before running the op.
        let mut sm = StateMachine::default();
        let hier = |op| Op::Hier {
            project: P.into(),
            op,
        };
        let out = sm.apply(&Command {
            stamp: s(0),
            ops: vec![
                hier(HierOp::CreateNamespace {
                    name: NS.into(),
                    description: String::new(),
                    metadata: BTreeMap::new(),
                }),
                hier(HierOp::CreateLease {
                    namespace: NS.into(),
                    lease_id: "l1".into(),
                    process_id: "w".into(),
                    ttl_seconds: 10,
                }),
                hier(HierOp::AcquireLock {
                    namespace: NS.into(),
                    lock_name: "a/b".into(),
                    exclusive: true,
                    lease_id: "l1".into(),
                    metadata: BTreeMap::new(),
                    wait: None,
                }),
            ],
        });
        assert!(out.iter().all(|o| o.is_ok()), "{out:?}");
        // Queried after expiry but before any apply: the holder is already hidden.
        let h = sm.hierarchy();
        assert_eq!(
            h.get_lock(P, NS, "a/b", s(10)).unwrap().state,
            LockState::Unlocked
        );
        assert!(h.list_locks(P, NS, "", 0, s(10)).unwrap().0.is_empty());
        let out = sm.apply(&Command {
            stamp: s(10),
            ops: vec![hier(HierOp::RefreshLease {
                namespace: NS.into(),
                lease_id: "l1".into(),
                ttl_seconds: 10,
            })],
        });
        assert_eq!(out, vec![Err(CoreError::NotFound("lease".into()))]);
        let h = sm.hierarchy();
        inv(h);
        assert_eq!(h.totals(), (1, 0, 0), "lease and its holds are gone");
        assert_eq!(
            h.get_lock(P, NS, "a/b", s(10)).unwrap().state,
            LockState::Unlocked
        );

        // Directly on the hierarchy, after the reap apply performs.
        let mut h = setup(&[]);
        h.create_lease(P, NS, "l1", "w", 10, s(0)).unwrap();
        hold(&mut h, "l1", "x", false, s(0));
        assert_eq!(
            h.refresh_lease(P, NS, "l1", 10, s(10)),
            Err(CoreError::NotFound("lease".into())),
            "expired even before the reap"
        );
        assert_eq!(h.reap(s(10)), 1);
        assert_eq!(
            h.refresh_lease(P, NS, "l1", 10, s(10)),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(h.totals(), (1, 0, 0));
        inv(&h);
    }

    #[test]
    fn lease_revoke_releases_everything() {
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", false, s(1));
        hold(&mut h, "l1", "z/b/c", true, s(1));
        hold(&mut h, "l1", "d", true, s(1));
        assert!(acquired(&acq(&mut h, "l2", "a", false, s(1))));
        h.revoke_lease(P, NS, "l1", s(2)).unwrap();
        inv(&h);
        assert_eq!(
            h.get_lease(P, NS, "l1", s(2)),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(
            h.get_lock(P, NS, "z/b/c", s(2)).unwrap().state,
            LockState::Unlocked
        );
        assert_eq!(
            h.get_lock(P, NS, "d", s(2)).unwrap().state,
            LockState::Unlocked
        );
        let a = h.get_lock(P, NS, "a", s(2)).unwrap();
        assert_eq!(holder_ids(&a), ["l2"]);
        assert_eq!(a.last_activity_at, s(2));
        assert_eq!(h.by_expiry.len(), 1);
        // l2 may now take what l1 held.
        assert!(acquired(&acq(&mut h, "l2", "z", true, s(3))));
        assert!(acquired(&acq(&mut h, "l2", "d", true, s(3))));
        assert_eq!(
            h.revoke_lease(P, NS, "l1", s(4)),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(
            h.revoke_lease(P, "missing", "l2", s(4)),
            Err(CoreError::NotFound("namespace".into()))
        );
        inv(&h);
    }

    #[test]
    fn lease_list_filters_expired_and_by_process() {
        let mut h = setup(&[]);
        h.create_lease(P, NS, "l1", "A", 10, s(0)).unwrap();
        h.create_lease(P, NS, "l2", "B", 300, s(0)).unwrap();
        h.create_lease(P, NS, "l3", "A", 300, s(0)).unwrap();
        h.create_lease(P, NS, "l4", "A", 300, s(0)).unwrap();
        let ids = |v: &[LeaseView]| v.iter().map(|l| l.lease_id.clone()).collect::<Vec<_>>();
        let (all, _, _) = h.list_leases(P, NS, "", "", 0, s(5)).unwrap();
        assert_eq!(ids(&all), ["l1", "l2", "l3", "l4"]);
        let (live, _, _) = h.list_leases(P, NS, "", "", 0, s(10)).unwrap();
        assert_eq!(
            ids(&live),
            ["l2", "l3", "l4"],
            "expired lease hidden before reap"
        );
        let (a, _, _) = h.list_leases(P, NS, "A", "", 0, s(10)).unwrap();
        assert_eq!(ids(&a), ["l3", "l4"]);
        let (a1, next, prev) = h.list_leases(P, NS, "A", "", 1, s(10)).unwrap();
        assert_eq!(ids(&a1), ["l3"]);
        assert!(
            prev.is_empty(),
            "the expired l1 does not count as a previous page"
        );
        let (a2, next2, _) = h.list_leases(P, NS, "A", &next, 1, s(10)).unwrap();
        assert_eq!(ids(&a2), ["l4"]);
        assert!(next2.is_empty());
        assert!(h
            .list_leases(P, NS, "C", "", 0, s(10))
            .unwrap()
            .0
            .is_empty());
        assert_eq!(
            h.list_leases(P, "missing", "", "", 0, s(10)),
            Err(CoreError::NotFound("namespace".into()))
        );
    }

    #[test]
    fn expired_lease_cannot_acquire() {
        let mut h = setup(&[]);
        h.create_lease(P, NS, "l1", "w", 5, s(0)).unwrap();
        assert_eq!(
            h.acquire(P, NS, "a", true, "l1", BTreeMap::new(), s(5), None),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(
            h.acquire(P, NS, "a", true, "nope", BTreeMap::new(), s(1), None),
            Err(CoreError::NotFound("lease".into()))
        );
        assert_eq!(
            h.acquire(P, "missing", "a", true, "l1", BTreeMap::new(), s(1), None),
            Err(CoreError::NotFound("namespace".into()))
        );
        assert_eq!(
            h.probe(P, NS, "a", true, "l1", s(5)),
            Err(CoreError::NotFound("lease".into()))
        );
        inv(&h);
    }

    // ---- compatibility -------------------------------------------------------------------

    /// How the held lock relates to the requested one.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Rel {
        Same,
        Ancestor,
        DeepAncestor,
        Descendant,
        DeepDescendant,
        Sibling,
        DeepSibling,
        Unrelated,
        NamePrefix,
    }

    const RELS: [Rel; 9] = [
        Rel::Same,
        Rel::Ancestor,
        Rel::DeepAncestor,
        Rel::Descendant,
        Rel::DeepDescendant,
        Rel::Sibling,
        Rel::DeepSibling,
        Rel::Unrelated,
        Rel::NamePrefix,
    ];

    /// (held path, requested path).
    fn paths(rel: Rel) -> (&'static str, &'static str) {
        match rel {
            Rel::Same => ("a/b", "a/b"),
            Rel::Ancestor => ("a", "a/b"),
            Rel::DeepAncestor => ("a", "a/b/c/d"),
            Rel::Descendant => ("a/b", "a"),
            Rel::DeepDescendant => ("a/b/c/d", "a"),
            Rel::Sibling => ("a/b", "a/c"),
            Rel::DeepSibling => ("a/b/c", "a/d/e"),
            Rel::Unrelated => ("x/y", "a/b"),
            // String prefixes that are not path prefixes never interfere.
            Rel::NamePrefix => ("a/b", "a/bc"),
        }
    }

    #[test]
    fn compatibility_matrix() {
        for holder_x in [true, false] {
            for req_x in [true, false] {
                for rel in RELS {
                    let (held, wanted) = paths(rel);
                    let case = format!("holder x={holder_x} requester x={req_x} {rel:?}");
                    let mut h = setup(&["l1", "l2"]);
                    assert!(acquired(&acq(&mut h, "l1", held, holder_x, s(1))));
                    let held_view = h.get_lock(P, NS, held, s(1)).unwrap();
                    let before = h.clone();
                    let r = acq(&mut h, "l2", wanted, req_x, s(2));
                    let related = !matches!(
                        rel,
                        Rel::Sibling | Rel::DeepSibling | Rel::Unrelated | Rel::NamePrefix
                    );
                    if related && (holder_x || req_x) {
                        let reason = match rel {
                            Rel::Same => ContentionReason::Peer,
                            Rel::Ancestor | Rel::DeepAncestor => ContentionReason::Ancestor,
                            _ => ContentionReason::Descendant,
                        };
                        assert_eq!(r.outcome, AcquireOutcome::Unavailable, "{case}");
                        assert_eq!(r.reason, reason, "{case}");
                        if reason == ContentionReason::Peer {
                            assert!(r.blocking_locks.is_empty(), "{case}");
                            assert_eq!(r.lock, held_view, "{case}");
                        } else {
                            assert_eq!(r.blocking_locks, vec![held_view.clone()], "{case}");
                            assert_eq!(r.lock, LockView::unlocked(wanted), "{case}");
                        }
                        assert_eq!(h, before, "{case}: a refused acquire changes nothing");
                        assert_eq!(
                            h.probe(P, NS, wanted, req_x, "l2", s(2)).unwrap(),
                            Some(r.clone()),
                            "{case}: probe agrees"
                        );
                    } else {
                        assert_eq!(r.outcome, AcquireOutcome::Acquired, "{case}");
                        assert_eq!(r.reason, ContentionReason::Unspecified, "{case}");
                        assert!(r.blocking_locks.is_empty(), "{case}");
                        assert!(holder_ids(&r.lock).contains(&"l2"), "{case}");
                        let state = if req_x {
                            LockState::ExclusiveLocked
                        } else {
                            LockState::SharedLocked
                        };
                        assert_eq!(r.lock.state, state, "{case}");
                        if rel == Rel::Same {
                            assert_eq!(holder_ids(&r.lock), ["l1", "l2"], "{case}");
                            assert_eq!(r.lock.locked_at, s(1), "{case}");
                            assert_eq!(r.lock.last_activity_at, s(2), "{case}");
                        }
                    }
                    // The same lease is never blocked by its own hold, in any mode.
                    let mut h = setup(&["l1"]);
                    hold(&mut h, "l1", held, holder_x, s(1));
                    let r = acq(&mut h, "l1", wanted, req_x, s(2));
                    assert!(acquired(&r), "{case} (same lease): {r:?}");
                }
            }
        }
    }

    #[test]
    fn same_lease_reacquire_refreshes_locked_at_and_metadata() {
        let mut h = setup(&["l1", "l2"]);
        let r = h
            .acquire(P, NS, "a", true, "l1", meta(&[("v", "1")]), s(1), None)
            .unwrap();
        assert_eq!(
            r.lock,
            LockView {
                name: "a".into(),
                state: LockState::ExclusiveLocked,
                locked_at: s(1),
                last_activity_at: s(1),
                lock_holders: vec![HolderView {
                    lease_id: "l1".into(),
                    locked_at: s(1),
                    metadata: meta(&[("v", "1")]),
                }],
            }
        );
        let r = h
            .acquire(P, NS, "a", true, "l1", meta(&[("v", "2")]), s(4), None)
            .unwrap();
        assert!(acquired(&r));
        assert_eq!(r.lock.lock_holders.len(), 1);
        assert_eq!(
            r.lock.lock_holders[0].locked_at,
            s(4),
            "holder locked_at refreshed"
        );
        assert_eq!(r.lock.lock_holders[0].metadata, meta(&[("v", "2")]));
        assert_eq!(r.lock.last_activity_at, s(4));
        inv(&h);
        // Shared, alongside another holder.
        hold(&mut h, "l1", "s", false, s(5));
        hold(&mut h, "l2", "s", false, s(6));
        let r = acq(&mut h, "l1", "s", false, s(7));
        assert!(acquired(&r));
        let l1 = r
            .lock
            .lock_holders
            .iter()
            .find(|x| x.lease_id == "l1")
            .unwrap();
        let l2 = r
            .lock
            .lock_holders
            .iter()
            .find(|x| x.lease_id == "l2")
            .unwrap();
        assert_eq!((l1.locked_at, l2.locked_at), (s(7), s(6)));
        assert_eq!(r.lock.state, LockState::SharedLocked);
    }

    #[test]
    fn downgrade_always_succeeds() {
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", true, s(1));
        hold(&mut h, "l1", "a/b", true, s(1));
        hold(&mut h, "l1", "a/b/c", true, s(1));
        for (name, t) in [("a/b", 2), ("a", 3), ("a/b/c", 4)] {
            let r = acq(&mut h, "l1", name, false, s(t));
            assert!(acquired(&r), "{name}");
            assert_eq!(r.lock.state, LockState::SharedLocked);
            assert_eq!(r.lock.lock_holders.len(), 1);
        }
        // Now only shared holds: others may share anywhere but not take exclusives.
        assert!(acquired(&acq(&mut h, "l2", "a/b", false, s(5))));
        assert!(acquired(&acq(&mut h, "l2", "a/b/c/d", false, s(5))));
        let r = acq(&mut h, "l2", "a/x", true, s(5));
        assert_eq!(
            (r.outcome, r.reason),
            (AcquireOutcome::Unavailable, ContentionReason::Ancestor)
        );
        assert_eq!(r.blocking_locks.len(), 1);
        assert_eq!(r.blocking_locks[0].name, "a");
        // Downgrade also succeeds while another lease shares a descendant.
        let r = acq(&mut h, "l1", "a", false, s(6));
        assert!(acquired(&r));
    }

    #[test]
    fn upgrade_succeeds_only_without_other_conflicting_holders() {
        // Alone: upgrade works.
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", false, s(1));
        hold(&mut h, "l1", "a/b", false, s(1));
        let r = acq(&mut h, "l1", "a", true, s(2));
        assert!(acquired(&r), "own shared descendant does not block");
        assert_eq!(r.lock.state, LockState::ExclusiveLocked);
        let r = acq(&mut h, "l1", "a/b", true, s(2));
        assert!(acquired(&r), "own exclusive ancestor does not block");

        // Peer: another shared holder on the same path.
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", false, s(1));
        hold(&mut h, "l2", "a", false, s(1));
        let before = h.clone();
        let r = acq(&mut h, "l1", "a", true, s(2));
        assert_eq!(
            (r.outcome, r.reason),
            (AcquireOutcome::Unavailable, ContentionReason::Peer)
        );
        assert!(r.blocking_locks.is_empty());
        assert_eq!(r.lock.state, LockState::SharedLocked);
        assert_eq!(h, before, "the shared hold stays as it was");

        // Descendant shared by another lease.
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", false, s(1));
        hold(&mut h, "l2", "a/b/c", false, s(1));
        let r = acq(&mut h, "l1", "a", true, s(2));
        assert_eq!(r.reason, ContentionReason::Descendant);
        assert_eq!(r.blocking_locks.len(), 1);
        assert_eq!(r.blocking_locks[0].name, "a/b/c");
        assert_eq!(holder_ids(&r.blocking_locks[0]), ["l2"]);

        // Ancestor shared by another lease.
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a/b", false, s(1));
        hold(&mut h, "l2", "a", false, s(1));
        let r = acq(&mut h, "l1", "a/b", true, s(2));
        assert_eq!(r.reason, ContentionReason::Ancestor);
        assert_eq!(r.blocking_locks[0].name, "a");
        // After the other lease lets go, the upgrade goes through.
        h.release(P, NS, "a", "l2", s(3)).unwrap();
        assert!(acquired(&acq(&mut h, "l1", "a/b", true, s(4))));
    }

    #[test]
    fn a_lease_never_blocks_itself() {
        let mut h = setup(&["l1", "l2"]);
        for (name, x) in [
            ("a", true),
            ("a/b", true),
            ("a/b/c", false),
            ("a/d", true),
            ("a/b/c/d", true),
            ("a", false),
            ("a", true),
            ("a/b/c", true),
        ] {
            assert!(acquired(&acq(&mut h, "l1", name, x, s(1))), "{name} x={x}");
        }
        for (name, reason) in [
            ("a", ContentionReason::Peer),
            ("a/b/c", ContentionReason::Peer),
            ("a/e", ContentionReason::Ancestor),
        ] {
            for x in [true, false] {
                let r = acq(&mut h, "l2", name, x, s(2));
                assert_eq!(
                    (r.outcome, r.reason),
                    (AcquireOutcome::Unavailable, reason),
                    "{name}"
                );
            }
        }
        // The nearest-first order is not promised, but every blocking ancestor is listed.
        let r = acq(&mut h, "l2", "a/b/c/d/e", false, s(2));
        let mut names: Vec<_> = r.blocking_locks.iter().map(|l| l.name.clone()).collect();
        names.sort();
        assert_eq!(names, ["a", "a/b", "a/b/c", "a/b/c/d"]);
        assert!(acquired(&acq(&mut h, "l2", "b", true, s(2))));
        // Releasing the ancestor keeps the descendants held.
        h.release(P, NS, "a", "l1", s(3)).unwrap();
        inv(&h);
        let r = acq(&mut h, "l2", "a", false, s(4));
        assert_eq!(r.reason, ContentionReason::Descendant);
        let mut names: Vec<_> = r.blocking_locks.iter().map(|l| l.name.clone()).collect();
        names.sort();
        assert_eq!(names, ["a/b", "a/b/c", "a/b/c/d", "a/d"]);
    }

    #[test]
    fn blocking_locks_are_capped_at_50() {
        let mut h = setup(&["x", "req"]);
        for i in 0..60 {
            hold(&mut h, "x", &format!("root/c{i:02}"), i % 2 == 0, s(1));
        }
        // Shared request: only the 30 exclusive descendants block.
        let r = acq(&mut h, "req", "root", false, s(2));
        assert_eq!(r.reason, ContentionReason::Descendant);
        assert_eq!(r.blocking_locks.len(), 30);
        // Exclusive request: all 60 block, 50 are reported.
        let r = acq(&mut h, "req", "root", true, s(2));
        assert_eq!(r.reason, ContentionReason::Descendant);
        assert_eq!(r.blocking_locks.len(), MAX_BLOCKING_LOCKS);
        assert!(r.blocking_locks.iter().all(|l| holder_ids(l) == ["x"]));

        // Sixty distinct leases, each holding one descendant.
        let ids: Vec<String> = (0..60).map(|i| format!("l{i}")).collect();
        let mut h = setup(&[]);
        for id in ids.iter().map(String::as_str).chain(["req"]) {
            h.create_lease(P, NS, id, "w", 300, s(0)).unwrap();
        }
        for (i, id) in ids.iter().enumerate() {
            hold(&mut h, id, &format!("root/x/c{i}"), true, s(1));
        }
        let r = acq(&mut h, "req", "root", false, s(2));
        assert_eq!(r.blocking_locks.len(), MAX_BLOCKING_LOCKS);
        assert_eq!(r.lock, LockView::unlocked("root"));
    }

    #[test]
    fn quotas_are_resource_exhausted() {
        let quotas = Quotas {
            locks_per_namespace: 2,
            leases_per_namespace: 2,
            namespaces_per_project: 2,
        };
        let mut h = Hierarchy::with_quotas(quotas);
        h.create_namespace(P, "n1", String::new(), BTreeMap::new(), s(0))
            .unwrap();
        h.create_namespace(P, "n2", String::new(), BTreeMap::new(), s(0))
            .unwrap();
        let before = h.clone();
        assert!(matches!(
            h.create_namespace(P, "n3", String::new(), BTreeMap::new(), s(0)),
            Err(CoreError::ResourceExhausted(_))
        ));
        assert_eq!(h, before);
        assert!(
            h.create_namespace("q", "n3", String::new(), BTreeMap::new(), s(0))
                .is_ok(),
            "quota is per project"
        );

        h.create_lease(P, "n1", "l1", "w", 300, s(0)).unwrap();
        h.create_lease(P, "n1", "l2", "w", 300, s(0)).unwrap();
        let before = h.clone();
        assert!(matches!(
            h.create_lease(P, "n1", "l3", "w", 300, s(0)),
            Err(CoreError::ResourceExhausted(_))
        ));
        assert_eq!(h, before);
        assert!(
            h.create_lease(P, "n2", "l3", "w", 300, s(0)).is_ok(),
            "per namespace"
        );
        h.revoke_lease(P, "n1", "l2", s(0)).unwrap();
        assert!(
            h.create_lease(P, "n1", "l3", "w", 300, s(0)).is_ok(),
            "room again"
        );

        let lock = |h: &mut Hierarchy, lease: &str, name: &str, x: bool| {
            h.acquire(P, "n1", name, x, lease, BTreeMap::new(), s(1), None)
        };
        assert!(lock(&mut h, "l1", "a", false).is_ok());
        assert!(lock(&mut h, "l1", "b", true).is_ok());
        let before = h.clone();
        assert!(matches!(
            lock(&mut h, "l1", "c", true),
            Err(CoreError::ResourceExhausted(_))
        ));
        assert_eq!(h, before);
        assert!(
            lock(&mut h, "l3", "a", false).is_ok(),
            "a new holder is not a new lock"
        );
        assert!(
            lock(&mut h, "l1", "b", false).is_ok(),
            "re-acquire is not a new lock"
        );
        // Contention is reported before the quota.
        let r = lock(&mut h, "l3", "b/x", true).unwrap();
        assert_eq!(r.reason, ContentionReason::Ancestor);
        h.release(P, "n1", "b", "l1", s(2)).unwrap();
        assert!(lock(&mut h, "l1", "c", true).is_ok());
        inv(&h);
    }

    #[test]
    fn release_of_what_is_not_held_is_a_no_op() {
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", true, s(1));
        let before = h.clone();
        let v = h.release(P, NS, "a", "l2", s(2)).unwrap();
        assert_eq!(holder_ids(&v), ["l1"]);
        assert_eq!(v.last_activity_at, s(1));
        let v = h.release(P, NS, "never", "l1", s(2)).unwrap();
        assert_eq!(v, LockView::unlocked("never"));
        h.release(P, NS, "a/b", "l1", s(2)).unwrap();
        h.release(P, NS, "a", "unknown-lease", s(2)).unwrap();
        assert_eq!(h, before);
        assert_eq!(
            h.release(P, "missing", "a", "l1", s(2)),
            Err(CoreError::NotFound("namespace".into()))
        );
        // A real release.
        let v = h.release(P, NS, "a", "l1", s(3)).unwrap();
        assert_eq!(v.state, LockState::Unlocked);
        assert!(v.lock_holders.is_empty());
        inv(&h);
        assert_eq!(h.totals(), (1, 2, 0));
    }

    #[test]
    fn release_of_one_shared_holder_keeps_the_others() {
        let mut h = setup(&["l1", "l2"]);
        hold(&mut h, "l1", "a", false, s(1));
        hold(&mut h, "l2", "a", false, s(2));
        let v = h.release(P, NS, "a", "l1", s(3)).unwrap();
        assert_eq!(holder_ids(&v), ["l2"]);
        assert_eq!((v.locked_at, v.last_activity_at), (s(1), s(3)));
        inv(&h);
    }

    #[test]
    fn delete_lock_drops_all_holders() {
        let mut h = setup(&["l1", "l2", "l3"]);
        for id in ["l1", "l2", "l3"] {
            hold(&mut h, id, "a", false, s(1));
        }
        hold(&mut h, "l1", "a/b", false, s(1));
        h.delete_lock(P, NS, "a", s(2)).unwrap();
        inv(&h);
        assert_eq!(
            h.get_lock(P, NS, "a", s(2)).unwrap(),
            LockView::unlocked("a")
        );
        assert_eq!(
            h.get_lock(P, NS, "a/b", s(2)).unwrap().state,
            LockState::SharedLocked
        );
        // The former holders no longer count as holders anywhere.
        let r = acq(&mut h, "l2", "a", true, s(3));
        assert_eq!(
            r.reason,
            ContentionReason::Descendant,
            "a/b still shared by l1"
        );
        h.delete_lock(P, NS, "a/b", s(3)).unwrap();
        assert!(acquired(&acq(&mut h, "l2", "a", true, s(3))));
        let before = h.clone();
        h.delete_lock(P, NS, "absent", s(4)).unwrap();
        assert_eq!(h, before, "absent is not an error");
        assert_eq!(
            h.delete_lock(P, "missing", "a", s(4)),
            Err(CoreError::NotFound("namespace".into()))
        );
        inv(&h);
    }

    #[test]
    fn list_locks_lists_held_only() {
        let mut h = setup(&["l1", "l2"]);
        h.create_lease(P, NS, "short", "w", 5, s(0)).unwrap();
        for name in ["a", "b", "c", "d"] {
            hold(&mut h, "l1", name, true, s(1));
        }
        hold(&mut h, "short", "e", true, s(1));
        h.release(P, NS, "b", "l1", s(2)).unwrap();
        let names = |v: &[LockView]| v.iter().map(|l| l.name.clone()).collect::<Vec<_>>();
        let (all, _, _) = h.list_locks(P, NS, "", 0, s(2)).unwrap();
        assert_eq!(names(&all), ["a", "c", "d", "e"]);
        let (after, _, _) = h.list_locks(P, NS, "", 0, s(5)).unwrap();
        assert_eq!(
            names(&after),
            ["a", "c", "d"],
            "holders of expired leases are hidden"
        );
        let (p1, next, _) = h.list_locks(P, NS, "", 2, s(5)).unwrap();
        assert_eq!(names(&p1), ["a", "c"]);
        let (p2, next2, prev2) = h.list_locks(P, NS, &next, 2, s(5)).unwrap();
        assert_eq!(names(&p2), ["d"]);
        assert!(next2.is_empty(), "the expired e does not make a next page");
        assert!(!prev2.is_empty());
        assert!(all.iter().all(|l| l.state == LockState::ExclusiveLocked));
        assert_eq!(
            h.list_locks(P, "missing", "", 0, s(5)),
            Err(CoreError::NotFound("namespace".into()))
        );
    }

    #[test]
    fn get_lock_of_never_acquired_is_unlocked_with_zero_times() {
        let h = setup(&["l1"]);
        let v = h.get_lock(P, NS, "never/acquired", s(1)).unwrap();
        assert_eq!(
            v,
            LockView {
                name: "never/acquired".into(),
                state: LockState::Unlocked,
                locked_at: 0,
                last_activity_at: 0,
                lock_holders: vec![],
            }
        );
        assert_eq!(
            h.get_lock(P, "missing", "a", s(1)),
            Err(CoreError::NotFound("namespace".into()))
        );
    }

    #[test]
    fn invalid_input_is_invalid_and_changes_nothing() {
        let mut h = setup(&["l1"]);
        hold(&mut h, "l1", "held", true, s(1));
        let before = h.clone();
        let big_meta: BTreeMap<String, String> =
            (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
        let long_value = meta(&[("k", &"v".repeat(257))]);
        let empty_key = meta(&[("", "v")]);
        let long_desc = "d".repeat(1025);
        let none = BTreeMap::new;

        let cases: Vec<(&str, std::result::Result<(), CoreError>)> = vec![
            (
                "name",
                h.create_namespace(P, "bad name", String::new(), none(), s(2))
                    .map(drop),
            ),
            (
                "name",
                h.create_namespace(P, "", String::new(), none(), s(2))
                    .map(drop),
            ),
            (
                "name",
                h.create_namespace(P, &"n".repeat(129), String::new(), none(), s(2))
                    .map(drop),
            ),
            (
                "description",
                h.create_namespace(P, "n2", long_desc.clone(), none(), s(2))
                    .map(drop),
            ),
            (
                "metadata",
                h.create_namespace(P, "n2", String::new(), big_meta.clone(), s(2))
                    .map(drop),
            ),
            (
                "metadata",
                h.create_namespace(P, "n2", String::new(), long_value.clone(), s(2))
                    .map(drop),
            ),
            (
                "metadata",
                h.create_namespace(P, "n2", String::new(), empty_key.clone(), s(2))
                    .map(drop),
            ),
            (
                "description",
                h.update_namespace(P, NS, long_desc, none(), None, s(2))
                    .map(drop),
            ),
            (
                "metadata",
                h.update_namespace(P, NS, String::new(), big_meta.clone(), None, s(2))
                    .map(drop),
            ),
            (
                "namespace_name",
                h.update_namespace(P, "a.b", String::new(), none(), None, s(2))
                    .map(drop),
            ),
            ("namespace_name", h.delete_namespace(P, "a/b")),
            (
                "namespace_name",
                h.create_lease(P, "x y", "l2", "w", 10, s(2)).map(drop),
            ),
            (
                "process_id",
                h.create_lease(P, NS, "l2", "", 10, s(2)).map(drop),
            ),
            (
                "process_id",
                h.create_lease(P, NS, "l2", "bad\nid", 10, s(2)).map(drop),
            ),
            (
                "process_id",
                h.create_lease(P, NS, "l2", &"p".repeat(129), 10, s(2))
                    .map(drop),
            ),
            (
                "ttl_seconds",
                h.create_lease(P, NS, "l2", "w", 0, s(2)).map(drop),
            ),
            (
                "ttl_seconds",
                h.create_lease(P, NS, "l2", "w", 301, s(2)).map(drop),
            ),
            (
                "ttl_seconds",
                h.refresh_lease(P, NS, "l1", 0, s(2)).map(drop),
            ),
            (
                "ttl_seconds",
                h.refresh_lease(P, NS, "l1", 301, s(2)).map(drop),
            ),
            ("namespace_name", h.revoke_lease(P, "", "l1", s(2))),
            (
                "lock_name",
                h.acquire(P, NS, "a//b", true, "l1", none(), s(2), None)
                    .map(drop),
            ),
            (
                "lock_name",
                h.acquire(P, NS, "/a", true, "l1", none(), s(2), None)
                    .map(drop),
            ),
            (
                "lock_name",
                h.acquire(P, NS, "a/", true, "l1", none(), s(2), None)
                    .map(drop),
            ),
            (
                "lock_name",
                h.acquire(P, NS, "a.b", true, "l1", none(), s(2), None)
                    .map(drop),
            ),
            (
                "lock_name",
                h.acquire(P, NS, &"a".repeat(257), true, "l1", none(), s(2), None)
                    .map(drop),
            ),
            (
                "metadata",
                h.acquire(P, NS, "a", true, "l1", big_meta, s(2), None)
                    .map(drop),
            ),
            (
                "metadata",
                h.acquire(P, NS, "held", true, "l1", long_value, s(2), None)
                    .map(drop),
            ),
            (
                "metadata",
                h.acquire(P, NS, "a", true, "l1", empty_key, s(2), None)
                    .map(drop),
            ),
            (
                "namespace_name",
                h.acquire(P, "b@d", "a", true, "l1", none(), s(2), None)
                    .map(drop),
            ),
            ("lock_name", h.release(P, NS, "held/", "l1", s(2)).map(drop)),
            ("lock_name", h.delete_lock(P, NS, "he ld", s(2))),
            ("lock_name", h.get_lock(P, NS, "", s(2)).map(drop)),
            ("limit", h.list_locks(P, NS, "", 101, s(2)).map(drop)),
            (
                "pagination_token",
                h.list_locks(P, NS, "nonsense", 1, s(2)).map(drop),
            ),
            ("limit", h.list_leases(P, NS, "", "", 101, s(2)).map(drop)),
            (
                "pagination_token",
                h.list_leases(P, NS, "", "6", 1, s(2)).map(drop),
            ),
        ];
        for (i, (field, r)) in cases.iter().enumerate() {
            assert!(
                is_invalid(r, field),
                "case {i}: expected Invalid on {field}, got {r:?}"
            );
        }
        assert_eq!(h, before, "invalid input changed the state");
        // Boundaries that are valid.
        assert!(h
            .create_lease(P, NS, "l2", &"p".repeat(128), 300, s(2))
            .is_ok());
        assert!(h
            .acquire(
                P,
                NS,
                &"a".repeat(256),
                true,
                "l2",
                meta(&[("k", &"v".repeat(256))]),
                s(2),
                None
            )
            .is_ok());
        inv(&h);
    }

    #[test]
    fn reap_releases_only_expired_leases() {
        let mut h = setup(&["long"]);
        h.create_lease(P, NS, "short", "w", 10, s(0)).unwrap();
        hold(&mut h, "short", "a", true, s(1));
        hold(&mut h, "long", "b", false, s(1));
        // Not yet reaped, queries at a later time already hide the expired holder.
        assert_eq!(
            h.get_lock(P, NS, "a", s(10)).unwrap().state,
            LockState::Unlocked
        );
        assert_eq!(h.reap(s(10) - 1), 0);
        assert_eq!(h.reap(s(10)), 1);
        inv(&h);
        assert_eq!(h.totals(), (1, 1, 1));
        assert!(acquired(&acq(&mut h, "long", "a/x", true, s(11))));
    }
}
