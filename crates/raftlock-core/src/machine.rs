//! [`StateMachine`]: owns every piece of replicated state, applies [`Command`]s and answers
//! queries. Apply is a pure function of the previous state and the command.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::barriers::{Arrival, Barriers};
use crate::command::{Command, HierOp, LockAction, Op, Outcome, Reply};
use crate::error::CoreError;
use crate::hierarchy::{Hierarchy, QueuedAcquire, Quotas};
use crate::project_locks::{LockRead, ProjectLocks};
use crate::request_ids::{RequestIds, Seen};
use crate::semaphores::{AcquireArgs, Semaphores};
use crate::shards::Shards;
use crate::spaces::Stored;
use crate::tenancy::{self, KeyRecord, ProjectSettings, ProjectView};
use crate::wait_groups::WaitGroups;
use crate::{validate, Nanos};

mod compat;
pub use compat::{StateMachineV1, StateMachineV2, StateMachineV3, StateMachineV4};

/// Tunable limits that are part of the replicated state (all nodes must agree on them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub quotas: Quotas,
}

/// The whole replicated state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMachine {
    /// The state machine's clock: the largest command stamp applied so far.
    time: Nanos,
    /// Tenants by name.
    projects: BTreeMap<String, ProjectSettings>,
    /// key id → project name, so authentication finds a key without scanning projects.
    key_index: BTreeMap<String, String>,
    /// project-lock leases.
    project_locks: ProjectLocks,
    /// hierarchical namespaces, leases and locks.
    hierarchy: Hierarchy,
    /// First outcomes of client request ids, so a retried call is not applied twice.
    request_ids: RequestIds,
    /// Semaphores and semaphore leases (inside the hierarchy's namespaces).
    semaphores: Semaphores,
    /// Wait groups (inside the hierarchy's namespaces).
    wait_groups: WaitGroups,
    /// Barriers (inside the hierarchy's namespaces).
    barriers: Barriers,
    /// The data shards and the projects placed on them (meta group only; empty elsewhere).
    shards: Shards,
}

/// Counts of what a state holds ([`StateMachine::summary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub projects: usize,
    /// API keys, revoked ones included.
    pub keys: usize,
    /// Project locks stored (live, or lapsed within the takeover grace).
    pub project_locks: usize,
    pub namespaces: usize,
    pub leases: usize,
    /// Hierarchical locks with at least one holder.
    pub held_locks: usize,
    /// Queued blocking acquires (locks and semaphores).
    pub waiters: usize,
    /// The fencing token the next new project lock gets.
    pub next_fencing_token: u64,
    pub semaphores: usize,
    /// Semaphore holds (one per lease and semaphore).
    pub semaphore_holds: usize,
    /// The fencing token the next new semaphore hold gets.
    pub next_semaphore_fencing_token: u64,
    pub wait_groups: usize,
    pub barriers: usize,
}

/// How a presented credential resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheck<'a> {
    /// No live key matches (unknown id, wrong secret or revoked).
    Unknown,
    /// A live key of this project.
    Known {
        project: &'a str,
        key: &'a KeyRecord,
    },
}

impl StateMachine {
    pub fn new(limits: Limits) -> Self {
        StateMachine {
            hierarchy: Hierarchy::with_quotas(limits.quotas),
            ..Default::default()
        }
    }

    /// Lowers the per-project byte budgets of project-lock locks and of hierarchical state (tests).
    pub fn with_byte_quotas(mut self, locks: usize, hierarchy: usize) -> Self {
        self.project_locks = ProjectLocks::with_byte_quota(locks);
        self.hierarchy = std::mem::take(&mut self.hierarchy).with_byte_quota(hierarchy);
        self.semaphores = std::mem::take(&mut self.semaphores).with_byte_quota(hierarchy);
        self.wait_groups = std::mem::take(&mut self.wait_groups).with_byte_quota(hierarchy);
        self.barriers = std::mem::take(&mut self.barriers).with_byte_quota(hierarchy);
        self
    }

    /// Ids of hierarchical queued acquires that left their queue since the last call (see
    /// [`Hierarchy::take_resolved_waiters`]); a notification side channel, not state.
    pub fn take_resolved_waiters(&mut self) -> Vec<String> {
        let mut ids = self.hierarchy.take_resolved_waiters();
        ids.append(&mut self.semaphores.take_resolved_waiters());
        ids.append(&mut self.wait_groups.take_woken());
        ids.append(&mut self.barriers.take_woken());
        ids
    }

    /// The machine's current time (largest stamp applied).
    pub fn time(&self) -> Nanos {
        self.time
    }

    /// Applies one log entry: advances time, reaps what expired, then runs each op in order.
    pub fn apply(&mut self, cmd: &Command) -> Vec<Outcome> {
        self.time = self.time.max(cmd.stamp);
        let t = self.time;
        self.project_locks.reap(t);
        self.hierarchy.reap(t);
        self.semaphores.reap(t);
        self.wait_groups.reap(t);
        self.barriers.reap(t);
        cmd.ops.iter().map(|op| self.apply_op(op, t)).collect()
    }

    /// Counts what each project stores from the state, so byte-budget checks cost a lookup
    /// again; call it on a machine that was decoded (the counts are not encoded).
    pub fn count_usage(&mut self) {
        self.project_locks.count_usage();
        self.hierarchy.count_usage();
        self.semaphores.count_usage();
        self.wait_groups.count_usage();
        self.barriers.count_usage();
    }

    /// What the state holds, for backups and operators.
    pub fn summary(&self) -> Summary {
        let (namespaces, leases, held_locks) = self.hierarchy.totals();
        Summary {
            projects: self.projects.len(),
            keys: self.key_index.len(),
            project_locks: self.project_locks.len(),
            namespaces,
            leases,
            held_locks,
            waiters: self.hierarchy.waiter_count() + self.semaphores.totals().3,
            next_fencing_token: self.project_locks.next_fencing_token(),
            semaphores: self.semaphores.totals().0,
            semaphore_holds: self.semaphores.totals().2,
            next_semaphore_fencing_token: self.semaphores.next_fencing_token(),
            wait_groups: self.wait_groups.totals().0,
            barriers: self.barriers.totals().0,
        }
    }

    /// Moves every fencing-token counter (project locks, semaphores) forward by `by`; see
    /// [`ProjectLocks::skip_fencing_tokens`]. Returns the next project-lock token.
    pub fn skip_fencing_tokens(&mut self, by: u64) -> Result<u64, CoreError> {
        let mut copy = self.semaphores.clone();
        copy.skip_fencing_tokens(by)?;
        let next = self.project_locks.skip_fencing_tokens(by)?;
        self.semaphores = copy;
        Ok(next)
    }

    /// Whether every kept byte count equals one counted from the state (tests).
    pub fn check_usage(&self) -> Result<(), String> {
        self.project_locks.check_usage()?;
        self.hierarchy.check_invariants()?;
        self.semaphores.check_invariants()?;
        self.wait_groups.check_invariants()?;
        self.barriers.check_invariants()
    }

    /// Bytes `project` is charged against its byte budgets: (project-lock locks, hierarchical state).
    pub fn stored_bytes(&self, project: &str) -> (usize, usize) {
        (
            self.project_locks.stored_bytes(project),
            self.hierarchy.stored_bytes(project),
        )
    }

    fn apply_op(&mut self, op: &Op, t: Nanos) -> Outcome {
        self.check_placement(op)?;
        match op {
            Op::Tick => Ok(Reply::Done),
            Op::CreateProject { name } => {
                tenancy::create_project(&mut self.projects, name, t).map(Reply::Project)
            }
            Op::CreateProjectOn { name, shard } => {
                self.shards.check_exists(*shard)?;
                let view = tenancy::create_project(&mut self.projects, name, t)?;
                self.shards.place_new(name, *shard);
                Ok(Reply::Project(view))
            }
            Op::CreateShard { members } => self.shards.create(members, t).map(Reply::Shard),
            Op::UpdateProject {
                name,
                lock_ops_per_minute,
                hier_ops_per_minute,
            } => tenancy::update_project(
                &mut self.projects,
                name,
                *lock_ops_per_minute,
                *hier_ops_per_minute,
            )
            .map(Reply::Project),
            Op::CreateKey {
                project,
                key_id,
                kind,
                scopes,
                secret_hash,
            } => {
                let key = tenancy::NewKey {
                    key_id,
                    kind: *kind,
                    scopes,
                    secret_hash: *secret_hash,
                };
                tenancy::create_key(&mut self.projects, &mut self.key_index, project, key, t)
                    .map(Reply::Key)
            }
            Op::RevokeKey { project, key_id } => {
                tenancy::revoke_key(&mut self.projects, project, key_id).map(Reply::Key)
            }
            Op::ProjectLock {
                project,
                key,
                action,
            } => self.apply_lock(project, key, action, t),
            Op::Hier { project, op } => self.apply_hier(project, op, t),
            Op::Once { request_id, op } => self.apply_once(*request_id, None, op, t),
            Op::Resent {
                request_id,
                after,
                op,
            } => self.apply_once(*request_id, Some(*after), op, t),
        }
    }

    /// Refuses a tenant call for a project this group does not hold: the meta group knows
    /// which projects live on data shards (a data shard's own map is empty, so it refuses
    /// nothing). Routing never sends such a call here; this keeps a mistake in routing from
    /// writing a project's locks into two groups.
    fn check_placement(&self, op: &Op) -> Result<(), CoreError> {
        let Some(project) = op.project() else {
            return Ok(());
        };
        match self.shards.shard_of(project) {
            crate::shards::META_SHARD => Ok(()),
            shard => Err(CoreError::invalid(
                "project",
                format!("project {project} lives on shard {shard}, not in this group"),
            )),
        }
    }

    /// Applies `op` unless `request_id` was applied within the window; a repeat gets the
    /// first outcome and changes nothing. A node's resend (`resent`: the cluster time its
    /// first attempt was applied at or after, if at all) whose first attempt may have been
    /// applied and forgotten is refused.
    fn apply_once(
        &mut self,
        request_id: u128,
        resent: Option<Nanos>,
        op: &Op,
        t: Nanos,
    ) -> Outcome {
        let Some(project) = op.project() else {
            return self.apply_op(op, t);
        };
        let fingerprint = op.fingerprint();
        let ids = &self.request_ids;
        let seen = match resent {
            None => ids.check(project, request_id, fingerprint, t)?,
            Some(after) => ids.check_resend(project, request_id, fingerprint, t, after)?,
        };
        if let Seen::Repeat(first) = seen {
            return first;
        }
        let outcome = self.apply_op(op, t);
        self.request_ids
            .remember(project, request_id, fingerprint, &outcome, t);
        outcome
    }

    fn apply_lock(&mut self, project: &str, key: &str, action: &LockAction, t: Nanos) -> Outcome {
        action.validate(key)?;
        let locks = &mut self.project_locks;
        let lease = |(expires_at, fencing_token)| Reply::Lease {
            expires_at,
            fencing_token,
        };
        match *action {
            LockAction::Acquire { token, ttl_seconds } => locks
                .acquire(project, key, token, ttl_seconds, t)
                .map(lease),
            LockAction::Renew { token, ttl_seconds } => {
                locks.renew(project, key, token, ttl_seconds, t).map(lease)
            }
            LockAction::Release { token } => {
                locks.release(project, key, token, t).map(|_| Reply::Done)
            }
            LockAction::ForceRelease => locks.force_release(project, key).map(|_| Reply::Done),
        }
    }

    fn apply_hier(&mut self, project: &str, op: &HierOp, t: Nanos) -> Outcome {
        op.validate()?;
        if let Some(namespace) = op.primitive_namespace() {
            if !self.hierarchy.has_namespace(project, namespace) {
                return Err(CoreError::NotFound("namespace".into()));
            }
            return self.apply_primitive(project, namespace, op, t);
        }
        if let HierOp::DeleteNamespace { name } = op {
            self.hierarchy.delete_namespace(project, name)?;
            self.semaphores.delete_namespace(project, name);
            self.wait_groups.delete_namespace(project, name);
            self.barriers.delete_namespace(project, name);
            return Ok(Reply::Done);
        }
        let h = &mut self.hierarchy;
        match op {
            HierOp::CreateNamespace {
                name,
                description,
                metadata,
            } => h
                .create_namespace(project, name, description.clone(), metadata.clone(), t)
                .map(Reply::Namespace),
            HierOp::UpdateNamespace {
                name,
                description,
                metadata,
                expected_version,
            } => h
                .update_namespace(
                    project,
                    name,
                    description.clone(),
                    metadata.clone(),
                    *expected_version,
                    t,
                )
                .map(Reply::Namespace),
            HierOp::CreateLease {
                namespace,
                lease_id,
                process_id,
                ttl_seconds,
            } => h
                .create_lease(project, namespace, lease_id, process_id, *ttl_seconds, t)
                .map(Reply::LockLease),
            HierOp::RefreshLease {
                namespace,
                lease_id,
                ttl_seconds,
            } => h
                .refresh_lease(project, namespace, lease_id, *ttl_seconds, t)
                .map(Reply::LockLease),
            HierOp::RevokeLease {
                namespace,
                lease_id,
            } => h
                .revoke_lease(project, namespace, lease_id, t)
                .map(|_| Reply::Done),
            HierOp::AcquireLock {
                namespace,
                lock_name,
                exclusive,
                lease_id,
                metadata,
                wait,
            } => h
                .acquire(
                    project,
                    namespace,
                    lock_name,
                    *exclusive,
                    lease_id,
                    metadata.clone(),
                    t,
                    wait.as_ref(),
                )
                .map(Reply::Acquire),
            HierOp::CancelWait {
                namespace,
                lock_name,
                lease_id,
                exclusive,
                waiter_id,
            } => {
                let queued = QueuedAcquire {
                    name: lock_name,
                    lease_id,
                    asked: *exclusive,
                    waiter_id,
                };
                (h.cancel_wait(project, namespace, queued, t)).map(Reply::Acquire)
            }
            HierOp::ReleaseLock {
                namespace,
                lock_name,
                lease_id,
            } => h
                .release(project, namespace, lock_name, lease_id, t)
                .map(Reply::Lock),
            HierOp::DeleteLock {
                namespace,
                lock_name,
            } => h
                .delete_lock(project, namespace, lock_name, t)
                .map(|_| Reply::Done),
            HierOp::DeleteNamespace { .. } => unreachable!("handled above"),
            _ => unreachable!("semaphore calls are handled by apply_semaphore"),
        }
    }

    /// A semaphore, wait-group or barrier call, in an existing namespace.
    fn apply_primitive(&mut self, project: &str, ns: &str, op: &HierOp, t: Nanos) -> Outcome {
        let s = &mut self.semaphores;
        match op {
            HierOp::CreateSemaphore { name, spec, .. } => s
                .create_semaphore(project, ns, name, spec, t)
                .map(Reply::Semaphore),
            HierOp::UpdateSemaphore {
                name,
                spec,
                expected_version,
                ..
            } => s
                .update_semaphore(project, ns, name, spec, *expected_version, t)
                .map(Reply::Semaphore),
            HierOp::DeleteSemaphore { name, .. } => {
                s.delete_semaphore(project, ns, name);
                Ok(Reply::Done)
            }
            HierOp::CreateSemaphoreLease {
                lease_id,
                process_id,
                ttl_seconds,
                ..
            } => s
                .create_lease(project, ns, lease_id, process_id, *ttl_seconds, t)
                .map(Reply::LockLease),
            HierOp::RefreshSemaphoreLease {
                lease_id,
                ttl_seconds,
                ..
            } => s
                .refresh_lease(project, ns, lease_id, *ttl_seconds, t)
                .map(Reply::LockLease),
            HierOp::RevokeSemaphoreLease { lease_id, .. } => s
                .revoke_lease(project, ns, lease_id, t)
                .map(|_| Reply::Done),
            HierOp::AcquireSemaphore {
                name,
                lease_id,
                weight,
                metadata,
                wait,
                ..
            } => {
                let args = AcquireArgs {
                    semaphore: name,
                    lease_id,
                    weight: *weight,
                    metadata,
                    wait: wait.as_ref(),
                };
                s.acquire(project, ns, args, t).map(Reply::SemaphoreAcquire)
            }
            HierOp::CancelSemaphoreWait {
                name,
                lease_id,
                weight,
                waiter_id,
                ..
            } => {
                let queued = QueuedAcquire {
                    name,
                    lease_id,
                    asked: *weight,
                    waiter_id,
                };
                (s.cancel_wait(project, ns, queued, t)).map(Reply::SemaphoreAcquire)
            }
            HierOp::ReleaseSemaphore { name, lease_id, .. } => s
                .release(project, ns, name, lease_id, t)
                .map(Reply::Semaphore),
            _ => self.apply_coordination(project, ns, op, t),
        }
    }

    /// A wait-group or barrier call, in an existing namespace.
    fn apply_coordination(&mut self, project: &str, ns: &str, op: &HierOp, t: Nanos) -> Outcome {
        let (w, b) = (&mut self.wait_groups, &mut self.barriers);
        match op {
            HierOp::CreateWaitGroup { name, spec, .. } => {
                w.create(project, ns, name, spec, t).map(Reply::WaitGroup)
            }
            HierOp::UpdateWaitGroup {
                name,
                spec,
                expected_version,
                ..
            } => (w.update(project, ns, name, spec, *expected_version, t)).map(Reply::WaitGroup),
            HierOp::DeleteWaitGroup { name, .. } => {
                w.delete(project, ns, name);
                Ok(Reply::Done)
            }
            HierOp::CompleteJobs { name, jobs, .. } => {
                (w.complete_jobs(project, ns, name, jobs, t)).map(Reply::WaitGroup)
            }
            HierOp::CreateBarrier { name, spec, .. } => {
                b.create(project, ns, name, spec, t).map(Reply::Barrier)
            }
            HierOp::UpdateBarrier {
                name,
                spec,
                expected_version,
                ..
            } => (b.update(project, ns, name, spec, *expected_version, t)).map(Reply::Barrier),
            HierOp::DeleteBarrier { name, .. } => {
                b.delete(project, ns, name);
                Ok(Reply::Done)
            }
            HierOp::ArriveAtBarrier {
                name,
                process_id,
                expected_generation,
                metadata,
                ..
            } => {
                let arrival = Arrival {
                    process_id,
                    expected_generation: *expected_generation,
                    metadata,
                };
                let (barrier, all_arrived) = b.arrive(project, ns, name, arrival, t)?;
                Ok(Reply::BarrierArrival {
                    barrier,
                    all_arrived,
                })
            }
            _ => unreachable!("only primitive calls have a primitive namespace"),
        }
    }

    // ---- queries -------------------------------------------------------------------------

    /// The time a query issued at wall-clock `now` should be judged at: never earlier than
    /// what the machine has already applied.
    pub fn query_time(&self, now: Nanos) -> Nanos {
        now.max(self.time)
    }

    /// The project a key id names, unchecked (no secret compared): enough to find where a
    /// call is decided, never to admit it.
    pub fn project_of_key(&self, key_id: &str) -> Option<&str> {
        self.key_index.get(key_id).map(String::as_str)
    }

    /// Resolves a key id and the SHA-256 of the presented secret.
    pub fn check_key(&self, key_id: &str, secret_hash: &[u8; 32]) -> KeyCheck<'_> {
        let Some(project) = self.key_index.get(key_id) else {
            return KeyCheck::Unknown;
        };
        let Some(key) = self.projects.get(project).and_then(|p| p.keys.get(key_id)) else {
            return KeyCheck::Unknown;
        };
        if key.revoked || !key.hash_matches(secret_hash) {
            return KeyCheck::Unknown;
        }
        KeyCheck::Known { project, key }
    }

    /// The shard map (meaningful on the meta group).
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    pub fn project(&self, name: &str) -> Option<ProjectView> {
        self.projects.get(name).map(|p| p.view(name))
    }

    pub fn projects(&self) -> Vec<ProjectView> {
        self.projects.iter().map(|(n, p)| p.view(n)).collect()
    }

    /// (project-lock limit, hierarchical limit) of a project; 0 = unlimited.
    pub fn rate_limits(&self, project: &str) -> (u32, u32) {
        self.projects
            .get(project)
            .map(|p| (p.lock_ops_per_minute, p.hier_ops_per_minute))
            .unwrap_or((0, 0))
    }

    /// project-lock listing of a project's locks (see [`ProjectLocks::list`]), judged at `now`.
    pub fn list_locks(
        &self,
        project: &str,
        after: &str,
        limit: usize,
        now: Nanos,
    ) -> Vec<(String, crate::project_locks::ProjectLease, bool)> {
        self.project_locks
            .list(project, after, limit, self.query_time(now))
    }

    /// project-lock read at time `now`.
    pub fn read_lock(&self, project: &str, key: &str, now: Nanos) -> Result<LockRead, CoreError> {
        self.project_locks.read(project, key, self.query_time(now))
    }

    /// hierarchical queries.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// (semaphores, semaphore leases, holds, queued acquires), for metrics.
    pub fn semaphore_totals(&self) -> (usize, usize, usize, usize) {
        self.semaphores.totals()
    }

    /// Semaphore queries; the namespace is checked first, as every semaphore call does.
    pub fn semaphores_in(&self, project: &str, namespace: &str) -> Result<&Semaphores, CoreError> {
        self.check_namespace(project, namespace)?;
        Ok(&self.semaphores)
    }

    /// Wait-group queries; the namespace is checked first.
    pub fn wait_groups_in(&self, project: &str, namespace: &str) -> Result<&WaitGroups, CoreError> {
        self.check_namespace(project, namespace)?;
        Ok(&self.wait_groups)
    }

    /// Barrier queries; the namespace is checked first.
    pub fn barriers_in(&self, project: &str, namespace: &str) -> Result<&Barriers, CoreError> {
        self.check_namespace(project, namespace)?;
        Ok(&self.barriers)
    }

    /// (wait groups, completed job records, barriers, participant records), for metrics.
    pub fn coordination_totals(&self) -> (usize, usize, usize, usize) {
        let (groups, jobs) = self.wait_groups.totals();
        let (barriers, participants) = self.barriers.totals();
        (groups, jobs, barriers, participants)
    }

    fn check_namespace(&self, project: &str, namespace: &str) -> Result<(), CoreError> {
        validate::simple_name("namespace_name", namespace)?;
        if !self.hierarchy.has_namespace(project, namespace) {
            return Err(CoreError::NotFound("namespace".into()));
        }
        Ok(())
    }

    /// Number of stored project-lock leases (live or within the takeover grace).
    pub fn project_lock_count(&self) -> usize {
        self.project_locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenancy::KeyKind;
    use crate::SECOND;

    const T0: Nanos = 1_700_000_000 * SECOND;

    fn cmd(stamp: Nanos, ops: Vec<Op>) -> Command {
        Command { stamp, ops }
    }

    fn lock(action: LockAction) -> Op {
        Op::ProjectLock {
            project: "p".into(),
            key: "k".into(),
            action,
        }
    }

    #[test]
    fn a_lock_call_of_the_wrong_shape_is_refused_by_apply_and_changes_nothing() {
        let mut sm = StateMachine::default();
        let before = sm.clone();
        let bad_key = Op::ProjectLock {
            project: "p".into(),
            key: "bad key".into(),
            action: LockAction::Acquire {
                token: 1,
                ttl_seconds: 10,
            },
        };
        let short_ttl = lock(LockAction::Renew {
            token: 1,
            ttl_seconds: 4,
        });
        let out = sm.apply(&cmd(T0, vec![bad_key, short_ttl]));
        for o in &out {
            assert!(matches!(o, Err(CoreError::Invalid { .. })), "{o:?}");
        }
        assert_eq!(sm.project_locks, before.project_locks);
        assert_eq!(sm.summary(), before.summary());
    }

    #[test]
    fn the_meta_group_refuses_calls_of_projects_placed_on_a_data_shard() {
        let mut sm = StateMachine::default();
        let create = Command {
            stamp: 1,
            ops: vec![
                Op::CreateShard {
                    members: [4, 5, 6].into(),
                },
                Op::CreateProjectOn {
                    name: "far".into(),
                    shard: 1,
                },
                Op::CreateProjectOn {
                    name: "near".into(),
                    shard: 0,
                },
            ],
        };
        assert!(sm.apply(&create).iter().all(Result::is_ok));
        let call = |project: &str| Op::Hier {
            project: project.into(),
            op: HierOp::CreateNamespace {
                name: "ns".into(),
                description: String::new(),
                metadata: Default::default(),
            },
        };
        let out = sm.apply(&Command {
            stamp: 2,
            ops: vec![call("far"), call("near")],
        });
        assert!(
            matches!(&out[0], Err(CoreError::Invalid { .. })),
            "{:?}",
            out[0]
        );
        assert!(out[1].is_ok(), "{:?}", out[1]);
        // A data shard's machine holds the far project's calls.
        let mut shard = StateMachine::default();
        assert!(shard.apply(&Command {
            stamp: 2,
            ops: vec![call("far")]
        })[0]
            .is_ok());
    }

    #[test]
    fn time_never_runs_backwards() {
        let mut sm = StateMachine::default();
        let a = sm.apply(&cmd(
            T0 + 10 * SECOND,
            vec![lock(LockAction::Acquire {
                token: 1,
                ttl_seconds: 5,
            })],
        ));
        // A new leader with a slower clock stamps an earlier time.
        let b = sm.apply(&cmd(
            T0,
            vec![lock(LockAction::Renew {
                token: 1,
                ttl_seconds: 5,
            })],
        ));
        assert_eq!(
            a[0],
            Ok(Reply::Lease {
                expires_at: T0 + 15 * SECOND,
                fencing_token: (1 << 52) + 1
            })
        );
        assert_eq!(
            b[0],
            Ok(Reply::Lease {
                expires_at: T0 + 15 * SECOND,
                fencing_token: (1 << 52) + 1
            })
        );
        assert_eq!(sm.time(), T0 + 10 * SECOND);
    }

    #[test]
    fn a_batch_answers_each_op_in_order() {
        let mut sm = StateMachine::default();
        let out = sm.apply(&cmd(
            T0,
            vec![
                lock(LockAction::Acquire {
                    token: 1,
                    ttl_seconds: 5,
                }),
                lock(LockAction::Acquire {
                    token: 2,
                    ttl_seconds: 5,
                }),
                lock(LockAction::Release { token: 1 }),
                lock(LockAction::Acquire {
                    token: 2,
                    ttl_seconds: 5,
                }),
            ],
        ));
        assert!(out[0].is_ok());
        assert_eq!(out[1], Err(CoreError::LockHeld));
        assert_eq!(out[2], Ok(Reply::Done));
        assert!(out[3].is_ok());
    }

    #[test]
    fn keys_authenticate_until_revoked() {
        let mut sm = StateMachine::default();
        let ops = vec![
            Op::CreateProject { name: "p".into() },
            Op::CreateKey {
                project: "p".into(),
                key_id: "id1".into(),
                kind: KeyKind::ServiceRole,
                scopes: vec![],
                secret_hash: [1; 32],
            },
        ];
        assert!(sm.apply(&cmd(T0, ops)).iter().all(|o| o.is_ok()));
        assert!(matches!(
            sm.check_key("id1", &[1; 32]),
            KeyCheck::Known { project: "p", .. }
        ));
        assert_eq!(sm.check_key("id1", &[2; 32]), KeyCheck::Unknown);
        assert_eq!(sm.check_key("nope", &[1; 32]), KeyCheck::Unknown);
        sm.apply(&cmd(
            T0,
            vec![Op::RevokeKey {
                project: "p".into(),
                key_id: "id1".into(),
            }],
        ));
        assert_eq!(sm.check_key("id1", &[1; 32]), KeyCheck::Unknown);
    }

    #[test]
    fn duplicate_project_and_unknown_project() {
        let mut sm = StateMachine::default();
        let out = sm.apply(&cmd(
            T0,
            vec![
                Op::CreateProject { name: "p".into() },
                Op::CreateProject { name: "p".into() },
                Op::CreateProject {
                    name: "bad name".into(),
                },
                Op::UpdateProject {
                    name: "q".into(),
                    lock_ops_per_minute: Some(5),
                    hier_ops_per_minute: None,
                },
            ],
        ));
        assert!(out[0].is_ok());
        assert_eq!(out[1], Err(CoreError::AlreadyExists("project".into())));
        assert!(matches!(out[2], Err(CoreError::Invalid { .. })));
        assert_eq!(out[3], Err(CoreError::NotFound("project".into())));
        assert_eq!(sm.rate_limits("p"), (600, 0));
    }
}
