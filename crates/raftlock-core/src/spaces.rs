//! The storage shape wait groups and barriers share: per (project, namespace) a sorted map of
//! named records, the bytes each project is charged for them, and the topics of records that
//! changed since the last collection (what waiting calls watch).
//!
//! Each primitive keeps its own time indexes (a wait group's expiry and retention, a barrier's
//! idle deletion) beside its [`Spaces`], since what is due and when differs; what it means to
//! store, find, list, charge, remove and wake a record is written once, here.
//!
//! Encoding: only the records are state. A [`Spaces`] encodes exactly as the `spaces` field it
//! replaced (a struct's fields are encoded in order, skipped ones not at all), so snapshots of
//! earlier releases decode unchanged.

use std::collections::BTreeMap;

use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};

use crate::budget::{ByteBudget, Scratch};
use crate::error::CoreError;
use crate::paging::{list_page, Listed};
use crate::Nanos;

/// (project, namespace).
pub type SpaceKey = (String, String);

/// An entry of a time index: (when, project, namespace, name).
pub type Due = (crate::Nanos, String, String, String);

/// The time-index entry of `name` due at `at`.
pub fn due(at: crate::Nanos, project: &str, namespace: &str, name: &str) -> Due {
    (at, project.into(), namespace.into(), name.into())
}

/// Takes the earliest entry of `index` if it is due at `t`.
pub fn pop_due(index: &mut OrdSet<Due>, t: crate::Nanos) -> Option<Due> {
    (index.get_min())
        .is_some_and(|first| first.0 <= t)
        .then(|| index.remove_min().expect("non-empty"))
}

/// A primitive kept in [`Spaces`]: what every such primitive answers the state machine the
/// same way, by its records.
pub trait Stored: Sized {
    type Rec: Record;
    fn records(&self) -> &Spaces<Self::Rec>;
    fn records_mut(&mut self) -> &mut Spaces<Self::Rec>;
    /// Removes one record with its time-index entries (nothing when it is absent).
    fn delete(&mut self, project: &str, ns: &str, name: &str);

    /// Drops a deleted namespace's records; their waiting calls are woken.
    fn delete_namespace(&mut self, project: &str, ns: &str) {
        for name in self.records().names(project, ns) {
            self.delete(project, ns, &name);
        }
    }

    /// Lowers the per-project byte budget (tests).
    fn with_byte_quota(mut self, bytes: usize) -> Self {
        self.records_mut().set_byte_quota(bytes);
        self
    }

    /// Topics of records that changed or went away since the last call. Not state.
    fn take_woken(&mut self) -> Vec<String> {
        self.records_mut().take_woken()
    }

    /// Counts each project's bytes from the state (after a snapshot was decoded).
    fn count_usage(&mut self) {
        self.records_mut().count_usage();
    }

    /// The record `name` as a query at `now` sees it (`not_found` when absent or past its
    /// deletion time, which a query at a later time already hides).
    fn find(
        &self,
        project: &str,
        ns: &str,
        name: &str,
        now: Nanos,
    ) -> Result<&Self::Rec, CoreError> {
        (self.records().get(project, ns, name))
            .filter(|r| r.visible_at(now))
            .ok_or_else(Spaces::<Self::Rec>::not_found)
    }

    /// `Get<Record>`: the record's view at `now`.
    fn get(
        &self,
        project: &str,
        ns: &str,
        name: &str,
        now: Nanos,
    ) -> Result<<Self::Rec as Record>::View, CoreError> {
        Ok(self.find(project, ns, name, now)?.view(name, now))
    }

    /// `List<Records>`: one page of the namespace's records visible at `now`, by name.
    fn list(
        &self,
        project: &str,
        ns: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<Listed<<Self::Rec as Record>::View>, CoreError> {
        let empty = OrdMap::new();
        let records = self.records().space(project, ns).unwrap_or(&empty);
        list_page(
            records,
            token,
            limit,
            |r| r.visible_at(now),
            |n, r| r.view(n, now),
        )
    }
}

/// Implements [`Stored`] for a primitive whose records are its `records` field and whose
/// `delete` (an inherent method) also drops the record's time-index entries.
macro_rules! stored_in_records_field {
    ($store:ident, $rec:ty) => {
        impl $crate::spaces::Stored for $store {
            type Rec = $rec;
            fn records(&self) -> &$crate::spaces::Spaces<$rec> {
                &self.records
            }
            fn records_mut(&mut self) -> &mut $crate::spaces::Spaces<$rec> {
                &mut self.records
            }
            fn delete(&mut self, project: &str, ns: &str, name: &str) {
                $store::delete(self, project, ns, name)
            }
        }
    };
}
pub(crate) use stored_in_records_field;

/// A named record of a namespace.
pub trait Record: Clone {
    /// What the record is called in a `not_found` or `already_exists` answer.
    const KIND: &'static str;
    /// The same, plural: what a budget refusal names.
    const PLURAL: &'static str;
    /// The first segment of its wake-up topics.
    const TOPIC: &'static str;
    /// What the API shows of it.
    type View: Clone;
    /// Bytes its project is charged while it is stored.
    fn bytes(&self, name: &str) -> usize;
    /// Whether a query at `now` sees it: one past its deletion time is hidden before the
    /// apply that deletes it.
    fn visible_at(&self, now: Nanos) -> bool;
    /// Its view, as `name`, at `now`.
    fn view(&self, name: &str, now: Nanos) -> Self::View;

    /// The wake-up topic of one record: waiting calls register under it.
    fn topic(project: &str, namespace: &str, name: &str) -> String {
        format!("{}/{project}/{namespace}/{name}", Self::TOPIC)
    }
}

/// Every record of one kind, in every namespace of every project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spaces<R: Record> {
    /// (project, namespace) → name → record; absent when the namespace has none.
    spaces: OrdMap<SpaceKey, OrdMap<String, R>>,
    /// Bytes each project is charged. Not state: counted again after decoding.
    #[serde(skip)]
    usage: Scratch<ByteBudget>,
    /// Topics of records that changed or went away since the last collection.
    #[serde(skip)]
    woken: Scratch<Vec<String>>,
}

impl<R: Record> Default for Spaces<R> {
    fn default() -> Self {
        Spaces {
            spaces: OrdMap::new(),
            usage: Scratch::default(),
            woken: Scratch::default(),
        }
    }
}

fn key(project: &str, ns: &str) -> SpaceKey {
    (project.to_string(), ns.to_string())
}

impl<R: Record> Spaces<R> {
    /// The answer for a record that is not there.
    pub fn not_found() -> CoreError {
        CoreError::NotFound(R::KIND.into())
    }

    /// Lowers the per-project byte budget (tests).
    pub fn set_byte_quota(&mut self, bytes: usize) {
        self.usage.0.set_quota(bytes);
    }

    /// Topics of records that changed or went away since the last call.
    pub fn take_woken(&mut self) -> Vec<String> {
        std::mem::take(&mut self.woken.0)
    }

    /// Tells the waiting calls on `name` to look again.
    pub fn wake(&mut self, project: &str, ns: &str, name: &str) {
        self.woken.0.push(R::topic(project, ns, name));
    }

    /// Counts each project's bytes from the records (after a snapshot was decoded).
    pub fn count_usage(&mut self) {
        self.usage.0.recount(self.counted_usage());
    }

    fn counted_usage(&self) -> BTreeMap<String, usize> {
        let mut usage: BTreeMap<String, usize> = BTreeMap::new();
        for ((project, _), records) in self.spaces.iter() {
            let bytes: usize = records.iter().map(|(name, r)| r.bytes(name)).sum();
            *usage.entry(project.clone()).or_default() += bytes;
        }
        usage.retain(|_, b| *b > 0);
        usage
    }

    /// Bytes `project` is charged for its records.
    pub fn stored_bytes(&self, project: &str) -> usize {
        self.usage.0.used(project)
    }

    /// Charges `project` `bytes` if its budget of `limit` has room.
    pub fn charge(&mut self, project: &str, bytes: usize, limit: usize) -> Result<(), CoreError> {
        self.usage.0.check_room(project, bytes, limit, R::PLURAL)?;
        self.usage.0.charge(project, bytes);
        Ok(())
    }

    /// The records of one namespace.
    pub fn space(&self, project: &str, ns: &str) -> Option<&OrdMap<String, R>> {
        self.spaces.get(&key(project, ns))
    }

    /// One record, whatever its state.
    pub fn get(&self, project: &str, ns: &str, name: &str) -> Option<&R> {
        self.space(project, ns)
            .and_then(|records| records.get(name))
    }

    /// Refuses a create: `already_exists` for a taken name, `resource_exhausted` once the
    /// namespace holds `max` records.
    fn check_new(&self, project: &str, ns: &str, name: &str, max: usize) -> Result<(), CoreError> {
        let records = self.space(project, ns);
        if records.is_some_and(|r| r.contains_key(name)) {
            return Err(CoreError::AlreadyExists(R::KIND.into()));
        }
        if records.is_some_and(|r| r.len() >= max) {
            return Err(CoreError::ResourceExhausted(format!(
                "namespace {} quota reached",
                R::KIND
            )));
        }
        Ok(())
    }

    /// Stores a new record, charging its bytes: refused (storing nothing) for a taken name
    /// or a full namespace ([`Spaces::check_new`], at most `max_records`), or when the project's
    /// budget of `max_bytes` has no room for it.
    pub fn add(
        &mut self,
        (project, ns, name): (&str, &str, &str),
        record: R,
        (max_records, max_bytes): (usize, usize),
    ) -> Result<(), CoreError> {
        self.check_new(project, ns, name, max_records)?;
        self.charge(project, record.bytes(name), max_bytes)?;
        (self.spaces.entry(key(project, ns)).or_default()).insert(name.to_string(), record);
        Ok(())
    }

    /// Runs `change` on the record with the project's budget. `change` must leave the record
    /// and the budget untouched when it fails.
    pub fn change<T>(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        change: impl FnOnce(&mut R, &mut ByteBudget) -> Result<T, CoreError>,
    ) -> Result<T, CoreError> {
        let records = (self.spaces.get_mut(&key(project, ns))).ok_or_else(Self::not_found)?;
        let record = records.get_mut(name).ok_or_else(Self::not_found)?;
        change(record, &mut self.usage.0)
    }

    /// Removes a record, refunding its bytes and waking its waiting calls; the namespace's
    /// entry goes with its last record.
    pub fn remove(&mut self, project: &str, ns: &str, name: &str) -> Option<R> {
        let key = key(project, ns);
        let records = self.spaces.get_mut(&key)?;
        let record = records.remove(name)?;
        if records.is_empty() {
            self.spaces.remove(&key);
        }
        self.usage.0.refund(project, record.bytes(name));
        self.wake(project, ns, name);
        Some(record)
    }

    /// The names in one namespace.
    pub fn names(&self, project: &str, ns: &str) -> Vec<String> {
        (self.space(project, ns))
            .map(|records| records.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every record with its project, namespace and name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &String, &R)> {
        self.spaces.iter().flat_map(|((project, ns), records)| {
            records
                .iter()
                .map(move |(name, r)| (project.as_str(), ns.as_str(), name, r))
        })
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.spaces.values().map(|records| records.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.spaces.is_empty()
    }

    /// The shape's own invariants (tests): no empty namespace entry is kept, and the bytes
    /// charged are the bytes counted.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(((project, ns), _)) = self.spaces.iter().find(|(_, r)| r.is_empty()) {
            return Err(format!("{project}/{ns}: an empty space is kept"));
        }
        let counted = self.counted_usage();
        if &counted != self.usage.0.totals() {
            return Err(format!(
                "usage kept {:?} != counted {counted:?}",
                self.usage.0.totals()
            ));
        }
        Ok(())
    }
}
