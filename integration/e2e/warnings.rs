//! The API server's `Warning` headers on answers from the cache (issue 29):
//! a deprecated resource (v1 Endpoints) carries its deprecation warning on
//! every read, LIST, GET (a 404 too) and WATCH, in JSON and protobuf, as
//! straight from the API server; a resource that is not deprecated carries
//! none.

use http::Request;

use super::cache::wait_initialized;
use super::env::*;
use watchmux::upstream::Upstream;

/// The `Warning` headers and status of an answer.
type Warned = (u16, Vec<String>);

fn warned(resp: &http::Response<hyper::body::Incoming>) -> Warned {
    let values = resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    (resp.status().as_u16(), values)
}

async fn via(wm: &Watchmux, path: &str, accept: &str) -> Warned {
    let resp = get_accepting(wm.addr, path, accept).await;
    let answer = warned(&resp);
    read(resp).await;
    answer
}

async fn direct(client: &Upstream, path: &str, accept: &str) -> Warned {
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    let resp = client.send(req).await.unwrap();
    let answer = warned(&resp);
    read(resp).await;
    answer
}

#[tokio::test]
async fn cached_reads_of_a_deprecated_resource_carry_the_api_servers_warning() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "endpoints,configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "endpoints", 1.0).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let ns = namespace("warnings");
    create_namespace(&client, &ns).await;
    let endpoints = serde_json::json!({"metadata": {"name": "ep"}, "subsets": []});
    let created =
        direct_json(&client, http::Method::POST, &format!("/api/v1/namespaces/{ns}/endpoints"), endpoints).await;
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();

    let passed_before = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await;
    let base = format!("/api/v1/namespaces/{ns}/endpoints");
    let paths = [
        format!("{base}?resourceVersion=0"),
        format!("{base}/ep?resourceVersion={rv}"),
        format!("{base}/nope?resourceVersion=0"),
        format!("{base}?watch=1&resourceVersion=0&timeoutSeconds=1"),
    ];
    for path in &paths {
        for accept in ["application/json", "application/vnd.kubernetes.protobuf"] {
            let (d, v) = (direct(&client, path, accept).await, via(&wm, path, accept).await);
            assert_eq!(v, d, "{path} {accept}");
            assert_eq!(
                v.1,
                [r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#],
                "{path} {accept}"
            );
        }
    }
    let passed_after = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await;
    assert_eq!(passed_after, passed_before, "every read above came from the cache");

    // Not deprecated: no warning, from the cache as from the API server.
    let path = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    let (d, v) = (direct(&client, &path, "application/json").await, via(&wm, &path, "application/json").await);
    assert_eq!(v, d);
    assert_eq!(v, (200, vec![]));
}
