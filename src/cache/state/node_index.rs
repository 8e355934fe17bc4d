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

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct NodeKey {
    /// Inline when up to 24 bytes, as the key's strings.
    node: CompactString,
    key: ObjectKey,
}

/// The bound objects, by node and key.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeIndex {
    entries: OrdMap<NodeKey, Arc<CachedObject>>,
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
    /// replaces the entry, with one entry key built.
    pub(crate) fn update(&mut self, prev: Option<&Arc<CachedObject>>, now: Option<&Arc<CachedObject>>) {
        debug_assert!(prev.zip(now).is_none_or(|(p, n)| p.key == n.key), "one key's change");
        let entry = |obj: &Arc<CachedObject>, node: &str| NodeKey { node: node.into(), key: obj.key.clone() };
        let (before, after) = (prev.and_then(|p| Some((p, node_of(p)?))), now.and_then(|n| Some((n, node_of(n)?))));
        if let Some((prev, node)) = before.filter(|(_, node)| after.is_none_or(|(_, now_node)| now_node != *node)) {
            self.entries.remove(&entry(prev, node));
        }
        if let Some((now, node)) = after {
            self.entries.insert(entry(now, node), now.clone());
        }
    }

    /// The objects bound to `node`, in key order, from `lower` on.
    pub(crate) fn range<'a>(
        &'a self,
        node: &'a str,
        lower: Bound<&ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<CachedObject>)> + 'a {
        let at = |key: &ObjectKey| NodeKey { node: node.into(), key: key.clone() };
        let lower = match lower {
            Bound::Included(k) => Bound::Included(at(k)),
            Bound::Excluded(k) => Bound::Excluded(at(k)),
            Bound::Unbounded => Bound::Included(at(&ObjectKey::default())),
        };
        self.entries
            .range((lower, Bound::Unbounded))
            .take_while(move |(k, _)| k.node == node)
            .map(|(k, obj)| (&k.key, obj))
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
