//! Watch streams read frame by frame on a paused clock: what a client receives, in which order,
//! and at which moment. Every frame is parsed as the one JSON line it must be.

use std::pin::pin;
use std::task::Poll;

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::time::advance;

use super::*;
use crate::cache::delivery::filter::Filter;
use crate::cache::resource::{CacheSettings, Scope, StartAt, Writer};
use crate::cache::state::object::tests::{cm, cm_shape};
use crate::cache::state::store::Objects;
use crate::selector::{FieldSelector, LabelSelector};

const LONG: Duration = Duration::from_secs(3600);
const MS: Duration = Duration::from_millis(1);
const MINUTE: Duration = Duration::from_secs(60);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A ConfigMap in any namespace (`cm` always uses the namespace "ns").
fn cm_in(ns: &str, name: &str, rv: u64, labels: &str) -> CachedObject {
    let meta = format!(r#""name":"{name}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{{labels}}}"#);
    let raw = format!(r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{{meta}}}}}"#);
    CachedObject::decode(Bytes::from(raw), &cm_shape()).unwrap()
}

/// A ready cache at resourceVersion 10 holding `objects`.
fn cache_with(objects: impl IntoIterator<Item = CachedObject>) -> Writer {
    let cache = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    let objects: Objects = objects.into_iter().map(|o| (o.key.clone(), Arc::new(o))).collect();
    cache.replace(objects, 10);
    cache
}

fn filter(namespace: Option<&str>, labels: &str, fields: &str) -> Filter {
    let labels = LabelSelector::parse(labels).unwrap();
    Filter::new(namespace.map(str::to_owned), None, labels, FieldSelector::parse(fields).unwrap())
}

fn everything() -> Filter {
    Filter::default()
}

fn opts(allow_bookmarks: bool, timeout: Duration) -> StreamOptions {
    let variant = ContentVariant::Json;
    StreamOptions {
        variant,
        allow_bookmarks,
        initial_events_end: false,
        timeout,
        stop: CancellationToken::new(),
        table: None,
    }
}

fn watch(cache: &Writer, filter: Filter, start: StartAt, opts: StreamOptions) -> WatchStream {
    WatchStream::new(cache.cache().clone(), cache.cache().register(filter, start).unwrap(), opts)
}

/// Polls `frame()` exactly once, so the paused clock never moves on its own: `Pending` when
/// nothing is due yet, `Ready(None)` once the stream ended.
async fn poll_frame(body: &mut Pin<&mut WatchStream>) -> Poll<Option<Value>> {
    let mut frame = pin!(body.frame());
    let polled = std::future::poll_fn(|cx| Poll::Ready(frame.as_mut().poll(cx))).await;
    polled.map(|f| f.map(|f| line(f.expect("a watch stream never fails").into_data().expect("a data frame"))))
}

/// Awaits the next frame as hyper would, the paused clock running on to the next timer; `None`
/// once the stream ended. A body that forgets to register a waker trips the timeout instead.
async fn await_frame(body: &mut Pin<&mut WatchStream>) -> Option<Value> {
    let frame = tokio::time::timeout(10 * LONG, body.frame()).await.expect("the body wakes its reader");
    frame.map(|f| line(f.expect("a watch stream never fails").into_data().expect("a data frame")))
}

/// A frame's bytes, which must be one JSON object and its newline.
fn line(mut chunk: Chunk) -> Value {
    let bytes = chunk.copy_to_bytes(chunk.remaining());
    let text = std::str::from_utf8(&bytes).unwrap();
    let json = text.strip_suffix('\n').unwrap_or_else(|| panic!("a frame ends with a newline: {text:?}"));
    assert!(!json.contains('\n'), "one event per frame: {text:?}");
    serde_json::from_str(json).unwrap()
}

async fn next(body: &mut Pin<&mut WatchStream>) -> Value {
    match poll_frame(body).await {
        Poll::Ready(Some(v)) => v,
        other => panic!("expected an event, got {other:?}"),
    }
}

async fn assert_pending(body: &mut Pin<&mut WatchStream>) {
    let polled = poll_frame(body).await;
    assert!(polled.is_pending(), "expected nothing yet, got {polled:?}");
}

async fn assert_ended(body: &mut Pin<&mut WatchStream>) {
    assert_eq!(poll_frame(body).await, Poll::Ready(None));
    assert!(body.is_end_stream());
}

/// `(type, name, resourceVersion)` of an event; a bookmark has no name.
fn brief(v: &Value) -> (String, String, u64) {
    let meta = &v["object"]["metadata"];
    let rv = meta["resourceVersion"].as_str().expect("a resourceVersion").parse().unwrap();
    (v["type"].as_str().unwrap().to_owned(), meta["name"].as_str().unwrap_or("").to_owned(), rv)
}

fn ev(kind: &str, name: &str, rv: u64) -> (String, String, u64) {
    (kind.to_owned(), name.to_owned(), rv)
}

fn bookmark(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata}})
}

fn cm_bookmark(rv: u64) -> Value {
    bookmark("ConfigMap", "v1", rv, false)
}

#[test]
fn bookmark_schedule_follows_the_api_server() {
    let now = Instant::now();
    // Long watch: every minute.
    assert_eq!(next_bookmark_time(now, now + Duration::from_secs(1800)), Some(now + BOOKMARK_FREQUENCY));
    // Short watch: two seconds before the deadline.
    assert_eq!(next_bookmark_time(now, now + Duration::from_secs(30)), Some(now + Duration::from_secs(28)));
    // Deadline too close: none.
    assert_eq!(next_bookmark_time(now, now + Duration::from_secs(1)), None);
}

// Bookmarks.

#[tokio::test(start_paused = true)]
async fn bookmarks_come_every_minute_at_the_caches_current_version() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(true, LONG)));
    for rv in [15, 20] {
        cache.bookmark(rv);
        advance(MINUTE - MS).await;
        assert_pending(&mut body).await;
        advance(MS).await;
        assert_eq!(next(&mut body).await, cm_bookmark(rv));
        assert_pending(&mut body).await;
    }
}

#[tokio::test(start_paused = true)]
async fn no_bookmarks_without_allow_watch_bookmarks() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(false, LONG)));
    for rv in [15, 20, 25] {
        cache.bookmark(rv);
        advance(MINUTE).await;
        assert_pending(&mut body).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_30_second_watch_gets_its_bookmark_at_28_seconds() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(true, secs(30))));
    cache.bookmark(15);
    advance(secs(28) - MS).await;
    assert_pending(&mut body).await;
    advance(MS).await;
    assert_eq!(next(&mut body).await, cm_bookmark(15));
    // The last one before the deadline: nothing more, then the end.
    cache.bookmark(16);
    advance(secs(2) - MS).await;
    assert_pending(&mut body).await;
    advance(MS).await;
    assert_ended(&mut body).await;
}

#[tokio::test(start_paused = true)]
async fn no_bookmark_when_nothing_advanced_since_the_last_event_sent() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(true, LONG)));
    // Still at the version the watch started from.
    advance(MINUTE).await;
    assert_pending(&mut body).await;
    cache.event(EventType::Added, cm("a", 11, ""));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "a", 11));
    // At the version of the last event sent.
    advance(MINUTE).await;
    assert_pending(&mut body).await;
    cache.bookmark(12);
    advance(MINUTE - MS).await;
    assert_pending(&mut body).await;
    advance(MS).await;
    assert_eq!(next(&mut body).await, cm_bookmark(12));
}

// Timeouts.

#[tokio::test(start_paused = true)]
async fn the_stream_ends_exactly_at_its_timeout() {
    let cache = cache_with([cm("a", 5, "")]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(false, secs(30))));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "a", 5));
    advance(secs(29)).await;
    cache.event(EventType::Modified, cm("a", 11, ""));
    assert_eq!(brief(&next(&mut body).await), ev("MODIFIED", "a", 11));
    advance(secs(1) - MS).await;
    assert_pending(&mut body).await;
    advance(MS).await;
    assert_ended(&mut body).await;
    assert_ended(&mut body).await;
}

#[tokio::test(start_paused = true)]
async fn the_stream_ends_at_its_timeout_even_with_events_waiting() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(false, secs(30))));
    // One event a second, read a second later: the reader always finds one waiting.
    for rv in 11..40 {
        cache.event(EventType::Modified, cm("a", rv, ""));
        advance(secs(1)).await;
        assert_eq!(brief(&next(&mut body).await).2, rv);
    }
    cache.event(EventType::Modified, cm("a", 40, ""));
    advance(secs(1)).await;
    assert_ended(&mut body).await;
}

// Initial events.

/// Objects in three namespaces, inserted out of key order.
fn spread() -> [CachedObject; 5] {
    [
        cm_in("b", "z", 3, r#""app":"x""#),
        cm_in("a", "y", 4, r#""app":"x""#),
        cm_in("b", "m", 5, r#""app":"y""#),
        cm_in("b", "c", 6, r#""app":"x""#),
        cm_in("c", "c", 7, ""),
    ]
}

/// The `namespace/name` of every initial event a watch with `filter` receives.
async fn initial_keys(cache: &Writer, filter: Filter) -> Vec<String> {
    let mut body = pin!(watch(cache, filter, StartAt::CurrentState, opts(false, LONG)));
    let mut keys = Vec::new();
    while let Poll::Ready(Some(v)) = poll_frame(&mut body).await {
        assert_eq!(v["type"], "ADDED", "{v}");
        let meta = &v["object"]["metadata"];
        keys.push(format!("{}/{}", meta["namespace"].as_str().unwrap(), meta["name"].as_str().unwrap()));
    }
    keys
}

#[tokio::test(start_paused = true)]
async fn current_state_sends_added_for_every_matching_object_in_key_order() {
    let cache = cache_with(spread());
    assert_eq!(initial_keys(&cache, everything()).await, ["a/y", "b/c", "b/m", "b/z", "c/c"]);
    assert_eq!(initial_keys(&cache, filter(Some("b"), "", "")).await, ["b/c", "b/m", "b/z"]);
    assert_eq!(initial_keys(&cache, filter(None, "app=x", "")).await, ["a/y", "b/c", "b/z"]);
    assert_eq!(initial_keys(&cache, filter(Some("b"), "app=x", "")).await, ["b/c", "b/z"]);
    assert_eq!(initial_keys(&cache, filter(None, "", "metadata.name=c")).await, ["b/c", "c/c"]);
    assert_eq!(initial_keys(&cache, filter(Some("b"), "", "metadata.name=m")).await, ["b/m"]);
    assert!(initial_keys(&cache, filter(Some("d"), "", "")).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn current_state_sends_the_snapshot_then_live_events_through_the_filter() {
    let cache = cache_with(spread());
    let mut body = pin!(watch(&cache, filter(Some("b"), "app=x", ""), StartAt::CurrentState, opts(false, LONG)));
    // Applied before the initial events are read: not in the snapshot, sent after it.
    cache.event(EventType::Added, cm_in("b", "d", 11, r#""app":"x""#));
    cache.event(EventType::Added, cm_in("a", "d", 12, r#""app":"x""#));
    cache.event(EventType::Added, cm_in("b", "e", 13, r#""app":"y""#));
    let mut seen = Vec::new();
    while let Poll::Ready(Some(v)) = poll_frame(&mut body).await {
        seen.push(brief(&v));
    }
    assert_eq!(seen, [ev("ADDED", "c", 6), ev("ADDED", "z", 3), ev("ADDED", "d", 11)]);
}

fn watch_list(allow_bookmarks: bool) -> StreamOptions {
    StreamOptions { initial_events_end: true, ..opts(allow_bookmarks, LONG) }
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_sends_the_end_bookmark_at_the_snapshot_version_right_after_the_initial_events() {
    let cache = cache_with([cm("a", 5, ""), cm("b", 6, "")]);
    cache.bookmark(12);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, watch_list(true)));
    cache.event(EventType::Added, cm("c", 13, ""));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "a", 5));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "b", 6));
    assert_eq!(next(&mut body).await, bookmark("ConfigMap", "v1", 12, true));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "c", 13));
    assert_pending(&mut body).await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_with_nothing_matching_sends_the_end_bookmark_first() {
    let cache = cache_with([cm("a", 5, "")]);
    let mut body = pin!(watch(&cache, filter(None, "app=x", ""), StartAt::CurrentState, watch_list(true)));
    assert_eq!(next(&mut body).await, bookmark("ConfigMap", "v1", 10, true));
    assert_pending(&mut body).await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_list_without_allow_watch_bookmarks_gets_no_end_bookmark() {
    let cache = cache_with([cm("a", 5, "")]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, watch_list(false)));
    cache.event(EventType::Added, cm("c", 11, ""));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "a", 5));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "c", 11));
    assert_pending(&mut body).await;
}

// Resuming.

/// Objects `o0`..`o2` modified in turn: the event at `rv`.
fn turn(rv: u64) -> CachedObject {
    cm(&format!("o{}", rv % 3), rv, "")
}

#[tokio::test(start_paused = true)]
async fn resuming_sends_the_history_after_the_version_then_live_events_exactly_once() {
    let cache = cache_with([]);
    for rv in 11..=15 {
        cache.event(EventType::Modified, turn(rv));
    }
    let mut body = pin!(watch(&cache, everything(), StartAt::After(12), opts(false, LONG)));
    let mut seen = Vec::new();
    for rv in 16..=30 {
        // Between two reads, sometimes one event is applied, sometimes two.
        cache.event(EventType::Modified, turn(rv));
        if rv % 2 == 0 {
            seen.push(brief(&next(&mut body).await));
        }
    }
    while let Poll::Ready(Some(v)) = poll_frame(&mut body).await {
        seen.push(brief(&v));
    }
    // The first event of each of o0..o2 (rv 11..=13) was an ADDED.
    let expected = (13..=30).map(|rv| ev(if rv == 13 { "ADDED" } else { "MODIFIED" }, &turn(rv).key.name, rv));
    assert_eq!(seen, expected.collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn resuming_from_a_future_version_waits_for_the_events_after_it() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::After(12), opts(true, LONG)));
    // The cache (at 10) is behind the watch: no bookmark either.
    advance(MINUTE).await;
    assert_pending(&mut body).await;
    for rv in 11..=13 {
        cache.event(EventType::Modified, turn(rv));
    }
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "o1", 13));
    assert_pending(&mut body).await;
}

// Selector transitions.

/// One change to object `a`: its type, version and labels, and what a watch on `app=x` sees of it.
type Step = (EventType, u64, &'static str, Option<(&'static str, Value)>);

/// Object `a` (at first `app=x`) leaving the selector, changing outside it, entering, changing inside it, deleted.
fn transitions() -> [Step; 5] {
    let (x, x2) = (json!({"app": "x"}), json!({"app": "x", "v": "2"}));
    [
        // Leaving: its previous state, stamped with the new version.
        (EventType::Modified, 11, r#""app":"y""#, Some(("DELETED", x.clone()))),
        (EventType::Modified, 12, r#""app":"z""#, None),
        (EventType::Modified, 13, r#""app":"x""#, Some(("ADDED", x))),
        (EventType::Modified, 14, r#""app":"x","v":"2""#, Some(("MODIFIED", x2.clone()))),
        (EventType::Deleted, 15, r#""app":"x","v":"2""#, Some(("DELETED", x2))),
    ]
}

fn assert_transition(v: &Value, kind: &str, labels: &Value, rv: u64) {
    assert_eq!(brief(v), ev(kind, "a", rv), "{v}");
    assert_eq!(&v["object"]["metadata"]["labels"], labels, "{v}");
}

#[tokio::test(start_paused = true)]
async fn selector_transitions_arrive_as_added_and_deleted_with_the_new_version() {
    let cache = cache_with([cm("a", 5, r#""app":"x""#)]);
    let mut body = pin!(watch(&cache, filter(None, "app=x", ""), StartAt::CurrentState, opts(false, LONG)));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "a", 5));
    for (kind, rv, labels, seen) in transitions() {
        cache.event(kind, cm("a", rv, labels));
        match seen {
            Some((kind, labels)) => assert_transition(&next(&mut body).await, kind, &labels, rv),
            None => assert_pending(&mut body).await,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn selector_transitions_from_the_history_are_seen_the_same_way() {
    let cache = cache_with([cm("a", 5, r#""app":"x""#)]);
    for (kind, rv, labels, _) in transitions() {
        cache.event(kind, cm("a", rv, labels));
    }
    let mut body = pin!(watch(&cache, filter(None, "app=x", ""), StartAt::After(10), opts(false, LONG)));
    for (_, rv, _, seen) in transitions() {
        if let Some((kind, labels)) = seen {
            assert_transition(&next(&mut body).await, kind, &labels, rv);
        }
    }
    assert_pending(&mut body).await;
}

// Slow watchers.

/// A cache like `cache_with([])` whose watchers count as full past `soft_limit` events.
fn cache_with_queue(soft_limit: usize) -> Writer {
    let settings = CacheSettings { queue_soft_limit: soft_limit, ..CacheSettings::default() };
    let cache = ResourceCache::create(cm_shape(), Scope::default(), settings);
    cache.replace(Objects::new(), 10);
    cache
}

/// Writes `a` at each version of `rvs`, labelled `app=x` at even versions only.
fn write_alternating(cache: &Writer, rvs: std::ops::RangeInclusive<u64>) {
    for rv in rvs {
        let labels = if rv % 2 == 0 { r#""app":"x""# } else { r#""app":"y""# };
        cache.event(EventType::Modified, cm("a", rv, labels));
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_watcher_catches_up_from_the_ring_in_order_and_rejoins_live_delivery() {
    let cache = cache_with_queue(4);
    let grace = CacheSettings::default().slow_watcher_grace;
    let mut slow = pin!(watch(&cache, filter(None, "app=x", ""), StartAt::After(10), opts(true, LONG)));
    let mut fast = pin!(watch(&cache, everything(), StartAt::After(10), opts(true, LONG)));
    let mut fast_seen = Vec::new();
    // The slow watcher reads one event, then none for longer than the grace
    // while 1000 are written: it falls behind (the fast one reads each).
    write_alternating(&cache, 11..=12);
    assert_eq!(brief(&next(&mut slow).await), ev("ADDED", "a", 12));
    fast_seen.extend([brief(&next(&mut fast).await).2, brief(&next(&mut fast).await).2]);
    for rv in 13..=1010 {
        write_alternating(&cache, rv..=rv);
        fast_seen.push(brief(&next(&mut fast).await).2);
        if rv == 20 {
            advance(grace + MS).await;
        }
    }
    assert_eq!(fast_seen, (11..=1010).collect::<Vec<_>>());
    assert_eq!(cache.cache().watcher_count(), 2, "not closed");
    // It reads everything it missed, from the ring, in order, once, filtered
    // (a MODIFIED out of the selector is a DELETED), with no bookmark until
    // it is current; while it reads, new events keep coming.
    let mut seen = Vec::new();
    let mut rv = 1010;
    while let Poll::Ready(Some(v)) = poll_frame(&mut slow).await {
        assert_ne!(v["type"], "BOOKMARK", "a bookmark while behind: {v}");
        seen.push(brief(&v));
        if seen.len() % 100 == 0 {
            rv += 1;
            write_alternating(&cache, rv..=rv);
        }
    }
    let expected: Vec<_> =
        (13..=rv).map(|rv| if rv % 2 == 0 { ev("ADDED", "a", rv) } else { ev("DELETED", "a", rv) }).collect();
    assert_eq!(seen, expected);
    // Back on live delivery: the next event arrives through the queue, and
    // a bookmark tells the version it is current at.
    write_alternating(&cache, rv + 1..=rv + 1);
    assert_eq!(brief(&next(&mut slow).await).2, rv + 1);
    assert_pending(&mut slow).await;
    cache.bookmark(rv + 5);
    advance(MINUTE).await;
    assert_eq!(next(&mut slow).await, bookmark("ConfigMap", "v1", rv + 5, false));
}

#[tokio::test(start_paused = true)]
async fn a_watcher_behind_the_ring_itself_ends_with_410_naming_the_last_version_it_got() {
    let cache = cache_with_queue(4);
    let mut slow = pin!(watch(&cache, everything(), StartAt::After(10), opts(false, LONG)));
    cache.event(EventType::Modified, cm("a", 11, ""));
    assert_eq!(brief(&next(&mut slow).await).2, 11);
    // Past the hard limit at once, then long enough (75 s between bursts, so
    // the ring does not grow) for the ring to evict what it missed.
    for rv in 12..=200 {
        cache.event(EventType::Modified, cm("a", rv, ""));
    }
    advance(secs(80)).await;
    for rv in 201..=300 {
        cache.event(EventType::Modified, cm("a", rv, ""));
    }
    let v = next(&mut slow).await;
    assert_eq!(v["type"], "ERROR", "{v}");
    assert_eq!(v["object"]["code"], 410, "{v}");
    assert_eq!(v["object"]["reason"], "Expired", "{v}");
    let message = v["object"]["message"].as_str().unwrap();
    assert!(message.starts_with("too old resource version: 11 ("), "{message}");
    assert_ended(&mut slow).await;
}

// Shutdown and deregistration.

#[tokio::test(start_paused = true)]
async fn cancelling_the_stop_token_ends_the_stream_cleanly_with_events_pending() {
    let cache = cache_with([cm("a", 5, ""), cm("b", 6, "")]);
    let stop = CancellationToken::new();
    let opts = StreamOptions { stop: stop.clone(), ..opts(true, LONG) };
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts));
    assert_eq!(brief(&next(&mut body).await), ev("ADDED", "a", 5));
    cache.event(EventType::Added, cm("c", 11, ""));
    stop.cancel();
    assert_ended(&mut body).await;
    assert_ended(&mut body).await;
}

/// A stream stopped before it sent anything, younger than client-go's
/// "very short watch" second, ends only at that second (sending nothing
/// more), so that its client resumes instead of listing again; one that
/// sent a frame, or is older, ends at once.
#[tokio::test(start_paused = true)]
async fn a_stopped_stream_that_sent_nothing_ends_a_second_after_it_started() {
    let cache = cache_with([]);
    let stop = CancellationToken::new();
    let start = Instant::now();
    let mut quiet =
        pin!(watch(&cache, everything(), StartAt::After(10), StreamOptions { stop: stop.clone(), ..opts(true, LONG) }));
    let mut spoke =
        pin!(watch(&cache, everything(), StartAt::After(10), StreamOptions { stop: stop.clone(), ..opts(true, LONG) }));
    assert_pending(&mut quiet).await;
    cache.event(EventType::Added, cm("a", 11, ""));
    assert_eq!(brief(&next(&mut spoke).await), ev("ADDED", "a", 11));
    tokio::time::advance(Duration::from_millis(300)).await;
    stop.cancel();
    assert_ended(&mut spoke).await;
    // The quiet one: its event is not sent after the stop; it ends at 1 s.
    assert_eq!(await_frame(&mut quiet).await, None);
    assert_eq!(start.elapsed(), secs(1));

    let late = CancellationToken::new();
    let mut old =
        pin!(watch(&cache, everything(), StartAt::After(11), StreamOptions { stop: late.clone(), ..opts(true, LONG) }));
    assert_pending(&mut old).await;
    tokio::time::advance(secs(2)).await;
    late.cancel();
    assert_ended(&mut old).await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_stream_deregisters_its_watcher() {
    let cache = cache_with([]);
    let first = watch(&cache, everything(), StartAt::CurrentState, opts(true, LONG));
    let second = watch(&cache, filter(Some("ns"), "", "metadata.name=a"), StartAt::After(10), opts(false, LONG));
    assert_eq!(cache.cache().watcher_count(), 2);
    drop(first);
    assert_eq!(cache.cache().watcher_count(), 1);
    drop(second);
    assert_eq!(cache.cache().watcher_count(), 0);
    cache.event(EventType::Added, cm("a", 11, ""));
}

// Wake-ups: a reader awaiting `frame()` is woken by whatever it must see next.

#[tokio::test(start_paused = true)]
async fn a_waiting_reader_is_woken_by_events_bookmarks_and_the_deadline() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, opts(true, secs(150))));
    let start = Instant::now();
    let writer = cache;
    tokio::spawn(async move {
        tokio::time::sleep(secs(10)).await;
        writer.event(EventType::Added, cm("a", 11, ""));
        writer.bookmark(12);
    });
    assert_eq!(brief(&await_frame(&mut body).await.unwrap()), ev("ADDED", "a", 11));
    assert_eq!(start.elapsed(), secs(10));
    assert_eq!(await_frame(&mut body).await, Some(cm_bookmark(12)));
    assert_eq!(start.elapsed(), MINUTE);
    // Nothing newer at 120 s nor at 148 s: next comes the deadline.
    assert_eq!(await_frame(&mut body).await, None);
    assert_eq!(start.elapsed(), secs(150));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_reader_is_woken_by_shutdown() {
    let cache = cache_with([]);
    let stop = CancellationToken::new();
    let mut body = pin!(watch(
        &cache,
        everything(),
        StartAt::CurrentState,
        StreamOptions { stop: stop.clone(), ..opts(true, LONG) }
    ));
    let start = Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(secs(5)).await;
        stop.cancel();
    });
    assert_eq!(await_frame(&mut body).await, None);
    assert_eq!(start.elapsed(), secs(5));
}

// Content variants.

fn assert_partial_object_metadata(v: &Value, kind: &str, rv: u64) {
    assert_eq!(brief(v), ev(kind, "a", rv), "{v}");
    let obj = v["object"].as_object().unwrap();
    assert_eq!((&obj["kind"], &obj["apiVersion"]), (&json!("PartialObjectMetadata"), &json!("meta.k8s.io/v1")));
    assert!(!obj.contains_key("data"), "metadata only: {v}");
}

#[tokio::test(start_paused = true)]
async fn partial_object_metadata_frames_carry_the_meta_kind_for_events_and_bookmarks() {
    let cache = cache_with([cm("a", 5, r#""app":"x""#)]);
    let opts = StreamOptions { variant: ContentVariant::PartialObjectMetadataJson, ..watch_list(true) };
    let mut body = pin!(watch(&cache, filter(None, "app=x", ""), StartAt::CurrentState, opts));
    let pom = |rv, initial_end| bookmark("PartialObjectMetadata", "meta.k8s.io/v1", rv, initial_end);
    assert_partial_object_metadata(&next(&mut body).await, "ADDED", 5);
    assert_eq!(next(&mut body).await, pom(10, true));
    cache.event(EventType::Modified, cm("a", 11, r#""app":"x","v":"2""#));
    assert_partial_object_metadata(&next(&mut body).await, "MODIFIED", 11);
    cache.event(EventType::Modified, cm("a", 12, r#""app":"y""#));
    assert_partial_object_metadata(&next(&mut body).await, "DELETED", 12);
    cache.bookmark(13);
    advance(MINUTE).await;
    assert_eq!(next(&mut body).await, pom(13, false));
}

/// A frame's raw bytes (protobuf frames are no JSON lines).
async fn raw_frame(body: &mut Pin<&mut WatchStream>) -> Option<Vec<u8>> {
    let frame = tokio::time::timeout(10 * LONG, body.frame()).await.expect("the body wakes its reader");
    frame.map(|f| {
        let mut chunk = f.expect("a watch stream never fails").into_data().expect("a data frame");
        chunk.copy_to_bytes(chunk.remaining()).to_vec()
    })
}

fn protobuf_opts() -> StreamOptions {
    StreamOptions { variant: ContentVariant::Protobuf, initial_events_end: true, ..opts(true, LONG) }
}

/// A ConfigMap with a key the protobuf table has no field for.
fn unplaceable_cm(name: &str, rv: u64) -> CachedObject {
    let raw = format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"fromTheFuture":1}}"#
    );
    CachedObject::decode(Bytes::from(raw), &cm_shape()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn protobuf_watches_send_the_encoder_s_frames_and_bookmarks() {
    use crate::encode::protobuf;
    let cache = cache_with([cm("a", 5, "")]);
    let stream = watch(&cache, everything(), StartAt::CurrentState, protobuf_opts());
    assert!(stream.protobuf_refusal().is_none());
    let mut body = pin!(stream);
    let added = raw_frame(&mut body).await.unwrap();
    assert_eq!(added, protobuf::watch_frame("ADDED", &protobuf::encode_object(cm("a", 5, "").json()).unwrap()));
    let end = raw_frame(&mut body).await.unwrap();
    let bookmark = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}}}"#;
    assert_eq!(end, protobuf::watch_frame("BOOKMARK", &protobuf::encode_object(bookmark).unwrap()));
    cache.event(EventType::Deleted, cm("a", 11, ""));
    let deleted = raw_frame(&mut body).await.unwrap();
    assert_eq!(deleted, protobuf::watch_frame("DELETED", &protobuf::encode_object(cm("a", 11, "").json()).unwrap()));
}

#[tokio::test(start_paused = true)]
async fn a_refused_initial_event_is_found_before_the_stream_starts() {
    let cache = cache_with([cm("a", 5, ""), unplaceable_cm("b", 6)]);
    let mut stream = watch(&cache, everything(), StartAt::CurrentState, protobuf_opts());
    assert_eq!(stream.protobuf_refusal().map(|r| r.reason), Some("unknown_field"));
    // The serving side then answers JSON: every frame a JSON line.
    stream.switch_to(ContentVariant::Json);
    assert!(stream.protobuf_refusal().is_none());
    let mut body = pin!(stream);
    assert_eq!(next(&mut body).await["object"]["metadata"]["name"], "a");
    assert_eq!(next(&mut body).await["object"]["metadata"]["name"], "b");

    // Events since a version holding the refused one, as a resumed watch has.
    cache.event(EventType::Modified, unplaceable_cm("a", 11));
    let resumed = watch(&cache, everything(), StartAt::After(10), protobuf_opts());
    assert!(resumed.protobuf_refusal().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_refused_live_event_ends_a_protobuf_stream() {
    let cache = cache_with([cm("a", 5, "")]);
    let mut body = pin!(watch(&cache, everything(), StartAt::CurrentState, protobuf_opts()));
    raw_frame(&mut body).await.unwrap();
    raw_frame(&mut body).await.unwrap();
    cache.event(EventType::Modified, unplaceable_cm("a", 11));
    assert_eq!(raw_frame(&mut body).await, None, "the client resumes from rv 10");
}

// The fan-out histogram.

/// The number of `stage` observations of the fan-out histogram in `text`.
fn fanout_count(text: &str, stage: &str) -> u64 {
    let series = format!("watchmux_fanout_duration_seconds_count{{stage=\"{stage}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn the_fan_out_time_ends_when_the_last_watcher_hands_its_frame_over() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prom = recorder.handle();
    // The cache's metric handles are bound to the recorder that made them.
    let cache = metrics::with_local_recorder(&recorder, || cache_with([]));
    let mut first = pin!(watch(&cache, everything(), StartAt::After(10), opts(false, LONG)));
    let mut second = pin!(watch(&cache, everything(), StartAt::After(10), opts(false, LONG)));
    let mut elsewhere = pin!(watch(&cache, filter(Some("other"), "", ""), StartAt::After(10), opts(false, LONG)));
    assert_pending(&mut first).await;
    cache.event(EventType::Added, cm("a", 11, ""));
    let text = prom.render();
    assert_eq!((fanout_count(&text, "queued"), fanout_count(&text, "handed")), (1, 0));
    assert_eq!(brief(&next(&mut first).await), ev("ADDED", "a", 11));
    assert_eq!(fanout_count(&prom.render(), "handed"), 0, "one watcher still holds the event");
    assert_eq!(brief(&next(&mut second).await), ev("ADDED", "a", 11));
    assert_eq!(fanout_count(&prom.render(), "handed"), 1);
    // A watcher the event does not concern is not waited for, and a
    // bookmark is not an event.
    assert_pending(&mut elsewhere).await;
    cache.bookmark(12);
    let text = prom.render();
    assert_eq!((fanout_count(&text, "queued"), fanout_count(&text, "handed")), (1, 1));
}

/// What an idle cache adds to `/metrics` of its fan-out and read-wait
/// histograms: each once, not once per cached resource (a node-local's
/// series budget), the fan-out with its own 13 buckets.
#[tokio::test(start_paused = true)]
async fn an_idle_cache_shows_its_fan_out_and_read_wait_histograms_once_not_per_resource() {
    let recorder = crate::metrics::builder().unwrap().build_recorder();
    let prom = recorder.handle();
    let _cache = metrics::with_local_recorder(&recorder, || cache_with([]));
    let text = prom.render();
    let series = |name: &str| text.lines().filter(|l| l.starts_with(name)).collect::<Vec<_>>();
    let fanout = series("watchmux_fanout_duration_seconds");
    let read_wait = series("watchmux_watch_cache_read_wait_seconds");
    for line in fanout.iter().chain(&read_wait) {
        assert!(!line.contains("resource="), "labelled by resource: {line}");
    }
    // Per histogram: its buckets, +Inf, _sum and _count.
    assert_eq!(fanout.len(), 2 * (13 + 3), "two stages: {fanout:#?}");
    assert_eq!(read_wait.len(), 16 + 3, "{read_wait:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_watcher_resumed_from_a_backfill_gets_a_bookmark_at_its_join_though_the_cache_is_behind() {
    // Joined at 20 (a backfill's upstream bookmark) on a cache still at 10;
    // the client asked for 5. The API server would tell it 20 at bookmark
    // time: an upstream watchmux's backfill needs that on a quiet resource.
    let cache = cache_with([]);
    let mut stream = watch(&cache, everything(), StartAt::After(20), opts(true, secs(3)));
    stream.resumed_from(5);
    let mut body = pin!(stream);
    assert_pending(&mut body).await;
    assert_eq!(await_frame(&mut body).await, Some(cm_bookmark(20)));
    // Told once; the next only past it, when the cache moves on.
    for rv in 11..=21 {
        cache.event(EventType::Modified, turn(rv));
    }
    assert_eq!(brief(&await_frame(&mut body).await.unwrap()), ev("MODIFIED", &turn(21).key.name, 21));
    assert_eq!(await_frame(&mut body).await, None, "ended at the deadline, no bookmark at 21 again");
}

#[tokio::test(start_paused = true)]
async fn a_watcher_not_resumed_gets_no_bookmark_until_the_cache_passes_its_version() {
    let cache = cache_with([]);
    let mut body = pin!(watch(&cache, everything(), StartAt::After(20), opts(true, secs(3))));
    assert_eq!(await_frame(&mut body).await, None, "no bookmark at 20: the client holds 20");
}
