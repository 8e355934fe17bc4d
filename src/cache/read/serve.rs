//! Answering LIST, GET and WATCH from the cache, with the API server's
//! semantics, or passing the request through: [`CacheService::try_serve`]
//! carries out the read's plan (`read::plan`, where every decision the
//! request and its cache's facts alone make is made, once), and this module
//! and its children read the cache's state as the plan says.
//!
//! The rule throughout: serve from the cache only what the cache can answer
//! exactly as kube-apiserver would; pass everything else through (and count
//! why), so that the upstream gives its own, exact answer. Bad input is in
//! that second group: the API server's error is by definition the right one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, header};
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod as_table;
mod crd;
mod list;
mod walk;

use super::super::registry::{CacheConfig, NotCached, Registry};
use super::super::resource::backfill::{self, Resumed};
use super::super::resource::freshness::fallbacks::too_large;
use super::super::resource::freshness::{Proof, ProofOutcome, ensure_fresh, prove_watch_list, reached};
use super::super::resource::{ResourceCache, StartAt};
use super::params::{ReadParams, Rv, RvMatch};
use super::plan::{self, Content, Facts, Read, ReadPlan, Request};
use crate::body::{self, Chunk, ProxyBody, Refusal};
use crate::cache::content::{Answer, NoProtobufHere, answer_form};
use crate::cache::delivery::filter::Filter;
use crate::cache::read::watch_stream::{StreamOptions, WatchStream};
use crate::cache::reason::Reason;
use crate::cache::stale_reads::{proven, serve_unproven};
use crate::cache::state::object::ObjectKey;
use crate::encode::status::{Status, StatusReason};
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::encode::watch::error_frame;
use crate::fairness::Seat;
use crate::metrics as m;
use crate::negotiate::PassthroughReason;
use crate::request::RequestInfo;
use crate::upstream::Upstream;

/// How long a consistent read may take to be proven fresh (the API server,
/// too, waits three seconds for its cache before it gives up).
pub(crate) const FRESHNESS_BUDGET: Duration = Duration::from_secs(3);
/// How long a request waits for a starting cache before passing through.
pub(crate) const NOT_READY_WAIT: Duration = Duration::from_secs(3);
/// The API server's default `--min-request-timeout`: watches without
/// `timeoutSeconds` last a random time in [this, twice this).
pub(crate) const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// The cache's answer, or why it has none.
pub(crate) enum Served {
    Response(Response<ProxyBody>),
    Passthrough(Reason),
}

/// Delegated auth's say on a read the cache may answer: the caller is
/// authorized here, before any upstream work is done on its behalf and
/// before any byte of an answer exists. Reads of resources that are not
/// cached at all are left to the API server.
pub(crate) trait ReadGate: Sync {
    /// Whether the cache may answer this caller's read.
    fn admit(
        &self,
        info: &RequestInfo,
        label_selector: &str,
        field_selector: &str,
    ) -> impl Future<Output = Admission> + Send;

    /// A seat for an admitted LIST or WATCH (`watch`) the cache is about to
    /// answer, held while the answer is built, not while the client reads it
    /// ([`Seat::held_by`]), or the 429 to send instead. Taken after
    /// authorization: a review is a request to the upstream, and a burst
    /// waiting for one would fill the queues.
    fn seat(&self, _watch: bool) -> impl Future<Output = Result<Option<Seat>, Refusal>> + Send {
        std::future::ready(Ok(None))
    }
}

/// A gate's answer for one read.
pub(crate) enum Admission {
    /// The cache may answer.
    Admitted,
    /// The answer to send instead (a 403 the API server just gave).
    Refused(Refusal),
    /// Not known now: the request passes through and the API server decides
    /// (a denial remembered from a little while ago, which may no longer hold).
    AskUpstream,
}

/// No gate: trusted-local mode, where every client is watchmux itself.
pub(crate) struct Open;

impl ReadGate for Open {
    async fn admit(&self, _: &RequestInfo, _: &str, _: &str) -> Admission {
        Admission::Admitted
    }
}

/// The read path in front of the registry.
pub(crate) struct CacheService {
    registry: Arc<Registry>,
    /// Cancelled at shutdown: watch streams end cleanly.
    streams_stop: CancellationToken,
}

impl CacheConfig {
    /// The cache these settings describe: its registry of resource caches
    /// (whose reflectors stop with `background_stop`) and the read path in
    /// front of it (whose watch streams end with `streams_stop`).
    pub(crate) fn build(
        self,
        upstream: Arc<Upstream>,
        background_stop: CancellationToken,
        streams_stop: CancellationToken,
    ) -> anyhow::Result<Arc<CacheService>> {
        let registry = Arc::new(Registry::new(upstream, self, background_stop)?);
        Ok(Arc::new(CacheService { registry, streams_stop }))
    }
}

impl CacheService {
    /// Loads the persisted caches (`--persist-dir`), checks
    /// `--cache-resources` against discovery (a typo is a start-up error)
    /// and, with `--cache-warm`, starts every configured cache.
    pub(crate) async fn start(&self) -> anyhow::Result<()> {
        // Persisted caches first: they answer before the upstream does.
        self.registry.restore_persisted()?;
        self.registry.check_names().await?;
        if self.registry.warms() {
            let registry = self.registry.clone();
            tokio::spawn(async move { registry.warm_until_done().await });
        }
        Ok(())
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Serves a request from the cache, or says why it must pass through. A
    /// watch ends with `connection_streams_stop`, its connection's own end
    /// of watch streams (at its maximum age) when it has one, else with the
    /// server's shutdown.
    pub(crate) async fn serve(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        info: &RequestInfo,
        gate: &impl ReadGate,
        connection_streams_stop: Option<&CancellationToken>,
    ) -> Served {
        let served = self.try_serve(method, uri, headers, info, gate, connection_streams_stop).await;
        if let Served::Passthrough(reason) = &served
            && reason.is_counted()
        {
            metrics::counter!(m::PASSTHROUGH_REASONS, "reason" => reason.as_str()).increment(1);
        }
        served
    }

    /// The driver: the read's plan (`plan`), authorized between its two
    /// steps, carried out.
    async fn try_serve(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        info: &RequestInfo,
        gate: &impl ReadGate,
        connection_streams_stop: Option<&CancellationToken>,
    ) -> Served {
        let arrival = Instant::now();
        let request = match plan::request(method, uri, headers, info, |r| self.registry.is_enabled(r)) {
            Ok(request) => request,
            Err(reason) => return Served::Passthrough(reason),
        };
        // Authorized before any upstream work on the request's behalf
        // (discovery, starting a cache): the API server, too, authorizes
        // before it routes, so a refusal here is the answer it would give.
        let (labels, fields) = (&request.params.label_selector, &request.params.field_selector);
        match gate.admit(info, labels, fields).await {
            Admission::Admitted => {}
            Admission::Refused(denied) => return Served::Response(*denied),
            Admission::AskUpstream => return Served::Passthrough(Reason::RecentlyDenied),
        }
        let cache = match self.ready_cache(info).await {
            Ok(cache) => cache,
            Err(reason) => return Served::Passthrough(reason),
        };
        let facts = self.facts(&cache, &request).await;
        let read = match plan::read(request, info, facts) {
            ReadPlan::Serve(read) => read,
            ReadPlan::Passthrough(reason) => return Served::Passthrough(reason),
            ReadPlan::Refuse(status) => {
                metrics::counter!(m::CACHE_REFUSALS, "resource" => cache.label().to_owned(), "reason" => "not_acceptable")
                    .increment(1);
                return Served::Response(status.into_raw_json_response());
            }
        };
        if read.proof_before_seat {
            match self.consistent(&cache, arrival, Proof::CatchingUp).await {
                ProofOutcome::Fresh => {}
                ProofOutcome::PassThrough => return Served::Passthrough(Reason::ConsistentRead),
                ProofOutcome::TooLarge { required, current } => {
                    let variant = read.content.variant();
                    let frame = error_frame(variant, &too_large(required, current));
                    let mut response = watch_response(variant, body::chunk(frame));
                    cache.warnings().add_to(response.headers_mut());
                    return Served::Response(response);
                }
            }
        }
        // A watch older than the history waits for its backfill before it
        // takes a seat, as the watch-list's proof does: the wait is the
        // upstream's, and a restarted watchmux's crowd of resuming watchers
        // would hold every seat.
        let backfilled = match self.backfill(&cache, &read, arrival).await {
            Ok(backfilled) => backfilled,
            Err(served) => return served,
        };
        let (endpoint, compression_kind) = (read.endpoint, read.compression);
        let seat = match endpoint {
            Endpoint::Get => None,
            Endpoint::List | Endpoint::Watch => match gate.seat(endpoint == Endpoint::Watch).await {
                Ok(seat) => seat,
                Err(refused) => return Served::Response(*refused),
            },
        };
        let streams_stop = connection_streams_stop.unwrap_or(&self.streams_stop).clone();
        let mut response = match self.carry_out(cache.clone(), read, arrival, backfilled, streams_stop).await {
            Served::Response(response) => response,
            passthrough => return passthrough,
        };
        // The API server's route adds them to every answer, errors too.
        cache.warnings().add_to(response.headers_mut());
        record_answer(endpoint, cache.label().to_owned(), arrival);
        let response = self.registry.config().compression.apply(headers, compression_kind, response);
        Served::Response(match seat {
            Some(seat) => seat.held_by(response),
            None => response,
        })
    }

    /// The resource's cache, started if it was not and ready, or why the
    /// read passes through.
    async fn ready_cache(&self, info: &RequestInfo) -> Result<Arc<ResourceCache>, Reason> {
        let cache = match self.registry.cache_for(&info.api_group, &info.api_version, &info.resource).await {
            Ok(cache) => cache,
            Err(NotCached::Disabled) => return Err(Reason::NotCached),
            Err(NotCached::NotCacheable) => return Err(Reason::NotCacheable),
            Err(NotCached::Discovery) => return Err(Reason::Discovery),
        };
        // A cache starting up (first use, or watchmux just started) is
        // usually ready in moments; waiting for it keeps a crowd of clients
        // arriving at once from all reaching the upstream.
        if !cache.wait_ready(NOT_READY_WAIT).await {
            return Err(Reason::NotReady);
        }
        Ok(cache)
    }

    /// What the plan reads of a ready cache; a custom resource's Table
    /// printer, from the CRD cache, only for a Table of one.
    async fn facts<'c>(&self, cache: &'c ResourceCache, request: &Request) -> Facts<'c> {
        let shape = &cache.shape;
        let cbor = cache.upstream_cbor();
        let custom_table = request.wants_table(cbor) && !shape.info.is_builtin_group();
        let table_printer = match custom_table {
            true => Some(crd::printer_for(&self.registry, &shape.info).await),
            false => None,
        };
        Facts {
            info: &shape.info,
            custom_selectable: shape.custom_selectable.as_deref(),
            scope: &cache.scope,
            cbor,
            protobuf: cache.protobuf_availability(),
            table_printer,
        }
    }

    /// A watch from a version the cache's history no longer (or not yet)
    /// bridges: its events from the resource's backfill
    /// (`resource/backfill.rs`), or the answer it gets instead. `None`: not
    /// such a watch, or one the cache answers as before (a closed resource,
    /// an upstream known down or found unreachable: the cache's own 410).
    async fn backfill(
        &self,
        cache: &Arc<ResourceCache>,
        read: &Read,
        arrival: Instant,
    ) -> Result<Option<Resumed>, Served> {
        let Some(rv) = resumes_from(read) else { return Ok(None) };
        #[cfg(feature = "fault-injection")]
        if crate::cache::fault::backfill_disabled() {
            return Ok(None);
        }
        let upstream = self.registry.upstream();
        if cache.bridges(rv) || cache.is_closed() || upstream.health().is_down() {
            return Ok(None);
        }
        let variant = read.content.variant();
        let answered = |mut response: Response<ProxyBody>| {
            cache.warnings().add_to(response.headers_mut());
            Served::Response(response)
        };
        match backfill::resume(cache, upstream, &read.filter, rv).await {
            backfill::Answer::Served(resumed) => Ok(Some(resumed)),
            backfill::Answer::Unreachable => Ok(None),
            backfill::Answer::PassThrough => Err(Served::Passthrough(Reason::Backfill)),
            backfill::Answer::Expired(message) => {
                // The watch's answer, as the cache's own 410 was.
                record_answer(Endpoint::Watch, cache.label().to_owned(), arrival);
                let status = Status::new(StatusCode::GONE, StatusReason::Expired, message);
                Err(answered(watch_response(variant, body::chunk(error_frame(variant, &status)))))
            }
            backfill::Answer::TooMany => {
                let message = format!(
                    "too many watches waiting for the history before resourceVersion {rv}, please try again later"
                );
                let status = Status::new(StatusCode::TOO_MANY_REQUESTS, StatusReason::TooManyRequests, message);
                Err(answered(status.retry_after(1).into_response_as(variant)))
            }
        }
    }

    /// Reads the cache as the plan says.
    async fn carry_out(
        &self,
        cache: Arc<ResourceCache>,
        read: Read,
        arrival: Instant,
        backfilled: Option<Resumed>,
        streams_stop: CancellationToken,
    ) -> Served {
        let Read { endpoint, params, filter, content, scoped, .. } = read;
        match (endpoint, content) {
            (Endpoint::List, Content::Table(form)) => self.table_list(cache, filter, params, form, arrival).await,
            (Endpoint::Get, Content::Table(form)) => self.table_get(cache, filter, params, form, scoped).await,
            (Endpoint::Watch, content) => self.watch(cache, filter, params, content, backfilled, streams_stop).await,
            (Endpoint::List, Content::Answer(answer)) => self.list(cache, filter, params, answer, arrival).await,
            (Endpoint::Get, Content::Answer(answer)) => self.get(cache, filter, params, answer, scoped).await,
        }
    }

    /// Proves the cache fresh for a consistent read, counting the outcome: a
    /// LIST's proof is the probe alone ([`Proof::AtOnce`]), passing through
    /// when it fails; a watch-list's waits for the catch-up too, and passes
    /// through only within its resource's fallback budget
    /// ([`prove_watch_list`]).
    async fn consistent(&self, cache: &Arc<ResourceCache>, arrival: Instant, proof: Proof) -> ProofOutcome {
        let upstream = self.registry.upstream();
        let offline = self.registry.config().persist.serve_stale_when_unreachable;
        // Offline mode, with the upstream known down: no proof to wait for.
        if upstream.health().is_down() && serve_unproven(offline, cache, upstream) {
            metrics::counter!(m::CONSISTENT_READS, "resource" => cache.label().to_owned(), "result" => "offline")
                .increment(1);
            return ProofOutcome::Fresh;
        }
        // A cache the consistency check found different from the upstream
        // proves nothing until its relist (`consistency_check.rs`), and its reads pass
        // through, every one: a 504 would only make client-go ask again,
        // and this cache cannot be proven before its relist.
        let unproven = cache.check_state().is_unproven();
        let outcome = match (unproven, proof) {
            (true, _) => ProofOutcome::PassThrough,
            (false, Proof::AtOnce) => match ensure_fresh(cache, upstream, arrival, proof, FRESHNESS_BUDGET).await {
                true => ProofOutcome::Fresh,
                false => ProofOutcome::PassThrough,
            },
            (false, Proof::CatchingUp) => prove_watch_list(cache, upstream, arrival, FRESHNESS_BUDGET).await,
        };
        let served_offline = outcome != ProofOutcome::Fresh && serve_unproven(offline, cache, upstream);
        let result = match (outcome, unproven, served_offline) {
            (ProofOutcome::Fresh, _, _) => "success",
            (_, _, true) => "offline",
            (_, true, false) => "unproven",
            (ProofOutcome::PassThrough, false, false) => "fallback",
            (ProofOutcome::TooLarge { .. }, false, false) => "timeout",
        };
        metrics::counter!(m::CONSISTENT_READS, "resource" => cache.label().to_owned(), "result" => result).increment(1);
        match outcome {
            ProofOutcome::Fresh => {
                proven(cache);
                ProofOutcome::Fresh
            }
            _ if served_offline => ProofOutcome::Fresh,
            unproven => unproven,
        }
    }

    async fn watch(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        content: Content,
        backfilled: Option<Resumed>,
        streams_stop: CancellationToken,
    ) -> Served {
        let (answer, table) = content.into_parts();
        let is_table = table.is_some();
        let variant = answer.variant;
        let watch_list = match (p.send_initial_events, p.rv_match) {
            (None, RvMatch::Unset) => false,
            (Some(true), RvMatch::NotOlderThan) => true,
            // Everything else is either invalid (the API server answers 422)
            // or a rare form the cache leaves to the API server.
            _ => return Served::Passthrough(Reason::WatchParameters),
        };
        // A negative timeoutSeconds is a watch that ends at once (an empty
        // 200), as in the API server; 0 or none, a random one.
        let timeout = match p.timeout_seconds {
            Some(s) => Duration::from_secs(s),
            None => MIN_REQUEST_TIMEOUT.mul_f64(rand::rng().random_range(1.0..2.0)),
        };
        if timeout.is_zero() {
            // Not even the initial events: the stream is over before it starts.
            return Served::Response(watch_response(variant, body::empty()));
        }
        let start = if watch_list {
            match p.rv {
                // A consistent snapshot: at least as new as the upstream now.
                // Proven before the seat (`Read::proof_before_seat`).
                Rv::Unset => StartAt::CurrentState,
                Rv::Any => StartAt::CurrentState,
                Rv::At(rv) => {
                    if !reached(&cache, rv).await {
                        return Served::Passthrough(Reason::AheadOfCache);
                    }
                    StartAt::CurrentState
                }
            }
        } else {
            match (p.rv, &backfilled) {
                // The backfill's events come first; the cache from its end.
                (_, Some(resumed)) => StartAt::After(resumed.join),
                (Rv::Unset | Rv::Any, None) => StartAt::CurrentState,
                (Rv::At(rv), None) => StartAt::After(rv),
            }
        };
        let opts = StreamOptions {
            variant,
            allow_bookmarks: p.allow_bookmarks,
            // The API server ends the initial events of every watch that
            // starts from the current state (watch-list, and a watch at
            // resourceVersion 0 or unset) with the initial-events-end
            // bookmark, when the client allows bookmarks.
            initial_events_end: watch_list || matches!(start, StartAt::CurrentState),
            timeout,
            stop: streams_stop,
            table,
        };
        match cache.register(filter, start) {
            Ok(mut reg) => {
                let resumed_from = backfilled.map(|resumed| {
                    reg.since_version.splice(0..0, resumed.deliveries);
                    resumed.from
                });
                let label = cache.label().to_owned();
                let mut stream = WatchStream::new(cache, reg, opts);
                if let Some(rv) = resumed_from {
                    stream.resumed_from(rv);
                }
                // Dropping the stream deregisters the watcher.
                if !stream.table_prints() {
                    return Served::Passthrough(Reason::Negotiated(PassthroughReason::Table));
                }
                if is_table {
                    metrics::counter!(m::CACHE_TABLE_TOTAL, "resource" => label).increment(1);
                }
                let mut variant = variant;
                // Every initial event must have the stream's form before the
                // headers say protobuf; otherwise JSON, or the API server.
                if let Some(refused) = stream.protobuf_refusal() {
                    match answer_form(answer, Some(NoProtobufHere::Refused(refused))) {
                        Ok(json) => {
                            stream.switch_to(json.variant);
                            variant = json.variant;
                        }
                        // Dropping the stream deregisters the watcher.
                        Err(reason) => return Served::Passthrough(reason),
                    }
                }
                Served::Response(watch_response(variant, body::boxed_chunks(stream)))
            }
            // The history moved past the backfill's end meanwhile (or the
            // resource went): the API server answers, exactly.
            Err(_) if backfilled.is_some() => Served::Passthrough(Reason::Backfill),
            Err(too_old) => {
                let status = Status::new(StatusCode::GONE, StatusReason::Expired, too_old.to_string());
                Served::Response(watch_response(variant, body::chunk(error_frame(variant, &status))))
            }
        }
    }

    async fn get(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        answer: Answer,
        scoped: bool,
    ) -> Served {
        if let Err(reason) = gettable(&cache, &p).await {
            return Served::Passthrough(reason);
        }
        let label = cache.label().to_owned();
        let name = filter.name.clone().unwrap_or_default();
        let key = ObjectKey::new(filter.namespace.as_deref().unwrap_or(""), name.as_str());
        let snapshot = cache.snapshot();
        match snapshot.objects.get(&key) {
            Some(obj) => {
                let (variant, bytes) = match obj.encoded(answer.variant) {
                    Ok(bytes) => (answer.variant, bytes),
                    Err(refused) => match answer_form(answer, Some(NoProtobufHere::Refused(refused))) {
                        Ok(json) => (json.variant, obj.encoded(json.variant).expect("JSON variants always encode")),
                        Err(reason) => return Served::Passthrough(reason),
                    },
                };
                metrics::counter!(m::CACHE_GET_TOTAL, "resource" => label).increment(1);
                // The API server's JSON encoder ends every body with a newline; protobuf has none.
                let end = if variant.is_protobuf() { Bytes::new() } else { Bytes::from_static(b"\n") };
                let chunk = Chunk::parts(Bytes::new(), bytes, end);
                let mut resp = Response::new(body::chunk(chunk));
                set_common_headers(resp.headers_mut(), variant.content_type(Endpoint::Get));
                Served::Response(resp)
            }
            // A scoped cache does not hold everything: the object may exist outside the scope.
            None if scoped => Served::Passthrough(Reason::OutsideScope),
            None => {
                let variant = match answer.error_variant() {
                    Ok(v) => v,
                    Err(reason) => return Served::Passthrough(reason),
                };
                metrics::counter!(m::CACHE_GET_TOTAL, "resource" => label).increment(1);
                Served::Response(not_found(&cache, &name).into_response_as(variant))
            }
        }
    }
}

/// The version a plain watch resumes from (`resourceVersion=N`, no
/// watch-list, not ended before it starts): the watches a backfill serves.
fn resumes_from(read: &Read) -> Option<u64> {
    let p = &read.params;
    let plain = read.endpoint == Endpoint::Watch
        && p.send_initial_events.is_none()
        && p.rv_match == RvMatch::Unset
        && p.timeout_seconds != Some(0);
    match p.rv {
        Rv::At(rv) if plain => Some(rv),
        _ => None,
    }
}

/// Whether the cache has reached the version a GET asks for (its other
/// parameters are the plan's).
async fn gettable(cache: &ResourceCache, p: &ReadParams) -> Result<(), Reason> {
    match p.rv {
        // Turned away by the plan; kept total without a panic.
        Rv::Unset => Err(Reason::ConsistentGet),
        Rv::Any => Ok(()),
        Rv::At(rv) if reached(cache, rv).await => Ok(()),
        Rv::At(_) => Err(Reason::AheadOfCache),
    }
}

/// Counts an answer from the cache and the time to its response head (for
/// a watch, its headers: the stream itself may last an hour).
fn record_answer(endpoint: Endpoint, resource: String, arrival: Instant) {
    let verb = match endpoint {
        Endpoint::Get => "get",
        Endpoint::List => "list",
        Endpoint::Watch => {
            metrics::counter!(m::CACHE_WATCH_TOTAL, "resource" => resource.clone()).increment(1);
            "watch"
        }
    };
    metrics::histogram!(m::CACHE_REQUEST_DURATION, "verb" => verb, "resource" => resource)
        .record(arrival.elapsed().as_secs_f64());
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
