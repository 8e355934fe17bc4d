//! What a cache holds.
//!
//! - [`store`]: every object by key, a persistent ordered map.
//! - [`node_index`]: the bound objects by node, kept with the store, for kubelets' reads.
//! - [`history`]: the ring of recent events, with the API server's dynamic capacity.
//! - [`object`], [`event`]: cached objects with their encoding memo; events and frames.
//! - [`snapshots`]: states kept for a while, for later pages and exact-version reads.

mod dense;
pub(crate) mod event;
pub(crate) mod history;
pub(crate) mod node_index;
pub(crate) mod object;
pub(crate) mod snapshots;
pub(crate) mod store;

#[cfg(all(test, feature = "jemalloc"))]
mod footprint;
