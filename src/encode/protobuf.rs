//! Protobuf bodies for built-in kinds, made from the upstream JSON.
//!
//! watchmux keeps one JSON upstream watch per resource; clients that ask for
//! `application/vnd.kubernetes.protobuf` (the kubelet, every typed client-go
//! clientset, metadata informers) must still get the bytes kube-apiserver
//! would send them. This module turns the JSON the API server's serializer
//! wrote into exactly the bytes its protobuf serializer writes for the same
//! object, following a table generated from the pinned Go types
//! (`protobuf/schema.txt`, made by `integration/cmd/protoschema`).
//!
//! It fails closed: a key, a value or a kind that the table cannot place
//! gives an [`Unplaceable`] naming what and where, never a guess; the caller
//! then answers JSON or passes the request through.
//!
//! The Go rules copied (k8s.io/apimachinery/pkg/runtime/serializer/protobuf
//! and runtime/types_proto.go, generated.pb.go in k8s.io/api and
//! apimachinery):
//! - A body (GET, LIST) is the magic `k8s\0` then a `runtime.Unknown`:
//!   `1: typeMeta {1: apiVersion, 2: kind}`, `2: raw` (the object's own
//!   message), `3: contentEncoding ""`, `4: contentType ""`, all four always
//!   written ([`envelope`]).
//! - A list is the list kind's message: `1: metadata` (ListMeta), then
//!   `2: items`, one bare item message each ([`encode_list`]).
//! - A watch event is a bare `metav1.WatchEvent {1: type, 2: object
//!   RawExtension {1: raw}}` whose raw is the object's envelope, framed by a
//!   4-byte big-endian length and no envelope of its own: the API server
//!   encodes events with the protobuf RawSerializer and the length-delimited
//!   framer ([`watch_frame`]).
//! - Message fields: see `protobuf/message.rs`; the types with a hand-written
//!   protobuf form (Time, MicroTime, Duration, IntOrString, Quantity,
//!   RawExtension, FieldsV1): `protobuf/special.rs`.
//!
//! docs/protobuf.md tells how the table is made and checked, and what the
//! fuzz corpus against Go's own serializers covers.

mod json;
mod message;
mod openapi;
mod schema;
mod special;
mod wire;

use serde_json::value::RawValue;

use message::{Encoder, Path};
#[cfg(test)]
pub(crate) use openapi::served_document;
pub use openapi::{Drift, DriftKind, OpenApiError, openapi_drift};
use schema::{MsgId, Scalar, Schema, Shape};

/// The magic bytes in front of every protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why an object has no protobuf form here. The caller serves JSON (or
/// passes the request through) and counts the reason.
#[derive(Debug, thiserror::Error)]
pub enum Unplaceable {
    /// The table has no message for this kind (custom resources, newer kinds).
    #[error("no protobuf form is known for apiVersion {api_version:?} kind {kind:?}")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// The object names no kind to look up.
    #[error("the object has no apiVersion and kind strings")]
    NoTypeMeta,
    /// A JSON key the message has no field for (a newer server's field).
    #[error("at {path}: key {key:?} has no field in {message}")]
    UnknownKey {
        /// Where in the object.
        path: String,
        /// The key.
        key: String,
        /// The message that lacks it.
        message: String,
    },
    /// A value of another JSON type than the field's.
    #[error("at {path}: {found} is not {expected}")]
    BadValue {
        /// Where in the object.
        path: String,
        /// What the field takes.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// The bytes are not JSON.
    #[error("at {path}: not valid JSON")]
    Json {
        /// Where in the object.
        path: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// An `omitempty` `[]byte` absent from the JSON: Go leaves out both a
    /// nil and an empty one, but writes the empty one in protobuf (length 0),
    /// and the API server keeps `""` as written (gogo's Unmarshal makes it
    /// non-nil). Only webhook `clientConfig.caBundle` and CSR
    /// `status.certificate` are such fields.
    #[error(
        "at {path}: an omitempty []byte left out of the JSON, which Go writes in protobuf only if it is empty rather than nil"
    )]
    AmbiguousEmptyBytes {
        /// Where in the object.
        path: String,
    },
    /// A list body was asked for a kind that is not a list.
    #[error("{kind} is not a list of ListMeta and items")]
    NotAList {
        /// The kind.
        kind: String,
    },
    /// core/v1 List: Go's streaming list encoder (always on in
    /// kube-apiserver) writes its RawExtension items as runtime.Unknown
    /// messages, not as the RawExtension the table gives them. The API
    /// server never serves this kind; refused rather than written wrong.
    #[error("{kind}'s RawExtension items are written by Go as runtime.Unknown, which the table does not describe")]
    RawExtensionItems {
        /// The kind.
        kind: String,
    },
}

impl Unplaceable {
    /// A short, bounded label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownKind { .. } => "unknown_kind",
            Self::NoTypeMeta => "no_type_meta",
            Self::UnknownKey { .. } => "unknown_field",
            Self::BadValue { .. } => "bad_value",
            Self::Json { .. } => "invalid_json",
            Self::AmbiguousEmptyBytes { .. } => "ambiguous_empty_bytes",
            Self::NotAList { .. } => "not_a_list",
            Self::RawExtensionItems { .. } => "raw_extension_items",
        }
    }
}

/// A kind the table has a protobuf message for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageType(MsgId);

impl MessageType {
    /// The message of objects of this apiVersion and kind, if the table has one.
    pub fn for_kind(api_version: &str, kind: &str) -> Option<Self> {
        Schema::get().kind(api_version, kind).map(Self)
    }

    fn lookup(api_version: &str, kind: &str) -> Result<Self, Unplaceable> {
        Self::for_kind(api_version, kind)
            .ok_or_else(|| Unplaceable::UnknownKind { api_version: api_version.to_owned(), kind: kind.to_owned() })
    }

    /// The Go type's name as the table spells it, e.g. `core/v1.Pod`.
    pub fn name(self) -> &'static str {
        &Schema::get().messages[self.0].name
    }
}

/// Every (apiVersion, kind) with a protobuf form, for tests and start-up
/// checks.
pub fn known_kinds() -> Vec<(&'static str, &'static str)> {
    let mut kinds: Vec<_> = Schema::get().kinds().collect();
    kinds.sort_unstable();
    kinds
}

fn parse(json: &[u8]) -> Result<&RawValue, Unplaceable> {
    serde_json::from_slice(json).map_err(|source| Unplaceable::Json { path: ".".into(), source })
}

/// The bare message of an object of `ty` (what a list carries per item and
/// what an envelope carries as `raw`). `apiVersion` and `kind` in the JSON
/// are allowed and ignored.
pub fn encode_message(ty: MessageType, json: &[u8]) -> Result<Vec<u8>, Unplaceable> {
    refuse_raw_extension_items(ty, ty.name())?;
    let raw = parse(json)?;
    let mut out = Vec::with_capacity(json.len());
    Encoder { schema: Schema::get() }.message(ty.0, raw, &Path::Root, &mut out)?;
    Ok(out)
}

/// A whole protobuf body for an object that names its own `apiVersion` and
/// `kind`, as the API server's JSON always does for a single object.
pub fn encode_object(json: &[u8]) -> Result<Vec<u8>, Unplaceable> {
    encode_object_in(crate::encode::minor::served(), json).map(|encoded| encoded.body)
}

/// [`encode_object`], and where in the body its bare message lies (what
/// [`encode_message`] gives).
pub fn encode_object_with_message(json: &[u8]) -> Result<(Vec<u8>, std::ops::Range<usize>), Unplaceable> {
    encode_object_in(crate::encode::minor::served(), json).map(|encoded| (encoded.body, encoded.message))
}

/// An object's protobuf body as one minor writes it: what a cache keeps.
#[derive(Debug)]
pub struct Encoded {
    /// The whole body, envelope included.
    pub body: Vec<u8>,
    /// Where in `body` the bare message lies: a cache keeps the one body
    /// and serves list items as a slice of it.
    pub message: std::ops::Range<usize>,
    /// The message written, for [`same_form`].
    pub ty: MessageType,
}

/// [`encode_object`] in the form of `minor` (one of
/// [`crate::encode::minor::SUPPORTED`]), with where its bare message lies.
pub fn encode_object_in(minor: u8, json: &[u8]) -> Result<Encoded, Unplaceable> {
    let schema = Schema::for_minor(minor);
    let raw = parse(json)?;
    let entries = json::entries(raw).map_err(|source| Unplaceable::Json { path: ".".into(), source })?;
    let field = |name: &str| {
        entries
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| (json::JsonKind::of(v) == json::JsonKind::String).then_some(*v))
            .and_then(|v| json::string(v).ok())
    };
    let (Some(api_version), Some(kind)) = (field("apiVersion"), field("kind")) else {
        return Err(Unplaceable::NoTypeMeta);
    };
    let ty = schema
        .kind(&api_version, &kind)
        .map(MessageType)
        .ok_or_else(|| Unplaceable::UnknownKind { api_version: api_version.to_string(), kind: kind.to_string() })?;
    refuse_raw_extension_items(ty, &kind)?;
    let mut message = Vec::with_capacity(json.len());
    Encoder { schema }.entries(ty.0, &entries, &Path::Root, &mut message)?;
    let body = envelope(&api_version, &kind, &message);
    let message = envelope_message(&body).expect("an envelope");
    Ok(Encoded { body, message, ty })
}

/// Whether objects of `ty` are written alike by minors `a` and `b`: an
/// encoding made in one serves for the other (a kind no field of which, at
/// any depth, changed between them). A minor that is not supported is
/// alike to none but itself.
pub fn same_form(a: u8, b: u8, ty: MessageType) -> bool {
    Schema::same_form(a, b, ty.0)
}

/// Where the `raw` message of an envelope lies, read back from its
/// header; `None` when `body` is not an envelope.
pub fn envelope_message(body: &[u8]) -> Option<std::ops::Range<usize>> {
    let rest = body.strip_prefix(MAGIC)?;
    let (type_meta_len, used) = read_len_field(rest, 1)?;
    let at = MAGIC.len() + used + type_meta_len;
    let (raw_len, used) = read_len_field(body.get(at..)?, 2)?;
    let start = at + used;
    (start + raw_len <= body.len()).then_some(start..start + raw_len)
}

/// The key (one byte for fields below 16) and length of a length-delimited
/// field at the start of `bytes`: (length, bytes of key and length).
fn read_len_field(bytes: &[u8], field: u8) -> Option<(usize, usize)> {
    if *bytes.first()? != (field << 3) | 2 {
        return None;
    }
    let mut len = 0usize;
    for (i, b) in bytes[1..].iter().enumerate().take(10) {
        len |= usize::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return Some((len, i + 2));
        }
    }
    None
}

/// The end of every envelope: `contentEncoding` and `contentType`, both "".
pub const ENVELOPE_TAIL: &[u8] = &[0x1A, 0x00, 0x22, 0x00];

/// A list body in pieces to splice around items that already exist, so that
/// they are never copied: `head`, then for each item its
/// [`ListLayout::item_prefix`] and its bare message, then
/// [`ENVELOPE_TAIL`]. The same bytes as [`encode_list`].
#[derive(Debug)]
pub struct ListLayout {
    /// The magic, the envelope up to its `raw` and the list's metadata.
    pub head: Vec<u8>,
    items_field: u32,
}

impl ListLayout {
    /// The list body's head for items of these lengths, in this order.
    pub fn new(
        api_version: &str,
        list_kind: &str,
        list_meta_json: &[u8],
        item_lens: &[usize],
    ) -> Result<Self, Unplaceable> {
        let schema = Schema::get();
        let ty = MessageType::lookup(api_version, list_kind)?;
        refuse_raw_extension_items(ty, list_kind)?;
        let not_a_list = || Unplaceable::NotAList { kind: list_kind.to_owned() };
        let fields = &schema.messages[ty.0].fields;
        let [meta, items_field] = &fields[..] else { return Err(not_a_list()) };
        let (Shape::Single(Scalar::Message(meta_ty)), Shape::Repeated(Scalar::Message(_))) =
            (meta.shape, items_field.shape)
        else {
            return Err(not_a_list());
        };
        if meta.json_name != "metadata" || items_field.json_name != "items" || meta.number > items_field.number {
            return Err(not_a_list());
        }
        let raw = parse(list_meta_json)?;
        let mut list_meta = Vec::new();
        let start = wire::begin_len(&mut list_meta, meta.number);
        let path = Path::Key(&Path::Root, "metadata");
        Encoder { schema }.message(meta_ty, raw, &path, &mut list_meta)?;
        wire::end_len(&mut list_meta, start);
        let items_len: usize = item_lens.iter().map(|&len| Self::prefix(items_field.number, len).len() + len).sum();
        let mut head = Vec::with_capacity(list_meta.len() + api_version.len() + list_kind.len() + 24);
        head.extend_from_slice(MAGIC);
        let start = wire::begin_len(&mut head, 1);
        wire::put_bytes(&mut head, 1, api_version.as_bytes());
        wire::put_bytes(&mut head, 2, list_kind.as_bytes());
        wire::end_len(&mut head, start);
        wire::put_key(&mut head, 2, 2);
        wire::put_varint(&mut head, (list_meta.len() + items_len) as u64);
        head.extend_from_slice(&list_meta);
        Ok(Self { head, items_field: items_field.number })
    }

    /// The key and length in front of an item of `len` bytes.
    pub fn item_prefix(&self, len: usize) -> Vec<u8> {
        Self::prefix(self.items_field, len)
    }

    fn prefix(field: u32, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(6);
        wire::put_key(&mut out, field, 2);
        wire::put_varint(&mut out, len as u64);
        out
    }
}

/// What comes before the object's body in [`watch_frame`]: the length, the
/// event type and the keys and lengths around `raw`. `head + object` is the
/// frame, so the object's shared body is never copied.
pub fn watch_frame_head(event_type: &str, object_len: usize) -> Vec<u8> {
    let mut raw_field = Vec::with_capacity(6);
    wire::put_key(&mut raw_field, 1, 2);
    wire::put_varint(&mut raw_field, object_len as u64);
    let raw_extension_len = raw_field.len() + object_len;
    let mut event = Vec::with_capacity(event_type.len() + 16);
    wire::put_bytes(&mut event, 1, event_type.as_bytes());
    wire::put_key(&mut event, 2, 2);
    wire::put_varint(&mut event, raw_extension_len as u64);
    event.extend_from_slice(&raw_field);
    let total = event.len() + object_len;
    let mut out = Vec::with_capacity(event.len() + 4);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&event);
    out
}

fn refuse_raw_extension_items(ty: MessageType, kind: &str) -> Result<(), Unplaceable> {
    let fields = &Schema::get().messages[ty.0].fields;
    if fields.iter().any(|f| f.shape == Shape::Repeated(Scalar::Special(schema::Special::RawExtension))) {
        return Err(Unplaceable::RawExtensionItems { kind: kind.to_owned() });
    }
    Ok(())
}

/// `k8s\0` + `runtime.Unknown{typeMeta, raw: message, "", ""}`.
pub fn envelope(api_version: &str, kind: &str, message: &[u8]) -> Vec<u8> {
    // Exactly the size: the cache keeps this allocation for the object
    // version's life (its protobuf memo), and a Vec that grows doubles.
    let type_meta = wire::len_field_size(api_version.len()) + wire::len_field_size(kind.len());
    let size = MAGIC.len() + wire::len_field_size(type_meta) + wire::len_field_size(message.len()) + 2 + 2;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(MAGIC);
    let start = wire::begin_len(&mut out, 1);
    wire::put_bytes(&mut out, 1, api_version.as_bytes());
    wire::put_bytes(&mut out, 2, kind.as_bytes());
    wire::end_len(&mut out, start);
    wire::put_bytes(&mut out, 2, message);
    wire::put_bytes(&mut out, 3, b"");
    wire::put_bytes(&mut out, 4, b"");
    debug_assert_eq!(out.len(), size);
    out
}

/// A whole list body: the list kind's message from its `metadata` (the
/// ListMeta JSON) and the items' bare messages (from [`encode_message`] of
/// the item kind, or [`encode_partial_object_metadata`] for a
/// PartialObjectMetadataList), in the envelope. The items are not checked
/// against the list's item type: that is the caller's to get right.
pub fn encode_list<I, B>(
    api_version: &str,
    list_kind: &str,
    list_meta_json: &[u8],
    items: I,
) -> Result<Vec<u8>, Unplaceable>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let items: Vec<B> = items.into_iter().collect();
    let lens: Vec<usize> = items.iter().map(|i| i.as_ref().len()).collect();
    let layout = ListLayout::new(api_version, list_kind, list_meta_json, &lens)?;
    let mut body = layout.head.clone();
    for item in &items {
        body.extend_from_slice(&layout.item_prefix(item.as_ref().len()));
        body.extend_from_slice(item.as_ref());
    }
    body.extend_from_slice(ENVELOPE_TAIL);
    Ok(body)
}

/// The bare `PartialObjectMetadata` message (`1: metadata`) of an object,
/// from its `metadata` JSON: an item of a PartialObjectMetadataList, or the
/// `raw` of an envelope with apiVersion `meta.k8s.io/v1`.
pub fn encode_partial_object_metadata(metadata_json: &[u8]) -> Result<Vec<u8>, Unplaceable> {
    encode_partial_object_metadata_in(crate::encode::minor::served(), metadata_json)
}

/// [`encode_partial_object_metadata`] in the form of `minor`.
pub fn encode_partial_object_metadata_in(minor: u8, metadata_json: &[u8]) -> Result<Vec<u8>, Unplaceable> {
    let raw = parse(metadata_json)?;
    let schema = Schema::for_minor(minor);
    let ty = partial_object_metadata();
    let field = &schema.messages[ty.0].fields[0];
    let Shape::Single(Scalar::Message(meta_ty)) = field.shape else { unreachable!("PartialObjectMetadata.metadata") };
    let mut out = Vec::with_capacity(metadata_json.len());
    let start = wire::begin_len(&mut out, field.number);
    Encoder { schema }.message(meta_ty, raw, &Path::Key(&Path::Root, "metadata"), &mut out)?;
    wire::end_len(&mut out, start);
    Ok(out)
}

/// The `meta.k8s.io/v1` PartialObjectMetadata message, in every minor's table.
pub fn partial_object_metadata() -> MessageType {
    MessageType::for_kind("meta.k8s.io/v1", "PartialObjectMetadata").expect("PartialObjectMetadata in the table")
}

/// One watch event as the API server frames it: a 4-byte big-endian length,
/// then a bare `WatchEvent{type, object: RawExtension{raw: object}}`, where
/// `object` is the object's whole envelope (from [`encode_object`]).
pub fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut event = Vec::with_capacity(object.len() + event_type.len() + 16);
    wire::put_bytes(&mut event, 1, event_type.as_bytes());
    let start = wire::begin_len(&mut event, 2);
    wire::put_bytes(&mut event, 1, object);
    wire::end_len(&mut event, start);
    let mut out = Vec::with_capacity(event.len() + 4);
    out.extend_from_slice(&(event.len() as u32).to_be_bytes());
    out.extend_from_slice(&event);
    out
}

/// Names a path of protobuf field numbers inside `ty`'s message with the
/// JSON keys they come from (`spec.containers.ports`), for reports of the
/// corpus test and of mismatches; numbers it cannot follow are shown as
/// `#n`.
pub fn describe_field_path(ty: MessageType, numbers: &[u32]) -> String {
    let schema = Schema::get();
    let mut current = Some(ty.0);
    let mut in_map: Option<Scalar> = None;
    let mut parts = Vec::new();
    for &n in numbers {
        if let Some(value) = in_map.take() {
            // Inside a map entry: 1 is the key, 2 the value.
            parts.push(if n == 1 { "{key}".to_owned() } else { "{value}".to_owned() });
            current = match value {
                Scalar::Message(id) if n == 2 => Some(id),
                _ => None,
            };
            continue;
        }
        let Some(field) = current.and_then(|id| schema.messages[id].fields.iter().find(|f| f.number == n)) else {
            parts.push(format!("#{n}"));
            current = None;
            continue;
        };
        parts.push(if field.inline { format!("(inline #{n})") } else { field.json_name.clone() });
        current = match field.shape {
            Shape::Single(Scalar::Message(id)) | Shape::Repeated(Scalar::Message(id)) => Some(id),
            Shape::Map(value) => {
                in_map = Some(value);
                None
            }
            _ => None,
        };
    }
    parts.join(".")
}

#[cfg(test)]
mod tests;
