//! The differential tests: one sequence of creates, updates, label
//! transitions and deletes, watched by the same clients straight from the
//! API server and through watchmux (which serves them from its cache). The
//! event sequences (type, name, resourceVersion) and the final state must be
//! identical. client-go informers run in integration/cmd/difftest; kube-rs
//! watchers run here.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;

use super::env::*;

type Log = Arc<Mutex<Vec<(String, String, String)>>>;

async fn kube_client(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// Runs a kube-rs watcher, logging every object event after the initial
/// list, and signalling when the initial list is done.
fn record(api: Api<ConfigMap>, config: watcher::Config) -> (Log, tokio::sync::oneshot::Receiver<()>) {
    let log: Log = Default::default();
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    let sink = log.clone();
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => panic!("watcher error: {e}"),
            };
            let (kind, obj) = match event {
                watcher::Event::InitDone => {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                watcher::Event::Init | watcher::Event::InitApply(_) => continue,
                watcher::Event::Apply(o) => ("APPLY", o),
                watcher::Event::Delete(o) => ("DELETE", o),
            };
            let name = obj.metadata.name.clone().unwrap_or_default();
            let rv = obj.metadata.resource_version.clone().unwrap_or_default();
            sink.lock().push((kind.to_owned(), name, rv));
        }
    });
    (log, ready)
}

fn cm(name: &str, app: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.labels = Some(BTreeMap::from([("app".to_owned(), app.to_owned())]));
    c.data = Some(BTreeMap::from([("v".to_owned(), "0".to_owned())]));
    c
}

#[tokio::test]
async fn kube_rs_watchers_see_the_same_events_through_watchmux() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let ns = namespace("kube-rs");
    create_namespace(&cluster.direct_client(), &ns).await;
    let wm = Watchmux::start(&cluster, &[]).await;
    let direct = kube_client(&cluster.kubeconfig).await;
    let proxied = kube_client(&wm.kubeconfig).await;

    // All objects with list-then-watch; app=x with a streaming list (watch-list).
    let configs =
        [("all", watcher::Config::default()), ("app=x", watcher::Config::default().labels("app=x").streaming_lists())];
    let mut logs = Vec::new();
    for (name, config) in &configs {
        let (d, d_ready) = record(Api::namespaced(direct.clone(), &ns), config.clone());
        let (p, p_ready) = record(Api::namespaced(proxied.clone(), &ns), config.clone());
        for ready in [d_ready, p_ready] {
            tokio::time::timeout(Duration::from_secs(30), ready).await.expect("initial list").unwrap();
        }
        logs.push((name, d, p));
    }

    let api: Api<ConfigMap> = Api::namespaced(direct.clone(), &ns);
    let pp = PostParams::default();
    for (name, app) in [("a", "x"), ("b", "y"), ("c", "x")] {
        api.create(&pp, &cm(name, app)).await.unwrap();
    }
    let merge = |v: serde_json::Value| Patch::Merge(v);
    api.patch("a", &PatchParams::default(), &merge(serde_json::json!({"data": {"v": "1"}}))).await.unwrap();
    api.patch("a", &PatchParams::default(), &merge(serde_json::json!({"metadata": {"labels": {"app": "y"}}})))
        .await
        .unwrap();
    api.patch("b", &PatchParams::default(), &merge(serde_json::json!({"metadata": {"labels": {"app": "x"}}})))
        .await
        .unwrap();
    api.delete("c", &DeleteParams::default()).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();

    // 3 creates, 3 patches, 2 deletes for "all"; for app=x: a, c added, a
    // modified, a leaves, b enters, c deleted.
    for (name, want) in [("all", 8), ("app=x", 6)] {
        let (_, d, p) = logs.iter().find(|(n, _, _)| **n == name).unwrap();
        for _ in 0..600 {
            if d.lock().len() >= want && p.lock().len() >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (d, p) = (d.lock().clone(), p.lock().clone());
        assert_eq!(d.len(), want, "{name}: direct saw {d:?}");
        assert_eq!(p, d, "{name}: through watchmux differs from direct");
    }
    assert_served_from_cache(&wm).await;
}

/// The watches went to the cache, not through to the API server.
async fn assert_served_from_cache(wm: &Watchmux) {
    let filter = ["resource=\"configmaps\""];
    let delivered = watchmux_metric_sum(wm.admin, "watchmux_watch_cache_deliveries_total", &filter).await;
    assert!(delivered > 0.0, "no event was delivered from the cache");
    let passed = watchmux_metric_sum(wm.admin, "watchmux_passthrough_requests_total", &["verb=\"watch\""]).await;
    assert_eq!(passed, 0.0, "a watch passed through instead of being served from the cache");
}

#[tokio::test]
async fn client_go_informers_see_the_same_events_through_watchmux() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let ns = namespace("client-go-diff");
    let difftest = cluster.watchcheck.with_file_name("difftest");
    for watch_list in ["true", "false"] {
        let ns = format!("{ns}-{watch_list}");
        let out = Command::new(&difftest)
            .env("KUBE_FEATURE_WatchListClient", watch_list)
            .arg("--direct")
            .arg(&cluster.kubeconfig)
            .arg("--proxy")
            .arg(&wm.kubeconfig)
            .args(["--namespace", &ns])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "difftest (watch-list {watch_list}) failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(summary["ok"], true);
        assert_eq!(summary["all"], 10, "{summary}");
    }
    assert_served_from_cache(&wm).await;
}
