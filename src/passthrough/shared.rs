//! Answers the pass-through shares between callers: one request to the API
//! server for every caller that asks the same thing at about the same time.
//!
//! Three kinds ([`Kind`]):
//!
//! - **Immutable OpenAPI documents.** kube-apiserver names each OpenAPI v3
//!   document in its root (`/openapi/v3`) by a URL with a hash of its
//!   content (`/openapi/v3/api/v1?hash=<hex>`) and serves that URL as
//!   `Cache-Control: public, immutable` (`Vary: Accept`): the bytes at it
//!   never change. Every watchmux's schema check asks for such a document
//!   when it lists from scratch, and client-go's OpenAPI v3 client (kubectl
//!   explain, apply's field management) asks for them by these URLs too.
//!   Behind a tier, a fleet of node-locals restarting at once would
//!   otherwise fetch core/v1's 1.6 MB document from kube-apiserver once per
//!   node: 8 GB for 5,000 nodes. Kept until evicted; only a 200 the API
//!   server marks public and immutable is kept.
//! - **Health** (`/readyz`, `/livez`, `/healthz`, no query). Every watchmux
//!   probes its upstream's `/readyz` every five seconds; behind a tier, 5,000
//!   node-locals would pass 1,000 probes a second through to kube-apiserver,
//!   more than their kubelets' lease renewals. An answer fetched at most
//!   [`HEALTH_MAX_AGE`] before a caller asked is its answer (200, or the
//!   API server's 500 listing what failed); a probe a second old is what a
//!   probe through any proxy reports.
//! - **Discovery** (`/api` and `/apis` in the aggregated form, and the
//!   OpenAPI v3 root `/openapi/v3`, no query). Every watchmux resolves its
//!   resources and finds its schema documents from these three when it
//!   starts, and so does every kubectl and controller; behind a tier, a
//!   fleet of node-locals rolled out at once would pass three GETs each
//!   through to kube-apiserver. Shared for [`DISCOVERY_MAX_AGE`], as a health
//!   answer is. Only the aggregated form of `/api` and `/apis` is shared,
//!   asked for and answered (`as=APIGroupDiscoveryList`): the legacy
//!   `APIVersions` names server addresses by the client's address
//!   (`serverAddressByClientCIDRs`, from `X-Forwarded-For`), which is the
//!   caller's, not watchmux's.
//!
//! A request is shared only when it is exactly such a request
//! ([`SharedKey::of`]: a GET, nothing else in the query, no conditional or
//! range header; a document's `Accept` kept in the key, a health check's
//! ignored, as kube-apiserver ignores it; discovery's kept) and, in delegated mode, after
//! the caller is authorized for the path as the API server would authorize
//! it (a non-resource review); every other request, and every one the store
//! cannot answer, passes through unchanged. The answer is fetched with
//! watchmux's own identity (it is the same for every caller), and a status
//! that says something about who asked (401, 403, 429) or where to go (a
//! 301 for a hash no longer served) is never shared: the caller's own
//! request then passes through for the API server's own answer.
//!
//! Callers that ask at the same time share one fetch. What is kept is
//! bounded ([`STORE_BYTES`], [`STORE_ENTRIES`], [`ANSWER_BYTES`]), the
//! least recently used going first: distinct `Accept` headers cannot grow
//! it. The answer replays the API server's headers but for those that
//! belong to one request (`Audit-Id`, `Date`, the priority-and-fairness
//! UIDs) and `Expires`, which kube-apiserver sets a year after each request
//! for a document and so is set again here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use metrics::{counter, gauge};
use parking_lot::Mutex;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::body::{self, ProxyBody};
use crate::error::error_chain;
use crate::metrics as m;
use crate::request::RequestInfo;
use crate::upstream::{Upstream, bounded_read};

/// The most bytes all kept answers may hold together.
pub(crate) const STORE_BYTES: usize = 64 << 20;
/// The most answers kept (each format of each group-version's document is one).
pub(crate) const STORE_ENTRIES: usize = 256;
/// The largest answer kept; a larger one passes through (core/v1's document,
/// the largest kube-apiserver serves, is 1.6 MB in v1.37).
pub(crate) const ANSWER_BYTES: usize = 16 << 20;
/// How old a health answer may be: fetched no earlier than this before the
/// caller asked.
pub(crate) const HEALTH_MAX_AGE: Duration = Duration::from_secs(1);
/// The health paths shared, with no query (`?verbose`, `?exclude=` pass through).
const HEALTH_PATHS: &[&str] = &["/readyz", "/livez", "/healthz"];
/// How old a discovery answer may be. kube-apiserver itself publishes a new
/// CRD's group in its aggregated discovery some time after the CRD is
/// created; a second more is what a slow proxy adds.
pub(crate) const DISCOVERY_MAX_AGE: Duration = Duration::from_secs(1);
/// The discovery indexes shared in their aggregated form only.
const DISCOVERY_INDEXES: &[&str] = &["/api", "/apis"];
/// The OpenAPI v3 root, naming each group version's document by its hash.
const OPENAPI_ROOT: &str = "/openapi/v3";
/// The media type parameter of aggregated discovery (`apidiscovery.k8s.io`).
const AGGREGATED: &str = "as=APIGroupDiscoveryList";
/// How long one fetch may take, headers and body; the callers waiting on it
/// then pass through.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where kube-apiserver serves its OpenAPI v3 documents by hash.
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

/// What is shared, by its rules of what may be kept and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// An OpenAPI v3 document by hash: kept until evicted.
    OpenApi,
    /// A health check's answer: shared for [`HEALTH_MAX_AGE`].
    Health,
    /// Aggregated discovery or the OpenAPI v3 root: shared for
    /// [`DISCOVERY_MAX_AGE`].
    Discovery,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::OpenApi => "openapi",
            Self::Health => "health",
            Self::Discovery => "discovery",
        }
    }

    /// How long after its fetch started an answer is shared (`None`: until evicted).
    fn max_age(self) -> Option<Duration> {
        match self {
            Self::OpenApi => None,
            Self::Health => Some(HEALTH_MAX_AGE),
            Self::Discovery => Some(DISCOVERY_MAX_AGE),
        }
    }

    /// Whether the API server's answer (`status`, `headers`) to `path` may be shared.
    fn shares(self, path: &str, status: StatusCode, headers: &HeaderMap) -> Result<(), String> {
        match self {
            Self::OpenApi if status != StatusCode::OK => Err(format!("status {status}")),
            Self::OpenApi if !is_shared_immutable(headers) => Err("not marked public and immutable".to_owned()),
            // A failing check is the API server's 500 listing what failed.
            Self::Health if status != StatusCode::OK && status != StatusCode::INTERNAL_SERVER_ERROR => {
                Err(format!("status {status}"))
            }
            Self::Discovery if status != StatusCode::OK => Err(format!("status {status}")),
            // A server without the aggregated form answers the legacy one,
            // which is the client's own (its address in it).
            Self::Discovery if path != OPENAPI_ROOT && !names_aggregated(headers.get(header::CONTENT_TYPE)) => {
                Err("not aggregated discovery".to_owned())
            }
            _ if headers.contains_key(header::CONTENT_ENCODING) || headers.contains_key(header::SET_COOKIE) => {
                Err("encoded, or with a cookie".to_owned())
            }
            _ => Ok(()),
        }
    }
}

/// What identifies a shared answer: its kind, the request's path and query
/// (exactly `hash=<hex>` for a document, none for health) and, for a
/// document, its `Accept` header as sent (`Vary: Accept`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SharedKey {
    kind: Kind,
    path_and_query: String,
    accept: Option<HeaderValue>,
}

impl SharedKey {
    /// The key of a request the store may answer, or `None` for every
    /// other request (which passes through as it is).
    pub(crate) fn of<B>(req: &Request<B>, info: &RequestInfo) -> Option<Self> {
        if req.method() != http::Method::GET || info.is_resource_request {
            return None;
        }
        let (kind, path_and_query) =
            openapi_document(req.uri()).or_else(|| health(req.uri())).or_else(|| discovery(req.uri()))?;
        if CONDITIONAL.iter().any(|h| req.headers().contains_key(h)) {
            return None;
        }
        // kube-apiserver's health handlers write text/plain whatever the
        // client accepts: one answer per path, which distinct `Accept`
        // headers can neither split nor use to crowd the documents out.
        if kind == Kind::Health {
            return Some(Self { kind, path_and_query, accept: None });
        }
        let mut accepts = req.headers().get_all(header::ACCEPT).iter();
        let accept = accepts.next().cloned();
        if accepts.next().is_some() || accept.as_ref().is_some_and(|a| a.len() > MAX_ACCEPT) {
            return None;
        }
        // The legacy form is the caller's own: asked for it, the request
        // passes through without a fetch of watchmux's first.
        if kind == Kind::Discovery && path_and_query != OPENAPI_ROOT && !names_aggregated(accept.as_ref()) {
            return None;
        }
        Some(Self { kind, path_and_query, accept })
    }
}

/// `/openapi/v3/<name>?hash=<hex>` and nothing else.
fn openapi_document(uri: &http::Uri) -> Option<(Kind, String)> {
    let path = uri.path();
    // No escapes, no dot or empty segments: the path the API server
    // authorizes and serves is then the path as sent, and watchmux's
    // fetch cannot be steered anywhere else.
    let name = path.strip_prefix(PREFIX)?;
    let plain_segment = |s: &str| !s.is_empty() && s != "." && s != ".." && s.bytes().all(is_path_byte);
    if path.len() > MAX_PATH || !name.split('/').all(plain_segment) {
        return None;
    }
    let hash = uri.query()?.strip_prefix("hash=")?;
    if hash.is_empty() || hash.len() > MAX_HASH || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((Kind::OpenApi, format!("{path}?hash={hash}")))
}

/// `/readyz`, `/livez` or `/healthz`, without a query (not even `?`).
fn health(uri: &http::Uri) -> Option<(Kind, String)> {
    let path = uri.path();
    (HEALTH_PATHS.contains(&path) && uri.query().is_none()).then(|| (Kind::Health, path.to_owned()))
}

/// `/api`, `/apis` or `/openapi/v3`, without a query (not even `?`).
fn discovery(uri: &http::Uri) -> Option<(Kind, String)> {
    let path = uri.path();
    let known = DISCOVERY_INDEXES.contains(&path) || path == OPENAPI_ROOT;
    (known && uri.query().is_none()).then(|| (Kind::Discovery, path.to_owned()))
}

/// Whether a media type or an `Accept` list names aggregated discovery.
fn names_aggregated(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split([',', ';']).any(|param| param.trim().eq_ignore_ascii_case(AGGREGATED)))
}

/// The bytes of a document's path segment (a group, a version: `.`, `-`).
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')
}

/// One kept answer: the API server's status, its headers but for the
/// per-request ones, and its bytes.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn size(&self) -> usize {
        self.body.len() + self.headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum::<usize>()
    }

    fn response(&self) -> Response<ProxyBody> {
        let mut resp = Response::new(body::full(self.body.clone()));
        *resp.status_mut() = self.status;
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
    let later = crate::go_rules::rfc3339::one_year_later(i64::try_from(now).ok()?);
    let at = UNIX_EPOCH + Duration::from_secs(u64::try_from(later).ok()?);
    let formatted = httpdate::fmt_http_date(at);
    HeaderValue::from_str(&format!("{} {zone}", formatted.strip_suffix(" GMT")?)).ok()
}

/// An answer being fetched or kept, shared by every caller that wants it.
struct Entry {
    answer: OnceCell<Option<Arc<Answer>>>,
    /// When its fetch started: a health or discovery answer is shared for
    /// its [`Kind::max_age`] from then.
    started: Instant,
    /// The store's clock at the entry's last use, for eviction.
    last_used: AtomicU64,
}

impl Entry {
    fn new(last_used: u64) -> Self {
        Self { answer: OnceCell::new(), started: Instant::now(), last_used: AtomicU64::new(last_used) }
    }

    /// Whether a caller asking now may have this entry's answer.
    fn serves_now(&self, kind: Kind) -> bool {
        kind.max_age().is_none_or(|age| self.started.elapsed() <= age)
    }
}

/// The kept answers, bounded.
#[derive(Default)]
struct Kept {
    entries: HashMap<SharedKey, Arc<Entry>>,
    clock: u64,
}

impl Kept {
    /// The bytes of the answers kept now (counted afresh: a few hundred
    /// entries at most, and only when a fetch ends).
    fn bytes(&self) -> usize {
        self.entries.values().filter_map(|e| e.answer.get().and_then(Option::as_ref)).map(|d| d.size()).sum()
    }
}

/// How an answer was had, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// From an answer kept before (or fetched by another caller meanwhile).
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

/// The shared answers of one upstream.
pub(crate) struct SharedAnswers {
    upstream: Arc<Upstream>,
    kept: Mutex<Kept>,
}

impl std::fmt::Debug for SharedAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.lock();
        f.debug_struct("SharedAnswers").field("entries", &kept.entries.len()).field("bytes", &kept.bytes()).finish()
    }
}

impl SharedAnswers {
    pub(crate) fn new(upstream: Arc<Upstream>) -> Self {
        Self { upstream, kept: Mutex::default() }
    }

    /// The shared answer for `key` (fetched now when no caller has one it
    /// may have), or `None` when the API server's answer is not one to
    /// share: the caller's request then passes through.
    pub(crate) async fn answer(&self, key: &SharedKey) -> Option<Response<ProxyBody>> {
        let (answer, outcome) = self.lookup(key).await;
        counter!(m::SHARED_ANSWERS, "kind" => key.kind.label(), "result" => outcome.label()).increment(1);
        answer.map(|answer| answer.response())
    }

    async fn lookup(&self, key: &SharedKey) -> (Option<Arc<Answer>>, Outcome) {
        let entry = {
            let mut kept = self.kept.lock();
            kept.clock += 1;
            let now = kept.clock;
            let entry = match kept.entries.get(key) {
                Some(entry) if entry.serves_now(key.kind) => entry.clone(),
                // None yet, or an answer too old: a new fetch.
                _ => {
                    let entry = Arc::new(Entry::new(now));
                    kept.entries.insert(key.clone(), entry.clone());
                    entry
                }
            };
            entry.last_used.store(now, Ordering::Relaxed);
            entry
        };
        let mut fetched_here = false;
        let answer = entry
            .answer
            .get_or_init(|| {
                fetched_here = true;
                self.fetch(key)
            })
            .await
            .clone();
        let mut kept = self.kept.lock();
        let ours = kept.entries.get(key).is_some_and(|e| Arc::ptr_eq(e, &entry));
        match answer {
            None => {
                // Asked again by the next caller, not remembered as absent:
                // the next may find an answer to share by then.
                if ours {
                    kept.entries.remove(key);
                }
                (None, Outcome::PassedThrough)
            }
            Some(answer) if fetched_here => {
                if ours {
                    evict(&mut kept, key);
                }
                gauge!(m::SHARED_ANSWERS_BYTES).set(kept.bytes() as f64);
                (Some(answer), Outcome::Fetched)
            }
            Some(answer) => (Some(answer), Outcome::Hit),
        }
    }

    /// The answer from the API server, fetched as watchmux, if it is one to
    /// share.
    async fn fetch(&self, key: &SharedKey) -> Option<Arc<Answer>> {
        match tokio::time::timeout(FETCH_TIMEOUT, self.fetch_now(key)).await {
            Ok(Ok(answer)) => Some(Arc::new(answer)),
            Ok(Err(why)) => {
                tracing::debug!(path = %key.path_and_query, why, "answer not shared; passing through");
                None
            }
            Err(_) => {
                tracing::debug!(path = %key.path_and_query, "shared answer's fetch timed out; passing through");
                None
            }
        }
    }

    async fn fetch_now(&self, key: &SharedKey) -> Result<Answer, String> {
        let uri = self.upstream.uri_for(Some(&key.path_and_query.parse().map_err(|_| "not a path")?));
        let mut req = Request::get(uri).header(header::USER_AGENT, concat!("watchmux/", env!("CARGO_PKG_VERSION")));
        if let Some(accept) = &key.accept {
            req = req.header(header::ACCEPT, accept);
        }
        let req = req.body(body::empty()).map_err(|e| e.to_string())?;
        let resp = self.upstream.send(req).await.map_err(|e| error_chain(&e))?;
        let (parts, incoming) = resp.into_parts();
        key.kind.shares(&key.path_and_query, parts.status, &parts.headers)?;
        let body = bounded_read::read_whole(incoming, ANSWER_BYTES).await.map_err(|e| error_chain(&e))?;
        let mut headers = parts.headers;
        super::headers::remove_hop_by_hop(&mut headers);
        for name in PER_REQUEST {
            headers.remove(*name);
        }
        Ok(Answer { status: parts.status, headers, body })
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

/// Drops the least recently used answers (never `keep`, just added; never
/// one still being fetched) until the store is within its bounds.
fn evict(kept: &mut Kept, keep: &SharedKey) {
    let mut bytes = kept.bytes();
    while bytes > STORE_BYTES || kept.entries.len() > STORE_ENTRIES {
        let oldest = kept
            .entries
            .iter()
            .filter(|(k, e)| *k != keep && e.answer.initialized())
            .min_by_key(|(_, e)| e.last_used.load(Ordering::Relaxed))
            .map(|(k, _)| k.clone());
        let Some(oldest) = oldest else { return };
        if let Some(entry) = kept.entries.remove(&oldest) {
            bytes -= entry.answer.get().and_then(Option::as_ref).map_or(0, |d| d.size());
        }
    }
}

#[cfg(test)]
mod tests;
