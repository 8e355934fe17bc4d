//! End-to-end tests: real clients (kubectl, a client-go informer program)
//! through a watchmux binary in front of a real kube-apiserver with etcd.
//!
//! Run with `make test-e2e` (part of `make test`), which builds and starts
//! the API server on loopback and sets the environment `env.rs` reads.

mod adversarial;
mod auth;
mod backfill;
mod cache;
mod capacity;
mod cbor;
mod cert_rotation;
mod compression;
#[cfg(feature = "fault-injection")]
mod consistency_check;
mod consistent_latency;
mod crd_lifecycle;
mod differential;
mod env;
mod exec_plugin;
mod fairness;
mod new_cluster;
mod operator;
mod persist;
#[path = "../ports.rs"]
mod ports;
mod protobuf;
mod relay;
mod relist_gap;
mod resource_versions;
mod several_servers;
mod shared_answers;
mod slow_watchers;
mod tables;
mod tables_crd;
mod tables_watch;
mod tls_openings;
mod trust_boundary;
mod warnings;
mod wire_bytes;
mod x509_identity;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use env::*;
use serde_json::Value;

const EVENT_WAIT: Duration = Duration::from_secs(20);

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test]
async fn kubectl_create_get_list_patch_delete_through_watchmux() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let ns = namespace("crud");

    let out = wm.kubectl(&cluster, &["create", "namespace", &ns]);
    assert!(out.ok, "{out:?}");
    let out = wm.kubectl(&cluster, &["create", "configmap", "cm1", "-n", &ns, "--from-literal=a=1"]);
    assert!(out.ok, "{out:?}");

    // GET: the same object through watchmux as from the API server.
    let via = wm.kubectl(&cluster, &["get", "configmap", "cm1", "-n", &ns, "-o", "json"]);
    let direct = cluster.kubectl_direct(&["get", "configmap", "cm1", "-n", &ns, "-o", "json"]);
    assert!(via.ok && direct.ok, "{via:?} {direct:?}");
    assert_eq!(json(&via.stdout), json(&direct.stdout));
    assert_eq!(json(&via.stdout)["data"]["a"], "1");

    // LIST: the same items (the list's own resourceVersion moves with any
    // write in the cluster, so it is not compared).
    let via = wm.kubectl(&cluster, &["get", "configmaps", "-n", &ns, "-o", "json"]);
    let direct = cluster.kubectl_direct(&["get", "configmaps", "-n", &ns, "-o", "json"]);
    assert_eq!(json(&via.stdout)["items"], json(&direct.stdout)["items"]);
    let names: Vec<_> =
        json(&via.stdout)["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].clone()).collect();
    assert!(names.contains(&Value::from("cm1")), "{names:?}");

    // PATCH through watchmux, observed directly.
    let out = wm.kubectl(&cluster, &["patch", "configmap", "cm1", "-n", &ns, "-p", r#"{"data":{"a":"2"}}"#]);
    assert!(out.ok, "{out:?}");
    let direct = cluster.kubectl_direct(&["get", "configmap", "cm1", "-n", &ns, "-o", "jsonpath={.data.a}"]);
    assert_eq!(direct.stdout, "2");

    // DELETE through watchmux, observed directly.
    let out = wm.kubectl(&cluster, &["delete", "configmap", "cm1", "-n", &ns]);
    assert!(out.ok, "{out:?}");
    let gone = cluster.kubectl_direct(&["get", "configmap", "cm1", "-n", &ns]);
    assert!(!gone.ok && gone.stderr.contains("NotFound"), "{gone:?}");

    // Namespaces themselves (no controller-manager runs, so it stays Terminating).
    let out = wm.kubectl(&cluster, &["delete", "namespace", &ns, "--wait=false"]);
    assert!(out.ok, "{out:?}");
}

/// `kubectl get -w` through watchmux prints each change while the watch is
/// open, as it happens.
#[tokio::test]
async fn kubectl_watch_streams_events_as_they_happen() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let ns = namespace("watch");
    assert!(cluster.kubectl_direct(&["create", "namespace", &ns]).ok);

    let mut child = Command::new(&cluster.kubectl)
        .arg("--kubeconfig")
        .arg(&wm.kubeconfig)
        .args(["get", "configmaps", "-n", &ns, "-w", "--output-watch-events", "--no-headers"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });

    // The namespace starts empty (no controller manager creates
    // kube-root-ca.crt here), so every line is one of our changes. The first
    // create may land before the watch starts; it then arrives in the
    // initial list, as ADDED all the same.
    for name in ["marker", "cm-a", "cm-b", "cm-c"] {
        let out = cluster.kubectl_direct(&["create", "configmap", name, "-n", &ns]);
        assert!(out.ok, "{out:?}");
        let line = lines.recv_timeout(EVENT_WAIT).unwrap_or_else(|_| panic!("no event for {name}"));
        // Table rows: EVENT NAME DATA AGE.
        assert_eq!(line.split_whitespace().take(2).collect::<Vec<_>>(), ["ADDED", name], "{line}");
    }
    let out = cluster.kubectl_direct(&["delete", "configmap", "cm-b", "-n", &ns]);
    assert!(out.ok, "{out:?}");
    let line = lines.recv_timeout(EVENT_WAIT).expect("no DELETED event");
    assert_eq!(line.split_whitespace().take(2).collect::<Vec<_>>(), ["DELETED", "cm-b"], "{line}");

    let _ = child.kill();
    let _ = child.wait();
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A client-go SharedInformer lists and watches through watchmux and sees
/// every add, update and delete, in order.
#[tokio::test]
async fn client_go_informer_lists_and_watches_through_watchmux() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let ns = namespace("informer");
    run_watchcheck(&cluster, &wm, &ns, "true");

    let list = Command::new(&cluster.watchcheck)
        .arg("--kubeconfig")
        .arg(&wm.kubeconfig)
        .args(["--namespace", "kube-system", "--list-only"])
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// Errors are the API server's own: same code, same Status body.
#[tokio::test]
async fn unknown_paths_get_the_same_answer_as_from_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let direct = cluster.direct_client();
    for path in [
        "/apis/nope.example.com/v1/things",
        "/api/v1/namespaces/default/configmaps/does-not-exist",
        "/api/v1/nosuchresource",
        "/definitely/not/a/path",
        "/api/v1/namespaces/default/configmaps?resourceVersion=abc&resourceVersionMatch=Exact",
    ] {
        let (via_code, via_body) = read(get(wm.addr, path).await).await;
        let (direct_code, direct_body) = get_direct(&direct, path).await;
        assert_eq!(via_code, direct_code, "{path}");
        assert_eq!(via_body, direct_body, "{path}");
        assert!(via_code >= 400, "{path} answered {via_code}");
    }
}

/// SIGTERM ends an open watch cleanly and the process exits promptly, well
/// inside its grace period.
#[tokio::test]
async fn sigterm_ends_open_watches_and_exits_cleanly() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let mut wm = Watchmux::start(&cluster, &["--shutdown-grace", "60s"]).await;
    let path = "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=300";
    let resp = get(wm.addr, path).await;
    assert_eq!(resp.status(), 200);
    // Whatever the API server calls the stream (it answers a watch without an
    // Accept header as plain application/json), the client sees the same.
    let direct =
        cluster.direct_client().send(http::Request::get(path).body(watchmux::body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.headers()["content-type"], direct.headers()["content-type"]);
    drop(direct);
    let body = tokio::spawn(async move { http_body_util::BodyExt::collect(resp.into_body()).await.map(|_| ()) });

    let status = tokio::task::spawn_blocking(move || {
        let s = wm.terminate();
        (s, wm)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "watchmux exited with {:?}; log:\n{}", status.0, status.1.log());
    let ended = tokio::time::timeout(Duration::from_secs(10), body).await.expect("watch did not end").unwrap();
    assert!(ended.is_ok(), "watch ended with an error instead of a clean end: {ended:?}");
}

/// What passed through and what the cache answered are counted on the admin port.
#[tokio::test]
async fn passthrough_and_cache_are_counted_in_metrics() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    // Secrets are not cached by default: this LIST passes through.
    let (code, _) = read(get(wm.addr, "/api/v1/namespaces/default/secrets").await).await;
    assert_eq!(code, 200);
    // ConfigMaps are: this LIST (at any version: a consistent one may pass
    // through while the cache is behind) is answered from the cache, and so
    // is this watch (timed and measured to its headers, not its second of life).
    let (code, _) = read(get(wm.addr, "/api/v1/namespaces/default/configmaps?resourceVersion=0").await).await;
    assert_eq!(code, 200);
    let (code, _) = read(get(wm.addr, "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1").await).await;
    assert_eq!(code, 200);
    // A resource no API server serves: its name must never become a label.
    let (code, _) = read(get(wm.addr, "/api/v1/namespaces/default/no-such-thing-4f2a").await).await;
    assert_eq!(code, 404);
    let (code, metrics) = read(get(wm.admin, "/metrics").await).await;
    assert_eq!(code, 200);
    let text = String::from_utf8_lossy(&metrics);
    let has = |name: &str, labels: &[&str], value: &str| {
        text.lines()
            .any(|l| l.starts_with(name) && labels.iter().all(|f| l.contains(f)) && l.ends_with(&format!(" {value}")))
    };
    let passed = ["verb=\"list\"", "resource=\"secrets\"", "code=\"200\""];
    assert!(has("watchmux_passthrough_requests_total{", &passed, "1"), "{text}");
    let unknown = ["verb=\"list\"", "resource=\"other\"", "code=\"404\""];
    assert!(has("watchmux_passthrough_requests_total{", &unknown, "1"), "{text}");
    assert!(!text.contains("no-such-thing"), "{text}");
    assert!(has("watchmux_cache_list_total{", &["resource=\"configmaps\""], "1"), "{text}");
    assert!(has("watchmux_cache_watch_total{", &["resource=\"configmaps\""], "1"), "{text}");
    for verb in ["list", "watch"] {
        let labels = [&format!("verb=\"{verb}\"") as &str, "resource=\"configmaps\""];
        assert!(has("watchmux_cache_request_duration_seconds_count{", &labels, "1"), "{text}");
    }
    // The watch's headers came at once: well inside its one-second life.
    let watch_seconds = sample(&text, "watchmux_cache_request_duration_seconds_sum{verb=\"watch\"");
    assert!(watch_seconds < 0.9, "{watch_seconds}\n{text}");
    // The secrets LIST and the unknown resource.
    assert!(has("watchmux_cache_passthrough_total{", &["reason=\"not_cached\""], "2"), "{text}");
    assert!(text.contains("watchmux_upstream_ready 1"), "{text}");

    let build = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(has("watchmux_build_info{", &[&build, "revision=\"", "rustc_version=\"1.", "allocator=\""], "1"), "{text}");
    // The standard process metrics, with values a live process has.
    let resident = sample(&text, "process_resident_memory_bytes");
    assert!(resident > 1e6 && sample(&text, "process_virtual_memory_bytes") >= resident, "{text}");
    assert!(sample(&text, "process_cpu_seconds_total") > 0.0, "{text}");
    let fds = sample(&text, "process_open_fds");
    assert!(fds >= 3.0 && fds < sample(&text, "process_max_fds"), "{text}");
    assert!(sample(&text, "process_threads") >= 2.0, "{text}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = sample(&text, "process_start_time_seconds");
    assert!(started <= now + 1.0 && started > now - 600.0, "started {started}, now {now}");
    assert!(text.contains("# TYPE process_cpu_seconds_total counter"), "{text}");
}

/// The value of the first sample whose line starts with `prefix` (a name,
/// or a name and the start of its labels).
fn sample(text: &str, prefix: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with([' ', '{', ',']))
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// client-go's informers without watch-list (LIST at RV 0 then WATCH), the
/// path older clients and the kubelet's typed informers take.
#[tokio::test]
async fn client_go_informer_without_watch_list_through_watchmux() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let ns = namespace("informer-legacy");
    run_watchcheck(&cluster, &wm, &ns, "false");
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// Runs the client-go informer check through `wm` and asserts it saw every
/// add, update and delete it made.
fn run_watchcheck(cluster: &Cluster, wm: &Watchmux, ns: &str, watch_list: &str) {
    let out = Command::new(&cluster.watchcheck)
        .env("KUBE_FEATURE_WatchListClient", watch_list)
        .arg("--kubeconfig")
        .arg(&wm.kubeconfig)
        .args(["--namespace", ns, "--count", "25"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "watchcheck failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary = json(stdout.lines().last().unwrap());
    assert_eq!(summary["ok"], true);
    assert_eq!((&summary["adds"], &summary["updates"], &summary["deletes"]), (&25.into(), &25.into(), &25.into()));
}

/// More pass-through watches than kube-apiserver allows streams on one
/// HTTP/2 connection (100): every one is answered and streams.
#[tokio::test]
async fn pass_through_watches_are_not_limited_by_upstream_http2_streams() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    // Secrets are not cached by default: these watches pass through.
    let wm = Watchmux::start(&cluster, &[]).await;
    let ns = namespace("many-watches");
    let direct = cluster.direct_client();
    create_namespace(&direct, &ns).await;
    let mut bodies = Vec::new();
    for _ in 0..150 {
        let resp = tokio::time::timeout(
            Duration::from_secs(10),
            get(wm.addr, &format!("/api/v1/namespaces/{ns}/secrets?watch=1&resourceVersion=0")),
        )
        .await
        .expect("a pass-through watch was not answered");
        assert_eq!(resp.status(), 200);
        bodies.push(resp.into_body());
    }
    let secret = serde_json::json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
    direct_json(&direct, http::Method::POST, &format!("/api/v1/namespaces/{ns}/secrets"), secret).await;
    for (i, body) in bodies.iter_mut().enumerate() {
        let frame = tokio::time::timeout(Duration::from_secs(10), http_body_util::BodyExt::frame(body))
            .await
            .unwrap_or_else(|_| panic!("watch {i} got no event"));
        assert!(frame.is_some(), "watch {i} ended");
    }
}
