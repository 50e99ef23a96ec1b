//! Paging of list calls: what a caller asks for ([`PageRequest`]) and what it gets back
//! ([`Page`]), for every list method of every primitive.

use raftlock_api::Listing;
use serde::{Deserialize, Serialize};

/// Paging of a list call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest {
    /// 1–100; 0 means 100.
    pub limit: u32,
    /// Opaque token from a previous page; empty for the first page.
    pub pagination_token: String,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Token of the next page; empty on the last page.
    pub next_pagination_token: String,
    /// Token of the previous page; empty on the first page.
    pub previous_pagination_token: String,
}

impl<T> Page<T> {
    /// The page of a list method's answer.
    pub(crate) fn of<R: Listing<Item = T>>(response: R) -> Self {
        let (items, next_pagination_token, previous_pagination_token) = response.into_page();
        Page {
            items,
            next_pagination_token,
            previous_pagination_token,
        }
    }
}
