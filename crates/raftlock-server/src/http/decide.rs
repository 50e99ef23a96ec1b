//! Proposing a write and answering in the API's errors: the one propose-and-map helper of the
//! HTTP layer. Apart from `errors` so that the error types do not depend on the node.

use super::errors::{ApiError, Dialect};
use crate::group::Group;

/// Proposes `op` through `group` and maps both kinds of refusal — not decided (503) and
/// refused by the rules (4xx) — into `dialect`'s errors.
pub async fn decide(
    group: &Group,
    op: raftlock_core::Op,
    dialect: Dialect,
) -> Result<raftlock_core::Reply, ApiError> {
    let outcome = group
        .propose(op)
        .await
        .map_err(|e| ApiError::from_unavailable(dialect, e))?;
    outcome.map_err(|e| ApiError::from_core(dialect, e))
}

/// The group that decides `project`'s calls on this node (503 when it hosts no replica of
/// the project's shard: routing sends calls only to nodes that do).
pub fn group_for(
    node: &crate::node::Node,
    project: &str,
    dialect: Dialect,
) -> Result<std::sync::Arc<Group>, ApiError> {
    node.group_for(project)
        .map_err(|e| ApiError::from_unavailable(dialect, e))
}
