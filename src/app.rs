//! The composition root: each subsystem's settings build its own object
//! here, and the server is handed what it serves. Nothing else constructs a
//! subsystem, so "what runs, made from what" reads in one place.
//!
//! - the cache ([`CacheConfig::build`]): the registry of resource caches and
//!   the service that answers reads from them;
//! - delegated auth ([`DelegatedSettings::build`]): the review client and
//!   the decisions made with it;
//! - the request pipeline ([`ApiHandler`]): limits, identity, cache, pass-through;
//! - the admin endpoints' state;
//! - the listeners ([`Server`]), which bind, accept and shut down.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::auth::DelegatedSettings;
use crate::cache::read::serve::CacheService;
use crate::cache::registry::CacheConfig;
use crate::passthrough::{AnswerLimits, Passthrough};
use crate::pipeline::ApiHandler;
use crate::server::admin::AdminState;
use crate::server::connection::goaway_chance::GoawayChance;
use crate::server::connection::listener::AdminHandler;
use crate::server::connection::max_age::MaxConnectionAge;
use crate::server::gates::hosts::AcceptHosts;
use crate::server::gates::limits::RequestLimits;
use crate::server::gates::reject_paths::RejectPaths;
use crate::server::lifecycle::shutdown::Stages;
use crate::server::{Listeners, ServeSettings, Server};
use crate::upstream::Upstream;

/// Everything watchmux needs, by subsystem (built from the flags by
/// `config::settings`).
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
    /// Priority levels and seats for the reads the cache answers (`--fairness-*`).
    pub fairness: crate::fairness::FairnessSettings,
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
    /// Open connections from one source address (`--max-connections-per-address`).
    pub max_connections_per_address: usize,
    /// Open connections one user may hold (`--max-connections-per-user`).
    pub max_connections_per_user: usize,
    /// How long an HTTP/2 connection may have no stream (`--idle-connection-timeout`).
    pub idle_connection_timeout: std::time::Duration,
    /// Each HTTP/2 answer's chance of ending its connection with GOAWAY,
    /// 0 to 0.02 (`--goaway-chance`).
    pub goaway_chance: f64,
    /// Each HTTP/2 connection's maximum age, 0 for none (`--max-connection-age`).
    pub max_connection_age: Duration,
    /// How long requests other than watches still have at the maximum age
    /// (`--max-connection-age-grace`).
    pub max_connection_age_grace: Duration,
    /// Stream windows pass-through answers may hold (`--passthrough-buffer-bytes`).
    pub passthrough_buffer_bytes: u64,
    /// How long an answer's client may not read it (`--passthrough-stall-timeout`).
    pub passthrough_stall_timeout: std::time::Duration,
    /// The largest request body (`--max-request-body-bytes`).
    pub max_request_body_bytes: u64,
}

/// watchmux composed: bound listeners and what they will serve.
pub struct App {
    server: Server,
    upstream: Arc<Upstream>,
    cache: Option<Arc<CacheService>>,
    api: ApiHandler,
    admin: AdminHandler,
    settings: ServeSettings,
    stages: Stages,
    /// The cache or delegated auth runs: both answer as the upstream's minor does.
    reads_upstream_minor: bool,
}

impl App {
    /// Binds the listeners (a port conflict fails start-up), then builds
    /// every subsystem from its settings. Nothing runs before [`App::serve`].
    pub async fn build(upstream: Arc<Upstream>, opts: ServerOptions) -> anyhow::Result<Self> {
        // Refused before anything is bound, as the flag's own parser does.
        let goaway_chance = GoawayChance::new(opts.limits.goaway_chance).map_err(anyhow::Error::msg)?;
        let server = Server::bind(&opts.listeners).await?;
        let stages = Stages::default();
        let cache = opts
            .cache
            .map(|config| config.build(upstream.clone(), stages.background.clone(), stages.streams.clone()))
            .transpose()?;
        let delegated = opts.delegated.map(|settings| settings.build(upstream.clone()));
        let reads_upstream_minor = cache.is_some() || delegated.is_some();
        let fairness = crate::fairness::Fairness::new(opts.fairness, delegated.is_some());
        let limits = opts.limits;
        let api = ApiHandler::new(
            Passthrough::new(
                upstream.clone(),
                stages.streams.clone(),
                AnswerLimits::new(limits.passthrough_buffer_bytes, limits.passthrough_stall_timeout),
            ),
            cache.clone(),
            delegated,
            RequestLimits::new(limits.max_requests_inflight, limits.max_request_body_bytes),
            opts.accept_hosts,
            opts.reject_paths,
            fairness,
        );
        let admin = AdminHandler(Arc::new(AdminState {
            upstream: upstream.clone(),
            metrics: opts.metrics,
            shutting_down: stages.shutting_down.clone(),
            caches: cache.as_ref().map(|c| c.registry().clone()),
        }));
        let settings = ServeSettings {
            max_connections: limits.max_connections,
            max_connections_per_address: limits.max_connections_per_address,
            max_connections_per_user: limits.max_connections_per_user,
            idle_connection_timeout: limits.idle_connection_timeout,
            goaway_chance,
            max_connection_age: MaxConnectionAge::new(limits.max_connection_age, limits.max_connection_age_grace),
            h2_write_batching: opts.h2_write_batching,
            shutdown_grace: opts.shutdown_grace,
        };
        Ok(Self { server, upstream, cache, api, admin, settings, stages, reads_upstream_minor })
    }

    /// The address the API listener is bound to.
    pub fn api_addr(&self) -> std::net::SocketAddr {
        self.server.api_addr()
    }

    /// The address the admin listener is bound to.
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        self.server.admin_addr()
    }

    /// Reads the upstream's Kubernetes minor (with a cache or delegated
    /// auth), starts the background work (the upstream readiness probe and server
    /// discovery; the cache's
    /// name check and warming) and serves until `shutdown` completes, then
    /// shuts down gracefully.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self { server, upstream, cache, api, admin, settings, stages, reads_upstream_minor } = self;
        if reads_upstream_minor {
            // Whose forms to write and whose impersonation rules to apply,
            // before anything is encoded or authorized.
            crate::upstream::version::select_upstream_minor(&upstream).await;
        }
        tokio::spawn(upstream.clone().run_server_discovery(stages.background.clone()));
        tokio::spawn(upstream.run_readiness_probe(stages.background.clone()));
        if let Some(cache) = &cache {
            // Before serving: a --cache-resources typo is a start-up error.
            cache.start().await?;
        }
        server.serve(api, admin, settings, stages, shutdown).await
    }
}
