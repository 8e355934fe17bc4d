//! The watch cache: one upstream list+watch per resource, served to many.
//!
//! - [`registry`]: what is cached; one [`resource::ResourceCache`] per resource
//!   (the readers' handle), written only by its [`resource::Writer`] (the
//!   reflector's); its lifecycle and fan-out in `resource/`.
//! - [`reflector`]: the state machine that keeps a cache in step with the upstream.
//! - [`store`], [`history`]: the objects, and the ring of recent events.
//! - [`object`], [`event`]: cached objects with their encoding memo; events and frames.
//! - [`dispatcher`], [`watcher`], [`filter`]: who gets which event, and per-watcher queues.
//! - [`stream`]: a watch response body; [`serve`]: LIST/GET/WATCH semantics;
//!   [`content`]: why an answer is JSON and not protobuf (the one decision).
//! - `resource/freshness.rs`: proving the cache is current enough for a
//!   consistent read.
//! - [`upstream_watch`]: reading the upstream's watch and list responses;
//!   [`warnings`]: the API server's `Warning` headers, replayed on answers.
//! - [`discovery`], [`resource_info`]: what the upstream serves.
//! - [`params`]: the query parameters of a read; [`pagination`]: continue tokens;
//!   [`snapshots`]: the states later pages are served from.
//! - `consistency` (tests): a model of the upstream proving that no watcher
//!   misses a change after any version it holds, or it gets 410.

#[cfg(test)]
mod consistency;
pub(crate) mod content;
pub(crate) mod discovery;
pub(crate) mod dispatcher;
pub(crate) mod event;
pub(crate) mod filter;
pub(crate) mod history;
pub(crate) mod object;
pub(crate) mod pagination;
pub(crate) mod params;
pub(crate) mod reason;
pub(crate) mod reflector;
pub(crate) mod registry;
pub(crate) mod resolve;
pub(crate) mod resource;
pub(crate) mod resource_info;
pub(crate) mod schema_check;
pub(crate) mod serve;
pub(crate) mod snapshots;
pub(crate) mod store;
pub(crate) mod stream;
pub(crate) mod upstream_watch;
pub(crate) mod warnings;
pub(crate) mod watcher;
