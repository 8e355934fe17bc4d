//! Custom resources' Tables from the cache: a CRD's printer columns of every
//! type (`encode::table::custom`), compared with the real API server's byte
//! for byte (ages masked), a CRD whose JSONPath the printer refuses (passed
//! through, the same answer), a CRD without columns (Name and Age), Table
//! watches (and one that ends at a row the printer refuses), a change to the
//! columns seen through watchmux's cache of CRDs, and kubectl.

use std::time::Duration;

use http::Request;
use serde_json::json;

use super::cache::wait_initialized;
use super::env::*;
use super::tables_watch::{compare, lines, open};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// A namespaced CRD `<plural>.<group>` of kind `kind`, version v1, any
/// spec and status, with these printer columns (none when `null`).
pub(super) fn crd(group: &str, plural: &str, kind: &str, columns: serde_json::Value) -> serde_json::Value {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut version = json!({"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open, "status": open}}}});
    if !columns.is_null() {
        version["additionalPrinterColumns"] = columns;
    }
    json!({"metadata": {"name": format!("{plural}.{group}")}, "spec": {"group": group, "scope": "Namespaced",
        "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
        "versions": [version]}})
}

fn mask(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let ages = regex::Regex::new(r"\b\d+[smhdy](\d+[smhdy])?\b").unwrap();
    let version =
        regex::Regex::new(r#"^(\{"kind":"Table","apiVersion":"[^"]+","metadata":\{"resourceVersion":")\d+"#).unwrap();
    version.replace(&ages.replace_all(&text, "AGE"), "${1}RV").into_owned()
}

async fn both(wm: &Watchmux, direct: &watchmux::upstream::Upstream, path: &str, accept: &str) -> (String, String) {
    let via = get_accepting(wm.addr, path, accept).await;
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    let dir = direct.send(req).await.unwrap();
    let (vt, dt) = (via.headers().get("content-type").cloned(), dir.headers().get("content-type").cloned());
    let ((vc, vb), (dc, db)) = (read(via).await, read(dir).await);
    assert_eq!((vc, vt), (dc, dt), "{path} {accept}: {}", String::from_utf8_lossy(&vb));
    (mask(&vb), mask(&db))
}

/// The API server's list version of `path`, once the cache has reached it.
async fn listed_version(wm: &Watchmux, direct: &watchmux::upstream::Upstream, path: &str) -> String {
    let (_, list) = get_direct(direct, path).await;
    let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let (code, _) = read(get(wm.addr, &format!("{path}?resourceVersion={rv}")).await).await;
    assert_eq!(code, 200, "the cache reached the list's version");
    rv
}

async fn metric(wm: &Watchmux, name: &str, filter: &str) -> f64 {
    watchmux_metric_sum(wm.admin, name, &[filter]).await
}

pub(super) async fn until_served(direct: &watchmux::upstream::Upstream, path: &str) {
    for _ in 0..100 {
        if get_direct(direct, path).await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never served");
}

#[tokio::test]
async fn custom_resource_tables_from_the_cache_are_the_api_servers() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("tablescrd");
    create_namespace(&direct, &ns).await;
    let group = format!("{}.watchmux.dev", ns.replace("e2e-", "").replace('-', ""));
    let columns = json!([
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio", "format": "float"},
        {"name": "Color", "type": "string", "jsonPath": ".spec.color", "description": "the <color> & more"},
        {"name": "Enabled", "type": "boolean", "jsonPath": ".spec.enabled"},
        {"name": "Since", "type": "date", "jsonPath": ".status.since"},
        {"name": "Tags", "type": "string", "jsonPath": ".spec.tags", "priority": 1},
        {"name": "First-Port", "type": "string", "jsonPath": ".spec.ports[0].name", "priority": 1},
        {"name": "Count", "type": "string", "jsonPath": ".spec.replicas", "priority": 2},
    ]);
    // Paths the printer refuses: a filter, a quoted key.
    let refused = json!([
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "App", "type": "string", "jsonPath": ".metadata.labels['app']"},
    ]);
    for (plural, kind, columns) in
        [("widgets", "Widget", columns), ("gauges", "Gauge", refused), ("plains", "Plain", serde_json::Value::Null)]
    {
        direct_json(&direct, http::Method::POST, CRDS, crd(&group, plural, kind, columns)).await;
        until_served(&direct, &format!("/apis/{group}/v1/namespaces/{ns}/{plural}")).await;
    }
    let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    let objects = [
        json!({"metadata": {"name": "full", "labels": {"app.kubernetes.io/name": "w1"}},
            "spec": {"replicas": 3, "ratio": 0.25, "color": "blue<&>", "enabled": true, "tags": ["a", {"z": 1, "b": "<"}],
                "ports": [{"name": "http"}, {"name": "dns"}]},
            "status": {"since": "2026-01-01T00:00:00Z"}}),
        // Missing fields, wrong types, a float in an integer column, an empty date.
        json!({"metadata": {"name": "sparse"},
            "spec": {"replicas": 2.7, "ratio": 4, "color": 12, "enabled": "yes", "tags": "one", "ports": []},
            "status": {"since": ""}}),
        json!({"metadata": {"name": "bare"}}),
    ];
    for mut object in objects {
        object["apiVersion"] = json!(format!("{group}/v1"));
        object["kind"] = json!("Widget");
        direct_json(&direct, http::Method::POST, &widgets, object).await;
    }
    for (plural, kind) in [("gauges", "Gauge"), ("plains", "Plain")] {
        let object = json!({"apiVersion": format!("{group}/v1"), "kind": kind,
            "metadata": {"name": "one", "labels": {"app": "a"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        direct_json(&direct, http::Method::POST, &format!("/apis/{group}/v1/namespaces/{ns}/{plural}"), object).await;
    }
    let resources =
        format!("customresourcedefinitions.apiextensions.k8s.io,widgets.{group},gauges.{group},plains.{group}");
    let wm = Watchmux::start(&cluster, &["--cache-resources", &resources, "--cache-warm"]).await;
    for resource in resources.split(',') {
        wait_initialized(wm.admin, resource, 1.0).await;
    }

    let v1 = "application/json;as=Table;g=meta.k8s.io;v=v1";
    let v1beta1 = "application/json;as=Table;g=meta.k8s.io;v=v1beta1";
    let before = metric(&wm, "watchmux_cache_table_total", "").await;
    let mut served = 0.0;
    for include in ["", "&includeObject=None", "&includeObject=Metadata", "&includeObject=Object"] {
        for path in [
            format!("{widgets}?resourceVersion=0{include}"),
            format!("{widgets}/full?resourceVersion=0{include}"),
            format!("{widgets}/sparse?resourceVersion=0{include}"),
            format!("/apis/{group}/v1/namespaces/{ns}/plains?resourceVersion=0{include}"),
        ] {
            for accept in [v1, v1beta1] {
                let (via, dir) = both(&wm, &direct, &path, accept).await;
                assert_eq!(via, dir, "{path} {accept}");
                served += 1.0;
            }
        }
    }
    assert_eq!(
        metric(&wm, "watchmux_cache_table_total", "").await - before,
        served,
        "every Table above from the cache"
    );

    // A JSONPath the printer refuses: passed through, the same Table.
    let passed = metric(&wm, "watchmux_cache_passthrough_total", "reason=\"table\"").await;
    let gauges = format!("/apis/{group}/v1/namespaces/{ns}/gauges?resourceVersion=0");
    let (via, dir) = both(&wm, &direct, &gauges, v1).await;
    assert_eq!(via, dir);
    assert!(dir.contains(r#""cells":["one","True","#), "{dir}");
    assert_eq!(metric(&wm, "watchmux_cache_passthrough_total", "reason=\"table\"").await - passed, 1.0);

    // Watches: live events from a version, and from the current state with
    // its initial-events-end bookmark (the printer's row of an empty object).
    let rv = listed_version(&wm, &direct, &widgets).await;
    let tables_before = metric(&wm, "watchmux_cache_table_total", "").await;
    let mut pairs = Vec::new();
    for include in ["", "&includeObject=None", "&includeObject=Object"] {
        let path = format!("{widgets}?watch=true&resourceVersion={rv}&timeoutSeconds=60{include}");
        pairs.push(open(&wm, &direct, path, v1.to_owned(), 3).await);
    }
    let plains =
        format!("/apis/{group}/v1/namespaces/{ns}/plains?watch=true&allowWatchBookmarks=true&timeoutSeconds=60");
    pairs.push(open(&wm, &direct, plains, v1beta1.to_owned(), 2).await);
    assert_eq!(metric(&wm, "watchmux_cache_table_total", "").await - tables_before, 4.0, "watches from the cache");
    let late = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "late"},
        "spec": {"replicas": 5, "color": "red"}});
    direct_json(&direct, http::Method::POST, &widgets, late).await;
    direct_json(&direct, http::Method::PATCH, &format!("{widgets}/late"), json!({"spec": {"enabled": false}})).await;
    direct_json(&direct, http::Method::DELETE, &format!("{widgets}/late"), serde_json::Value::Null).await;
    compare(pairs).await;

    // A live row the printer refuses (a number Go writes with an exponent)
    // ends watchmux's stream; the watch again from the same version, whose
    // events since that version hold the event, passes through and is the API server's.
    let rv = listed_version(&wm, &direct, &widgets).await;
    let path = format!("{widgets}?watch=true&resourceVersion={rv}&timeoutSeconds=60");
    let ended = get_accepting(wm.addr, &path, v1).await;
    let tiny = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "tiny"},
        "spec": {"ratio": 1e-7}});
    direct_json(&direct, http::Method::POST, &widgets, tiny).await;
    let started = std::time::Instant::now();
    assert_eq!(lines(ended, 1).await, Vec::<String>::new(), "no guessed row");
    assert!(started.elapsed() < Duration::from_secs(10), "the stream ended at the refused row");
    let passed = metric(&wm, "watchmux_cache_passthrough_total", "reason=\"table\"").await;
    let again = open(&wm, &direct, path, v1.to_owned(), 1).await;
    compare(vec![again]).await;
    assert_eq!(metric(&wm, "watchmux_cache_passthrough_total", "reason=\"table\"").await - passed, 1.0);
    direct_json(&direct, http::Method::DELETE, &format!("{widgets}/tiny"), serde_json::Value::Null).await;

    // kubectl get, plain and wide.
    let ages = regex::Regex::new(r"\b\d+[smhdy](\d+[smhdy])?\b").unwrap();
    for args in [vec!["get", "widgets", "-n", &ns], vec!["get", "widgets", "-n", &ns, "-o", "wide"]] {
        let squash = |s: &str| -> Vec<String> {
            s.lines().map(|l| ages.replace_all(l, "AGE").split_whitespace().collect::<Vec<_>>().join(" ")).collect()
        };
        let (via, dir) = (wm.kubectl(&cluster, &args), cluster.kubectl_direct(&args));
        assert!(via.ok && dir.ok, "{via:?} {dir:?}");
        assert_eq!(squash(&via.stdout), squash(&dir.stdout), "kubectl {args:?}");
    }

    // The CRD's columns change: watchmux's cache of CRDs sees it, and its
    // Tables follow the API server's (which applies the change itself a
    // moment later: both are polled until they agree on the new column).
    let patch = json!({"spec": {"versions": [{"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
        "additionalPrinterColumns": [{"name": "Hue", "type": "string", "jsonPath": ".spec.color"}]}]}});
    direct_json(&direct, http::Method::PATCH, &format!("{CRDS}/widgets.{group}"), patch).await;
    let path = format!("{widgets}?resourceVersion=0");
    let mut agreed = false;
    for _ in 0..100 {
        // The API server answers 429 while it swaps the CRD's storage.
        let req = Request::get(&path).header("accept", v1).body(watchmux::body::empty()).unwrap();
        let (dc, db) = read(direct.send(req).await.unwrap()).await;
        let (vc, vb) = read(get_accepting(wm.addr, &path, v1).await).await;
        let (via, dir) = (mask(&vb), mask(&db));
        if (vc, dc) == (200, 200) && via == dir && dir.contains(r#""name":"Hue""#) {
            agreed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(agreed, "the new columns through watchmux as directly");
    direct_json(&direct, http::Method::DELETE, &format!("/api/v1/namespaces/{ns}"), serde_json::Value::Null).await;
    for plural in ["widgets", "gauges", "plains"] {
        let path = format!("{CRDS}/{plural}.{group}");
        direct_json(&direct, http::Method::DELETE, &path, serde_json::Value::Null).await;
    }
}
