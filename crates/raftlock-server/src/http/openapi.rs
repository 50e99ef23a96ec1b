//! The OpenAPI 3.1 document of every client-facing route, served at `GET /openapi.json` and
//! committed as `docs/openapi.json` (`make openapi`; a test fails when the two differ).
//!
//! Nothing here is hand-written JSON: the request, response and error schemas are derived
//! from the wire types of `raftlock-api` (utoipa), and the operations are built from the
//! route tables below — the hierarchical methods from [`raftlock_api::hierarchy::METHODS`],
//! checked against [`RPC`] by a unit test and against the live dispatch by the integration
//! test `tests/tests/openapi.rs`.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use raftlock_api::{admin, errors, hierarchy, locks};
use serde_json::{json, Value};
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{
    HttpMethod, Operation, OperationBuilder, Parameter, ParameterBuilder, ParameterIn,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, Required, ResponseBuilder, ResponsesBuilder};
use utoipa::{IntoParams, OpenApi as _};

use crate::node::SharedNode;

/// `GET /openapi.json`: public, like `/healthz` (it describes the API, it reveals no state).
pub fn routes() -> Router<SharedNode> {
    Router::new().route("/openapi.json", get(serve))
}

async fn serve() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
        .into_response()
}

/// The document as pretty JSON with a final newline (the form `docs/openapi.json` has).
pub fn document_json() -> String {
    let mut text = document()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    text.push('\n');
    text
}

/// Every schema of the wire contract; nested types are collected by utoipa.
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(
    errors::LocksError,
    errors::RpcError,
    locks::TtlRequest,
    locks::LeaseResponse,
    locks::LockStatus,
    locks::LockList,
    hierarchy::CreateNamespaceRequest,
    hierarchy::NamespaceRequest,
    hierarchy::UpdateNamespaceRequest,
    hierarchy::ListNamespacesRequest,
    hierarchy::CreateLockLeaseRequest,
    hierarchy::RefreshLockLeaseRequest,
    hierarchy::LeaseRequest,
    hierarchy::ListLockLeasesRequest,
    hierarchy::AcquireLockRequest,
    hierarchy::ReleaseLockRequest,
    hierarchy::LockRequest,
    hierarchy::ListLocksRequest,
    hierarchy::ListWaitersRequest,
    hierarchy::NamespaceResponse,
    hierarchy::LockLeaseResponse,
    hierarchy::LockResponse,
    hierarchy::EmptyResponse,
    hierarchy::AcquireLockResponse,
    hierarchy::ListNamespacesResponse,
    hierarchy::ListLockLeasesResponse,
    hierarchy::ListLocksResponse,
    hierarchy::ListWaitersResponse,
    admin::Project,
    admin::ProjectList,
    admin::NewProjectRequest,
    admin::ProjectPatch,
    admin::NewKeyRequest,
    admin::NewKey,
    admin::ClusterView,
    admin::ClusterHealth,
    admin::NewLearnerRequest,
    admin::VotersRequest,
    admin::MoveLeaderRequest,
)))]
struct Schemas;

/// The whole document.
pub fn document() -> OpenApi {
    let mut doc = Schemas::openapi();
    doc.info.title = "raftlock".to_string();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    doc.info.description = Some(DESCRIPTION.to_string());
    doc.info.license = None;
    doc.info.contact = None;
    if let Some(components) = doc.components.as_mut() {
        let bearer = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "A project key (service-role, or scoped with `locks.manage`) for the lock APIs; \
                 the platform token of the node's configuration for the admin API.",
            ))
            .build();
        components.add_security_scheme(BEARER, SecurityScheme::Http(bearer));
    }
    doc.tags = Some(vec![
        tag(TAG_LOCKS, "Project locks: named leases with a TTL, a caller-chosen ownership token and a fencing token."),
        tag(TAG_RPC, "Hierarchical locks: namespaces, server-side leases, shared/exclusive locks on `/`-separated paths, blocking acquire."),
        tag(TAG_ADMIN, "Projects, keys, membership, the cluster view and backups (platform token)."),
        tag(TAG_HEALTH, "Liveness, readiness, metrics and this document (no credential)."),
    ]);
    let fixed = project_lock_operations()
        .into_iter()
        .chain(admin_operations())
        .chain(health_operations())
        .map(|(path, method, op)| (path.to_string(), method, op));
    for (path, method, op) in fixed.chain(hierarchical_operations()) {
        doc.paths.add_path_operation(path, vec![method], op);
    }
    doc
}

const DESCRIPTION: &str = "A Raft-replicated lock service. Every node serves this API; a \
follower forwards to the leader. Without a quorum every lock call answers 503 and decides \
nothing. Errors of the project-lock and admin APIs are `{\"error\",\"code\"}`; errors of the \
hierarchical API are `{\"code\",\"message\"}` with gRPC status names. docs/api.md is the \
reference for humans.";

const BEARER: &str = "bearer";
const TAG_LOCKS: &str = "project-locks";
const TAG_RPC: &str = "hierarchical-locks";
const TAG_ADMIN: &str = "admin";
const TAG_HEALTH: &str = "health";

fn tag(name: &str, description: &str) -> utoipa::openapi::tag::Tag {
    TagBuilder::new()
        .name(name)
        .description(Some(description))
        .build()
}

/// Which error body an operation answers with.
#[derive(Clone, Copy)]
enum Dialect {
    Locks,
    Rpc,
}

impl Dialect {
    fn schema(self) -> &'static str {
        match self {
            Dialect::Locks => "LocksError",
            Dialect::Rpc => "RpcError",
        }
    }
}

/// One operation being described.
struct Op {
    tag: &'static str,
    id: String,
    summary: String,
    dialect: Dialect,
    secured: bool,
    params: Vec<Parameter>,
    body: Option<(&'static str, Value)>,
    responses: ResponsesBuilder,
}

impl Op {
    fn new(tag: &'static str, id: &str, summary: &str, dialect: Dialect) -> Op {
        Op {
            tag,
            id: id.to_string(),
            summary: summary.to_string(),
            dialect,
            secured: true,
            params: vec![request_id_param()],
            body: None,
            responses: ResponsesBuilder::new(),
        }
    }

    fn public(mut self) -> Op {
        self.secured = false;
        self.params.clear();
        self
    }

    fn param(mut self, p: Parameter) -> Op {
        self.params.push(p);
        self
    }

    fn params(mut self, ps: impl IntoIterator<Item = Parameter>) -> Op {
        self.params.extend(ps);
        self
    }

    /// A JSON body of schema `schema`, with an example.
    fn body(mut self, schema: &'static str, example: Value) -> Op {
        self.body = Some((schema, example));
        self
    }

    /// A JSON answer of schema `schema`.
    fn ok(mut self, status: u16, description: &str, schema: &str) -> Op {
        let content = ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(schema)))
            .build();
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", content)
            .header(REQUEST_ID, request_id_header());
        self.responses = self
            .responses
            .response(status.to_string(), response.build());
        self
    }

    /// An answer without a body.
    fn empty(mut self, status: u16, description: &str) -> Op {
        let response = ResponseBuilder::new()
            .description(description)
            .header(REQUEST_ID, request_id_header());
        self.responses = self
            .responses
            .response(status.to_string(), response.build());
        self
    }

    /// A plain-text answer.
    fn text(mut self, status: u16, description: &str, content_type: &str) -> Op {
        let content = ContentBuilder::new()
            .schema(Some(string_schema(None, None, None)))
            .build();
        let response = ResponseBuilder::new()
            .description(description)
            .content(content_type, content);
        self.responses = self
            .responses
            .response(status.to_string(), response.build());
        self
    }

    /// Error answers, each with the codes it can carry.
    fn errors(mut self, statuses: &[u16]) -> Op {
        for &status in statuses {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(self.dialect.schema())))
                .build();
            let mut response = ResponseBuilder::new()
                .description(error_description(self.dialect, status))
                .content("application/json", content)
                .header(REQUEST_ID, request_id_header());
            if matches!(status, 429 | 503) {
                let retry_after = HeaderBuilder::new()
                    .schema(
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(0)),
                    )
                    .description(Some("Seconds to wait before retrying."))
                    .build();
                response = response.header("Retry-After", retry_after);
            }
            self.responses = self
                .responses
                .response(status.to_string(), response.build());
        }
        self
    }

    /// The usual errors of an authenticated call that is decided by the leader.
    fn lock_errors(self, extra: &[u16]) -> Op {
        let mut statuses = vec![400, 401, 403, 413, 429, 503];
        statuses.extend_from_slice(extra);
        statuses.sort_unstable();
        self.errors(&statuses)
    }

    fn build(self) -> Operation {
        let mut op = OperationBuilder::new()
            .tag(self.tag)
            .operation_id(Some(self.id))
            .summary(Some(self.summary))
            .parameters(Some(self.params))
            .responses(self.responses.build());
        if let Some((schema, example)) = self.body {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(schema)))
                .example(Some(example))
                .build();
            op = op.request_body(Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content("application/json", content)
                    .build(),
            ));
        }
        if self.secured {
            op = op.security(SecurityRequirement::new(BEARER, Vec::<String>::new()));
        }
        op.build()
    }
}

const REQUEST_ID: &str = "X-Volcano-Request-Id";

fn string_schema(pattern: Option<&str>, min: Option<usize>, max: Option<usize>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(pattern)
        .min_length(min)
        .max_length(max)
}

fn uuid_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::Custom("uuid".to_string())))
}

fn request_id_header() -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String))
        .description(Some(
            "The request's id: the client's own, or one the server made up.",
        ))
        .build()
}

fn request_id_param() -> Parameter {
    ParameterBuilder::new()
        .name(REQUEST_ID)
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "A UUID per logical operation, reused on its retries: a write carrying it is \
             applied once. Echoed on the answer; made up by the server when absent.",
        ))
        .schema(Some(uuid_schema()))
        .build()
}

fn path_param(name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

fn key_param() -> Parameter {
    path_param(
        "key",
        "The lock's key: 1–128 of letters, digits, `.`, `_`, `:`, `-`.",
        string_schema(Some("^[A-Za-z0-9._:-]{1,128}$"), Some(1), Some(128)),
    )
}

fn lock_token_param() -> Parameter {
    ParameterBuilder::new()
        .name("X-Volcano-Lock-Token")
        .parameter_in(ParameterIn::Header)
        .required(Required::True)
        .description(Some(
            "The caller's ownership token: a UUID generated once per lease and sent on every \
             call about it.",
        ))
        .schema(Some(uuid_schema()))
        .build()
}

fn error_description(dialect: Dialect, status: u16) -> String {
    use errors::{LocksErrorCode as L, RpcErrorCode as R};
    let codes: Vec<&str> = match (dialect, status) {
        (Dialect::Locks, 400 | 413) => vec![L::InvalidRequest.as_str()],
        (Dialect::Locks, 401) => vec![L::Unauthorized.as_str()],
        (Dialect::Locks, 403) => vec![L::Forbidden.as_str()],
        (Dialect::Locks, 404) => vec![L::NotFound.as_str()],
        (Dialect::Locks, 409) => vec![
            L::LockHeld.as_str(),
            L::LockOwnershipLost.as_str(),
            L::AlreadyExists.as_str(),
            L::Conflict.as_str(),
            L::MembershipChangeFailed.as_str(),
            L::LeaderNotMoved.as_str(),
        ],
        (Dialect::Locks, 429) => vec![L::LockRateLimited.as_str(), L::ResourceExhausted.as_str()],
        (Dialect::Locks, 503) => vec![L::LockServiceUnavailable.as_str()],
        (Dialect::Rpc, 400 | 413) => vec![R::InvalidArgument.as_str()],
        (Dialect::Rpc, 401) => vec![R::Unauthenticated.as_str()],
        (Dialect::Rpc, 403) => vec![R::PermissionDenied.as_str()],
        (Dialect::Rpc, 404) => vec![R::NotFound.as_str()],
        (Dialect::Rpc, 409) => vec![R::AlreadyExists.as_str(), R::FailedPrecondition.as_str()],
        (Dialect::Rpc, 429) => vec![R::ResourceExhausted.as_str()],
        (Dialect::Rpc, 503) => vec![R::Unavailable.as_str()],
        _ => vec![],
    };
    let what = match status {
        400 => "Invalid input; nothing changed.",
        401 => "Missing or unknown credential.",
        403 => "The credential may not call this route.",
        404 => "Not found.",
        409 => "Refused by the current state; nothing changed.",
        413 => "The body exceeds 64 KiB.",
        429 => "Rate limit or quota; see Retry-After.",
        503 => "No quorum or no leader within the commit timeout; nothing was decided. Retry.",
        _ => "Error.",
    };
    let codes: Vec<String> = codes.iter().map(|c| format!("`{c}`")).collect();
    format!("{what} Codes: {}.", codes.join(", "))
}

fn project_lock_operations() -> Vec<(&'static str, HttpMethod, Operation)> {
    let ttl = json!({ "ttl_seconds": 60 });
    vec![
        (
            "/locks/{key}/lease",
            HttpMethod::Post,
            Op::new(
                TAG_LOCKS,
                "acquireProjectLock",
                "Acquire (or re-acquire) a lock",
                Dialect::Locks,
            )
            .params([key_param(), lock_token_param()])
            .body("TtlRequest", ttl.clone())
            .ok(
                200,
                "Acquired: the lease's expiry and fencing token.",
                "LeaseResponse",
            )
            .lock_errors(&[409])
            .build(),
        ),
        (
            "/locks/{key}/lease",
            HttpMethod::Patch,
            Op::new(
                TAG_LOCKS,
                "renewProjectLock",
                "Renew the caller's lease",
                Dialect::Locks,
            )
            .params([key_param(), lock_token_param()])
            .body("TtlRequest", ttl)
            .ok(
                200,
                "Renewed: the new expiry, the same fencing token.",
                "LeaseResponse",
            )
            .lock_errors(&[409])
            .build(),
        ),
        (
            "/locks/{key}/lease",
            HttpMethod::Delete,
            Op::new(
                TAG_LOCKS,
                "releaseProjectLock",
                "Release the caller's lease",
                Dialect::Locks,
            )
            .params([key_param(), lock_token_param()])
            .empty(204, "Released (also when the lock was absent).")
            .lock_errors(&[409])
            .build(),
        ),
        (
            "/locks/{key}",
            HttpMethod::Get,
            Op::new(
                TAG_LOCKS,
                "readProjectLock",
                "Read a lock (linearizable)",
                Dialect::Locks,
            )
            .param(key_param())
            .ok(
                200,
                "`held:false` means an acquire would succeed now.",
                "LockStatus",
            )
            .lock_errors(&[])
            .build(),
        ),
        (
            "/locks/{key}",
            HttpMethod::Delete,
            Op::new(
                TAG_LOCKS,
                "forceReleaseProjectLock",
                "Force-release a lock, whoever holds it",
                Dialect::Locks,
            )
            .param(key_param())
            .empty(204, "Released (also when absent).")
            .lock_errors(&[])
            .build(),
        ),
        (
            "/locks",
            HttpMethod::Get,
            Op::new(
                TAG_LOCKS,
                "listProjectLocks",
                "List the project's locks (extension)",
                Dialect::Locks,
            )
            .params(locks::ListLocksQuery::into_params(|| None))
            .ok(200, "One page, in key order.", "LockList")
            .lock_errors(&[])
            .build(),
        ),
    ]
}

/// The hierarchical methods: name, request schema, response schema, summary, example.
const RPC: &[(&str, &str, &str, &str)] = &[
    (
        "CreateNamespace",
        "CreateNamespaceRequest",
        "NamespaceResponse",
        "Create a namespace (`already_exists` on a duplicate)",
    ),
    (
        "GetNamespace",
        "NamespaceRequest",
        "NamespaceResponse",
        "Get a namespace",
    ),
    (
        "UpdateNamespace",
        "UpdateNamespaceRequest",
        "NamespaceResponse",
        "Replace a namespace's description and metadata",
    ),
    (
        "DeleteNamespace",
        "NamespaceRequest",
        "EmptyResponse",
        "Delete a namespace and everything inside (absent: no error)",
    ),
    (
        "ListNamespaces",
        "ListNamespacesRequest",
        "ListNamespacesResponse",
        "List namespaces",
    ),
    (
        "CreateLockLease",
        "CreateLockLeaseRequest",
        "LockLeaseResponse",
        "Create a lease",
    ),
    (
        "GetLockLease",
        "LeaseRequest",
        "LockLeaseResponse",
        "Get a lease",
    ),
    (
        "RefreshLockLease",
        "RefreshLockLeaseRequest",
        "LockLeaseResponse",
        "Extend a lease and its locks",
    ),
    (
        "RevokeLockLease",
        "LeaseRequest",
        "EmptyResponse",
        "Revoke a lease, releasing its locks",
    ),
    (
        "ListLockLeases",
        "ListLockLeasesRequest",
        "ListLockLeasesResponse",
        "List leases",
    ),
    (
        "AcquireLock",
        "AcquireLockRequest",
        "AcquireLockResponse",
        "Acquire a lock, waiting up to timeout_seconds in its FIFO queue",
    ),
    (
        "ReleaseLock",
        "ReleaseLockRequest",
        "LockResponse",
        "Release a lease's hold on a lock",
    ),
    ("GetLock", "LockRequest", "LockResponse", "Get a lock"),
    (
        "DeleteLock",
        "LockRequest",
        "EmptyResponse",
        "Delete a lock, dropping its holders and waiters",
    ),
    (
        "ListLocks",
        "ListLocksRequest",
        "ListLocksResponse",
        "List held locks",
    ),
    (
        "ListWaiters",
        "ListWaitersRequest",
        "ListWaitersResponse",
        "List queued acquires (extension)",
    ),
];

fn rpc_example(method: &str) -> Value {
    let ns = "billing";
    let lease = "ls_3TqJ0e5rTzVvYpXcH1kA9bW2nLmQ";
    match method {
        "CreateNamespace" => {
            json!({ "name": ns, "description": "billing workers", "metadata": { "team": "payments" } })
        }
        "UpdateNamespace" => {
            json!({ "namespace_name": ns, "description": "billing workers", "metadata": {}, "expected_version": 1 })
        }
        "ListNamespaces" => json!({ "limit": 100, "pagination_token": "" }),
        "CreateLockLease" => {
            json!({ "namespace_name": ns, "process_id": "worker-7", "ttl_seconds": 30 })
        }
        "RefreshLockLease" => json!({ "namespace_name": ns, "lease_id": lease, "ttl_seconds": 30 }),
        "GetLockLease" | "RevokeLockLease" => json!({ "namespace_name": ns, "lease_id": lease }),
        "ListLockLeases" => {
            json!({ "namespace_name": ns, "process_id": "", "limit": 100, "pagination_token": "" })
        }
        "AcquireLock" => {
            json!({ "namespace_name": ns, "lock_name": "invoices/2026", "lease_id": lease, "exclusive": true, "timeout_seconds": 10, "metadata": {} })
        }
        "ReleaseLock" => {
            json!({ "namespace_name": ns, "lock_name": "invoices/2026", "lease_id": lease })
        }
        "GetLock" | "DeleteLock" => json!({ "namespace_name": ns, "lock_name": "invoices/2026" }),
        "ListLocks" => json!({ "namespace_name": ns, "limit": 100, "pagination_token": "" }),
        _ => json!({ "namespace_name": ns }),
    }
}

fn hierarchical_operations() -> Vec<(String, HttpMethod, Operation)> {
    RPC.iter()
        .map(|&(method, request, response, summary)| {
            let path = format!("/v1beta/{method}");
            let op = Op::new(TAG_RPC, method, summary, Dialect::Rpc)
                .body(request, rpc_example(method))
                .ok(200, "The response message.", response)
                .lock_errors(&[404, 409])
                .build();
            (path, HttpMethod::Post, op)
        })
        .collect()
}

fn admin_operations() -> Vec<(&'static str, HttpMethod, Operation)> {
    let project = || {
        path_param(
            "name",
            "The project.",
            string_schema(None, Some(1), Some(64)),
        )
    };
    let admin = |id: &str, summary: &str| Op::new(TAG_ADMIN, id, summary, Dialect::Locks);
    let common = [400, 401, 403, 413, 503];
    let with = |extra: &[u16]| {
        let mut v = common.to_vec();
        v.extend_from_slice(extra);
        v.sort_unstable();
        v
    };
    vec![
        (
            "/admin/v1/projects",
            HttpMethod::Post,
            admin("createProject", "Create a project")
                .body("NewProjectRequest", json!({ "name": "acme" }))
                .ok(201, "Created.", "Project")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/projects",
            HttpMethod::Get,
            admin("listProjects", "List projects")
                .ok(200, "Every project.", "ProjectList")
                .errors(&with(&[]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}",
            HttpMethod::Get,
            admin("getProject", "Get a project")
                .param(project())
                .ok(200, "The project.", "Project")
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}",
            HttpMethod::Patch,
            admin("updateProject", "Change a project's rate limits")
                .param(project())
                .body("ProjectPatch", json!({ "lock_ops_per_minute": 1200 }))
                .ok(200, "The project as it is now.", "Project")
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}/keys",
            HttpMethod::Post,
            admin("createKey", "Create a key (its secret is shown once)")
                .param(project())
                .body(
                    "NewKeyRequest",
                    json!({ "kind": "scoped", "scopes": ["locks.manage"] }),
                )
                .ok(
                    201,
                    "Created; `secret` is not stored and never shown again.",
                    "NewKey",
                )
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/projects/{name}/keys/{key_id}",
            HttpMethod::Delete,
            admin("revokeKey", "Revoke a key")
                .params([
                    project(),
                    path_param(
                        "key_id",
                        "The key's id.",
                        string_schema(None, Some(1), None),
                    ),
                ])
                .empty(204, "Revoked on every node once committed.")
                .errors(&with(&[404]))
                .build(),
        ),
        (
            "/admin/v1/cluster/learners",
            HttpMethod::Post,
            admin("addLearner", "Add a learner and wait for it to catch up")
                .body(
                    "NewLearnerRequest",
                    json!({ "node_id": 4, "addr": "10.0.0.4:7001" }),
                )
                .ok(200, "Added and caught up.", "ClusterView")
                .ok(202, "Added; still catching up.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster/voters",
            HttpMethod::Put,
            admin("changeVoters", "Replace the voter set")
                .body("VotersRequest", json!({ "voters": [1, 2, 3] }))
                .ok(200, "Changed.", "ClusterView")
                .ok(202, "Accepted; still in progress.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster/leader",
            HttpMethod::Post,
            admin("moveLeader", "Hand leadership to another voter")
                .body("MoveLeaderRequest", json!({ "node_id": 2 }))
                .ok(200, "The new view.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster/nodes/{id}",
            HttpMethod::Delete,
            admin("removeNode", "Remove a node from the membership")
                .param(path_param(
                    "id",
                    "The node id.",
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0)),
                ))
                .ok(200, "Removed.", "ClusterView")
                .ok(202, "Accepted; still in progress.", "ClusterView")
                .errors(&with(&[409]))
                .build(),
        ),
        (
            "/admin/v1/cluster",
            HttpMethod::Get,
            admin("clusterView", "This node's view of the cluster")
                .ok(200, "The view.", "ClusterView")
                .errors(&[401, 403])
                .build(),
        ),
        (
            "/admin/v1/cluster/status",
            HttpMethod::Get,
            admin("clusterStatus", "Every member's view and health")
                .ok(200, "The members as probed by this node.", "ClusterHealth")
                .errors(&[401, 403])
                .build(),
        ),
        (
            "/admin/v1/snapshot",
            HttpMethod::Get,
            admin(
                "snapshot",
                "Download a backup of the whole state (leader only)",
            )
            .text(
                200,
                "The backup file (`raftlock snapshot restore` reads it).",
                "application/octet-stream",
            )
            .errors(&[401, 403, 503])
            .build(),
        ),
    ]
}

fn health_operations() -> Vec<(&'static str, HttpMethod, Operation)> {
    let op = |id: &str, summary: &str| Op::new(TAG_HEALTH, id, summary, Dialect::Locks).public();
    vec![
        (
            "/healthz",
            HttpMethod::Get,
            op("healthz", "Liveness: the process serves HTTP")
                .text(200, "`ok`.", "text/plain")
                .build(),
        ),
        (
            "/readyz",
            HttpMethod::Get,
            op("readyz", "Readiness: a member of a cluster with a leader")
                .text(200, "`ready, leader N`.", "text/plain")
                .text(503, "`not ready: no leader`.", "text/plain")
                .build(),
        ),
        (
            "/metrics",
            HttpMethod::Get,
            op("metrics", "Prometheus metrics")
                .text(200, "Prometheus text format.", "text/plain")
                .build(),
        ),
        (
            "/openapi.json",
            HttpMethod::Get,
            op("openapi", "This document")
                .text(200, "OpenAPI 3.1.", "application/json")
                .build(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hierarchical_method_is_described_once() {
        let described: Vec<&str> = RPC.iter().map(|(m, ..)| *m).collect();
        assert_eq!(described, hierarchy::METHODS);
    }

    #[test]
    fn every_referenced_schema_exists() {
        let text = document_json();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut missing = vec![];
        for name in text.split("#/components/schemas/").skip(1) {
            let name = name.split('"').next().unwrap();
            if !schemas.contains_key(name) {
                missing.push(name.to_string());
            }
        }
        assert!(missing.is_empty(), "dangling references: {missing:?}");
    }

    /// The committed `docs/openapi.json` is the generated document: regenerate it with
    /// `make openapi` after changing a wire type or a route.
    #[test]
    fn committed_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == document_json(),
            "docs/openapi.json differs from the generated document: run `make openapi`"
        );
    }
}
