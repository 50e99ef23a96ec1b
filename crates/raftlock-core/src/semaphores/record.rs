//! One semaphore: its holders, its FIFO queue of blocking acquires, and the grant rule — the
//! head of the queue is granted as soon as its weight fits, and nobody overtakes a head that
//! does not fit (so a heavy acquire is not starved by a stream of light ones).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use super::{Book, SemaphoreView, MAX_HOLDERS_PER_SEMAPHORE};
use crate::budget;
use crate::Nanos;

/// A semaphore record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Semaphore {
    pub description: String,
    /// Capacity: the sum of the holders' weights never exceeds it.
    pub permits: u64,
    pub metadata: BTreeMap<String, String>,
    /// Starts at 1; every update bumps it (optimistic concurrency for updates).
    pub version: u64,
    pub created_at: Nanos,
    pub updated_at: Nanos,
    /// Last acquire (granted or not) or release.
    pub last_activity_at: Nanos,
    /// Lease id → its hold.
    pub holders: BTreeMap<String, Holder>,
    /// Blocking acquires in arrival order.
    pub queue: VecDeque<Waiter>,
}

/// One lease's hold on a semaphore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Holder {
    pub weight: u64,
    pub locked_at: Nanos,
    pub metadata: BTreeMap<String, String>,
    /// Fixed at the first grant; also orders holders by arrival.
    pub fencing_token: u64,
}

/// A queued blocking acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Waiter {
    /// Chosen by the server that took the call; the call follows it to its outcome.
    pub waiter_id: String,
    pub lease_id: String,
    /// The weight the lease will hold once granted.
    pub weight: u64,
    pub metadata: BTreeMap<String, String>,
    /// State-machine time after which it leaves the queue ungranted.
    pub deadline: Nanos,
}

/// A semaphore lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SemLease {
    pub process_id: String,
    pub created_at: Nanos,
    pub expires_at: Nanos,
    /// Semaphores it holds.
    pub holds: BTreeSet<String>,
    /// (semaphore, waiter id) of its queued acquires.
    pub waits: BTreeSet<(String, String)>,
}

/// What a semaphore record costs its project (record, name twice: map key and indexes).
pub(super) fn semaphore_bytes(
    name: &str,
    description: &str,
    metadata: &BTreeMap<String, String>,
) -> usize {
    700 + 2 * name.len() + description.len() + budget::metadata_bytes(metadata)
}

/// What one hold costs: the holder record and the lease's mirror entry.
pub(super) fn holder_bytes(name: &str, lease_id: &str, meta: &BTreeMap<String, String>) -> usize {
    300 + name.len() + 2 * lease_id.len() + budget::metadata_bytes(meta)
}

/// What one queued acquire costs: never less than the hold it turns into, so granting it
/// never needs more budget than the queue already had.
pub(super) fn waiter_bytes(name: &str, w: &Waiter) -> usize {
    holder_bytes(name, &w.lease_id, &w.metadata) + 200 + 3 * w.waiter_id.len() + 2 * name.len()
}

impl Semaphore {
    /// Sum of the holders' weights (every holder is live during an apply).
    pub fn active(&self) -> u64 {
        self.holders.values().map(|h| h.weight).sum()
    }

    pub fn weight_of(&self, lease_id: &str) -> u64 {
        self.holders.get(lease_id).map_or(0, |h| h.weight)
    }

    /// Whether `lease_id` asking for `weight` in all fits beside the other holders.
    pub fn fits(&self, lease_id: &str, weight: u64) -> bool {
        let others = self.active() - self.weight_of(lease_id);
        others
            .checked_add(weight)
            .is_some_and(|w| w <= self.permits)
    }

    pub fn is_queued(&self, waiter_id: &str) -> bool {
        self.queue.iter().any(|w| w.waiter_id == waiter_id)
    }

    /// The API view at `now`: holders of leases that expired by `now` are not counted.
    pub fn view(&self, name: &str, leases: &OrdMap<String, SemLease>, now: Nanos) -> SemaphoreView {
        let live: Vec<&Holder> = (self.holders.iter())
            .filter(|(id, _)| leases.get(*id).is_some_and(|l| now < l.expires_at))
            .map(|(_, h)| h)
            .collect();
        SemaphoreView {
            name: name.to_string(),
            description: self.description.clone(),
            permits: self.permits,
            active_holds: live.iter().map(|h| h.weight).sum(),
            active_holders_count: live.len() as u64,
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_activity_at: self.last_activity_at,
            metadata: self.metadata.clone(),
        }
    }

    /// Sets `lease_id`'s hold to `weight` (a new hold gets the next fencing token and
    /// `metadata`; an existing one keeps both). The caller checked that it fits and, for a
    /// new hold, the holder quota. Returns the hold's fencing token.
    #[allow(clippy::too_many_arguments)]
    pub fn grant(
        &mut self,
        name: &str,
        lease: &mut SemLease,
        lease_id: &str,
        weight: u64,
        metadata: &BTreeMap<String, String>,
        book: &mut Book,
        project: &str,
        t: Nanos,
    ) -> u64 {
        if let Some(holder) = self.holders.get_mut(lease_id) {
            holder.weight = weight;
            holder.locked_at = t;
            return holder.fencing_token;
        }
        let fencing_token = book.next_fencing_token();
        book.charge_granted(project, holder_bytes(name, lease_id, metadata));
        self.holders.insert(
            lease_id.to_string(),
            Holder {
                weight,
                locked_at: t,
                metadata: metadata.clone(),
                fencing_token,
            },
        );
        lease.holds.insert(name.to_string());
        fencing_token
    }

    /// Ends `lease_id`'s hold, if any.
    pub fn release(
        &mut self,
        name: &str,
        lease: &mut SemLease,
        lease_id: &str,
        book: &mut Book,
        project: &str,
    ) {
        if let Some(h) = self.holders.remove(lease_id) {
            book.refund(project, holder_bytes(name, lease_id, &h.metadata));
        }
        lease.holds.remove(name);
    }

    /// Drops every queued acquire heavier than `permits` (after `permits` was lowered: they
    /// can never be granted, wherever they are in the queue).
    pub fn drop_heavier_than_permits(
        &mut self,
        name: &str,
        leases: &mut OrdMap<String, SemLease>,
        book: &mut Book,
        project: &str,
    ) {
        let heavy: Vec<String> = (self.queue.iter())
            .filter(|w| w.weight > self.permits)
            .map(|w| w.waiter_id.clone())
            .collect();
        for id in heavy {
            self.dequeue(name, leases, &id, book, project);
        }
    }

    /// Takes waiter `waiter_id` out of the queue (its call is woken).
    pub fn dequeue(
        &mut self,
        name: &str,
        leases: &mut OrdMap<String, SemLease>,
        waiter_id: &str,
        book: &mut Book,
        project: &str,
    ) -> Option<Waiter> {
        let at = self.queue.iter().position(|w| w.waiter_id == waiter_id)?;
        let w = self.queue.remove(at).expect("position is in range");
        book.refund(project, waiter_bytes(name, &w));
        book.resolve(&w.waiter_id);
        if let Some(lease) = leases.get_mut(&w.lease_id) {
            lease.waits.remove(&(name.to_string(), w.waiter_id.clone()));
        }
        Some(w)
    }

    /// Grants waiters from the head of the queue while they fit; drops those past their
    /// deadline, and those that could never be granted (weight above `permits`, a lease that
    /// is gone or expired, or a new hold beyond the holder quota once it is their turn).
    pub fn pump(
        &mut self,
        name: &str,
        leases: &mut OrdMap<String, SemLease>,
        book: &mut Book,
        project: &str,
        t: Nanos,
    ) {
        while let Some(head) = self.queue.front() {
            let id = head.waiter_id.clone();
            let new_hold = !self.holders.contains_key(&head.lease_id);
            // A lease that expired but is not reaped yet (its turn in this apply comes later)
            // is as gone as a revoked one: granting it would hand out a token for nothing
            // and could take the last holder slot from a live waiter.
            let lease_gone = leases.get(&head.lease_id).is_none_or(|l| l.expires_at <= t);
            let hopeless = head.deadline <= t
                || head.weight > self.permits
                || lease_gone
                || (new_hold && self.holders.len() >= MAX_HOLDERS_PER_SEMAPHORE);
            if hopeless {
                self.dequeue(name, leases, &id, book, project);
                continue;
            }
            if !self.fits(&head.lease_id, head.weight) {
                break;
            }
            let w = self
                .dequeue(name, leases, &id, book, project)
                .expect("the head is queued");
            let lease = leases.get_mut(&w.lease_id).expect("checked above");
            // A grant from the queue never lowers a hold its lease already has (another of
            // its calls may have been granted more meanwhile): both calls then answer
            // ACQUIRED, neither is told TIMED_OUT for permits it was granted.
            let weight = w.weight.max(self.weight_of(&w.lease_id));
            self.grant(
                name,
                lease,
                &w.lease_id,
                weight,
                &w.metadata,
                book,
                project,
                t,
            );
            self.last_activity_at = t;
        }
    }
}
