//! The dispatcher: hands each event to the watchers that can be interested.
//!
//! Watchers live in one bucket each, by the most selective thing their filter
//! pins down: one object, one node, one namespace, or nothing. An event about
//! object `ns/name` on node `n` touches only the buckets `Object(ns/name)`,
//! `Node(n)` (and the previous node, for a pod being bound), `Namespace(ns)`
//! and `All`, so ten thousand kubelets each watching their own pods and their
//! own secrets cost nothing for an event that concerns none of them.

use std::collections::HashMap;
use std::hash::RandomState;
use std::sync::Arc;

use tokio::time::Instant;

use super::watcher::{Delivery, Offer, WatcherHandle};
use crate::cache::delivery::filter::{IndexKey, IndexKeyRef, node_of};
use crate::cache::state::event::CacheEvent;
use crate::cache::state::history::TooOld;

#[derive(Debug, Default)]
pub(crate) struct Dispatcher {
    /// hashbrown's map (std's, with std's keyed hasher: the keys come from
    /// requests and objects) for lookups by a borrowed [`IndexKeyRef`].
    buckets: hashbrown::HashMap<IndexKey, HashMap<u64, Arc<WatcherHandle>>, RandomState>,
    count: usize,
}

/// What one dispatch did, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dispatched {
    /// Watchers the event was queued for.
    pub delivered: usize,
    /// Watchers found terminated (the resource ended for them), now removed.
    pub terminated: usize,
    /// Watchers this event found full past their grace: they read the ring
    /// from now on (see `watcher`).
    pub fell_behind: usize,
}

impl Dispatcher {
    pub(crate) fn add(&mut self, watcher: Arc<WatcherHandle>) {
        let key = watcher.filter.index_key();
        if self.buckets.entry(key).or_default().insert(watcher.id, watcher).is_none() {
            self.count += 1;
        }
    }

    pub(crate) fn remove(&mut self, watcher: &WatcherHandle) {
        let key = watcher.filter.index_key();
        if let Some(bucket) = self.buckets.get_mut(&key) {
            if bucket.remove(&watcher.id).is_some() {
                self.count -= 1;
            }
            if bucket.is_empty() {
                self.buckets.remove(&key);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Ends with 410 every watcher that started strictly between `after` and
    /// `before` (versions the cache never saw, see `History::mark_unobserved`)
    /// and removes it; returns how many.
    pub(crate) fn expire_started_between(&mut self, after: u64, before: u64) -> usize {
        let mut expired = 0;
        self.buckets.retain(|_, bucket| {
            bucket.retain(|_, watcher| {
                let inside = after < watcher.start_rv && watcher.start_rv < before;
                if inside {
                    watcher.expire(TooOld { requested: watcher.start_rv, oldest: before });
                    expired += 1;
                }
                !inside
            });
            !bucket.is_empty()
        });
        self.count -= expired;
        expired
    }

    /// Ends every watcher with 410, as if each had asked for its start
    /// version with `oldest` the oldest the cache can resume from; returns
    /// how many.
    pub(crate) fn expire_all(&mut self, oldest: u64) -> usize {
        let mut expired = 0;
        for bucket in self.buckets.values() {
            for watcher in bucket.values() {
                watcher.expire(TooOld { requested: watcher.start_rv, oldest });
                expired += 1;
            }
        }
        self.buckets.clear();
        self.count -= expired;
        expired
    }

    /// Ends every watcher's stream (the resource is gone) and removes it;
    /// returns how many.
    pub(crate) fn end_all(&mut self) -> usize {
        let ended = self.count;
        for bucket in self.buckets.values() {
            for watcher in bucket.values() {
                watcher.end();
            }
        }
        self.buckets.clear();
        self.count = 0;
        ended
    }

    /// Offers `event` to every interested watcher.
    pub(crate) fn dispatch(&mut self, event: &Arc<CacheEvent>, now: Instant) -> Dispatched {
        let key = &event.object.key;
        let mut keys: [Option<IndexKeyRef>; 6] = [None; 6];
        keys[0] = Some(IndexKeyRef::Object { namespace: &key.namespace, name: &key.name });
        if !key.namespace.is_empty() {
            // Cluster-scoped watchers of namespaced kinds name no namespace.
            keys[1] = Some(IndexKeyRef::Object { namespace: "", name: &key.name });
            keys[2] = Some(IndexKeyRef::Namespace(&key.namespace));
        }
        let node_now = node_of(&event.object);
        let node_before = event.prev.as_deref().and_then(node_of);
        keys[3] = node_now.map(IndexKeyRef::Node);
        keys[4] = node_before.filter(|b| Some(*b) != node_now).map(IndexKeyRef::Node);
        keys[5] = Some(IndexKeyRef::All);

        let mut out = Dispatched::default();
        let mut dead: Vec<(IndexKey, u64)> = Vec::new();
        for k in keys.into_iter().flatten() {
            let Some(bucket) = self.buckets.get(&k) else { continue };
            for watcher in bucket.values() {
                if event.rv <= watcher.start_rv || watcher.is_behind() {
                    continue;
                }
                let Some(delivery) = Delivery::for_filter(event, &watcher.filter) else { continue };
                match watcher.offer(Delivery { timed: true, ..delivery }, now) {
                    Offer::Queued => out.delivered += 1,
                    Offer::FellBehind => out.fell_behind += 1,
                    Offer::Behind => {}
                    Offer::Terminated => {
                        out.terminated += 1;
                        dead.push((k.to_owned(), watcher.id));
                    }
                }
            }
        }
        for (k, id) in dead {
            if let Some(bucket) = self.buckets.get_mut(&k) {
                if bucket.remove(&id).is_some() {
                    self.count -= 1;
                }
                if bucket.is_empty() {
                    self.buckets.remove(&k);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::delivery::filter::Filter;
    use crate::encode::watch::EventType;
    use crate::selector::{FieldSelector, LabelSelector};
    use std::time::Duration;

    use crate::cache::state::object::tests::pod;

    fn watcher(id: u64, ns: Option<&str>, name: Option<&str>, fields: &str) -> Arc<WatcherHandle> {
        let filter = Filter::new(
            ns.map(String::from),
            name.map(String::from),
            LabelSelector::everything(),
            FieldSelector::parse(fields).unwrap(),
        );
        Arc::new(WatcherHandle::new(
            id,
            filter,
            0,
            Duration::from_secs(5),
            crate::cache::delivery::watcher::QUEUE_SOFT_LIMIT,
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn only_interested_buckets_are_touched() {
        let mut d = Dispatcher::default();
        let on_n1 = watcher(1, None, None, "spec.nodeName=n1");
        let on_n2 = watcher(2, None, None, "spec.nodeName=n2");
        let in_ns = watcher(3, Some("a"), None, "");
        let other_ns = watcher(4, Some("b"), None, "");
        let named = watcher(5, Some("a"), Some("p1"), "");
        let everything = watcher(6, None, None, "");
        for w in [&on_n1, &on_n2, &in_ns, &other_ns, &named, &everything] {
            d.add(w.clone());
        }
        assert_eq!(d.len(), 6);
        let event = Arc::new(CacheEvent::new(EventType::Added, pod("p1", "a", "n1", 10), None));
        let out = d.dispatch(&event, Instant::now());
        assert_eq!(out, Dispatched { delivered: 4, terminated: 0, fell_behind: 0 });
        for (w, expect) in [(&on_n1, 1), (&on_n2, 0), (&in_ns, 1), (&other_ns, 0), (&named, 1), (&everything, 1)] {
            assert_eq!(w.queued_len(), expect, "watcher {}", w.id);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn binding_a_pod_reaches_the_new_node_as_added() {
        let mut d = Dispatcher::default();
        let on_n1 = watcher(1, None, None, "spec.nodeName=n1");
        d.add(on_n1.clone());
        let unbound = pod("p", "a", "", 5);
        let bound = pod("p", "a", "n1", 6);
        let event = Arc::new(CacheEvent::new(EventType::Modified, bound, Some(unbound)));
        d.dispatch(&event, Instant::now());
        let waker = futures_noop_waker();
        let Ok(crate::cache::delivery::watcher::Next::Event(d)) = on_n1.take(&waker) else { panic!("no event") };
        assert_eq!(d.kind, EventType::Added);
    }

    #[tokio::test(start_paused = true)]
    async fn unscheduled_pods_reach_a_watch_for_an_empty_node() {
        // The scheduler watches pods with `spec.nodeName=`: the pods no node has yet.
        let mut d = Dispatcher::default();
        let pending = watcher(1, None, None, "spec.nodeName=");
        d.add(pending.clone());
        let created = Arc::new(CacheEvent::new(EventType::Added, pod("p", "a", "", 5), None));
        assert_eq!(d.dispatch(&created, Instant::now()).delivered, 1);
        let bound = Arc::new(CacheEvent::new(EventType::Modified, pod("p", "a", "n1", 6), Some(pod("p", "a", "", 5))));
        assert_eq!(d.dispatch(&bound, Instant::now()).delivered, 1, "binding leaves the watch as a deletion");
        let other = Arc::new(CacheEvent::new(EventType::Added, pod("q", "a", "n2", 7), None));
        assert_eq!(d.dispatch(&other, Instant::now()).delivered, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn events_at_or_before_the_start_version_are_skipped_and_removal_works() {
        let mut d = Dispatcher::default();
        let filter = Filter::default();
        let late = Arc::new(WatcherHandle::new(
            1,
            filter,
            10,
            Duration::from_secs(5),
            crate::cache::delivery::watcher::QUEUE_SOFT_LIMIT,
        ));
        d.add(late.clone());
        let old = Arc::new(CacheEvent::new(EventType::Added, pod("p", "a", "", 10), None));
        assert_eq!(d.dispatch(&old, Instant::now()).delivered, 0);
        let new = Arc::new(CacheEvent::new(EventType::Added, pod("q", "a", "", 11), None));
        assert_eq!(d.dispatch(&new, Instant::now()).delivered, 1);
        d.remove(&late);
        assert!(d.is_empty());
    }

    fn futures_noop_waker() -> std::task::Waker {
        std::task::Waker::noop().clone()
    }
}
