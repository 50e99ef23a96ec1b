//! Holding a project lock: [`HeldLock`] renews a lease in the background and
//! [`Client::with_lock`] runs a callback while the lock is held.
//!
//! Renewal runs about every third of the TTL (±10 % jitter, sooner when the lease is close to
//! its end). The holder's [`LockGuard::cancellation`] token is cancelled the moment a renewal
//! answers `lock_ownership_lost`, or when the lease's expiry passes without a successful
//! renewal (transient failures — `503`, no answer — are retried until then). The local
//! deadline is the earlier of "request sent + TTL" on the monotonic clock and the server's
//! `expires_at` read against the local wall clock, so the holder stops believing in the lock
//! no later than the server stops honouring it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use rand::Rng;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::error::Result;
use crate::locks::{Acquire, Lease, LockToken, Release, Renew};
use crate::transport::Client;

/// `cancellation()`, `cancelled()` and `is_cancelled()` of a handle (a [`LockGuard`], a
/// [`LeaseKeeper`](crate::keeper::LeaseKeeper)) whose `cancel` token fires once `$when`.
macro_rules! cancellation_accessors {
    ($when:literal) => {
        #[doc = concat!("Cancelled once ", $when, ".")]
        pub fn cancellation(&self) -> &CancellationToken {
            &self.cancel
        }

        #[doc = concat!("Resolves once ", $when, ".")]
        pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
            self.cancel.cancelled()
        }

        #[doc = concat!("True once ", $when, ".")]
        pub fn is_cancelled(&self) -> bool {
            self.cancel.is_cancelled()
        }
    };
}
pub(crate) use cancellation_accessors;

/// Why an acquire did not get the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Contention {
    /// `lock_held`: someone else holds it.
    Held,
    /// `lock_ownership_lost`: this token's own lease lapsed and is not yet reclaimable.
    OwnershipLost,
}

/// Result of [`Client::hold`].
#[derive(Debug)]
pub enum Hold {
    /// The lock is held and renewed until released or dropped.
    Acquired(HeldLock),
    /// Not acquired (within the wait, if one was given).
    NotAcquired(Contention),
}

/// Result of [`Client::with_lock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WithLock<T> {
    /// The callback ran while the lock was held; its output.
    Completed(T),
    /// The lock was not acquired; the callback did not run.
    NotAcquired(Contention),
}

/// Why a holder's cancellation token was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LossReason {
    /// A renewal answered `lock_ownership_lost` (force-released, taken over…).
    OwnershipLost,
    /// The lease's expiry passed without a successful renewal.
    Expired,
    /// The holder released the lock itself.
    Released,
}

/// How to acquire and hold a lock.
#[derive(Debug, Clone, Copy)]
pub struct LockOptions {
    /// Lease TTL (5 s … 90 days); renewals happen about every `ttl / 3`.
    pub ttl: Duration,
    /// Keep trying while the lock is held by someone else, up to this long
    /// (`None`: one attempt).
    pub wait: Option<Duration>,
    /// The ownership token to use (`None`: a fresh one).
    pub token: Option<LockToken>,
}

impl LockOptions {
    /// One attempt with a fresh token.
    pub fn new(ttl: Duration) -> LockOptions {
        LockOptions {
            ttl,
            wait: None,
            token: None,
        }
    }

    /// Waits up to `wait` for the lock.
    pub fn wait(mut self, wait: Duration) -> LockOptions {
        self.wait = Some(wait);
        self
    }
}

#[derive(Debug)]
struct GuardState {
    expires_at: SystemTime,
    lost: Option<LossReason>,
}

/// What the holder of a lock sees: the fencing token, the latest expiry, and a cancellation
/// token that fires when the lock can no longer be trusted. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LockGuard {
    key: Arc<str>,
    token: LockToken,
    fencing_token: u64,
    cancel: CancellationToken,
    state: Arc<Mutex<GuardState>>,
}

impl LockGuard {
    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token of this lease; send it with every write to the protected resource.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The ownership token of this lease.
    pub fn lock_token(&self) -> LockToken {
        self.token
    }

    cancellation_accessors!(
        "the lock can no longer be trusted: its ownership is lost, its lease expires \
         unrenewed, or it is released"
    );

    /// Expiry confirmed by the latest successful acquire or renewal.
    pub fn expires_at(&self) -> SystemTime {
        self.state.lock().expect("guard state").expires_at
    }

    /// Why the token was cancelled, once it is.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.state.lock().expect("guard state").lost
    }

    fn lose(&self, why: LossReason) {
        {
            let mut s = self.state.lock().expect("guard state");
            if s.lost.is_none() {
                s.lost = Some(why);
            }
        }
        self.cancel.cancel();
    }
}

/// A lock held by this process, renewed in the background until [`HeldLock::release`] or
/// drop (which releases in a spawned task).
#[derive(Debug)]
pub struct HeldLock {
    client: Client,
    guard: LockGuard,
    stop: CancellationToken,
    renewer: Option<JoinHandle<()>>,
}

impl HeldLock {
    /// The holder's view (fencing token, cancellation).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Stops renewing and releases the lease.
    pub async fn release(mut self) -> Result<Release> {
        self.stop_renewing().await;
        self.guard.lose(LossReason::Released);
        let key = self.guard.key.to_string();
        let token = self.guard.token;
        self.client.release(&key, token).await
    }

    async fn stop_renewing(&mut self) {
        self.stop.cancel();
        if let Some(h) = self.renewer.take() {
            let _ = h.await;
        }
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let Some(renewer) = self.renewer.take() else {
            return; // released explicitly
        };
        self.stop.cancel();
        renewer.abort();
        self.guard.lose(LossReason::Released);
        let client = self.client.clone();
        let key = self.guard.key.to_string();
        let token = self.guard.token;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = client.release(&key, token).await {
                    tracing::warn!(%key, error = %e, "releasing a dropped lock failed; it will expire");
                }
            });
        }
    }
}

/// `base` ±10 %.
pub(crate) fn jittered(base: Duration) -> Duration {
    let f = rand::thread_rng().gen_range(0.9..1.1);
    base.mul_f64(f)
}

/// The local instant by which a lease confirmed by a request sent at `sent` ends.
pub(crate) fn local_deadline(sent: Instant, ttl: Duration, expires_at: SystemTime) -> Instant {
    let by_ttl = sent + ttl;
    let by_wall = match expires_at.duration_since(SystemTime::now()) {
        Ok(left) => Instant::now() + left,
        Err(_) => Instant::now(),
    };
    by_ttl.min(by_wall)
}

/// When to refresh next: about a third of the TTL, but before half of what is left.
pub(crate) fn next_refresh(ttl: Duration, deadline: Instant) -> Instant {
    let now = Instant::now();
    let left = deadline.saturating_duration_since(now);
    now + jittered(ttl / 3).min(left / 2)
}

/// What one renewal of a lease answered.
pub(crate) enum Renewal {
    /// Extended until `expires_at` (the server's clock).
    Renewed(SystemTime),
    /// Gone for good (the caller has said why).
    Lost,
    /// Failed for now: try again after this pause, while the lease lasts.
    Retry(Duration),
}

/// Keeps a lease that ends at `deadline` alive until `stop`: `renew` about every `ttl / 3`,
/// retried after a failure until the lease would have ended, when `expired` is called. What
/// a renewal is, and what losing the lease means, are the caller's.
pub(crate) async fn keep_alive<Fut: Future<Output = Renewal>>(
    ttl: Duration,
    mut deadline: Instant,
    stop: CancellationToken,
    mut renew: impl FnMut() -> Fut,
    expired: impl FnOnce(),
) {
    loop {
        let at = next_refresh(ttl, deadline);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(at) => {}
        }
        loop {
            let sent = Instant::now();
            let answer = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => {
                    expired();
                    return;
                }
                r = renew() => r,
            };
            let pause = match answer {
                Renewal::Renewed(expires_at) => {
                    deadline = local_deadline(sent, ttl, expires_at);
                    break;
                }
                Renewal::Lost => return,
                Renewal::Retry(pause) => pause,
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Renews the guard's lock until `stop`; a refused renewal or an expiry loses it.
async fn renew_loop(
    client: Client,
    guard: LockGuard,
    ttl: Duration,
    deadline: Instant,
    stop: CancellationToken,
) {
    let key = guard.key.to_string();
    let renew = || async {
        match client.renew(&key, guard.token, ttl).await {
            Ok(Renew::Renewed(lease)) => {
                guard.state.lock().expect("guard state").expires_at = lease.expires_at;
                Renewal::Renewed(lease.expires_at)
            }
            Ok(Renew::OwnershipLost) => {
                tracing::warn!(%key, "lock ownership lost");
                guard.lose(LossReason::OwnershipLost);
                Renewal::Lost
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "renewal failed; retrying");
                Renewal::Retry(
                    e.retry_after()
                        .unwrap_or(Duration::from_millis(200))
                        .min(Duration::from_secs(1)),
                )
            }
        }
    };
    let expired = || {
        tracing::warn!(%key, "lease expired without a successful renewal");
        guard.lose(LossReason::Expired);
    };
    keep_alive(ttl, deadline, stop, renew, expired).await;
}

impl Client {
    /// Acquires `key` and keeps it renewed in the background.
    ///
    /// With [`LockOptions::wait`], a held lock is polled (with backoff) until it frees up or
    /// the wait ends.
    pub async fn hold(&self, key: &str, opts: LockOptions) -> Result<Hold> {
        let token = opts.token.unwrap_or_default();
        let give_up = opts.wait.and_then(|w| Instant::now().checked_add(w));
        let mut backoff = Duration::from_millis(100);
        let (lease, sent) = loop {
            let sent = Instant::now();
            match self.acquire(key, token, opts.ttl).await? {
                Acquire::Acquired(lease) => break (lease, sent),
                Acquire::Held if opts.wait.is_some() => {}
                Acquire::Held => return Ok(Hold::NotAcquired(Contention::Held)),
                Acquire::OwnershipLost => return Ok(Hold::NotAcquired(Contention::OwnershipLost)),
            }
            let pause = jittered(backoff);
            if give_up.is_some_and(|g| Instant::now() + pause >= g) {
                return Ok(Hold::NotAcquired(Contention::Held));
            }
            tokio::time::sleep(pause).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        };
        Ok(Hold::Acquired(
            self.start_holding(key, token, opts.ttl, lease, sent),
        ))
    }

    fn start_holding(
        &self,
        key: &str,
        token: LockToken,
        ttl: Duration,
        lease: Lease,
        sent: Instant,
    ) -> HeldLock {
        let guard = LockGuard {
            key: Arc::from(key),
            token,
            fencing_token: lease.fencing_token,
            cancel: CancellationToken::new(),
            state: Arc::new(Mutex::new(GuardState {
                expires_at: lease.expires_at,
                lost: None,
            })),
        };
        let stop = CancellationToken::new();
        let deadline = local_deadline(sent, ttl, lease.expires_at);
        let renewer = tokio::spawn(renew_loop(
            self.clone(),
            guard.clone(),
            ttl,
            deadline,
            stop.clone(),
        ));
        HeldLock {
            client: self.clone(),
            guard,
            stop,
            renewer: Some(renewer),
        }
    }

    /// Runs `f` while holding `key`: acquires (one attempt), renews about every `ttl / 3`,
    /// hands `f` a [`LockGuard`] whose cancellation token fires when the lock is lost, and
    /// releases when `f` ends — normally, by early return, or by panic (the panic is
    /// resumed after the release). If the returned future is dropped, the release happens
    /// in a spawned task.
    ///
    /// ```no_run
    /// # async fn demo(client: raftlock_client::Client) -> raftlock_client::Result<()> {
    /// use std::time::Duration;
    /// let out = client
    ///     .with_lock("nightly-report", Duration::from_secs(30), |guard| async move {
    ///         tokio::select! {
    ///             _ = guard.cancelled() => Err("lock lost"),
    ///             _ = tokio::time::sleep(Duration::from_secs(60)) => Ok(guard.fencing_token()),
    ///         }
    ///     })
    ///     .await?;
    /// # let _ = out; Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, key: &str, ttl: Duration, f: F) -> Result<WithLock<T>>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock_opts(key, LockOptions::new(ttl), f).await
    }

    /// [`Client::with_lock`] with options (waiting for the lock, a chosen token).
    pub async fn with_lock_opts<F, Fut, T>(
        &self,
        key: &str,
        opts: LockOptions,
        f: F,
    ) -> Result<WithLock<T>>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let held = match self.hold(key, opts).await? {
            Hold::Acquired(h) => h,
            Hold::NotAcquired(c) => return Ok(WithLock::NotAcquired(c)),
        };
        let outcome = AssertUnwindSafe(f(held.guard().clone()))
            .catch_unwind()
            .await;
        match held.release().await {
            Ok(Release::Released) => {}
            Ok(Release::OwnershipLost) => {
                tracing::debug!(%key, "lock was no longer ours at release")
            }
            Err(e) => tracing::warn!(%key, error = %e, "release failed; the lease will expire"),
        }
        match outcome {
            Ok(v) => Ok(WithLock::Completed(v)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refresh_comes_before_half_of_what_is_left() {
        let ttl = Duration::from_secs(30);
        let now = Instant::now();
        let at = next_refresh(ttl, now + Duration::from_secs(30));
        let d = at - now;
        assert!(
            d >= Duration::from_secs(9) && d <= Duration::from_secs(11),
            "{d:?}"
        );
        let at = next_refresh(ttl, Instant::now() + Duration::from_secs(4));
        assert!(at - now <= Duration::from_secs(2) + Duration::from_millis(50));
    }

    #[tokio::test]
    async fn deadline_takes_the_earlier_clock() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        let d = local_deadline(sent, ttl, SystemTime::now() + Duration::from_secs(100));
        assert!(d <= sent + ttl);
        let d = local_deadline(sent, ttl, SystemTime::now() + Duration::from_secs(3));
        assert!(d <= Instant::now() + Duration::from_secs(3));
        let d = local_deadline(sent, ttl, SystemTime::now() - Duration::from_secs(3));
        assert!(d <= Instant::now());
    }
}
