//! What the upstream serves, and what of it is cached.
//!
//! - [`discovery`]: the upstream's discovery documents (kinds, scopes, verbs).
//! - [`resource_info`](crate::cache::resource_info): one resource as discovery describes it, with its paths.
//! - [`resolve`]: `--cache-resources` names resolved as kubectl resolves them.
//! - [`schema_check`](crate::cache::sync::schema_check): a cached kind's schema checked against the protobuf table.

pub(crate) mod discovery;
pub(crate) mod resolve;
