//! The start-up check of a cached kind's schema against the protobuf table.
//!
//! The table (`encode/protobuf/schema.txt`) describes the k8s.io/api version
//! watchmux was built with. When a cache lists from scratch, the reflector
//! also fetches the served group-version's OpenAPI v3 document
//! (`/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`) through the
//! same upstream client and compares the kind with the table
//! ([`openapi_drift`]). A kind that drifts (a newer server with fields the
//! table lacks, an older one without fields the table writes as Go zero
//! values) gets no protobuf from this cache: requests take the fail-closed
//! path of an object with no protobuf form (the JSON the client accepts
//! next, or the API server).
//!
//! A document that cannot be had (the fetch fails or is slow, the document
//! does not parse or lacks the kind) leaves protobuf **on**, with a warning:
//! the table was generated from the pinned Kubernetes version, which is what
//! watchmux is deployed beside; a newer server's new fields are still
//! refused object by object by the encoder (`unknown_key`), so the only
//! thing a missing document hides is an older server's missing non-pointer
//! fields. Turning protobuf off on a transient error would instead silently
//! move every kubelet and typed client of the kind to JSON (twice the bytes,
//! several times the decode CPU) until the next relist. The check never
//! holds the cache back for long: it runs beside the initial list and gives
//! up after [`FETCH_TIMEOUT`].
//!
//! The checker ([`SchemaChecker`]) belongs to the cache registry and is
//! shared by its reflectors; what it remembers lives with it, not in
//! process-wide statics, so two registries (two upstreams, or tests) never
//! see each other's documents.
//!
//! The document is fetched once per checker for each served version of it:
//! the OpenAPI root (`/openapi/v3`, about 10 KB) names each group-version's
//! document with a hash of its content, and a kind's verdict is kept with the
//! hash it was made on. A later full list (a relist after compaction, or
//! every cache at once after an API server restart: a relist storm, on every
//! node-local watchmux of a fleet) reads the root, and the 1.6 MB document
//! only if its hash moved (an upgrade, or a server of another version behind
//! the same address). The document is fetched by the URL the root names,
//! `?hash=` and all, which the API server serves as immutable and a watchmux
//! tier in between keeps for every node-local behind it
//! ([`shared`](crate::passthrough::shared)). Without a hash (an older
//! server, an unreadable root) the document is fetched each time, as before.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::StatusCode;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::cache::resource_info::ResourceInfo;
use crate::cache::upstream_wire::upstream_get;
use crate::encode::protobuf::{Drift, MessageType, openapi_drift};
use crate::error::error_chain;
use crate::upstream::Upstream;
use crate::upstream::bounded_read;

/// How long the document may take before the check gives up (protobuf stays on).
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// What the check found for one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The kind has no table message (a custom resource): nothing to check.
    NotInTable,
    /// The served schema fits the table.
    Fits,
    /// The served schema differs from the table where bytes would differ.
    Drift {
        /// Each difference, as [`openapi_drift`] finds it.
        differences: Vec<Drift>,
        /// Some difference lies in meta/v1 (ObjectMeta and what it holds):
        /// PartialObjectMetadata in protobuf is off too.
        in_metadata: bool,
    },
    /// The document could not be had or read; protobuf stays as it was.
    Unavailable(String),
}

impl Outcome {
    /// The metric label of this result.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::NotInTable => "not_in_table",
            Self::Fits => "fits",
            Self::Drift { .. } => "schema_drift",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

/// The path of the group-version's OpenAPI v3 document.
pub(crate) fn document_path(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        format!("/openapi/v3/api/{}", info.version)
    } else {
        format!("/openapi/v3/apis/{}/{}", info.group, info.version)
    }
}

/// The path of the OpenAPI v3 root, which names every document with its hash.
const ROOT_PATH: &str = "/openapi/v3";

/// A document being fetched or read, shared by the checks that want it at
/// the same time.
type Slot = OnceCell<Result<Arc<serde_json::Value>, String>>;

/// The schema check, with what it remembers: each kind's last verdict, by
/// document URL and kind, with the hash of the document it was made on (a
/// handful of entries: one per cached built-in kind); and the documents some
/// check holds now.
#[derive(Default)]
pub(crate) struct SchemaChecker {
    verdicts: Mutex<HashMap<String, (String, Outcome)>>,
    /// The documents some check holds now, by URL (the upstream's and the path),
    /// held weakly: the caches of one group-version that list together (at
    /// start-up, every cached core/v1 resource) share one fetch and one parse of
    /// its document (1.6 MB for core/v1 in v1.37, several times that as a
    /// `Value`), and of the root; each is freed when the last of them is done.
    documents: Mutex<HashMap<String, Weak<Slot>>>,
}

impl SchemaChecker {
    /// Fetches the served document and compares the kind of `info` with the
    /// table, unless the kind was compared with this very document before.
    pub(crate) async fn check(&self, upstream: &Upstream, info: &ResourceInfo) -> Outcome {
        let Some(ty) = MessageType::for_kind(&info.api_version(), &info.kind) else {
            return Outcome::NotInTable;
        };
        let path = document_path(info);
        let Ok(url) = path.parse().map(|p| upstream.uri_for(Some(&p)).to_string()) else {
            return Outcome::Unavailable(format!("{path}: not a path"));
        };
        let verdict_key = format!("{url}#{}", info.kind);
        let hash = self.served_hash(upstream, &path).await;
        if let Some(hash) = &hash
            && let Some((seen, outcome)) = self.verdicts.lock().get(&verdict_key)
            && seen == hash
        {
            return outcome.clone();
        }
        // By the URL the root names, hash and all: the API server serves it
        // as immutable, and a tier between keeps it for a whole fleet.
        let document_url = hash.as_ref().map_or_else(|| path.clone(), |h| format!("{path}?hash={h}"));
        let outcome = match self.shared_json(upstream, &document_url).await {
            Ok(document) => compare(ty, &document),
            Err(why) => Outcome::Unavailable(why),
        };
        if let Some(hash) = hash
            && !matches!(outcome, Outcome::Unavailable(_))
        {
            self.verdicts.lock().insert(verdict_key, (hash, outcome.clone()));
        }
        outcome
    }

    /// The hash the upstream's OpenAPI root gives the document at `path` now:
    /// `paths["api/v1"].serverRelativeURL` is `/openapi/v3/api/v1?hash=<hex>`.
    async fn served_hash(&self, upstream: &Upstream, path: &str) -> Option<String> {
        let root = self.shared_json(upstream, ROOT_PATH).await.ok()?;
        let name = path.strip_prefix(ROOT_PATH)?.strip_prefix('/')?;
        let url = root.get("paths")?.get(name)?.get("serverRelativeURL")?.as_str()?;
        let (served_path, query) = url.split_once('?')?;
        if served_path != path {
            return None;
        }
        let hash = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "hash").map(|(_, v)| v.into_owned())?;
        // Only a hash that can stand in the URL as it is (kube-apiserver's are hex).
        hash.bytes().all(|b| b.is_ascii_alphanumeric()).then_some(hash)
    }

    /// The JSON document at `path`, fetched once for all who ask at the same time.
    async fn shared_json(&self, upstream: &Upstream, path: &str) -> Result<Arc<serde_json::Value>, String> {
        let key = upstream.uri_for(Some(&path.parse().map_err(|_| format!("{path}: not a path"))?)).to_string();
        let slot = {
            let mut documents = self.documents.lock();
            documents.retain(|_, slot| slot.strong_count() > 0);
            match documents.get(&key).and_then(Weak::upgrade) {
                Some(slot) => slot,
                None => {
                    let slot = Arc::new(Slot::new());
                    documents.insert(key, Arc::downgrade(&slot));
                    slot
                }
            }
        };
        slot.get_or_init(|| async {
            match tokio::time::timeout(FETCH_TIMEOUT, fetch(upstream, path)).await {
                Ok(fetched) => fetched.map(Arc::new),
                Err(_) => Err(format!("{path}: no answer within {FETCH_TIMEOUT:?}")),
            }
        })
        .await
        .clone()
    }
}

/// The comparison alone, on a document already parsed.
pub(crate) fn compare(ty: MessageType, document: &serde_json::Value) -> Outcome {
    match openapi_drift(ty, document) {
        Ok(differences) if differences.is_empty() => Outcome::Fits,
        Ok(differences) => {
            let in_metadata = differences.iter().any(|d| d.in_metadata);
            Outcome::Drift { differences, in_metadata }
        }
        Err(err) => Outcome::Unavailable(err.to_string()),
    }
}

/// The JSON document at `path` on the upstream (an OpenAPI document,
/// `/version`), or why not.
pub(crate) async fn fetch(upstream: &Upstream, path: &str) -> Result<serde_json::Value, String> {
    let resp = upstream_get(upstream, path.to_owned()).await.map_err(|e| error_chain(&e))?;
    let status = resp.status();
    if status != StatusCode::OK {
        // Read (a Status's worth) so that the connection can be used again.
        bounded_read::read_prefix(resp.into_body(), bounded_read::REFUSAL_BYTES).await;
        return Err(format!("{path}: {status}"));
    }
    let bytes = bounded_read::read_whole(resp.into_body(), bounded_read::DOCUMENT_BYTES)
        .await
        .map_err(|e| format!("{path}: {}", error_chain(&e)))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{path}: {e}"))
}

#[cfg(test)]
mod tests;
