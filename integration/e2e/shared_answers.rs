//! Answers watchmux shares between callers, against the real kube-apiserver:
//! immutable OpenAPI v3 documents (`/openapi/v3/...?hash=`), health
//! checks (`/readyz`...) and discovery (aggregated `/api` and `/apis`, the
//! OpenAPI v3 root), fetched upstream once, answered to every caller the
//! API server would answer, as the API server answers (status, headers but
//! the per-request ones, bytes), and everything else (a stale hash, a range,
//! a caller it refuses, `?verbose`) passed through for the API server's own
//! answer.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use serde_json::Value;

use crate::auth::{Credential, client, reader_namespace, start_delegated, token_for};
use crate::env::*;
use watchmux::upstream::Upstream;

const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf";
/// What client-go asks `/api` and `/apis` for.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                          application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,\
                          application/json;q=0.9";

/// Headers kube-apiserver writes for one request, not for the document,
/// and `Content-Length`, compared apart (`same_answer`).
const PER_REQUEST: &[&str] = &[
    "audit-id",
    "date",
    "expires",
    "x-kubernetes-pf-flowschema-uid",
    "x-kubernetes-pf-prioritylevel-uid",
    "content-length",
];

struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Bytes,
}

async fn fetch(client: &Upstream, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client.send(req.body(watchmux::body::empty()).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let mut all = BTreeMap::new();
    for (k, v) in resp.headers() {
        all.entry(k.as_str().to_owned()).or_insert_with(String::new).push_str(v.to_str().unwrap());
    }
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer { status, headers: all, body }
}

/// The same request straight and through watchmux: same status, headers
/// (but the per-request ones) and bytes; `Expires` on both or neither.
async fn same_answer(direct: &Upstream, via: &Upstream, path: &str, headers: &[(&str, &str)]) -> u16 {
    let (d, v) = (fetch(direct, path, headers).await, fetch(via, path, headers).await);
    let comparable = |a: &Answer| {
        let h: BTreeMap<_, _> = a.headers.iter().filter(|(k, _)| !PER_REQUEST.contains(&k.as_str())).collect();
        (a.status, format!("{h:?}"), a.body.clone())
    };
    assert!(
        v.body == d.body,
        "GET {path} {headers:?}: the bytes differ ({} through watchmux, {} direct)",
        v.body.len(),
        d.body.len()
    );
    assert_eq!(comparable(&v), comparable(&d), "GET {path} {headers:?}: through watchmux (left), direct (right)");
    assert_eq!(v.headers.contains_key("expires"), d.headers.contains_key("expires"), "GET {path}: Expires");
    // `Content-Length` is framing: Go's server writes it only when the whole
    // answer fits its first buffer (aggregated discovery's 7 KB does not),
    // watchmux for every answer it holds whole. Where the API server sends
    // it, watchmux sends the same.
    if let Some(length) = d.headers.get("content-length") {
        assert_eq!(v.headers.get("content-length"), Some(length), "GET {path}: Content-Length");
    }
    d.status
}

/// The document URLs the API server's root names now.
async fn served_urls(direct: &Upstream) -> (String, String) {
    let root: Value = serde_json::from_slice(&fetch(direct, "/openapi/v3", &[]).await.body).unwrap();
    let url = |name: &str| root["paths"][name]["serverRelativeURL"].as_str().unwrap().to_owned();
    (url("api/v1"), url("apis/apps/v1"))
}

async fn shared(wm: &Watchmux, kind: &str, result: &str) -> f64 {
    let labels = [format!("kind=\"{kind}\""), format!("result=\"{result}\"")];
    watchmux_metric_sum(wm.admin, "watchmux_shared_answers_total", &[&labels[0], &labels[1]]).await
}

async fn documents(wm: &Watchmux, result: &str) -> f64 {
    shared(wm, "openapi", result).await
}

#[tokio::test]
async fn a_document_by_hash_is_fetched_once_and_answered_as_the_api_server_answers_it() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "openapi").await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let token = token_for(&cluster, &ns, &[]);
    let api = format!("https://{}", cluster.api_addr());
    let direct = client(&cluster, dir.path(), &api, Credential::Token(&token));
    let via = client(&cluster, dir.path(), &server, Credential::Token(&token));
    let (core, apps) = served_urls(&direct).await;
    assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");

    // Each format is one document, fetched once, then answered from the store.
    let formats: [&[(&str, &str)]; 3] = [&[], &[("accept", "application/json")], &[("accept", PROTOBUF)]];
    for accept in formats {
        for _ in 0..2 {
            assert_eq!(same_answer(&direct, &via, &core, accept).await, 200);
        }
    }
    assert_eq!(same_answer(&direct, &via, &apps, &[]).await, 200);
    assert_eq!(documents(&wm, "fetched").await, 4.0);
    assert_eq!(documents(&wm, "hit").await, 3.0);

    // A hash the API server no longer serves: its redirect, not kept.
    let stale = format!("{}?hash=00FF", core.split_once('?').unwrap().0);
    assert_eq!(same_answer(&direct, &via, &stale, &[]).await, 301);
    assert_eq!(documents(&wm, "passed_through").await, 1.0);
    // A range, a conditional request, the root, no hash: passed through untouched.
    let etag = fetch(&direct, &core, &[]).await.headers["etag"].clone();
    assert_eq!(same_answer(&direct, &via, &core, &[("range", "bytes=0-99")]).await, 206);
    assert_eq!(same_answer(&direct, &via, &core, &[("if-none-match", &etag)]).await, 304);
    assert_eq!(same_answer(&direct, &via, core.split_once('?').unwrap().0, &[]).await, 200);
    let (fetched, hits) = (documents(&wm, "fetched").await, documents(&wm, "hit").await);
    assert_eq!((fetched, hits), (4.0, 3.0), "none of those answered from the store");

    // A caller the API server refuses (anonymous: not system:authenticated)
    // gets its 403, not the kept document.
    let anonymous_direct = client(&cluster, dir.path(), &api, Credential::None);
    let anonymous_via = client(&cluster, dir.path(), &server, Credential::None);
    assert_eq!(same_answer(&anonymous_direct, &anonymous_via, &core, &[]).await, 403);
    assert_eq!(documents(&wm, "hit").await, 3.0);
}

#[tokio::test]
async fn a_trusted_local_watchmux_keeps_documents_too() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let wm = Watchmux::start(&cluster, &[]).await;
    let (core, _) = served_urls(&direct).await;
    let via = format!("http://{}{core}", wm.addr);
    for _ in 0..3 {
        let (code, body) = read(get(wm.addr, &core).await).await;
        assert_eq!(code, 200, "{via}");
        assert_eq!(body, fetch(&direct, &core, &[]).await.body);
    }
    assert_eq!((documents(&wm, "fetched").await, documents(&wm, "hit").await), (1.0, 2.0));
}

#[tokio::test]
async fn health_checks_are_answered_from_one_recent_probe() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let dir = tempfile::tempdir().unwrap();
    let (wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let api = format!("https://{}", cluster.api_addr());
    // Anonymous: the API server lets anyone read its health (system:public-info-viewer).
    let direct = client(&cluster, dir.path(), &api, Credential::None);
    let via = client(&cluster, dir.path(), &server, Credential::None);
    for path in ["/readyz", "/livez", "/healthz"] {
        assert_eq!(same_answer(&direct, &via, path, &[]).await, 200, "{path}");
    }
    // Ten probes at once: one fetch, or very nearly (an answer is shared for a second).
    let probes: Vec<_> = (0..10).map(|_| fetch(&via, "/readyz", &[])).collect();
    for answer in futures_util::future::join_all(probes).await {
        assert_eq!((answer.status, &answer.body[..]), (200, &b"ok"[..]));
    }
    let (fetched, hits) = (shared(&wm, "health", "fetched").await, shared(&wm, "health", "hit").await);
    assert_eq!(fetched + hits, 13.0);
    assert!(fetched < 10.0, "{fetched} fetches for 13 probes");
    // Any Accept: the API server's text/plain "ok", the same as directly.
    for accept in ["application/json", "text/html", "application/vnd.kubernetes.protobuf", "x/y;q=0"] {
        assert_eq!(same_answer(&direct, &via, "/readyz", &[("accept", accept)]).await, 200, "{accept}");
    }
    let asked = shared(&wm, "health", "fetched").await + shared(&wm, "health", "hit").await;
    assert_eq!(asked, 17.0, "answered from the shared answer, whatever they accept");
    // With a query (`?verbose` lists each check): passed through, as it was.
    assert_eq!(same_answer(&direct, &via, "/readyz?verbose", &[]).await, 200);
    assert_eq!(same_answer(&direct, &via, "/livez?exclude=etcd", &[]).await, 200);
    assert_eq!(shared(&wm, "health", "fetched").await + shared(&wm, "health", "hit").await, 17.0);
}

#[tokio::test]
async fn aggregated_discovery_and_the_openapi_root_are_shared_the_legacy_form_passes_through() {
    // Alone: tests beside it create and delete CRDs, which change `/apis`
    // between the direct answer and watchmux's (it failed that way in two of
    // five matrix runs, 243 bytes apart).
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "discovery").await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let token = token_for(&cluster, &ns, &[]);
    let api = format!("https://{}", cluster.api_addr());
    let direct = client(&cluster, dir.path(), &api, Credential::Token(&token));
    let via = client(&cluster, dir.path(), &server, Credential::Token(&token));
    let discovery = |result: &'static str| shared(&wm, "discovery", result);

    // The aggregated form, as client-go asks for it: the API server's
    // status, headers (its ETag, Vary) and bytes.
    for path in ["/api", "/apis", "/openapi/v3"] {
        assert_eq!(same_answer(&direct, &via, path, &[("accept", AGGREGATED)]).await, 200, "{path}");
    }
    let answer = fetch(&via, "/apis", &[("accept", AGGREGATED)]).await;
    assert!(answer.headers["content-type"].contains("as=APIGroupDiscoveryList"), "{:?}", answer.headers);
    let asked = discovery("fetched").await + discovery("hit").await;
    assert_eq!(asked, 4.0, "each answered from a shared answer");
    assert_eq!(discovery("passed_through").await, 0.0);

    // Ten starts at once: one fetch, or very nearly (shared for a second).
    let starts: Vec<_> = (0..10).map(|_| fetch(&via, "/apis", &[("accept", AGGREGATED)])).collect();
    let direct_bytes = fetch(&direct, "/apis", &[("accept", AGGREGATED)]).await.body;
    for answer in futures_util::future::join_all(starts).await {
        assert_eq!((answer.status, &answer.body), (200, &direct_bytes));
    }
    let fetched = discovery("fetched").await;
    assert_eq!(fetched + discovery("hit").await, 14.0);
    assert!(fetched < 10.0, "{fetched} fetches for 14 requests");

    // The legacy form names server addresses by the caller's address: the
    // API server's own answer, never a shared one; a conditional request
    // its 304.
    for accept in [&[][..], &[("accept", "application/json")], &[("accept", "application/vnd.kubernetes.protobuf")]] {
        for path in ["/api", "/apis"] {
            assert_eq!(same_answer(&direct, &via, path, accept).await, 200, "{path} {accept:?}");
        }
    }
    let etag = fetch(&direct, "/apis", &[("accept", AGGREGATED)]).await.headers["etag"].clone();
    let conditional = [("accept", AGGREGATED), ("if-none-match", etag.as_str())];
    assert_eq!(same_answer(&direct, &via, "/apis", &conditional).await, 304);
    assert_eq!(same_answer(&direct, &via, "/apis/apps/v1", &[]).await, 200, "a group version's list");
    assert_eq!(discovery("fetched").await + discovery("hit").await, 14.0, "none of those shared");

    // A caller the API server refuses (anonymous: discovery is for
    // system:authenticated) gets its 403, not the shared answer.
    let anonymous_direct = client(&cluster, dir.path(), &api, Credential::None);
    let anonymous_via = client(&cluster, dir.path(), &server, Credential::None);
    assert_eq!(same_answer(&anonymous_direct, &anonymous_via, "/apis", &[("accept", AGGREGATED)]).await, 403);
    assert_eq!(discovery("fetched").await + discovery("hit").await, 14.0);
}
