//! watchmux: a transparent caching watch proxy for the Kubernetes API.
//!
//! The crate is organised by concern, following the request path:
//! [`app`] composes the subsystems from their settings, [`server`] accepts
//! connections, [`pipeline`] is what every request meets in order,
//! [`request`] classifies what a request means
//! to the API, [`passthrough`] forwards what watchmux does not answer itself
//! to the [`upstream`] API server, [`encode`] writes the bodies watchmux
//! produces (Status errors), and [`metrics`] names everything it counts.
//! [`cache`] answers LIST, GET and WATCH from one upstream list+watch per
//! resource, with [`selector`] for label and field selectors. [`config`]
//! holds the flags and maps them onto each subsystem's settings; the
//! kubeconfig is the [`upstream`]'s. [`auth`] authenticates and
//! authorizes clients in delegated mode.

pub mod allocator;
pub mod app;
pub(crate) mod auth;
pub mod body;
pub(crate) mod cache;
pub(crate) mod compress;
pub mod config;
pub mod encode;
pub(crate) mod error;
pub(crate) mod fair_queue;
pub mod fairness;
pub(crate) mod go_rules;
pub mod install;
pub(crate) mod metrics;
pub(crate) mod negotiate;
pub(crate) mod passthrough;
pub(crate) mod pipeline;
pub(crate) mod request;
pub(crate) mod selector;
pub mod server;
pub mod upstream;

#[cfg(test)]
mod fuzz;

use std::sync::Arc;

use anyhow::Context as _;

use app::App;
use config::Args;
use upstream::Upstream;

/// Runs watchmux with the given flags until SIGTERM or SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let metrics = metrics::install().context("installing the metrics recorder")?;
    let upstream_cfg = upstream::kubeconfig::resolve(args.kubeconfig.as_deref(), args.context.as_deref())
        .context("resolving the upstream API server")?;
    tracing::info!(server = %upstream_cfg.server, source = %upstream_cfg.source, "upstream");
    let upstream =
        Arc::new(Upstream::new(&upstream_cfg, args.upstream_options()?).context("configuring the upstream client")?);
    // An exec plugin runs now, so that one that fails stops watchmux here
    // instead of every request failing later.
    upstream.load_credentials().await.context("getting the upstream credentials")?;
    match args.check_trust() {
        Ok(None) => {}
        Ok(Some(warning)) => tracing::warn!("{warning}"),
        Err(refusal) => anyhow::bail!(refusal),
    }
    let mut opts = args.server_options()?;
    opts.metrics = Some(metrics);
    tracing::info!(
        auth_mode = config::spelled_as_flag(&args.auth_mode),
        upstream_identity = config::spelled_as_flag(&args.upstream_identity),
        client_certificates = args.client_ca_file.is_some(),
        "client auth"
    );
    let app = App::build(upstream, opts).await?;
    tracing::info!(admin = %app.admin_addr(), "admin endpoints: /metrics /healthz /livez /readyz");
    app.serve(server::lifecycle::shutdown::signal()).await
}
