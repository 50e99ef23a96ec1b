//! Client-facing header names (the `x-raftlock-*` names that travel only between nodes are
//! the server's business and live there).

/// Request correlation id (every route): a UUID per logical operation, reused on its retries;
/// echoed on the answer, made up by the server when absent. Writes carrying the same id are
/// applied once.
pub const REQUEST_ID_HEADER: &str = "x-volcano-request-id";

/// The caller's per-lease UUID on the project-lock `/lease` routes.
pub const LOCK_TOKEN_HEADER: &str = "x-volcano-lock-token";
