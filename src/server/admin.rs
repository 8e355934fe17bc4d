//! The admin listener: Prometheus metrics and health endpoints.
//!
//! It has a port of its own so that `/metrics`, `/healthz`, `/livez` and
//! `/readyz` on the API port keep meaning the upstream API server's, as
//! clients expect from a transparent proxy.
//!
//! The probes answer different questions:
//! - `/livez` (`/healthz`): the process serves HTTP at all. Restart if not.
//! - `/readyz`: this instance can serve, so a Service may send it traffic:
//!   not shutting down, with `--cache-warm` every configured cache synced
//!   once, and either the upstream reachable or caches synced that can
//!   answer reads while it is away. An upstream outage alone does not take
//!   a replica out of its Service exactly when cached reads matter most.
//! - `/readyz/upstream`: the upstream's own state (its `/readyz`, probed
//!   every 5 s), for monitoring and alerts, not for routing.
//!
//! `?verbose` lists each check, as the API server's `/readyz?verbose` does.
//!
//! `/metrics` is the recorder's rendering, with the caches' staleness
//! brought up to date and the `process_*` metrics read at that moment.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Method, Request, Response, StatusCode, header};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::body::{self, ProxyBody, RequestBody};
use crate::cache::registry::Registry;
use crate::upstream::Upstream;

/// State the admin endpoints report on.
#[derive(Debug, Clone)]
pub(crate) struct AdminState {
    pub upstream: Arc<Upstream>,
    /// `None` when no global recorder is installed (tests).
    pub metrics: Option<PrometheusHandle>,
    /// Set at the start of shutdown so load balancers stop sending traffic
    /// before the listeners close.
    pub shutting_down: Arc<AtomicBool>,
    /// The caches, when there are any: readiness looks at them, and their
    /// staleness gauges are brought up to date at each scrape.
    pub caches: Option<Arc<Registry>>,
}

/// One readiness check's result.
struct Check {
    name: &'static str,
    failure: Option<&'static str>,
    /// What a passing check has to say (shown with `?verbose`).
    note: Option<String>,
}

impl Check {
    fn new(name: &'static str, failure: Option<&'static str>) -> Self {
        Self { name, failure, note: None }
    }
}

impl AdminState {
    fn readiness(&self) -> Vec<Check> {
        let shutting_down = self.shutting_down.load(Ordering::Relaxed);
        let upstream = self.upstream.is_ready();
        let (warm_pending, can_serve_alone) = match &self.caches {
            Some(r) => {
                let caches = r.caches();
                (r.config().warm && !r.warm_and_synced(), !caches.is_empty() && caches.iter().all(|c| c.is_ready()))
            }
            None => (false, false),
        };
        let mut checks = readiness_checks(shutting_down, upstream, warm_pending, can_serve_alone);
        let unproven: Vec<String> = match &self.caches {
            Some(r) => {
                r.caches().iter().filter(|c| c.check_state().is_unproven()).map(|c| c.label().to_owned()).collect()
            }
            None => Vec::new(),
        };
        checks.push(consistency_check(&unproven));
        if let Some(r) = &self.caches {
            checks.push(offline_check(&crate::cache::stale_reads::publish(r)));
        }
        checks
    }
}

/// Whether an instance can serve: `upstream` ready, `--cache-warm` caches
/// still `warm_pending`, and whether synced caches `can_serve_alone`.
fn readiness_checks(shutting_down: bool, upstream: bool, warm_pending: bool, can_serve_alone: bool) -> Vec<Check> {
    vec![
        Check::new("shutdown", shutting_down.then_some("shutting down")),
        Check::new("caches", warm_pending.then_some("not synced yet")),
        Check::new(
            "serving",
            (!upstream && !can_serve_alone)
                .then_some("the upstream is not ready and no synced cache can answer without it"),
        ),
    ]
}

/// The caches a consistency check found different from the upstream, until
/// their relist. Informational: it never fails readiness. Such a cache
/// already passes its consistent reads through and is being relisted (a
/// matter of seconds); taking every replica out at once for it, as a
/// readiness failure would when one cause hits them all, would turn a
/// healing cache into an outage.
fn consistency_check(unproven: &[String]) -> Check {
    let note = (!unproven.is_empty())
        .then(|| format!("unproven until relisted (consistent reads pass through): {}", unproven.join(", ")));
    Check { name: "cache-consistency", failure: None, note }
}

/// The caches serving a state the upstream has not confirmed (loaded from
/// disk and not answered yet, or answering consistent reads while it cannot
/// be reached). Informational, like the consistency check: these caches
/// are what keeps a node working while the upstream is away.
fn offline_check(serving: &[String]) -> Check {
    let note = (!serving.is_empty())
        .then(|| format!("serving unproven state (the upstream has not confirmed it): {}", serving.join(", ")));
    Check { name: "cache-unproven", failure: None, note }
}

/// The API server's health-check rendering: `ok` when every check passes,
/// else (or with `?verbose`) one `[+]`/`[-]` line per check.
fn report(what: &str, checks: &[Check], verbose: bool) -> Response<ProxyBody> {
    let ok = checks.iter().all(|c| c.failure.is_none());
    let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    if ok && !verbose {
        return text(status, "ok".to_owned());
    }
    let mut out = String::new();
    for c in checks {
        match c.failure {
            None => match &c.note {
                None => out.push_str(&format!("[+]{} ok\n", c.name)),
                Some(note) => out.push_str(&format!("[+]{} ok: {note}\n", c.name)),
            },
            Some(why) => out.push_str(&format!("[-]{} failed: {why}\n", c.name)),
        }
    }
    out.push_str(&format!("{what} check {}\n", if ok { "passed" } else { "failed" }));
    text(status, out)
}

pub(crate) async fn handle(
    state: Arc<AdminState>,
    req: Request<RequestBody>,
) -> Result<Response<ProxyBody>, Infallible> {
    // A DNS-rebinding page names its own host: only IP literals and
    // localhost are answered (the request carries no credential to check).
    if !super::gates::hosts::AdminHosts.accepts(req.uri(), req.headers()) {
        return Ok(super::gates::hosts::forbidden());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n".to_owned()));
    }
    let verbose = crate::request::GoQuery::of(req.uri()).get("verbose").is_some();
    Ok(match req.uri().path() {
        "/metrics" => match &state.metrics {
            Some(handle) => {
                if let Some(registry) = &state.caches {
                    let now = tokio::time::Instant::now();
                    for cache in registry.caches() {
                        cache.publish_staleness(now);
                    }
                    crate::cache::stale_reads::publish(registry);
                }
                let mut text = handle.render();
                text.push_str(&crate::metrics::process::render());
                let mut resp = Response::new(body::full(text));
                resp.headers_mut().insert(header::CONTENT_TYPE, "text/plain; version=0.0.4".parse().expect("static"));
                resp
            }
            None => text(StatusCode::NOT_FOUND, "metrics recorder not installed\n".to_owned()),
        },
        "/healthz" | "/livez" => text(StatusCode::OK, "ok".to_owned()),
        "/readyz" => report("readyz", &state.readiness(), verbose),
        "/readyz/upstream" => {
            let failure = state.upstream.health().failure();
            let check = Check { note: state.upstream.endpoints_summary(), ..Check::new("upstream", failure) };
            report("readyz", &[check], verbose)
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
    })
}

fn text(status: StatusCode, msg: String) -> Response<ProxyBody> {
    let mut resp = Response::new(body::full(msg));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, "text/plain; charset=utf-8".parse().expect("static"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(shutting_down: bool, upstream: bool, warm_pending: bool, can_serve_alone: bool) -> bool {
        readiness_checks(shutting_down, upstream, warm_pending, can_serve_alone).iter().all(|c| c.failure.is_none())
    }

    #[test]
    fn synced_caches_keep_an_instance_ready_through_an_upstream_outage() {
        assert!(ready(false, true, false, false), "the upstream alone is enough");
        assert!(ready(false, false, false, true), "synced caches serve while the upstream is away");
        assert!(!ready(false, false, false, false), "nothing can serve");
        assert!(!ready(false, true, true, true), "--cache-warm waits for its caches");
        assert!(!ready(true, true, false, true), "shutting down");
    }

    #[tokio::test]
    async fn reports_read_as_the_api_servers() {
        let body = |resp: Response<ProxyBody>| async move {
            let status = resp.status();
            let bytes = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
            (status, String::from_utf8(bytes.to_vec()).unwrap())
        };
        let passing = readiness_checks(false, true, false, false);
        assert_eq!(body(report("readyz", &passing, false)).await, (StatusCode::OK, "ok".into()));
        assert_eq!(
            body(report("readyz", &passing, true)).await.1,
            "[+]shutdown ok\n[+]caches ok\n[+]serving ok\nreadyz check passed\n"
        );
        // An unproven cache is named, and readiness still passes.
        let mut healing = passing;
        healing.push(consistency_check(&["configmaps".to_owned()]));
        let (status, text) = body(report("readyz", &healing, true)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains(
            "[+]cache-consistency ok: unproven until relisted (consistent reads pass through): configmaps\n"
        ));
        assert!(consistency_check(&[]).note.is_none());
        let failing = readiness_checks(false, false, false, false);
        let (status, text) = body(report("readyz", &failing, false)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            text.contains("[-]serving failed: the upstream is not ready") && text.ends_with("readyz check failed\n")
        );
    }
}
