//! Accepting and serving connections.
//!
//! - [`activity`]: an HTTP/2 connection's open streams, for its idle
//!   timeout and a GOAWAY an answer asks for.
//! - [`backlog`]: TCP listeners with the kernel's whole accept queue, as Go's.
//! - [`goaway_chance`]: `--goaway-chance`, a GOAWAY after a random answer
//!   that rebalances HTTP/2 clients over replicas after a rollout.
//! - [`max_age`]: `--max-connection-age`, a GOAWAY at a connection's
//!   maximum age, its watch streams ended as at a shutdown.
//! - [`listener`]: accept loops and per-connection serving (TCP, TLS, unix socket),
//!   with the HTTP/1.1 watch front.
//! - [`opening`]: a connection's first bytes, read under the listener's deadline.
//! - [`tls`]: the serving certificate, ALPN and client-certificate verification.
//! - [`write_behind`]: batching HTTP/2 frames into one socket write.
//! - [`early_resets`]: counting requests cancelled before they are answered.

pub(crate) mod activity;
pub(crate) mod backlog;
pub(crate) mod early_resets;
pub(crate) mod goaway_chance;
pub(crate) mod listener;
pub(crate) mod max_age;
pub(crate) mod opening;
pub(crate) mod tls;
pub(crate) mod write_behind;
