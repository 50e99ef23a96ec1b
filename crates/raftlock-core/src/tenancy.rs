//! Tenancy: projects and their API keys — the records, what a key may do, and the tenancy
//! commands (create/update project, create/revoke key) as the machine applies them.
//!
//! A key's secret is never stored: the server hashes it (SHA-256) before proposing, and
//! authentication compares hashes in constant time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::{validate, Nanos};

/// Default project-lock rate limit: requests per project per fixed clock minute.
pub const DEFAULT_LOCK_OPS_PER_MINUTE: u32 = 600;

/// The scope a scoped key needs to call lock endpoints.
pub const LOCKS_MANAGE: &str = "locks.manage";

pub use raftlock_api::admin::{KeyInfo as KeyView, KeyKind, Project as ProjectView};

/// A registered key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Public identifier, embedded in the secret so lookup needs no hash index.
    pub key_id: String,
    pub kind: KeyKind,
    pub scopes: Vec<String>,
    /// SHA-256 of the full secret.
    pub secret_hash: [u8; 32],
    /// Revoked keys stay listed (for audit) but never authenticate.
    pub revoked: bool,
    pub created_at: Nanos,
}

impl KeyRecord {
    /// Whether this key may call the lock-API lock endpoints.
    pub fn may_manage_locks(&self) -> bool {
        match self.kind {
            KeyKind::ServiceRole => true,
            KeyKind::Scoped => self.scopes.iter().any(|s| s == LOCKS_MANAGE),
            KeyKind::Anon => false,
        }
    }

    /// Constant-time comparison of the stored hash with the presented one.
    pub fn hash_matches(&self, presented: &[u8; 32]) -> bool {
        let diff = self
            .secret_hash
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }

    pub fn view(&self, project: &str) -> KeyView {
        KeyView {
            project: project.to_string(),
            key_id: self.key_id.clone(),
            kind: self.kind,
            scopes: self.scopes.clone(),
            revoked: self.revoked,
        }
    }
}

/// The tenancy part of a project (its locks live beside it in the machine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectSettings {
    pub created_at: Nanos,
    pub lock_ops_per_minute: u32,
    pub hier_ops_per_minute: u32,
    pub keys: BTreeMap<String, KeyRecord>,
}

impl ProjectSettings {
    pub fn new(created_at: Nanos) -> Self {
        ProjectSettings {
            created_at,
            lock_ops_per_minute: DEFAULT_LOCK_OPS_PER_MINUTE,
            hier_ops_per_minute: 0,
            keys: BTreeMap::new(),
        }
    }

    pub fn view(&self, name: &str) -> ProjectView {
        ProjectView {
            name: name.to_string(),
            created_at: self.created_at,
            lock_ops_per_minute: self.lock_ops_per_minute,
            hier_ops_per_minute: self.hier_ops_per_minute,
            keys: self.keys.values().map(|k| k.view(name)).collect(),
        }
    }
}

// ---- the tenancy commands, as the machine applies them ----------------------------------

/// Every project by name (a field of the machine).
type Projects = BTreeMap<String, ProjectSettings>;

/// `CreateProject`: a new tenant with the default rate limits.
pub fn create_project(
    projects: &mut Projects,
    name: &str,
    t: Nanos,
) -> Result<ProjectView, CoreError> {
    validate::simple_name("name", name)?;
    if projects.contains_key(name) {
        return Err(CoreError::AlreadyExists("project".into()));
    }
    let settings = ProjectSettings::new(t);
    let view = settings.view(name);
    projects.insert(name.to_string(), settings);
    Ok(view)
}

/// `UpdateProject`: per-project rate limits; `None` keeps a setting.
pub fn update_project(
    projects: &mut Projects,
    name: &str,
    lock_ops_per_minute: Option<u32>,
    hier_ops_per_minute: Option<u32>,
) -> Result<ProjectView, CoreError> {
    let p = projects
        .get_mut(name)
        .ok_or(CoreError::NotFound("project".into()))?;
    if let Some(n) = lock_ops_per_minute {
        p.lock_ops_per_minute = n;
    }
    if let Some(n) = hier_ops_per_minute {
        p.hier_ops_per_minute = n;
    }
    Ok(p.view(name))
}

/// The parts of a `CreateKey` command.
pub struct NewKey<'a> {
    pub key_id: &'a str,
    pub kind: KeyKind,
    pub scopes: &'a [String],
    /// SHA-256 of the secret; the secret itself never reaches the state.
    pub secret_hash: [u8; 32],
}

/// `CreateKey`: registers a key under its project; `key_index` finds the project by key id.
pub fn create_key(
    projects: &mut Projects,
    key_index: &mut BTreeMap<String, String>,
    project: &str,
    key: NewKey<'_>,
    t: Nanos,
) -> Result<KeyView, CoreError> {
    validate::key_scopes(key.scopes)?;
    if key_index.contains_key(key.key_id) {
        return Err(CoreError::AlreadyExists("key".into()));
    }
    let p = projects
        .get_mut(project)
        .ok_or(CoreError::NotFound("project".into()))?;
    let record = KeyRecord {
        key_id: key.key_id.to_string(),
        kind: key.kind,
        scopes: key.scopes.to_vec(),
        secret_hash: key.secret_hash,
        revoked: false,
        created_at: t,
    };
    let view = record.view(project);
    p.keys.insert(key.key_id.to_string(), record);
    key_index.insert(key.key_id.to_string(), project.to_string());
    Ok(view)
}

/// `RevokeKey`: the key stays listed, revoked; it stops authenticating once applied.
pub fn revoke_key(
    projects: &mut Projects,
    project: &str,
    key_id: &str,
) -> Result<KeyView, CoreError> {
    let key = projects
        .get_mut(project)
        .and_then(|p| p.keys.get_mut(key_id))
        .ok_or(CoreError::NotFound("key".into()))?;
    key.revoked = true;
    Ok(key.view(project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: KeyKind, scopes: &[&str]) -> KeyRecord {
        KeyRecord {
            key_id: "k".into(),
            kind,
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            secret_hash: [7; 32],
            revoked: false,
            created_at: 0,
        }
    }

    #[test]
    fn who_may_manage_locks() {
        assert!(key(KeyKind::ServiceRole, &[]).may_manage_locks());
        assert!(key(KeyKind::Scoped, &["x", LOCKS_MANAGE]).may_manage_locks());
        assert!(!key(KeyKind::Scoped, &["locks.read"]).may_manage_locks());
        assert!(!key(KeyKind::Anon, &[LOCKS_MANAGE]).may_manage_locks());
    }

    #[test]
    fn hash_comparison() {
        let k = key(KeyKind::ServiceRole, &[]);
        assert!(k.hash_matches(&[7; 32]));
        let mut other = [7; 32];
        other[31] = 8;
        assert!(!k.hash_matches(&other));
    }
}
