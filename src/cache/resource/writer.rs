//! The one writer of a resource cache (kube-runtime's Writer/Store split).
//!
//! A [`Writer`] is made together with its cache and owned by the cache's
//! reflector; the cache itself only reads. Everything that changes the
//! store, the history or the readiness goes through it, so "the reflector is
//! the only writer" holds by construction, not by convention.
//!
//! The freshness proof's short catch-up watch reads the upstream on its own
//! task, but it does not write: it decodes what it reads into [`Change`]s
//! and queues them to the writer, which applies them between the lines of
//! its own watch. Both streams are ordered views of one upstream history, so
//! applying their union in order of arrival, skipping what is not newer than
//! the store, misses nothing and applies nothing twice.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::ResourceCache;
use crate::cache::object::CachedObject;
use crate::cache::store::Objects;
use crate::encode::watch::EventType;

/// Changes a catch-up watch may queue before it must wait for the writer.
pub(super) const CATCH_UP_QUEUE: usize = 256;

/// One change read from an upstream watch, decoded.
#[derive(Debug)]
pub(crate) enum Change {
    /// ADDED, MODIFIED or DELETED, and when its line had been read (the
    /// start of its fan-out time).
    Event(EventType, CachedObject, Instant),
    /// Nothing changed up to this version.
    Bookmark(u64),
}

impl Change {
    /// The version this change brings the cache to.
    pub(crate) fn rv(&self) -> u64 {
        match self {
            Self::Event(_, object, _) => object.rv,
            Self::Bookmark(rv) => *rv,
        }
    }
}

/// The handle that writes one resource cache. Not `Clone`: there is one.
pub(crate) struct Writer {
    cache: Arc<ResourceCache>,
    catch_up: mpsc::Receiver<Change>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("cache", &self.cache).finish_non_exhaustive()
    }
}

impl Deref for Writer {
    type Target = ResourceCache;

    fn deref(&self) -> &ResourceCache {
        &self.cache
    }
}

impl Writer {
    pub(super) fn new(cache: Arc<ResourceCache>, catch_up: mpsc::Receiver<Change>) -> Self {
        Self { cache, catch_up }
    }

    /// The cache, for the readers.
    pub(crate) fn cache(&self) -> &Arc<ResourceCache> {
        &self.cache
    }

    /// Installs the result of a full LIST at `rv` (see [`ResourceCache`]'s
    /// `replace`): the first makes the cache ready, later ones reach
    /// watchers as the difference.
    pub(crate) fn replace(&self, objects: Objects, rv: u64) {
        self.cache.replace(objects, rv)
    }

    /// Applies one change; returns the version it carried.
    pub(crate) fn apply(&self, change: Change) -> u64 {
        let rv = change.rv();
        match change {
            Change::Event(kind, object, arrived) => self.cache.apply_at(kind, object, arrived),
            Change::Bookmark(rv) => self.cache.bookmark(rv),
        }
        rv
    }

    /// The next change a catch-up watch queued; pending forever when none
    /// is running (for `select!` beside the writer's own watch).
    pub(crate) async fn next_catch_up(&mut self) -> Change {
        match self.catch_up.recv().await {
            Some(change) => change,
            // The cache holds the sender, and the writer holds the cache.
            None => std::future::pending().await,
        }
    }

    /// The upstream stopped serving the resource: every watch ends.
    pub(crate) fn close(&self) {
        self.cache.close()
    }

    /// Whether a relist is under way (a gauge).
    pub(crate) fn set_relisting(&self, relisting: bool) {
        self.cache.set_relisting(relisting)
    }

    /// Whether the latest attempt at the initial list failed.
    pub(crate) fn set_initial_list_failing(&self, failing: bool) {
        self.cache.set_initial_list_failing(failing)
    }

    /// Whether list items of this resource carry `kind` and `apiVersion`.
    pub(crate) fn set_list_items_typed(&self, typed: bool) {
        self.cache.set_list_items_typed(typed)
    }

    /// Which protobuf variants the schema check turned off; returns the
    /// previous setting.
    pub(crate) fn set_protobuf_off(&self, off: u8) -> u8 {
        self.cache.set_protobuf_off(off)
    }
}

#[cfg(test)]
impl Writer {
    /// Applies one event (tests).
    pub(crate) fn event(&self, kind: EventType, object: CachedObject) {
        self.apply(Change::Event(kind, object, Instant::now()));
    }

    /// Applies one bookmark (tests).
    pub(crate) fn bookmark(&self, rv: u64) {
        self.apply(Change::Bookmark(rv));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::object::tests::{cm, cm_shape};
    use std::time::Duration;

    use crate::cache::resource::{CacheSettings, Scope};

    #[tokio::test]
    async fn what_a_catch_up_queues_reaches_the_cache_only_through_its_writer() {
        let mut writer = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
        writer.replace(Objects::new(), 10);
        let queue = writer.cache().freshness().catch_up.clone();
        queue.send(Change::Event(EventType::Added, cm("a", 11, ""), Instant::now())).await.unwrap();
        queue.send(Change::Bookmark(15)).await.unwrap();
        assert_eq!(writer.current_rv(), 10, "queued, not applied");
        let first = writer.next_catch_up().await;
        assert_eq!(writer.apply(first), 11);
        let second = writer.next_catch_up().await;
        assert_eq!(writer.apply(second), 15);
        assert_eq!(writer.current_rv(), 15);
        assert_eq!(writer.snapshot().objects.len(), 1);
        // A replayed change older than the store is skipped, not applied twice.
        writer.event(EventType::Deleted, cm("a", 11, ""));
        assert_eq!(writer.snapshot().objects.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_wake_when_the_writer_publishes_and_time_out_otherwise() {
        let writer = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
        let cache = writer.cache().clone();
        assert!(!cache.wait_ready(Duration::from_secs(1)).await, "never listed: times out");
        let waiter = tokio::spawn(async move { cache.wait_for_rv(12, Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        // Waiting before anything is published, so only a wake-up (not a
        // first look) can end the wait in time.
        assert!(!waiter.is_finished());
        writer.replace(Objects::new(), 10);
        writer.bookmark(12);
        assert!(waiter.await.unwrap());
    }
}
