//! The JSON Schemas of fields that several messages share, each defined once (fields name
//! them with `#[schema(value_type = crate::schemas::X)]`). They state the limits the core
//! enforces (`raftlock_core::validate`); byte limits are stated as lengths, so a generator's
//! multi-byte strings can still be refused.

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// A string schema with a pattern and length bounds, under a component name.
macro_rules! string_schema {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $pattern:literal, $min:expr, $max:expr, $description:literal) => {
        $(#[$doc])*
        pub struct $ty;

        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some($description))
                    .pattern(Some($pattern))
                    .min_length($min)
                    .max_length($max)
                    .into()
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                $name.into()
            }
        }
    };
}

string_schema!(
    /// Project names.
    ProjectName,
    "ProjectName",
    "^[-_0-9a-zA-Z]{1,128}$",
    Some(1),
    Some(128),
    "A project name: 1–128 of `[-_0-9a-zA-Z]`."
);

string_schema!(
    /// Namespace names.
    NamespaceName,
    "NamespaceName",
    "^[-_0-9a-zA-Z]{1,128}$",
    Some(1),
    Some(128),
    "A namespace name: 1–128 of `[-_0-9a-zA-Z]`."
);

string_schema!(
    /// Lock paths.
    LockName,
    "LockName",
    "^[-_0-9a-zA-Z]+(/[-_0-9a-zA-Z]+)*$",
    Some(1),
    Some(256),
    "A lock path: 1–256 characters of `/`-separated non-empty `[-_0-9a-zA-Z]` segments."
);

string_schema!(
    /// Semaphore names.
    SemaphoreName,
    "SemaphoreName",
    "^[-_0-9a-zA-Z]{1,128}$",
    Some(1),
    Some(128),
    "A semaphore name: 1–128 of `[-_0-9a-zA-Z]`."
);

string_schema!(
    /// Wait-group and barrier names, job ids and barrier process ids.
    PrimitiveName,
    "PrimitiveName",
    "^[-_0-9a-zA-Z]{1,128}$",
    Some(1),
    Some(128),
    "A wait-group or barrier name, job id or barrier process id: 1–128 of `[-_0-9a-zA-Z]`."
);

string_schema!(
    /// Lease ids as the server makes them.
    LeaseId,
    "LeaseId",
    "^ls_[0-9a-zA-Z]{28}$",
    None,
    None,
    "A lease id: `ls_` + 28 base62 characters."
);

/// A key scope: 1–64 bytes (the document can say 64 characters; see the schemathesis hooks).
pub struct Scope;

impl PartialSchema for Scope {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A key scope, e.g. `locks.manage`: 1–64 bytes."))
            .min_length(Some(1))
            .max_length(Some(64))
            .into()
    }
}

impl ToSchema for Scope {
    fn name() -> Cow<'static, str> {
        "Scope".into()
    }
}

/// Free-form string metadata: at most 32 entries, keys of 1–128 bytes, values of at most 256
/// bytes.
pub struct Metadata;

impl PartialSchema for Metadata {
    fn schema() -> RefOr<Schema> {
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

impl ToSchema for Metadata {
    fn name() -> Cow<'static, str> {
        "Metadata".into()
    }
}
