//! Proposing a write and answering in the API's errors: the one propose-and-map helper of the
//! HTTP layer. Apart from `errors` so that the error types do not depend on the node.

use super::errors::{ApiError, Dialect};
use crate::node::Node;

/// Proposes `op` through `node` and maps both kinds of refusal — not decided (503) and refused
/// by the rules (4xx) — into `dialect`'s errors.
pub async fn decide(
    node: &Node,
    op: raftlock_core::Op,
    dialect: Dialect,
) -> Result<raftlock_core::Reply, ApiError> {
    let outcome = node
        .meta
        .propose(op)
        .await
        .map_err(|e| ApiError::from_unavailable(dialect, e))?;
    outcome.map_err(|e| ApiError::from_core(dialect, e))
}
