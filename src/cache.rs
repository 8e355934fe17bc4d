//! The watch cache: one upstream list+watch per resource, served to many.
//!
//! Who writes a cache: its [`resource::Writer`], held only by the reflector
//! ([`sync::reflector`]); everything else holds the readers' handle,
//! [`resource::ResourceCache`]. Why an answer is JSON and not protobuf:
//! [`content`], the one decision; why a read passes through: [`reason`].
//!
//! - [`registry`]: what is cached; one cache per resource, started on first use.
//! - [`resource`]: one resource's cache (readers' handle, writer, lifecycle,
//!   fan-out, and the freshness proof for consistent reads).
//! - [`catalog`]: what the upstream serves (discovery, resource names as
//!   kubectl resolves them, the protobuf schema check).
//! - [`sync`]: keeping a cache in step with the upstream (the reflector, the
//!   cluster's identity, watch-lists, the schema and CBOR probes).
//! - [`upstream_wire`]: the upstream's list and watch responses, read in one
//!   place (by the reflector and by the freshness proof's catch-up watch).
//! - [`state`]: what a cache holds (the store, the history ring, objects with
//!   their encoding memo, events, snapshots for later pages).
//! - [`delivery`]: getting events to watchers (dispatcher, per-watcher
//!   queues).
//! - [`read`]: answering LIST, GET and WATCH (parameters, continue tokens,
//!   the watch response body).
//!
//! The folders stand in one order, each importing only those below it:
//! `read` and `sync` above `resource`, `resource` above `delivery`, `state`
//! and `upstream_wire` (`integration/scripts/module-graph.py` checks it).
//! - [`table_form`]: what the cache writes as a `meta.k8s.io` Table (kubectl get), and
//!   which Table reads pass through.
//! - [`warnings`]: the API server's `Warning` headers for a resource, replayed
//!   on the answers served from its cache.
//! - [`persist`]: chosen resources kept on disk (`--persist-dir`), loaded
//!   at start before the upstream answers.
//! - [`stale_reads`]: consistent reads answered from unproven state while the
//!   upstream cannot be reached (`--serve-stale-when-upstream-unreachable`).
//! - [`consistency_check`]: each cache checked against the upstream's exact-version list
//!   every `--consistency-check-period`; a mismatch relists it.
//! - `fault` (tests and the chaos build only, feature `fault-injection`): drops,
//!   duplicates or corrupts one event, for `consistency_check` to find.
//! - `consistency` (tests): a model of the upstream proving that no watcher
//!   misses a change after any version it holds, or it gets 410.

pub(crate) mod catalog;
#[cfg(test)]
mod consistency;
pub(crate) mod consistency_check;
pub(crate) mod content;
pub(crate) mod delivery;
#[cfg(any(test, feature = "fault-injection"))]
pub(crate) mod fault;
pub(crate) mod persist;
pub(crate) mod read;
pub(crate) mod reason;
pub(crate) mod registry;
pub(crate) mod resource;
pub(crate) mod resource_info;
#[cfg(test)]
mod slow_watcher_model;
pub(crate) mod stale_reads;
pub(crate) mod state;
pub(crate) mod sync;
pub(crate) mod table_form;
pub(crate) mod upstream_wire;
pub(crate) mod warnings;
