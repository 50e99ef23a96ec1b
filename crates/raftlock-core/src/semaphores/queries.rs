//! The read-only operations of [`Semaphores`]: semaphores, holders and leases as the API
//! shows them at a given time, where a queued acquire stands, and counts for metrics.

use super::*;

impl Semaphores {
    pub fn get_semaphore(
        &self,
        project: &str,
        namespace: &str,
        name: &str,
        now: Nanos,
    ) -> Result<SemaphoreView> {
        let space = self
            .space(project, namespace)
            .ok_or_else(semaphore_not_found)?;
        Ok(space.semaphore(name)?.view(name, &space.leases, now))
    }

    pub fn list_semaphores(
        &self,
        project: &str,
        namespace: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<SemaphoreView>, String, String)> {
        let empty = Space::default();
        let space = self.space(project, namespace).unwrap_or(&empty);
        let view = |name: &String, s: &Semaphore| s.view(name, &space.leases, now);
        list_page(&space.semaphores, token, limit, |_| true, view)
    }

    /// Live holders in the order they were first granted (by fencing token).
    pub fn list_holders(
        &self,
        project: &str,
        namespace: &str,
        name: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<SemHolderView>, String, String)> {
        let space = self
            .space(project, namespace)
            .ok_or_else(semaphore_not_found)?;
        let sem = space.semaphore(name)?;
        let by_arrival: OrdMap<String, SemHolderView> = (sem.holders.iter())
            .filter(|(id, _)| space.live_lease(id, now).is_ok())
            .map(|(id, h)| {
                let view = SemHolderView {
                    lease_id: id.clone(),
                    weight: h.weight,
                    locked_at: h.locked_at,
                    metadata: h.metadata.clone(),
                    fencing_token: h.fencing_token,
                };
                (format!("{:020}", h.fencing_token), view)
            })
            .collect();
        list_page(&by_arrival, token, limit, |_| true, |_, v| v.clone())
    }

    pub fn get_lease(
        &self,
        project: &str,
        namespace: &str,
        lease_id: &str,
        now: Nanos,
    ) -> Result<LeaseView> {
        let space = self.space(project, namespace).ok_or_else(lease_not_found)?;
        Ok(lease_view(lease_id, space.live_lease(lease_id, now)?))
    }

    /// Live leases by id, optionally only those of `process_id`.
    pub fn list_leases(
        &self,
        project: &str,
        namespace: &str,
        process_id: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<LeaseView>, String, String)> {
        let empty = Space::default();
        let space = self.space(project, namespace).unwrap_or(&empty);
        let keep = |l: &SemLease| {
            now < l.expires_at && (process_id.is_empty() || l.process_id == process_id)
        };
        list_page(&space.leases, token, limit, keep, |id, l| lease_view(id, l))
    }

    /// Where a queued acquire stands at `now`: queued, granted (the lease holds at least
    /// `weight`; with the hold's fencing token) or dropped.
    pub fn waiter_state(
        &self,
        project: &str,
        namespace: &str,
        queued: QueuedAcquire<'_, u64>,
        now: Nanos,
    ) -> Result<(WaitState, u64)> {
        let space = self
            .space(project, namespace)
            .ok_or_else(semaphore_not_found)?;
        let sem = space.semaphore(queued.name)?;
        space.live_lease(queued.lease_id, now)?;
        if sem.is_queued(queued.waiter_id) {
            return Ok((WaitState::Queued, 0));
        }
        Ok(match sem.holders.get(queued.lease_id) {
            Some(h) if h.weight >= queued.asked => (WaitState::Granted, h.fencing_token),
            _ => (WaitState::Dropped, 0),
        })
    }

    /// Whether a blocking acquire could be queued now (checked before proposing one, so a
    /// call refused for a full queue writes nothing).
    pub fn check_wait_budget(
        &self,
        project: &str,
        namespace: &str,
        name: &str,
        lease_id: &str,
        now: Nanos,
    ) -> Result<()> {
        let space = self
            .space(project, namespace)
            .ok_or_else(semaphore_not_found)?;
        let sem = space.semaphore(name)?;
        let lease = space.live_lease(lease_id, now)?;
        check_queue_room(sem, lease)
    }

    /// (semaphores, semaphore leases, holds, queued acquires) in the whole state.
    pub fn totals(&self) -> (usize, usize, usize, usize) {
        let mut totals = (0, 0, 0, 0);
        for space in self.spaces.values() {
            totals.0 += space.semaphores.len();
            totals.1 += space.leases.len();
            for sem in space.semaphores.values() {
                totals.2 += sem.holders.len();
                totals.3 += sem.queue.len();
            }
        }
        totals
    }
}
