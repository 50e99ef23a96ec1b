//! hierarchical locks: typed calls for every `POST /v1beta/{Method}`.
//!
//! Timestamps are int64 nanoseconds since the Unix epoch, durations whole seconds, as on the
//! wire. A non-acquired `AcquireLock` is a normal answer ([`AcquireOutcome::Unavailable`],
//! [`AcquireOutcome::TimedOut`]), not an error.

use raftlock_api::hierarchy::{
    ListLocksResponse, ListNamespacesResponse, LockResponse, NamespaceResponse,
};
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::leases::LOCK_LEASES;
use crate::transport::{Call, Client, Retry};
use raftlock_api::methods::Effect;
use raftlock_api::Listing;

pub use raftlock_api::hierarchy::{
    AcquireLockRequest, AcquireLockResponse, AcquireOutcome, ContentionReason, Lock, LockHolder,
    LockLease, LockState, Namespace, UpdateNamespaceRequest,
};
use raftlock_api::hierarchy::{
    CreateNamespaceRequest, ListLocksRequest, ListNamespacesRequest, LockRequest, NamespaceRequest,
    ReleaseLockRequest,
};
pub use raftlock_api::{Metadata, Nanos};

pub use crate::paging::{Page, PageRequest};

/// How a call of hierarchical `method` may be repeated, from the method registry: a blocking
/// acquire once (it waits on the server; its repeat is the same wait under the same request
/// id), everything else until the failover budget is spent (the SDK sends one request id per
/// call, so a once-only write is applied once however often it is sent).
fn retry_of(method: &str) -> Retry {
    match raftlock_api::methods::method(method) {
        Some(m) if m.blocks && m.effect != Effect::Read => Retry::Once,
        _ => Retry::Idempotent,
    }
}

impl Client {
    /// Calls hierarchical `method` (waiting on the server up to `wait`), answering its JSON.
    pub(crate) async fn rpc(
        &self,
        method: &str,
        body: &impl Serialize,
        wait: Duration,
    ) -> Result<Value> {
        let call = Call::new(Method::POST, format!("/v1beta/{method}"))
            .message(body)
            .retry(retry_of(method))
            .extra_timeout(wait);
        self.send(call).await?.decode()
    }

    /// Calls `method` and decodes its response message.
    pub(crate) async fn rpc_as<R: DeserializeOwned>(
        &self,
        method: &str,
        body: &impl Serialize,
        wait: Duration,
    ) -> Result<R> {
        let v = self.rpc(method, body, wait).await?;
        serde_json::from_value(v).map_err(|e| self.protocol(method, e))
    }

    /// Calls `method` and answers the part `pick` takes of its response message.
    pub(crate) async fn rpc_field<R: DeserializeOwned, T>(
        &self,
        method: &str,
        body: &impl Serialize,
        pick: impl FnOnce(R) -> T,
    ) -> Result<T> {
        Ok(pick(self.rpc_as(method, body, Duration::ZERO).await?))
    }

    /// Calls list `method` and answers its page.
    pub(crate) async fn rpc_page<R: Listing + DeserializeOwned>(
        &self,
        method: &str,
        body: &impl Serialize,
    ) -> Result<Page<R::Item>> {
        Ok(Page::of(
            self.rpc_as::<R>(method, body, Duration::ZERO).await?,
        ))
    }

    pub(crate) fn protocol(&self, method: &str, e: serde_json::Error) -> crate::Error {
        crate::Error::Protocol {
            endpoint: self.endpoints().join(","),
            message: format!("{method}: {e}"),
        }
    }

    /// `CreateNamespace` (`already_exists` on a duplicate).
    pub async fn create_namespace(
        &self,
        name: &str,
        description: &str,
        metadata: Metadata,
    ) -> Result<Namespace> {
        let body = CreateNamespaceRequest {
            name: name.to_string(),
            description: description.to_string(),
            metadata,
        };
        self.rpc_field("CreateNamespace", &body, |r: NamespaceResponse| r.namespace)
            .await
    }

    /// `GetNamespace`.
    pub async fn get_namespace(&self, name: &str) -> Result<Namespace> {
        let body = NamespaceRequest {
            namespace_name: name.to_string(),
        };
        self.rpc_field("GetNamespace", &body, |r: NamespaceResponse| r.namespace)
            .await
    }

    /// `UpdateNamespace`: `expected_version` is required (the version read last); absent →
    /// `invalid_argument`, not the current version → `failed_precondition`; nothing changes.
    pub async fn update_namespace(&self, req: &UpdateNamespaceRequest) -> Result<Namespace> {
        let body = req;
        self.rpc_field("UpdateNamespace", &body, |r: NamespaceResponse| r.namespace)
            .await
    }

    /// `DeleteNamespace`: removes it and everything inside (absent → `Ok`).
    pub async fn delete_namespace(&self, name: &str) -> Result<()> {
        let body = NamespaceRequest {
            namespace_name: name.to_string(),
        };
        self.rpc("DeleteNamespace", &body, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `ListNamespaces`.
    pub async fn list_namespaces(&self, page: &PageRequest) -> Result<Page<Namespace>> {
        let body = ListNamespacesRequest {
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListNamespacesResponse>("ListNamespaces", &body)
            .await
    }

    /// `CreateLockLease`: a new lease for `ttl` (1–300 s).
    pub async fn create_lease(
        &self,
        namespace: &str,
        process_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        self.lease_create(LOCK_LEASES, namespace, process_id, ttl)
            .await
    }

    /// `RefreshLockLease`: expiry of the lease and its locks becomes now + `ttl`
    /// (`not_found` when the lease expired — its locks are then released).
    pub async fn refresh_lease(
        &self,
        namespace: &str,
        lease_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        self.lease_refresh(LOCK_LEASES, namespace, lease_id, ttl)
            .await
    }

    /// `RevokeLockLease`: releases everything the lease holds and deletes it.
    pub async fn revoke_lease(&self, namespace: &str, lease_id: &str) -> Result<()> {
        self.lease_revoke(LOCK_LEASES, namespace, lease_id).await
    }

    /// `GetLockLease` (`not_found` when absent or expired).
    pub async fn get_lease(&self, namespace: &str, lease_id: &str) -> Result<LockLease> {
        self.lease_get(LOCK_LEASES, namespace, lease_id).await
    }

    /// `ListLockLeases`, optionally only those of one `process_id`.
    pub async fn list_leases(
        &self,
        namespace: &str,
        process_id: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<LockLease>> {
        self.lease_list(LOCK_LEASES, namespace, process_id, page)
            .await
    }

    /// `AcquireLock`. Waits on the server up to `timeout_seconds`; contention is reported
    /// in the answer's `outcome`, not as an error.
    pub async fn acquire_lock(&self, req: &AcquireLockRequest) -> Result<AcquireLockResponse> {
        let wait = Duration::from_secs(req.timeout_seconds);
        self.rpc_as("AcquireLock", req, wait).await
    }

    /// `ReleaseLock` (releasing what the lease does not hold is a no-op; a lease that does
    /// not exist or expired is `not_found`).
    pub async fn release_lock(
        &self,
        namespace: &str,
        lock_name: &str,
        lease_id: &str,
    ) -> Result<Lock> {
        let body = ReleaseLockRequest {
            namespace_name: namespace.to_string(),
            lock_name: lock_name.to_string(),
            lease_id: lease_id.to_string(),
        };
        self.rpc_field("ReleaseLock", &body, |r: LockResponse| r.lock)
            .await
    }

    /// `GetLock` (a never-acquired name is `Unlocked` with zero times).
    pub async fn get_lock(&self, namespace: &str, lock_name: &str) -> Result<Lock> {
        let body = LockRequest {
            namespace_name: namespace.to_string(),
            lock_name: lock_name.to_string(),
        };
        self.rpc_field("GetLock", &body, |r: LockResponse| r.lock)
            .await
    }

    /// `DeleteLock`: drops all holders (absent → `Ok`).
    pub async fn delete_lock(&self, namespace: &str, lock_name: &str) -> Result<()> {
        let body = LockRequest {
            namespace_name: namespace.to_string(),
            lock_name: lock_name.to_string(),
        };
        self.rpc("DeleteLock", &body, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `ListLocks` (held locks only).
    pub async fn list_locks(&self, namespace: &str, page: &PageRequest) -> Result<Page<Lock>> {
        let body = ListLocksRequest {
            namespace_name: namespace.to_string(),
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page::<ListLocksResponse>("ListLocks", &body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn acquire_answers_decode() {
        let v = json!({
            "lock": {"name":"a/b","state":"LOCK_STATE_SHARED_LOCKED","locked_at":1,"last_activity_at":2,
                     "lock_holders":[{"lease_id":"ls_x","locked_at":1,"metadata":{}}]},
            "outcome":"ACQUIRE_OUTCOME_TIMED_OUT",
            "reason":"CONTENTION_REASON_ANCESTOR",
            "blocking_locks":[]
        });
        let r: AcquireLockResponse = serde_json::from_value(v).unwrap();
        assert!(!r.acquired());
        assert_eq!(r.reason, ContentionReason::Ancestor);
        assert_eq!(r.lock.state, LockState::SharedLocked);
    }

    #[test]
    fn pages_decode() {
        let v = json!({"namespaces":[{"name":"n","description":"","metadata":{},"version":1,"created_at":5,"updated_at":5}],
                       "next_pagination_token":"t","previous_pagination_token":""});
        let r: raftlock_api::hierarchy::ListNamespacesResponse = serde_json::from_value(v).unwrap();
        let p: Page<Namespace> = Page::of(r);
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.next_pagination_token, "t");
    }

    #[test]
    fn only_blocking_acquires_are_sent_once() {
        assert_eq!(retry_of("AcquireLock"), Retry::Once);
        assert_eq!(retry_of("AcquireSemaphore"), Retry::Once);
        assert_eq!(retry_of("WaitAtBarrier"), Retry::Idempotent);
        assert_eq!(retry_of("ReleaseLock"), Retry::Idempotent);
    }
}
