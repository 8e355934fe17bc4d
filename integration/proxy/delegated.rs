//! Delegated mode against a fake upstream that answers TokenReviews and
//! SubjectAccessReviews and records every other request: what goes upstream
//! on a client's behalf, and what never does. The same cases against the
//! real API server are in `integration/e2e/adversarial.rs`.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::WAIT;
use crate::harness::*;
use watchmux::body;

/// A request the fake upstream saw, other than a review.
#[derive(Debug, Clone)]
struct Seen {
    path_and_query: String,
    headers: http::HeaderMap,
}

/// The fake: `alice-token` is alice (group dev); alice may do anything in
/// namespace `a`, nobody anything else. Discovery lists core v1 with
/// configmaps, services and pods.
async fn reviewing_upstream() -> (std::net::SocketAddr, Arc<Mutex<Vec<Seen>>>, Arc<Mutex<usize>>) {
    let (addr, seen, reviews, _) = reviewing_upstream_with_gate().await;
    (addr, seen, reviews)
}

/// Reviews in flight at the fake, and a gate that holds reviews of tokens
/// starting with `slow-` until it is opened.
#[derive(Clone)]
struct ReviewGate {
    in_flight: tokio::sync::watch::Sender<usize>,
    max_in_flight: Arc<Mutex<usize>>,
    open: Arc<tokio::sync::Semaphore>,
}

async fn reviewing_upstream_with_gate() -> (std::net::SocketAddr, Arc<Mutex<Vec<Seen>>>, Arc<Mutex<usize>>, ReviewGate)
{
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reviews = Arc::new(Mutex::new(0usize));
    let gate = ReviewGate {
        in_flight: tokio::sync::watch::channel(0).0,
        max_in_flight: Arc::default(),
        open: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let (seen2, reviews2, gate2) = (seen.clone(), reviews.clone(), gate.clone());
    let addr = fake_upstream(handler(move |req: Request<hyper::body::Incoming>| {
        let (seen, reviews, gate) = (seen2.clone(), reviews2.clone(), gate2.clone());
        async move {
            let path = req.uri().path().to_owned();
            let pq = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
            let headers = req.headers().clone();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let answer = match path.as_str() {
                "/apis/authentication.k8s.io/v1/tokenreviews" => {
                    *reviews.lock() += 1;
                    let review: Value = serde_json::from_slice(&body).unwrap();
                    if review["spec"]["token"].as_str().is_some_and(|t| t.starts_with("slow-")) {
                        gate.in_flight.send_modify(|n| *n += 1);
                        {
                            let now = *gate.in_flight.borrow();
                            let mut max = gate.max_in_flight.lock();
                            *max = (*max).max(now);
                        }
                        gate.open.acquire().await.unwrap().forget();
                        gate.in_flight.send_modify(|n| *n -= 1);
                    }
                    let status = if review["spec"]["token"] == "alice-token" {
                        json!({"authenticated": true, "user": {"username": "alice", "groups": ["dev"]}})
                    } else {
                        json!({"authenticated": false})
                    };
                    json!({"kind": "TokenReview", "status": status})
                }
                "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
                    *reviews.lock() += 1;
                    let review: Value = serde_json::from_slice(&body).unwrap();
                    let spec = &review["spec"];
                    let allowed = spec["user"] == "alice" && spec["resourceAttributes"]["namespace"] == "a";
                    json!({"kind": "SubjectAccessReview", "status": {"allowed": allowed}})
                }
                "/apis/authentication.k8s.io/v1/selfsubjectreviews" => {
                    json!({"kind": "SelfSubjectReview", "status": {"userInfo": {"username": "system:node:n1"}}})
                }
                "/readyz" => json!({}),
                _ => {
                    seen.lock().push(Seen { path_and_query: pq, headers });
                    match path.as_str() {
                        "/api" => json!({"kind": "APIVersions", "versions": ["v1"]}),
                        "/apis" => json!({"kind": "APIGroupList", "groups": []}),
                        "/api/v1" => json!({"kind": "APIResourceList", "resources": [
                            {"name": "configmaps", "namespaced": true, "kind": "ConfigMap", "verbs": ["get", "list", "watch"]},
                            {"name": "services", "namespaced": true, "kind": "Service", "verbs": ["get", "list", "watch"]},
                            {"name": "pods", "namespaced": true, "kind": "Pod", "verbs": ["get", "list", "watch"]},
                        ]}),
                        _ => json!({"kind": "Status", "status": "Success"}),
                    }
                }
            };
            http::Response::new(body::full(answer.to_string()))
        }
    }))
    .await;
    (addr, seen, reviews, gate)
}

async fn send(proxy: &Proxy, req: Request<Full<Bytes>>) -> http::Response<hyper::body::Incoming> {
    h1(proxy.addr).await.send_request(req).await.unwrap()
}

fn get(path: &str) -> http::request::Builder {
    Request::get(path).header("host", "127.0.0.1")
}

/// The attack of issue 10: an anonymous client lists the headers watchmux
/// adds in its `Connection` header, hoping hop-by-hop stripping removes
/// them after they are set. The request must still reach the upstream as
/// the anonymous user, whatever the request and whatever it names.
#[tokio::test]
async fn a_connection_header_cannot_strip_the_impersonation_of_an_anonymous_client() {
    let (upstream, seen, _) = reviewing_upstream().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated", "--cache-resources", "configmaps"]).await;
    let tricks = [
        "Impersonate-User, Impersonate-Group",
        "impersonate-user,impersonate-group,impersonate-uid,authorization",
        "keep-alive, IMPERSONATE-USER",
        "Impersonate-Extra-Foo, X-Remote-User",
    ];
    for (i, connection) in tricks.iter().enumerate() {
        // A pretty list, and a consistent GET of a cached resource: both go
        // upstream before any review, so as the caller or not at all.
        let path = if i % 2 == 0 {
            format!("/api/v1/namespaces/b/configmaps?pretty=1&n={i}")
        } else {
            format!("/api/v1/namespaces/b/configmaps/cm{i}")
        };
        let req = get(&path).header("connection", *connection).body(Full::default()).unwrap();
        let resp = send(&proxy, req).await;
        assert_eq!(resp.status(), StatusCode::OK, "{connection}");
        let _ = resp.into_body().collect().await;
        let seen = seen.lock().iter().find(|s| s.path_and_query == path).cloned().expect("passed through");
        assert_eq!(seen.headers["impersonate-user"], "system:anonymous", "{connection}");
        let groups: Vec<_> = seen.headers.get_all("impersonate-group").iter().collect();
        assert_eq!(groups, ["system:unauthenticated"], "{connection}");
        assert_eq!(seen.headers["authorization"], format!("Bearer {UPSTREAM_TOKEN}"));
        assert!(seen.headers.get("x-remote-user").is_none());
    }
    proxy.shutdown().await;
}

/// A client's front-proxy headers and impersonation never reach the
/// upstream as its own say-so: only the identity watchmux established.
#[tokio::test]
async fn client_identity_headers_are_replaced_by_the_authenticated_caller() {
    let (upstream, seen, _) = reviewing_upstream().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated", "--cache-resources", "configmaps"]).await;
    let req = Request::post("/api/v1/namespaces/a/configmaps")
        .header("host", "127.0.0.1")
        .header("authorization", "Bearer alice-token")
        .header("x-remote-user", "system:admin")
        .header("x-remote-group", "system:masters")
        .header("x-remote-extra-scopes", "all")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let resp = send(&proxy, req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let seen = seen.lock().iter().find(|s| s.path_and_query == "/api/v1/namespaces/a/configmaps").cloned().unwrap();
    assert_eq!(seen.headers["impersonate-user"], "alice");
    let names: Vec<_> = seen.headers.keys().map(|k| k.as_str()).filter(|k| k.starts_with("x-remote")).collect();
    assert!(names.is_empty(), "front-proxy headers forwarded: {names:?}");
    proxy.shutdown().await;
}

/// A read the caller may not make is refused before watchmux does anything
/// upstream on its behalf: no list, no watch, no cache started. (Discovery
/// documents are read once at start-up, to check `--cache-resources`, and
/// `/version` once, for the upstream's minor.)
#[tokio::test]
async fn a_denied_read_starts_no_upstream_work() {
    let (upstream, seen, _) = reviewing_upstream().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated", "--cache-resources", "configmaps,services"]).await;
    for path in [
        "/api/v1/namespaces/b/configmaps",
        "/api/v1/namespaces/b/configmaps?watch=1",
        "/api/v%31/namespaces/b/services",
        "/api/v1/namespaces/b/configmaps/x?resourceVersion=0",
        "/api/v1/configmaps",
    ] {
        let resp = send(&proxy, get(path).body(Full::default()).unwrap()).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{path}");
    }
    let seen: Vec<_> = seen.lock().iter().map(|s| s.path_and_query.clone()).collect();
    let discovery = |p: &String| {
        ["/api", "/apis", "/api/v1", "/version"].contains(&p.as_str())
            || (p.starts_with("/apis/") && p.matches('/').count() == 3)
    };
    let work: Vec<_> = seen.iter().filter(|p| !discovery(p) || p.contains('?')).collect();
    assert!(work.is_empty(), "upstream work for denied requests: {work:?}");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "discovery read more than once: {seen:?}");
    proxy.shutdown().await;
}

/// Versions and groups the upstream does not serve cost nothing: the index
/// of served group versions is fetched once, no resource list is fetched
/// for a version it does not list, and the requests pass through.
#[tokio::test]
async fn unserved_versions_neither_start_caches_nor_grow_discovery() {
    let (upstream, seen, _) = reviewing_upstream().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated", "--cache-resources", "*"]).await;
    for i in 0..50 {
        let path = format!("/api/v{i}x/namespaces/a/pods");
        let req = get(&path).header("authorization", "Bearer alice-token").body(Full::default()).unwrap();
        let resp = send(&proxy, req).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
    }
    let seen: Vec<_> = seen.lock().iter().map(|s| s.path_and_query.clone()).collect();
    let index_fetches = seen.iter().filter(|p| *p == "/api" || *p == "/apis").count();
    assert_eq!(index_fetches, 2, "the index is fetched once within the refresh interval: {seen:?}");
    let discovery: Vec<_> = seen.iter().filter(|p| p.starts_with("/api/v") && !p.contains("/namespaces/")).collect();
    assert!(discovery.is_empty(), "resource lists fetched for unserved versions: {discovery:?}");
    assert_eq!(seen.iter().filter(|p| p.ends_with("/namespaces/a/pods")).count(), 50, "each passes through");
    proxy.shutdown().await;
}

/// Junk tokens cost one TokenReview each, but never more in flight at once
/// than one asker's share of `--max-concurrent-reviews` (a quarter: here
/// every token comes from one address); the rest wait for a slot. The
/// global bound and the turns between askers are `reviews::slots`' tests.
#[tokio::test]
async fn concurrent_reviews_are_bounded() {
    let (upstream, _, reviews, gate) = reviewing_upstream_with_gate().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated", "--max-concurrent-reviews", "8"]).await;
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let addr = proxy.addr;
            tokio::spawn(async move {
                let req = get("/api/v1/namespaces/a/configmaps")
                    .header("authorization", format!("Bearer slow-{i}"))
                    .body(Full::default())
                    .unwrap();
                h1(addr).await.send_request(req).await.unwrap().status()
            })
        })
        .collect();
    let mut in_flight = gate.in_flight.subscribe();
    tokio::time::timeout(WAIT, in_flight.wait_for(|n| *n == 2)).await.unwrap().unwrap();
    // Let every review through, one at a time, so each waiting one is seen.
    gate.open.add_permits(6);
    for client in clients {
        assert_eq!(tokio::time::timeout(WAIT, client).await.unwrap().unwrap(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(*reviews.lock(), 6, "each junk token is reviewed once");
    assert_eq!(*gate.max_in_flight.lock(), 2, "never more than one address's share in flight");
    proxy.shutdown().await;
}

/// `--upstream-identity=client`: what passes through carries the client's
/// own credentials, and nothing of watchmux's: a bearer token as sent, no
/// credentials at all for an anonymous client, and a client's impersonation
/// left for the API server to judge against the client itself.
#[tokio::test]
async fn client_mode_forwards_the_clients_own_credentials_and_nothing_of_watchmuxs() {
    let (upstream, seen, _) = reviewing_upstream().await;
    let proxy = start_proxy(
        upstream,
        &["--auth-mode", "delegated", "--upstream-identity", "client", "--cache-resources", "configmaps"],
    )
    .await;
    let cases: [(&str, Option<&str>, Option<&str>); 3] = [
        ("/api/v1/namespaces/b/secrets?case=token", Some("Bearer alice-token"), None),
        ("/api/v1/namespaces/b/secrets?case=anonymous", None, None),
        ("/api/v1/namespaces/a/configmaps?case=impersonating", Some("Bearer alice-token"), Some("bob")),
    ];
    for (path, authorization, impersonate) in cases {
        let mut req = get(path).header("connection", "Authorization, Impersonate-User");
        if let Some(a) = authorization {
            req = req.header("authorization", a);
        }
        if let Some(who) = impersonate {
            req = req.header("impersonate-user", who);
        }
        let resp = send(&proxy, req.body(Full::default()).unwrap()).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let seen = seen.lock().iter().find(|s| s.path_and_query == path).cloned().expect("passed through");
        assert_eq!(seen.headers.get("authorization").map(|v| v.to_str().unwrap()), authorization, "{path}");
        assert_eq!(seen.headers.get("impersonate-user").map(|v| v.to_str().unwrap()), impersonate, "{path}");
        assert!(seen.headers.get("impersonate-group").is_none(), "{path}");
    }
    proxy.shutdown().await;
}

/// A read refused a moment ago is asked of the API server again, not
/// refused from the cache: it goes upstream once, as the caller
/// (impersonated, with watchmux's own credentials only as the impersonator),
/// and without a second review. The first refusal was watchmux's own.
#[tokio::test]
async fn a_remembered_denial_goes_upstream_as_the_caller_without_a_new_review() {
    let (upstream, seen, reviews) = reviewing_upstream().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated", "--cache-resources", "configmaps"]).await;
    let path = "/api/v1/namespaces/b/configmaps?resourceVersion=0";
    let ask = || get(path).header("authorization", "Bearer alice-token").body(Full::default()).unwrap();

    let resp = send(&proxy, ask()).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "refused by watchmux's own review");
    assert!(!seen.lock().iter().any(|s| s.path_and_query == path), "nothing upstream for the first refusal");
    let reviews_after_first = *reviews.lock();

    let resp = send(&proxy, ask()).await;
    assert_eq!(resp.status(), StatusCode::OK, "the fake upstream's own answer");
    assert_eq!(*reviews.lock(), reviews_after_first, "the remembered denial spared a review");
    let passed: Vec<_> = seen.lock().iter().filter(|s| s.path_and_query == path).cloned().collect();
    assert_eq!(passed.len(), 1, "asked upstream once");
    assert_eq!(passed[0].headers["impersonate-user"], "alice");
    let groups: Vec<_> = passed[0].headers.get_all("impersonate-group").iter().collect();
    assert!(groups.iter().any(|g| *g == "dev"), "the caller's groups: {groups:?}");
    assert_eq!(passed[0].headers["authorization"], format!("Bearer {UPSTREAM_TOKEN}"));
    proxy.shutdown().await;
}

/// An h2c connection to the proxy: its sender and its connection's end.
async fn h2c(proxy: &Proxy) -> (hyper::client::conn::http2::SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (send, conn) = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.unwrap();
    (
        send,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

fn h2_get(path: &str, token: Option<&str>) -> Request<Full<Bytes>> {
    let mut req = Request::get(format!("http://127.0.0.1{path}"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    req.body(Full::default()).unwrap()
}

/// kube-apiserver's UnauthenticatedHTTP2DOSMitigation: an anonymous HTTP/2
/// request, or one whose token fails, is answered and then its connection
/// gets GOAWAY; an authenticated client keeps its connection for the next
/// request, and HTTP/1.1 keeps its keep-alive (the API server limits the
/// mitigation to HTTP/2).
#[tokio::test]
async fn anonymous_http2_clients_get_goaway_after_their_request() {
    let (upstream, _, _) = reviewing_upstream().await;
    let proxy = start_proxy(upstream, &["--auth-mode", "delegated"]).await;
    for token in [None, Some("wrong-token")] {
        let (mut send, ended) = h2c(&proxy).await;
        let resp = send.send_request(h2_get("/api/v1/namespaces/a/configmaps", token)).await.unwrap();
        let expected = if token.is_some() { StatusCode::UNAUTHORIZED } else { StatusCode::OK };
        assert_eq!(resp.status(), expected, "{token:?}");
        assert!(resp.headers().get("connection").is_none(), "not an HTTP/2 header");
        let _ = resp.into_body().collect().await;
        tokio::time::timeout(WAIT, ended).await.expect("the anonymous connection stayed open").unwrap();
    }
    let (mut send, ended) = h2c(&proxy).await;
    for _ in 0..3 {
        let resp = send.send_request(h2_get("/api/v1/namespaces/a/configmaps", Some("alice-token"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let _ = resp.into_body().collect().await;
    }
    assert!(!ended.is_finished(), "an authenticated client lost its connection");
    // HTTP/1.1: the anonymous client's connection is kept alive.
    let mut h1 = h1(proxy.addr).await;
    for _ in 0..2 {
        let resp =
            h1.send_request(get("/api/v1/namespaces/a/configmaps").body(Full::default()).unwrap()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers().get("connection").is_none());
        let _ = resp.into_body().collect().await;
    }
    proxy.shutdown().await;
}
