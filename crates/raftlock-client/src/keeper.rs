//! Holding hierarchical locks: [`LeaseKeeper`] creates a server-side lease and refreshes it in the
//! background; [`HierLockGuard`] is one hierarchical lock held under that lease.
//!
//! The keeper refreshes about every third of the TTL (with jitter). Its cancellation token —
//! and so every guard's, which are children of it — is cancelled when a refresh answers
//! `not_found` (the lease expired or was revoked, and the server released its locks) or when
//! the lease's expiry passes without a successful refresh. Dropping a guard releases its lock
//! in a spawned task; dropping the keeper revokes the lease the same way.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::error::Result;
use crate::guard::{cancellation_accessors, keep_alive, local_deadline, Renewal};
use crate::hierarchy::{AcquireLockRequest, AcquireLockResponse, Lock, LockLease, Metadata, Nanos};
use crate::transport::Client;

/// Why a lease keeper's token was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseLoss {
    /// A refresh answered `not_found`: the lease expired or was revoked elsewhere.
    NotFound,
    /// The expiry passed without a successful refresh.
    Expired,
    /// The keeper revoked the lease itself.
    Revoked,
}

#[derive(Debug)]
struct KeeperState {
    lease: LockLease,
    lost: Option<LeaseLoss>,
}

/// A hierarchical lease kept alive in the background.
#[derive(Debug)]
pub struct LeaseKeeper {
    client: Client,
    namespace: Arc<str>,
    lease_id: Arc<str>,
    cancel: CancellationToken,
    state: Arc<Mutex<KeeperState>>,
    stop: CancellationToken,
    refresher: Option<JoinHandle<()>>,
}

fn nanos_to_system(n: Nanos) -> SystemTime {
    if n >= 0 {
        UNIX_EPOCH + Duration::from_nanos(n as u64)
    } else {
        UNIX_EPOCH
    }
}

impl LeaseKeeper {
    /// Creates a lease of `ttl` (1–300 s) in `namespace` and starts refreshing it.
    pub async fn start(
        client: &Client,
        namespace: &str,
        process_id: &str,
        ttl: Duration,
    ) -> Result<LeaseKeeper> {
        let sent = Instant::now();
        let lease = client.create_lease(namespace, process_id, ttl).await?;
        let deadline = local_deadline(sent, ttl, nanos_to_system(lease.expires_at));
        let cancel = CancellationToken::new();
        let stop = CancellationToken::new();
        let state = Arc::new(Mutex::new(KeeperState {
            lease: lease.clone(),
            lost: None,
        }));
        let namespace: Arc<str> = Arc::from(namespace);
        let lease_id: Arc<str> = Arc::from(lease.lease_id.as_str());
        let refresher = tokio::spawn(refresh_loop(
            client.clone(),
            namespace.clone(),
            lease_id.clone(),
            ttl,
            deadline,
            cancel.clone(),
            state.clone(),
            stop.clone(),
        ));
        Ok(LeaseKeeper {
            client: client.clone(),
            namespace,
            lease_id,
            cancel,
            state,
            stop,
            refresher: Some(refresher),
        })
    }

    /// The lease id (`ls_…`).
    pub fn lease_id(&self) -> &str {
        &self.lease_id
    }

    /// The namespace of the lease.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The lease as last created or refreshed.
    pub fn lease(&self) -> LockLease {
        self.state.lock().expect("keeper state").lease.clone()
    }

    cancellation_accessors!("the lease is lost (or revoked)");

    /// Why the lease was lost, once it is.
    pub fn loss_reason(&self) -> Option<LeaseLoss> {
        self.state.lock().expect("keeper state").lost
    }

    /// Acquires `lock_name` under this lease, waiting on the server up to `timeout`
    /// (whole seconds, at most 300 s; zero answers at once).
    ///
    /// Contention is a normal result: [`HierAcquire::NotAcquired`] with the server's answer
    /// (outcome, reason, blocking locks).
    pub async fn acquire(
        &self,
        lock_name: &str,
        exclusive: bool,
        timeout: Duration,
        metadata: Metadata,
    ) -> Result<HierAcquire> {
        let req = AcquireLockRequest {
            namespace_name: self.namespace.to_string(),
            lock_name: lock_name.to_string(),
            exclusive,
            lease_id: self.lease_id.to_string(),
            timeout_seconds: timeout.as_secs(),
            metadata,
        };
        let answer = self.client.acquire_lock(&req).await?;
        if !answer.acquired() {
            return Ok(HierAcquire::NotAcquired(answer));
        }
        Ok(HierAcquire::Acquired(HierLockGuard {
            client: self.client.clone(),
            namespace: self.namespace.to_string(),
            lock_name: lock_name.to_string(),
            lease_id: self.lease_id.to_string(),
            exclusive,
            cancel: self.cancel.child_token(),
            lock: answer.lock,
            released: false,
        }))
    }

    /// Stops refreshing and revokes the lease, releasing every lock it holds.
    pub async fn revoke(mut self) -> Result<()> {
        self.stop.cancel();
        if let Some(h) = self.refresher.take() {
            let _ = h.await;
        }
        self.lose(LeaseLoss::Revoked);
        match self
            .client
            .revoke_lease(&self.namespace, &self.lease_id)
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    fn lose(&self, why: LeaseLoss) {
        lose(&self.state, &self.cancel, why);
    }
}

fn lose(state: &Mutex<KeeperState>, cancel: &CancellationToken, why: LeaseLoss) {
    {
        let mut s = state.lock().expect("keeper state");
        if s.lost.is_none() {
            s.lost = Some(why);
        }
    }
    cancel.cancel();
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        let Some(refresher) = self.refresher.take() else {
            return;
        };
        self.stop.cancel();
        refresher.abort();
        self.lose(LeaseLoss::Revoked);
        let (client, ns, id) = (
            self.client.clone(),
            self.namespace.clone(),
            self.lease_id.clone(),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = client.revoke_lease(&ns, &id).await {
                    tracing::debug!(lease = %id, error = %e, "revoking a dropped lease failed; it will expire");
                }
            });
        }
    }
}

/// Refreshes the keeper's lease until `stop`; `not_found` or an expiry loses it.
#[allow(clippy::too_many_arguments)]
async fn refresh_loop(
    client: Client,
    namespace: Arc<str>,
    lease_id: Arc<str>,
    ttl: Duration,
    deadline: Instant,
    cancel: CancellationToken,
    state: Arc<Mutex<KeeperState>>,
    stop: CancellationToken,
) {
    let refresh = || async {
        match client.refresh_lease(&namespace, &lease_id, ttl).await {
            Ok(lease) => {
                let expires_at = nanos_to_system(lease.expires_at);
                state.lock().expect("keeper state").lease = lease;
                Renewal::Renewed(expires_at)
            }
            Err(e) if e.is_not_found() => {
                tracing::warn!(lease = %lease_id, "lease lost");
                lose(&state, &cancel, LeaseLoss::NotFound);
                Renewal::Lost
            }
            Err(e) => {
                tracing::warn!(lease = %lease_id, error = %e, "lease refresh failed; retrying");
                // Only a rate limit's Retry-After is worth waiting out; a 503's (a leader
                // change) is not, with the lease's own clock running.
                Renewal::Retry(
                    e.retry_after()
                        .filter(|_| e.is_rate_limited())
                        .unwrap_or(Duration::from_millis(200))
                        .min(Duration::from_secs(1)),
                )
            }
        }
    };
    let expired = || {
        tracing::warn!(lease = %lease_id, "lease expired without a successful refresh");
        lose(&state, &cancel, LeaseLoss::Expired);
    };
    keep_alive(ttl, deadline, stop, refresh, expired).await;
}

/// Result of [`LeaseKeeper::acquire`].
#[derive(Debug)]
pub enum HierAcquire {
    /// Held under the keeper's lease until released or dropped.
    Acquired(HierLockGuard),
    /// Not acquired: `outcome` is `Unavailable` or `TimedOut`, with the reason and the
    /// blocking locks.
    NotAcquired(AcquireLockResponse),
}

/// One hierarchical lock held under a [`LeaseKeeper`]'s lease. Released by
/// [`HierLockGuard::release`] or, in a spawned task, on drop.
#[derive(Debug)]
pub struct HierLockGuard {
    client: Client,
    namespace: String,
    lock_name: String,
    lease_id: String,
    exclusive: bool,
    cancel: CancellationToken,
    lock: Lock,
    released: bool,
}

impl HierLockGuard {
    /// The lock path.
    pub fn name(&self) -> &str {
        &self.lock_name
    }

    /// True for an exclusive hold.
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }

    /// The lock as the acquire answered it.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Cancelled when the lease is lost (child of the keeper's token).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Resolves when the lease is lost.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Releases the lock; answers the lock as it is afterwards.
    pub async fn release(mut self) -> Result<Lock> {
        self.released = true;
        self.cancel.cancel();
        self.client
            .release_lock(&self.namespace, &self.lock_name, &self.lease_id)
            .await
    }
}

impl Drop for HierLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.cancel.cancel();
        let client = self.client.clone();
        let (ns, name, lease) = (
            std::mem::take(&mut self.namespace),
            std::mem::take(&mut self.lock_name),
            std::mem::take(&mut self.lease_id),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = client.release_lock(&ns, &name, &lease).await {
                    tracing::debug!(lock = %name, error = %e, "releasing a dropped lock failed");
                }
            });
        }
    }
}
