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
//! O(1) and later writes never disturb it. Entries are ordered by node, then
//! by the object's key, so one node's objects come out in the store's own key
//! order: a LIST served from the index is the same list, in the same order,
//! with the same continue tokens.

use std::ops::Bound;
use std::sync::Arc;

use compact_str::CompactString;
use imbl::OrdMap;

use super::object::{CachedObject, ObjectKey};
use crate::selector::FieldSet;

/// The field the index is built on.
pub(crate) const NODE_FIELD: &str = "spec.nodeName";

/// The node an object is bound to; none for an object without the field or
/// with it empty (a pod not yet scheduled).
pub(crate) fn node_of(obj: &CachedObject) -> Option<&str> {
    obj.fields.get(NODE_FIELD).filter(|n| !n.is_empty())
}

/// One bound object in the index: its node held inline (most node names
/// fit the 24 bytes), so a search compares nodes without reaching the
/// object, which it reaches for the key only among one node's entries. The
/// key is not copied: an entry is 32 bytes, a map value of nothing (an
/// entry was 80 bytes, a node name and a key and the pointer; a million
/// pods' index 108 bytes a pod, now about half of that).
#[derive(Debug, Clone)]
struct Entry {
    node: CompactString,
    object: Arc<CachedObject>,
}

/// Where an entry belongs: node, then key. Entries and the probes a search
/// is made with ([`Probe`]) are both seen as one, so the map can be
/// searched without building an entry.
trait Place {
    fn node(&self) -> &str;
    fn key(&self) -> &ObjectKey;
}

impl Place for Entry {
    fn node(&self) -> &str {
        &self.node
    }
    fn key(&self) -> &ObjectKey {
        &self.object.key
    }
}

/// A place to search from, borrowed.
struct Probe<'a> {
    node: &'a str,
    key: &'a ObjectKey,
}

impl Place for Probe<'_> {
    fn node(&self) -> &str {
        self.node
    }
    fn key(&self) -> &ObjectKey {
        self.key
    }
}

impl Ord for dyn Place + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.node().cmp(other.node()).then_with(|| self.key().cmp(other.key()))
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
}

impl NodeIndex {
    /// The index of `objects`, built afresh (a restore or a relist).
    pub(crate) fn of<'a>(objects: impl IntoIterator<Item = &'a Arc<CachedObject>>) -> Self {
        let mut index = Self::default();
        for obj in objects {
            index.update(None, Some(obj));
        }
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
            self.entries.remove(&Probe { node, key: &prev.key } as &dyn Place);
        }
        if let Some((now, node)) = after {
            self.entries.insert(Entry { node: node.into(), object: now.clone() }, ());
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
        let from = Probe { node, key };
        let from: &dyn Place = &from;
        let lower = if included { Bound::Included(from) } else { Bound::Excluded(from) };
        self.entries
            .range::<_, dyn Place>((lower, Bound::Unbounded))
            .take_while(move |(e, _)| e.node == node)
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
