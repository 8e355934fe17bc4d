//! Watch events as the cache holds them (their frames are
//! `encode::watch`'s).
//!
//! An event keeps the new state of its object and the previous one, so that
//! each watcher can see it through its own selectors: an object that starts
//! matching arrives as ADDED, one that stops matching as DELETED (its previous
//! state, stamped with this event's resourceVersion), one that matches before
//! and after as MODIFIED.

use std::sync::{Arc, OnceLock};

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
}

impl CacheEvent {
    pub(crate) fn new(kind: EventType, object: Arc<CachedObject>, prev: Option<Arc<CachedObject>>) -> Self {
        Self { rv: object.rv, kind, object, prev, prev_stamped: OnceLock::new() }
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
    use crate::cache::object::tests::cm;

    fn labelled(o: &CachedObject) -> bool {
        o.labels.get("app").is_some_and(|v| v == "x")
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
