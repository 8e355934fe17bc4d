//! The shutdown signal: SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C).

/// Completes when the process is asked to stop.
pub(crate) async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(err) => {
            tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops watchmux");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

/// The stages of a graceful shutdown, as the subsystems hold them: the
/// composition root hands clones to what it builds, and `Server::serve`
/// moves through them in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stages {
    /// Set when shutdown begins: `/readyz` says "shutting down".
    pub shutting_down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Cancelled once accepting stopped: watch streams end (served from the
    /// cache or passed through), so their clients resume elsewhere.
    pub streams: tokio_util::sync::CancellationToken,
    /// Cancelled last, after the grace period: reflectors, the readiness
    /// probe, the admin listener.
    pub background: tokio_util::sync::CancellationToken,
}
