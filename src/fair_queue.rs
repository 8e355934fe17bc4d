//! A fixed number of seats handed out fairly between flows: each flow may
//! hold at most `per_flow` of them, and flows that wait are served
//! round-robin, one seat per turn, whatever the length of their queues.
//!
//! One semaphore, first come first served, lets one flow hold every seat:
//! 9,000 anonymous watches with distinct selectors kept all 64 review slots
//! busy, and a new token waited behind them until its review timed out.
//! Here a flow's request starts at once while a seat is free within its
//! limit, and otherwise with the next seat freed after the flows queued
//! ahead of it in turn have had one each: one flow's queue delays another
//! by at most one request per flow queued ahead of it. This is the fair
//! queuing of the API server's Priority and Fairness, without its shuffle
//! sharding (every flow has a queue of its own here).
//!
//! Used for the delegated-auth review slots (`auth::reviews`) and for the
//! priority levels of cached reads (`fairness`).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use tokio::sync::oneshot;

/// The seats, shared by every request of every flow.
pub(crate) struct FairSlots<K: Clone + Eq + Hash> {
    state: parking_lot::Mutex<State<K>>,
    total: usize,
    per_flow: usize,
    /// How many requests one flow may have waiting; more are refused.
    max_waiting: usize,
    /// Requests waiting for a seat.
    waiting: metrics::Gauge,
}

struct State<K: Clone + Eq + Hash> {
    in_flight: usize,
    flows: HashMap<K, FlowState<K>>,
    /// Flows with requests waiting and below their own limit, in turn.
    turns: VecDeque<K>,
}

impl<K: Clone + Eq + Hash> Default for State<K> {
    fn default() -> Self {
        Self { in_flight: 0, flows: HashMap::new(), turns: VecDeque::new() }
    }
}

/// The request of a flow that already has its full queue waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueFull;

struct FlowState<K: Clone + Eq + Hash> {
    in_flight: usize,
    /// Requests waiting, oldest first. A sender whose receiver is gone (the
    /// request gave up) is skipped when its turn comes.
    waiting: VecDeque<oneshot::Sender<Slot<K>>>,
    /// In `turns`.
    queued: bool,
}

impl<K: Clone + Eq + Hash> Default for FlowState<K> {
    fn default() -> Self {
        Self { in_flight: 0, waiting: VecDeque::new(), queued: false }
    }
}

/// One request's seat, given back when dropped (or at [`Slot::release`]).
pub(crate) struct Slot<K: Clone + Eq + Hash> {
    slots: Arc<FairSlots<K>>,
    flow: K,
    /// Set by [`Slot::release`]: the seat is back already.
    released: bool,
}

impl<K: Clone + Eq + Hash> Slot<K> {
    /// Gives the seat back now, not at drop.
    pub(crate) fn release(&mut self) {
        if !std::mem::replace(&mut self.released, true) {
            self.slots.release(&self.flow);
        }
    }
}

impl<K: Clone + Eq + Hash> Drop for Slot<K> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<K: Clone + Eq + Hash> FairSlots<K> {
    /// `total` seats (at least one), each flow holding at most `per_flow`
    /// (at least one) and queueing at most `max_waiting` more; `waiting`
    /// counts the requests queued.
    pub(crate) fn new(total: usize, per_flow: usize, max_waiting: usize, waiting: metrics::Gauge) -> Arc<Self> {
        let total = total.max(1);
        Arc::new(Self {
            state: parking_lot::Mutex::default(),
            total,
            per_flow: per_flow.clamp(1, total),
            max_waiting,
            waiting,
        })
    }

    /// How many seats there are.
    #[cfg(test)]
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// A seat for `flow`: at once if one is free within its limit, else
    /// when its turn comes; [`QueueFull`] at once when `flow` already has
    /// `max_waiting` requests queued. Cancel-safe: a waiter dropped gives
    /// up its turn.
    pub(crate) async fn acquire(self: &Arc<Self>, flow: &K) -> Result<Slot<K>, QueueFull> {
        let waiting = {
            let mut state = self.state.lock();
            let State { in_flight, flows, turns } = &mut *state;
            let f = flows.entry(flow.clone()).or_default();
            // Nobody waits while a seat is free (each release hands seats
            // out), so a free seat within the flow's limit is its own.
            if *in_flight < self.total && f.in_flight < self.per_flow && f.waiting.is_empty() {
                *in_flight += 1;
                f.in_flight += 1;
                return Ok(Slot { slots: self.clone(), flow: flow.clone(), released: false });
            }
            f.waiting.retain(|tx| !tx.is_closed());
            if f.waiting.len() >= self.max_waiting {
                forget_if_idle(flows, flow);
                return Err(QueueFull);
            }
            let (tx, rx) = oneshot::channel();
            f.waiting.push_back(tx);
            if !f.queued && f.in_flight < self.per_flow {
                f.queued = true;
                turns.push_back(flow.clone());
            }
            // Counted under the lock: whoever is refused for a full queue
            // sees every request of that queue counted.
            self.waiting.increment(1.0);
            rx
        };
        let _counted = scopeguard(|| self.waiting.decrement(1.0));
        match waiting.await {
            Ok(slot) => Ok(slot),
            // Senders are only dropped by `release` after it handed them a
            // seat or found the receiver gone, and this receiver is here.
            Err(_) => unreachable!("a waiting request's sender is never dropped unanswered"),
        }
    }

    fn release(self: &Arc<Self>, flow: &K) {
        let granted = {
            let mut state = self.state.lock();
            let State { in_flight, flows, turns } = &mut *state;
            *in_flight -= 1;
            if let Some(f) = flows.get_mut(flow) {
                f.in_flight -= 1;
                if !f.queued && !f.waiting.is_empty() {
                    f.queued = true;
                    turns.push_back(flow.clone());
                }
            }
            forget_if_idle(flows, flow);
            let mut granted = Vec::new();
            while *in_flight < self.total {
                let Some(next) = turns.pop_front() else { break };
                let f = flows.get_mut(&next).expect("flows in turn are known");
                f.queued = false;
                while let Some(tx) = f.waiting.pop_front() {
                    if !tx.is_closed() {
                        *in_flight += 1;
                        f.in_flight += 1;
                        granted.push((tx, next.clone()));
                        break;
                    }
                }
                if !f.waiting.is_empty() && f.in_flight < self.per_flow {
                    f.queued = true;
                    turns.push_back(next.clone());
                }
                forget_if_idle(flows, &next);
            }
            granted
        };
        // Outside the lock: a seat whose waiter went away in the meantime
        // comes back through `release` when `send` drops it.
        for (tx, flow) in granted {
            let _ = tx.send(Slot { slots: self.clone(), flow, released: false });
        }
    }
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

fn forget_if_idle<K: Clone + Eq + Hash>(flows: &mut HashMap<K, FlowState<K>>, flow: &K) {
    if flows.get(flow).is_some_and(|f| f.in_flight == 0 && f.waiting.is_empty() && !f.queued) {
        flows.remove(flow);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    type Slots = Arc<FairSlots<&'static str>>;

    fn slots(total: usize, per_flow: usize, max_waiting: usize) -> Slots {
        FairSlots::new(total, per_flow, max_waiting, metrics::gauge!("test_waiting"))
    }

    async fn held(slots: &Slots, flow: &'static str, n: usize) -> Vec<Slot<&'static str>> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(slots.acquire(&flow).await.unwrap());
        }
        held
    }

    /// `n` requests of `flow` queued (tasks holding their seat, once they
    /// get one, until aborted).
    async fn queue(slots: &Slots, flow: &'static str, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
        let tasks = (0..n)
            .map(|_| {
                let slots = slots.clone();
                tokio::spawn(async move {
                    let _slot = slots.acquire(&flow).await;
                    std::future::pending::<()>().await;
                })
            })
            .collect();
        tokio::task::yield_now().await;
        tasks
    }

    #[tokio::test(start_paused = true)]
    async fn one_flows_queue_leaves_the_other_seats_to_others() {
        let slots = slots(64, 16, usize::MAX);
        let _held = held(&slots, "anonymous", 16).await;
        let _queued = queue(&slots, "anonymous", 9_000).await;
        // A new flow gets a seat at once: the anonymous queue is capped.
        let quick = tokio::time::timeout(Duration::from_millis(1), slots.acquire(&"new")).await;
        assert!(quick.is_ok(), "a new flow waits behind another flow's queue");
        assert_eq!(slots.state.lock().in_flight, 17);
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_seat_taken_the_next_free_one_goes_to_the_flow_whose_turn_it_is() {
        let slots = slots(8, 2, usize::MAX);
        let mut held_a = held(&slots, "a", 2).await;
        let _others = [held(&slots, "b", 2).await, held(&slots, "c", 2).await, held(&slots, "d", 2).await];
        // Every seat is taken; `a` queues requests, then a new flow asks.
        let queued = queue(&slots, "a", 100).await;
        let newcomer = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(&"newcomer").await.map(|_| ()) })
        };
        tokio::task::yield_now().await;
        // One of `a`'s requests ends: the seat is the newcomer's, queued
        // behind `a`'s queued requests in time but ahead of it in turn.
        drop(held_a.pop());
        let granted = tokio::time::timeout(Duration::from_millis(1), newcomer).await;
        assert!(matches!(granted, Ok(Ok(Ok(())))), "the newcomer got the freed seat");
        assert_eq!(slots.state.lock().in_flight, 8);
        queued.iter().for_each(|t| t.abort());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_passes_its_turn_and_idle_flows_are_forgotten() {
        let slots = slots(1, 1, usize::MAX);
        let first = slots.acquire(&"a").await.unwrap();
        let gave_up = tokio::time::timeout(Duration::from_secs(1), slots.acquire(&"b")).await;
        assert!(gave_up.is_err());
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move { drop(slots.acquire(&"c").await) })
        };
        tokio::task::yield_now().await;
        drop(first);
        waiting.await.unwrap();
        let state = slots.state.lock();
        assert_eq!(state.in_flight, 0);
        assert!(state.flows.is_empty() && state.turns.is_empty(), "nothing kept for flows with nothing in flight");
    }

    #[tokio::test(start_paused = true)]
    async fn a_flow_with_its_queue_full_is_refused_at_once_and_others_still_queue() {
        let slots = slots(2, 2, 3);
        let _held = held(&slots, "noisy", 2).await;
        let _queued = queue(&slots, "noisy", 3).await;
        assert_eq!(slots.acquire(&"noisy").await.err(), Some(QueueFull));
        // Another flow's queue is its own.
        let other = tokio::time::timeout(Duration::from_millis(1), slots.acquire(&"kubelet")).await;
        assert!(other.is_err(), "no seat is free, so the other flow waits (it is not refused)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_seat_released_early_is_given_back_once() {
        let slots = slots(1, 1, usize::MAX);
        let mut slot = slots.acquire(&"a").await.unwrap();
        slot.release();
        let second = slots.acquire(&"b").await.unwrap();
        drop(slot);
        assert_eq!(slots.state.lock().in_flight, 1, "the early release and the drop count once");
        drop(second);
        assert_eq!(slots.state.lock().in_flight, 0);
    }
}
