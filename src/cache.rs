//! The watch cache: one upstream list+watch per resource, served to many.
//!
//! - [`registry`]: what is cached; one [`resource::ResourceCache`] per resource.
//! - [`reflector`]: the state machine that keeps a cache in step with the upstream.
//! - [`store`], [`history`]: the objects, and the ring of recent events.
//! - [`object`], [`event`]: cached objects with their encoding memo; events and frames.
//! - [`dispatcher`], [`watcher`], [`filter`]: who gets which event, and per-watcher queues.
//! - [`stream`]: a watch response body; [`serve`]: LIST/GET/WATCH semantics.
//! - [`freshness`]: proving the cache is current enough for a consistent read.
//! - [`upstream_watch`]: reading the upstream's watch and list responses.
//! - [`discovery`], [`resource_info`]: what the upstream serves.
//! - [`params`]: the query parameters of a read; [`pagination`]: continue tokens;
//!   [`snapshots`]: the states later pages are served from.
//! - `consistency` (tests): a model of the upstream proving that no watcher
//!   misses a change after any version it holds, or it gets 410.

#[cfg(test)]
mod consistency;
pub mod discovery;
pub mod dispatcher;
pub mod event;
pub mod filter;
pub mod freshness;
pub mod history;
pub mod object;
pub mod pagination;
pub mod params;
pub mod reason;
pub mod reflector;
pub mod registry;
pub mod resource;
pub mod resource_info;
pub mod serve;
pub mod snapshots;
pub mod store;
pub mod stream;
pub mod upstream_watch;
pub mod watcher;
