//! The read-only operations of [`Hierarchy`]: namespaces, leases and locks as the API shows
//! them at a given time, where a queued acquire stands, and counts for metrics.

use super::*;
use crate::validate;

impl Hierarchy {
    pub fn get_namespace(&self, project: &str, name: &str) -> Result<NamespaceView> {
        validate::simple_name("namespace_name", name)?;
        Ok(self.ns(project, name)?.view(name))
    }

    /// Whether `project` has a namespace `name`.
    pub fn has_namespace(&self, project: &str, name: &str) -> bool {
        self.ns(project, name).is_ok()
    }

    pub fn list_namespaces(
        &self,
        project: &str,
        token: &str,
        limit: u32,
    ) -> Result<(Vec<NamespaceView>, String, String)> {
        let empty = OrdMap::new();
        let spaces = self.projects.get(project).unwrap_or(&empty);
        list_page(spaces, token, limit, |_| true, |k, ns| ns.view(k))
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
        let ns = self.ns(project, namespace)?;
        let keep =
            |l: &Lease| now < l.expires_at && (process_id.is_empty() || l.process_id == process_id);
        list_page(&ns.leases, token, limit, keep, |id, l| LeaseView {
            lease_id: id.clone(),
            process_id: l.process_id.clone(),
            created_at: l.created_at,
            expires_at: l.expires_at,
        })
    }

    /// Where a queued acquire stands, judged on the applied state at `now`.
    pub fn waiter_state(
        &self,
        project: &str,
        namespace: &str,
        queued: QueuedAcquire<'_, bool>,
        now: Nanos,
    ) -> Result<WaitState> {
        let ns = self.ns(project, namespace)?;
        if !ns.lease_live(queued.lease_id, now) {
            return Err(lease_not_found());
        }
        if ns.is_queued(queued.name, queued.waiter_id) {
            return Ok(WaitState::Queued);
        }
        if ns.holds_mode(queued.lease_id, queued.name, queued.asked) {
            return Ok(WaitState::Granted);
        }
        Ok(WaitState::Dropped)
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
        let ns = self.ns(project, namespace)?;
        let keep = |r: &LockRecord| r.holders.keys().any(|id| ns.lease_live(id, now));
        list_page(&ns.locks, token, limit, keep, |k, _| ns.lock_view(k, now))
    }

    /// Counts for metrics: (namespaces, live leases, held locks).
    pub fn totals(&self) -> (usize, usize, usize) {
        let spaces = self.projects.values().flat_map(|p| p.values());
        spaces.fold((0, 0, 0), |(n, l, k), ns| {
            (n + 1, l + ns.leases.len(), k + ns.locks.len())
        })
    }

    /// Whether no project has a namespace.
    pub fn is_empty(&self) -> bool {
        self.projects.is_empty()
    }

    /// Leases in the expiry index (every stored lease, live or not yet reaped).
    pub fn leases_tracked(&self) -> usize {
        self.by_expiry.len()
    }

    /// Number of queued acquires in all namespaces (metrics).
    pub fn waiter_count(&self) -> usize {
        let spaces = self.projects.values().flat_map(|p| p.values());
        spaces.map(|ns| ns.waiter_usage().count).sum()
    }

    /// The queued blocking acquires of a namespace, lock by lock in name order and each
    /// queue in arrival order: `(lock, lease id, exclusive)`. For operators (the console).
    pub fn list_waiters(
        &self,
        project: &str,
        namespace: &str,
    ) -> Result<Vec<(String, String, bool)>> {
        validate::simple_name("namespace_name", namespace)?;
        let ns = self.ns(project, namespace)?;
        Ok(ns
            .waiters
            .iter()
            .flat_map(|(lock, queue)| {
                queue
                    .iter()
                    .map(move |w| (lock.clone(), w.lease_id.clone(), w.exclusive))
            })
            .collect())
    }
}
