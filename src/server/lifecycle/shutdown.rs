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

/// kube-apiserver's answer to a request that arrives once its shutdown has
/// begun (`--shutdown-send-retry-after`, the `WithRetryAfter` filter): 429
/// with `Retry-After: 5` and its plain-text message, and on HTTP/1.1
/// `Connection: close`, so the client tries again on a new connection, which
/// a balancer gives to another replica. Such a request (one pipelined or
/// sent on a keep-alive connection after its last answer, or an HTTP/2
/// stream racing the GOAWAY) was served as any other before, and a watch
/// from it ended at once, empty: client-go calls that a "very short watch"
/// and lists again, the relist a rollout must not cost. A 429 it retries
/// from the same version after its backoff.
pub(crate) fn refusal(version: http::Version) -> http::Response<crate::body::ProxyBody> {
    use http::{HeaderValue, StatusCode, header};
    let mut resp = http::Response::new(crate::body::full(bytes::Bytes::from_static(SHUTTING_DOWN.as_bytes())));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    // HTTP/2 has no Connection header (RFC 9113 8.2.2): its GOAWAY is sent.
    if version < http::Version::HTTP_2 {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    metrics::counter!(crate::metrics::SHUTDOWN_REFUSED).increment(1);
    resp
}

/// The message, with the newline Go's `http.Error` ends it with.
const SHUTTING_DOWN: &str = "The apiserver is shutting down, please try again later.\n";

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    #[tokio::test]
    async fn a_request_after_the_shutdown_began_gets_the_api_servers_429() {
        let resp = refusal(http::Version::HTTP_11);
        assert_eq!(resp.status(), 429);
        let h = resp.headers();
        assert_eq!(h["retry-after"], "5");
        assert_eq!(h["connection"], "close");
        assert_eq!(h["content-type"], "text/plain; charset=utf-8");
        assert_eq!(h["x-content-type-options"], "nosniff");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"The apiserver is shutting down, please try again later.\n");
        assert!(!refusal(http::Version::HTTP_2).headers().contains_key("connection"), "no Connection on HTTP/2");
    }
}
