//! Limits that keep one client, or a crowd, from exhausting watchmux: how
//! many requests run at once, how many connections are open, how large a
//! request body may be. Each refusal is the answer kube-apiserver gives for
//! the same limit, so clients back off the way they already know.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use metrics::counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::{self, ProxyBody, Refusal};
use crate::encode::status::{Status, StatusReason};
use crate::metrics as m;
use crate::request::{RequestInfo, Verb};

/// The request limits of the API listener.
#[derive(Debug, Clone)]
pub(crate) struct RequestLimits {
    /// Permits for requests that are not long-running; `None`: no limit.
    inflight: Option<Arc<Semaphore>>,
    /// Largest Content-Length of a write; 0: no limit.
    max_body_bytes: u64,
}

impl RequestLimits {
    pub(crate) fn new(max_inflight: usize, max_body_bytes: u64) -> Self {
        Self { inflight: (max_inflight > 0).then(|| Arc::new(Semaphore::new(max_inflight))), max_body_bytes }
    }

    /// Admits a request, or answers why not. Watches and other long-running
    /// requests are not counted, as the API server does not count them in
    /// `--max-requests-inflight`: they would use the budget up.
    pub(crate) fn admit(&self, info: &RequestInfo, headers: &HeaderMap) -> Result<Admitted, Refusal> {
        if let Some(too_large) = self.body_too_large(info, headers) {
            return Err(too_large);
        }
        let permit = match &self.inflight {
            Some(sem) if !info.is_long_running() => match sem.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => return Err(Box::new(too_many_requests(Limit::Inflight, false))),
            },
            _ => None,
        };
        Ok(Admitted { _permit: permit })
    }

    /// The API server's 413 for a write whose body is over the limit. Bodies
    /// sent without a Content-Length stream through; the API server applies
    /// its own limit to them.
    fn body_too_large(&self, info: &RequestInfo, headers: &HeaderMap) -> Option<Refusal> {
        if self.max_body_bytes == 0 || !info.is_resource_request {
            return None;
        }
        let writes = matches!(
            info.verb,
            Some(Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection)
        );
        let length: u64 = headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()?;
        if !writes || info.is_long_running() || length <= self.max_body_bytes {
            return None;
        }
        Limit::BodySize.count();
        let message = format!("Request entity too large: limit is {}", self.max_body_bytes);
        Some(Box::new(
            Status::new(StatusCode::PAYLOAD_TOO_LARGE, StatusReason::RequestEntityTooLarge, message).into_response(),
        ))
    }
}

/// Holds an in-flight slot until dropped (when the response head is sent).
pub(crate) struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
}

/// Counts open API connections against `--max-connections`.
#[derive(Debug)]
pub(crate) struct ConnectionBudget {
    open: AtomicUsize,
    max: usize,
}

impl ConnectionBudget {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { open: AtomicUsize::new(0), max })
    }

    /// Counts a new connection; `within` is false when it is over the limit.
    /// The connection still gets served, with a 429 to each request and a
    /// close, so the client learns why instead of seeing a reset.
    pub(crate) fn open(self: &Arc<Self>) -> OpenSlot {
        let before = self.open.fetch_add(1, Ordering::Relaxed);
        let within = self.max == 0 || before < self.max;
        if !within {
            Limit::Connections.count();
        }
        OpenSlot { budget: self.clone(), within }
    }
}

/// A limit that refuses a request before any work, as the `limit` label of
/// `watchmux_requests_rejected_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `--max-requests-inflight`.
    Inflight,
    /// `--max-request-body-bytes`.
    BodySize,
    /// `--max-connections` (counted once per connection, when it opens).
    Connections,
    /// trusted-local's `--accept-hosts`.
    Host,
}

impl Limit {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Inflight => "inflight",
            Self::BodySize => "body_size",
            Self::Connections => "connections",
            Self::Host => "host",
        }
    }

    /// Counts one refusal.
    pub(crate) fn count(self) {
        counter!(m::REQUESTS_REJECTED, "limit" => self.as_str()).increment(1);
    }
}

/// One counted connection.
pub(crate) struct OpenSlot {
    budget: Arc<ConnectionBudget>,
    pub within: bool,
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.budget.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The API server's 429: plain text, `Retry-After: 1`. With `close`, the
/// connection is closed after it.
pub(crate) fn too_many_requests(limit: Limit, close: bool) -> Response<ProxyBody> {
    // Connections over the limit are counted once, when they open.
    if limit != Limit::Connections {
        limit.count();
    }
    let mut resp = Response::new(body::full(Bytes::from_static(b"Too many requests, please try again later.\n")));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn info(method: Method, uri: &str) -> RequestInfo {
        RequestInfo::classify(&method, &uri.parse().unwrap())
    }

    fn with_length(n: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, n.into());
        h
    }

    #[test]
    fn inflight_limit_skips_long_running_requests() {
        let limits = RequestLimits::new(1, 0);
        let list = info(Method::GET, "/api/v1/pods");
        let held = limits.admit(&list, &HeaderMap::new()).ok().unwrap();
        let refused = limits.admit(&list, &HeaderMap::new()).err().unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        assert!(limits.admit(&info(Method::GET, "/api/v1/pods?watch=1"), &HeaderMap::new()).is_ok());
        drop(held);
        assert!(limits.admit(&list, &HeaderMap::new()).is_ok());
    }

    #[tokio::test]
    async fn oversized_writes_get_the_api_servers_413() {
        use http_body_util::BodyExt;
        let limits = RequestLimits::new(0, 3 * 1024 * 1024);
        let create = info(Method::POST, "/api/v1/namespaces/a/configmaps");
        assert!(limits.admit(&create, &with_length(3 * 1024 * 1024)).is_ok());
        let resp = limits.admit(&create, &with_length(3 * 1024 * 1024 + 1)).err().unwrap();
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["message"], "Request entity too large: limit is 3145728");
        assert_eq!(v["reason"], "RequestEntityTooLarge");
        // Not a write: the limit does not apply (exec streams, proxy...).
        let exec = info(Method::POST, "/api/v1/namespaces/a/pods/p/exec");
        assert!(limits.admit(&exec, &with_length(10 << 20)).is_ok());
    }

    #[test]
    fn connection_budget_counts_open_connections() {
        let budget = ConnectionBudget::new(2);
        let a = budget.open();
        let b = budget.open();
        let c = budget.open();
        assert!(a.within && b.within && !c.within);
        drop(a);
        drop(c);
        assert!(budget.open().within);
    }
}
