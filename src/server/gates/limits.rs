//! Limits that keep one client, or a crowd, from exhausting watchmux: how
//! many requests run at once, how large a request body may be (open
//! connections: [`super::connections`]). Each refusal is the answer kube-apiserver gives for
//! the same limit, so clients back off the way they already know.

use std::sync::Arc;

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
        Ok(Admitted { permit })
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

/// What a Go HTTP/2 handler writes without waiting for its client: its
/// response writer's buffer (`handlerChunkWriteSize`, 4 KiB).
const HANDLER_WRITE_BUFFER: u64 = 4 << 10;

/// How long an unsent answer may keep its in-flight slot: kube-apiserver's
/// request timeout (`--request-timeout`, 1 minute), after which its handler
/// blocked writing to a client that does not read is cut off and its slot
/// freed. Without it, a few connections of unread answers would hold every
/// slot for as long as they stay open.
const UNSENT_HOLD: std::time::Duration = std::time::Duration::from_secs(60);

/// Holds an in-flight slot until dropped: [`Admitted::until_sent`] keeps it
/// until the answer's body has been sent (or dropped), at most
/// [`UNSENT_HOLD`], so that answers a client does not read count against
/// `--max-requests-inflight`, as a Go handler blocked writing them counts in
/// kube-apiserver until its request timeout.
pub(crate) struct Admitted {
    permit: Option<OwnedSemaphorePermit>,
}

impl Admitted {
    /// `resp`, holding the slot until its body is dropped. A body known to
    /// fit [`HANDLER_WRITE_BUFFER`] gives the slot back at once: a Go
    /// handler writes it into its buffer and returns, so the API server's
    /// filter releases the slot too, even if the client never reads (a 429
    /// to a client with a zero window must not hold a slot).
    pub(crate) fn until_sent(self, resp: Response<ProxyBody>) -> Response<ProxyBody> {
        use http_body::Body;
        let small = resp.body().size_hint().exact().is_some_and(|n| n <= HANDLER_WRITE_BUFFER);
        match self.permit {
            Some(permit) if !small => resp.map(|b| body::holding_at_most(b, permit, UNSENT_HOLD)),
            _ => resp,
        }
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
    /// `--max-connections` and `--max-connections-per-address` (counted
    /// once per connection, when it opens).
    Connections,
    /// `--max-connections-per-user` (counted per refused request; the
    /// connection closes after it).
    UserConnections,
    /// trusted-local's `--accept-hosts`.
    Host,
    /// `--passthrough-buffer-bytes`, in all or one client's share.
    PassthroughBuffer,
}

impl Limit {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Inflight => "inflight",
            Self::BodySize => "body_size",
            Self::Connections => "connections",
            Self::UserConnections => "user_connections",
            Self::Host => "host",
            Self::PassthroughBuffer => "passthrough_buffer",
        }
    }

    /// Counts one refusal.
    pub(crate) fn count(self) {
        counter!(m::REQUESTS_REJECTED, "limit" => self.as_str()).increment(1);
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

    #[tokio::test]
    async fn inflight_limit_skips_long_running_requests() {
        let limits = RequestLimits::new(1, 0);
        let list = info(Method::GET, "/api/v1/pods");
        let held = limits.admit(&list, &HeaderMap::new()).ok().unwrap();
        let refused = limits.admit(&list, &HeaderMap::new()).err().unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        assert!(limits.admit(&info(Method::GET, "/api/v1/pods?watch=1"), &HeaderMap::new()).is_ok());
        // The answer, not its head, holds the slot...
        let large = Bytes::from(vec![b'x'; HANDLER_WRITE_BUFFER as usize + 1]);
        let answer = held.until_sent(Response::new(body::full(large)));
        assert!(limits.admit(&list, &HeaderMap::new()).is_err());
        drop(answer);
        // ...but for one a Go handler would have buffered and returned from.
        let held = limits.admit(&list, &HeaderMap::new()).ok().unwrap();
        let _small = held.until_sent(Response::new(body::full("x")));
        assert!(limits.admit(&list, &HeaderMap::new()).is_ok());
    }

    /// An answer nobody reads keeps its slot for kube-apiserver's request
    /// timeout, not for as long as its connection stays open.
    #[tokio::test(start_paused = true)]
    async fn an_unread_answer_gives_its_slot_back_after_the_request_timeout() {
        let limits = RequestLimits::new(1, 0);
        let list = info(Method::GET, "/api/v1/pods");
        let large = Bytes::from(vec![b'x'; HANDLER_WRITE_BUFFER as usize + 1]);
        let unread = limits.admit(&list, &HeaderMap::new()).ok().unwrap().until_sent(Response::new(body::full(large)));
        tokio::time::sleep(UNSENT_HOLD - std::time::Duration::from_millis(1)).await;
        assert!(limits.admit(&list, &HeaderMap::new()).is_err(), "held until the timeout");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        assert!(limits.admit(&list, &HeaderMap::new()).is_ok(), "given back at the timeout, the body still unread");
        drop(unread);
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
}
