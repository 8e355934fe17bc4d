//! The connection budget: how many API connections are open at once, each
//! source address's share and each user's share of them, and a bound on
//! the connections answered with a 429, so that descriptors never run out
//! before the budget answers.
//!
//! - **Per address**, counted at accept: one host cannot hold every slot.
//! - **Per user**, counted when a connection's first authenticated,
//!   non-anonymous request arrives (delegated auth only: in the other modes
//!   every client acts as watchmux, and there is no user to tell apart).
//!   Behind a load balancer that rewrites source addresses every client has
//!   one address, and the address share stops meaning anything; the user
//!   share still stops one credential from holding every connection. A
//!   connection is its first user's: an HTTP/2 connection that later
//!   carries other users' requests (a proxy's) is not counted again.
//!   kube-apiserver has no such share (it bounds requests per user, through
//!   API Priority and Fairness, not connections); its default is a half of
//!   the budget because a DaemonSet's pods share one service account, and
//!   each of them needs its connection.
//!
//! Anonymous HTTP/2 connections need no user share: they are closed after
//! each answer, as kube-apiserver closes them (`server::connection::activity`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::Arc;

use super::limits::Limit;
use crate::auth::UserShare;

/// Counts open API connections against `--max-connections`, each source
/// address and each user against its share, and the connections answered
/// with a 429 against a bound of their own: past it a connection is closed
/// at accept, so descriptors never run out before the budget answers (see
/// [`ConnectionBudget::new`]).
#[derive(Debug)]
pub(crate) struct ConnectionBudget {
    shares: Shares,
    /// Connections over a limit that may be open at once for their 429.
    overflow: usize,
    state: parking_lot::Mutex<BudgetState>,
}

/// The budget's limits, as set at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shares {
    /// Connections served at once.
    pub max: usize,
    /// Connections one source address may have served at once.
    pub per_address: usize,
    /// Connections one user may have served at once.
    pub per_user: usize,
}

#[derive(Debug, Default)]
struct BudgetState {
    within: usize,
    over: usize,
    by_address: HashMap<IpAddr, usize>,
    by_user: HashMap<Arc<str>, usize>,
}

/// The descriptors kept for everything but downstream connections: the
/// listeners, the cache's files, logs, and a first share of upstream
/// connections; a quarter of the rest is kept for upstream connections too
/// (one per upgrade, one per HTTP/1.1 request in flight).
const RESERVED_DESCRIPTORS: usize = 256;

impl ConnectionBudget {
    /// A budget of `max` connections (0: as many as descriptors allow),
    /// `per_address` of them from one source address (0: a quarter) and
    /// `per_user` of them for one user (0: a half), within `descriptors`
    /// (the open-file limit, when known): connections served and
    /// connections answered with a 429 together keep
    /// [`RESERVED_DESCRIPTORS`] and a quarter of the rest free.
    pub(crate) fn new(max: usize, per_address: usize, per_user: usize, descriptors: Option<usize>) -> Arc<Self> {
        let usable = descriptors.map(|d| d.saturating_sub(RESERVED_DESCRIPTORS) / 4 * 3);
        let wanted = if max == 0 { usize::MAX } else { max };
        let (max, overflow) = match usable {
            // A sixteenth of what is usable answers 429s, the rest serves.
            Some(usable) if wanted.saturating_add(wanted / 16 + 16) > usable => {
                let max = (usable - usable / 16).min(wanted).max(1);
                (max, usable.saturating_sub(max).max(1))
            }
            _ => (wanted, wanted.saturating_add(15) / 16 + 16),
        };
        let share = |asked: usize, default: usize| if asked == 0 { default.max(1) } else { asked.min(max) };
        let shares = Shares { max, per_address: share(per_address, max / 4), per_user: share(per_user, max / 2) };
        Arc::new(Self { shares, overflow, state: Default::default() })
    }

    /// The limits in force.
    pub(crate) fn shares(&self) -> Shares {
        self.shares
    }

    /// Counts a new connection from `addr` (`None`: a unix socket, no
    /// share). `within` is false when it is over the budget or its address's
    /// share: it still gets served, with a 429 to each request and a close,
    /// so the client learns why instead of seeing a reset. `None`: too many
    /// of those already, close it unread.
    pub(crate) fn open(self: &Arc<Self>, addr: Option<IpAddr>) -> Option<OpenSlot> {
        let mut state = self.state.lock();
        let from_address = addr.map_or(0, |a| state.by_address.get(&a).copied().unwrap_or(0));
        if state.within < self.shares.max && from_address < self.shares.per_address {
            state.within += 1;
            if let Some(addr) = addr {
                *state.by_address.entry(addr).or_default() += 1;
            }
            let claim = ConnectionClaim { budget: self.clone(), owner: Default::default() };
            return Some(OpenSlot { within: true, addr, claim });
        }
        Limit::Connections.count();
        if state.over >= self.overflow {
            return None;
        }
        state.over += 1;
        let claim = ConnectionClaim { budget: self.clone(), owner: Default::default() };
        Some(OpenSlot { within: false, addr: None, claim })
    }

    fn close(&self, slot: &OpenSlot) {
        let mut state = self.state.lock();
        if !slot.within {
            state.over -= 1;
            return;
        }
        state.within -= 1;
        if let Some(addr) = slot.addr {
            release(&mut state.by_address, addr);
        }
        // Taken under the lock that `claim` sets it under: a claim made
        // after this finds the connection closed and counts nothing.
        let mut owner = slot.claim.owner.lock();
        if let Owner::User(user) = std::mem::replace(&mut *owner, Owner::Closed) {
            release(&mut state.by_user, user);
        }
    }
}

/// One fewer for `key`, and its entry gone at none.
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: K) {
    if let Entry::Occupied(mut e) = counts.entry(key) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

/// One counted connection, held by its task until it ends.
pub(crate) struct OpenSlot {
    pub within: bool,
    addr: Option<IpAddr>,
    claim: ConnectionClaim,
}

impl OpenSlot {
    /// The handle that counts the connection against a user's share, for
    /// the requests it carries.
    pub(crate) fn claim(&self) -> Arc<ConnectionClaim> {
        Arc::new(self.claim.clone())
    }
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.claim.budget.close(self);
    }
}

/// Whose share a connection counts against, once a request has said.
#[derive(Debug, Default)]
enum Owner {
    /// No authenticated, non-anonymous request yet.
    #[default]
    Unclaimed,
    User(Arc<str>),
    /// The connection has ended; nothing more is counted.
    Closed,
}

/// A connection's place in its user's share (see [`ConnectionClaim::claim`]).
#[derive(Clone)]
pub(crate) struct ConnectionClaim {
    budget: Arc<ConnectionBudget>,
    owner: Arc<parking_lot::Mutex<Owner>>,
}

impl std::fmt::Debug for ConnectionClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionClaim").field("owner", &*self.owner.lock()).finish()
    }
}

impl UserShare for ConnectionClaim {
    /// The request refused, the connection stays unclaimed, so it is
    /// counted when it is claimed later.
    fn claim(&self, user: &str) -> bool {
        let mut state = self.budget.state.lock();
        let mut owner = self.owner.lock();
        if !matches!(*owner, Owner::Unclaimed) {
            return true;
        }
        let held = state.by_user.get(user).copied().unwrap_or(0);
        if held >= self.budget.shares.per_user {
            return false;
        }
        let user: Arc<str> = user.into();
        *state.by_user.entry(user.clone()).or_default() += 1;
        *owner = Owner::User(user);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn connection_budget_counts_open_connections() {
        let budget = ConnectionBudget::new(2, 2, 0, None);
        let a = budget.open(ip(1)).unwrap();
        let b = budget.open(ip(2)).unwrap();
        let c = budget.open(ip(3)).unwrap();
        assert!(a.within && b.within && !c.within);
        drop(a);
        drop(c);
        assert!(budget.open(ip(3)).unwrap().within);
    }

    /// One address uses its share up; another is still served, and the
    /// first gets its slots back as its connections close.
    #[test]
    fn one_address_holds_its_share_and_no_more() {
        let budget = ConnectionBudget::new(100, 0, 0, None);
        assert_eq!(budget.shares(), Shares { max: 100, per_address: 25, per_user: 50 });
        let held: Vec<_> = (0..25).map(|_| budget.open(ip(1)).unwrap()).collect();
        assert!(held.iter().all(|s| s.within));
        let refused = budget.open(ip(1)).unwrap();
        assert!(!refused.within);
        assert!(budget.open(ip(2)).unwrap().within);
        // Unix-socket clients have no address and no share.
        assert!((0..50).all(|_| budget.open(None).unwrap().within));
        drop(held);
        assert!(budget.open(ip(1)).unwrap().within);
    }

    /// One user, from any number of addresses (a load balancer's one, or
    /// many), holds its share of connections and no more; another user is
    /// served; the share comes back as the connections close; a connection
    /// is counted once, for its first user only.
    #[test]
    fn one_user_holds_its_share_and_no_more() {
        let budget = ConnectionBudget::new(100, 0, 3, None);
        let mut held: Vec<_> = (0..3).map(|i| budget.open(ip(i)).unwrap()).collect();
        for slot in &held {
            assert!(slot.claim().claim("mallory"));
            // Later requests on the same connection, by anyone, are not
            // counted again.
            assert!(slot.claim().claim("mallory"));
            assert!(slot.claim().claim("alice"));
        }
        let fourth = budget.open(ip(9)).unwrap();
        assert!(fourth.within, "the address share is not what refuses it");
        assert!(!fourth.claim().claim("mallory"));
        // Refused, it stays unclaimed: another user may still take it.
        assert!(fourth.claim().claim("alice"));
        drop(held.remove(0));
        let fifth = budget.open(ip(9)).unwrap();
        assert!(fifth.claim().claim("mallory"), "a closed connection gives its share back");
        assert!(!budget.open(ip(10)).unwrap().claim().claim("mallory"));
    }

    /// A claim made through a handle that outlived its connection counts
    /// nothing, so the share cannot leak.
    #[test]
    fn a_claim_after_the_connection_ended_is_not_counted() {
        let budget = ConnectionBudget::new(10, 0, 1, None);
        let slot = budget.open(ip(1)).unwrap();
        let late = slot.claim();
        drop(slot);
        assert!(late.claim("bob"));
        assert!(budget.open(ip(1)).unwrap().claim().claim("bob"));
    }

    /// Connections over the budget are answered up to a bound; past it
    /// they are closed at accept, so the descriptors they would hold are
    /// bounded too.
    #[test]
    fn connections_over_the_budget_are_bounded_too() {
        let budget = ConnectionBudget::new(16, 0, 0, None);
        let _within: Vec<_> = (0..16).map(|i| budget.open(ip(i)).unwrap()).collect();
        let over: Vec<_> = std::iter::from_fn(|| budget.open(ip(200))).take(1000).collect();
        assert_eq!(over.len(), 17, "a sixteenth of the budget and 16 answered with 429");
        assert!(over.iter().all(|s| !s.within));
        assert!(budget.open(ip(201)).is_none());
        drop(over);
        assert!(budget.open(ip(201)).is_some());
    }

    /// The budget never takes more descriptors than the open-file limit
    /// leaves: at the common 1,024 soft limit, 20,000 connections cannot be
    /// asked for.
    #[test]
    fn the_budget_fits_the_descriptors() {
        for (max, nofile) in [(20_000, 1_024), (20_000, 20_000), (0, 65_536), (20_000, 1 << 20), (300, 1_024)] {
            let budget = ConnectionBudget::new(max, 0, 0, Some(nofile));
            let within = budget.shares().max;
            let total = within + budget.overflow;
            assert!(total + RESERVED_DESCRIPTORS <= nofile * 3 / 4 + RESERVED_DESCRIPTORS, "{max} {nofile}: {total}");
            assert!(within <= max.max(1) || max == 0);
            assert!(within > 0);
        }
        assert_eq!(ConnectionBudget::new(20_000, 0, 0, Some(1 << 20)).shares().max, 20_000);
        assert_eq!(ConnectionBudget::new(300, 0, 0, Some(1_024)).shares().max, 300);
        assert!(ConnectionBudget::new(20_000, 0, 0, Some(20_000)).shares().max < 15_000);
        // Shares asked for above the budget are the budget.
        assert_eq!(ConnectionBudget::new(300, 1_000, 1_000, Some(1_024)).shares().per_user, 300);
    }
}
