//! Bytes the cache writes itself rather than copies from the API server,
//! compared with kube-apiserver's byte for byte: a custom resource's
//! PartialObjectMetadata JSON (GET, LIST and a watch event; metadata in
//! ObjectMeta's Go order, not the sorted order the resource is stored in),
//! and JSON BOOKMARK objects (each kind's zero value around the version) for
//! built-in kinds and a custom resource.

use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use serde_json::json;

use super::cache::wait_initialized;
use super::env::*;
use super::protobuf::go_decode;
use super::tables_crd::{crd, until_served};
use super::tables_watch::lines;

const POM: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const POM_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

async fn direct_get(direct: &watchmux::upstream::Upstream, path: &str, accept: &str) -> http::Response<Incoming> {
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    direct.send(req).await.unwrap()
}

/// The same GET through watchmux and directly: both bodies, the statuses
/// and content types asserted equal.
async fn both(wm: &Watchmux, direct: &watchmux::upstream::Upstream, path: &str, accept: &str) -> (String, String) {
    let (via, dir) = (get_accepting(wm.addr, path, accept).await, direct_get(direct, path, accept).await);
    assert_eq!(via.headers().get("content-type"), dir.headers().get("content-type"), "{path} {accept}");
    let ((vc, vb), (dc, db)) = (read(via).await, read(dir).await);
    assert_eq!((vc, dc), (200, 200), "{path} {accept}: {}", String::from_utf8_lossy(&vb));
    (String::from_utf8(vb.to_vec()).unwrap(), String::from_utf8(db.to_vec()).unwrap())
}

/// A CRD `gadgets.<group>` served and cached, its namespace, and the path of its objects.
async fn gadgets(direct: &watchmux::upstream::Upstream, test: &str) -> (String, String, String) {
    let ns = namespace(test);
    create_namespace(direct, &ns).await;
    let group = format!("{}.watchmux.dev", ns.replace("e2e-", "").replace('-', ""));
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    direct_json(direct, http::Method::POST, crds, crd(&group, "gadgets", "Gadget", serde_json::Value::Null)).await;
    let path = format!("/apis/{group}/v1/namespaces/{ns}/gadgets");
    until_served(direct, &path).await;
    (ns, group, path)
}

#[tokio::test]
async fn custom_resource_partial_object_metadata_is_the_api_servers() {
    // Alone: the reads at the list's version must come from the cache, which
    // reaches that version only if no other test writes meanwhile (versions
    // are global; the cache learns of another resource's write only from a
    // bookmark, a minute apart), and the LIST's own resourceVersion is
    // compared byte for byte with the API server's.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let (ns, group, gadgets) = gadgets(&direct, "pomcrd").await;
    let owner = direct_json(
        &direct,
        http::Method::POST,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        json!({"metadata": {"name": "owner"}}),
    )
    .await;
    // Every ObjectMeta field a client sets, in an order neither Go's nor sorted.
    let object = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "g", "finalizers": ["watchmux.dev/hold"],
            "ownerReferences": [{"uid": owner["metadata"]["uid"], "name": "owner", "kind": "ConfigMap",
                "apiVersion": "v1", "controller": true, "blockOwnerDeletion": false}],
            "labels": {"z": "1", "a": "2"}, "annotations": {"note": "<&>", "b": ""}},
        "spec": {"b": 1, "a": {"y": 2, "x": 3}}});
    direct_json(&direct, http::Method::POST, &gadgets, object).await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", &format!("gadgets.{group}"), "--cache-warm"]).await;
    wait_initialized(wm.admin, &format!("gadgets.{group}"), 1.0).await;
    // Versions are global: a write elsewhere after the cache's list (the
    // CRD's own status, the API server's identity lease) leaves the list's
    // version ahead of what the gadgets cache has seen, until a bookmark a
    // minute later, and reads at it pass through (counted) by design. So each
    // round writes to the gadget, waits until the cache has that write, and
    // reads at the list's version only if it is that write's: nothing else
    // moved it. A round whose reads passed through anyway is read again;
    // the round that counts, and the watch after it, must come wholly from
    // the cache, so a cache that does not serve them still fails.
    let mut rv = String::new();
    let mut passed = 0.0;
    for round in 0..5 {
        let tick = json!({"metadata": {"labels": {"tick": round.to_string()}}});
        let written = direct_json(&direct, http::Method::PATCH, &format!("{gadgets}/g"), tick).await;
        let written: u64 = written["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        for _ in 0..200 {
            let (code, body) = read(get(wm.addr, &format!("{gadgets}?resourceVersion=0")).await).await;
            assert_eq!(code, 200);
            let cached: serde_json::Value = serde_json::from_slice(&body).unwrap();
            if cached["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap() >= written {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let (_, list) = get_direct(&direct, &gadgets).await;
        let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
        rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        if rv != written.to_string() {
            eprintln!("round {round}: the list's version {rv} is past the tick's {written} (another write); again");
            continue;
        }
        passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await;
        let one = format!("{gadgets}/g?resourceVersion={rv}");
        let (via, dir) = both(&wm, &direct, &one, POM).await;
        assert_eq!(via, dir, "GET as PartialObjectMetadata");
        assert!(dir.contains(r#""metadata":{"name":"g","namespace":"#), "Go's order, not sorted: {dir}");
        assert!(dir.contains(r#""managedFields":[{"manager":"#), "{dir}");
        let (via, dir) = both(&wm, &direct, &one, "application/json").await;
        assert_eq!(via, dir, "GET of the whole object");
        let (via, dir) = both(&wm, &direct, &format!("{gadgets}?resourceVersion={rv}"), POM_LIST).await;
        assert_eq!(via, dir, "LIST as PartialObjectMetadataList");
        let now = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await;
        if now == passed {
            break;
        }
        eprintln!("round {round}: {} read(s) at {rv} passed through (the cache behind it); again", now - passed);
    }

    let watch = format!("{gadgets}?watch=true&resourceVersion={rv}&timeoutSeconds=30");
    let (via, dir) = (get_accepting(wm.addr, &watch, POM).await, direct_get(&direct, &watch, POM).await);
    // Releasing the finalizer and relabelling: a MODIFIED event, then a DELETED one.
    let patch = json!({"metadata": {"finalizers": null, "labels": {"m": "3"}}});
    direct_json(&direct, http::Method::PATCH, &format!("{gadgets}/g"), patch).await;
    let req = Request::delete(format!("{gadgets}/g")).body(watchmux::body::empty()).unwrap();
    assert_eq!(read(direct.send(req).await.unwrap()).await.0, 200);
    let (via, dir) = (lines(via, 2).await, lines(dir, 2).await);
    assert_eq!(dir.len(), 2, "{dir:#?}");
    assert_eq!(via, dir, "watch events as PartialObjectMetadata");
    let passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await - passed;
    assert_eq!(passed, 0.0, "every read came from the cache");
}

/// The BOOKMARK lines of a JSON watch, one at a time.
struct Bookmarks {
    body: Incoming,
    buf: Vec<u8>,
}

impl Bookmarks {
    fn new(resp: http::Response<Incoming>) -> Self {
        Self { body: resp.into_body(), buf: Vec::new() }
    }

    /// The next BOOKMARK line, waiting at most 20 s.
    async fn next(&mut self) -> Option<String> {
        use http_body_util::BodyExt;

        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line = String::from_utf8(self.buf.drain(..=end).collect()).unwrap();
                if line.starts_with(r#"{"type":"BOOKMARK""#) {
                    return Some(line);
                }
            }
            let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, self.body.frame()).await else { return None };
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }
}

/// Each server's bookmark carries its own current version.
fn mask_version(line: &str) -> String {
    let rv = regex::Regex::new(r#""resourceVersion":"\d+""#).unwrap();
    rv.replace_all(line, r#""resourceVersion":"RV""#).into_owned()
}

#[tokio::test]
async fn json_bookmarks_are_the_api_servers_for_every_kind() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let (ns, group, gadgets) = gadgets(&direct, "bookmarks").await;
    let resources = format!("pods,services,nodes,configmaps,deployments.apps,daemonsets.apps,gadgets.{group}");
    let wm = Watchmux::start(&cluster, &["--cache-resources", &resources, "--cache-warm"]).await;
    for resource in resources.split(',') {
        wait_initialized(wm.admin, resource, 1.0).await;
    }
    let watch_list = "watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
    let passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await;
    let elsewhere = namespace("bookmarks-elsewhere");
    create_namespace(&direct, &elsewhere).await;
    for path in [
        format!("/api/v1/namespaces/{ns}/pods"),
        format!("/api/v1/namespaces/{ns}/services"),
        "/api/v1/nodes".to_owned(),
        format!("/api/v1/namespaces/{ns}/configmaps"),
        format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        format!("/apis/apps/v1/namespaces/{ns}/daemonsets"),
        gadgets.clone(),
    ] {
        let path = format!("{path}?{watch_list}&timeoutSeconds=8");
        let mut via = Bookmarks::new(get_accepting(wm.addr, &path, "application/json").await);
        let mut dir = Bookmarks::new(direct_get(&direct, &path, "application/json").await);
        // A watch-list's initial-events-end bookmark.
        let (v, d) = tokio::join!(via.next(), dir.next());
        let d = d.unwrap_or_else(|| panic!("{path}: no bookmark"));
        assert!(d.contains("k8s.io/initial-events-end"), "{path}: {d}");
        assert_eq!(v.map(|v| mask_version(&v)), Some(mask_version(&d)), "{path}");
        if path.contains("/pods") {
            // The bookmark both send 2 s before the watch's timeout, at a
            // version a pod in another namespace moved on (watchmux sends
            // none while the version stays where the watcher is).
            let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
            direct_json(&direct, http::Method::POST, &format!("/api/v1/namespaces/{elsewhere}/pods"), pod).await;
            let (v, d) = tokio::join!(via.next(), dir.next());
            let d = d.unwrap_or_else(|| panic!("{path}: no bookmark before the timeout"));
            assert!(!d.contains("k8s.io/initial-events-end"), "{path}: {d}");
            assert_eq!(v.map(|v| mask_version(&v)), Some(mask_version(&d)), "{path}: the bookmark before the timeout");
        }
        let mut via = Bookmarks::new(get_accepting(wm.addr, &path, POM).await);
        let mut dir = Bookmarks::new(direct_get(&direct, &path, POM).await);
        let (v, d) = tokio::join!(via.next(), dir.next());
        assert!(d.as_ref().is_some_and(|d| d.contains("initial-events-end")), "{path}: {d:?}");
        assert_eq!(v.map(|v| mask_version(&v)), d.map(|d| mask_version(&d)), "{path} as PartialObjectMetadata");
        if !path.starts_with("/apis/bookmarks") {
            // Protobuf, as client-go decodes it: Go's zero values, a
            // Deployment's replicas (a pointer the conversion sets), a
            // DaemonSet's annotation.
            let protobuf = "application/vnd.kubernetes.protobuf";
            let short = path.replace("timeoutSeconds=8", "timeoutSeconds=1");
            let via = read(get_accepting(wm.addr, &short, protobuf).await).await.1;
            let dir = read(direct_get(&direct, &short, protobuf).await).await.1;
            let decoded = |stream: &[u8]| {
                let mut bookmark = go_decode(&cluster, stream).into_iter().find(|e| e["type"] == "BOOKMARK").unwrap();
                bookmark["object"]["metadata"]["resourceVersion"] = json!("RV");
                bookmark
            };
            assert_eq!(decoded(&via), decoded(&dir), "{path} in protobuf");
        }
    }
    let passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await - passed;
    assert_eq!(passed, 0.0, "every watch came from the cache");
}
