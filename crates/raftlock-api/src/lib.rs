//! The wire contract of raftlock, defined once: what travels between a client and a node.
//!
//! The core produces these views, the server decodes requests into them and encodes replies
//! from them, and the Rust SDK sends and reads them — so a field renamed here is renamed
//! everywhere, and the OpenAPI document (feature `openapi`, built by the server) is derived
//! from the same definitions.
//!
//! ## Layout
//! - [`headers`]: the client-facing header names.
//! - [`errors`]: the two error bodies (project-lock/admin and hierarchical) and their codes.
//! - [`locks`]: the project-lock API (`/locks/…`): TTL body, lease, status and list answers.
//! - [`hierarchy`]: the hierarchical-lock API (`POST /v1beta/{Method}`): every request and
//!   response message, the lock/lease/namespace views and their enums.
//! - [`admin`]: the admin API: key kinds, projects, keys and the cluster view.
//!
//! Timestamps of the hierarchical and admin APIs are int64 nanoseconds since the Unix epoch
//! (fields are spelled `i64`, not [`Nanos`], so the generated schemas stay plain integers);
//! the project-lock API speaks RFC 3339.

pub mod admin;
pub mod errors;
pub mod headers;
pub mod hierarchy;
pub mod locks;

use std::collections::BTreeMap;

/// Nanoseconds since the Unix epoch.
pub type Nanos = i64;

/// Free-form string metadata (at most 32 entries).
pub type Metadata = BTreeMap<String, String>;

/// The JSON Schema of every `metadata` field (fields name it with
/// `#[schema(value_type = MetadataSchema)]`): at most 32 entries, keys of 1–128 bytes, values of
/// at most 256 bytes — the limits the core enforces. (Byte limits; the schema says
/// characters, so a generator's multi-byte strings can still be refused.)
#[cfg(feature = "openapi")]
pub struct MetadataSchema;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for MetadataSchema {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let string = |min: Option<usize>, max: usize| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(min)
                .max_length(Some(max))
        };
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "Free-form string metadata: at most 32 entries, keys of 1–128 bytes, values of \
                 at most 256 bytes.",
            ))
            .max_properties(Some(32))
            .property_names(Some(string(Some(1), 128)))
            .additional_properties(Some(string(None, 256)))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for MetadataSchema {
    fn name() -> std::borrow::Cow<'static, str> {
        "Metadata".into()
    }
}
