//! The store: every cached object by key, as a persistent ordered map.
//!
//! `imbl::OrdMap` shares structure between versions, so a snapshot of the
//! whole store (for a paginated LIST, or the initial events of a watch) is an
//! O(1) clone that later writes never disturb, and each write costs O(log n).
//! The node index (`node_index.rs`) is kept beside the objects the same way.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;

use super::dense;
use super::event::CacheEvent;
use super::node_index::NodeIndex;
use super::object::{CachedObject, ObjectKey};
use crate::encode::watch::EventType;

pub(crate) type Objects = OrdMap<ObjectKey, Arc<CachedObject>>;

/// Builds [`Objects`] from objects that mostly come in key order (a LIST's
/// pages, a watch-list's initial events, a persisted store), with the map's
/// leaves full rather than half full ([`dense`]): 72 bytes a store entry
/// for a million pods rather than 144.
///
/// The objects are taken in runs; a run in strict key order goes in
/// through [`dense::insert_ascending`]. A run out of order (or with a key
/// twice) goes in as it came, and a removal flushes the run first: the map
/// is the same either way, only its leaves differ.
#[derive(Debug, Default)]
pub(crate) struct ObjectsBuilder {
    objects: Objects,
    run: Vec<(ObjectKey, Arc<CachedObject>)>,
}

/// Objects a run: a LIST page's (500), about.
const RUN: usize = 512;

impl ObjectsBuilder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Puts `object` under its key, replacing what was there.
    pub(crate) fn insert(&mut self, object: Arc<CachedObject>) {
        self.run.push((object.key.clone(), object));
        if self.run.len() >= RUN {
            self.flush();
        }
    }

    /// Removes what is under `key`.
    pub(crate) fn remove(&mut self, key: &ObjectKey) {
        self.flush();
        self.objects.remove(key);
    }

    pub(crate) fn finish(mut self) -> Objects {
        self.flush();
        self.objects
    }

    fn flush(&mut self) {
        if self.run.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            dense::insert_ascending(&mut self.objects, &self.run);
            self.run.clear();
        } else {
            for (key, object) in self.run.drain(..) {
                self.objects.insert(key, object);
            }
        }
    }
}

/// The objects at one resourceVersion.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub objects: Objects,
    pub by_node: NodeIndex,
    pub rv: u64,
}

impl Snapshot {
    /// The objects a request for `node` (a `spec.nodeName=` requirement) and
    /// `namespace` can match, in key order from `lower` on: that node's
    /// objects from the index when a node is named, that namespace's key
    /// range otherwise, else all. The caller still applies its whole filter.
    pub(crate) fn candidates<'a>(
        &'a self,
        node: Option<&'a str>,
        namespace: Option<&'a str>,
        lower: Bound<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<CachedObject>)> + Send + 'a> {
        // A namespace's walk starts at its first key, or later.
        let namespace_start;
        let lower = match (lower, namespace) {
            (Bound::Included(k) | Bound::Excluded(k), Some(ns)) if k.namespace.as_str() >= ns => lower,
            (_, Some(ns)) => {
                namespace_start = ObjectKey::new(ns, "");
                Bound::Included(&namespace_start)
            }
            (lower, None) => lower,
        };
        let in_namespace =
            move |(k, _): &(&ObjectKey, &Arc<CachedObject>)| namespace.is_none_or(|ns| k.namespace == ns);
        match node.filter(|n| !n.is_empty()) {
            Some(node) => Box::new(self.by_node.range(node, lower).take_while(in_namespace)),
            None => Box::new(self.objects.range((lower.cloned(), Bound::Unbounded)).take_while(in_namespace)),
        }
    }
}

/// The objects and the resourceVersion they are current at.
#[derive(Debug, Default)]
pub(crate) struct Store {
    objects: Objects,
    by_node: NodeIndex,
    rv: u64,
}

impl Store {
    pub(crate) fn new(objects: Objects, rv: u64) -> Self {
        Self { by_node: NodeIndex::of(objects.values()), objects, rv }
    }

    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// Moves the store's resourceVersion forward without a change (a
    /// bookmark: nothing changed up to `rv`).
    pub(crate) fn advance(&mut self, rv: u64) {
        self.rv = self.rv.max(rv);
    }

    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Puts `object` in the store behind the events' back (`fault.rs`).
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn put_behind_events(&mut self, object: Arc<CachedObject>) {
        let prev = self.objects.insert(object.key.clone(), object.clone());
        self.by_node.update(prev.as_ref(), Some(&object));
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot { objects: self.objects.clone(), by_node: self.by_node.clone(), rv: self.rv }
    }

    /// Applies one upstream change and returns it as a cache event carrying
    /// the previous state. The upstream's event type is trusted for DELETED;
    /// ADDED and MODIFIED are decided by whether the key was present, so a
    /// replayed ADDED for a known object is a MODIFIED to watchers.
    pub(crate) fn apply(&mut self, kind: EventType, object: Arc<CachedObject>) -> CacheEvent {
        self.rv = self.rv.max(object.rv);
        let prev = match kind {
            EventType::Deleted => self.objects.remove(&object.key),
            EventType::Added | EventType::Modified => self.objects.insert(object.key.clone(), object.clone()),
        };
        self.by_node.update(prev.as_ref(), (kind != EventType::Deleted).then_some(&object));
        let kind = match (kind, &prev) {
            (EventType::Deleted, _) => EventType::Deleted,
            (_, Some(_)) => EventType::Modified,
            (_, None) => EventType::Added,
        };
        CacheEvent::new(kind, object, prev)
    }

    /// Replaces the whole store with a fresh LIST at `rv` and returns the
    /// difference as ordinary events with strictly increasing resourceVersions
    /// in (old rv, `rv`]: ADDED and MODIFIED at each object's own version, a
    /// DELETED for every object that vanished, and DELETED then ADDED for an
    /// object deleted and created again (a new uid under the same key), as the
    /// API server would have shown it.
    ///
    /// The version at which a vanished object was deleted is lost in the gap.
    /// Every deletion consumed a revision of its own that no surviving object
    /// carries, so there are at least as many unused versions in the range as
    /// there are deletions; each DELETED takes one of them, in key order. That
    /// keeps versions distinct, so a watcher that resumes from any version it
    /// saw misses nothing and sees nothing twice. Should the range be short of
    /// versions (it cannot be unless the upstream reuses revisions), the
    /// remaining deletions share `rv` and `Replaced::versions_reused` says so.
    pub(crate) fn replace(&mut self, fresh: Objects, rv: u64) -> Replaced {
        let floor = self.rv;
        let old = std::mem::replace(&mut self.objects, fresh);
        let mut events: Vec<CacheEvent> = Vec::new();
        // Deleted and created again in the gap: a new uid under the same key.
        let recreated: Vec<(&ObjectKey, u64)> = self
            .objects
            .iter()
            .filter_map(|(key, obj)| old.get(key).filter(|p| p.rv != obj.rv && p.uid != obj.uid).map(|_| (key, obj.rv)))
            .collect();
        let used: std::collections::BTreeSet<u64> = self
            .objects
            .iter()
            .filter(|(key, obj)| old.get(*key).is_none_or(|p| p.rv != obj.rv))
            .map(|(_, obj)| obj.rv)
            .collect();
        // The versions after `floor` that no surviving object carries, written so that a
        // floor of u64::MAX (an upstream version the parser accepts) leaves none instead
        // of overflowing. Every deletion in the gap consumed one of them.
        let mut free: std::collections::BTreeSet<u64> = (floor..=rv).skip(1).filter(|v| !used.contains(v)).collect();
        // A recreated object's deletion must come before its new life. Its real
        // deletion version lies below the new object's own, so giving the lowest free
        // version to the recreation with the lowest new version first always finds one.
        let mut deleted_at: std::collections::BTreeMap<&ObjectKey, u64> = std::collections::BTreeMap::new();
        let mut by_new_rv = recreated.clone();
        by_new_rv.sort_by_key(|(_, new_rv)| *new_rv);
        for (key, new_rv) in by_new_rv {
            if let Some(&at) = free.iter().next().filter(|at| **at < new_rv) {
                free.remove(&at);
                deleted_at.insert(key, at);
            }
        }
        for (key, obj) in &self.objects {
            match old.get(key) {
                Some(prev) if prev.rv == obj.rv => {}
                Some(_) if deleted_at.contains_key(key) => {
                    events.push(CacheEvent::new(EventType::Added, obj.clone(), None))
                }
                // A recreation the versions cannot order (an upstream that reuses
                // revisions) is at least not lost: a modification.
                Some(prev) => events.push(CacheEvent::new(EventType::Modified, obj.clone(), Some(prev.clone()))),
                None => events.push(CacheEvent::new(EventType::Added, obj.clone(), None)),
            }
        }
        let mut free = free.into_iter();
        let mut versions_reused = false;
        for (key, prev) in &old {
            let at = match (self.objects.contains_key(key), deleted_at.get(key)) {
                (_, Some(at)) => *at,
                (true, None) => continue,
                (false, None) => free.next().unwrap_or_else(|| {
                    versions_reused = true;
                    rv
                }),
            };
            let gone = Arc::new(prev.with_resource_version(at));
            events.push(CacheEvent::new(EventType::Deleted, gone, Some(prev.clone())));
        }
        events.sort_by_key(|e| e.rv);
        // Rebuilt, not patched with the difference: an unchanged object is a
        // fresh decode too, and the index must not keep the old one alive.
        self.by_node = NodeIndex::of(self.objects.values());
        self.rv = self.rv.max(rv);
        Replaced { events, versions_reused }
    }
}

/// What a relist changed.
#[derive(Debug)]
pub(crate) struct Replaced {
    /// The difference, as events in resourceVersion order.
    pub events: Vec<CacheEvent>,
    /// True when some events had to share a resourceVersion.
    pub versions_reused: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::cm;

    /// The builder's map is the map plain inserts and removes make, whatever
    /// the order, with a key given twice holding its last object.
    #[test]
    fn built_objects_are_what_plain_inserts_make() {
        use proptest::prelude::*;
        let op = (0..3u8, 0..700usize, 1..4u64);
        proptest!(ProptestConfig::with_cases(64), |(sorted in any::<bool>(), ops in proptest::collection::vec(op, 0..1500))| {
            let mut ops = ops;
            // In strict key order, the runs go in every other one first.
            if sorted {
                ops.sort_by_key(|(_, name, _)| *name);
                ops.dedup_by_key(|(_, name, _)| *name);
            }
            let (mut built, mut plain) = (ObjectsBuilder::new(), Objects::new());
            for (what, name, rv) in ops {
                let object = Arc::new(cm(&format!("o{name:03}"), rv, ""));
                if what == 0 {
                    built.remove(&object.key);
                    plain.remove(&object.key);
                } else {
                    built.insert(object.clone());
                    plain.insert(object.key.clone(), object);
                }
            }
            let built = built.finish();
            let versions = |m: &Objects| m.iter().map(|(k, o)| (k.name.to_string(), o.rv)).collect::<Vec<_>>();
            prop_assert_eq!(versions(&built), versions(&plain));
        });
    }

    #[test]
    fn apply_tracks_previous_state_and_event_kind() {
        let mut store = Store::default();
        let e = store.apply(EventType::Added, Arc::new(cm("a", 2, "")));
        assert_eq!((e.kind, e.prev.is_none()), (EventType::Added, true));
        let e = store.apply(EventType::Added, Arc::new(cm("a", 3, "")));
        assert_eq!(e.kind, EventType::Modified, "ADDED for a known key is a modification");
        assert_eq!(e.prev.unwrap().rv, 2);
        let e = store.apply(EventType::Deleted, Arc::new(cm("a", 4, "")));
        assert_eq!(e.kind, EventType::Deleted);
        assert!(store.is_empty());
        assert_eq!(store.rv(), 4);
    }

    #[test]
    fn snapshots_do_not_see_later_writes() {
        let mut store = Store::default();
        store.apply(EventType::Added, Arc::new(cm("a", 2, "")));
        let snap = store.snapshot();
        store.apply(EventType::Added, Arc::new(cm("b", 3, "")));
        store.apply(EventType::Deleted, Arc::new(cm("a", 4, "")));
        assert_eq!(snap.objects.len(), 1);
        assert_eq!(snap.rv, 2);
        assert_eq!(store.len(), 1);
    }

    fn with_uid(name: &str, rv: u64, uid: &str) -> Arc<CachedObject> {
        let raw = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","uid":"{uid}","resourceVersion":"{rv}"}}}}"#
        );
        Arc::new(
            CachedObject::decode(bytes::Bytes::from(raw), &crate::cache::state::object::tests::cm_shape()).unwrap(),
        )
    }

    #[test]
    fn deleted_and_created_again_in_a_gap_is_deleted_then_added() {
        let mut store = Store::default();
        for (name, rv) in [("a", 2), ("c", 3)] {
            store.apply(EventType::Added, with_uid(name, rv, &format!("{name}-1")));
        }
        // In the gap: c deleted (4) and created again (5), a deleted (6), b created (7).
        let mut fresh = Objects::new();
        for obj in [with_uid("c", 5, "c-2"), with_uid("b", 7, "b-1")] {
            fresh.insert(obj.key.clone(), obj);
        }
        let replaced = store.replace(fresh, 8);
        let uids: Vec<String> = replaced.events.iter().map(|e| e.object.uid.to_string()).collect();
        let seen: Vec<_> = replaced
            .events
            .iter()
            .zip(&uids)
            .map(|(e, uid)| (e.kind, e.object.key.name.as_str(), e.rv, uid.as_str()))
            .collect();
        // c's deletion takes the lowest free version, below its new life.
        assert_eq!(
            seen,
            [
                (EventType::Deleted, "c", 4, "c-1"),
                (EventType::Added, "c", 5, "c-2"),
                (EventType::Deleted, "a", 6, "a-1"),
                (EventType::Added, "b", 7, "b-1"),
            ]
        );
        assert!(!replaced.versions_reused);
    }

    #[test]
    fn replace_yields_the_difference_in_version_order() {
        let mut store = Store::default();
        for (name, rv) in [("keep", 2), ("change", 3), ("gone", 4)] {
            store.apply(EventType::Added, Arc::new(cm(name, rv, "")));
        }
        let mut fresh = Objects::new();
        for (name, rv) in [("keep", 2), ("change", 9), ("new", 7)] {
            let o = Arc::new(cm(name, rv, ""));
            fresh.insert(o.key.clone(), o);
        }
        let replaced = store.replace(fresh, 10);
        assert!(!replaced.versions_reused);
        let seen: Vec<_> = replaced.events.iter().map(|e| (e.kind, e.object.key.name.as_str(), e.rv)).collect();
        // The deletion takes the first version in (4, 10] that no survivor carries.
        assert_eq!(
            seen,
            vec![(EventType::Deleted, "gone", 5), (EventType::Added, "new", 7), (EventType::Modified, "change", 9)]
        );
        assert_eq!(replaced.events[0].object.rv, 5);
        assert_eq!(store.rv(), 10);
        assert_eq!(store.len(), 3);
    }

    mod node_index {
        use super::*;
        use crate::cache::state::object::tests::pod;
        use crate::selector::FieldSet;
        use proptest::prelude::*;

        /// What the index holds, as (node, key, the very object).
        fn entries(snap: &Snapshot) -> Vec<(String, ObjectKey, usize)> {
            let mut nodes: Vec<&str> =
                snap.objects.values().filter_map(|o| crate::cache::state::node_index::node_of(o)).collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes
                .into_iter()
                .flat_map(|n| {
                    snap.by_node
                        .range(n, Bound::Unbounded)
                        .map(move |(k, o)| (n.to_owned(), k.clone(), Arc::as_ptr(o) as usize))
                })
                .collect()
        }

        fn rebuilt(snap: &Snapshot) -> Vec<(String, ObjectKey, usize)> {
            let again = Snapshot { by_node: NodeIndex::of(snap.objects.values()), ..snap.clone() };
            entries(&again)
        }

        #[derive(Debug, Clone)]
        enum Op {
            Put { name: u8, ns: u8, node: u8 },
            Delete { name: u8, ns: u8 },
            Relist(Vec<(u8, u8, u8)>),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0..6u8, 0..2u8, 0..4u8).prop_map(|(name, ns, node)| Op::Put { name, ns, node }),
                2 => (0..6u8, 0..2u8).prop_map(|(name, ns)| Op::Delete { name, ns }),
                1 => prop::collection::vec((0..6u8, 0..2u8, 0..4u8), 0..8).prop_map(Op::Relist),
            ]
        }

        /// Node 0 is "no node" (a pending pod).
        fn node(n: u8) -> String {
            if n == 0 { String::new() } else { format!("n{n}") }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// After any writes and relists the index holds exactly the bound
            /// objects the store holds, the same Arcs, and a node-filtered walk
            /// from any start finds what a walk of every object finds.
            #[test]
            fn index_follows_every_write_and_finds_what_a_full_walk_finds(ops in prop::collection::vec(op(), 1..40), start in (0..6u8, 0..2u8), bound in 0..3u8) {
                let mut store = Store::default();
                let mut rv = 1;
                for op in ops {
                    rv += 1;
                    match op {
                        Op::Put { name, ns, node: n } => {
                            store.apply(EventType::Added, pod(&format!("p{name}"), &format!("ns{ns}"), &node(n), rv));
                        }
                        Op::Delete { name, ns } => {
                            store.apply(EventType::Deleted, pod(&format!("p{name}"), &format!("ns{ns}"), "", rv));
                        }
                        Op::Relist(objs) => {
                            let mut fresh = Objects::new();
                            for (name, ns, n) in objs {
                                let p = pod(&format!("p{name}"), &format!("ns{ns}"), &node(n), rv);
                                fresh.insert(p.key.clone(), p);
                            }
                            rv += 8;
                            store.replace(fresh, rv);
                        }
                    }
                    let snap = store.snapshot();
                    prop_assert_eq!(entries(&snap), rebuilt(&snap));
                }
                let snap = store.snapshot();
                let from = ObjectKey::new(format!("ns{}", start.1), format!("p{}", start.0));
                let lower = match bound { 0 => Bound::Unbounded, 1 => Bound::Included(&from), _ => Bound::Excluded(&from) };
                for n in 0..5u8 {
                    for ns in [None, Some("ns0"), Some("ns1")] {
                        let want = node(n);
                        let indexed: Vec<&ObjectKey> = snap.candidates(Some(&want), ns, lower)
                            .filter(|(_, o)| o.fields.get("spec.nodeName") == Some(want.as_str()))
                            .map(|(k, _)| k).collect();
                        let walked: Vec<&ObjectKey> = snap.candidates(None, ns, lower)
                            .filter(|(_, o)| o.fields.get("spec.nodeName") == Some(want.as_str()))
                            .map(|(k, _)| k).collect();
                        prop_assert_eq!(indexed, walked, "node {:?} namespace {:?}", want, ns);
                    }
                }
            }
        }

        #[test]
        fn a_snapshot_keeps_its_index_while_the_store_moves_on() {
            let mut store = Store::default();
            store.apply(EventType::Added, pod("a", "ns", "n1", 2));
            let before = store.snapshot();
            store.apply(EventType::Deleted, pod("a", "ns", "n1", 3));
            store.apply(EventType::Added, pod("b", "ns", "n1", 4));
            let names = |s: &Snapshot| {
                s.candidates(Some("n1"), None, Bound::Unbounded).map(|(k, _)| k.name.clone()).collect::<Vec<_>>()
            };
            assert_eq!(names(&before), ["a"]);
            assert_eq!(names(&store.snapshot()), ["b"]);
        }
    }
}
