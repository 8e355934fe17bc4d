//! Command-line flags and the defaults that go with them: the one place where
//! watchmux's configuration is defined. `settings` maps them onto each
//! subsystem's own settings type, `logging` `-v` and `RUST_LOG` onto the
//! log filter.
//!
//! The flags read as every Kubernetes component's (pflag): a boolean flag
//! given bare is true and takes a value only after `=`, in Go's
//! `strconv.ParseBool` spellings; an address may leave its host out
//! (`:7443`, every address, as Go's `net.Listen`); `-v` is klog's
//! verbosity and `--logging-format` component-base's.

mod logging;
mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser, ValueEnum};

pub use settings::{CacheScope, WatchCacheSize};

use crate::auth::UpstreamIdentityMode;
use crate::cache::catalog::resolve::ResourceName;
use crate::go_rules;
use crate::server::connection::goaway_chance::parse_goaway_chance;
use crate::server::{TlsCipherSuite, TlsMinVersion, parse_cipher_suite, parse_tls_min_version};

/// What `--version` says: the crate's version, the source revision it was
/// built from (`unknown` outside `make release`/`make image`, see build.rs)
/// and the compiler.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WATCHMUX_GIT_REVISION"),
    ", rustc ",
    env!("WATCHMUX_RUSTC_VERSION"),
    ", allocator ",
    env!("WATCHMUX_ALLOCATOR"),
    ")"
);

/// watchmux: a transparent caching watch proxy for the Kubernetes API.
///
/// Point clients' kubeconfig at watchmux instead of kube-apiserver. Requests
/// are forwarded upstream with watchmux's own credentials; long-lived streams
/// (watch, logs -f) are flushed as bytes arrive and upgrades (exec, attach,
/// port-forward) are tunnelled.
#[derive(Debug, Clone, Parser)]
#[command(name = "watchmux", version = VERSION, about, long_about = None)]
pub struct Args {
    /// Kubeconfig for the upstream API server. Without it, in
    /// controller-runtime's order: $KUBECONFIG (when none of its files
    /// exists, only the in-cluster account is tried after it), then the
    /// in-cluster service account, then ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of its current-context (refused
    /// with the in-cluster service account, which has none).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Address of the API listener (HTTP/1.1 and HTTP/2 on one port), as
    /// Go's `net.Listen` takes one: `host:port`, `[ipv6]:port`, or `:port`
    /// for every address (IPv4 and IPv6). 7443, not 6443: on a control-plane
    /// node kube-apiserver holds 6443.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN,
          value_parser = go_rules::net::parse_listen_address)]
    pub listen: SocketAddr,

    /// Also serve the API on this unix socket.
    #[arg(long, value_name = "PATH")]
    pub listen_unix: Option<PathBuf>,

    /// PEM certificate chain for TLS on the API listener (plain HTTP without it;
    /// HTTP/2 then by prior knowledge).
    #[arg(long, value_name = "PATH", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key for --tls-cert-file. Both files, and
    /// --client-ca-file, are read again within 5 s of a change (a Secret
    /// volume's update included): new connections use the new ones, and a
    /// pair that does not parse or match is refused, the old one kept.
    #[arg(long, value_name = "PATH", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// The lowest TLS version the API listener accepts, by kube-apiserver's
    /// names: VersionTLS12 (its default) or VersionTLS13.
    #[arg(long, value_name = "VERSION", default_value = "VersionTLS12", value_parser = parse_tls_min_version, requires = "tls_cert_file")]
    pub tls_min_version: TlsMinVersion,

    /// TLS 1.2 cipher suites the API listener accepts, comma-separated IANA
    /// names as kube-apiserver takes them (TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    /// ...); a name rustls does not implement (CBC, RSA key exchange) is
    /// refused. TLS 1.3's suites are not configurable, as in Go. Default:
    /// every ECDHE AES-GCM and ChaCha20-Poly1305 suite.
    #[arg(long, value_name = "NAMES", value_delimiter = ',', value_parser = parse_cipher_suite, requires = "tls_cert_file")]
    pub tls_cipher_suites: Vec<TlsCipherSuite>,

    /// Address of the admin listener: /metrics, /healthz, /livez, /readyz. Kept
    /// apart from the API port so the API server's own paths pass through.
    /// Same syntax as --listen.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9444",
          value_parser = go_rules::net::parse_listen_address)]
    pub admin_listen: SocketAddr,

    /// How long in-flight requests may run after SIGTERM/SIGINT before the
    /// process exits. Watch streams end at once so clients reconnect.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// Speak only HTTP/1.1 to the upstream, even when it offers HTTP/2.
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub upstream_http1_only: bool,

    /// The API servers to dial instead of the kubeconfig's server,
    /// comma-separated (`https://10.0.0.1:6443,https://10.0.0.2:6443`),
    /// sharing its credentials, CA, path prefix and tls-server-name (without
    /// one, each server's certificate is checked against its own host).
    /// watchmux's own requests (the caches' watches) go to the first ready
    /// one, in this order, and move to the next when it fails; clients'
    /// pass-through connections are spread over the ready ones.
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    pub upstream_servers: Vec<String>,

    /// Servers to send every request to only while none of the others
    /// (the kubeconfig's, or --upstream-servers) is ready, comma-separated.
    /// A node-local whose upstream is a tier lists the API servers here, so
    /// that with the tier down its kubelet's lease renewals and other writes
    /// still reach an API server. When one of the others is ready again,
    /// new requests go to it and the fallback connections end with their
    /// requests. They share the kubeconfig's credentials.
    #[arg(long, value_name = "URLS", value_delimiter = ',', conflicts_with = "upstream_discover_servers")]
    pub upstream_fallback_servers: Vec<String>,

    /// The CA bundle the fallback servers' certificates are checked against
    /// (a tier's is usually not the API servers'; in a pod, the service
    /// account's ca.crt). Default: the kubeconfig's.
    #[arg(long, value_name = "FILE", requires = "upstream_fallback_servers")]
    pub upstream_fallback_ca_file: Option<PathBuf>,

    /// The name the fallback servers' certificates are checked against.
    /// Default: each server's own host (the kubeconfig's tls-server-name is
    /// the tier's).
    #[arg(long, value_name = "NAME", requires = "upstream_fallback_servers")]
    pub upstream_fallback_tls_server_name: Option<String>,

    /// Follow the API servers kube-apiserver publishes in the
    /// default/kubernetes EndpointSlices (ready addresses, port https), read
    /// every 10 s, after the servers given (--upstream-servers, or the
    /// kubeconfig's), as KubePrism does: a load balancer given stays
    /// preferred, and the API servers behind it are the fallback. watchmux's
    /// identity must be allowed to list endpointslices in default.
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub upstream_discover_servers: bool,

    /// Ask the upstream for gzip on watchmux's own LISTs (a cache's initial
    /// list and relists, the consistency check), as client-go does: the API
    /// server compresses pages over 128 KiB, about 20 times smaller, and
    /// over TLS neither side spent more CPU for it, even on loopback
    /// (docs/benchmarks.md, Compression). `false` for an upstream on the
    /// same host without TLS.
    #[arg(long, value_name = "BOOL", default_value_t = true, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub upstream_gzip_lists: bool,

    /// Take each cache's full list (the first, and relists) as a
    /// watch-list, one watch whose initial events are the state and which
    /// goes on as the cache's watch, as client-go does since v1.35, instead
    /// of a paginated consistent LIST. For a watchmux in front of another
    /// (a node-local in front of a tier): the tier serves a watch-list from
    /// its cache, where a consistent LIST it cannot prove current at once
    /// passes through to kube-apiserver. An upstream that serves no
    /// watch-lists (400/422, or no end of its initial events) is listed in
    /// pages instead.
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub upstream_watch_list: bool,

    /// How long a TCP connection to the upstream may take to open.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub upstream_connect_timeout: Duration,

    /// How long the TLS handshake with the upstream may take once TCP is
    /// connected (an API server that accepts connections but is hung never
    /// finishes it). As Go's default transport.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub upstream_tls_handshake_timeout: Duration,

    /// How long a request sent upstream may wait for its response headers.
    /// A little over kube-apiserver's own 60 s request timeout, so that its
    /// own answer comes first whenever it can give one.
    #[arg(long, value_name = "DURATION", default_value = "65s", value_parser = parse_duration)]
    pub upstream_response_header_timeout: Duration,

    /// Once the readiness probe (every 5 s) finds the upstream unreachable
    /// or not answering, how long a request that must reach it may take,
    /// dial and headers together, before it fails: an outage is told in
    /// seconds. Cached answers that need no proof keep serving.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub upstream_timeout: Duration,

    /// Resources to cache, comma-separated, named as kubectl names them:
    /// plural, singular or short name, with `.group` optional when only one
    /// group has it (the core group wins, as in kubectl). `*` caches every
    /// resource that can be listed and watched, custom resources included.
    /// An unknown name stops watchmux at start-up; a name of a group not
    /// served yet (a CRD installed later) is waited for, with a warning.
    /// Everything else passes through.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        value_parser = settings::parse_cache_resource,
        default_value = "pods,nodes,services,endpoints,endpointslices.discovery.k8s.io,namespaces,configmaps,runtimeclasses.node.k8s.io,csidrivers.storage.k8s.io"
    )]
    pub cache_resources: Vec<CacheResource>,

    /// Per-resource cache sizes in the API server's syntax, resource[.group]#size;
    /// a size of 0 turns that resource's cache off (other sizes are accepted and
    /// ignored: capacity adapts on its own).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = settings::parse_watch_cache_size)]
    pub watch_cache_sizes: Vec<WatchCacheSize>,

    /// Start the caches at start-up instead of on first request, and report
    /// ready only once they are synced.
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub cache_warm: bool,

    /// Gzip the answers served from the cache as kube-apiserver does: for a
    /// client whose Accept-Encoding names gzip, a GET or LIST over 128 KiB
    /// and every watch-list stream, with `Content-Encoding: gzip` and
    /// `Vary: Accept-Encoding`. `false` never compresses them. Requests that
    /// pass through get the API server's own encoding either way.
    #[arg(long, value_name = "BOOL", default_value_t = true, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub compress_responses: bool,

    /// Narrows one resource's upstream watch, e.g.
    /// `pods=fieldSelector=spec.nodeName=node-1` on a node-local proxy. Requests
    /// whose selectors do not lie inside the scope pass through. Repeatable.
    #[arg(long, value_name = "RESOURCE=SELECTORS", value_parser = settings::parse_cache_scope)]
    pub cache_scope: Vec<CacheScope>,

    /// How long events are kept for watchers resuming from a resourceVersion;
    /// the history grows and shrinks to cover this window, as the API server's does.
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = parse_duration)]
    pub events_history_window: Duration,

    /// How long a watcher may stay behind by a full buffer (1,024 events)
    /// before it is taken off live delivery: it then catches up from the
    /// events history, in order, and rejoins; only one that falls behind the
    /// history itself (--events-history-window) ends, with 410 Expired.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub slow_watcher_grace: Duration,

    /// How often each cache is compared with the upstream at the same
    /// resourceVersion (a paginated metadata-only LIST at exactly the
    /// cache's version), jittered up to half as long again; 0 turns the
    /// check off. On a difference the cache is relisted, and consistent
    /// reads pass through until it is.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub consistency_check_period: Duration,

    /// Keep the caches of --persist-resources on disk in this directory (made
    /// 0700; files 0600), so that a restart serves them before the upstream
    /// answers, even while it cannot be reached (docs/node-local.md). Each
    /// store is checked at start; one that fails is moved aside and its
    /// resource starts cold.
    #[arg(long, value_name = "PATH")]
    pub persist_dir: Option<PathBuf>,

    /// The cached resources kept in --persist-dir, comma-separated, as
    /// plural[.group] (`pods`, `endpointslices.discovery.k8s.io`). `*`: every
    /// cached resource except Secrets, which are persisted only when named.
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "persist_dir")]
    pub persist_resources: Vec<String>,

    /// Encrypt the persisted objects at rest with AES-256-GCM, with the
    /// 32-byte key this file holds in base64 (as the API server's aesgcm
    /// EncryptionConfiguration keys). A store written with another key, or
    /// without one, stops watchmux at start-up with the file to remove.
    #[arg(long, value_name = "PATH", requires = "persist_dir")]
    pub persist_encryption_key_file: Option<PathBuf>,

    /// While the upstream cannot be reached, answer consistent LISTs and
    /// watch-lists from the cache's unproven state (the last state it knew)
    /// instead of failing them; logged per resource and shown by
    /// watchmux_cache_serving_unproven and /readyz?verbose. With
    /// --upstream-identity=client, cache reads by watchmux's own upstream
    /// identity (the node's) are also admitted without a review while the
    /// upstream is down. For node-local use, where the last known state
    /// beats none.
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub serve_stale_when_upstream_unreachable: bool,

    /// How downstream clients are trusted. `trusted-local`: clients are not
    /// authenticated and act with watchmux's identity (one pod, one identity);
    /// the API listener must then be loopback or a unix socket. `delegated`:
    /// clients authenticate with a client certificate (--client-ca-file) or a
    /// bearer token (TokenReview), reads served from the cache are authorized
    /// with SubjectAccessReviews, and everything else goes upstream
    /// impersonating the caller.
    #[arg(long, value_enum, default_value_t = AuthMode::TrustedLocal)]
    pub auth_mode: AuthMode,

    /// Let trusted-local mode listen on a non-loopback address. Anyone who can
    /// reach the port then acts with watchmux's identity.
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_unauthenticated_remote: bool,

    /// Let delegated mode serve plain HTTP on a non-loopback address. Bearer
    /// tokens then cross the network in clear, and kubectl sends none over
    /// plain HTTP, so its callers are anonymous; use TLS (--tls-cert-file).
    #[arg(long, value_name = "BOOL", default_value_t = false, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_insecure_delegated: bool,

    /// trusted-local: host names a request may name in Host (HTTP/2
    /// :authority), as regular expressions matched without the port,
    /// comma-separated, as `kubectl proxy --accept-hosts`. Others get 403:
    /// this stops web pages that rebind their DNS to loopback from using
    /// watchmux's identity through a browser. Not checked on the unix socket
    /// or in delegated mode.
    #[arg(long, value_name = "REGEXES", value_delimiter = ',', default_value = DEFAULT_ACCEPT_HOSTS)]
    pub accept_hosts: Vec<String>,

    /// trusted-local: request paths refused with 403 (regular expressions,
    /// comma-separated, matched against the decoded path), as
    /// `kubectl proxy --reject-paths`, whose default this is: exec and attach,
    /// which in this mode would run with watchmux's rights. `--reject-paths=`
    /// refuses nothing. Not applied in delegated mode.
    #[arg(long, value_name = "REGEXES", value_delimiter = ',', default_value = crate::server::gates::reject_paths::DEFAULT_REJECT_PATHS)]
    pub reject_paths: Vec<String>,

    /// PEM CA bundle that client certificates are verified against
    /// (delegated mode, with --tls-cert-file). The subject's CN is the user,
    /// its O entries the groups, as kube-apiserver reads them.
    #[arg(long, value_name = "PATH", requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,

    /// Delegated mode: a request without credentials acts as system:anonymous,
    /// as kube-apiserver's own default does; `false` answers it 401.
    #[arg(long, value_name = "BOOL", default_value_t = true, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub anonymous_auth: bool,

    /// How long an accepted bearer token is trusted before it is reviewed
    /// again (never past the token's own expiry).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub authentication_token_cache_ttl: Duration,

    /// How long a rejected bearer token stays rejected without a new review.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub authentication_token_negative_cache_ttl: Duration,

    /// How long an "allowed" SubjectAccessReview answer is reused.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub authorization_cache_authorized_ttl: Duration,

    /// How long a "denied" SubjectAccessReview answer is reused.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub authorization_cache_unauthorized_ttl: Duration,

    /// delegated: who requests that pass through act as upstream.
    /// `impersonate`: watchmux's credentials impersonating the caller (needs
    /// the right to impersonate anyone). `client`: the caller's own bearer
    /// token as sent, no credentials for anonymous callers, and watchmux's
    /// credentials only for a client certificate of watchmux's own identity;
    /// other certificate clients are refused on pass-through. With a node's
    /// kubelet credentials this holds no right the node does not have.
    #[arg(long, value_enum, default_value_t = UpstreamIdentityMode::Impersonate)]
    pub upstream_identity: UpstreamIdentityMode,

    /// TokenReviews and SubjectAccessReviews sent upstream at once (delegated
    /// mode). Clients choose what needs a review (tokens, selectors), so the
    /// number in flight is bounded; one caller (a user, all anonymous
    /// requests, or a client address for tokens under review) holds at most
    /// a quarter of the slots and waiting callers take turns. A review that
    /// finds no free slot within its 10 s limit fails closed (401 or 403).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_concurrent_reviews: usize,

    /// Requests other than watches and other long-running ones that may be in
    /// progress at once, each until its answer has been sent (an answer of
    /// 4 KiB or less at once; one its client does not read at most a minute,
    /// kube-apiserver's request timeout); more get 429 with Retry-After.
    /// 0: no limit.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub max_requests_inflight: usize,

    /// Seats for the reads watchmux answers from its cache (a LIST while its
    /// answer is built, not while it is read; a watch until its initial
    /// events are written, its client reading), split between the
    /// API server's default priority levels by their shares: kubelets,
    /// kube-system controllers, service accounts and other users each have
    /// their own, and within a level each user (trusted-local: each
    /// connection) queues on its own, in turn. `system:masters` is exempt. A
    /// full queue (300, as APF's six queues of 50 hold for one flow) or a longer wait gets the API server's 429. 0: off.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub fairness_seats: usize,

    /// The longest a cached read waits for a seat before its 429.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub fairness_queue_wait: Duration,

    /// Watches one user (trusted-local: one connection) may start per second
    /// from the cache, on average; more get 429. Generous: a flood limit (the
    /// initial events of watches are bounded by the seats).
    #[arg(long, value_name = "N", default_value_t = 100.0)]
    pub fairness_watch_starts_per_second: f64,

    /// Watches one user (trusted-local: one connection) may start at once.
    #[arg(long, value_name = "N", default_value_t = 2000.0)]
    pub fairness_watch_start_burst: f64,

    /// Downstream connections that may be open at once; requests on further
    /// connections get 429 and the connection is closed. 0: no limit but
    /// the open-file limit's. Lowered at start to what the open-file limit
    /// allows, with room kept for upstream connections and files.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub max_connections: usize,

    /// Downstream connections one source address may have open at once;
    /// further ones get 429 and are closed, as over --max-connections.
    /// 0: a quarter of --max-connections. Unix-socket clients have no share.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_connections_per_address: usize,

    /// Downstream connections one user may hold at once (delegated auth:
    /// a connection is its first authenticated, non-anonymous request's
    /// user); a request that would take one more gets 429 and its
    /// connection is closed. 0: a half of --max-connections (a DaemonSet's
    /// pods share one service account).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_connections_per_user: usize,

    /// How long an HTTP/2 connection may have no request in progress before
    /// it is sent GOAWAY and closed, as kube-apiserver's 90 s (PINGs do not
    /// count). HTTP/1.1 connections close after 30 s without a request.
    #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = parse_duration)]
    pub idle_connection_timeout: Duration,

    /// The chance, per HTTP/2 request, that its answer ends its connection
    /// with GOAWAY (streams already open, watches too, run to their ends), so
    /// that clients behind a load balancer spread over the replicas again
    /// after a rollout: kube-apiserver's --goaway-chance. 0 (off) to 0.02
    /// (one request in fifty); 0.001 is its recommended start. Only behind a
    /// load balancer with several replicas; HTTP/1.1 and the unix socket
    /// never get it.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0, value_parser = parse_goaway_chance)]
    pub goaway_chance: f64,

    /// How long an HTTP/2 connection is served before it is sent GOAWAY,
    /// each connection's within ±10 % of it, as gRPC's MaxConnectionAge: its
    /// watch streams end as at a graceful shutdown (the client watches again
    /// from its resourceVersion, through the load balancer), other requests
    /// run on for --max-connection-age-grace. Balances clients with long
    /// watches and few requests, which --goaway-chance barely moves, over
    /// the replicas behind a load balancer after a rollout. 0: no maximum.
    /// HTTP/1.1 watches move at their own ends; the unix socket never.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub max_connection_age: Duration,

    /// How long requests other than watches still run on a connection at
    /// its maximum age (as gRPC's MaxConnectionAgeGrace); then it is closed.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub max_connection_age_grace: Duration,

    /// Bytes that pass-through answers may hold for clients that do not read
    /// them, in upstream stream windows (256 KiB each): an answer other than a
    /// watch (or another long-running one) holds one until its body has been
    /// sent, a watch only while its client is behind; one client address
    /// holds at most a quarter. A request that finds none gets 429 with
    /// Retry-After. 0: no budget.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub passthrough_buffer_bytes: u64,

    /// How long a pass-through answer may wait for its client to read it
    /// while the upstream has more to send; then its stream is reset, and
    /// its upstream stream with it. A watch whose client does not read but
    /// that has no event waiting is left alone.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub passthrough_stall_timeout: Duration,

    /// Largest request body (by Content-Length) of a create, update, patch or
    /// delete; larger ones get the API server's 413. 0: no limit.
    #[arg(long, value_name = "BYTES", default_value_t = 3 * 1024 * 1024)]
    pub max_request_body_bytes: u64,

    /// Write HTTP/2 connections (TLS, h2c and the unix socket) through a
    /// write-behind buffer: frames that queue up while the socket is busy (up
    /// to 32 KiB a connection) go out in one write, instead of one write per
    /// frame (the h2 crate flushes after every large DATA frame). `false`
    /// writes each frame as hyper hands it over.
    #[arg(long, value_name = "BOOL", default_value_t = true, value_parser = parse_bool_flag, action = ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub h2_write_batching: bool,

    /// Log line format, as Kubernetes components' --logging-format
    /// (--log-format is the same flag, its earlier name).
    #[arg(long, visible_alias = "log-format", value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub logging_format: LogFormat,

    /// Log verbosity as Kubernetes components' klog -v, 0 to 10, for
    /// watchmux's own lines: 0 and 1 log at info, 2 to 4 at debug, 5 and up
    /// at trace (libraries, hyper, h2, rustls, stay at info). RUST_LOG, when
    /// set, wins over it: its directives name any level for any target.
    #[arg(short = 'v', long = "v", value_name = "LEVEL", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=10))]
    pub verbosity: u8,
}

/// How log lines are written (`--logging-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl Args {
    /// The upstream client's options (reads `--upstream-fallback-ca-file`).
    pub fn upstream_options(&self) -> anyhow::Result<crate::upstream::UpstreamOptions> {
        let fallback_ca_pem = match &self.upstream_fallback_ca_file {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("--upstream-fallback-ca-file: reading {}", path.display()))?,
            ),
            None => None,
        };
        Ok(crate::upstream::UpstreamOptions {
            servers: self.upstream_servers.clone(),
            fallback_servers: self.upstream_fallback_servers.clone(),
            fallback_ca_pem,
            fallback_tls_server_name: self.upstream_fallback_tls_server_name.clone(),
            discover_servers: self.upstream_discover_servers,
            http1_only: self.upstream_http1_only,
            timeouts: crate::upstream::UpstreamTimeouts {
                connect: self.upstream_connect_timeout,
                tls_handshake: self.upstream_tls_handshake_timeout,
                response_header: self.upstream_response_header_timeout,
                when_down: self.upstream_timeout,
            },
        })
    }

    /// Whether the flags' trust settings may start: a warning to log, or a
    /// refusal.
    pub fn check_trust(&self) -> Result<Option<String>, String> {
        match self.auth_mode {
            AuthMode::TrustedLocal => {
                if self.client_ca_file.is_some() {
                    return Err("--client-ca-file needs --auth-mode delegated".into());
                }
                if self.listen.ip().is_loopback() {
                    Ok(None)
                } else if self.allow_unauthenticated_remote {
                    Ok(Some(format!(
                        "--auth-mode trusted-local on {}: anyone who can reach it acts with watchmux's identity",
                        self.listen
                    )))
                } else {
                    Err(format!(
                        "--auth-mode trusted-local does not authenticate clients, so it listens only on loopback \
                         or a unix socket; {} is neither. Use --auth-mode delegated, or \
                         --allow-unauthenticated-remote if every client may act as watchmux",
                        self.listen
                    ))
                }
            }
            AuthMode::Delegated if self.tls_cert_file.is_none() && !self.listen.ip().is_loopback() => {
                let why = "bearer tokens cross the network in clear, and kubectl sends none over plain HTTP \
                           (its callers are anonymous)";
                if self.allow_insecure_delegated {
                    Ok(Some(format!("--auth-mode delegated without TLS on {}: {why}", self.listen)))
                } else {
                    Err(format!(
                        "--auth-mode delegated without TLS on {}: {why}. Give --tls-cert-file and \
                         --tls-private-key-file, or --allow-insecure-delegated to serve plain HTTP anyway",
                        self.listen
                    ))
                }
            }
            AuthMode::Delegated if self.tls_cert_file.is_none() => Ok(Some(format!(
                "--auth-mode delegated without TLS on {}: kubectl sends no bearer token over plain HTTP, so its \
                 callers are anonymous here (certificates need TLS too); fine for tests and same-host clients \
                 that send tokens",
                self.listen
            ))),
            AuthMode::Delegated => Ok(None),
        }
    }
}

/// A flag value as it is spelled on the command line (`trusted-local`, not
/// `TrustedLocal`), for log lines that operators match against their flags.
pub fn spelled_as_flag<E: ValueEnum>(value: &E) -> String {
    value.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default()
}

/// A boolean flag's value as pflag reads `--flag=<value>` (Go's
/// `strconv.ParseBool`); `--flag` alone is `true`, and a separate `true`
/// after it is not its value (`require_equals`), as in pflag.
fn parse_bool_flag(value: &str) -> Result<bool, String> {
    go_rules::strconv::parse_bool(value)
        .ok_or_else(|| format!("{value:?} is not a boolean: true or false (or 1, 0, t, f, TRUE, FALSE, True, False)"))
}

/// Parses `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 30s, 500ms, 2m"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("invalid duration unit {unit:?} in {s:?}: use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// How downstream clients are trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// Clients are not authenticated; watchmux acts with its own identity.
    TrustedLocal,
    /// Clients are authenticated and authorized by the upstream API server.
    Delegated,
}

/// One `--cache-resources` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheResource {
    /// `*`: every resource that can be listed and watched.
    All,
    /// A name as kubectl takes one: plural, singular or short, `[.group]`.
    One(ResourceName),
    /// An empty entry: `--cache-resources=` caches nothing (a pure
    /// pass-through proxy).
    Empty,
}

/// The API listener's default address: loopback, on the port the chart's
/// node-local DaemonSet uses, clear of kube-apiserver's 6443.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7443";

/// `kubectl proxy`'s default `--accept-hosts`: the loopback names.
pub const DEFAULT_ACCEPT_HOSTS: &str = r"^localhost$,^127\.0\.0\.1$,^\[::1\]$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_servers_come_with_their_own_tls_and_not_with_discovery() {
        let parse = |extra: &[&str]| Args::try_parse_from(std::iter::once("watchmux").chain(extra.iter().copied()));
        let ca = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca.path(), b"pem").unwrap();
        let ca_flag = format!("--upstream-fallback-ca-file={}", ca.path().display());
        let args = parse(&["--upstream-fallback-servers=https://a:6443,https://b:6443", &ca_flag]).unwrap();
        let opts = args.upstream_options().unwrap();
        assert_eq!(opts.fallback_servers, ["https://a:6443", "https://b:6443"]);
        assert_eq!(opts.fallback_ca_pem.as_deref(), Some(&b"pem"[..]));
        assert!(parse(&["--upstream-fallback-servers=https://a:6443", "--upstream-discover-servers"]).is_err());
        assert!(parse(&[&ca_flag]).is_err(), "a fallback CA without fallback servers");
        assert!(parse(&["--upstream-fallback-tls-server-name=kubernetes"]).is_err());
        let missing =
            parse(&["--upstream-fallback-servers=https://a:6443", "--upstream-fallback-ca-file=/nonexistent"]);
        let err = missing.unwrap().upstream_options().unwrap_err();
        assert!(format!("{err:#}").contains("--upstream-fallback-ca-file"), "{err:#}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("3 days").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let args = Args::try_parse_from(["watchmux"]).unwrap();
        assert_eq!(args.listen, "127.0.0.1:7443".parse().unwrap());
        assert_eq!(args.admin_listen, "127.0.0.1:9444".parse().unwrap());
        assert_eq!(args.shutdown_grace, Duration::from_secs(30));
        assert!(args.kubeconfig.is_none() && args.listen_unix.is_none());
        assert_eq!(args.cache_resources.len(), 9);
        assert!(
            args.cache_resources.contains(&CacheResource::One(ResourceName::parse("endpointslices.discovery.k8s.io")))
        );
        assert_eq!(args.events_history_window, Duration::from_secs(75));
        assert!(!args.cache_warm);
        assert!(args.persist_dir.is_none() && args.persist_resources.is_empty());
        assert!(!args.serve_stale_when_upstream_unreachable);
    }

    #[test]
    fn persisting_names_its_resources_and_never_secrets_by_star() {
        let args = Args::try_parse_from(["watchmux", "--persist-dir", "/d", "--persist-resources", "*,configmaps"]);
        let persist = args.unwrap().persist_config();
        let gr = crate::cache::catalog::resolve::GroupResource::parse;
        assert!(persist.resources.persists(&gr("pods")) && persist.resources.persists(&gr("deployments.apps")));
        assert!(!persist.resources.persists(&gr("secrets")), "secrets only when named");
        let named = Args::try_parse_from(["watchmux", "--persist-dir", "/d", "--persist-resources", "secrets"]);
        assert!(named.unwrap().persist_config().resources.persists(&gr("secrets")));
        assert!(Args::try_parse_from(["watchmux", "--persist-resources", "pods"]).is_err(), "needs a directory");
    }

    #[test]
    fn flag_values_are_logged_as_they_are_spelled_on_the_command_line() {
        assert_eq!(spelled_as_flag(&AuthMode::TrustedLocal), "trusted-local");
        assert_eq!(spelled_as_flag(&UpstreamIdentityMode::Impersonate), "impersonate");
        assert_eq!(spelled_as_flag(&LogFormat::Json), "json");
    }

    #[test]
    fn tls_version_and_cipher_suite_flags() {
        let tls = ["watchmux", "--tls-cert-file", "c", "--tls-private-key-file", "k"];
        let with = |extra: &[&str]| Args::try_parse_from(tls.iter().chain(extra));
        let defaults = with(&[]).unwrap();
        assert_eq!((defaults.tls_min_version, defaults.tls_cipher_suites.len()), (TlsMinVersion::Tls12, 0));
        let suites = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384";
        let set = with(&["--tls-min-version", "VersionTLS13", "--tls-cipher-suites", suites]).unwrap();
        assert_eq!((set.tls_min_version, set.tls_cipher_suites.len()), (TlsMinVersion::Tls13, 2));
        let refused =
            with(&["--tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_CBC_SHA"]);
        assert!(refused.unwrap_err().to_string().contains("TLS_RSA_WITH_AES_128_CBC_SHA"));
        assert!(with(&["--tls-min-version", "VersionTLS11"]).is_err());
        // Without TLS on the listener they would mean nothing.
        assert!(Args::try_parse_from(["watchmux", "--tls-min-version", "VersionTLS13"]).is_err());
    }

    #[test]
    fn tls_cert_requires_key() {
        assert!(Args::try_parse_from(["watchmux", "--tls-cert-file", "c.pem"]).is_err());
        assert!(Args::try_parse_from(["watchmux", "--tls-cert-file", "c", "--tls-private-key-file", "k"]).is_ok());
    }

    #[test]
    fn trusted_local_stays_on_loopback_unless_told_otherwise() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["watchmux"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).unwrap()
        };
        assert_eq!(parse(&[]).check_trust(), Ok(None));
        assert!(parse(&["--listen", "0.0.0.0:6443"]).check_trust().is_err());
        let warned = parse(&["--listen", "0.0.0.0:6443", "--allow-unauthenticated-remote"]).check_trust();
        assert!(warned.unwrap().unwrap().contains("watchmux's identity"));
        // Delegated on plain HTTP: refused off loopback unless told (tokens in
        // clear, kubectl sends none), a warning with the reason on loopback.
        let plain = parse(&["--listen", "0.0.0.0:6443", "--auth-mode", "delegated"]).check_trust();
        assert!(plain.unwrap_err().contains("--allow-insecure-delegated"));
        let allowed = ["--listen", "0.0.0.0:6443", "--auth-mode", "delegated", "--allow-insecure-delegated"];
        assert!(parse(&allowed).check_trust().unwrap().unwrap().contains("in clear"));
        let local = parse(&["--auth-mode", "delegated"]).check_trust().unwrap().unwrap();
        assert!(local.contains("kubectl sends no bearer token over plain HTTP"), "{local}");
        let mtls = ["--auth-mode", "delegated", "--listen", "0.0.0.0:6443", "--tls-cert-file", "c"];
        let mut mtls = mtls.to_vec();
        mtls.extend(["--tls-private-key-file", "k", "--client-ca-file", "ca"]);
        assert_eq!(parse(&mtls).check_trust(), Ok(None));
        assert!(
            parse(&["--tls-cert-file", "c", "--tls-private-key-file", "k", "--client-ca-file", "ca"])
                .check_trust()
                .is_err()
        );
        assert!(!parse(&["--auth-mode", "delegated", "--anonymous-auth=false"]).anonymous_auth);
    }

    /// Every boolean flag's id, with its default, from clap's own
    /// definition (a bool value parser), so a new one is checked too.
    fn boolean_flags() -> Vec<(String, bool)> {
        use clap::CommandFactory;
        let command = Args::command();
        let booleans = command.get_arguments().filter(|arg| {
            arg.get_value_parser().type_id() == clap::builder::ValueParser::bool().type_id()
                || arg.get_value_names().is_some_and(|names| names == ["BOOL"])
        });
        booleans.map(|arg| (arg.get_id().to_string(), arg.get_default_values() == ["true"])).collect()
    }

    /// Every boolean flag reads as pflag's: bare is true, `=<value>` any of
    /// ParseBool's spellings, defaults as documented; these eleven are all.
    #[test]
    fn boolean_flags_take_pflags_spellings() {
        use clap::CommandFactory;
        let flags = boolean_flags();
        let mut names: Vec<&str> = flags.iter().map(|(id, _)| id.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "allow_insecure_delegated",
                "allow_unauthenticated_remote",
                "anonymous_auth",
                "cache_warm",
                "compress_responses",
                "h2_write_batching",
                "serve_stale_when_upstream_unreachable",
                "upstream_discover_servers",
                "upstream_gzip_lists",
                "upstream_http1_only",
                "upstream_watch_list",
            ]
        );
        let value = |argv: &[&str], id: &str| {
            let matches = Args::command().try_get_matches_from(std::iter::once("watchmux").chain(argv.iter().copied()));
            let matches = matches.unwrap_or_else(|err| panic!("{argv:?}: {err}"));
            *matches.get_one::<bool>(id).unwrap()
        };
        for (id, default) in &flags {
            let flag = format!("--{}", id.replace('_', "-"));
            assert_eq!(value(&[], id), *default, "{flag} default");
            assert!(value(&[&flag], id), "{flag} bare");
            for spelled in ["true", "1", "t", "T", "TRUE", "True"] {
                assert!(value(&[&format!("{flag}={spelled}")], id), "{flag}={spelled}");
            }
            for spelled in ["false", "0", "f", "F", "FALSE", "False"] {
                assert!(!value(&[&format!("{flag}={spelled}")], id), "{flag}={spelled}");
            }
            for refused in ["yes", "", "tRuE"] {
                let err = Args::try_parse_from(["watchmux", &format!("{flag}={refused}")]).unwrap_err();
                assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{flag}={refused}");
            }
        }
    }

    /// As pflag: `--flag false` is the bare flag (true) and then a stray
    /// `false`, refused, never `--flag=false`; and a bare flag does not
    /// take the next flag as its value.
    #[test]
    fn a_boolean_flags_value_needs_an_equals_sign() {
        for (id, _) in boolean_flags() {
            let flag = format!("--{}", id.replace('_', "-"));
            for next in ["false", "true"] {
                let err = Args::try_parse_from(["watchmux", &flag, next]).unwrap_err();
                assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{flag} {next}");
            }
        }
        let args = Args::try_parse_from(["watchmux", "--compress-responses", "--cache-warm", "--listen", ":7443"]);
        let args = args.unwrap();
        assert!(args.compress_responses && args.cache_warm);
        assert_eq!(args.listen, "[::]:7443".parse().unwrap());
        let off = Args::try_parse_from(["watchmux", "--compress-responses=false", "--anonymous-auth=0"]).unwrap();
        assert!(!off.compress_responses && !off.anonymous_auth && !off.cache_warm);
    }

    /// `--listen` and `--admin-listen` take Go's `:port` (every address);
    /// the trust checks see every address as not loopback.
    #[test]
    fn listen_addresses_take_gos_empty_host() {
        let args = Args::try_parse_from(["watchmux", "--listen=:6443", "--admin-listen=:9444"]).unwrap();
        assert!(args.listen.ip().is_unspecified() && args.listen.port() == 6443);
        assert!(args.admin_listen.ip().is_unspecified() && args.admin_listen.port() == 9444);
        assert!(args.check_trust().unwrap_err().contains("--allow-unauthenticated-remote"));
        for every in ["--listen=:6443", "--listen=[::]:6443"] {
            let remote = Args::try_parse_from(["watchmux", every, "--allow-unauthenticated-remote"]).unwrap();
            assert!(remote.check_trust().unwrap().unwrap().contains("watchmux's identity"), "{every}");
        }
        assert!(Args::try_parse_from(["watchmux", "--listen=localhost:7443"]).is_err());
    }

    /// `--logging-format` as Kubernetes components spell it, and the
    /// earlier `--log-format` as its alias.
    #[test]
    fn logging_format_has_both_spellings() {
        for flag in ["--logging-format=json", "--log-format=json"] {
            assert_eq!(Args::try_parse_from(["watchmux", flag]).unwrap().logging_format, LogFormat::Json, "{flag}");
        }
        assert_eq!(Args::try_parse_from(["watchmux"]).unwrap().logging_format, LogFormat::Text);
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Args::command().debug_assert();
    }
}
