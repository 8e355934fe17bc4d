//! The reflector's watch-list against an in-process fake upstream that
//! answers watch-lists one of three ways: as the API server does, with 422
//! (a server without the WatchList feature), as a server that ignores the
//! parameters (a watch from now, an ordinary bookmark, no end), or as one
//! that restarts during the first (its watch ends early, with no end).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::channel::{Channel, Sender};
use hyper::body::Incoming;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::body;
use crate::cache::resource::{CacheSettings, ResourceCache, Scope, SyncSettings};
use crate::cache::resource_info::test_info;
use crate::cache::state::object::ObjectShape;
use crate::cache::sync::reflector::Reflector;
use crate::upstream::{Upstream, UpstreamOptions, fake_server};

const LIST: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"listed","namespace":"ns","resourceVersion":"7"}}]}"#;

fn event(kind: &str, name: &str, rv: u64) -> String {
    format!(
        "{{\"type\":\"{kind}\",\"object\":{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"ns\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
    )
}

fn bookmark(rv: u64, end: bool) -> String {
    let annotations = if end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
    format!(
        "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{annotations}}}}}}}\n"
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Serves {
    WatchList,
    Refuses,
    IgnoresParameters,
    RestartsDuringTheFirst,
}

struct Fake {
    serves: Serves,
    watch_lists: AtomicU32,
    lists: AtomicU32,
    watches: AtomicU32,
    /// The watch-list's stream, kept open to send more on.
    open: Mutex<Option<Sender<Bytes, std::convert::Infallible>>>,
    opened: tokio::sync::Notify,
}

async fn upstream(fake: Arc<Fake>) -> Arc<Upstream> {
    let addr = fake_server::serve(move |req: Request<Incoming>| {
        let fake = fake.clone();
        async move {
            let query = fake_server::query(&req);
            let has = |k: &str, v: &str| query.iter().any(|(qk, qv)| qk == k && qv == v);
            let status = |code: StatusCode| {
                let mut r = Response::new(body::empty());
                *r.status_mut() = code;
                r
            };
            if !req.uri().path().starts_with("/api/v1/configmaps") {
                // The schema check's OpenAPI documents: not here.
                status(StatusCode::NOT_FOUND)
            } else if req.headers().get("accept").is_some_and(|a| a == "application/cbor") {
                status(StatusCode::NOT_ACCEPTABLE)
            } else if has("sendInitialEvents", "true") {
                let nth = fake.watch_lists.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(has("resourceVersionMatch", "NotOlderThan") && has("allowWatchBookmarks", "true"));
                assert!(!query.iter().any(|(k, _)| k == "resourceVersion"), "a watch-list names no version");
                match fake.serves {
                    Serves::Refuses => status(StatusCode::UNPROCESSABLE_ENTITY),
                    // A server shutting down ends its watches cleanly.
                    Serves::RestartsDuringTheFirst if nth == 1 => Response::new(body::full(event("ADDED", "a", 5))),
                    serves => {
                        let (mut tx, rx) = Channel::<Bytes, std::convert::Infallible>::new(8);
                        let mut lines = event("ADDED", "a", 5) + &event("ADDED", "b", 6);
                        // An item that cannot be decoded is skipped, as a list's is.
                        lines += "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"6\"}}}\n";
                        lines += &bookmark(9, serves != Serves::IgnoresParameters);
                        tx.send_data(Bytes::from(lines)).await.unwrap();
                        *fake.open.lock() = Some(tx);
                        fake.opened.notify_waiters();
                        Response::new(body::boxed(rx))
                    }
                }
            } else if has("watch", "true") {
                fake.watches.fetch_add(1, Ordering::SeqCst);
                let (tx, rx) = Channel::<Bytes, std::convert::Infallible>::new(1);
                std::mem::forget(tx);
                Response::new(body::boxed(rx))
            } else {
                fake.lists.fetch_add(1, Ordering::SeqCst);
                Response::new(body::full(LIST))
            }
        }
    })
    .await;
    fake_server::upstream(addr, UpstreamOptions::default())
}

/// A configmaps cache whose reflector asks `fake` for watch-lists; ready.
async fn start(serves: Serves) -> (Arc<Fake>, Arc<ResourceCache>, CancellationToken) {
    let fake = Arc::new(Fake {
        serves,
        watch_lists: AtomicU32::new(0),
        lists: AtomicU32::new(0),
        watches: AtomicU32::new(0),
        open: Mutex::new(None),
        opened: tokio::sync::Notify::new(),
    });
    let upstream = upstream(fake.clone()).await;
    let shape = ObjectShape::new(test_info("", "configmaps", "ConfigMap", true), None);
    let sync = SyncSettings { watch_list: true, ..SyncSettings::default() };
    let writer = ResourceCache::create(shape, Scope::default(), CacheSettings { sync, ..CacheSettings::default() });
    let cache = writer.cache().clone();
    let stop = CancellationToken::new();
    tokio::spawn(Reflector::new(writer, upstream, Arc::default()).run(stop.clone()));
    assert!(cache.wait_ready(Duration::from_secs(10)).await);
    (fake, cache, stop)
}

fn names(cache: &ResourceCache) -> Vec<String> {
    cache.snapshot().objects.keys().map(|k| k.name.to_string()).collect()
}

#[tokio::test]
async fn the_initial_events_are_the_state_and_the_same_watch_goes_on() {
    let (fake, cache, stop) = start(Serves::WatchList).await;
    assert_eq!(cache.current_rv(), 9, "the end bookmark's version");
    assert_eq!(names(&cache), ["a", "b"]);
    // A change on the same stream reaches the cache: no second watch, no LIST.
    let mut tx = fake.open.lock().take().expect("the watch-list's stream");
    tx.send_data(Bytes::from(event("MODIFIED", "a", 11) + &event("DELETED", "b", 12))).await.unwrap();
    assert!(cache.wait_for_rv(12, Duration::from_secs(5)).await, "the cache stayed at {}", cache.current_rv());
    assert_eq!(names(&cache), ["a"]);
    assert_eq!(
        (
            fake.watch_lists.load(Ordering::SeqCst),
            fake.watches.load(Ordering::SeqCst),
            fake.lists.load(Ordering::SeqCst)
        ),
        (1, 0, 0)
    );
    stop.cancel();
}

#[tokio::test]
async fn an_upstream_that_refuses_watch_lists_is_listed_in_pages() {
    let (fake, cache, stop) = start(Serves::Refuses).await;
    assert_eq!(cache.current_rv(), 7, "the LIST's version");
    assert_eq!(names(&cache), ["listed"]);
    assert_eq!((fake.watch_lists.load(Ordering::SeqCst), fake.lists.load(Ordering::SeqCst)), (1, 1));
    stop.cancel();
}

#[tokio::test]
async fn a_watch_that_never_marks_the_end_is_not_taken_for_the_state() {
    let (fake, cache, stop) = start(Serves::IgnoresParameters).await;
    // Not the two objects of a watch from "now" at the ordinary bookmark's
    // version: the LIST it fell back to.
    assert_eq!(cache.current_rv(), 7);
    assert_eq!(names(&cache), ["listed"]);
    assert_eq!((fake.watch_lists.load(Ordering::SeqCst), fake.lists.load(Ordering::SeqCst)), (1, 1));
    stop.cancel();
}

#[tokio::test]
async fn a_watch_list_ended_early_by_a_restart_is_asked_again() {
    let (fake, cache, stop) = start(Serves::RestartsDuringTheFirst).await;
    // The second watch-list's state, not pages: one restart of the upstream
    // does not turn the cache to paginated LISTs for good.
    assert_eq!(cache.current_rv(), 9);
    assert_eq!(names(&cache), ["a", "b"]);
    assert_eq!((fake.watch_lists.load(Ordering::SeqCst), fake.lists.load(Ordering::SeqCst)), (2, 0));
    stop.cancel();
}
