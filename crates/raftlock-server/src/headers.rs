//! Every HTTP header name the server reads or writes, in one place.
//!
//! Client-facing names come from the original API documents; `x-raftlock-*` names travel only
//! between nodes (a client sending one to the client listener is refused). The client-facing
//! names are part of the wire contract and come from `raftlock-api`, which the SDK shares.

pub use raftlock_api::headers::{LOCK_TOKEN_HEADER, REQUEST_ID_HEADER};
/// Marks a request forwarded by a peer; its value is the number of hops so far.
pub const HOPS_HEADER: &str = "x-raftlock-hops";
/// Waiter id of a forwarded blocking acquire, stable across retries to a new leader.
pub const WAITER_ID_HEADER: &str = "x-raftlock-waiter-id";
/// Nanoseconds a forwarded blocking call may still wait, as the forwarding node measured on its
/// monotonic clock when it sent (a duration, not an instant: see `http::wait::WaitContext`).
pub const WAIT_LEFT_HEADER: &str = "x-raftlock-wait-left-ns";
/// On a 503 to a forwarded request: it was never proposed, so the forwarding peer may send
/// it to the new leader whatever it is.
pub const NOT_PROPOSED_HEADER: &str = "x-raftlock-not-proposed";
/// On a forwarded request: the request id the client itself sent (absent when it sent none).
pub const FORWARDED_REQUEST_ID_HEADER: &str = "x-raftlock-client-request-id";
/// On a forwarded request: the id the first node minted for the call, under which every write
/// the client's own id does not cover is proposed (`http::idempotency`).
pub const NODE_REQUEST_ID_HEADER: &str = "x-raftlock-node-request-id";
/// On a forward of a call with a request id: `group:nanoseconds`, the applied time of the
/// group's replica on the node the client called, before any attempt left it
/// (`http::resend`).
pub const FIRST_AFTER_HEADER: &str = "x-raftlock-first-after";
/// On a forward of a call with a request id: milliseconds before the receiver got it that the
/// call's first attempt can have gone out (`http::resend`).
pub const FIRST_WITHIN_HEADER: &str = "x-raftlock-first-within-ms";
/// On a forward that may have been proposed before (an earlier attempt's answer was lost, or
/// its leader changed): the leader proposes it as [`raftlock_core::Op::Resent`], so an attempt
/// whose id the state forgot is refused rather than applied twice.
pub const RESENT_HEADER: &str = "x-raftlock-resent";
/// Node-to-node authentication and identity, defined with the Raft network.
pub use raftlock_raft::{CLUSTER_ID_HEADER, CLUSTER_SECRET_HEADER, SOURCE_HEADER};

/// Names the Raft group a node-to-node election request (pre-vote, beacon, campaign) is for;
/// absent means the meta group, as the release before shards sent it.
pub const GROUP_HEADER: &str = "x-raftlock-group";

/// The group a node-to-node request names in [`GROUP_HEADER`] (the meta group when absent;
/// `None` when it is not a number).
pub fn group_of(headers: &axum::http::HeaderMap) -> Option<raftlock_raft::GroupId> {
    match headers.get(GROUP_HEADER) {
        None => Some(raftlock_raft::META_GROUP),
        Some(v) => v.to_str().ok()?.parse().ok(),
    }
}
