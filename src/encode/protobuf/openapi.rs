//! Does a served group-version still look like the table?
//!
//! The table is made from the k8s.io/api version watchmux was built with; the
//! API server in front of which it runs may be newer (fields the table does
//! not know, which the encoder refuses object by object) or older (fields the
//! table writes as Go zero values that the older server's Go types do not
//! have, which no object would reveal). Comparing the table with the
//! server's OpenAPI v3 document (`/openapi/v3/apis/<group>/<version>`, the
//! same Go types seen through their JSON names) when a cache starts finds
//! both before any object is served, so protobuf can be turned off for that
//! kind once.

use std::collections::HashSet;

use serde_json::Value;

use super::MessageType;
use super::schema::{MsgId, Scalar, Schema, Shape};

/// Why a kind could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// The document lacks the kind's schema (named here).
    #[error("the OpenAPI document has no schema {0}")]
    NoSchema(String),
}

/// One place where the served schema and the table disagree in a way that
/// changes bytes. Its `Display` words it for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The OpenAPI name of the schema it is in (`io.k8s.api.core.v1.PodSpec`).
    pub schema: String,
    /// Whether that schema is a meta/v1 type (ObjectMeta and what it holds),
    /// which PartialObjectMetadata carries too.
    pub in_metadata: bool,
    /// What disagrees there.
    pub kind: DriftKind,
}

/// What disagrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftKind {
    /// The schema is referred to, but the document does not have it.
    NotInDocument,
    /// The server serves a field the table lacks.
    ServedNotInTable {
        /// The field's JSON name.
        field: String,
        /// The table message that lacks it (`core/v1.ConfigMap`).
        table: String,
    },
    /// The table writes a field even when absent (a Go zero value); the
    /// server does not serve it.
    ZeroValueNotServed {
        /// The field's JSON name.
        field: String,
    },
    /// A field's type is another message on each side.
    OtherMessage {
        /// The field's JSON name.
        field: String,
        /// The schema the server refers to.
        served: String,
        /// The table's message.
        table: String,
    },
    /// The table's field is a message; the served one is not an object.
    NotAnObject {
        /// The field's JSON name.
        field: String,
    },
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = &self.schema;
        match &self.kind {
            DriftKind::NotInDocument => write!(f, "{name}: referred to but not in the document"),
            DriftKind::ServedNotInTable { field, table } => {
                write!(f, "{name}.{field}: served, not in the table ({table})")
            }
            DriftKind::ZeroValueNotServed { field } => {
                write!(f, "{name}.{field}: written by the table as a Go zero value, not served")
            }
            DriftKind::OtherMessage { field, served, table } => {
                write!(f, "{name}.{field}: served as {served}, the table has {table}")
            }
            DriftKind::NotAnObject { field } => write!(f, "{name}.{field}: not an object in the served schema"),
        }
    }
}

/// Whether a table message is a meta/v1 type.
fn is_meta_v1(table_name: &str) -> bool {
    table_name.starts_with("meta/")
}

/// The OpenAPI v3 name of a table message: the Go package path with its
/// domain reversed (`core/v1.Pod` is `io.k8s.api.core.v1.Pod`).
pub(super) fn openapi_name(table_name: &str) -> String {
    let dotted = table_name.replace('/', ".");
    if is_meta_v1(table_name) {
        format!("io.k8s.apimachinery.pkg.apis.{dotted}")
    } else {
        format!("io.k8s.api.{dotted}")
    }
}

/// Every place where the served schema of `ty` and the table disagree in a
/// way that changes bytes: a field the server serves and the table lacks,
/// or a field the table writes even when absent (a non-pointer Go field) that
/// the server lacks; also a field whose type is another message in the one
/// and not in the other. Empty when the table fits. Fields the table has and
/// the server does not, but which are written only when present (pointers,
/// slices, maps, `[]byte`), change nothing and are not reported.
pub fn openapi_drift(ty: MessageType, openapi_v3: &Value) -> Result<Vec<Drift>, OpenApiError> {
    let schema = Schema::get();
    let schemas = &openapi_v3["components"]["schemas"];
    let root = openapi_name(&schema.messages[ty.0].name);
    if schemas.get(&root).is_none() {
        return Err(OpenApiError::NoSchema(root));
    }
    let mut drift = Vec::new();
    let mut seen = HashSet::new();
    let mut todo = vec![(ty.0, root)];
    while let Some((id, name)) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let message = &schema.messages[id];
        let at = |kind| Drift { schema: name.clone(), in_metadata: is_meta_v1(&message.name), kind };
        let Some(served) = schemas.get(&name) else {
            drift.push(at(DriftKind::NotInDocument));
            continue;
        };
        let empty = serde_json::Map::new();
        let props = served["properties"].as_object().unwrap_or(&empty);
        for key in props.keys() {
            if !message.keys.contains(key) {
                drift.push(at(DriftKind::ServedNotInTable { field: key.clone(), table: message.name.clone() }));
            }
        }
        fields(schema, id, id, &name, props, &mut todo, &mut drift);
    }
    // In the order of their wording, as the log has always shown them.
    drift.sort_by_cached_key(ToString::to_string);
    Ok(drift)
}

/// The table's fields of `id` against the served properties (inline members
/// read the same properties: JSON flattens them).
/// `owner` is the message whose schema `name` is (`id` differs from it for
/// an inline member).
fn fields(
    schema: &Schema,
    owner: MsgId,
    id: MsgId,
    name: &str,
    props: &serde_json::Map<String, Value>,
    todo: &mut Vec<(MsgId, String)>,
    drift: &mut Vec<Drift>,
) {
    let at = |kind| Drift { schema: name.to_owned(), in_metadata: is_meta_v1(&schema.messages[owner].name), kind };
    for f in &schema.messages[id].fields {
        if f.inline {
            if let Shape::Single(Scalar::Message(sub)) = f.shape {
                fields(schema, owner, sub, name, props, todo, drift);
            }
            continue;
        }
        let Some(served) = props.get(&f.json_name) else {
            let written_when_absent = match f.shape {
                Shape::Single(Scalar::Bytes) => false,
                Shape::Single(Scalar::Message(m)) => !f.ptr && !schema.messages[m].wrapper,
                Shape::Single(_) => !f.ptr,
                Shape::Repeated(_) | Shape::Map(_) => false,
            };
            if written_when_absent {
                drift.push(at(DriftKind::ZeroValueNotServed { field: f.json_name.clone() }));
            }
            continue;
        };
        let element = match f.shape {
            Shape::Single(s) => Some((s, served)),
            Shape::Repeated(s) => Some((s, &served["items"])),
            Shape::Map(s) => Some((s, &served["additionalProperties"])),
        };
        if let Some((Scalar::Message(sub), served)) = element
            && !schema.messages[sub].wrapper
        {
            match reference(served) {
                Some(r) if r.rsplit('.').next() == schema.messages[sub].name.rsplit('.').next() => {
                    todo.push((sub, r.to_owned()))
                }
                Some(r) => drift.push(at(DriftKind::OtherMessage {
                    field: f.json_name.clone(),
                    served: r.to_owned(),
                    table: schema.messages[sub].name.clone(),
                })),
                None => drift.push(at(DriftKind::NotAnObject { field: f.json_name.clone() })),
            }
        }
    }
}

/// The schema name a property refers to: `$ref`, or the one `allOf` entry
/// kube-openapi writes beside a default.
fn reference(v: &Value) -> Option<&str> {
    let r = v["$ref"].as_str().or_else(|| v["allOf"].as_array()?.iter().find_map(|e| e["$ref"].as_str()))?;
    r.strip_prefix("#/components/schemas/")
}

/// A document serving exactly the table's view of `ty` and every message it
/// reaches (inline members flattened), as kube-openapi would for the pinned
/// version: what tests start from before making it drift.
#[cfg(test)]
pub(crate) fn served_document(ty: MessageType) -> Value {
    fn describe(schema: &Schema, id: MsgId, props: &mut serde_json::Map<String, Value>, todo: &mut Vec<MsgId>) {
        if schema.messages[id].typemeta {
            props.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
            props.insert("kind".into(), serde_json::json!({"type": "string"}));
        }
        for f in &schema.messages[id].fields {
            if f.inline {
                if let Shape::Single(Scalar::Message(sub)) = f.shape {
                    describe(schema, sub, props, todo);
                }
                continue;
            }
            let mut element = |s: Scalar| match s {
                Scalar::Message(sub) if !schema.messages[sub].wrapper => {
                    todo.push(sub);
                    let name = openapi_name(&schema.messages[sub].name);
                    serde_json::json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "default": {}})
                }
                _ => serde_json::json!({"type": "string"}),
            };
            let prop = match f.shape {
                Shape::Single(s) => element(s),
                Shape::Repeated(s) => serde_json::json!({"type": "array", "items": element(s)}),
                Shape::Map(s) => serde_json::json!({"type": "object", "additionalProperties": element(s)}),
            };
            props.insert(f.json_name.clone(), prop);
        }
    }
    let schema = Schema::get();
    let mut schemas = serde_json::Map::new();
    let mut todo = vec![ty.0];
    let mut seen = HashSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let mut props = serde_json::Map::new();
        describe(schema, id, &mut props, &mut todo);
        schemas.insert(openapi_name(&schema.messages[id].name), serde_json::json!({"properties": props}));
    }
    serde_json::json!({"components": {"schemas": schemas}})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lease_document() -> Value {
        let meta = json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"});
        let mut doc = json!({"components": {"schemas": {
            "io.k8s.api.coordination.v1.Lease": {"properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"allOf": [meta], "default": {}},
                "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.coordination.v1.LeaseSpec"}], "default": {}},
            }},
            "io.k8s.api.coordination.v1.LeaseSpec": {"properties": {}},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"properties": {}},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry": {"properties": {}},
            "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference": {"properties": {}},
        }}});
        // Every field the table knows, as served.
        let schema = Schema::get();
        for (table, openapi) in [
            ("coordination/v1.LeaseSpec", "io.k8s.api.coordination.v1.LeaseSpec"),
            ("meta/v1.ObjectMeta", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
            ("meta/v1.ManagedFieldsEntry", "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry"),
            ("meta/v1.OwnerReference", "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"),
        ] {
            let id = schema.message_named(table).unwrap();
            for f in &schema.messages[id].fields {
                let prop = match f.json_name.as_str() {
                    "managedFields" => {
                        json!({"items": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry"}})
                    }
                    "ownerReferences" => {
                        json!({"items": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"}})
                    }
                    _ => json!({"type": "string"}),
                };
                doc["components"]["schemas"][openapi]["properties"][&f.json_name] = prop;
            }
        }
        doc
    }

    #[test]
    fn a_server_of_the_table_s_version_shows_no_drift() {
        let lease = MessageType::for_kind("coordination.k8s.io/v1", "Lease").unwrap();
        assert_eq!(openapi_drift(lease, &lease_document()).unwrap(), Vec::<Drift>::new());
    }

    #[test]
    fn newer_and_older_servers_are_told_apart_from_harmless_differences() {
        let lease = MessageType::for_kind("coordination.k8s.io/v1", "Lease").unwrap();
        let mut doc = lease_document();
        let spec = &mut doc["components"]["schemas"]["io.k8s.api.coordination.v1.LeaseSpec"]["properties"];
        // Newer: a field the table lacks.
        spec["shinyNewField"] = json!({"type": "string"});
        // Older: holderIdentity is a pointer, so its absence changes nothing.
        spec.as_object_mut().unwrap().remove("holderIdentity");
        let meta = &mut doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
        // Older: name is a non-pointer string the table always writes.
        meta.as_object_mut().unwrap().remove("name");
        let drift = openapi_drift(lease, &doc).unwrap();
        assert_eq!(
            drift.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "io.k8s.api.coordination.v1.LeaseSpec.shinyNewField: served, not in the table (coordination/v1.LeaseSpec)",
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.name: written by the table as a Go zero value, not served",
            ]
        );
    }

    #[test]
    fn a_document_without_the_kind_is_an_error() {
        let lease = MessageType::for_kind("coordination.k8s.io/v1", "Lease").unwrap();
        assert!(matches!(openapi_drift(lease, &json!({})), Err(OpenApiError::NoSchema(_))));
    }
}
