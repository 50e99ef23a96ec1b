//! Semaphores: named counters of `permits` inside a hierarchical namespace, held in
//! `weight`s by semaphore leases (Grackle's semaphore API).
//!
//! Rules: an acquire is all-or-none; the sum of the holders' weights never exceeds `permits`
//! (checked by every grant, and by `check_invariants` after every step of the property
//! tests); `permits` cannot be lowered below what is held; a blocking acquire joins the
//! semaphore's FIFO queue, and whatever frees permits (release, revoke, expiry, delete of a
//! waiter, a raised `permits`) grants from the head in the same apply. Every new hold gets a
//! fencing token, increasing across all semaphores of the cluster. A lease's holds and queued
//! acquires end with it (revoke or expiry; expiries are reaped at the start of each apply,
//! queries at a later `now` hide holders of leases expired since).
//!
//! The namespace itself belongs to [`crate::hierarchy`]: the [`crate::StateMachine`] checks
//! that it exists before any semaphore call and drops its semaphores when it is deleted.
//!
//! ## Layout
//! - `record`: one semaphore (holders, queue, grant rule) and one semaphore lease.
//! - this file: [`Semaphores`] — routing to namespaces, the expiry and deadline indexes,
//!   fencing tokens, the per-project byte budget, the operations.
//! - `queries`: what the API reads (semaphores, holders, leases, a waiter's standing).
//! - `invariants`: every invariant, checked from scratch.

mod invariants;
mod queries;
mod record;

use std::collections::{BTreeMap, BTreeSet};

use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};

pub use raftlock_api::semaphores::{
    AcquireSemaphoreResponse as SemAcquireReply, Semaphore as SemaphoreView,
    SemaphoreHolder as SemHolderView,
};

use crate::budget::{self, ByteBudget, Scratch};
use crate::error::CoreError;
use crate::hierarchy::{AcquireOutcome, LeaseView, QueuedAcquire, WaitSpec, WaitState};
use crate::paging::list_page;
use crate::{Nanos, SECOND};
use record::{holder_bytes, semaphore_bytes, waiter_bytes, SemLease, Semaphore, Waiter};

/// What a semaphore is created with or replaced by: the fields of its create and update
/// calls. Nested in those commands without changing their encoding: bincode writes a
/// struct's fields in order, exactly as if they stood in the command itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreSpec {
    pub description: String,
    pub permits: u64,
    pub metadata: BTreeMap<String, String>,
}

/// Most holders of one semaphore (Grackle caps `permits` at 1,000 instead; here weights may be
/// large, and the holders are what takes memory).
pub const MAX_HOLDERS_PER_SEMAPHORE: usize = 1_000;
/// Most queued acquires of one semaphore.
pub const MAX_WAITERS_PER_SEMAPHORE: usize = 1_000;
/// Most queued acquires of one semaphore lease.
pub const MAX_WAITERS_PER_SEMAPHORE_LEASE: usize = 64;
/// Most semaphores in one namespace (Grackle's limit).
pub const MAX_SEMAPHORES_PER_NAMESPACE: usize = 1_000_000;
/// Most semaphore leases in one namespace (Grackle's limit).
pub const MAX_SEMAPHORE_LEASES_PER_NAMESPACE: usize = 1_000_000;
/// Bytes of semaphores, semaphore leases, holds and queued acquires one project may keep.
pub const MAX_SEMAPHORE_BYTES_PER_PROJECT: usize = 256 << 20;

type Result<T> = std::result::Result<T, CoreError>;

/// Refuses a hold of `weight` on a semaphore of `permits`: it could never be granted, so it is
/// a conflict with the semaphore's state (what an acquire answers, and a waiting call whose
/// weight a lowered `permits` left behind).
pub fn check_weight_fits(weight: u64, permits: u64) -> Result<()> {
    if weight > permits {
        return Err(CoreError::conflict("weight", "exceeds semaphore permits"));
    }
    Ok(())
}

/// The semaphores and semaphore leases of one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Space {
    semaphores: OrdMap<String, Semaphore>,
    leases: OrdMap<String, SemLease>,
}

impl Space {
    fn is_empty(&self) -> bool {
        self.semaphores.is_empty() && self.leases.is_empty()
    }

    /// Bytes this namespace's semaphore state costs, counted from scratch.
    fn count_bytes(&self) -> usize {
        let leases: usize = (self.leases.iter())
            .map(|(id, l)| budget::lease_bytes(id, &l.process_id))
            .sum();
        let semaphores: usize = (self.semaphores.iter())
            .map(|(name, s)| {
                let holds: usize = (s.holders.iter())
                    .map(|(id, h)| holder_bytes(name, id, &h.metadata))
                    .sum();
                let queued: usize = s.queue.iter().map(|w| waiter_bytes(name, w)).sum();
                semaphore_bytes(name, &s.description, &s.metadata) + holds + queued
            })
            .sum();
        leases + semaphores
    }

    fn semaphore(&self, name: &str) -> Result<&Semaphore> {
        self.semaphores.get(name).ok_or_else(semaphore_not_found)
    }

    fn live_lease(&self, lease_id: &str, now: Nanos) -> Result<&SemLease> {
        (self.leases.get(lease_id))
            .filter(|l| now < l.expires_at)
            .ok_or_else(lease_not_found)
    }

    /// The semaphore and the leases, both mutable, after checking that both exist.
    fn semaphore_and_leases(
        &mut self,
        name: &str,
        lease_id: &str,
        t: Nanos,
    ) -> Result<(&mut Semaphore, &mut OrdMap<String, SemLease>)> {
        self.semaphore(name)?;
        self.live_lease(lease_id, t)?;
        let sem = self.semaphores.get_mut(name).expect("checked");
        Ok((sem, &mut self.leases))
    }
}

/// What is kept beside the namespaces: indexes, the token counter and the side channels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Book {
    /// (expires_at, project, namespace, lease id): reaping costs what expires.
    by_expiry: OrdSet<(Nanos, String, String, String)>,
    /// (deadline, project, namespace, semaphore, waiter id) of queued acquires; entries of
    /// waiters that left earlier are skipped when their time comes.
    deadlines: OrdSet<(Nanos, String, String, String, String)>,
    /// The last fencing token granted.
    last_token: u64,
    /// Bytes each project is charged (limit [`MAX_SEMAPHORE_BYTES_PER_PROJECT`]). Not
    /// state: counted again after decoding.
    #[serde(skip)]
    usage: Scratch<ByteBudget>,
    /// Waiters that left their queue since the server last collected them. Not state.
    #[serde(skip)]
    resolved: Scratch<Vec<String>>,
}

impl Book {
    fn next_fencing_token(&mut self) -> u64 {
        self.last_token += 1;
        self.last_token
    }

    fn used(&self, project: &str) -> usize {
        self.usage.0.used(project)
    }

    /// Whether `project` may add `bytes` within its budget.
    fn check_room(&self, project: &str, bytes: usize) -> Result<()> {
        let limit = MAX_SEMAPHORE_BYTES_PER_PROJECT;
        self.usage.0.check_room(project, bytes, limit, "semaphores")
    }

    /// Charges `bytes` to `project` if its budget has room.
    fn charge(&mut self, project: &str, bytes: usize) -> Result<()> {
        self.check_room(project, bytes)?;
        self.usage.0.charge(project, bytes);
        Ok(())
    }

    /// Charges without a budget check: a grant turning a queued acquire (charged more) into
    /// a hold.
    fn charge_granted(&mut self, project: &str, bytes: usize) {
        self.usage.0.charge(project, bytes);
    }

    fn refund(&mut self, project: &str, bytes: usize) {
        self.usage.0.refund(project, bytes);
    }

    fn resolve(&mut self, waiter_id: &str) {
        self.resolved.0.push(waiter_id.to_string());
    }
}

/// All semaphores of all projects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Semaphores {
    /// (project, namespace) → its semaphores and leases; absent when it has none.
    spaces: OrdMap<(String, String), Space>,
    book: Book,
}

fn semaphore_not_found() -> CoreError {
    CoreError::NotFound("semaphore".into())
}

fn lease_not_found() -> CoreError {
    CoreError::NotFound("lease".into())
}

fn key(project: &str, namespace: &str) -> (String, String) {
    (project.to_string(), namespace.to_string())
}

fn lease_view(lease_id: &str, l: &SemLease) -> LeaseView {
    LeaseView {
        lease_id: lease_id.to_string(),
        process_id: l.process_id.clone(),
        created_at: l.created_at,
        expires_at: l.expires_at,
    }
}

/// One semaphore acquire as the state machine applies it.
#[derive(Debug, Clone, Copy)]
pub struct AcquireArgs<'a> {
    pub semaphore: &'a str,
    pub lease_id: &'a str,
    pub weight: u64,
    pub metadata: &'a BTreeMap<String, String>,
    pub wait: Option<&'a WaitSpec>,
}

impl Semaphores {
    /// Lowers the per-project byte budget (tests).
    pub fn with_byte_quota(mut self, bytes: usize) -> Self {
        self.book.usage.0.set_quota(bytes);
        self
    }

    /// Runs `change` on a namespace's semaphore state (empty if it has none), keeping it only
    /// if something is left. `change` must leave the state untouched when it fails.
    fn with_space<T>(
        &mut self,
        project: &str,
        namespace: &str,
        change: impl FnOnce(&mut Space, &mut Book) -> Result<T>,
    ) -> Result<T> {
        let k = key(project, namespace);
        let mut space = self.spaces.remove(&k).unwrap_or_default();
        let out = change(&mut space, &mut self.book);
        if !space.is_empty() {
            self.spaces.insert(k, space);
        }
        out
    }

    fn space(&self, project: &str, namespace: &str) -> Option<&Space> {
        self.spaces.get(&key(project, namespace))
    }

    /// Ids of queued acquires that left their queue since the last call (granted, dropped,
    /// cancelled, deleted). Not state: the server wakes those calls.
    pub fn take_resolved_waiters(&mut self) -> Vec<String> {
        std::mem::take(&mut self.book.resolved.0)
    }

    /// Counts each project's bytes from the state (after a snapshot was decoded).
    pub fn count_usage(&mut self) {
        let mut usage = BTreeMap::new();
        for ((project, _), space) in self.spaces.iter() {
            *usage.entry(project.clone()).or_default() += space.count_bytes();
        }
        self.book.usage.0.recount(usage);
    }

    /// Moves the semaphore fencing tokens forward by `by` (a restore from a backup: holds
    /// granted after the backup was taken must not see their tokens handed out again).
    pub fn skip_fencing_tokens(&mut self, by: u64) -> Result<u64> {
        self.book.last_token = (self.book.last_token.checked_add(by)).ok_or_else(|| {
            CoreError::ResourceExhausted("semaphore fencing tokens would overflow".into())
        })?;
        Ok(self.book.last_token + 1)
    }

    /// The fencing token the next new hold gets.
    pub fn next_fencing_token(&self) -> u64 {
        self.book.last_token + 1
    }

    /// Bytes `project` is charged for its semaphore state.
    pub fn stored_bytes(&self, project: &str) -> usize {
        self.book.used(project)
    }

    /// Ends leases that expired at or before `t` and drops queued acquires past their
    /// deadline (granting whoever is next).
    pub fn reap(&mut self, t: Nanos) {
        // Leases first: their holds are released before any queue is pumped, so no grant in
        // this apply goes to a lease that is already over.
        while (self.book.by_expiry.get_min()).is_some_and(|first| first.0 <= t) {
            let (_, project, ns, lease_id) = self.book.by_expiry.remove_min().expect("non-empty");
            let _ = self.with_space(&project, &ns, |space, book| {
                end_lease(space, book, &project, &lease_id, t);
                Ok(())
            });
        }
        while (self.book.deadlines.get_min()).is_some_and(|first| first.0 <= t) {
            let (_, project, ns, name, waiter_id) =
                self.book.deadlines.remove_min().expect("non-empty");
            let _ = self.with_space(&project, &ns, |space, book| {
                if let Some(sem) = space.semaphores.get_mut(&name) {
                    sem.dequeue(&name, &mut space.leases, &waiter_id, book, &project);
                    sem.pump(&name, &mut space.leases, book, &project, t);
                }
                Ok(())
            });
        }
    }

    /// Drops a deleted namespace's semaphores and leases; their waiting calls are woken.
    pub fn delete_namespace(&mut self, project: &str, namespace: &str) {
        let Some(space) = self.spaces.remove(&key(project, namespace)) else {
            return;
        };
        self.book.refund(project, space.count_bytes());
        for sem in space.semaphores.values() {
            for w in &sem.queue {
                self.book.resolve(&w.waiter_id);
            }
        }
        for (id, lease) in space.leases.iter() {
            let entry = (
                lease.expires_at,
                project.into(),
                namespace.into(),
                id.clone(),
            );
            self.book.by_expiry.remove(&entry);
        }
    }

    pub fn create_semaphore(
        &mut self,
        project: &str,
        namespace: &str,
        name: &str,
        spec: &SemaphoreSpec,
        t: Nanos,
    ) -> Result<SemaphoreView> {
        self.with_space(project, namespace, |space, book| {
            if space.semaphores.contains_key(name) {
                return Err(CoreError::AlreadyExists("semaphore".into()));
            }
            if space.semaphores.len() >= MAX_SEMAPHORES_PER_NAMESPACE {
                return Err(CoreError::ResourceExhausted(
                    "namespace semaphore quota reached".into(),
                ));
            }
            book.charge(
                project,
                semaphore_bytes(name, &spec.description, &spec.metadata),
            )?;
            let sem = Semaphore {
                description: spec.description.clone(),
                permits: spec.permits,
                metadata: spec.metadata.clone(),
                version: 1,
                created_at: t,
                updated_at: t,
                last_activity_at: t,
                holders: BTreeMap::new(),
                queue: Default::default(),
            };
            let view = sem.view(name, &space.leases, t);
            space.semaphores.insert(name.to_string(), sem);
            Ok(view)
        })
    }

    /// Replaces description, permits and metadata if `expected_version` is current and the
    /// new `permits` is at least what is held. Queued acquires heavier than the new `permits`
    /// are dropped wherever they wait; a raise grants from the queue.
    pub fn update_semaphore(
        &mut self,
        project: &str,
        namespace: &str,
        name: &str,
        spec: &SemaphoreSpec,
        expected_version: Option<u64>,
        t: Nanos,
    ) -> Result<SemaphoreView> {
        self.with_space(project, namespace, |space, book| {
            let sem = space.semaphore(name)?;
            CoreError::check_version(expected_version, sem.version)?;
            let held = sem.active();
            if spec.permits < held {
                return Err(CoreError::conflict(
                    "permits",
                    format!("must be at least active_holds ({held})"),
                ));
            }
            let old = semaphore_bytes(name, &sem.description, &sem.metadata);
            let new = semaphore_bytes(name, &spec.description, &spec.metadata);
            if new > old {
                book.charge(project, new - old)?;
            } else {
                book.refund(project, old - new);
            }
            let sem = space.semaphores.get_mut(name).expect("checked");
            sem.description = spec.description.clone();
            sem.permits = spec.permits;
            sem.metadata = spec.metadata.clone();
            sem.version += 1;
            sem.updated_at = t;
            sem.drop_heavier_than_permits(name, &mut space.leases, book, project);
            sem.pump(name, &mut space.leases, book, project, t);
            Ok(sem.view(name, &space.leases, t))
        })
    }

    /// Drops a semaphore with its holders and queued acquires; absent is not an error.
    pub fn delete_semaphore(&mut self, project: &str, namespace: &str, name: &str) {
        let _ = self.with_space(project, namespace, |space, book| {
            let Some(mut sem) = space.semaphores.remove(name) else {
                return Ok(());
            };
            let waiting: Vec<String> = sem.queue.iter().map(|w| w.waiter_id.clone()).collect();
            for id in waiting {
                sem.dequeue(name, &mut space.leases, &id, book, project);
            }
            let holders: Vec<String> = sem.holders.keys().cloned().collect();
            for id in holders {
                if let Some(lease) = space.leases.get_mut(&id) {
                    sem.release(name, lease, &id, book, project);
                }
            }
            book.refund(
                project,
                semaphore_bytes(name, &sem.description, &sem.metadata),
            );
            Ok(())
        });
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
        let expires_at = t + ttl_seconds as Nanos * SECOND;
        let view = self.with_space(project, namespace, |space, book| {
            if space.leases.contains_key(lease_id) {
                return Err(CoreError::AlreadyExists("lease".into()));
            }
            if space.leases.len() >= MAX_SEMAPHORE_LEASES_PER_NAMESPACE {
                return Err(CoreError::ResourceExhausted(
                    "namespace semaphore lease quota reached".into(),
                ));
            }
            book.charge(project, budget::lease_bytes(lease_id, process_id))?;
            let lease = SemLease {
                process_id: process_id.to_string(),
                created_at: t,
                expires_at,
                holds: BTreeSet::new(),
                waits: BTreeSet::new(),
            };
            let view = lease_view(lease_id, &lease);
            space.leases.insert(lease_id.to_string(), lease);
            Ok(view)
        })?;
        (self.book.by_expiry).insert((
            expires_at,
            project.into(),
            namespace.into(),
            lease_id.into(),
        ));
        Ok(view)
    }

    /// Extends a live lease to `t + ttl`; an expired lease was reaped and is `not_found`.
    pub fn refresh_lease(
        &mut self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        ttl_seconds: u64,
        t: Nanos,
    ) -> Result<LeaseView> {
        let (old, view) = self.with_space(project, namespace, |space, _| {
            space.live_lease(lease_id, t)?;
            let lease = space.leases.get_mut(lease_id).expect("checked");
            let old = lease.expires_at;
            lease.expires_at = t + ttl_seconds as Nanos * SECOND;
            Ok((old, lease_view(lease_id, lease)))
        })?;
        let entry = |at| {
            (
                at,
                project.to_string(),
                namespace.to_string(),
                lease_id.to_string(),
            )
        };
        self.book.by_expiry.remove(&entry(old));
        self.book.by_expiry.insert(entry(view.expires_at));
        Ok(view)
    }

    /// Ends a lease: releases its holds and drops its queued acquires.
    pub fn revoke_lease(
        &mut self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        t: Nanos,
    ) -> Result<()> {
        let expires_at = self.with_space(project, namespace, |space, book| {
            end_lease(space, book, project, lease_id, t).ok_or_else(lease_not_found)
        })?;
        let entry = (
            expires_at,
            project.into(),
            namespace.into(),
            lease_id.into(),
        );
        self.book.by_expiry.remove(&entry);
        Ok(())
    }

    /// Acquire (see the module rules). A lease that holds at least `weight` is re-set to
    /// `weight` at once; otherwise the acquire is granted only if nobody is queued and it
    /// fits, else it is UNAVAILABLE or, with `wait`, queued.
    pub fn acquire(
        &mut self,
        project: &str,
        namespace: &str,
        a: AcquireArgs<'_>,
        t: Nanos,
    ) -> Result<SemAcquireReply> {
        let name = a.semaphore;
        let outcome = self.with_space(project, namespace, |space, book| {
            let (sem, leases) = space.semaphore_and_leases(name, a.lease_id, t)?;
            check_weight_fits(a.weight, sem.permits)?;
            if a.wait.is_some_and(|w| sem.is_queued(&w.waiter_id)) {
                return Ok((AcquireOutcome::Unavailable, 0));
            }
            let held = sem.weight_of(a.lease_id);
            let at_once = (held > 0 && a.weight <= held)
                || (sem.queue.is_empty() && sem.fits(a.lease_id, a.weight));
            if at_once {
                if held == 0 && sem.holders.len() >= MAX_HOLDERS_PER_SEMAPHORE {
                    return Err(CoreError::ResourceExhausted(
                        "semaphore holder quota reached".into(),
                    ));
                }
                if held == 0 {
                    book.check_room(project, holder_bytes(name, a.lease_id, a.metadata))?;
                }
                let lease = leases.get_mut(a.lease_id).expect("checked");
                let token = sem.grant(
                    name, lease, a.lease_id, a.weight, a.metadata, book, project, t,
                );
                sem.last_activity_at = t;
                sem.pump(name, leases, book, project, t);
                return Ok((AcquireOutcome::Acquired, token));
            }
            let Some(spec) = a.wait else {
                sem.last_activity_at = t;
                return Ok((AcquireOutcome::Unavailable, 0));
            };
            if spec.deadline <= t {
                sem.last_activity_at = t;
                return Ok((AcquireOutcome::TimedOut, 0));
            }
            enqueue(sem, leases, book, project, name, a, spec)?;
            sem.last_activity_at = t;
            Ok((AcquireOutcome::Unavailable, 0))
        })?;
        if let (Some(spec), AcquireOutcome::Unavailable) = (a.wait, outcome.0) {
            self.book.deadlines.insert((
                spec.deadline,
                project.into(),
                namespace.into(),
                name.into(),
                spec.waiter_id.clone(),
            ));
        }
        self.acquire_reply(project, namespace, name, outcome, t)
    }

    fn acquire_reply(
        &self,
        project: &str,
        namespace: &str,
        name: &str,
        (outcome, fencing_token): (AcquireOutcome, u64),
        now: Nanos,
    ) -> Result<SemAcquireReply> {
        Ok(SemAcquireReply {
            semaphore: self.get_semaphore(project, namespace, name, now)?,
            outcome,
            fencing_token,
        })
    }

    /// Ends a queued acquire: ACQUIRED if it was granted meanwhile (the lease holds at least
    /// `weight`), else TIMED_OUT.
    pub fn cancel_wait(
        &mut self,
        project: &str,
        namespace: &str,
        queued: QueuedAcquire<'_, u64>,
        t: Nanos,
    ) -> Result<SemAcquireReply> {
        let outcome = self.with_space(project, namespace, |space, book| {
            let (sem, leases) = space.semaphore_and_leases(queued.name, queued.lease_id, t)?;
            if sem
                .dequeue(queued.name, leases, queued.waiter_id, book, project)
                .is_some()
            {
                sem.pump(queued.name, leases, book, project, t);
                return Ok((AcquireOutcome::TimedOut, 0));
            }
            Ok(match sem.holders.get(queued.lease_id) {
                Some(h) if h.weight >= queued.asked => (AcquireOutcome::Acquired, h.fencing_token),
                _ => (AcquireOutcome::TimedOut, 0),
            })
        })?;
        self.acquire_reply(project, namespace, queued.name, outcome, t)
    }

    /// Ends `lease_id`'s hold (a lease that holds nothing changes nothing).
    pub fn release(
        &mut self,
        project: &str,
        namespace: &str,
        name: &str,
        lease_id: &str,
        t: Nanos,
    ) -> Result<SemaphoreView> {
        self.with_space(project, namespace, |space, book| {
            let (sem, leases) = space.semaphore_and_leases(name, lease_id, t)?;
            let lease = leases.get_mut(lease_id).expect("checked");
            sem.release(name, lease, lease_id, book, project);
            sem.last_activity_at = t;
            sem.pump(name, leases, book, project, t);
            Ok(sem.view(name, leases, t))
        })
    }
}

/// Whether `sem`'s queue and `lease`'s waits have room for one more acquire.
fn check_queue_room(sem: &Semaphore, lease: &SemLease) -> Result<()> {
    if sem.queue.len() >= MAX_WAITERS_PER_SEMAPHORE {
        return Err(CoreError::ResourceExhausted(
            "too many acquires are queued on this semaphore".into(),
        ));
    }
    if lease.waits.len() >= MAX_WAITERS_PER_SEMAPHORE_LEASE {
        return Err(CoreError::ResourceExhausted(
            "too many acquires are queued under this lease".into(),
        ));
    }
    Ok(())
}

fn enqueue(
    sem: &mut Semaphore,
    leases: &mut OrdMap<String, SemLease>,
    book: &mut Book,
    project: &str,
    name: &str,
    a: AcquireArgs<'_>,
    spec: &WaitSpec,
) -> Result<()> {
    let lease = leases.get_mut(a.lease_id).expect("checked by the caller");
    check_queue_room(sem, lease)?;
    let w = Waiter {
        waiter_id: spec.waiter_id.clone(),
        lease_id: a.lease_id.to_string(),
        weight: a.weight,
        metadata: a.metadata.clone(),
        deadline: spec.deadline,
    };
    book.charge(project, waiter_bytes(name, &w))?;
    lease.waits.insert((name.to_string(), w.waiter_id.clone()));
    sem.queue.push_back(w);
    Ok(())
}

/// Removes a lease, releasing its holds and dropping its queued acquires (then granting
/// from the queues it was in). Returns its expiry, for the index.
fn end_lease(
    space: &mut Space,
    book: &mut Book,
    project: &str,
    lease_id: &str,
    t: Nanos,
) -> Option<Nanos> {
    let lease = space.leases.get(lease_id)?.clone();
    let mut touched: BTreeSet<&String> = lease.holds.iter().collect();
    for (name, waiter_id) in &lease.waits {
        if let Some(sem) = space.semaphores.get_mut(name) {
            sem.dequeue(name, &mut space.leases, waiter_id, book, project);
        }
        touched.insert(name);
    }
    let mut gone = space.leases.remove(lease_id).expect("present");
    for name in &lease.holds {
        if let Some(sem) = space.semaphores.get_mut(name) {
            sem.release(name, &mut gone, lease_id, book, project);
        }
    }
    book.refund(project, budget::lease_bytes(lease_id, &gone.process_id));
    for name in touched {
        if let Some(sem) = space.semaphores.get_mut(name) {
            sem.pump(name, &mut space.leases, book, project, t);
        }
    }
    Some(lease.expires_at)
}
