//! # raftlock-client
//!
//! The Rust SDK for raftlock: typed calls for the project-locks API, the
//! hierarchical-locks RPCs and the admin API, endpoint failover, and helpers that
//! hold locks for you — renewing in the background and cancelling your work the moment the
//! lock can no longer be trusted.
//!
//! ```no_run
//! use std::time::Duration;
//! use raftlock_client::{Client, WithLock};
//!
//! # async fn demo() -> raftlock_client::Result<()> {
//! let client = Client::new(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"], "rlk_…")?;
//! match client
//!     .with_lock("nightly-report", Duration::from_secs(30), |guard| async move {
//!         // Pass guard.fencing_token() to whatever the lock protects, and stop when
//!         // guard.cancelled() resolves.
//!         guard.fencing_token()
//!     })
//!     .await?
//! {
//!     WithLock::Completed(token) => println!("done under fencing token {token}"),
//!     WithLock::NotAcquired(why) => println!("someone else has it: {why:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! ## Layout
//! - [`transport`]: [`Client`] and its builder; the single send path with endpoint failover,
//!   request ids and the retry policy (an uncertain acquire is retried once with the same
//!   lock token and request id).
//! - [`error`]: [`Error`] and [`ApiError`] — HTTP status, stable `code`, message,
//!   `Retry-After`, request id.
//! - [`locks`]: project-lock calls (`acquire`, `renew`, `release`, `get`, `force_release`); contention
//!   comes back as [`Acquire`] / [`Renew`] / [`Release`] variants, not errors.
//! - [`guard`]: [`Client::hold`] and [`Client::with_lock`] — background renewal at ~TTL/3
//!   with jitter, a [`LockGuard`] with the fencing token and a `CancellationToken`, release on
//!   return, panic or drop.
//! - [`hierarchy`]: hierarchical-lock calls (namespaces, leases, locks); their message types
//!   are `raftlock-api`'s, re-exported.
//! - [`semaphores`]: semaphore and semaphore-lease calls (all-or-none weights, FIFO waits,
//!   a fencing token per hold).
//! - [`paging`]: [`paging::PageRequest`] and [`paging::Page`], the paging of every list call.
//! - [`leases`]: the lease calls both APIs share (the same messages under their own method
//!   names), written once and named by a [`leases::LeaseMethods`].
//! - [`coordination`]: wait-group and barrier calls (report jobs, wait for a group; arrive,
//!   wait at a barrier).
//! - [`keeper`]: [`LeaseKeeper`] (a hierarchical lease refreshed in the background) and
//!   [`HierLockGuard`] (one hierarchical lock under it).
//! - [`election`]: [`Election`] — campaign, resign, observe the current leader's term.
//! - [`admin`]: projects, keys, membership, the cluster view and per-node health.
//! - `rfc3339`: reading the project-lock API's `expires_at`.
//! - `rfc3339`: serde helpers for project-lock `expires_at`.

#![warn(missing_docs)]

pub mod admin;
pub mod coordination;
pub mod election;
pub mod error;
pub mod guard;
pub mod hierarchy;
pub mod keeper;
pub mod leases;
pub mod locks;
pub mod paging;
mod rfc3339;
pub mod semaphores;
pub mod transport;

pub use admin::{ClusterStatus, ClusterView, KeyKind, NewKey, Project, ProjectUpdate};
pub use coordination::{
    Barrier, BarrierWaitOutcome, JobReport, WaitGroup, WaitGroupStatus, WaitGroupWaitOutcome,
};
pub use election::{Election, Leadership, Term};
pub use error::{ApiError, Error, Result};
pub use guard::{Contention, HeldLock, Hold, LockGuard, LockOptions, LossReason, WithLock};
pub use hierarchy::{
    AcquireLockRequest, AcquireLockResponse, AcquireOutcome, ContentionReason, Lock, LockLease,
    LockState, Namespace, Page, PageRequest, UpdateNamespaceRequest,
};
pub use keeper::{HierAcquire, HierLockGuard, LeaseKeeper, LeaseLoss};
pub use locks::{Acquire, Lease, LockStatus, LockToken, Release, Renew};
pub use rfc3339::{format as format_rfc3339, parse as parse_rfc3339};
pub use semaphores::{
    AcquireSemaphoreRequest, AcquireSemaphoreResponse, Semaphore, SemaphoreHolder,
    UpdateSemaphoreRequest,
};
pub use tokio_util::sync::CancellationToken;
pub use transport::{Client, ClientBuilder, OUTCOME_UNKNOWN_HEADER};
