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
//! - [`semaphores`]: semaphores and semaphore leases (Grackle's semaphore methods on the same
//!   `POST /v1beta/{Method}` route): requests, responses, the semaphore and holder views.
//! - [`wait_groups`]: wait groups (a counter of jobs observers wait on) and their jobs.
//! - [`barriers`]: barriers (N-party rendezvous with generations) and their participants.
//! - [`admin`]: the admin API: key kinds, projects, keys and the cluster view.
//! - [`methods`]: one table of facts per method and project-lock route — effect (read,
//!   repeatable write, once-only write), blocking, scope, schema names — that dispatch,
//!   forwarding, idempotency, the OpenAPI document and the SDK read.
//! - `paging`: the shapes messages share, declared once by two macros: `request!` (derives,
//!   and the fields many requests carry — namespace, object name, lease, version, page) and
//!   `list_response!` (a page of items and its tokens, read through [`Listing`]).
//! - `schemas` (feature `openapi`): the named field schemas — namespace and lock names, lease
//!   ids, metadata — that several messages share, each pattern written once.
//!
//! Timestamps of the hierarchical and admin APIs are int64 nanoseconds since the Unix epoch
//! (fields are spelled `i64`, not [`Nanos`], so the generated schemas stay plain integers);
//! the project-lock API speaks RFC 3339.

pub mod admin;
pub mod barriers;
pub mod errors;
pub mod headers;
pub mod hierarchy;
pub mod locks;
pub mod methods;
mod paging;
#[cfg(feature = "openapi")]
pub mod schemas;
pub mod semaphores;
pub mod wait_groups;

use std::collections::BTreeMap;

pub use paging::Listing;

/// Nanoseconds since the Unix epoch.
pub type Nanos = i64;

/// Free-form string metadata (at most 32 entries).
pub type Metadata = BTreeMap<String, String>;
