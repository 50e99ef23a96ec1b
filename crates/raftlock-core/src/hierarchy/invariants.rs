//! Every invariant of the hierarchy checked from scratch: mutual exclusion on related paths,
//! the mirrors and indexes, and the kept usage totals against a recount. Used by tests after
//! every operation; never on the apply path.

use super::*;

impl Hierarchy {
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
                    let arrivals: std::collections::BTreeSet<u64> =
                        rec.holders.values().map(|h| h.arrival).collect();
                    if arrivals.len() != rec.holders.len() {
                        return Err(format!(
                            "{project}/{ns_name}: {name} has two holders of one arrival"
                        ));
                    }
                    for (id, h) in &rec.holders {
                        if ns.leases.get(id).and_then(|l| l.holds.get(name)) != Some(&h.exclusive) {
                            return Err(format!("{name}: holder {id} not mirrored in its lease"));
                        }
                        for a in ancestors(name) {
                            bump(&mut below, a, h.exclusive, Change::Add);
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
