//! hierarchical locks: namespaces, lock leases and shared/exclusive locks on `/` paths.
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
//!
//! The operations trust their input's shape (names, sizes, TTLs): [`crate::command::HierOp::validate`]
//! checked it at the edge and apply checks it again before calling them. Queries check the
//! names they are given, as nothing before them does.

//! ## Layout
//! - [`views`]: the API-facing types (quotas, views, acquire answers, wait specs).
//! - `namespace`: one namespace — compatibility, descendant counters, grants, leases.
//! - `waiters`: the FIFO queue of blocking acquires and its budgets.
//! - `queries`: the read-only operations (get, list, where a queued acquire stands, counts).
//! - `invariants`: every invariant checked from scratch (tests and debug checks).
//! - `v2`: the layout of snapshot formats 1 and 2 (holders without arrival order), converted.
//! - this file: [`Hierarchy`] — routing to namespaces, the expiry indexes, per-project
//!   usage, and the operations that change state.

mod invariants;
mod namespace;
mod queries;
mod v2;
mod views;
mod waiters;

use std::collections::{BTreeMap, BTreeSet};

use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};

use crate::budget::{self, ProjectTotals, Scratch};
use crate::error::CoreError;
use crate::paging::list_page;
use crate::{Nanos, SECOND};

use namespace::{ancestors, bump, Change, Counts, Lease, LockRecord, Namespace};
pub use v2::HierarchyV2;
pub use views::{
    AcquireOutcome, AcquireReply, ContentionReason, HolderView, LeaseView, LockState, LockView,
    NamespaceView, QueuedAcquire, Quotas, WaitSpec, WaitState,
};
use waiters::waiter_bytes;
pub use waiters::{
    WaiterUsage, MAX_WAITERS_PER_LEASE, MAX_WAITERS_PER_LOCK, MAX_WAITERS_PER_PROJECT,
    MAX_WAITER_BYTES_PER_PROJECT,
};

/// Most blocking locks an acquire reports.
pub const MAX_BLOCKING_LOCKS: usize = 50;

pub(super) type Result<T> = std::result::Result<T, CoreError>;

/// (project, namespace) pairs whose `resolved` lists may hold ids, and the ids of waiters in
/// namespaces deleted since the server last collected them.
type Touched = (BTreeSet<(String, String)>, Vec<String>);

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

/// What one namespace uses of each budget: (stored bytes, queued waiters).
type NsUsage = (usize, WaiterUsage);

fn usage_of(ns: &Namespace) -> NsUsage {
    (ns.stored_bytes(), ns.waiter_usage())
}

impl ProjectUsage {
    /// Records that a namespace of `project` went from using `before` to using `after`
    /// (zero for a namespace created or deleted).
    fn restate(&mut self, project: &str, before: NsUsage, after: NsUsage) {
        self.stored.adjust(project, before.0, after.0);
        self.waiters.adjust(project, before.1.count, after.1.count);
        self.waiter_bytes
            .adjust(project, before.1.bytes, after.1.bytes);
    }

    fn add(&mut self, project: &str, ns: &Namespace) {
        self.restate(project, NsUsage::default(), usage_of(ns));
    }

    fn remove(&mut self, project: &str, ns: &Namespace) {
        self.restate(project, usage_of(ns), NsUsage::default());
    }

    fn counted() -> Self {
        ProjectUsage {
            stored: ProjectTotals::counted(BTreeMap::new()),
            waiters: ProjectTotals::counted(BTreeMap::new()),
            waiter_bytes: ProjectTotals::counted(BTreeMap::new()),
        }
    }
}

pub(super) fn storage_exhausted() -> CoreError {
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
        let before = usage_of(ns);
        let out = change(ns);
        self.usage.0.restate(project, before, usage_of(ns));
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
        let room = self.room(project);
        self.with_ns(project, name, |ns| {
            let before = budget::namespace_bytes(&ns.description, &ns.metadata);
            let after = budget::namespace_bytes(&description, &metadata);
            if after.saturating_sub(before) > room {
                return Err(storage_exhausted());
            }
            if let Some(expected) = expected_version.filter(|v| *v != 0) {
                if expected != ns.version {
                    return Err(CoreError::conflict(
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

    pub fn create_lease(
        &mut self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        process_id: &str,
        ttl_seconds: u64,
        t: Nanos,
    ) -> Result<LeaseView> {
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
    pub fn cancel_wait(
        &mut self,
        project: &str,
        namespace: &str,
        queued: QueuedAcquire<'_, bool>,
        t: Nanos,
    ) -> Result<AcquireReply> {
        self.with_ns(project, namespace, |ns| {
            // Refuse before touching anything: a refused command changes nothing. (An expired
            // lease's waiters already left with it.)
            if !ns.lease_live(queued.lease_id, t) {
                return Err(lease_not_found());
            }
            // Only the caller's own waiter may be cancelled, whatever id it names.
            let owned = ns.waiters.get(queued.name).is_some_and(|q| {
                q.iter()
                    .any(|w| w.id == queued.waiter_id && w.lease_id == queued.lease_id)
            });
            if owned && ns.remove_waiter(queued.name, queued.waiter_id) {
                ns.pump(queued.name, t);
            }
            if ns.holds_mode(queued.lease_id, queued.name, queued.asked) {
                return Ok(AcquireReply {
                    lock: ns.lock_view(queued.name, t),
                    outcome: AcquireOutcome::Acquired,
                    reason: ContentionReason::Unspecified,
                    blocking_locks: vec![],
                });
            }
            let mut reply = ns.unavailable(queued.lease_id, queued.name, queued.asked, t);
            reply.outcome = AcquireOutcome::TimedOut;
            Ok(reply)
        })
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

    /// Releases the lease's hold on the lock; releasing what it does not hold is a no-op.
    pub fn release(
        &mut self,
        project: &str,
        namespace: &str,
        lock_name: &str,
        lease_id: &str,
        t: Nanos,
    ) -> Result<LockView> {
        self.with_ns(project, namespace, |ns| {
            // As Grackle documents: releasing under a lease that does not exist (or expired)
            // is `not_found`; releasing what a live lease does not hold is a no-op.
            if !ns.lease_live(lease_id, t) {
                return Err(lease_not_found());
            }
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
}
