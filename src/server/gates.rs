//! What a request must pass before the pipeline takes it.
//!
//! - [`hosts`]: the Host header, read as Go reads it, checked in trusted-local mode.
//! - [`reject_paths`]: trusted-local's path filter, as `kubectl proxy --reject-paths`.
//! - [`limits`]: concurrent requests and body size, and the 429 every limit answers with.
//! - [`connections`]: open connections, and each address's and user's share of them.

pub(crate) mod connections;
pub(crate) mod hosts;
pub(crate) mod limits;
pub(crate) mod reject_paths;
