//! Every invariant of [`Semaphores`], checked from scratch (tests and debug checks).

use super::*;

impl Semaphores {
    /// Every invariant, checked from scratch (tests and debug checks).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut usage: BTreeMap<String, usize> = BTreeMap::new();
        let mut expiries = OrdSet::new();
        for ((project, ns), space) in self.spaces.iter() {
            if space.is_empty() {
                return Err(format!("{project}/{ns}: an empty space is kept"));
            }
            *usage.entry(project.clone()).or_default() += space.count_bytes();
            for (id, lease) in space.leases.iter() {
                expiries.insert((lease.expires_at, project.clone(), ns.clone(), id.clone()));
                check_lease(space, id, lease)?;
            }
            for (name, sem) in space.semaphores.iter() {
                check_semaphore(space, name, sem, self.book.last_token)?;
            }
        }
        usage.retain(|_, b| *b > 0);
        let kept = self.book.usage.0.totals();
        if &usage != kept {
            return Err(format!("usage kept {kept:?} != counted {usage:?}"));
        }
        if expiries != self.book.by_expiry {
            return Err("the expiry index does not list exactly the leases".into());
        }
        Ok(())
    }
}

fn check_lease(space: &Space, id: &str, lease: &SemLease) -> std::result::Result<(), String> {
    for name in &lease.holds {
        let held = space
            .semaphores
            .get(name)
            .is_some_and(|s| s.holders.contains_key(id));
        if !held {
            return Err(format!(
                "lease {id} lists a hold on {name} that does not exist"
            ));
        }
    }
    for (name, waiter) in &lease.waits {
        if !space
            .semaphores
            .get(name)
            .is_some_and(|s| s.is_queued(waiter))
        {
            return Err(format!(
                "lease {id} lists waiter {waiter} not queued on {name}"
            ));
        }
    }
    Ok(())
}

fn check_semaphore(
    space: &Space,
    name: &str,
    sem: &Semaphore,
    last_token: u64,
) -> std::result::Result<(), String> {
    let held = sem.active();
    if held > sem.permits {
        return Err(format!("{name}: {held} held > {} permits", sem.permits));
    }
    for (id, h) in &sem.holders {
        let listed = space.leases.get(id).is_some_and(|l| l.holds.contains(name));
        if !listed || h.weight == 0 || h.fencing_token == 0 || h.fencing_token > last_token {
            return Err(format!("{name}: holder {id} is inconsistent"));
        }
    }
    let tokens: BTreeSet<u64> = sem.holders.values().map(|h| h.fencing_token).collect();
    if tokens.len() != sem.holders.len() {
        return Err(format!("{name}: two holds share a fencing token"));
    }
    for w in &sem.queue {
        let key = (name.to_string(), w.waiter_id.clone());
        if !space
            .leases
            .get(&w.lease_id)
            .is_some_and(|l| l.waits.contains(&key))
        {
            return Err(format!("{name}: waiter {} has no lease entry", w.waiter_id));
        }
    }
    if sem.queue.iter().any(|w| w.weight > sem.permits) {
        return Err(format!(
            "{name}: a queued acquire is heavier than the permits"
        ));
    }
    if let Some(head) = sem.queue.front() {
        if sem.fits(&head.lease_id, head.weight) && head.weight <= sem.permits {
            return Err(format!(
                "{name}: the head of the queue fits but was not granted"
            ));
        }
    }
    Ok(())
}
