//! Answering LIST, GET and WATCH from a cache.
//!
//! - [`plan`]: what a read will be, decided once from the request and its cache's facts, in pure functions.
//! - [`serve`]: the plan carried out, with the API server's read semantics.
//! - [`params`], [`filter`](crate::cache::delivery::filter): a read's query parameters, and what it selects.
//! - [`pagination`]: continue tokens in the API server's format.
//! - [`content`](crate::cache::content): the form an answer is served in (protobuf or JSON), decided once.
//! - [`reason`](crate::cache::reason): why a read passes through, typed.
//! - [`watch_stream`]: the response body of a watch served from the cache.

pub(crate) mod pagination;
pub(crate) mod params;
pub(crate) mod plan;
pub(crate) mod serve;
pub(crate) mod watch_stream;
