//! The request pipeline: what every API request meets, in order, between
//! the listener that accepted it and the answer.
//!
//! 1. The connection budget, the `Host` header (and trusted-local's
//!    `--accept-hosts` and `--reject-paths`), a path Go's server could not
//!    parse.
//! 2. Classification ([`RequestInfo`]) and the in-flight and body limits
//!    (the in-flight slot is held until the answer has been sent).
//! 3. In delegated mode, who the caller is (authentication, then any
//!    impersonation it asks for).
//! 4. The cache, for the reads it can answer (authorized first, in delegated
//!    mode, as the caller), each LIST and WATCH on a seat of the caller's
//!    priority level ([`fairness`](crate::fairness)); and the answers the
//!    pass-through shares between callers (immutable OpenAPI documents,
//!    health checks: [`shared`](crate::passthrough::shared)), authorized the
//!    same way.
//! 5. Everything else passes through to the API server, as watchmux itself,
//!    as the caller (impersonating), or with the caller's own credentials.
//!
//! The listeners (`server`) know nothing of these steps; the composition
//! root (`app`) builds each subsystem and hands this handler to them.

use std::future::Future;
use std::sync::Arc;

use http::{Request, Response};

use crate::auth::Peer;
use crate::auth::reviews::Attributes;
use crate::auth::user::{self, UserInfo};
use crate::auth::{Authenticated, CallerGate, Delegated, UpstreamIdentity, UpstreamIdentityMode, impersonation};
use crate::body::Refusal;
use crate::body::{ProxyBody, RequestBody};
use crate::cache::read::serve::{Admission, CacheService, Open, ReadGate, Served};
use crate::fairness::{Fairness, Flow, Seat};
use crate::passthrough::Passthrough;
use crate::passthrough::shared::SharedKey;
use crate::request::RequestInfo;
use crate::server::connection::listener::Handler;
use crate::server::gates::hosts::{self, AcceptHosts};
use crate::server::gates::limits::{self, RequestLimits};
use crate::server::gates::reject_paths::RejectPaths;

/// The API service: limits first, then (in delegated mode) who the caller
/// is; reads the cache can answer are served from it, everything else
/// passes through.
#[derive(Clone)]
pub(crate) struct ApiHandler {
    passthrough: Passthrough,
    cache: Option<Arc<CacheService>>,
    delegated: Option<Arc<Delegated>>,
    limits: RequestLimits,
    accept_hosts: Option<AcceptHosts>,
    reject_paths: Option<RejectPaths>,
    fairness: Option<Arc<Fairness>>,
}

impl ApiHandler {
    pub(crate) fn new(
        passthrough: Passthrough,
        cache: Option<Arc<CacheService>>,
        delegated: Option<Arc<Delegated>>,
        limits: RequestLimits,
        accept_hosts: Option<AcceptHosts>,
        reject_paths: Option<RejectPaths>,
        fairness: Option<Arc<Fairness>>,
    ) -> Self {
        Self { passthrough, cache, delegated, limits, accept_hosts, reject_paths, fairness }
    }

    /// The cache's answer, when there is a cache and it answers (`gate`
    /// authorizes the read first, then a LIST or WATCH takes a seat of
    /// `flow`'s priority level or gets its 429); `None` passes the request
    /// through.
    async fn cached_answer(
        &self,
        req: &Request<RequestBody>,
        peer: &Peer,
        info: &RequestInfo,
        gate: &impl ReadGate,
        flow: impl Fn() -> Flow + Sync,
    ) -> Option<Response<ProxyBody>> {
        let gate = FairGate { gate, fairness: self.fairness.as_deref(), flow };
        let cache = self.cache.as_ref()?;
        match cache.serve(req.method(), req.uri(), req.headers(), info, &gate, peer.streams_stop.as_ref()).await {
            Served::Response(resp) => Some(resp),
            Served::Passthrough(_) => None,
        }
    }
}

/// A read gate whose admitted reads then take a seat of their flow's
/// priority level (none when fairness is off). The flow is made only for a
/// read about to be answered: a request that passes through needs none.
struct FairGate<'a, G, F> {
    gate: &'a G,
    fairness: Option<&'a Fairness>,
    flow: F,
}

impl<G: ReadGate, F: Fn() -> Flow + Sync> ReadGate for FairGate<'_, G, F> {
    fn admit(&self, info: &RequestInfo, labels: &str, fields: &str) -> impl Future<Output = Admission> + Send {
        self.gate.admit(info, labels, fields)
    }

    async fn seat(&self, watch: bool) -> Result<Option<Seat>, Refusal> {
        match self.fairness {
            Some(fairness) => fairness.admit(&(self.flow)(), watch).await.map(Some),
            None => Ok(None),
        }
    }
}

impl Handler for ApiHandler {
    async fn handle(&self, req: Request<RequestBody>, peer: Peer) -> Response<ProxyBody> {
        let (resp, admitted) = self.answer(req, peer).await;
        match admitted {
            Some(admitted) => admitted.until_sent(resp),
            None => resp,
        }
    }
}

impl ApiHandler {
    /// The answer to `req`, and the in-flight slot it holds until sent
    /// (`None` for a refusal before the slot was taken).
    async fn answer(&self, req: Request<RequestBody>, peer: Peer) -> (Response<ProxyBody>, Option<limits::Admitted>) {
        let (info, admitted) = match self.admitted(&req, &peer) {
            Ok(admitted) => admitted,
            Err(refused) => return (*refused, None),
        };
        (self.admitted_answer(req, peer, info).await, Some(admitted))
    }

    /// The gates before any work: the connection budget, the host, the path,
    /// then the in-flight and body limits.
    fn admitted(&self, req: &Request<RequestBody>, peer: &Peer) -> Result<(RequestInfo, limits::Admitted), Refusal> {
        if peer.over_connection_limit {
            return Err(Box::new(limits::too_many_requests(limits::Limit::Connections, true)));
        }
        if let Err(bad) = hosts::check_host_header(req.version(), req.headers()) {
            return Err(Box::new(hosts::bad_request(bad)));
        }
        if let Some(hosts) = &self.accept_hosts
            && peer.addr.is_some()
            && !hosts.accepts(req.uri(), req.headers())
        {
            return Err(Box::new(hosts::forbidden()));
        }
        if let Some(reject) = &self.reject_paths
            && reject.rejects(req.uri().path())
        {
            return Err(Box::new(hosts::forbidden()));
        }
        if crate::request::has_malformed_escape(req.uri().path()) {
            return Err(Box::new(malformed_request_uri()));
        }
        let info = RequestInfo::classify(req.method(), req.uri());
        let admitted = self.limits.admit(&info, req.headers())?;
        Ok((info, admitted))
    }

    /// The answer to an admitted request.
    async fn admitted_answer(&self, req: Request<RequestBody>, peer: Peer, info: RequestInfo) -> Response<ProxyBody> {
        let shared = SharedKey::of(&req, &info);
        let Some(delegated) = &self.delegated else {
            if let Some(key) = &shared
                && let Some(resp) = self.passthrough.shared_answer(key).await
            {
                return resp;
            }
            let flow = || Flow::of_connection(peer.addr);
            if let Some(resp) = self.cached_answer(&req, &peer, &info, &Open, flow).await {
                return resp;
            }
            return self.passthrough.forward(req, peer, &info, &UpstreamIdentity::Watchmux).await;
        };

        // kube-apiserver's UnauthenticatedHTTP2DOSMitigation: an HTTP/2
        // request that fails authentication, or is anonymous, is answered
        // with `Connection: close`, which ends its connection with GOAWAY
        // (see `server::connection::activity`): an unauthenticated client
        // gets HTTP/1.1's cost per request, not a multiplexed connection.
        let h2 = req.version() == http::Version::HTTP_2;
        let authenticated = match delegated.authenticate(req.headers(), &peer).await {
            Ok(authenticated) => authenticated,
            Err(refused) => return close_if(h2, *refused),
        };
        let anonymous = is_anonymous(&authenticated.user);
        // The connection counts against its first named user's share: one
        // credential cannot hold every connection, from any number of
        // addresses (see `server::gates::connections`).
        if !anonymous
            && let Some(connection) = &peer.connection
            && !connection.claim(&authenticated.user.name)
        {
            return limits::too_many_requests(limits::Limit::UserConnections, true);
        }
        let resp = self.authenticated_answer(req, peer, info, shared, delegated, authenticated).await;
        close_if(h2 && anonymous, resp)
    }

    /// The answer to a request whose caller is `authenticated`.
    async fn authenticated_answer(
        &self,
        req: Request<RequestBody>,
        peer: Peer,
        info: RequestInfo,
        shared: Option<SharedKey>,
        delegated: &Delegated,
        authenticated: Authenticated,
    ) -> Response<ProxyBody> {
        // With the client's own credentials upstream, a client's
        // impersonation is the API server's to judge (all its modes), so such
        // requests pass through as they are.
        let client_impersonates = delegated.upstream_identity_mode() == UpstreamIdentityMode::Client
            && impersonation::any_requested(req.headers());
        // The request's attributes are built only for a request that asks
        // to impersonate: constrained impersonation reviews them.
        let caller = if client_impersonates || !impersonation::any_requested(req.headers()) {
            authenticated.user.clone()
        } else {
            let request = Attributes::of_request(&info, req.uri());
            match delegated.impersonated(authenticated.user.clone(), req.headers(), &request, req.uri()).await {
                Ok(caller) => caller,
                Err(refused) => return *refused,
            }
        };
        // A shared answer (an immutable OpenAPI document, a health check),
        // for a caller the API server would let read it (any answer but
        // "yes" passes through, for the API server's own).
        if !client_impersonates
            && let Some(key) = &shared
            && let Admission::Admitted = delegated.admit_read(&caller, Attributes::of_request(&info, req.uri())).await
            && let Some(resp) = self.passthrough.shared_answer(key).await
        {
            return resp;
        }
        let flow = || Flow::of_user(&caller.name, &caller.groups, &info.api_group, &info.resource);
        if !client_impersonates
            && let Some(resp) =
                self.cached_answer(&req, &peer, &info, &CallerGate { auth: delegated, caller: &caller }, flow).await
        {
            return resp;
        }
        let identity = match delegated.upstream_identity(caller, &authenticated).await {
            Ok(identity) => identity,
            Err(refused) => return *refused,
        };
        self.passthrough.forward(req, peer, &info, &identity).await
    }
}

/// kube-apiserver's test for an unauthenticated caller.
fn is_anonymous(user: &UserInfo) -> bool {
    user.name == user::ANONYMOUS || user.groups.iter().any(|g| g == user::UNAUTHENTICATED)
}

/// `resp`, with `Connection: close` when `close`.
fn close_if(close: bool, mut resp: Response<ProxyBody>) -> Response<ProxyBody> {
    if close {
        resp.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    resp
}

/// Go's HTTP server's answer to a request line whose path it cannot parse
/// (kube-apiserver's handlers never see it): plain text, then close. Sent
/// upstream over HTTP/2 the same path would only reset the stream.
fn malformed_request_uri() -> Response<ProxyBody> {
    use http::header::{CONNECTION, CONTENT_TYPE, HeaderValue};
    let mut resp = Response::new(crate::body::full("400 Bad Request"));
    *resp.status_mut() = http::StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}
