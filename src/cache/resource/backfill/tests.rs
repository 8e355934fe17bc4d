//! The backfill against an in-process fake upstream that answers a watch
//! from `r` with its logged events after `r` and then a bookmark at its
//! current version, as the API server's watch cache does: waiters share one
//! upstream watch and get, in order, exactly the events after their own
//! version; the API server's 410 reaches them as it sent it; each bound
//! gives what docs/cache.md says.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::channel::{Channel, Sender};
use hyper::body::Incoming;
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};

use super::*;
use crate::body;
use crate::cache::delivery::watcher::{Next, WatcherHandle};
use crate::cache::resource::{CacheSettings, StartAt, Writer};
use crate::cache::state::object::tests::{cm, cm_shape};
use crate::cache::state::store::Objects;
use crate::selector::LabelSelector;
use crate::upstream::{UpstreamOptions, fake_server};

/// The oldest version the test cache's history bridges: its list's.
const LISTED_AT: u64 = 200;

#[derive(Default)]
struct FakeApiServer {
    /// Every event's version and watch line, in order.
    log: Mutex<Vec<(u64, String)>>,
    /// The version of the bookmark that follows a watch's events.
    current: AtomicU64,
    /// The `resourceVersion` of each watch asked for, in order.
    watches: Mutex<Vec<u64>>,
    watch_arrived: Notify,
    /// When set, every watch is answered with this ERROR line.
    error: Mutex<Option<String>>,
    /// When set, each watch waits for a permit before it answers.
    gate: Mutex<Option<Arc<Semaphore>>>,
    /// Watches are held open after their events, with no bookmark.
    silent: AtomicBool,
    held: Mutex<Vec<Sender<Bytes, std::convert::Infallible>>>,
}

impl FakeApiServer {
    fn event(&self, kind: &str, name: &str, rv: u64, labels: &str) {
        let object = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{{{labels}}}}},"data":{{"k":"v"}}}}"#
        );
        self.log.lock().push((rv, format!(r#"{{"type":"{kind}","object":{object}}}"#)));
        self.current.fetch_max(rv, Ordering::SeqCst);
    }

    fn watches(&self) -> Vec<u64> {
        self.watches.lock().clone()
    }

    async fn watches_reach(&self, n: usize) {
        loop {
            let arrived = self.watch_arrived.notified();
            if self.watches.lock().len() >= n {
                return;
            }
            tokio::time::timeout(Duration::from_secs(5), arrived).await.expect("no watch arrived");
        }
    }

    async fn answer(&self, from: u64) -> Response<body::ProxyBody> {
        self.watches.lock().push(from);
        self.watch_arrived.notify_waiters();
        let gate = self.gate.lock().clone();
        if let Some(gate) = gate {
            gate.acquire().await.unwrap().forget();
        }
        if let Some(error) = self.error.lock().clone() {
            return Response::new(body::full(error + "\n"));
        }
        let mut text = String::new();
        for (_, line) in self.log.lock().iter().filter(|(rv, _)| *rv > from) {
            text.push_str(line);
            text.push('\n');
        }
        if self.silent.load(Ordering::SeqCst) {
            let (mut tx, rx) = Channel::<Bytes, std::convert::Infallible>::new(4);
            tx.send_data(Bytes::from(text)).await.unwrap();
            self.held.lock().push(tx);
            return Response::new(body::boxed(rx));
        }
        let rv = self.current.load(Ordering::SeqCst);
        text.push_str(&format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}}}}}}"#
        ));
        text.push('\n');
        Response::new(body::full(text))
    }
}

async fn fake_upstream(state: Arc<FakeApiServer>) -> Arc<Upstream> {
    let addr = fake_server::serve(move |req: Request<Incoming>| {
        let state = state.clone();
        async move {
            let query = fake_server::query(&req);
            let from = query.iter().find(|(k, _)| k == "resourceVersion").map_or(0, |(_, v)| v.parse().unwrap());
            assert!(query.iter().any(|(k, v)| k == "watch" && v == "true"), "only watches are asked for");
            state.answer(from).await
        }
    })
    .await;
    fake_server::upstream(addr, UpstreamOptions::default())
}

/// A configmaps cache listed at [`LISTED_AT`], and the fake upstream whose
/// history reaches further back: `a` added at 150, changed at 160, `b`
/// added at 170, `a` deleted at 180; the API server is at 205.
async fn setup() -> (Writer, Arc<FakeApiServer>, Arc<Upstream>) {
    let writer = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    writer.replace(Objects::new(), LISTED_AT);
    let state = Arc::new(FakeApiServer::default());
    state.event("ADDED", "a", 150, "");
    state.event("MODIFIED", "a", 160, "");
    state.event("ADDED", "b", 170, "");
    state.event("DELETED", "a", 180, "");
    state.current.store(205, Ordering::SeqCst);
    let upstream = fake_upstream(state.clone()).await;
    (writer, state, upstream)
}

fn everything() -> Filter {
    Filter::default()
}

/// The kind, name and version of what a watcher is sent.
fn seen(deliveries: &[Delivery]) -> Vec<(EventType, String, u64)> {
    deliveries.iter().map(|d| (d.kind, d.object().key.name.to_string(), d.object().rv)).collect()
}

fn drain(handle: &WatcherHandle) -> Vec<(EventType, String, u64)> {
    let waker = std::task::Waker::noop().clone();
    let mut out = Vec::new();
    while let Ok(Next::Event(d)) = handle.take(&waker) {
        out.push((d.kind, d.object().key.name.to_string(), d.object().rv));
    }
    out
}

fn served(answer: Answer) -> Resumed {
    match answer {
        Answer::Served(resumed) => resumed,
        Answer::Expired(message) => panic!("410: {message}"),
        Answer::TooMany => panic!("429"),
        Answer::Unreachable => panic!("unreachable"),
        Answer::PassThrough => panic!("passed through"),
    }
}

fn added(name: &str, rv: u64) -> (EventType, String, u64) {
    (EventType::Added, name.to_owned(), rv)
}

#[tokio::test]
async fn waiters_share_one_upstream_watch_and_get_every_event_after_their_version_then_live() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    // An event after the list, in the history and in the upstream's log.
    writer.event(EventType::Added, cm("c", 203, ""));
    state.event("ADDED", "c", 203, "");
    assert!(!cache.bridges(199) && cache.bridges(LISTED_AT));

    let filter = everything();
    let (oldest, middle, newest) = tokio::join!(
        resume(&cache, &upstream, &filter, 149),
        resume(&cache, &upstream, &filter, 160),
        resume(&cache, &upstream, &filter, 175),
    );
    assert_eq!(state.watches(), vec![149], "one upstream watch, from the oldest version asked for");

    let (oldest, middle, newest) = (served(oldest), served(middle), served(newest));
    let deleted_a = (EventType::Deleted, "a".to_owned(), 180);
    assert_eq!(
        seen(&oldest.deliveries),
        vec![
            added("a", 150),
            (EventType::Modified, "a".into(), 160),
            added("b", 170),
            deleted_a.clone(),
            added("c", 203)
        ]
    );
    assert_eq!(seen(&middle.deliveries), vec![added("b", 170), deleted_a.clone(), added("c", 203)], "after 160");
    assert_eq!(seen(&newest.deliveries), vec![deleted_a, added("c", 203)]);
    // Joined at the first version the history bridges: the event at 203.
    assert_eq!((oldest.join, middle.join, newest.join), (203, 203, 203));

    // The cache from the join on: nothing the segment had, nothing missed.
    writer.event(EventType::Modified, cm("c", 204, ""));
    let registration = cache.register(filter.clone(), StartAt::After(oldest.join)).unwrap();
    assert_eq!(seen(&registration.since_version), vec![(EventType::Modified, "c".into(), 204)]);
    writer.event(EventType::Added, cm("d", 206, ""));
    assert_eq!(drain(&registration.handle), vec![added("d", 206)]);
}

#[tokio::test]
async fn a_segment_that_joins_below_the_cache_s_version_leaves_the_rest_to_the_history() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    // The API server's bookmark is at the list's version, and the cache has
    // moved on since: the history holds what follows it.
    state.current.store(LISTED_AT, Ordering::SeqCst);
    writer.event(EventType::Added, cm("c", 203, ""));
    let resumed = served(resume(&cache, &upstream, &everything(), 165).await);
    assert_eq!(resumed.join, LISTED_AT);
    let registration = cache.register(everything(), StartAt::After(resumed.join)).unwrap();
    let mut all = seen(&resumed.deliveries);
    all.extend(seen(&registration.since_version));
    assert_eq!(all, vec![added("b", 170), (EventType::Deleted, "a".into(), 180), added("c", 203)]);
}

#[tokio::test]
async fn the_kept_segment_serves_later_watchers_without_another_upstream_watch() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    served(resume(&cache, &upstream, &everything(), 149).await);
    let later = served(resume(&cache, &upstream, &everything(), 170).await);
    assert_eq!(seen(&later.deliveries), vec![(EventType::Deleted, "a".into(), 180)]);
    assert_eq!(state.watches(), vec![149]);
    // Older than the kept segment: a round of its own.
    served(resume(&cache, &upstream, &everything(), 120).await);
    assert_eq!(state.watches(), vec![149, 120]);
}

#[tokio::test(start_paused = true)]
async fn the_kept_segment_is_forgotten_after_keep_for() {
    let (writer, _, upstream) = setup().await;
    let cache = writer.cache().clone();
    served(resume(&cache, &upstream, &everything(), 149).await);
    assert!(cache.backfills.inner.lock().kept.is_some());
    tokio::time::sleep(KEEP_FOR - Duration::from_millis(1)).await;
    assert!(cache.backfills.inner.lock().kept.is_some(), "kept up to KEEP_FOR");
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert!(cache.backfills.inner.lock().kept.is_none(), "forgotten after it");
}

#[tokio::test]
async fn a_waiter_older_than_the_running_round_waits_for_the_next_from_its_own_version() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    let gate = Arc::new(Semaphore::new(0));
    *state.gate.lock() = Some(gate.clone());
    let waiter = |rv: u64| {
        let (cache, upstream) = (cache.clone(), upstream.clone());
        tokio::spawn(async move { resume(&cache, &upstream, &everything(), rv).await })
    };
    let first = waiter(165);
    state.watches_reach(1).await;
    let (older, oldest, joining) = (waiter(155), waiter(145), waiter(170));
    // Each has registered once it waits; the gate holds the first round.
    while cache.backfills.inner.lock().waiting < 4 {
        tokio::task::yield_now().await;
    }
    gate.add_permits(2);
    let first = served(first.await.unwrap());
    let joining = served(joining.await.unwrap());
    let (older, oldest) = (served(older.await.unwrap()), served(oldest.await.unwrap()));
    assert_eq!(state.watches(), vec![165, 145], "the next round starts from the oldest waiting");
    assert_eq!(seen(&first.deliveries), vec![added("b", 170), (EventType::Deleted, "a".into(), 180)]);
    assert_eq!(seen(&joining.deliveries), vec![(EventType::Deleted, "a".into(), 180)]);
    assert_eq!(seen(&older.deliveries)[0], (EventType::Modified, "a".into(), 160));
    assert_eq!(seen(&oldest.deliveries)[0], added("a", 150));
    assert_eq!(cache.backfills.inner.lock().waiting, 0);
}

#[tokio::test]
async fn the_api_server_s_410_reaches_every_waiter_as_it_sent_it() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    let message = "too old resource version: 149 (150)";
    *state.error.lock() = Some(format!(
        r#"{{"type":"ERROR","object":{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{message}","reason":"Expired","code":410}}}}"#
    ));
    let filter = everything();
    let (one, two) = tokio::join!(resume(&cache, &upstream, &filter, 149), resume(&cache, &upstream, &filter, 160));
    for answer in [one, two] {
        assert!(matches!(answer, Answer::Expired(m) if m == message));
    }
    assert_eq!(state.watches().len(), 1);
}

#[tokio::test]
async fn an_update_whose_previous_state_the_segment_lacks_passes_a_selective_watcher_through() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    state.log.lock().clear();
    // `x` changed at 160: was it labelled app=web before? Not known.
    state.event("MODIFIED", "x", 160, r#""app":"web""#);
    let labelled = Filter { labels: LabelSelector::parse("app=web").unwrap(), ..Filter::default() };
    assert!(matches!(resume(&cache, &upstream, &labelled, 150).await, Answer::PassThrough));
    // Elsewhere, it cannot have been this watcher's.
    let elsewhere = Filter { namespace: Some("other".into()), ..labelled.clone() };
    assert!(served(resume(&cache, &upstream, &elsewhere, 150).await).deliveries.is_empty());
    // A watcher of the namespace or the object sees an update, as the API server sends it.
    let named = Filter { namespace: Some("ns".into()), name: Some("x".into()), ..Filter::default() };
    let resumed = served(resume(&cache, &upstream, &named, 150).await);
    assert_eq!(seen(&resumed.deliveries), vec![(EventType::Modified, "x".into(), 160)]);
    // Once the segment has its earlier state, the transition is known.
    assert!(served(resume(&cache, &upstream, &labelled, 160).await).deliveries.is_empty());
    assert_eq!(state.watches().len(), 1, "all served by one round");
}

#[tokio::test]
async fn a_scope_that_implies_the_watcher_s_selector_makes_every_update_exact() {
    let state = Arc::new(FakeApiServer::default());
    state.event("MODIFIED", "x", 160, r#""app":"web""#);
    state.current.store(205, Ordering::SeqCst);
    let upstream = fake_upstream(state.clone()).await;
    let scope = Scope { labels: LabelSelector::parse("app=web").unwrap(), ..Scope::default() };
    let writer = ResourceCache::create(cm_shape(), scope, CacheSettings::default());
    writer.replace(Objects::new(), LISTED_AT);
    let labelled = Filter { labels: LabelSelector::parse("app=web").unwrap(), ..Filter::default() };
    let resumed = served(resume(writer.cache(), &upstream, &labelled, 150).await);
    assert_eq!(seen(&resumed.deliveries), vec![(EventType::Modified, "x".into(), 160)]);
}

#[tokio::test]
async fn past_max_events_the_waiters_pass_through() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    state.log.lock().clear();
    for i in 0..=MAX_EVENTS as u64 {
        state.event("ADDED", &format!("o{i}"), 1_000 + i, "");
    }
    writer.replace(Objects::new(), 50_000);
    let started = Instant::now();
    assert!(matches!(resume(&cache, &upstream, &everything(), 999).await, Answer::PassThrough));
    assert!(started.elapsed() < MAX_WAIT, "stopped at the bound, not at the wait's end");
    assert!(cache.backfills.inner.lock().kept.is_none(), "nothing kept");
}

#[tokio::test]
async fn past_max_waiters_the_next_gets_429() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    cache.backfills.inner.lock().waiting = MAX_WAITERS;
    assert!(matches!(resume(&cache, &upstream, &everything(), 149).await, Answer::TooMany));
    assert!(state.watches().is_empty(), "refused before any upstream work");
    cache.backfills.inner.lock().waiting = 0;
}

#[tokio::test]
async fn past_max_wait_the_waiter_passes_through() {
    let (writer, state, upstream) = setup().await;
    let cache = writer.cache().clone();
    state.silent.store(true, Ordering::SeqCst);
    let started = Instant::now();
    assert!(matches!(resume(&cache, &upstream, &everything(), 149).await, Answer::PassThrough));
    let took = started.elapsed();
    assert!(took >= MAX_WAIT && took < MAX_WAIT + Duration::from_secs(2), "{took:?}");
    assert_eq!(cache.backfills.inner.lock().waiting, 0);
}

#[tokio::test]
async fn an_upstream_that_cannot_be_reached_leaves_the_cache_s_own_answer() {
    let (writer, _, _) = setup().await;
    let cache = writer.cache().clone();
    // A port nobody listens on any more: the connection is refused.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let upstream = fake_server::upstream(closed, UpstreamOptions::default());
    assert!(matches!(resume(&cache, &upstream, &everything(), 149).await, Answer::Unreachable));
    assert!(cache.backfills.inner.lock().kept.is_none());
}
