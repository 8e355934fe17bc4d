//! Issue 45, item 1, against the real API server: a watch from a version
//! older than a restarted watchmux's first list gets what the API server
//! gives for the same watch (its events, or its own 410), never a 410 of
//! watchmux's, and several such watchers cost one upstream watch
//! (`src/cache/resource/backfill.rs`). Once with the cache listed anew, once
//! with the cache loaded from disk (`--persist-dir`, a node-local's).

use std::time::Duration;

use serde_json::Value;

use super::cache::wait_initialized;
use super::env::*;

/// Watchers resuming at once through the restarted watchmux.
const WATCHERS: usize = 5;

/// A watch's events with their type, name and version (bookmarks left out:
/// their times are each server's own), or an ERROR's code, reason and
/// message.
pub(crate) fn events(body: &[u8]) -> Vec<(String, String, String)> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(l))))
        .filter(|e| e["type"] != "BOOKMARK")
        .map(|e| {
            let o = &e["object"];
            match e["type"].as_str().unwrap() {
                "ERROR" => ("ERROR".to_owned(), o["code"].to_string(), o["message"].as_str().unwrap_or("").to_owned()),
                kind => (
                    kind.to_owned(),
                    o["metadata"]["name"].as_str().unwrap().to_owned(),
                    o["metadata"]["resourceVersion"].as_str().unwrap().to_owned(),
                ),
            }
        })
        .collect()
}

/// The version of watchmux's cached LIST of `ns`.
async fn cached_rv(wm: &Watchmux, ns: &str) -> u64 {
    let (code, body) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0")).await).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).unwrap();
    list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_restarted_watchmux_resumes_old_watches_as_the_api_server_does_with_one_upstream_watch() {
    let _shared = CLUSTER.read().await;
    for persisted in [false, true] {
        resumes_across_a_restart(persisted).await;
    }
}

async fn resumes_across_a_restart(persisted: bool) {
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("backfill");
    create_namespace(&direct, &ns).await;
    for name in ["a", "b", "c"] {
        configmap(&direct, "create", &ns, name).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let persist_dir = dir.path().join("persist");
    let mut flags = vec!["--cache-resources", "configmaps", "--cache-warm"];
    if persisted {
        flags.extend(["--persist-dir", persist_dir.to_str().unwrap(), "--persist-resources", "configmaps"]);
    }

    let mut first = Watchmux::start(&cluster, &flags).await;
    wait_initialized(first.admin, "configmaps", 1.0).await;
    // The version a client holds, then changes the restarted watchmux's
    // cache starts after (its list, or what it persisted).
    let noted = configmap(&direct, "update", &ns, "a").await;
    configmap(&direct, "delete", &ns, "b").await;
    let created_d = configmap(&direct, "create", &ns, "d").await;
    // The cache has every write before it stops.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cached_rv(&first, &ns).await < created_d {
        assert!(tokio::time::Instant::now() < deadline, "the cache never got the writes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if persisted {
        // And has committed them: the second commit that starts after this
        // takes everything queued, `d` included (the first may have been
        // under way). Writes elsewhere make the commits.
        let elsewhere = namespace("backfill-flush");
        create_namespace(&direct, &elsewhere).await;
        let commits = || watchmux_metric_sum(first.admin, "watchmux_persist_commits_total", &["configmaps"]);
        let before = commits().await;
        for i in 0.. {
            if commits().await >= before + 2.0 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "nothing persisted after the writes");
            configmap(&direct, "create", &elsewhere, &format!("flush-{i}")).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    first.terminate();

    let second = Watchmux::start(&cluster, &flags).await;
    wait_initialized(second.admin, "configmaps", if persisted { 0.0 } else { 1.0 }).await;
    if persisted {
        let log = second.log();
        let loaded = log.lines().find(|l| l.contains("cache loaded from disk")).unwrap_or_else(|| panic!("{log}"));
        let rv: u64 = loaded
            .split("rv=")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("{loaded}"));
        assert!(rv >= created_d, "loaded at {rv}, after the noted {noted}: {loaded}");
    }
    // Changes after the restart, so the resumed watches cross into the
    // new cache's own history and live events.
    configmap(&direct, "update", &ns, "c").await;
    configmap(&direct, "create", &ns, "e").await;

    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={noted}&timeoutSeconds=4");
    let through: Vec<_> = (0..WATCHERS)
        .map(|_| {
            let addr = second.addr;
            let path = path.clone();
            tokio::spawn(async move { read(get(addr, &path).await).await })
        })
        .collect();
    let (code, truth) = get_direct(&direct, &path).await;
    assert_eq!(code, 200);
    let truth = events(&truth);
    let names: Vec<_> = truth.iter().map(|(kind, name, _)| format!("{kind} {name}")).collect();
    assert_eq!(
        names,
        ["DELETED b", "ADDED d", "MODIFIED c", "ADDED e"],
        "the API server resumes from {noted} (persisted: {persisted})"
    );
    for watcher in through {
        let (code, body) = watcher.await.unwrap();
        assert_eq!(code, 200);
        assert_eq!(events(&body), truth, "through the restarted watchmux (persisted: {persisted})");
    }
    let label = ["resource=\"configmaps\""];
    let rounds = watchmux_metric_sum(second.admin, "watchmux_watch_backfills_total", &label).await;
    assert_eq!(rounds, 1.0, "one upstream watch for {WATCHERS} watchers (persisted: {persisted})");
    let served = watchmux_metric_sum(
        second.admin,
        "watchmux_watch_backfill_watchers_total",
        &["resource=\"configmaps\"", "result=\"served\""],
    )
    .await;
    assert_eq!(served, WATCHERS as f64);
    eprintln!("backfill (persisted: {persisted}): {WATCHERS} watchers from {noted} served by 1 upstream watch");
}

/// A tree (a node-local whose upstream is a tier), both just started, on a
/// quiet resource: the node-local's backfill goes through the tier's, whose
/// upstream watch finds no event and learns its version from the API
/// server's bookmark, a version the tier's own cache already holds (or not
/// yet). The tier must tell the node-local's backfill that version at
/// bookmark time, as the API server does for a watch from an older version;
/// it did not, so every such watch waited five seconds and passed through
/// (CI's control-plane test, tree topology). PodTemplates: no other test
/// writes them, so nothing else moves the resource on.
#[tokio::test]
async fn a_tree_resumes_old_watches_through_a_restarted_tier_on_a_quiet_resource() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("backfill-tree");
    create_namespace(&direct, &ns).await;
    let templates = format!("/api/v1/namespaces/{ns}/podtemplates");
    let template = serde_json::json!({"metadata": {"name": "a"}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}});
    let created = direct_json(&direct, http::Method::POST, &templates, template).await;
    let noted = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    // Writes elsewhere: the caches below list past `noted`, with no event
    // of theirs in between.
    for _ in 0..3 {
        create_namespace(&direct, &namespace("backfill-tree-elsewhere")).await;
    }

    let flags = ["--cache-resources", "podtemplates", "--cache-warm"];
    let tier = Watchmux::start(&cluster, &flags).await;
    wait_initialized(tier.admin, "podtemplates", 1.0).await;
    let local = Watchmux::start_with_kubeconfig(&cluster, &tier.kubeconfig, &flags).await;
    wait_initialized(local.admin, "podtemplates", 1.0).await;

    let path = format!("{templates}?watch=1&resourceVersion={noted}&timeoutSeconds=4");
    let (code, truth) = get_direct(&direct, &path).await;
    assert_eq!((code, events(&truth)), (200, vec![]), "the API server resumes from {noted}");
    let (code, body) = read(get(local.addr, &path).await).await;
    assert_eq!((code, events(&body)), (200, vec![]), "through the node-local and the tier");
    for (hop, wm) in [("node-local", &local), ("tier", &tier)] {
        let served = watchmux_metric_sum(
            wm.admin,
            "watchmux_watch_backfill_watchers_total",
            &["resource=\"podtemplates\"", "result=\"served\""],
        )
        .await;
        let passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"backfill\""]).await;
        assert_eq!((served, passed), (1.0, 0.0), "the {hop} served its backfill; log:\n{}", wm.log());
    }
}
