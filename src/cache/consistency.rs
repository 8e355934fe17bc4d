//! A model test of the cache's promise to its watchers, against a simulated
//! upstream: for every resourceVersion X a client could hold (from the API
//! server directly, or from the cache), a watch from X through the cache
//! delivers every change after X, or it gets 410 so that the client lists
//! again. Never a missed deletion, never a stale object.
//!
//! The upstream is a map with a revision counter. Random steps write to it,
//! deliver its events to the cache one by one (a live watch), cut the watch
//! and relist (the cache jumps over what it did not see), send bookmarks,
//! and start clients: some list straight from the upstream (so they may hold
//! a version the cache never saw), some from the cache. At the end the
//! cache catches up, and every client that did not get 410 must hold exactly
//! the upstream's objects, each at its own version and uid.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use proptest::prelude::*;

use super::delivery::filter::Filter;
use super::delivery::watcher::{Next, Terminated, WatcherHandle};
use super::resource::{CacheSettings, ResourceCache, Scope, StartAt};
use super::state::object::CachedObject;
use super::state::object::tests::cm_shape;
use super::state::store::Objects;
use crate::encode::watch::EventType;

/// An object as a client holds it: its version and its life (uid).
type State = BTreeMap<String, (u64, String)>;

#[derive(Debug, Clone)]
enum Step {
    /// Create, update or delete one of a few keys upstream.
    Write { key: u8, delete: bool },
    /// The cache's watch delivers up to this many pending events.
    Deliver(u8),
    /// The watch is cut, pending events are lost, and the cache relists.
    Relist,
    /// A bookmark at the upstream's version, once nothing is pending.
    Bookmark,
    /// A client lists straight from the upstream, then watches through the cache.
    ClientFromUpstream,
    /// A client lists from the cache, then watches through it.
    ClientFromCache,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..5, any::<bool>()).prop_map(|(key, delete)| Step::Write { key, delete }),
        3 => (1u8..4).prop_map(Step::Deliver),
        1 => Just(Step::Relist),
        1 => Just(Step::Bookmark),
        2 => Just(Step::ClientFromUpstream),
        1 => Just(Step::ClientFromCache),
    ]
}

struct Upstream {
    rv: u64,
    objects: BTreeMap<String, (u64, String)>,
    /// Events the cache's watch has not delivered yet.
    pending: Vec<(EventType, String, u64, String)>,
    lives: u64,
}

impl Upstream {
    fn object(name: &str, rv: u64, uid: &str) -> CachedObject {
        let raw = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","uid":"{uid}","resourceVersion":"{rv}"}}}}"#
        );
        CachedObject::decode(Bytes::from(raw), &cm_shape()).expect("a valid object")
    }

    fn write(&mut self, key: u8, delete: bool) {
        let name = format!("k{key}");
        self.rv += 1;
        match (self.objects.get(&name).cloned(), delete) {
            (Some((_, uid)), true) => {
                self.objects.remove(&name);
                self.pending.push((EventType::Deleted, name, self.rv, uid));
            }
            (None, true) => self.rv -= 1,
            (existing, false) => {
                let kind = if existing.is_some() { EventType::Modified } else { EventType::Added };
                let uid = existing.map(|(_, uid)| uid).unwrap_or_else(|| {
                    self.lives += 1;
                    format!("u{}", self.lives)
                });
                self.objects.insert(name.clone(), (self.rv, uid.clone()));
                self.pending.push((kind, name, self.rv, uid));
            }
        }
    }

    fn list(&self) -> Objects {
        let mut out = Objects::new();
        for (name, (rv, uid)) in &self.objects {
            let obj = Arc::new(Self::object(name, *rv, uid));
            out.insert(obj.key.clone(), obj);
        }
        out
    }
}

/// A client: what it holds, and its watch (None once it got 410).
struct Client {
    state: State,
    watch: Option<Arc<WatcherHandle>>,
}

impl Client {
    fn start(cache: &ResourceCache, state: State, rv: u64) -> Self {
        match cache.register(Filter::default(), StartAt::After(rv)) {
            Ok(reg) => {
                let mut c = Client { state, watch: Some(reg.handle) };
                for d in reg.since_version {
                    c.see(d.kind, d.object());
                }
                c
            }
            Err(_too_old) => Client { state, watch: None },
        }
    }

    fn see(&mut self, kind: EventType, obj: &CachedObject) {
        match kind {
            EventType::Deleted => {
                self.state.remove(obj.key.name.as_str());
            }
            _ => {
                self.state.insert(obj.key.name.to_string(), (obj.rv, obj.uid.to_string()));
            }
        }
    }

    /// Takes everything queued; false once the watch ended with 410.
    fn drain(&mut self) {
        let Some(h) = self.watch.clone() else { return };
        let waker = Waker::noop().clone();
        loop {
            match h.take(&waker) {
                Ok(Next::Event(d)) => self.see(d.kind, d.object()),
                Ok(Next::Waiting) => return,
                Ok(Next::FromRing { .. }) => panic!("a model client fell behind"),
                Err(Terminated::Expired(_)) => {
                    self.watch = None;
                    return;
                }
                Err(Terminated::Ended) => panic!("a model client's resource went"),
                Err(Terminated::Stopped) => panic!("a model client was stopped"),
            }
        }
    }
}

fn run(steps: Vec<Step>) -> Result<(usize, usize), TestCaseError> {
    let cache = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    let mut up = Upstream { rv: 1, objects: BTreeMap::new(), pending: Vec::new(), lives: 0 };
    cache.replace(Objects::new(), up.rv);
    let mut clients: Vec<Client> = Vec::new();
    for step in steps {
        match step {
            Step::Write { key, delete } => up.write(key, delete),
            Step::Deliver(n) => {
                for (kind, name, rv, uid) in up.pending.drain(..(n as usize).min(up.pending.len())) {
                    cache.event(kind, Upstream::object(&name, rv, &uid));
                }
            }
            Step::Relist => {
                up.pending.clear();
                cache.replace(up.list(), up.rv);
            }
            Step::Bookmark if up.pending.is_empty() => cache.bookmark(up.rv),
            Step::Bookmark => {}
            Step::ClientFromUpstream => clients.push(Client::start(cache.cache(), up.objects.clone(), up.rv)),
            Step::ClientFromCache => {
                let snap = cache.cache().snapshot();
                let state =
                    snap.objects.values().map(|o| (o.key.name.to_string(), (o.rv, o.uid.to_string()))).collect();
                clients.push(Client::start(cache.cache(), state, snap.rv));
            }
        }
        for c in &mut clients {
            c.drain();
        }
    }
    // The cache catches up with the upstream, by its watch or by a relist.
    for (kind, name, rv, uid) in std::mem::take(&mut up.pending) {
        cache.event(kind, Upstream::object(&name, rv, &uid));
    }
    let mut expired = 0;
    for (i, c) in clients.iter_mut().enumerate() {
        c.drain();
        match &c.watch {
            Some(_) => prop_assert_eq!(&c.state, &up.objects, "client {} ended with another state", i),
            None => expired += 1,
        }
    }
    Ok((clients.len(), expired))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("WATCHMUX_MODEL_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512)
    ))]

    /// Every client ends with the upstream's state, or was told to list again.
    #[test]
    fn no_client_misses_a_change_after_any_version_it_holds(steps in proptest::collection::vec(step(), 0..60)) {
        run(steps)?;
    }
}

/// The lost-deletion scenario, by hand: the client's version comes from the
/// upstream while the cache is behind, and deletions after it happen in the
/// gap the relist jumps over.
#[test]
fn the_lost_deletion_scenario_ends_in_410_or_the_right_state() {
    use Step::*;
    let steps = vec![
        Write { key: 0, delete: false },
        Write { key: 1, delete: false },
        Deliver(2),
        // The cache's watch is cut: these are not delivered.
        Write { key: 2, delete: false },
        ClientFromUpstream,
        Write { key: 0, delete: true },
        Write { key: 1, delete: true },
        Relist,
        Write { key: 3, delete: false },
        Deliver(1),
    ];
    let (clients, expired) = run(steps).expect("no client misses a change");
    assert_eq!((clients, expired), (1, 1), "the client from inside the gap gets 410");
}
