//! Limits that keep one client, or a crowd, from exhausting watchmux: how
//! many requests run at once, how many connections are open, how large a
//! request body may be. Each refusal is the answer kube-apiserver gives for
//! the same limit, so clients back off the way they already know.

use std::net::IpAddr;
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

/// Counts open API connections against `--max-connections`, each source
/// address against its share, and the connections answered with a 429
/// against a bound of their own: past it a connection is closed at accept,
/// so descriptors never run out before the budget answers (see
/// [`ConnectionBudget::new`]).
#[derive(Debug)]
pub(crate) struct ConnectionBudget {
    /// Connections served at once.
    max: usize,
    /// Connections one source address may have served at once.
    per_address: usize,
    /// Connections over a limit that may be open at once for their 429.
    overflow: usize,
    state: parking_lot::Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    within: usize,
    over: usize,
    by_address: std::collections::HashMap<IpAddr, usize>,
}

/// The descriptors kept for everything but downstream connections: the
/// listeners, the cache's files, logs, and a first share of upstream
/// connections; a quarter of the rest is kept for upstream connections too
/// (one per upgrade, one per HTTP/1.1 request in flight).
const RESERVED_DESCRIPTORS: usize = 256;

impl ConnectionBudget {
    /// A budget of `max` connections (0: as many as descriptors allow),
    /// `per_address` of them from one source address (0: a quarter), within
    /// `descriptors` (the open-file limit, when known): connections served
    /// and connections answered with a 429 together keep
    /// [`RESERVED_DESCRIPTORS`] and a quarter of the rest free.
    pub(crate) fn new(max: usize, per_address: usize, descriptors: Option<usize>) -> Arc<Self> {
        let usable = descriptors.map(|d| d.saturating_sub(RESERVED_DESCRIPTORS) / 4 * 3);
        let wanted = if max == 0 { usize::MAX } else { max };
        let (max, overflow) = match usable {
            // A sixteenth of what is usable answers 429s, the rest serves.
            Some(usable) if wanted.saturating_add(wanted / 16 + 16) > usable => {
                let max = (usable - usable / 16).min(wanted).max(1);
                (max, usable.saturating_sub(max).max(1))
            }
            _ => (wanted, wanted.saturating_add(15) / 16 + 16),
        };
        let per_address = if per_address == 0 { (max / 4).max(1) } else { per_address.min(max) };
        Arc::new(Self { max, per_address, overflow, state: Default::default() })
    }

    /// Connections served at once, and from one address.
    pub(crate) fn limits(&self) -> (usize, usize) {
        (self.max, self.per_address)
    }

    /// Counts a new connection from `addr` (`None`: a unix socket, no
    /// share). `within` is false when it is over the budget or its address's
    /// share: it still gets served, with a 429 to each request and a close,
    /// so the client learns why instead of seeing a reset. `None`: too many
    /// of those already, close it unread.
    pub(crate) fn open(self: &Arc<Self>, addr: Option<IpAddr>) -> Option<OpenSlot> {
        let mut state = self.state.lock();
        let from_address = addr.map_or(0, |a| state.by_address.get(&a).copied().unwrap_or(0));
        if state.within < self.max && from_address < self.per_address {
            state.within += 1;
            if let Some(addr) = addr {
                *state.by_address.entry(addr).or_default() += 1;
            }
            return Some(OpenSlot { budget: self.clone(), within: true, addr });
        }
        Limit::Connections.count();
        if state.over >= self.overflow {
            return None;
        }
        state.over += 1;
        Some(OpenSlot { budget: self.clone(), within: false, addr: None })
    }

    fn close(&self, within: bool, addr: Option<IpAddr>) {
        let mut state = self.state.lock();
        if !within {
            state.over -= 1;
            return;
        }
        state.within -= 1;
        if let Some(addr) = addr
            && let std::collections::hash_map::Entry::Occupied(mut e) = state.by_address.entry(addr)
        {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
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
    /// `--max-connections` (counted once per connection, when it opens).
    Connections,
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
            Self::Host => "host",
            Self::PassthroughBuffer => "passthrough_buffer",
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
    addr: Option<IpAddr>,
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.budget.close(self.within, self.addr);
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

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn connection_budget_counts_open_connections() {
        let budget = ConnectionBudget::new(2, 2, None);
        let a = budget.open(ip(1)).unwrap();
        let b = budget.open(ip(2)).unwrap();
        let c = budget.open(ip(3)).unwrap();
        assert!(a.within && b.within && !c.within);
        drop(a);
        drop(c);
        assert!(budget.open(ip(3)).unwrap().within);
    }

    /// One address uses its share up; another is still served, and the
    /// first gets its slots back as its connections close.
    #[test]
    fn one_address_holds_its_share_and_no_more() {
        let budget = ConnectionBudget::new(100, 0, None);
        assert_eq!(budget.limits(), (100, 25));
        let held: Vec<_> = (0..25).map(|_| budget.open(ip(1)).unwrap()).collect();
        assert!(held.iter().all(|s| s.within));
        let refused = budget.open(ip(1)).unwrap();
        assert!(!refused.within);
        assert!(budget.open(ip(2)).unwrap().within);
        // Unix-socket clients have no address and no share.
        assert!((0..50).all(|_| budget.open(None).unwrap().within));
        drop(held);
        assert!(budget.open(ip(1)).unwrap().within);
    }

    /// Connections over the budget are answered up to a bound; past it
    /// they are closed at accept, so the descriptors they would hold are
    /// bounded too.
    #[test]
    fn connections_over_the_budget_are_bounded_too() {
        let budget = ConnectionBudget::new(16, 0, None);
        let _within: Vec<_> = (0..16).map(|i| budget.open(ip(i)).unwrap()).collect();
        let over: Vec<_> = std::iter::from_fn(|| budget.open(ip(200))).take(1000).collect();
        assert_eq!(over.len(), 17, "a sixteenth of the budget and 16 answered with 429");
        assert!(over.iter().all(|s| !s.within));
        assert!(budget.open(ip(201)).is_none());
        drop(over);
        assert!(budget.open(ip(201)).is_some());
    }

    /// The budget never takes more descriptors than the open-file limit
    /// leaves: at the common 1,024 soft limit, 20,000 connections cannot be
    /// asked for.
    #[test]
    fn the_budget_fits_the_descriptors() {
        for (max, nofile) in [(20_000, 1_024), (20_000, 20_000), (0, 65_536), (20_000, 1 << 20), (300, 1_024)] {
            let budget = ConnectionBudget::new(max, 0, Some(nofile));
            let (within, _) = budget.limits();
            let total = within + budget.overflow;
            assert!(total + RESERVED_DESCRIPTORS <= nofile * 3 / 4 + RESERVED_DESCRIPTORS, "{max} {nofile}: {total}");
            assert!(within <= max.max(1) || max == 0);
            assert!(within > 0);
        }
        assert_eq!(ConnectionBudget::new(20_000, 0, Some(1 << 20)).limits().0, 20_000);
        assert_eq!(ConnectionBudget::new(300, 0, Some(1_024)).limits().0, 300);
        assert!(ConnectionBudget::new(20_000, 0, Some(20_000)).limits().0 < 15_000);
    }
}
