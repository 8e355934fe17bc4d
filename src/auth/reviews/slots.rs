//! Review slots (`--max-concurrent-reviews`) handed out fairly between the
//! callers reviews are made for ([`crate::fair_queue`]): each [`Asker`] may
//! hold at most a quarter of the slots, and askers that wait are served
//! round-robin, one slot per turn. So a caller's review starts at once
//! while fewer than four other callers are saturating, and otherwise with
//! the next review that ends.
//!
//! Askers are told apart by something an attacker cannot multiply cheaply:
//! an authenticated user by name (the anonymous user is one asker however
//! many clients send no credentials), and a token not yet reviewed by the
//! address it came from (an IPv6 address by its /64, which one host
//! usually holds whole).

use std::net::IpAddr;
use std::sync::Arc;

use crate::fair_queue::FairSlots;
use crate::metrics as m;

/// Who a review is made for, as admission tells callers apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Asker {
    /// A bearer token being reviewed, by the client's address (`None`: the
    /// unix socket, whose clients count as one).
    Peer(Option<IpAddr>),
    /// An authenticated user, by name.
    User(String),
    /// watchmux itself (its SelfSubjectReview).
    Watchmux,
}

impl Asker {
    /// The asker for a token that came from `addr`.
    pub(crate) fn peer(addr: Option<IpAddr>) -> Self {
        Self::Peer(addr.map(|ip| match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            },
        }))
    }
}

/// `total` review slots, a quarter at most per asker, any number waiting
/// (a review gives up at its own deadline).
pub(crate) fn review_slots(total: usize) -> Arc<FairSlots<Asker>> {
    FairSlots::new(total, total / 4, usize::MAX, metrics::gauge!(m::AUTH_REVIEWS_WAITING))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_is_one_asker_per_64_and_mapped_ipv4_is_ipv4() {
        let ip = |s: &str| Some(s.parse().unwrap());
        assert_eq!(Asker::peer(ip("2001:db8::1")), Asker::peer(ip("2001:db8::ffff:2")));
        assert_ne!(Asker::peer(ip("2001:db8::1")), Asker::peer(ip("2001:db8:0:1::1")));
        assert_eq!(Asker::peer(ip("::ffff:10.0.0.1")), Asker::peer(ip("10.0.0.1")));
        assert_ne!(Asker::peer(ip("10.0.0.1")), Asker::peer(ip("10.0.0.2")));
    }
}
