//! Content negotiation for responses watchmux builds from its cache.
