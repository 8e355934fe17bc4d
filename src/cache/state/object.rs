//! One cached object: its upstream bytes, what filtering needs, and a memo of
//! its encodings.
//!
//! Plain JSON is never re-encoded: the bytes are exactly what the API server
//! sends in a watch event (compact, `kind` and `apiVersion` first). Other
//! content variants are computed the first time a watcher asks for them and
//! then shared by every watcher, so encodes per event equal the number of
//! variants requested, never the number of watchers.
//!
//! A protobuf variant is kept as the whole body (the `k8s\0` envelope GET and
//! watch events send); a list item is a slice of it (the bare message). An
//! object the protobuf encoder refuses ([`NoProtobuf`]) remembers that too,
//! so the refusal is also worked out once.

mod sparse;
mod uid;

pub(crate) use uid::Uid;

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use compact_str::CompactString;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::encode::minor;
use crate::encode::object::{metadata_of, partial_object_metadata_json};
use crate::encode::protobuf::{self, Unplaceable};
use crate::encode::table::TableEventKey;
use crate::encode::variant::ContentVariant;
use crate::metrics as m;
use crate::selector::selectable::{self, Lookup};
use crate::selector::{Fields, Labels};

use crate::cache::resource_info::ResourceInfo;

/// Namespace (empty for cluster-scoped objects) and name: the store's key,
/// ordered as the API server orders list results.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct ObjectKey {
    pub namespace: CompactString,
    pub name: CompactString,
}

impl ObjectKey {
    pub(crate) fn new(namespace: impl Into<CompactString>, name: impl Into<CompactString>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("object is not valid JSON")]
    Json(#[from] serde_json::Error),
    #[error("object has no metadata.name")]
    NoName,
    #[error("object has an invalid metadata.resourceVersion {0:?}")]
    ResourceVersion(String),
    #[error("object is not a JSON object")]
    NotAnObject,
    #[error("object is not UTF-8")]
    Utf8,
}

/// What decoding needs to know about the resource the objects belong to.
#[derive(Debug, Clone)]
pub(crate) struct ObjectShape {
    pub info: ResourceInfo,
    /// `{"kind":"ConfigMap","apiVersion":"v1",` (ready to splice after `{`).
    type_meta: Bytes,
    /// Selectable fields of a custom resource, from its CRD.
    pub custom_selectable: Option<Vec<String>>,
    /// The same, as each object's decode reads them.
    custom_fields: Option<selectable::CustomFields>,
    /// What [`CachedObject::decode`] reads of an object: its type meta,
    /// metadata and selectable fields.
    read: Arc<sparse::Paths>,
}

/// The metadata the cache keeps of every object.
const METADATA_READ: [[&str; 2]; 5] = [
    ["metadata", "name"],
    ["metadata", "namespace"],
    ["metadata", "resourceVersion"],
    ["metadata", "uid"],
    ["metadata", "labels"],
];

impl ObjectShape {
    pub(crate) fn new(info: ResourceInfo, custom_selectable: Option<Vec<String>>) -> Self {
        let type_meta = format!(
            "\"kind\":{},\"apiVersion\":{},",
            serde_json::to_string(&info.kind).expect("string"),
            serde_json::to_string(&info.api_version()).expect("string"),
        );
        let fields = selectable::read_paths(&info.group, &info.resource, custom_selectable.as_deref());
        let read = sparse::Paths::of(
            [vec!["kind".to_owned()]]
                .into_iter()
                .chain(METADATA_READ.iter().map(|path| path.map(str::to_owned).to_vec()))
                .chain(fields),
        );
        let custom_fields = custom_selectable.as_deref().map(selectable::CustomFields::new);
        Self { info, type_meta: Bytes::from(type_meta), custom_selectable, custom_fields, read: Arc::new(read) }
    }
}

/// One object as the cache holds it.
#[derive(Debug)]
pub(crate) struct CachedObject {
    pub key: ObjectKey,
    pub rv: u64,
    /// `metadata.uid`: one object's lifetime. A key whose uid changed was
    /// deleted and created again.
    pub uid: Uid,
    /// The object as a watch event carries it.
    json: Bytes,
    /// Length of the `"kind":…,"apiVersion":…,` run right after the opening
    /// brace, which items of built-in typed lists leave out.
    type_meta_len: usize,
    pub labels: Labels,
    pub fields: Fields,
    /// The other variants, allocated on the first demand for any of them:
    /// an object only plain-JSON clients read pays two words.
    derived: OnceLock<Box<Derived>>,
}

/// The memo of an object's variants other than plain JSON.
#[derive(Debug, Default)]
struct Derived {
    metadata_json: OnceLock<Bytes>,
    protobuf: OnceLock<ProtobufMemo>,
    metadata_protobuf: OnceLock<ProtobufMemo>,
    /// Table watch events about this version, by table variant: a few at
    /// most (a variant is an includeObject, a version and whether the
    /// headers go with it), so a list under a lock taken once per delivery.
    tables: parking_lot::Mutex<Vec<(TableEventKey, [Bytes; 2])>>,
    /// What a reader that knows the kind derives from this version (a CRD's
    /// printer columns: `cache::read::serve::crd`).
    reading: OnceLock<Arc<dyn Any + Send + Sync>>,
}

/// An object version has no protobuf form here: the encoder refused it
/// (`reason` is [`Unplaceable::reason`]); `content::answer_form` then answers JSON or passes
/// the request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoProtobuf {
    pub reason: &'static str,
}

/// A protobuf body and where its bare message lies in it.
#[derive(Debug, Clone)]
struct ProtobufBody {
    body: Bytes,
    message: Range<usize>,
}

/// A protobuf variant as made in one Kubernetes minor's form
/// ([`minor::served`] when it was made). The served minor changes when
/// the upstream's API servers are upgraded (`upstream::version`); a body
/// kept from before serves on only where its kind is written alike in both
/// minors ([`protobuf::same_form`]), which is most kinds between
/// neighbouring minors. Elsewhere the served minor's body is made for each
/// read and not kept: until its object changes, a version encoded before an
/// upgrade costs an encoding per protobuf read, rather than every object a
/// second memo it would need once.
#[derive(Debug)]
struct ProtobufMemo {
    minor: u8,
    ty: Option<protobuf::MessageType>,
    body: Result<ProtobufBody, NoProtobuf>,
}

impl ProtobufBody {
    fn new(encoded: Result<(Vec<u8>, Range<usize>), Unplaceable>, variant: ContentVariant) -> Result<Self, NoProtobuf> {
        metrics::counter!(m::CACHE_ENCODES, "variant" => variant.metric_label()).increment(1);
        match encoded {
            Ok((body, message)) => Ok(Self { body: Bytes::from(body), message }),
            Err(refused) => {
                let reason = refused.reason();
                tracing::debug!(variant = variant.metric_label(), error = %refused, "no protobuf form");
                metrics::counter!(m::PROTOBUF_REFUSED, "variant" => variant.metric_label(), "reason" => reason)
                    .increment(1);
                Err(NoProtobuf { reason })
            }
        }
    }
}

impl CachedObject {
    /// Decodes an object as it arrives in a watch event or a list item. Type
    /// meta is added when the bytes lack it (items of typed lists).
    pub(crate) fn decode(raw: Bytes, shape: &ObjectShape) -> Result<Self, DecodeError> {
        // Checked as UTF-8 once here, so the parser need not check each string.
        let text = std::str::from_utf8(&raw).map_err(|_| DecodeError::Utf8)?;
        let mut read = shape.read.read(text)?;
        if !read.is_object() {
            return Err(DecodeError::NotAnObject);
        }
        let (json, type_meta_len) = if raw.get(1..).is_some_and(|rest| rest.starts_with(&shape.type_meta)) {
            (raw, shape.type_meta.len())
        } else if read.at(&["kind"]).is_some() {
            // Type meta present but not in the canonical order: keep the bytes
            // as they are; lists will carry the items as they are too.
            (raw, 0)
        } else {
            let mut with = BytesMut::with_capacity(raw.len() + shape.type_meta.len());
            with.extend_from_slice(b"{");
            with.extend_from_slice(&shape.type_meta);
            let rest = &raw[1..];
            // `{}` has nothing after the type meta: drop the trailing comma.
            if rest.first() == Some(&b'}') {
                with.truncate(with.len() - 1);
            }
            with.extend_from_slice(rest);
            (with.freeze(), shape.type_meta.len())
        };
        let key_part = |path: &[&str]| read.at(path).and_then(Value::as_str).map(CompactString::from);
        // Short names and namespaces are held inline: no allocation.
        let key = ObjectKey {
            name: key_part(&["metadata", "name"]).ok_or(DecodeError::NoName)?,
            namespace: key_part(&["metadata", "namespace"]).unwrap_or_default(),
        };
        let rv_text = read.at(&["metadata", "resourceVersion"]).and_then(Value::as_str).unwrap_or("");
        let rv = rv_text.parse().map_err(|_| DecodeError::ResourceVersion(rv_text.to_owned()))?;
        let info = &shape.info;
        let fields =
            selectable::extract_with(&info.group, &info.resource, info.namespaced, shape.custom_fields.as_ref(), &read);
        let uid = match read.at(&["metadata", "uid"]) {
            Some(Value::String(uid)) => Uid::new(uid),
            _ => Uid::default(),
        };
        // Moved out of the reading rather than copied: nothing looks after this.
        let labels = match read.take(&["metadata", "labels"]) {
            Some(Value::Object(labels)) => labels
                .into_iter()
                .filter_map(|(k, v)| match v {
                    Value::String(v) => Some((k, v)),
                    _ => None,
                })
                .collect(),
            _ => Labels::default(),
        };
        metrics::counter!(m::CACHE_ENCODES, "variant" => ContentVariant::Json.metric_label()).increment(1);
        Ok(Self { key, rv, uid, json, type_meta_len, labels, fields, derived: OnceLock::new() })
    }

    /// The object's bytes in a content variant (a whole body for protobuf),
    /// computed at most once. Only protobuf variants can fail.
    pub(crate) fn encoded(&self, variant: ContentVariant) -> Result<Bytes, NoProtobuf> {
        match variant {
            ContentVariant::Json => Ok(self.json.clone()),
            ContentVariant::PartialObjectMetadataJson => Ok(self
                .derived()
                .metadata_json
                .get_or_init(|| {
                    metrics::counter!(m::CACHE_ENCODES, "variant" => variant.metric_label()).increment(1);
                    partial_object_metadata_json(&self.json)
                })
                .clone()),
            ContentVariant::Protobuf | ContentVariant::PartialObjectMetadataProtobuf => {
                self.protobuf_body(variant).map(|p| p.body.clone())
            }
        }
    }

    /// A Table watch event about this version in one table variant, as the
    /// frame's head and the row's object (`encode::table::one_row_table`),
    /// made by `encode` the first time it is asked for, and whether this call
    /// made it (`None` when `encode` refuses): every watcher of the same variant gets the same bytes, ages
    /// included, as from the API server's per-event encoding cache.
    pub(crate) fn table_event(
        &self,
        key: TableEventKey,
        encode: impl FnOnce() -> Option<[Bytes; 2]>,
    ) -> Option<([Bytes; 2], bool)> {
        // Held while encoding: the others in the variant wait for the bytes
        // rather than make them again. A refusal (`None`) is not kept.
        let mut tables = self.derived().tables.lock();
        if let Some((_, event)) = tables.iter().find(|(k, _)| *k == key) {
            return Some((event.clone(), false));
        }
        let event = encode()?;
        metrics::counter!(m::CACHE_ENCODES, "variant" => "table").increment(1);
        tables.push((key, event.clone()));
        Some((event, true))
    }

    /// `make`'s reading of this version, made once; `None` if the version
    /// already holds a reading of another type (each cache's objects have one
    /// reader, so this does not happen).
    pub(crate) fn reading<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<Arc<T>> {
        let reading = self.derived().reading.get_or_init(|| Arc::new(make()));
        reading.clone().downcast::<T>().ok()
    }

    fn derived(&self) -> &Derived {
        self.derived.get_or_init(Box::default)
    }

    fn protobuf_body(&self, variant: ContentVariant) -> Result<ProtobufBody, NoProtobuf> {
        self.protobuf_body_in(variant, minor::served())
    }

    /// The protobuf variant in the form of `served`, the minor served now.
    fn protobuf_body_in(&self, variant: ContentVariant, served: u8) -> Result<ProtobufBody, NoProtobuf> {
        let derived = self.derived();
        let memo = if variant == ContentVariant::Protobuf { &derived.protobuf } else { &derived.metadata_protobuf };
        let kept = memo.get_or_init(|| self.encode_protobuf(variant, served));
        let alike = kept.minor == served || kept.ty.is_some_and(|ty| protobuf::same_form(kept.minor, served, ty));
        if alike { kept.body.clone() } else { self.encode_protobuf(variant, served).body }
    }

    /// The protobuf variant in `minor`'s form.
    fn encode_protobuf(&self, variant: ContentVariant, minor: u8) -> ProtobufMemo {
        let encoded = if variant == ContentVariant::Protobuf {
            protobuf::encode_object_in(minor, &self.json).map(|e| (e.body, e.message, e.ty))
        } else {
            let metadata = metadata_of(&self.json).map_or(&b"{}"[..], str::as_bytes);
            protobuf::encode_partial_object_metadata_in(minor, metadata).map(|message| {
                let body = protobuf::envelope("meta.k8s.io/v1", "PartialObjectMetadata", &message);
                let range = protobuf::envelope_message(&body).expect("an envelope");
                (body, range, protobuf::partial_object_metadata())
            })
        };
        let ty = encoded.as_ref().ok().map(|(_, _, ty)| *ty);
        let body = ProtobufBody::new(encoded.map(|(body, message, _)| (body, message)), variant);
        ProtobufMemo { minor, ty, body }
    }

    /// The object as an item of a list response in `variant`, as up to two
    /// byte runs to splice: items of built-in typed lists carry no type meta,
    /// protobuf items are the bare message.
    pub(crate) fn list_item(&self, variant: ContentVariant, builtin: bool) -> Result<[Bytes; 2], NoProtobuf> {
        match variant {
            ContentVariant::Json if builtin && self.type_meta_len > 0 => {
                Ok([Bytes::from_static(b"{"), self.json.slice(1 + self.type_meta_len..)])
            }
            ContentVariant::Protobuf | ContentVariant::PartialObjectMetadataProtobuf => {
                let p = self.protobuf_body(variant)?;
                Ok([p.body.slice(p.message), Bytes::new()])
            }
            _ => Ok([self.encoded(variant)?, Bytes::new()]),
        }
    }

    /// The same object with `metadata.resourceVersion` set to `rv`: the
    /// previous state of an object that stopped matching a watcher's
    /// selectors is sent as DELETED with the current event's version.
    pub(crate) fn with_resource_version(&self, rv: u64) -> CachedObject {
        CachedObject {
            key: self.key.clone(),
            rv,
            uid: self.uid.clone(),
            json: stamp_resource_version(&self.json, rv),
            type_meta_len: self.type_meta_len,
            labels: self.labels.clone(),
            fields: self.fields.clone(),
            derived: OnceLock::new(),
        }
    }

    /// The object as a watch event carries it: what is persisted
    /// (`persist/feed.rs`), and decoded again at load without re-encoding.
    pub(crate) fn json(&self) -> &Bytes {
        &self.json
    }
}

/// Rewrites `metadata.resourceVersion` in place, keeping every other byte.
///
/// The field is found as a key of the metadata object itself, by a JSON
/// parser: a label, an annotation or any other user-controlled string that
/// happens to read `"resourceVersion":"` is never taken for it (a byte
/// search would stamp the label instead, or break the JSON).
fn stamp_resource_version(json: &Bytes, rv: u64) -> Bytes {
    #[derive(Deserialize)]
    struct Rv<'a> {
        #[serde(borrow, rename = "resourceVersion")]
        resource_version: Option<&'a RawValue>,
    }
    let Some(metadata) = metadata_of(json) else { return json.clone() };
    let Ok(Rv { resource_version: Some(value) }) = serde_json::from_str::<Rv>(metadata) else {
        return json.clone();
    };
    // The raw value borrows from `json`: its place there is its offset.
    let start = value.get().as_ptr() as usize - json.as_ptr() as usize;
    let end = start + value.get().len();
    let mut out = BytesMut::with_capacity(json.len() + 20);
    out.extend_from_slice(&json[..start]);
    out.extend_from_slice(format!("\"{rv}\"").as_bytes());
    out.extend_from_slice(&json[end..]);
    out.freeze()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::resource_info::test_info;

    pub(crate) fn cm_shape() -> ObjectShape {
        ObjectShape::new(test_info("", "configmaps", "ConfigMap", true), None)
    }

    /// A pod in `ns`, bound to `node` unless that is empty.
    pub(crate) fn pod(name: &str, ns: &str, node: &str, rv: u64) -> std::sync::Arc<CachedObject> {
        let shape = ObjectShape::new(test_info("", "pods", "Pod", true), None);
        let raw = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}},"spec":{{"nodeName":"{node}"}}}}"#
        );
        std::sync::Arc::new(CachedObject::decode(Bytes::from(raw), &shape).unwrap())
    }

    pub(crate) fn cm(name: &str, rv: u64, labels: &str) -> CachedObject {
        let raw = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{{{labels}}}}},"data":{{"k":"v"}}}}"#
        );
        CachedObject::decode(Bytes::from(raw), &cm_shape()).unwrap()
    }

    #[test]
    fn watch_form_is_kept_byte_for_byte() {
        let raw = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"x":"1"}}"#;
        let obj = CachedObject::decode(Bytes::from_static(raw.as_bytes()), &cm_shape()).unwrap();
        assert_eq!(obj.json(), raw);
        assert_eq!(obj.rv, 7);
        assert_eq!(obj.key, ObjectKey { namespace: "ns".into(), name: "a".into() });
        let [a, b] = obj.list_item(ContentVariant::Json, true).unwrap();
        assert_eq!(
            [a, b].concat(),
            br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"x":"1"}}"#
        );
    }

    #[test]
    fn a_custom_resource_decodes_with_its_crds_selectable_fields() {
        use crate::selector::FieldSet;
        let selectable = vec![".spec.color".to_owned(), "status['size.x']".to_owned(), "spec.[bad".to_owned()];
        let shape = ObjectShape::new(test_info("example.com", "widgets", "Widget", true), Some(selectable.clone()));
        for (raw, color, size) in [
            (
                r#"{"metadata":{"name":"w","namespace":"ns","resourceVersion":"3"},"spec":{"color":"red"},"status":{"size.x":7}}"#,
                "red",
                "7",
            ),
            (r#"{"metadata":{"name":"w","namespace":"ns","resourceVersion":"4"},"spec":{"color":true}}"#, "true", ""),
        ] {
            let obj = CachedObject::decode(Bytes::from(raw), &shape).unwrap();
            assert_eq!(obj.fields.get("spec.color"), Some(color), "{raw}");
            assert_eq!(obj.fields.get("status['size.x']"), Some(size), "{raw}");
            assert_eq!(obj.fields.get("spec.[bad"), Some(""), "a path that does not split reads empty");
            let whole: Value = serde_json::from_str(raw).unwrap();
            let expected = selectable::extract("example.com", "widgets", true, Some(&selectable), &whole);
            assert_eq!(obj.fields, expected, "the shape's prepared fields read as the whole object's");
        }
    }

    #[test]
    fn list_items_gain_type_meta_for_watch_events() {
        let item = r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"}}}"#;
        let obj = CachedObject::decode(Bytes::from_static(item.as_bytes()), &cm_shape()).unwrap();
        assert_eq!(
            obj.json(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"}}}"#
        );
        assert_eq!(obj.labels.get("app"), Some("x"));
        assert_eq!([obj.list_item(ContentVariant::Json, true).unwrap()].concat().concat(), item.as_bytes());
    }

    /// An upstream upgraded from 1.36 to 1.37 between two reads of one
    /// object version.
    #[test]
    fn a_protobuf_memo_serves_another_minor_only_where_its_kind_is_written_alike() {
        let body = |obj: &CachedObject, variant, minor| obj.protobuf_body_in(variant, minor).map(|p| p.body);
        let config_map = cm("a", 9, r#""l":"v""#);
        for variant in [ContentVariant::Protobuf, ContentVariant::PartialObjectMetadataProtobuf] {
            let before = body(&config_map, variant, 36).unwrap();
            let after = body(&config_map, variant, 37).unwrap();
            assert_eq!(after.as_ptr(), before.as_ptr(), "{variant:?}: alike in both minors, the memo serves");
        }

        // PodSpec.evictionResponders is 1.37's: a pod that has one has a
        // protobuf form in 1.37 and none in 1.36.
        let shape = ObjectShape::new(test_info("", "pods", "Pod", true), None);
        let raw = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"5"},"spec":{"evictionResponders":[{"name":"r"}]}}"#;
        let pod = CachedObject::decode(Bytes::from_static(raw.as_bytes()), &shape).unwrap();
        assert!(body(&pod, ContentVariant::Protobuf, 36).is_err(), "1.36 has no such field: refused, and kept");
        let upgraded = body(&pod, ContentVariant::Protobuf, 37).expect("1.37 writes it");
        assert_eq!(upgraded, protobuf::encode_object_in(37, raw.as_bytes()).unwrap().body);
        assert!(body(&pod, ContentVariant::Protobuf, 36).is_err(), "the 1.36 memo still answers for 1.36");

        // Kept in 1.37's form, read after a rollback to 1.36: not served as it is.
        let pod = CachedObject::decode(Bytes::from_static(raw.as_bytes()), &shape).unwrap();
        assert!(body(&pod, ContentVariant::Protobuf, 37).is_ok());
        assert!(body(&pod, ContentVariant::Protobuf, 36).is_err(), "1.36's own answer: no protobuf form");
    }

    #[test]
    fn partial_object_metadata_keeps_metadata_bytes() {
        let obj = cm("a", 9, r#""l":"v""#);
        let md = obj.encoded(ContentVariant::PartialObjectMetadataJson).unwrap();
        assert_eq!(
            md,
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"9","labels":{"l":"v"}}}"#
        );
        // Memoized: the same allocation comes back.
        assert_eq!(obj.encoded(ContentVariant::PartialObjectMetadataJson).unwrap().as_ptr(), md.as_ptr());
    }

    #[test]
    fn protobuf_is_the_encoder_s_body_and_list_items_its_bare_message() {
        let obj = cm("a", 9, r#""l":"v""#);
        let body = obj.encoded(ContentVariant::Protobuf).unwrap();
        assert_eq!(body, protobuf::encode_object(obj.json()).unwrap());
        // Memoized, and the list item shares its allocation.
        assert_eq!(obj.encoded(ContentVariant::Protobuf).unwrap().as_ptr(), body.as_ptr());
        let [item, rest] = obj.list_item(ContentVariant::Protobuf, true).unwrap();
        let ty = protobuf::MessageType::for_kind("v1", "ConfigMap").unwrap();
        assert_eq!(item, protobuf::encode_message(ty, obj.json()).unwrap());
        assert!(rest.is_empty());
        assert!(body.as_ptr() <= item.as_ptr() && item.as_ptr() < body.as_ptr().wrapping_add(body.len()));

        let md = obj.encoded(ContentVariant::PartialObjectMetadataProtobuf).unwrap();
        let bare = protobuf::encode_partial_object_metadata(
            br#"{"name":"a","namespace":"ns","resourceVersion":"9","labels":{"l":"v"}}"#,
        )
        .unwrap();
        assert_eq!(md, protobuf::envelope("meta.k8s.io/v1", "PartialObjectMetadata", &bare));
        assert_eq!(obj.list_item(ContentVariant::PartialObjectMetadataProtobuf, true).unwrap()[0], bare);
    }

    #[test]
    fn custom_resources_have_metadata_protobuf_only_and_refusals_are_remembered() {
        let shape = ObjectShape::new(test_info("example.com", "widgets", "Widget", true), None);
        let raw = r#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","resourceVersion":"3"},"spec":{"size":1.5}}"#;
        let obj = CachedObject::decode(Bytes::from_static(raw.as_bytes()), &shape).unwrap();
        assert_eq!(obj.encoded(ContentVariant::Protobuf), Err(NoProtobuf { reason: "unknown_kind" }));
        assert_eq!(obj.list_item(ContentVariant::Protobuf, false), Err(NoProtobuf { reason: "unknown_kind" }));
        assert!(obj.encoded(ContentVariant::PartialObjectMetadataProtobuf).is_ok());
    }

    #[test]
    fn stamping_changes_only_the_object_resource_version() {
        let raw = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"ns","resourceVersion":"5","annotations":{"resourceVersion":"keep"}},"involvedObject":{"resourceVersion":"5"}}"#;
        let shape = ObjectShape::new(test_info("", "events", "Event", true), None);
        let obj = CachedObject::decode(Bytes::from_static(raw.as_bytes()), &shape).unwrap();
        let stamped = obj.with_resource_version(123);
        assert_eq!(stamped.rv, 123);
        assert_eq!(
            stamped.json(),
            r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"ns","resourceVersion":"123","annotations":{"resourceVersion":"keep"}},"involvedObject":{"resourceVersion":"5"}}"#
        );
    }

    #[test]
    fn objects_without_name_or_version_are_rejected() {
        let shape = cm_shape();
        assert!(matches!(
            CachedObject::decode(Bytes::from_static(br#"{"metadata":{"resourceVersion":"1"}}"#), &shape),
            Err(DecodeError::NoName)
        ));
        assert!(matches!(
            CachedObject::decode(Bytes::from_static(br#"{"metadata":{"name":"a","resourceVersion":"x"}}"#), &shape),
            Err(DecodeError::ResourceVersion(_))
        ));
        assert!(CachedObject::decode(Bytes::from_static(b"[1]"), &shape).is_err());
        assert!(CachedObject::decode(Bytes::from_static(b"{\"metadata\":"), &shape).is_err());
    }
}
