//! Keeping a cache in step with the upstream.
//!
//! - [`reflector`]: the list+watch state machine; the only holder of a cache's writer.
//! - [`cluster`]: which cluster the caches hold, and when the upstream became another.
//! - [`watch_list`]: the full list taken as a watch-list, where the upstream serves one.

pub(crate) mod cbor_probe;
pub(crate) mod cluster;
pub(crate) mod reflector;
pub(crate) mod schema_check;
pub(crate) mod watch_list;
