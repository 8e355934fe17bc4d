//! Starting and stopping.
//!
//! - [`fd_limit`]: the open-file limit, raised at start.
//! - [`shutdown`]: the signals that begin a shutdown, and its stages.
//! - [`graceful`]: draining served connections.

pub(crate) mod fd_limit;
pub(crate) mod graceful;
pub(crate) mod shutdown;
