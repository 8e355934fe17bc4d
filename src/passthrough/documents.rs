//! The immutable OpenAPI documents the pass-through keeps: one fetch from the
//! API server for every caller that asks for the same document.
//!
//! kube-apiserver names each OpenAPI v3 document in its root
//! (`/openapi/v3`) by a URL with a hash of its content
//! (`/openapi/v3/api/v1?hash=<hex>`) and serves that URL as
//! `Cache-Control: public, immutable` (`Vary: Accept`): the bytes at it never
//! change. Every watchmux's schema check asks for such a document when it
//! lists from scratch, and client-go's OpenAPI v3 client (kubectl explain,
//! apply's field management) asks for them by these URLs too. Behind a tier,
//! a fleet of node-locals restarting at once would otherwise fetch core/v1's
//! 1.6 MB document from kube-apiserver once per node: 8 GB for 5,000 nodes.
//!
//! A request is answered here only when it is exactly such a request
//! ([`DocumentKey::of`]: a GET of `/openapi/v3/...?hash=<hex>` and nothing
//! else, without conditional or range headers, whose `Accept` is kept in
//! the key) and, in delegated mode, after the caller is authorized for the
//! path as the API server would authorize it (a non-resource review); every
//! other request, and every one the store cannot answer, passes through
//! unchanged. The document is fetched with watchmux's own identity (its
//! content is the same for every caller) and kept only when the API server
//! marks it immutable and public with status 200; a 301 (a hash that is no
//! longer served), a 404 or a 403 is never kept, and the caller's own
//! request then passes through for the API server's own answer.
//!
//! Callers that ask at the same time share one fetch. What is kept is
//! bounded ([`STORE_BYTES`], [`STORE_ENTRIES`], [`DOCUMENT_BYTES`]), the
//! least recently used going first: distinct `Accept` headers cannot grow
//! it. The answer replays the API server's headers but for those that
//! belong to one request (`Audit-Id`, `Date`, the priority-and-fairness
//! UIDs) and `Expires`, which kube-apiserver sets a year after each request
//! and so is set again here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use metrics::{counter, gauge};
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::body::{self, ProxyBody};
use crate::metrics as m;
use crate::request::RequestInfo;
use crate::upstream::Upstream;

/// The most bytes all kept documents may hold together.
pub(crate) const STORE_BYTES: usize = 64 << 20;
/// The most documents kept (each format of each group-version is one).
pub(crate) const STORE_ENTRIES: usize = 256;
/// The largest document kept; a larger one passes through (core/v1, the
/// largest kube-apiserver serves, is 1.6 MB in v1.37).
pub(crate) const DOCUMENT_BYTES: usize = 16 << 20;
/// How long one fetch may take, headers and body; the callers waiting on it
/// then pass through.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The only path the store answers: kube-apiserver's OpenAPI v3 documents.
const PREFIX: &str = "/openapi/v3/";
/// The longest path, hash and `Accept` header a key may hold.
const MAX_PATH: usize = 512;
const MAX_HASH: usize = 256;
const MAX_ACCEPT: usize = 256;

/// Request headers that ask for something other than the whole document
/// (a range, or an answer that depends on what the client holds): such
/// requests pass through, and `http.ServeContent` answers them upstream.
const CONDITIONAL: &[header::HeaderName] = &[
    header::RANGE,
    header::IF_RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
];

/// Response headers that belong to one request, not to the document
/// (`Expires` too, but it is kept to be written again on each answer, in
/// its zone; hyper writes `Content-Length` from the body).
const PER_REQUEST: &[&str] =
    &["audit-id", "date", "content-length", "x-kubernetes-pf-flowschema-uid", "x-kubernetes-pf-prioritylevel-uid"];

/// What identifies a kept document: the request's path and query (exactly
/// `hash=<hex>`) and its `Accept` header, as sent (`Vary: Accept`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct DocumentKey {
    path_and_query: String,
    accept: Option<HeaderValue>,
}

impl DocumentKey {
    /// The key of a request the store may answer, or `None` for every
    /// other request (which passes through as it is).
    pub(crate) fn of<B>(req: &Request<B>, info: &RequestInfo) -> Option<Self> {
        if req.method() != http::Method::GET || info.is_resource_request {
            return None;
        }
        let path = req.uri().path();
        // No escapes, no dot or empty segments: the path the API server
        // authorizes and serves is then the path as sent, and watchmux's
        // fetch cannot be steered anywhere else.
        let name = path.strip_prefix(PREFIX)?;
        let plain_segment = |s: &str| !s.is_empty() && s != "." && s != ".." && s.bytes().all(is_path_byte);
        if path.len() > MAX_PATH || !name.split('/').all(plain_segment) {
            return None;
        }
        let hash = req.uri().query()?.strip_prefix("hash=")?;
        if hash.is_empty() || hash.len() > MAX_HASH || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if CONDITIONAL.iter().any(|h| req.headers().contains_key(h)) {
            return None;
        }
        let mut accepts = req.headers().get_all(header::ACCEPT).iter();
        let accept = accepts.next().cloned();
        if accepts.next().is_some() || accept.as_ref().is_some_and(|a| a.len() > MAX_ACCEPT) {
            return None;
        }
        Some(Self { path_and_query: format!("{path}?hash={hash}"), accept })
    }
}

/// The bytes of a document's path segment (a group, a version: `.`, `-`).
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')
}

/// One kept document: the API server's headers but for the per-request
/// ones, and its bytes.
#[derive(Debug)]
struct Document {
    headers: HeaderMap,
    body: Bytes,
}

impl Document {
    fn size(&self) -> usize {
        self.body.len() + self.headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum::<usize>()
    }

    fn response(&self) -> Response<ProxyBody> {
        let mut resp = Response::new(body::full(self.body.clone()));
        *resp.headers_mut() = self.headers.clone();
        if let Some(expires) = self.headers.get(header::EXPIRES).and_then(|e| expires_now(e.to_str().ok()?)) {
            resp.headers_mut().insert(header::EXPIRES, expires);
        }
        resp
    }
}

/// `Expires` a year from now, in the zone the API server wrote it in
/// (`time.RFC1123` of its local time: `UTC`, or `GMT`); another zone's
/// stored value is replayed as it was.
fn expires_now(stored: &str) -> Option<HeaderValue> {
    let zone = stored.rsplit(' ').next().filter(|z| matches!(*z, "UTC" | "GMT"))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    let later = crate::rfc3339::one_year_later(i64::try_from(now).ok()?);
    let at = UNIX_EPOCH + Duration::from_secs(u64::try_from(later).ok()?);
    let formatted = httpdate::fmt_http_date(at);
    HeaderValue::from_str(&format!("{} {zone}", formatted.strip_suffix(" GMT")?)).ok()
}

/// A document being fetched or kept, shared by every caller that wants it.
struct Entry {
    document: OnceCell<Option<Arc<Document>>>,
    /// The store's clock at the entry's last use, for eviction.
    last_used: AtomicU64,
}

/// The kept documents, bounded.
#[derive(Default)]
struct Kept {
    entries: HashMap<DocumentKey, Arc<Entry>>,
    clock: u64,
}

impl Kept {
    /// The bytes of the documents kept now (counted afresh: a few hundred
    /// entries at most, and only when a fetch ends).
    fn bytes(&self) -> usize {
        self.entries.values().filter_map(|e| e.document.get().and_then(Option::as_ref)).map(|d| d.size()).sum()
    }
}

/// How an answer was had, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// From a document kept before (or fetched by another caller meanwhile).
    Hit,
    /// Fetched for this request and kept.
    Fetched,
    /// Not kept: the request passes through.
    PassedThrough,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Fetched => "fetched",
            Self::PassedThrough => "passed_through",
        }
    }
}

/// The store of immutable OpenAPI documents in front of one upstream.
pub(crate) struct Documents {
    upstream: Arc<Upstream>,
    kept: Mutex<Kept>,
}

impl std::fmt::Debug for Documents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.lock();
        f.debug_struct("Documents").field("entries", &kept.entries.len()).field("bytes", &kept.bytes()).finish()
    }
}

impl Documents {
    pub(crate) fn new(upstream: Arc<Upstream>) -> Self {
        Self { upstream, kept: Mutex::default() }
    }

    /// The kept document for `key` (fetched now when no caller has), or
    /// `None` when the API server's answer is not one to keep: the caller's
    /// request then passes through.
    pub(crate) async fn answer(&self, key: &DocumentKey) -> Option<Response<ProxyBody>> {
        let (answer, outcome) = self.lookup(key).await;
        counter!(m::OPENAPI_DOCUMENTS, "result" => outcome.label()).increment(1);
        answer.map(|document| document.response())
    }

    async fn lookup(&self, key: &DocumentKey) -> (Option<Arc<Document>>, Outcome) {
        let entry = {
            let mut kept = self.kept.lock();
            kept.clock += 1;
            let now = kept.clock;
            let entry = kept
                .entries
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Entry { document: OnceCell::new(), last_used: AtomicU64::new(now) }))
                .clone();
            entry.last_used.store(now, Ordering::Relaxed);
            entry
        };
        let mut fetched_here = false;
        let document = entry
            .document
            .get_or_init(|| {
                fetched_here = true;
                self.fetch(key)
            })
            .await
            .clone();
        let mut kept = self.kept.lock();
        let ours = kept.entries.get(key).is_some_and(|e| Arc::ptr_eq(e, &entry));
        match document {
            None => {
                // Asked again by the next caller, not remembered as absent:
                // the next may find a document the API server serves by then.
                if ours {
                    kept.entries.remove(key);
                }
                (None, Outcome::PassedThrough)
            }
            Some(document) if fetched_here => {
                if ours {
                    evict(&mut kept, key);
                }
                gauge!(m::OPENAPI_DOCUMENTS_BYTES).set(kept.bytes() as f64);
                (Some(document), Outcome::Fetched)
            }
            Some(document) => (Some(document), Outcome::Hit),
        }
    }

    /// The document from the API server, fetched as watchmux, if it is one
    /// to keep.
    async fn fetch(&self, key: &DocumentKey) -> Option<Arc<Document>> {
        match tokio::time::timeout(FETCH_TIMEOUT, self.fetch_now(key)).await {
            Ok(Ok(document)) => Some(Arc::new(document)),
            Ok(Err(why)) => {
                tracing::debug!(path = %key.path_and_query, why, "OpenAPI document not kept; passing through");
                None
            }
            Err(_) => {
                tracing::debug!(path = %key.path_and_query, "OpenAPI document fetch timed out; passing through");
                None
            }
        }
    }

    async fn fetch_now(&self, key: &DocumentKey) -> Result<Document, String> {
        let uri = self.upstream.uri_for(Some(&key.path_and_query.parse().map_err(|_| "not a path")?));
        let mut req = Request::get(uri).header(header::USER_AGENT, concat!("watchmux/", env!("CARGO_PKG_VERSION")));
        if let Some(accept) = &key.accept {
            req = req.header(header::ACCEPT, accept);
        }
        let req = req.body(body::empty()).map_err(|e| e.to_string())?;
        let resp = self.upstream.send(req).await.map_err(|e| crate::error::error_chain(&e))?;
        let (parts, incoming) = resp.into_parts();
        if parts.status != StatusCode::OK {
            return Err(format!("status {}", parts.status));
        }
        if !is_shared_immutable(&parts.headers) {
            return Err("not marked public and immutable".to_owned());
        }
        if parts.headers.contains_key(header::CONTENT_ENCODING) || parts.headers.contains_key(header::SET_COOKIE) {
            return Err("encoded, or with a cookie".to_owned());
        }
        let body = Limited::new(incoming, DOCUMENT_BYTES).collect().await.map_err(|e| e.to_string())?.to_bytes();
        let mut headers = parts.headers;
        super::headers::remove_hop_by_hop(&mut headers);
        for name in PER_REQUEST {
            headers.remove(*name);
        }
        Ok(Document { headers, body })
    }
}

/// `Cache-Control` says a shared cache may keep the answer and that it
/// never changes: `public` and `immutable`, and neither `private`,
/// `no-store` nor `no-cache`.
fn is_shared_immutable(headers: &HeaderMap) -> bool {
    let directives: Vec<String> = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().split('=').next().unwrap_or_default().to_ascii_lowercase())
        .collect();
    let has = |d: &str| directives.iter().any(|x| x == d);
    has("public") && has("immutable") && !has("private") && !has("no-store") && !has("no-cache")
}

/// Drops the least recently used documents (never `keep`, just added; never
/// one still being fetched) until the store is within its bounds.
fn evict(kept: &mut Kept, keep: &DocumentKey) {
    let mut bytes = kept.bytes();
    while bytes > STORE_BYTES || kept.entries.len() > STORE_ENTRIES {
        let oldest = kept
            .entries
            .iter()
            .filter(|(k, e)| *k != keep && e.document.initialized())
            .min_by_key(|(_, e)| e.last_used.load(Ordering::Relaxed))
            .map(|(k, _)| k.clone());
        let Some(oldest) = oldest else { return };
        if let Some(entry) = kept.entries.remove(&oldest) {
            bytes -= entry.document.get().and_then(Option::as_ref).map_or(0, |d| d.size());
        }
    }
}

#[cfg(test)]
mod tests;
