//! Semaphores: typed calls for the semaphore and semaphore-lease methods of
//! `POST /v1beta/{Method}`. A non-acquired `AcquireSemaphore` is a normal answer (its
//! `outcome`), not an error; a granted one carries the hold's fencing token.

use raftlock_api::semaphores::{
    ListSemaphoreHoldersResponse, ListSemaphoresResponse, SemaphoreResponse,
};
use std::time::Duration;

pub use raftlock_api::semaphores::{
    AcquireSemaphoreRequest, AcquireSemaphoreResponse, Semaphore, SemaphoreHolder,
    UpdateSemaphoreRequest,
};
use raftlock_api::semaphores::{
    CreateSemaphoreRequest, ListSemaphoreHoldersRequest, ListSemaphoresRequest,
    ReleaseSemaphoreRequest, SemaphoreRequest,
};

use crate::error::Result;
use crate::hierarchy::{LockLease, Metadata, Page, PageRequest};
use crate::leases::SEMAPHORE_LEASES;
use crate::transport::Client;

fn semaphore_request(namespace: &str, name: &str) -> SemaphoreRequest {
    SemaphoreRequest {
        namespace_name: namespace.to_string(),
        semaphore_name: name.to_string(),
    }
}

impl Client {
    /// `CreateSemaphore` with `permits` (≥ 1; `already_exists` on a duplicate).
    pub async fn create_semaphore(
        &self,
        namespace: &str,
        name: &str,
        description: &str,
        permits: u64,
        metadata: Metadata,
    ) -> Result<Semaphore> {
        let body = CreateSemaphoreRequest {
            namespace_name: namespace.to_string(),
            semaphore_name: name.to_string(),
            description: description.to_string(),
            permits,
            metadata,
        };
        self.rpc_field("CreateSemaphore", &body, |r: SemaphoreResponse| r.semaphore)
            .await
    }

    /// `GetSemaphore`.
    pub async fn get_semaphore(&self, namespace: &str, name: &str) -> Result<Semaphore> {
        let body = semaphore_request(namespace, name);
        self.rpc_field("GetSemaphore", &body, |r: SemaphoreResponse| r.semaphore)
            .await
    }

    /// `UpdateSemaphore`: a full replacement, applied only if `expected_version` is current;
    /// `permits` may not go below what is held.
    pub async fn update_semaphore(&self, req: &UpdateSemaphoreRequest) -> Result<Semaphore> {
        self.rpc_field("UpdateSemaphore", req, |r: SemaphoreResponse| r.semaphore)
            .await
    }

    /// `DeleteSemaphore`: drops its holders and waiters (absent → `Ok`).
    pub async fn delete_semaphore(&self, namespace: &str, name: &str) -> Result<()> {
        let body = semaphore_request(namespace, name);
        self.rpc("DeleteSemaphore", &body, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `ListSemaphores`, by name.
    pub async fn list_semaphores(
        &self,
        namespace: &str,
        page: &PageRequest,
    ) -> Result<Page<Semaphore>> {
        let body = ListSemaphoresRequest {
            namespace_name: namespace.to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListSemaphoresResponse>("ListSemaphores", &body)
            .await
    }

    /// `ListSemaphoreHolders`, in the order the holds were first granted.
    pub async fn list_semaphore_holders(
        &self,
        namespace: &str,
        name: &str,
        page: &PageRequest,
    ) -> Result<Page<SemaphoreHolder>> {
        let body = ListSemaphoreHoldersRequest {
            namespace_name: namespace.to_string(),
            semaphore_name: name.to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListSemaphoreHoldersResponse>("ListSemaphoreHolders", &body)
            .await
    }

    /// `AcquireSemaphore`: all-or-none; waits on the server up to `timeout_seconds` in the
    /// semaphore's FIFO queue. Retried once after an uncertain failure (a re-acquire of the
    /// same weight under the same lease is idempotent).
    pub async fn acquire_semaphore(
        &self,
        req: &AcquireSemaphoreRequest,
    ) -> Result<AcquireSemaphoreResponse> {
        let wait = Duration::from_secs(req.timeout_seconds);
        self.rpc_as("AcquireSemaphore", req, wait).await
    }

    /// `ReleaseSemaphore` (releasing what the lease does not hold changes nothing; a lease
    /// that does not exist or expired is `not_found`).
    pub async fn release_semaphore(
        &self,
        namespace: &str,
        name: &str,
        lease_id: &str,
    ) -> Result<Semaphore> {
        let body = ReleaseSemaphoreRequest {
            namespace_name: namespace.to_string(),
            semaphore_name: name.to_string(),
            lease_id: lease_id.to_string(),
        };
        self.rpc_field("ReleaseSemaphore", &body, |r: SemaphoreResponse| {
            r.semaphore
        })
        .await
    }

    /// `CreateSemaphoreLease`: a new semaphore lease for `ttl` (1–300 s).
    pub async fn create_semaphore_lease(
        &self,
        namespace: &str,
        process_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        self.lease_create(SEMAPHORE_LEASES, namespace, process_id, ttl)
            .await
    }

    /// `GetSemaphoreLease` (`not_found` when absent or expired).
    pub async fn get_semaphore_lease(&self, namespace: &str, lease_id: &str) -> Result<LockLease> {
        self.lease_get(SEMAPHORE_LEASES, namespace, lease_id).await
    }

    /// `RefreshSemaphoreLease`: the lease and its holds expire at now + `ttl`.
    pub async fn refresh_semaphore_lease(
        &self,
        namespace: &str,
        lease_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        self.lease_refresh(SEMAPHORE_LEASES, namespace, lease_id, ttl)
            .await
    }

    /// `RevokeSemaphoreLease`: releases every permit the lease holds and deletes it.
    pub async fn revoke_semaphore_lease(&self, namespace: &str, lease_id: &str) -> Result<()> {
        self.lease_revoke(SEMAPHORE_LEASES, namespace, lease_id)
            .await
    }

    /// `ListSemaphoreLeases`, optionally only those of one `process_id`.
    pub async fn list_semaphore_leases(
        &self,
        namespace: &str,
        process_id: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<LockLease>> {
        self.lease_list(SEMAPHORE_LEASES, namespace, process_id, page)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn acquire_answers_decode() {
        let v = json!({
            "semaphore": {"name":"p","description":"","permits":20,"active_holds":20,"active_holders_count":7,
                          "version":1,"created_at":1,"updated_at":1,"last_activity_at":2,"metadata":{}},
            "outcome":"ACQUIRE_OUTCOME_TIMED_OUT",
            "fencing_token": 0
        });
        let r: AcquireSemaphoreResponse = serde_json::from_value(v).unwrap();
        assert!(!r.acquired());
        assert_eq!(r.semaphore.active_holders_count, 7);
    }
}
