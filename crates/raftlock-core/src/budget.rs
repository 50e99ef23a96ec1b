//! What stored state costs a project, and how much it may keep.
//!
//! Quotas of hierarchical count things (locks, leases, namespaces); they do not bound memory, since one
//! hold can carry ~12 KB of metadata and project-lock keys have no count quota at all. So each project
//! also has a **byte budget** for what it stores: every record is charged an approximate,
//! deterministic size — its names, ids and metadata plus a fixed allowance for the map
//! entries and indexes around it. The charge is a pure function of the record, so every
//! replica computes the same totals from the same log, and a total counted from scratch
//! equals one kept up to date change by change (checked by `check_invariants`).
//!
//! Totals are caches beside the state ([`Scratch`]): never encoded, recounted after a
//! snapshot is decoded. docs/operations.md (*Budgets*) has the arithmetic.

use std::collections::BTreeMap;

/// Bytes of project-lock locks one project may keep: ~1.5M keys of 10 characters, ~900,000 of 128.
pub const MAX_LOCK_BYTES_PER_PROJECT: usize = 512 << 20;
/// Bytes of hierarchical namespaces, leases and holds one project may keep: ~490,000 holds with short
/// names and no metadata. Queued blocking acquires have their own budget
/// (`hierarchy::MAX_WAITER_BYTES_PER_PROJECT`).
pub const MAX_HIERARCHY_BYTES_PER_PROJECT: usize = 512 << 20;

/// Allowance for one small map entry: its share of a tree node and allocation headers.
const ENTRY: usize = 96;
/// Allowance for one descendant-index entry (a path and two counters).
const INDEX_ENTRY: usize = 48;

/// Metadata as stored: each pair with its map entry.
pub fn metadata_bytes(metadata: &BTreeMap<String, String>) -> usize {
    metadata
        .iter()
        .map(|(k, v)| k.len() + v.len() + ENTRY)
        .sum()
}

/// One project-lock key: its lease record and its entry in the eligibility index, each naming the key.
/// Calibrated: 1M keys of 10 characters grow a release build by 372 B each (charged 360).
pub fn lock_key_bytes(key: &str) -> usize {
    340 + 2 * key.len()
}

/// One hierarchical namespace without its contents (the allowance covers its name, at most 63 bytes).
/// Calibrated: 100,000 empty namespaces grow a release build by 804 B each (charged 760).
pub fn namespace_bytes(description: &str, metadata: &BTreeMap<String, String>) -> usize {
    760 + description.len() + metadata_bytes(metadata)
}

/// One hierarchical lease: its record and its entry in the expiry index.
/// Calibrated: 200,000 leases with 36-character ids grow a release build by 853 B each
/// (charged 820).
pub fn lease_bytes(lease_id: &str, process_id: &str) -> usize {
    740 + 2 * lease_id.len() + process_id.len()
}

/// One hierarchical hold: the holder record (with its metadata), the lock record's share, the lease's
/// mirror entry, and one descendant-index entry per ancestor path in the namespace and in
/// the lease. A lock's holder map is a tree whose first node is allocated whole, hence the
/// large base. Calibrated: 1M holds named `dNNN/lNNNNNN` grow a release build by 1,127 B
/// each (charged 1,123).
pub fn holder_bytes(lock_name: &str, lease_id: &str, metadata: &BTreeMap<String, String>) -> usize {
    let ancestors: usize = lock_name
        .match_indices('/')
        .map(|(i, _)| 2 * (i + INDEX_ENTRY))
        .sum();
    990 + 2 * lock_name.len() + lease_id.len() + ancestors + metadata_bytes(metadata)
}

/// `total` after one of its parts went from `before` to `after`, or `None` if that would
/// free more than was charged. That never happens; if a bookkeeping bug ever made it, debug
/// builds (every test) stop here, and release builds make the caller forget the kept total,
/// so it is counted again from the state — exactly what a replica restarted from a snapshot
/// computes — instead of stopping every replica on the same entry or deciding from a wrong
/// number.
pub fn restated(total: usize, before: usize, after: usize) -> Option<usize> {
    let next = (total + after).checked_sub(before);
    debug_assert!(next.is_some(), "freed {before} bytes of a total of {total}");
    next
}

/// A side channel kept next to the state but not part of it: never encoded, and equal to
/// any other, so replicas and snapshots compare on the state alone.
#[derive(Debug, Clone, Default)]
pub struct Scratch<T>(pub T);

impl<T> PartialEq for Scratch<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Scratch<T> {}

/// A total per project (stored bytes, queued waiters…), kept up to date change by change;
/// `None` until counted (after a snapshot is decoded), which makes readers count from the
/// state instead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectTotals(Option<BTreeMap<String, usize>>);

impl ProjectTotals {
    /// Totals counted from the state, replacing whatever was kept.
    pub fn counted(totals: BTreeMap<String, usize>) -> Self {
        ProjectTotals(Some(totals))
    }

    /// Whether totals are being kept (else readers must count).
    pub fn is_kept(&self) -> bool {
        self.0.is_some()
    }

    /// The kept total of `project`, if totals are kept.
    pub fn get(&self, project: &str) -> Option<usize> {
        self.0
            .as_ref()
            .map(|m| m.get(project).copied().unwrap_or(0))
    }

    /// Projects with a kept total.
    pub fn kept_projects(&self) -> impl Iterator<Item = &String> {
        self.0.iter().flat_map(|m| m.keys())
    }

    /// Records that `project` went from `before` to `after` bytes in some part of its state.
    pub fn adjust(&mut self, project: &str, before: usize, after: usize) {
        let Some(totals) = &mut self.0 else {
            return;
        };
        if before == after {
            return;
        }
        // Look up before inserting: the common case allocates nothing.
        let total = match totals.get_mut(project) {
            Some(total) => total,
            None => totals.entry(project.to_string()).or_default(),
        };
        match restated(*total, before, after) {
            Some(0) => {
                totals.remove(project);
            }
            Some(next) => *total = next,
            // Counted from the state from now on (see `restated`).
            None => self.0 = None,
        }
    }

    pub fn add(&mut self, project: &str, bytes: usize) {
        self.adjust(project, 0, bytes);
    }

    pub fn sub(&mut self, project: &str, bytes: usize) {
        self.adjust(project, bytes, 0);
    }
}

/// A per-project byte budget of one kind of state (semaphores, wait groups, barriers): what
/// each project is charged, kept change by change beside the state (never encoded; counted
/// again after a snapshot is decoded), and the most a project may keep.
#[derive(Debug, Clone, Default)]
pub struct ByteBudget {
    used: BTreeMap<String, usize>,
    /// Overrides the kind's own limit (tests lower it).
    quota: Option<usize>,
}

impl ByteBudget {
    /// Sets the most a project may keep, in place of the kind's limit.
    pub fn set_quota(&mut self, bytes: usize) {
        self.quota = Some(bytes);
    }

    /// Bytes `project` is charged.
    pub fn used(&self, project: &str) -> usize {
        self.used.get(project).copied().unwrap_or(0)
    }

    /// Whether `project` may add `bytes` within `limit` (or the quota set for tests);
    /// `resource_exhausted` naming `what` if not.
    pub fn check_room(
        &self,
        project: &str,
        bytes: usize,
        limit: usize,
        what: &str,
    ) -> Result<(), crate::CoreError> {
        if self.used(project) + bytes > self.quota.unwrap_or(limit) {
            return Err(crate::CoreError::ResourceExhausted(format!(
                "this project's {what} use up their storage budget"
            )));
        }
        Ok(())
    }

    /// Charges `bytes` to `project` (after [`ByteBudget::check_room`], or where the budget
    /// was already checked for more).
    pub fn charge(&mut self, project: &str, bytes: usize) {
        if bytes > 0 {
            *self.used.entry(project.to_string()).or_default() += bytes;
        }
    }

    /// A kept record's bytes go from `old` to `new`: refused, charging nothing, when the
    /// growth does not fit within `limit` ([`ByteBudget::check_room`]).
    pub fn recharge(
        &mut self,
        project: &str,
        (old, new): (usize, usize),
        limit: usize,
        what: &str,
    ) -> Result<(), crate::CoreError> {
        if new > old {
            self.check_room(project, new - old, limit, what)?;
        }
        self.refund(project, old);
        self.charge(project, new);
        Ok(())
    }

    /// Gives back `bytes` charged to `project`.
    pub fn refund(&mut self, project: &str, bytes: usize) {
        if let Some(used) = self.used.get_mut(project) {
            debug_assert!(*used >= bytes, "refunded {bytes} of {used} bytes");
            *used = used.saturating_sub(bytes);
            if *used == 0 {
                self.used.remove(project);
            }
        }
    }

    /// Replaces the kept totals with totals counted from the state.
    pub fn recount(&mut self, mut used: BTreeMap<String, usize>) {
        used.retain(|_, bytes| *bytes > 0);
        self.used = used;
    }

    /// The kept totals (invariant checks compare them with counted ones).
    pub fn totals(&self) -> &BTreeMap<String, usize> {
        &self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_totals_follow_adjustments_and_forget_empty_projects() {
        let mut b = ProjectTotals::counted(BTreeMap::new());
        b.add("p", 100);
        b.adjust("p", 40, 70);
        assert_eq!(b.get("p"), Some(130));
        b.sub("p", 130);
        assert_eq!(b.get("p"), Some(0));
        assert_eq!(b, ProjectTotals::counted(BTreeMap::new()));
    }

    #[test]
    fn uncounted_totals_stay_uncounted() {
        let mut b = ProjectTotals::default();
        b.add("p", 100);
        assert!(!b.is_kept());
        assert_eq!(b.get("p"), None);
    }

    #[test]
    fn deeper_and_longer_holds_cost_more() {
        let none = BTreeMap::new();
        let meta: BTreeMap<_, _> = [("k".to_string(), "v".repeat(256))].into();
        assert!(holder_bytes("a/b/c", "l", &none) > holder_bytes("abcde", "l", &none));
        assert!(holder_bytes("a", "l", &meta) >= holder_bytes("a", "l", &none) + 256);
    }
}
