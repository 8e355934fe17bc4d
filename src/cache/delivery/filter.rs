//! What one watcher or list asks for: namespace, name, label and field
//! selectors, and the index bucket that lets the dispatcher skip the
//! watchers that cannot be interested in an event.

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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum IndexKey {
    /// One object: kubelets watch each secret and configmap their pods use this way.
    Object(ObjectKey),
    /// Objects bound to one node (pods by `spec.nodeName`).
    Node(String),
    Namespace(String),
    All,
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
            return IndexKey::Object(ObjectKey {
                namespace: self.namespace.clone().unwrap_or_default(),
                name: name.clone(),
            });
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
