//! `kubectl get -w` from the cache: Table WATCHES (`cache::table_form`), each
//! event a one-row `meta.k8s.io` Table, compared with the real API server's
//! line for line (ages masked, and a bookmark's version: the API server's
//! may be a progress-notify revision the cache never saw), for live events,
//! a watch's initial events and its initial-events-end bookmark, the
//! events since a version, each includeObject and both Table versions; then
//! kubectl's own output through watchmux and directly.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;

use super::cache::wait_initialized;
use super::env::*;

fn table_accept(version: &str) -> String {
    format!("application/json;as=Table;g=meta.k8s.io;v={version}")
}

/// A watch line with every age and, in a BOOKMARK, every version masked.
pub(super) fn mask_line(line: &str) -> String {
    let ages = regex::Regex::new(r"\b\d+[smhdy](\d+[smhdy])?\b").unwrap();
    let line = ages.replace_all(line, "AGE").into_owned();
    if line.starts_with(r#"{"type":"BOOKMARK""#) {
        let rv = regex::Regex::new(r#""resourceVersion":"\d+""#).unwrap();
        return rv.replace_all(&line, r#""resourceVersion":"RV""#).into_owned();
    }
    line
}

/// Reads up to `n` lines of a watch body, for at most 20 s, leaving out the
/// periodic bookmarks: each server sends those on its own clock (kube-apiserver
/// on its bookmark tick, sometimes between two of the test's writes), so only
/// the initial-events-end bookmark is part of what both must say alike.
pub(super) async fn lines(resp: http::Response<Incoming>, n: usize) -> Vec<String> {
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while out.len() < n {
        let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await else { break };
        let Ok(data) = frame.into_data() else { continue };
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            if line.starts_with(r#"{"type":"BOOKMARK""#) && !line.contains("k8s.io/initial-events-end") {
                continue;
            }
            out.push(line);
        }
    }
    out
}

async fn direct_watch(client: &watchmux::upstream::Upstream, path: &str, accept: &str) -> http::Response<Incoming> {
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    client.send(req).await.unwrap()
}

/// One Table watch opened through watchmux and directly.
pub(super) struct Pair {
    path: String,
    accept: String,
    /// Lines to read: the events the test's writes make, plus initial ones.
    expect: usize,
    via: http::Response<Incoming>,
    direct: http::Response<Incoming>,
}

pub(super) async fn open(
    wm: &Watchmux,
    direct: &watchmux::upstream::Upstream,
    path: String,
    accept: String,
    expect: usize,
) -> Pair {
    let via = get_accepting(wm.addr, &path, &accept).await;
    let dir = direct_watch(direct, &path, &accept).await;
    assert_eq!(via.status(), dir.status(), "{path} {accept}");
    assert_eq!(via.headers().get("content-type"), dir.headers().get("content-type"), "{path}");
    Pair { path, accept, expect, via, direct: dir }
}

/// Reads both sides of each pair and compares them; returns the watchmux
/// lines of each. Watches of the same path and Accept are compared as a
/// group, in any order: which of them gets an event's bytes from another's
/// encoding (and so keeps its column definitions one event longer) follows
/// the order of delivery, in both servers.
pub(super) async fn compare(pairs: Vec<Pair>) -> Vec<(String, Vec<String>)> {
    // Per group: the rows kube-apiserver sent, and those watchmux sent.
    type Rows = Vec<Vec<String>>;
    let mut groups: std::collections::BTreeMap<String, (Rows, Rows)> = Default::default();
    let mut out = Vec::new();
    for pair in pairs {
        let key = format!("{} {}", pair.path, pair.accept);
        let (via, dir) = (lines(pair.via, pair.expect).await, lines(pair.direct, pair.expect).await);
        assert_eq!(dir.len(), pair.expect, "{key}: the API server's lines {dir:#?}");
        let group = groups.entry(key.clone()).or_default();
        group.0.push(via.iter().map(|l| mask_line(l)).collect());
        group.1.push(dir.iter().map(|l| mask_line(l)).collect());
        out.push((key, via));
    }
    for (key, (mut via, mut dir)) in groups {
        via.sort();
        dir.sort();
        assert_eq!(via, dir, "{key}");
    }
    out
}

/// The table variant a live frame was encoded in, as `encode::table::TableEventKey` keys it.
fn variant_of(path: &str, accept: &str, line: &str) -> String {
    // Left out and spelled `Metadata` are two encoder identities.
    let include = path.split("includeObject=").nth(1).unwrap_or("unspelled");
    let resource = if path.contains("/pods") { "pods" } else { "configmaps" };
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let headers = !v["object"]["columnDefinitions"].is_null();
    let row_rv = &v["object"]["metadata"]["resourceVersion"];
    format!("{resource} {} {row_rv} {include} {accept} {headers}", v["type"])
}

async fn metric(wm: &Watchmux, name: &str, filter: &str) -> f64 {
    watchmux_metric_sum(wm.admin, name, &[filter]).await
}

#[tokio::test]
async fn table_watches_from_the_cache_are_the_api_servers() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("tablewatch");
    create_namespace(&direct, &ns).await;
    let base = format!("/api/v1/namespaces/{ns}");
    let cm = |name: &str| json!({"metadata": {"name": name, "labels": {"t": "w"}}, "data": {"a": "<1>"}});
    direct_json(&direct, http::Method::POST, &format!("{base}/configmaps"), cm("a")).await;
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    direct_json(&direct, http::Method::POST, &format!("{base}/pods"), pod).await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps,pods", "--cache-warm"]).await;
    for resource in ["configmaps", "pods"] {
        wait_initialized(wm.admin, resource, 1.0).await;
    }
    let (_, list) = get_direct(&direct, &format!("{base}/configmaps")).await;
    let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
    let rv0 = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    // Reached by the cache before the watches from it open.
    let (code, _) = read(get(wm.addr, &format!("{base}/configmaps?resourceVersion={rv0}")).await).await;
    assert_eq!(code, 200);

    let tables_before = metric(&wm, "watchmux_cache_table_total", "").await;
    let encodes_before = metric(&wm, "watchmux_cache_encodes_total", "variant=\"table\"").await;
    let passed_before = metric(&wm, "watchmux_cache_passthrough_total", "reason=\"table\"").await;
    // Live events from a version: the first carries the column definitions.
    let mut live = Vec::new();
    for version in ["v1", "v1beta1"] {
        for include in ["", "&includeObject=None", "&includeObject=Metadata", "&includeObject=Object"] {
            let path = format!("{base}/configmaps?watch=true&resourceVersion={rv0}&timeoutSeconds=60{include}");
            live.push(open(&wm, &direct, path, table_accept(version), 3).await);
        }
    }
    // The same variant twice: its events are encoded once.
    let path = format!("{base}/configmaps?watch=true&resourceVersion={rv0}&timeoutSeconds=60");
    live.push(open(&wm, &direct, path, table_accept("v1"), 3).await);
    for include in ["", "&includeObject=Object"] {
        let path = format!("{base}/pods?watch=true&resourceVersion={rv0}&timeoutSeconds=60{include}");
        live.push(open(&wm, &direct, path, table_accept("v1"), 4).await);
    }
    // From the current state with bookmarks: the objects as ADDED, then the
    // initial-events-end bookmark (a Table of the printer's empty row), then
    // the live events.
    let mut initial = Vec::new();
    for (resource, lines) in [("configmaps", 5), ("pods", 6)] {
        for include in ["", "&includeObject=None", "&includeObject=Metadata"] {
            let path = format!("{base}/{resource}?watch=true&allowWatchBookmarks=true&timeoutSeconds=60{include}");
            initial.push(open(&wm, &direct, path, table_accept("v1"), lines).await);
        }
    }
    let served = metric(&wm, "watchmux_cache_table_total", "").await - tables_before;
    assert_eq!(served, (live.len() + initial.len()) as f64, "every Table watch above is the cache's");
    // With bookmarks and whole objects, a bookmark's row holds the kind's
    // empty object, which the cache does not write: passed through, the same.
    let path = format!("{base}/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=60&includeObject=Object");
    let passed = vec![open(&wm, &direct, path, table_accept("v1"), 5).await];
    assert_eq!(metric(&wm, "watchmux_cache_passthrough_total", "reason=\"table\"").await - passed_before, 1.0);

    // ADDED, MODIFIED, DELETED of a configmap; a pod's MODIFIED, then
    // another's ADDED, MODIFIED (its deletion timestamp), DELETED.
    let cms = format!("{base}/configmaps");
    direct_json(&direct, http::Method::POST, &cms, cm("b")).await;
    direct_json(&direct, http::Method::PATCH, &format!("{cms}/b"), json!({"data": {"b": "2", "c": "3"}})).await;
    direct_json(&direct, http::Method::DELETE, &format!("{cms}/b"), serde_json::Value::Null).await;
    let pods = format!("{base}/pods");
    direct_json(&direct, http::Method::PATCH, &format!("{pods}/p"), json!({"metadata": {"labels": {"x": "y"}}})).await;
    let q = json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    direct_json(&direct, http::Method::POST, &pods, q).await;
    direct_json(&direct, http::Method::DELETE, &format!("{pods}/q"), serde_json::Value::Null).await;

    let live = compare(live).await;
    let initial = compare(initial).await;
    compare(passed).await;
    // Encodes: one per live event and table variant, whatever the watchers.
    let mut variants = HashSet::new();
    for (key, got) in &live {
        let (path, accept) = key.split_once(' ').unwrap();
        variants.extend(got.iter().map(|line| variant_of(path, accept, line)));
    }
    for (key, got) in &initial {
        let (path, accept) = key.split_once(' ').unwrap();
        // After the two objects and the bookmark.
        variants.extend(got[2..].iter().map(|line| variant_of(path, accept, line)));
    }
    let encodes = metric(&wm, "watchmux_cache_encodes_total", "variant=\"table\"").await - encodes_before;
    assert_eq!(encodes, variants.len() as f64, "one encode per event and variant: {variants:#?}");

    // The events since a version: printed for the watcher, the same.
    let mut since_version = Vec::new();
    for version in ["v1", "v1beta1"] {
        for include in ["", "&includeObject=None", "&includeObject=Object"] {
            let path = format!("{base}/configmaps?watch=true&resourceVersion={rv0}&timeoutSeconds=60{include}");
            since_version.push(open(&wm, &direct, path, table_accept(version), 3).await);
        }
    }
    compare(since_version).await;

    // Bad includeObject values, and Accept headers of every odd shape: the
    // same status, type and body (each watch ends after a second).
    let path = format!("{base}/configmaps?watch=true&resourceVersion={rv0}&timeoutSeconds=1");
    let odd_accepts = [
        "application/json;as=Table;g=meta.k8s.io;v=v1;stream=watch",
        "application/json;as=Table;g=meta.k8s.io;v=v2",
        "application/json;as=Table;g=meta.k8s.io",
        "application/json;as=Table;v=v1",
        "application/yaml;as=Table;g=meta.k8s.io;v=v1",
        "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json",
        "application/json;as=Table;g=meta.k8s.io;v=v1beta1;q=0.5,application/json;as=Table;g=meta.k8s.io;v=v1",
        "application/json;as=Tables;g=meta.k8s.io;v=v1",
        "application/json;as=Table;g=meta.k8s.io;v=v1;sv=v2",
    ];
    let mut cases: Vec<(String, String)> = odd_accepts.iter().map(|a| (path.clone(), a.to_string())).collect();
    for bad in ["bogus", "none", "Object%2CNone", ""] {
        cases.push((format!("{path}&includeObject={bad}"), table_accept("v1")));
    }
    cases.push((format!("{path}&includeObject=None&includeObject=Object"), table_accept("v1")));
    for (path, accept) in cases {
        let via = get_accepting(wm.addr, &path, &accept).await;
        let dir = direct_watch(&direct, &path, &accept).await;
        let (vt, dt) = (via.headers().get("content-type").cloned(), dir.headers().get("content-type").cloned());
        let ((vc, vb), (dc, db)) = (read(via).await, read(dir).await);
        assert_eq!((vc, vt), (dc, dt), "{path} {accept}");
        let mask = |b: &[u8]| String::from_utf8_lossy(b).lines().map(mask_line).collect::<Vec<_>>();
        assert_eq!(mask(&vb), mask(&db), "{path} {accept}");
    }

    kubectl_get_watch_is_the_same(&cluster, &wm, &direct, &ns).await;
}

/// `kubectl get configmaps -w` through watchmux and directly print the
/// same lines (ages masked), the watch served from the cache.
async fn kubectl_get_watch_is_the_same(
    cluster: &Cluster,
    wm: &Watchmux,
    direct: &watchmux::upstream::Upstream,
    ns: &str,
) {
    let watches_before = metric(wm, "watchmux_cache_watch_total", "resource=\"configmaps\"").await;
    let spawn = |kubeconfig: &std::path::Path| {
        let mut child = Command::new(&cluster.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "configmaps", "-n", ns, "-w"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    };
    let (mut via_child, via_rx) = spawn(&wm.kubeconfig);
    let (mut dir_child, dir_rx) = spawn(&cluster.kubeconfig);
    let mut via = Vec::new();
    let mut dir = Vec::new();
    let take = |rx: &std::sync::mpsc::Receiver<String>, out: &mut Vec<String>, want: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while out.len() < want {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => out.push(line),
                Err(_) => break,
            }
        }
    };
    // The header and configmap `a`, then the watch.
    take(&via_rx, &mut via, 2);
    take(&dir_rx, &mut dir, 2);
    // The LIST, then the watch from its version: wait until watchmux has the watch.
    for _ in 0..100 {
        if metric(wm, "watchmux_cache_watch_total", "resource=\"configmaps\"").await > watches_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let c = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
    direct_json(direct, http::Method::POST, &cms, c).await;
    direct_json(direct, http::Method::PATCH, &format!("{cms}/c"), json!({"data": {"l": "w"}})).await;
    direct_json(direct, http::Method::DELETE, &format!("{cms}/c"), serde_json::Value::Null).await;
    take(&via_rx, &mut via, 5);
    take(&dir_rx, &mut dir, 5);
    let _ = via_child.kill();
    let _ = dir_child.kill();
    let _ = via_child.wait();
    let _ = dir_child.wait();
    let ages = regex::Regex::new(r"\b\d+[smhdy](\d+[smhdy])?\b").unwrap();
    let mask = |lines: &[String]| -> Vec<String> {
        lines.iter().map(|l| ages.replace_all(l, "AGE").split_whitespace().collect::<Vec<_>>().join(" ")).collect()
    };
    assert_eq!(dir.len(), 5, "kubectl get -w directly: {dir:?}");
    assert_eq!(mask(&via), mask(&dir), "kubectl get -w");
    let watches = metric(wm, "watchmux_cache_watch_total", "resource=\"configmaps\"").await - watches_before;
    assert!(watches >= 1.0, "kubectl's watch was served from the cache");
}
