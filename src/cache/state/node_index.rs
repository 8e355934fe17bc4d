//! Objects by the node they are bound to (pods by `spec.nodeName`), kept
//! beside the store and versioned with it.
//!
//! Every kubelet lists and watches its own pods with
//! `fieldSelector=spec.nodeName=<node>`. Without an index each such LIST or
//! watch start walks every cached pod: 5,000 kubelets starting at once against
//! 150,000 pods are 750 million object checks, which made a storm slower
//! through watchmux than straight at kube-apiserver (whose watch cache keeps
//! the same index). With it, each walks only its node's few dozen pods.
//!
//! The index is an `imbl::OrdMap` like the store, so a snapshot clones it in
//! O(1) and later writes never disturb it. Entries are ordered by a hash of
//! the node, then by the object's key, so one node's objects come out in the
//! store's own key order: a LIST served from the index is the same list, in
//! the same order, with the same continue tokens. (Two nodes whose hashes
//! agree share a run of entries, in key order; a node's range skips the
//! other's. The index remembers each hash's node name, so only after two
//! names ever shared a hash does a range read each object's node: reading
//! it, a field of another allocation, was a cache miss per pod of a
//! kubelet's LIST.)

use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use imbl::OrdMap;

use super::dense;
use super::object::{CachedObject, ObjectKey};
use crate::selector::FieldSet;

/// The field the index is built on.
pub(crate) const NODE_FIELD: &str = "spec.nodeName";

/// The node an object is bound to; none for an object without the field or
/// with it empty (a pod not yet scheduled).
pub(crate) fn node_of(obj: &CachedObject) -> Option<&str> {
    obj.fields.get(NODE_FIELD).filter(|n| !n.is_empty())
}

/// Where a node's entries are: a hash of its name, with keys chosen once a
/// process (entries live no longer), so no choice of names makes the
/// nodes' runs meet more often than chance.
fn node_hash(node: &str) -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    #[cfg(test)]
    if tests::ALL_NODES_COLLIDE.get() {
        return 0;
    }
    KEYS.get_or_init(Default::default).hash_one(node)
}

/// One bound object in the index: the hash of its node, then the object,
/// whose key orders it among its node's entries. 16 bytes, a map value of
/// nothing: an entry was 80 bytes (the node's name, a copy of the key and
/// the pointer), a million pods' index 108 bytes a pod; now about 23. A
/// search compares hashes without reaching the objects but among one
/// node's entries, where it reaches for their keys (as it did before).
#[derive(Debug, Clone)]
struct Entry {
    node_hash: u64,
    object: Arc<CachedObject>,
}

/// Where an entry belongs: node hash, then key. Entries and the probes a
/// search is made with ([`Probe`]) are both seen as one, so the map can be
/// searched without building an entry.
trait Place {
    fn node_hash(&self) -> u64;
    fn key(&self) -> &ObjectKey;
}

impl Place for Entry {
    fn node_hash(&self) -> u64 {
        self.node_hash
    }
    fn key(&self) -> &ObjectKey {
        &self.object.key
    }
}

/// A place to search from, borrowed.
struct Probe<'a> {
    node_hash: u64,
    key: &'a ObjectKey,
}

impl Place for Probe<'_> {
    fn node_hash(&self) -> u64 {
        self.node_hash
    }
    fn key(&self) -> &ObjectKey {
        self.key
    }
}

impl Ord for dyn Place + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.node_hash().cmp(&other.node_hash()).then_with(|| self.key().cmp(other.key()))
    }
}

impl PartialOrd for dyn Place + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Place + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for dyn Place + '_ {}

impl<'a> std::borrow::Borrow<dyn Place + 'a> for Entry {
    fn borrow(&self) -> &(dyn Place + 'a) {
        self
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self as &dyn Place).cmp(other)
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Entry {}

/// The bound objects, by node and key.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeIndex {
    entries: OrdMap<Entry, ()>,
    /// Shared by every version of the index since it was built.
    names: Arc<NodeNames>,
}

/// The node names an index has held, by hash, and whether two ever shared
/// one. Grows with the distinct nodes seen since the index was built (a
/// relist builds it anew), never with objects.
#[derive(Debug, Default)]
struct NodeNames {
    by_hash: parking_lot::RwLock<std::collections::HashMap<u64, compact_str::CompactString>>,
    /// Set (for good) before an entry of a second name under one hash is
    /// added, so any version holding such an entry sees it set.
    collided: std::sync::atomic::AtomicBool,
}

impl NodeNames {
    /// Notes that `node` is at `hash`.
    fn note(&self, node: &str, hash: u64) {
        let collides = |known: &compact_str::CompactString| known.as_str() != node;
        if let Some(known) = self.by_hash.read().get(&hash) {
            if collides(known) {
                self.collided.store(true, std::sync::atomic::Ordering::Release);
            }
            return;
        }
        let mut by_hash = self.by_hash.write();
        let known = by_hash.entry(hash).or_insert_with(|| node.into());
        if collides(known) {
            self.collided.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    fn collided(&self) -> bool {
        self.collided.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl NodeIndex {
    /// The index of `objects`, built afresh (a restore or a relist): the
    /// entries sorted first, so that the map's leaves come out full
    /// ([`dense`]; 20 bytes an entry rather than 30 in hash order).
    pub(crate) fn of<'a>(objects: impl IntoIterator<Item = &'a Arc<CachedObject>>) -> Self {
        let names = NodeNames::default();
        let mut entries: Vec<(Entry, ())> = objects
            .into_iter()
            .filter_map(|object| {
                let node = node_of(object)?;
                let node_hash = node_hash(node);
                names.note(node, node_hash);
                Some((Entry { node_hash, object: object.clone() }, ()))
            })
            .collect();
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        // A key twice on one node (not from a store, whose keys are one
        // each): the last given, as inserting them one by one would keep.
        entries.dedup_by(|(later, _), (first, _)| {
            let same = later == first;
            if same {
                std::mem::swap(later, first);
            }
            same
        });
        let mut index = Self { entries: OrdMap::new(), names: Arc::new(names) };
        dense::insert_ascending(&mut index.entries, &entries);
        index
    }

    /// Follows one change of an object: `prev` is what the store held under
    /// its key, `now` what it holds after (none once deleted).
    ///
    /// Both are under one key, so only the node can differ: a pod that
    /// stays on its node (every update of a running pod) is one insert that
    /// replaces the entry.
    pub(crate) fn update(&mut self, prev: Option<&Arc<CachedObject>>, now: Option<&Arc<CachedObject>>) {
        debug_assert!(prev.zip(now).is_none_or(|(p, n)| p.key == n.key), "one key's change");
        let (before, after) = (prev.and_then(|p| Some((p, node_of(p)?))), now.and_then(|n| Some((n, node_of(n)?))));
        if let Some((prev, node)) = before.filter(|(_, node)| after.is_none_or(|(_, now_node)| now_node != *node)) {
            self.entries.remove(&Probe { node_hash: node_hash(node), key: &prev.key } as &dyn Place);
        }
        if let Some((now, node)) = after {
            let node_hash = node_hash(node);
            // Every entry's name was noted when it came in: a pod that stays
            // on its node (nearly every event) takes no lock here.
            if before.is_none_or(|(_, prev_node)| prev_node != node) {
                self.names.note(node, node_hash);
            }
            self.entries.insert(Entry { node_hash, object: now.clone() }, ());
        }
    }

    /// The objects bound to `node`, in key order, from `lower` on.
    pub(crate) fn range<'a>(
        &'a self,
        node: &'a str,
        lower: Bound<&ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<CachedObject>)> + 'a {
        let first = ObjectKey::default();
        let (key, included) = match lower {
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
            Bound::Unbounded => (&first, true),
        };
        let hash = node_hash(node);
        let from = Probe { node_hash: hash, key };
        let from: &dyn Place = &from;
        let lower = if included { Bound::Included(from) } else { Bound::Excluded(from) };
        let shared_hashes = self.names.collided();
        self.entries
            .range::<_, dyn Place>((lower, Bound::Unbounded))
            .take_while(move |(e, _)| e.node_hash == hash)
            .filter(move |(e, _)| !shared_hashes || node_of(&e.object) == Some(node))
            .map(|(e, _)| (&e.object.key, &e.object))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::{cm, pod};

    thread_local! {
        /// Every node hashes alike on this thread while set: one run of entries for all.
        pub(super) static ALL_NODES_COLLIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    fn names<'a>(it: impl Iterator<Item = (&'a ObjectKey, &'a Arc<CachedObject>)>) -> Vec<String> {
        it.map(|(k, _)| format!("{}/{}", k.namespace, k.name)).collect()
    }

    #[test]
    fn one_nodes_objects_come_in_key_order_from_any_start() {
        let mut objects: Vec<_> =
            [("c", "a", "n1"), ("a", "b", "n1"), ("b", "a", "n2"), ("a", "a", "n1"), ("z", "z", "")]
                .into_iter()
                .map(|(name, ns, node)| pod(name, ns, node, 2))
                .collect();
        objects.push(Arc::new(cm("x", 3, "")));
        let index = NodeIndex::of(&objects);
        assert_eq!(index.len(), 4, "neither the unscheduled pod nor the ConfigMap is indexed");
        assert_eq!(names(index.range("n1", Bound::Unbounded)), ["a/a", "a/c", "b/a"]);
        assert_eq!(names(index.range("n2", Bound::Unbounded)), ["a/b"]);
        assert!(names(index.range("n", Bound::Unbounded)).is_empty(), "a prefix of a node is another node");
        assert!(names(index.range("", Bound::Unbounded)).is_empty());
        let from = ObjectKey { namespace: "a".into(), name: "c".into() };
        assert_eq!(names(index.range("n1", Bound::Included(&from))), ["a/c", "b/a"]);
        assert_eq!(names(index.range("n1", Bound::Excluded(&from))), ["b/a"]);
    }

    /// Every node's range is exactly its own objects, in key order, whatever
    /// the names (one a prefix of another, numbers out of order).
    #[test]
    fn each_nodes_range_is_its_objects_in_key_order_among_many_nodes() {
        each_nodes_range_is_its_objects_in_key_order();
    }

    /// Nodes whose hashes agree share one run of entries: each node's range
    /// still holds its own objects only, in key order.
    #[test]
    fn nodes_whose_hashes_collide_keep_their_own_ranges() {
        ALL_NODES_COLLIDE.set(true);
        each_nodes_range_is_its_objects_in_key_order();
        ALL_NODES_COLLIDE.set(false);
    }

    /// A range reads each object's node only once two names shared a hash;
    /// the first update that makes them share it tells every version since.
    #[test]
    fn a_collision_is_noted_before_its_entry_is_added_built_or_updated() {
        let objects = [pod("a", "ns", "n1", 2), pod("b", "ns", "n2", 3)];
        let built = NodeIndex::of(&objects);
        assert!(!built.names.collided(), "distinct hashes: no check a pod");
        assert_eq!(names(built.range("n1", Bound::Unbounded)), ["ns/a"]);

        ALL_NODES_COLLIDE.set(true);
        let collided = NodeIndex::of(&objects);
        let mut updated = NodeIndex::default();
        updated.update(None, Some(&objects[0]));
        let before = updated.clone();
        assert!(!before.names.collided(), "one name under the hash");
        updated.update(None, Some(&objects[1]));
        for index in [&collided, &updated] {
            assert!(index.names.collided());
            assert_eq!(names(index.range("n1", Bound::Unbounded)), ["ns/a"], "n2's pod under the same hash is skipped");
            assert_eq!(names(index.range("n2", Bound::Unbounded)), ["ns/b"]);
        }
        ALL_NODES_COLLIDE.set(false);
        assert!(before.names.collided(), "the older version shares the note (it holds no second name: harmless)");
        let again = pod("a", "ns", "n1", 4);
        updated.update(Some(&objects[0]), Some(&again));
        assert!(updated.names.collided(), "for good");

        // A pod that moves to a node whose hash another name holds is noted
        // as it moves, not only when it first comes in.
        ALL_NODES_COLLIDE.set(true);
        let mut moved = NodeIndex::of(&[pod("a", "ns", "n1", 2)]);
        assert!(!moved.names.collided());
        let staying = pod("a", "ns", "n1", 3);
        moved.update(Some(&pod("a", "ns", "n1", 2)), Some(&staying));
        assert!(!moved.names.collided(), "the same node again: nothing new");
        moved.update(Some(&staying), Some(&pod("a", "ns", "n2", 4)));
        assert!(moved.names.collided(), "n2 under n1's hash");
        assert_eq!(names(moved.range("n1", Bound::Unbounded)), Vec::<String>::new());
        assert_eq!(names(moved.range("n2", Bound::Unbounded)), ["ns/a"]);
        ALL_NODES_COLLIDE.set(false);
    }

    fn each_nodes_range_is_its_objects_in_key_order() {
        let nodes: Vec<String> = (0..60).map(|i| format!("n{}", i * 7 % 60)).chain(["n".into(), "n1".into()]).collect();
        let objects: Vec<_> = (0..600)
            .map(|i| pod(&format!("p{:03}", (i * 37) % 600), ["a", "b", "c"][i % 3], &nodes[i % nodes.len()], 2))
            .collect();
        let index = NodeIndex::of(&objects);
        assert_eq!(index.len(), 600);
        for node in &nodes {
            let mut expected: Vec<String> = objects
                .iter()
                .filter(|o| node_of(o) == Some(node.as_str()))
                .map(|o| format!("{}/{}", o.key.namespace, o.key.name))
                .collect();
            expected.sort();
            assert_eq!(names(index.range(node, Bound::Unbounded)), expected, "{node}");
            let from = ObjectKey::new("b", "");
            let after: Vec<String> = expected.iter().filter(|k| k.as_str() >= "b/").cloned().collect();
            assert_eq!(names(index.range(node, Bound::Included(&from))), after, "{node} from b/");
        }
    }

    /// Built at once, the index is what updates one by one make: a key
    /// given twice on one node holds the last, on two nodes is on both.
    #[test]
    fn built_at_once_as_one_by_one() {
        let given =
            [pod("a", "ns", "n1", 2), pod("a", "ns", "n1", 3), pod("b", "ns", "n1", 4), pod("b", "ns", "n2", 5)];
        let mut one_by_one = NodeIndex::default();
        given.iter().for_each(|o| one_by_one.update(None, Some(o)));
        let at_once = NodeIndex::of(&given);
        let held = |index: &NodeIndex, node| {
            index.range(node, Bound::Unbounded).map(|(k, o)| (k.name.to_string(), o.rv)).collect::<Vec<_>>()
        };
        for node in ["n1", "n2"] {
            assert_eq!(held(&at_once, node), held(&one_by_one, node), "{node}");
        }
        assert_eq!(held(&at_once, "n1"), [("a".to_owned(), 3), ("b".to_owned(), 4)]);
        assert_eq!(held(&at_once, "n2"), [("b".to_owned(), 5)]);
    }

    #[test]
    fn updates_follow_binding_moving_and_deletion() {
        let mut index = NodeIndex::default();
        let pending = pod("p", "ns", "", 2);
        index.update(None, Some(&pending));
        assert_eq!(index.len(), 0);
        let bound = pod("p", "ns", "n1", 3);
        index.update(Some(&pending), Some(&bound));
        assert_eq!(names(index.range("n1", Bound::Unbounded)), ["ns/p"]);
        let changed = pod("p", "ns", "n1", 4);
        index.update(Some(&bound), Some(&changed));
        let (_, held) = index.range("n1", Bound::Unbounded).next().unwrap();
        assert_eq!(held.rv, 4, "the entry holds the object's current version");
        // Not something the API server allows, but a cache must not keep a stale entry.
        let moved = pod("p", "ns", "n2", 5);
        index.update(Some(&changed), Some(&moved));
        assert!(names(index.range("n1", Bound::Unbounded)).is_empty());
        assert_eq!(names(index.range("n2", Bound::Unbounded)), ["ns/p"]);
        index.update(Some(&moved), None);
        assert_eq!(index.len(), 0);
    }
}
