//! A model test of slow watchers: whatever the interleaving of writes,
//! relists, bookmarks, time passing and reads, a watcher that falls behind
//! live delivery, reads the history ring and rejoins receives exactly what a
//! watcher that always kept up receives: every event, in order, once, with
//! its filter applied; and no bookmark promises a version before an event it
//! has yet to send.
//!
//! Two caches are fed the same upstream events: one whose watchers count as
//! full after two events (so they fall behind, read the ring and rejoin all
//! the time), and a reference one with the default queue, whose watchers are
//! read to the end after every step (so they never fall behind). A watch
//! through the first may still end with 410 when the ring evicts what it
//! missed; then what it got before must be a prefix of the reference's.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Buf;
use http_body::Body;
use proptest::prelude::*;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::delivery::filter::Filter;
use super::read::watch_stream::{StreamOptions, WatchStream};
use super::resource::{CacheSettings, ResourceCache, Scope, StartAt, Writer};
use super::state::object::tests::{cm, cm_shape};
use super::state::store::Objects;
use crate::encode::variant::ContentVariant;
use crate::encode::watch::EventType;
use crate::selector::{FieldSelector, LabelSelector};

/// The selectors of the model's watchers: every one sees some events of a
/// key and not others, and transitions in and out of its selector.
const SELECTORS: [&str; 3] = ["", "app=x", "app!=x"];

#[derive(Debug, Clone)]
enum Step {
    /// Create, update (labelled `app=x`, `app=y` or not at all) or delete a
    /// key upstream; `deliver`: the caches' watch sees it now, else it waits
    /// for a `Deliver` or is jumped over by a `Relist`.
    Write { key: u8, label: u8, delete: bool, deliver: bool },
    /// The caches' watch delivers what is pending.
    Deliver,
    /// The caches' watch is cut and they relist: the difference arrives as events.
    Relist,
    /// An upstream bookmark at its version, once nothing is pending.
    Bookmark,
    /// Time passes: the grace of full watchers runs out, bookmarks come due.
    Advance { secs: u8 },
    /// The slow watcher `watcher` reads up to `frames` frames.
    Read { watcher: u8, frames: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..4, 0u8..3, any::<bool>(), prop::bool::weighted(0.8))
            .prop_map(|(key, label, delete, deliver)| Step::Write { key, label, delete, deliver }),
        1 => Just(Step::Deliver),
        1 => Just(Step::Relist),
        1 => Just(Step::Bookmark),
        2 => (1u8..70).prop_map(|secs| Step::Advance { secs }),
        4 => (0u8..SELECTORS.len() as u8, 0u8..12).prop_map(|(watcher, frames)| Step::Read { watcher, frames }),
    ]
}

/// The upstream: its objects (name to rv and labels) and the events its
/// watch has not delivered yet.
#[derive(Default)]
struct Upstream {
    rv: u64,
    objects: BTreeMap<String, (u64, String)>,
    pending: Vec<(EventType, String, u64, String)>,
}

impl Upstream {
    fn write(&mut self, key: u8, label: u8, delete: bool) -> Option<(EventType, String, u64, String)> {
        let name = format!("k{key}");
        let labels = [r#""app":"x""#, r#""app":"y""#, ""][label as usize].to_owned();
        let existed = self.objects.contains_key(&name);
        if delete && !existed {
            return None;
        }
        self.rv += 1;
        let kind = if delete {
            let (_, old_labels) = self.objects.remove(&name).expect("exists");
            return Some((EventType::Deleted, name, self.rv, old_labels));
        } else if existed {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.objects.insert(name.clone(), (self.rv, labels.clone()));
        Some((kind, name, self.rv, labels))
    }

    fn list(&self) -> Objects {
        self.objects
            .iter()
            .map(|(name, (rv, labels))| {
                let obj = Arc::new(cm(name, *rv, labels));
                (obj.key.clone(), obj)
            })
            .collect()
    }
}

/// A waker that remembers being woken: a stream that yields after its ring
/// reads wakes itself, and is then polled again.
#[derive(Default)]
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One watch and what it received: events as (type, name, rv, labels), and
/// whether it ended with 410.
struct Watch {
    stream: WatchStream,
    events: Vec<(String, String, u64, String)>,
    /// The newest version a bookmark or event promised everything up to.
    promised: u64,
    expired: bool,
    ended: bool,
}

impl Watch {
    fn start(cache: &Writer, selector: &str, from: u64) -> Self {
        let filter = Filter::new(None, None, LabelSelector::parse(selector).unwrap(), FieldSelector::everything());
        let opts = StreamOptions {
            variant: ContentVariant::Json,
            allow_bookmarks: true,
            initial_events_end: false,
            timeout: Duration::from_secs(100_000),
            stop: CancellationToken::new(),
            table: None,
        };
        let reg = cache.cache().register(filter, StartAt::After(from)).expect("registered");
        let stream = WatchStream::new(cache.cache().clone(), reg, opts);
        Self { stream, events: Vec::new(), promised: from, expired: false, ended: false }
    }

    /// Reads up to `frames` frames; stops early when nothing is due.
    fn read(&mut self, frames: usize) -> Result<(), TestCaseError> {
        let woken = Arc::new(Woken::default());
        let waker = Waker::from(woken.clone());
        let mut read = 0;
        // Each poll sends a frame, or yields after a bounded number of ring
        // reads (and is woken), or finds nothing due: this ends.
        for _ in 0..10_000 {
            if read == frames || self.ended {
                return Ok(());
            }
            woken.0.store(false, Ordering::SeqCst);
            match Pin::new(&mut self.stream).poll_frame(&mut Context::from_waker(&waker)) {
                Poll::Ready(Some(frame)) => {
                    let mut chunk = frame.expect("no error").into_data().expect("a data frame");
                    let line: Value = serde_json::from_slice(&chunk.copy_to_bytes(chunk.remaining())).unwrap();
                    self.see(&line)?;
                    read += 1;
                }
                Poll::Ready(None) => self.ended = true,
                Poll::Pending if woken.0.load(Ordering::SeqCst) => {}
                Poll::Pending => return Ok(()),
            }
        }
        Err(TestCaseError::fail("a stream kept yielding"))
    }

    fn see(&mut self, line: &Value) -> Result<(), TestCaseError> {
        let kind = line["type"].as_str().unwrap().to_owned();
        if kind == "ERROR" {
            prop_assert_eq!(&line["object"]["code"], 410, "{}", line);
            self.expired = true;
            return Ok(());
        }
        let meta = &line["object"]["metadata"];
        let rv: u64 = meta["resourceVersion"].as_str().unwrap().parse().unwrap();
        prop_assert!(
            rv > self.promised || (kind == "BOOKMARK" && rv == self.promised),
            "{} after {}",
            line,
            self.promised
        );
        self.promised = rv;
        if kind != "BOOKMARK" {
            let labels = meta["labels"].to_string();
            self.events.push((kind, meta["name"].as_str().unwrap().to_owned(), rv, labels));
        }
        Ok(())
    }
}

/// The two caches, fed alike.
struct Caches {
    slow: Writer,
    reference: Writer,
}

impl Caches {
    fn each(&self, f: impl Fn(&Writer)) {
        f(&self.slow);
        f(&self.reference);
    }

    fn deliver(&self, (kind, name, rv, labels): &(EventType, String, u64, String)) {
        self.each(|w| w.event(*kind, cm(name, *rv, labels)));
    }
}

/// Runs the steps; returns how many slow watches ended with 410.
fn run(steps: Vec<Step>) -> Result<usize, TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    rt.block_on(async move {
        let slow_settings = CacheSettings { queue_soft_limit: 2, ..CacheSettings::default() };
        let caches = Caches {
            slow: ResourceCache::create(cm_shape(), Scope::default(), slow_settings),
            reference: ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default()),
        };
        let mut up = Upstream { rv: 1, ..Upstream::default() };
        caches.each(|w| w.replace(Objects::new(), 1));
        let mut slow: Vec<Watch> = SELECTORS.iter().map(|s| Watch::start(&caches.slow, s, 1)).collect();
        let mut reference: Vec<Watch> = SELECTORS.iter().map(|s| Watch::start(&caches.reference, s, 1)).collect();
        for step in steps {
            match step {
                Step::Write { key, label, delete, deliver } => {
                    if let Some(event) = up.write(key, label, delete) {
                        if deliver && up.pending.is_empty() {
                            caches.deliver(&event);
                        } else {
                            up.pending.push(event);
                        }
                    }
                }
                Step::Deliver => {
                    for event in std::mem::take(&mut up.pending) {
                        caches.deliver(&event);
                    }
                }
                Step::Relist => {
                    up.pending.clear();
                    caches.each(|w| w.replace(up.list(), up.rv));
                }
                Step::Bookmark if up.pending.is_empty() => caches.each(|w| w.bookmark(up.rv)),
                Step::Bookmark => {}
                Step::Advance { secs } => tokio::time::advance(Duration::from_secs(secs.into())).await,
                Step::Read { watcher, frames } => slow[watcher as usize].read(frames.into())?,
            }
            for w in &mut reference {
                w.read(usize::MAX)?;
            }
        }
        for event in std::mem::take(&mut up.pending) {
            caches.deliver(&event);
        }
        let mut expired = 0;
        for (s, r) in slow.iter_mut().zip(&mut reference) {
            s.read(usize::MAX)?;
            r.read(usize::MAX)?;
            prop_assert!(!r.expired && !r.ended, "the reference watcher ended");
            if s.expired {
                expired += 1;
                prop_assert!(
                    r.events.starts_with(&s.events),
                    "before its 410: {:?}\nreference: {:?}",
                    s.events,
                    r.events
                );
            } else {
                prop_assert!(!s.ended, "a slow watcher ended without 410");
                prop_assert_eq!(&s.events, &r.events);
            }
        }
        Ok(expired)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("WATCHMUX_MODEL_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
    ))]

    /// Falling behind, reading the ring and rejoining loses, duplicates and
    /// reorders nothing.
    #[test]
    fn a_slow_watcher_sees_what_a_watcher_that_kept_up_sees(steps in proptest::collection::vec(step(), 0..120)) {
        run(steps)?;
    }
}

/// A watcher that falls behind again right after rejoining, with the last
/// ring read still queued: its next read starts from what it sent, not from
/// where the dropped read had got to (a bug the stream tests first found).
#[test]
fn falling_behind_with_a_ring_read_still_queued_loses_nothing() {
    use Step::*;
    let mut steps = Vec::new();
    for key in 0..4 {
        steps.push(Write { key, label: 0, delete: false, deliver: true });
    }
    steps.push(Advance { secs: 6 });
    for i in 0..12 {
        steps.push(Write { key: i % 4, label: i % 3, delete: false, deliver: true });
    }
    steps.push(Read { watcher: 0, frames: 1 });
    for i in 0..12 {
        steps.push(Write { key: i % 4, label: 0, delete: false, deliver: true });
    }
    steps.push(Advance { secs: 6 });
    steps.push(Write { key: 0, label: 1, delete: false, deliver: true });
    assert_eq!(run(steps).expect("no event lost"), 0);
}

/// The same promise with the writer and a slow reader on two threads: the
/// ring read that rejoins live delivery and the writer's push-and-dispatch
/// exclude each other, so whatever the timing the reader gets every event
/// once, in order.
#[test]
fn a_slow_reader_on_its_own_thread_gets_every_event_once_in_order() {
    const EVENTS: u64 = 5_000;
    let settings =
        CacheSettings { queue_soft_limit: 2, slow_watcher_grace: Duration::ZERO, ..CacheSettings::default() };
    let writer = ResourceCache::create(cm_shape(), Scope::default(), settings);
    writer.replace(Objects::new(), 1);
    let cache = writer.cache().clone();
    let reader = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let cache = cache;
            let filter = Filter::default();
            let reg = cache.register(filter, StartAt::After(1)).unwrap();
            let opts = StreamOptions {
                variant: ContentVariant::Json,
                allow_bookmarks: false,
                initial_events_end: false,
                timeout: Duration::from_secs(3600),
                stop: CancellationToken::new(),
                table: None,
            };
            let mut stream = WatchStream::new(cache.clone(), reg, opts);
            let mut seen = Vec::with_capacity(EVENTS as usize);
            let started = std::time::Instant::now();
            while seen.last() != Some(&(EVENTS + 1)) && started.elapsed() < Duration::from_secs(60) {
                match Pin::new(&mut stream).poll_frame(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(Some(frame)) => {
                        let mut chunk = frame.unwrap().into_data().unwrap();
                        let line: Value = serde_json::from_slice(&chunk.copy_to_bytes(chunk.remaining())).unwrap();
                        assert_ne!(line["type"], "ERROR", "{line}");
                        seen.push(
                            line["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap(),
                        );
                        // A reader that stalls now and then: the writer runs ahead.
                        if seen.len() % 150 == 0 {
                            std::thread::sleep(Duration::from_millis(4));
                        }
                    }
                    Poll::Ready(None) => panic!("the stream ended"),
                    Poll::Pending => std::thread::yield_now(),
                }
            }
            seen
        })
    });
    // In bursts, so that the reader both falls behind (in a burst) and
    // rejoins (between them), again and again.
    let objects: Vec<_> = (2..=EVENTS + 1).map(|rv| cm(&format!("k{}", rv % 8), rv, "")).collect();
    for (i, object) in objects.into_iter().enumerate() {
        writer.event(EventType::Modified, object);
        if i % 10 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let seen = reader.join().unwrap();
    assert_eq!(seen.len() as u64, EVENTS, "every event once");
    assert!(seen.iter().zip(2..).all(|(rv, want)| *rv == want), "in order");
}
