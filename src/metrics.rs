//! Every metric watchmux exports: names, help text and the recorder.
//!
//! Names live here and nowhere else, so the list below is the whole contract
//! with dashboards. Where the API server has a metric for the same concept the
//! name follows its family (`apiserver_...` becomes `watchmux_...`).
//! The standard `process_*` metrics are [`process`]'s, read at each scrape.

pub(crate) mod process;

use std::time::Duration;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Always 1, labelled with the version, the source revision and the compiler's version.
pub(crate) const BUILD_INFO: &str = "watchmux_build_info";

/// Requests forwarded to the upstream API server, by verb, resource and HTTP code.
pub(crate) const PASSTHROUGH_REQUESTS: &str = "watchmux_passthrough_requests_total";
/// Time from receiving a forwarded request to the upstream's response head, by verb and resource.
pub(crate) const PASSTHROUGH_DURATION: &str = "watchmux_passthrough_request_duration_seconds";
/// Forwarded requests in flight, long-running ones included.
pub(crate) const PASSTHROUGH_INFLIGHT: &str = "watchmux_passthrough_inflight_requests";
/// Requests that could not reach the upstream, by cause.
pub(crate) const UPSTREAM_ERRORS: &str = "watchmux_upstream_errors_total";
/// Bytes of pass-through answers' windows held against
/// `--passthrough-buffer-bytes`.
pub(crate) const PASSTHROUGH_BUFFER_RESERVED: &str = "watchmux_passthrough_buffer_reserved_bytes";
/// Pass-through answers cut off because their client did not read them.
pub(crate) const PASSTHROUGH_STALLED: &str = "watchmux_passthrough_stalled_total";
/// Upgraded connections (exec, attach, port-forward) being tunnelled.
pub(crate) const UPGRADED_TUNNELS: &str = "watchmux_upgraded_tunnels";
/// Downstream connections accepted, by listener.
pub(crate) const CONNECTIONS_ACCEPTED: &str = "watchmux_connections_accepted_total";
/// Downstream connections open now, by listener.
pub(crate) const CONNECTIONS_OPEN: &str = "watchmux_connections_open";
/// HTTP/2 connections asked to finish (GOAWAY), by listener and reason:
/// `idle` (no stream for the idle timeout), `connection_close` (an answer
/// said so: anonymous HTTP/2, over the connection budget), `goaway_chance`
/// (drawn by `--goaway-chance`, to rebalance).
pub(crate) const CONNECTIONS_FINISHED: &str = "watchmux_connections_finished_total";
/// Requests that arrived once shutdown had begun, answered with the API
/// server's 429 for it (`server::lifecycle::shutdown::refusal`).
pub(crate) const SHUTDOWN_REFUSED: &str = "watchmux_shutdown_refused_total";
/// Downstream connections that ended in an error (bad TLS, malformed HTTP...).
pub(crate) const CONNECTION_ERRORS: &str = "watchmux_connection_errors_total";
/// Times the API listener's TLS files were read again after a change, by
/// `file_kind` (`serving`: the certificate and key; `client_ca`) and
/// `result` (`ok`: new connections use them; `error`: refused, the previous
/// ones kept).
pub(crate) const TLS_RELOADS: &str = "watchmux_tls_reloads_total";
/// 1 when the upstream answered its last readiness probe, else 0.
pub(crate) const UPSTREAM_READY: &str = "watchmux_upstream_ready";
pub(crate) const UPSTREAM_HEALTH: &str = "watchmux_upstream_health";
/// 1 when one endpoint of `--upstream-servers` answered its last readiness probe, else 0.
pub(crate) const UPSTREAM_ENDPOINT_READY: &str = "watchmux_upstream_endpoint_ready";
/// The Kubernetes minor one endpoint of `--upstream-servers` last said in its `/version`.
pub(crate) const UPSTREAM_ENDPOINT_MINOR: &str = "watchmux_upstream_endpoint_minor";

/// Pass-through requests that could have been served from the cache, by why they were not.
pub(crate) const PASSTHROUGH_REASONS: &str = "watchmux_cache_passthrough_total";
/// Backfill rounds (one upstream watch each, continued if the API server
/// ends it first) for watches older than the history, by resource and result.
pub(crate) const BACKFILLS: &str = "watchmux_watch_backfills_total";
/// Watches older than the history that waited on a backfill, by resource and result.
pub(crate) const BACKFILL_WATCHERS: &str = "watchmux_watch_backfill_watchers_total";
/// Events received from the upstream watch, by resource.
pub(crate) const CACHE_EVENTS_RECEIVED: &str = "watchmux_watch_cache_events_received_total";
/// Events handed to the dispatcher, by resource.
pub(crate) const CACHE_EVENTS_DISPATCHED: &str = "watchmux_watch_cache_events_dispatched_total";
/// Event deliveries queued for watchers, by resource.
pub(crate) const CACHE_DELIVERIES: &str = "watchmux_watch_cache_deliveries_total";
/// The history ring's capacity, by resource.
pub(crate) const CACHE_CAPACITY: &str = "watchmux_watch_cache_capacity";
/// Objects in the store, by resource.
pub(crate) const CACHE_OBJECTS: &str = "watchmux_watch_cache_objects";
/// Full initializations (initial list and relists) of a cache, by resource.
pub(crate) const CACHE_INITIALIZATIONS: &str = "watchmux_watch_cache_initializations_total";
/// How long a full initialization (a paginated upstream LIST) took, by
/// resource (which resource's list is slow is the question when one relists).
pub(crate) const CACHE_INITIALIZATION_DURATION: &str = "watchmux_watch_cache_initialization_duration_seconds";
/// Time requests waited for the cache to reach a resourceVersion, over every
/// resource.
pub(crate) const CACHE_READ_WAIT: &str = "watchmux_watch_cache_read_wait_seconds";
/// Watchers closed by the cache (the resource went, or a relist gap), by resource.
pub(crate) const TERMINATED_WATCHERS: &str = "watchmux_terminated_watchers_total";
/// Slow watchers, by resource and outcome: `moved_to_ring` (fell behind
/// live delivery and reads the history ring), `caught_up` (back on live
/// delivery), `expired` (fell behind the ring itself: 410).
pub(crate) const SLOW_WATCHERS: &str = "watchmux_slow_watchers_total";
/// Watchers reading the history ring now, by resource.
pub(crate) const WATCHERS_CATCHING_UP: &str = "watchmux_watchers_catching_up";
/// Watchers registered now, by resource.
pub(crate) const REGISTERED_WATCHERS: &str = "watchmux_registered_watchers";
/// LIST requests answered from the cache, by resource.
pub(crate) const CACHE_LIST_TOTAL: &str = "watchmux_cache_list_total";
/// LISTs from the cache too long to gather (no limit, over a MiB of items)
/// and streamed from their snapshot instead, by resource.
pub(crate) const CACHE_LIST_STREAMED: &str = "watchmux_cache_list_streamed_total";
/// GET requests answered from the cache, by resource.
pub(crate) const CACHE_GET_TOTAL: &str = "watchmux_cache_get_total";
/// LISTs, GETs and WATCHes answered from the cache as a `meta.k8s.io` Table (counted in those too).
pub(crate) const CACHE_TABLE_TOTAL: &str = "watchmux_cache_table_total";
/// Reads the cache refused as kube-apiserver would before its handlers, by
/// resource and reason (`not_acceptable`: the route filter's 406).
pub(crate) const CACHE_REFUSALS: &str = "watchmux_cache_refusals_total";
/// Requests the pass-through answers once for every caller, by kind
/// (`openapi`: immutable documents by hash; `health`: `/readyz` and the
/// like) and result (`hit`, `fetched`, `passed_through`).
pub(crate) const SHARED_ANSWERS: &str = "watchmux_shared_answers_total";
/// Bytes of the shared answers kept.
pub(crate) const SHARED_ANSWERS_BYTES: &str = "watchmux_shared_answers_bytes";
/// WATCH requests answered from the cache, by resource.
pub(crate) const CACHE_WATCH_TOTAL: &str = "watchmux_cache_watch_total";
/// Time from a request's arrival to the cache's response head, by verb
/// (get, list, watch) and resource: a watch is measured to its headers, not
/// over its lifetime.
pub(crate) const CACHE_REQUEST_DURATION: &str = "watchmux_cache_request_duration_seconds";
/// Consistent reads, by resource and result (success: served from the cache; fallback: passed upstream;
/// unproven: passed upstream because a consistency check found the cache different and it is not relisted yet).
pub(crate) const CONSISTENT_READS: &str = "watchmux_watch_cache_consistent_read_total";
/// Encodings of an object into a content variant.
pub(crate) const CACHE_ENCODES: &str = "watchmux_cache_encodes_total";
/// Protobuf watches ended at a live event with no protobuf form, by resource.
pub(crate) const PROTOBUF_WATCH_ENDED: &str = "watchmux_cache_protobuf_watch_ended_total";
/// Object versions the protobuf encoder refused, by variant and reason.
pub(crate) const PROTOBUF_REFUSED: &str = "watchmux_cache_protobuf_refused_total";
/// 1 while a protobuf variant is off for a cached kind, by resource, variant
/// and reason (`schema_drift`: the served OpenAPI schema differs from the table).
pub(crate) const PROTOBUF_DISABLED: &str = "watchmux_cache_protobuf_disabled";
/// Checks of a cached kind's served schema against the protobuf table, by
/// resource and result (`fits`, `schema_drift`, `unavailable`, `not_in_table`).
pub(crate) const PROTOBUF_SCHEMA_CHECKS: &str = "watchmux_cache_protobuf_schema_checks_total";
/// 1 for the current label set (0 for one it left), labelled with the
/// upstream's Kubernetes minor as its `/version` says (`1.35`; with several
/// API servers the oldest ready one's), the minor whose generated tables watchmux writes from
/// (`served`) and whether the upstream's is supported (`supported`).
pub(crate) const UPSTREAM_MINOR: &str = "watchmux_upstream_minor_info";
/// Reads passed through because their bytes depend on the upstream's
/// minor and watchmux cannot derive them for it, by form (`table`: an
/// unsupported minor's printers; `protobuf`: a kind whose served schema
/// drifted from the table).
pub(crate) const VERSION_FORM_PASSTHROUGH: &str = "watchmux_version_form_passthrough_total";
/// watchmux's own part of delivering a live event, by resource and stage.
///
/// It starts when the event's line has been read from the upstream watch
/// (before it is decoded, so decoding counts). `stage="queued"` ends when
/// the dispatcher has offered the event to every interested watcher, i.e. it
/// sits in the last watcher's queue. `stage="handed"` ends when the last of
/// those watchers' response bodies has handed the event's frame to its
/// connection: `poll_frame` returned it to hyper, which owns the bytes from
/// then on (on HTTP/2, h2's send buffer of that stream, written out by the
/// connection's task as flow control allows; on HTTP/1.1, the connection's
/// write queue, flushed before the body is polled again). The socket write
/// and the network are not in it; a client's receipt minus the upstream's
/// event time is that, plus this.
///
/// One clock read per event and stage, not per watcher: the watchers share an
/// atomic count of the deliveries still to hand over, and whoever takes it to
/// zero reads the clock. An event some watcher never takes (it was closed,
/// or fell behind and was terminated) has no `handed` observation. Events a
/// relist produces are not timed, nor events that reached no watcher. Not by
/// content variant: one event's watchers may ask for several. Not by resource
/// either: by resource it cost 34 series per cached resource (306 of an idle
/// node-local's 931 with the nine default resources), and a fan-out's time
/// depends on its watchers, not on what they watch.
pub(crate) const FANOUT_DURATION: &str = "watchmux_fanout_duration_seconds";
/// Upstream watch (re)starts, by resource and cause.
pub(crate) const UPSTREAM_WATCH_RESTARTS: &str = "watchmux_upstream_watch_restarts_total";
/// New clusters found behind the upstream's address, by the sign (`version`:
/// its resourceVersion went back; `identity`: the kube-system namespace's uid changed).
pub(crate) const UPSTREAM_NEW_CLUSTER: &str = "watchmux_upstream_new_cluster_total";
/// Upstream watches abandoned for silence (no byte within their deadline), by resource.
pub(crate) const UPSTREAM_WATCH_SILENT: &str = "watchmux_upstream_watch_silent_total";
/// Consistency checks of a cache against the upstream at the same
/// resourceVersion, by resource and result (`cache/consistency_check.rs`).
pub(crate) const CACHE_CONSISTENCY_CHECKS: &str = "watchmux_cache_consistency_checks_total";
/// How long one consistency check took, by resource.
pub(crate) const CACHE_CONSISTENCY_CHECK_DURATION: &str = "watchmux_cache_consistency_check_duration_seconds";
/// Upstream relists after the first, by resource and cause.
pub(crate) const UPSTREAM_RELISTS: &str = "watchmux_upstream_relists_total";
/// Full lists that gave a cache its state, by resource and form
/// (`watch_list`, `pages`).
pub(crate) const UPSTREAM_LISTS: &str = "watchmux_upstream_lists_total";

/// Requests refused by a limit before any work was done, by limit
/// (`inflight` 429, `connections` 429, `body_size` 413).
pub(crate) const REQUESTS_REJECTED: &str = "watchmux_requests_rejected_total";

/// `--cache-resources` names of groups the upstream does not serve yet
/// (custom resources installed later), kept and resolved again later.
pub(crate) const CACHE_RESOURCES_UNRESOLVED: &str = "watchmux_cache_resources_unresolved";
/// Seconds since the upstream last confirmed a cache current (a list, an event or a bookmark), by resource.
pub(crate) const CACHE_STALENESS: &str = "watchmux_watch_cache_staleness_seconds";
/// 1 while a cache relists after having been in step with the upstream, by resource.
pub(crate) const CACHE_RELIST_IN_PROGRESS: &str = "watchmux_watch_cache_relist_in_progress";

/// Persist commits (one transaction each), by resource and kind (`batch`, `whole`).
pub(crate) const PERSIST_COMMITS: &str = "watchmux_persist_commits_total";
/// How long one persist commit took (its fsync included), by resource.
pub(crate) const PERSIST_COMMIT_DURATION: &str = "watchmux_persist_commit_duration_seconds";
/// Persist commits (or store opens) that failed, by resource.
pub(crate) const PERSIST_WRITE_ERRORS: &str = "watchmux_persist_write_errors_total";
/// 1 while a persisted resource is memory-only because its store cannot be written, by resource.
pub(crate) const PERSIST_DEGRADED: &str = "watchmux_persist_degraded";
/// Stores that failed their check at start and were moved aside, by resource.
pub(crate) const PERSIST_STORES_MOVED_ASIDE: &str = "watchmux_persist_stores_moved_aside_total";
/// Sealed stores refused at start as not the latest this node committed (rolled back, swapped), by resource.
pub(crate) const PERSIST_ROLLBACKS_REFUSED: &str = "watchmux_persist_rollbacks_refused_total";
/// Stores reopened after a write error (redb refuses every later transaction on a handle that saw one), by resource.
pub(crate) const PERSIST_REOPENS: &str = "watchmux_persist_reopens_total";
/// How long loading a persisted resource took at start, by resource.
pub(crate) const PERSIST_LOAD_DURATION: &str = "watchmux_persist_load_seconds";
/// 1 while a cache serves a state the upstream has not confirmed, by resource.
pub(crate) const CACHE_SERVING_UNPROVEN: &str = "watchmux_cache_serving_unproven";

/// Client impersonations watchmux allowed, by the API server's mode that allowed them.
pub(crate) const AUTH_IMPERSONATIONS: &str = "watchmux_auth_impersonations_total";

/// TokenReview and SubjectAccessReview requests sent upstream, by review and outcome.
pub(crate) const AUTH_REVIEWS: &str = "watchmux_auth_reviews_total";
/// How long each upstream review took.
pub(crate) const AUTH_REVIEW_DURATION: &str = "watchmux_auth_review_duration_seconds";
/// Authentication and authorization checks, by review and how the answer was found (hit, miss, coalesced, error).
pub(crate) const AUTH_CACHE_LOOKUPS: &str = "watchmux_auth_cache_lookups_total";
/// Time a request spent in one check, cache lookup and review included.
pub(crate) const AUTH_CHECK_DURATION: &str = "watchmux_auth_check_duration_seconds";
/// Authenticated requests, by method (x509, token, anonymous).
pub(crate) const AUTH_AUTHENTICATED: &str = "watchmux_auth_authenticated_total";
/// Requests answered 401, by reason.
pub(crate) const AUTH_UNAUTHENTICATED: &str = "watchmux_auth_unauthenticated_total";
/// Authorization decisions made by watchmux (reads it serves and impersonation), by result.
pub(crate) const AUTH_AUTHORIZED: &str = "watchmux_auth_authorization_decisions_total";
/// Requests refused because a review could not reach the upstream, by review.
pub(crate) const AUTH_FAIL_CLOSED: &str = "watchmux_auth_fail_closed_total";
/// Entries in a review cache (answered and in flight), by cache (token, access).
pub(crate) const AUTH_CACHE_ENTRIES: &str = "watchmux_auth_cache_entries";
/// Bytes the answered entries of a review cache hold, as its byte bound counts them, by cache.
pub(crate) const AUTH_CACHE_BYTES: &str = "watchmux_auth_cache_bytes";
/// Reviews waiting for a slot (`--max-concurrent-reviews`), over all callers.
pub(crate) const AUTH_REVIEWS_WAITING: &str = "watchmux_auth_reviews_waiting";
/// Cached reads refused with 429 by fairness, by priority level and reason.
pub(crate) const FAIRNESS_REJECTED: &str = "watchmux_fairness_rejected_total";
/// Cached reads waiting for a seat, by priority level.
pub(crate) const FAIRNESS_WAITING: &str = "watchmux_fairness_waiting";
/// Seats of each priority level (`--fairness-seats` split by shares).
pub(crate) const FAIRNESS_SEATS: &str = "watchmux_fairness_seats";
/// Seats taken back from answers whose client did not read them, by priority level.
pub(crate) const FAIRNESS_UNREAD: &str = "watchmux_fairness_unread_released_total";

/// Buckets for the auth checks: a cached answer takes microseconds.
const AUTH_CHECK_BUCKETS: &[f64] =
    &[0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0, 10.0];

/// Buckets for answers from the cache: most take well under a millisecond; a
/// consistent read or a read at a future version may wait up to 3 s.
const CACHE_REQUEST_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Buckets for the fan-out time: a few watchers take tens of microseconds
/// (all below the first bucket), ten thousand tens of milliseconds and a
/// hundred thousand half a second (the fan-out bench's p50 and p99 are read
/// from these; no dashboard or alert reads them).
const FANOUT_BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// Buckets for a cache's full initialization, kept per resource: an empty
/// list takes milliseconds, 100,000 pods a minute or more. Ten, not the
/// sixteen of every other `_seconds` histogram, which a node-local pays per
/// cached resource at start.
const CACHE_INITIALIZATION_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// Latency buckets, in seconds, for every `_seconds` histogram: from 1 ms (a
/// cached answer) to a minute (a slow upstream LIST).
const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Installs the global Prometheus recorder and describes every metric.
///
/// Returns the handle the admin endpoint renders `/metrics` from.
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = builder()?.upkeep_timeout(Duration::from_secs(5)).install_recorder()?;
    describe();
    metrics::gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "revision" => env!("WATCHMUX_GIT_REVISION"),
        "rustc_version" => env!("WATCHMUX_RUSTC_VERSION"),
        "allocator" => crate::allocator::NAME,
    )
    .set(1.0);
    Ok(handle)
}

/// The recorder's buckets: each histogram's own, or else the latency buckets.
/// Tests build their local recorders with it to see the series `/metrics` has.
pub(crate) fn builder() -> anyhow::Result<PrometheusBuilder> {
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(AUTH_CHECK_DURATION.into()), AUTH_CHECK_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(CACHE_REQUEST_DURATION.into()), CACHE_REQUEST_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(FANOUT_DURATION.into()), FANOUT_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(CACHE_INITIALIZATION_DURATION.into()), CACHE_INITIALIZATION_BUCKETS)?
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?)
}

fn describe() {
    describe_gauge!(
        BUILD_INFO,
        "A metric with a constant '1' value labelled by version, revision (the source's git revision, or unknown), rustc_version and allocator (jemalloc, mimalloc or system)."
    );
    describe_counter!(REQUESTS_REJECTED, "Requests refused by a limit before any work was done, by limit.");
    describe_gauge!(
        CACHE_RESOURCES_UNRESOLVED,
        "--cache-resources names of API groups the upstream does not serve yet (custom resources installed later); resolved again every minute."
    );
    describe_gauge!(
        CACHE_STALENESS,
        "Seconds since the upstream last confirmed the cache current: a list, an event or a bookmark (bookmarks come about once a minute on a quiet resource), by resource. Updated at each scrape."
    );
    describe_gauge!(
        CACHE_RELIST_IN_PROGRESS,
        "1 while a cache relists after having been in step with the upstream (its watchers are behind until it lands), by resource."
    );
    describe_counter!(PERSIST_COMMITS, "Persist commits (one transaction each), by resource and kind (batch, whole).");
    describe_histogram!(
        PERSIST_COMMIT_DURATION,
        Unit::Seconds,
        "How long one persist commit took, its fsync included, by resource."
    );
    describe_counter!(
        PERSIST_WRITE_ERRORS,
        "Persist commits or store opens that failed (a full disk...), by resource."
    );
    describe_gauge!(
        PERSIST_DEGRADED,
        "1 while a persisted resource is memory-only because its store cannot be written (retried every 10 s), by resource; resource=\"*\" when the persist directory itself cannot be written (nothing is persisted or restored)."
    );
    describe_counter!(
        PERSIST_STORES_MOVED_ASIDE,
        "Persist stores that failed their check at start and were moved aside (the resource started cold), by resource."
    );
    describe_counter!(
        PERSIST_ROLLBACKS_REFUSED,
        "Sealed persist stores refused at start because they are not the latest this node committed (a file rolled back, swapped in from elsewhere, or the ledger lost); moved aside, the resource started cold, by resource."
    );
    describe_counter!(
        PERSIST_REOPENS,
        "Persist stores reopened after a write error (a full disk), so that writes resume once there is room, by resource."
    );
    describe_gauge!(PERSIST_LOAD_DURATION, "Seconds loading a persisted resource took at start, by resource.");
    describe_gauge!(
        CACHE_SERVING_UNPROVEN,
        "1 while a cache serves a state the upstream has not confirmed: loaded from disk and not answered yet, or answering consistent reads while the upstream cannot be reached (--serve-stale-when-upstream-unreachable), by resource."
    );
    describe_counter!(
        AUTH_IMPERSONATIONS,
        "Client impersonations allowed, by the impersonation mode that allowed them (associated-node, arbitrary-node, serviceaccount, user-info, legacy)."
    );
    describe_counter!(
        AUTH_REVIEWS,
        "TokenReview and SubjectAccessReview requests sent upstream, by review and outcome."
    );
    describe_histogram!(AUTH_REVIEW_DURATION, Unit::Seconds, "How long each upstream review took.");
    describe_counter!(AUTH_CACHE_LOOKUPS, "Auth checks, by review and lookup (hit, miss, coalesced, error).");
    describe_histogram!(AUTH_CHECK_DURATION, Unit::Seconds, "Time a request spent in one auth check.");
    describe_counter!(AUTH_AUTHENTICATED, "Authenticated requests, by method.");
    describe_counter!(AUTH_UNAUTHENTICATED, "Requests answered 401, by reason.");
    describe_counter!(AUTH_AUTHORIZED, "Authorization decisions made by watchmux, by result.");
    describe_counter!(AUTH_FAIL_CLOSED, "Requests refused because a review could not reach the upstream.");
    describe_gauge!(
        AUTH_CACHE_ENTRIES,
        "Entries in a review cache (answered and in flight), by cache (token, access)."
    );
    describe_gauge!(
        AUTH_CACHE_BYTES,
        "Bytes held by the answered entries of a review cache, as its byte bound counts them (keys are 32-byte digests), by cache."
    );
    describe_gauge!(
        AUTH_REVIEWS_WAITING,
        "Reviews waiting for one of the --max-concurrent-reviews slots, which are handed out round-robin by caller."
    );
    describe_counter!(
        FAIRNESS_REJECTED,
        "Reads the cache would answer refused with the API server's 429, by priority level (APF's default levels) and reason (queue_full, queue_wait, watch_rate)."
    );
    describe_gauge!(FAIRNESS_WAITING, "Reads the cache would answer waiting for a seat, by priority level.");
    describe_gauge!(FAIRNESS_SEATS, "Seats of each priority level: --fairness-seats split by APF's nominal shares.");
    describe_counter!(
        FAIRNESS_UNREAD,
        "Seats taken back from answers still being built (a compressed LIST, a watch's initial events) whose client left them unread for 1 s in all, or held for 60 s, by priority level."
    );
    describe_counter!(
        PASSTHROUGH_REQUESTS,
        "Requests forwarded to the upstream API server, by verb, resource and HTTP code. resource is the group-qualified resource once the upstream has answered a request for it with success (at most 256 of them), \"other\" for the rest and \"\" for non-resource paths."
    );
    describe_histogram!(
        PASSTHROUGH_DURATION,
        Unit::Seconds,
        "Time from receiving a forwarded request to the upstream's response headers, by verb and resource."
    );
    describe_gauge!(PASSTHROUGH_INFLIGHT, "Forwarded requests in flight, long-running ones included.");
    describe_counter!(UPSTREAM_ERRORS, "Forwarded requests that failed to reach the upstream, by cause.");
    describe_gauge!(
        PASSTHROUGH_BUFFER_RESERVED,
        "Bytes of pass-through answers' stream windows held against --passthrough-buffer-bytes."
    );
    describe_counter!(
        PASSTHROUGH_STALLED,
        "Pass-through answers reset because their client did not read them while the upstream had more."
    );
    describe_gauge!(UPGRADED_TUNNELS, "Upgraded connections (exec, attach, port-forward) being tunnelled.");
    describe_counter!(CONNECTIONS_ACCEPTED, "Downstream connections accepted, by listener.");
    describe_gauge!(CONNECTIONS_OPEN, "Downstream connections open, by listener.");
    describe_counter!(
        CONNECTIONS_FINISHED,
        "HTTP/2 connections sent GOAWAY by watchmux, by listener and reason (idle, connection_close, goaway_chance)."
    );
    describe_counter!(
        SHUTDOWN_REFUSED,
        "Requests that arrived on an open connection once shutdown had begun, answered as kube-apiserver answers them then: 429, Retry-After: 5, and on HTTP/1.1 Connection: close."
    );
    describe_counter!(CONNECTION_ERRORS, "Downstream connections that ended in an error, by listener and stage.");
    describe_counter!(
        TLS_RELOADS,
        "The API listener's TLS files read again after they changed on disk, by file_kind (serving: --tls-cert-file and --tls-private-key-file; client_ca: --client-ca-file) and result (ok: connections accepted from then on use the new ones; error: they do not read, parse or match, and the previous ones stay in use)."
    );
    describe_gauge!(UPSTREAM_READY, "1 when the upstream API server answered its last readiness probe, else 0.");
    describe_gauge!(
        UPSTREAM_HEALTH,
        "1 for what the last readiness probe of the upstream found (ready, unreachable, tls, credentials, unauthorized, forbidden, not_ready, unresponsive, unknown), 0 for the others."
    );
    describe_gauge!(
        UPSTREAM_ENDPOINT_READY,
        "1 when the upstream endpoint (one API server of --upstream-servers) answered its last readiness probe, else 0."
    );
    describe_counter!(PASSTHROUGH_REASONS, "Requests the cache could have served but passed upstream, by reason.");
    describe_counter!(
        BACKFILLS,
        "Backfill rounds for watches older than the cache's history: one upstream watch from the oldest version asked for, shared by every waiting watcher; by resource and result (joined: the history was reached; expired: the API server answered 410; unreachable: the cache's own 410; too_far, timeout, failed: the waiters passed through)."
    );
    describe_counter!(
        BACKFILL_WATCHERS,
        "Watches older than the cache's history that waited on a backfill, by resource and result (served; expired: the API server's 410; unreachable: the cache's own 410; passthrough: a bound, a failure or a transition the backfill cannot tell; refused: 429, too many waiting)."
    );
    describe_counter!(CACHE_EVENTS_RECEIVED, "Events received from the upstream watch, by resource.");
    describe_counter!(CACHE_EVENTS_DISPATCHED, "Events handed to the dispatcher, by resource.");
    describe_counter!(CACHE_DELIVERIES, "Event deliveries queued for downstream watchers, by resource.");
    describe_gauge!(CACHE_CAPACITY, "Capacity of the event history ring, by resource.");
    describe_gauge!(CACHE_OBJECTS, "Objects held in the cache, by resource.");
    describe_counter!(
        CACHE_INITIALIZATIONS,
        "Full initializations (initial LIST and relists) of a cache, by resource."
    );
    describe_histogram!(
        CACHE_INITIALIZATION_DURATION,
        Unit::Seconds,
        "Duration of a full cache initialization (paginated upstream LIST), by resource."
    );
    describe_histogram!(
        CACHE_READ_WAIT,
        Unit::Seconds,
        "Time requests waited for the cache to be fresh enough, over every resource."
    );
    describe_counter!(
        TERMINATED_WATCHERS,
        "Watchers closed by the cache (resource gone, or started inside a relist gap), by resource."
    );
    describe_counter!(
        SLOW_WATCHERS,
        "Slow watchers by resource and outcome: moved_to_ring, caught_up, expired (fell behind the ring: 410)."
    );
    describe_gauge!(WATCHERS_CATCHING_UP, "Watchers reading missed events from the history ring, by resource.");
    describe_gauge!(REGISTERED_WATCHERS, "Downstream watchers served from the cache, by resource.");
    describe_counter!(CACHE_LIST_TOTAL, "LIST requests answered from the cache, by resource.");
    describe_counter!(
        CACHE_LIST_STREAMED,
        "LISTs answered from the cache by streaming from a snapshot (no limit, over a MiB of items), by resource."
    );
    describe_counter!(CACHE_GET_TOTAL, "GET requests answered from the cache, by resource.");
    describe_counter!(
        CACHE_TABLE_TOTAL,
        "LIST, GET and WATCH requests answered from the cache as a Table (kubectl get), by resource."
    );
    describe_counter!(CACHE_WATCH_TOTAL, "WATCH requests answered from the cache, by resource.");
    describe_histogram!(
        CACHE_REQUEST_DURATION,
        Unit::Seconds,
        "Time from a request's arrival to the response headers of an answer from the cache, by verb (get, list, watch) and resource. A watch is measured to its headers, not over its lifetime."
    );
    describe_counter!(
        CONSISTENT_READS,
        "Consistent reads by resource and result: success (cache), fallback (upstream), unproven (upstream: a consistency check found the cache different and it is not relisted yet), or offline (cache, unproven: the upstream cannot be reached and --serve-stale-when-upstream-unreachable is on)."
    );
    describe_counter!(CACHE_ENCODES, "Encodings of an object into a content variant, by variant.");
    describe_counter!(
        PROTOBUF_WATCH_ENDED,
        "Protobuf watches ended at a live event with no protobuf form (the client resumes), by resource."
    );
    describe_counter!(
        PROTOBUF_REFUSED,
        "Object versions with no protobuf form (served as JSON or passed through), by variant and reason."
    );
    describe_gauge!(
        PROTOBUF_DISABLED,
        "1 while a protobuf variant is off for a cached kind (served as JSON or passed through), by resource, variant and reason (schema_drift)."
    );
    describe_counter!(
        PROTOBUF_SCHEMA_CHECKS,
        "Checks of a cached kind's served OpenAPI schema against the protobuf table when its cache lists, by resource and result (fits, schema_drift, unavailable, not_in_table)."
    );
    describe_gauge!(
        UPSTREAM_ENDPOINT_MINOR,
        "The Kubernetes minor (e.g. 36 for 1.36) one upstream endpoint of --upstream-servers last said in its /version, read when it becomes ready and every minute."
    );
    describe_gauge!(
        UPSTREAM_MINOR,
        "1 for the current label set and 0 for those it left, labelled with the upstream's Kubernetes minor from its /version (minor; with several API servers, the oldest ready one's, followed as they are upgraded), the minor whose generated protobuf, Table and bookmark forms watchmux writes (served) and whether the upstream's is supported (supported)."
    );
    describe_counter!(
        VERSION_FORM_PASSTHROUGH,
        "Reads passed through to the API server because their bytes depend on its minor and watchmux cannot derive them for it, by form (table: an unsupported minor's Tables; protobuf: a kind whose served schema drifted from the table)."
    );
    describe_histogram!(
        FANOUT_DURATION,
        Unit::Seconds,
        "watchmux's own time to fan a live event out, from reading its line from the upstream watch to: stage=queued, its offer to the last interested watcher's queue; stage=handed, the last of those watchers' bodies handing its frame to the connection (hyper's buffers; the socket write is not included). Over every resource."
    );
    describe_counter!(UPSTREAM_WATCH_RESTARTS, "Upstream watch starts after the first, by resource and cause.");
    describe_counter!(
        UPSTREAM_NEW_CLUSTER,
        "Times the upstream was found to be another cluster than the one cached (a rebuilt cluster, or one restored from an older etcd backup), by sign: version (a consistent read answered below a cache's resourceVersion) or identity (the kube-system namespace's uid changed). Every cache then relists and its watchers get 410."
    );
    describe_counter!(
        UPSTREAM_WATCH_SILENT,
        "Upstream watches abandoned because no byte (event, bookmark or end) came within their deadline (12 s over HTTP/1.1, 150 s over HTTP/2): a dead connection. They are resumed from their last version. By resource."
    );
    describe_counter!(
        UPSTREAM_RELISTS,
        "Upstream relists after the initial list, by resource and cause (expired: the upstream answered 410; inconsistent: a consistency check found the cache different)."
    );
    describe_counter!(
        SHARED_ANSWERS,
        "Requests answered once for every caller that asks, by kind (openapi: immutable OpenAPI v3 documents by ?hash=; health: /readyz, /livez, /healthz, an answer at most a second old) and result (hit: a kept answer; fetched: fetched from the upstream for this request; passed_through: not one to share, the request went upstream)."
    );
    describe_gauge!(SHARED_ANSWERS_BYTES, Unit::Bytes, "Bytes of the shared answers kept.");
    describe_counter!(
        CACHE_REFUSALS,
        "Reads refused by the cache as kube-apiserver refuses them before its handlers, by resource and reason (not_acceptable: its route filter's 406 for an Accept header no route produces)."
    );
    describe_counter!(
        UPSTREAM_LISTS,
        "Full upstream lists that gave a cache its state (the first and every relist), by resource and form (watch_list: --upstream-watch-list; pages: a paginated consistent LIST)."
    );
    describe_counter!(
        CACHE_CONSISTENCY_CHECKS,
        "Checks of a cache against the upstream's LIST at exactly the cache's resourceVersion, by resource and result (ok, mismatch, skipped_relisting, skipped_compacted, error)."
    );
    describe_histogram!(
        CACHE_CONSISTENCY_CHECK_DURATION,
        Unit::Seconds,
        "How long one consistency check took (the upstream's exact-version LIST and the comparison), by resource."
    );
}
