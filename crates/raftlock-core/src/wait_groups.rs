//! Wait groups: a named counter of jobs inside a hierarchical namespace; workers report jobs
//! complete (idempotent per job id), observers wait until every job is in (Grackle's wait
//! groups, the distributed `sync.WaitGroup`).
//!
//! Rules: a group is `Active` until its distinct completed jobs reach `counter`
//! (`Completed`) or its absolute `expires_at` passes first (`Expired`); both are terminal. A
//! batch of reports is applied whole or not at all, and can never push `completed_jobs`
//! above `counter`. `counter` can be changed while active, never below `completed_jobs`
//! (equal completes the group). A finished group is kept `delete_after_finished_seconds`, then
//! deleted. Expiry and deletion are applied at the start of each apply (from indexes ordered
//! by time, so they cost what is due); queries at a later `now` already show a group past its
//! `expires_at` as expired and hide one past its retention.
//!
//! The waiting itself is a read on the server: a group that finishes, changes or is deleted
//! is reported through [`WaitGroups::take_woken`] (its [`topic`]) so waiting calls look again.

use std::collections::BTreeMap;

use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};

pub use raftlock_api::wait_groups::{
    CompletedJob as CompletedJobView, WaitGroup as WaitGroupView, WaitGroupStatus,
};

use crate::budget::{self, ByteBudget};
use crate::error::CoreError;
use crate::paging::list_page;
use crate::spaces::{due, pop_due, stored_in_records_field, Due, Record, Spaces, Stored};
use crate::{Nanos, SECOND};

/// A new group's `expires_at` is at least this far ahead (Grackle's rule).
pub const MIN_EXPIRY_LEAD: Nanos = 60 * SECOND;
/// Most wait groups in one namespace (Grackle's limit).
pub const MAX_WAIT_GROUPS_PER_NAMESPACE: usize = 1_000_000;
/// Bytes of wait groups and their job records one project may keep.
pub const MAX_WAIT_GROUP_BYTES_PER_PROJECT: usize = 256 << 20;

type Result<T> = std::result::Result<T, CoreError>;

/// The wake-up topic of a wait group: waiting calls register under it.
pub fn topic(project: &str, namespace: &str, name: &str) -> String {
    Group::topic(project, namespace, name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Status {
    Active,
    Completed,
    Expired,
}

/// A job reported complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Job {
    completed_at: Nanos,
    metadata: BTreeMap<String, String>,
}

/// A wait group record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    description: String,
    counter: u64,
    /// Job id → its first report; `completed_jobs` is its size.
    jobs: OrdMap<String, Job>,
    status: Status,
    version: u64,
    created_at: Nanos,
    updated_at: Nanos,
    expires_at: Nanos,
    delete_after_finished_seconds: u64,
    /// When it completed or expired (0 while active).
    finished_at: Nanos,
    last_activity_at: Nanos,
    metadata: BTreeMap<String, String>,
}

fn group_bytes(name: &str, description: &str, metadata: &BTreeMap<String, String>) -> usize {
    700 + 3 * name.len() + description.len() + budget::metadata_bytes(metadata)
}

fn job_bytes(job_id: &str, metadata: &BTreeMap<String, String>) -> usize {
    150 + job_id.len() + budget::metadata_bytes(metadata)
}

impl Group {
    /// Status and finish time as seen at `now` (an active group past `expires_at` has expired
    /// even if no apply has marked it yet).
    fn status_at(&self, now: Nanos) -> (Status, Nanos) {
        if self.status == Status::Active && self.expires_at <= now {
            return (Status::Expired, self.expires_at);
        }
        (self.status, self.finished_at)
    }

    /// When a finished group is deleted (`None` while active).
    fn delete_at(&self, now: Nanos) -> Option<Nanos> {
        let (status, finished_at) = self.status_at(now);
        (status != Status::Active)
            .then(|| finished_at + self.delete_after_finished_seconds as Nanos * SECOND)
    }
}

/// What a wait group is created with or replaced by: the fields of its create and update
/// calls. Nested in those commands without changing their encoding: bincode writes a struct's
/// fields in order, exactly as if they stood in the command itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSpec {
    pub description: String,
    pub counter: u64,
    pub expires_at: Nanos,
    pub delete_after_finished_seconds: u64,
    pub metadata: BTreeMap<String, String>,
}

/// All wait groups of all projects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitGroups {
    /// The groups, their bytes and their wake topics.
    records: Spaces<Group>,
    /// (expires_at, project, namespace, name) of active groups.
    expiries: OrdSet<Due>,
    /// (delete time, project, namespace, name) of finished groups.
    deletions: OrdSet<Due>,
}

stored_in_records_field!(WaitGroups, Group);

impl Record for Group {
    const KIND: &'static str = "wait group";
    const PLURAL: &'static str = "wait groups";
    const TOPIC: &'static str = "wait-group";
    type View = WaitGroupView;

    fn visible_at(&self, now: Nanos) -> bool {
        self.delete_at(now).is_none_or(|at| now < at)
    }

    fn view(&self, name: &str, now: Nanos) -> WaitGroupView {
        let (status, finished_at) = self.status_at(now);
        WaitGroupView {
            name: name.to_string(),
            description: self.description.clone(),
            status: match status {
                Status::Active => WaitGroupStatus::Active,
                Status::Completed => WaitGroupStatus::Completed,
                Status::Expired => WaitGroupStatus::Expired,
            },
            counter: self.counter,
            completed_jobs: self.jobs.len() as u64,
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
            expires_at: self.expires_at,
            delete_after_finished_seconds: self.delete_after_finished_seconds,
            finished_at,
            last_activity_at: self.last_activity_at,
            metadata: self.metadata.clone(),
        }
    }

    fn bytes(&self, name: &str) -> usize {
        let jobs: usize = (self.jobs.iter())
            .map(|(id, j)| job_bytes(id, &j.metadata))
            .sum();
        group_bytes(name, &self.description, &self.metadata) + jobs
    }
}

impl WaitGroups {
    /// Runs `change` on the group (present, as every apply reaps first). `change` must leave
    /// the group untouched when it fails.
    fn with_group<T>(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        change: impl FnOnce(&mut Group, &mut ByteBudget) -> Result<T>,
    ) -> Result<T> {
        self.records.change(project, ns, name, change)
    }

    /// Marks a group finished at `at` and schedules its deletion.
    fn finish(&mut self, project: &str, ns: &str, name: &str, status: Status, at: Nanos) {
        let Ok(delete_at) = self.with_group(project, ns, name, |g, _| {
            g.status = status;
            g.finished_at = at;
            Ok(at + g.delete_after_finished_seconds as Nanos * SECOND)
        }) else {
            return;
        };
        self.records.wake(project, ns, name);
        self.deletions.insert(due(delete_at, project, ns, name));
    }

    /// Expires active groups past `expires_at` and deletes finished groups past their
    /// retention.
    pub fn reap(&mut self, t: Nanos) {
        while let Some((at, project, ns, name)) = pop_due(&mut self.expiries, t) {
            self.finish(&project, &ns, &name, Status::Expired, at);
        }
        while let Some((_, project, ns, name)) = pop_due(&mut self.deletions, t) {
            self.delete(&project, &ns, &name);
        }
    }

    pub fn create(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        spec: &GroupSpec,
        t: Nanos,
    ) -> Result<WaitGroupView> {
        if spec.expires_at < t + MIN_EXPIRY_LEAD {
            return Err(CoreError::invalid(
                "expires_at",
                "must be at least 60 s in the future",
            ));
        }
        let group = Group {
            description: spec.description.clone(),
            counter: spec.counter,
            jobs: OrdMap::new(),
            status: Status::Active,
            version: 1,
            created_at: t,
            updated_at: t,
            expires_at: spec.expires_at,
            delete_after_finished_seconds: spec.delete_after_finished_seconds,
            finished_at: 0,
            last_activity_at: t,
            metadata: spec.metadata.clone(),
        };
        let view = group.view(name, t);
        let limits = (
            MAX_WAIT_GROUPS_PER_NAMESPACE,
            MAX_WAIT_GROUP_BYTES_PER_PROJECT,
        );
        self.records.add((project, ns, name), group, limits)?;
        self.expiries
            .insert(due(spec.expires_at, project, ns, name));
        Ok(view)
    }

    /// Replaces the mutable fields of an active group if `expected_version` is current;
    /// `counter` equal to `completed_jobs` completes it.
    pub fn update(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        spec: &GroupSpec,
        expected_version: Option<u64>,
        t: Nanos,
    ) -> Result<WaitGroupView> {
        let (old_expiry, completed) = self.with_group(project, ns, name, |g, usage| {
            if g.status != Status::Active {
                return Err(CoreError::conflict(
                    "wait_group_name",
                    "has finished; only an active wait group can be updated",
                ));
            }
            CoreError::check_version(expected_version, g.version)?;
            let completed = g.jobs.len() as u64;
            if spec.counter < completed {
                return Err(CoreError::conflict(
                    "counter",
                    format!("must be at least completed_jobs ({completed})"),
                ));
            }
            if spec.expires_at <= t {
                return Err(CoreError::invalid("expires_at", "must be in the future"));
            }
            let old = group_bytes(name, &g.description, &g.metadata);
            let new = group_bytes(name, &spec.description, &spec.metadata);
            let limit = MAX_WAIT_GROUP_BYTES_PER_PROJECT;
            usage.recharge(project, (old, new), limit, Group::PLURAL)?;
            let old_expiry = g.expires_at;
            g.description = spec.description.clone();
            g.counter = spec.counter;
            g.expires_at = spec.expires_at;
            g.delete_after_finished_seconds = spec.delete_after_finished_seconds;
            g.metadata = spec.metadata.clone();
            g.version += 1;
            g.updated_at = t;
            Ok((old_expiry, completed))
        })?;
        self.expiries.remove(&due(old_expiry, project, ns, name));
        if spec.counter == completed {
            self.finish(project, ns, name, Status::Completed, t);
        } else {
            self.expiries
                .insert(due(spec.expires_at, project, ns, name));
            self.records.wake(project, ns, name);
        }
        self.get(project, ns, name, t)
    }

    /// Deletes a group and its job records; absent is not an error.
    pub fn delete(&mut self, project: &str, ns: &str, name: &str) {
        let Some(g) = self.records.remove(project, ns, name) else {
            return;
        };
        self.expiries.remove(&due(g.expires_at, project, ns, name));
        if let Some(at) = g.delete_at(g.finished_at) {
            self.deletions.remove(&due(at, project, ns, name));
        }
    }

    /// Records jobs as completed: ids seen before are ignored (their first report stays);
    /// new ones are refused together if the group is not active or they would push
    /// `completed_jobs` above `counter`. Reaching `counter` completes the group.
    pub fn complete_jobs(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        jobs: &[(String, BTreeMap<String, String>)],
        t: Nanos,
    ) -> Result<WaitGroupView> {
        let done = self.with_group(project, ns, name, |g, usage| {
            let mut new: BTreeMap<&String, &BTreeMap<String, String>> = BTreeMap::new();
            for (id, meta) in jobs {
                if !g.jobs.contains_key(id) {
                    new.entry(id).or_insert(meta);
                }
            }
            if new.is_empty() {
                return Ok(false);
            }
            if g.status != Status::Active {
                return Err(CoreError::conflict(
                    "wait_group_name",
                    "has finished; it takes no new jobs",
                ));
            }
            let completed = g.jobs.len() as u64 + new.len() as u64;
            if completed > g.counter {
                return Err(CoreError::conflict(
                    "jobs",
                    format!(
                        "would push completed_jobs to {completed}, above counter {}",
                        g.counter
                    ),
                ));
            }
            let bytes: usize = new.iter().map(|(id, m)| job_bytes(id, m)).sum();
            let limit = MAX_WAIT_GROUP_BYTES_PER_PROJECT;
            usage.check_room(project, bytes, limit, "wait groups")?;
            usage.charge(project, bytes);
            for (id, meta) in new {
                let job = Job {
                    completed_at: t,
                    metadata: meta.clone(),
                };
                g.jobs.insert(id.clone(), job);
            }
            g.last_activity_at = t;
            Ok(completed == g.counter)
        })?;
        if done {
            let expires_at = self.find(project, ns, name, t)?.expires_at;
            self.expiries.remove(&due(expires_at, project, ns, name));
            self.finish(project, ns, name, Status::Completed, t);
        }
        self.get(project, ns, name, t)
    }

    // ---- queries -----------------------------------------------------------------------

    /// Completed jobs by id.
    pub fn list_jobs(
        &self,
        project: &str,
        ns: &str,
        name: &str,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<CompletedJobView>, String, String)> {
        let g = self.find(project, ns, name, now)?;
        list_page(
            &g.jobs,
            token,
            limit,
            |_| true,
            |id, j| CompletedJobView {
                job_id: id.clone(),
                completed_at: j.completed_at,
                metadata: j.metadata.clone(),
            },
        )
    }

    /// (wait groups, completed job records) in the whole state.
    pub fn totals(&self) -> (usize, usize) {
        let groups = self.records.iter().map(|(_, _, _, g)| g);
        groups.fold((0, 0), |(n, jobs), g| (n + 1, jobs + g.jobs.len()))
    }

    /// Every invariant, checked from scratch (tests).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.records.check_invariants()?;
        let mut expiries = OrdSet::new();
        let mut deletions = OrdSet::new();
        for (project, ns, name, g) in self.records.iter() {
            let completed = g.jobs.len() as u64;
            let consistent = match g.status {
                Status::Active => completed < g.counter && g.finished_at == 0,
                Status::Completed => completed == g.counter,
                Status::Expired => completed < g.counter && g.finished_at == g.expires_at,
            };
            if !consistent || completed > g.counter {
                return Err(format!(
                    "{name}: {:?} with {completed}/{}",
                    g.status, g.counter
                ));
            }
            match g.status {
                Status::Active => expiries.insert(due(g.expires_at, project, ns, name)),
                _ => {
                    let at = g.delete_at(g.finished_at).expect("finished");
                    deletions.insert(due(at, project, ns, name))
                }
            };
        }
        if expiries != self.expiries || deletions != self.deletions {
            return Err("the expiry or deletion index does not match the groups".into());
        }
        Ok(())
    }
}
