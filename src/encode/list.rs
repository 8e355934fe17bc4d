//! List bodies in JSON, as kube-apiserver writes them: the list's own
//! `kind`, `apiVersion` and `metadata`, then the items, spliced from each
//! object's shared bytes and never re-encoded.

use std::collections::VecDeque;

use bytes::Bytes;

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
    fn to_json(&self) -> String {
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
    let (kind, api_version) = variant.list_type(kind, api_version);
    let (open, close): (&str, &[u8]) = match variant.empty_items() {
        empty if items.is_empty() => (empty, b"}\n"),
        _ => ("[", b"]}\n"),
    };
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":{open}",
        serde_json::to_string(&kind).expect("string"),
        serde_json::to_string(&api_version).expect("string"),
        meta.to_json(),
    );
    items.push_front(Chunk::from(Bytes::from(head)));
    items.push_back(Chunk::from(Bytes::from_static(close)));
    items
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    fn text(chunks: VecDeque<Chunk>) -> String {
        let mut out = Vec::new();
        for mut c in chunks {
            out.extend_from_slice(&c.copy_to_bytes(c.remaining()));
        }
        String::from_utf8(out).unwrap()
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

    #[test]
    fn a_cut_list_carries_its_continue_token_and_remaining_count() {
        let meta = ListMeta { rv: 9, continue_token: Some("abc".into()), remaining: Some(3) };
        let items = VecDeque::from([Chunk::from(Bytes::from_static(b"{}")), Chunk::from(Bytes::from_static(b",{}"))]);
        assert_eq!(
            text(list_body(ContentVariant::Json, "Pod", "v1", &meta, items)),
            "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"abc\",\"remainingItemCount\":3},\"items\":[{},{}]}\n"
        );
    }
}
