//! Getting events to watchers.
//!
//! - [`dispatcher`]: hands each event to the watchers that can be interested.
//! - [`watcher`]: one watcher's queue, shared by the dispatcher and its body.

pub(crate) mod dispatcher;
pub(crate) mod filter;
pub(crate) mod watcher;
