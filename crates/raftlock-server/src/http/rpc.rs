//! §5 hierarchical-lock RPCs: `POST /v1beta/{Method}` with the request message as JSON body.
//!
//! Handlers run on the leader. Writes are proposed through the log; reads are linearizable.
//! A blocking `AcquireLock` waits on the server: after every apply it re-checks compatibility
//! against the applied state and proposes the acquire again only when it could succeed, so
//! the call returns as soon as the lock is free rather than on a polling tick.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use raftlock_core::command::HierOp;
use raftlock_core::hierarchy::{AcquireOutcome, AcquireReply};
use raftlock_core::{validate, CoreError, Op, Reply};
use rand::distributions::{Alphanumeric, DistString};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::errors::{ApiError, Dialect};
use super::{auth, body};
use crate::node::SharedNode;

const D: Dialect = Dialect::Rpc;

pub fn routes() -> Router<SharedNode> {
    Router::new().route("/v1beta/{method}", post(dispatch))
}

type Meta = BTreeMap<String, String>;

#[derive(Deserialize)]
struct NamespaceReq {
    #[serde(alias = "namespace_name")]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    expected_version: Option<u64>,
}

#[derive(Deserialize)]
struct ListReq {
    #[serde(default)]
    namespace_name: String,
    #[serde(default)]
    limit: u32,
    #[serde(default)]
    pagination_token: String,
    #[serde(default)]
    process_id: String,
}

#[derive(Deserialize)]
struct LeaseReq {
    namespace_name: String,
    #[serde(default)]
    lease_id: String,
    #[serde(default)]
    process_id: String,
    #[serde(default)]
    ttl_seconds: u64,
}

#[derive(Deserialize)]
struct LockReq {
    namespace_name: String,
    lock_name: String,
    #[serde(default)]
    lease_id: String,
    #[serde(default)]
    exclusive: bool,
    #[serde(default)]
    timeout_seconds: u64,
    #[serde(default)]
    metadata: Meta,
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    body::json(bytes, D)
}

fn core(e: CoreError) -> ApiError {
    ApiError::from_core(D, e)
}

/// A new lease id: `ls_` + 28 random base62 characters.
fn new_lease_id() -> String {
    format!(
        "ls_{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 28)
    )
}

async fn dispatch(
    State(node): State<SharedNode>,
    Path(method): Path<String>,
    headers: HeaderMap,
    b: Body,
) -> Result<Response, ApiError> {
    let project = auth::lock_caller(&node, &headers, D)?;
    let (_, limit) = node.read_local(|sm, _| sm.rate_limits(&project));
    if let Err(retry_after) = node.admit(&format!("{project}#hier"), limit) {
        metrics::counter!("raftlock_rate_limited_total", "api" => "hierarchy").increment(1);
        return Err(ApiError::rate_limited(D, retry_after));
    }
    let bytes = body::read(b, D).await?;
    let call = Call { node, project };
    let answer = match method.as_str() {
        "CreateNamespace" => call.create_namespace(parse(&bytes)?).await?,
        "GetNamespace" => call.get_namespace(parse(&bytes)?).await?,
        "UpdateNamespace" => call.update_namespace(parse(&bytes)?).await?,
        "DeleteNamespace" => call.delete_namespace(parse(&bytes)?).await?,
        "ListNamespaces" => call.list_namespaces(parse(&bytes)?).await?,
        "CreateLockLease" => call.create_lease(parse(&bytes)?).await?,
        "RefreshLockLease" => call.refresh_lease(parse(&bytes)?).await?,
        "RevokeLockLease" => call.revoke_lease(parse(&bytes)?).await?,
        "GetLockLease" => call.get_lease(parse(&bytes)?).await?,
        "ListLockLeases" => call.list_leases(parse(&bytes)?).await?,
        "AcquireLock" => call.acquire(parse(&bytes)?).await?,
        "ReleaseLock" => call.release(parse(&bytes)?).await?,
        "GetLock" => call.get_lock(parse(&bytes)?).await?,
        "DeleteLock" => call.delete_lock(parse(&bytes)?).await?,
        "ListLocks" => call.list_locks(parse(&bytes)?).await?,
        other => {
            return Err(ApiError::new(
                D,
                StatusCode::NOT_FOUND,
                format!("unknown method {other:?}"),
            ))
        }
    };
    Ok(Json(answer).into_response())
}

/// One authenticated call: the node and the caller's project.
struct Call {
    node: SharedNode,
    project: String,
}

impl Call {
    async fn write(&self, op: HierOp) -> Result<Reply, ApiError> {
        let op = Op::Hier {
            project: self.project.clone(),
            op,
        };
        let outcome = self
            .node
            .propose(op)
            .await
            .map_err(|e| ApiError::from_unavailable(D, e))?;
        outcome.map_err(core)
    }

    async fn read<T>(
        &self,
        f: impl FnOnce(&raftlock_core::hierarchy::Hierarchy, &str, i64) -> Result<T, CoreError>,
    ) -> Result<T, ApiError> {
        let project = self.project.as_str();
        let result = self
            .node
            .linearizable(|sm, now| f(sm.hierarchy(), project, now))
            .await
            .map_err(|e| ApiError::from_unavailable(D, e))?;
        result.map_err(core)
    }

    async fn create_namespace(&self, r: NamespaceReq) -> Result<Value, ApiError> {
        let op = HierOp::CreateNamespace {
            name: r.name,
            description: r.description,
            metadata: r.metadata,
        };
        namespace_answer(self.write(op).await?)
    }

    async fn get_namespace(&self, r: NamespaceReq) -> Result<Value, ApiError> {
        let ns = self.read(|h, p, _| h.get_namespace(p, &r.name)).await?;
        Ok(json!({ "namespace": ns }))
    }

    async fn update_namespace(&self, r: NamespaceReq) -> Result<Value, ApiError> {
        let op = HierOp::UpdateNamespace {
            name: r.name,
            description: r.description,
            metadata: r.metadata,
            expected_version: r.expected_version,
        };
        namespace_answer(self.write(op).await?)
    }

    async fn delete_namespace(&self, r: NamespaceReq) -> Result<Value, ApiError> {
        self.write(HierOp::DeleteNamespace { name: r.name }).await?;
        Ok(json!({}))
    }

    async fn list_namespaces(&self, r: ListReq) -> Result<Value, ApiError> {
        let (items, next, prev) = self
            .read(|h, p, _| h.list_namespaces(p, &r.pagination_token, r.limit))
            .await?;
        Ok(
            json!({ "namespaces": items, "next_pagination_token": next, "previous_pagination_token": prev }),
        )
    }

    async fn create_lease(&self, r: LeaseReq) -> Result<Value, ApiError> {
        let op = HierOp::CreateLease {
            namespace: r.namespace_name,
            lease_id: new_lease_id(),
            process_id: r.process_id,
            ttl_seconds: r.ttl_seconds,
        };
        lease_answer(self.write(op).await?)
    }

    async fn refresh_lease(&self, r: LeaseReq) -> Result<Value, ApiError> {
        let op = HierOp::RefreshLease {
            namespace: r.namespace_name,
            lease_id: r.lease_id,
            ttl_seconds: r.ttl_seconds,
        };
        lease_answer(self.write(op).await?)
    }

    async fn revoke_lease(&self, r: LeaseReq) -> Result<Value, ApiError> {
        self.write(HierOp::RevokeLease {
            namespace: r.namespace_name,
            lease_id: r.lease_id,
        })
        .await?;
        Ok(json!({}))
    }

    async fn get_lease(&self, r: LeaseReq) -> Result<Value, ApiError> {
        let lease = self
            .read(|h, p, now| h.get_lease(p, &r.namespace_name, &r.lease_id, now))
            .await?;
        Ok(json!({ "lease": lease }))
    }

    async fn list_leases(&self, r: ListReq) -> Result<Value, ApiError> {
        let (items, next, prev) = self
            .read(|h, p, now| {
                h.list_leases(
                    p,
                    &r.namespace_name,
                    &r.process_id,
                    &r.pagination_token,
                    r.limit,
                    now,
                )
            })
            .await?;
        Ok(
            json!({ "leases": items, "next_pagination_token": next, "previous_pagination_token": prev }),
        )
    }

    async fn release(&self, r: LockReq) -> Result<Value, ApiError> {
        let op = HierOp::ReleaseLock {
            namespace: r.namespace_name,
            lock_name: r.lock_name,
            lease_id: r.lease_id,
        };
        match self.write(op).await? {
            Reply::Lock(lock) => Ok(json!({ "lock": lock })),
            other => Err(unexpected(other)),
        }
    }

    async fn delete_lock(&self, r: LockReq) -> Result<Value, ApiError> {
        self.write(HierOp::DeleteLock {
            namespace: r.namespace_name,
            lock_name: r.lock_name,
        })
        .await?;
        Ok(json!({}))
    }

    async fn get_lock(&self, r: LockReq) -> Result<Value, ApiError> {
        let lock = self
            .read(|h, p, now| h.get_lock(p, &r.namespace_name, &r.lock_name, now))
            .await?;
        Ok(json!({ "lock": lock }))
    }

    async fn list_locks(&self, r: ListReq) -> Result<Value, ApiError> {
        let (items, next, prev) = self
            .read(|h, p, now| h.list_locks(p, &r.namespace_name, &r.pagination_token, r.limit, now))
            .await?;
        Ok(
            json!({ "locks": items, "next_pagination_token": next, "previous_pagination_token": prev }),
        )
    }

    async fn try_acquire(&self, r: &LockReq) -> Result<AcquireReply, ApiError> {
        let op = HierOp::AcquireLock {
            namespace: r.namespace_name.clone(),
            lock_name: r.lock_name.clone(),
            exclusive: r.exclusive,
            lease_id: r.lease_id.clone(),
            metadata: r.metadata.clone(),
        };
        match self.write(op).await? {
            Reply::Acquire(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    /// Acquire, waiting up to `timeout_seconds` on the server for the lock to become free.
    async fn acquire(&self, r: LockReq) -> Result<Value, ApiError> {
        validate::acquire_timeout(r.timeout_seconds).map_err(core)?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(r.timeout_seconds);
        let mut applied = self.node.raft.metrics();
        let mut reply = self.try_acquire(&r).await?;
        while reply.outcome != AcquireOutcome::Acquired && r.timeout_seconds > 0 {
            // Sleep until the applied state says the acquire would succeed, or the deadline.
            let free = loop {
                if tokio::time::timeout_at(deadline, applied.changed())
                    .await
                    .is_err()
                {
                    break false;
                }
                let project = self.project.as_str();
                let probe = self.node.read_local(|sm, now| {
                    sm.hierarchy().probe(
                        project,
                        &r.namespace_name,
                        &r.lock_name,
                        r.exclusive,
                        &r.lease_id,
                        now,
                    )
                });
                match probe {
                    Ok(None) => break true,
                    Ok(Some(blocked)) => reply = blocked,
                    Err(e) => return Err(core(e)),
                }
            };
            if !free {
                reply.outcome = AcquireOutcome::TimedOut;
                break;
            }
            reply = self.try_acquire(&r).await?;
        }
        Ok(json!(reply))
    }
}

fn unexpected(reply: Reply) -> ApiError {
    ApiError::new(
        D,
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("unexpected reply {reply:?}"),
    )
}

fn namespace_answer(reply: Reply) -> Result<Value, ApiError> {
    match reply {
        Reply::Namespace(ns) => Ok(json!({ "namespace": ns })),
        other => Err(unexpected(other)),
    }
}

fn lease_answer(reply: Reply) -> Result<Value, ApiError> {
    match reply {
        Reply::LockLease(lease) => Ok(json!({ "lease": lease })),
        other => Err(unexpected(other)),
    }
}

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
