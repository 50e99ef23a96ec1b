//! Server-side leases. The lock API's and the semaphore API's leases are the same messages
//! under method names of their own (`CreateLockLease` / `CreateSemaphoreLease`, …), so their
//! calls are written once here, named by a [`LeaseMethods`] ([`LOCK_LEASES`] or
//! [`SEMAPHORE_LEASES`]). The typed wrappers (`create_lease`, `create_semaphore_lease`, …) call
//! these; a caller that handles both kinds alike (the CLI) calls them directly.

use std::time::Duration;

use raftlock_api::hierarchy::{
    CreateLockLeaseRequest, LeaseRequest, ListLockLeasesRequest, ListLockLeasesResponse,
    LockLeaseResponse, RefreshLockLeaseRequest,
};

use crate::error::Result;
use crate::paging::{Page, PageRequest};
use crate::transport::Client;
use raftlock_api::hierarchy::LockLease;

/// The method names of one kind of lease.
#[derive(Debug, Clone, Copy)]
pub struct LeaseMethods {
    create: &'static str,
    get: &'static str,
    refresh: &'static str,
    revoke: &'static str,
    list: &'static str,
}

/// The leases that hold hierarchical locks.
pub const LOCK_LEASES: LeaseMethods = LeaseMethods {
    create: "CreateLockLease",
    get: "GetLockLease",
    refresh: "RefreshLockLease",
    revoke: "RevokeLockLease",
    list: "ListLockLeases",
};

/// The leases that hold semaphore permits.
pub const SEMAPHORE_LEASES: LeaseMethods = LeaseMethods {
    create: "CreateSemaphoreLease",
    get: "GetSemaphoreLease",
    refresh: "RefreshSemaphoreLease",
    revoke: "RevokeSemaphoreLease",
    list: "ListSemaphoreLeases",
};

fn lease_request(namespace: &str, lease_id: &str) -> LeaseRequest {
    LeaseRequest {
        namespace_name: namespace.to_string(),
        lease_id: lease_id.to_string(),
    }
}

impl Client {
    /// `Create…Lease`: a new lease for `ttl` (1–300 s).
    pub async fn lease_create(
        &self,
        kind: LeaseMethods,
        namespace: &str,
        process_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        let body = CreateLockLeaseRequest {
            namespace_name: namespace.to_string(),
            process_id: process_id.to_string(),
            ttl_seconds: ttl.as_secs(),
        };
        self.rpc_field(kind.create, &body, |r: LockLeaseResponse| r.lease)
            .await
    }

    /// `Get…Lease` (`not_found` when absent or expired).
    pub async fn lease_get(
        &self,
        kind: LeaseMethods,
        namespace: &str,
        lease_id: &str,
    ) -> Result<LockLease> {
        let body = lease_request(namespace, lease_id);
        self.rpc_field(kind.get, &body, |r: LockLeaseResponse| r.lease)
            .await
    }

    /// `Refresh…Lease`: the lease and what it holds expire at now + `ttl`.
    pub async fn lease_refresh(
        &self,
        kind: LeaseMethods,
        namespace: &str,
        lease_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        let body = RefreshLockLeaseRequest {
            namespace_name: namespace.to_string(),
            lease_id: lease_id.to_string(),
            ttl_seconds: ttl.as_secs(),
        };
        self.rpc_field(kind.refresh, &body, |r: LockLeaseResponse| r.lease)
            .await
    }

    /// `Revoke…Lease`: releases everything the lease holds and deletes it.
    pub async fn lease_revoke(
        &self,
        kind: LeaseMethods,
        namespace: &str,
        lease_id: &str,
    ) -> Result<()> {
        let body = lease_request(namespace, lease_id);
        self.rpc(kind.revoke, &body, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `List…Leases`, optionally only those of one `process_id`.
    pub async fn lease_list(
        &self,
        kind: LeaseMethods,
        namespace: &str,
        process_id: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<LockLease>> {
        let body = ListLockLeasesRequest {
            namespace_name: namespace.to_string(),
            process_id: process_id.unwrap_or("").to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListLockLeasesResponse>(kind.list, &body)
            .await
    }
}
