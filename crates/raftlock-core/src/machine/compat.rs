//! The layouts older snapshot formats gave [`StateMachine`], each read and converted so a
//! node upgraded from that release can read its snapshot (`raftlock-raft` picks one by the
//! snapshot's format number). Field order is the encoding: never change a layout here; add
//! a new one when the current layout changes.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::StateMachine;
use crate::barriers::Barriers;
use crate::hierarchy::{Hierarchy, HierarchyV2};
use crate::project_locks::{ProjectLocks, ProjectLocksV3};
use crate::request_ids::RequestIds;
use crate::semaphores::Semaphores;
use crate::tenancy::ProjectSettings;
use crate::wait_groups::WaitGroups;
use crate::Nanos;

/// [`StateMachine`] as snapshot format 4 laid it out (before the shard map), so a node
/// upgraded from that release can read its snapshot. Field order is the encoding: do not
/// change it.
#[derive(Debug, Deserialize)]
pub struct StateMachineV4 {
    time: Nanos,
    projects: BTreeMap<String, ProjectSettings>,
    key_index: BTreeMap<String, String>,
    project_locks: ProjectLocks,
    hierarchy: Hierarchy,
    request_ids: RequestIds,
    semaphores: Semaphores,
    wait_groups: WaitGroups,
    barriers: Barriers,
}

impl From<StateMachineV4> for StateMachine {
    fn from(v4: StateMachineV4) -> Self {
        StateMachine {
            time: v4.time,
            projects: v4.projects,
            key_index: v4.key_index,
            project_locks: v4.project_locks,
            hierarchy: v4.hierarchy,
            request_ids: v4.request_ids,
            semaphores: v4.semaphores,
            wait_groups: v4.wait_groups,
            barriers: v4.barriers,
            shards: Default::default(),
        }
    }
}

/// [`StateMachine`] as snapshot format 3 laid it out (project locks with their eligibility
/// index, now built again after decoding), so a node upgraded from that release can read its
/// snapshot. Field order is the encoding: do not change it.
#[derive(Debug, Deserialize)]
pub struct StateMachineV3 {
    time: Nanos,
    projects: BTreeMap<String, ProjectSettings>,
    key_index: BTreeMap<String, String>,
    project_locks: ProjectLocksV3,
    hierarchy: Hierarchy,
    request_ids: RequestIds,
    semaphores: Semaphores,
    wait_groups: WaitGroups,
    barriers: Barriers,
}

impl From<StateMachineV3> for StateMachine {
    fn from(v3: StateMachineV3) -> Self {
        StateMachine {
            time: v3.time,
            projects: v3.projects,
            key_index: v3.key_index,
            project_locks: v3.project_locks.into(),
            hierarchy: v3.hierarchy,
            request_ids: v3.request_ids,
            semaphores: v3.semaphores,
            wait_groups: v3.wait_groups,
            barriers: v3.barriers,
            shards: Default::default(),
        }
    }
}

/// [`StateMachine`] as snapshot format 2 laid it out (before semaphores, wait groups and
/// barriers, and before lock holders kept their arrival order), so a node upgraded
/// from that release can read its snapshot. Field order is the encoding: do not change it.
#[derive(Debug, Deserialize)]
pub struct StateMachineV2 {
    time: Nanos,
    projects: BTreeMap<String, ProjectSettings>,
    key_index: BTreeMap<String, String>,
    project_locks: ProjectLocksV3,
    hierarchy: HierarchyV2,
    request_ids: RequestIds,
}

impl From<StateMachineV2> for StateMachine {
    fn from(v2: StateMachineV2) -> Self {
        StateMachine {
            time: v2.time,
            projects: v2.projects,
            key_index: v2.key_index,
            project_locks: v2.project_locks.into(),
            hierarchy: v2.hierarchy.into(),
            request_ids: v2.request_ids,
            ..Default::default()
        }
    }
}

/// [`StateMachine`] as snapshot format 1 laid it out (before request ids), so a node upgraded
/// from that release can read its snapshot. Field order is the encoding: do not change it.
#[derive(Debug, Deserialize)]
pub struct StateMachineV1 {
    time: Nanos,
    projects: BTreeMap<String, ProjectSettings>,
    key_index: BTreeMap<String, String>,
    project_locks: ProjectLocksV3,
    hierarchy: HierarchyV2,
}

impl From<StateMachineV1> for StateMachine {
    fn from(v1: StateMachineV1) -> Self {
        StateMachine {
            time: v1.time,
            projects: v1.projects,
            key_index: v1.key_index,
            project_locks: v1.project_locks.into(),
            hierarchy: v1.hierarchy.into(),
            ..Default::default()
        }
    }
}
