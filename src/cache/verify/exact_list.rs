//! The upstream's side of the consistency check: a paginated
//! `LIST resourceVersion=X&resourceVersionMatch=Exact` of the cache's
//! collection, read as (namespace, name, resourceVersion) entries.
//!
//! It asks for `PartialObjectMetadataList` in JSON: the API server still
//! reads every object (from its watch cache's snapshots when it holds `X`,
//! from etcd otherwise) but encodes only `metadata`, so a list of objects
//! with large `data` or `spec` costs it, the wire and watchmux's decoding a
//! fraction of the full list (figures in docs/design.md). Protobuf would
//! save a little more decoding but needs a protobuf decoder of `ListMeta`
//! that watchmux does not have; JSON metadata is already small.

use std::borrow::Cow;

use http::StatusCode;
use serde::Deserialize;

use super::digest::Entry;
use crate::cache::object::ObjectKey;
use crate::cache::resource::ResourceCache;
use crate::cache::upstream_watch::{ListMeta, ReflectorError, get_list_as};
use crate::upstream::Upstream;

/// Items per page. The API server's own checker reads etcd 10,000 at a
/// time; 1,000 keeps each page's body (about 250 KB of metadata) and the
/// time the API server holds it short, in few round trips.
const PAGE_SIZE: u32 = 1000;

/// Metadata only, in JSON.
const ACCEPT: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

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
        let bytes = match get_list_as(upstream, cache.collection_uri(&params), ACCEPT).await {
            Err(ReflectorError::Status { status: StatusCode::GONE, .. }) => return Err(ExactListError::Compacted(rv)),
            other => other?,
        };
        let page: MetadataPage = serde_json::from_slice(&bytes).map_err(ReflectorError::Decode)?;
        let got = page.metadata.version()?;
        if got != rv {
            return Err(ExactListError::OtherVersion { asked: rv, got });
        }
        for item in page.items {
            let m = item.metadata;
            let item_rv =
                m.resource_version.parse().map_err(|_| ExactListError::ItemVersion(m.resource_version.to_string()))?;
            entries.push(Entry {
                key: ObjectKey { namespace: m.namespace.into_owned(), name: m.name.into_owned() },
                rv: item_rv,
            });
        }
        match page.metadata.continue_token.filter(|t| !t.is_empty()) {
            Some(token) => continue_token = Some(token),
            None => return Ok(entries),
        }
    }
}
