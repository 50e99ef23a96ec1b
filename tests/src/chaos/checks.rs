//! The recorded history (holds, writes) and the checkers that judge it on the one true
//! clock: mutual exclusion, fencing order, the fenced resource, hierarchical conflicts.

use super::*;

/// An acknowledged project-lock lease, with its conservative holding interval.
#[derive(Debug, Clone)]
pub struct Hold4 {
    pub key: String,
    pub worker: usize,
    pub fencing: u64,
    pub invoked: i64,
    pub acked: i64,
    pub end: i64,
}

/// A write to the protected resource.
#[derive(Debug, Clone)]
pub struct Write {
    pub key: String,
    pub fencing: u64,
    pub worker: usize,
    pub at: i64,
    pub accepted: bool,
    /// Made inside the writer's conservative holding interval.
    pub within_hold: bool,
}

/// An acknowledged hierarchical hold.
#[derive(Debug, Clone)]
pub struct Hold5 {
    pub path: String,
    pub lease: String,
    pub exclusive: bool,
    pub acked: i64,
    pub end: i64,
}

/// An acknowledged semaphore hold.
#[derive(Debug, Clone)]
pub struct SemaphoreHold {
    pub lease: String,
    pub weight: u64,
    pub acked: i64,
    pub end: i64,
}

/// The protected resource: accepts a write unless its fencing token is lower than the
/// highest it has seen for the key; records every accepted write.
#[derive(Default)]
pub struct Resource {
    highest: HashMap<String, u64>,
    pub accepted: Vec<(String, u64)>,
    pub rejected: u64,
}

impl Resource {
    pub fn write(&mut self, key: &str, fencing: u64) -> bool {
        let h = self.highest.entry(key.to_string()).or_insert(0);
        if fencing < *h {
            self.rejected += 1;
            return false;
        }
        *h = fencing;
        self.accepted.push((key.to_string(), fencing));
        true
    }
}

pub(super) fn overlap(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < a.1 && b.0 < b.1 && a.0 < b.1 && b.0 < a.1
}

/// No two acknowledged project-lock holders of one key with overlapping intervals.
pub fn check_mutual_exclusion(holds: &[Hold4]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Hold4>> = BTreeMap::new();
    for h in holds {
        by_key.entry(&h.key).or_default().push(h);
    }
    for (key, mut hs) in by_key {
        hs.sort_by_key(|h| h.acked);
        let mut active: Vec<&Hold4> = Vec::new();
        for h in hs {
            active.retain(|a| a.end > h.acked);
            for a in &active {
                if overlap((a.acked, a.end), (h.acked, h.end)) {
                    out.push(format!(
                        "mutual exclusion on {key}: fencing {} (worker {}, {}..{} us) overlaps fencing {} (worker {}, {}..{} us)",
                        a.fencing, a.worker, a.acked, a.end, h.fencing, h.worker, h.acked, h.end
                    ));
                }
            }
            if h.end > h.acked {
                active.push(h);
            }
        }
    }
    out
}

/// Per key, every new lease has its own fencing token, and a lease acknowledged before
/// another was requested has the lower token.
pub fn check_fencing(holds: &[Hold4]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&Hold4>> = BTreeMap::new();
    for h in holds {
        by_key.entry(&h.key).or_default().push(h);
    }
    for (key, hs) in by_key {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for h in &hs {
            if let Some(w) = seen.insert(h.fencing, h.worker) {
                out.push(format!(
                    "fencing token {} on {key} given to two leases (workers {w} and {})",
                    h.fencing, h.worker
                ));
            }
        }
        let mut by_ack = hs.clone();
        by_ack.sort_by_key(|h| h.acked);
        let mut by_inv = hs.clone();
        by_inv.sort_by_key(|h| h.invoked);
        let (mut p, mut max) = (0, None::<&Hold4>);
        for h in by_inv {
            while p < by_ack.len() && by_ack[p].acked < h.invoked {
                if max.is_none_or(|m| by_ack[p].fencing > m.fencing) {
                    max = Some(by_ack[p]);
                }
                p += 1;
            }
            if let Some(m) = max.filter(|m| m.fencing >= h.fencing) {
                out.push(format!(
                    "fencing on {key}: token {} acknowledged at {} us, yet a later acquire (invoked {} us) got {}",
                    m.fencing, m.acked, h.invoked, h.fencing
                ));
            }
        }
    }
    out
}

/// The resource never accepted a lower token after a higher one, and never turned away a
/// writer inside its holding interval (that would need a newer holder during it).
pub fn check_writes(resource: &Resource, writes: &[Write]) -> Vec<String> {
    let mut out = Vec::new();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    for (key, f) in &resource.accepted {
        let h = highest.entry(key).or_insert(0);
        if f < h {
            out.push(format!("resource accepted {f} on {key} after {h}"));
        }
        *h = (*h).max(*f);
    }
    for w in writes.iter().filter(|w| !w.accepted && w.within_hold) {
        out.push(format!(
            "worker {} was fenced off {} with token {} at {} us while its lease was valid",
            w.worker, w.key, w.fencing, w.at
        ));
    }
    out
}

/// `a` and `b` are the same path or one is an ancestor of the other.
pub fn related(a: &str, b: &str) -> bool {
    a == b
        || (b.len() > a.len() && b.starts_with(a) && b.as_bytes()[a.len()] == b'/')
        || (a.len() > b.len() && a.starts_with(b) && a.as_bytes()[b.len()] == b'/')
}

/// No two leases held incompatible locks on related paths at overlapping times.
pub fn check_hierarchy(holds: &[Hold5]) -> Vec<String> {
    let mut out = Vec::new();
    let mut hs: Vec<&Hold5> = holds.iter().collect();
    hs.sort_by_key(|h| h.acked);
    let mut active: Vec<&Hold5> = Vec::new();
    for h in hs {
        active.retain(|a| a.end > h.acked);
        for a in &active {
            if a.lease != h.lease
                && (a.exclusive || h.exclusive)
                && related(&a.path, &h.path)
                && overlap((a.acked, a.end), (h.acked, h.end))
            {
                out.push(format!(
                    "hierarchical exclusion: {} {} ({}, {}..{} us) and {} {} ({}, {}..{} us)",
                    if a.exclusive { "X" } else { "S" },
                    a.path,
                    a.lease,
                    a.acked,
                    a.end,
                    if h.exclusive { "X" } else { "S" },
                    h.path,
                    h.lease,
                    h.acked,
                    h.end
                ));
            }
        }
        if h.end > h.acked {
            active.push(h);
        }
    }
    out
}

/// At no instant of the true clock do the recorded holds weigh more than `permits`.
pub fn check_semaphore(holds: &[SemaphoreHold], permits: u64) -> Vec<String> {
    // (time, +weight at an acknowledged start / -weight at an end); ends sort first at equal
    // times, as `overlap` treats touching intervals as disjoint.
    let mut events: Vec<(i64, i64, &SemaphoreHold)> = Vec::new();
    for h in holds.iter().filter(|h| h.end > h.acked) {
        events.push((h.acked, h.weight as i64, h));
        events.push((h.end, -(h.weight as i64), h));
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut held = 0i64;
    let mut out = Vec::new();
    for (at, delta, h) in events {
        held += delta;
        if held > permits as i64 {
            out.push(format!(
                "semaphore over its {permits} permits: {held} held at {at} us (hold of {} by {}, {}..{} us)",
                h.weight, h.lease, h.acked, h.end
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h4(key: &str, fencing: u64, invoked: i64, acked: i64, end: i64) -> Hold4 {
        Hold4 {
            key: key.into(),
            worker: fencing as usize,
            fencing,
            invoked,
            acked,
            end,
        }
    }

    #[test]
    fn semaphore_weight_above_permits_at_one_instant_is_a_violation() {
        let h = |lease: &str, weight, acked, end| SemaphoreHold {
            lease: lease.into(),
            weight,
            acked,
            end,
        };
        // 2 + 1 at most at any instant; the third hold starts when the first ends.
        let ok = [h("a", 2, 0, 10), h("b", 1, 5, 20), h("c", 2, 10, 30)];
        assert!(check_semaphore(&ok, 3).is_empty());
        let over = [h("a", 2, 0, 10), h("b", 1, 5, 20), h("c", 1, 9, 30)];
        assert_eq!(check_semaphore(&over, 3).len(), 1);
    }

    #[test]
    fn overlapping_holders_of_one_key_are_violations() {
        let ok = [
            h4("k", 1, 0, 10, 20),
            h4("k", 2, 15, 20, 30),
            h4("j", 3, 0, 12, 25),
        ];
        assert!(check_mutual_exclusion(&ok).is_empty());
        let bad = [h4("k", 1, 0, 10, 20), h4("k", 2, 15, 19, 30)];
        assert_eq!(check_mutual_exclusion(&bad).len(), 1);
        // An interval emptied by the skew allowance never counts.
        let empty = [h4("k", 1, 0, 10, 5), h4("k", 2, 0, 6, 30)];
        assert!(check_mutual_exclusion(&empty).is_empty());
    }

    #[test]
    fn fencing_must_follow_real_time_order() {
        let ok = [
            h4("k", 5, 0, 10, 20),
            h4("k", 7, 5, 25, 30),
            h4("k", 6, 12, 22, 24),
        ];
        assert!(check_fencing(&ok).is_empty(), "{:?}", check_fencing(&ok));
        let lower_later = [h4("k", 5, 0, 10, 20), h4("k", 4, 11, 25, 30)];
        assert_eq!(check_fencing(&lower_later).len(), 1);
        let reused = [h4("k", 5, 0, 10, 20), h4("k", 5, 0, 25, 30)];
        assert!(!check_fencing(&reused).is_empty());
        // Concurrent acquisitions may be acknowledged in either order.
        let concurrent = [h4("k", 5, 0, 30, 40), h4("k", 4, 1, 20, 25)];
        assert!(check_fencing(&concurrent).is_empty());
    }

    #[test]
    fn the_resource_fences_off_lower_tokens() {
        let mut r = Resource::default();
        assert!(r.write("k", 5));
        assert!(r.write("k", 5));
        assert!(r.write("k", 9));
        assert!(!r.write("k", 7));
        assert!(r.write("j", 1));
        assert_eq!(r.rejected, 1);
        let fenced_late = Write {
            key: "k".into(),
            fencing: 7,
            worker: 0,
            at: 0,
            accepted: false,
            within_hold: false,
        };
        assert!(check_writes(&r, std::slice::from_ref(&fenced_late)).is_empty());
        let fenced_while_valid = Write {
            within_hold: true,
            ..fenced_late
        };
        assert_eq!(check_writes(&r, &[fenced_while_valid]).len(), 1);
    }

    #[test]
    fn hierarchy_conflicts_need_related_paths_and_an_exclusive_hold() {
        let h = |path: &str, lease: &str, exclusive: bool, acked: i64, end: i64| Hold5 {
            path: path.into(),
            lease: lease.into(),
            exclusive,
            acked,
            end,
        };
        assert!(related("a", "a/b") && related("a/b/c", "a") && related("a", "a"));
        assert!(!related("a", "ab") && !related("a/b", "a/c"));
        let fine = [
            h("a/b", "l1", true, 0, 10),
            h("a/c", "l2", true, 0, 10),
            h("e", "l3", false, 0, 10),
            h("e/f", "l4", false, 0, 10),
            h("a", "l5", true, 10, 20),
            h("a/b", "l1", true, 5, 8),
        ];
        assert!(check_hierarchy(&fine).is_empty());
        assert_eq!(
            check_hierarchy(&[h("a", "l1", true, 0, 10), h("a/b/c", "l2", false, 5, 15)]).len(),
            1
        );
        assert_eq!(
            check_hierarchy(&[h("e/f", "l1", false, 0, 10), h("e", "l2", true, 5, 15)]).len(),
            1
        );
    }
}
