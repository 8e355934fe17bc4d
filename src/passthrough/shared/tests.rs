//! The shared answers against an in-process fake upstream that serves
//! OpenAPI documents as kube-apiserver does (immutable by hash, a redirect
//! for a stale hash) and health checks, counting what it is asked.

use std::sync::atomic::AtomicU32;

use http::Method;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::*;
use crate::upstream::kubeconfig::UpstreamConfig;
use crate::upstream::{UpstreamOptions, fake_server};

const CURRENT: &str = "/openapi/v3/api/v1?hash=AB12";
const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf";
/// What client-go asks `/api` and `/apis` for.
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                                 application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,\
                                 application/json;q=0.9";

#[derive(Default)]
struct Fake {
    fetches: AtomicU32,
    /// Set: every answer waits for a notification (callers pile up meanwhile).
    held: Option<Notify>,
    /// Signalled when a request arrives.
    arrived: Notify,
}

async fn upstream(fake: Arc<Fake>) -> Arc<Upstream> {
    let addr = fake_server::serve(move |req: Request<Incoming>| {
        let fake = fake.clone();
        async move {
            let nth = fake.fetches.fetch_add(1, Ordering::SeqCst) + 1;
            fake.arrived.notify_one();
            if let Some(held) = &fake.held {
                held.notified().await;
            }
            answer(&req, nth)
        }
    })
    .await;
    fake_server::upstream(addr, UpstreamOptions::default())
}

/// kube-apiserver's answers, headers and all; `nth`: the fake's count of
/// requests, this one included.
fn answer(req: &Request<Incoming>, nth: u32) -> Response<ProxyBody> {
    let pq = req.uri().path_and_query().unwrap().as_str();
    let protobuf = req.headers().get(header::ACCEPT).is_some_and(|a| a == PROTOBUF);
    let builder = Response::builder()
        .header("audit-id", "7f3c")
        .header("x-kubernetes-pf-flowschema-uid", "fs")
        .header("x-kubernetes-pf-prioritylevel-uid", "pl")
        .header("vary", "Accept")
        .header("etag", "\"AB12\"");
    match pq {
        CURRENT => builder
            .header("cache-control", "public, immutable")
            .header(
                "content-type",
                if protobuf {
                    "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
                } else {
                    "application/json"
                },
            )
            .header("expires", "Fri, 03 Dec 2027 09:45:07 UTC")
            .header("last-modified", "Thu, 03 Dec 2026 09:44:58 GMT")
            .body(body::full(if protobuf { "\x0a\x05proto" } else { "{\"openapi\":\"3.0.0\"}" }))
            .unwrap(),
        // Ready at first, then failing: the API server's 500.
        "/readyz" => {
            let (status, text) = if nth == 1 {
                (StatusCode::OK, "ok")
            } else {
                (StatusCode::INTERNAL_SERVER_ERROR, "[-]etcd failed: reason withheld\nreadyz check failed\n")
            };
            builder
                .status(status)
                .header("cache-control", "no-cache, private")
                .header("content-type", "text/plain; charset=utf-8")
                .header("x-content-type-options", "nosniff")
                .body(body::full(text))
                .unwrap()
        }
        // Aggregated discovery when asked for it, as kube-apiserver answers.
        "/apis"
            if req
                .headers()
                .get(header::ACCEPT)
                .is_some_and(|a| a.to_str().unwrap().contains("as=APIGroupDiscoveryList")) =>
        {
            builder
                .header("cache-control", "no-cache, private")
                .header("content-type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
                .body(body::full(format!("{{\"kind\":\"APIGroupDiscoveryList\",\"n\":{nth}}}")))
                .unwrap()
        }
        // A server without the aggregated form: the legacy list, naming
        // server addresses by the client's address.
        "/api" => builder
            .header("content-type", "application/json")
            .body(body::full(r#"{"kind":"APIVersions","serverAddressByClientCIDRs":[]}"#))
            .unwrap(),
        "/openapi/v3" => builder
            .header("content-type", "application/json")
            .body(body::full(format!("{{\"paths\":{{}},\"n\":{nth}}}")))
            .unwrap(),
        // watchmux's identity refused: never shared.
        "/livez" => builder.status(StatusCode::FORBIDDEN).body(body::full("{}")).unwrap(),
        // A group whose document is too large to keep.
        "/openapi/v3/apis/big/v1?hash=AB12" => {
            builder.header("cache-control", "public, immutable").body(body::full(vec![b' '; ANSWER_BYTES + 1])).unwrap()
        }
        // What kube-apiserver serves without a hash: not immutable.
        "/openapi/v3/apis/apps/v1?hash=AB12" => {
            builder.header("cache-control", "no-cache, private").body(body::full("{}")).unwrap()
        }
        _ => builder
            .status(StatusCode::MOVED_PERMANENTLY)
            .header("cache-control", "no-cache, private")
            .header("location", CURRENT)
            .body(body::empty())
            .unwrap(),
    }
}

fn request(method: Method, uri: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(()).unwrap()
}

fn key_of(method: Method, uri: &str, headers: &[(&str, &str)]) -> Option<SharedKey> {
    let req = request(method, uri, headers);
    let info = RequestInfo::classify(req.method(), req.uri());
    SharedKey::of(&req, &info)
}

fn key(accept: Option<&str>) -> SharedKey {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
    key_of(Method::GET, CURRENT, &headers).unwrap()
}

async fn body_of(resp: Response<ProxyBody>) -> Bytes {
    resp.into_body().collect().await.unwrap().to_bytes()
}

#[test]
fn only_a_plain_get_of_a_hashed_openapi_v3_document_is_a_key() {
    assert!(key_of(Method::GET, CURRENT, &[]).is_some());
    assert!(key_of(Method::GET, "/openapi/v3/apis/apps/v1?hash=ab12", &[("accept", "application/json")]).is_some());
    assert!(key_of(Method::GET, "/openapi/v3/apis/my-group.example.com/v1beta1?hash=0", &[]).is_some());
    for uri in [
        "/openapi/v3/api/v1",                       // no hash: served uncached
        "/openapi/v3/api/v1?hash=",                 // an empty hash
        "/openapi/v3/api/v1?hash=XYZ",              // not hex
        "/openapi/v3/api/v1?hash=AB&x=1",           // more than the hash
        "/openapi/v3/api/v1?x=1&hash=AB",           //
        "/openapi/v3/api/v1?hash=AB&hash=CD",       // Go reads the first
        "/openapi/v3/api/v1?hash%3DAB",             //
        "/openapi/v2?hash=AB",                      // another handler
        "/openapi/v3/?hash=AB",                     // an empty name
        "/openapi/v3/api//v1?hash=AB",              // an empty segment
        "/openapi/v3/../../api/v1/secrets?hash=AB", // dot segments
        "/openapi/v3/./api/v1?hash=AB",             //
        "/openapi/v3/api%2Fv1?hash=AB",             // an escape
        "/openapi/v3/api/v1/?hash=AB",              // a trailing slash
        "/api/v1/pods?hash=AB",                     // a resource
        "/openapi/v3?hash=AB",                      // the root, with a query
    ] {
        assert_eq!(key_of(Method::GET, uri, &[]), None, "{uri}");
    }
    let long = format!("/openapi/v3/apis/{}/v1?hash=AB", "g".repeat(MAX_PATH));
    assert_eq!(key_of(Method::GET, &long, &[]), None, "a path that long");
    let long = format!("/openapi/v3/api/v1?hash={}", "A".repeat(MAX_HASH + 1));
    assert_eq!(key_of(Method::GET, &long, &[]), None, "a hash that long");
    for method in [Method::HEAD, Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
        assert_eq!(key_of(method.clone(), CURRENT, &[]), None, "{method}");
    }
    for conditional in ["range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since"] {
        assert_eq!(key_of(Method::GET, CURRENT, &[(conditional, "\"AB12\"")]), None, "{conditional}");
    }
    let two = [("accept", "application/json"), ("accept", PROTOBUF)];
    assert_eq!(key_of(Method::GET, CURRENT, &two), None, "two Accept headers");
    let long_accept = "a".repeat(MAX_ACCEPT + 1);
    assert_eq!(key_of(Method::GET, CURRENT, &[("accept", &long_accept)]), None);
    assert_ne!(key(Some("application/json")), key(Some(PROTOBUF)), "Vary: Accept");
    for health in ["/readyz", "/livez", "/healthz"] {
        assert_eq!(key_of(Method::GET, health, &[]).map(|k| k.kind), Some(Kind::Health), "{health}");
    }
    for uri in ["/readyz?verbose", "/readyz?", "/livez?exclude=etcd", "/healthz/etcd", "/readyz/", "/readyz/ping"] {
        assert_eq!(key_of(Method::GET, uri, &[]), None, "{uri}: passed through");
    }
    assert_eq!(key_of(Method::POST, "/readyz", &[]), None);
    // kube-apiserver answers text/plain to any Accept: one key per path.
    let readyz = key_of(Method::GET, "/readyz", &[]);
    for accept in [&[("accept", "application/json")][..], &[("accept", "text/html")], &two, &[("accept", &long_accept)]]
    {
        assert_eq!(key_of(Method::GET, "/readyz", accept), readyz, "{accept:?}");
    }
    assert_ne!(key(Some("application/json")), key(None));
}

#[tokio::test]
async fn callers_asking_at_once_share_one_fetch() {
    let fake = Arc::new(Fake { held: Some(Notify::new()), ..Fake::default() });
    let documents = Arc::new(SharedAnswers::new(upstream(fake.clone()).await));
    let k = key(Some("application/json"));
    let first = tokio::spawn({
        let (documents, k) = (documents.clone(), k.clone());
        async move { documents.lookup(&k).await }
    });
    fake.arrived.notified().await;
    let rest: Vec<_> = (0..9)
        .map(|_| {
            let (documents, k) = (documents.clone(), k.clone());
            tokio::spawn(async move { documents.lookup(&k).await })
        })
        .collect();
    // Every caller holds the one entry (the map's reference, and ten).
    for _ in 0..10_000 {
        if documents.kept.lock().entries.get(&k).map(Arc::strong_count) == Some(11) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(documents.kept.lock().entries.get(&k).map(Arc::strong_count), Some(11));
    fake.held.as_ref().unwrap().notify_one();

    let (document, outcome) = first.await.unwrap();
    assert_eq!(outcome, Outcome::Fetched);
    let document = document.unwrap();
    for other in rest {
        let (other, outcome) = other.await.unwrap();
        assert_eq!(outcome, Outcome::Hit);
        assert!(Arc::ptr_eq(&other.unwrap(), &document), "the same bytes");
    }
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_kept_answer_has_the_documents_headers_not_the_requests() {
    let fake = Arc::new(Fake::default());
    let documents = SharedAnswers::new(upstream(fake.clone()).await);
    for _ in 0..3 {
        let resp = documents.answer(&key(Some("application/json"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["cache-control"], "public, immutable");
        assert_eq!(h["etag"], "\"AB12\"");
        assert_eq!(h["vary"], "Accept");
        assert_eq!(h["last-modified"], "Thu, 03 Dec 2026 09:44:58 GMT");
        for per_request in PER_REQUEST {
            if *per_request != "content-length" {
                assert!(!h.contains_key(*per_request), "{per_request}");
            }
        }
        // A year from this answer, in the zone the API server wrote.
        let expires = h["expires"].to_str().unwrap();
        let in_gmt = httpdate::parse_http_date(&expires.replace(" UTC", " GMT")).unwrap();
        let from_now = in_gmt.duration_since(SystemTime::now()).unwrap().as_secs();
        assert!((365 * 86_400 - 10..=366 * 86_400).contains(&from_now), "{expires}");
        assert!(expires.ends_with(" UTC"));
        assert_eq!(&body_of(resp).await[..], b"{\"openapi\":\"3.0.0\"}");
    }
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 1, "fetched once");

    // Another Accept is another document.
    let resp = documents.answer(&key(Some(PROTOBUF))).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/com.github.proto-openapi.spec.v3.v1.0+protobuf");
    assert_eq!(&body_of(resp).await[..], b"\x0a\x05proto");
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn what_is_not_a_public_immutable_200_is_never_kept() {
    let fake = Arc::new(Fake::default());
    let documents = SharedAnswers::new(upstream(fake.clone()).await);
    let stale = key_of(Method::GET, "/openapi/v3/api/v1?hash=0FF", &[]).unwrap();
    let private = key_of(Method::GET, "/openapi/v3/apis/apps/v1?hash=AB12", &[]).unwrap();
    let big = key_of(Method::GET, "/openapi/v3/apis/big/v1?hash=AB12", &[]).unwrap();
    for k in [&stale, &private, &big] {
        for _ in 0..2 {
            assert_eq!(documents.lookup(k).await.1, Outcome::PassedThrough, "{k:?}");
        }
    }
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 6, "asked again each time, not remembered as absent");
    assert!(documents.kept.lock().entries.is_empty());
}

#[tokio::test]
async fn an_unreachable_upstream_passes_the_request_through() {
    let cfg = UpstreamConfig::for_test("http://127.0.0.1:1");
    let documents = SharedAnswers::new(Arc::new(Upstream::new(&cfg, UpstreamOptions::default()).unwrap()));
    assert_eq!(documents.lookup(&key(None)).await.1, Outcome::PassedThrough);
    assert!(documents.kept.lock().entries.is_empty());
}

fn kept_document(size: usize) -> Arc<Entry> {
    let document =
        Arc::new(Answer { status: StatusCode::OK, headers: HeaderMap::new(), body: Bytes::from(vec![0; size]) });
    Arc::new(Entry { answer: OnceCell::new_with(Some(Some(document))), ..Entry::new(0) })
}

fn numbered(n: usize) -> SharedKey {
    key_of(Method::GET, &format!("/openapi/v3/apis/g{n}/v1?hash=AB"), &[]).unwrap()
}

#[test]
fn the_least_recently_used_go_first_and_the_store_stays_in_its_bounds() {
    let mut kept = Kept::default();
    for n in 0..=STORE_ENTRIES {
        let entry = kept_document(10);
        entry.last_used.store(n as u64, Ordering::Relaxed);
        kept.entries.insert(numbered(n), entry);
    }
    // Used last: kept though it is the first inserted.
    kept.entries[&numbered(0)].last_used.store(1_000, Ordering::Relaxed);
    evict(&mut kept, &numbered(STORE_ENTRIES));
    assert_eq!(kept.entries.len(), STORE_ENTRIES);
    assert!(!kept.entries.contains_key(&numbered(1)), "the least recently used went");
    assert!(kept.entries.contains_key(&numbered(0)));

    // By bytes: three documents of over a third of the budget each.
    let mut kept = Kept::default();
    for n in 0..3 {
        let entry = kept_document(STORE_BYTES / 3 + 1);
        entry.last_used.store(n as u64, Ordering::Relaxed);
        kept.entries.insert(numbered(n), entry);
    }
    // One being fetched is never evicted, and counts nothing yet.
    let fetching = Arc::new(Entry::new(0));
    kept.entries.insert(numbered(9), fetching);
    evict(&mut kept, &numbered(0));
    assert!(kept.bytes() <= STORE_BYTES);
    assert!(kept.entries.contains_key(&numbered(0)), "the one just added stays");
    assert!(!kept.entries.contains_key(&numbered(1)));
    assert!(kept.entries.contains_key(&numbered(2)) && kept.entries.contains_key(&numbered(9)));
}

/// `entry` as if its fetch had started `age` ago.
fn aged(entry: &Entry, age: Duration) -> Arc<Entry> {
    let answer = entry.answer.get().cloned().flatten();
    let started = Instant::now().checked_sub(age).unwrap();
    Arc::new(Entry { answer: OnceCell::new_with(Some(answer)), started, ..Entry::new(0) })
}

#[tokio::test]
async fn a_health_answer_is_shared_for_a_second_failing_or_not() {
    let fake = Arc::new(Fake::default());
    let shared = SharedAnswers::new(upstream(fake.clone()).await);
    let readyz = key_of(Method::GET, "/readyz", &[]).unwrap();
    let (answer, outcome) = shared.lookup(&readyz).await;
    assert_eq!((answer.unwrap().status, outcome), (StatusCode::OK, Outcome::Fetched));

    // Fetched just now: shared.
    let entry = aged(&shared.kept.lock().entries[&readyz], Duration::ZERO);
    shared.kept.lock().entries.insert(readyz.clone(), entry);
    assert_eq!(shared.lookup(&readyz).await.1, Outcome::Hit);
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 1);

    // Older than a second: asked again, and the API server's failure is the answer.
    let entry = aged(&shared.kept.lock().entries[&readyz], HEALTH_MAX_AGE + Duration::from_millis(1));
    shared.kept.lock().entries.insert(readyz.clone(), entry);
    let (answer, outcome) = shared.lookup(&readyz).await;
    assert_eq!(outcome, Outcome::Fetched);
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 2);
    let resp = answer.unwrap().response();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    assert!(!resp.headers().contains_key("audit-id") && !resp.headers().contains_key("expires"));
    assert_eq!(&body_of(resp).await[..], b"[-]etcd failed: reason withheld\nreadyz check failed\n");

    // A refusal of watchmux's own identity says nothing of the caller's: not shared.
    let livez = key_of(Method::GET, "/livez", &[]).unwrap();
    assert_eq!(shared.lookup(&livez).await.1, Outcome::PassedThrough);
    assert!(!shared.kept.lock().entries.contains_key(&livez));
}

#[test]
fn discovery_is_a_key_in_its_aggregated_form_and_the_openapi_root_in_any() {
    let aggregated = [("accept", AGGREGATED_ACCEPT)];
    for path in ["/api", "/apis"] {
        assert_eq!(key_of(Method::GET, path, &aggregated).map(|k| k.kind), Some(Kind::Discovery), "{path}");
        // The legacy form names the caller's own server addresses.
        for accept in [&[][..], &[("accept", "application/json")], &[("accept", "application/vnd.kubernetes.protobuf")]]
        {
            assert_eq!(key_of(Method::GET, path, accept), None, "{path} {accept:?}");
        }
        let upper = [("accept", "application/json;AS=apigroupdiscoverylist")];
        assert!(key_of(Method::GET, path, &upper).is_some(), "media type parameters are case-insensitive");
    }
    for accept in [&[][..], &[("accept", "application/json")], &aggregated] {
        assert_eq!(key_of(Method::GET, "/openapi/v3", accept).map(|k| k.kind), Some(Kind::Discovery), "{accept:?}");
    }
    // Discovery's answer varies with Accept: the key keeps it.
    let json = key_of(Method::GET, "/openapi/v3", &[("accept", "application/json")]);
    assert_ne!(json, key_of(Method::GET, "/openapi/v3", &[]));
    for uri in
        ["/api?timeout=32s", "/apis?", "/api/", "/apis/", "/api/v1", "/apis/apps", "/apis/apps/v1", "/openapi/v3/"]
    {
        assert_eq!(key_of(Method::GET, uri, &aggregated), None, "{uri}");
    }
    assert_eq!(key_of(Method::POST, "/apis", &aggregated), None);
    let conditional = [("accept", AGGREGATED_ACCEPT), ("if-none-match", "\"abc\"")];
    assert_eq!(key_of(Method::GET, "/apis", &conditional), None, "a conditional request: the API server's 304");
    let too_long = format!("{AGGREGATED_ACCEPT},{}", "a".repeat(MAX_ACCEPT));
    assert_eq!(key_of(Method::GET, "/apis", &[("accept", &too_long)]), None);
}

#[tokio::test]
async fn discovery_is_shared_for_a_second_in_its_aggregated_form_only() {
    let fake = Arc::new(Fake::default());
    let shared = SharedAnswers::new(upstream(fake.clone()).await);
    let apis = key_of(Method::GET, "/apis", &[("accept", AGGREGATED_ACCEPT)]).unwrap();
    let (answer, outcome) = shared.lookup(&apis).await;
    let answer = answer.unwrap();
    assert_eq!(outcome, Outcome::Fetched);
    assert_eq!(answer.headers["content-type"], "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList");
    assert_eq!(&answer.body[..], br#"{"kind":"APIGroupDiscoveryList","n":1}"#);
    assert_eq!(shared.lookup(&apis).await.1, Outcome::Hit);

    // Older than a second: asked again, the newer answer kept.
    let entry = aged(&shared.kept.lock().entries[&apis], DISCOVERY_MAX_AGE + Duration::from_millis(1));
    shared.kept.lock().entries.insert(apis.clone(), entry);
    let (answer, outcome) = shared.lookup(&apis).await;
    assert_eq!(outcome, Outcome::Fetched);
    assert_eq!(&answer.unwrap().body[..], br#"{"kind":"APIGroupDiscoveryList","n":2}"#);

    // Asked for the aggregated form, answered the legacy one (a server
    // without it): never shared, the caller's request passes through.
    let api = key_of(Method::GET, "/api", &[("accept", AGGREGATED_ACCEPT)]).unwrap();
    assert_eq!(shared.lookup(&api).await.1, Outcome::PassedThrough);
    assert!(!shared.kept.lock().entries.contains_key(&api));

    // The OpenAPI root in whatever form it is served.
    let root = key_of(Method::GET, "/openapi/v3", &[]).unwrap();
    assert_eq!(shared.lookup(&root).await.1, Outcome::Fetched);
    assert_eq!(shared.lookup(&root).await.1, Outcome::Hit);
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 4);
}
