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
    Persister::new(w.cache().clone(), target(store), retry_after)
}

fn target(store: DiskStore) -> Target {
    Target { store, header: Header::about(b"{}"), sealer: None, ledger: None, written_rv: 0, generation: 0 }
}

/// What the store holds, as (name, json) by key, and its version.
fn on_disk(path: &std::path::Path) -> (u64, BTreeMap<String, Bytes>) {
    let loaded = DiskStore::open(path).unwrap().load().unwrap().expect("written");
    (
        loaded.rv,
        loaded
            .objects
            .into_iter()
            .map(|(k, v)| (k.name.to_string(), super::super::squeeze::unpack(v).unwrap()))
            .collect(),
    )
}

fn in_memory(cache: &ResourceCache) -> (u64, BTreeMap<String, Bytes>) {
    let snap = cache.snapshot();
    (snap.rv, snap.objects.iter().map(|(k, o)| (k.name.to_string(), o.json().clone())).collect())
}

#[tokio::test]
async fn what_the_writer_applies_reaches_the_disk_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.redb");
    let mut w = writer();
    let feed = Feed::start(w.cache().clone(), target(DiskStore::open(&path).unwrap()));
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
/// disk takes writes again the store is reopened and rewritten whole, equal
/// to the cache.
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
    // The handle that failed refuses every commit after (as redb's does):
    // only a reopen lets the store be written again.
    assert!(fault.reopened.load(Ordering::Acquire) > 0, "the store was never reopened");
    assert_eq!(on_disk(&path), in_memory(w.cache()), "rewritten whole once the disk took writes");
}

/// A failed commit and then nothing: the store still catches up, without
/// waiting for the next change (the thread retries on its own).
#[tokio::test]
async fn a_failed_commit_is_retried_without_a_new_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.redb");
    let mut w = writer();
    let store = DiskStore::open(&path).unwrap();
    let fault = store.fault.clone();
    w.persist_to(Box::new(Feed::with_queue(persister(&w, store, std::time::Duration::from_millis(10)), 16)));
    fault.failing.store(true, Ordering::Release);
    w.replace(Objects::new(), 1);
    w.event(EventType::Added, cm("a", 2, ""));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fault.failed.load(Ordering::Acquire) < 2 && std::time::Instant::now() < until {
        std::thread::yield_now();
    }
    assert!(fault.failed.load(Ordering::Acquire) >= 2, "retried without a new change");
    fault.failing.store(false, Ordering::Release);
    while fault.reopened.load(Ordering::Acquire) == 0 && std::time::Instant::now() < until {
        std::thread::yield_now();
    }
    let feed = w.take_feed().unwrap();
    feed.finish();
    assert_eq!(on_disk(&path), in_memory(w.cache()));
}
