//! Who is asking, and may they: nobody reads through watchmux what they could
//! not read from kube-apiserver directly.
//!
//! Two modes (`--auth-mode`):
//!
//! - `trusted-local` (the default, the sidecar case): one pod, one identity.
//!   Clients are not authenticated and everything is done with watchmux's own
//!   credentials, so the listener must be loopback or a unix socket unless
//!   `--allow-unauthenticated-remote` says otherwise.
//! - `delegated` (node-local and shared proxies): every request is
//!   authenticated (a client certificate verified against `--client-ca-file`,
//!   or a bearer token checked with a TokenReview), and
//!   - a read the cache answers is authorized first with a
//!     SubjectAccessReview carrying the caller and the request's attributes,
//!     selectors included;
//!   - a request that passes through goes upstream with impersonation of the
//!     caller, so the API server decides with the caller's own rights.
//!
//! Reviews are cached with the API server's webhook TTLs (shorter for a "no"),
//! keyed by digests and bounded in entries and bytes; concurrent identical
//! reviews share one request, and review slots are shared fairly between
//! callers. A
//! cached "no" for a read is not answered from the cache: the read passes
//! through and the API server decides with the caller's rights of the moment.
//! When the upstream cannot be reached, cached answers serve until they
//! expire and new questions are refused (fail closed), counted in
//! `watchmux_auth_fail_closed_total`.

pub(crate) mod cert;
pub(crate) mod impersonation;
mod own_identity_reads;
mod peer;
pub(crate) mod review_cache;
pub(crate) mod reviews;
mod upstream_identity;
pub(crate) mod user;

pub(crate) use peer::{Peer, UserShare};
pub(crate) use upstream_identity::UpstreamIdentity;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode, header};
use metrics::{counter, histogram};
use tokio::time::Instant;

use crate::body::Refusal;
use crate::cache::read::serve::{Admission, ReadGate};
use crate::encode::status::{Status, StatusReason};
use crate::metrics as m;
use crate::request::RequestInfo;
use review_cache::{Bounds, Digest, Lookup, ReviewCache, Weigh};
use reviews::{Asker, Attributes, Decision, ResourceAttributes, ReviewClient, ReviewError};
use user::UserInfo;

/// Delegated mode's settings, from the flags.
#[derive(Debug, Clone)]
pub struct DelegatedSettings {
    /// Requests without credentials act as `system:anonymous` (the API
    /// server's own default) instead of getting 401.
    pub anonymous: bool,
    pub token_ttl: Duration,
    pub token_negative_ttl: Duration,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    /// Entries each cache may hold.
    pub cache_capacity: usize,
    /// TokenReviews and SubjectAccessReviews in flight at once.
    pub max_concurrent_reviews: usize,
    pub upstream_identity: UpstreamIdentityMode,
    /// While the upstream is down, cache reads by watchmux's own upstream
    /// identity need no review (`--serve-stale-when-upstream-unreachable`
    /// with `--upstream-identity=client`; [`own_identity_reads`]).
    pub offline_own_reads: bool,
}

/// Who requests that pass through act as upstream in delegated mode
/// (`--upstream-identity`; its spelling and help are the config's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamIdentityMode {
    /// watchmux's credentials, impersonating the caller: needs the right to
    /// impersonate anyone (shared and tier proxies).
    Impersonate,
    /// The caller's own credentials: a bearer token is forwarded as sent, an
    /// anonymous request goes without credentials, and a client certificate
    /// of watchmux's own upstream identity (the node's kubelet, when
    /// watchmux holds the node's credentials) goes with watchmux's. Needs no
    /// right beyond the caller's own: a node-local watchmux with node
    /// credentials holds nothing more than the node.
    Client,
}

/// Entries each review cache holds at most (tokens, decisions). An entry
/// is about 150 bytes and its answer's own (a user, a denial's reason).
pub(crate) const CACHE_CAPACITY: usize = 32_768;
/// Bytes each review cache holds at most, as [`Weigh`] counts them: about
/// 30,000 entries with answers of 400 bytes. Answers come from the API
/// server, not the client, but a reason or an identity's extras can be
/// long, and the entry bound alone would not say how much memory that is.
pub(crate) const CACHE_MAX_BYTES: usize = 16 << 20;

/// A request's authenticated caller.
pub(crate) type Caller = Arc<UserInfo>;

/// Delegated authentication and authorization.
pub(crate) struct Delegated {
    reviews: ReviewClient,
    /// By the token's SHA-256, so tokens themselves are never kept.
    tokens: ReviewCache<Digest, Option<Caller>>,
    /// By the SHA-256 of (caller, attributes) ([`decision_key`]): the
    /// attributes hold the client's selectors, of any length.
    decisions: ReviewCache<Digest, Decision>,
    /// watchmux's own upstream identity, learned once (client mode).
    watchmux_user: tokio::sync::OnceCell<UserInfo>,
    /// Which impersonation mode last worked for each requestor.
    modes: impersonation::ModeTracker,
    /// Whether cache reads are being admitted by [`own_identity_reads`] (logged
    /// when it starts and ends).
    admitting_own_reads: std::sync::atomic::AtomicBool,
    settings: DelegatedSettings,
}

/// How a request's caller was authenticated: what its own credential was.
#[derive(Debug, Clone)]
pub(crate) enum CallerCredential {
    /// A verified client certificate.
    Certificate,
    /// This `Authorization` header, checked with a TokenReview.
    Token(http::HeaderValue),
    /// None: the anonymous user.
    Anonymous,
}

/// An authenticated request: who, and by which credential.
#[derive(Debug, Clone)]
pub(crate) struct Authenticated {
    pub user: Caller,
    pub credential: CallerCredential,
}

impl DelegatedSettings {
    /// Delegated auth as these settings describe it, with its own review
    /// client to the upstream.
    pub(crate) fn build(self, upstream: Arc<crate::upstream::Upstream>) -> Arc<Delegated> {
        let reviews = ReviewClient::new(upstream, self.max_concurrent_reviews);
        Arc::new(Delegated::new(reviews, self))
    }
}

impl Delegated {
    pub(crate) fn new(reviews: ReviewClient, settings: DelegatedSettings) -> Self {
        let bounds = Bounds { entries: settings.cache_capacity, bytes: CACHE_MAX_BYTES };
        Self {
            reviews,
            tokens: ReviewCache::new("token", bounds),
            decisions: ReviewCache::new("access", bounds),
            watchmux_user: tokio::sync::OnceCell::new(),
            modes: impersonation::ModeTracker::default(),
            admitting_own_reads: Default::default(),
            settings,
        }
    }

    /// The upstream identity mode (`--upstream-identity`).
    pub(crate) fn upstream_identity_mode(&self) -> UpstreamIdentityMode {
        self.settings.upstream_identity
    }

    /// The identity `requestor` acts as: itself, or whom its impersonation
    /// headers name once one of the API server's impersonation modes allows
    /// it (see [`impersonation::attempts`]); else the first mode's refusal.
    pub(crate) async fn impersonated(
        &self,
        requestor: Caller,
        headers: &HeaderMap,
        request: &Attributes,
        request_uri: &http::Uri,
    ) -> Result<Caller, Refusal> {
        let wanted = match impersonation::requested(headers) {
            Ok(None) => return Ok(requestor),
            Ok(Some(wanted)) => wanted,
            Err(bad_request) if crate::encode::minor::impersonation_errors_are_internal() => {
                return Err(Box::new(impersonation::internal_error(request_uri, &bad_request.message)));
            }
            Err(bad_request) => return Err(Box::new(bad_request.into_response())),
        };
        // As the API server: the mode that last worked for this requestor
        // first, and when every mode fails, that mode's refusal is the one
        // reported. The order decides the identity only for a node named
        // alone, where the node modes grant `system:nodes` and the legacy
        // mode does not; the API server's order there depends on a history
        // watchmux does not see (direct requests, other replicas), so the
        // legacy mode, which grants less, is tried first (never more than
        // the API server gives, whichever it tries first), and a refusal is
        // reported in the modes' own order, as from an API server without
        // that history.
        let (try_first, report_first) = if impersonation::grants_depend_on_the_mode(&wanted) {
            (Some("legacy"), None)
        } else {
            let last = self.modes.last(&requestor.name);
            (last, last)
        };
        let attempts: Vec<_> =
            impersonation::upstream_attempts(&wanted, &requestor, request).into_iter().enumerate().collect();
        let mut refusals = Vec::new();
        for (order, attempt) in impersonation::in_tried_order(attempts, try_first, |(_, a)| a.mode) {
            let subject = if attempt.subject == *requestor { requestor.clone() } else { Arc::new(attempt.subject) };
            match self.passes(&subject, &attempt.steps).await {
                Ok(()) => {
                    counter!(m::AUTH_IMPERSONATIONS, "mode" => attempt.mode).increment(1);
                    if try_first != Some(attempt.mode) {
                        self.modes.worked(&requestor.name, attempt.mode);
                    }
                    return Ok(Arc::new(attempt.grants));
                }
                Err(refusal) => refusals.push((report_first != Some(attempt.mode), order, refusal)),
            }
        }
        // The remembered mode's refusal first, else the first in mode order.
        let (_, _, refusal) = refusals
            .into_iter()
            .min_by_key(|(later, order, _)| (*later, *order))
            .expect("the legacy mode always applies");
        Err(refusal)
    }

    /// Runs one impersonation mode's steps for `subject`.
    async fn passes(&self, subject: &Caller, steps: &[impersonation::Step]) -> Result<(), Refusal> {
        for step in steps {
            match step {
                impersonation::Step::Require(attrs) => self.authorize(subject, attrs.clone()).await?,
                impersonation::Step::Refuse(attrs, reason) => {
                    let attrs = Attributes::Resource(attrs.clone());
                    return Err(Box::new(forbidden(&subject.name, &attrs, reason).into_response()));
                }
                impersonation::Step::WildcardOr(wildcard, each) => {
                    if self.authorize(subject, wildcard.clone()).await.is_err() {
                        for attrs in each {
                            self.authorize(subject, attrs.clone()).await?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Who the request is from, by the API server's order: a verified client
    /// certificate, then a bearer token, then anonymous if allowed.
    pub(crate) async fn authenticate(&self, headers: &HeaderMap, peer: &Peer) -> Result<Authenticated, Refusal> {
        // At every request, as the API server verifies the chain at every request.
        let cert_failed = match peer.client_cert.as_ref().and_then(|cert| cert.identity_at(SystemTime::now())) {
            Some(Ok(user)) => {
                counter!(m::AUTH_AUTHENTICATED, "method" => "x509").increment(1);
                return Ok(Authenticated { user, credential: CallerCredential::Certificate });
            }
            Some(Err(invalid)) => {
                tracing::debug!(error = %invalid, "client certificate not accepted as an identity");
                true
            }
            None => false,
        };
        match bearer_token(headers) {
            Bearer::Unreadable => Err(unauthorized("bearer token not UTF-8")),
            Bearer::Token(token) => {
                let user = self.authenticate_token(token, &Asker::peer(peer.addr.map(|a| a.ip()))).await?;
                let header = headers.get(header::AUTHORIZATION).cloned().expect("a bearer token came from it");
                Ok(Authenticated { user, credential: CallerCredential::Token(header) })
            }
            // A credential that failed is an error, not an absence: the API
            // server's anonymous authenticator does not step in then.
            Bearer::None if cert_failed => Err(unauthorized("invalid client certificate")),
            Bearer::None if self.settings.anonymous => {
                counter!(m::AUTH_AUTHENTICATED, "method" => "anonymous").increment(1);
                Ok(Authenticated { user: Arc::new(UserInfo::anonymous()), credential: CallerCredential::Anonymous })
            }
            Bearer::None => Err(unauthorized("no credentials")),
        }
    }

    /// The identity a request that passes through goes upstream with.
    /// `caller` is the impersonated identity (impersonate mode);
    /// `authenticated` is the requestor and its own credential (client mode).
    pub(crate) async fn upstream_identity(
        &self,
        caller: Caller,
        authenticated: &Authenticated,
    ) -> Result<UpstreamIdentity, Refusal> {
        match self.settings.upstream_identity {
            UpstreamIdentityMode::Impersonate => Ok(UpstreamIdentity::Impersonate(caller)),
            UpstreamIdentityMode::Client => match &authenticated.credential {
                CallerCredential::Token(header) => Ok(UpstreamIdentity::ClientCredentials(header.clone())),
                CallerCredential::Anonymous => Ok(UpstreamIdentity::Anonymous),
                CallerCredential::Certificate => {
                    // The whole identity, not the name: a certificate from the
                    // client CA naming watchmux's user in other groups is
                    // someone else, and must not get watchmux's credentials.
                    let own = self.own_identity().await?;
                    if own.is_same_principal(&authenticated.user) {
                        Ok(UpstreamIdentity::Watchmux)
                    } else {
                        counter!(m::AUTH_AUTHORIZED, "result" => "unforwardable").increment(1);
                        Err(Box::new(unforwardable_certificate(&authenticated.user.name, &own.name).into_response()))
                    }
                }
            },
        }
    }

    /// watchmux's own upstream identity, asked once; until the upstream
    /// answers, certificate clients that would need it are refused (503).
    async fn own_identity(&self) -> Result<&UserInfo, Refusal> {
        self.watchmux_user
            .get_or_try_init(|| async {
                let user = self.reviews.own_identity().await?;
                tracing::info!(user = %user.name, "watchmux's own upstream identity");
                Ok::<_, ReviewError>(user)
            })
            .await
            .map_err(|err| {
                counter!(m::AUTH_FAIL_CLOSED, "review" => "self").increment(1);
                tracing::warn!(error = %err, "cannot learn watchmux's own upstream identity");
                let message = format!("watchmux could not confirm its own identity with the API server: {err}");
                Box::new(
                    Status::new(StatusCode::SERVICE_UNAVAILABLE, StatusReason::ServiceUnavailable, message)
                        .into_response(),
                )
            })
    }

    async fn authenticate_token(&self, token: &str, asker: &Asker) -> Result<Caller, Refusal> {
        if token.is_empty() {
            return Err(unauthorized("empty bearer token"));
        }
        let key = review_cache::digest([token.as_bytes()]);
        let expiry = jwt_expiry(token);
        let (positive, negative) = (self.settings.token_ttl, self.settings.token_negative_ttl);
        let started = Instant::now();
        let looked_up = self
            .tokens
            .get_or_review(
                &key,
                |user| match user {
                    // A token is not trusted past its own expiry.
                    Some(_) => expiry.map_or(positive, |left| left.min(positive)),
                    None => negative,
                },
                || async { Ok::<_, ReviewError>(self.reviews.token(token, asker).await?.map(Arc::new)) },
            )
            .await;
        record_check("token", started, looked_up.as_ref().map(|(_, l)| *l).ok());
        match looked_up {
            Ok((Some(user), _)) => {
                counter!(m::AUTH_AUTHENTICATED, "method" => "token").increment(1);
                Ok(user)
            }
            Ok((None, _)) => Err(unauthorized("token rejected")),
            Err(err) => {
                counter!(m::AUTH_FAIL_CLOSED, "review" => "token").increment(1);
                tracing::warn!(error = %err, "cannot review a token; refusing it");
                Err(unauthorized("token review failed"))
            }
        }
    }

    /// Allows `caller` to do what `attrs` describe, or answers the API
    /// server's 403.
    pub(crate) async fn authorize(&self, caller: &Caller, attrs: impl Into<Attributes>) -> Result<(), Refusal> {
        let attrs = attrs.into();
        let (decision, _) = self.decide(caller, &attrs).await;
        verdict(caller, &attrs, decision)
    }

    /// Whether the cache may answer `caller`'s read. A denial remembered
    /// from an earlier review is not repeated as a 403: rights change (the
    /// Node authorizer lets a kubelet read a pod only once the pod is bound
    /// to its node, a moment after the kubelet may first have asked), so the
    /// request passes through and the API server decides with the caller's
    /// rights as they are now. Only a denial just received is answered here.
    /// The denial cache still spares the API server a review per retry.
    pub(crate) async fn admit_read(&self, caller: &Caller, attrs: impl Into<Attributes>) -> Admission {
        let attrs = attrs.into();
        let Some(decided) = self.own_read_offline(caller, &attrs).await else { return Admission::Admitted };
        match decided {
            (decision, Some(Lookup::Hit)) if !decision.allowed => {
                counter!(m::AUTH_AUTHORIZED, "result" => "denied_earlier").increment(1);
                Admission::AskUpstream
            }
            (decision, _) => match verdict(caller, &attrs, decision) {
                Ok(()) => Admission::Admitted,
                Err(refusal) => Admission::Refused(refusal),
            },
        }
    }

    /// The review's answer for `caller` doing what `attrs` describe (cached,
    /// shared or asked now), and how it was had; a review that cannot be had
    /// is a denial (fail closed).
    async fn decide(&self, caller: &Caller, attrs: &Attributes) -> (Decision, Option<Lookup>) {
        let key = decision_key(caller, attrs);
        let (allowed_ttl, denied_ttl) = (self.settings.authorized_ttl, self.settings.unauthorized_ttl);
        let started = Instant::now();
        let looked_up = self
            .decisions
            .get_or_review(
                &key,
                |d| if d.allowed { allowed_ttl } else { denied_ttl },
                || self.reviews.access(caller, attrs),
            )
            .await;
        record_check("access", started, looked_up.as_ref().map(|(_, l)| *l).ok());
        match looked_up {
            Ok((decision, lookup)) => (decision, Some(lookup)),
            Err(err) => {
                counter!(m::AUTH_FAIL_CLOSED, "review" => "access").increment(1);
                tracing::warn!(error = %err, "cannot review access; refusing the request");
                let reason = format!("watchmux could not confirm access with the API server: {err}");
                (Decision { allowed: false, reason }, None)
            }
        }
    }
}

/// The decision cache's key: the SHA-256 of every field of the caller and
/// of the attributes, each length-prefixed and lists counted, so that two
/// different questions never share a key.
fn decision_key(caller: &UserInfo, attrs: &Attributes) -> Digest {
    let mut parts: Vec<&[u8]> = Vec::with_capacity(32);
    let counts: Vec<[u8; 8]> = std::iter::once(caller.groups.len())
        .chain(std::iter::once(caller.extra.len()))
        .chain(caller.extra.values().map(Vec::len))
        .map(|n| (n as u64).to_be_bytes())
        .collect();
    let mut counts = counts.iter().map(|c| c.as_slice());
    let mut next_count = || counts.next().expect("one count per list");
    parts.extend([caller.name.as_bytes(), caller.uid.as_bytes(), next_count()]);
    parts.extend(caller.groups.iter().map(|g| g.as_bytes()));
    parts.push(next_count());
    for (key, values) in &caller.extra {
        parts.extend([key.as_bytes(), next_count()]);
        parts.extend(values.iter().map(|v| v.as_bytes()));
    }
    match attrs {
        Attributes::Resource(r) => {
            fn selector(s: &Option<reviews::RawSelector>) -> [&[u8]; 2] {
                match s {
                    Some(s) => [b"=".as_slice(), s.raw_selector.as_bytes()],
                    None => [b"none".as_slice(), b""],
                }
            }
            parts.extend([b"resource".as_slice(), r.namespace.as_bytes(), r.verb.as_bytes(), r.group.as_bytes()]);
            parts.extend([r.version.as_bytes(), r.resource.as_bytes(), r.subresource.as_bytes(), r.name.as_bytes()]);
            parts.extend(selector(&r.field_selector));
            parts.extend(selector(&r.label_selector));
        }
        Attributes::NonResource(n) => parts.extend([b"nonresource".as_slice(), n.path.as_bytes(), n.verb.as_bytes()]),
    }
    review_cache::digest(parts)
}

impl Weigh for Decision {
    fn heap_bytes(&self) -> usize {
        self.reason.capacity()
    }
}

impl Weigh for UserInfo {
    fn heap_bytes(&self) -> usize {
        let strings = |v: &[String]| v.iter().map(|s| std::mem::size_of::<String>() + s.capacity()).sum::<usize>();
        let extra: usize = self
            .extra
            .iter()
            .map(|(k, v)| std::mem::size_of::<(String, Vec<String>)>() + k.capacity() + strings(v))
            .sum();
        self.name.capacity() + self.uid.capacity() + strings(&self.groups) + extra
    }
}

/// A decision as the request's outcome, counted.
fn verdict(caller: &Caller, attrs: &Attributes, decision: Decision) -> Result<(), Refusal> {
    let result = if decision.allowed { "allowed" } else { "denied" };
    counter!(m::AUTH_AUTHORIZED, "result" => result).increment(1);
    if decision.allowed {
        Ok(())
    } else {
        Err(Box::new(forbidden(&caller.name, attrs, &decision.reason).into_response()))
    }
}

/// The cache's gate for one caller: every read the cache would answer is
/// first put to a SubjectAccessReview.
pub(crate) struct CallerGate<'a> {
    pub auth: &'a Delegated,
    pub caller: &'a Caller,
}

impl ReadGate for CallerGate<'_> {
    async fn admit(&self, info: &RequestInfo, labels: &str, fields: &str) -> Admission {
        self.auth.admit_read(self.caller, ResourceAttributes::of_read(info, labels, fields)).await
    }
}

fn record_check(review: &'static str, started: Instant, lookup: Option<Lookup>) {
    let lookup = lookup.map_or("error", Lookup::as_str);
    counter!(m::AUTH_CACHE_LOOKUPS, "review" => review, "lookup" => lookup).increment(1);
    histogram!(m::AUTH_CHECK_DURATION, "review" => review, "lookup" => lookup).record(started.elapsed().as_secs_f64());
}

/// What the bearer-token authenticator makes of a request.
#[derive(Debug, PartialEq, Eq)]
enum Bearer<'a> {
    /// No bearer token: other authenticators (anonymous) decide.
    None,
    Token(&'a str),
    /// A bearer token whose bytes are not UTF-8: no token the API server
    /// accepts is, and a replaced copy must not be reviewed in its place.
    Unreadable,
}

/// The bearer token of an `Authorization` header, by the API server's
/// parsing (k8s.io/apiserver's bearertoken authenticator): the first
/// header, trimmed, split on single spaces; the scheme case-insensitive;
/// the token up to the next space. An empty token (`Bearer  x`) is no
/// token, as there.
fn bearer_token(headers: &HeaderMap) -> Bearer<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else { return Bearer::None };
    let Ok(value) = std::str::from_utf8(value.as_bytes()) else {
        // Not UTF-8: a Bearer scheme still makes it a token, unreadable.
        let bytes = value.as_bytes().trim_ascii();
        let bearer = bytes.len() > 7 && bytes[..7].eq_ignore_ascii_case(b"bearer ") && bytes[7] != b' ';
        return if bearer { Bearer::Unreadable } else { Bearer::None };
    };
    let mut parts = value.trim().splitn(3, ' ');
    match (parts.next(), parts.next()) {
        (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() => {
            Bearer::Token(token)
        }
        _ => Bearer::None,
    }
}

/// How long a JWT has left by its `exp` claim (unverified: the TokenReview
/// verifies; this only keeps the cache from outliving the token).
fn jwt_expiry(token: &str) -> Option<Duration> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let exp = serde_json::from_slice::<serde_json::Value>(&bytes).ok()?.get("exp")?.as_u64()?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

/// The API server's 401: the same body whatever went wrong (the reason is
/// for watchmux's debug log only).
fn unauthorized(why: &'static str) -> Refusal {
    counter!(m::AUTH_UNAUTHENTICATED, "reason" => why).increment(1);
    tracing::debug!(reason = why, "unauthenticated request");
    Box::new(Status::new(StatusCode::UNAUTHORIZED, StatusReason::Unauthorized, "Unauthorized").into_response())
}

/// Client mode's refusal of a request watchmux cannot pass on as its
/// caller: a client certificate proves an identity to watchmux, but
/// watchmux cannot present it upstream.
fn unforwardable_certificate(user: &str, own: &str) -> Status {
    let mut status = Status::new(
        StatusCode::FORBIDDEN,
        StatusReason::Forbidden,
        sanitize(&format!(
            "watchmux cannot pass the client certificate of {user:?} upstream: with --upstream-identity=client \
             only its own identity {own:?} and bearer tokens go through; use a bearer token, or reach the API server directly"
        )),
    );
    status.nosniff = true;
    status
}

/// The API server's 403, message and details alike.
pub(crate) fn forbidden(user: &str, attrs: &Attributes, reason: &str) -> Status {
    let attrs = match attrs {
        Attributes::Resource(r) => r,
        Attributes::NonResource(n) => {
            let what = sanitize(&format!("User {user:?} cannot {} path {:?}", n.verb, n.path));
            let why = if reason.is_empty() { what } else { format!("{what}: {reason}") };
            let mut status = Status::new(StatusCode::FORBIDDEN, StatusReason::Forbidden, format!("forbidden: {why}"));
            status.details = Some(serde_json::Map::new());
            status.nosniff = true;
            return status;
        }
    };
    let mut resource = attrs.resource.clone();
    if !attrs.subresource.is_empty() {
        resource = format!("{resource}/{}", attrs.subresource);
    }
    let scope = if attrs.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {:?}", attrs.namespace)
    };
    let what = sanitize(&format!(
        "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        attrs.verb, attrs.group
    ));
    let why = if reason.is_empty() { what } else { format!("{what}: {reason}") };
    let qualified =
        if attrs.group.is_empty() { attrs.resource.clone() } else { format!("{}.{}", attrs.resource, attrs.group) };
    // apierrors.NewForbidden: an empty group resource names nothing.
    let message = if attrs.group.is_empty() && attrs.resource.is_empty() {
        format!("forbidden: {why}")
    } else if attrs.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", attrs.name)
    };
    let mut details = serde_json::Map::new();
    if !attrs.name.is_empty() {
        details.insert("name".into(), attrs.name.clone().into());
    }
    if !attrs.group.is_empty() {
        details.insert("group".into(), attrs.group.clone().into());
    }
    if !attrs.resource.is_empty() {
        details.insert("kind".into(), attrs.resource.clone().into());
    }
    let mut status = Status::new(StatusCode::FORBIDDEN, StatusReason::Forbidden, message);
    status.details = Some(details);
    status.nosniff = true;
    status
}

/// The API server escapes these in the part of a 403 message it builds.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_match_the_api_servers() {
        let attrs = ResourceAttributes {
            verb: "list".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            namespace: "other".into(),
            ..Default::default()
        };
        let s = forbidden("alice", &attrs.into(), "");
        assert_eq!(
            s.message,
            r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "other""#
        );
        let attrs = ResourceAttributes {
            verb: "get".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            name: "web".into(),
            ..Default::default()
        };
        let s = forbidden("system:node:n1", &attrs.into(), "no relationship found between node 'n1' and this object");
        assert_eq!(
            s.message,
            r#"deployments.apps "web" is forbidden: User "system:node:n1" cannot get resource "deployments/scale" in API group "apps" at the cluster scope: no relationship found between node 'n1' and this object"#
        );
        let v = s.to_json();
        assert_eq!(v["details"], serde_json::json!({"name": "web", "group": "apps", "kind": "deployments"}));
        // An empty resource (`/api/v1/namespaces/a//configmaps`) names nothing.
        let empty = ResourceAttributes {
            verb: "get".into(),
            namespace: "a".into(),
            name: "configmaps".into(),
            ..Default::default()
        };
        let s = forbidden("bob", &empty.into(), "");
        assert_eq!(s.message, r#"forbidden: User "bob" cannot get resource "" in API group "" in the namespace "a""#);
        assert_eq!(s.to_json()["details"], serde_json::json!({"name": "configmaps"}));
        assert_eq!(v["reason"], "Forbidden");
        assert_eq!(v["code"], 403);
    }

    #[test]
    fn bearer_tokens_are_parsed_like_the_api_server_does() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, v.parse().unwrap());
            m
        };
        assert_eq!(bearer_token(&h("Bearer abc")), Bearer::Token("abc"));
        assert_eq!(bearer_token(&h("bearer abc extra")), Bearer::Token("abc"));
        assert_eq!(bearer_token(&h("  BEARER abc ")), Bearer::Token("abc"));
        assert_eq!(bearer_token(&h("Basic dXNlcjpwdw==")), Bearer::None);
        assert_eq!(bearer_token(&h("Bearer")), Bearer::None);
        // Split on single spaces: the token of `Bearer  x` is empty, no token.
        assert_eq!(bearer_token(&h("Bearer  abc")), Bearer::None);
        assert_eq!(bearer_token(&HeaderMap::new()), Bearer::None);
        // Bytes that are not UTF-8 are not a way to be anonymous.
        let mut m = HeaderMap::new();
        m.insert(header::AUTHORIZATION, http::HeaderValue::from_bytes(b"Bearer t\xffk").unwrap());
        assert_eq!(bearer_token(&m), Bearer::Unreadable);
        m.insert(header::AUTHORIZATION, http::HeaderValue::from_bytes(b"Basic \xff").unwrap());
        assert_eq!(bearer_token(&m), Bearer::None);
    }

    #[test]
    fn jwt_expiry_caps_the_cache() {
        use base64::Engine as _;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(r#"{{"exp":{}}}"#, now + 30));
        let left = jwt_expiry(&format!("e30.{claims}.sig")).unwrap();
        assert!(left <= Duration::from_secs(30) && left >= Duration::from_secs(28), "{left:?}");
        assert_eq!(jwt_expiry("not-a-jwt"), None);
        let expired = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"exp":1}"#);
        assert_eq!(jwt_expiry(&format!("e30.{expired}.sig")), Some(Duration::ZERO));
    }
}
