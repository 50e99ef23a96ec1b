//! Commands replicated through the Raft log, and the answers `apply` gives.
//!
//! A [`Command`] is one log entry: a leader-stamped time and a batch of [`Op`]s. Batching lets
//! concurrent client requests share one log entry, one round trip and one fsync; each op still
//! gets its own [`Outcome`], in order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::barriers::{BarrierSpec, BarrierView};
use crate::error::CoreError;
use crate::hierarchy::{AcquireReply, LeaseView, LockView, NamespaceView, WaitSpec};
use crate::semaphores::{SemAcquireReply, SemaphoreSpec, SemaphoreView};
use crate::tenancy::{KeyKind, KeyView, ProjectView};
use crate::validate as v;
use crate::wait_groups::{GroupSpec, WaitGroupView};
use crate::Nanos;

/// One replicated log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// Wall-clock time of the leader that proposed it. Apply uses
    /// `max(stamp, last applied time)`, so time never runs backwards across leaders.
    pub stamp: Nanos,
    /// The operations, applied in order at the same time.
    pub ops: Vec<Op>,
}

impl Command {
    /// How many of its ops someone asked for: all but the leader's own [`Op::Tick`]s, so an
    /// idle group's write rate reads 0.
    pub fn requested_ops(&self) -> usize {
        self.ops.iter().filter(|op| !matches!(op, Op::Tick)).count()
    }
}

/// The answer to one [`Op`].
pub type Outcome = Result<Reply, CoreError>;

/// Everything the state machine can be asked to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Only advances time: reaps expired hierarchical leases and forgets lapsed project-lock leases.
    Tick,
    /// Tenancy: a new tenant.
    CreateProject { name: String },
    /// Tenancy: per-project rate limits. `None` leaves a setting unchanged; for the
    /// hierarchical limit `Some(0)` switches it off.
    UpdateProject {
        name: String,
        lock_ops_per_minute: Option<u32>,
        hier_ops_per_minute: Option<u32>,
    },
    /// Tenancy: registers a key. Only the SHA-256 of the secret enters the state.
    CreateKey {
        project: String,
        key_id: String,
        kind: KeyKind,
        scopes: Vec<String>,
        secret_hash: [u8; 32],
    },
    /// Tenancy: revokes a key; it stops working as soon as this is committed.
    RevokeKey { project: String, key_id: String },
    /// project-lock: one call on a named project lock.
    ProjectLock {
        project: String,
        key: String,
        action: LockAction,
    },
    /// hierarchical: one call on the hierarchical API of a project.
    Hier { project: String, op: HierOp },
    /// A project-lock or hierarchical call that carries a client request id: applied once; a repeat within the
    /// window ([`crate::request_ids`]) is answered with the first outcome.
    Once { request_id: u128, op: Box<Op> },
    /// Sharding (meta group): a new data shard on these voters; answers its id.
    CreateShard {
        members: std::collections::BTreeSet<u64>,
    },
    /// Tenancy: a new tenant, placed on `shard` (see [`crate::shards`]).
    CreateProjectOn {
        name: String,
        shard: crate::shards::ShardId,
    },
    /// A node's resend of a call it may have proposed before as [`Op::Once`] under the same
    /// `request_id` (after a lost answer or a leader change), whose first attempt, if it was
    /// applied at all, was applied at or after cluster time `after`. Applied once, as `Once`;
    /// and when the id is not remembered but its table may have forgotten ids applied since
    /// `after`, refused ([`crate::request_ids::RequestIds::check_resend`]).
    Resent {
        request_id: u128,
        after: crate::Nanos,
        op: Box<Op>,
    },
}

impl Op {
    /// The project a tenant call belongs to (`None` for admin and housekeeping ops).
    pub fn project(&self) -> Option<&str> {
        match self {
            Op::ProjectLock { project, .. } | Op::Hier { project, .. } => Some(project),
            Op::Once { op, .. } | Op::Resent { op, .. } => op.project(),
            _ => None,
        }
    }

    /// A checksum of what this op asks for, stable across nodes and releases of the same
    /// encoding. Ids the proposer draws at random (a new lease's id) are left out, so a retry
    /// of the same call has the same fingerprint.
    pub fn fingerprint(&self) -> u32 {
        let checksum = |op: &Op| crate::codec::checksum_of(op).unwrap_or(0);
        let Op::Hier {
            op: HierOp::CreateLease { .. } | HierOp::CreateSemaphoreLease { .. },
            ..
        } = self
        else {
            // Every other op is fingerprinted as it is: no copy (this runs for every write
            // with a request id, on every node).
            return checksum(self);
        };
        let mut asked = self.clone();
        if let Op::Hier {
            op: HierOp::CreateLease { lease_id, .. } | HierOp::CreateSemaphoreLease { lease_id, .. },
            ..
        } = &mut asked
        {
            lease_id.clear();
        }
        checksum(&asked)
    }
}

/// project-lock calls that change state (a read is a query, not a command).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockAction {
    Acquire { token: u128, ttl_seconds: u64 },
    Renew { token: u128, ttl_seconds: u64 },
    Release { token: u128 },
    ForceRelease,
}

impl LockAction {
    /// The checks of this call on `key` that need no state (the key, the TTL). The server runs
    /// them before proposing and apply runs them again, first: the lock table itself trusts
    /// what it is given.
    pub fn validate(&self, key: &str) -> Result<(), CoreError> {
        v::lock_key(key)?;
        match self {
            LockAction::Acquire { ttl_seconds, .. } | LockAction::Renew { ttl_seconds, .. } => {
                v::lock_ttl(*ttl_seconds)
            }
            LockAction::Release { .. } | LockAction::ForceRelease => Ok(()),
        }
    }
}

/// hierarchical calls that change state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HierOp {
    CreateNamespace {
        name: String,
        description: String,
        metadata: BTreeMap<String, String>,
    },
    UpdateNamespace {
        name: String,
        description: String,
        metadata: BTreeMap<String, String>,
        expected_version: Option<u64>,
    },
    DeleteNamespace {
        name: String,
    },
    CreateLease {
        namespace: String,
        lease_id: String,
        process_id: String,
        ttl_seconds: u64,
    },
    RefreshLease {
        namespace: String,
        lease_id: String,
        ttl_seconds: u64,
    },
    RevokeLease {
        namespace: String,
        lease_id: String,
    },
    /// Acquire; with `wait`, an incompatible request joins the lock's FIFO queue.
    AcquireLock {
        namespace: String,
        lock_name: String,
        exclusive: bool,
        lease_id: String,
        metadata: BTreeMap<String, String>,
        /// When set and the lock is incompatible, queue (FIFO) instead of only answering
        /// UNAVAILABLE; a later release hands the lock over in the same apply.
        #[serde(default)]
        wait: Option<WaitSpec>,
    },
    /// Ends a queued acquire; answers ACQUIRED if it was granted meanwhile, else TIMED_OUT.
    CancelWait {
        namespace: String,
        lock_name: String,
        lease_id: String,
        exclusive: bool,
        waiter_id: String,
    },
    ReleaseLock {
        namespace: String,
        lock_name: String,
        lease_id: String,
    },
    DeleteLock {
        namespace: String,
        lock_name: String,
    },
    // Semaphores (appended: the encoding of an enum is its variant index).
    CreateSemaphore {
        namespace: String,
        name: String,
        spec: SemaphoreSpec,
    },
    /// Conditional: `expected_version` must be the current version.
    UpdateSemaphore {
        namespace: String,
        name: String,
        spec: SemaphoreSpec,
        expected_version: Option<u64>,
    },
    DeleteSemaphore {
        namespace: String,
        name: String,
    },
    CreateSemaphoreLease {
        namespace: String,
        lease_id: String,
        process_id: String,
        ttl_seconds: u64,
    },
    RefreshSemaphoreLease {
        namespace: String,
        lease_id: String,
        ttl_seconds: u64,
    },
    RevokeSemaphoreLease {
        namespace: String,
        lease_id: String,
    },
    /// Acquire `weight` permits; with `wait`, one that cannot be granted joins the FIFO queue.
    AcquireSemaphore {
        namespace: String,
        name: String,
        lease_id: String,
        weight: u64,
        metadata: BTreeMap<String, String>,
        wait: Option<WaitSpec>,
    },
    /// Ends a queued semaphore acquire; ACQUIRED if the lease holds `weight` by then.
    CancelSemaphoreWait {
        namespace: String,
        name: String,
        lease_id: String,
        weight: u64,
        waiter_id: String,
    },
    ReleaseSemaphore {
        namespace: String,
        name: String,
        lease_id: String,
    },
    // Wait groups.
    CreateWaitGroup {
        namespace: String,
        name: String,
        spec: GroupSpec,
    },
    /// Conditional: `expected_version` must be the current version.
    UpdateWaitGroup {
        namespace: String,
        name: String,
        spec: GroupSpec,
        expected_version: Option<u64>,
    },
    DeleteWaitGroup {
        namespace: String,
        name: String,
    },
    /// (job id, metadata) pairs; idempotent per job id.
    CompleteJobs {
        namespace: String,
        name: String,
        jobs: Vec<(String, BTreeMap<String, String>)>,
    },
    // Barriers.
    CreateBarrier {
        namespace: String,
        name: String,
        spec: BarrierSpec,
    },
    /// Conditional: `expected_version` must be the current version.
    UpdateBarrier {
        namespace: String,
        name: String,
        spec: BarrierSpec,
        expected_version: Option<u64>,
    },
    DeleteBarrier {
        namespace: String,
        name: String,
    },
    ArriveAtBarrier {
        namespace: String,
        name: String,
        process_id: String,
        expected_generation: u64,
        metadata: BTreeMap<String, String>,
    },
}

impl HierOp {
    /// The checks of this operation that need no state (names, sizes, TTLs, metadata), in the
    /// order apply makes them. The server runs them before proposing, so a request that would
    /// be refused for its shape never reaches the log; apply runs them again, so nothing in
    /// the log can bypass them.
    pub fn validate(&self) -> Result<(), CoreError> {
        let ns = |namespace: &str| v::simple_name("namespace_name", namespace);
        match self {
            HierOp::CreateNamespace {
                name,
                description,
                metadata,
            } => {
                v::simple_name("name", name)?;
                definition(description, metadata)
            }
            HierOp::UpdateNamespace {
                name,
                description,
                metadata,
                ..
            } => {
                ns(name)?;
                definition(description, metadata)
            }
            HierOp::DeleteNamespace { name } => ns(name),
            HierOp::CreateLease {
                namespace,
                process_id,
                ttl_seconds,
                ..
            }
            | HierOp::CreateSemaphoreLease {
                namespace,
                process_id,
                ttl_seconds,
                ..
            } => {
                ns(namespace)?;
                v::process_id(process_id)?;
                v::lease_ttl(*ttl_seconds)
            }
            HierOp::RefreshLease {
                namespace,
                ttl_seconds,
                ..
            }
            | HierOp::RefreshSemaphoreLease {
                namespace,
                ttl_seconds,
                ..
            } => {
                ns(namespace)?;
                v::lease_ttl(*ttl_seconds)
            }
            HierOp::RevokeLease { namespace, .. }
            | HierOp::RevokeSemaphoreLease { namespace, .. } => ns(namespace),
            HierOp::AcquireLock {
                namespace,
                lock_name,
                metadata,
                wait,
                ..
            } => {
                ns(namespace)?;
                v::lock_name(lock_name)?;
                v::metadata(metadata)?;
                waiter(wait)
            }
            HierOp::CancelWait {
                namespace,
                lock_name,
                ..
            }
            | HierOp::ReleaseLock {
                namespace,
                lock_name,
                ..
            }
            | HierOp::DeleteLock {
                namespace,
                lock_name,
            } => {
                ns(namespace)?;
                v::lock_name(lock_name)
            }
            HierOp::CreateSemaphore {
                namespace,
                name,
                spec,
            } => semaphore(namespace, name, spec),
            HierOp::UpdateSemaphore {
                namespace,
                name,
                spec,
                expected_version,
            } => {
                semaphore(namespace, name, spec)?;
                v::expected_version(*expected_version)
            }
            HierOp::DeleteSemaphore { namespace, name }
            | HierOp::ReleaseSemaphore {
                namespace, name, ..
            }
            | HierOp::CancelSemaphoreWait {
                namespace, name, ..
            } => record(namespace, "semaphore_name", name),
            HierOp::AcquireSemaphore {
                namespace,
                name,
                weight,
                metadata,
                wait,
                ..
            } => {
                record(namespace, "semaphore_name", name)?;
                v::permits("weight", *weight)?;
                v::metadata(metadata)?;
                waiter(wait)
            }
            HierOp::CreateWaitGroup {
                namespace,
                name,
                spec,
            } => wait_group(namespace, name, spec),
            HierOp::UpdateWaitGroup {
                namespace,
                name,
                spec,
                expected_version,
            } => {
                wait_group(namespace, name, spec)?;
                v::expected_version(*expected_version)
            }
            HierOp::DeleteWaitGroup { namespace, name } => {
                record(namespace, "wait_group_name", name)
            }
            HierOp::CompleteJobs {
                namespace,
                name,
                jobs,
            } => {
                record(namespace, "wait_group_name", name)?;
                v::job_batch(jobs)
            }
            HierOp::CreateBarrier {
                namespace,
                name,
                spec,
            } => barrier(namespace, name, spec),
            HierOp::UpdateBarrier {
                namespace,
                name,
                spec,
                expected_version,
            } => {
                barrier(namespace, name, spec)?;
                v::expected_version(*expected_version)
            }
            HierOp::DeleteBarrier { namespace, name } => record(namespace, "barrier_name", name),
            HierOp::ArriveAtBarrier {
                namespace,
                name,
                process_id,
                expected_generation,
                metadata,
            } => {
                record(namespace, "barrier_name", name)?;
                v::simple_name("process_id", process_id)?;
                v::generation("expected_generation", *expected_generation)?;
                v::metadata(metadata)
            }
        }
    }

    /// The namespace a semaphore, wait-group or barrier call works in (`None` for the lock
    /// and namespace calls).
    pub fn primitive_namespace(&self) -> Option<&str> {
        match self {
            HierOp::CreateWaitGroup { namespace, .. }
            | HierOp::UpdateWaitGroup { namespace, .. }
            | HierOp::DeleteWaitGroup { namespace, .. }
            | HierOp::CompleteJobs { namespace, .. }
            | HierOp::CreateBarrier { namespace, .. }
            | HierOp::UpdateBarrier { namespace, .. }
            | HierOp::DeleteBarrier { namespace, .. }
            | HierOp::ArriveAtBarrier { namespace, .. } => Some(namespace),
            HierOp::CreateSemaphore { namespace, .. }
            | HierOp::UpdateSemaphore { namespace, .. }
            | HierOp::DeleteSemaphore { namespace, .. }
            | HierOp::CreateSemaphoreLease { namespace, .. }
            | HierOp::RefreshSemaphoreLease { namespace, .. }
            | HierOp::RevokeSemaphoreLease { namespace, .. }
            | HierOp::AcquireSemaphore { namespace, .. }
            | HierOp::CancelSemaphoreWait { namespace, .. }
            | HierOp::ReleaseSemaphore { namespace, .. } => Some(namespace),
            _ => None,
        }
    }
}

/// A record of a namespace (a semaphore, wait group or barrier) named in `field`.
fn record(namespace: &str, field: &str, name: &str) -> Result<(), CoreError> {
    v::simple_name("namespace_name", namespace)?;
    v::simple_name(field, name)
}

/// What every definition carries: a description and metadata.
fn definition(description: &str, metadata: &BTreeMap<String, String>) -> Result<(), CoreError> {
    v::description(description)?;
    v::metadata(metadata)
}

/// A blocking call's waiter id, when it waits.
fn waiter(wait: &Option<WaitSpec>) -> Result<(), CoreError> {
    wait.as_ref().map_or(Ok(()), |w| v::waiter_id(&w.waiter_id))
}

/// The fields every namespaced record is created or replaced with (its namespace, name,
/// description and metadata), with the outcomes of the record's own `rules` between them, in
/// order (a bad name is reported first, as for any call).
fn record_fields<const N: usize>(
    namespace: &str,
    name_field: &str,
    name: &str,
    description: &str,
    metadata: &BTreeMap<String, String>,
    rules: [Result<(), CoreError>; N],
) -> Result<(), CoreError> {
    record(namespace, name_field, name)?;
    v::description(description)?;
    rules.into_iter().collect::<Result<(), CoreError>>()?;
    v::metadata(metadata)
}

/// The fields a semaphore is created or replaced with.
fn semaphore(namespace: &str, name: &str, spec: &SemaphoreSpec) -> Result<(), CoreError> {
    let rules = [v::permits("permits", spec.permits)];
    let (description, metadata) = (&spec.description, &spec.metadata);
    record_fields(
        namespace,
        "semaphore_name",
        name,
        description,
        metadata,
        rules,
    )
}

/// The fields a wait group is created or replaced with.
fn wait_group(namespace: &str, name: &str, spec: &GroupSpec) -> Result<(), CoreError> {
    let retention = spec.delete_after_finished_seconds;
    let rules = [
        v::wait_group_counter(spec.counter),
        v::retention("delete_after_finished_seconds", retention),
    ];
    let (description, metadata) = (&spec.description, &spec.metadata);
    record_fields(
        namespace,
        "wait_group_name",
        name,
        description,
        metadata,
        rules,
    )
}

/// The fields a barrier is created or replaced with.
fn barrier(namespace: &str, name: &str, spec: &BarrierSpec) -> Result<(), CoreError> {
    let idle = spec.delete_inactive_after_seconds;
    let rules = [
        v::expected_processes(spec.expected_processes),
        v::retention("delete_inactive_after_seconds", idle),
    ];
    let (description, metadata) = (&spec.description, &spec.metadata);
    record_fields(
        namespace,
        "barrier_name",
        name,
        description,
        metadata,
        rules,
    )
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Nothing to report (tick, revoke, delete, release of a project lock).
    Done,
    Project(ProjectView),
    Key(KeyView),
    /// project-lock acquire/renew: the lease's expiry and fencing token.
    Lease {
        expires_at: Nanos,
        fencing_token: u64,
    },
    Namespace(NamespaceView),
    LockLease(LeaseView),
    Acquire(AcquireReply),
    Lock(LockView),
    Semaphore(SemaphoreView),
    SemaphoreAcquire(SemAcquireReply),
    WaitGroup(WaitGroupView),
    Barrier(BarrierView),
    /// An arrival: the barrier and whether the generation arrived at has tripped.
    BarrierArrival {
        barrier: BarrierView,
        all_arrived: bool,
    },
    /// A new data shard's id.
    Shard(crate::shards::ShardId),
}
