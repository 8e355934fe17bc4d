//! Clients preferring CBOR (client-go's `ClientsAllowCBOR`:
//! `application/json;q=0.9,application/cbor;q=1`) against an API server with
//! CBOR off, its default: the API server answers JSON, and so does watchmux,
//! from its cache (`cache::sync::cbor_probe`, `negotiate::UpstreamCbor`).

use http::Request;
use http_body_util::BodyExt;

use super::cache::wait_initialized;
use super::env::*;

const PREFERS_CBOR: &str = "application/json;q=0.9,application/cbor;q=1";

/// Content-Type and body of a GET straight at the API server with this Accept header.
async fn direct_accepting(
    client: &watchmux::upstream::Upstream,
    path: &str,
    accept: &str,
) -> (u16, String, bytes::Bytes) {
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    let resp = client.send(req).await.unwrap();
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (resp.status().as_u16(), content_type, resp.into_body().collect().await.unwrap().to_bytes())
}

async fn via_accepting(wm: &Watchmux, path: &str, accept: &str) -> (u16, String, bytes::Bytes) {
    let resp = get_accepting(wm.addr, path, accept).await;
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (code, body) = read(resp).await;
    (code, content_type, body)
}

#[tokio::test]
async fn clients_preferring_cbor_are_served_json_from_the_cache_when_the_upstream_has_no_cbor() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("cbor");
    create_namespace(&direct, &ns).await;
    for name in ["a", "b"] {
        configmap(&direct, "create", &ns, name).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    // The probe runs beside the initial list: known once the cache is initialized.
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let cached =
        |name: &'static str| async move { watchmux_metric_sum(wm.admin, name, &["resource=\"configmaps\""]).await };
    let (gets, lists, watches) = (
        cached("watchmux_cache_get_total").await,
        cached("watchmux_cache_list_total").await,
        cached("watchmux_cache_watch_total").await,
    );

    // GET: the same bytes and Content-Type as the API server's.
    let path = format!("/api/v1/namespaces/{ns}/configmaps/a?resourceVersion=0");
    let via = via_accepting(&wm, &path, PREFERS_CBOR).await;
    let dir = direct_accepting(&direct, &path, PREFERS_CBOR).await;
    assert_eq!((via.0, &via.1), (200, &"application/json".to_owned()));
    assert_eq!((via.0, &via.1, &via.2), (dir.0, &dir.1, &dir.2), "GET {path}");

    // LIST: the same Content-Type and items (the list's own version is each cache's).
    let path = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    let via = via_accepting(&wm, &path, PREFERS_CBOR).await;
    let dir = direct_accepting(&direct, &path, PREFERS_CBOR).await;
    assert_eq!((via.0, &via.1), (dir.0, &dir.1));
    let (v, d): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&via.2).unwrap(), serde_json::from_slice(&dir.2).unwrap());
    assert_eq!((&v["kind"], &v["items"]), (&d["kind"], &d["items"]));

    // WATCH from the current state: the same Content-Type and ADDED events.
    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1");
    let via = via_accepting(&wm, &path, PREFERS_CBOR).await;
    let dir = direct_accepting(&direct, &path, PREFERS_CBOR).await;
    assert_eq!((via.0, &via.1), (dir.0, &dir.1));
    let events = |body: &bytes::Bytes| {
        let mut lines: Vec<String> = String::from_utf8_lossy(body).lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(events(&via.2), events(&dir.2));
    assert_eq!(events(&via.2).len(), 2);

    // All three from the cache, none passed through for CBOR.
    assert_eq!(cached("watchmux_cache_get_total").await - gets, 1.0);
    assert_eq!(cached("watchmux_cache_list_total").await - lists, 1.0);
    assert_eq!(cached("watchmux_cache_watch_total").await - watches, 1.0);
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"cbor\""]).await, 0.0);

    // Accept headers the API server's route filter refuses (CBOR alone, with
    // CBOR off; nothing it produces): its 406, byte for byte, answered by the
    // cache without it (a node-local watchmux's CBOR probe is the first one).
    let refused_before =
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"not_acceptable\""]).await;
    let paths = [
        format!("/api/v1/namespaces/{ns}/configmaps?limit=1"),
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"),
        "/api/v1/configmaps?resourceVersion=0&limit=1".to_owned(),
        format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1"),
        format!("/api/v1/watch/namespaces/{ns}/configmaps?resourceVersion=0&timeoutSeconds=1"),
        format!("/api/v1/namespaces/{ns}/configmaps/a?resourceVersion=0"),
    ];
    // The error is written raw (indented) where no clause names a serializer;
    // `application/*` and `*` have it negotiated as JSON, and pass through.
    let raw = ["application/cbor", "text/html", "Application/JSON", "text/plain, application/cbor"];
    let negotiated = ["application/*", "*"];
    let mut answered = 0;
    for path in &paths {
        for (accept, local) in raw.iter().map(|a| (a, true)).chain(negotiated.iter().map(|a| (a, false))) {
            let via = via_accepting(&wm, path, accept).await;
            let dir = direct_accepting(&direct, path, accept).await;
            assert_eq!(via.0, 406, "{path} {accept}: {}", String::from_utf8_lossy(&via.2));
            assert_eq!((via.0, &via.1, &via.2), (dir.0, &dir.1, &dir.2), "{path} {accept}");
            answered += u32::from(local);
        }
    }
    assert_eq!(
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"not_acceptable\""]).await
            - refused_before,
        (paths.len() * negotiated.len()) as f64,
        "only the negotiated ones passed through"
    );
    assert_eq!(
        watchmux_metric_sum(wm.admin, "watchmux_cache_refusals_total", &["reason=\"not_acceptable\""]).await,
        f64::from(answered)
    );
}
