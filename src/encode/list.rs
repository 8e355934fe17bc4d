//! List bodies as kube-apiserver writes them, in JSON and in protobuf: the
//! list's own `kind`, `apiVersion` and `metadata`, then the items, spliced
//! from each object's shared bytes and never re-encoded.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::protobuf::{ENVELOPE_TAIL, ListLayout, Unplaceable};
use super::variant::ContentVariant;
use crate::body::Chunk;

/// A list's `metadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListMeta {
    /// The version the list is a snapshot of.
    pub rv: u64,
    /// Where the next page starts, when a limit cut the list short.
    pub continue_token: Option<String>,
    /// How many items remain after this page, when the API server would
    /// count them.
    pub remaining: Option<u64>,
}

impl ListMeta {
    pub(crate) fn to_json(&self) -> String {
        let mut meta = format!("{{\"resourceVersion\":\"{}\"", self.rv);
        if let Some(token) = &self.continue_token {
            meta.push_str(&format!(",\"continue\":{}", serde_json::to_string(token).expect("string")));
        }
        if let Some(remaining) = self.remaining {
            meta.push_str(&format!(",\"remainingItemCount\":{remaining}"));
        }
        meta.push('}');
        meta
    }
}

/// Items shorter than this are copied together into frames; longer ones go
/// as the shared bytes they are.
const COPIED_ITEM: usize = 4 * 1024;
/// What one frame of copied items holds at most: an HTTP/2 DATA frame's
/// default maximum.
const FRAME: usize = 16 * 1024;

/// A list body's items as chunks: an item of a few hundred bytes to a few
/// KiB, sent as a chunk of its own, costs HTTP/2 a DATA frame and hyper a
/// poll each: a kubelet's LIST of 200 pods was 200 frames, their
/// bookkeeping more CPU than copying the bytes once into a few 16 KiB
/// frames (which the connection's write buffer copies anyway). Items of
/// [`COPIED_ITEM`] or more go as the shared bytes they are.
#[derive(Default)]
pub(crate) struct Frames {
    chunks: VecDeque<Chunk>,
    /// The frame being filled.
    open: BytesMut,
    bytes: usize,
}

impl Frames {
    /// Adds one item, written as its three parts in order: a few bytes
    /// before it (a comma, a protobuf field's key and length), and its two
    /// pieces.
    pub(crate) fn push(&mut self, head: &[u8], body: Bytes, tail: Bytes) {
        let len = head.len() + body.len() + tail.len();
        self.bytes += len;
        if len >= COPIED_ITEM {
            self.close_frame();
            self.chunks.push_back(Chunk::parts(Bytes::copy_from_slice(head), body, tail));
            return;
        }
        if self.open.len() + len > FRAME {
            self.close_frame();
        }
        if self.open.capacity() == 0 {
            self.open.reserve(FRAME);
        }
        self.open.extend_from_slice(head);
        self.open.extend_from_slice(&body);
        self.open.extend_from_slice(&tail);
    }

    fn close_frame(&mut self) {
        if !self.open.is_empty() {
            self.chunks.push_back(Chunk::from(std::mem::take(&mut self.open).freeze()));
        }
    }

    /// Bytes of the items added so far.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The chunks of every item added so far.
    pub(crate) fn take(&mut self) -> VecDeque<Chunk> {
        self.close_frame();
        std::mem::take(&mut self.chunks)
    }
}

/// A JSON list's items as [`Frames`], each after its comma but the first.
#[derive(Default)]
pub(crate) struct ListItems {
    frames: Frames,
    placed: bool,
}

impl ListItems {
    /// Adds an item made of `parts` (a list item's two pieces).
    pub(crate) fn push(&mut self, parts: [Bytes; 2]) {
        let sep: &[u8] = if self.placed { b"," } else { b"" };
        self.placed = true;
        let [a, b] = parts;
        self.frames.push(sep, a, b);
    }

    /// Whether any item was added.
    pub(crate) fn placed_any(&self) -> bool {
        self.placed
    }

    /// Bytes of the items added so far.
    pub(crate) fn bytes(&self) -> usize {
        self.frames.bytes()
    }

    /// The chunks of every item added so far; later items follow with their
    /// comma.
    pub(crate) fn take(&mut self) -> VecDeque<Chunk> {
        self.frames.take()
    }
}

/// The chunks of a protobuf list body (`variant` a protobuf one) of `items`,
/// each an item's bare message: the envelope and ListMeta, then each item
/// behind its key and length, then the envelope's last fields. No newline.
pub(crate) fn protobuf_list_body(
    variant: ContentVariant,
    kind: &str,
    api_version: &str,
    meta: &ListMeta,
    items: Vec<Bytes>,
) -> Result<VecDeque<Chunk>, Unplaceable> {
    let (kind, api_version) = variant.list_type(kind, api_version);
    let lens: Vec<usize> = items.iter().map(Bytes::len).collect();
    let layout = ListLayout::new(&api_version, &kind, meta.to_json().as_bytes(), &lens)?;
    let mut frames = Frames::default();
    for item in items {
        frames.push(&layout.item_prefix(item.len()), item, Bytes::new());
    }
    let mut chunks = frames.take();
    chunks.push_front(Chunk::from(Bytes::from(layout.head.clone())));
    chunks.push_back(Chunk::from(Bytes::from_static(ENVELOPE_TAIL)));
    Ok(chunks)
}

/// The chunks of a list body of `items` (each already an item in
/// `variant`, with its separating comma), for a resource of `kind` and
/// `api_version`.
pub(crate) fn list_body(
    variant: ContentVariant,
    kind: &str,
    api_version: &str,
    meta: &ListMeta,
    mut items: VecDeque<Chunk>,
) -> VecDeque<Chunk> {
    let (head, close) = list_ends(variant, kind, api_version, meta, !items.is_empty());
    items.push_front(Chunk::from(head));
    items.push_back(Chunk::from(close));
    items
}

/// What comes before a list body's items and after them: the list's type
/// and metadata and the items' opening, then their close; a list with no
/// items (`any_items` false) writes them as the API server does (`[]`, or
/// `null` for a PartialObjectMetadataList).
pub(crate) fn list_ends(
    variant: ContentVariant,
    kind: &str,
    api_version: &str,
    meta: &ListMeta,
    any_items: bool,
) -> (Bytes, Bytes) {
    let (kind, api_version) = variant.list_type(kind, api_version);
    let (open, close): (&str, &'static [u8]) = if any_items { ("[", b"]}\n") } else { (variant.empty_items(), b"}\n") };
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":{open}",
        serde_json::to_string(&kind).expect("string"),
        serde_json::to_string(&api_version).expect("string"),
        meta.to_json(),
    );
    (Bytes::from(head), Bytes::from_static(close))
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    fn text(chunks: VecDeque<Chunk>) -> String {
        String::from_utf8(bytes(chunks)).unwrap()
    }

    #[test]
    fn empty_lists_have_an_empty_items_slice_and_metadata_lists_none() {
        let meta = ListMeta { rv: 7, continue_token: None, remaining: None };
        assert_eq!(
            text(list_body(ContentVariant::Json, "ConfigMap", "v1", &meta, VecDeque::new())),
            "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"7\"},\"items\":[]}\n"
        );
        assert_eq!(
            text(list_body(ContentVariant::PartialObjectMetadataJson, "ConfigMap", "v1", &meta, VecDeque::new())),
            "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"7\"},\"items\":null}\n"
        );
    }

    fn bytes(chunks: VecDeque<Chunk>) -> Vec<u8> {
        let mut out = Vec::new();
        for mut c in chunks {
            out.extend_from_slice(&c.copy_to_bytes(c.remaining()));
        }
        out
    }

    #[test]
    fn protobuf_lists_are_the_encoder_s_lists() {
        use crate::encode::protobuf::{MessageType, encode_list, encode_message, encode_partial_object_metadata};
        let meta = ListMeta { rv: 9, continue_token: Some("abc".into()), remaining: Some(3) };
        let cm = MessageType::for_kind("v1", "ConfigMap").unwrap();
        let items: Vec<Bytes> = ["a", "b"]
            .iter()
            .map(|n| {
                let json = format!(r#"{{"metadata":{{"name":"{n}","resourceVersion":"5"}},"data":{{"k":"v"}}}}"#);
                Bytes::from(encode_message(cm, json.as_bytes()).unwrap())
            })
            .collect();
        let got = bytes(protobuf_list_body(ContentVariant::Protobuf, "ConfigMap", "v1", &meta, items.clone()).unwrap());
        let meta_json = br#"{"resourceVersion":"9","continue":"abc","remainingItemCount":3}"#;
        assert_eq!(got, encode_list("v1", "ConfigMapList", meta_json, &items).unwrap());

        let empty = ListMeta { rv: 7, continue_token: None, remaining: None };
        let item = Bytes::from(encode_partial_object_metadata(br#"{"name":"w"}"#).unwrap());
        for items in [vec![], vec![item]] {
            let metadata = ContentVariant::PartialObjectMetadataProtobuf;
            let got = bytes(protobuf_list_body(metadata, "Widget", "example.com/v1", &empty, items.clone()).unwrap());
            let want =
                encode_list("meta.k8s.io/v1", "PartialObjectMetadataList", br#"{"resourceVersion":"7"}"#, &items);
            assert_eq!(got, want.unwrap(), "{} items", items.len());
        }
    }

    #[test]
    fn a_cut_list_carries_its_continue_token_and_remaining_count() {
        let meta = ListMeta { rv: 9, continue_token: Some("abc".into()), remaining: Some(3) };
        let items = VecDeque::from([Chunk::from(Bytes::from_static(b"{}")), Chunk::from(Bytes::from_static(b",{}"))]);
        assert_eq!(
            text(list_body(ContentVariant::Json, "Pod", "v1", &meta, items)),
            "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"abc\",\"remainingItemCount\":3},\"items\":[{},{}]}\n"
        );
    }

    #[test]
    fn list_items_copy_small_items_into_frames_and_pass_large_ones_as_they_are() {
        let small = |n: usize| [Bytes::from_static(b"{"), Bytes::from(format!("\"i\":{n:04}}}"))];
        let large = Bytes::from(vec![b'x'; COPIED_ITEM]);
        let mut items = ListItems::default();
        assert!(!items.placed_any());
        let mut expected = Vec::new();
        for n in 0..3000 {
            if n == 1500 {
                items.push([large.clone(), Bytes::new()]);
                expected.extend_from_slice(b",");
                expected.extend_from_slice(&large);
            }
            let [a, b] = small(n);
            if n > 0 {
                expected.push(b',');
            }
            expected.extend_from_slice(&a);
            expected.extend_from_slice(&b);
            items.push(small(n));
        }
        assert!(items.placed_any());
        assert_eq!(items.bytes(), expected.len());
        let chunks = items.take();
        assert!(chunks.iter().all(|c| c.remaining() <= FRAME), "frames fit a DATA frame");
        let mut whole = chunks.iter().find(|c| c.remaining() == 1 + COPIED_ITEM).expect("the large item").clone();
        assert_eq!(whole.chunk(), b",");
        whole.advance(1);
        assert_eq!(whole.chunk().as_ptr(), large.as_ptr(), "its comma, then its own bytes, not a copy");
        assert!(chunks.len() < 3000 / 10, "small items share frames: {} chunks", chunks.len());
        assert!(bytes(chunks) == expected, "the items, each after its comma but the first");
        // Later items follow with their comma.
        items.push(small(0));
        assert_eq!(bytes(items.take()), [b",".as_slice(), &small(0).concat()].concat());
    }
}
