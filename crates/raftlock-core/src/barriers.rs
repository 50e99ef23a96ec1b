//! Barriers: named N-party rendezvous points inside a hierarchical namespace (Grackle's
//! barriers, the distributed `CyclicBarrier`).
//!
//! Rules: a barrier trips when `expected_processes` distinct processes have arrived in its
//! current generation — never earlier; the trip moves to the next generation with nobody
//! arrived. An arrival names the generation it is for: the current one (idempotent per
//! process), or a past one it already arrived at (a retry: answered as tripped); any other is
//! refused. Lowering `expected_processes` to the number arrived trips the barrier (how a
//! group releases a barrier a lost peer will never reach); it can never go below it. The
//! participants of the last [`KEPT_PAST_GENERATIONS`] generations are kept for listing and
//! retries. An idle barrier is deleted `delete_inactive_after_seconds` after its last
//! activity (creation or an arrival), at the start of an apply; queries at a later `now` hide
//! it already.
//!
//! Waiting is a read on the server: a trip, an update or a deletion is reported through
//! [`Barriers::take_woken`] (the barrier's [`topic`]) so waiting calls look again.

use std::collections::{BTreeMap, VecDeque};

use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};

pub use raftlock_api::barriers::{Barrier as BarrierView, BarrierParticipant as ParticipantView};

use crate::budget::{self, ByteBudget};
use crate::error::CoreError;
use crate::paging::list_page;
use crate::spaces::{due, pop_due, stored_in_records_field, Due, Record, Spaces, Stored};
use crate::{Nanos, SECOND};

/// Idle time before deletion: 60 s (Grackle's minimum) to 30 days.
pub const MIN_IDLE_SECONDS: u64 = 60;
pub const MAX_IDLE_SECONDS: u64 = 30 * 24 * 3600;
/// Past generations whose participants are kept.
pub const KEPT_PAST_GENERATIONS: usize = 8;
/// Most barriers in one namespace (Grackle's limit).
pub const MAX_BARRIERS_PER_NAMESPACE: usize = 1_000_000;
/// Bytes of barriers and participant records one project may keep.
pub const MAX_BARRIER_BYTES_PER_PROJECT: usize = 256 << 20;

type Result<T> = std::result::Result<T, CoreError>;

/// The wake-up topic of a barrier: waiting calls register under it.
pub fn topic(project: &str, namespace: &str, name: &str) -> String {
    Barrier::topic(project, namespace, name)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Participant {
    arrived_at: Nanos,
    metadata: BTreeMap<String, String>,
}

type Participants = OrdMap<String, Participant>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    description: String,
    expected: u64,
    /// The current generation, from 1.
    generation: u64,
    /// Who arrived in the current generation.
    arrived: Participants,
    /// (generation, who arrived) of the last tripped generations, oldest first.
    past: VecDeque<(u64, Participants)>,
    version: u64,
    created_at: Nanos,
    updated_at: Nanos,
    last_activity_at: Nanos,
    delete_inactive_after_seconds: u64,
    metadata: BTreeMap<String, String>,
}

fn barrier_bytes(name: &str, description: &str, metadata: &BTreeMap<String, String>) -> usize {
    700 + 3 * name.len() + description.len() + budget::metadata_bytes(metadata)
}

fn participant_bytes(process_id: &str, metadata: &BTreeMap<String, String>) -> usize {
    150 + process_id.len() + budget::metadata_bytes(metadata)
}

fn participants_bytes(p: &Participants) -> usize {
    p.iter()
        .map(|(id, x)| participant_bytes(id, &x.metadata))
        .sum()
}

impl Barrier {
    fn delete_at(&self) -> Nanos {
        self.last_activity_at + self.delete_inactive_after_seconds as Nanos * SECOND
    }

    /// The current generation is complete: keep its participants, start the next one, forget
    /// the generations beyond [`KEPT_PAST_GENERATIONS`]. Returns the bytes freed.
    fn trip(&mut self) -> usize {
        let arrived = std::mem::take(&mut self.arrived);
        self.past.push_back((self.generation, arrived));
        self.generation += 1;
        let mut freed = 0;
        while self.past.len() > KEPT_PAST_GENERATIONS {
            let (_, gone) = self.past.pop_front().expect("non-empty");
            freed += participants_bytes(&gone);
        }
        freed
    }

    fn participants(&self, generation: u64) -> Option<&Participants> {
        if generation == self.generation {
            return Some(&self.arrived);
        }
        self.past
            .iter()
            .find(|(g, _)| *g == generation)
            .map(|(_, p)| p)
    }
}

/// What a barrier is created with or replaced by: the fields of its create and update calls.
/// Nested in those commands without changing their encoding: bincode writes a struct's
/// fields in order, exactly as if they stood in the command itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BarrierSpec {
    pub description: String,
    pub expected_processes: u64,
    pub delete_inactive_after_seconds: u64,
    pub metadata: BTreeMap<String, String>,
}

/// One arrival as the state machine applies it.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    pub process_id: &'a str,
    pub expected_generation: u64,
    pub metadata: &'a BTreeMap<String, String>,
}

/// All barriers of all projects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barriers {
    /// The barriers, their bytes and their wake topics.
    records: Spaces<Barrier>,
    /// (deletion time, project, namespace, name): last activity + idle time.
    deletions: OrdSet<Due>,
}

stored_in_records_field!(Barriers, Barrier);

impl Record for Barrier {
    const KIND: &'static str = "barrier";
    const PLURAL: &'static str = "barriers";
    const TOPIC: &'static str = "barrier";
    type View = BarrierView;

    fn visible_at(&self, now: Nanos) -> bool {
        now < self.delete_at()
    }

    fn view(&self, name: &str, _now: Nanos) -> BarrierView {
        BarrierView {
            name: name.to_string(),
            description: self.description.clone(),
            expected_processes: self.expected,
            arrived_processes: self.arrived.len() as u64,
            generation: self.generation,
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_activity_at: self.last_activity_at,
            delete_inactive_after_seconds: self.delete_inactive_after_seconds,
            metadata: self.metadata.clone(),
        }
    }

    fn bytes(&self, name: &str) -> usize {
        let past: usize = self.past.iter().map(|(_, p)| participants_bytes(p)).sum();
        barrier_bytes(name, &self.description, &self.metadata)
            + participants_bytes(&self.arrived)
            + past
    }
}

impl Barriers {
    /// Deletes barriers idle past their time.
    pub fn reap(&mut self, t: Nanos) {
        while let Some((_, project, ns, name)) = pop_due(&mut self.deletions, t) {
            self.delete(&project, &ns, &name);
        }
    }

    pub fn create(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        spec: &BarrierSpec,
        t: Nanos,
    ) -> Result<BarrierView> {
        let barrier = Barrier {
            description: spec.description.clone(),
            expected: spec.expected_processes,
            generation: 1,
            arrived: OrdMap::new(),
            past: VecDeque::new(),
            version: 1,
            created_at: t,
            updated_at: t,
            last_activity_at: t,
            delete_inactive_after_seconds: spec.delete_inactive_after_seconds,
            metadata: spec.metadata.clone(),
        };
        let (view, delete_at) = (barrier.view(name, t), barrier.delete_at());
        let limits = (MAX_BARRIERS_PER_NAMESPACE, MAX_BARRIER_BYTES_PER_PROJECT);
        self.records.add((project, ns, name), barrier, limits)?;
        self.deletions.insert(due(delete_at, project, ns, name));
        Ok(view)
    }

    /// Replaces the mutable fields if `expected_version` is current; `expected_processes`
    /// equal to the number arrived trips the barrier. An update is not activity: the deletion
    /// is rescheduled from the same `last_activity_at`.
    pub fn update(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        spec: &BarrierSpec,
        expected_version: Option<u64>,
        t: Nanos,
    ) -> Result<BarrierView> {
        let change = self.records.change(project, ns, name, |b, usage| {
            CoreError::check_version(expected_version, b.version)?;
            let arrived = b.arrived.len() as u64;
            if spec.expected_processes < arrived {
                return Err(CoreError::conflict(
                    "expected_processes",
                    format!("must be at least arrived_processes ({arrived})"),
                ));
            }
            let old = barrier_bytes(name, &b.description, &b.metadata);
            let new = barrier_bytes(name, &spec.description, &spec.metadata);
            let limit = MAX_BARRIER_BYTES_PER_PROJECT;
            usage.recharge(project, (old, new), limit, Barrier::PLURAL)?;
            let old_delete_at = b.delete_at();
            b.description = spec.description.clone();
            b.expected = spec.expected_processes;
            b.delete_inactive_after_seconds = spec.delete_inactive_after_seconds;
            b.metadata = spec.metadata.clone();
            b.version += 1;
            b.updated_at = t;
            if spec.expected_processes == arrived {
                usage.refund(project, b.trip());
            }
            Ok((old_delete_at, b.delete_at(), b.view(name, t)))
        });
        let (old_at, new_at, view) = change?;
        self.deletions.remove(&due(old_at, project, ns, name));
        self.deletions.insert(due(new_at, project, ns, name));
        self.records.wake(project, ns, name);
        Ok(view)
    }

    /// Deletes a barrier and its participant records; absent is not an error.
    pub fn delete(&mut self, project: &str, ns: &str, name: &str) {
        if let Some(b) = self.records.remove(project, ns, name) {
            self.deletions
                .remove(&due(b.delete_at(), project, ns, name));
        }
    }

    /// Records an arrival (see the module rules). Answers the barrier and whether the
    /// generation arrived at has tripped.
    pub fn arrive(
        &mut self,
        project: &str,
        ns: &str,
        name: &str,
        a: Arrival<'_>,
        t: Nanos,
    ) -> Result<(BarrierView, bool)> {
        let (old_at, arrived) = (self.records).change(project, ns, name, |b, usage| {
            arrive_at(b, project, a, usage, t)
        })?;
        let b = self.find(project, ns, name, t)?;
        let (new_at, view) = (b.delete_at(), b.view(name, t));
        if let Some(old_at) = old_at {
            self.deletions.remove(&due(old_at, project, ns, name));
            self.deletions.insert(due(new_at, project, ns, name));
        }
        if arrived == Arrived::Tripped {
            self.records.wake(project, ns, name);
        }
        Ok((view, arrived != Arrived::Open))
    }

    // ---- queries -----------------------------------------------------------------------

    /// Who arrived in `generation` (the current one or a kept past one; empty otherwise), by
    /// process id.
    #[allow(clippy::too_many_arguments)]
    pub fn list_participants(
        &self,
        project: &str,
        ns: &str,
        name: &str,
        generation: u64,
        token: &str,
        limit: u32,
        now: Nanos,
    ) -> Result<(Vec<ParticipantView>, String, String)> {
        let b = self.find(project, ns, name, now)?;
        let empty = OrdMap::new();
        let participants = b.participants(generation).unwrap_or(&empty);
        list_page(
            participants,
            token,
            limit,
            |_| true,
            |id, p| ParticipantView {
                process_id: id.clone(),
                arrived_at: p.arrived_at,
                metadata: p.metadata.clone(),
            },
        )
    }

    /// (barriers, participant records) in the whole state.
    pub fn totals(&self) -> (usize, usize) {
        let barriers = self.records.iter().map(|(_, _, _, b)| b);
        barriers.fold((0, 0), |(n, p), b| {
            let past: usize = b.past.iter().map(|(_, x)| x.len()).sum();
            (n + 1, p + b.arrived.len() + past)
        })
    }

    /// Every invariant, checked from scratch (tests).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.records.check_invariants()?;
        let mut deletions = OrdSet::new();
        for (project, ns, name, b) in self.records.iter() {
            if b.arrived.len() as u64 >= b.expected || b.expected == 0 {
                return Err(format!(
                    "{name}: {} arrived of {} expected without a trip",
                    b.arrived.len(),
                    b.expected
                ));
            }
            let kept: Vec<u64> = b.past.iter().map(|(g, _)| *g).collect();
            let first = b.generation.saturating_sub(kept.len() as u64);
            let expected_kept: Vec<u64> = (first..b.generation).collect();
            if kept != expected_kept || kept.len() > KEPT_PAST_GENERATIONS {
                return Err(format!(
                    "{name}: past generations {kept:?} at {}",
                    b.generation
                ));
            }
            deletions.insert(due(b.delete_at(), project, ns, name));
        }
        if deletions != self.deletions {
            return Err("the deletion index does not match the barriers".into());
        }
        Ok(())
    }
}

/// What an arrival found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrived {
    /// Recorded (or already recorded); its generation is still open.
    Open,
    /// This arrival completed its generation.
    Tripped,
    /// A retry of an arrival whose generation has tripped since.
    TrippedBefore,
}

/// An arrival on one barrier: the deletion time it moved away from (when it was activity)
/// and what it found.
fn arrive_at(
    b: &mut Barrier,
    project: &str,
    a: Arrival<'_>,
    usage: &mut ByteBudget,
    t: Nanos,
) -> Result<(Option<Nanos>, Arrived)> {
    if a.expected_generation < b.generation {
        let was_there = b
            .participants(a.expected_generation)
            .is_some_and(|p| p.contains_key(a.process_id));
        if was_there {
            return Ok((None, Arrived::TrippedBefore));
        }
        return Err(CoreError::conflict(
            "expected_generation",
            format!(
                "generation {} has already tripped; the barrier is at generation {}",
                a.expected_generation, b.generation
            ),
        ));
    }
    if a.expected_generation > b.generation {
        return Err(CoreError::conflict(
            "expected_generation",
            format!("is ahead of the barrier's generation {}", b.generation),
        ));
    }
    if b.arrived.contains_key(a.process_id) {
        return Ok((None, Arrived::Open));
    }
    let bytes = participant_bytes(a.process_id, a.metadata);
    usage.check_room(project, bytes, MAX_BARRIER_BYTES_PER_PROJECT, "barriers")?;
    usage.charge(project, bytes);
    let old_at = b.delete_at();
    let participant = Participant {
        arrived_at: t,
        metadata: a.metadata.clone(),
    };
    b.arrived.insert(a.process_id.to_string(), participant);
    b.last_activity_at = t;
    if b.arrived.len() as u64 == b.expected {
        usage.refund(project, b.trip());
        return Ok((Some(old_at), Arrived::Tripped));
    }
    Ok((Some(old_at), Arrived::Open))
}
