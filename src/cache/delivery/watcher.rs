//! One downstream watcher's queue, shared by the dispatcher (which offers
//! events) and the watcher's response body (which takes them).
//!
//! The queue is bounded in spirit: a watcher may fall up to
//! [`QUEUE_SOFT_LIMIT`] events behind freely. Past that it is "full"; if it
//! stays full for longer than the grace period, or falls [`hard_limit`]
//! behind, it is moved off live delivery: its queue is dropped, offers are
//! refused from then on, and its body reads the missed events from the
//! cache's history ring instead, from its own position, until a ring read
//! reaches the newest event and it rejoins live delivery
//! (`resource/ring_read.rs`). Every event is in
//! the ring before it is offered, so the dropped queue holds nothing the ring
//! does not. The dispatcher never waits for a watcher, so one slow client
//! cannot delay the others; and a slow watcher costs the memory of one
//! ring read, not a copy of its queue.
//!
//! Shutdown reaches a watcher through its queue too ([`WatcherHandle::stop`]):
//! the body then learns of it from the lock it takes anyway for the next
//! event, instead of polling the server's cancellation token (a mutex shared
//! by every stream) on each poll.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::cache::delivery::filter::Filter;
use crate::cache::state::event::CacheEvent;
use crate::cache::state::history::TooOld;
use crate::encode::watch::EventType;

/// Events a watcher may lag behind before it counts as full.
pub(crate) const QUEUE_SOFT_LIMIT: usize = 1024;
/// Events a watcher may lag behind at all, for a given soft limit.
pub(crate) const fn hard_limit(soft_limit: usize) -> usize {
    4 * soft_limit
}

/// An event as one watcher sees it.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub event: Arc<CacheEvent>,
    pub kind: EventType,
    /// True when the watcher sees the previous state (a transition out of its
    /// selectors, sent as DELETED).
    pub previous_state: bool,
    /// Queued by the dispatcher, so counted in the event's fan-out clock
    /// (`event::FanOut`); initial and ring deliveries are not.
    pub timed: bool,
}

impl Delivery {
    /// The delivery of `event` to a watcher with `filter`, if it sees it at all.
    pub(crate) fn for_filter(event: &Arc<CacheEvent>, filter: &Filter) -> Option<Self> {
        let (kind, obj) = event.as_seen_by(|o| filter.matches(o))?;
        let previous_state = !std::ptr::eq(obj, &*event.object);
        Some(Self { event: event.clone(), kind, previous_state, timed: false })
    }

    /// The object the watcher is sent.
    pub(crate) fn object(&self) -> &crate::cache::state::object::CachedObject {
        if self.previous_state { self.event.prev_stamped() } else { &self.event.object }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    Queued,
    /// This offer moved the watcher off live delivery: it reads the ring now.
    FellBehind,
    /// The watcher reads the ring; the offer was refused (the ring has it).
    Behind,
    /// The watcher is (now) terminated; remove it.
    Terminated,
}

/// What a watcher's body takes next.
#[derive(Debug)]
pub(crate) enum Next {
    Event(Delivery),
    /// The queue is empty and the watcher is behind: read the ring, from
    /// the last version the body sent when `anew` (the watcher fell behind
    /// since the last read), else from where the last read got to.
    FromRing {
        anew: bool,
    },
    /// The queue is empty; the waker is registered for the next offer.
    Waiting,
}

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<Delivery>,
    full_since: Option<Instant>,
    terminated: bool,
    /// Set with `terminated` when the watcher's start lies in versions the
    /// cache never saw: its stream ends with 410 instead of just ending.
    expired: Option<TooOld>,
    /// No more events will come: the stream ends once the queue is empty.
    draining: bool,
    /// The body waiting for events, if it is waiting.
    waker: Option<Waker>,
    /// The watcher fell behind since the body last read the ring: what the
    /// dropped queue held (ring reads included) is after the last event the
    /// body took, so its next read starts from there.
    fell_behind: bool,
}

/// The shared half of a watcher.
#[derive(Debug)]
pub(crate) struct WatcherHandle {
    pub id: u64,
    pub filter: Filter,
    /// Only events newer than this are offered.
    pub start_rv: u64,
    grace: Duration,
    /// [`QUEUE_SOFT_LIMIT`], but for tests that want a watcher behind quickly.
    soft_limit: usize,
    queue: Mutex<Queue>,
    /// Set by [`Self::stop`]: the stream ends cleanly, events waiting or not.
    /// Outside the queue's lock so the body can look at it without one.
    stopped: AtomicBool,
    /// The watcher fell behind and reads the ring instead of live offers.
    /// Changed only under the queue's lock (by the offer that found it full,
    /// by the ring read that caught it up, under the state's read lock); an
    /// atomic so the dispatcher can skip it without matching its filter.
    behind: AtomicBool,
}

impl WatcherHandle {
    pub(crate) fn new(id: u64, filter: Filter, start_rv: u64, grace: Duration, soft_limit: usize) -> Self {
        Self {
            id,
            filter,
            start_rv,
            grace,
            soft_limit,
            queue: Mutex::new(Queue::default()),
            stopped: AtomicBool::new(false),
            behind: AtomicBool::new(false),
        }
    }

    /// Ends the watcher's stream at its next poll, even with events waiting
    /// (the server is shutting down; the client resumes elsewhere from the
    /// last version it got), and wakes its body.
    pub(crate) fn stop(&self) {
        // Stored before the lock is taken and read by `take` under it: a body
        // that registers its waker after this has seen the flag, one that
        // registered before is woken here.
        self.stopped.store(true, Ordering::Release);
        let waker = self.queue.lock().waker.take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether [`Self::stop`] was called: one atomic load, no lock.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Whether the watcher reads the ring instead of live offers: one atomic
    /// load, no lock.
    pub(crate) fn is_behind(&self) -> bool {
        self.behind.load(Ordering::Acquire)
    }

    /// Offers one delivery; never blocks. The event must already be in the
    /// ring: a watcher that is (or now falls) behind will read it there.
    pub(crate) fn offer(&self, delivery: Delivery, now: Instant) -> Offer {
        let mut q = self.queue.lock();
        if q.terminated || q.draining {
            return Offer::Terminated;
        }
        if self.is_behind() {
            return Offer::Behind;
        }
        q.events.push_back(delivery);
        let mut fell_behind = false;
        if q.events.len() > self.soft_limit {
            let since = *q.full_since.get_or_insert(now);
            if now.duration_since(since) > self.grace || q.events.len() > hard_limit(self.soft_limit) {
                // Everything queued is in the ring, after the last event the
                // body took: it reads it from there (see the module's doc).
                q.events = std::collections::VecDeque::new();
                q.full_since = None;
                q.fell_behind = true;
                self.behind.store(true, Ordering::Release);
                fell_behind = true;
            }
        }
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
        if fell_behind { Offer::FellBehind } else { Offer::Queued }
    }

    /// Queues what the body read from the ring; `reached_newest` (the read
    /// reached the ring's newest event) puts the watcher back on live delivery. The
    /// caller holds the cache's state read lock, which the writer holds for
    /// writing from an event's push into the ring to the end of its dispatch:
    /// so every event is either in this read or offered after the return to
    /// live, never both, never neither.
    pub(crate) fn refill(&self, deliveries: Vec<Delivery>, reached_newest: bool) {
        let mut q = self.queue.lock();
        q.events.extend(deliveries);
        if reached_newest {
            self.behind.store(false, Ordering::Release);
        }
    }

    /// Takes the watcher off the ring for good (its stream ended, or it fell
    /// behind the ring itself); true if it was on it, for the gauge of
    /// watchers reading the ring.
    pub(crate) fn leave_ring(&self) -> bool {
        let _q = self.queue.lock();
        self.behind.swap(false, Ordering::AcqRel)
    }

    /// Ends the watcher's stream cleanly once it has taken what is queued
    /// (the DELETED events of a removed CRD's objects come before the end,
    /// as from the API server): the resource is no longer served.
    pub(crate) fn end(&self) {
        let mut q = self.queue.lock();
        q.draining = true;
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Ends the watcher with 410: it started from a version inside a gap
    /// the cache never saw (a relist), so it may have missed a change.
    pub(crate) fn expire(&self, too_old: TooOld) {
        let mut q = self.queue.lock();
        q.terminated = true;
        q.expired = Some(too_old);
        q.events.clear();
        let waker = q.waker.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Takes the next delivery, or says to read the ring, or registers
    /// `waker` to be woken by the next offer. `Err` once the watcher is
    /// terminated.
    pub(crate) fn take(&self, waker: &Waker) -> Result<Next, Terminated> {
        let mut q = self.queue.lock();
        if q.terminated {
            return Err(match q.expired.take() {
                Some(too_old) => Terminated::Expired(too_old),
                None => Terminated::Ended,
            });
        }
        if self.is_stopped() {
            return Err(Terminated::Stopped);
        }
        match q.events.pop_front() {
            Some(d) => {
                if q.events.len() <= self.soft_limit {
                    q.full_since = None;
                }
                if q.events.is_empty() && q.events.capacity() > 64 {
                    // A burst is over: give its memory back.
                    q.events.shrink_to_fit();
                }
                Ok(Next::Event(d))
            }
            None if q.draining => Err(Terminated::Ended),
            None if self.is_behind() => Ok(Next::FromRing { anew: std::mem::take(&mut q.fell_behind) }),
            None => {
                q.waker = Some(waker.clone());
                Ok(Next::Waiting)
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn queued_len(&self) -> usize {
        self.queue.lock().events.len()
    }
}

/// Why a watcher was closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Terminated {
    /// The resource is no longer served: the stream ends once the queued
    /// events are out.
    Ended,
    /// Its start lies in versions the cache never saw, or it fell behind the
    /// ring itself: the stream ends with 410 and the client lists again.
    Expired(TooOld),
    /// The server is shutting down: the stream ends cleanly.
    Stopped,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::cm;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn delivery(rv: u64) -> Delivery {
        let e = Arc::new(CacheEvent::new(EventType::Added, Arc::new(cm("a", rv, "")), None));
        Delivery::for_filter(&e, &Filter::default()).unwrap()
    }

    fn next_rv(h: &WatcherHandle) -> Option<u64> {
        match h.take(Waker::noop()).unwrap() {
            Next::Event(d) => Some(d.event.rv),
            Next::FromRing { .. } | Next::Waiting => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn offer_wakes_a_waiting_body() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5), QUEUE_SOFT_LIMIT);
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        assert!(matches!(h.take(&waker).unwrap(), Next::Waiting));
        h.offer(delivery(2), Instant::now());
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(next_rv(&h), Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn stop_wakes_a_waiting_body_and_ends_the_stream_before_queued_events() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5), QUEUE_SOFT_LIMIT);
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        assert!(matches!(h.take(&waker).unwrap(), Next::Waiting));
        assert!(!h.is_stopped());
        h.stop();
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst), "the waiting body is woken");
        assert!(h.is_stopped());
        h.offer(delivery(2), Instant::now());
        assert_eq!(h.take(&waker).unwrap_err(), Terminated::Stopped, "queued events are not sent after a stop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_full_past_the_grace_period_drops_its_queue_and_reads_the_ring() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5), QUEUE_SOFT_LIMIT);
        for rv in 0..=QUEUE_SOFT_LIMIT as u64 {
            assert_eq!(h.offer(delivery(rv + 1), Instant::now()), Offer::Queued);
        }
        // Full, but within the grace period: still on live delivery.
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(h.offer(delivery(5000), Instant::now()), Offer::Queued);
        assert_eq!(next_rv(&h), Some(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(h.offer(delivery(5001), Instant::now()), Offer::FellBehind);
        assert!(h.is_behind());
        assert_eq!(h.queued_len(), 0, "no copy of the queue is kept");
        assert_eq!(h.offer(delivery(5002), Instant::now()), Offer::Behind);
        assert!(matches!(h.take(Waker::noop()).unwrap(), Next::FromRing { anew: true }));
        // A ring read that does not reach the newest event keeps it behind...
        h.refill(vec![delivery(2), delivery(3)], false);
        assert_eq!((next_rv(&h), next_rv(&h)), (Some(2), Some(3)));
        assert!(matches!(h.take(Waker::noop()).unwrap(), Next::FromRing { anew: false }));
        assert_eq!(h.offer(delivery(5003), Instant::now()), Offer::Behind);
        // ...one that does puts it back on live delivery, after what it read.
        h.refill(vec![delivery(5003)], true);
        assert!(!h.is_behind());
        assert_eq!(h.offer(delivery(5004), Instant::now()), Offer::Queued);
        assert_eq!((next_rv(&h), next_rv(&h)), (Some(5003), Some(5004)));
        assert!(matches!(h.take(Waker::noop()).unwrap(), Next::Waiting));
        assert!(!h.leave_ring(), "back on live delivery: nothing to leave");
    }

    #[tokio::test(start_paused = true)]
    async fn draining_below_the_limit_resets_the_grace_period() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5), QUEUE_SOFT_LIMIT);
        for rv in 0..=QUEUE_SOFT_LIMIT as u64 {
            h.offer(delivery(rv + 1), Instant::now());
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        for _ in 0..10 {
            next_rv(&h).unwrap();
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        for rv in 0..5 {
            assert_eq!(h.offer(delivery(9000 + rv), Instant::now()), Offer::Queued);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_hard_limit_moves_to_the_ring_at_once() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(3600), QUEUE_SOFT_LIMIT);
        let mut last = Offer::Queued;
        for rv in 0..=hard_limit(QUEUE_SOFT_LIMIT) as u64 {
            last = h.offer(delivery(rv + 1), Instant::now());
        }
        assert_eq!(last, Offer::FellBehind);
        assert!(h.leave_ring(), "a stream ending while behind leaves the ring");
        assert!(!h.leave_ring(), "once");
    }
}
