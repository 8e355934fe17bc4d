//! What a request must pass before the pipeline takes it.
//!
//! - [`hosts`]: the Host header, read as Go reads it, checked in trusted-local mode.
//! - [`reject_paths`]: trusted-local's path filter, as `kubectl proxy --reject-paths`.
//! - [`limits`]: concurrent requests, open connections and body size.

pub(crate) mod hosts;
pub(crate) mod limits;
pub(crate) mod reject_paths;
