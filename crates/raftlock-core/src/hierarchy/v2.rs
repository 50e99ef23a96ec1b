//! The hierarchy as snapshot formats 1 and 2 laid it out — lock holders without their
//! arrival order — read and converted, so a node upgraded from those releases keeps its data.
//! Field order is the encoding: do not change these types.

use std::collections::{BTreeMap, VecDeque};

use imbl::{OrdMap, OrdSet};
use serde::Deserialize;

use super::namespace::{Holder, Lease, LockRecord, Namespace};
use super::waiters::Waiter;
use super::{Counts, Hierarchy, Quotas};
use crate::Nanos;

#[derive(Debug, Clone, Deserialize)]
struct HolderV2 {
    exclusive: bool,
    locked_at: Nanos,
    metadata: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
struct LockRecordV2 {
    locked_at: Nanos,
    last_activity_at: Nanos,
    holders: BTreeMap<String, HolderV2>,
}

#[derive(Debug, Clone, Deserialize)]
struct NamespaceV2 {
    description: String,
    metadata: BTreeMap<String, String>,
    version: u64,
    created_at: Nanos,
    updated_at: Nanos,
    leases: OrdMap<String, Lease>,
    locks: OrdMap<String, LockRecordV2>,
    below: OrdMap<String, Counts>,
    waiters: OrdMap<String, VecDeque<Waiter>>,
    lock_quota: usize,
}

/// [`Hierarchy`] in formats 1 and 2.
#[derive(Debug, Clone, Deserialize)]
pub struct HierarchyV2 {
    projects: OrdMap<String, OrdMap<String, NamespaceV2>>,
    by_expiry: OrdSet<(Nanos, String, String, String)>,
    quotas: Quotas,
    waiter_deadlines: OrdSet<(Nanos, String, String, String, String)>,
}

impl From<LockRecordV2> for LockRecord {
    /// Those releases listed holders by lease id: that order becomes their arrival order.
    fn from(r: LockRecordV2) -> Self {
        let holders = (r.holders.into_iter().enumerate())
            .map(|(arrival, (id, h))| {
                let holder = Holder {
                    exclusive: h.exclusive,
                    locked_at: h.locked_at,
                    metadata: h.metadata,
                    arrival: arrival as u64,
                };
                (id, holder)
            })
            .collect();
        LockRecord {
            locked_at: r.locked_at,
            last_activity_at: r.last_activity_at,
            holders,
        }
    }
}

impl From<NamespaceV2> for Namespace {
    fn from(ns: NamespaceV2) -> Self {
        Namespace {
            description: ns.description,
            metadata: ns.metadata,
            version: ns.version,
            created_at: ns.created_at,
            updated_at: ns.updated_at,
            leases: ns.leases,
            locks: (ns.locks.into_iter())
                .map(|(k, r)| (k, LockRecord::from(r)))
                .collect(),
            below: ns.below,
            waiters: ns.waiters,
            resolved: Default::default(),
            usage: Default::default(),
            stored: Default::default(),
            lock_quota: ns.lock_quota,
        }
    }
}

impl From<HierarchyV2> for Hierarchy {
    fn from(h: HierarchyV2) -> Self {
        let projects = (h.projects.into_iter())
            .map(|(p, spaces)| {
                let spaces: OrdMap<String, Namespace> = (spaces.into_iter())
                    .map(|(n, ns)| (n, Namespace::from(ns)))
                    .collect();
                (p, spaces)
            })
            .collect();
        Hierarchy {
            projects,
            by_expiry: h.by_expiry,
            quotas: h.quotas,
            waiter_deadlines: h.waiter_deadlines,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_of_an_old_snapshot_arrive_in_lease_id_order() {
        let holder = |exclusive| HolderV2 {
            exclusive,
            locked_at: 5,
            metadata: BTreeMap::new(),
        };
        let old = LockRecordV2 {
            locked_at: 5,
            last_activity_at: 6,
            holders: [
                ("ls_b".to_string(), holder(false)),
                ("ls_a".to_string(), holder(false)),
            ]
            .into(),
        };
        let converted = LockRecord::from(old);
        let order: Vec<(&str, u64)> = (converted.holders.iter())
            .map(|(id, h)| (id.as_str(), h.arrival))
            .collect();
        assert_eq!(order, [("ls_a", 0), ("ls_b", 1)]);
        assert_eq!((converted.locked_at, converted.last_activity_at), (5, 6));
    }
}
