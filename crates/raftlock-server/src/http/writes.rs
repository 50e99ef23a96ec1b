//! What each plain `/v1beta` write proposes: its request's fields as one [`HierOp`], and the
//! response type its reply becomes ([`FromReply`]).
//!
//! A plain write has nothing to do at the edge beyond its op's `validate` (`Call::write`;
//! apply decides the rest) and, for `UpdateNamespace` alone, a check that must stay out of
//! apply ([`Write::check`]) — so dispatch sends it through `Call::submit` without a handler
//! of its own. Only the writes that wait (`AcquireLock`, `AcquireSemaphore`)
//! keep one.

use raftlock_api::barriers::{
    ArriveAtBarrierRequest, ArriveAtBarrierResponse, BarrierRequest, BarrierResponse,
    CreateBarrierRequest, UpdateBarrierRequest,
};
use raftlock_api::hierarchy::{
    CreateLockLeaseRequest, CreateNamespaceRequest, EmptyResponse, LeaseRequest, LockLeaseResponse,
    LockRequest, LockResponse, NamespaceRequest, NamespaceResponse, RefreshLockLeaseRequest,
    ReleaseLockRequest, UpdateNamespaceRequest,
};
use raftlock_api::semaphores::{
    CreateSemaphoreRequest, ReleaseSemaphoreRequest, SemaphoreRequest, SemaphoreResponse,
    UpdateSemaphoreRequest,
};
use raftlock_api::wait_groups::{
    CompleteJobsFromWaitGroupRequest, CreateWaitGroupRequest, UpdateWaitGroupRequest,
    WaitGroupRequest, WaitGroupResponse,
};
use raftlock_core::barriers::BarrierSpec;
use raftlock_core::command::HierOp;
use raftlock_core::semaphores::SemaphoreSpec;
use raftlock_core::wait_groups::GroupSpec;
use raftlock_core::{validate, CoreError};
use rand::distributions::{Alphanumeric, DistString};
use serde::{Deserialize, Serialize};

use super::answers::FromReply;

/// A write request that becomes one [`HierOp`] and answers with the response its reply
/// makes.
pub(super) trait Write {
    /// The response the method answers with.
    type Answer: FromReply + Serialize;

    /// A check only the edge makes (the op's `validate` is the rule; this is for the few
    /// checks that must stay out of apply, which replays old logs).
    fn check(&self) -> Result<(), CoreError> {
        Ok(())
    }

    /// The operation the request proposes.
    fn op(self) -> HierOp;
}

/// A new lease id: `ls_` + 28 random base62 characters.
fn new_lease_id() -> String {
    format!(
        "ls_{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 28)
    )
}

/// A lease request addressed to a namespace's lock leases. The two lease tables take the
/// same requests and propose different ops; the wrapper says which table a method writes.
#[derive(Deserialize)]
#[serde(transparent)]
pub(super) struct LockLeases<R>(R);

/// A lease request addressed to a namespace's semaphore leases (see [`LockLeases`]).
#[derive(Deserialize)]
#[serde(transparent)]
pub(super) struct SemaphoreLeases<R>(R);

/// `impl Write for $request { type Answer = $answer; fn op(self) -> HierOp { $op } }`, with
/// the request bound to `$r` in `$op`.
macro_rules! proposes {
    ($request:ty => $answer:ty, |$r:ident| $op:expr) => {
        impl Write for $request {
            type Answer = $answer;
            fn op(self) -> HierOp {
                let $r = self;
                $op
            }
        }
    };
}

/// The create, update and delete of a namespace's named records (semaphores, wait groups,
/// barriers): each proposes the namespace and the record's name (the request's `$name`);
/// create and update also the spec made of the listed request fields, update with its
/// `expected_version`.
macro_rules! record_writes {
    ($answer:ty, $name:ident: $create:ty => $c:ident, $update:ty => $u:ident,
     $delete:ty => $d:ident, $spec:ident { $($field:ident),+ }) => {
        proposes!($create => $answer, |r| HierOp::$c {
            namespace: r.namespace_name,
            name: r.$name,
            spec: $spec { $($field: r.$field),+ },
        });
        proposes!($update => $answer, |r| HierOp::$u {
            namespace: r.namespace_name,
            name: r.$name,
            spec: $spec { $($field: r.$field),+ },
            expected_version: r.expected_version,
        });
        proposes!($delete => EmptyResponse, |r| HierOp::$d {
            namespace: r.namespace_name,
            name: r.$name,
        });
    };
}

/// The create, refresh and revoke of one of a namespace's lease tables (`$table`: which one).
macro_rules! lease_writes {
    ($table:ident: $create:ident, $refresh:ident, $revoke:ident) => {
        proposes!($table<CreateLockLeaseRequest> => LockLeaseResponse, |r| HierOp::$create {
            namespace: r.0.namespace_name,
            lease_id: new_lease_id(),
            process_id: r.0.process_id,
            ttl_seconds: r.0.ttl_seconds,
        });
        proposes!($table<RefreshLockLeaseRequest> => LockLeaseResponse, |r| HierOp::$refresh {
            namespace: r.0.namespace_name,
            lease_id: r.0.lease_id,
            ttl_seconds: r.0.ttl_seconds,
        });
        proposes!($table<LeaseRequest> => EmptyResponse, |r| HierOp::$revoke {
            namespace: r.0.namespace_name,
            lease_id: r.0.lease_id,
        });
    };
}

// ---- namespaces, lock leases, locks ------------------------------------------------------

proposes!(CreateNamespaceRequest => NamespaceResponse, |r| HierOp::CreateNamespace {
    name: r.name,
    description: r.description,
    metadata: r.metadata,
});

impl Write for UpdateNamespaceRequest {
    type Answer = NamespaceResponse;
    /// Edge-only: apply replays logs written before the rule existed.
    fn check(&self) -> Result<(), CoreError> {
        validate::expected_version(self.expected_version)
    }
    fn op(self) -> HierOp {
        HierOp::UpdateNamespace {
            name: self.namespace_name,
            description: self.description,
            metadata: self.metadata,
            expected_version: self.expected_version,
        }
    }
}

proposes!(NamespaceRequest => EmptyResponse, |r| HierOp::DeleteNamespace {
    name: r.namespace_name,
});

lease_writes!(LockLeases: CreateLease, RefreshLease, RevokeLease);

proposes!(ReleaseLockRequest => LockResponse, |r| HierOp::ReleaseLock {
    namespace: r.namespace_name,
    lock_name: r.lock_name,
    lease_id: r.lease_id,
});

proposes!(LockRequest => EmptyResponse, |r| HierOp::DeleteLock {
    namespace: r.namespace_name,
    lock_name: r.lock_name,
});

// ---- semaphores and their leases ---------------------------------------------------------

record_writes!(SemaphoreResponse, semaphore_name:
    CreateSemaphoreRequest => CreateSemaphore, UpdateSemaphoreRequest => UpdateSemaphore,
    SemaphoreRequest => DeleteSemaphore, SemaphoreSpec { description, permits, metadata });

proposes!(ReleaseSemaphoreRequest => SemaphoreResponse, |r| HierOp::ReleaseSemaphore {
    namespace: r.namespace_name,
    name: r.semaphore_name,
    lease_id: r.lease_id,
});

lease_writes!(SemaphoreLeases: CreateSemaphoreLease, RefreshSemaphoreLease, RevokeSemaphoreLease);

// ---- wait groups -------------------------------------------------------------------------

record_writes!(WaitGroupResponse, wait_group_name:
    CreateWaitGroupRequest => CreateWaitGroup, UpdateWaitGroupRequest => UpdateWaitGroup,
    WaitGroupRequest => DeleteWaitGroup,
    GroupSpec { description, counter, expires_at, delete_after_finished_seconds, metadata });

proposes!(CompleteJobsFromWaitGroupRequest => WaitGroupResponse, |r| HierOp::CompleteJobs {
    namespace: r.namespace_name,
    name: r.wait_group_name,
    jobs: r.jobs.into_iter().map(|j| (j.job_id, j.metadata)).collect(),
});

// ---- barriers ----------------------------------------------------------------------------

record_writes!(BarrierResponse, barrier_name:
    CreateBarrierRequest => CreateBarrier, UpdateBarrierRequest => UpdateBarrier,
    BarrierRequest => DeleteBarrier,
    BarrierSpec { description, expected_processes, delete_inactive_after_seconds, metadata });

proposes!(ArriveAtBarrierRequest => ArriveAtBarrierResponse, |r| HierOp::ArriveAtBarrier {
    namespace: r.namespace_name,
    name: r.barrier_name,
    process_id: r.process_id,
    expected_generation: r.expected_generation,
    metadata: r.metadata,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_have_the_documented_shape() {
        let id = new_lease_id();
        assert_eq!(id.len(), 31);
        assert!(id.starts_with("ls_") && id[3..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, new_lease_id());
    }
}
