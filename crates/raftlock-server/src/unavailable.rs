//! [`Unavailable`]: the one way a node says "not decided" (answered 503), shared by the
//! proposer, the read gate, the node and the HTTP error mapping, below all of them.

/// Why a request could not be decided; always answered with 503.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Unavailable {
    /// The client-facing reason (no internals).
    pub message: String,
    /// The request was provably never proposed (this node was not, or no longer, the
    /// leader), so it is safe to send to the new leader whatever the request is.
    pub not_proposed: bool,
}

impl Unavailable {
    /// The request may or may not take effect.
    pub fn new(message: impl Into<String>) -> Self {
        Unavailable {
            message: message.into(),
            not_proposed: false,
        }
    }

    /// The request was never proposed.
    pub fn not_proposed(message: impl Into<String>) -> Self {
        Unavailable {
            message: message.into(),
            not_proposed: true,
        }
    }
}
