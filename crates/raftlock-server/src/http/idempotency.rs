//! Client request ids: a write that carries the client's own `X-Volcano-Request-Id` (a UUID it
//! reuses on retries) is proposed as [`Op::Once`], so the state machine applies it once and
//! answers every retry within ten minutes with the first outcome
//! ([`raftlock_core::request_ids`]). It also makes the call safe for a follower to repeat at a
//! new leader when its first attempt's fate is unknown ([`super::forward`]).
//!
//! A write that comes without an id gets one minted by the node that received it
//! ([`raftlock_core::request_ids::node_minted`]), proposed the same way. A client's retry of
//! such a write is a new call (the client never saw the id), but the node's own resends are
//! not: a follower resends a call whose answer was lost, and any node resends a call that
//! openraft answered `ForwardToLeader` — which openraft 0.9 also answers for an entry it
//! truncated, an entry a later leader may still commit (Raft's figure-8 case). Under one id a
//! second apply is answered with the first outcome, so neither can take effect twice (a
//! force release resent after a waiting client took the key would release that client's
//! lock).
//!
//! [`note`] runs before the server makes up the `X-Volcano-Request-Id` it echoes (which is
//! new on every retry and never used here); between nodes the call's id travels in
//! [`FORWARDED_REQUEST_ID_HEADER`].

use std::convert::Infallible;

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use raftlock_api::methods::{self, effect_of, Effect};
use raftlock_core::{request_ids, Nanos, Op};

use super::resend::FirstSent;
use crate::group::Group;

use super::errors::{ApiError, Dialect};
use crate::headers::{
    FORWARDED_REQUEST_ID_HEADER, HOPS_HEADER, NODE_REQUEST_ID_HEADER, REQUEST_ID_HEADER,
};

/// The request ids of a call: the client's own (a UUID it sent, reused on its retries), and
/// the one the node that received the call minted for it (every lock write has one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientRequestId {
    /// The client's `X-Volcano-Request-Id`, when it is a UUID.
    pub client: Option<u128>,
    /// Minted by the node the client called ([`request_ids::node_minted`]); sent along on
    /// every forward, so every attempt of the call proposes under the same id.
    pub minted: Option<u128>,
    /// When this node decides a resend of the call (an earlier attempt may have been
    /// proposed): what bounds its first attempt's apply time (`super::resend`). The call is
    /// then proposed as [`Op::Resent`], its bound resolved in the time of the group that
    /// decides it ([`ClientRequestId::bound_in`]).
    pub resent: Option<FirstSent>,
}

impl ClientRequestId {
    /// `op` proposed once per call: under the client's id when it sent one, else under the
    /// minted one. For the writes whose repeat could answer differently (releases, creates…).
    pub fn wrap(self, op: Op) -> Op {
        self.wrap_if(true, op)
    }

    /// `op` proposed once per call: under the client's id when `client_id_covers` this write
    /// (see [`remembers`]) and it sent one, else under the minted id. A minted id is never
    /// reused for another call, so it covers every write, acquire and renew included.
    pub fn wrap_if(self, client_id_covers: bool, op: Op) -> Op {
        let id = match self.client {
            Some(id) if client_id_covers => Some(id),
            _ => self.minted,
        };
        let op = Box::new(op);
        match (id, self.resent) {
            (Some(request_id), None) => Op::Once { request_id, op },
            // The earliest time there is until [`ClientRequestId::bound_in`] resolves it: a
            // resend proposed unresolved is refused unless its id is remembered.
            (Some(request_id), Some(_)) => Op::Resent {
                request_id,
                after: Nanos::MIN,
                op,
            },
            (None, _) => *op,
        }
    }

    /// `op` (as [`ClientRequestId::wrap`] made it) to be decided by `group`: a resend's bound
    /// in that group's time — a bound of another group (routing chose another one before
    /// the handler did) is never taken for it.
    pub fn bound_in(self, group: &Group, mut op: Op) -> Op {
        if let (Op::Resent { after, .. }, Some(first)) = (&mut op, self.resent) {
            *after = first.after_in(group.id, group.applied_time());
        }
        op
    }

    /// Whether the call has an id to propose a write under.
    pub fn covers_any(self) -> bool {
        self.client.is_some() || self.minted.is_some()
    }

    /// Whether a resend of `method path` is answered with the first outcome: a minted id
    /// covers every lock write, a client's id the ones the leader remembers it for.
    pub fn covers(self, method: &Method, path: &str) -> bool {
        self.minted.is_some() || (self.client.is_some() && remembers(method, path))
    }
}

/// Middleware (outermost, before the server makes up the id it echoes): refuses a malformed
/// client id ([`malformed_client_id`]), records the client's own id, and mints one for a
/// lock write (or takes the one the forwarding peer minted).
pub async fn note(mut req: Request, next: Next) -> Response {
    if let Some(refusal) = malformed_client_id(req.uri().path(), req.headers()) {
        return refusal.into_response();
    }
    let ids = ids_of(req.method(), req.uri().path(), req.headers());
    req.extensions_mut().insert(ids);
    next.run(req).await
}

/// `400` for an API call (lock, hierarchical or admin route) whose `X-Volcano-Request-Id` is
/// present but not a UUID in its hyphenated form — empty included. The document says
/// `format: uuid`; taking such a value silently would leave the client believing its
/// retries are applied once while they are not. A peer's forward is not checked here: the
/// id it relays was checked by the node the client called. The body is not read, so the
/// connection closes after the answer.
fn malformed_client_id(path: &str, headers: &HeaderMap) -> Option<ApiError> {
    let api =
        path.starts_with("/locks") || path.starts_with("/v1beta/") || path.starts_with("/admin/");
    if !api || headers.contains_key(HOPS_HEADER) {
        return None;
    }
    let value = headers.get(REQUEST_ID_HEADER)?;
    let valid = value.to_str().is_ok_and(is_hyphenated_uuid);
    (!valid).then(|| {
        ApiError::bad_request(
            Dialect::of_path(path),
            format!(
                "{REQUEST_ID_HEADER} must be a UUID (8-4-4-4-12 hex digits), the same on each \
                 retry of one operation; omit it to let the server make one up"
            ),
        )
        .closing()
    })
}

/// Whether `s` is a UUID written as `format: uuid` (RFC 9562) has it: 36 characters,
/// hyphenated.
pub fn is_hyphenated_uuid(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::try_parse(s).is_ok()
}

fn ids_of(method: &Method, path: &str, headers: &HeaderMap) -> ClientRequestId {
    let uuid_of = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| uuid::Uuid::try_parse(v.trim()).ok())
            .map(|u| u.as_u128())
    };
    // A peer's forward carries the call's ids in headers of its own (the request id header it
    // relays may have been made up by that peer); the peer's secret is checked later.
    if headers.contains_key(HOPS_HEADER) {
        ClientRequestId {
            client: uuid_of(FORWARDED_REQUEST_ID_HEADER),
            minted: uuid_of(NODE_REQUEST_ID_HEADER).filter(|id| request_ids::is_node_minted(*id)),
            resent: None,
        }
    } else {
        ClientRequestId {
            client: uuid_of(REQUEST_ID_HEADER),
            // The thread's CSPRNG (seeded from the OS): `Uuid::new_v4` asks the kernel
            // (`getrandom`) each time — a system call for every write.
            minted: mints(method, path).then(|| request_ids::node_minted(rand::random::<u128>())),
            resent: None,
        }
    }
}

/// Whether a call gets a node-minted id: every write of the lock APIs (reads come as POSTs
/// too; they propose nothing, so the id is never used).
pub fn mints(method: &Method, path: &str) -> bool {
    method != Method::GET && (path.starts_with("/locks/") || path.starts_with("/v1beta/"))
}

impl<S: Send + Sync> FromRequestParts<S> for ClientRequestId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(parts.extensions.get().copied().unwrap_or_default())
    }
}

/// Whether `method path` is applied once per client request id: the once-only writes of the
/// method registry ([`Effect::Once`]) — project-lock release and force release;
/// hierarchical creates, updates, deletes, revokes and releases. Not the repeatable writes
/// (acquire, renew, `RefreshLockLease`, `AcquireLock`…): they are already safe to repeat,
/// and remembering them would let a client that reuses one id across renewals get a stale
/// answer while its lease is not extended.
pub fn remembers(method: &Method, path: &str) -> bool {
    effect_of(method.as_str(), path) == Some(Effect::Once)
}

/// `op` (a hierarchical write of `project`, made by a call of `method`) as proposed: once
/// per call (see [`ClientRequestId::wrap_if`]), except in a blocking method, whose waiter id
/// already makes a resend the same wait (its enqueueing acquire and its cancel alike).
pub fn wrap_hier(
    ids: ClientRequestId,
    method: &'static methods::Method,
    project: String,
    op: raftlock_core::command::HierOp,
) -> Op {
    let op = Op::Hier { project, op };
    if method.blocks {
        op
    } else {
        ids.wrap_if(method.effect == Effect::Once, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_remembered_and_reads_and_acquires_are_not() {
        assert!(remembers(&Method::DELETE, "/locks/a/lease"));
        assert!(remembers(&Method::DELETE, "/locks/a"));
        assert!(remembers(&Method::POST, "/v1beta/CreateLockLease"));
        assert!(!remembers(&Method::POST, "/locks/a/lease"));
        assert!(!remembers(&Method::PATCH, "/locks/a/lease"));
        assert!(!remembers(&Method::POST, "/v1beta/RefreshLockLease"));
        assert!(!remembers(&Method::GET, "/locks/a"));
        assert!(!remembers(&Method::POST, "/v1beta/AcquireLock"));
        assert!(!remembers(&Method::POST, "/v1beta/GetLock"));
        assert!(!remembers(&Method::POST, "/admin/v1/projects"));
    }

    #[test]
    fn a_client_id_that_is_not_a_hyphenated_uuid_is_refused_on_api_routes_only() {
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(REQUEST_ID_HEADER, value.parse().unwrap());
            h
        };
        let good = "6f1c1a2e-9d55-4c1e-8a7e-3f2b1c0d9e8f";
        for bad in [
            "",
            "x",
            "6f1c1a2e9d554c1e8a7e3f2b1c0d9e8f",
            "{6f1c1a2e-9d55-4c1e-8a7e-3f2b1c0d9e8f}",
        ] {
            for path in [
                "/locks/a/lease",
                "/locks",
                "/v1beta/AcquireLock",
                "/admin/v1/projects",
            ] {
                let refused = malformed_client_id(path, &with(bad)).expect("refused");
                assert_eq!(
                    refused.status,
                    axum::http::StatusCode::BAD_REQUEST,
                    "{path} {bad:?}"
                );
            }
            assert!(malformed_client_id("/healthz", &with(bad)).is_none());
        }
        assert!(malformed_client_id("/locks/a/lease", &with(good)).is_none());
        assert!(malformed_client_id("/locks/a/lease", &HeaderMap::new()).is_none());
        let mut forwarded = with("");
        forwarded.insert(HOPS_HEADER, "1".parse().unwrap());
        assert!(malformed_client_id("/locks/a/lease", &forwarded).is_none());
    }

    #[test]
    fn lock_writes_get_a_minted_id_and_admin_calls_do_not() {
        assert!(mints(&Method::DELETE, "/locks/a"));
        assert!(mints(&Method::POST, "/locks/a/lease"));
        assert!(mints(&Method::POST, "/v1beta/ReleaseLock"));
        assert!(!mints(&Method::GET, "/locks/a"));
        assert!(!mints(&Method::POST, "/admin/v1/projects"));
    }

    #[test]
    fn a_write_is_proposed_under_the_client_id_it_covers_else_the_minted_one() {
        let minted = request_ids::node_minted(42);
        let client = uuid::Uuid::new_v4().as_u128();
        let op = || Op::CreateProject { name: "p".into() };
        let under = |op: Op| match op {
            Op::Once { request_id, .. } => Some(request_id),
            _ => None,
        };
        let both = ClientRequestId {
            client: Some(client),
            minted: Some(minted),
            resent: None,
        };
        assert_eq!(under(both.wrap(op())), Some(client));
        assert_eq!(under(both.wrap_if(false, op())), Some(minted));
        let none = ClientRequestId::default();
        assert_eq!(under(none.wrap(op())), None);
        assert!(both.covers(&Method::POST, "/locks/a/lease"));
        let client_only = ClientRequestId {
            client: Some(client),
            minted: None,
            resent: None,
        };
        assert!(!client_only.covers(&Method::POST, "/locks/a/lease"));
        assert!(client_only.covers(&Method::DELETE, "/locks/a"));

        use raftlock_core::command::HierOp;
        let facts = |name| methods::method(name).unwrap();
        let wait = HierOp::CancelWait {
            namespace: "n".into(),
            lock_name: "l".into(),
            lease_id: "x".into(),
            exclusive: true,
            waiter_id: "w".into(),
        };
        let in_acquire = wrap_hier(both, facts("AcquireLock"), "p".into(), wait);
        assert_eq!(under(in_acquire), None);
        let release = HierOp::ReleaseLock {
            namespace: "n".into(),
            lock_name: "l".into(),
            lease_id: "x".into(),
        };
        let released = wrap_hier(both, facts("ReleaseLock"), "p".into(), release.clone());
        assert_eq!(under(released), Some(client));
        let refreshed = wrap_hier(both, facts("RefreshLockLease"), "p".into(), release);
        assert_eq!(under(refreshed), Some(minted));
    }

    #[test]
    fn a_resend_is_proposed_as_one_and_bound_only_by_its_own_groups_time() {
        let minted = request_ids::node_minted(42);
        let op = || Op::CreateProject { name: "p".into() };
        let mut ids = ClientRequestId {
            client: None,
            minted: Some(minted),
            resent: None,
        };
        assert!(matches!(ids.wrap(op()), Op::Once { request_id, .. } if request_id == minted));
        ids.resent = Some(FirstSent {
            after: Some((0, 42_000)),
            ..FirstSent::default()
        });
        let unresolved = ids.wrap(op());
        assert!(
            matches!(unresolved, Op::Resent { request_id, after: Nanos::MIN, .. } if request_id == minted),
            "{unresolved:?}"
        );
    }
}
