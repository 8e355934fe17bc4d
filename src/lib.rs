//! watchmux: a transparent caching watch proxy for the Kubernetes API.
//!
//! The crate is organised by concern, following the request path:
//! [`server`] accepts connections, [`request`] classifies what a request means
//! to the API, [`passthrough`] forwards what watchmux does not answer itself
//! to the [`upstream`] API server, [`encode`] writes the bodies watchmux
//! produces (Status errors), and [`metrics`] names everything it counts.
//! [`cache`] answers LIST, GET and WATCH from one upstream list+watch per
//! resource, with [`selector`] for label and field selectors. [`config`]
//! holds the flags and kubeconfig loading. [`auth`] authenticates and
//! authorizes clients in delegated mode.

pub mod auth;
pub mod body;
pub mod cache;
pub mod config;
pub mod encode;
pub mod error;
pub mod metrics;
pub mod negotiate;
pub mod passthrough;
pub mod request;
pub mod selector;
pub mod server;
pub mod upstream;

#[cfg(test)]
mod fuzz;

use std::sync::Arc;

use anyhow::Context as _;

use config::Args;
use server::{Server, ServerOptions};
use upstream::{Upstream, UpstreamOptions};

/// Runs watchmux with the given flags until SIGTERM or SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let metrics = metrics::install().context("installing the metrics recorder")?;
    let upstream_cfg = config::kubeconfig::resolve(args.kubeconfig.as_deref(), args.context.as_deref())
        .context("resolving the upstream API server")?;
    tracing::info!(server = %upstream_cfg.server, source = %upstream_cfg.source, "upstream");
    let upstream = Arc::new(
        Upstream::new(&upstream_cfg, UpstreamOptions { http1_only: args.upstream_http1_only })
            .context("configuring the upstream client")?,
    );
    // An exec plugin runs now, so that one that fails stops watchmux here
    // instead of every request failing later.
    upstream.load_credentials().await.context("getting the upstream credentials")?;
    match args.check_trust() {
        Ok(None) => {}
        Ok(Some(warning)) => tracing::warn!("{warning}"),
        Err(refusal) => anyhow::bail!(refusal),
    }
    let mut opts = server_options(&args)?;
    opts.metrics = Some(metrics);
    tracing::info!(mode = ?args.auth_mode, client_certificates = args.client_ca_file.is_some(), "client auth");
    let server = Server::bind(upstream, opts).await?;
    tracing::info!(admin = %server.admin_addr(), "admin endpoints: /metrics /healthz /livez /readyz");
    server.serve(server::shutdown::signal()).await
}

/// The server's options from the flags (without a metrics recorder): the
/// one mapping from flags to subsystems, used by [`run`] and by the
/// in-process tests alike.
pub fn server_options(args: &Args) -> anyhow::Result<ServerOptions> {
    let cache = cache::registry::CacheConfig::from_flags(
        &args.cache_resources,
        &args.watch_cache_sizes,
        &args.cache_scope,
        args.cache_warm,
        cache::resource::CacheSettings {
            history_window: args.events_history_window,
            slow_watcher_grace: args.slow_watcher_grace,
        },
    )?;
    let delegated = (args.auth_mode == auth::AuthMode::Delegated).then_some(auth::DelegatedSettings {
        anonymous: args.anonymous_auth,
        token_ttl: args.authentication_token_cache_ttl,
        token_negative_ttl: args.authentication_token_negative_cache_ttl,
        authorized_ttl: args.authorization_cache_authorized_ttl,
        unauthorized_ttl: args.authorization_cache_unauthorized_ttl,
        cache_capacity: auth::CACHE_CAPACITY,
        max_concurrent_reviews: args.max_concurrent_reviews,
        upstream_identity: args.upstream_identity,
    });
    let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(cert), Some(key)) => {
            Some(server::TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: args.client_ca_file.clone() })
        }
        _ => None,
    };
    Ok(ServerOptions {
        listeners: server::Listeners {
            api: args.listen,
            tls,
            unix: args.listen_unix.clone(),
            admin: args.admin_listen,
        },
        shutdown_grace: args.shutdown_grace,
        metrics: None,
        cache: Some(cache),
        delegated,
        limits: server::Limits {
            max_requests_inflight: args.max_requests_inflight,
            max_connections: args.max_connections,
            max_request_body_bytes: args.max_request_body_bytes,
        },
        h2_write_batching: args.h2_write_batching,
        // Delegated mode authenticates every request instead.
        accept_hosts: match args.auth_mode {
            auth::AuthMode::TrustedLocal => Some(server::hosts::AcceptHosts::new(&args.accept_hosts)?),
            auth::AuthMode::Delegated => None,
        },
    })
}
