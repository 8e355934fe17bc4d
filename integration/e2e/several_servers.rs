//! Several kube-apiservers on one etcd behind one watchmux
//! (`--upstream-servers`), as a control plane without a load balancer
//! runs them: the API server carrying the caches' watches is killed, and
//! every watcher gets the next change on the stream it has, with no relist,
//! while `/readyz` stays ready and reports the dead endpoint.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::env::*;

/// Ports of the extra API servers: the test cluster's port plus these.
const EXTRA_PORT_OFFSETS: [u16; 2] = [100, 101];

/// An extra kube-apiserver of the test cluster, on `port`, killed when dropped.
struct ExtraApiServer {
    port: u16,
}

impl ExtraApiServer {
    fn start(port: u16) -> Self {
        let script = std::env::var("WATCHMUX_E2E_CLUSTER_UP").expect("WATCHMUX_E2E_CLUSTER_UP");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .args(["--extra-apiserver", &port.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Self { port }
    }

    fn pidfile(&self) -> std::path::PathBuf {
        let script = std::path::PathBuf::from(std::env::var("WATCHMUX_E2E_CLUSTER_UP").unwrap());
        let root = script.ancestors().nth(3).unwrap().to_owned();
        root.join(format!(".run/cluster/apiserver-{}.pid", self.port))
    }

    fn kill(&self) {
        let pid = std::fs::read_to_string(self.pidfile()).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<i32>() {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = std::fs::remove_file(self.pidfile());
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for ExtraApiServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The next event about `name` on each watch, and when the last came.
async fn all_see(watchers: &mut [mpsc::UnboundedReceiver<Option<Seen>>], name: &str) {
    for rx in watchers {
        loop {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some(Some(seen))) if seen.name == name => break,
                Ok(Some(Some(_))) => {}
                Ok(Some(None)) | Ok(None) => panic!("a watch ended before {name}: a downstream watch broke"),
                Err(_) => panic!("no {name} within 30 s"),
            }
        }
    }
}

#[tokio::test]
async fn the_api_server_carrying_the_watches_is_killed_and_no_watcher_notices() {
    // Alone: it starts and kills API servers of the shared cluster's etcd.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let main_port = cluster.api_addr().port();
    let [first, last] = EXTRA_PORT_OFFSETS.map(|o| ExtraApiServer::start(main_port + o));
    // The first listed carries watchmux's own requests; the others are
    // the kubeconfig's server and another extra one.
    let servers = format!("{},https://127.0.0.1:{main_port},{}", first.url(), last.url());
    let wm = Watchmux::start(&cluster, &["--upstream-servers", &servers, "--cache-resources", "configmaps"]).await;
    let ns = namespace("several-servers");
    create_namespace(&direct, &ns).await;

    // Watchers from the cache's current version, as informers after their list.
    let (code, body) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0")).await).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let rv = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true");
    let mut watchers = Vec::new();
    for _ in 0..20 {
        let resp = get(wm.addr, &path).await;
        assert_eq!(resp.status(), 200);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(pump_watch(resp, tx));
        watchers.push(rx);
    }
    configmap(&direct, "create", &ns, "before").await;
    all_see(&mut watchers, "before").await;
    let relists = || watchmux_metric_sum(wm.admin, "watchmux_upstream_relists_total", &[]);
    let relists_before = relists().await;

    // The API server carrying the caches' watches dies; a change is made
    // through another at once.
    first.kill();
    let killed = Instant::now();
    configmap(&direct, "create", &ns, "after").await;
    all_see(&mut watchers, "after").await;
    let moved = killed.elapsed();
    eprintln!("every watcher had the change {moved:?} after its API server was killed");
    assert!(moved < Duration::from_secs(5), "watchers waited {moved:?}");
    assert_eq!(relists().await, relists_before, "the caches relisted instead of resuming");

    // /readyz stays ready and names the dead endpoint; its gauge says so
    // once it is probed.
    let gauge = format!("endpoint=\"{}/\"", first.url());
    let verbose = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let (code, body) = read(get(wm.admin, "/readyz/upstream?verbose").await).await;
            let body = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(code, 200, "{body}");
            let probed_down = watchmux_metric_sum(wm.admin, "watchmux_upstream_endpoint_ready", &[&gauge]).await == 0.0;
            if body.contains(&format!("{}/ not ready", first.url())) && probed_down {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(250)).await; // the probe runs every 5 s: no event to await
        }
    })
    .await
    .expect("/readyz/upstream and watchmux_upstream_endpoint_ready never reported the killed endpoint");
    assert!(verbose.contains(&format!("https://127.0.0.1:{main_port}/ ready (watchmux's own requests)")), "{verbose}");

    // Clients' own requests (spread over the endpoints) keep succeeding:
    // a dial to the dead one moves on to the next.
    for i in 0..6 {
        let (code, _) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/secrets?i={i}")).await).await;
        assert_eq!(code, 200, "pass-through request {i}");
    }
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
    drop(last);
}
