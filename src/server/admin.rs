//! The admin listener: Prometheus metrics and health endpoints.
//!
//! It has a port of its own so that `/metrics`, `/healthz`, `/livez` and
//! `/readyz` on the API port keep meaning the upstream API server's, as
//! clients expect from a transparent proxy.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::body::{self, ProxyBody};
use crate::cache::registry::Registry;
use crate::upstream::Upstream;

/// State the admin endpoints report on.
#[derive(Debug, Clone)]
pub struct AdminState {
    pub upstream: Arc<Upstream>,
    /// `None` when no global recorder is installed (tests).
    pub metrics: Option<PrometheusHandle>,
    /// Set at the start of shutdown so load balancers stop sending traffic
    /// before the listeners close.
    pub shutting_down: Arc<AtomicBool>,
    /// With `--cache-warm`, readiness also waits for every cache to sync.
    pub caches: Option<Arc<Registry>>,
}

pub async fn handle(state: Arc<AdminState>, req: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => match &state.metrics {
            Some(handle) => {
                let mut resp = Response::new(body::full(handle.render()));
                resp.headers_mut().insert(header::CONTENT_TYPE, "text/plain; version=0.0.4".parse().expect("static"));
                resp
            }
            None => text(StatusCode::NOT_FOUND, "metrics recorder not installed\n"),
        },
        "/healthz" | "/livez" => text(StatusCode::OK, "ok"),
        "/readyz" => {
            if state.shutting_down.load(Ordering::Relaxed) {
                text(StatusCode::SERVICE_UNAVAILABLE, "[-]shutdown: shutting down\n")
            } else if !state.upstream.is_ready() {
                text(StatusCode::SERVICE_UNAVAILABLE, "[-]upstream: not reachable or not ready\n")
            } else if state.caches.as_ref().is_some_and(|r| !r.warm_and_synced()) {
                text(StatusCode::SERVICE_UNAVAILABLE, "[-]caches: not synced yet\n")
            } else {
                text(StatusCode::OK, "ok")
            }
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
    })
}

fn text(status: StatusCode, msg: &'static str) -> Response<ProxyBody> {
    let mut resp = Response::new(body::full(msg));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, "text/plain; charset=utf-8".parse().expect("static"));
    resp
}
