//! Typed errors of the state machine. The server maps each variant to the status and stable
//! code of the API that was called (project-lock or hierarchical); nothing here knows about HTTP.

use serde::{Deserialize, Serialize};

/// Why a command or query was refused. Refused commands change nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CoreError {
    /// Input breaks a validation rule; `field` names the offending field.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// project-lock: another token's lease is live, or lapsed but not yet takeover-eligible.
    #[error("lock is held by another owner")]
    LockHeld,
    /// project-lock: the caller's lease lapsed, passed its deadline, or the token is not the owner's.
    #[error("lock ownership lost")]
    OwnershipLost,
    /// Something named does not exist (project, namespace, lease, key).
    #[error("{0} not found")]
    NotFound(String),
    /// Creating something whose name is taken.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A quota would be exceeded.
    #[error("{0}")]
    ResourceExhausted(String),
    /// A well-formed request the object's current state refuses: a version that is not the
    /// current one, permits below the weight held, a report above the counter, a generation
    /// already tripped… `field` names what to read again. Distinct from [`CoreError::Invalid`],
    /// which no state could accept: a client can tell a retry after a read might succeed.
    /// (Last, so the encodings of the older variants do not change.)
    #[error("{field}: {message}")]
    Conflict { field: String, message: String },
    /// A node's resend of a write ([`crate::Op::Resent`]) whose first attempt may have been
    /// applied, while the request id that would tell has been forgotten (a busy project's
    /// table keeps its newest ids only): refused rather than applied a second time. Nothing
    /// changed. (Last, so the encodings of the older variants do not change.)
    #[error("the outcome of this write is unknown: it was sent again after a leader change or a lost answer, and its first attempt may have been applied")]
    OutcomeUnknown,
}

impl CoreError {
    /// Shorthand for a [`CoreError::Conflict`] error.
    pub fn conflict(field: &str, message: impl Into<String>) -> Self {
        CoreError::Conflict {
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// An update guarded by `expected_version` goes on only at the record's `current` one.
    pub fn check_version(expected: Option<u64>, current: u64) -> Result<(), Self> {
        match expected == Some(current) {
            true => Ok(()),
            false => Err(CoreError::conflict(
                "expected_version",
                format!("does not match the current version {current}"),
            )),
        }
    }

    /// Shorthand for an [`CoreError::Invalid`] error.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        CoreError::Invalid {
            field: field.to_string(),
            message: message.into(),
        }
    }
}
