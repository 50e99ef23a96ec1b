//! The OpenAPI 3.1 document of every client-facing route, served at `GET /openapi.json` and
//! committed as `docs/openapi.json` (`make openapi`; a test fails when the two differ).
//!
//! ## Layout
//! - this file: the document's frame (info, security, tags), the [`Op`] builder every
//!   operation is described with (parameters, bodies, answers, error codes), serving;
//! - [`operations`]: the route tables — project locks, hierarchical methods, admin, health.
//!
//! Nothing here is hand-written JSON: the request, response and error schemas are derived
//! from the wire types of `raftlock-api` (utoipa), and the operations are built from the
//! route tables below — the hierarchical methods from the method registry
//! ([`raftlock_api::methods::METHODS`]: schema names and summaries), checked against the live
//! dispatch by the integration test `tests/tests/openapi.rs`.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use raftlock_api::{admin, barriers, errors, hierarchy, locks, semaphores, wait_groups};
use serde_json::Value;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{
    Operation, OperationBuilder, Parameter, ParameterBuilder, ParameterIn,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, Required, ResponseBuilder, ResponsesBuilder};
use utoipa::OpenApi as _;

use crate::node::SharedNode;

mod operations;

use operations::{
    admin_operations, health_operations, hierarchical_operations, project_lock_operations,
};

/// `GET /openapi.json`: public, like `/healthz` (it describes the API, it reveals no state).
pub fn routes() -> Router<SharedNode> {
    Router::new().route("/openapi.json", get(serve))
}

/// The document is the same for the life of the process: built on the first request, then
/// served from memory.
async fn serve() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = DOCUMENT.get_or_init(document_json).clone();
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
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
    semaphores::CreateSemaphoreRequest,
    semaphores::SemaphoreRequest,
    semaphores::UpdateSemaphoreRequest,
    semaphores::ListSemaphoresRequest,
    semaphores::ListSemaphoreHoldersRequest,
    semaphores::AcquireSemaphoreRequest,
    semaphores::ReleaseSemaphoreRequest,
    semaphores::SemaphoreResponse,
    semaphores::AcquireSemaphoreResponse,
    semaphores::ListSemaphoresResponse,
    semaphores::ListSemaphoreHoldersResponse,
    wait_groups::CreateWaitGroupRequest,
    wait_groups::WaitGroupRequest,
    wait_groups::UpdateWaitGroupRequest,
    wait_groups::ListWaitGroupsRequest,
    wait_groups::CompleteJobsFromWaitGroupRequest,
    wait_groups::ListWaitGroupCompletedJobsRequest,
    wait_groups::WaitForWaitGroupRequest,
    wait_groups::WaitGroupResponse,
    wait_groups::WaitForWaitGroupResponse,
    wait_groups::ListWaitGroupsResponse,
    wait_groups::ListWaitGroupCompletedJobsResponse,
    barriers::CreateBarrierRequest,
    barriers::BarrierRequest,
    barriers::UpdateBarrierRequest,
    barriers::ListBarriersRequest,
    barriers::ArriveAtBarrierRequest,
    barriers::WaitAtBarrierRequest,
    barriers::ListBarrierParticipantsRequest,
    barriers::BarrierResponse,
    barriers::ArriveAtBarrierResponse,
    barriers::WaitAtBarrierResponse,
    barriers::ListBarriersResponse,
    barriers::ListBarrierParticipantsResponse,
    admin::Project,
    admin::ProjectList,
    raftlock_api::schemas::Scope,
    raftlock_api::schemas::ProjectName,
    admin::NewProjectRequest,
    admin::NewShardRequest,
    admin::Shard,
    admin::ShardList,
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
    optional_bodies_without_required_fields(&mut doc);
    doc
}

/// A request body whose schema requires no field may be left out: the server reads a missing
/// body as `{}` (every field at its default), so the document must not call it required.
fn optional_bodies_without_required_fields(doc: &mut OpenApi) {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    let Some(components) = doc.components.as_ref() else {
        return;
    };
    let requires_nothing = |name: &str| matches!(components.schemas.get(name), Some(RefOr::T(Schema::Object(o))) if o.required.is_empty());
    let mut optional = Vec::new();
    for (path, item) in &doc.paths.paths {
        for (method, op) in [
            ("post", &item.post),
            ("patch", &item.patch),
            ("put", &item.put),
        ] {
            let Some(body) = op.as_ref().and_then(|op| op.request_body.as_ref()) else {
                continue;
            };
            let schema = body.content.values().find_map(|c| match &c.schema {
                Some(RefOr::Ref(r)) => r.ref_location.rsplit('/').next().map(str::to_string),
                _ => None,
            });
            if schema.as_deref().is_some_and(requires_nothing) {
                optional.push((path.clone(), method));
            }
        }
    }
    for (path, method) in optional {
        let Some(item) = doc.paths.paths.get_mut(&path) else {
            continue;
        };
        let op = match method {
            "post" => item.post.as_mut(),
            "patch" => item.patch.as_mut(),
            _ => item.put.as_mut(),
        };
        if let Some(body) = op.and_then(|op| op.request_body.as_mut()) {
            body.required = Some(Required::False);
        }
    }
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
    /// A `200` whose body is a JSON object of any shape (this document itself).
    fn any_object(mut self, status: u16, description: &str) -> Op {
        let content = ContentBuilder::new()
            .schema(Some(ObjectBuilder::new().schema_type(Type::Object)))
            .build();
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", content);
        self.responses = self
            .responses
            .response(status.to_string(), response.build());
        self
    }

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
            if status == 503 {
                let unknown = HeaderBuilder::new()
                    .schema(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some(["true"])),
                    )
                    .description(Some(
                        "Present on a write whose first attempt may or may not have been applied \
                         and that the cluster can no longer tell apart (a resend of it was \
                         refused): a retry under the same request id could apply it twice.",
                    ))
                    .build();
                response = response.header(raftlock_api::headers::OUTCOME_UNKNOWN_HEADER, unknown);
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
             applied once. Echoed on the answer; made up by the server when absent. A value \
             that is not a hyphenated UUID (an empty one included) is refused with `400` \
             (`invalid_request`; `invalid_argument` on `/v1beta`) and the connection closed.",
        ))
        .schema(Some(uuid_schema().pattern(Some(
            "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
        ))))
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
        string_schema(Some(raftlock_api::locks::KEY_PATTERN), Some(1), Some(128)),
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
        503 => {
            "No quorum or no leader within the commit timeout: retry. With \
                `x-raftlock-outcome-unknown: true`, a write the cluster can no longer tell was \
                applied or not: read before acting again."
        }
        _ => "Error.",
    };
    let codes: Vec<String> = codes.iter().map(|c| format!("`{c}`")).collect();
    format!("{what} Codes: {}.", codes.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hierarchical_method_is_described_once() {
        let text = document_json();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let described: Vec<&str> = paths
            .keys()
            .filter_map(|p| p.strip_prefix("/v1beta/"))
            .collect();
        let mut registered: Vec<&str> = raftlock_api::methods::METHODS
            .iter()
            .map(|m| m.name)
            .collect();
        registered.sort_unstable();
        let mut described = described;
        described.sort_unstable();
        assert_eq!(described, registered);
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

    /// Every number the document states about a field is the validators' own constant
    /// (utoipa's attributes take literals, so the document cannot read the constants; this
    /// keeps the two from drifting apart).
    #[test]
    fn document_limits_are_the_validators_constants() {
        use raftlock_core::validate as v;
        let doc: Value = serde_json::from_str(&document_json()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let n = |x: u64| Value::from(x);
        let mut expected: Vec<(&str, &str, &str, Value)> = vec![
            ("TtlRequest", "ttl_seconds", "minimum", n(v::MIN_LOCK_TTL)),
            ("TtlRequest", "ttl_seconds", "maximum", n(v::MAX_LOCK_TTL)),
        ];
        for lease in ["CreateLockLeaseRequest", "RefreshLockLeaseRequest"] {
            expected.push((lease, "ttl_seconds", "minimum", n(v::MIN_LEASE_TTL)));
            expected.push((lease, "ttl_seconds", "maximum", n(v::MAX_LEASE_TTL)));
        }
        for blocking in [
            "AcquireLockRequest",
            "AcquireSemaphoreRequest",
            "WaitAtBarrierRequest",
            "WaitForWaitGroupRequest",
        ] {
            expected.push((blocking, "timeout_seconds", "minimum", n(0)));
            expected.push((
                blocking,
                "timeout_seconds",
                "maximum",
                n(v::MAX_ACQUIRE_TIMEOUT),
            ));
        }
        for (name, schema) in schemas.as_object().unwrap() {
            if schema["properties"]["limit"].is_object() {
                expected.push((name, "limit", "maximum", n(v::MAX_PAGE.into())));
            }
            if schema["properties"]["description"].is_object() && name.ends_with("Request") {
                let max = v::MAX_DESCRIPTION as u64;
                expected.push((name, "description", "maxLength", n(max)));
            }
        }
        for group in ["CreateWaitGroupRequest", "UpdateWaitGroupRequest"] {
            expected.push((group, "counter", "maximum", n(v::MAX_COUNTER)));
            let field = "delete_after_finished_seconds";
            expected.push((group, field, "minimum", n(v::MIN_RETENTION_SECONDS)));
            expected.push((group, field, "maximum", n(v::MAX_RETENTION_SECONDS)));
        }
        for barrier in ["CreateBarrierRequest", "UpdateBarrierRequest"] {
            let max = v::MAX_EXPECTED_PROCESSES;
            expected.push((barrier, "expected_processes", "maximum", n(max)));
            let field = "delete_inactive_after_seconds";
            expected.push((barrier, field, "minimum", n(v::MIN_RETENTION_SECONDS)));
            expected.push((barrier, field, "maximum", n(v::MAX_RETENTION_SECONDS)));
        }
        let jobs = v::MAX_JOBS_PER_REPORT as u64;
        expected.push((
            "CompleteJobsFromWaitGroupRequest",
            "jobs",
            "maxItems",
            n(jobs),
        ));
        expected.push((
            "NewKeyRequest",
            "scopes",
            "maxItems",
            n(v::MAX_SCOPES as u64),
        ));
        let mut wrong = Vec::new();
        for (schema, field, keyword, want) in &expected {
            let got = &schemas[*schema]["properties"][*field][*keyword];
            if got != want {
                wrong.push(format!("{schema}.{field}.{keyword}: {got} != {want}"));
            }
        }
        let metadata = &schemas["Metadata"];
        let pairs = [
            (&metadata["maxProperties"], v::MAX_METADATA_ENTRIES),
            (&metadata["propertyNames"]["maxLength"], v::MAX_METADATA_KEY),
            (
                &metadata["additionalProperties"]["maxLength"],
                v::MAX_METADATA_VALUE,
            ),
            (&schemas["Scope"]["maxLength"], v::MAX_SCOPE),
        ];
        for (got, want) in pairs {
            if *got != n(want as u64) {
                wrong.push(format!("Metadata/Scope: {got} != {want}"));
            }
        }
        assert!(expected.len() > 40, "{} limits checked", expected.len());
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// docs/api.md and the document agree on the hierarchical API: every method of the
    /// document has a row in the reference, and the row's request lists exactly the fields
    /// the document's request schema has — with `?` on exactly the ones it does not require.
    #[test]
    fn the_reference_lists_every_method_and_field_of_the_document() {
        let (reference, doc) = reference_and_document();
        let schemas = &doc["components"]["schemas"];
        let mut differences = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            let Some(method) = path.strip_prefix("/v1beta/") else {
                continue;
            };
            let row_start = format!("| `{method}`");
            let Some(row) = reference.lines().find(|l| {
                l.starts_with(&row_start) && l[row_start.len()..].starts_with([' ', '|'])
            }) else {
                differences.push(format!("{method}: no row in docs/api.md"));
                continue;
            };
            let request = row.split('|').nth(2).unwrap_or_default();
            let listed = request_fields(request);
            let documented = body_fields(schemas, &item["post"]);
            if listed != documented {
                differences.push(format!(
                    "{method}: docs/api.md {listed:?}, document {documented:?}"
                ));
            }
        }
        assert!(differences.is_empty(), "{differences:#?}");
    }

    /// docs/api.md's text and the document, for the tests that compare them.
    fn reference_and_document() -> (String, Value) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");
        let reference = std::fs::read_to_string(path).unwrap();
        (reference, serde_json::from_str(&document_json()).unwrap())
    }

    /// `(field, optional)` of an operation's JSON body in the document, sorted (none without
    /// a body).
    fn body_fields(schemas: &Value, operation: &Value) -> Vec<(String, bool)> {
        let body = &operation["requestBody"]["content"]["application/json"]["schema"];
        let Some(reference) = body["$ref"].as_str() else {
            return Vec::new();
        };
        let schema = &schemas[reference.rsplit('/').next().unwrap()];
        let required: Vec<&str> = (schema["required"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        let mut fields: Vec<(String, bool)> = (schema["properties"].as_object())
            .into_iter()
            .flatten()
            .map(|(field, _)| (field.clone(), !required.contains(&field.as_str())))
            .collect();
        fields.sort();
        fields
    }

    /// Routes docs/api.md describes in prose rather than in a table row.
    const PROSE_ROUTES: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/openapi.json"];

    /// docs/api.md and the document agree on every other route (project locks, admin,
    /// health): each operation of the document has a row `` `METHOD /path` `` in the reference
    /// (or, for health and metrics, a mention), each row is an operation of the document, and
    /// the row's body lists exactly the body fields of the document — with `?` on exactly the
    /// optional ones — and its route the query parameters.
    #[test]
    fn the_reference_lists_every_route_and_field_of_the_document() {
        let (reference, doc) = reference_and_document();
        let schemas = &doc["components"]["schemas"];
        let rows = route_rows(&reference);
        let mut differences = Vec::new();
        let mut documented_routes = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            if path.starts_with("/v1beta/") {
                continue;
            }
            for (method, operation) in item.as_object().unwrap() {
                let route = format!("{} {path}", method.to_uppercase());
                documented_routes.push(route.clone());
                if PROSE_ROUTES.contains(&path.as_str()) {
                    if !reference.contains(&format!("`{route}`")) {
                        differences.push(format!("{route}: not mentioned in docs/api.md"));
                    }
                    continue;
                }
                let Some((query, listed)) = rows.get(&route) else {
                    differences.push(format!("{route}: no row in docs/api.md"));
                    continue;
                };
                let documented = body_fields(schemas, operation);
                if *listed != documented {
                    differences.push(format!(
                        "{route}: body in docs/api.md {listed:?}, document {documented:?}"
                    ));
                }
                let mut params: Vec<String> = (operation["parameters"].as_array())
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str().map(str::to_string))
                    .collect();
                params.sort();
                if *query != params {
                    differences.push(format!(
                        "{route}: query in docs/api.md {query:?}, document {params:?}"
                    ));
                }
            }
        }
        for route in rows.keys() {
            if !documented_routes.contains(route) {
                differences.push(format!("{route}: in docs/api.md, not in the document"));
            }
        }
        assert!(differences.is_empty(), "{differences:#?}");
        // Every tabled route was found: a parser that found none would compare nothing.
        let tabled = documented_routes.len() - PROSE_ROUTES.len();
        assert_eq!(rows.len(), tabled, "routes found in docs/api.md");
    }

    /// A reference row's query parameter names and body fields (`(field, optional)`), sorted.
    type RouteRow = (Vec<String>, Vec<(String, bool)>);

    /// The reference's table rows whose route cell is `` `METHOD /path?query` ``, by route.
    fn route_rows(reference: &str) -> std::collections::BTreeMap<String, RouteRow> {
        let mut rows = std::collections::BTreeMap::new();
        for line in reference.lines().filter(|l| l.starts_with('|')) {
            // `\|` separates alternatives inside a cell, not cells.
            let line = line.replace("\\|", "/");
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let Some(route) = cells.get(2).and_then(|c| c.strip_prefix('`')) else {
                continue;
            };
            let Some((method, target)) = route.trim_end_matches('`').split_once(' ') else {
                continue;
            };
            if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method) {
                continue;
            }
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let mut query: Vec<String> = query
                .split('&')
                .filter_map(|p| p.split('=').next())
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            query.sort();
            let body = quoted_fields(cells.get(3).copied().unwrap_or_default());
            rows.insert(format!("{method} {path}"), (query, body));
        }
        rows
    }

    /// `(field, optional)` of a reference body like `{"name", "shard"?, "kind": "a"|"b"}`:
    /// each top-level field's quoted name, `?` right after it marking it optional; sorted.
    fn quoted_fields(cell: &str) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = top_level_parts(cell)
            .iter()
            .filter_map(|part| {
                let rest = part.trim().strip_prefix('"')?;
                let (name, after) = rest.split_once('"')?;
                Some((name.to_string(), after.starts_with('?')))
            })
            .collect();
        out.sort();
        out
    }

    /// The comma-separated parts of the first `{…}` of `cell`, nested braces and brackets kept
    /// out (empty without one).
    fn top_level_parts(cell: &str) -> Vec<String> {
        let Some(start) = cell.find('{') else {
            return Vec::new();
        };
        let mut depth = 0;
        let mut parts = vec![String::new()];
        for c in cell[start + 1..].chars() {
            match c {
                '{' | '[' => depth += 1,
                '}' | ']' if depth > 0 => depth -= 1,
                '}' => break,
                ',' if depth == 0 => parts.push(String::new()),
                _ if depth == 0 => parts.last_mut().expect("one part").push(c),
                _ => {}
            }
        }
        parts
    }

    /// `(field, optional)` of a reference row's request, `{a, b?, jobs: [{…}]}`, sorted.
    fn request_fields(cell: &str) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = top_level_parts(cell)
            .iter()
            .map(|f| f.split(':').next().unwrap_or_default().trim())
            .filter(|f| !f.is_empty())
            .map(|f| match f.strip_suffix('?') {
                Some(name) => (name.to_string(), true),
                None => (f.to_string(), false),
            })
            .collect();
        out.sort();
        out
    }

    /// The `after` cursor of `GET /locks` is a key or empty: the document gives it the key
    /// pattern with the empty string allowed.
    #[test]
    fn the_list_cursor_has_the_key_pattern() {
        let doc: Value = serde_json::from_str(&document_json()).unwrap();
        let params = doc["paths"]["/locks"]["get"]["parameters"]
            .as_array()
            .unwrap();
        let after = params.iter().find(|p| p["name"] == "after").unwrap();
        let key_or_empty = raftlock_api::locks::KEY_PATTERN.replace("{1,128}", "{0,128}");
        assert_eq!(after["schema"]["pattern"], key_or_empty.as_str());
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
