//! # raftlock-core
//!
//! The deterministic lock state machine of raftlock. Every rule the replicated state decides
//! (tenancy records, project locks, hierarchical locks, quotas and budgets; see
//! `docs/semantics.md`) lives here, once: commands come in, results go out. There is no clock,
//! no I/O, no randomness and no async in this crate — time arrives inside each [`Command`]
//! (stamped by the Raft leader) and identifiers such as lease ids are chosen by the proposer.
//! Feeding the same sequence of commands to two machines therefore yields identical state
//! and identical answers, which is what lets Raft replicate it.
//!
//! ## Layout
//! - [`command`]: the replicated commands ([`Command`], [`Op`]) and their answers ([`Reply`]).
//! - [`error`]: the typed errors every rule can produce ([`CoreError`]).
//! - [`validate`]: the input limits of project-lock and hierarchical (names, TTLs, metadata, pagination).
//! - [`tenancy`]: projects and API keys (tenancy) — only hashes of secrets are stored.
//! - [`project_locks`]: the named leases with fencing tokens of project-lock.
//! - [`hierarchy`]: namespaces, lock leases and shared/exclusive path locks of hierarchical.
//! - [`semaphores`]: semaphores (permits held in weights) and semaphore leases, inside the
//!   namespaces of [`hierarchy`].
//! - [`wait_groups`]: wait groups (jobs counted to completion, idempotent per job id).
//! - [`barriers`]: barriers (N-party rendezvous by generation).
//! - [`shards`]: the shard map the meta group keeps: data shards and where projects live.
//! - [`budget`]: what stored records cost a project in bytes, and the per-project byte
//!   budgets that bound memory where count quotas cannot.
//! - [`paging`]: opaque pagination cursors shared by every list call.
//! - [`machine`]: [`StateMachine`], which owns all of the above, applies commands and
//!   answers queries.
//! - [`clock`]: the cluster-time rule (how the leader stamps entries and judges reads) that
//!   keeps skewed or stepping wall clocks from ending a lease early.
//! - [`request_ids`]: the first outcome of each client request id, so a retry is not applied
//!   twice.
//! - [`ratelimit`]: the fixed-window request counter (pure; the server owns the instance).
//! - [`codec`]: the one place that decides how state and commands become bytes.

pub mod barriers;
pub mod budget;
pub mod clock;
pub mod codec;
pub mod command;
pub mod error;
pub mod hierarchy;
pub mod machine;
pub mod paging;
pub mod project_locks;
pub mod ratelimit;
pub mod request_ids;
pub mod semaphores;
pub mod shards;
pub mod spaces;
pub mod tenancy;
pub mod validate;
pub mod wait_groups;

pub use command::{Command, Op, Outcome, Reply};
pub use error::CoreError;
pub use machine::{
    Limits, StateMachine, StateMachineV1, StateMachineV2, StateMachineV3, StateMachineV4, Summary,
};

/// Nanoseconds since the Unix epoch; the only notion of time the state machine knows.
pub type Nanos = i64;

/// One second in [`Nanos`].
pub const SECOND: Nanos = 1_000_000_000;
