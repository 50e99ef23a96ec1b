//! One table of facts per method: everything the server, the OpenAPI document and the SDK
//! need to know about a call besides its types — whether it changes state, whether a resend
//! is safe, whether it blocks, what it addresses.
//!
//! Dispatch refuses a name that is not here; forwarding reads [`Effect`] and `blocks`;
//! idempotency reads [`Effect`]; the OpenAPI document reads the schema names and summaries.
//! A new method is one entry here, its types, its core rule and its handler arm.

/// What a call does to the replicated state, and so how it may be resent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Changes nothing (answered after a linearizable read, or by a wait on the state): safe
    /// to send again.
    Read,
    /// A write whose repeat changes nothing more and answers the same (a renewal, an acquire
    /// under the same lease or waiter id, a job completed by its id): safe to send again.
    /// Not applied under the client's request id — a client that reused one id across
    /// renewals would get the first renewal's answer while its lease is not extended.
    Repeatable,
    /// A write whose repeat could change state or answer differently (a create, a release, a
    /// delete): applied once per request id (the client's, else one the node minted), and
    /// resent only under one.
    Once,
}

/// What a call addresses inside the caller's project: what shard routing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The project as a whole (a list of its namespaces).
    Project,
    /// One namespace, named by this field of the request body.
    Namespace(&'static str),
    /// One project-lock key, named by the `{key}` path segment.
    Key,
}

/// The facts of one hierarchical method (`POST /v1beta/{name}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// The method name in the path.
    pub name: &'static str,
    /// The request message's schema name (the type of the same name in this crate).
    pub request: &'static str,
    /// The response message's schema name.
    pub response: &'static str,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
    pub effect: Effect,
    /// Waits on the server up to the body's `timeout_seconds`.
    pub blocks: bool,
    pub scope: Scope,
}

/// Every hierarchical method, in the order the reference lists them.
pub const METHODS: &[Method] = &[
    Method {
        name: "CreateNamespace",
        request: "CreateNamespaceRequest",
        response: "NamespaceResponse",
        summary: "Create a namespace (`already_exists` on a duplicate)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("name"),
    },
    Method {
        name: "GetNamespace",
        request: "NamespaceRequest",
        response: "NamespaceResponse",
        summary: "Get a namespace",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "UpdateNamespace",
        request: "UpdateNamespaceRequest",
        response: "NamespaceResponse",
        summary: "Replace a namespace's description and metadata",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "DeleteNamespace",
        request: "NamespaceRequest",
        response: "EmptyResponse",
        summary: "Delete a namespace and everything inside (absent: no error)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListNamespaces",
        request: "ListNamespacesRequest",
        response: "ListNamespacesResponse",
        summary: "List namespaces",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Project,
    },
    Method {
        name: "CreateLockLease",
        request: "CreateLockLeaseRequest",
        response: "LockLeaseResponse",
        summary: "Create a lease",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "GetLockLease",
        request: "LeaseRequest",
        response: "LockLeaseResponse",
        summary: "Get a lease",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "RefreshLockLease",
        request: "RefreshLockLeaseRequest",
        response: "LockLeaseResponse",
        summary: "Extend a lease and its locks",
        effect: Effect::Repeatable,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "RevokeLockLease",
        request: "LeaseRequest",
        response: "EmptyResponse",
        summary: "Revoke a lease, releasing its locks",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListLockLeases",
        request: "ListLockLeasesRequest",
        response: "ListLockLeasesResponse",
        summary: "List leases",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "AcquireLock",
        request: "AcquireLockRequest",
        response: "AcquireLockResponse",
        summary: "Acquire a lock, waiting up to timeout_seconds in its FIFO queue",
        effect: Effect::Repeatable,
        blocks: true,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ReleaseLock",
        request: "ReleaseLockRequest",
        response: "LockResponse",
        summary: "Release a lease's hold on a lock",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "GetLock",
        request: "LockRequest",
        response: "LockResponse",
        summary: "Get a lock",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "DeleteLock",
        request: "LockRequest",
        response: "EmptyResponse",
        summary: "Delete a lock, dropping its holders and waiters",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListLocks",
        request: "ListLocksRequest",
        response: "ListLocksResponse",
        summary: "List held locks",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListWaiters",
        request: "ListWaitersRequest",
        response: "ListWaitersResponse",
        summary: "List queued acquires (extension)",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "CreateSemaphore",
        request: "CreateSemaphoreRequest",
        response: "SemaphoreResponse",
        summary: "Create a semaphore with `permits` (`already_exists` on a duplicate)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "GetSemaphore",
        request: "SemaphoreRequest",
        response: "SemaphoreResponse",
        summary: "Get a semaphore",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "UpdateSemaphore",
        request: "UpdateSemaphoreRequest",
        response: "SemaphoreResponse",
        summary: "Replace a semaphore's description, permits and metadata (not below what is held)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "DeleteSemaphore",
        request: "SemaphoreRequest",
        response: "EmptyResponse",
        summary: "Delete a semaphore, dropping its holders and waiters (absent: no error)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListSemaphores",
        request: "ListSemaphoresRequest",
        response: "ListSemaphoresResponse",
        summary: "List semaphores",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListSemaphoreHolders",
        request: "ListSemaphoreHoldersRequest",
        response: "ListSemaphoreHoldersResponse",
        summary: "List a semaphore's holders in arrival order",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "AcquireSemaphore",
        request: "AcquireSemaphoreRequest",
        response: "AcquireSemaphoreResponse",
        summary: "Acquire `weight` permits, waiting up to timeout_seconds in the FIFO queue",
        effect: Effect::Repeatable,
        blocks: true,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ReleaseSemaphore",
        request: "ReleaseSemaphoreRequest",
        response: "SemaphoreResponse",
        summary: "Release a lease's permits",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "CreateSemaphoreLease",
        request: "CreateLockLeaseRequest",
        response: "LockLeaseResponse",
        summary: "Create a semaphore lease",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "GetSemaphoreLease",
        request: "LeaseRequest",
        response: "LockLeaseResponse",
        summary: "Get a semaphore lease",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "RefreshSemaphoreLease",
        request: "RefreshLockLeaseRequest",
        response: "LockLeaseResponse",
        summary: "Extend a semaphore lease and its holds",
        effect: Effect::Repeatable,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "RevokeSemaphoreLease",
        request: "LeaseRequest",
        response: "EmptyResponse",
        summary: "Revoke a semaphore lease, releasing its permits",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListSemaphoreLeases",
        request: "ListLockLeasesRequest",
        response: "ListLockLeasesResponse",
        summary: "List semaphore leases",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "CreateWaitGroup",
        request: "CreateWaitGroupRequest",
        response: "WaitGroupResponse",
        summary: "Create a wait group for `counter` jobs (`already_exists` on a duplicate)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "GetWaitGroup",
        request: "WaitGroupRequest",
        response: "WaitGroupResponse",
        summary: "Get a wait group",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "UpdateWaitGroup",
        request: "UpdateWaitGroupRequest",
        response: "WaitGroupResponse",
        summary: "Replace an active wait group's fields (counter not below completed_jobs)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "DeleteWaitGroup",
        request: "WaitGroupRequest",
        response: "EmptyResponse",
        summary: "Delete a wait group and its jobs (absent: no error)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListWaitGroups",
        request: "ListWaitGroupsRequest",
        response: "ListWaitGroupsResponse",
        summary: "List wait groups",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "CompleteJobsFromWaitGroup",
        request: "CompleteJobsFromWaitGroupRequest",
        response: "WaitGroupResponse",
        summary: "Report jobs complete (idempotent per job_id; never above counter)",
        effect: Effect::Repeatable,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListWaitGroupCompletedJobs",
        request: "ListWaitGroupCompletedJobsRequest",
        response: "ListWaitGroupCompletedJobsResponse",
        summary: "List a wait group's completed jobs",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "WaitForWaitGroup",
        request: "WaitForWaitGroupRequest",
        response: "WaitForWaitGroupResponse",
        summary: "Wait up to timeout_seconds for a wait group to complete or expire",
        effect: Effect::Read,
        blocks: true,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "CreateBarrier",
        request: "CreateBarrierRequest",
        response: "BarrierResponse",
        summary: "Create a barrier for `expected_processes` (`already_exists` on a duplicate)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "GetBarrier",
        request: "BarrierRequest",
        response: "BarrierResponse",
        summary: "Get a barrier",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "UpdateBarrier",
        request: "UpdateBarrierRequest",
        response: "BarrierResponse",
        summary: "Replace a barrier's fields (lowering expected_processes to the arrived trips it)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "DeleteBarrier",
        request: "BarrierRequest",
        response: "EmptyResponse",
        summary: "Delete a barrier (absent: no error)",
        effect: Effect::Once,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListBarriers",
        request: "ListBarriersRequest",
        response: "ListBarriersResponse",
        summary: "List barriers",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ArriveAtBarrier",
        request: "ArriveAtBarrierRequest",
        response: "ArriveAtBarrierResponse",
        summary: "Arrive at a barrier's generation (idempotent per process); answers at once",
        effect: Effect::Repeatable,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "WaitAtBarrier",
        request: "WaitAtBarrierRequest",
        response: "WaitAtBarrierResponse",
        summary: "Wait up to timeout_seconds for a barrier generation to trip",
        effect: Effect::Read,
        blocks: true,
        scope: Scope::Namespace("namespace_name"),
    },
    Method {
        name: "ListBarrierParticipants",
        request: "ListBarrierParticipantsRequest",
        response: "ListBarrierParticipantsResponse",
        summary: "List the processes that arrived in one generation",
        effect: Effect::Read,
        blocks: false,
        scope: Scope::Namespace("namespace_name"),
    },
];

/// The facts of the hierarchical method `name`, if the API has one.
pub fn method(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// The facts of one project-lock route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method, upper case.
    pub http: &'static str,
    /// The path template.
    pub path: &'static str,
    pub effect: Effect,
    pub scope: Scope,
}

/// Every project-lock route.
pub const LOCK_ROUTES: &[Route] = &[
    // Acquire: the lock token names the lease; re-acquiring keeps the fencing token.
    Route {
        http: "POST",
        path: "/locks/{key}/lease",
        effect: Effect::Repeatable,
        scope: Scope::Key,
    },
    // Renew.
    Route {
        http: "PATCH",
        path: "/locks/{key}/lease",
        effect: Effect::Repeatable,
        scope: Scope::Key,
    },
    // Release: a repeat after another owner took the lock would answer "ownership lost".
    Route {
        http: "DELETE",
        path: "/locks/{key}/lease",
        effect: Effect::Once,
        scope: Scope::Key,
    },
    Route {
        http: "GET",
        path: "/locks/{key}",
        effect: Effect::Read,
        scope: Scope::Key,
    },
    // Force release: a repeat after a waiting client took the key would release its lock.
    Route {
        http: "DELETE",
        path: "/locks/{key}",
        effect: Effect::Once,
        scope: Scope::Key,
    },
    Route {
        http: "GET",
        path: "/locks",
        effect: Effect::Read,
        scope: Scope::Project,
    },
];

/// The facts of the project-lock route `http path` (a concrete path, `/locks/a/lease`).
pub fn lock_route(http: &str, path: &str) -> Option<&'static Route> {
    let rest = path.strip_prefix("/locks")?;
    let template = match rest {
        "" | "/" => "/locks",
        _ if rest.ends_with("/lease") && rest.len() > "/lease".len() + 1 => "/locks/{key}/lease",
        _ => "/locks/{key}",
    };
    LOCK_ROUTES
        .iter()
        .find(|r| r.http.eq_ignore_ascii_case(http) && r.path == template)
}

/// The facts of a lock call by HTTP method and path: a project-lock route or a hierarchical
/// method. `None` for anything else (admin, health).
pub fn effect_of(http: &str, path: &str) -> Option<Effect> {
    if let Some(name) = path.strip_prefix("/v1beta/") {
        return method(name).map(|m| m.effect);
    }
    lock_route(http, path).map(|r| r.effect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_blocking_methods_wait_on_a_timeout() {
        for (i, m) in METHODS.iter().enumerate() {
            assert!(
                METHODS[..i].iter().all(|other| other.name != m.name),
                "{} twice",
                m.name
            );
            assert_eq!(method(m.name), Some(m));
        }
        let blocking: Vec<&str> = METHODS
            .iter()
            .filter(|m| m.blocks)
            .map(|m| m.name)
            .collect();
        assert_eq!(
            blocking,
            [
                "AcquireLock",
                "AcquireSemaphore",
                "WaitForWaitGroup",
                "WaitAtBarrier"
            ]
        );
        assert_eq!(method("Nope"), None);
    }

    #[test]
    fn project_lock_paths_find_their_route() {
        let effect = |http, path| lock_route(http, path).map(|r| r.effect);
        assert_eq!(effect("POST", "/locks/a/lease"), Some(Effect::Repeatable));
        assert_eq!(effect("PATCH", "/locks/a/lease"), Some(Effect::Repeatable));
        assert_eq!(effect("DELETE", "/locks/a/lease"), Some(Effect::Once));
        assert_eq!(effect("DELETE", "/locks/a"), Some(Effect::Once));
        assert_eq!(effect("GET", "/locks/a"), Some(Effect::Read));
        assert_eq!(effect("GET", "/locks"), Some(Effect::Read));
        assert_eq!(effect("PUT", "/locks/a"), None);
        assert_eq!(effect_of("POST", "/v1beta/ReleaseLock"), Some(Effect::Once));
        assert_eq!(effect_of("POST", "/admin/v1/projects"), None);
    }
}
