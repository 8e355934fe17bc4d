//! The reflector in front of an upstream that becomes another cluster: a
//! fake whose etcd is "restored from an older backup" mid-run (its versions
//! go back from 100 to 20, its objects are others), and one rebuilt with a
//! new identity whose versions are already past the cache's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::channel::{Channel, Sender};
use hyper::body::Incoming;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use rand::SeedableRng;

use super::{BACKOFF_BASE, BACKOFF_MAX, Reflector, ReflectorState, backoff_delay};
use crate::body;
use crate::cache::delivery::filter::Filter;
use crate::cache::delivery::watcher::Terminated;
use crate::cache::resource::{CacheSettings, ChangeSink, ResourceCache, Scope, StartAt, Writer};
use crate::cache::resource_info::test_info;
use crate::cache::state::object::CachedObject;
use crate::cache::state::object::ObjectShape;
use crate::cache::state::store::Objects;
use crate::cache::sync::cluster::ClusterIdentity;
use crate::upstream::fake_server;

#[test]
fn backoff_grows_and_is_capped_with_jitter() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for failures in 0..40 {
        let d = backoff_delay(failures, &mut rng);
        let nominal = BACKOFF_BASE.saturating_mul(1 << failures.min(16)).min(BACKOFF_MAX);
        assert!(d >= nominal.mul_f64(0.5) && d <= nominal.mul_f64(1.5), "{failures}: {d:?}");
    }
    assert!(backoff_delay(30, &mut rng) <= BACKOFF_MAX.mul_f64(1.5));
}

/// One cluster as the fake serves it.
struct Era {
    uid: &'static str,
    list: &'static str,
    rv: u64,
}

const OLD: Era = Era {
    uid: "old-uid",
    list: r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"100"},"items":[{"metadata":{"name":"old","namespace":"ns","resourceVersion":"90"}}]}"#,
    rv: 100,
};
/// Restored from an older backup: versions below the cache's.
const RESTORED: Era = Era {
    uid: "old-uid",
    list: r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[{"metadata":{"name":"restored","namespace":"ns","resourceVersion":"15"}}]}"#,
    rv: 20,
};
/// Rebuilt: a new identity, versions already past the cache's.
const REBUILT: Era = Era {
    uid: "new-uid",
    list: r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"500"},"items":[{"metadata":{"name":"rebuilt","namespace":"ns","resourceVersion":"450"}}]}"#,
    rv: 500,
};

struct Fake {
    era: Mutex<&'static Era>,
    lists: AtomicU32,
    /// The version the last watch asked for.
    watched_from: AtomicU64,
    /// The open watch, to end it (an API server restart).
    open: Mutex<Option<Sender<Bytes, std::convert::Infallible>>>,
}

async fn start(fake: Arc<Fake>) -> (Arc<ResourceCache>, CancellationToken) {
    let writer = ResourceCache::create(shape(), Scope::default(), CacheSettings::default());
    let cache = writer.cache().clone();
    let stop = run(fake, writer, ReflectorState::Listing, Arc::default()).await;
    assert!(cache.wait_ready(Duration::from_secs(10)).await);
    (cache, stop)
}

fn shape() -> ObjectShape {
    ObjectShape::new(test_info("", "configmaps", "ConfigMap", true), None)
}

/// Serves `fake` and runs a reflector for `writer` against it from `first`.
async fn run(
    fake: Arc<Fake>,
    writer: Writer,
    first: ReflectorState,
    cluster: Arc<ClusterIdentity>,
) -> CancellationToken {
    let served = fake.clone();
    let addr = fake_server::serve(move |req: Request<Incoming>| {
        let fake = served.clone();
        async move {
            let era: &Era = *fake.era.lock();
            let query = fake_server::query(&req);
            let get = |k: &str| query.iter().find(|(qk, _)| qk == k).map(|(_, v)| v.clone());
            let path = req.uri().path();
            if path == "/api/v1/namespaces/kube-system" {
                let ns = format!(r#"{{"kind":"Namespace","metadata":{{"name":"kube-system","uid":"{}"}}}}"#, era.uid);
                return Response::new(body::full(ns));
            }
            if !path.starts_with("/api/v1/configmaps") || req.headers().get("accept").is_some_and(|a| a != "application/json") {
                let mut r = Response::new(body::empty());
                *r.status_mut() = StatusCode::NOT_FOUND;
                return r;
            }
            if get("watch").as_deref() == Some("true") {
                let from: u64 = get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
                fake.watched_from.store(from, Ordering::SeqCst);
                if from > era.rv {
                    // What the watch cache answers a version it has not reached.
                    let status = format!(
                        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too large resource version: {from}, current: {}","reason":"Timeout","details":{{"causes":[{{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}}],"retryAfterSeconds":1}},"code":504}}"#,
                        era.rv
                    );
                    let mut r = Response::new(body::full(status));
                    *r.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                    return r;
                }
                let (tx, rx) = Channel::<Bytes, std::convert::Infallible>::new(1);
                *fake.open.lock() = Some(tx);
                return Response::new(body::boxed(rx));
            }
            if get("limit").as_deref() != Some("1") {
                // Full lists only, not the probes of the current version.
                fake.lists.fetch_add(1, Ordering::SeqCst);
            }
            Response::new(body::full(era.list))
        }
    })
    .await;
    let upstream = fake_server::upstream(addr, crate::upstream::UpstreamOptions::default());
    let stop = CancellationToken::new();
    let reflector = Reflector::new(writer, upstream, Arc::default()).with_cluster(cluster);
    tokio::spawn(reflector.run_from(first, stop.clone()));
    stop
}

fn names(cache: &ResourceCache) -> Vec<String> {
    cache.snapshot().objects.keys().map(|k| k.name.to_string()).collect()
}

/// Waits (bounded) until `done` holds of the cache.
async fn until(cache: &ResourceCache, done: impl Fn(&ResourceCache) -> bool) -> bool {
    for _ in 0..200 {
        if done(cache) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The upstream "becomes" `era` behind the same address: the API server
/// restarts (its open watch ends) on another etcd.
async fn becomes(fake: &Fake, era: &'static Era) {
    for _ in 0..100 {
        if fake.open.lock().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    *fake.era.lock() = era;
    drop(fake.open.lock().take().expect("a watch was open"));
}

fn expired(watcher: &crate::cache::resource::Registration) -> bool {
    let waker = std::task::Waker::noop().clone();
    loop {
        match watcher.handle.take(&waker) {
            Err(Terminated::Expired(_)) => return true,
            Err(_) => return false,
            Ok(crate::cache::delivery::watcher::Next::Event(_)) => {}
            Ok(_) => return false,
        }
    }
}

fn fake() -> Arc<Fake> {
    Arc::new(Fake {
        era: Mutex::new(&OLD),
        lists: AtomicU32::new(0),
        watched_from: AtomicU64::new(0),
        open: Mutex::new(None),
    })
}

#[tokio::test]
async fn an_upstream_restored_from_an_older_backup_is_relisted_as_a_new_start() {
    let fake = fake();
    let (cache, stop) = start(fake.clone()).await;
    assert_eq!((cache.current_rv(), names(&cache)), (100, vec!["old".to_owned()]));
    let watcher = cache.register(Filter::default(), StartAt::After(100)).unwrap();
    becomes(&fake, &RESTORED).await;
    // The watch from 100 gets the 504; the list tells: versions went back.
    assert!(until(&cache, |c| c.current_rv() == 20).await, "the cache took the new cluster's version");
    assert_eq!(names(&cache), ["restored"], "none of the old cluster's objects is served");
    assert_eq!(fake.lists.load(Ordering::SeqCst), 2, "one relist");
    assert!(expired(&watcher), "the watcher at the old cluster's version got 410");
    // Watches resume from the new cluster's version.
    assert!(until(&cache, |_| fake.watched_from.load(Ordering::SeqCst) == 20).await);
    assert!(cache.register(Filter::default(), StartAt::After(20)).is_ok());
    stop.cancel();
}

#[tokio::test]
async fn a_rebuilt_cluster_past_the_caches_version_is_told_by_its_identity() {
    let fake = fake();
    let (cache, stop) = start(fake.clone()).await;
    let watcher = cache.register(Filter::default(), StartAt::After(100)).unwrap();
    // Its versions are past 100: the watch from 100 would be accepted and
    // mix its events into the old state. The identity check before the
    // resumed watch finds the new uid.
    becomes(&fake, &REBUILT).await;
    assert!(until(&cache, |c| c.current_rv() == 500).await, "relisted");
    assert_eq!(names(&cache), ["rebuilt"]);
    assert!(expired(&watcher), "the watcher at the old cluster's version got 410");
    stop.cancel();
}

/// A store persisted from the old cluster, loaded at start-up in front of a
/// rebuilt one whose versions are past it: the check before the first
/// watch finds the identity the store recorded changed, and the store's
/// state is replaced by the new cluster's list.
#[tokio::test]
async fn a_store_loaded_from_disk_from_another_cluster_is_dropped_before_its_watch() {
    let fake = fake();
    *fake.era.lock() = &REBUILT;
    let mut writer = ResourceCache::create(shape(), Scope::default(), CacheSettings::default());
    let cache = writer.cache().clone();
    let old = CachedObject::decode(
        Bytes::from_static(br#"{"metadata":{"name":"old","namespace":"ns","resourceVersion":"90"}}"#),
        &cache.shape,
    )
    .unwrap();
    let mut objects = Objects::new();
    objects.insert(old.key.clone(), Arc::new(old));
    writer.restore(objects, 100);
    let kept = Arc::new(Mutex::new(None));
    writer.persist_to(Box::new(IdentitySink(kept.clone())));
    let cluster = Arc::new(ClusterIdentity::default());
    cluster.seed(Some(OLD.uid.to_owned()));
    let watcher = cache.register(Filter::default(), StartAt::After(100)).unwrap();
    let stop = run(fake.clone(), writer, ReflectorState::Watching { rv: 100 }, cluster.clone()).await;
    assert!(until(&cache, |c| c.current_rv() == 500).await, "listed the new cluster");
    assert_eq!(names(&cache), ["rebuilt"]);
    assert!(expired(&watcher));
    assert_eq!(cluster.recorded().as_deref(), Some(REBUILT.uid), "the new identity, for the store to keep");
    assert_eq!(kept.lock().as_deref(), Some(REBUILT.uid), "and handed to the store with the new list");
    assert!(!cache.is_unconfirmed());
    stop.cancel();
}

/// A persisted store's side of the writer, keeping only the identity it is
/// told to record.
struct IdentitySink(Arc<Mutex<Option<String>>>);

impl ChangeSink for IdentitySink {
    fn changed(&self, _: &crate::cache::state::event::CacheEvent) {}
    fn version(&self, _: u64) {}
    fn whole(&self) {}
    fn cluster_identity(&self, identity: Option<String>) {
        *self.0.lock() = identity;
    }
    fn finish(self: Box<Self>) {}
}
