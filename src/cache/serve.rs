//! Answering LIST, GET and WATCH from the cache, with the API server's
//! semantics, or deciding to pass the request through.
//!
//! The rule throughout: serve from the cache only what the cache can answer
//! exactly as kube-apiserver would; pass everything else through (and count
//! why), so that the upstream gives its own, exact answer. Bad input is in
//! that second group: the API server's error is by definition the right one.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, header};
use http_body::{Body, Frame, SizeHint};
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::event::error_frame;
use super::filter::Filter;
use super::object::ObjectKey;
use super::params::{ReadParams, Rv, RvMatch};
use super::registry::{NotCached, Registry};
use super::resource::{ResourceCache, StartAt};
use super::stream::{StreamOptions, WatchStream};
use crate::body::{self, BoxError, Chunk, ProxyBody};
use crate::encode::negotiate::{ContentVariant, Endpoint, Negotiation, negotiate};
use crate::encode::status::{Status, StatusReason};
use crate::metrics as m;
use crate::request::{RequestInfo, Verb};
use crate::selector::{FieldSelector, LabelSelector, fields};

/// How long a read for a resourceVersion newer than the cache waits for it.
pub const TOO_LARGE_RV_WAIT: Duration = Duration::from_secs(3);
/// How long a request waits for a starting cache before passing through.
pub const NOT_READY_WAIT: Duration = Duration::from_secs(3);
/// The API server's default `--min-request-timeout`: watches without
/// `timeoutSeconds` last a random time in [this, twice this).
pub const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// The cache's answer, or why it has none.
pub enum Served {
    Response(Response<ProxyBody>),
    Passthrough(&'static str),
}

/// The read path in front of the registry.
pub struct CacheService {
    registry: Arc<Registry>,
    /// Cancelled at shutdown: watch streams end cleanly.
    streams_stop: CancellationToken,
}

impl CacheService {
    pub fn new(registry: Arc<Registry>, streams_stop: CancellationToken) -> Self {
        Self { registry, streams_stop }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Serves a request from the cache, or says why it must pass through.
    pub async fn serve(&self, method: &Method, uri: &Uri, headers: &HeaderMap, info: &RequestInfo) -> Served {
        let served = self.try_serve(method, uri, headers, info).await;
        if let Served::Passthrough(reason) = &served {
            if *reason != "not_a_read" {
                metrics::counter!(m::PASSTHROUGH_REASONS, "reason" => *reason).increment(1);
            }
        }
        served
    }

    async fn try_serve(&self, method: &Method, uri: &Uri, headers: &HeaderMap, info: &RequestInfo) -> Served {
        let arrival = Instant::now();
        let endpoint = match info.verb {
            Some(Verb::Get) => Endpoint::Get,
            Some(Verb::List) => Endpoint::List,
            Some(Verb::Watch) => Endpoint::Watch,
            _ => return Served::Passthrough("not_a_read"),
        };
        if *method != Method::GET || !info.is_resource_request || info.subresource.is_some() {
            return Served::Passthrough("not_a_read");
        }
        if wants_pretty_output(headers) {
            return Served::Passthrough("pretty");
        }
        let params = match ReadParams::parse(uri.query()) {
            Ok(p) => p,
            Err(unsupported) => return Served::Passthrough(unsupported.0),
        };
        let variant = match negotiate(headers.get(header::ACCEPT), endpoint) {
            Negotiation::Cache(v) => v,
            Negotiation::Passthrough(reason) => return Served::Passthrough(reason.as_str()),
        };
        let cache = match self.registry.cache_for(&info.api_group, &info.api_version, &info.resource).await {
            Ok(c) => c,
            Err(NotCached::Disabled) => return Served::Passthrough("not_cached"),
            Err(NotCached::NotCacheable) => return Served::Passthrough("not_cacheable"),
            Err(NotCached::Discovery) => return Served::Passthrough("discovery"),
        };
        // A cache starting up (first use, or watchmux just started) is
        // usually ready in moments; waiting for it keeps a crowd of clients
        // arriving at once from all reaching the upstream.
        if !cache.wait_ready(NOT_READY_WAIT).await {
            return Served::Passthrough("not_ready");
        }
        let (Ok(labels), Ok(field_sel)) =
            (LabelSelector::parse(&params.label_selector), FieldSelector::parse(&params.field_selector))
        else {
            return Served::Passthrough("invalid_selector");
        };
        let shape = &cache.shape;
        if fields::validate(
            &shape.info.group,
            &shape.info.resource,
            shape.info.namespaced,
            shape.custom_selectable.as_deref(),
            &field_sel,
        )
        .is_err()
        {
            return Served::Passthrough("invalid_selector");
        }
        let namespace = if shape.info.namespaced { info.namespace.clone() } else { None };
        let name = info.name.clone();
        let filter = Filter::new(namespace, name, labels, field_sel);
        let scoped = !cache.scope.is_everything();
        let request_in_scope = filter.labels.implies(&cache.scope.labels) && filter.fields.implies(&cache.scope.fields);

        match endpoint {
            Endpoint::Watch => {
                if scoped && !request_in_scope {
                    return Served::Passthrough("outside_scope");
                }
                self.watch(cache, filter, params, variant, arrival).await
            }
            Endpoint::List => {
                if scoped && !request_in_scope {
                    return Served::Passthrough("outside_scope");
                }
                self.list(cache, filter, params, variant, arrival).await
            }
            Endpoint::Get => self.get(cache, filter, params, variant, scoped, arrival).await,
        }
    }

    /// Proves the cache fresh for a consistent read, counting the outcome.
    async fn consistent(&self, cache: &Arc<ResourceCache>, arrival: Instant) -> bool {
        let fresh = cache.ensure_fresh(self.registry.upstream(), arrival, TOO_LARGE_RV_WAIT).await;
        let result = if fresh { "success" } else { "fallback" };
        metrics::counter!(m::CONSISTENT_READS, "resource" => cache.label().to_owned(), "result" => result).increment(1);
        fresh
    }

    async fn watch(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        variant: ContentVariant,
        arrival: Instant,
    ) -> Served {
        let watch_list = match (p.send_initial_events, p.rv_match) {
            (None, RvMatch::Unset) => false,
            (Some(true), RvMatch::NotOlderThan) => true,
            // Everything else is either invalid (the API server answers 422)
            // or a rare form the cache leaves to the API server.
            _ => return Served::Passthrough("watch_parameters"),
        };
        let timeout = match p.timeout_seconds {
            Some(s) => Duration::from_secs(s),
            None => MIN_REQUEST_TIMEOUT.mul_f64(rand::rng().random_range(1.0..2.0)),
        };
        let opts = StreamOptions {
            variant,
            allow_bookmarks: p.allow_bookmarks,
            initial_events_end: watch_list,
            timeout,
            stop: self.streams_stop.clone(),
        };
        let start = if watch_list {
            match p.rv {
                // A consistent snapshot: at least as new as the upstream now.
                Rv::Unset => {
                    if !self.consistent(&cache, arrival).await {
                        return Served::Passthrough("consistent_read");
                    }
                    StartAt::CurrentState
                }
                Rv::Any => StartAt::CurrentState,
                Rv::At(rv) => {
                    if !cache.wait_for_rv(rv, TOO_LARGE_RV_WAIT).await {
                        let status = too_large_rv(rv, cache.current_rv());
                        return Served::Response(watch_response(
                            variant,
                            body::full(chunk_bytes(error_frame(&status))),
                        ));
                    }
                    StartAt::CurrentState
                }
            }
        } else {
            match p.rv {
                Rv::Unset | Rv::Any => StartAt::CurrentState,
                Rv::At(rv) => StartAt::After(rv),
            }
        };
        match cache.register(filter, start) {
            Ok(reg) => {
                let stream = WatchStream::new(cache, reg, opts);
                Served::Response(watch_response(variant, body::boxed_chunks(stream)))
            }
            Err(too_old) => {
                let status = Status::new(StatusCode::GONE, StatusReason::Expired, too_old.to_string());
                Served::Response(watch_response(variant, body::full(chunk_bytes(error_frame(&status)))))
            }
        }
    }

    async fn list(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        variant: ContentVariant,
        arrival: Instant,
    ) -> Served {
        if p.send_initial_events.is_some() {
            return Served::Passthrough("list_parameters");
        }
        if p.continue_token.is_some() {
            return Served::Passthrough("continue");
        }
        let label = cache.label().to_owned();
        match (p.rv, p.rv_match) {
            (_, RvMatch::Exact) => return Served::Passthrough("exact"),
            // Pages of a consistent list need snapshots kept for their
            // continue tokens, which the cache does not keep yet.
            (Rv::Unset, RvMatch::Unset) if p.limit.is_some() => return Served::Passthrough("paginated"),
            (Rv::Unset, RvMatch::Unset) => {
                if !self.consistent(&cache, arrival).await {
                    return Served::Passthrough("consistent_read");
                }
            }
            // resourceVersionMatch needs a resourceVersion: the API server says how.
            (Rv::Unset, _) => return Served::Passthrough("list_parameters"),
            (Rv::Any, _) => {}
            // A version with a limit means "exactly that version", which needs
            // a snapshot the cache does not keep.
            (Rv::At(_), RvMatch::Unset) if p.limit.is_some() => return Served::Passthrough("exact"),
            (Rv::At(rv), _) => {
                if !cache.wait_for_rv(rv, TOO_LARGE_RV_WAIT).await {
                    return Served::Response(too_large_rv(rv, cache.current_rv()).into_response());
                }
            }
        }
        metrics::counter!(m::CACHE_LIST_TOTAL, "resource" => label).increment(1);
        Served::Response(list_response(&cache, &filter, variant))
    }

    async fn get(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        variant: ContentVariant,
        scoped: bool,
        arrival: Instant,
    ) -> Served {
        if p.rv_match != RvMatch::Unset || p.limit.is_some() || p.continue_token.is_some() {
            return Served::Passthrough("get_parameters");
        }
        let label = cache.label().to_owned();
        match p.rv {
            Rv::Unset => {
                if !self.consistent(&cache, arrival).await {
                    return Served::Passthrough("consistent_read");
                }
            }
            Rv::Any => {}
            Rv::At(rv) => {
                if !cache.wait_for_rv(rv, TOO_LARGE_RV_WAIT).await {
                    return Served::Response(too_large_rv(rv, cache.current_rv()).into_response());
                }
            }
        }
        let name = filter.name.clone().unwrap_or_default();
        let key = ObjectKey { namespace: filter.namespace.clone().unwrap_or_default(), name: name.clone() };
        let snapshot = cache.snapshot();
        match snapshot.objects.get(&key) {
            Some(obj) => {
                metrics::counter!(m::CACHE_GET_TOTAL, "resource" => label).increment(1);
                // The API server's encoder ends every body with a newline.
                let chunk = Chunk::parts(Bytes::new(), obj.encoded(variant), Bytes::from_static(b"\n"));
                let mut resp = Response::new(body::boxed_chunks(ChunkList::new(VecDeque::from([chunk]))));
                set_common_headers(resp.headers_mut(), variant.content_type(Endpoint::Get));
                Served::Response(resp)
            }
            // A scoped cache does not hold everything: the object may exist outside the scope.
            None if scoped => Served::Passthrough("outside_scope"),
            None => {
                metrics::counter!(m::CACHE_GET_TOTAL, "resource" => label).increment(1);
                Served::Response(not_found(&cache, &name).into_response())
            }
        }
    }
}

/// The API server pretty-prints JSON for clients that look like a person
/// (curl, Wget, a browser); those few requests pass through so that they get
/// exactly that.
fn wants_pretty_output(headers: &HeaderMap) -> bool {
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    ["curl", "Wget", "Mozilla"].iter().any(|p| ua.starts_with(p))
        || headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("pretty"))
}

/// The API server's 504 for a resourceVersion the cache has not reached.
fn too_large_rv(requested: u64, current: u64) -> Status {
    let mut details = serde_json::Map::new();
    details.insert(
        "causes".into(),
        serde_json::json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
    );
    let mut status = Status::new(
        StatusCode::GATEWAY_TIMEOUT,
        StatusReason::Timeout,
        format!("Timeout: Too large resource version: {requested}, current: {current}"),
    )
    .retry_after(1);
    status.details = Some(details);
    status
}

/// The API server's 404 for a named object that does not exist.
fn not_found(cache: &ResourceCache, name: &str) -> Status {
    let info = &cache.shape.info;
    let mut details = serde_json::Map::new();
    details.insert("name".into(), name.into());
    if !info.group.is_empty() {
        details.insert("group".into(), info.group.clone().into());
    }
    details.insert("kind".into(), info.resource.clone().into());
    let mut status = Status::new(
        StatusCode::NOT_FOUND,
        StatusReason::NotFound,
        format!("{} \"{}\" not found", info.qualified_resource(), name),
    );
    status.details = Some(details);
    status
}

fn set_common_headers(headers: &mut HeaderMap, content_type: &'static str) {
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
}

fn watch_response(variant: ContentVariant, body: ProxyBody) -> Response<ProxyBody> {
    let mut resp = Response::new(body);
    set_common_headers(resp.headers_mut(), variant.content_type(Endpoint::Watch));
    resp
}

fn chunk_bytes(mut chunk: Chunk) -> Bytes {
    use bytes::Buf;
    let n = chunk.remaining();
    chunk.copy_to_bytes(n)
}

/// A LIST answer from the current state: the items spliced from each object's
/// shared bytes, never re-encoded.
fn list_response(cache: &ResourceCache, filter: &Filter, variant: ContentVariant) -> Response<ProxyBody> {
    let snapshot = cache.snapshot();
    let info = &cache.shape.info;
    let (kind, api_version) = match variant {
        ContentVariant::Json => (format!("{}List", info.kind), info.api_version()),
        ContentVariant::PartialObjectMetadataJson => {
            ("PartialObjectMetadataList".to_owned(), "meta.k8s.io/v1".to_owned())
        }
    };
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[",
        serde_json::to_string(&kind).expect("string"),
        serde_json::to_string(&api_version).expect("string"),
        snapshot.rv,
    );
    let builtin = !cache.list_items_typed();
    let mut chunks = VecDeque::new();
    chunks.push_back(Chunk::from(Bytes::from(head)));
    let mut first = true;
    let range: Box<dyn Iterator<Item = _>> = match &filter.namespace {
        Some(ns) => {
            let from = ObjectKey { namespace: ns.clone(), name: String::new() };
            Box::new(snapshot.objects.range(from..).take_while(move |(k, _)| k.namespace == *ns))
        }
        None => Box::new(snapshot.objects.iter()),
    };
    for (_, obj) in range {
        if !filter.matches(obj) {
            continue;
        }
        let [a, b] = obj.list_item(variant, builtin);
        let sep = if first { Bytes::new() } else { Bytes::from_static(b",") };
        first = false;
        chunks.push_back(Chunk::parts(sep, a, b));
    }
    if first && variant == ContentVariant::PartialObjectMetadataJson {
        // The API server's metadata lists have no items slice when empty.
        let mut head = chunks
            .pop_back()
            .map(|mut c| {
                use bytes::Buf;
                c.copy_to_bytes(c.remaining())
            })
            .unwrap_or_default()
            .to_vec();
        head.truncate(head.len() - b"[".len());
        chunks.push_back(Chunk::from(Bytes::from(head)));
        chunks.push_back(Chunk::from(Bytes::from_static(b"null}\n")));
    } else {
        chunks.push_back(Chunk::from(Bytes::from_static(b"]}\n")));
    }
    let mut resp = Response::new(body::boxed_chunks(ChunkList::new(chunks)));
    set_common_headers(resp.headers_mut(), variant.content_type(Endpoint::List));
    resp
}

/// A body of chunks known in advance, with its exact length.
struct ChunkList {
    chunks: VecDeque<Chunk>,
    remaining: u64,
}

impl ChunkList {
    fn new(chunks: VecDeque<Chunk>) -> Self {
        use bytes::Buf;
        let remaining = chunks.iter().map(|c| c.remaining() as u64).sum();
        Self { chunks, remaining }
    }
}

impl Body for ChunkList {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        use bytes::Buf;
        Poll::Ready(self.chunks.pop_front().map(|c| {
            self.remaining -= c.remaining() as u64;
            Ok(Frame::data(c))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
