//! End-to-end tests of the watch cache against the real API server: fan-out
//! over one upstream watch, the encode-once invariant, relists after
//! compaction and API server restarts absorbed by the cache, and the error
//! answers compared with the API server's own.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::sync::mpsc;

use super::env::*;
use super::relay::Relay;

const WAIT: Duration = Duration::from_secs(30);

/// Waits (bounded) until watchmux's cache for `resource` has initialized `times` times.
pub(crate) async fn wait_initialized(admin: std::net::SocketAddr, resource: &str, times: f64) {
    let filter = format!("resource=\"{resource}\"");
    for _ in 0..300 {
        if watchmux_metric_sum(admin, "watchmux_watch_cache_initializations_total", &[&filter]).await >= times {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cache for {resource} never initialized {times} times");
}

/// The resourceVersion of a LIST answered from watchmux's cache.
async fn cached_list_rv(wm: &Watchmux, ns: &str) -> String {
    let (code, body) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0")).await).await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["metadata"]["resourceVersion"].as_str().unwrap().to_owned()
}

/// Collects a watch's events (bounded, bookmarks left out) up to and with
/// the first about the object named `marker`, as (type, name, resourceVersion).
async fn events_until(rx: &mut mpsc::UnboundedReceiver<Option<Seen>>, marker: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(Some(seen))) if seen.kind == "BOOKMARK" => {}
            Ok(Some(Some(seen))) => {
                let done = seen.name == marker;
                out.push((seen.kind, seen.name, seen.rv));
                if done {
                    return out;
                }
            }
            Ok(Some(None)) | Ok(None) => panic!("watch ended before {marker}: {out:?}"),
            Err(_) => panic!("timed out waiting for {marker}: {out:?}"),
        }
    }
}

/// Collects exactly `n` events from a watch (bounded), failing if it ends first.
async fn take(rx: &mut mpsc::UnboundedReceiver<Option<Seen>>, n: usize) -> Vec<Seen> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(Some(seen))) if seen.kind == "BOOKMARK" => {}
            Ok(Some(Some(seen))) => out.push(seen),
            Ok(Some(None)) | Ok(None) => panic!("watch ended after {} of {n} events: {out:?}", out.len()),
            Err(_) => panic!("timed out after {} of {n} events: {out:?}", out.len()),
        }
    }
    out
}

/// Opens `n` watches on `path`, one HTTP/1.1 connection each, as separate clients would.
async fn open_watchers(wm: &Watchmux, path: &str, n: usize) -> Vec<mpsc::UnboundedReceiver<Option<Seen>>> {
    let mut watchers = Vec::with_capacity(n);
    for _ in 0..n {
        let resp = get(wm.addr, path).await;
        assert_eq!(resp.status(), 200);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(pump_watch(resp, tx));
        watchers.push(rx);
    }
    watchers
}

async fn write_sequence(client: &watchmux::upstream::Upstream, ns: &str, n: usize) {
    for i in 0..n {
        configmap(client, "create", ns, &format!("cm-{i}")).await;
    }
    for i in 0..n {
        configmap(client, "update", ns, &format!("cm-{i}")).await;
    }
    for i in 0..n {
        configmap(client, "delete", ns, &format!("cm-{i}")).await;
    }
}

#[tokio::test]
async fn a_thousand_watchers_share_one_upstream_watch_and_each_event_is_encoded_once() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("fanout");
    create_namespace(&direct, &ns).await;
    let watch_filter = ["resource=\"configmaps\"", "verb=\"WATCH\""];
    let upstream_watches_before = apiserver_metric_sum(&direct, "apiserver_longrunning_requests", &watch_filter).await;

    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let rv = cached_list_rv(&wm, &ns).await;

    // A direct watch is the reference.
    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}");
    let (tx, mut reference) = mpsc::unbounded_channel();
    let resp = direct.send(Request::get(&path).body(watchmux::body::empty()).unwrap()).await.unwrap();
    tokio::spawn(pump_watch(resp, tx));

    // 1,000 JSON watchers and 50 metadata-only ones over eleven HTTP/2
    // connections (100 streams each, as kube-apiserver allows).
    const JSON_WATCHERS: usize = 1000;
    const METADATA_WATCHERS: usize = 50;
    let mut conns = Vec::new();
    for _ in 0..(JSON_WATCHERS + METADATA_WATCHERS).div_ceil(100) {
        conns.push(h2(wm.addr).await);
    }
    let mut watchers = Vec::new();
    for i in 0..JSON_WATCHERS + METADATA_WATCHERS {
        let mut send = conns[i % conns.len()].clone();
        let mut req = Request::get(format!("http://localhost{path}"));
        if i >= JSON_WATCHERS {
            req = req.header("accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1");
        }
        let resp = send.send_request(req.body(Full::<Bytes>::default()).unwrap()).await.unwrap();
        assert_eq!(resp.status(), 200);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(pump_watch(resp, tx));
        watchers.push(rx);
    }
    let encodes_filter = ["variant=\"partial_object_metadata_json\""];
    let metadata_encodes_before = watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &encodes_filter).await;

    const OBJECTS: usize = 10;
    write_sequence(&direct, &ns, OBJECTS).await;
    let expected = take(&mut reference, 3 * OBJECTS).await;
    for (i, rx) in watchers.iter_mut().enumerate() {
        let got = take(rx, 3 * OBJECTS).await;
        assert_eq!(got, expected, "watcher {i} saw a different sequence");
        // Exactly once: nothing more is pending.
        assert!(rx.try_recv().is_err(), "watcher {i} got an extra event");
    }

    let upstream_watches = apiserver_metric_sum(&direct, "apiserver_longrunning_requests", &watch_filter).await;
    // The reference watch is one; watchmux adds exactly one, whatever its 1,050 watchers.
    assert_eq!(upstream_watches - upstream_watches_before, 2.0, "upstream watches besides the reference");
    let metadata_encodes = watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &encodes_filter).await;
    assert_eq!(
        metadata_encodes - metadata_encodes_before,
        (3 * OBJECTS) as f64,
        "metadata encodes must equal events, not events times watchers"
    );
    drop(watchers);
    drop(_exclusive);
}

#[tokio::test]
async fn cached_reads_answer_like_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("reads");
    create_namespace(&direct, &ns).await;
    for i in 0..3 {
        configmap(&direct, "create", &ns, &format!("cm-{i}")).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps,nodes", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let lists_before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;

    // A LIST at RV 0: same items as the API server's, from the cache.
    let path = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    let (code, via) = read(get(wm.addr, &path).await).await;
    assert_eq!(code, 200);
    let (_, direct_body) = get_direct(&direct, &path).await;
    let via: serde_json::Value = serde_json::from_slice(&via).unwrap();
    let direct_v: serde_json::Value = serde_json::from_slice(&direct_body).unwrap();
    assert_eq!(via["kind"], "ConfigMapList");
    assert_eq!(via["items"], direct_v["items"]);
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await - lists_before, 1.0);

    // Label selectors filter as the API server does.
    let sel = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0&labelSelector=e2e%3Dyes");
    let (_, via) = read(get(wm.addr, &sel).await).await;
    let (_, dir) = get_direct(&direct, &sel).await;
    let (via, dir): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&via).unwrap(), serde_json::from_slice(&dir).unwrap());
    assert_eq!(via["items"], dir["items"]);
    assert_eq!(via["items"].as_array().unwrap().len(), 3);

    // An empty namespace: "items":[] exactly.
    let (_, empty) = read(get(wm.addr, "/api/v1/namespaces/no-such-ns-e2e/configmaps?resourceVersion=0").await).await;
    assert!(String::from_utf8_lossy(&empty).ends_with(",\"items\":[]}\n"), "{}", String::from_utf8_lossy(&empty));

    // Errors, byte for byte where nothing differs by cache: a missing object,
    // an unknown field selector (passed through), a malformed version.
    for path in [
        // A named GET with watch=1 is a GET, for the API server and the cache.
        format!("/api/v1/namespaces/{ns}/configmaps/cm-0?watch=1&resourceVersion=0"),
        format!("/api/v1/namespaces/{ns}/configmaps/missing?resourceVersion=0"),
        // Paths without a route: a cluster-scoped resource under a namespace,
        // a namespaced object named without one.
        format!("/api/v1/namespaces/{ns}/nodes?resourceVersion=0"),
        "/api/v1/configmaps/cm-0?resourceVersion=0".to_owned(),
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0&fieldSelector=spec.nope%3Dx"),
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=abc"),
        // Versions Rust's integer parse would read and Go's ParseUint does
        // not: a sign, a space; on a LIST, a GET and a watch.
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=%2B1"),
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=%2B0"),
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=%2B1&resourceVersionMatch=NotOlderThan"),
        format!("/api/v1/namespaces/{ns}/configmaps/cm-0?resourceVersion=%2B1"),
        format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=%2B1&timeoutSeconds=1"),
        format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=%201"),
        format!("/api/v1/namespaces/{ns}/configmaps?watch=1&sendInitialEvents=true"),
    ] {
        let (vc, vb) = read(get(wm.addr, &path).await).await;
        let (dc, db) = get_direct(&direct, &path).await;
        assert_eq!((vc, String::from_utf8_lossy(&vb)), (dc, String::from_utf8_lossy(&db)), "{path}");
    }

    // A version far in the future: 504 with the API server's Status shape
    // (the "current" version in the message is each server's own).
    let future = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=999999999");
    let (vc, vb) = read(get(wm.addr, &future).await).await;
    let (dc, db) = get_direct(&direct, &future).await;
    assert_eq!((vc, dc), (504, 504));
    let (v, d): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&vb).unwrap(), serde_json::from_slice(&db).unwrap());
    assert_eq!(v["details"], d["details"]);
    assert_eq!(v["reason"], d["reason"]);
    assert!(v["message"].as_str().unwrap().starts_with("Timeout: Too large resource version: 999999999, current: "));

    // The legacy named watch path: the object's current state as ADDED.
    let legacy = format!("/api/v1/watch/namespaces/{ns}/configmaps/cm-1?resourceVersion=0&timeoutSeconds=1");
    let (code, body) = read(get(wm.addr, &legacy).await).await;
    assert_eq!(code, 200);
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&body).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        (lines[0]["type"].as_str(), lines[0]["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("cm-1"))
    );

    // A watch from a version older than the history: what the API server
    // gives for it (its events from there, or its 410 ERROR event in a 200
    // stream), fetched for it by the backfill (`resource/backfill.rs`).
    let old = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=1&timeoutSeconds=3");
    let (code, body) = read(get(wm.addr, &old).await).await;
    let (direct_code, direct_body) = get_direct(&direct, &old).await;
    assert_eq!((code, direct_code), (200, 200));
    let (cached, truth) = (super::backfill::events(&body), super::backfill::events(&direct_body));
    match truth.first() {
        // The message names each one's own oldest version at the time.
        Some((kind, code, message)) if kind == "ERROR" => {
            assert_eq!((cached.len(), &cached[0].0, &cached[0].1), (1, kind, code), "{cached:?}");
            assert!(cached[0].2.starts_with("too old resource version: 1 ("), "{cached:?}");
            assert!(message.starts_with("too old resource version: 1 ("), "{truth:?}");
        }
        _ => assert_eq!(cached, truth),
    }
}

#[tokio::test]
async fn a_relist_after_compaction_reaches_watchers_as_ordinary_events() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("relist");
    create_namespace(&direct, &ns).await;
    for name in ["stays", "changes", "goes"] {
        configmap(&direct, "create", &ns, name).await;
    }
    // watchmux reaches the API server through a relay the test can cut.
    let api = cluster.api_addr();
    let relay = Relay::start(api).await;
    let dir = tempfile::tempdir().unwrap();
    let relayed = relay.kubeconfig(&cluster, dir.path());
    let wm =
        Watchmux::start_with_kubeconfig(&cluster, &relayed, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let rv = cached_list_rv(&wm, &ns).await;

    let mut watchers =
        open_watchers(&wm, &format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}"), 10).await;

    // Cut watchmux off, change things, compact etcd past everything watchmux
    // saw, and restart the API server so its own cache cannot bridge either.
    relay.cut();
    configmap(&direct, "update", &ns, "changes").await;
    configmap(&direct, "delete", &ns, "goes").await;
    configmap(&direct, "create", &ns, "arrives").await;
    let key = base64_encode(b"compact_rev_key");
    let rev = etcd_post("/v3/kv/range", serde_json::json!({"key": key})).await["header"]["revision"]
        .as_str()
        .unwrap()
        .to_owned();
    etcd_post("/v3/kv/compaction", serde_json::json!({"revision": rev, "physical": true})).await;
    restart_apiserver();
    let direct = cluster.direct_client();
    relay.restore();

    wait_initialized(wm.admin, "configmaps", 2.0).await;
    for (i, rx) in watchers.iter_mut().enumerate() {
        let got = take(rx, 3).await;
        let mut by_name: HashMap<&str, &str> = HashMap::new();
        for s in &got {
            by_name.insert(&s.name, &s.kind);
        }
        assert_eq!(by_name.get("changes"), Some(&"MODIFIED"), "watcher {i}: {got:?}");
        assert_eq!(by_name.get("goes"), Some(&"DELETED"), "watcher {i}: {got:?}");
        assert_eq!(by_name.get("arrives"), Some(&"ADDED"), "watcher {i}: {got:?}");
        let rvs: Vec<u64> = got.iter().map(|s| s.rv.parse().unwrap()).collect();
        assert!(rvs.windows(2).all(|w| w[0] < w[1]), "watcher {i}: versions not increasing: {rvs:?}");
    }
    assert!(watchmux_metric_sum(wm.admin, "watchmux_upstream_relists_total", &["cause=\"expired\""]).await >= 1.0);

    // The cache converged to the API server's state.
    let path = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    let (_, via) = read(get(wm.addr, &path).await).await;
    let (_, dir) = get_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps")).await;
    let (via, dir): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&via).unwrap(), serde_json::from_slice(&dir).unwrap());
    assert_eq!(via["items"], dir["items"]);
    drop(_exclusive);
}

#[tokio::test]
async fn an_api_server_restart_is_invisible_to_downstream_watchers() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("restart");
    create_namespace(&direct, &ns).await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let rv = cached_list_rv(&wm, &ns).await;
    let mut watchers =
        open_watchers(&wm, &format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}"), 20).await;
    configmap(&direct, "create", &ns, "before").await;
    restart_apiserver();
    // The old client's pooled connection died with the API server.
    let direct = cluster.direct_client();
    configmap(&direct, "create", &ns, "after").await;
    configmap(&direct, "update", &ns, "before").await;
    for (i, rx) in watchers.iter_mut().enumerate() {
        let got = take(rx, 3).await;
        let names: Vec<(&str, &str)> = got.iter().map(|s| (s.kind.as_str(), s.name.as_str())).collect();
        assert_eq!(names, [("ADDED", "before"), ("ADDED", "after"), ("MODIFIED", "before")], "watcher {i}");
    }
    drop(_exclusive);
}

pub(crate) fn base64_encode(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Reads without a resourceVersion must see every write that finished before
/// them, and are still served from the cache (the freshness proof) when
/// nothing else was written in between (the cluster is this test's alone).
#[tokio::test]
async fn consistent_reads_see_every_prior_write_and_come_from_the_cache() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("consistent");
    create_namespace(&direct, &ns).await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let success = ["result=\"success\""];
    let before = watchmux_metric_sum(wm.admin, "watchmux_watch_cache_consistent_read_total", &success).await;

    for i in 0..3 {
        let name = format!("written-{i}");
        let written_rv = configmap(&direct, "create", &ns, &name).await;
        // LIST: includes the write at once.
        let (code, body) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/configmaps")).await).await;
        assert_eq!(code, 200);
        let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let names: Vec<&str> =
            list["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
        assert!(names.contains(&name.as_str()), "consistent LIST missed {name}: {names:?}");
        let list_rv: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert!(list_rv >= written_rv, "list at {list_rv} older than the write at {written_rv}");
        // GET: the object as the API server has it.
        let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}");
        let (code, via) = read(get(wm.addr, &path).await).await;
        let (_, dir) = get_direct(&direct, &path).await;
        assert_eq!(code, 200);
        assert_eq!(via, dir);
    }

    // A watch-list from "": initial ADDED events, then the end bookmark at a
    // version no older than the last write.
    let last_rv = configmap(&direct, "create", &ns, "last").await;
    let path = format!(
        "/api/v1/namespaces/{ns}/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(get(wm.addr, &path).await, tx));
    let mut added = Vec::new();
    loop {
        let seen = tokio::time::timeout(WAIT, rx.recv()).await.expect("no end bookmark").unwrap().expect("ended");
        if seen.kind == "BOOKMARK" {
            assert!(seen.rv.parse::<u64>().unwrap() >= last_rv, "end bookmark {} before the write {last_rv}", seen.rv);
            break;
        }
        assert_eq!(seen.kind, "ADDED");
        added.push(seen.name);
    }
    added.sort();
    assert_eq!(added, ["last", "written-0", "written-1", "written-2"]);

    // The LISTs and the watch-list proved the cache fresh; a consistent GET
    // is the API server's (one object read from etcd), and passes through.
    // A LIST passes through when the API server's own lease renewal (every
    // 10 s) lands between a write and the LIST's probe: at most one here.
    let after = watchmux_metric_sum(wm.admin, "watchmux_watch_cache_consistent_read_total", &success).await;
    assert!(after - before >= 3.0, "3 LISTs and a watch-list, from the cache: {}", after - before);
    let gets = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"consistent_get\""]).await;
    assert_eq!(gets, 3.0, "3 consistent GETs passed through");
}

/// Paginated LISTs from the cache: pages from one snapshot, the API server's
/// token format (a token from either side continues on the other), and the
/// same items as the API server's pages.
#[tokio::test]
async fn paginated_lists_come_from_one_snapshot_with_interchangeable_tokens() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("pages");
    create_namespace(&direct, &ns).await;
    let mut last = 0;
    for i in 0..5 {
        last = configmap(&direct, "create", &ns, &format!("cm-{i}")).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let lists_before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;

    let base = format!("/api/v1/namespaces/{ns}/configmaps?limit=2");
    let json = |b: &[u8]| -> serde_json::Value { serde_json::from_slice(b).unwrap() };
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
    };

    // Page 1 from watchmux; a write in between must not show in later pages.
    // Not older than the last write, which the cache holds: a consistent
    // LIST would pass through whenever another test's write lands between
    // the cache's last event and its proof (by design: docs/design.md).
    let first = format!("{base}&resourceVersion={last}&resourceVersionMatch=NotOlderThan");
    let (code, page1) = read(get(wm.addr, &first).await).await;
    assert_eq!(code, 200);
    let page1 = json(&page1);
    assert_eq!(names(&page1), ["cm-0", "cm-1"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 3);
    let token = page1["metadata"]["continue"].as_str().unwrap().to_owned();
    configmap(&direct, "create", &ns, "cm-late").await;

    // Page 2 from watchmux with watchmux's token.
    let (code, page2) = read(get(wm.addr, &format!("{base}&continue={token}")).await).await;
    assert_eq!(code, 200);
    let page2 = json(&page2);
    assert_eq!(names(&page2), ["cm-2", "cm-3"]);
    assert_eq!(page2["metadata"]["resourceVersion"], page1["metadata"]["resourceVersion"]);
    // The same token continues at the API server, to the same items.
    let (code, direct2) = get_direct(&direct, &format!("{base}&continue={token}")).await;
    assert_eq!(code, 200);
    assert_eq!(json(&direct2)["items"], page2["items"]);
    // What remains, counted by the cache from page 1's count, is what the
    // API server counts for the same token.
    assert_eq!(page2["metadata"]["remainingItemCount"], 1);
    assert_eq!(json(&direct2)["metadata"]["remainingItemCount"], page2["metadata"]["remainingItemCount"]);

    // Last page: no continue token, and the late write is not in this snapshot.
    let token2 = page2["metadata"]["continue"].as_str().unwrap();
    let (_, page3) = read(get(wm.addr, &format!("{base}&continue={token2}")).await).await;
    let page3 = json(&page3);
    assert_eq!(names(&page3), ["cm-4"]);
    assert!(page3["metadata"].get("continue").is_none(), "{page3}");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await - lists_before, 3.0);

    // A token the API server issued continues from watchmux's cache when it
    // holds that snapshot, and passes through otherwise; either way the
    // answer is the API server's next page.
    let (_, d1) = get_direct(&direct, &base).await;
    let d1 = json(&d1);
    let dtoken = d1["metadata"]["continue"].as_str().unwrap();
    let (code, via) = read(get(wm.addr, &format!("{base}&continue={dtoken}")).await).await;
    let (_, dir) = get_direct(&direct, &format!("{base}&continue={dtoken}")).await;
    assert_eq!(code, 200);
    assert_eq!(json(&via)["items"], json(&dir)["items"]);

    // A malformed token gets the API server's own 400.
    let bad = format!("{base}&continue=garbage");
    let (vc, vb) = read(get(wm.addr, &bad).await).await;
    let (dc, db) = get_direct(&direct, &bad).await;
    assert_eq!((vc, vb), (dc, db));
}

/// `--cache-resources '*'` caches custom resources too, found at run time,
/// with their CRD's selectable fields.
#[tokio::test]
async fn custom_resources_are_cached_with_their_selectable_fields() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let suffix = namespace("crd").replace("e2e-crd-", "");
    let group = format!("e2e{suffix}.watchmux.dev");
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"color": {"type": "string"}}}}}},
                "selectableFields": [{"jsonPath": ".spec.color"}]}]}
    });
    direct_json(&direct, http::Method::POST, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).await;
    let ns = namespace("widgets");
    create_namespace(&direct, &ns).await;
    let collection = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    // The CRD takes a moment to be served.
    for attempt in 0.. {
        let (code, _) = get_direct(&direct, &collection).await;
        if code == 200 {
            break;
        }
        assert!(attempt < 100, "CRD never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (name, color) in [("w1", "blue"), ("w2", "red")] {
        let w = serde_json::json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": name}, "spec": {"color": color}});
        direct_json(&direct, http::Method::POST, &collection, w).await;
    }

    let wm = Watchmux::start(&cluster, &["--cache-resources", "*"]).await;
    let label = format!("resource=\"widgets.{group}\"");
    for query in ["resourceVersion=0", "resourceVersion=0&fieldSelector=spec.color%3Dblue"] {
        let path = format!("{collection}?{query}");
        let (code, via) = read(get(wm.addr, &path).await).await;
        let (_, dir) = get_direct(&direct, &path).await;
        assert_eq!(code, 200);
        let (via, dir): (serde_json::Value, serde_json::Value) =
            (serde_json::from_slice(&via).unwrap(), serde_json::from_slice(&dir).unwrap());
        assert_eq!(via["kind"], "WidgetList");
        assert_eq!(via["items"], dir["items"], "{query}");
    }
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[&label]).await, 2.0);
    // A field the CRD does not make selectable: the API server's own 400.
    let bad = format!("{collection}?resourceVersion=0&fieldSelector=spec.size%3D1");
    let (vc, vb) = read(get(wm.addr, &bad).await).await;
    let (dc, db) = get_direct(&direct, &bad).await;
    assert_eq!((vc, vb), (dc, db));
    assert_eq!(vc, 400);
}

/// A watch-list from a version the cache does not reach in time answers
/// the API server's 504 as an ERROR event in a 200 stream.
#[tokio::test]
async fn a_watch_list_from_a_future_version_gets_the_api_servers_error_event() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let path = "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true\
                &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=999999999";
    let (vc, vb) = read(get(wm.addr, path).await).await;
    let (dc, db) = get_direct(&direct, path).await;
    assert_eq!((vc, dc), (200, 200));
    let (v, d): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&vb).unwrap(), serde_json::from_slice(&db).unwrap());
    assert_eq!(v["type"], "ERROR");
    assert_eq!(v["object"]["code"], d["object"]["code"]);
    assert_eq!(v["object"]["details"], d["object"]["details"]);
    assert!(v["object"]["message"].as_str().unwrap().starts_with("Timeout: Too large resource version: 999999999"));
}

/// A node-local proxy: `--cache-scope` narrows the upstream watch to one
/// node's pods; requests inside the scope come from the cache, others pass
/// through.
#[tokio::test]
async fn a_scoped_cache_serves_only_requests_inside_its_scope() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("scope");
    create_namespace(&direct, &ns).await;
    // Node names of this run only: the scope is cluster-wide, and pods of
    // earlier runs on a reused cluster must not fall inside it.
    let (n1, n2) = (format!("{ns}-n1"), format!("{ns}-n2"));
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    direct_json(&direct, http::Method::POST, &pods, pod("on-n1", &n1)).await;
    direct_json(&direct, http::Method::POST, &pods, pod("on-n2", &n2)).await;

    let wm = Watchmux::start(
        &cluster,
        &[
            "--cache-resources",
            "pods",
            "--cache-scope",
            &format!("pods=fieldSelector=spec.nodeName={n1}"),
            "--cache-warm",
        ],
    )
    .await;
    wait_initialized(wm.admin, "pods", 1.0).await;
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_watch_cache_objects", &["resource=\"pods\""]).await, 1.0);

    // Inside the scope: from the cache, and the same as the API server's answer.
    let inside = format!("{pods}?resourceVersion=0&fieldSelector=spec.nodeName%3D{n1}");
    let (code, via) = read(get(wm.addr, &inside).await).await;
    let (_, dir) = get_direct(&direct, &inside).await;
    assert_eq!(code, 200);
    let (via, dir): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&via).unwrap(), serde_json::from_slice(&dir).unwrap());
    assert_eq!(via["items"], dir["items"]);
    assert_eq!(via["items"].as_array().unwrap().len(), 1);
    // Outside it: passed through, and still right.
    let outside = format!("{pods}?resourceVersion=0&fieldSelector=spec.nodeName%3D{n2}");
    let (_, via) = read(get(wm.addr, &outside).await).await;
    let via: serde_json::Value = serde_json::from_slice(&via).unwrap();
    assert_eq!(via["items"][0]["metadata"]["name"], "on-n2");
    let (_, all) = read(get(wm.addr, &format!("{pods}?resourceVersion=0")).await).await;
    let all: serde_json::Value = serde_json::from_slice(&all).unwrap();
    assert_eq!(all["items"].as_array().unwrap().len(), 2, "an unscoped list must not come from the scoped cache");
    assert_eq!(
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"outside_scope\""]).await,
        2.0
    );
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &["resource=\"pods\""]).await, 1.0);

    // A kubelet-style watch of its node's pods sees a new pod bound to it.
    let watch = format!("{pods}?watch=1&fieldSelector=spec.nodeName%3D{n1}&resourceVersion={}", {
        via.get("metadata").and_then(|m| m["resourceVersion"].as_str()).unwrap_or("0").to_owned()
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(get(wm.addr, &watch).await, tx));
    direct_json(&direct, http::Method::POST, &pods, pod("new-on-n1", &n1)).await;
    let got = take(&mut rx, 1).await;
    assert_eq!((got[0].kind.as_str(), got[0].name.as_str()), ("ADDED", "new-on-n1"));
}

/// A pod bound to `node` (none when empty) whose image is never pulled: no
/// kubelet runs here.
fn pod(name: &str, node: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"name": name}, "spec": {"nodeName": node,
        "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
}

/// Kubelets' and the scheduler's reads of pods, from the cache's node index:
/// `spec.nodeName=<node>` LIST pages and watches, and `spec.nodeName=` (the
/// pods no node has), each the same as the API server's, through a pod's
/// binding to a node and its deletion.
#[tokio::test]
async fn node_selected_lists_and_watches_match_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("bynode");
    create_namespace(&direct, &ns).await;
    let (n1, n2) = (format!("{ns}-n1"), format!("{ns}-n2"));
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let create = |i: usize| {
        let (direct, pods) = (&direct, &pods);
        let node = if i.is_multiple_of(2) { n1.clone() } else { n2.clone() };
        async move {
            let created = direct_json(direct, http::Method::POST, pods, pod(&format!("p{i}"), &node)).await;
            created["metadata"]["resourceVersion"].as_str().unwrap().to_owned()
        }
    };
    for i in 0..6 {
        create(i).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "pods", "--cache-warm"]).await;
    wait_initialized(wm.admin, "pods", 1.0).await;
    // The version the lists and watches start from: the last pod's, created
    // after the cache listed, so inside its history. (A pod created before
    // would not do: any write in between, another test's or a lease renewal,
    // puts the cache's LIST past it, and a watch from a version older than
    // the cache's history waits for a backfill from the API server.)
    let rv = create(6).await;

    // Pages of one node's pods, not older than that version (served from the cache's kept state).
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
    };
    let pages = |via_watchmux: bool| {
        let (direct, pods, n1, rv, addr) = (&direct, &pods, &n1, &rv, wm.addr);
        async move {
            let mut all = Vec::new();
            let mut next = format!(
                "{pods}?fieldSelector=spec.nodeName%3D{n1}&limit=2&resourceVersion={rv}&resourceVersionMatch=NotOlderThan"
            );
            for _ in 0..10 {
                let (code, body) =
                    if via_watchmux { read(get(addr, &next).await).await } else { get_direct(direct, &next).await };
                assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                all.push(names(&v));
                match v["metadata"]["continue"].as_str() {
                    Some(token) if !token.is_empty() => {
                        next = format!("{pods}?fieldSelector=spec.nodeName%3D{n1}&limit=2&continue={token}");
                    }
                    _ => break,
                }
            }
            all
        }
    };
    let (via, dir) = (pages(true).await, pages(false).await);
    assert_eq!(via, dir);
    assert_eq!(via, [vec!["p0", "p2"], vec!["p4", "p6"]]);

    // Watches: a kubelet's and the scheduler's, both sides, from the listed version.
    let open = |via_watchmux: bool, selector: String| {
        let (direct, pods, rv, addr) = (&direct, &pods, &rv, wm.addr);
        async move {
            let path = format!("{pods}?watch=1&fieldSelector={selector}&resourceVersion={rv}");
            let resp = if via_watchmux {
                get(addr, &path).await
            } else {
                direct.send(Request::get(&path).body(watchmux::body::empty()).unwrap()).await.unwrap()
            };
            assert_eq!(resp.status(), 200);
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(pump_watch(resp, tx));
            rx
        }
    };
    let on_n1 = format!("spec.nodeName%3D{n1}");
    let pending = "spec.nodeName%3D".to_owned();
    let mut watches = Vec::new();
    for via_watchmux in [true, false] {
        watches.push((open(via_watchmux, on_n1.clone()).await, open(via_watchmux, pending.clone()).await));
    }
    // A pod created with no node, bound to n1, then deleted; and one on n2.
    direct_json(&direct, http::Method::POST, &pods, pod("late", "")).await;
    let binding = serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "late"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": n1}});
    direct_json(&direct, http::Method::POST, &format!("{pods}/late/binding"), binding).await;
    direct_json(&direct, http::Method::POST, &pods, pod("elsewhere", &n2)).await;
    direct_json(&direct, http::Method::DELETE, &format!("{pods}/late"), serde_json::json!({"gracePeriodSeconds": 0}))
        .await;
    // Markers after which each watch has seen all of the above.
    direct_json(&direct, http::Method::POST, &pods, pod("z-end-bound", &n1)).await;
    direct_json(&direct, http::Method::POST, &pods, pod("z-end-pending", "")).await;
    let mut seen = Vec::new();
    for (kubelet, scheduler) in &mut watches {
        seen.push((events_until(kubelet, "z-end-bound").await, events_until(scheduler, "z-end-pending").await));
    }
    assert_eq!(seen[0], seen[1], "through watchmux, then straight at kube-apiserver");
    let (k, s) = &seen[0];
    let shape = |events: &[(String, String, String)]| {
        events.iter().map(|(kind, name, _)| format!("{kind} {name}")).collect::<Vec<_>>()
    };
    assert_eq!(
        shape(k).first().map(String::as_str),
        Some("ADDED late"),
        "the binding adds the pod to its node's watch"
    );
    assert_eq!(shape(k).last().map(String::as_str), Some("ADDED z-end-bound"));
    assert!(shape(k).contains(&"DELETED late".to_owned()));
    assert!(!shape(k).iter().any(|e| e.contains("elsewhere")));
    assert_eq!(
        shape(s),
        ["ADDED late", "DELETED late", "ADDED z-end-pending"],
        "binding takes it out of the pending watch"
    );
    assert_eq!(
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await,
        0.0,
        "every read here is served from the cache"
    );
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &["resource=\"pods\""]).await, 2.0);
}

/// A node-local watchmux in front of a tier (the chart's tree) with
/// `--upstream-watch-list`: its node's pods come from the tier's cache as
/// one watch-list, no LIST of pods reaches the tier (its CBOR probe gets the
/// tier's own 406), and that same watch
/// goes on: a pod bound to the node later reaches the node-local's
/// watchers, and what the node-local serves is what kube-apiserver does.
#[tokio::test]
async fn a_node_local_behind_a_tier_takes_its_state_as_a_watch_list() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("wlist");
    create_namespace(&direct, &ns).await;
    let (n1, n2) = (format!("{ns}-n1"), format!("{ns}-n2"));
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    for (name, node) in [("a", &n1), ("b", &n2), ("c", &n1)] {
        direct_json(&direct, http::Method::POST, &pods, pod(name, node)).await;
    }
    let tier = Watchmux::start(&cluster, &["--cache-resources", "pods", "--cache-warm"]).await;
    wait_initialized(tier.admin, "pods", 1.0).await;
    let scope = format!("pods=fieldSelector=spec.nodeName={n1}");
    let local = Watchmux::start_with_kubeconfig(
        &cluster,
        &tier.kubeconfig,
        &["--cache-resources", "pods", "--cache-scope", &scope, "--cache-warm", "--upstream-watch-list=true"],
    )
    .await;
    wait_initialized(local.admin, "pods", 1.0).await;
    let lists = |form: &'static str| {
        let admin = local.admin;
        async move {
            let form = format!("form=\"{form}\"");
            watchmux_metric_sum(admin, "watchmux_upstream_lists_total", &["resource=\"pods\"", &form]).await
        }
    };
    assert_eq!((lists("watch_list").await, lists("pages").await), (1.0, 0.0), "{}", local.log());
    assert_eq!(
        watchmux_metric_sum(tier.admin, "watchmux_cache_list_total", &["resource=\"pods\""]).await,
        0.0,
        "the node-local listed no pods through the tier"
    );
    assert!(watchmux_metric_sum(tier.admin, "watchmux_cache_watch_total", &["resource=\"pods\""]).await >= 1.0);
    // Its CBOR probe got the route filter's 406 from the tier, not from kube-apiserver.
    let not_acceptable = ["reason=\"not_acceptable\""];
    assert_eq!(watchmux_metric_sum(tier.admin, "watchmux_cache_passthrough_total", &not_acceptable).await, 0.0);
    assert_eq!(watchmux_metric_sum(tier.admin, "watchmux_cache_refusals_total", &not_acceptable).await, 1.0);
    // Its schema check's OpenAPI document, asked by hash, came from the tier's store.
    let (shared, openapi) = ("watchmux_shared_answers_total", "kind=\"openapi\"");
    let fetched = watchmux_metric_sum(tier.admin, shared, &[openapi, "result=\"fetched\""]).await;
    assert_eq!(fetched, 1.0, "the tier fetched core/v1's document once");
    assert_eq!(watchmux_metric_sum(tier.admin, shared, &[openapi, "result=\"passed_through\""]).await, 0.0);

    // What it holds is the API server's answer for that node.
    let on_n1 = format!("{pods}?fieldSelector=spec.nodeName%3D{n1}");
    let names = |body: &[u8]| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        v["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
    };
    let (code, via) = read(get(local.addr, &format!("{on_n1}&resourceVersion=0")).await).await;
    assert_eq!(code, 200);
    let (_, dir) = get_direct(&direct, &on_n1).await;
    assert_eq!(names(&via), names(&dir));
    assert_eq!(names(&via), ["a", "c"]);

    // The watch-list's watch goes on: a later pod on n1 reaches a watcher.
    let v: serde_json::Value = serde_json::from_slice(&via).unwrap();
    let rv = v["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(get(local.addr, &format!("{on_n1}&watch=1&resourceVersion={rv}")).await, tx));
    direct_json(&direct, http::Method::POST, &pods, pod("d", &n2)).await;
    direct_json(&direct, http::Method::POST, &pods, pod("e", &n1)).await;
    let got = take(&mut rx, 1).await;
    assert_eq!((got[0].kind.as_str(), got[0].name.as_str()), ("ADDED", "e"));
    assert_eq!(lists("watch_list").await, 1.0, "one watch-list, no relist");
}

/// With --cache-warm, an upstream that is down at start-up delays
/// readiness, not forever: warming is retried until the caches are synced.
#[tokio::test]
async fn warming_is_retried_until_the_upstream_answers() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let api = cluster.api_addr();
    let relay = Relay::start(api).await;
    relay.cut();
    let dir = tempfile::tempdir().unwrap();
    let relayed = relay.kubeconfig(&cluster, dir.path());
    let wm = Watchmux::spawn_with_kubeconfig(&relayed, &["--cache-resources", "configmaps", "--cache-warm"]);
    // Down: not ready.
    let (code, _) = read(wm.wait_for_admin("/readyz").await).await;
    assert_eq!(code, 503);
    relay.restore();
    wm.wait_ready().await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
}
