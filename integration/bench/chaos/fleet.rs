//! The watchers: reflector-shaped clients (common::reflector) that each keep
//! the whole state they were told, by name (uid and resourceVersion), every
//! version they saw, and how far they have got, so that a case can say
//! afterwards whether each ended with the API server's state, which writes
//! it never saw, and when it became current after a fault.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::StatusCode;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::common::client::{Shape, Target};
use crate::common::lines::{End, Pace};
use crate::common::reflector::{Counters, Reflector, Slot, View};

/// First list+watch of a fleet: this many every 100 ms.
const OPEN_PACE: usize = 100;

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(default, borrow)]
    name: Option<&'a str>,
    #[serde(default, borrow)]
    uid: Option<&'a str>,
    #[serde(default, borrow, rename = "resourceVersion")]
    rv: Option<&'a str>,
}

#[derive(Deserialize)]
struct Obj<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
}

#[derive(Deserialize)]
struct EventLine<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    object: Obj<'a>,
}

#[derive(Deserialize)]
struct List<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
    #[serde(borrow, default)]
    items: Option<Vec<Obj<'a>>>,
}

fn rv_of(m: &Meta) -> Option<u64> {
    m.rv.and_then(|s| s.parse().ok())
}

/// What one watcher was told.
#[derive(Default)]
pub struct StateView {
    /// name → (uid, resourceVersion).
    pub state: HashMap<String, (String, u64)>,
    /// Every object version it saw, in an event or a list.
    pub seen: HashSet<u64>,
    /// Its lists: resourceVersion and when.
    pub lists: Vec<(u64, Instant)>,
    /// Each rise of the highest version it had (events, bookmarks, lists) and when.
    pub progress: Vec<(u64, Instant)>,
    /// The same highest version, for the harness to poll.
    pub max_rv: Arc<AtomicU64>,
    /// An object replaced by another of the same name (a new uid) without
    /// a DELETED for the first: a deletion it was never told of.
    pub replaced_without_delete: u64,
    /// Events (not bookmarks) whose version was not above the previous one in their stream.
    pub out_of_order: u64,
    pub undecodable: u64,
    last_in_stream: u64,
    /// Streams that ended (not by the harness), when.
    pub stream_ends: Vec<Instant>,
    /// Answers other than 200 and 410 (None: no answer), when.
    pub refusals: Vec<(Option<u16>, Instant)>,
}

impl StateView {
    fn reached(&mut self, rv: u64, now: Instant) {
        if rv > self.max_rv.load(Ordering::Relaxed) {
            self.max_rv.store(rv, Ordering::Relaxed);
            self.progress.push((rv, now));
        }
    }

    /// When it first had `rv` or later.
    pub fn reached_at(&self, rv: u64) -> Option<Instant> {
        self.progress.iter().find(|(v, _)| *v >= rv).map(|(_, t)| *t)
    }

    pub fn first_list_rv(&self) -> Option<u64> {
        self.lists.first().map(|(rv, _)| *rv)
    }
}

impl View for StateView {
    fn listed(&mut self, body: &[u8], now: Instant) -> Option<u64> {
        let list: List = serde_json::from_slice(body).ok()?;
        let rv = rv_of(&list.metadata)?;
        self.state.clear();
        for item in list.items.unwrap_or_default() {
            let m = &item.metadata;
            if let (Some(name), Some(uid), Some(v)) = (m.name, m.uid, rv_of(m)) {
                self.state.insert(name.to_owned(), (uid.to_owned(), v));
                self.seen.insert(v);
            }
        }
        self.lists.push((rv, now));
        self.reached(rv, now);
        Some(rv)
    }

    fn watching(&mut self, from: u64) {
        self.last_in_stream = from;
    }

    fn event(&mut self, line: &[u8], now: Instant) {
        let Ok(ev) = serde_json::from_slice::<EventLine>(line) else {
            self.undecodable += 1;
            return;
        };
        let m = &ev.object.metadata;
        let Some(rv) = rv_of(m) else {
            self.undecodable += 1;
            return;
        };
        if ev.kind == "BOOKMARK" {
            self.reached(rv, now);
            return;
        }
        let (Some(name), Some(uid)) = (m.name, m.uid) else {
            self.undecodable += 1;
            return;
        };
        if rv <= self.last_in_stream {
            self.out_of_order += 1;
        }
        self.last_in_stream = self.last_in_stream.max(rv);
        self.seen.insert(rv);
        match ev.kind {
            "DELETED" => {
                self.state.remove(name);
            }
            _ => {
                if let Some((held, _)) = self.state.get(name)
                    && held != uid
                {
                    self.replaced_without_delete += 1;
                }
                self.state.insert(name.to_owned(), (uid.to_owned(), rv));
            }
        }
        self.reached(rv, now);
    }

    fn refused(&mut self, status: Option<StatusCode>, now: Instant) {
        self.refusals.push((status.map(|s| s.as_u16()), now));
    }

    fn stream_ended(&mut self, _end: &End, now: Instant) {
        self.stream_ends.push(now);
    }
}

/// N watchers on one collection, spread over shared connections.
pub struct Fleet {
    pub n: usize,
    pub counters: Arc<Counters>,
    maxes: Vec<Arc<AtomicU64>>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<StateView>>,
}

impl Fleet {
    /// `n` watchers of `list_path` at `target`, `per_conn` to a connection.
    pub fn start(target: &Target, shape: Shape, per_conn: usize, list_path: &str, n: usize) -> Self {
        let seeds = (0..n).map(|_| (StateView::default(), None)).collect();
        Self::start_from(target, shape, per_conn, list_path, seeds, None, None)
    }

    /// `n` watchers like [`Self::start`]'s that read no faster than `pace`.
    pub fn start_paced(
        target: &Target,
        shape: Shape,
        per_conn: usize,
        list_path: &str,
        n: usize,
        pace: Arc<Pace>,
    ) -> Self {
        let seeds = (0..n).map(|_| (StateView::default(), None)).collect();
        Self::start_from(target, shape, per_conn, list_path, seeds, Some(pace), None)
    }

    /// `n` watchers like [`Self::start`]'s whose watches each ask for a
    /// timeoutSeconds drawn from `watch_timeout`, as client-go's (a
    /// kubelet's) reflectors do: each ends there and is made again.
    pub fn start_with_timeouts(
        target: &Target,
        shape: Shape,
        per_conn: usize,
        list_path: &str,
        n: usize,
        watch_timeout: std::ops::Range<u64>,
    ) -> Self {
        let seeds = (0..n).map(|_| (StateView::default(), None)).collect();
        Self::start_from(target, shape, per_conn, list_path, seeds, None, Some(watch_timeout))
    }

    /// One watcher per seed: a view and the version to watch from (None:
    /// list first); each watch with a timeoutSeconds from `watch_timeout`
    /// (None: the server's).
    pub fn start_from(
        target: &Target,
        shape: Shape,
        per_conn: usize,
        list_path: &str,
        seeds: Vec<(StateView, Option<u64>)>,
        pace: Option<Arc<Pace>>,
        watch_timeout: Option<std::ops::Range<u64>>,
    ) -> Self {
        let per_conn = if shape == Shape::H1 { 1 } else { per_conn.max(1) };
        let n = seeds.len();
        let slots: Vec<Arc<Slot>> = (0..n.div_ceil(per_conn)).map(|_| Slot::new(target.clone(), shape)).collect();
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let mut maxes = Vec::with_capacity(n);
        let tasks = seeds
            .into_iter()
            .enumerate()
            .map(|(i, (view, resume_from))| {
                maxes.push(view.max_rv.clone());
                let r = Reflector {
                    slot: slots[i / per_conn].clone(),
                    counters: counters.clone(),
                    stop: stop.clone(),
                    list_path: list_path.to_owned(),
                    view,
                    resume_from,
                    pace: pace.clone(),
                    watch_timeout: watch_timeout.clone(),
                };
                let pace = Duration::from_millis((i / OPEN_PACE) as u64 * 100);
                tokio::spawn(async move {
                    tokio::time::sleep(pace).await;
                    r.run().await
                })
            })
            .collect();
        Self { n, counters, maxes, stop, tasks }
    }

    pub fn ready(&self) -> usize {
        self.counters.ready.load(Ordering::Relaxed)
    }

    /// Waits until every watcher's first watch is open, at most `limit`; how many are.
    pub async fn wait_ready(&self, limit: Duration) -> usize {
        let until = Instant::now() + limit;
        while self.ready() < self.n && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.ready()
    }

    /// Watchers that have `rv` or later.
    pub fn current(&self, rv: u64) -> usize {
        self.maxes.iter().filter(|m| m.load(Ordering::Relaxed) >= rv).count()
    }

    /// Waits until every watcher has `rv`, at most `limit`; how many have it.
    pub async fn wait_current(&self, rv: u64, limit: Duration) -> usize {
        let until = Instant::now() + limit;
        while self.current(rv) < self.n && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.current(rv)
    }

    /// Stops every watcher; their views (of those that stop within 10 s).
    pub async fn finish(self) -> Vec<StateView> {
        self.stop.cancel();
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut views = Vec::with_capacity(self.n);
        for t in self.tasks {
            match tokio::time::timeout_at(until, t).await {
                Ok(Ok(v)) => views.push(v),
                _ => eprintln!("chaos: a watcher did not stop within 10 s of being told"),
            }
        }
        views
    }
}
