//! Review slots (`--max-concurrent-reviews`) handed out fairly between the
//! callers reviews are made for.
//!
//! One semaphore, first come first served, let one caller hold every slot:
//! 9,000 anonymous watches with distinct selectors kept all 64 busy, and a
//! new token waited behind them until its review timed out (401). Here each
//! [`Asker`] may hold at most a quarter of the slots, and askers that wait
//! are served round-robin, one slot per turn. So a caller's review starts
//! at once while fewer than four other callers are saturating, and
//! otherwise with the next review that ends: one caller's backlog delays
//! another by at most one review per caller queued ahead of it, whatever
//! the length of that backlog.
//!
//! Askers are told apart by something an attacker cannot multiply cheaply:
//! an authenticated user by name (the anonymous user is one asker however
//! many clients send no credentials), and a token not yet reviewed by the
//! address it came from (an IPv6 address by its /64, which one host
//! usually holds whole).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::oneshot;

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

/// The slots, shared by every review.
pub(crate) struct FairSlots {
    state: parking_lot::Mutex<State>,
    total: usize,
    per_asker: usize,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    askers: HashMap<Asker, AskerState>,
    /// Askers with reviews waiting and below their own limit, in turn.
    turns: VecDeque<Asker>,
}

#[derive(Default)]
struct AskerState {
    in_flight: usize,
    /// Reviews waiting, oldest first. A sender whose receiver is gone (the
    /// review timed out) is skipped when its turn comes.
    waiting: VecDeque<oneshot::Sender<Slot>>,
    /// In `turns`.
    queued: bool,
}

/// One review's slot, given back when dropped.
pub(crate) struct Slot {
    slots: Arc<FairSlots>,
    asker: Asker,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.asker);
    }
}

impl FairSlots {
    /// `total` slots, each asker holding at most a quarter of them (at least one).
    pub(crate) fn new(total: usize) -> Arc<Self> {
        let total = total.max(1);
        Arc::new(Self { state: parking_lot::Mutex::default(), total, per_asker: (total / 4).max(1) })
    }

    /// A slot for `asker`: at once if one is free within its limit, else
    /// when its turn comes. Cancel-safe: a waiter dropped gives up its turn.
    pub(crate) async fn acquire(self: &Arc<Self>, asker: &Asker) -> Slot {
        let waiting = {
            let mut state = self.state.lock();
            let State { in_flight, askers, turns } = &mut *state;
            let a = askers.entry(asker.clone()).or_default();
            // Nobody waits while a slot is free (each release hands slots
            // out), so a free slot within the asker's limit is its own.
            if *in_flight < self.total && a.in_flight < self.per_asker && a.waiting.is_empty() {
                *in_flight += 1;
                a.in_flight += 1;
                return Slot { slots: self.clone(), asker: asker.clone() };
            }
            let (tx, rx) = oneshot::channel();
            a.waiting.push_back(tx);
            if !a.queued && a.in_flight < self.per_asker {
                a.queued = true;
                turns.push_back(asker.clone());
            }
            rx
        };
        let _counted = Waiting::new();
        match waiting.await {
            Ok(slot) => slot,
            // Senders are only dropped by `release` after it handed them a
            // slot or found the receiver gone, and this receiver is here.
            Err(_) => unreachable!("a waiting review's sender is never dropped unanswered"),
        }
    }

    fn release(self: &Arc<Self>, asker: &Asker) {
        let granted = {
            let mut state = self.state.lock();
            let State { in_flight, askers, turns } = &mut *state;
            *in_flight -= 1;
            if let Some(a) = askers.get_mut(asker) {
                a.in_flight -= 1;
                if !a.queued && !a.waiting.is_empty() {
                    a.queued = true;
                    turns.push_back(asker.clone());
                }
            }
            forget_if_idle(askers, asker);
            let mut granted = Vec::new();
            while *in_flight < self.total {
                let Some(next) = turns.pop_front() else { break };
                let a = askers.get_mut(&next).expect("askers in turn are known");
                a.queued = false;
                while let Some(tx) = a.waiting.pop_front() {
                    if !tx.is_closed() {
                        *in_flight += 1;
                        a.in_flight += 1;
                        granted.push((tx, next.clone()));
                        break;
                    }
                }
                if !a.waiting.is_empty() && a.in_flight < self.per_asker {
                    a.queued = true;
                    turns.push_back(next.clone());
                }
                forget_if_idle(askers, &next);
            }
            granted
        };
        // Outside the lock: a slot whose waiter went away in the meantime
        // comes back through `release` when `send` drops it.
        for (tx, asker) in granted {
            let _ = tx.send(Slot { slots: self.clone(), asker });
        }
    }
}

/// Counts a review in [`m::AUTH_REVIEWS_WAITING`] while it waits.
struct Waiting(metrics::Gauge);

impl Waiting {
    fn new() -> Self {
        let gauge = metrics::gauge!(m::AUTH_REVIEWS_WAITING);
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

fn forget_if_idle(askers: &mut HashMap<Asker, AskerState>, asker: &Asker) {
    if askers.get(asker).is_some_and(|a| a.in_flight == 0 && a.waiting.is_empty() && !a.queued) {
        askers.remove(asker);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn user(name: &str) -> Asker {
        Asker::User(name.into())
    }

    /// Holds `n` slots for `asker` and queues `queued` more reviews behind
    /// them (tasks that hold their slot until the end of the test).
    async fn saturate(slots: &Arc<FairSlots>, asker: &Asker, n: usize, queued: usize) -> Vec<Slot> {
        let held = futures_held(slots, asker, n).await;
        for _ in 0..queued {
            let (slots, asker) = (slots.clone(), asker.clone());
            tokio::spawn(async move {
                let slot = slots.acquire(&asker).await;
                std::future::pending::<()>().await;
                drop(slot);
            });
        }
        tokio::task::yield_now().await;
        held
    }

    async fn futures_held(slots: &Arc<FairSlots>, asker: &Asker, n: usize) -> Vec<Slot> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(slots.acquire(asker).await);
        }
        held
    }

    #[tokio::test(start_paused = true)]
    async fn one_askers_backlog_leaves_the_other_slots_to_others() {
        let slots = FairSlots::new(64);
        let anonymous = user("system:anonymous");
        let _held = saturate(&slots, &anonymous, 16, 9_000).await;
        // A new caller gets a slot at once: the anonymous backlog is capped.
        let quick = tokio::time::timeout(Duration::from_millis(1), slots.acquire(&Asker::peer(None))).await;
        assert!(quick.is_ok(), "a new token's review waits behind another caller's backlog");
        assert_eq!(slots.state.lock().in_flight, 17);
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_slot_taken_the_next_free_one_goes_to_the_asker_whose_turn_it_is() {
        let slots = FairSlots::new(8);
        let (a, b) = (user("a"), user("b"));
        let mut held_a = futures_held(&slots, &a, 2).await;
        let _held_b = futures_held(&slots, &b, 2).await;
        let (c, d) = (user("c"), user("d"));
        let _held_c = futures_held(&slots, &c, 2).await;
        let _held_d = futures_held(&slots, &d, 2).await;
        // Every slot is taken; `a` queues a backlog, then a new caller asks.
        let backlog: Vec<_> = (0..100)
            .map(|_| {
                let (slots, a) = (slots.clone(), a.clone());
                tokio::spawn(async move {
                    let _slot = slots.acquire(&a).await;
                    std::future::pending::<()>().await;
                })
            })
            .collect();
        tokio::task::yield_now().await;
        let newcomer = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(&Asker::peer(Some("10.0.0.9".parse().unwrap()))).await })
        };
        tokio::task::yield_now().await;
        // One of `a`'s reviews ends: the slot is the newcomer's, queued
        // behind `a`'s backlog in time but ahead of it in turn.
        drop(held_a.pop());
        let slot = tokio::time::timeout(Duration::from_millis(1), newcomer).await;
        assert!(slot.is_ok(), "the newcomer got the freed slot");
        assert_eq!(slots.state.lock().in_flight, 8);
        for task in backlog {
            task.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_passes_its_turn_and_idle_askers_are_forgotten() {
        let slots = FairSlots::new(1);
        let (a, b) = (user("a"), user("b"));
        let held = slots.acquire(&a).await;
        let gave_up = tokio::time::timeout(Duration::from_secs(1), slots.acquire(&b)).await;
        assert!(gave_up.is_err());
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move { drop(slots.acquire(&user("c")).await) })
        };
        tokio::task::yield_now().await;
        drop(held);
        waiting.await.unwrap();
        let state = slots.state.lock();
        assert_eq!(state.in_flight, 0);
        assert!(state.askers.is_empty() && state.turns.is_empty(), "nothing kept for askers with nothing in flight");
    }

    #[test]
    fn an_ipv6_client_is_one_asker_per_64_and_mapped_ipv4_is_ipv4() {
        let ip = |s: &str| Some(s.parse().unwrap());
        assert_eq!(Asker::peer(ip("2001:db8::1")), Asker::peer(ip("2001:db8::ffff:2")));
        assert_ne!(Asker::peer(ip("2001:db8::1")), Asker::peer(ip("2001:db8:0:1::1")));
        assert_eq!(Asker::peer(ip("::ffff:10.0.0.1")), Asker::peer(ip("10.0.0.1")));
        assert_ne!(Asker::peer(ip("10.0.0.1")), Asker::peer(ip("10.0.0.2")));
    }
}
