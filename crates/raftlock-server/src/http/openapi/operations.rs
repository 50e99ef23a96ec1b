//! The route tables of the OpenAPI document: one entry per operation, described with the
//! [`Op`] builder of the parent module.

use serde_json::Value;
use utoipa::openapi::path::{HttpMethod, Operation};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::IntoParams;

use super::{
    key_param, lock_token_param, path_param, string_schema, Dialect, Op, TAG_ADMIN, TAG_HEALTH,
    TAG_LOCKS, TAG_RPC,
};
use raftlock_api::methods::METHODS;
use raftlock_api::{admin, locks};

pub(super) fn project_lock_operations() -> Vec<(&'static str, HttpMethod, Operation)> {
    let ttl = example(&locks::TtlRequest { ttl_seconds: 60 });
    vec![
        (
            "/locks/{key}/lease",
            HttpMethod::Post,
            Op::new(
                TAG_LOCKS,
                "acquireProjectLock",
                "Acquire (or re-acquire) a lock",
                Dialect::Locks,
            )
            .params([key_param(), lock_token_param()])
            .body("TtlRequest", ttl.clone())
            .ok(
                200,
                "Acquired: the lease's expiry and fencing token.",
                "LeaseResponse",
            )
            .lock_errors(&[409])
            .build(),
        ),
        (
            "/locks/{key}/lease",
            HttpMethod::Patch,
            Op::new(
                TAG_LOCKS,
                "renewProjectLock",
                "Renew the caller's lease",
                Dialect::Locks,
            )
            .params([key_param(), lock_token_param()])
            .body("TtlRequest", ttl)
            .ok(
                200,
                "Renewed: the new expiry, the same fencing token.",
                "LeaseResponse",
            )
            .lock_errors(&[409])
            .build(),
        ),
        (
            "/locks/{key}/lease",
            HttpMethod::Delete,
            Op::new(
                TAG_LOCKS,
                "releaseProjectLock",
                "Release the caller's lease",
                Dialect::Locks,
            )
            .params([key_param(), lock_token_param()])
            .empty(204, "Released (also when the lock was absent).")
            .lock_errors(&[409])
            .build(),
        ),
        (
            "/locks/{key}",
            HttpMethod::Get,
            Op::new(
                TAG_LOCKS,
                "readProjectLock",
                "Read a lock (linearizable)",
                Dialect::Locks,
            )
            .param(key_param())
            .ok(
                200,
                "`held:false` means an acquire would succeed now.",
                "LockStatus",
            )
            .lock_errors(&[])
            .build(),
        ),
        (
            "/locks/{key}",
            HttpMethod::Delete,
            Op::new(
                TAG_LOCKS,
                "forceReleaseProjectLock",
                "Force-release a lock, whoever holds it",
                Dialect::Locks,
            )
            .param(key_param())
            .empty(204, "Released (also when absent).")
            .lock_errors(&[])
            .build(),
        ),
        (
            "/locks",
            HttpMethod::Get,
            Op::new(
                TAG_LOCKS,
                "listProjectLocks",
                "List the project's locks (extension)",
                Dialect::Locks,
            )
            .params(locks::ListLocksQuery::into_params(|| None))
            .ok(200, "One page, in key order.", "LockList")
            .lock_errors(&[])
            .build(),
        ),
    ]
}

/// An example body, from its message type (so it cannot drift from the schema).
fn example<T: serde::Serialize>(message: &T) -> Value {
    serde_json::to_value(message).expect("API messages serialize")
}

/// The example request of a method, built from its message type (so it cannot drift from
/// the schema).
fn rpc_example(method: &str) -> Value {
    use raftlock_api::hierarchy::*;
    let ns = || "billing".to_string();
    let lease = || "ls_3TqJ0e5rTzVvYpXcH1kA9bW2nLmQ".to_string();
    let lock = || "invoices/2026".to_string();
    match method {
        "CreateNamespace" => example(&CreateNamespaceRequest {
            name: ns(),
            description: "billing workers".into(),
            metadata: [("team".to_string(), "payments".to_string())].into(),
        }),
        "GetNamespace" | "DeleteNamespace" => example(&NamespaceRequest {
            namespace_name: ns(),
        }),
        "UpdateNamespace" => example(&UpdateNamespaceRequest {
            namespace_name: ns(),
            description: "billing workers".into(),
            metadata: Default::default(),
            expected_version: Some(1),
        }),
        "ListNamespaces" => example(&ListNamespacesRequest {
            limit: 100,
            pagination_token: String::new(),
        }),
        "CreateLockLease" => example(&CreateLockLeaseRequest {
            namespace_name: ns(),
            process_id: "worker-7".into(),
            ttl_seconds: 30,
        }),
        "RefreshLockLease" => example(&RefreshLockLeaseRequest {
            namespace_name: ns(),
            lease_id: lease(),
            ttl_seconds: 30,
        }),
        "GetLockLease" | "RevokeLockLease" => example(&LeaseRequest {
            namespace_name: ns(),
            lease_id: lease(),
        }),
        "ListLockLeases" => example(&ListLockLeasesRequest {
            namespace_name: ns(),
            process_id: String::new(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "AcquireLock" => example(&AcquireLockRequest {
            namespace_name: ns(),
            lock_name: lock(),
            lease_id: lease(),
            exclusive: true,
            timeout_seconds: 10,
            metadata: Default::default(),
        }),
        "ReleaseLock" => example(&ReleaseLockRequest {
            namespace_name: ns(),
            lock_name: lock(),
            lease_id: lease(),
        }),
        "GetLock" | "DeleteLock" => example(&LockRequest {
            namespace_name: ns(),
            lock_name: lock(),
        }),
        "ListLocks" => example(&ListLocksRequest {
            namespace_name: ns(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "ListWaiters" => example(&ListWaitersRequest {
            namespace_name: ns(),
        }),
        other => semaphore_example(other),
    }
}

/// The example request of a semaphore method.
fn semaphore_example(method: &str) -> Value {
    use raftlock_api::hierarchy::{
        CreateLockLeaseRequest, LeaseRequest, ListLockLeasesRequest, RefreshLockLeaseRequest,
    };
    use raftlock_api::semaphores::*;
    let ns = || "third_parties".to_string();
    let sem = || "partner_1".to_string();
    let lease = || "ls_NfKKeiPbP18NFeU3lLGrRWWgDJRB".to_string();
    match method {
        "CreateSemaphore" => example(&CreateSemaphoreRequest {
            namespace_name: ns(),
            semaphore_name: sem(),
            description: "Partner 1 API".into(),
            permits: 20,
            metadata: [("vendor".to_string(), "partner-1".to_string())].into(),
        }),
        "GetSemaphore" | "DeleteSemaphore" => example(&SemaphoreRequest {
            namespace_name: ns(),
            semaphore_name: sem(),
        }),
        "UpdateSemaphore" => example(&UpdateSemaphoreRequest {
            namespace_name: ns(),
            semaphore_name: sem(),
            description: "Partner 1 API (raised capacity)".into(),
            permits: 30,
            metadata: Default::default(),
            expected_version: Some(1),
        }),
        "ListSemaphores" => example(&ListSemaphoresRequest {
            namespace_name: ns(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "ListSemaphoreHolders" => example(&ListSemaphoreHoldersRequest {
            namespace_name: ns(),
            semaphore_name: sem(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "AcquireSemaphore" => example(&AcquireSemaphoreRequest {
            namespace_name: ns(),
            semaphore_name: sem(),
            lease_id: lease(),
            weight: 3,
            timeout_seconds: 60,
            metadata: [("host".to_string(), "worker-7".to_string())].into(),
        }),
        "ReleaseSemaphore" => example(&ReleaseSemaphoreRequest {
            namespace_name: ns(),
            semaphore_name: sem(),
            lease_id: lease(),
        }),
        "CreateSemaphoreLease" => example(&CreateLockLeaseRequest {
            namespace_name: ns(),
            process_id: "host-123/pid-4567".into(),
            ttl_seconds: 60,
        }),
        "RefreshSemaphoreLease" => example(&RefreshLockLeaseRequest {
            namespace_name: ns(),
            lease_id: lease(),
            ttl_seconds: 60,
        }),
        "GetSemaphoreLease" | "RevokeSemaphoreLease" => example(&LeaseRequest {
            namespace_name: ns(),
            lease_id: lease(),
        }),
        "ListSemaphoreLeases" => example(&ListLockLeasesRequest {
            namespace_name: ns(),
            process_id: String::new(),
            limit: 100,
            pagination_token: String::new(),
        }),
        other => coordination_example(other),
    }
}

/// The example request of a wait-group or barrier method.
fn coordination_example(method: &str) -> Value {
    use raftlock_api::barriers::*;
    use raftlock_api::wait_groups::*;
    let ns = || "pipelines".to_string();
    let group = || "batch_2026_06_12".to_string();
    let barrier = || "phase_1_complete".to_string();
    let meta = |k: &str, v: &str| [(k.to_string(), v.to_string())].into();
    match method {
        "CreateWaitGroup" => example(&CreateWaitGroupRequest {
            namespace_name: ns(),
            wait_group_name: group(),
            description: "Daily ETL batch".into(),
            counter: 100,
            expires_at: 4_102_444_800_000_000_000, // 2100-01-01: an example must stay valid
            delete_after_finished_seconds: 3600,
            metadata: meta("pipeline", "etl-daily"),
        }),
        "GetWaitGroup" | "DeleteWaitGroup" => example(&WaitGroupRequest {
            namespace_name: ns(),
            wait_group_name: group(),
        }),
        "UpdateWaitGroup" => example(&UpdateWaitGroupRequest {
            namespace_name: ns(),
            wait_group_name: group(),
            description: "Daily ETL batch (extended)".into(),
            counter: 110,
            expires_at: 4_102_531_200_000_000_000,
            delete_after_finished_seconds: 3600,
            metadata: Default::default(),
            expected_version: Some(1),
        }),
        "ListWaitGroups" => example(&ListWaitGroupsRequest {
            namespace_name: ns(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "CompleteJobsFromWaitGroup" => example(&CompleteJobsFromWaitGroupRequest {
            namespace_name: ns(),
            wait_group_name: group(),
            jobs: vec![
                JobReport {
                    job_id: "shard-0".into(),
                    metadata: meta("worker", "worker-7"),
                },
                JobReport {
                    job_id: "shard-1".into(),
                    metadata: Default::default(),
                },
            ],
        }),
        "ListWaitGroupCompletedJobs" => example(&ListWaitGroupCompletedJobsRequest {
            namespace_name: ns(),
            wait_group_name: group(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "WaitForWaitGroup" => example(&WaitForWaitGroupRequest {
            namespace_name: ns(),
            wait_group_name: group(),
            timeout_seconds: 30,
        }),
        "CreateBarrier" => example(&CreateBarrierRequest {
            namespace_name: ns(),
            barrier_name: barrier(),
            description: "End of map phase".into(),
            expected_processes: 4,
            delete_inactive_after_seconds: 3600,
            metadata: meta("phase", "map"),
        }),
        "GetBarrier" | "DeleteBarrier" => example(&BarrierRequest {
            namespace_name: ns(),
            barrier_name: barrier(),
        }),
        "UpdateBarrier" => example(&UpdateBarrierRequest {
            namespace_name: ns(),
            barrier_name: barrier(),
            description: "End of map phase".into(),
            expected_processes: 3,
            delete_inactive_after_seconds: 3600,
            metadata: Default::default(),
            expected_version: Some(1),
        }),
        "ListBarriers" => example(&ListBarriersRequest {
            namespace_name: ns(),
            limit: 100,
            pagination_token: String::new(),
        }),
        "ArriveAtBarrier" => example(&ArriveAtBarrierRequest {
            namespace_name: ns(),
            barrier_name: barrier(),
            process_id: "shard-0".into(),
            expected_generation: 1,
            metadata: meta("host", "node-1"),
        }),
        "WaitAtBarrier" => example(&WaitAtBarrierRequest {
            namespace_name: ns(),
            barrier_name: barrier(),
            expected_generation: 1,
            timeout_seconds: 30,
        }),
        "ListBarrierParticipants" => example(&ListBarrierParticipantsRequest {
            namespace_name: ns(),
            barrier_name: barrier(),
            generation: 1,
            limit: 100,
            pagination_token: String::new(),
        }),
        other => unreachable!("no example for {other}: add one beside the others"),
    }
}

pub(super) fn hierarchical_operations() -> Vec<(String, HttpMethod, Operation)> {
    METHODS
        .iter()
        .map(|m| {
            let path = format!("/v1beta/{}", m.name);
            let op = Op::new(TAG_RPC, m.name, m.summary, Dialect::Rpc)
                .body(m.request, rpc_example(m.name))
                .ok(200, "The response message.", m.response)
                .lock_errors(&[404, 409])
                .build();
            (path, HttpMethod::Post, op)
        })
        .collect()
}

pub(super) fn admin_operations() -> Vec<(&'static str, HttpMethod, Operation)> {
    let project = || {
        path_param(
            "name",
            "The project.",
            string_schema(None, Some(1), Some(64)),
        )
    };
    let admin = |id: &str, summary: &str| Op::new(TAG_ADMIN, id, summary, Dialect::Locks);
    let common = [400, 401, 403, 413, 503];
    let with = |extra: &[u16]| {
        let mut v = common.to_vec();
        v.extend_from_slice(extra);
        v.sort_unstable();
        v
    };
    vec![
        (
            "/admin/v1/projects",
            HttpMethod::Post,
            admin("createProject", "Create a project")
                .body(
                    "NewProjectRequest",
                    example(&admin::NewProjectRequest {
                        name: "acme".into(),
                        shard: None,
                    }),
                )
                .ok(201, "Created.", "Project")
                .errors(&with(&[404, 409]))
                .build(),
        ),
        (
            "/admin/v1/projects",
            HttpMethod::Get,
            admin("listProjects", "List projects")
                .ok(200, "Every project.", "ProjectList")
                .errors(&with(&[]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}",
            HttpMethod::Get,
            admin("getProject", "Get a project")
                .param(project())
                .ok(200, "The project.", "Project")
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}",
            HttpMethod::Patch,
            admin("updateProject", "Change a project's rate limits")
                .param(project())
                .body(
                    "ProjectPatch",
                    example(&admin::ProjectPatch {
                        lock_ops_per_minute: Some(1200),
                        hier_ops_per_minute: None,
                    }),
                )
                .ok(200, "The project as it is now.", "Project")
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}/keys",
            HttpMethod::Post,
            admin("createKey", "Create a key (its secret is shown once)")
                .param(project())
                .body(
                    "NewKeyRequest",
                    example(&admin::NewKeyRequest {
                        kind: admin::KeyKind::Scoped,
                        scopes: vec!["locks.manage".into()],
                    }),
                )
                .ok(
                    201,
                    "Created; `secret` is not stored and never shown again.",
                    "NewKey",
                )
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}/keys/{key_id}",
            HttpMethod::Delete,
            admin("revokeKey", "Revoke a key")
                .params([
                    project(),
                    path_param(
                        "key_id",
                        "The key's id.",
                        string_schema(None, Some(1), None),
                    ),
                ])
                .empty(204, "Revoked on every node once committed.")
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/cluster/learners",
            HttpMethod::Post,
            admin("addLearner", "Add a learner and wait for it to catch up")
                .body(
                    "NewLearnerRequest",
                    example(&admin::NewLearnerRequest {
                        node_id: 4,
                        addr: "10.0.0.4:7001".into(),
                    }),
                )
                .ok(200, "Added and caught up.", "ClusterView")
                .ok(202, "Added; still catching up.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster/voters",
            HttpMethod::Put,
            admin("changeVoters", "Replace the voter set")
                .body(
                    "VotersRequest",
                    example(&admin::VotersRequest {
                        voters: [1, 2, 3].into(),
                    }),
                )
                .ok(200, "Changed.", "ClusterView")
                .ok(202, "Accepted; still in progress.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster/leader",
            HttpMethod::Post,
            admin("moveLeader", "Hand leadership to another voter")
                .body(
                    "MoveLeaderRequest",
                    example(&admin::MoveLeaderRequest { node_id: Some(2) }),
                )
                .ok(200, "The new view.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster/nodes/{id}",
            HttpMethod::Delete,
            admin("removeNode", "Remove a node from the membership")
                .param(path_param(
                    "id",
                    "The node id.",
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0)),
                ))
                .ok(200, "Removed.", "ClusterView")
                .ok(202, "Accepted; still in progress.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/shards",
            HttpMethod::Post,
            admin("createShard", "Add a data shard on nodes of the cluster")
                .body(
                    "NewShardRequest",
                    example(&admin::NewShardRequest {
                        members: [4, 5, 6].into(),
                    }),
                )
                .ok(201, "Created; its members start their replicas.", "Shard")
                .errors(&with(&[400]))
                .build(),
        ),
        (
            "/admin/v1/shards",
            HttpMethod::Get,
            admin(
                "listShards",
                "The meta group and every data shard, as the node asked sees them",
            )
            .ok(200, "The shards, by id.", "ShardList")
            .errors(&[400, 401, 403])
            .build(),
        ),
        (
            "/admin/v1/cluster",
            HttpMethod::Get,
            admin("clusterView", "This node's view of the cluster")
                .ok(200, "The view.", "ClusterView")
                .errors(&[400, 401, 403])
                .build(),
        ),
        (
            "/admin/v1/cluster/status",
            HttpMethod::Get,
            admin("clusterStatus", "Every member's view and health")
                .ok(200, "The members as probed by this node.", "ClusterHealth")
                .errors(&[400, 401, 403])
                .build(),
        ),
        (
            "/admin/v1/snapshot",
            HttpMethod::Get,
            admin(
                "snapshot",
                "Download a backup of the whole state (leader only)",
            )
            .text(
                200,
                "The backup file (`raftlock snapshot restore` reads it).",
                "application/octet-stream",
            )
            .errors(&[400, 401, 403, 503])
            .build(),
        ),
    ]
}

pub(super) fn health_operations() -> Vec<(&'static str, HttpMethod, Operation)> {
    let op = |id: &str, summary: &str| Op::new(TAG_HEALTH, id, summary, Dialect::Locks).public();
    vec![
        (
            "/healthz",
            HttpMethod::Get,
            op("healthz", "Liveness: the process serves HTTP")
                .text(200, "`ok`.", "text/plain")
                .build(),
        ),
        (
            "/readyz",
            HttpMethod::Get,
            op("readyz", "Readiness: a member of a cluster with a leader")
                .text(200, "`ready, leader N`.", "text/plain")
                .text(503, "`not ready: no leader`.", "text/plain")
                .build(),
        ),
        (
            "/metrics",
            HttpMethod::Get,
            op("metrics", "Prometheus metrics")
                .text(200, "Prometheus text format.", "text/plain")
                .build(),
        ),
        (
            "/openapi.json",
            HttpMethod::Get,
            op("openapi", "This document")
                .any_object(200, "OpenAPI 3.1.")
                .build(),
        ),
    ]
}
