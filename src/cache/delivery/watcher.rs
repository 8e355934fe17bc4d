//! One downstream watcher's queue, shared by the dispatcher (which offers
//! events) and the watcher's response body (which takes them).
//!
//! The queue is bounded in spirit: a watcher may fall up to
//! [`QUEUE_SOFT_LIMIT`] events behind freely. Past that it is "full"; if it
//! stays full for longer than the grace period, or falls [`QUEUE_HARD_LIMIT`]
//! behind, it is terminated: its stream ends and the client resumes from the
//! last resourceVersion it received. The dispatcher never waits for a
//! watcher, so one slow client cannot delay the others.
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
/// Events a watcher may lag behind at all.
pub(crate) const QUEUE_HARD_LIMIT: usize = 4 * QUEUE_SOFT_LIMIT;

/// An event as one watcher sees it.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub event: Arc<CacheEvent>,
    pub kind: EventType,
    /// True when the watcher sees the previous state (a transition out of its
    /// selectors, sent as DELETED).
    pub previous_state: bool,
}

impl Delivery {
    /// The delivery of `event` to a watcher with `filter`, if it sees it at all.
    pub(crate) fn for_filter(event: &Arc<CacheEvent>, filter: &Filter) -> Option<Self> {
        let (kind, obj) = event.as_seen_by(|o| filter.matches(o))?;
        let previous_state = !std::ptr::eq(obj, &*event.object);
        Some(Self { event: event.clone(), kind, previous_state })
    }

    /// The object the watcher is sent.
    pub(crate) fn object(&self) -> &crate::cache::state::object::CachedObject {
        if self.previous_state { self.event.prev_stamped() } else { &self.event.object }
    }
}

#[derive(Debug)]
pub(crate) enum Offer {
    Queued,
    /// The watcher is (now) terminated; remove it.
    Terminated,
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
}

/// The shared half of a watcher.
#[derive(Debug)]
pub(crate) struct WatcherHandle {
    pub id: u64,
    pub filter: Filter,
    /// Only events newer than this are offered.
    pub start_rv: u64,
    grace: Duration,
    queue: Mutex<Queue>,
    /// Set by [`Self::stop`]: the stream ends cleanly, events waiting or not.
    /// Outside the queue's lock so the body can look at it without one.
    stopped: AtomicBool,
}

impl WatcherHandle {
    pub(crate) fn new(id: u64, filter: Filter, start_rv: u64, grace: Duration) -> Self {
        Self { id, filter, start_rv, grace, queue: Mutex::new(Queue::default()), stopped: AtomicBool::new(false) }
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

    /// Offers one delivery; never blocks.
    pub(crate) fn offer(&self, delivery: Delivery, now: Instant) -> Offer {
        let mut q = self.queue.lock();
        if q.terminated || q.draining {
            return Offer::Terminated;
        }
        q.events.push_back(delivery);
        if q.events.len() > QUEUE_SOFT_LIMIT {
            let since = *q.full_since.get_or_insert(now);
            if now.duration_since(since) > self.grace || q.events.len() > QUEUE_HARD_LIMIT {
                q.terminated = true;
                q.events.clear();
                q.events.shrink_to_fit();
            }
        }
        let waker = q.waker.take();
        let terminated = q.terminated;
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
        if terminated { Offer::Terminated } else { Offer::Queued }
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

    /// Takes the next delivery, or registers `waker` to be woken by the next
    /// offer. `Err` once the watcher is terminated.
    pub(crate) fn take(&self, waker: &Waker) -> Result<Option<Delivery>, Terminated> {
        let mut q = self.queue.lock();
        if q.terminated {
            return Err(match q.expired.take() {
                Some(too_old) => Terminated::Expired(too_old),
                None => Terminated::Behind,
            });
        }
        if self.is_stopped() {
            return Err(Terminated::Stopped);
        }
        match q.events.pop_front() {
            Some(d) => {
                if q.events.len() <= QUEUE_SOFT_LIMIT {
                    q.full_since = None;
                }
                if q.events.is_empty() && q.events.capacity() > 64 {
                    // A burst is over: give its memory back.
                    q.events.shrink_to_fit();
                }
                Ok(Some(d))
            }
            None if q.draining => Err(Terminated::Behind),
            None => {
                q.waker = Some(waker.clone());
                Ok(None)
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn backlog(&self) -> usize {
        self.queue.lock().events.len()
    }
}

/// Why a watcher was closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Terminated {
    /// It fell too far behind: the stream ends and the client resumes from
    /// the last version it received.
    Behind,
    /// Its start lies in versions the cache never saw: the stream ends with
    /// 410 and the client lists again.
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

    #[tokio::test(start_paused = true)]
    async fn offer_wakes_a_waiting_body() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5));
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        assert!(h.take(&waker).unwrap().is_none());
        h.offer(delivery(2), Instant::now());
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(h.take(&waker).unwrap().unwrap().event.rv, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_wakes_a_waiting_body_and_ends_the_stream_before_queued_events() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5));
        let flag = Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        assert!(h.take(&waker).unwrap().is_none());
        assert!(!h.is_stopped());
        h.stop();
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst), "the waiting body is woken");
        assert!(h.is_stopped());
        h.offer(delivery(2), Instant::now());
        assert_eq!(h.take(&waker).unwrap_err(), Terminated::Stopped, "queued events are not sent after a stop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_full_past_the_grace_period_is_terminated() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5));
        for rv in 0..=QUEUE_SOFT_LIMIT as u64 {
            assert!(matches!(h.offer(delivery(rv + 1), Instant::now()), Offer::Queued));
        }
        // Full, but within the grace period: still alive.
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(matches!(h.offer(delivery(5000), Instant::now()), Offer::Queued));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(matches!(h.offer(delivery(5001), Instant::now()), Offer::Terminated));
        let waker = Waker::from(Arc::new(Flag(Default::default())));
        assert_eq!(h.take(&waker).unwrap_err(), Terminated::Behind);
    }

    #[tokio::test(start_paused = true)]
    async fn draining_below_the_limit_resets_the_grace_period() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(5));
        let waker = Waker::from(Arc::new(Flag(Default::default())));
        for rv in 0..=QUEUE_SOFT_LIMIT as u64 {
            h.offer(delivery(rv + 1), Instant::now());
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        for _ in 0..10 {
            h.take(&waker).unwrap().unwrap();
        }
        tokio::time::advance(Duration::from_secs(4)).await;
        for rv in 0..5 {
            assert!(matches!(h.offer(delivery(9000 + rv), Instant::now()), Offer::Queued));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_hard_limit_terminates_at_once() {
        let h = WatcherHandle::new(1, Filter::default(), 0, Duration::from_secs(3600));
        let mut last = Offer::Queued;
        for rv in 0..=QUEUE_HARD_LIMIT as u64 {
            last = h.offer(delivery(rv + 1), Instant::now());
        }
        assert!(matches!(last, Offer::Terminated));
    }
}
