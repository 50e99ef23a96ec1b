//! The shapes messages share, written once: every request (its derives, and the fields many
//! requests carry — namespace, object name, lease, expected version, page) and every list
//! answer (one page of items and the tokens of the pages beside it). Two macros declare the
//! messages (each keeps its own name, docs and schema); the [`Listing`] trait is what the
//! server builds list answers with and the SDK reads them by.

/// A list method's answer: one page of items and the tokens of the pages beside it.
pub trait Listing: Sized {
    /// What one page lists.
    type Item;
    /// The answer for one page: its items and the tokens of the next and previous pages.
    fn from_page(page: (Vec<Self::Item>, String, String)) -> Self;
    /// The page and its tokens (next, previous).
    fn into_page(self) -> (Vec<Self::Item>, String, String);
}

/// Declares a list method's response: `items` (documented by the caller) and both tokens.
macro_rules! list_response {
    ($(#[$doc:meta])* $name:ident { $(#[$items_doc:meta])* $items:ident: $item:ty }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name {
            $(#[$items_doc])*
            pub $items: Vec<$item>,
            /// Token of the next page; empty on the last page.
            pub next_pagination_token: String,
            /// Token of the previous page; empty on the first page.
            pub previous_pagination_token: String,
        }

        impl $crate::paging::Listing for $name {
            type Item = $item;

            fn from_page((items, next, previous): (Vec<$item>, String, String)) -> Self {
                $name {
                    $items: items,
                    next_pagination_token: next,
                    previous_pagination_token: previous,
                }
            }

            fn into_page(self) -> (Vec<$item>, String, String) {
                (self.$items, self.next_pagination_token, self.previous_pagination_token)
            }
        }
    };
}

/// Declares a request message. Its body lists fields as usual, and writes the fields every
/// request of that kind shares as one line each, so their names, docs and schemas are written
/// once here:
/// - `@namespace,`: `namespace_name`, the namespace addressed;
/// - `@named field: Schema "doc",`: the name of the object addressed (a `crate::schemas`
///   schema, e.g. `barrier_name: PrimitiveName "The barrier."`);
/// - `@lease "doc",`: the required `lease_id`; `@ttl "doc",`: a lease's length, 1–300 s;
/// - `@description "doc",`, `@metadata "doc",`: the optional description (≤ 1024 bytes) and
///   metadata every primitive carries;
/// - `@expected_version,`: the required version an update is based on;
/// - `@page,`: `limit` and `pagination_token` (last, as every list request has them).
///
/// And a required count with its bounds is one line under its doc: `pub counter: u64 in
/// 1..=100,` (or `in 1..,` with no maximum): absent reads as 0, which the bounds refuse.
///
/// Every request refuses unknown fields and derives its schema.
macro_rules! request {
    ($(#[$doc:meta])* $name:ident { $($body:tt)* }) => {
        $crate::paging::request!(@fields [$(#[$doc])* $name] [] $($body)*);
    };
    (@fields $head:tt [$($done:tt)*] @namespace, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            /// The namespace.
            #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::NamespaceName))]
            pub namespace_name: String,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @named $field:ident: $schema:ident $doc:literal, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            #[doc = $doc]
            #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::$schema))]
            pub $field: String,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @lease $doc:literal, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            #[doc = $doc]
            #[serde(default)]
            #[cfg_attr(
                feature = "openapi",
                schema(value_type = crate::schemas::LeaseId, required = true)
            )]
            pub lease_id: String,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @description $doc:literal, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            #[doc = $doc]
            #[serde(default)]
            #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
            pub description: String,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @metadata $doc:literal, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            #[doc = $doc]
            #[serde(default)]
            #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::Metadata))]
            pub metadata: std::collections::BTreeMap<String, String>,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @ttl $doc:literal, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            #[doc = $doc]
            #[serde(default)]
            #[cfg_attr(
                feature = "openapi",
                schema(required = true, minimum = 1, maximum = 300)
            )]
            pub ttl_seconds: u64,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @expected_version, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            /// Required: the version the update is based on (versions start at 1); a stale
            /// one is refused with `failed_precondition` and changes nothing.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[cfg_attr(
                feature = "openapi",
                schema(value_type = u64, required = true, minimum = 1)
            )]
            pub expected_version: Option<u64>,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] @page, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            /// Page size 0–250; 0 means 100.
            #[serde(default)]
            #[cfg_attr(feature = "openapi", schema(maximum = 250))]
            pub limit: u32,
            /// Empty for the first page; else a `next_pagination_token` or
            /// `previous_pagination_token` this server issued for the same list, as it was issued:
            /// any other value is refused with `invalid_argument` (tokens are opaque).
            #[serde(default)]
            pub pagination_token: String,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] $(#[$meta:meta])* pub $field:ident: u64 in $min:tt..=$max:tt, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            $(#[$meta])*
            #[serde(default)]
            #[cfg_attr(
                feature = "openapi",
                schema(required = true, minimum = $min, maximum = $max)
            )]
            pub $field: u64,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] $(#[$meta:meta])* pub $field:ident: u64 in $min:tt.., $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)*
            $(#[$meta])*
            #[serde(default)]
            #[cfg_attr(feature = "openapi", schema(required = true, minimum = $min))]
            pub $field: u64,
        ] $($rest)*);
    };
    (@fields $head:tt [$($done:tt)*] $(#[$meta:meta])* pub $field:ident: $ty:ty, $($rest:tt)*) => {
        $crate::paging::request!(@fields $head [$($done)* $(#[$meta])* pub $field: $ty,] $($rest)*);
    };
    (@fields [$(#[$doc:meta])* $name:ident] [$($done:tt)*]) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name {
            $($done)*
        }
    };
}

pub(crate) use {list_response, request};
