//! Objects in the forms the cache writes besides the stored JSON:
//! today `PartialObjectMetadata`, the object's metadata under the meta
//! group's own type (what metadata informers and `kubectl get` ask for).
//!
//! kube-apiserver builds a PartialObjectMetadata from a typed `ObjectMeta`
//! (`meta.AsPartialObjectMetadata`, through the accessors for a custom
//! resource) and `json.Marshal`s it: fields in Go's struct order, the
//! `omitempty` ones left out when empty, anything ObjectMeta does not have
//! dropped. A built-in object's metadata already arrives that way; a custom
//! resource's is stored from an unstructured map, every key sorted, so the
//! metadata is rewritten in [`metadata_in_go_order`].

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct MetadataOnly<'a> {
    #[serde(borrow)]
    metadata: &'a RawValue,
}

/// The raw JSON of an object's `metadata`, as it stands in `json` (a
/// slice of it), if the object has one: what PartialObjectMetadata in
/// either form carries, and where a resourceVersion is stamped.
pub(crate) fn metadata_of(json: &[u8]) -> Option<&str> {
    serde_json::from_slice::<MetadataOnly>(json).ok().map(|m| m.metadata.get())
}

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{…}}`
/// with the object's metadata as Go writes an `ObjectMeta` (an object
/// without metadata gets `{}`; metadata that is not a JSON object, which no
/// API server sends, is copied unchanged).
pub(crate) fn partial_object_metadata_json(json: &[u8]) -> Bytes {
    const HEAD: &[u8] = b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":";
    let stored = metadata_of(json).unwrap_or("{}");
    let ordered = metadata_in_go_order(stored);
    let metadata = ordered.as_deref().unwrap_or(stored).as_bytes();
    let mut out = BytesMut::with_capacity(HEAD.len() + metadata.len() + 1);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(metadata);
    out.extend_from_slice(b"}");
    out.freeze()
}

/// How Go writes one struct field: its JSON name, and whether `omitempty`
/// leaves it out when empty (`false`: a string Go writes even when empty).
/// A `null` is always left out: every such field is a pointer, a map or a
/// slice with `omitempty`.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    omit_empty: bool,
    /// The struct order of the entries of a list of structs.
    items: Option<&'static [Field]>,
}

const fn field(name: &'static str) -> Field {
    Field { name, omit_empty: true, items: None }
}

const fn required(name: &'static str) -> Field {
    Field { name, omit_empty: false, items: None }
}

const fn list_of(name: &'static str, items: &'static [Field]) -> Field {
    Field { name, omit_empty: true, items: Some(items) }
}

/// `ObjectMeta`'s fields in Go's struct order (all `omitempty`;
/// `creationTimestamp` is `omitzero`, which an empty string also reads as).
/// `deletionGracePeriodSeconds` is a pointer: a `0` is written.
const OBJECT_META: &[Field] = &[
    field("name"),
    field("generateName"),
    field("namespace"),
    field("selfLink"),
    field("uid"),
    field("resourceVersion"),
    field("generation"),
    field("creationTimestamp"),
    field("deletionTimestamp"),
    Field { name: "deletionGracePeriodSeconds", omit_empty: false, items: None },
    field("labels"),
    field("annotations"),
    list_of("ownerReferences", OWNER_REFERENCE),
    field("finalizers"),
    list_of("managedFields", MANAGED_FIELDS_ENTRY),
];
/// `OwnerReference`: the four names are not `omitempty`, the two booleans
/// are pointers.
const OWNER_REFERENCE: &[Field] = &[
    required("apiVersion"),
    required("kind"),
    required("name"),
    required("uid"),
    field("controller"),
    field("blockOwnerDeletion"),
];
/// `ManagedFieldsEntry`; `fieldsV1` is raw JSON Go copies as it is.
const MANAGED_FIELDS_ENTRY: &[Field] = &[
    field("manager"),
    field("operation"),
    field("apiVersion"),
    field("time"),
    field("fieldsType"),
    field("fieldsV1"),
    field("subresource"),
];

/// An object's `metadata` JSON written as Go's `json.Marshal` of an
/// `ObjectMeta` writes it (see the module's doc); `None` when it is not a
/// JSON object or a list in it not a list of objects.
pub(crate) fn metadata_in_go_order(metadata: &str) -> Option<String> {
    let fields: HashMap<&str, &RawValue> = serde_json::from_str(metadata).ok()?;
    let mut out = String::with_capacity(metadata.len());
    write_struct(&fields, OBJECT_META, &mut out)?;
    Some(out)
}

fn write_struct(fields: &HashMap<&str, &RawValue>, order: &[Field], out: &mut String) -> Option<()> {
    out.push('{');
    let mut first = true;
    for field in order {
        let value = fields.get(field.name).map(|v| v.get());
        let value = match value {
            None | Some("null") if field.omit_empty => continue,
            Some(r#""""# | "{}" | "[]" | "0") if field.omit_empty => continue,
            // A name Go writes whatever it holds: an empty string when missing.
            None | Some("null") if field.items.is_none() && field.name != "deletionGracePeriodSeconds" => r#""""#,
            None | Some("null") => continue,
            Some(value) => value,
        };
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        out.push_str(field.name);
        out.push_str("\":");
        match field.items {
            Some(items) => {
                let entries: Vec<HashMap<&str, &RawValue>> = serde_json::from_str(value).ok()?;
                out.push('[');
                for (i, entry) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_struct(entry, items, out)?;
                }
                out.push(']');
            }
            None => out.push_str(value),
        }
    }
    out.push('}');
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#;

    #[test]
    fn a_built_in_object_s_metadata_is_kept_and_a_missing_metadata_is_empty() {
        let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","labels":{"a":"b"}},"spec":{}}"#;
        assert_eq!(partial_object_metadata_json(pod), format!(r#"{HEAD}{{"name":"p","labels":{{"a":"b"}}}}}}"#));
        assert_eq!(partial_object_metadata_json(br#"{"kind":"Pod"}"#), format!("{HEAD}{{}}}}"));
    }

    #[test]
    fn a_custom_resource_s_sorted_metadata_is_written_in_object_meta_s_order() {
        let stored = br#"{"apiVersion":"g/v1","kind":"W","metadata":{"annotations":{"x":"y"},"creationTimestamp":"2026-01-01T00:00:00Z","finalizers":["g/f"],"generation":1,"labels":{"a":"b"},"managedFields":[{"apiVersion":"g/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:b":{},"f:a":{}}},"manager":"m","operation":"Update","subresource":"status","time":"2026-01-01T00:00:00Z"}],"name":"w","namespace":"n","ownerReferences":[{"apiVersion":"v1","blockOwnerDeletion":true,"controller":false,"kind":"K","name":"o","uid":"u2"}],"resourceVersion":"5","uid":"u"},"spec":{}}"#;
        assert_eq!(
            partial_object_metadata_json(stored),
            format!(
                r#"{HEAD}{{"name":"w","namespace":"n","uid":"u","resourceVersion":"5","generation":1,"creationTimestamp":"2026-01-01T00:00:00Z","labels":{{"a":"b"}},"annotations":{{"x":"y"}},"ownerReferences":[{{"apiVersion":"v1","kind":"K","name":"o","uid":"u2","controller":false,"blockOwnerDeletion":true}}],"finalizers":["g/f"],"managedFields":[{{"manager":"m","operation":"Update","apiVersion":"g/v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:spec":{{"f:b":{{}},"f:a":{{}}}}}},"subresource":"status"}}]}}}}"#
            )
        );
    }

    #[test]
    fn go_leaves_out_empty_and_unknown_fields_and_writes_required_and_pointer_ones() {
        let odd = r#"{"name":"w","extra":1,"labels":{},"generation":0,"deletionGracePeriodSeconds":0,"deletionTimestamp":null,"ownerReferences":[{"uid":"u","controller":null,"other":2}]}"#;
        assert_eq!(
            metadata_in_go_order(odd).unwrap(),
            r#"{"name":"w","deletionGracePeriodSeconds":0,"ownerReferences":[{"apiVersion":"","kind":"","name":"","uid":"u"}]}"#
        );
        assert_eq!(metadata_in_go_order("[1]"), None);
        assert_eq!(metadata_in_go_order(r#"{"managedFields":[1]}"#), None);
    }
}
