//! Client-facing header names (the `x-raftlock-*` names that travel only between nodes are
//! the server's business and live there).

/// Request correlation id (every route): a UUID per logical operation, reused on its retries;
/// echoed on the answer, made up by the server when absent. Writes carrying the same id are
/// applied once.
pub const REQUEST_ID_HEADER: &str = "x-volcano-request-id";

/// The caller's per-lease UUID on the project-lock `/lease` routes.
pub const LOCK_TOKEN_HEADER: &str = "x-volcano-lock-token";

/// On a `503` (`true`): the write may or may not have been applied, and the cluster can no
/// longer tell — a node's resend of it was refused because the request id that would have
/// told had been forgotten (docs/semantics.md, *Retries and request ids*). Retrying under the
/// same request id could apply it twice; the caller decides (read the state, then act).
pub const OUTCOME_UNKNOWN_HEADER: &str = "x-raftlock-outcome-unknown";
