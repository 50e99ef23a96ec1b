//! What an applied write's [`Reply`] becomes on the wire: each `/v1beta` response type says
//! which reply it is made from, once; a write asks for the type it answers with
//! ([`answer`], `Call::write_as`; a plain write's type is its `Write::Answer`).

use axum::http::StatusCode;
use raftlock_api::barriers::{ArriveAtBarrierResponse, BarrierResponse};
use raftlock_api::hierarchy::{EmptyResponse, LockLeaseResponse, LockResponse, NamespaceResponse};
use raftlock_api::semaphores::{AcquireSemaphoreResponse, SemaphoreResponse};
use raftlock_api::wait_groups::WaitGroupResponse;
use raftlock_core::hierarchy::AcquireReply;
use raftlock_core::Reply;

use super::errors::{ApiError, Dialect};

/// A response made from one kind of [`Reply`].
pub(super) trait FromReply: Sized {
    /// The response; a reply of another kind is a server bug (500).
    fn from_reply(reply: Reply) -> Result<Self, ApiError>;
}

/// A reply of another kind than the response is made from: a server bug.
fn unexpected(reply: Reply) -> ApiError {
    ApiError::new(
        Dialect::Rpc,
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("unexpected reply {reply:?}"),
    )
}

/// `reply` as the response `A` ([`FromReply::from_reply`]).
pub(super) fn answer<A: FromReply>(reply: Reply) -> Result<A, ApiError> {
    A::from_reply(reply)
}

/// `Response { field }` from `Reply::Variant(field)`.
macro_rules! made_from {
    ($response:ident { $field:ident } <- $variant:ident) => {
        impl FromReply for $response {
            fn from_reply(reply: Reply) -> Result<Self, ApiError> {
                match reply {
                    Reply::$variant($field) => Ok($response { $field }),
                    other => Err(unexpected(other)),
                }
            }
        }
    };
}

made_from!(NamespaceResponse { namespace } <- Namespace);
made_from!(LockLeaseResponse { lease } <- LockLease);
made_from!(LockResponse { lock } <- Lock);
made_from!(SemaphoreResponse { semaphore } <- Semaphore);
made_from!(WaitGroupResponse { wait_group } <- WaitGroup);
made_from!(BarrierResponse { barrier } <- Barrier);

impl FromReply for AcquireSemaphoreResponse {
    fn from_reply(reply: Reply) -> Result<Self, ApiError> {
        match reply {
            Reply::SemaphoreAcquire(acquire) => Ok(acquire),
            other => Err(unexpected(other)),
        }
    }
}

impl FromReply for ArriveAtBarrierResponse {
    fn from_reply(reply: Reply) -> Result<Self, ApiError> {
        match reply {
            Reply::BarrierArrival {
                barrier,
                all_arrived,
            } => Ok(ArriveAtBarrierResponse {
                barrier,
                all_arrived,
            }),
            other => Err(unexpected(other)),
        }
    }
}

impl FromReply for AcquireReply {
    fn from_reply(reply: Reply) -> Result<Self, ApiError> {
        match reply {
            Reply::Acquire(acquire) => Ok(acquire),
            other => Err(unexpected(other)),
        }
    }
}

/// A delete or revoke answers `{}` whatever it did (absent already is success too).
impl FromReply for EmptyResponse {
    fn from_reply(_: Reply) -> Result<Self, ApiError> {
        Ok(EmptyResponse {})
    }
}
