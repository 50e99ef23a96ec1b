//! project locks: named leases with a caller-chosen ownership token and a fencing token.
//!
//! Rules (t is the command's time):
//! - a lease is *live* while `t < expires_at` and *takeover-eligible* once
//!   `t >= expires_at + 1 s`; in between it is lapsed but still blocks others;
//! - a new lease gets a fresh fencing token and an absolute deadline `t + 90 days`;
//! - renewals and same-token re-acquires set `expires_at = min(t + ttl, deadline)`.

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use serde::{Deserialize, Serialize};

use crate::budget::{self, ProjectTotals, Scratch};
use crate::error::CoreError;
use crate::validate;
use crate::{Nanos, SECOND};

/// Extra wait after expiry before another token may take over (clock-skew allowance).
pub const TAKEOVER_GRACE: Nanos = SECOND;
/// Absolute lifetime of one lease, whatever its renewals.
pub const LEASE_DEADLINE: Nanos = validate::MAX_LOCK_TTL as Nanos * SECOND;
/// The first fencing token; all tokens lie in (2^52, 2^53) so JavaScript reads them exactly.
pub const FIRST_FENCING_TOKEN: u64 = (1 << 52) + 1;

/// A name kept once however many places refer to it: a key is stored by its project's lease
/// map and eligibility index, a project by the lease map and `due`, each sharing one
/// allocation. Two handles on one allocation compare equal without reading it. Encodes as a
/// string; decodes with one allocation.
#[derive(Debug, Clone, Eq)]
pub struct Name(Arc<str>);

impl Name {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name(Arc::from(s))
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct NameVisitor;
        impl serde::de::Visitor<'_> for NameVisitor {
            type Value = Name;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Name, E> {
                Ok(Name::from(v))
            }
        }
        d.deserialize_str(NameVisitor)
    }
}

/// The caller's ownership token (a UUID) as two halves: a `u128` field is 16-byte aligned and
/// would pad every [`ProjectLease`] from 40 to 48 bytes (a million leases, 8 MB, and more in
/// a B-tree leaf's unused slots). Encodes as the `u128` it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u64; 2]);

impl From<u128> for Token {
    fn from(v: u128) -> Self {
        Token([(v >> 64) as u64, v as u64])
    }
}

impl From<Token> for u128 {
    fn from(t: Token) -> Self {
        (t.0[0] as u128) << 64 | t.0[1] as u128
    }
}

impl Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        u128::from(*self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        u128::deserialize(d).map(Token::from)
    }
}

/// The current lease of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectLease {
    /// The caller's UUID; only it may renew or release.
    pub token: Token,
    /// Rises whenever the key changes hands; constant for one lease.
    pub fencing_token: u64,
    pub expires_at: Nanos,
    /// `acquired_at + 90 days`; nothing moves it.
    pub deadline: Nanos,
}

impl ProjectLease {
    fn takeover_eligible(&self, t: Nanos) -> bool {
        t >= self.eligible_at()
    }

    fn eligible_at(&self) -> Nanos {
        self.expires_at.saturating_add(TAKEOVER_GRACE)
    }
}

/// What `GET /locks/{key}` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockRead {
    Free,
    Held {
        expires_at: Nanos,
        fencing_token: u64,
    },
}

/// All project locks of all projects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ProjectLocksWire")]
pub struct ProjectLocks {
    /// project → its keys' leases. Nested so lookups borrow `&str` without allocating.
    /// Persistent (structurally shared) maps: cloning the whole set is O(1), so a snapshot
    /// copies the state in a moment and encodes the copy off the state lock. They encode
    /// exactly as `BTreeMap`/`BTreeSet` do (a project as its key → lease map).
    leases: OrdMap<Name, ProjectKeys>,
    /// (earliest takeover-eligible time of a project's leases, project), one per project:
    /// which project a tick reaps from first. Follows from `leases`, so it is not encoded.
    #[serde(skip)]
    due: OrdSet<(Nanos, Name)>,
    /// The next fencing token to hand out; one global counter so tokens never fall for any
    /// key (gaps between a key's tokens are allowed).
    next_fencing_token: u64,
    /// Bytes each project's keys are charged ([`budget::lock_key_bytes`]), so the byte budget
    /// check costs a lookup. Not state: counted again after decoding ([`Self::count_usage`]).
    #[serde(skip)]
    bytes: Scratch<ProjectTotals>,
    /// The per-project byte budget: `None` is the release's
    /// [`budget::MAX_LOCK_BYTES_PER_PROJECT`], the same on every node; tests lower it.
    #[serde(skip)]
    byte_quota: Scratch<Option<usize>>,
}

/// One project's leases, and the index a tick reaps them by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ProjectKeys {
    /// key → lease.
    leases: OrdMap<Name, ProjectLease>,
    /// (takeover-eligible time, key): lets a tick forget lapsed leases in time proportional
    /// to what lapsed, not to what exists. Kept exact on every change. It follows from
    /// `leases`, so a snapshot leaves it out (29 % of a large snapshot's bytes, 47 % of its
    /// encoding) and every decode builds it again ([`DecodedKeys`]). Per project, so an entry
    /// is a time and the key's shared name (24 bytes), not also the project's.
    by_eligibility: OrdSet<(Nanos, Name)>,
}

impl ProjectKeys {
    /// The keys of `leases` with their index built ([`Self::eligibility_index`]).
    fn indexed(leases: OrdMap<Name, ProjectLease>) -> Self {
        let mut keys = ProjectKeys {
            leases,
            by_eligibility: OrdSet::new(),
        };
        keys.by_eligibility = keys.eligibility_index();
        keys
    }

    /// Every lease's (takeover-eligible time, key): what `by_eligibility` holds when it is
    /// exact.
    fn eligibility_index(&self) -> OrdSet<(Nanos, Name)> {
        // In key order as collected; a stable sort by time alone then gives the index's
        // (time, key) order without comparing a name.
        let mut sorted: Vec<_> = self
            .leases
            .iter()
            .map(|(key, lease)| (lease.eligible_at(), key.clone()))
            .collect();
        sorted.sort_by_key(|(eligible, _)| *eligible);
        let mut index = OrdSet::new();
        insert_filling_leaves(sorted, |entry| {
            index.insert(entry);
        });
        index
    }

    /// When the first of these leases becomes takeover-eligible.
    fn earliest(&self) -> Option<Nanos> {
        self.by_eligibility.get_min().map(|(t, _)| *t)
    }

    /// Stores `lease` for `key` and keeps the index exact; returns the key's name (the one
    /// already stored, or a new allocation shared by the map and the index) and the lease it
    /// replaced. `known_absent`: the caller just found no lease for `key`, so the map is walked
    /// once (to insert), not twice — a fresh acquire's walks are most of its apply. The
    /// result is the same either way.
    fn put(
        &mut self,
        key: &str,
        lease: ProjectLease,
        known_absent: bool,
    ) -> (Name, Option<ProjectLease>) {
        let eligible = lease.eligible_at();
        let stored = if known_absent {
            None
        } else {
            self.leases.get_key_value_mut(key)
        };
        let (key, old) = match stored {
            Some((name, stored)) => (name.clone(), Some(std::mem::replace(stored, lease))),
            None => {
                let name = Name::from(key);
                let old = self.leases.insert(name.clone(), lease);
                (name, old)
            }
        };
        if let Some(old) = &old {
            self.by_eligibility
                .remove(&(old.eligible_at(), key.clone()));
        }
        self.by_eligibility.insert((eligible, key.clone()));
        (key, old)
    }

    /// Removes `key`'s lease and its index entry; returns the key's name if it was stored.
    fn remove(&mut self, key: &str) -> Option<Name> {
        let (key, old) = self.leases.remove_with_key(key)?;
        self.by_eligibility
            .remove(&(old.eligible_at(), key.clone()));
        Some(key)
    }

    /// Forgets every lease takeover-eligible at or before `t`; returns how many, and the
    /// bytes their keys were charged.
    fn reap(&mut self, t: Nanos) -> (usize, usize) {
        let (mut reaped, mut freed) = (0, 0);
        while self.earliest().is_some_and(|e| e <= t) {
            let (_, key) = self.by_eligibility.remove_min().expect("non-empty");
            self.leases.remove(&key);
            freed += budget::lock_key_bytes(&key);
            reaped += 1;
        }
        (reaped, freed)
    }
}

impl Serialize for ProjectKeys {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.leases.serialize(s)
    }
}

/// What snapshot format 4 holds of [`ProjectLocks`]. Decoding goes through it, so the
/// eligibility index is built from the leases whatever decodes a state: a decoded machine
/// with an empty index would never reap a lease and would count none.
#[derive(Deserialize)]
struct ProjectLocksWire {
    leases: OrdMap<Name, DecodedKeys>,
    next_fencing_token: u64,
}

/// One project's leases as a snapshot holds them (in key order), decoded into a map whose
/// leaves are full ([`insert_filling_leaves`]; the older formats' maps, converted through it,
/// keep the shape they were decoded in).
#[derive(Clone)]
struct DecodedKeys(OrdMap<Name, ProjectLease>);

impl<'de> Deserialize<'de> for DecodedKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct KeysVisitor;
        impl<'de> serde::de::Visitor<'de> for KeysVisitor {
            type Value = DecodedKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of keys to leases")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> std::result::Result<DecodedKeys, A::Error> {
                let mut sorted = Vec::with_capacity(access.size_hint().unwrap_or(0));
                while let Some(entry) = access.next_entry()? {
                    sorted.push(entry);
                }
                let mut keys = OrdMap::new();
                insert_filling_leaves(sorted, |(key, lease)| {
                    keys.insert(key, lease);
                });
                Ok(DecodedKeys(keys))
            }
        }
        d.deserialize_map(KeysVisitor)
    }
}

/// Inserts `sorted` (in ascending order) by `insert` into an empty B-tree so that its leaves
/// end up full. imbl splits a full leaf in half, so entries inserted in order leave every leaf
/// half empty — a decoded state of 1M locks took twice the memory of the state it was
/// encoded from. Every other entry first, then the rest, fills each half-full leaf to the brim
/// instead. (Any order gives the same map; only its memory differs.)
fn insert_filling_leaves<T>(sorted: Vec<T>, mut insert: impl FnMut(T)) {
    let mut second = Vec::with_capacity(sorted.len() / 2);
    for (i, item) in sorted.into_iter().enumerate() {
        if i % 2 == 0 {
            insert(item);
        } else {
            second.push(item);
        }
    }
    second.into_iter().for_each(insert);
}

impl From<ProjectLocksWire> for ProjectLocks {
    fn from(wire: ProjectLocksWire) -> Self {
        let mut locks = ProjectLocks {
            leases: wire
                .leases
                .into_iter()
                .map(|(project, DecodedKeys(keys))| (project, ProjectKeys::indexed(keys)))
                .collect(),
            due: OrdSet::new(),
            next_fencing_token: wire.next_fencing_token,
            // Not encoded: counted from the state until `count_usage` keeps them.
            bytes: Scratch::default(),
            byte_quota: Scratch::default(),
        };
        locks.due = locks.due_index();
        locks
    }
}

/// [`ProjectLocks`] as snapshot formats 1–3 laid it out: with the eligibility index, which
/// is now built from the leases when a state is decoded. Field order is the encoding: do not
/// change it.
#[derive(Debug, Deserialize)]
pub struct ProjectLocksV3 {
    leases: OrdMap<Name, OrdMap<Name, ProjectLease>>,
    /// Read to skip it: the index is built again from `leases`, sharing their names.
    #[allow(dead_code)]
    by_eligibility: OrdSet<(Nanos, String, String)>,
    next_fencing_token: u64,
}

impl From<ProjectLocksV3> for ProjectLocks {
    fn from(v3: ProjectLocksV3) -> Self {
        ProjectLocksWire {
            leases: v3
                .leases
                .into_iter()
                .map(|(project, keys)| (project, DecodedKeys(keys)))
                .collect(),
            next_fencing_token: v3.next_fencing_token,
        }
        .into()
    }
}

impl Default for ProjectLocks {
    fn default() -> Self {
        ProjectLocks {
            leases: OrdMap::new(),
            due: OrdSet::new(),
            next_fencing_token: FIRST_FENCING_TOKEN,
            bytes: Scratch(ProjectTotals::counted(Default::default())),
            byte_quota: Scratch(None),
        }
    }
}

type Result<T> = std::result::Result<T, CoreError>;

impl ProjectLocks {
    /// An empty set whose projects may each keep at most `bytes` of keys (tests).
    pub fn with_byte_quota(bytes: usize) -> Self {
        ProjectLocks {
            byte_quota: Scratch(Some(bytes)),
            ..Default::default()
        }
    }

    /// Bytes `project`'s keys are charged (kept, or counted when not kept).
    pub fn stored_bytes(&self, project: &str) -> usize {
        self.bytes
            .0
            .get(project)
            .unwrap_or_else(|| self.count_bytes(project))
    }

    fn count_bytes(&self, project: &str) -> usize {
        self.leases.get(project).map_or(0, |keys| {
            keys.leases.keys().map(|k| budget::lock_key_bytes(k)).sum()
        })
    }

    /// Counts every project's bytes from the state, so later checks cost a lookup (after a
    /// snapshot was decoded).
    pub fn count_usage(&mut self) {
        let totals = self
            .leases
            .keys()
            .map(|p| (p.to_string(), self.count_bytes(p)))
            .collect();
        self.bytes.0 = ProjectTotals::counted(totals);
    }

    /// Every project's (earliest takeover-eligible time, project): what `due` holds when it is
    /// exact.
    fn due_index(&self) -> OrdSet<(Nanos, Name)> {
        self.leases
            .iter()
            .filter_map(|(project, keys)| Some((keys.earliest()?, project.clone())))
            .collect()
    }

    /// Whether the kept byte counts, each project's eligibility index and `due` equal what
    /// the leases give
    /// (tests).
    pub fn check_usage(&self) -> std::result::Result<(), String> {
        let stored = self.leases.keys().map(|p| &**p);
        for project in stored.chain(self.bytes.0.kept_projects().map(String::as_str)) {
            if self.stored_bytes(project) != self.count_bytes(project) {
                return Err(format!("{project}: project-lock bytes out of step"));
            }
        }
        for (project, keys) in &self.leases {
            if keys.by_eligibility != keys.eligibility_index() {
                return Err(format!(
                    "{}: project-lock eligibility index out of step with the leases",
                    &**project
                ));
            }
        }
        if self.due != self.due_index() {
            return Err("project-lock due index out of step with the projects".into());
        }
        Ok(())
    }

    /// Refuses a new key that would take `project` past its byte budget.
    fn check_room(&self, project: &str, key: &str) -> Result<()> {
        let quota = self
            .byte_quota
            .0
            .unwrap_or(budget::MAX_LOCK_BYTES_PER_PROJECT);
        if self.stored_bytes(project) + budget::lock_key_bytes(key) > quota {
            return Err(CoreError::ResourceExhausted(format!(
                "this project's locks use up its storage budget of {quota} bytes"
            )));
        }
        Ok(())
    }

    fn get(&self, project: &str, key: &str) -> Option<&ProjectLease> {
        self.leases.get(project)?.leases.get(key)
    }

    /// Stores `lease` for the key and keeps the indexes and the byte count exact
    /// (`known_absent`: see [`ProjectKeys::put`]).
    fn put(&mut self, project: &str, key: &str, lease: ProjectLease, known_absent: bool) {
        let project = match self.leases.get_key_value(project) {
            Some((name, _)) => name.clone(),
            None => Name::from(project),
        };
        let (key, old) = self.change_project(&project, |keys| keys.put(key, lease, known_absent));
        if old.is_none() {
            self.bytes.0.add(&project, budget::lock_key_bytes(&key));
        }
    }

    fn remove(&mut self, project: &str, key: &str) {
        let Some((project, _)) = self.leases.get_key_value(project) else {
            return;
        };
        let project = project.clone();
        if let Some(key) = self.change_project(&project, |keys| keys.remove(key)) {
            self.bytes.0.sub(&project, budget::lock_key_bytes(&key));
        }
    }

    /// Runs `change` on `project`'s leases (empty if it has none), then keeps what follows
    /// from them exact: `due` moves with the project's earliest eligible time, and a project
    /// left without a lease is dropped.
    fn change_project<R>(
        &mut self,
        project: &Name,
        change: impl FnOnce(&mut ProjectKeys) -> R,
    ) -> R {
        let keys = self.leases.entry(project.clone()).or_default();
        let before = keys.earliest();
        let out = change(keys);
        let after = keys.earliest();
        if keys.leases.is_empty() {
            self.leases.remove(project);
        }
        if before != after {
            if let Some(before) = before {
                self.due.remove(&(before, project.clone()));
            }
            if let Some(after) = after {
                self.due.insert((after, project.clone()));
            }
        }
        out
    }

    /// project-lock acquire.
    pub fn acquire(
        &mut self,
        project: &str,
        key: &str,
        token: u128,
        ttl_seconds: u64,
        t: Nanos,
    ) -> Result<(Nanos, u64)> {
        let ttl = ttl_seconds as Nanos * SECOND;
        match self.get(project, key) {
            Some(cur) if !cur.takeover_eligible(t) => {
                if cur.token != Token::from(token) {
                    return Err(CoreError::LockHeld);
                }
                if t >= cur.expires_at || t >= cur.deadline {
                    return Err(CoreError::OwnershipLost);
                }
                let lease = cur.clone();
                Ok(self.extend(project, key, lease, t + ttl))
            }
            held => {
                let absent = held.is_none();
                if absent {
                    self.check_room(project, key)?;
                }
                let fencing_token = self.next_fencing_token;
                self.next_fencing_token += 1;
                let lease = ProjectLease {
                    token: token.into(),
                    fencing_token,
                    expires_at: t + ttl,
                    deadline: t + LEASE_DEADLINE,
                };
                Ok(self.store(project, key, lease, absent))
            }
        }
    }

    /// Sets an existing lease's expiry to `min(until, deadline)` (absolute, not additive).
    fn extend(
        &mut self,
        project: &str,
        key: &str,
        lease: ProjectLease,
        until: Nanos,
    ) -> (Nanos, u64) {
        let expires_at = until.min(lease.deadline);
        let lease = ProjectLease {
            expires_at,
            ..lease
        };
        self.store(project, key, lease, false)
    }

    /// Stores the lease and returns what acquire/renew answer: (expires_at, fencing token)
    /// (`known_absent`: see [`ProjectKeys::put`]).
    fn store(
        &mut self,
        project: &str,
        key: &str,
        lease: ProjectLease,
        known_absent: bool,
    ) -> (Nanos, u64) {
        let answer = (lease.expires_at, lease.fencing_token);
        self.put(project, key, lease, known_absent);
        answer
    }

    /// project-lock renew: only the current token, only while live.
    pub fn renew(
        &mut self,
        project: &str,
        key: &str,
        token: u128,
        ttl_seconds: u64,
        t: Nanos,
    ) -> Result<(Nanos, u64)> {
        let ttl = ttl_seconds as Nanos * SECOND;
        match self.get(project, key) {
            Some(cur) if cur.token == Token::from(token) && t < cur.expires_at => {
                let lease = cur.clone();
                Ok(self.extend(project, key, lease, t + ttl))
            }
            _ => Err(CoreError::OwnershipLost),
        }
    }

    /// project-lock release: the owner deletes its lease; an absent (or takeover-eligible) lock is
    /// already released; anyone else gets `lock_ownership_lost` and changes nothing.
    pub fn release(&mut self, project: &str, key: &str, token: u128, t: Nanos) -> Result<()> {
        match self.get(project, key) {
            None => Ok(()),
            Some(cur) if cur.token == Token::from(token) || cur.takeover_eligible(t) => {
                self.remove(project, key);
                Ok(())
            }
            Some(_) => Err(CoreError::OwnershipLost),
        }
    }

    /// project-lock force release: drops whatever lease exists.
    pub fn force_release(&mut self, project: &str, key: &str) -> Result<()> {
        self.remove(project, key);
        Ok(())
    }

    /// project-lock read: held while `t < expires_at + 1 s`, so `Free` means an acquire would succeed.
    pub fn read(&self, project: &str, key: &str, t: Nanos) -> Result<LockRead> {
        Ok(match self.get(project, key) {
            Some(l) if !l.takeover_eligible(t) => LockRead::Held {
                expires_at: l.expires_at,
                fencing_token: l.fencing_token,
            },
            _ => LockRead::Free,
        })
    }

    /// Up to `limit` stored keys of `project` after `after` (in key order), as seen at `t`:
    /// `(key, lease, still live)`. Leases past expiry but within the takeover grace are listed
    /// as not live (still blocking a new owner); eligible ones are left out.
    pub fn list(
        &self,
        project: &str,
        after: &str,
        limit: usize,
        t: Nanos,
    ) -> Vec<(String, ProjectLease, bool)> {
        let Some(ProjectKeys { leases: keys, .. }) = self.leases.get(project) else {
            return Vec::new();
        };
        let from = (std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded);
        let range = if after.is_empty() {
            keys.range::<_, str>(..)
        } else {
            keys.range::<_, str>(from)
        };
        range
            .filter(|(_, l)| !l.takeover_eligible(t))
            .take(limit)
            .map(|(k, l)| (k.to_string(), l.clone(), t < l.expires_at))
            .collect()
    }

    /// Forgets every lease that became takeover-eligible at or before `t`.
    pub fn reap(&mut self, t: Nanos) -> usize {
        let mut reaped = 0;
        while self
            .due
            .get_min()
            .is_some_and(|(earliest, _)| *earliest <= t)
        {
            // Taken out first, so the loop moves on even if `leases` had no such project.
            let (_, project) = self.due.remove_min().expect("non-empty");
            let (count, freed) = self.change_project(&project, |keys| keys.reap(t));
            self.bytes.0.sub(&project, freed);
            reaped += count;
        }
        reaped
    }

    /// The fencing token the next new lease will get.
    pub fn next_fencing_token(&self) -> u64 {
        self.next_fencing_token
    }

    /// Moves the next fencing token forward by `by`, so none of the next `by` tokens is ever
    /// handed out (a cluster restored from a backup must not reissue tokens the old cluster may
    /// have issued after the backup). Refuses to leave the (2^52, 2^53) range.
    pub fn skip_fencing_tokens(&mut self, by: u64) -> Result<u64> {
        let next = self
            .next_fencing_token
            .checked_add(by)
            .filter(|n| *n < 1 << 53)
            .ok_or_else(|| {
                CoreError::ResourceExhausted("fencing tokens would leave (2^52, 2^53)".into())
            })?;
        self.next_fencing_token = next;
        Ok(next)
    }

    /// Number of leases currently stored (live or lapsed within the grace).
    pub fn len(&self) -> usize {
        self.leases.values().map(|keys| keys.leases.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Leases that are live at `t`.
    pub fn live_count(&self, t: Nanos) -> usize {
        let live_from = (t.saturating_add(TAKEOVER_GRACE + 1), Name::from(""));
        self.leases
            .values()
            .map(|keys| keys.by_eligibility.range(live_from.clone()..).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Nanos = 1_700_000_000 * SECOND;
    const A: u128 = 0xA;

    #[test]
    fn persistent_maps_encode_exactly_as_std_maps() {
        use std::collections::{BTreeMap, BTreeSet};
        let pairs = [("b", 2u64), ("a", 1), ("c", 3)];
        let std_map: BTreeMap<String, BTreeMap<String, u64>> = [(
            "p".to_string(),
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        )]
        .into();
        let ord_map: OrdMap<String, OrdMap<String, u64>> = std::iter::once((
            "p".to_string(),
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<OrdMap<_, _>>(),
        ))
        .collect();
        let enc = |v: &dyn erased::Enc| v.enc();
        assert_eq!(enc(&std_map), enc(&ord_map));
        let std_set: BTreeSet<(i64, String)> = [(2, "x".into()), (1, "y".into())].into();
        let ord_set: OrdSet<(i64, String)> =
            [(2, "x".into()), (1, "y".into())].into_iter().collect();
        assert_eq!(enc(&std_set), enc(&ord_set));
    }

    #[test]
    fn filling_leaves_builds_the_same_map_as_inserting_in_order() {
        for len in [0usize, 1, 2, 63, 64, 65, 129, 5_000] {
            let sorted: Vec<(u32, u32)> = (0..len as u32).map(|i| (i * 3, i)).collect();
            let mut filled = OrdMap::new();
            insert_filling_leaves(sorted.clone(), |(k, v)| {
                filled.insert(k, v);
            });
            let in_order: OrdMap<u32, u32> = sorted.into_iter().collect();
            assert_eq!(filled, in_order, "{len} entries");
        }
    }

    mod erased {
        pub trait Enc {
            fn enc(&self) -> Vec<u8>;
        }
        impl<T: serde::Serialize> Enc for T {
            fn enc(&self) -> Vec<u8> {
                crate::codec::encode(self).unwrap()
            }
        }
    }
    const B: u128 = 0xB;

    fn s(n: i64) -> Nanos {
        T0 + n * SECOND
    }

    #[test]
    fn acquire_free_key_gives_token_in_js_safe_range() {
        let mut l = ProjectLocks::default();
        let (exp, tok) = l.acquire("p", "k", A, 10, s(0)).unwrap();
        assert_eq!(exp, s(10));
        assert!(tok > 1 << 52 && tok < 1 << 53);
    }

    #[test]
    fn same_token_reacquire_is_absolute_and_keeps_fencing() {
        let mut l = ProjectLocks::default();
        let (_, tok) = l.acquire("p", "k", A, 30, s(0)).unwrap();
        let (exp, tok2) = l.acquire("p", "k", A, 5, s(2)).unwrap();
        assert_eq!((exp, tok2), (s(7), tok), "shorter TTL shortens the lease");
    }

    #[test]
    fn other_token_gets_lock_held_until_grace_passes() {
        let mut l = ProjectLocks::default();
        let (_, tok) = l.acquire("p", "k", A, 10, s(0)).unwrap();
        assert_eq!(l.acquire("p", "k", B, 10, s(5)), Err(CoreError::LockHeld));
        assert_eq!(
            l.acquire("p", "k", B, 10, s(10)),
            Err(CoreError::LockHeld),
            "lapsed, in grace"
        );
        assert_eq!(
            l.acquire("p", "k", B, 10, s(11) - 1),
            Err(CoreError::LockHeld)
        );
        let (_, tok_b) = l.acquire("p", "k", B, 10, s(11)).unwrap();
        assert!(tok_b > tok);
    }

    #[test]
    fn own_lapsed_lease_is_ownership_lost_then_reclaimable() {
        let mut l = ProjectLocks::default();
        let (_, tok) = l.acquire("p", "k", A, 10, s(0)).unwrap();
        assert_eq!(
            l.acquire("p", "k", A, 10, s(10)),
            Err(CoreError::OwnershipLost)
        );
        let (_, tok2) = l.acquire("p", "k", A, 10, s(11)).unwrap();
        assert!(tok2 > tok, "a reclaimed lease is a new lease");
    }

    #[test]
    fn deadline_caps_renewals_and_ends_the_lease() {
        let mut l = ProjectLocks::default();
        let ttl = validate::MAX_LOCK_TTL;
        l.acquire("p", "k", A, ttl, s(0)).unwrap();
        let (exp, _) = l.renew("p", "k", A, ttl, s(100)).unwrap();
        assert_eq!(exp, s(0) + LEASE_DEADLINE, "renew cannot move the deadline");
        let (exp, _) = l.acquire("p", "k", A, ttl, s(200)).unwrap();
        assert_eq!(
            exp,
            s(0) + LEASE_DEADLINE,
            "re-acquire cannot move it either"
        );
        let end = s(0) + LEASE_DEADLINE;
        assert_eq!(l.renew("p", "k", A, 10, end), Err(CoreError::OwnershipLost));
        assert_eq!(
            l.acquire("p", "k", A, 10, end),
            Err(CoreError::OwnershipLost)
        );
    }

    #[test]
    fn renew_rules() {
        let mut l = ProjectLocks::default();
        assert_eq!(
            l.renew("p", "k", A, 10, s(0)),
            Err(CoreError::OwnershipLost),
            "absent"
        );
        let (_, tok) = l.acquire("p", "k", A, 10, s(0)).unwrap();
        assert_eq!(
            l.renew("p", "k", B, 10, s(1)),
            Err(CoreError::OwnershipLost),
            "stale token"
        );
        assert_eq!(l.renew("p", "k", A, 20, s(9)).unwrap(), (s(29), tok));
        assert_eq!(
            l.renew("p", "k", A, 10, s(29)),
            Err(CoreError::OwnershipLost),
            "late owner"
        );
    }

    #[test]
    fn release_rules() {
        let mut l = ProjectLocks::default();
        assert_eq!(l.release("p", "k", A, s(0)), Ok(()), "absent is idempotent");
        l.acquire("p", "k", A, 10, s(0)).unwrap();
        assert_eq!(l.release("p", "k", B, s(1)), Err(CoreError::OwnershipLost));
        assert!(
            matches!(l.read("p", "k", s(1)).unwrap(), LockRead::Held { .. }),
            "unchanged"
        );
        assert_eq!(l.release("p", "k", A, s(1)), Ok(()));
        assert_eq!(l.read("p", "k", s(1)).unwrap(), LockRead::Free);
    }

    #[test]
    fn read_follows_takeover_eligibility() {
        let mut l = ProjectLocks::default();
        let (exp, tok) = l.acquire("p", "k", A, 10, s(0)).unwrap();
        let held = LockRead::Held {
            expires_at: exp,
            fencing_token: tok,
        };
        assert_eq!(
            l.read("p", "k", s(10)).unwrap(),
            held,
            "lapsed but in grace: still held"
        );
        assert_eq!(l.read("p", "k", s(11)).unwrap(), LockRead::Free);
    }

    #[test]
    fn fencing_never_falls_across_release_force_release_and_expiry() {
        let mut l = ProjectLocks::default();
        let mut last = 0;
        for (i, how) in ["release", "force", "expire"]
            .iter()
            .cycle()
            .take(9)
            .enumerate()
        {
            let t = s(100 * i as i64);
            let (_, tok) = l.acquire("p", "k", i as u128, 5, t).unwrap();
            assert!(tok > last);
            last = tok;
            match *how {
                "release" => l.release("p", "k", i as u128, t).unwrap(),
                "force" => l.force_release("p", "k").unwrap(),
                _ => assert_eq!(l.reap(t + 6 * SECOND), 1),
            }
        }
    }

    #[test]
    fn projects_are_independent() {
        let mut l = ProjectLocks::default();
        l.acquire("p", "k", A, 10, s(0)).unwrap();
        assert!(l.acquire("q", "k", B, 10, s(0)).is_ok());
    }

    #[test]
    fn reap_forgets_only_eligible_leases() {
        let mut l = ProjectLocks::default();
        l.acquire("p", "a", A, 5, s(0)).unwrap();
        l.acquire("p", "b", A, 50, s(0)).unwrap();
        assert_eq!(l.reap(s(5)), 0, "still in grace");
        assert_eq!(l.reap(s(6)), 1);
        assert_eq!(l.len(), 1);
        assert_eq!(l.live_count(s(6)), 1);
    }
}
