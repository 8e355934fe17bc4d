//! The reflector: keeps one resource cache in step with the upstream API
//! server through one list+watch.
//!
//! An explicit state machine in kube-runtime's watcher's shape, whose open
//! watch lives in the state that reads it ([`ReflectorState`]):
//! `Listing` (a paginated, consistent LIST, or with `--upstream-watch-list`
//! a watch-list: `watch_list`, whose watch is kept as `WatchListed`)
//! → `Watching` (a watch with bookmarks from the last version, asked for)
//! → `Streaming` (that watch, or the watch-list's, read) → on a normal end,
//! `Watching` again from where it stopped; on `410 Gone`, `Listing` again (a
//! relist whose difference reaches watchers as ordinary events); on any
//! other failure, `BackingOff` with exponential delay and jitter, then
//! whichever step failed. Each way a list or watch ends is a variant of
//! [`SyncError`] (`reflector/error.rs`) carrying the error it came from.
//! Downstream watchers never see any of this: they are served from the
//! cache throughout.
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

mod error;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use self::error::SyncError;
use super::super::resource::Writer;
use super::cluster::{ClusterIdentity, Identity};
use super::watch_list::{self, WatchListError};
use crate::cache::content::ProtobufAvailability;
use crate::cache::state::object::CachedObject;
use crate::cache::state::store::{Objects, ObjectsBuilder};
use crate::cache::sync::cbor_probe;
use crate::cache::sync::schema_check::{Outcome, SchemaChecker};
use crate::cache::upstream_wire::consistent_rv;
use crate::cache::upstream_wire::{
    ListPage, Opened, ReflectorError, StreamEnd, WatchLines, get_list, open_watch, watch_params,
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

/// How long a watch-list's watch is at least asked to last: it asks for 5 to
/// 10 minutes, and an end before this is early.
const WATCH_LIST_MIN_TIMEOUT_SECS: u64 = 300;

/// The reflector's states. As in kube-runtime's watcher, a state that has a
/// watch open owns it: the stream is dropped with the state it belongs to.
#[derive(Debug)]
pub(crate) enum ReflectorState {
    /// A full LIST from scratch: the first, or after the upstream expired our version.
    Listing,
    /// Watching for changes after this version, with no watch open yet:
    /// the next step asks for one (kube-runtime's `InitListed`).
    Watching { rv: u64 },
    /// A watch-list gave the cache its state at `rv`; its watch goes on as
    /// the cache's (kube-runtime's `InitialWatch`, past its initial events).
    WatchListed { rv: u64, stream: WatchLines },
    /// A watch open after `rv`, read change by change until it ends
    /// (kube-runtime's `Watching`).
    Streaming { rv: u64, watch: OpenWatch },
    /// Waiting out a failure before going on to `next`.
    BackingOff { delay: Duration, next: Box<ReflectorState> },
    /// The upstream no longer serves the resource: the end.
    Gone,
}

/// States compare by where they are, not by the connection an open one
/// reads (in tests, which assert where a step leads).
#[cfg(test)]
impl PartialEq for ReflectorState {
    fn eq(&self, other: &Self) -> bool {
        use ReflectorState::*;
        match (self, other) {
            (Listing, Listing) | (Gone, Gone) => true,
            (Watching { rv: a }, Watching { rv: b })
            | (WatchListed { rv: a, .. }, WatchListed { rv: b, .. })
            | (Streaming { rv: a, .. }, Streaming { rv: b, .. }) => a == b,
            (BackingOff { delay: a, next: x }, BackingOff { delay: b, next: y }) => a == b && x == y,
            _ => false,
        }
    }
}

/// An upstream watch being read, and what tells how it ends.
#[derive(Debug)]
pub(crate) struct OpenWatch {
    stream: WatchLines,
    /// When the step that opened it (or took the watch-list's) began.
    opened_at: Instant,
    /// The silence that abandons it.
    deadline: Duration,
    /// The `timeoutSeconds` it asked for (at least): an end well before it
    /// is early, maybe the API server going away.
    timeout_secs: u64,
}

/// Why a reflector stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// watchmux is shutting down.
    Stopped,
    /// The upstream no longer serves the resource.
    Gone,
}

/// A watch the upstream ended normally (at its timeout, or before it).
struct Closed {
    /// Before its timeout: the API server going away, maybe to come back
    /// as another cluster.
    early: bool,
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
    /// Whether full lists are watch-lists: the cache's sync settings'
    /// (`--upstream-watch-list`), until the upstream shows it serves none.
    watch_list: AtomicBool,
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
        let watch_list = AtomicBool::new(cache.cache().sync.watch_list);
        let http1 = upstream.http1_only();
        Self {
            cache,
            upstream,
            schemas,
            failures: 0,
            started: false,
            schema_checked: true,
            watch_list,
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
        let listing = matches!(first, ReflectorState::Listing);
        self.schema_checked = listing;
        // A cache loaded from disk may hold another cluster's state.
        self.check_cluster = !listing;
        let mut state = first;
        loop {
            state = tokio::select! {
                _ = stop.cancelled() => return Exit::Stopped,
                next = self.step(state) => next,
            };
            if matches!(state, ReflectorState::Gone) {
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
                        self.cache.set_relisting(false);
                        self.cache.set_initial_list_failing(false);
                        metrics::counter!(m::CACHE_INITIALIZATIONS, "resource" => label.clone()).increment(1);
                        metrics::histogram!(m::CACHE_INITIALIZATION_DURATION, "resource" => label.clone())
                            .record(started.elapsed().as_secs_f64());
                        tracing::info!(resource = %label, objects = count, rv, "cache initialized from upstream list");
                        self.failures = 0;
                        match stream {
                            Some(stream) => ReflectorState::WatchListed { rv, stream },
                            None => ReflectorState::Watching { rv },
                        }
                    }
                    Err(SyncError::Gone) => {
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
            ReflectorState::Watching { rv } => match self.start_watch(rv, None).await {
                Ok(watch) => ReflectorState::Streaming { rv, watch },
                Err(end) => self.watch_ended(end, rv),
            },
            ReflectorState::WatchListed { rv, stream } => match self.start_watch(rv, Some(stream)).await {
                Ok(watch) => ReflectorState::Streaming { rv, watch },
                Err(end) => self.watch_ended(end, rv),
            },
            ReflectorState::Streaming { rv, watch } => {
                let (rv, ended) = self.read_watch(rv, watch).await;
                match ended {
                    Ok(Closed { early }) => {
                        self.failures = 0;
                        self.check_cluster = early;
                        ReflectorState::Watching { rv }
                    }
                    Err(end) => self.watch_ended(end, rv),
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

    /// Where a watch that ended with `end` at `rv` leads: a relist, the
    /// cache's end, or a back-off before watching from `rv` again.
    fn watch_ended(&mut self, end: SyncError, rv: u64) -> ReflectorState {
        let label = self.cache.cache().label().to_owned();
        if let Some(cause) = end.relist_cause() {
            match &end {
                SyncError::Expired => tracing::info!(resource = %label, rv, "upstream expired our version; relisting"),
                SyncError::TooLarge(_) => {
                    tracing::warn!(resource = %label, rv, error = %error_chain(&end), "the upstream has not reached our version; listing to see whether it is another cluster");
                }
                SyncError::NewCluster => {
                    tracing::warn!(resource = %label, "the upstream is another cluster; relisting")
                }
                SyncError::WentBack => {
                    tracing::warn!(resource = %label, "relisting: the upstream's version went below the cache's");
                }
                SyncError::Inconsistent => {
                    tracing::warn!(resource = %label, "relisting a cache the consistency check found different from the upstream");
                }
                _ => tracing::warn!(resource = %label, error = %end, "relisting"),
            }
            metrics::counter!(m::UPSTREAM_RELISTS, "resource" => label, "cause" => cause).increment(1);
            return ReflectorState::Listing;
        }
        if matches!(end, SyncError::Gone) {
            return ReflectorState::Gone;
        }
        if matches!(end, SyncError::Silent(_)) {
            metrics::counter!(m::UPSTREAM_WATCH_SILENT, "resource" => label.clone()).increment(1);
        }
        tracing::warn!(resource = %label, rv, error = %error_chain(&end), "upstream watch failed");
        self.check_cluster = true;
        self.back_off(ReflectorState::Watching { rv })
    }

    /// Before a watch resumes after a failure, or from a cache loaded from
    /// disk: the upstream's identity, and its current version against
    /// the cache's. [`SyncError::NewCluster`] when it is another cluster.
    async fn check_cluster_before_watch(&mut self, rv: u64) -> Result<(), SyncError> {
        self.check_cluster = false;
        let cache = self.cache.cache();
        let uri = cache.collection_uri(&[("limit", "1".to_owned())]);
        // Bounded: over a link that swallows requests the watch finds out
        // on its own, and must not wait for these first.
        let current = consistent_rv(&self.upstream, uri, cache.sync.gzip_lists);
        let checks = async { tokio::join!(self.cluster.check(&self.upstream), current) };
        let (identity, upstream_rv) =
            tokio::time::timeout(CLUSTER_CHECK_LIMIT, checks).await.unwrap_or((Identity::Unknown, None));
        if let Some(theirs) = upstream_rv
            && theirs < rv
        {
            self.cluster.version_went_back(self.epoch, cache.label(), rv, theirs);
        }
        if identity != Identity::Same && identity != Identity::Unknown || self.cluster.epoch() != self.epoch {
            return Err(SyncError::NewCluster);
        }
        Ok(())
    }

    fn back_off(&mut self, next: ReflectorState) -> ReflectorState {
        let delay = backoff_delay(self.failures, &mut rand::rng());
        self.failures = self.failures.saturating_add(1);
        ReflectorState::BackingOff { delay, next: Box::new(next) }
    }

    /// Everything in scope: a watch-list where the upstream serves them and
    /// `--upstream-watch-list` asks for them, a paginated LIST otherwise.
    async fn initial_list(&self) -> Result<Initial, SyncError> {
        if self.watch_list.load(Ordering::Relaxed) {
            let cache = self.cache.cache();
            let timeout = rand::rng().random_range(WATCH_LIST_MIN_TIMEOUT_SECS..600);
            let uri = cache.collection_uri(&watch_list::params(timeout));
            match watch_list::watch_list(&self.upstream, uri, timeout, &cache.shape, cache.label()).await {
                Ok(listed) => {
                    self.record_warnings(listed.stream.headers());
                    return Ok(Initial { objects: listed.objects, rv: listed.rv, stream: Some(listed.stream) });
                }
                Err(WatchListError::Unsupported(why)) => {
                    tracing::warn!(resource = %cache.label(), why = %why, "the upstream serves no watch-list; listing in pages from now on");
                    self.watch_list.store(false, Ordering::Relaxed);
                }
                Err(err) => return Err(SyncError::watch_listing(err)),
            }
        }
        let (objects, rv) = self.list_all().await.map_err(SyncError::listing)?;
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
        let mut objects = ObjectsBuilder::new();
        let mut continue_token: Option<String> = None;
        let mut list_rv = 0;
        let mut saw_item = false;
        loop {
            let mut params = vec![("limit", LIST_PAGE_SIZE.to_string())];
            if let Some(token) = &continue_token {
                params.push(("continue", token.clone()));
            }
            let listed = get_list(&self.upstream, cache.collection_uri(&params), cache.sync.gzip_lists).await?;
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
                    Ok(obj) => objects.insert(Arc::new(obj)),
                    Err(err) => {
                        tracing::warn!(resource = %cache.label(), error = %err, "skipping undecodable item")
                    }
                }
            }
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => continue_token = Some(token),
                None => return Ok((objects.finish(), list_rv)),
            }
        }
    }

    /// What comes before each watch from `rv` (the schema and cluster
    /// checks it may need, its count), then the watch itself: `listed`, the
    /// watch-list's that brought the cache to `rv`, or a new one.
    async fn start_watch(&mut self, rv: u64, listed: Option<WatchLines>) -> Result<OpenWatch, SyncError> {
        if !self.schema_checked {
            let outcome = self.schemas.check(&self.upstream, &self.cache.cache().shape.info).await;
            self.schema_checked = !matches!(outcome, Outcome::Unavailable(_));
            self.apply_schema_check(outcome);
        }
        if self.check_cluster {
            self.check_cluster_before_watch(rv).await?;
        }
        if self.started {
            metrics::counter!(m::UPSTREAM_WATCH_RESTARTS, "resource" => self.cache.cache().label().to_owned())
                .increment(1);
        }
        self.started = true;
        if self.cluster.epoch() != self.epoch {
            return Err(SyncError::NewCluster);
        }
        let opened_at = Instant::now();
        let (stream, deadline, timeout_secs) = match listed {
            // A watch-list's watch asked for a long timeout: it keeps the
            // long deadline (bookmarks once a minute).
            Some(stream) => (stream, WATCH_PROGRESS_DEADLINE, WATCH_LIST_MIN_TIMEOUT_SECS),
            None => {
                let (timeout, deadline) = watch_cycle(self.http1, &mut rand::rng());
                let uri = self.cache.cache().collection_uri(&watch_params(rv, timeout));
                let stream = match open_watch(&self.upstream, uri).await {
                    Opened::Streaming(stream) => stream,
                    Opened::Expired => return Err(SyncError::Expired),
                    Opened::Gone => return Err(SyncError::Gone),
                    Opened::TooLarge(refusal) => return Err(SyncError::TooLarge(refusal)),
                    Opened::Failed(err) => return Err(SyncError::WatchStart(err)),
                };
                (stream, deadline, timeout)
            }
        };
        // The upstream holds every change after `rv`: a cache loaded
        // from disk at `rv` is in step with it from here on.
        self.cache.upstream_answered();
        // What the next watch asks for follows what this one got.
        self.http1 = stream.version() < http::Version::HTTP_2;
        // A watch that connected is a success: the next failure starts the
        // backoff from the beginning.
        self.failures = 0;
        Ok(OpenWatch { stream, opened_at, deadline, timeout_secs })
    }

    /// Applies the open `watch` from `rv` to the cache until it ends; the
    /// version it reached, and how it ended.
    async fn read_watch(&mut self, mut rv: u64, mut watch: OpenWatch) -> (u64, Result<Closed, SyncError>) {
        let cache = self.cache.cache().clone();
        let mut renewals = self.upstream.renewals();
        loop {
            // Changes a catch-up watch read for the freshness proof are
            // applied here, between this watch's own (see `Writer`).
            let change = tokio::select! {
                // The deadline counts from the watch's last byte, however
                // often the catch-up's changes wake this loop meanwhile.
                read = watch.stream.next(&cache.shape, Some(watch.deadline)) => match read {
                    Ok(change) => change,
                    Err(StreamEnd::Closed) => {
                        let early = watch.opened_at.elapsed() + Duration::from_secs(1)
                            < Duration::from_secs(watch.timeout_secs);
                        return (rv, Ok(Closed { early }));
                    }
                    Err(end) => return (rv, Err(SyncError::watch_ended(end))),
                },
                change = self.cache.next_catch_up(&self.upstream) => change,
                () = cache.check_state().relist_requested() => {
                    let end = if cache.check_state().take_went_back() { SyncError::WentBack } else { SyncError::Inconsistent };
                    return (rv, Err(end));
                }
                () = self.cluster.moved_past(self.epoch) => return (rv, Err(SyncError::NewCluster)),
                // New connections (back from the fallback servers): resume
                // there from `rv`, as after the watch's own end.
                Ok(()) = renewals.changed() => return (rv, Ok(Closed { early: false })),
            };
            rv = rv.max(self.cache.apply(change));
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
