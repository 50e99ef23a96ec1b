//! The shape every list method shares: a request names a page (`limit`, `pagination_token`),
//! a response carries one page of items and the tokens of the pages beside it. Written once
//! here, as two macros that declare the messages (each keeps its own name, docs and schema)
//! and the [`Listing`] trait the server builds answers with and the SDK reads them by.

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

/// Declares the request of a method that lists one namespace's objects: the namespace and
/// the page.
macro_rules! namespace_list_request {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name {
            /// The namespace.
            #[cfg_attr(feature = "openapi", schema(value_type = crate::schemas::NamespaceName))]
            pub namespace_name: String,
            /// Page size 0–250; 0 means 100.
            #[serde(default)]
            #[cfg_attr(feature = "openapi", schema(maximum = 250))]
            pub limit: u32,
            /// Empty for the first page; else a `next_pagination_token` or
            /// `previous_pagination_token` this server issued for the same list, as it was issued:
            /// any other value is refused with `invalid_argument` (tokens are opaque).
            #[serde(default)]
            pub pagination_token: String,
        }
    };
}

pub(crate) use {list_response, namespace_list_request};
