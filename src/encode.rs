//! Encoding of what watchmux itself writes to clients.
//!
//! Everything that passes through is forwarded byte for byte; this module holds
//! the few bodies watchmux produces on its own, today the Kubernetes `Status`
//! objects it answers errors with. Deciding which form a read gets is
//! [`crate::negotiate`]'s.

pub mod protobuf;
pub mod status;
