//! The downstream side: listeners (TCP, TLS, a unix socket), the admin
//! endpoints, and the graceful shutdown that ties them together. What a
//! request meets once accepted is `pipeline`'s; what is built to answer it,
//! `app`'s.
//!
//! - [`connection`]: accepting and serving connections.
//! - [`gates`]: host, path and size limits a request meets first.
//! - [`lifecycle`]: the open-file limit, signals, graceful shutdown.
//! - [`admin`]: the metrics and health listener.

pub(crate) mod admin;
pub(crate) mod connection;
pub(crate) mod gates;
pub(crate) mod lifecycle;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

use connection::goaway_chance::GoawayChance;
use connection::listener::{AdminHandler, Handler, Serving};
use connection::max_age::MaxConnectionAge;
use gates::connections::{ConnectionBudget, Shares};
use lifecycle::graceful::GracefulShutdown;
use lifecycle::shutdown::Stages;

pub use connection::tls::protocol::{
    TlsCipherSuite, TlsMinVersion, TlsProtocol, parse_cipher_suite, parse_tls_min_version,
};

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

/// The API listener's TLS files, read again when they change, and its
/// protocol versions and cipher suites.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The serving certificate chain, PEM (`--tls-cert-file`).
    pub cert: PathBuf,
    /// Its private key, PEM (`--tls-private-key-file`).
    pub key: PathBuf,
    /// CA bundle client certificates are verified against (`--client-ca-file`).
    pub client_ca: Option<PathBuf>,
    /// `--tls-min-version` and `--tls-cipher-suites`.
    pub protocol: TlsProtocol,
}

/// How the API listener serves, besides where (from the flags).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServeSettings {
    /// Open connections at once (`--max-connections`).
    pub max_connections: usize,
    /// Open connections from one source address (`--max-connections-per-address`).
    pub max_connections_per_address: usize,
    /// Open connections one user may hold (`--max-connections-per-user`).
    pub max_connections_per_user: usize,
    /// How long an HTTP/2 connection may have no stream (`--idle-connection-timeout`).
    pub idle_connection_timeout: Duration,
    /// One socket write per batch of HTTP/2 frames (`--h2-write-batching`).
    pub h2_write_batching: bool,
    /// Each HTTP/2 answer's chance of ending its connection with GOAWAY
    /// (`--goaway-chance`), on the TCP listener.
    pub goaway_chance: GoawayChance,
    /// Each HTTP/2 connection's maximum age and its grace
    /// (`--max-connection-age`, `--max-connection-age-grace`), on the TCP
    /// listener; `None`: no maximum.
    pub max_connection_age: Option<MaxConnectionAge>,
    /// How long a graceful shutdown waits for requests (`--shutdown-grace`).
    pub shutdown_grace: Duration,
}

/// Bound listeners, ready to serve: they accept connections, hand each
/// request to a handler and shut down gracefully; what a request meets is
/// the handler's business (`pipeline`).
pub struct Server {
    api: TcpListener,
    api_tls: Option<connection::tls::ApiTls>,
    api_unix: Option<(UnixListener, PathBuf)>,
    admin: TcpListener,
}

impl Server {
    /// Binds every listener the flags ask for. Binding happens before any
    /// serving so that a port conflict fails start-up, not the first request.
    pub(crate) async fn bind(l: &Listeners) -> anyhow::Result<Self> {
        let api = connection::backlog::bind_tcp(l.api).with_context(|| format!("binding --listen {}", l.api))?;
        let api_tls = match &l.tls {
            Some(files) => Some(connection::tls::api_tls(files)?),
            None => None,
        };
        let api_unix = match &l.unix {
            Some(path) => Some((connection::listener::bind_unix(path)?, path.clone())),
            None => None,
        };
        let admin =
            connection::backlog::bind_tcp(l.admin).with_context(|| format!("binding --admin-listen {}", l.admin))?;
        Ok(Self { api, api_tls, api_unix, admin })
    }

    /// The address the API listener is bound to.
    pub fn api_addr(&self) -> SocketAddr {
        self.api.local_addr().expect("bound listener has an address")
    }

    /// The address the admin listener is bound to.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.local_addr().expect("bound listener has an address")
    }

    /// Serves `api` and `admin` until `shutdown` completes, then shuts down
    /// gracefully through `stages`: stop accepting, report not-ready, end
    /// watch streams, give other requests up to the grace period to finish,
    /// then stop the background work and the admin listener.
    pub(crate) async fn serve(
        self,
        api_handler: impl Handler,
        admin_handler: AdminHandler,
        settings: ServeSettings,
        stages: Stages,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let Self { api, api_tls, api_unix, admin } = self;
        let descriptors = lifecycle::fd_limit::raise_nofile();
        let accept_stop = CancellationToken::new();
        let builder = connection::listener::http_builder_idle(settings.idle_connection_timeout);
        let graceful = GracefulShutdown::new();
        let budget = ConnectionBudget::new(
            settings.max_connections,
            settings.max_connections_per_address,
            settings.max_connections_per_user,
            descriptors,
        );
        let Shares { max: max_connections, per_address, per_user } = budget.shares();
        if settings.max_connections == 0 || max_connections < settings.max_connections {
            tracing::info!(
                max_connections,
                asked = settings.max_connections,
                open_file_limit = descriptors,
                "connection budget set by the open-file limit"
            );
        }
        tracing::debug!(max_connections, per_address, per_user, "connection budget");
        // The admin listener outlives the API's graceful phase, so /readyz can
        // say "shutting down" while in-flight requests finish.
        let admin_graceful = GracefulShutdown::new();
        let admin_task = {
            let stop = stages.background.clone();
            let builder = builder.clone();
            async move {
                let serving = Serving {
                    name: "admin",
                    builder: &builder,
                    graceful: &admin_graceful,
                    handler: admin_handler,
                    budget: None,
                    h2_write_batching: false,
                    goaway_chance: GoawayChance::NEVER,
                    max_age: None,
                    // No watch streams on the admin listener.
                    streams_stop: CancellationToken::new(),
                    setup_timeout: connection::listener::CONNECTION_SETUP_TIMEOUT,
                    stop,
                };
                connection::listener::accept_tcp(admin, None, serving).await;
            }
        };
        let admin_task = tokio::spawn(admin_task);

        tracing::info!(addr = %api.local_addr()?, tls = api_tls.is_some(), "serving the API");
        if let Some(tls) = &api_tls {
            tokio::spawn(connection::tls::reload::keep_current(tls.clone(), accept_stop.clone()));
        }
        let unix_path = api_unix.as_ref().map(|(_, p)| p.clone());
        let accepting = async {
            let serving = |name, goaway_chance, max_age| Serving {
                name,
                builder: &builder,
                graceful: &graceful,
                handler: api_handler.clone(),
                budget: Some(budget.clone()),
                h2_write_batching: settings.h2_write_batching,
                goaway_chance,
                max_age,
                streams_stop: stages.streams.clone(),
                setup_timeout: connection::listener::CONNECTION_SETUP_TIMEOUT,
                stop: accept_stop.clone(),
            };
            let tcp = connection::listener::accept_tcp(
                api,
                api_tls,
                serving("api", settings.goaway_chance, settings.max_connection_age),
            );
            match api_unix {
                Some((unix, path)) => {
                    tracing::info!(path = %path.display(), "serving the API on a unix socket");
                    // Nothing to balance: every connection reaches this process.
                    let unix = connection::listener::accept_unix(unix, serving("unix", GoawayChance::NEVER, None));
                    tokio::join!(tcp, unix);
                }
                None => tcp.await,
            }
        };
        let stopper = async {
            shutdown.await;
            tracing::info!(grace = ?settings.shutdown_grace, "shutting down");
            stages.shutting_down.store(true, Ordering::Relaxed);
            accept_stop.cancel();
        };
        tokio::join!(accepting, stopper);
        if let Some(path) = unix_path {
            let _ = std::fs::remove_file(path);
        }

        stages.streams.cancel();
        let open = graceful.count();
        match tokio::time::timeout(settings.shutdown_grace, graceful.shutdown()).await {
            Ok(()) => tracing::info!(connections = open, "all connections finished"),
            Err(_) => tracing::warn!("shutdown grace period over; closing the remaining connections"),
        }
        stages.background.cancel();
        let _ = admin_task.await;
        Ok(())
    }
}
