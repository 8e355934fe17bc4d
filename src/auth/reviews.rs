//! TokenReview and SubjectAccessReview requests to the upstream API server,
//! made with watchmux's own identity. The API server answers them with the
//! same authenticators and authorizers it applies to its own requests (the
//! Node authorizer and selectors included), which is what makes a cached
//! answer as strict as a direct one.
//!
//! Reviews travel on connections of their own ([`Upstream::send_review`]),
//! never behind a pass-through body that a client does not read, and take
//! their slots fairly between callers ([`slots`]).

mod slots;

pub(crate) use slots::Asker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, StatusCode, header};
use metrics::{counter, histogram};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::user::UserInfo;
use crate::body;
use crate::error::error_chain;
use crate::metrics as m;
use crate::request::{RequestInfo, Verb};
use crate::selector::FieldSelector;
use crate::upstream::{Upstream, bounded_read};
use slots::review_slots;

/// How long one review may take before it counts as failed.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const SELF_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    #[error("the upstream did not answer: {0}")]
    Unreachable(String),
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("{0} reviews were already in flight for {1:?}")]
    Busy(usize, Duration),
    #[error("the upstream answered {status}: {body}")]
    Status { status: StatusCode, body: String },
    #[error("the upstream's answer could not be decoded: {0}")]
    Decode(String),
}

/// What a resource request asks to do, in the API server's authorizer terms.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceAttributes {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub verb: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The request's raw selectors; the API server parses them into the
    /// requirements its authorizers see (the Node authorizer allows a
    /// kubelet's pod watch only with `spec.nodeName=<its node>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<RawSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<RawSelector>,
}

impl ResourceAttributes {
    /// The attributes kube-apiserver derives for a read (get, list, watch):
    /// a list or watch narrowed to one name by `metadata.name=<name>` names
    /// it, as the API server's request info does (the Node authorizer lets a
    /// kubelet watch a secret only that way). Not on the legacy
    /// `/api/v1/watch/...` paths, whose verb the API server takes from the
    /// path before it would look at selectors.
    pub(crate) fn of_read(info: &RequestInfo, label_selector: &str, field_selector: &str) -> Self {
        let mut name = info.name.clone().unwrap_or_default();
        if name.is_empty()
            && !info.legacy_watch_path
            && matches!(info.verb, Some(Verb::List | Verb::Watch))
            && let Ok(fields) = FieldSelector::parse(field_selector)
            && let Some(n) = fields.exact("metadata.name").filter(|n| is_path_segment_name(n))
        {
            name = n.to_owned();
        }
        Self {
            namespace: info.namespace.clone().unwrap_or_default(),
            verb: info.verb_label().to_owned(),
            group: info.api_group.clone(),
            version: info.api_version.clone(),
            resource: info.resource.clone(),
            subresource: info.subresource.clone().unwrap_or_default(),
            name,
            // The legacy watch paths carry no selectors to the authorizer.
            field_selector: RawSelector::from_query(field_selector).filter(|_| !info.legacy_watch_path),
            label_selector: RawSelector::from_query(label_selector).filter(|_| !info.legacy_watch_path),
        }
    }
}

/// What a non-resource request (`/healthz`, `/version`, discovery) asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub(crate) struct NonResourceAttributes {
    /// The path as the API server reads it (percent-decoded).
    pub path: String,
    /// The lower-case method: `get`, `post`...
    pub verb: String,
}

/// What any request asks, as a SubjectAccessReview carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Attributes {
    Resource(ResourceAttributes),
    NonResource(NonResourceAttributes),
}

impl From<ResourceAttributes> for Attributes {
    fn from(a: ResourceAttributes) -> Self {
        Self::Resource(a)
    }
}

impl Attributes {
    /// The attributes the API server authorizes a request by: a resource
    /// request's (selectors for list, watch and deletecollection only), or
    /// a non-resource request's path and verb.
    pub(crate) fn of_request(info: &RequestInfo, uri: &http::Uri) -> Self {
        if !info.is_resource_request {
            let path = crate::request::decode_path(uri.path()).map(|p| p.into_owned()).unwrap_or_default();
            return Self::NonResource(NonResourceAttributes { path, verb: info.verb_label().to_owned() });
        }
        let (mut labels, mut fields) = (String::new(), String::new());
        if matches!(info.verb, Some(Verb::List | Verb::Watch | Verb::DeleteCollection)) {
            // As the API server reads them: Go's first value, pairs Go drops
            // (a `;`, a malformed escape) are no selector.
            let query = crate::request::GoQuery::of(uri);
            labels = query.get("labelSelector").unwrap_or_default().to_owned();
            fields = query.get("fieldSelector").unwrap_or_default().to_owned();
        }
        Self::Resource(ResourceAttributes::of_read(info, &labels, &fields))
    }

    /// The same attributes with another verb (`impersonate-on:<mode>:<verb>`).
    pub(crate) fn with_verb(&self, verb: String) -> Self {
        match self {
            Self::Resource(r) => Self::Resource(ResourceAttributes { verb, ..r.clone() }),
            Self::NonResource(n) => Self::NonResource(NonResourceAttributes { verb, ..n.clone() }),
        }
    }

    pub(crate) fn verb(&self) -> &str {
        match self {
            Self::Resource(r) => &r.verb,
            Self::NonResource(n) => &n.verb,
        }
    }
}

/// A name that can stand in a URL path segment, by the API server's rule.
fn is_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSelector {
    pub raw_selector: String,
}

impl RawSelector {
    /// `None` for an empty selector, which selects everything.
    pub(crate) fn from_query(raw: &str) -> Option<Self> {
        (!raw.is_empty()).then(|| Self { raw_selector: raw.to_owned() })
    }
}

/// The API server's answer to a SubjectAccessReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub allowed: bool,
    /// Why, as the authorizers put it; the 403 message ends with it.
    pub reason: String,
}

/// Makes reviews against one upstream, at most a fixed number at once.
///
/// Every unknown token and every new (caller, request) pair costs a review,
/// and clients choose both: without a bound, junk tokens or endless distinct
/// selectors would turn into unbounded concurrent requests on watchmux's one
/// identity. A review waits for a slot within its own time limit and fails
/// (closed) when none frees up; slots go round-robin between the callers
/// reviews are made for, so one caller's queued reviews do not hold another's.
#[derive(Clone)]
pub(crate) struct ReviewClient {
    upstream: Arc<Upstream>,
    slots: Arc<crate::fair_queue::FairSlots<Asker>>,
    max_concurrent: usize,
}

impl ReviewClient {
    /// The upstream the reviews go to.
    pub(crate) fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    pub(crate) fn new(upstream: Arc<Upstream>, max_concurrent: usize) -> Self {
        let max_concurrent = max_concurrent.max(1);
        Self { upstream, slots: review_slots(max_concurrent), max_concurrent }
    }

    /// Who `token` belongs to, or `None` when the API server does not accept
    /// it (unknown, expired, forged, or for another audience). `asker` is
    /// who sent it, for fair admission.
    pub(crate) async fn token(&self, token: &str, asker: &Asker) -> Result<Option<UserInfo>, ReviewError> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let review: TokenReview = self.post("token", TOKEN_REVIEWS, &body, asker).await?;
        let status = review.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        if !status.authenticated || user.username.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            UserInfo { name: user.username, uid: user.uid, groups: user.groups, extra: user.extra }
                .with_authenticated_group(),
        ))
    }

    /// Who watchmux itself is to the upstream (a SelfSubjectReview).
    pub(crate) async fn own_identity(&self) -> Result<UserInfo, ReviewError> {
        let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let review: SelfReview = self.post("self", SELF_REVIEWS, &body, &Asker::Watchmux).await?;
        let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
        if user.username.is_empty() {
            return Err(ReviewError::Decode("a SelfSubjectReview without a user".into()));
        }
        Ok(UserInfo { name: user.username, uid: user.uid, groups: user.groups, extra: user.extra })
    }

    /// May `user` do what `attrs` describe?
    pub(crate) async fn access(&self, user: &UserInfo, attrs: &Attributes) -> Result<Decision, ReviewError> {
        let mut spec = serde_json::json!({
            "user": user.name,
            "groups": user.groups,
            "extra": user.extra,
            "uid": user.uid,
        });
        let (key, value) = match attrs {
            Attributes::Resource(r) => ("resourceAttributes", serde_json::to_value(r)),
            Attributes::NonResource(n) => ("nonResourceAttributes", serde_json::to_value(n)),
        };
        spec[key] = value.map_err(|e| ReviewError::Decode(e.to_string()))?;
        let body = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        });
        let asker = Asker::User(user.name.clone());
        let review: AccessReview = self.post("access", ACCESS_REVIEWS, &body, &asker).await?;
        let status = review.status.unwrap_or_default();
        Ok(Decision { allowed: status.allowed && !status.denied, reason: status.reason })
    }

    async fn post<T: for<'de> Deserialize<'de>>(
        &self,
        kind: &'static str,
        path: &str,
        body: &serde_json::Value,
        asker: &Asker,
    ) -> Result<T, ReviewError> {
        let started = Instant::now();
        let deadline = started + REVIEW_TIMEOUT;
        let result = match tokio::time::timeout_at(deadline, self.slots.acquire(asker)).await {
            Ok(Ok(_slot)) => tokio::time::timeout_at(deadline, self.send(path, body))
                .await
                .unwrap_or(Err(ReviewError::Timeout(REVIEW_TIMEOUT))),
            _ => Err(ReviewError::Busy(self.max_concurrent, REVIEW_TIMEOUT)),
        };
        histogram!(m::AUTH_REVIEW_DURATION, "review" => kind).record(started.elapsed().as_secs_f64());
        let outcome = if result.is_ok() { "answered" } else { "error" };
        counter!(m::AUTH_REVIEWS, "review" => kind, "outcome" => outcome).increment(1);
        let bytes = result?;
        serde_json::from_slice(&bytes).map_err(|e| ReviewError::Decode(e.to_string()))
    }

    async fn send(&self, path: &str, body: &serde_json::Value) -> Result<bytes::Bytes, ReviewError> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, concat!("watchmux/", env!("CARGO_PKG_VERSION")))
            .body(body::full(bytes::Bytes::from(body.to_string())))
            .expect("valid request");
        let resp = self.upstream.send_review(req).await.map_err(|e| ReviewError::Unreachable(error_chain(&e)))?;
        let status = resp.status();
        if status != StatusCode::CREATED && status != StatusCode::OK {
            let said = bounded_read::read_prefix(resp.into_body(), 512).await;
            return Err(ReviewError::Status { status, body: String::from_utf8_lossy(&said).into_owned() });
        }
        bounded_read::read_whole(resp.into_body(), bounded_read::REVIEW_BYTES)
            .await
            .map_err(|e| ReviewError::Unreachable(error_chain(&e)))
    }
}

#[derive(Deserialize)]
struct TokenReview {
    status: Option<TokenReviewStatus>,
}

#[derive(Deserialize, Default)]
struct TokenReviewStatus {
    #[serde(default)]
    authenticated: bool,
    user: Option<ReviewedUser>,
}

#[derive(Deserialize)]
struct SelfReview {
    status: Option<SelfReviewStatus>,
}

#[derive(Deserialize)]
struct SelfReviewStatus {
    #[serde(rename = "userInfo")]
    user_info: Option<ReviewedUser>,
}

#[derive(Deserialize, Default)]
struct ReviewedUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    extra: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct AccessReview {
    status: Option<AccessReviewStatus>,
}

#[derive(Deserialize, Default)]
struct AccessReviewStatus {
    #[serde(default)]
    allowed: bool,
    #[serde(default)]
    denied: bool,
    #[serde(default)]
    reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_by_metadata_name_names_the_object() {
        let info = RequestInfo::classify(
            &http::Method::GET,
            &"/api/v1/namespaces/ns1/secrets?watch=1&fieldSelector=metadata.name%3Ds1".parse().unwrap(),
        );
        let attrs = ResourceAttributes::of_read(&info, "", "metadata.name=s1");
        assert_eq!((attrs.verb.as_str(), attrs.name.as_str(), attrs.namespace.as_str()), ("watch", "s1", "ns1"));
        let attrs = ResourceAttributes::of_read(&info, "", "metadata.name!=s1");
        assert_eq!(attrs.name, "");
        let attrs = ResourceAttributes::of_read(&info, "", "metadata.name=a/b");
        assert_eq!(attrs.name, "");
    }

    #[test]
    fn a_legacy_watch_path_is_not_named_by_its_selector() {
        let info = RequestInfo::classify(
            &http::Method::GET,
            &"/api/v1/watch/namespaces/ns1/secrets?fieldSelector=metadata.name%3Ds1".parse().unwrap(),
        );
        let attrs = ResourceAttributes::of_read(&info, "a=b", "metadata.name=s1");
        assert_eq!((attrs.verb.as_str(), attrs.name.as_str()), ("watch", ""));
        assert_eq!((attrs.field_selector, attrs.label_selector), (None, None), "nor given its selectors");
    }

    #[test]
    fn request_attributes_carry_selectors_only_for_collections() {
        let attrs = |m: http::Method, uri: &str| {
            let uri: http::Uri = uri.parse().unwrap();
            Attributes::of_request(&RequestInfo::classify(&m, &uri), &uri)
        };
        let Attributes::Resource(list) =
            attrs(http::Method::GET, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&labelSelector=a")
        else {
            panic!("a resource request")
        };
        assert_eq!(list.field_selector, RawSelector::from_query("spec.nodeName=n1"));
        assert_eq!(list.label_selector, RawSelector::from_query("a"));
        let Attributes::Resource(get) = attrs(http::Method::GET, "/api/v1/namespaces/a/pods/p?labelSelector=a") else {
            panic!("a resource request")
        };
        assert_eq!((get.verb.as_str(), get.label_selector), ("get", None));
        assert_eq!(
            attrs(http::Method::POST, "/version%2Fx"),
            Attributes::NonResource(NonResourceAttributes { path: "/version/x".into(), verb: "post".into() })
        );
    }

    #[test]
    fn resource_attributes_serialize_as_the_api_expects() {
        let attrs = ResourceAttributes {
            verb: "watch".into(),
            version: "v1".into(),
            resource: "pods".into(),
            field_selector: RawSelector::from_query("spec.nodeName=n1"),
            label_selector: RawSelector::from_query(""),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&attrs).unwrap(),
            serde_json::json!({
                "verb": "watch", "version": "v1", "resource": "pods",
                "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
            })
        );
    }

    /// A review client whose upstream answers every review with `status`
    /// and `body`.
    async fn answered_with(status: StatusCode, body: bytes::Bytes) -> ReviewClient {
        use crate::upstream::{UpstreamOptions, fake_server};
        let addr = fake_server::serve(move |_req| {
            let body = body.clone();
            async move { http::Response::builder().status(status).body(crate::body::full(body)).unwrap() }
        })
        .await;
        ReviewClient::new(fake_server::upstream(addr, UpstreamOptions::default()), 4)
    }

    #[tokio::test]
    async fn a_review_answer_past_its_bound_is_an_unreachable_upstream_not_a_user() {
        // A TokenReview that authenticates, padded past the bound with
        // whitespace JSON allows.
        let mut said = br#"{"status":{"authenticated":true,"user":{"username":"mallory"}}}"#.to_vec();
        let fits = answered_with(StatusCode::CREATED, bytes::Bytes::from(said.clone())).await;
        let user = fits.token("t", &Asker::Peer(None)).await.unwrap().expect("authenticated");
        assert_eq!(user.name, "mallory", "the same answer within the bound is read");
        said.resize(bounded_read::REVIEW_BYTES + 1, b' ');
        let past = answered_with(StatusCode::CREATED, bytes::Bytes::from(said)).await;
        let err = past.token("t", &Asker::Peer(None)).await.unwrap_err();
        assert!(matches!(&err, ReviewError::Unreachable(why) if why.contains("larger than")), "{err:?}");
    }

    #[tokio::test]
    async fn a_refused_review_keeps_the_first_512_bytes_of_why() {
        let client = answered_with(StatusCode::FORBIDDEN, bytes::Bytes::from(vec![b'x'; 1 << 20])).await;
        let err = client.token("t", &Asker::Peer(None)).await.unwrap_err();
        let ReviewError::Status { status, body } = err else { panic!("{err:?}") };
        assert_eq!((status, body.len()), (StatusCode::FORBIDDEN, 512));
    }
}
