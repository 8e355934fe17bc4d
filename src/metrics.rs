//! Every metric watchmux exports: names, help text and the recorder.
//!
//! Names live here and nowhere else, so the list below is the whole contract
//! with dashboards. Where the API server has a metric for the same concept the
//! name follows its family (`apiserver_...` becomes `watchmux_...`).

use std::time::Duration;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests forwarded to the upstream API server, by verb and HTTP code.
pub const PASSTHROUGH_REQUESTS: &str = "watchmux_passthrough_requests_total";
/// Time from receiving a forwarded request to the upstream's response head.
pub const PASSTHROUGH_DURATION: &str = "watchmux_passthrough_request_duration_seconds";
/// Forwarded requests in flight, long-running ones included.
pub const PASSTHROUGH_INFLIGHT: &str = "watchmux_passthrough_inflight_requests";
/// Requests that could not reach the upstream, by cause.
pub const UPSTREAM_ERRORS: &str = "watchmux_upstream_errors_total";
/// Upgraded connections (exec, attach, port-forward) being tunnelled.
pub const UPGRADED_TUNNELS: &str = "watchmux_upgraded_tunnels";
/// Downstream connections accepted, by listener.
pub const CONNECTIONS_ACCEPTED: &str = "watchmux_connections_accepted_total";
/// Downstream connections open now, by listener.
pub const CONNECTIONS_OPEN: &str = "watchmux_connections_open";
/// Downstream connections that ended in an error (bad TLS, malformed HTTP...).
pub const CONNECTION_ERRORS: &str = "watchmux_connection_errors_total";
/// 1 when the upstream answered its last readiness probe, else 0.
pub const UPSTREAM_READY: &str = "watchmux_upstream_ready";

/// Latency buckets, in seconds, for every `_seconds` histogram: from 1 ms (a
/// cached answer) to a minute (a slow upstream LIST).
const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Installs the global Prometheus recorder and describes every metric.
///
/// Returns the handle the admin endpoint renders `/metrics` from.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?
        .upkeep_timeout(Duration::from_secs(5))
        .install_recorder()?;
    describe();
    Ok(handle)
}

fn describe() {
    describe_counter!(PASSTHROUGH_REQUESTS, "Requests forwarded to the upstream API server, by verb and HTTP code.");
    describe_histogram!(
        PASSTHROUGH_DURATION,
        Unit::Seconds,
        "Time from receiving a forwarded request to the upstream's response headers, by verb."
    );
    describe_gauge!(PASSTHROUGH_INFLIGHT, "Forwarded requests in flight, long-running ones included.");
    describe_counter!(UPSTREAM_ERRORS, "Forwarded requests that failed to reach the upstream, by cause.");
    describe_gauge!(UPGRADED_TUNNELS, "Upgraded connections (exec, attach, port-forward) being tunnelled.");
    describe_counter!(CONNECTIONS_ACCEPTED, "Downstream connections accepted, by listener.");
    describe_gauge!(CONNECTIONS_OPEN, "Downstream connections open, by listener.");
    describe_counter!(CONNECTION_ERRORS, "Downstream connections that ended in an error, by listener and stage.");
    describe_gauge!(UPSTREAM_READY, "1 when the upstream API server answered its last readiness probe, else 0.");
}
