//! Whether the upstream serves CBOR for a resource, as its reflector learned
//! it (`sync::cbor_probe`), held with the cache and read by every request.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::negotiate::UpstreamCbor;

/// A resource cache's [`UpstreamCbor`], set by its reflector and read by
/// every request, lock-free.
#[derive(Debug, Default)]
pub(crate) struct CborCell(AtomicU8);

impl CborCell {
    pub(crate) fn load(&self) -> UpstreamCbor {
        Self::decode(self.0.load(Ordering::Acquire))
    }

    /// Sets it; returns what it was.
    pub(crate) fn swap(&self, to: UpstreamCbor) -> UpstreamCbor {
        let raw = match to {
            UpstreamCbor::Unknown => 0,
            UpstreamCbor::Off => 1,
            UpstreamCbor::On => 2,
        };
        Self::decode(self.0.swap(raw, Ordering::AcqRel))
    }

    fn decode(raw: u8) -> UpstreamCbor {
        match raw {
            1 => UpstreamCbor::Off,
            2 => UpstreamCbor::On,
            _ => UpstreamCbor::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cell_starts_unknown_and_keeps_what_it_is_told() {
        let cell = CborCell::default();
        assert_eq!(cell.load(), UpstreamCbor::Unknown);
        assert_eq!(cell.swap(UpstreamCbor::Off), UpstreamCbor::Unknown);
        assert_eq!(cell.swap(UpstreamCbor::On), UpstreamCbor::Off);
        assert_eq!(cell.load(), UpstreamCbor::On);
    }
}
