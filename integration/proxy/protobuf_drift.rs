//! The protobuf schema check through a whole watchmux: a fake upstream whose
//! `/openapi/v3/api/v1` describes a ConfigMap the table does not know (a
//! newer server) gets ConfigMaps' protobuf passed through to the API server,
//! for the kubelet's Accept header (which takes JSON too: never JSON where the
//! API server sends protobuf) as for a protobuf-only client, while
//! PartialObjectMetadata (whose ObjectMeta did not drift) stays protobuf from
//! the cache. (The proxy tests install no metrics recorder: the gauge and
//! counter are asserted in the unit tests' terms, `protobuf_disabled`, and
//! against the real API server in e2e.)

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, channel::Channel};
use parking_lot::Mutex;
use serde_json::json;

use crate::harness::*;
use watchmux::body::{self, BoxError};

/// The one object, as the upstream lists it.
const LIST: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"9","uid":"u"},"data":{"k":"v"}}]}"#;
/// What the upstream answers to a GET of the object: not what the cache holds,
/// so a pass-through is told apart from an answer from the cache.
const UPSTREAM_GET: &[u8] = b"k8s\0from-the-upstream";

async fn newer_upstream() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watches = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let addr = fake_upstream(handler(move |req: Request<hyper::body::Incoming>| {
        let (log, watches) = (log.clone(), watches.clone());
        async move {
            let path = req.uri().path().to_owned();
            let query = req.uri().query().unwrap_or("").to_owned();
            log.lock().push(format!("{path}?{query}"));
            let json = |v: serde_json::Value| Response::new(body::full(v.to_string()));
            match path.as_str() {
                "/readyz" => json(json!({})),
                "/api" => json(json!({"kind": "APIVersions", "versions": ["v1"]})),
                "/apis" => json(json!({"kind": "APIGroupList", "groups": []})),
                "/api/v1" => json(json!({"kind": "APIResourceList", "resources": [
                    {"name": "configmaps", "namespaced": true, "kind": "ConfigMap", "verbs": ["get", "list", "watch"]},
                ]})),
                // A newer server: ConfigMap has a field the table lacks.
                "/openapi/v3/api/v1" => json(json!({"components": {"schemas": {
                    "io.k8s.api.core.v1.ConfigMap": {"properties": {"shinyNewField": {"type": "string"}}},
                }}})),
                "/api/v1/configmaps" if query.contains("watch=true") => {
                    // Held open, silent: the cache stays as listed.
                    let (tx, rx) = Channel::<Bytes, BoxError>::new(1);
                    watches.lock().push(tx);
                    Response::new(body::boxed(rx))
                }
                "/api/v1/configmaps" => Response::new(body::full(LIST)),
                "/api/v1/namespaces/ns/configmaps/a" => {
                    let mut resp = Response::new(body::full(UPSTREAM_GET));
                    resp.headers_mut().insert("content-type", "application/vnd.kubernetes.protobuf".parse().unwrap());
                    resp
                }
                _ => http::Response::builder().status(404).body(body::full("{}")).unwrap(),
            }
        }
    }))
    .await;
    (addr, seen)
}

async fn get_as(proxy: &Proxy, accept: &str) -> (String, Bytes) {
    let req = Request::get("/api/v1/namespaces/ns/configmaps/a?resourceVersion=0")
        .header("host", "localhost")
        .header("accept", accept)
        .body(Full::default())
        .unwrap();
    let resp = h1(proxy.addr).await.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    (ct, resp.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn a_kind_whose_served_schema_drifted_gets_no_protobuf_from_the_cache() {
    let (upstream, seen) = newer_upstream().await;
    let proxy = start_proxy(upstream, &["--cache-resources", "configmaps"]).await;

    // The kubelet's header: the API server's protobuf, not the cache's JSON.
    let (ct, body) = get_as(&proxy, "application/vnd.kubernetes.protobuf,application/json").await;
    assert_eq!(ct, "application/vnd.kubernetes.protobuf");
    assert_eq!(&body[..], UPSTREAM_GET);

    // Protobuf alone: the API server's own answer.
    let (ct, body) = get_as(&proxy, "application/vnd.kubernetes.protobuf").await;
    assert_eq!(ct, "application/vnd.kubernetes.protobuf");
    assert_eq!(&body[..], UPSTREAM_GET);

    // PartialObjectMetadata in protobuf: ObjectMeta did not drift, so the cache's.
    let (ct, body) =
        get_as(&proxy, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").await;
    assert!(ct.starts_with("application/vnd.kubernetes.protobuf"), "{ct}");
    assert!(body.starts_with(b"k8s\0") && &body[..] != UPSTREAM_GET);
    assert!(body.windows(b"PartialObjectMetadata".len()).any(|w| w == b"PartialObjectMetadata"));

    // The ConfigMap GETs (the cluster identity's read of kube-system aside).
    let gets: Vec<_> = seen
        .lock()
        .iter()
        .filter(|p| p.starts_with("/api/v1/namespaces/") && !p.starts_with("/api/v1/namespaces/kube-system?"))
        .cloned()
        .collect();
    assert_eq!(gets.len(), 2, "both protobuf GETs reached the upstream, the metadata one did not: {gets:?}");
    assert_eq!(seen.lock().iter().filter(|p| p.starts_with("/openapi/v3/api/v1")).count(), 1, "one check per list");

    proxy.shutdown().await;
}
