//! Typed errors. An [`Error::Api`] keeps everything the server said: HTTP status, the stable
//! `code`, the message, `Retry-After` and the request id. Contention is *not* an error: the
//! lock calls return it as a normal result (see [`crate::locks::Acquire`] and
//! [`crate::hierarchy::AcquireOutcome`]).

use std::time::Duration;

/// An error answer of the server, in either API dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code, e.g. 409.
    pub status: u16,
    /// Stable machine-readable code, e.g. `lock_rate_limited` or `not_found`.
    pub code: String,
    /// Human-readable message from the server.
    pub message: String,
    /// `Retry-After` of a rate-limited answer.
    pub retry_after: Option<Duration>,
    /// `X-Volcano-Request-Id` the server echoed, for correlating with its logs.
    pub request_id: Option<String>,
    /// The endpoint that answered.
    pub endpoint: String,
    /// A `503` marked `x-raftlock-outcome-unknown`: the write may or may not have been
    /// applied, and the cluster can no longer tell (see [`Error::is_outcome_unknown`]).
    pub outcome_unknown: bool,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (HTTP {}): {}", self.code, self.status, self.message)?;
        if let Some(r) = self.retry_after {
            write!(f, " (retry after {}s)", r.as_secs())?;
        }
        Ok(())
    }
}

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error body.
    #[error("{0}")]
    Api(ApiError),
    /// No answer: connection refused, reset, timed out… after trying the endpoints.
    #[error("cannot reach raftlock at {endpoint}: {source}")]
    Transport {
        /// The last endpoint tried.
        endpoint: String,
        /// What the HTTP stack reported.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered something this client does not understand.
    #[error("unexpected answer from {endpoint}: {message}")]
    Protocol {
        /// The endpoint that answered.
        endpoint: String,
        /// What was wrong with it.
        message: String,
    },
    /// The client was configured wrongly (no endpoints, bad URL, bad header value…).
    #[error("invalid client configuration: {0}")]
    Config(String),
}

impl Error {
    /// HTTP status of a server error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.status),
            _ => None,
        }
    }

    /// Stable code of a server error answer (`invalid_request`, `not_found`, …).
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api(e) => Some(&e.code),
            _ => None,
        }
    }

    /// `Retry-After` of a rate-limited answer.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api(e) => e.retry_after,
            _ => None,
        }
    }

    /// True for failures worth retrying elsewhere or later: no answer, or `503` — not one
    /// whose outcome the cluster cannot tell ([`Error::is_outcome_unknown`]).
    pub fn is_unavailable(&self) -> bool {
        let unavailable = matches!(self, Error::Transport { .. }) || self.status() == Some(503);
        unavailable && !self.is_outcome_unknown()
    }

    /// True for a write the cluster refused to resend because it could no longer tell whether
    /// its first attempt was applied (a busy project had forgotten the request id that would
    /// tell): it may or may not have taken effect. Retrying under the same request id could
    /// apply it twice; read the state before acting again. Never retried by this client.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::Api(e) if e.outcome_unknown)
    }

    /// True for a `404 not_found` (unknown namespace, expired lease, unknown project).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// True for `429` (`lock_rate_limited` / `resource_exhausted`).
    pub fn is_rate_limited(&self) -> bool {
        self.status() == Some(429)
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
