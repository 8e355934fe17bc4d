//! A new cluster behind the same address, against the real API server: etcd
//! restored from an older copy of itself (the same cluster's identity, its
//! revisions back below what watchmux caches), then wiped (a new identity,
//! revisions from 1). Each time watchmux must stop serving the old state:
//! every watcher through it gets 410 Expired, and its LISTs (from the cache
//! and consistent) become the API server's. `integration/scripts/etcd-swap.sh`
//! saves, restores and wipes etcd.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use super::cache::wait_initialized;
use super::env::*;

/// How long the cluster takes to come back, and watchmux to follow.
const WAIT: Duration = Duration::from_secs(90);

/// etcd-swap.sh with `args`, next to the cluster-up script the suite uses.
fn swap_etcd(args: &[&str]) {
    let up = std::env::var("WATCHMUX_E2E_CLUSTER_UP").expect("WATCHMUX_E2E_CLUSTER_UP");
    let script = Path::new(&up).with_file_name("etcd-swap.sh");
    let out = Command::new("bash").arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "etcd-swap {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Every ConfigMap of a list: namespace/name → resourceVersion.
fn state(list: &[u8]) -> BTreeMap<String, String> {
    let list: Value = serde_json::from_slice(list).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            (
                format!("{}/{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap()),
                m["resourceVersion"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn list_rv(list: &[u8]) -> u64 {
    let list: Value = serde_json::from_slice(list).unwrap();
    list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

/// A watch of every ConfigMap through watchmux from `rv`; its events, whole.
async fn watch(wm: &Watchmux, rv: u64) -> mpsc::UnboundedReceiver<Option<Value>> {
    let resp = get(wm.addr, &format!("/api/v1/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true")).await;
    assert_eq!(resp.status(), 200);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch_values(resp, tx));
    rx
}

/// The watcher's 410 Expired ERROR event, within `WAIT`, as the API server
/// sends for a version it no longer has; the events before it are ignored.
async fn expect_410(rx: &mut mpsc::UnboundedReceiver<Option<Value>>, what: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, rx.recv()).await;
        let event = event.unwrap_or_else(|_| panic!("{what}: no 410 within {WAIT:?}"));
        match event {
            Some(Some(e)) if e["type"] == "ERROR" => {
                let status = &e["object"];
                assert_eq!(
                    (status["code"].as_u64(), status["reason"].as_str()),
                    (Some(410), Some("Expired")),
                    "{what}: {e}"
                );
                return;
            }
            Some(Some(_)) => {}
            Some(None) | None => panic!("{what}: the watch ended without a 410"),
        }
    }
}

/// Waits until watchmux's LIST at `query` answers the API server's state.
async fn lists_converge(wm: &Watchmux, direct: &watchmux::upstream::Upstream, query: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, truth) = get_direct(direct, "/api/v1/configmaps").await;
        let (code, body) = read(get(wm.addr, &format!("/api/v1/configmaps{query}")).await).await;
        if code == 200 && state(&body) == state(&truth) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: watchmux's LIST{query} ({code}) never became the API server's"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn a_cluster_restored_from_an_older_etcd_or_wiped_is_cached_anew() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("newcluster");
    create_namespace(&direct, &ns).await;
    for name in ["a", "b"] {
        configmap(&direct, "create", &ns, name).await;
    }
    let backup = tempfile::tempdir().unwrap();
    let saved = backup.path().join("etcd");
    swap_etcd(&["save", saved.to_str().unwrap()]);
    // Written after the backup: the restored cluster has none of these.
    for name in ["c", "d", "e"] {
        configmap(&direct, "create", &ns, name).await;
    }
    configmap(&direct, "update", &ns, "a").await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let (_, listed) = read(get(wm.addr, "/api/v1/configmaps?resourceVersion=0").await).await;
    let cached_rv = list_rv(&listed);
    assert!(state(&listed).contains_key(&format!("{ns}/e")));
    let mut watcher = watch(&wm, cached_rv).await;

    // Restored from the older copy.
    swap_etcd(&["restore", saved.to_str().unwrap()]);
    let direct = cluster.direct_client();
    let (_, truth) = get_direct(&direct, "/api/v1/configmaps").await;
    assert!(
        list_rv(&truth) < cached_rv,
        "the restored cluster is behind the cache ({} vs {cached_rv})",
        list_rv(&truth)
    );
    assert!(!state(&truth).contains_key(&format!("{ns}/e")));
    let back = tokio::time::Instant::now();
    expect_410(&mut watcher, "restored").await;
    let expired_after = back.elapsed();
    lists_converge(&wm, &direct, "?resourceVersion=0", "restored").await;
    lists_converge(&wm, &direct, "", "restored").await;
    eprintln!(
        "new_cluster: restored (rv {} < cache's {cached_rv}): 410 {:.1} s after the API server was back, LISTs the API server's by {:.1} s",
        list_rv(&truth),
        expired_after.as_secs_f64(),
        back.elapsed().as_secs_f64()
    );
    assert!(watchmux_metric_sum(wm.admin, "watchmux_upstream_new_cluster_total", &[]).await >= 1.0);
    // The new cluster's writes reach the cache, on the new state alone.
    configmap(&direct, "create", &ns, "after-restore").await;
    lists_converge(&wm, &direct, "", "restored, then written").await;

    // Wiped: a new cluster altogether.
    let (_, listed) = read(get(wm.addr, "/api/v1/configmaps?resourceVersion=0").await).await;
    let mut watcher = watch(&wm, list_rv(&listed)).await;
    let before = watchmux_metric_sum(wm.admin, "watchmux_upstream_new_cluster_total", &[]).await;
    swap_etcd(&["wipe"]);
    let direct = cluster.direct_client();
    let back = tokio::time::Instant::now();
    expect_410(&mut watcher, "wiped").await;
    let expired_after = back.elapsed();
    lists_converge(&wm, &direct, "?resourceVersion=0", "wiped").await;
    lists_converge(&wm, &direct, "", "wiped").await;
    eprintln!(
        "new_cluster: wiped: 410 {:.1} s after the API server was back, LISTs the API server's by {:.1} s",
        expired_after.as_secs_f64(),
        back.elapsed().as_secs_f64()
    );
    let (_, now) = read(get(wm.addr, "/api/v1/configmaps?resourceVersion=0").await).await;
    assert!(!state(&now).keys().any(|k| k.starts_with(&format!("{ns}/"))), "the wiped cluster's namespace is gone");
    assert!(watchmux_metric_sum(wm.admin, "watchmux_upstream_new_cluster_total", &[]).await > before);
    drop(_exclusive);
}
