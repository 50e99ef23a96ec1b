//! Input limits of project-lock and hierarchical. Each check returns a [`CoreError::Invalid`] naming the field, so
//! the server can answer 400 with a clear message before anything is proposed, and `apply`
//! repeats the same checks so no invalid command can ever change state.

use std::collections::BTreeMap;

use crate::error::CoreError;

/// project-lock TTL bounds in seconds.
pub const MIN_LOCK_TTL: u64 = 5;
/// 90 days: also the absolute deadline of every project-lock lease.
pub const MAX_LOCK_TTL: u64 = 7_776_000;
/// hierarchical lease TTL bounds in seconds.
pub const MIN_LEASE_TTL: u64 = 1;
pub const MAX_LEASE_TTL: u64 = 300;
/// hierarchical blocking-acquire bound in seconds.
pub const MAX_ACQUIRE_TIMEOUT: u64 = 300;
/// hierarchical metadata bounds.
pub const MAX_METADATA_ENTRIES: usize = 32;
pub const MAX_METADATA_KEY: usize = 128;
pub const MAX_METADATA_VALUE: usize = 256;
pub const MAX_DESCRIPTION: usize = 1024;
/// hierarchical largest page size, as Grackle allows.
pub const MAX_PAGE: u32 = 250;
/// hierarchical page size when a list call asks for 0 (no limit given).
pub const DEFAULT_PAGE: u32 = 100;

type Result<T = ()> = std::result::Result<T, CoreError>;

/// project-lock lock key: 1–128 characters of letters, digits, `.`, `_`, `:`, `-`.
pub fn lock_key(key: &str) -> Result {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if key.is_empty() || key.len() > 128 || !key.chars().all(ok_char) {
        return Err(CoreError::invalid(
            "key",
            "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'",
        ));
    }
    Ok(())
}

/// project-lock TTL: 5 s to 7,776,000 s.
pub fn lock_ttl(ttl: u64) -> Result {
    if !(MIN_LOCK_TTL..=MAX_LOCK_TTL).contains(&ttl) {
        return Err(CoreError::invalid(
            "ttl_seconds",
            format!("must be between {MIN_LOCK_TTL} and {MAX_LOCK_TTL}"),
        ));
    }
    Ok(())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Project and namespace names: 1–128 of `[-_0-9a-zA-Z]`.
pub fn simple_name(field: &str, name: &str) -> Result {
    if name.is_empty() || name.len() > 128 || !name.chars().all(is_name_char) {
        return Err(CoreError::invalid(
            field,
            "must be 1-128 characters of [-_0-9a-zA-Z]",
        ));
    }
    Ok(())
}

/// hierarchical lock name: 1–256 characters matching `^[-_0-9a-zA-Z]+(/[-_0-9a-zA-Z]+)*$`.
pub fn lock_name(name: &str) -> Result {
    let segments_ok = name
        .split('/')
        .all(|seg| !seg.is_empty() && seg.chars().all(is_name_char));
    if name.is_empty() || name.len() > 256 || !segments_ok {
        return Err(CoreError::invalid(
            "lock_name",
            "must be 1-256 characters of '/'-separated non-empty [-_0-9a-zA-Z] segments",
        ));
    }
    Ok(())
}

/// hierarchical process id: 1–128 printable characters.
pub fn process_id(id: &str) -> Result {
    let n = id.chars().count();
    if n == 0 || n > 128 || id.chars().any(|c| c.is_control()) {
        return Err(CoreError::invalid(
            "process_id",
            "must be 1-128 printable characters",
        ));
    }
    Ok(())
}

/// hierarchical lease TTL: 1–300 s.
pub fn lease_ttl(ttl: u64) -> Result {
    if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
        return Err(CoreError::invalid(
            "ttl_seconds",
            format!("must be between {MIN_LEASE_TTL} and {MAX_LEASE_TTL}"),
        ));
    }
    Ok(())
}

/// hierarchical blocking timeout: 0–300 s.
pub fn acquire_timeout(timeout: u64) -> Result {
    if timeout > MAX_ACQUIRE_TIMEOUT {
        return Err(CoreError::invalid(
            "timeout_seconds",
            format!("must be between 0 and {MAX_ACQUIRE_TIMEOUT}"),
        ));
    }
    Ok(())
}

/// hierarchical metadata: at most 32 entries, keys 1–128 bytes, values up to 256 bytes.
pub fn metadata(meta: &BTreeMap<String, String>) -> Result {
    if meta.len() > MAX_METADATA_ENTRIES {
        return Err(CoreError::invalid(
            "metadata",
            format!("at most {MAX_METADATA_ENTRIES} entries"),
        ));
    }
    for (k, v) in meta {
        if k.is_empty() || k.len() > MAX_METADATA_KEY {
            return Err(CoreError::invalid("metadata", "keys must be 1-128 bytes"));
        }
        if v.len() > MAX_METADATA_VALUE {
            return Err(CoreError::invalid(
                "metadata",
                "values must be at most 256 bytes",
            ));
        }
    }
    Ok(())
}

/// `UpdateNamespace`'s `expected_version`: required and at least 1 (versions start at 1), as
/// Grackle documents it — an update is always conditional. Checked before proposing only:
/// updates already in a log were applied without it and must replay the same.
pub fn expected_version(version: Option<u64>) -> Result {
    match version {
        Some(v) if v >= 1 => Ok(()),
        _ => Err(CoreError::invalid(
            "expected_version",
            "is required: the current version (versions start at 1)",
        )),
    }
}

/// Most scopes a key may carry.
pub const MAX_SCOPES: usize = 32;
/// Longest scope, in bytes.
pub const MAX_SCOPE: usize = 64;

/// A key's scopes: at most 32 of 1–64 bytes.
pub fn key_scopes(scopes: &[String]) -> Result {
    if scopes.len() > MAX_SCOPES || scopes.iter().any(|s| s.is_empty() || s.len() > MAX_SCOPE) {
        return Err(CoreError::invalid(
            "scopes",
            "at most 32 entries of 1-64 characters",
        ));
    }
    Ok(())
}

/// Waiter ids chosen by the proposer: 1–64 printable ASCII characters.
pub fn waiter_id(id: &str) -> Result {
    if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(CoreError::invalid(
            "waiter_id",
            "must be 1-64 printable ASCII characters",
        ));
    }
    Ok(())
}

/// Hierarchical namespace description: up to 1024 bytes.
pub fn description(text: &str) -> Result {
    if text.len() > MAX_DESCRIPTION {
        return Err(CoreError::invalid(
            "description",
            "must be at most 1024 bytes",
        ));
    }
    Ok(())
}

/// Semaphore permits and weights: 1 to 2^63-1 (Grackle's int64, positive).
pub fn permits(field: &str, value: u64) -> Result {
    if value == 0 || value > i64::MAX as u64 {
        return Err(CoreError::invalid(field, "must be between 1 and 2^63-1"));
    }
    Ok(())
}

/// Most jobs one wait group waits for (Grackle's limit).
pub const MAX_COUNTER: u64 = 100_000_000;
/// Most jobs in one report.
pub const MAX_JOBS_PER_REPORT: usize = 50;
/// A finished wait group's retention: 60 s (Grackle's minimum) to 30 days.
pub const MIN_RETENTION_SECONDS: u64 = 60;
pub const MAX_RETENTION_SECONDS: u64 = 30 * 24 * 3600;
/// Most processes one barrier waits for (Grackle defines this limit but enforces none).
pub const MAX_EXPECTED_PROCESSES: u64 = 1_000_000;

/// A wait group's `counter`: 1 to [`MAX_COUNTER`].
pub fn wait_group_counter(counter: u64) -> Result {
    let max = MAX_COUNTER;
    if counter == 0 || counter > max {
        return Err(CoreError::invalid(
            "counter",
            format!("must be between 1 and {max}"),
        ));
    }
    Ok(())
}

/// A retention or idle time: 60 s to 30 days.
pub fn retention(field: &str, seconds: u64) -> Result {
    use self::{MAX_RETENTION_SECONDS as MAX, MIN_RETENTION_SECONDS as MIN};
    if !(MIN..=MAX).contains(&seconds) {
        return Err(CoreError::invalid(
            field,
            format!("must be between {MIN} and {MAX}"),
        ));
    }
    Ok(())
}

/// A report of completed jobs: 1–50 jobs, each with a valid id and metadata.
pub fn job_batch(jobs: &[(String, BTreeMap<String, String>)]) -> Result {
    let max = MAX_JOBS_PER_REPORT;
    if jobs.is_empty() || jobs.len() > max {
        return Err(CoreError::invalid(
            "jobs",
            format!("must hold 1 to {max} jobs"),
        ));
    }
    for (id, meta) in jobs {
        simple_name("job_id", id)?;
        metadata(meta)?;
    }
    Ok(())
}

/// A barrier's `expected_processes`: 1 to [`MAX_EXPECTED_PROCESSES`].
pub fn expected_processes(n: u64) -> Result {
    let max = MAX_EXPECTED_PROCESSES;
    if n == 0 || n > max {
        return Err(CoreError::invalid(
            "expected_processes",
            format!("must be between 1 and {max}"),
        ));
    }
    Ok(())
}

/// A barrier generation: from 1.
pub fn generation(field: &str, generation: u64) -> Result {
    if generation == 0 {
        return Err(CoreError::invalid(field, "must be at least 1"));
    }
    Ok(())
}

/// Hierarchical page size: 0–250, where 0 means 100. Returns the effective size.
pub fn page_limit(limit: u32) -> Result<usize> {
    match limit {
        0 => Ok(DEFAULT_PAGE as usize),
        1..=MAX_PAGE => Ok(limit as usize),
        _ => Err(CoreError::invalid("limit", "must be between 0 and 250")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys() {
        assert!(lock_key("job:42.a_b-c").is_ok());
        assert!(lock_key(&"k".repeat(128)).is_ok());
        assert!(lock_key("").is_err());
        assert!(lock_key(&"k".repeat(129)).is_err());
        assert!(lock_key("a/b").is_err());
        assert!(lock_key("é").is_err());
    }

    #[test]
    fn ttls() {
        assert!(lock_ttl(4).is_err());
        assert!(lock_ttl(5).is_ok());
        assert!(lock_ttl(7_776_000).is_ok());
        assert!(lock_ttl(7_776_001).is_err());
        assert!(lease_ttl(0).is_err());
        assert!(lease_ttl(1).is_ok());
        assert!(lease_ttl(300).is_ok());
        assert!(lease_ttl(301).is_err());
        assert!(acquire_timeout(300).is_ok());
        assert!(acquire_timeout(301).is_err());
    }

    #[test]
    fn lock_names() {
        assert!(lock_name("a").is_ok());
        assert!(lock_name("users/123/profile").is_ok());
        assert!(lock_name(&"a".repeat(256)).is_ok());
        assert!(lock_name(&"a".repeat(257)).is_err());
        for bad in ["", "/a", "a/", "a//b", "a b", "a.b"] {
            assert!(lock_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn names_and_process_ids() {
        assert!(simple_name("name", "User-Objects_1").is_ok());
        assert!(simple_name("name", "a.b").is_err());
        assert!(simple_name("name", "").is_err());
        assert!(process_id("worker 7 @ host").is_ok());
        assert!(process_id("bad\nid").is_err());
        assert!(process_id(&"p".repeat(129)).is_err());
    }

    #[test]
    fn metadata_limits() {
        let mut m: BTreeMap<String, String> = (0..32)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert!(metadata(&m).is_ok());
        m.insert("extra".into(), "v".into());
        assert!(metadata(&m).is_err());
        let m = BTreeMap::from([("k".to_string(), "v".repeat(257))]);
        assert!(metadata(&m).is_err());
        let m = BTreeMap::from([(String::new(), "v".to_string())]);
        assert!(metadata(&m).is_err());
    }

    #[test]
    fn page_limits() {
        assert_eq!(page_limit(0).unwrap(), 100);
        assert_eq!(page_limit(7).unwrap(), 7);
        assert_eq!(page_limit(250).unwrap(), 250);
        assert!(page_limit(251).is_err());
    }
}
