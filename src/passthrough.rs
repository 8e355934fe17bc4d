//! The transparent reverse proxy: every request watchmux does not answer
//! itself goes upstream unchanged but for its hop-by-hop headers and its
//! credentials, and the answer streams back as it arrives.
//!
//! Bodies are never buffered: hyper hands each upstream frame to the
//! downstream connection as soon as it is read, which is what makes `watch`
//! and `logs -f` work through the proxy. Upgrades are tunnelled as raw bytes.

pub(crate) mod budget;
pub(crate) mod headers;
pub(crate) mod identity;
mod resource_label;
pub(crate) mod shared;
mod upgrade;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Request, Response};
use metrics::{counter, gauge, histogram};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::Peer;
use crate::auth::UpstreamIdentity;
use crate::body::{self, EndOnShutdown, ProxyBody, Refusal, RequestBody};
use crate::encode::status::{Status, StatusReason};
use crate::error::error_chain;
use crate::metrics as m;
use crate::request::RequestInfo;
use crate::server::gates::limits::{Limit, too_many_requests};
use crate::upstream::{ConnectionKind, SendError, Upstream, UpstreamCredential};
use budget::{AnswerBudget, Hold};
use resource_label::ResourceLabels;
use shared::{SharedAnswers, SharedKey};

/// Forwards requests to the upstream.
#[derive(Debug, Clone)]
pub(crate) struct Passthrough {
    upstream: Arc<Upstream>,
    /// Cancelled at shutdown: watch streams end cleanly when it is.
    streams_stop: CancellationToken,
    /// The bounded `resource` label of the pass-through metrics.
    resources: Arc<ResourceLabels>,
    /// Whether requests to the upstream are failing, so that a change is
    /// logged once, not once per request.
    failures: Arc<FailureLog>,
    /// The answers fetched once for every caller (OpenAPI documents, health).
    shared: Arc<SharedAnswers>,
    /// What answers may hold for clients that do not read them (see [`budget`]).
    answers: AnswerLimits,
}

/// `--passthrough-buffer-bytes` and `--passthrough-stall-timeout`.
#[derive(Debug, Clone)]
pub(crate) struct AnswerLimits {
    budget: Option<Arc<AnswerBudget>>,
    stall: Duration,
}

impl AnswerLimits {
    /// `buffer_bytes` of stream windows (0: no budget), answers cut off once
    /// their client has not read them for `stall`.
    pub(crate) fn new(buffer_bytes: u64, stall: Duration) -> Self {
        let window = u64::from(crate::upstream::streams::STREAM_WINDOW);
        Self { budget: AnswerBudget::new(buffer_bytes, window), stall }
    }
}

impl Passthrough {
    pub(crate) fn new(upstream: Arc<Upstream>, streams_stop: CancellationToken, answers: AnswerLimits) -> Self {
        let shared = Arc::new(SharedAnswers::new(upstream.clone()));
        Self { upstream, streams_stop, resources: Arc::default(), failures: Arc::default(), shared, answers }
    }

    /// The shared answer to a request (`key`, from [`SharedKey::of`]: an
    /// immutable OpenAPI document, a health check), for a caller already
    /// authorized for it; `None`: forward the request.
    pub(crate) async fn shared_answer(&self, key: &SharedKey) -> Option<Response<ProxyBody>> {
        self.shared.answer(key).await
    }

    /// Forwards one request as `identity` and returns the upstream's answer,
    /// or a 503 Status when the upstream cannot be reached.
    /// `info` is the request's classification, made once by the caller.
    pub(crate) async fn forward(
        &self,
        req: Request<RequestBody>,
        peer: Peer,
        info: &RequestInfo,
        identity: &UpstreamIdentity,
    ) -> Response<ProxyBody> {
        if req.version() <= http::Version::HTTP_11 && headers::is_upgrade_request(req.headers()) {
            return upgrade::forward(self, req, peer, info, identity).await;
        }

        // A window of the budget before anything is sent: a client that
        // holds its share gets the API server's 429 for too many requests.
        let client = peer.addr.map(|a| a.ip());
        let hold = if info.is_long_running() {
            Hold::WhileBehind { budget: self.answers.budget.clone(), client }
        } else {
            match self.answers.budget.as_ref().map(|b| b.take(client)) {
                Some(None) => return too_many_requests(Limit::PassthroughBuffer, false),
                Some(unit) => Hold::Whole(unit),
                None => Hold::Whole(None),
            }
        };
        let started = Instant::now();
        let verb = info.verb_label();
        let inflight = InflightGuard::new();
        let (mut parts, incoming) = req.into_parts();
        headers::remove_hop_by_hop(&mut parts.headers);
        if let Some(addr) = peer.addr {
            headers::append_forwarded_for(&mut parts.headers, addr.ip());
        }
        // Last: nothing after this may touch who the request is from.
        if let Err(refusal) = set_identity(&mut parts.headers, identity) {
            return *refusal;
        }
        let upstream_req = Request::from_parts(parts, body::boxed(incoming));

        // Long-running or not, on the pass-through pool: it opens another
        // connection when one's streams are used up.
        let sent = self.upstream.send_as(upstream_req, &identity.credential(), ConnectionKind::Pooled).await;
        let resp = match sent {
            Ok(resp) => {
                self.failures.succeeded();
                resp
            }
            Err(err) => return self.upstream_failure(&err, verb, info),
        };
        // A 401 to watchmux's own credentials is watchmux's failure, not the
        // client's: relayed, kubectl would tell a client that sent none to
        // log in. The API server authenticated nobody but watchmux here.
        if resp.status() == http::StatusCode::UNAUTHORIZED && identity.credential() == UpstreamCredential::Watchmux {
            counter!(m::UPSTREAM_ERRORS, "cause" => "credentials_rejected").increment(1);
            self.failures.rejected();
            let status = Status::upstream_unavailable(
                self.upstream.server(),
                "it refused watchmux's own credentials (401): they may have expired or been revoked",
            );
            return status.retry_after(1).into_response();
        }
        let resource = self.resources.label(info, Some(resp.status()));
        histogram!(m::PASSTHROUGH_DURATION, "verb" => verb, "resource" => resource.clone())
            .record(started.elapsed().as_secs_f64());
        counter!(m::PASSTHROUGH_REQUESTS, "verb" => verb, "resource" => resource, "code" => resp.status().as_str().to_owned())
            .increment(1);

        let (mut parts, incoming) = resp.into_parts();
        headers::remove_hop_by_hop(&mut parts.headers);
        // The guard lives as long as the body, so long-running streams count
        // as in flight until they end.
        let incoming = http_body_util::BodyExt::map_frame(incoming, move |frame| {
            let _ = &inflight;
            frame
        });
        let body = if info.is_watch() {
            // The connection's own end (its maximum age) when it has one.
            let stop = peer.streams_stop.as_ref().unwrap_or(&self.streams_stop);
            body::boxed(EndOnShutdown::new(incoming, stop.clone()))
        } else {
            body::boxed(incoming)
        };
        Response::from_parts(parts, budget::watch(body, hold, self.answers.stall))
    }

    /// Maps a failure to reach the upstream (or to get watchmux's credentials
    /// for it) to the 503 Status a client expects.
    ///
    /// The Status names the upstream and the cause. A connection the upstream
    /// refused gets no Retry-After: a client that reached the API server
    /// directly would fail at once (connection refused), and client-go retries
    /// a 503 only when told when to, ten times over; with it, kubectl waited
    /// 50 s before showing the error. Other failures keep Retry-After: 1.
    fn upstream_failure(&self, err: &SendError, verb: &'static str, info: &RequestInfo) -> Response<ProxyBody> {
        let upstream = &self.upstream;
        let resource = self.resources.label(info, None);
        let cause = FailureCause::of(err);
        counter!(m::UPSTREAM_ERRORS, "cause" => cause.label()).increment(1);
        self.failures.failed(cause.label(), err);
        // An upstream that took the request and never answered is a gateway
        // timeout, as kube-apiserver's own 504 for a request it could not finish.
        let status = match err {
            SendError::ResponseHeaders(timeout) => Status::new(
                http::StatusCode::GATEWAY_TIMEOUT,
                StatusReason::Timeout,
                format!("watchmux: the upstream API server {} did not answer: {timeout}", upstream.server()),
            ),
            _ => Status::upstream_unavailable(upstream.server(), error_chain(err)),
        };
        counter!(m::PASSTHROUGH_REQUESTS, "verb" => verb, "resource" => resource, "code" => status.code.as_str().to_owned())
            .increment(1);
        // A refused connection fails at once directly too: no Retry-After.
        let status = if cause == FailureCause::Connect { status } else { status.retry_after(1) };
        status.into_response()
    }
}

/// Writes the request's upstream identity, or answers 403 when the API
/// server would not read it back as the same identity (an identity from a
/// TokenReview or a certificate may hold anything): refused, never sent as
/// someone else.
fn set_identity(headers: &mut http::HeaderMap, identity: &UpstreamIdentity) -> Result<(), Refusal> {
    identity::apply(headers, identity).map_err(|err| {
        tracing::warn!(error = %err, "cannot pass the caller on to the upstream");
        let mut status = Status::new(
            http::StatusCode::FORBIDDEN,
            StatusReason::Forbidden,
            format!("watchmux cannot pass this caller on to the API server: {err}"),
        );
        status.nosniff = true;
        Box::new(status.into_response())
    })
}

/// Why a request could not be sent upstream, as counted
/// (`watchmux_upstream_errors_total{cause}`) and answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailureCause {
    /// watchmux's own credentials (or its client certificate) failed.
    Credentials,
    /// The upstream took the request and sent no response headers in time.
    ResponseHeaders,
    /// No connection: refused, unreachable, or the handshake failed.
    Connect,
    /// Anything else on the way.
    Request,
}

impl FailureCause {
    fn of(err: &SendError) -> Self {
        match err {
            SendError::Credentials(_) | SendError::ClientTls(_) => Self::Credentials,
            SendError::ResponseHeaders(_) => Self::ResponseHeaders,
            other if other.is_connect() => Self::Connect,
            _ => Self::Request,
        }
    }

    /// The metric label.
    fn label(self) -> &'static str {
        match self {
            Self::Credentials => "credentials",
            Self::ResponseHeaders => "response_headers",
            Self::Connect => "connect",
            Self::Request => "request",
        }
    }
}

/// Whether requests to the upstream are failing, so that a change is
/// logged once, not once per request (an outage would log every client's
/// every retry).
#[derive(Debug, Default)]
struct FailureLog(AtomicBool);

impl FailureLog {
    fn failed(&self, cause: &'static str, err: &SendError) {
        if !self.0.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %error_chain(err), cause, "upstream requests are failing (logged again when they succeed)");
        } else {
            tracing::debug!(error = %error_chain(err), cause, "upstream request failed");
        }
    }

    fn rejected(&self) {
        if !self.0.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the upstream refuses watchmux's own credentials (401) (logged again when requests succeed)"
            );
        }
    }

    fn succeeded(&self) {
        // A load first: the common case writes nothing shared.
        if self.0.load(Ordering::Relaxed) && self.0.swap(false, Ordering::Relaxed) {
            tracing::info!("upstream requests are succeeding again");
        }
    }
}

/// Counts a forwarded request as in flight until dropped.
struct InflightGuard;

impl InflightGuard {
    fn new() -> Self {
        gauge!(m::PASSTHROUGH_INFLIGHT).increment(1.0);
        Self
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        gauge!(m::PASSTHROUGH_INFLIGHT).decrement(1.0);
    }
}
