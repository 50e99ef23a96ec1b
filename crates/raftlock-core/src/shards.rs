//! The shard map, kept by the meta group: the data shards of the cluster (each a Raft group of
//! its own on some of the nodes) and the shard each project lives on.
//!
//! Shard 0 is the meta group itself. A cluster that never created a shard keeps every project
//! there (so a data directory of the release before shards is a cluster of one shard). Once
//! data shards exist, new projects go to them — the one with the fewest projects, unless the
//! operator names one — so the meta group stays small, and every node can hold a replica of it
//! without holding the tenants' data. A project's shard is fixed when it is created: no
//! operation ever spans two groups.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::Nanos;

/// A shard's id: its Raft group's id.
pub type ShardId = u32;
/// The meta group, which is also the shard of every project not placed elsewhere.
pub const META_SHARD: ShardId = 0;
/// Most data shards a cluster may have.
pub const MAX_SHARDS: usize = 256;
/// Largest voter set of a shard.
pub const MAX_SHARD_MEMBERS: usize = 7;

/// One data shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// Node ids of its voters.
    pub members: BTreeSet<u64>,
    /// When it was created (log time).
    pub created_at: Nanos,
}

/// The data shards and the projects placed on them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shards {
    /// Data shards by id (the meta group, shard 0, is not listed).
    shards: BTreeMap<ShardId, Shard>,
    /// project → its shard, for projects not on the meta group.
    placements: BTreeMap<String, ShardId>,
}

/// Why `members` cannot be a shard's voter set, if it cannot.
pub fn check_members(members: &BTreeSet<u64>) -> Result<(), CoreError> {
    let n = members.len();
    if n == 0 || n > MAX_SHARD_MEMBERS || n.is_multiple_of(2) {
        return Err(CoreError::invalid(
            "members",
            format!("a shard has an odd number of voters, 1 to {MAX_SHARD_MEMBERS}; got {n}"),
        ));
    }
    if members.contains(&0) {
        return Err(CoreError::invalid("members", "node ids start at 1"));
    }
    Ok(())
}

impl Shards {
    /// Adds a data shard on `members`; its id is the next after the highest so far.
    pub fn create(&mut self, members: &BTreeSet<u64>, t: Nanos) -> Result<ShardId, CoreError> {
        check_members(members)?;
        if self.shards.len() >= MAX_SHARDS {
            return Err(CoreError::ResourceExhausted(format!(
                "a cluster has at most {MAX_SHARDS} shards"
            )));
        }
        let id = self.shards.keys().next_back().map_or(1, |last| last + 1);
        let shard = Shard {
            members: members.clone(),
            created_at: t,
        };
        self.shards.insert(id, shard);
        Ok(id)
    }

    /// Refuses a shard that does not exist (the meta group always does).
    pub fn check_exists(&self, shard: ShardId) -> Result<(), CoreError> {
        if shard == META_SHARD || self.shards.contains_key(&shard) {
            Ok(())
        } else {
            Err(CoreError::NotFound("shard".into()))
        }
    }

    /// Places a project being created on `shard` (checked with [`Self::check_exists`]
    /// first). Only a new project is placed: one that exists keeps its shard, since its data
    /// would be left behind.
    pub fn place_new(&mut self, project: &str, shard: ShardId) {
        if shard != META_SHARD {
            self.placements.insert(project.to_string(), shard);
        }
    }

    /// The shard `project` lives on.
    pub fn shard_of(&self, project: &str) -> ShardId {
        self.placements.get(project).copied().unwrap_or(META_SHARD)
    }

    /// A data shard, by id.
    pub fn get(&self, id: ShardId) -> Option<&Shard> {
        self.shards.get(&id)
    }

    /// Every data shard, by id.
    pub fn iter(&self) -> impl Iterator<Item = (ShardId, &Shard)> {
        self.shards.iter().map(|(id, s)| (*id, s))
    }

    /// The projects placed on data shard `id`.
    pub fn projects_on(&self, id: ShardId) -> Vec<String> {
        (self.placements.iter())
            .filter(|(_, s)| **s == id)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Where a new project goes: the data shard with the fewest projects (the lowest id among
    /// equals), or the meta group when there is none.
    pub fn least_loaded(&self) -> ShardId {
        let mut counts: BTreeMap<ShardId, usize> = self.shards.keys().map(|id| (*id, 0)).collect();
        for shard in self.placements.values() {
            *counts.entry(*shard).or_default() += 1;
        }
        (counts.into_iter())
            .min_by_key(|(id, n)| (*n, *id))
            .map_or(META_SHARD, |(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn shards_are_numbered_and_checked() {
        let mut s = Shards::default();
        assert_eq!(s.least_loaded(), META_SHARD, "no data shard yet");
        assert_eq!(s.create(&set(&[4, 5, 6]), 1), Ok(1));
        assert_eq!(s.create(&set(&[1, 2, 3]), 2), Ok(2));
        for bad in [&[][..], &[1, 2], &[0, 1, 2], &[1, 2, 3, 4, 5, 6, 7, 8, 9]] {
            assert!(
                matches!(s.create(&set(bad), 3), Err(CoreError::Invalid { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(s.iter().count(), 2, "a refused create adds nothing");
    }

    #[test]
    fn projects_go_to_the_least_loaded_shard() {
        let mut s = Shards::default();
        s.create(&set(&[1, 2, 3]), 1).unwrap();
        s.create(&set(&[4, 5, 6]), 1).unwrap();
        for p in ["a", "b", "c"] {
            let shard = s.least_loaded();
            s.check_exists(shard).unwrap();
            s.place_new(p, shard);
        }
        assert_eq!(
            (s.shard_of("a"), s.shard_of("b"), s.shard_of("c")),
            (1, 2, 1)
        );
        assert_eq!(s.projects_on(1), vec!["a".to_string(), "c".to_string()]);
        assert!(s.check_exists(9).is_err(), "no such shard");
        assert!(s.check_exists(META_SHARD).is_ok());
        assert_eq!(s.shard_of("never-placed"), META_SHARD);
    }
}
