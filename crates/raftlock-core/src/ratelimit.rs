//! Fixed-window request counting (project-lock rate limit, and the optional hierarchical limit).
//!
//! Pure: the caller passes the time. The server keeps one instance on the node that decides
//! requests (the leader), so each request is counted once cluster-wide.

use std::collections::HashMap;

use crate::{Nanos, SECOND};

const MINUTE: Nanos = 60 * SECOND;

/// Counts requests per (bucket) in the current clock minute.
#[derive(Debug, Default)]
pub struct FixedWindow {
    /// The start of the minute the counts belong to; older counts are dropped wholesale.
    window_start: Nanos,
    /// Requests seen per bucket in this minute: the server uses `"<project>"` for project
    /// locks and `"<project>#hier"` for hierarchical locks (separate windows).
    counts: HashMap<String, u32>,
}

impl FixedWindow {
    /// Counts one request for `bucket` at `now`. Returns `Err(retry_after_seconds)` when the
    /// request exceeds `limit` for this minute; a `limit` of 0 means unlimited (and uncounted).
    pub fn count(&mut self, bucket: &str, limit: u32, now: Nanos) -> Result<(), u64> {
        if limit == 0 {
            return Ok(());
        }
        let start = now - now.rem_euclid(MINUTE);
        if start != self.window_start {
            self.window_start = start;
            self.counts.clear();
        }
        let count = self.counts.entry(bucket.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        if *count > limit {
            let left = (start + MINUTE - now + SECOND - 1) / SECOND;
            return Err(left.max(1) as u64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_bucket_and_resets_each_minute() {
        let mut w = FixedWindow::default();
        let t0 = 1_000 * MINUTE + 15 * SECOND;
        for _ in 0..3 {
            assert!(w.count("p", 3, t0).is_ok());
        }
        assert_eq!(w.count("p", 3, t0), Err(45));
        assert!(
            w.count("q", 3, t0).is_ok(),
            "other projects are independent"
        );
        assert_eq!(w.count("p", 3, t0 + 44 * SECOND + 1), Err(1));
        assert!(w.count("p", 3, t0 + 45 * SECOND).is_ok(), "new minute");
    }

    #[test]
    fn zero_means_unlimited() {
        let mut w = FixedWindow::default();
        for _ in 0..10_000 {
            assert!(w.count("p", 0, 5).is_ok());
        }
    }
}
