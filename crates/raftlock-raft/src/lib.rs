//! # raftlock-raft
//!
//! Replication and storage for raftlock: it turns the deterministic
//! [`raftlock_core::StateMachine`] into a replicated one with [openraft](openraft), keeps the
//! Raft log, vote and snapshots durable in the node's data directory (every acknowledged write
//! is `fdatasync`'d first), and carries peer RPCs on kept-open streams (HTTP connections upgraded to frames). Every byte format (log entries,
//! vote, snapshots, RPC bodies, checksummed frames) goes through [`raftlock_core::codec`], so
//! the encoding is decided in one place.
//!
//! ## Layout
//! - [`typ`]: the openraft [`TypeConfig`] and aliases ([`Raft`], [`RaftError`], ...).
//! - [`store`]: [`open`], which locks the data directory and opens both stores.
//! - [`fs`]: the file operations storage is built from, and their durability contract.
//! - [`wal`]: the segmented write-ahead log and its crash recovery; `wal/contents.rs` the log
//!   as held between writes (a decoded tail, older entries by the place of their frame).
//! - [`checked_file`]: atomically replaced, checksummed one-value files (vote, snapshot).
//! - [`identity`]: [`ClusterIdentity`], the cluster id every node-to-node request carries.
//! - [`log_store`]: [`LogStore`], openraft's log storage over the WAL and the vote file.
//! - [`state_machine`]: [`StateMachineStore`], applies committed entries to the core machine,
//!   builds and persists snapshots, and exposes the applied state to readers.
//! - [`network`]: [`Network`] (outgoing peer RPCs) and [`internal_router`] (incoming ones).
//! - [`peer_stream`]: the frames peer RPCs travel in, on kept-open streams pooled per peer.
//! - [`config`]: [`raft_config`], the one openraft configuration (timing, snapshot policy,
//!   payload bounds) raftlock runs with.
//! - [`backup`]: backup files (the state at a committed index) and restoring them into the
//!   data directories of a new cluster.
//! - [`waiters`]: [`WaiterBoard`], which wakes exactly the blocking calls whose waiter left
//!   its queue.
//! - [`error`]: the storage error type.
//! - `sim_fs` and `crash_tests` (tests only): a simulated disk that loses unsynced writes, and
//!   random histories of writes and power losses run over it.

// openraft's `StorageError`/`RPCError` are large by design and every trait method returns them;
// boxing them in our helpers would only add conversions.
#![allow(clippy::result_large_err)]

pub mod backup;
pub mod checked_file;
pub mod config;
pub mod error;
pub mod fs;
pub mod identity;
pub mod log_store;
pub mod network;
pub mod peer_stream;
pub mod state_machine;
pub mod store;
pub mod typ;
pub mod waiters;
pub mod wal;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod sim_fs;

pub use config::{raft_config, RaftTiming};
pub use error::StoreError;
pub use identity::{ClusterIdentity, CLUSTER_ID_HEADER};
pub use log_store::LogStore;
pub use network::{
    carries_current_vote, internal_router, LeaderContact, Network, NetworkConnection, PeerGroups,
    CLUSTER_SECRET_HEADER, SOURCE_HEADER,
};
pub use state_machine::{ApplyTime, SharedState, SmData, StateMachineStore};
pub use store::{open, open_in, open_timed, OpenTimes};
pub use typ::*;
pub use waiters::WaiterBoard;
