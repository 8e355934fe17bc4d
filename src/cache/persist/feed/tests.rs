use std::collections::BTreeMap;

use super::*;
use crate::cache::resource::{CacheSettings, Scope, Writer};
use crate::cache::state::object::tests::{cm, cm_shape};
use crate::cache::state::store::Objects;

fn writer() -> Writer {
    ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default())
}

/// A persister of `w`'s cache into `store`, from nothing.
fn persister(w: &Writer, store: DiskStore, retry_after: std::time::Duration) -> Persister {
    let about = Bytes::from_static(b"{}");
    Persister {
        cache: w.cache().clone(),
        store,
        about,
        sealer: None,
        written_rv: 0,
        degraded: false,
        retry_after,
        compaction_checked: std::time::Instant::now(),
    }
}

/// What the store holds, as (name, json) by key, and its version.
fn on_disk(path: &std::path::Path) -> (u64, BTreeMap<String, Bytes>) {
    let loaded = DiskStore::open(path).unwrap().load().unwrap().expect("written");
    (loaded.rv, loaded.objects.into_iter().map(|(k, v)| (k.name, super::super::squeeze::unpack(v).unwrap())).collect())
}

fn in_memory(cache: &ResourceCache) -> (u64, BTreeMap<String, Bytes>) {
    let snap = cache.snapshot();
    (snap.rv, snap.objects.iter().map(|(k, o)| (k.name.clone(), o.json().clone())).collect())
}

#[tokio::test]
async fn what_the_writer_applies_reaches_the_disk_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.redb");
    let mut w = writer();
    let feed = Feed::start(w.cache().clone(), DiskStore::open(&path).unwrap(), Bytes::from_static(b"{}"), None, 0);
    w.persist_to(Box::new(feed));
    let mut listed = Objects::new();
    for name in ["a", "b", "c"] {
        let o = Arc::new(cm(name, 5, ""));
        listed.insert(o.key.clone(), o);
    }
    w.replace(listed, 10);
    w.event(EventType::Modified, cm("a", 11, "\"x\":\"1\""));
    w.event(EventType::Deleted, cm("b", 12, ""));
    w.event(EventType::Added, cm("d", 13, ""));
    w.bookmark(20);
    w.take_feed().unwrap().finish();
    let (rv, objects) = on_disk(&path);
    assert_eq!(rv, 20, "the bookmark's version is persisted too");
    assert_eq!((rv, objects), in_memory(w.cache()), "the disk holds the cache's state, byte for byte");
    let raw = DiskStore::open(&path).unwrap().load().unwrap().unwrap().objects;
    assert!(raw.iter().all(|(_, v)| v.first() == Some(&0)), "a store without a key holds its objects deflated");
}

/// A queue of one: the writer finds it full nearly every time. It never
/// waits, and the disk still ends with exactly the cache's state (written
/// whole), never a mix of older changes.
#[tokio::test]
async fn a_feed_that_falls_behind_writes_the_whole_state_instead_of_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.redb");
    let mut w = writer();
    let store = DiskStore::open(&path).unwrap();
    let feed = Feed::with_queue(persister(&w, store, RETRY_AFTER_FAILURE), 1);
    let queue = feed.queue.clone();
    w.persist_to(Box::new(feed));
    w.replace(Objects::new(), 1);
    for rv in 2..600u64 {
        let name = format!("o{}", rv % 23);
        if rv.is_multiple_of(7) {
            w.event(EventType::Deleted, cm(&name, rv, ""));
        } else {
            w.event(EventType::Modified, cm(&name, rv, ""));
        }
    }
    w.take_feed().unwrap().finish();
    assert!(queue.dropped.load(Ordering::Relaxed) > 0, "a queue of one should have been full at times");
    assert_eq!(on_disk(&path), in_memory(w.cache()));
}

/// A disk that refuses every write (full): the writer goes on applying
/// without waiting, the resource is memory-only meanwhile, and once the
/// disk takes writes again the store is rewritten whole, equal to the cache.
#[tokio::test]
async fn a_full_disk_degrades_to_memory_only_and_recovers_without_blocking_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.redb");
    let mut w = writer();
    let store = DiskStore::open(&path).unwrap();
    let fault = store.fault.clone();
    w.persist_to(Box::new(Feed::with_queue(persister(&w, store, std::time::Duration::from_millis(20)), 16)));
    w.replace(Objects::new(), 1);
    fault.failing.store(true, Ordering::Release);
    let started = std::time::Instant::now();
    for rv in 2..2000u64 {
        w.event(EventType::Modified, cm(&format!("o{}", rv % 50), rv, ""));
    }
    assert_eq!(w.cache().current_rv(), 1999, "every event applied while the disk refused writes");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the writer waited for the disk");
    fault.failing.store(false, Ordering::Release);
    w.event(EventType::Added, cm("after", 2000, ""));
    w.take_feed().unwrap().finish();
    assert!(fault.failed.load(Ordering::Acquire) > 0, "no commit was refused");
    assert_eq!(on_disk(&path), in_memory(w.cache()), "rewritten whole once the disk took writes");
}
