//! Watch events as the cache holds them (their frames are
//! `encode::watch`'s).
//!
//! An event keeps the new state of its object and the previous one, so that
//! each watcher can see it through its own selectors: an object that starts
//! matching arrives as ADDED, one that stops matching as DELETED (its previous
//! state, stamped with this event's resourceVersion), one that matches before
//! and after as MODIFIED.
//!
//! An event from the live upstream watch also carries what the fan-out
//! histogram needs (see [`FanOut`]): when it arrived, and how many of its
//! queued deliveries are still to be handed to their connections.

use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::encode::watch::EventType;

use super::object::CachedObject;

/// One change to one object.
#[derive(Debug)]
pub(crate) struct CacheEvent {
    pub rv: u64,
    pub kind: EventType,
    /// The new state; for DELETED, the last state with the deletion's RV.
    pub object: Arc<CachedObject>,
    /// The state before this event, when the cache had one.
    pub prev: Option<Arc<CachedObject>>,
    /// `prev` stamped with `rv`, built the first time a watcher needs it.
    prev_stamped: OnceLock<Arc<CachedObject>>,
    /// Set for events of the live upstream watch; `None` for the difference
    /// a relist makes, which is not timed.
    pub fanout: Option<FanOut>,
}

/// The clock of one event's fan-out (`watchmux_fanout_duration_seconds`):
/// one `Instant` per event and one counter shared by its deliveries, so
/// timing the last hand-off costs each watcher an atomic decrement and no
/// clock read nor lock.
///
/// The counter starts at zero. Each watcher's body subtracts one when it
/// hands its delivery over ([`FanOut::handed_one`]); the dispatcher adds the
/// number it queued once it has offered the event to everyone
/// ([`FanOut::queued`]). Bodies may run before the dispatcher finishes, so
/// the count goes below zero on the way; it comes back to zero exactly once,
/// at the last of these operations, whichever it is, and that one reads the
/// clock.
#[derive(Debug)]
pub(crate) struct FanOut {
    /// When the event's line had been read from the upstream watch, before it
    /// was decoded.
    pub arrived: Instant,
    outstanding: AtomicIsize,
}

impl FanOut {
    pub(crate) fn new(arrived: Instant) -> Self {
        Self { arrived, outstanding: AtomicIsize::new(0) }
    }

    /// The dispatcher queued `deliveries` of the event: true when every one
    /// of them has already been handed over.
    pub(crate) fn queued(&self, deliveries: usize) -> bool {
        let n = deliveries as isize;
        n > 0 && self.outstanding.fetch_add(n, Ordering::AcqRel) + n == 0
    }

    /// One watcher handed its delivery over: true when it was the last.
    pub(crate) fn handed_one(&self) -> bool {
        self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

impl CacheEvent {
    pub(crate) fn new(kind: EventType, object: Arc<CachedObject>, prev: Option<Arc<CachedObject>>) -> Self {
        Self { rv: object.rv, kind, object, prev, prev_stamped: OnceLock::new(), fanout: None }
    }

    /// The event as one read from the live watch at `arrived`, timed.
    pub(crate) fn arrived_at(self, arrived: Instant) -> Self {
        Self { fanout: Some(FanOut::new(arrived)), ..self }
    }

    /// What a watcher whose filter is `matches` sees of this event, if anything.
    pub(crate) fn as_seen_by(&self, matches: impl Fn(&CachedObject) -> bool) -> Option<(EventType, &CachedObject)> {
        match self.kind {
            EventType::Added => matches(&self.object).then_some((EventType::Added, &*self.object)),
            EventType::Deleted => matches(&self.object).then_some((EventType::Deleted, &*self.object)),
            EventType::Modified => {
                let now = matches(&self.object);
                let before = self.prev.as_deref().is_some_and(&matches);
                match (before, now) {
                    (true, true) => Some((EventType::Modified, &*self.object)),
                    (false, true) => Some((EventType::Added, &*self.object)),
                    (true, false) => Some((EventType::Deleted, self.prev_stamped())),
                    (false, false) => None,
                }
            }
        }
    }

    /// The previous state stamped with this event's resourceVersion (memoized).
    pub(crate) fn prev_stamped(&self) -> &CachedObject {
        self.prev_stamped.get_or_init(|| {
            let prev = self.prev.as_ref().expect("a transition out of a selector has a previous state");
            Arc::new(prev.with_resource_version(self.rv))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::cm;

    fn labelled(o: &CachedObject) -> bool {
        o.labels.get("app").is_some_and(|v| v == "x")
    }

    #[test]
    fn the_fan_out_clock_stops_once_at_the_last_hand_off_whoever_comes_last() {
        // Every watcher hands its delivery over before the dispatcher counts them.
        let early = FanOut::new(Instant::now());
        assert!(!early.handed_one());
        assert!(!early.handed_one());
        assert!(early.queued(2), "the dispatcher's count completes it");
        // The dispatcher counts first; the last watcher stops the clock.
        let late = FanOut::new(Instant::now());
        assert!(!late.queued(3));
        assert!(!late.handed_one());
        assert!(!late.handed_one());
        assert!(late.handed_one());
        // Interleaved: one before the count, two after.
        let mixed = FanOut::new(Instant::now());
        assert!(!mixed.handed_one());
        assert!(!mixed.queued(3));
        assert!(!mixed.handed_one());
        assert!(mixed.handed_one());
        // An event nobody was offered is not a fan-out.
        assert!(!FanOut::new(Instant::now()).queued(0));
    }

    #[test]
    fn selector_transitions_per_watcher() {
        let before = Arc::new(cm("a", 5, r#""app":"x""#));
        let after = Arc::new(cm("a", 9, r#""app":"y""#));
        let leaving = CacheEvent::new(EventType::Modified, after.clone(), Some(before.clone()));
        let (kind, obj) = leaving.as_seen_by(labelled).unwrap();
        assert_eq!(kind, EventType::Deleted);
        assert_eq!(obj.rv, 9, "DELETED on leaving carries the current RV");
        assert_eq!(obj.labels.get("app").unwrap(), "x", "and the previous state");
        assert!(obj.json().windows(17).any(|w| w == br#""resourceVersion""#));

        let entering = CacheEvent::new(EventType::Modified, before.clone(), Some(after.clone()));
        assert_eq!(entering.as_seen_by(labelled).unwrap().0, EventType::Added);
        let staying = CacheEvent::new(EventType::Modified, before.clone(), Some(before.clone()));
        assert_eq!(staying.as_seen_by(labelled).unwrap().0, EventType::Modified);
        let outside = CacheEvent::new(EventType::Modified, after.clone(), Some(after));
        assert!(outside.as_seen_by(labelled).is_none());
        let deleted = CacheEvent::new(EventType::Deleted, before, None);
        assert_eq!(deleted.as_seen_by(labelled).unwrap().0, EventType::Deleted);
    }
}
