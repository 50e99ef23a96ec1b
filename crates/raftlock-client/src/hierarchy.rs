//! hierarchical locks: typed calls for every `POST /v1beta/{Method}`.
//!
//! Timestamps are int64 nanoseconds since the Unix epoch, durations whole seconds, as on the
//! wire. A non-acquired `AcquireLock` is a normal answer ([`AcquireOutcome::Unavailable`],
//! [`AcquireOutcome::TimedOut`]), not an error.

use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::Result;
use crate::transport::{Call, Client, Retry};

pub use raftlock_api::hierarchy::{
    AcquireLockRequest, AcquireLockResponse, AcquireOutcome, ContentionReason, Lock, LockHolder,
    LockLease, LockState, Namespace, UpdateNamespaceRequest,
};
use raftlock_api::hierarchy::{
    CreateLockLeaseRequest, CreateNamespaceRequest, LeaseRequest, ListLockLeasesRequest,
    ListLocksRequest, ListNamespacesRequest, LockRequest, NamespaceRequest,
    RefreshLockLeaseRequest, ReleaseLockRequest,
};
pub use raftlock_api::{Metadata, Nanos};

/// Paging of a list call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest {
    /// 1–100; 0 means 100.
    pub limit: u32,
    /// Opaque token from a previous page; empty for the first page.
    pub pagination_token: String,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Token of the next page; empty on the last page.
    pub next_pagination_token: String,
    /// Token of the previous page; empty on the first page.
    pub previous_pagination_token: String,
}

fn page<T: DeserializeOwned>(mut v: Value, field: &str) -> Result<Page<T>, serde_json::Error> {
    let items = serde_json::from_value(v.get_mut(field).map(Value::take).unwrap_or(json!([])))?;
    let token = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    Ok(Page {
        items,
        next_pagination_token: token(&v, "next_pagination_token"),
        previous_pagination_token: token(&v, "previous_pagination_token"),
    })
}

impl Client {
    pub(crate) async fn rpc(
        &self,
        method: &str,
        body: &impl Serialize,
        retry: Retry,
        wait: Duration,
    ) -> Result<Value> {
        let call = Call::new(Method::POST, format!("/v1beta/{method}"))
            .message(body)
            .retry(retry)
            .extra_timeout(wait);
        self.send(call).await?.decode()
    }

    pub(crate) async fn rpc_field<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &impl Serialize,
        retry: Retry,
        field: &str,
    ) -> Result<T> {
        let mut v = self.rpc(method, body, retry, Duration::ZERO).await?;
        let inner = v.get_mut(field).map(Value::take).unwrap_or(Value::Null);
        serde_json::from_value(inner).map_err(|e| self.protocol(method, e))
    }

    pub(crate) async fn rpc_page<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &impl Serialize,
        field: &str,
    ) -> Result<Page<T>> {
        let v = self
            .rpc(method, body, Retry::Idempotent, Duration::ZERO)
            .await?;
        page(v, field).map_err(|e| self.protocol(method, e))
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
        self.rpc_field("CreateNamespace", &body, Retry::Idempotent, "namespace")
            .await
    }

    /// `GetNamespace`.
    pub async fn get_namespace(&self, name: &str) -> Result<Namespace> {
        let body = NamespaceRequest {
            namespace_name: name.to_string(),
        };
        self.rpc_field("GetNamespace", &body, Retry::Idempotent, "namespace")
            .await
    }

    /// `UpdateNamespace`: `expected_version` is required (the version read last); absent or
    /// mismatching → `invalid_argument`, nothing changes.
    pub async fn update_namespace(&self, req: &UpdateNamespaceRequest) -> Result<Namespace> {
        let body = req;
        self.rpc_field("UpdateNamespace", &body, Retry::Idempotent, "namespace")
            .await
    }

    /// `DeleteNamespace`: removes it and everything inside (absent → `Ok`).
    pub async fn delete_namespace(&self, name: &str) -> Result<()> {
        let body = NamespaceRequest {
            namespace_name: name.to_string(),
        };
        self.rpc("DeleteNamespace", &body, Retry::Idempotent, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `ListNamespaces`.
    pub async fn list_namespaces(&self, page: &PageRequest) -> Result<Page<Namespace>> {
        let body = ListNamespacesRequest {
            limit: page.limit,
            pagination_token: page.pagination_token.clone(),
        };
        self.rpc_page("ListNamespaces", &body, "namespaces").await
    }

    /// `CreateLockLease`: a new lease for `ttl` (1–300 s).
    pub async fn create_lease(
        &self,
        namespace: &str,
        process_id: &str,
        ttl: Duration,
    ) -> Result<LockLease> {
        let body = CreateLockLeaseRequest {
            namespace_name: namespace.to_string(),
            process_id: process_id.to_string(),
            ttl_seconds: ttl.as_secs(),
        };
        self.rpc_field("CreateLockLease", &body, Retry::Idempotent, "lease")
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
        let body = RefreshLockLeaseRequest {
            namespace_name: namespace.to_string(),
            lease_id: lease_id.to_string(),
            ttl_seconds: ttl.as_secs(),
        };
        self.rpc_field("RefreshLockLease", &body, Retry::Idempotent, "lease")
            .await
    }

    /// `RevokeLockLease`: releases everything the lease holds and deletes it.
    pub async fn revoke_lease(&self, namespace: &str, lease_id: &str) -> Result<()> {
        let body = LeaseRequest {
            namespace_name: namespace.to_string(),
            lease_id: lease_id.to_string(),
        };
        self.rpc("RevokeLockLease", &body, Retry::Idempotent, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `GetLockLease` (`not_found` when absent or expired).
    pub async fn get_lease(&self, namespace: &str, lease_id: &str) -> Result<LockLease> {
        let body = LeaseRequest {
            namespace_name: namespace.to_string(),
            lease_id: lease_id.to_string(),
        };
        self.rpc_field("GetLockLease", &body, Retry::Idempotent, "lease")
            .await
    }

    /// `ListLockLeases`, optionally only those of one `process_id`.
    pub async fn list_leases(
        &self,
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
        self.rpc_page("ListLockLeases", &body, "leases").await
    }

    /// `AcquireLock`. Waits on the server up to `timeout_seconds`; contention is reported
    /// in the answer's `outcome`, not as an error.
    pub async fn acquire_lock(&self, req: &AcquireLockRequest) -> Result<AcquireLockResponse> {
        let wait = Duration::from_secs(req.timeout_seconds);
        let v = self.rpc("AcquireLock", req, Retry::Once, wait).await?;
        serde_json::from_value(v).map_err(|e| self.protocol("AcquireLock", e))
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
        self.rpc_field("ReleaseLock", &body, Retry::Idempotent, "lock")
            .await
    }

    /// `GetLock` (a never-acquired name is `Unlocked` with zero times).
    pub async fn get_lock(&self, namespace: &str, lock_name: &str) -> Result<Lock> {
        let body = LockRequest {
            namespace_name: namespace.to_string(),
            lock_name: lock_name.to_string(),
        };
        self.rpc_field("GetLock", &body, Retry::Idempotent, "lock")
            .await
    }

    /// `DeleteLock`: drops all holders (absent → `Ok`).
    pub async fn delete_lock(&self, namespace: &str, lock_name: &str) -> Result<()> {
        let body = LockRequest {
            namespace_name: namespace.to_string(),
            lock_name: lock_name.to_string(),
        };
        self.rpc("DeleteLock", &body, Retry::Idempotent, Duration::ZERO)
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
        self.rpc_page("ListLocks", &body, "locks").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let p: Page<Namespace> = page(v, "namespaces").unwrap();
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.next_pagination_token, "t");
    }
}
