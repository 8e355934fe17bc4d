//! Encoding of what watchmux itself writes to clients.
//!
//! Everything that passes through is forwarded byte for byte; this module holds
//! the bodies watchmux produces on its own: the forms an object is written in
//! and what differs between them ([`variant`], [`object`]), list bodies ([`list`]), watch
//! frames ([`watch`]) and the `Status` objects it answers errors with
//! ([`status`]). [`protobuf`] turns the upstream's JSON into the protobuf
//! Go would write, from a schema table generated from the Go types. What is
//! generated from Kubernetes' Go code is kept for every supported minor;
//! [`minor`] says whose is written (the upstream's). The cache decides what to write and keeps each object's
//! encoded bytes; deciding which form a read gets is [`crate::negotiate`]'s.

pub(crate) mod bookmark;
pub(crate) mod list;
pub mod minor;
pub(crate) mod object;
pub mod protobuf;
pub(crate) mod status;
pub(crate) mod table;
pub(crate) mod variant;
pub(crate) mod watch;
