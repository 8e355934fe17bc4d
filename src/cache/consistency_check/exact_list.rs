//! The upstream's side of the consistency check: a paginated
//! `LIST resourceVersion=X&resourceVersionMatch=Exact` of the cache's
//! collection, read as (namespace, name, resourceVersion) entries.
//!
//! It asks for `PartialObjectMetadataList`, in protobuf or else JSON, as
//! client-go's metadata client asks: the API server still reads every
//! object (from its watch cache's snapshots when it holds `X`, from etcd
//! otherwise) but encodes only `metadata`, and protobuf is its cheapest
//! encoder. For 10,000 ConfigMaps of 1 KiB, one check costs it 110 to 163 ms
//! of CPU and 2.3 MB in protobuf metadata, 204 to 223 ms and 4.8 MB in JSON
//! metadata, 240 to 290 ms and 14.6 MB as the full JSON list (docs/design.md,
//! "The cache checks itself"). The JSON fallback is for an API server that
//! answers some kind in JSON only; what came is read by its
//! `Content-Type`.

use std::borrow::Cow;

use http::StatusCode;
use serde::Deserialize;

use super::digest::Entry;
use super::metadata_pb::Page;
use crate::cache::resource::ResourceCache;
use crate::cache::state::object::ObjectKey;
use crate::cache::upstream_wire::{ListMeta, ReflectorError, get_list_as};
use crate::upstream::Upstream;

/// Items per page. The API server's own checker reads etcd 10,000 at a
/// time; 1,000 keeps each page's body (about 250 KB of metadata) and the
/// time the API server holds it short, in few round trips.
const PAGE_SIZE: u32 = 1000;

/// Metadata only: protobuf, or else JSON.
const ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, \
                      application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// Why the upstream's list at the cache's version is not there to compare.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExactListError {
    /// 410: the version is compacted (or the continue token expired).
    #[error("the upstream no longer has resourceVersion {0}")]
    Compacted(u64),
    #[error("the upstream answered the list at {asked} with resourceVersion {got}")]
    OtherVersion { asked: u64, got: u64 },
    #[error("{0}")]
    Failed(#[from] ReflectorError),
    #[error("an item of the list has resourceVersion {0:?}, not a number")]
    ItemVersion(String),
    #[error("{0}")]
    Protobuf(#[from] super::metadata_pb::Malformed),
}

#[derive(Deserialize)]
struct MetadataPage<'a> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<MetadataItem<'a>>,
}

#[derive(Deserialize)]
struct MetadataItem<'a> {
    #[serde(borrow)]
    metadata: ItemMeta<'a>,
}

#[derive(Deserialize)]
struct ItemMeta<'a> {
    #[serde(borrow, default)]
    namespace: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Cow<'a, str>,
}

/// Every object of the cache's collection (within its scope) at exactly `rv`.
pub(crate) async fn list_at(upstream: &Upstream, cache: &ResourceCache, rv: u64) -> Result<Vec<Entry>, ExactListError> {
    let mut entries = Vec::new();
    let mut continue_token: Option<String> = None;
    loop {
        let mut params = vec![("limit", PAGE_SIZE.to_string())];
        match &continue_token {
            // The token carries the version: the API server refuses both.
            Some(token) => params.push(("continue", token.clone())),
            None => {
                params.push(("resourceVersion", rv.to_string()));
                params.push(("resourceVersionMatch", "Exact".to_owned()));
            }
        }
        let (content_type, bytes) =
            match get_list_as(upstream, cache.collection_uri(&params), ACCEPT, cache.sync.gzip_lists).await {
                Err(ReflectorError::Status { status: StatusCode::GONE, .. }) => {
                    return Err(ExactListError::Compacted(rv));
                }
                other => other?,
            };
        let page = if content_type.is_some_and(|t| t.as_bytes().starts_with(b"application/vnd.kubernetes.protobuf")) {
            super::metadata_pb::read_page(&bytes)?
        } else {
            json_page(&bytes)?
        };
        let got: u64 =
            page.resource_version.parse().map_err(|_| ReflectorError::ListVersion(page.resource_version.clone()))?;
        if got != rv {
            return Err(ExactListError::OtherVersion { asked: rv, got });
        }
        for (namespace, name, item_rv) in page.items {
            let item_rv = item_rv.parse().map_err(|_| ExactListError::ItemVersion(item_rv))?;
            entries.push(Entry { key: ObjectKey::new(namespace, name), rv: item_rv });
        }
        match page.continue_token.filter(|t| !t.is_empty()) {
            Some(token) => continue_token = Some(token),
            None => return Ok(entries),
        }
    }
}

/// A JSON page, read into the form of a protobuf one.
fn json_page(bytes: &[u8]) -> Result<Page, ExactListError> {
    let page: MetadataPage = serde_json::from_slice(bytes).map_err(ReflectorError::Decode)?;
    let items = page
        .items
        .into_iter()
        .map(|i| {
            (i.metadata.namespace.into_owned(), i.metadata.name.into_owned(), i.metadata.resource_version.into_owned())
        })
        .collect();
    Ok(Page { resource_version: page.metadata.resource_version, continue_token: page.metadata.continue_token, items })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_page_reads_as_a_protobuf_one() {
        let body = br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9","continue":"c"},
            "items":[{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"8","uid":"u"}}]}"#;
        let page = json_page(body).unwrap();
        assert_eq!(page.resource_version, "9");
        assert_eq!(page.continue_token.as_deref(), Some("c"));
        assert_eq!(page.items, [("ns".to_owned(), "a".to_owned(), "8".to_owned())]);
    }
}
