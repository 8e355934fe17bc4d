//! What one watcher or list asks for: namespace, name, label and field
//! selectors, and the index bucket that lets the dispatcher skip the
//! watchers that cannot be interested in an event.

use std::hash::{Hash, Hasher};

use crate::selector::{FieldSelector, LabelSelector};

use crate::cache::state::object::{CachedObject, ObjectKey};

pub(crate) use crate::cache::state::node_index::{NODE_FIELD, node_of};

#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// From the request path.
    pub namespace: Option<String>,
    /// From a named path, or a `metadata.name=` field requirement.
    pub name: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

/// The dispatcher bucket a watcher lives in, most selective first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IndexKey {
    /// One object: kubelets watch each secret and configmap their pods use this way.
    Object(ObjectKey),
    /// Objects bound to one node (pods by `spec.nodeName`).
    Node(String),
    Namespace(String),
    All,
}

/// An [`IndexKey`] borrowed from an event's object: the dispatcher looks
/// its buckets up by these, building no owned key per event. Hashes and
/// compares as the key it spells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexKeyRef<'a> {
    Object { namespace: &'a str, name: &'a str },
    Node(&'a str),
    Namespace(&'a str),
    All,
}

impl IndexKey {
    pub(crate) fn as_ref(&self) -> IndexKeyRef<'_> {
        match self {
            IndexKey::Object(key) => IndexKeyRef::Object { namespace: &key.namespace, name: &key.name },
            IndexKey::Node(node) => IndexKeyRef::Node(node),
            IndexKey::Namespace(namespace) => IndexKeyRef::Namespace(namespace),
            IndexKey::All => IndexKeyRef::All,
        }
    }
}

impl IndexKeyRef<'_> {
    pub(crate) fn to_owned(self) -> IndexKey {
        match self {
            IndexKeyRef::Object { namespace, name } => IndexKey::Object(ObjectKey::new(namespace, name)),
            IndexKeyRef::Node(node) => IndexKey::Node(node.to_owned()),
            IndexKeyRef::Namespace(namespace) => IndexKey::Namespace(namespace.to_owned()),
            IndexKeyRef::All => IndexKey::All,
        }
    }
}

impl Hash for IndexKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match *self {
            IndexKeyRef::Object { namespace, name } => {
                state.write_u8(0);
                namespace.hash(state);
                name.hash(state);
            }
            IndexKeyRef::Node(node) => {
                state.write_u8(1);
                node.hash(state);
            }
            IndexKeyRef::Namespace(namespace) => {
                state.write_u8(2);
                namespace.hash(state);
            }
            IndexKeyRef::All => state.write_u8(3),
        }
    }
}

impl Hash for IndexKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

impl hashbrown::Equivalent<IndexKey> for IndexKeyRef<'_> {
    fn equivalent(&self, key: &IndexKey) -> bool {
        *self == key.as_ref()
    }
}

impl Filter {
    pub(crate) fn new(
        namespace: Option<String>,
        name: Option<String>,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> Self {
        let name = name.or_else(|| fields.exact("metadata.name").map(str::to_owned));
        let namespace = namespace.or_else(|| fields.exact("metadata.namespace").map(str::to_owned));
        Self { namespace, name, labels, fields }
    }

    pub(crate) fn matches(&self, obj: &CachedObject) -> bool {
        self.namespace.as_ref().is_none_or(|ns| *ns == obj.key.namespace)
            && self.name.as_ref().is_none_or(|n| *n == obj.key.name)
            && self.labels.matches(&obj.labels)
            && self.fields.matches(&obj.fields)
    }

    pub(crate) fn index_key(&self) -> IndexKey {
        if let Some(name) = &self.name {
            return IndexKey::Object(ObjectKey::new(self.namespace.as_deref().unwrap_or(""), name.as_str()));
        }
        // `spec.nodeName=` asks for the pods no node has (the scheduler's
        // watch): those are in no node's bucket.
        if let Some(node) = self.fields.exact(NODE_FIELD).filter(|n| !n.is_empty()) {
            return IndexKey::Node(node.to_owned());
        }
        match &self.namespace {
            Some(ns) => IndexKey::Namespace(ns.clone()),
            None => IndexKey::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, RandomState};

    use hashbrown::Equivalent;

    use super::*;

    /// The dispatcher finds a bucket by the borrowed form only if both
    /// forms hash alike and each key is equivalent to its own form alone.
    #[test]
    fn a_borrowed_key_hashes_and_compares_as_the_key_it_spells() {
        let object = |namespace: &str, name: &str| IndexKey::Object(ObjectKey::new(namespace, name));
        let keys = [
            object("ns", "a"),
            object("", "a"),
            // The same text cut elsewhere: a hash of the bytes alone would collide.
            object("nsa", ""),
            object("n", "sa"),
            IndexKey::Node("a".to_owned()),
            IndexKey::Namespace("a".to_owned()),
            IndexKey::Node(String::new()),
            IndexKey::All,
        ];
        let state = RandomState::new();
        for (i, key) in keys.iter().enumerate() {
            let borrowed = key.as_ref();
            assert_eq!(state.hash_one(borrowed), state.hash_one(key), "{key:?}");
            assert_eq!(borrowed.to_owned(), *key);
            for (j, other) in keys.iter().enumerate() {
                assert_eq!(borrowed.equivalent(other), i == j, "{key:?} against {other:?}");
                if i != j {
                    assert_ne!(state.hash_one(borrowed), state.hash_one(other), "{key:?} against {other:?}");
                }
            }
        }
    }
}
