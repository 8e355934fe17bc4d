//! A node-local watchmux that restarts while the API server cannot be
//! reached (`--persist-dir`, `--serve-stale-when-upstream-unreachable`):
//! it serves what it had persisted, then converges when the upstream is
//! back.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::env::*;
use crate::relay::Relay;

/// (name, resourceVersion) of every item of a list body.
fn items(body: &[u8]) -> Vec<(String, String)> {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)));
    let mut out: Vec<(String, String)> = v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {v}"))
        .iter()
        .map(|i| {
            let meta = &i["metadata"];
            (meta["name"].as_str().unwrap().to_owned(), meta["resourceVersion"].as_str().unwrap().to_owned())
        })
        .collect();
    out.sort();
    out
}

/// The resourceVersion of a list body.
fn list_rv(body: &[u8]) -> u64 {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

/// Bounded: the metric reaches `at_least`.
async fn wait_metric(wm: &Watchmux, name: &str, labels: &[&str], at_least: f64) {
    for _ in 0..200 {
        if watchmux_metric_sum(wm.admin, name, labels).await >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name}{labels:?} never reached {at_least}; log:\n{}", wm.log());
}

/// The next event, within the suite's bound; watchmux's log when there is none.
async fn next(rx: &mut mpsc::UnboundedReceiver<Option<Seen>>, wm: &Watchmux) -> Seen {
    match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
        Ok(Some(Some(seen))) => seen,
        other => panic!("no event: {other:?}; watchmux's log:\n{}", wm.log()),
    }
}

#[tokio::test]
async fn a_restart_while_the_upstream_is_unreachable_serves_the_persisted_cache_then_converges() {
    // Alone on the cluster: in the full suite (four tests at a time) the
    // watch resumed after the outage once ended without an event, which
    // never happened alone; the log it now prints says why when it does.
    let _exclusive = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("persist");
    create_namespace(&direct, &ns).await;
    for name in ["a", "b", "c"] {
        configmap(&direct, "create", &ns, name).await;
    }
    let relay = Relay::start(cluster.api_addr()).await;
    let dir = tempfile::tempdir().unwrap();
    let relayed = relay.kubeconfig(&cluster, dir.path());
    let persist = dir.path().join("persist");
    let persist_dir = persist.to_str().unwrap();
    let flags = [
        "--cache-resources",
        "configmaps",
        "--cache-warm",
        "--persist-dir",
        persist_dir,
        "--persist-resources",
        "configmaps",
        "--serve-stale-when-upstream-unreachable",
    ];
    let list = format!("/api/v1/namespaces/{ns}/configmaps");
    let any = format!("{list}?resourceVersion=0");

    // Online: the cache lists, and its first commit (the whole list) lands.
    let mut wm = Watchmux::start_with_kubeconfig(&cluster, &relayed, &flags).await;
    let (code, body) = read(get(wm.addr, &any).await).await;
    assert_eq!(code, 200);
    let online = items(&body);
    assert_eq!(online.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    wait_metric(&wm, "watchmux_persist_commits_total", &["resource=\"configmaps\""], 1.0).await;
    let listed_rv = list_rv(&body);
    // A write elsewhere (as other clients, and the suite's other tests, make)
    // moves the persisted version past the one this client holds.
    let other = namespace("persist-other");
    create_namespace(&direct, &other).await;
    configmap(&direct, "create", &other, "x").await;
    wait_metric(&wm, "watchmux_persist_commits_total", &["resource=\"configmaps\""], 2.0).await;
    wm.terminate();
    let mode = std::fs::metadata(&persist).unwrap().permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o700);

    // Offline: the relay refuses everything; watchmux starts from disk.
    relay.cut();
    let wm = Watchmux::spawn_with_kubeconfig(&relayed, &flags);
    // Ready although warming needs discovery: the caches from disk answer.
    wm.wait_ready().await;
    let (code, body) = read(get(wm.addr, &any).await).await;
    assert_eq!(code, 200, "resourceVersion=0 from disk: {}", String::from_utf8_lossy(&body));
    assert_eq!(items(&body), online, "the same objects at the same versions");
    let persisted_rv = list_rv(&body);
    assert!(persisted_rv > listed_rv, "the later write was persisted: {persisted_rv} after {listed_rv}");
    let (code, body) = read(get(wm.addr, &list).await).await;
    assert_eq!(code, 200, "a consistent LIST, offline: {}", String::from_utf8_lossy(&body));
    assert_eq!(items(&body), online);
    // A watch-list (client-go's informers since 1.35): the objects, then the
    // initial-events-end bookmark.
    let watch_list =
        format!("{list}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true");
    let resp = get(wm.addr, &watch_list).await;
    assert_eq!(resp.status(), 200);
    let (tx, mut initial) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(resp, tx));
    let mut added = Vec::new();
    loop {
        let seen = next(&mut initial, &wm).await;
        if seen.kind == "BOOKMARK" {
            break;
        }
        assert_eq!(seen.kind, "ADDED");
        added.push((seen.name, seen.rv));
    }
    added.sort();
    assert_eq!(added, online);
    // A watch from before the persisted version: the history starts there,
    // so the changes in between are unknown and the client must list again,
    // as after kube-apiserver's own restart (410 Expired in the stream).
    let (code, body) = read(get(wm.addr, &format!("{list}?watch=1&resourceVersion={listed_rv}")).await).await;
    assert_eq!(code, 200);
    let error: Value =
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
    assert_eq!((error["type"].as_str(), error["object"]["code"].as_u64()), (Some("ERROR"), Some(410)), "{error}");
    assert_eq!(
        error["object"]["message"].as_str().unwrap(),
        format!("too old resource version: {listed_rv} ({persisted_rv})")
    );
    // A watch from the persisted version is served, and stays open.
    let resp = get(wm.addr, &format!("{list}?watch=1&resourceVersion={persisted_rv}")).await;
    assert_eq!(resp.status(), 200);
    let (tx, mut resumed) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(resp, tx));
    let (_, verbose) = read(get(wm.admin, "/readyz?verbose").await).await;
    let verbose = String::from_utf8_lossy(&verbose);
    assert!(verbose.contains("[+]cache-unproven ok: serving unproven state"), "{verbose}");
    assert!(verbose.contains("configmaps"), "{verbose}");
    let gauge = watchmux_metric_sum(wm.admin, "watchmux_cache_serving_unproven", &["resource=\"configmaps\""]).await;
    assert_eq!(gauge, 1.0);
    assert!(wm.log().contains("cache loaded from disk"), "{}", wm.log());

    // The upstream is back: the resumed watch carries what happened since,
    // and the cache is confirmed.
    relay.restore();
    configmap(&direct, "update", &ns, "b").await;
    configmap(&direct, "create", &ns, "d").await;
    let first = next(&mut resumed, &wm).await;
    let second = next(&mut resumed, &wm).await;
    assert_eq!((first.kind.as_str(), first.name.as_str()), ("MODIFIED", "b"), "{first:?}");
    assert_eq!((second.kind.as_str(), second.name.as_str()), ("ADDED", "d"), "{second:?}");
    for _ in 0..200 {
        if watchmux_metric_sum(wm.admin, "watchmux_cache_serving_unproven", &["resource=\"configmaps\""]).await == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, verbose) = read(get(wm.admin, "/readyz?verbose").await).await;
    assert!(!String::from_utf8_lossy(&verbose).contains("serving unproven"), "still unproven");
    let (_, via) = read(get(wm.addr, &any).await).await;
    let (_, upstream) = get_direct(&direct, &list).await;
    assert_eq!(items(&via), items(&upstream), "converged");
}

/// The finding, as it was made: an older, validly sealed copy of an
/// encrypted store put back while watchmux was stopped, then a restart
/// while the upstream cannot be reached. The copy still holds a ConfigMap
/// deleted upstream since; it must not be served. The store is refused
/// (moved aside, counted, logged) and the cache starts cold.
#[tokio::test]
async fn an_encrypted_store_rolled_back_to_an_older_copy_is_not_served_offline() {
    let _exclusive = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("persist-rollback");
    create_namespace(&direct, &ns).await;
    for name in ["gone", "kept"] {
        configmap(&direct, "create", &ns, name).await;
    }
    let relay = Relay::start(cluster.api_addr()).await;
    let dir = tempfile::tempdir().unwrap();
    let relayed = relay.kubeconfig(&cluster, dir.path());
    let persist = dir.path().join("persist");
    let key = dir.path().join("persist.key");
    // 32 bytes (0 to 31) in base64, as the API server's aesgcm keys.
    std::fs::write(&key, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
    let flags = [
        "--cache-resources",
        "configmaps",
        "--cache-warm",
        "--persist-dir",
        persist.to_str().unwrap(),
        "--persist-resources",
        "configmaps",
        "--persist-encryption-key-file",
        key.to_str().unwrap(),
        "--serve-stale-when-upstream-unreachable",
    ];
    let store = persist.join("configmaps.v1.core.redb");
    let any = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    let names = |body: &[u8]| items(body).into_iter().map(|(n, _)| n).collect::<Vec<_>>();

    // The copy: both ConfigMaps persisted.
    let mut wm = Watchmux::start_with_kubeconfig(&cluster, &relayed, &flags).await;
    wait_metric(&wm, "watchmux_persist_commits_total", &["resource=\"configmaps\""], 1.0).await;
    wm.terminate();
    let older = std::fs::read(&store).unwrap();

    // "gone" deleted upstream, and the node's store follows: a restart
    // online resumes the watch, which carries the deletion to the disk.
    configmap(&direct, "delete", &ns, "gone").await;
    let mut wm = Watchmux::start_with_kubeconfig(&cluster, &relayed, &flags).await;
    for _ in 0..200 {
        if names(&read(get(wm.addr, &any).await).await.1) == ["kept"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(names(&read(get(wm.addr, &any).await).await.1), ["kept"]);
    // A later write's commit: the deletion's (before it) is on disk.
    let commits = watchmux_metric_sum(wm.admin, "watchmux_persist_commits_total", &["resource=\"configmaps\""]).await;
    configmap(&direct, "create", &ns, "later").await;
    wait_metric(&wm, "watchmux_persist_commits_total", &["resource=\"configmaps\""], commits + 1.0).await;
    wm.terminate();

    // The older copy put back; the upstream cut; watchmux started again.
    std::fs::write(&store, &older).unwrap();
    relay.cut();
    let wm = Watchmux::spawn_with_kubeconfig(&relayed, &flags);
    wm.wait_for_admin("/metrics").await;
    wait_metric(&wm, "watchmux_persist_rollbacks_refused_total", &["resource=\"configmaps\""], 1.0).await;
    assert!(wm.log().contains("rolled back"), "{}", wm.log());
    let aside = std::fs::read_dir(&persist)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".bad-"))
        .count();
    assert_eq!(aside, 1, "the copy is kept aside for a post-mortem");
    // Nothing from the copy is served: the cache is cold, and an answer, if
    // any comes while the upstream is away, is not the copy's.
    if let Ok(resp) = tokio::time::timeout(Duration::from_secs(5), get(wm.addr, &any)).await {
        let (code, body) = read(resp).await;
        assert!(code != 200 || !names(&body).contains(&"gone".to_owned()), "the deleted ConfigMap served: {code}");
    }
    let gauge = watchmux_metric_sum(wm.admin, "watchmux_cache_serving_unproven", &["resource=\"configmaps\""]).await;
    assert_eq!(gauge, 0.0, "no cache loaded from disk");
}
