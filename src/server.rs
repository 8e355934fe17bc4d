//! The downstream side: listeners, the API and admin services, and the
//! graceful shutdown that ties them together.

pub(crate) mod admin;
pub(crate) mod early_resets;
pub(crate) mod fd_limit;
pub(crate) mod graceful;
pub(crate) mod hosts;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod opening;
pub(crate) mod reject_paths;
pub(crate) mod shutdown;
pub(crate) mod tls;
pub(crate) mod write_behind;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use http::{Request, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::auth::reviews::Attributes;
use crate::auth::reviews::ReviewClient;
use crate::auth::{CallerGate, Delegated, DelegatedSettings, UpstreamIdentityMode, impersonation};
use crate::auth::{Peer, UpstreamIdentity};
use crate::body::{ProxyBody, RequestBody};
use crate::cache::registry::{CacheConfig, Registry};
use crate::cache::serve::{CacheService, Open, ReadGate, Served};
use crate::passthrough::Passthrough;
use crate::request::RequestInfo;
use crate::upstream::Upstream;
use admin::AdminState;
use graceful::GracefulShutdown;
use hosts::AcceptHosts;
use limits::{ConnectionBudget, RequestLimits};
use listener::{AdminHandler, Handler, Serving};
use reject_paths::RejectPaths;

/// Where the server listens (from `--listen`, `--listen-unix`, the TLS
/// flags and `--admin-listen`).
#[derive(Debug, Clone)]
pub struct Listeners {
    /// The API listener (`--listen`).
    pub api: SocketAddr,
    /// Serving certificate and key, and the CA client certificates are
    /// verified against; `None` serves plain HTTP.
    pub tls: Option<TlsFiles>,
    /// A unix socket for the API (`--listen-unix`).
    pub unix: Option<PathBuf>,
    /// Metrics and probes (`--admin-listen`).
    pub admin: SocketAddr,
}

/// The API listener's TLS files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The serving certificate chain, PEM (`--tls-cert-file`).
    pub cert: PathBuf,
    /// Its private key, PEM (`--tls-private-key-file`).
    pub key: PathBuf,
    /// CA bundle client certificates are verified against (`--client-ca-file`).
    pub client_ca: Option<PathBuf>,
}

/// Everything the server needs.
pub struct ServerOptions {
    /// Where to listen.
    pub listeners: Listeners,
    /// How long a graceful shutdown waits for requests (`--shutdown-grace`).
    pub shutdown_grace: Duration,
    /// The recorder `/metrics` renders; `None` serves no metrics.
    pub metrics: Option<PrometheusHandle>,
    /// What to cache; `None` passes everything through.
    pub cache: Option<CacheConfig>,
    /// Delegated authentication and authorization; `None` is trusted-local.
    pub delegated: Option<DelegatedSettings>,
    /// Request and connection limits.
    pub limits: Limits,
    /// One socket write per batch of HTTP/2 frames (`--h2-write-batching`).
    pub h2_write_batching: bool,
    /// trusted-local's Host check (`--accept-hosts`); `None` checks nothing.
    pub accept_hosts: Option<AcceptHosts>,
    /// trusted-local's path filter (`--reject-paths`); `None` refuses nothing.
    pub reject_paths: Option<RejectPaths>,
}

/// The request and connection limits of the API listener (defaults: the
/// flags').
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests in progress at once; more get 429 (`--max-requests-inflight`).
    pub max_requests_inflight: usize,
    /// Open connections at once (`--max-connections`).
    pub max_connections: usize,
    /// The largest request body (`--max-request-body-bytes`).
    pub max_request_body_bytes: u64,
}

/// Bound listeners, ready to serve.
pub struct Server {
    api: TcpListener,
    api_tls: Option<tls::ApiTls>,
    api_unix: Option<(UnixListener, PathBuf)>,
    admin: TcpListener,
    upstream: Arc<Upstream>,
    opts: ServerOptions,
}

/// The API service: limits first, then (in delegated mode) who the caller
/// is; reads the cache can answer are served from it, everything else
/// passes through.
#[derive(Clone)]
struct ApiHandler {
    passthrough: Passthrough,
    cache: Option<Arc<CacheService>>,
    delegated: Option<Arc<Delegated>>,
    limits: RequestLimits,
    accept_hosts: Option<AcceptHosts>,
    reject_paths: Option<RejectPaths>,
}

impl ApiHandler {
    /// The cache's answer, when there is a cache and it answers (`gate`
    /// authorizes the read first); `None` passes the request through.
    async fn cached_answer(
        &self,
        req: &Request<RequestBody>,
        info: &RequestInfo,
        gate: &impl ReadGate,
    ) -> Option<Response<ProxyBody>> {
        match self.cache.as_ref()?.serve(req.method(), req.uri(), req.headers(), info, gate).await {
            Served::Response(resp) => Some(resp),
            Served::Passthrough(_) => None,
        }
    }
}

impl Handler for ApiHandler {
    async fn handle(&self, req: Request<RequestBody>, peer: Peer) -> Response<ProxyBody> {
        if peer.over_connection_limit {
            return limits::too_many_requests(limits::Limit::Connections, true);
        }
        if let Err(bad) = hosts::check_host_header(req.version(), req.headers()) {
            return hosts::bad_request(bad);
        }
        if let Some(hosts) = &self.accept_hosts
            && peer.addr.is_some()
            && !hosts.accepts(req.uri(), req.headers())
        {
            return hosts::forbidden();
        }
        if let Some(reject) = &self.reject_paths
            && reject.rejects(req.uri().path())
        {
            return hosts::forbidden();
        }
        if crate::request::has_malformed_escape(req.uri().path()) {
            return malformed_request_uri();
        }
        let info = RequestInfo::classify(req.method(), req.uri());
        let _admitted = match self.limits.admit(&info, req.headers()) {
            Ok(admitted) => admitted,
            Err(refused) => return *refused,
        };
        let Some(delegated) = &self.delegated else {
            if let Some(resp) = self.cached_answer(&req, &info, &Open).await {
                return resp;
            }
            return self.passthrough.forward(req, peer, &info, &UpstreamIdentity::Own).await;
        };

        let authenticated = match delegated.authenticate(req.headers(), &peer).await {
            Ok(authenticated) => authenticated,
            Err(refused) => return *refused,
        };
        // With the client's own credentials upstream, a client's
        // impersonation is the API server's to judge (all its modes), so such
        // requests pass through as they are.
        let client_impersonates = delegated.upstream_identity_mode() == UpstreamIdentityMode::Client
            && impersonation::any_requested(req.headers());
        // The request's attributes are built only for a request that asks
        // to impersonate: constrained impersonation reviews them.
        let caller = if client_impersonates || !impersonation::any_requested(req.headers()) {
            authenticated.user.clone()
        } else {
            let request = Attributes::of_request(&info, req.uri());
            match delegated.impersonated(authenticated.user.clone(), req.headers(), &request).await {
                Ok(caller) => caller,
                Err(refused) => return *refused,
            }
        };
        if !client_impersonates
            && let Some(resp) = self.cached_answer(&req, &info, &CallerGate { auth: delegated, caller: &caller }).await
        {
            return resp;
        }
        let identity = match delegated.upstream_identity(caller, &authenticated).await {
            Ok(identity) => identity,
            Err(refused) => return *refused,
        };
        self.passthrough.forward(req, peer, &info, &identity).await
    }
}

impl Server {
    /// Binds every listener the flags ask for. Binding happens before any
    /// serving so that a port conflict fails start-up, not the first request.
    pub async fn bind(upstream: Arc<Upstream>, opts: ServerOptions) -> anyhow::Result<Self> {
        let l = &opts.listeners;
        let api = TcpListener::bind(l.api).await.with_context(|| format!("binding --listen {}", l.api))?;
        let api_tls = match &l.tls {
            Some(t) => Some(tls::api_tls(&t.cert, &t.key, t.client_ca.as_deref())?),
            None => None,
        };
        let api_unix = match &l.unix {
            Some(path) => Some((bind_unix(path)?, path.clone())),
            None => None,
        };
        let admin = TcpListener::bind(l.admin).await.with_context(|| format!("binding --admin-listen {}", l.admin))?;
        Ok(Self { api, api_tls, api_unix, admin, upstream, opts })
    }

    /// The address the API listener is bound to.
    pub fn api_addr(&self) -> SocketAddr {
        self.api.local_addr().expect("bound listener has an address")
    }

    /// The address the admin listener is bound to.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.local_addr().expect("bound listener has an address")
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: stop
    /// accepting, report not-ready, end watch streams, and give other
    /// requests up to the grace period to finish.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self { api, api_tls, api_unix, admin, upstream, opts } = self;
        fd_limit::raise_nofile();
        let accept_stop = CancellationToken::new();
        let streams_stop = CancellationToken::new();
        let background_stop = CancellationToken::new();
        let shutting_down = Arc::new(AtomicBool::new(false));

        tokio::spawn(upstream.clone().run_readiness_probe(background_stop.clone()));

        let builder = listener::http_builder();
        let graceful = GracefulShutdown::new();
        let cache = match opts.cache.clone() {
            Some(config) => {
                let warm = config.warm;
                let registry = Arc::new(Registry::new(upstream.clone(), config, background_stop.clone()));
                // Before serving: a --cache-resources typo is a start-up error.
                registry.check_names().await?;
                if warm {
                    let registry = registry.clone();
                    tokio::spawn(async move { registry.warm_until_done().await });
                }
                Some(Arc::new(CacheService::new(registry, streams_stop.clone())))
            }
            None => None,
        };
        let delegated = opts.delegated.clone().map(|settings| {
            let reviews = ReviewClient::new(upstream.clone(), settings.max_concurrent_reviews);
            Arc::new(Delegated::new(reviews, settings))
        });
        let api_handler = ApiHandler {
            passthrough: Passthrough::new(upstream.clone(), streams_stop.clone()),
            cache: cache.clone(),
            delegated,
            limits: RequestLimits::new(opts.limits.max_requests_inflight, opts.limits.max_request_body_bytes),
            accept_hosts: opts.accept_hosts.clone(),
            reject_paths: opts.reject_paths.clone(),
        };
        let budget = ConnectionBudget::new(opts.limits.max_connections);
        let admin_state = Arc::new(AdminState {
            upstream: upstream.clone(),
            metrics: opts.metrics.clone(),
            shutting_down: shutting_down.clone(),
            caches: cache.as_ref().map(|c| c.registry().clone()),
        });
        // The admin listener outlives the API's graceful phase, so /readyz can
        // say "shutting down" while in-flight requests finish.
        let admin_graceful = GracefulShutdown::new();
        let admin_task = {
            let stop = background_stop.clone();
            let builder = builder.clone();
            async move {
                let serving = Serving {
                    name: "admin",
                    builder: &builder,
                    graceful: &admin_graceful,
                    handler: AdminHandler(admin_state),
                    budget: None,
                    h2_write_batching: false,
                    setup_timeout: listener::CONNECTION_SETUP_TIMEOUT,
                    stop,
                };
                listener::accept_tcp(admin, None, serving).await;
            }
        };
        let admin_task = tokio::spawn(admin_task);

        tracing::info!(addr = %api.local_addr()?, tls = api_tls.is_some(), "serving the API");
        let unix_path = api_unix.as_ref().map(|(_, p)| p.clone());
        let accepting = async {
            let serving = |name| Serving {
                name,
                builder: &builder,
                graceful: &graceful,
                handler: api_handler.clone(),
                budget: Some(budget.clone()),
                h2_write_batching: opts.h2_write_batching,
                setup_timeout: listener::CONNECTION_SETUP_TIMEOUT,
                stop: accept_stop.clone(),
            };
            let tcp = listener::accept_tcp(api, api_tls, serving("api"));
            match api_unix {
                Some((unix, path)) => {
                    tracing::info!(path = %path.display(), "serving the API on a unix socket");
                    let unix = listener::accept_unix(unix, serving("unix"));
                    tokio::join!(tcp, unix);
                }
                None => tcp.await,
            }
        };
        let stopper = async {
            shutdown.await;
            tracing::info!(grace = ?opts.shutdown_grace, "shutting down");
            shutting_down.store(true, Ordering::Relaxed);
            accept_stop.cancel();
        };
        tokio::join!(accepting, stopper);
        if let Some(path) = unix_path {
            let _ = std::fs::remove_file(path);
        }

        streams_stop.cancel();
        let open = graceful.count();
        match tokio::time::timeout(opts.shutdown_grace, graceful.shutdown()).await {
            Ok(()) => tracing::info!(connections = open, "all connections finished"),
            Err(_) => tracing::warn!("shutdown grace period over; closing the remaining connections"),
        }
        background_stop.cancel();
        let _ = admin_task.await;
        Ok(())
    }
}

/// Go's HTTP server's answer to a request line whose path it cannot parse
/// (kube-apiserver's handlers never see it): plain text, then close. Sent
/// upstream over HTTP/2 the same path would only reset the stream.
fn malformed_request_uri() -> Response<ProxyBody> {
    use http::header::{CONNECTION, CONTENT_TYPE, HeaderValue};
    let mut resp = Response::new(crate::body::full("400 Bad Request"));
    *resp.status_mut() = http::StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// Binds a unix socket, replacing a stale socket file left by a previous run.
fn bind_unix(path: &std::path::Path) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        anyhow::ensure!(meta.file_type().is_socket(), "--listen-unix {} exists and is not a socket", path.display());
        std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    UnixListener::bind(path).with_context(|| format!("binding --listen-unix {}", path.display()))
}
