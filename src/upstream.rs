//! The client side: the connections to the upstream kube-apiserver.
//!
//! Requests are sent over HTTP/2 when the upstream offers it in ALPN, else
//! over pooled HTTP/1.1 connections, on four sets of connections per TLS
//! identity ([`Clients`]), so that no client's requests can hold what
//! another's need:
//!
//! - watchmux's own requests (cache lists and watches, discovery) share one
//!   pooled connection: watchmux reads every answer at once;
//! - the readiness probe and the freshness proofs of consistent reads have
//!   a connection of their own ([`probe_lane`]), replaced when a probe goes
//!   unanswered: one frozen connection neither hides a healthy upstream
//!   nor holds back the proofs;
//! - TokenReviews and SubjectAccessReviews have connections of their own,
//!   so a review never waits behind a pass-through body;
//! - passed-through requests, long-running ones included, go on a growing
//!   pool of HTTP/2 connections ([`streams`]) where a stream a client does
//!   not read holds its own window and slot and nothing else;
//! - upgrades (exec, attach, port-forward) get an HTTP/1.1 connection each,
//!   because HTTP/1.1 `Upgrade` is what those protocols speak.
//!
//! watchmux's own credentials are added here and nowhere else; when an exec
//! plugin issues a new client certificate, watchmux's connections (all four
//! sets) are replaced so that new requests present it. Where the upstream is
//! and which credentials to use come from a kubeconfig ([`kubeconfig`]).

pub(crate) mod bounded_read;
mod cert_files;
pub(crate) mod credentials;
pub(crate) mod endpoints;
mod exec;
mod exec_cache;
#[cfg(test)]
pub(crate) mod fake_server;
mod health;
pub mod kubeconfig;
mod probe_lane;
pub(crate) mod streams;
pub mod timeouts;
pub mod tls;
pub(crate) mod version;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::uri::{PathAndQuery, Scheme};
use http::{Request, Response, Uri, Version, header};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

use crate::body::{self, ProxyBody};
use crate::metrics as m;
use crate::upstream::kubeconfig::{UpstreamAuth, UpstreamConfig};
use cert_files::RotatingCertFiles;
use credentials::{CredentialSource, CredentialsError, WatchmuxAuth};
use endpoints::{Choice, Endpoint, EndpointDialer, Endpoints};
use exec::ClientIdentity;
pub use exec::ExecError;
use health::HealthCell;
pub use health::UpstreamHealth;
use streams::StreamPool;
pub use streams::UpstreamBody;
pub use timeouts::UpstreamTimeouts;
use timeouts::{ResponseHeaderOutcome, ResponseHeaderTimeout, TimedConnector};

/// How often readiness is probed.
const READINESS_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// How long one readiness probe may take before it counts as silent
/// (`health::UNRESPONSIVE_AFTER` silent probes in a row: unresponsive).
const READINESS_PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 pings: hyper sends one once a connection has read nothing for
/// the interval (a connection that streams events never needs one), and
/// closes the connection when its ack does not come within the timeout. A
/// watch over a connection whose peer vanished or froze (no FIN, no RST)
/// is found dead within their sum, 5 s, instead of hanging; the cost is a
/// PING frame every 2 s on a quiet connection, of which watchmux holds a
/// handful.
const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
/// TCP keepalive, the same protection for HTTP/1.1 connections: the
/// kernel probes after 5 s without traffic, every 2 s, and gives up after
/// 3 unanswered probes (about 11 s).
const TCP_KEEPALIVE: Duration = Duration::from_secs(5);
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Why the upstream client could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The TLS configuration (CA, client certificate) is unusable.
    #[error("building the upstream TLS configuration")]
    Tls(#[from] tls::TlsConfigError),
    /// A credential (token file, ...) could not be loaded.
    #[error("loading upstream credentials")]
    Credentials(#[from] CredentialsError),
    /// The server URL has another scheme.
    #[error("upstream server URL {0} must be http:// or https://")]
    Scheme(Uri),
    /// `tls-server-name` is not a DNS name or IP address.
    #[error("invalid tls-server-name {0:?}")]
    ServerName(String),
    /// `--upstream-servers` names something that is not an endpoint.
    #[error("{0}")]
    Servers(String),
}

/// Why a request could not be sent upstream.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// watchmux has no usable credential: its exec plugin failed. The
    /// plugin's stderr is left out (it is in the log): the message may go
    /// to a client.
    #[error("getting watchmux's upstream credentials: {}", .0.summary())]
    Credentials(Arc<ExecError>),
    /// A TLS configuration with the exec plugin's client certificate.
    #[error("configuring TLS with the exec plugin's client certificate")]
    ClientTls(#[source] tls::TlsConfigError),
    /// The request failed on its way (connecting, TLS, the connection).
    #[error(transparent)]
    Request(#[from] hyper_util::client::legacy::Error),
    /// No pass-through connection could be opened (connecting, TLS, the
    /// HTTP/2 handshake); requests that waited for the attempt share it.
    #[error("connecting to the upstream: {0}")]
    Connect(Arc<str>),
    /// A stream of a pooled pass-through connection failed.
    #[error("sending on a pooled upstream connection")]
    Stream(#[source] hyper::Error),
    /// The request was sent; no response headers came in time.
    #[error(transparent)]
    ResponseHeaders(ResponseHeaderTimeout),
    /// A probe or proof got no response headers within its bound; the
    /// probe lane's connection has been replaced.
    #[error("no answer on the probe connection within {0:?}")]
    ProbeTimeout(Duration),
}

impl SendError {
    /// True when no connection could be made (or none tried: no credential).
    pub fn is_connect(&self) -> bool {
        match self {
            Self::Request(e) => e.is_connect(),
            Self::Credentials(_) | Self::ClientTls(_) | Self::Connect(_) => true,
            Self::Stream(_) | Self::ResponseHeaders(_) | Self::ProbeTimeout(_) => false,
        }
    }
}

/// How to talk to the upstream, beyond what the kubeconfig says.
#[derive(Debug, Clone, Default)]
pub struct UpstreamOptions {
    /// The API servers to dial instead of the kubeconfig's server
    /// (`--upstream-servers`; empty: the kubeconfig's): see [`endpoints`].
    pub servers: Vec<String>,
    /// Endpoints used only while none of the others is healthy
    /// (`--upstream-fallback-servers`): see [`endpoints`].
    pub fallback_servers: Vec<String>,
    /// The CA bundle (PEM) the fallback servers' certificates are checked
    /// against (`--upstream-fallback-ca-file`; none: the kubeconfig's).
    pub fallback_ca_pem: Option<Vec<u8>>,
    /// The name the fallback servers' certificates are checked against
    /// (`--upstream-fallback-tls-server-name`; none: each one's host).
    pub fallback_tls_server_name: Option<String>,
    /// Follow the `default/kubernetes` EndpointSlices too
    /// (`--upstream-discover-servers`).
    pub discover_servers: bool,
    /// Never negotiate HTTP/2 with the upstream.
    pub http1_only: bool,
    /// How long each step of a request may take (`--upstream-*-timeout`).
    pub timeouts: UpstreamTimeouts,
}

/// Dials the upstream: TCP, then TLS (or plain HTTP), bounded in time.
/// Dials one endpoint: TCP, then TLS (or plain HTTP), bounded in time.
type EndpointConnector = TimedConnector<HttpsConnector<HttpConnector>>;
/// Dials the upstream: one of its endpoints, the next when a dial fails.
type UpstreamConnector = EndpointDialer<EndpointConnector>;
type HttpsClient = Client<UpstreamConnector, ProxyBody>;

/// The credentials the upstream client attaches, the last header written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamCredential {
    /// watchmux's own: its bearer token, and its client certificate if the
    /// kubeconfig has one.
    Watchmux,
    /// This `Authorization` value and no client certificate.
    Header(http::HeaderValue),
    /// Nothing: no `Authorization`, no client certificate.
    None,
}

/// Which connections a passed-through request goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionKind {
    /// A stream of the pass-through pool ([`streams`]), long-running or not.
    Pooled,
    /// HTTP/1.1 on a connection of its own, which the upgrade takes over.
    Upgrade,
}

/// The connections of one TLS identity, one set per kind of traffic (see
/// the module's doc), built and replaced together.
struct Clients {
    /// watchmux's own requests.
    own: HttpsClient,
    /// The readiness probe and freshness proofs: a lane per endpoint,
    /// made when first needed, each dialing its endpoint only.
    probes: parking_lot::Mutex<Vec<(Arc<Endpoint>, Arc<probe_lane::ProbeLane>)>>,
    /// The dialer the probe lanes are pinned from.
    probe_dialer: UpstreamConnector,
    /// TokenReviews, SubjectAccessReviews, SelfSubjectReviews.
    reviews: HttpsClient,
    /// Passed-through requests.
    passthrough: StreamPool,
    /// Upgrades, one connection each, never reused.
    upgrades: HttpsClient,
}

/// Builds [`Clients`]: connectors and pools, given a TLS configuration.
struct ClientsBuilder {
    server_name: Option<ServerName<'static>>,
    /// The fallback servers' name, when they have their own.
    fallback_server_name: Option<ServerName<'static>>,
    opts: UpstreamOptions,
    endpoints: Arc<Endpoints>,
}

/// The TLS configurations of one identity: the endpoints', and the
/// fallback servers' when they have any.
struct TlsConfigs {
    primary: rustls::ClientConfig,
    fallback: Option<rustls::ClientConfig>,
}

impl ClientsBuilder {
    /// `cfg`'s TLS configurations: the fallback servers' checks their
    /// certificates against `--upstream-fallback-ca-file` when given.
    fn tls(&self, cfg: &UpstreamConfig) -> Result<TlsConfigs, tls::TlsConfigError> {
        let primary = tls::client_config(cfg)?;
        let fallback = if self.opts.fallback_servers.is_empty() {
            None
        } else {
            let ca = self.opts.fallback_ca_pem.clone();
            let verify = ca.is_some();
            Some(tls::client_config(&UpstreamConfig {
                insecure_skip_tls_verify: cfg.insecure_skip_tls_verify && !verify,
                ca_pem: ca.or_else(|| cfg.ca_pem.clone()),
                ..cfg.clone()
            })?)
        };
        Ok(TlsConfigs { primary, fallback })
    }

    fn connector(&self, tls: &TlsConfigs, http2: bool, choice: Choice) -> UpstreamConnector {
        let dialer = EndpointDialer::new(
            self.endpoints.clone(),
            choice,
            self.endpoint_connector(&tls.primary, &self.server_name, http2),
        );
        match &tls.fallback {
            Some(fallback) => {
                dialer.with_fallback(self.endpoint_connector(fallback, &self.fallback_server_name, http2))
            }
            None => dialer,
        }
    }

    /// Dials one endpoint with `tls`, checking its certificate against
    /// `server_name` (none: the endpoint's host).
    fn endpoint_connector(
        &self,
        tls: &rustls::ClientConfig,
        server_name: &Option<ServerName<'static>>,
        http2: bool,
    ) -> EndpointConnector {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(self.opts.timeouts.connect));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_keepalive_interval(Some(TCP_KEEPALIVE_INTERVAL));
        http.set_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));
        let builder = HttpsConnectorBuilder::new().with_tls_config(tls.clone()).https_or_http();
        let builder = match server_name {
            Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone())),
            None => builder,
        };
        let https = if http2 {
            builder.enable_http1().enable_http2().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        };
        TimedConnector::new(https, self.opts.timeouts.dial())
    }

    /// A pooled client, HTTP/2 when offered (one connection per upstream).
    fn pooled(&self, tls: &TlsConfigs) -> HttpsClient {
        Self::pooled_on(self.connector(tls, !self.opts.http1_only, Choice::Preferred))
    }

    /// A pooled client over `connector` (see [`Self::pooled`]).
    fn pooled_on(connector: UpstreamConnector) -> HttpsClient {
        Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            // The pass-through pool's windows (see `streams`), so that even
            // here a stream nobody reads cannot hold the connection's.
            .http2_initial_stream_window_size(streams::STREAM_WINDOW)
            .http2_initial_connection_window_size(streams::CONNECTION_WINDOW)
            .http2_keep_alive_interval(H2_KEEPALIVE_INTERVAL)
            .http2_keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector)
    }

    /// Every client of the identity `cfg` describes.
    fn build(&self, cfg: &UpstreamConfig) -> Result<Clients, tls::TlsConfigError> {
        let tls = &self.tls(cfg)?;
        let http1 = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(streams::HTTP1_IDLE)
            .build(self.connector(tls, false, Choice::Spread));
        Ok(Clients {
            own: self.pooled(tls),
            probes: Default::default(),
            probe_dialer: self.connector(tls, !self.opts.http1_only, Choice::Preferred),
            reviews: self.pooled(tls),
            passthrough: StreamPool::new(self.connector(tls, true, Choice::Spread), http1, !self.opts.http1_only),
            upgrades: Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_max_idle_per_host(0)
                .build(self.connector(tls, false, Choice::Spread)),
        })
    }
}

impl Clients {
    /// The probe lane of `endpoint`, made when first asked for; lanes of
    /// endpoints no longer in `current` are dropped.
    fn probe_lane(&self, endpoint: &Arc<Endpoint>, current: &[Arc<Endpoint>]) -> Arc<probe_lane::ProbeLane> {
        let mut lanes = self.probes.lock();
        lanes.retain(|(e, _)| current.iter().any(|c| Arc::ptr_eq(c, e)));
        if let Some((_, lane)) = lanes.iter().find(|(e, _)| Arc::ptr_eq(e, endpoint)) {
            return lane.clone();
        }
        let lane =
            Arc::new(probe_lane::ProbeLane::new(self.probe_dialer.pinned(endpoint.clone()), ClientsBuilder::pooled_on));
        lanes.push((endpoint.clone(), lane.clone()));
        lane
    }
}

/// watchmux's own connections, and the client certificate they present,
/// when it can change: the exec plugin's, or the one read from rotating
/// files (none: the kubeconfig's fixed one, if any).
struct OwnClients {
    clients: Arc<Clients>,
    identity: Option<Arc<ClientIdentity>>,
}

/// The upstream API server, as one shared client.
pub struct Upstream {
    scheme: Scheme,
    authority: http::uri::Authority,
    /// The server URL's path, without a trailing slash (usually empty).
    path_prefix: String,
    /// Connections that present watchmux's client certificate, if any;
    /// replaced when an exec plugin's certificate changes (requests in
    /// flight keep theirs, idle connections close as the old pool drops).
    own: parking_lot::RwLock<OwnClients>,
    builder: ClientsBuilder,
    /// The upstream configuration without credentials, for TLS
    /// configurations with an exec plugin's certificate.
    tls_base: UpstreamConfig,
    /// Connections that present no client certificate, for requests sent
    /// with a client's credentials or none: the API server authenticates a
    /// client certificate before a bearer token, so those must never go on
    /// a connection carrying watchmux's. The same clients as `own` when
    /// watchmux has no client certificate (and no exec plugin, which may
    /// issue one).
    bare: parking_lot::RwLock<Option<Arc<Clients>>>,
    /// The kubeconfig's own configuration, credentials and all: `own`'s
    /// when it has no identity that changes.
    own_base: UpstreamConfig,
    /// The kubeconfig's client certificate when it came from files, read
    /// again as they rotate (the kubelet's, in nodeLocal mode).
    cert_files: Option<RotatingCertFiles>,
    /// The kubeconfig's client certificate when it is inline data (no files
    /// to read again).
    inline_cert_pem: Option<Vec<u8>>,
    credentials: CredentialSource,
    health: HealthCell,
    /// Counts [`Self::renew_connections`]: a cache's upstream watch ends
    /// when it moves, and resumes on the new connections.
    renewals: tokio::sync::watch::Sender<u64>,
    /// Set once start-up has read the Kubernetes minor (with a cache or
    /// delegated auth): only then do the readiness probes follow it
    /// (`version::refresh`); a pass-through watchmux writes no form of its own.
    follows_minor: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("authority", &self.authority).finish_non_exhaustive()
    }
}

impl Upstream {
    /// A client for the upstream `cfg` describes.
    pub fn new(cfg: &UpstreamConfig, opts: UpstreamOptions) -> Result<Self, UpstreamError> {
        let scheme = cfg.server.scheme().cloned().ok_or_else(|| UpstreamError::Scheme(cfg.server.clone()))?;
        if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
            return Err(UpstreamError::Scheme(cfg.server.clone()));
        }
        let authority = cfg.server.authority().cloned().ok_or_else(|| UpstreamError::Scheme(cfg.server.clone()))?;
        let server_name = cfg
            .tls_server_name
            .as_ref()
            .map(|n| ServerName::try_from(n.clone()).map_err(|_| UpstreamError::ServerName(n.clone())))
            .transpose()?;
        let fallback_server_name = opts
            .fallback_tls_server_name
            .as_ref()
            .map(|n| ServerName::try_from(n.clone()).map_err(|_| UpstreamError::ServerName(n.clone())))
            .transpose()?;
        let given = if opts.servers.is_empty() {
            vec![endpoints::endpoint_of(&cfg.server)]
        } else {
            endpoints::parse_servers("upstream-servers", &opts.servers, &cfg.server).map_err(UpstreamError::Servers)?
        };
        let fallbacks = endpoints::parse_servers("upstream-fallback-servers", &opts.fallback_servers, &cfg.server)
            .map_err(UpstreamError::Servers)?;
        let endpoints = Endpoints::with_fallbacks(given, fallbacks);
        let builder = ClientsBuilder { server_name, fallback_server_name, opts, endpoints };
        let own = builder.build(cfg)?;
        let anonymous =
            UpstreamConfig { client_cert_pem: None, client_key_pem: None, auth: UpstreamAuth::None, ..cfg.clone() };
        let may_present_cert = cfg.client_cert_pem.is_some() || matches!(cfg.auth, UpstreamAuth::Exec(_));
        let bare = if may_present_cert { Some(Arc::new(builder.build(&anonymous)?)) } else { None };
        let cert_files = match (&cfg.client_cert_files, &cfg.client_cert_pem, &cfg.client_key_pem) {
            (Some(files), Some(cert), Some(key)) => {
                Some(RotatingCertFiles::new(files.clone(), cert.clone(), key.clone()))
            }
            _ => None,
        };
        let identity = cert_files.as_ref().map(RotatingCertFiles::current);

        Ok(Self {
            scheme,
            authority,
            path_prefix: cfg.server.path().trim_end_matches('/').to_owned(),
            own: parking_lot::RwLock::new(OwnClients { clients: Arc::new(own), identity }),
            builder,
            tls_base: anonymous,
            bare: parking_lot::RwLock::new(bare),
            own_base: cfg.clone(),
            inline_cert_pem: if cfg.client_cert_files.is_none() { cfg.client_cert_pem.clone() } else { None },
            cert_files,
            credentials: CredentialSource::new(&cfg.auth, cfg)?,
            health: HealthCell::default(),
            renewals: tokio::sync::watch::Sender::new(0),
            follows_minor: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the upstream's answers come over HTTP/1.1:
    /// `--upstream-http1-only`, or a plain-HTTP server (no ALPN to offer
    /// HTTP/2 on).
    pub(crate) fn http1_only(&self) -> bool {
        self.builder.opts.http1_only || self.server().scheme() == Some(&Scheme::HTTP)
    }

    /// The upstream URI for a downstream path and query.
    pub fn uri_for(&self, path_and_query: Option<&PathAndQuery>) -> Uri {
        let pq = path_and_query.map_or("/", PathAndQuery::as_str);
        let pq = if self.path_prefix.is_empty() { pq.to_owned() } else { format!("{}{pq}", self.path_prefix) };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(pq)
            .build()
            .expect("scheme, authority and a path taken from a valid URI")
    }

    /// Gets watchmux's own credentials now, running its exec plugin if the
    /// kubeconfig has one: at start-up, so that a plugin that fails is a
    /// fatal error and not a proxy that refuses every request.
    pub async fn load_credentials(&self) -> Result<(), Arc<ExecError>> {
        self.credentials.watchmux_auth().await.map(drop)
    }

    /// The upstream's server URL as the kubeconfig names it, for messages.
    pub(crate) fn server(&self) -> &Uri {
        &self.tls_base.server
    }

    /// Sends one of watchmux's own requests upstream with its credentials.
    /// The request's URI is rewritten from its path and query; any
    /// `Authorization` it carries is replaced.
    pub async fn send(&self, req: Request<ProxyBody>) -> Result<Response<Incoming>, SendError> {
        let (own, clients) = self.clients_for(&UpstreamCredential::Watchmux).await?;
        let req = self.prepare(req, authorization(&UpstreamCredential::Watchmux, own.as_ref()));
        let resp = self.in_time(clients.own.request(req)).await?;
        self.answered(resp.status(), own.as_ref());
        Ok(resp)
    }

    /// Sends a freshness proof with watchmux's credentials on the probe
    /// lane (see [`probe_lane`]) of the preferred endpoint: its response headers must come
    /// within `limit`, else the lane's connection is replaced and the
    /// answer is [`SendError::ProbeTimeout`].
    pub(crate) async fn send_probe(
        &self,
        req: Request<ProxyBody>,
        limit: Duration,
    ) -> Result<Response<Incoming>, SendError> {
        let (own, clients) = self.clients_for(&UpstreamCredential::Watchmux).await?;
        let req = self.prepare(req, authorization(&UpstreamCredential::Watchmux, own.as_ref()));
        let endpoints = &self.builder.endpoints;
        let lane = clients.probe_lane(&endpoints.preferred(), &endpoints.all());
        let resp = lane.send(req, limit).await?;
        self.answered(resp.status(), own.as_ref());
        Ok(resp)
    }

    /// Sends a review (TokenReview, SubjectAccessReview) with watchmux's
    /// credentials, on the connections kept for reviews.
    pub(crate) async fn send_review(&self, req: Request<ProxyBody>) -> Result<Response<Incoming>, SendError> {
        let (own, clients) = self.clients_for(&UpstreamCredential::Watchmux).await?;
        let req = self.prepare(req, authorization(&UpstreamCredential::Watchmux, own.as_ref()));
        let resp = self.in_time(clients.reviews.request(req)).await?;
        self.answered(resp.status(), own.as_ref());
        Ok(resp)
    }

    /// Sends a passed-through request upstream with the given credentials,
    /// on the given kind of connection. Any `Authorization` the request
    /// carries is replaced by the credential's.
    pub async fn send_as(
        &self,
        req: Request<ProxyBody>,
        credential: &UpstreamCredential,
        kind: ConnectionKind,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let (own, clients) = self.clients_for(credential).await?;
        let req = self.prepare(req, authorization(credential, own.as_ref()));
        let resp = match kind {
            ConnectionKind::Pooled => self.in_time(clients.passthrough.send(req)).await?,
            ConnectionKind::Upgrade => self.in_time(clients.upgrades.request(req)).await?.map(UpstreamBody::unpooled),
        };
        self.answered(resp.status(), own.as_ref());
        Ok(resp)
    }

    /// Waits for a request's response headers within
    /// `--upstream-response-header-timeout`.
    async fn in_time<T, E: Into<SendError>>(
        &self,
        response: impl Future<Output = Result<T, E>>,
    ) -> Result<T, SendError> {
        let timeouts = &self.builder.opts.timeouts;
        // Known to be down: clients learn it in seconds, not after the full bound.
        let limit = if self.health.get().is_down() {
            timeouts.response_header.min(timeouts.when_down)
        } else {
            timeouts.response_header
        };
        timeouts::response_headers(limit, response).await.map_err(|outcome| match outcome {
            ResponseHeaderOutcome::Failed(err) => err.into(),
            ResponseHeaderOutcome::TimedOut(timeout) => SendError::ResponseHeaders(timeout),
        })
    }

    /// The connections for `credential`, and watchmux's own credentials
    /// when they are the ones to send.
    async fn clients_for(
        &self,
        credential: &UpstreamCredential,
    ) -> Result<(Option<WatchmuxAuth>, Arc<Clients>), SendError> {
        Ok(match credential {
            UpstreamCredential::Watchmux => {
                let own = self.credentials.watchmux_auth().await.map_err(SendError::Credentials)?;
                let clients = self.own_clients(&own).map_err(SendError::ClientTls)?;
                (Some(own), clients)
            }
            UpstreamCredential::Header(_) | UpstreamCredential::None => {
                let bare = self.bare.read().clone();
                (None, bare.unwrap_or_else(|| self.own.read().clients.clone()))
            }
        })
    }

    /// The client certificate chain (PEM) watchmux presents as itself now,
    /// when its kubeconfig names one (files, read again as they rotate, or
    /// inline data); not an exec plugin's, which is issued on demand.
    pub(crate) fn own_certificate_pem(&self) -> Option<Vec<u8>> {
        match &self.cert_files {
            Some(files) => Some(files.current().cert_pem.clone()),
            None => self.inline_cert_pem.clone(),
        }
    }

    /// A 401 to watchmux's own credentials (`own`) renews them.
    fn answered(&self, status: http::StatusCode, own: Option<&WatchmuxAuth>) {
        if status == http::StatusCode::UNAUTHORIZED
            && let Some(own) = own
        {
            self.credentials.unauthorized(own);
            if let Some(files) = &self.cert_files {
                files.unauthorized();
            }
        }
    }

    /// watchmux's connections for `own`: replaced first when the client
    /// certificate to present now (the exec plugin's, or the one read again
    /// from rotating files) is not the one they present.
    fn own_clients(&self, own: &WatchmuxAuth) -> Result<Arc<Clients>, tls::TlsConfigError> {
        let from_files = self.cert_files.as_ref().map(RotatingCertFiles::current);
        let identity = own.exec.as_ref().and_then(|c| c.identity.as_ref()).or(from_files.as_ref());
        let same = |current: &OwnClients| match (&current.identity, identity) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        {
            let current = self.own.read();
            if same(&current) {
                return Ok(current.clients.clone());
            }
        }
        let mut current = self.own.write();
        if !same(&current) {
            let clients = self.builder.build(&self.own_config(identity))?;
            tracing::info!("new upstream connections for a new client certificate");
            *current = OwnClients { clients: Arc::new(clients), identity: identity.cloned() };
        }
        Ok(current.clients.clone())
    }

    /// The configuration of watchmux's own connections presenting
    /// `identity` (none: the kubeconfig's own, if any).
    fn own_config(&self, identity: Option<&Arc<ClientIdentity>>) -> UpstreamConfig {
        match identity {
            Some(identity) => UpstreamConfig {
                client_cert_pem: Some(identity.cert_pem.clone()),
                client_key_pem: Some(identity.key_pem.clone()),
                client_cert_files: None,
                ..self.tls_base.clone()
            },
            None => UpstreamConfig { client_cert_files: None, ..self.own_base.clone() },
        }
    }

    /// New connections for every kind of traffic, with the same
    /// identities: the next requests dial the endpoints as they are
    /// preferred now. Requests in flight keep their connections, which
    /// close when those end (the old pools are dropped).
    fn renew_connections(&self) -> Result<(), tls::TlsConfigError> {
        {
            let mut own = self.own.write();
            let clients = self.builder.build(&self.own_config(own.identity.as_ref()))?;
            own.clients = Arc::new(clients);
        }
        {
            let mut bare = self.bare.write();
            if bare.is_some() {
                *bare = Some(Arc::new(self.builder.build(&self.tls_base)?));
            }
        }
        self.renewals.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Changes when watchmux's connections are made anew (a primary endpoint
    /// back after the fallback servers carried them): a long upstream watch
    /// then ends and resumes from its version on the new connections.
    pub(crate) fn renewals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.renewals.subscribe()
    }

    /// Writes the URI and `authorization`, dropping `Host` and any
    /// `Authorization` the request came with.
    fn prepare(&self, mut req: Request<ProxyBody>, authorization: Option<http::HeaderValue>) -> Request<ProxyBody> {
        *req.uri_mut() = self.uri_for(req.uri().path_and_query());
        // The client picks HTTP/2 or HTTP/1.1 by what the connection negotiated;
        // a downstream HTTP/2 request must not force it.
        *req.version_mut() = Version::HTTP_11;
        let headers = req.headers_mut();
        headers.remove(header::HOST);
        match authorization {
            Some(auth) => headers.insert(header::AUTHORIZATION, auth),
            None => headers.remove(header::AUTHORIZATION),
        };
        req
    }

    /// True when the last readiness probe got a 200 from `/readyz`.
    pub fn is_ready(&self) -> bool {
        self.health.get() == UpstreamHealth::Ready
    }

    /// What the last readiness probe found.
    pub fn health(&self) -> UpstreamHealth {
        self.health.get()
    }

    /// Returns once a readiness probe has found the upstream down.
    pub(crate) async fn found_down(&self) {
        self.health.down().await
    }

    /// Returns once a readiness probe finds the upstream ready after it
    /// was not.
    pub(crate) async fn found_ready(&self) {
        self.health.back().await
    }

    /// Probes `/readyz` once and records the answer, by cause.
    /// With several endpoints, each is probed on its own lane, and the
    /// upstream is ready while any of them is (requests go to a ready one).
    pub async fn probe_ready(&self) -> bool {
        let endpoints = self.builder.endpoints.all();
        let found = futures_util::future::join_all(endpoints.iter().map(|e| self.probe_endpoint(e))).await;
        let several = endpoints.len() > 1;
        for (endpoint, (health, detail)) in endpoints.iter().zip(&found) {
            let ready = *health == UpstreamHealth::Ready;
            if several && endpoint.healthy() != ready {
                match health.failure() {
                    None => tracing::info!(endpoint = %endpoint.uri(), "upstream endpoint is ready"),
                    Some(why) => {
                        tracing::warn!(endpoint = %endpoint.uri(), detail = %detail, "upstream endpoint is not ready: {why}")
                    }
                }
            }
            endpoint.probed(ready, several);
        }
        // An API server that came back may be another minor: an upgrade.
        version::refresh(self, &endpoints).await;
        if self.builder.endpoints.take_fallback_dialed() {
            match self.renew_connections() {
                Ok(()) => tracing::info!(
                    "a primary upstream endpoint is ready again: new requests go to it; \
                     connections to the fallback servers close as their requests end"
                ),
                Err(err) => tracing::warn!(error = %err, "cannot make new upstream connections"),
            }
        }
        let (now, detail) =
            found.iter().find(|(health, _)| *health == UpstreamHealth::Ready).unwrap_or(&found[0]).clone();
        let health::Recorded { was, now, silent } = self.health.record(now);
        if was != now {
            match now.failure() {
                None => tracing::info!("upstream is ready"),
                Some(why) => tracing::warn!(state = now.as_str(), detail = %detail, "upstream is not ready: {why}"),
            }
        } else if silent > 0 && silent < health::UNRESPONSIVE_AFTER {
            tracing::info!(
                detail = %detail,
                "the upstream's /readyz did not answer in time ({silent} of {} in a row before it counts as unresponsive)",
                health::UNRESPONSIVE_AFTER
            );
        }
        metrics::gauge!(m::UPSTREAM_READY).set(if now == UpstreamHealth::Ready { 1.0 } else { 0.0 });
        for state in UpstreamHealth::ALL {
            metrics::gauge!(m::UPSTREAM_HEALTH, "state" => state.as_str()).set(if state == now { 1.0 } else { 0.0 });
        }
        now == UpstreamHealth::Ready
    }

    /// Probes `endpoint`'s `/readyz` once on its own lane: what it found,
    /// and in words.
    async fn probe_endpoint(&self, endpoint: &Arc<Endpoint>) -> (UpstreamHealth, String) {
        let probe = async {
            let (own, clients) = self.clients_for(&UpstreamCredential::Watchmux).await?;
            let req = Request::get("/readyz").body(body::empty()).expect("static request");
            let req = self.prepare(req, authorization(&UpstreamCredential::Watchmux, own.as_ref()));
            let lane = clients.probe_lane(endpoint, &self.builder.endpoints.all());
            let resp = lane.send(req, READINESS_PROBE_TIMEOUT).await?;
            self.answered(resp.status(), own.as_ref());
            Ok::<_, SendError>(resp)
        };
        // Bounded as a whole too: the credentials (an exec plugin) come
        // before the lane's own bound.
        match tokio::time::timeout(READINESS_PROBE_TIMEOUT, probe).await {
            Ok(Ok(resp)) => (UpstreamHealth::of_status(resp.status()), format!("/readyz answered {}", resp.status())),
            Ok(Err(err)) => (UpstreamHealth::of_error(&err), crate::error::error_chain(&err)),
            Err(_) => (UpstreamHealth::Unresponsive, format!("no answer within {READINESS_PROBE_TIMEOUT:?}")),
        }
    }

    /// Reads `endpoint`'s `/version` on its probe lane: the Kubernetes minor
    /// it runs (`version`).
    async fn read_minor(&self, endpoint: &Arc<Endpoint>, limit: Duration) -> Result<u8, version::Unread> {
        use version::Unread::{NoAnswer, NoMinor};
        let read = async {
            let no_answer = |e: &dyn std::error::Error| NoAnswer(crate::error::error_chain(e));
            let (own, clients) = self.clients_for(&UpstreamCredential::Watchmux).await.map_err(|e| no_answer(&e))?;
            let req = Request::get("/version")
                .header(header::ACCEPT, "application/json")
                .body(body::empty())
                .expect("static request");
            let req = self.prepare(req, authorization(&UpstreamCredential::Watchmux, own.as_ref()));
            let lane = clients.probe_lane(endpoint, &self.builder.endpoints.all());
            let resp = lane.send(req, limit).await.map_err(|e| no_answer(&e))?;
            let status = resp.status();
            let answer = bounded_read::read_whole(resp.into_body(), bounded_read::DOCUMENT_BYTES)
                .await
                .map_err(|e| no_answer(&e))?;
            if status != http::StatusCode::OK {
                return Err(NoAnswer(format!("/version answered {status}")));
            }
            let info: serde_json::Value =
                serde_json::from_slice(&answer).map_err(|e| NoMinor(format!("/version: {e}")))?;
            crate::encode::minor::parse_version(&info)
                .ok_or_else(|| NoMinor(format!("/version: no Kubernetes 1.x minor in {info}")))
        };
        tokio::time::timeout(limit, read)
            .await
            .unwrap_or_else(|_| Err(NoAnswer(format!("/version: no answer within {limit:?}"))))
    }

    /// Each endpoint's last probe, for `/readyz/upstream?verbose`; `None`
    /// with one endpoint.
    pub(crate) fn endpoints_summary(&self) -> Option<String> {
        let endpoints = &self.builder.endpoints;
        if !endpoints.several() {
            return None;
        }
        let preferred = endpoints.preferred();
        let each: Vec<String> = endpoints
            .all()
            .iter()
            .map(|e| {
                let state = if e.healthy() { "ready" } else { "not ready" };
                let mark = if Arc::ptr_eq(e, &preferred) { " (watchmux's own requests)" } else { "" };
                let fallback = if e.is_fallback() { " fallback" } else { "" };
                format!("{}{fallback} {state}{mark}", e.uri())
            })
            .collect();
        Some(format!("endpoints: {}", each.join(", ")))
    }

    /// With `--upstream-discover-servers`: follows the API servers the
    /// `default/kubernetes` EndpointSlices name until `stop` is cancelled
    /// (see [`endpoints`]); without it, returns at once.
    pub async fn run_server_discovery(self: Arc<Self>, stop: CancellationToken) {
        if !self.builder.opts.discover_servers {
            return;
        }
        let mut tick = tokio::time::interval(endpoints::DISCOVERY_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.discovered_servers().await {
                Ok(found) => {
                    failing = false;
                    if self.builder.endpoints.follow(found) {
                        let list: Vec<String> =
                            self.builder.endpoints.all().iter().map(|e| e.uri().to_string()).collect();
                        tracing::info!(servers = %list.join(","), "upstream servers from the default/kubernetes EndpointSlices");
                    }
                }
                // Said once per run of failures: the servers known stay.
                Err(why) if !failing => {
                    failing = true;
                    tracing::warn!(error = %why, "reading the default/kubernetes EndpointSlices; keeping the servers known");
                }
                Err(_) => {}
            }
        }
    }

    /// The API servers the `default/kubernetes` EndpointSlices name now.
    async fn discovered_servers(&self) -> Result<Vec<http::Uri>, String> {
        let req = Request::get(endpoints::KUBERNETES_SLICES)
            .header(header::ACCEPT, "application/json")
            .body(body::empty())
            .expect("static request");
        let resp = self.send(req).await.map_err(|e| crate::error::error_chain(&e))?;
        let status = resp.status();
        let body = bounded_read::read_whole(resp.into_body(), bounded_read::DOCUMENT_BYTES)
            .await
            .map_err(|e| crate::error::error_chain(&e))?;
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(256)])));
        }
        let list: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        Ok(endpoints::from_slices(&list, &self.scheme))
    }

    /// Probes readiness until `stop` is cancelled.
    pub async fn run_readiness_probe(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(READINESS_PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => { self.probe_ready().await; }
            }
        }
    }
}

/// The `Authorization` a request sends as `credential`; `own` is
/// watchmux's, fetched for [`UpstreamCredential::Watchmux`].
fn authorization(credential: &UpstreamCredential, own: Option<&WatchmuxAuth>) -> Option<http::HeaderValue> {
    match credential {
        UpstreamCredential::Watchmux => own.and_then(|o| o.authorization.clone()),
        UpstreamCredential::Header(value) => Some(value.clone()),
        UpstreamCredential::None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(server: &str) -> UpstreamConfig {
        UpstreamConfig { auth: UpstreamAuth::Token("t".into()), ..UpstreamConfig::for_test(server) }
    }

    #[test]
    fn uri_keeps_path_prefix_and_query() {
        let up = Upstream::new(&cfg("https://10.1.2.3:6443/k8s/"), UpstreamOptions::default()).unwrap();
        let pq: PathAndQuery = "/api/v1/pods?watch=1".parse().unwrap();
        assert_eq!(up.uri_for(Some(&pq)), "https://10.1.2.3:6443/k8s/api/v1/pods?watch=1");
    }

    #[tokio::test]
    async fn prepare_replaces_client_credentials_and_host() {
        let up = Upstream::new(&cfg("http://127.0.0.1:1"), UpstreamOptions::default()).unwrap();
        let req = Request::get("/api")
            .version(Version::HTTP_2)
            .header(header::HOST, "watchmux.local")
            .header(header::AUTHORIZATION, "Bearer client")
            .body(body::empty())
            .unwrap();
        let own = up.credentials.watchmux_auth().await.unwrap();
        let req = up.prepare(req, authorization(&UpstreamCredential::Watchmux, Some(&own)));
        assert_eq!(req.headers()[header::AUTHORIZATION], "Bearer t");
        assert!(req.headers().get(header::HOST).is_none());
        assert_eq!(req.version(), Version::HTTP_11);
        assert_eq!(req.uri(), "http://127.0.0.1:1/api");
    }

    #[test]
    fn prepare_sends_a_clients_own_credentials_or_none() {
        let up = Upstream::new(&cfg("http://127.0.0.1:1"), UpstreamOptions::default()).unwrap();
        let req = || Request::get("/api").header(header::AUTHORIZATION, "Bearer x").body(body::empty()).unwrap();
        let client = UpstreamCredential::Header(http::HeaderValue::from_static("Bearer client"));
        let forwarded = up.prepare(req(), authorization(&client, None));
        assert_eq!(forwarded.headers()[header::AUTHORIZATION], "Bearer client");
        let anonymous = up.prepare(req(), authorization(&UpstreamCredential::None, None));
        assert!(anonymous.headers().get(header::AUTHORIZATION).is_none());
    }

    /// A server that answers 200 to `Bearer new` and 401 to anything else.
    async fn accepts_only_the_new_token() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let ok = req.headers().get(header::AUTHORIZATION).is_some_and(|v| v == "Bearer new");
                    let status = if ok { http::StatusCode::OK } else { http::StatusCode::UNAUTHORIZED };
                    Ok::<_, std::convert::Infallible>(Response::builder().status(status).body(body::empty()).unwrap())
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_401_to_the_exec_token_runs_the_plugin_again_for_the_next_request() {
        let p = exec_cache::tests::Plugin::new(crate::upstream::kubeconfig::ExecApiVersion::V1);
        p.prints(Some(1), r#""token":"old""#);
        p.prints(None, r#""token":"new""#);
        let addr = accepts_only_the_new_token().await;
        let cfg = UpstreamConfig { server: format!("http://{addr}").parse().unwrap(), ca_pem: None, ..p.upstream() };
        let up = Upstream::new(&cfg, UpstreamOptions::default()).unwrap();
        up.load_credentials().await.unwrap();
        let get = || Request::get("/api").body(body::empty()).unwrap();
        assert_eq!(up.send(get()).await.unwrap().status(), 401);
        assert_eq!(up.send(get()).await.unwrap().status(), 200);
        assert_eq!(up.send(get()).await.unwrap().status(), 200);
        assert_eq!(p.runs(), 2);
    }

    #[tokio::test]
    async fn a_failing_exec_plugin_fails_the_request_before_any_connection() {
        let p = exec_cache::tests::Plugin::new(crate::upstream::kubeconfig::ExecApiVersion::V1);
        p.write("exit", "1");
        p.write("stderr", "secret-ish detail");
        p.prints(None, r#""token":"t""#);
        // Nothing listens on port 1: a request that got that far would fail otherwise.
        let cfg = UpstreamConfig { server: "http://127.0.0.1:1".parse().unwrap(), ca_pem: None, ..p.upstream() };
        let up = Upstream::new(&cfg, UpstreamOptions::default()).unwrap();
        let startup = up.load_credentials().await.unwrap_err().to_string();
        assert!(startup.contains("\"exec-user\"") && startup.contains("secret-ish detail"), "{startup}");
        let err = up.send(Request::get("/api").body(body::empty()).unwrap()).await.unwrap_err();
        assert!(matches!(err, SendError::Credentials(_)) && err.is_connect(), "{err:?}");
        let told = crate::error::error_chain(&err);
        assert!(told.contains("exec-user") && !told.contains("secret-ish"), "{told}");
    }

    #[tokio::test]
    async fn a_new_exec_client_certificate_gets_new_connections() {
        let p = exec_cache::tests::Plugin::new(crate::upstream::kubeconfig::ExecApiVersion::V1);
        let (one, two) = (exec_cache::tests::test_identity("one"), exec_cache::tests::test_identity("two"));
        for (run, (cert, key)) in [(1, one.clone()), (2, one), (3, two)] {
            let status = format!(
                r#""clientCertificateData":{},"clientKeyData":{}"#,
                serde_json::Value::from(cert),
                serde_json::Value::from(key)
            );
            p.prints(Some(run), &status);
        }
        let cfg = UpstreamConfig { server: "https://127.0.0.1:1".parse().unwrap(), ..p.upstream() };
        let cfg = UpstreamConfig { ca_pem: None, insecure_skip_tls_verify: true, ..cfg };
        let up = Upstream::new(&cfg, UpstreamOptions::default()).unwrap();
        let clients = |up: &Upstream| Arc::as_ptr(&up.own.read().clients);
        let initial = clients(&up);
        let own = up.credentials.watchmux_auth().await.unwrap();
        let first = Arc::as_ptr(&up.own_clients(&own).unwrap());
        assert_ne!(first, initial, "the plugin's certificate needs connections of its own");
        assert_eq!(Arc::as_ptr(&up.own_clients(&own).unwrap()), first);
        up.credentials.unauthorized(&own);
        let same_cert = up.credentials.watchmux_auth().await.unwrap();
        assert_eq!(Arc::as_ptr(&up.own_clients(&same_cert).unwrap()), first, "an unchanged certificate keeps them");
        up.credentials.unauthorized(&same_cert);
        let rotated = up.credentials.watchmux_auth().await.unwrap();
        assert_ne!(Arc::as_ptr(&up.own_clients(&rotated).unwrap()), first, "a new certificate replaces them");
        assert_eq!(p.runs(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_certificate_rotated_on_disk_gets_new_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet-client-current.pem");
        let pem = |name: &str| {
            let (cert, key) = exec_cache::tests::test_identity(name);
            [cert.into_bytes(), key.into_bytes()].concat()
        };
        std::fs::write(&path, pem("one")).unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                 clusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}\n\
                 contexts:\n- name: c\n  context: {{cluster: c, user: u}}\n\
                 users:\n- name: u\n  user: {{client-certificate: {p}, client-key: {p}}}\n",
                p = path.display()
            ),
        )
        .unwrap();
        let cfg = kubeconfig::resolve(Some(&kubeconfig), None).unwrap();
        assert!(cfg.client_cert_files.is_some(), "a pair from files is one that rotates");
        let up = Upstream::new(&cfg, UpstreamOptions::default()).unwrap();
        let own = up.credentials.watchmux_auth().await.unwrap();
        let first = Arc::as_ptr(&up.own_clients(&own).unwrap());
        assert_eq!(first, Arc::as_ptr(&up.own.read().clients), "the kubeconfig's pair keeps the first connections");

        std::fs::write(&path, pem("two")).unwrap();
        tokio::time::advance(cert_files::CERT_FILE_REFRESH).await;
        let rotated = Arc::as_ptr(&up.own_clients(&own).unwrap());
        assert_ne!(rotated, first, "a renewed certificate gets connections that present it");
        tokio::time::advance(cert_files::CERT_FILE_REFRESH).await;
        assert_eq!(Arc::as_ptr(&up.own_clients(&own).unwrap()), rotated, "an unchanged one keeps them");
    }

    /// `--upstream-discover-servers` against two fake API servers: the
    /// first publishes the second in its `default/kubernetes` EndpointSlice
    /// (as an IP at port `https`); the second is then probed on its own
    /// lane, and a dial the first refuses goes to the second.
    #[tokio::test]
    async fn a_server_from_the_kubernetes_endpointslice_is_probed_and_dialed() {
        use http_body_util::BodyExt as _;
        let answer = |body: String| Response::new(body::full(bytes::Bytes::from(body)));
        let second = fake_server::serve(move |_| async move { answer("ok".into()) }).await;
        let slice = serde_json::json!({"items": [{
            "ports": [{"name": "https", "port": second.port()}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        }]})
        .to_string();
        let first = fake_server::serve(move |req: Request<Incoming>| {
            let slice = slice.clone();
            async move {
                match req.uri().path() {
                    "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices" => answer(slice),
                    _ => answer("first".into()),
                }
            }
        })
        .await;
        let up = Upstream::new(
            &UpstreamConfig::for_test(&format!("http://{first}")),
            UpstreamOptions { discover_servers: true, ..UpstreamOptions::default() },
        )
        .unwrap();
        let found = up.discovered_servers().await.unwrap();
        assert_eq!(found, [format!("http://127.0.0.1:{}/", second.port()).parse::<Uri>().unwrap()]);
        assert!(up.builder.endpoints.follow(found));
        assert!(up.probe_ready().await);
        let summary = up.endpoints_summary().unwrap();
        assert_eq!(
            summary,
            format!(
                "endpoints: http://{first}/ ready (watchmux's own requests), http://127.0.0.1:{}/ ready",
                second.port()
            )
        );
        // The first is preferred; once it fails a dial, the second answers.
        let get = || Request::get("/x").body(body::empty()).unwrap();
        let said = up.send(get()).await.unwrap().into_body().collect().await.unwrap().to_bytes();
        assert_eq!(said, "first");
        up.builder.endpoints.all()[0].dialed_for_test(false);
        let said = up.send_as(get(), &UpstreamCredential::Watchmux, ConnectionKind::Pooled).await.unwrap();
        assert_eq!(said.into_body().collect().await.unwrap().to_bytes(), "ok");
    }

    #[test]
    fn unsupported_scheme_is_rejected() {
        assert!(matches!(Upstream::new(&cfg("ftp://x"), UpstreamOptions::default()), Err(UpstreamError::Scheme(_))));
    }
}
