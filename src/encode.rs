//! Encoding of what watchmux itself writes to clients.
//!
//! Everything that passes through is forwarded byte for byte; this module holds
//! the few bodies watchmux produces on its own, today the Kubernetes `Status`
//! objects it answers errors with. The watch cache's frame builders and the
//! per-object encoding memo will live here too.

pub mod negotiate;
pub mod status;
