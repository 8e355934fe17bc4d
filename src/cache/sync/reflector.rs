//! The reflector: keeps one resource cache in step with the upstream API
//! server through one list+watch.
//!
//! An explicit state machine, as kube-runtime's watcher is:
//! `Listing` (a paginated, consistent LIST, or with `--upstream-watch-list`
//! a watch-list whose watch goes on as the first `Watching`: `watch_list`)
//! → `Watching` (a watch with
//! bookmarks from the last version) → on a normal end, `Watching` again from
//! where it stopped; on `410 Gone`, `Listing` again (a relist whose difference
//! reaches watchers as ordinary events); on any other failure, `BackingOff`
//! with exponential delay and jitter, then whichever step failed. Downstream
//! watchers never see any of this: they are served from the cache throughout.
//! When the upstream answers 404 for the collection (a deleted CRD, or a
//! version no longer served), `Gone`: the cache closes, its watch streams
//! end as the API server ends them, and the registry forgets it.
//!
//! When the upstream turns out to be another cluster (`cluster`: its
//! version went back below the cache's, or its identity changed), the
//! reflector relists at once and installs the list as a new start: every
//! watcher gets 410. A watch the API server refuses with 504
//! `ResourceVersionTooLarge` (what a version from the old cluster gets) is
//! followed by a list, which tells.
//!
//! A silent watch (no event, bookmark or end) is abandoned and resumed
//! from its version: after 150 s over HTTP/2, whose PINGs find a dead
//! connection long before; after a few seconds over HTTP/1.1, whose watches
//! cycle that often ([`HTTP1_WATCH_TIMEOUT_SECS`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::StatusCode;
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::resource::Writer;
use super::cluster::{ClusterIdentity, Identity};
use super::watch_list::{self, WatchListError};
use crate::cache::content::ProtobufAvailability;
use crate::cache::state::object::CachedObject;
use crate::cache::state::store::Objects;
use crate::cache::sync::cbor_probe;
use crate::cache::sync::schema_check::{Outcome, SchemaChecker};
use crate::cache::upstream_wire::consistent_rv;
use crate::cache::upstream_wire::{
    LineEnd, ListPage, Opened, ReflectorError, StreamEnd, WatchLines, get_list, open_watch, watch_params,
};
use crate::encode::variant::ContentVariant;
use crate::error::error_chain;
use crate::metrics as m;
use crate::upstream::Upstream;

/// Page size of the upstream LIST, as client-go's reflector uses.
const LIST_PAGE_SIZE: u32 = 500;
const BACKOFF_BASE: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The longest an upstream watch may stay silent before it counts as dead
/// and is resumed from its last version. The API server's watch cache sends
/// every watch that allows bookmarks one about once a minute, changes or
/// not, so a live watch is never this quiet; a half-open connection is,
/// forever (HTTP/2's PINGs find it in 40 s, HTTP/1.1 has none).
const WATCH_PROGRESS_DEADLINE: Duration = Duration::from_secs(150);
/// On HTTP/1.1 a watch has no liveness signal of its own but its bytes,
/// and the API server's natural one (a bookmark a minute) is far too rare
/// to find a dead connection in seconds. So there the watch asks to be
/// ended this soon (`timeoutSeconds`): the watch cache then sends a
/// bookmark 2 s before that deadline and ends the response at it (an
/// etcd-served watch just ends), and the reflector resumes from the
/// bookmark's version at once, with no relist. A live HTTP/1.1 watch is
/// therefore never silent for more than this, and one that is has died.
/// The price is one watch request per cache every few seconds, answered
/// from the watch cache.
const HTTP1_WATCH_TIMEOUT_SECS: u64 = 8;
/// The silence that abandons an HTTP/1.1 watch: its timeout, and time for
/// the end to arrive from a busy API server.
const HTTP1_WATCH_DEADLINE: Duration = Duration::from_secs(HTTP1_WATCH_TIMEOUT_SECS + 4);

/// How long the checks before a resumed watch may take.
const CLUSTER_CHECK_LIMIT: Duration = Duration::from_secs(5);

/// The reflector's states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReflectorState {
    /// A full LIST from scratch: the first, or after the upstream expired our version.
    Listing,
    /// Watching for changes after this version.
    Watching { rv: u64 },
    /// Waiting out a failure before going on to `next`.
    BackingOff { delay: Duration, next: Box<ReflectorState> },
    /// The upstream no longer serves the resource: the end.
    Gone,
}

/// Why a reflector stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// watchmux is shutting down.
    Stopped,
    /// The upstream no longer serves the resource.
    Gone,
}

/// How one upstream watch ended.
#[derive(Debug)]
enum WatchEnd {
    /// The stream ended normally: resume from `rv`. `early`: before its
    /// timeout (the API server going away, maybe to come back as another
    /// cluster).
    Closed { rv: u64, early: bool },
    /// The upstream no longer has our version (410): relist.
    Expired,
    /// Connection or protocol failure: back off, then resume from `rv`.
    Failed { rv: u64, error: String },
    /// The API server's watch cache is not at `rv` (504
    /// `ResourceVersionTooLarge`): list, which tells a lagging API server
    /// from another cluster.
    TooLarge { error: String },
    /// Another cluster was found (by this cache or another): relist as a
    /// new start.
    NewCluster,
    /// The upstream answered 404: the resource is not served any more.
    Gone,
    /// A consistency check found the cache different from the upstream:
    /// relist.
    Inconsistent,
}

pub(crate) struct Reflector {
    /// The cache's one writer.
    cache: Writer,
    upstream: Arc<Upstream>,
    /// The registry's schema checker, shared by its reflectors.
    schemas: Arc<SchemaChecker>,
    failures: u32,
    started: bool,
    /// False for a cache loaded from disk until the served schema has been
    /// checked once (a list checks it beside itself; a resumed watch
    /// has no list): protobuf stays as the table says until then.
    schema_checked: bool,
    /// Whether full lists are watch-lists: `--upstream-watch-list`, until
    /// the upstream shows it serves none.
    watch_list: AtomicBool,
    /// The watch a watch-list goes on as, for the `Watching` after it.
    opened: Option<WatchLines>,
    /// Whether the upstream answers watches over HTTP/1.1 (flag, plain
    /// HTTP, or learned from the last watch's answer): watches then cycle
    /// every few seconds so that silence is found in seconds.
    http1: bool,
    /// Which cluster the caches hold, shared by every reflector of the upstream.
    cluster: Arc<ClusterIdentity>,
    /// The cluster epoch this cache's state belongs to.
    epoch: u64,
    /// Whether the next watch first makes sure the upstream is still the
    /// cluster cached: after a failure (a rebuild restarts the API server)
    /// and before resuming a cache loaded from disk.
    check_cluster: bool,
}

/// A full list's state and version; a watch-list's watch too.
struct Initial {
    objects: Objects,
    rv: u64,
    stream: Option<WatchLines>,
}

impl Initial {
    /// The `form` label of `watchmux_upstream_lists_total`.
    fn form(&self) -> &'static str {
        if self.stream.is_some() { "watch_list" } else { "pages" }
    }
}

impl Reflector {
    pub(crate) fn new(cache: Writer, upstream: Arc<Upstream>, schemas: Arc<SchemaChecker>) -> Self {
        let watch_list = AtomicBool::new(upstream.watch_list());
        let http1 = upstream.http1_only();
        Self {
            cache,
            upstream,
            schemas,
            failures: 0,
            started: false,
            schema_checked: true,
            watch_list,
            opened: None,
            http1,
            cluster: Arc::default(),
            epoch: 0,
            check_cluster: false,
        }
    }

    /// Shares `cluster` (the registry's, one for every cache of the upstream).
    pub(crate) fn with_cluster(mut self, cluster: Arc<ClusterIdentity>) -> Self {
        self.epoch = cluster.epoch();
        self.cluster = cluster;
        self
    }

    /// Runs until `stop` is cancelled, from the first list.
    #[cfg(test)]
    pub(crate) async fn run(self, stop: CancellationToken) -> Exit {
        self.run_from(ReflectorState::Listing, stop).await
    }

    /// Runs from `first` until `stop` is cancelled: `Listing` for a new
    /// cache; `Watching` from the stored version for one loaded from disk,
    /// whose 410 is then an ordinary relist (with its gap rule).
    pub(crate) async fn run_from(mut self, first: ReflectorState, stop: CancellationToken) -> Exit {
        self.schema_checked = first == ReflectorState::Listing;
        // A cache loaded from disk may hold another cluster's state.
        self.check_cluster = first != ReflectorState::Listing;
        let mut state = first;
        loop {
            state = tokio::select! {
                _ = stop.cancelled() => return Exit::Stopped,
                next = self.step(state) => next,
            };
            if state == ReflectorState::Gone {
                tracing::info!(resource = %self.cache.cache().label(), "the upstream no longer serves this resource; closing its cache");
                self.cache.close();
                return Exit::Gone;
            }
        }
    }

    /// One transition of the state machine.
    pub(crate) async fn step(&mut self, state: ReflectorState) -> ReflectorState {
        let label = self.cache.cache().label().to_owned();
        match state {
            ReflectorState::Listing => {
                let started = Instant::now();
                if self.cache.cache().is_ready() {
                    self.cache.set_relisting(true);
                }
                // The served schema is checked beside the list (bounded by its
                // own timeout), so that a drifted kind has protobuf off before
                // the cache is ready.
                // So is whether the upstream serves CBOR (`cbor_probe`).
                let info = &self.cache.cache().shape.info;
                let (listed, schema, cbor, _) = tokio::join!(
                    self.initial_list(),
                    self.schemas.check(&self.upstream, info),
                    cbor_probe::probe(&self.upstream, info),
                    self.cluster.check(&self.upstream)
                );
                self.apply_schema_check(schema);
                if let Some(cbor) = cbor
                    && self.cache.set_upstream_cbor(cbor) != cbor
                {
                    tracing::info!(resource = %label, ?cbor, "learned whether the upstream serves CBOR");
                }
                match listed {
                    Ok(initial) => {
                        metrics::counter!(m::UPSTREAM_LISTS, "resource" => label.clone(), "form" => initial.form())
                            .increment(1);
                        let Initial { objects, rv, stream } = initial;
                        let count = objects.len();
                        if self.new_cluster_listed(rv) {
                            self.cache.start_over(objects, rv);
                        } else {
                            self.cache.replace(objects, rv);
                        }
                        // Read beside the list: what a persisted store keeps.
                        self.cache.record_cluster(self.cluster.recorded());
                        self.check_cluster = false;
                        self.opened = stream;
                        self.cache.set_relisting(false);
                        self.cache.set_initial_list_failing(false);
                        metrics::counter!(m::CACHE_INITIALIZATIONS, "resource" => label.clone()).increment(1);
                        metrics::histogram!(m::CACHE_INITIALIZATION_DURATION, "resource" => label.clone())
                            .record(started.elapsed().as_secs_f64());
                        tracing::info!(resource = %label, objects = count, rv, "cache initialized from upstream list");
                        self.failures = 0;
                        ReflectorState::Watching { rv }
                    }
                    Err(ReflectorError::Status { status: StatusCode::NOT_FOUND, .. }) => {
                        self.cache.set_relisting(false);
                        ReflectorState::Gone
                    }
                    Err(err) => {
                        tracing::warn!(resource = %label, error = %error_chain(&err), "upstream list failed");
                        if !self.cache.cache().is_ready() {
                            self.cache.set_initial_list_failing(true);
                        }
                        self.back_off(ReflectorState::Listing)
                    }
                }
            }
            ReflectorState::Watching { rv } => {
                if !self.schema_checked {
                    let outcome = self.schemas.check(&self.upstream, &self.cache.cache().shape.info).await;
                    self.schema_checked = !matches!(outcome, Outcome::Unavailable(_));
                    self.apply_schema_check(outcome);
                }
                if self.check_cluster
                    && let Some(next) = self.check_cluster_before_watch(rv).await
                {
                    return next;
                }
                if self.started {
                    metrics::counter!(m::UPSTREAM_WATCH_RESTARTS, "resource" => label.clone()).increment(1);
                }
                self.started = true;
                match self.watch_once(rv).await {
                    WatchEnd::Closed { rv, early } => {
                        self.failures = 0;
                        self.check_cluster = early;
                        ReflectorState::Watching { rv }
                    }
                    WatchEnd::Expired => {
                        tracing::info!(resource = %label, rv, "upstream expired our version; relisting");
                        metrics::counter!(m::UPSTREAM_RELISTS, "resource" => label, "cause" => "expired").increment(1);
                        ReflectorState::Listing
                    }
                    WatchEnd::Failed { rv, error } => {
                        tracing::warn!(resource = %label, rv, error = %error, "upstream watch failed");
                        self.check_cluster = true;
                        self.back_off(ReflectorState::Watching { rv })
                    }
                    WatchEnd::TooLarge { error } => {
                        tracing::warn!(resource = %label, rv, error = %error, "the upstream has not reached our version; listing to see whether it is another cluster");
                        metrics::counter!(m::UPSTREAM_RELISTS, "resource" => label, "cause" => "too_large")
                            .increment(1);
                        ReflectorState::Listing
                    }
                    WatchEnd::NewCluster => {
                        tracing::warn!(resource = %label, "the upstream is another cluster; relisting");
                        metrics::counter!(m::UPSTREAM_RELISTS, "resource" => label, "cause" => "new_cluster")
                            .increment(1);
                        ReflectorState::Listing
                    }
                    WatchEnd::Gone => ReflectorState::Gone,
                    WatchEnd::Inconsistent if self.cache.cache().verification().take_went_back() => {
                        tracing::warn!(resource = %label, "relisting: the upstream's version went below the cache's");
                        metrics::counter!(m::UPSTREAM_RELISTS, "resource" => label, "cause" => "new_cluster")
                            .increment(1);
                        ReflectorState::Listing
                    }
                    WatchEnd::Inconsistent => {
                        tracing::warn!(resource = %label, "relisting a cache the consistency check found different from the upstream");
                        metrics::counter!(m::UPSTREAM_RELISTS, "resource" => label, "cause" => "inconsistent")
                            .increment(1);
                        ReflectorState::Listing
                    }
                }
            }
            ReflectorState::BackingOff { delay, next } => {
                // The upstream found ready again ends the wait: the delay
                // grown through an outage must not add half a minute to
                // its end.
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = self.upstream.found_ready() => {
                        tracing::info!(resource = %label, "the upstream is ready again; retrying now");
                    }
                }
                *next
            }
            ReflectorState::Gone => ReflectorState::Gone,
        }
    }

    /// Turns protobuf off (or on again) as the schema check found, logging
    /// and counting a change once, not at every relist.
    fn apply_schema_check(&self, outcome: Outcome) {
        let label = self.cache.cache().label().to_owned();
        metrics::counter!(m::PROTOBUF_SCHEMA_CHECKS, "resource" => label.clone(), "result" => outcome.label())
            .increment(1);
        let availability = match &outcome {
            Outcome::NotInTable | Outcome::Fits => ProtobufAvailability::Both,
            Outcome::Drift { in_metadata: false, .. } => ProtobufAvailability::MetadataOnly,
            Outcome::Drift { in_metadata: true, .. } => ProtobufAvailability::Neither,
            Outcome::Unavailable(why) => {
                tracing::warn!(
                    resource = %label,
                    error = %why,
                    "cannot read the served OpenAPI schema; protobuf stays as it was (the table's Kubernetes version is assumed)"
                );
                return;
            }
        };
        let before = self.cache.set_protobuf_availability(availability);
        // Every checked built-in kind shows the gauge (0 while it fits), so a
        // dashboard tells "fits" from "never checked".
        if !matches!(outcome, Outcome::NotInTable) {
            for variant in [ContentVariant::Protobuf, ContentVariant::PartialObjectMetadataProtobuf] {
                let value = if availability.allows(variant) { 0.0 } else { 1.0 };
                metrics::gauge!(m::PROTOBUF_DISABLED, "resource" => label.clone(), "variant" => variant.metric_label(), "reason" => "schema_drift")
                    .set(value);
            }
        }
        if before == availability {
            return;
        }
        match outcome {
            Outcome::Drift { differences, .. } => tracing::warn!(
                resource = %label,
                kind = %self.cache.cache().shape.info.kind,
                differences = ?differences.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "the served schema differs from the protobuf table (another Kubernetes version); protobuf is off for this kind"
            ),
            _ => tracing::info!(resource = %label, "the served schema fits the protobuf table again; protobuf is on"),
        }
    }

    /// Whether a list at `rv` comes from another cluster than the cache
    /// holds: its version below the cache's (a new epoch for every cache),
    /// or an epoch begun since this cache's state was listed. Either way
    /// the cache's state is this epoch's from here on.
    fn new_cluster_listed(&mut self, rv: u64) -> bool {
        let cache = self.cache.cache();
        let ours = cache.current_rv();
        if cache.is_ready() && rv < ours {
            self.cluster.version_went_back(self.epoch, cache.label(), ours, rv);
        }
        let epoch = self.cluster.epoch();
        let new = cache.is_ready() && epoch != self.epoch;
        self.epoch = epoch;
        new
    }

    /// Before a watch resumes after a failure, or from a cache loaded from
    /// disk: the upstream's identity, and its current version against
    /// the cache's. `Some(Listing)` when it is another cluster.
    async fn check_cluster_before_watch(&mut self, rv: u64) -> Option<ReflectorState> {
        self.check_cluster = false;
        let cache = self.cache.cache();
        let uri = cache.collection_uri(&[("limit", "1".to_owned())]);
        // Bounded: over a link that swallows requests the watch finds out
        // on its own, and must not wait for these first.
        let checks = async { tokio::join!(self.cluster.check(&self.upstream), consistent_rv(&self.upstream, uri)) };
        let (identity, upstream_rv) =
            tokio::time::timeout(CLUSTER_CHECK_LIMIT, checks).await.unwrap_or((Identity::Unknown, None));
        if let Some(theirs) = upstream_rv
            && theirs < rv
        {
            self.cluster.version_went_back(self.epoch, cache.label(), rv, theirs);
        }
        if identity != Identity::Same && identity != Identity::Unknown || self.cluster.epoch() != self.epoch {
            metrics::counter!(m::UPSTREAM_RELISTS, "resource" => cache.label().to_owned(), "cause" => "new_cluster")
                .increment(1);
            return Some(ReflectorState::Listing);
        }
        None
    }

    fn back_off(&mut self, next: ReflectorState) -> ReflectorState {
        let delay = backoff_delay(self.failures, &mut rand::rng());
        self.failures = self.failures.saturating_add(1);
        ReflectorState::BackingOff { delay, next: Box::new(next) }
    }

    /// Everything in scope: a watch-list where the upstream serves them and
    /// `--upstream-watch-list` asks for them, a paginated LIST otherwise.
    async fn initial_list(&self) -> Result<Initial, ReflectorError> {
        if self.watch_list.load(Ordering::Relaxed) {
            let cache = self.cache.cache();
            let timeout = rand::rng().random_range(300..600);
            let uri = cache.collection_uri(&watch_list::params(timeout));
            match watch_list::watch_list(&self.upstream, uri, timeout, &cache.shape, cache.label()).await {
                Ok(listed) => {
                    self.record_warnings(listed.stream.headers());
                    return Ok(Initial { objects: listed.objects, rv: listed.rv, stream: Some(listed.stream) });
                }
                Err(WatchListError::Failed(err)) => return Err(err),
                Err(WatchListError::Unsupported(why)) => {
                    tracing::warn!(resource = %cache.label(), why = %why, "the upstream serves no watch-list; listing in pages from now on");
                    self.watch_list.store(false, Ordering::Relaxed);
                }
            }
        }
        let (objects, rv) = self.list_all().await?;
        Ok(Initial { objects, rv, stream: None })
    }

    /// The resource's deprecation warnings from a full list's answer, for
    /// the cache's answers; logged when they change.
    fn record_warnings(&self, headers: &http::HeaderMap) {
        if self.cache.set_warnings(headers) {
            tracing::info!(resource = %self.cache.cache().label(), warnings = ?headers.get_all(http::header::WARNING), "the API server's warnings for this resource changed");
        }
    }

    /// A paginated, consistent LIST of everything in scope.
    async fn list_all(&self) -> Result<(Objects, u64), ReflectorError> {
        let cache = self.cache.cache();
        let mut objects = Objects::new();
        let mut continue_token: Option<String> = None;
        let mut list_rv = 0;
        let mut saw_item = false;
        loop {
            let mut params = vec![("limit", LIST_PAGE_SIZE.to_string())];
            if let Some(token) = &continue_token {
                params.push(("continue", token.clone()));
            }
            let listed = get_list(&self.upstream, cache.collection_uri(&params)).await?;
            let bytes = listed.body;
            let page: ListPage = serde_json::from_slice(&bytes).map_err(ReflectorError::Decode)?;
            if continue_token.is_none() {
                list_rv = page.metadata.version()?;
                // The resource's deprecation warnings, for the cache's answers.
                self.record_warnings(&listed.headers);
            }
            for item in page.items.unwrap_or_default() {
                let raw = bytes.slice_ref(item.get().as_bytes());
                if !saw_item {
                    saw_item = true;
                    self.cache.set_list_items_typed(item_has_type_meta(&raw));
                }
                match CachedObject::decode(raw, &cache.shape) {
                    Ok(obj) => {
                        objects.insert(obj.key.clone(), Arc::new(obj));
                    }
                    Err(err) => {
                        tracing::warn!(resource = %cache.label(), error = %err, "skipping undecodable item")
                    }
                }
            }
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => continue_token = Some(token),
                None => return Ok((objects, list_rv)),
            }
        }
    }

    /// One upstream watch from `rv`, applied to the cache until it ends:
    /// the watch-list's that brought the cache to `rv`, or a new one.
    async fn watch_once(&mut self, mut rv: u64) -> WatchEnd {
        if self.cluster.epoch() != self.epoch {
            return WatchEnd::NewCluster;
        }
        let cache = self.cache.cache().clone();
        // A watch-list's watch asked for a long timeout: it keeps the long
        // deadline (bookmarks once a minute).
        let opened_at = Instant::now();
        let (opened, deadline, timeout) = match self.opened.take() {
            Some(stream) => (Opened::Streaming(stream), WATCH_PROGRESS_DEADLINE, 300),
            None => {
                let (timeout, deadline) = watch_cycle(self.http1, &mut rand::rng());
                let uri = cache.collection_uri(&watch_params(rv, timeout));
                (open_watch(&self.upstream, uri).await, deadline, timeout)
            }
        };
        let mut stream = match opened {
            Opened::Streaming(stream) => {
                // The upstream holds every change after `rv`: a cache loaded
                // from disk at `rv` is in step with it from here on.
                self.cache.upstream_answered();
                // What the next watch asks for follows what this one got.
                self.http1 = stream.version() < http::Version::HTTP_2;
                stream
            }
            Opened::Expired => return WatchEnd::Expired,
            Opened::Gone => return WatchEnd::Gone,
            Opened::TooLarge(error) => return WatchEnd::TooLarge { error },
            Opened::Failed(error) => return WatchEnd::Failed { rv, error },
        };
        // A watch that connected is a success: the next failure starts the
        // backoff from the beginning.
        self.failures = 0;
        loop {
            // Changes a catch-up watch read for the freshness proof are
            // applied here, between this watch's own (see `Writer`).
            let change = tokio::select! {
                // The deadline counts from the watch's last byte, however
                // often the catch-up's changes wake this loop meanwhile.
                read = stream.next(&cache.shape, Some(deadline)) => match read {
                    Ok(change) => change,
                    Err(StreamEnd::Closed) => {
                        let early = opened_at.elapsed() + Duration::from_secs(1) < Duration::from_secs(timeout);
                        return WatchEnd::Closed { rv, early };
                    }
                    Err(StreamEnd::Silent) => {
                        metrics::counter!(m::UPSTREAM_WATCH_SILENT, "resource" => cache.label().to_owned()).increment(1);
                        return WatchEnd::Failed { rv, error: format!("no byte from the upstream watch for {deadline:?}") };
                    }
                    Err(end) => return end.with_rv(rv),
                },
                change = self.cache.next_catch_up(&self.upstream) => change,
                () = cache.verification().relist_requested() => return WatchEnd::Inconsistent,
                () = self.cluster.moved_past(self.epoch) => return WatchEnd::NewCluster,
            };
            rv = rv.max(self.cache.apply(change));
        }
    }
}

/// How the end of reading the upstream watch ends the reflector's watch.
trait EndsWatch {
    fn with_rv(self, rv: u64) -> WatchEnd;
}

impl EndsWatch for StreamEnd {
    fn with_rv(self, rv: u64) -> WatchEnd {
        match self {
            StreamEnd::Closed => WatchEnd::Closed { rv, early: false },
            // Silence past the deadline (the reflector names it): a
            // connection that died without a FIN or RST.
            StreamEnd::Silent => WatchEnd::Failed { rv, error: "no byte from the upstream watch".to_owned() },
            StreamEnd::Broken(error) | StreamEnd::Line(LineEnd::Failed(error)) => WatchEnd::Failed { rv, error },
            StreamEnd::Line(LineEnd::Expired) => WatchEnd::Expired,
        }
    }
}

/// A watch's `timeoutSeconds` and the silence that abandons it: over
/// HTTP/1.1 a short cycle ([`HTTP1_WATCH_TIMEOUT_SECS`]), over HTTP/2 5 to 10
/// minutes as client-go's reflector asks, with the bookmark-based deadline.
fn watch_cycle(http1: bool, rng: &mut impl Rng) -> (u64, Duration) {
    if http1 {
        (HTTP1_WATCH_TIMEOUT_SECS, HTTP1_WATCH_DEADLINE)
    } else {
        (rng.random_range(300..600), WATCH_PROGRESS_DEADLINE)
    }
}

/// `{"kind":` first: a list item that carries its own type meta.
fn item_has_type_meta(raw: &[u8]) -> bool {
    raw.starts_with(b"{\"kind\":")
}

/// Exponential backoff with ±50% jitter: 200 ms, 400 ms, ... up to 30 s.
pub(crate) fn backoff_delay(failures: u32, rng: &mut impl Rng) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.min(16));
    let capped = exp.min(BACKOFF_MAX);
    capped.mul_f64(rng.random_range(0.5..1.5))
}

#[cfg(test)]
mod tests;
