//! `kubectl get` from the cache: `meta.k8s.io/v1` Tables for the kinds with
//! a printer (`encode::table`), compared with the real API server's byte for
//! byte (ages and the list's own version masked), and kubectl's output
//! through watchmux with its output straight from the API server.

use http::Request;
use http_body_util::BodyExt;
use serde_json::json;

use super::cache::wait_initialized;
use super::env::*;

/// What kubectl get asks for (k8s.io/kubectl `pkg/cmd/get`).
const KUBECTL_TABLE: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// Ages: `59s`, `3m2s`, `335d`, alone or in a restarts cell's `(… ago)`.
fn age_pattern() -> regex::Regex {
    regex::Regex::new(r"\b\d+[smhdy](\d+[smhdy])?\b").unwrap()
}

/// A body with every age and the Table's own resourceVersion masked; every
/// other byte kept.
fn mask_ages(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let version = regex::Regex::new(
        r#"^(\{"kind":"Table","apiVersion":"meta.k8s.io/v1(beta1)?","metadata":\{"resourceVersion":")\d+"#,
    )
    .unwrap();
    let text = age_pattern().replace_all(&text, "AGE");
    version.replace(&text, "${1}RV").into_owned()
}

/// The rows of a Table body (after its column definitions).
fn rows(body: &str) -> String {
    body.split_once("\"rows\":").map(|(_, rows)| rows.to_owned()).unwrap_or_default()
}

/// kubectl's tables with ages masked and runs of blanks made one (column
/// widths follow the ages' widths).
fn mask_kubectl(out: &str) -> Vec<String> {
    let ages = age_pattern();
    out.lines().map(|line| ages.replace_all(line, "AGE").split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

async fn direct_table(client: &watchmux::upstream::Upstream, path: &str) -> (u16, Option<String>, bytes::Bytes) {
    let req = Request::get(path).header("accept", KUBECTL_TABLE).body(watchmux::body::empty()).unwrap();
    let resp = client.send(req).await.unwrap();
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    (resp.status().as_u16(), content_type, resp.into_body().collect().await.unwrap().to_bytes())
}

async fn via_table(wm: &Watchmux, path: &str) -> (u16, Option<String>, bytes::Bytes) {
    let resp = get_accepting(wm.addr, path, KUBECTL_TABLE).await;
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    let (code, body) = read(resp).await;
    (code, content_type, body)
}

/// kubectl's masked output through watchmux and directly.
fn kubectl_both(cluster: &Cluster, wm: &Watchmux, args: &[&str]) -> (Vec<String>, Vec<String>) {
    let via = wm.kubectl(cluster, args);
    let dir = cluster.kubectl_direct(args);
    assert!(via.ok && dir.ok, "{args:?}: {via:?} {dir:?}");
    (mask_kubectl(&via.stdout), mask_kubectl(&dir.stdout))
}

async fn tables_served(wm: &Watchmux) -> f64 {
    watchmux_metric_sum(wm.admin, "watchmux_cache_table_total", &[]).await
}

#[tokio::test]
async fn tables_from_the_cache_are_the_api_servers_tables() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("tables");
    create_namespace(&direct, &ns).await;
    let base = format!("/api/v1/namespaces/{ns}");
    let labels = json!({"e2e-tables": ns, "tier": "a"});
    for (name, data) in [("empty", json!({})), ("two", json!({"a": "1", "b": "2"}))] {
        let body = json!({"metadata": {"name": name, "labels": labels, "annotations": {"note": "a<b & c>d"}},
            "data": data, "binaryData": {"bin": "AAE="}});
        direct_json(&direct, http::Method::POST, &format!("{base}/configmaps"), body).await;
    }
    // Go escapes <, > and & in strings: cells too.
    for (name, ty) in [("opaque", "Opaque"), ("custom", "example.com/a<b&c")] {
        let body = json!({"metadata": {"name": name, "labels": labels}, "type": ty, "stringData": {"k": "v"}});
        direct_json(&direct, http::Method::POST, &format!("{base}/secrets"), body).await;
    }
    direct_json(&direct, http::Method::POST, &format!("{base}/serviceaccounts"), json!({"metadata": {"name": "sa"}}))
        .await;
    let pod_names = create_pods(&direct, &base, &labels).await;
    create_workloads(&direct, &ns, &labels).await;
    create_jobs_and_services(&direct, &ns).await;
    let nodes = create_nodes(&direct, &ns, &labels).await;
    let wm = Watchmux::start(
        &cluster,
        &[
            "--cache-resources",
            "configmaps,secrets,serviceaccounts,namespaces,pods,deployments,replicasets,statefulsets,daemonsets,jobs,services,nodes",
            "--cache-warm",
        ],
    )
    .await;
    for resource in ["configmaps", "secrets", "serviceaccounts", "namespaces", "pods", "deployments.apps"] {
        wait_initialized(wm.admin, resource, 1.0).await;
    }

    // The raw Tables, each includeObject form, LIST and GET.
    let before = tables_served(&wm).await;
    let mut paths = Vec::new();
    for include in ["", "&includeObject=None", "&includeObject=Metadata", "&includeObject=Object"] {
        for resource in ["configmaps", "secrets", "serviceaccounts", "pods"] {
            paths.push(format!("{base}/{resource}?resourceVersion=0{include}"));
        }
        for pod in &pod_names {
            paths.push(format!("{base}/pods/{pod}?resourceVersion=0{include}"));
        }
        paths.push(format!("{base}/services?resourceVersion=0{include}"));
        paths.push(format!("/api/v1/nodes?resourceVersion=0&labelSelector=e2e-tables%3D{ns}{include}"));
        paths.push(format!("/api/v1/nodes/{}?resourceVersion=0{include}", nodes[0]));
        paths.push(format!("/apis/batch/v1/namespaces/{ns}/jobs?resourceVersion=0{include}"));
        for resource in WORKLOADS {
            paths.push(format!("/apis/apps/v1/namespaces/{ns}/{resource}?resourceVersion=0{include}"));
            paths.push(format!("/apis/apps/v1/namespaces/{ns}/{resource}/w?resourceVersion=0{include}"));
        }
        paths.push(format!("{base}/configmaps/two?resourceVersion=0{include}"));
        paths.push(format!("/api/v1/namespaces/{ns}?resourceVersion=0{include}"));
    }
    for path in &paths {
        let (vc, vt, vb) = via_table(&wm, path).await;
        let (dc, dt, db) = direct_table(&direct, path).await;
        assert_eq!((vc, &vt), (dc, &dt), "{path}");
        assert_eq!(vc, 200, "{path}: {}", String::from_utf8_lossy(&vb));
        let (v, d) = (mask_ages(&vb), mask_ages(&db));
        // The rows first: the column definitions make a long message.
        assert_eq!(rows(&v), rows(&d), "{path}: rows");
        assert_eq!(v, d, "{path}");
    }
    let served = tables_served(&wm).await - before;
    assert_eq!(served, paths.len() as f64, "every Table above came from the cache");

    // `meta.k8s.io/v1beta1` Tables, which the API server still serves: the
    // same rows, the version in the Table and in its metadata rows.
    let before = tables_served(&wm).await;
    let v1beta1 = "application/json;as=Table;g=meta.k8s.io;v=v1beta1";
    let beta_paths: Vec<&String> = paths.iter().filter(|p| !p.contains("includeObject=None")).step_by(3).collect();
    for path in &beta_paths {
        let via = get_accepting(wm.addr, path, v1beta1).await;
        let req = Request::get(path.as_str()).header("accept", v1beta1).body(watchmux::body::empty()).unwrap();
        let dir = direct.send(req).await.unwrap();
        let (vt, dt) = (via.headers().get("content-type").cloned(), dir.headers().get("content-type").cloned());
        let ((vc, vb), (dc, db)) = (read(via).await, read(dir).await);
        assert_eq!((vc, vt), (dc, dt), "{path}");
        assert!(String::from_utf8_lossy(&db).starts_with(r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1beta1""#));
        assert_eq!(mask_ages(&vb), mask_ages(&db), "{path} in v1beta1");
    }
    assert_eq!(tables_served(&wm).await - before, beta_paths.len() as f64, "v1beta1 Tables from the cache");

    // A missing object: the API server's 404 Status, as for JSON.
    let missing = format!("{base}/configmaps/missing?resourceVersion=0");
    let (via, dir) = (via_table(&wm, &missing).await, direct_table(&direct, &missing).await);
    assert_eq!(via.0, 404);
    assert_eq!(via, dir, "{missing}");

    // Pages of two rows at a version both servers hold (the last pod's
    // write), walked with each server's own continue token: the same rows
    // and remainingItemCount on every page, each page from the cache.
    let (_, pods) = get_direct(&direct, &format!("{base}/pods")).await;
    let pods: serde_json::Value = serde_json::from_slice(&pods).unwrap();
    let written = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["resourceVersion"].as_str()?.parse::<u64>().ok())
        .max()
        .unwrap();
    let first = format!("{base}/pods?resourceVersion={written}&resourceVersionMatch=NotOlderThan&limit=2");
    let (mut via_next, mut dir_next) = (first.clone(), first);
    let before = tables_served(&wm).await;
    let mut pages = 0;
    loop {
        pages += 1;
        let ((vc, _, vb), (dc, _, db)) = (via_table(&wm, &via_next).await, direct_table(&direct, &dir_next).await);
        assert_eq!((vc, dc), (200, 200), "{via_next}: {}", String::from_utf8_lossy(&vb));
        assert_eq!(rows(&mask_ages(&vb)), rows(&mask_ages(&db)), "page {pages}");
        let (v, d): (serde_json::Value, serde_json::Value) =
            (serde_json::from_slice(&vb).unwrap(), serde_json::from_slice(&db).unwrap());
        assert_eq!(v["metadata"]["remainingItemCount"], d["metadata"]["remainingItemCount"], "page {pages}");
        let next = |token: &str| {
            format!(
                "{base}/pods?limit=2&continue={}",
                form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>()
            )
        };
        match (v["metadata"]["continue"].as_str(), d["metadata"]["continue"].as_str()) {
            (Some(via), Some(dir)) => (via_next, dir_next) = (next(via), next(dir)),
            (None, None) => break,
            other => panic!("page {pages}: continue tokens {other:?}"),
        }
    }
    assert_eq!(pages, 3, "five pods, two a page");
    assert_eq!(tables_served(&wm).await - before, 3.0, "every page from the cache");

    // kubectl get, through watchmux and directly.
    let selector = format!("e2e-tables={ns}");
    let lists: Vec<Vec<String>> = vec![
        vec!["get".into(), "configmaps".into(), "-n".into(), ns.clone()],
        vec!["get".into(), "secrets".into(), "-n".into(), ns.clone(), "--show-labels".into()],
        vec!["get".into(), "configmaps,secrets".into(), "-A".into(), "-l".into(), selector.clone()],
        vec!["get".into(), "secrets".into(), "-n".into(), ns.clone(), "-o".into(), "wide".into()],
        vec!["get".into(), "serviceaccounts".into(), "-n".into(), ns.clone()],
        vec!["get".into(), "pods".into(), "-n".into(), ns.clone()],
        vec!["get".into(), "pods".into(), "-n".into(), ns.clone(), "-o".into(), "wide".into()],
        vec!["get".into(), "pods".into(), "-A".into(), "-l".into(), selector.clone(), "--show-labels".into()],
        vec!["get".into(), "deployments,replicasets,statefulsets,daemonsets".into(), "-n".into(), ns.clone()],
        vec!["get".into(), "deploy,rs,sts,ds".into(), "-n".into(), ns.clone(), "-o".into(), "wide".into()],
        vec!["get".into(), "services,jobs".into(), "-n".into(), ns.clone(), "-o".into(), "wide".into()],
        vec!["get".into(), "nodes".into(), "-l".into(), selector.clone()],
        vec!["get".into(), "nodes".into(), "-l".into(), selector.clone(), "-o".into(), "wide".into()],
    ];
    for args in &lists {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // A consistent LIST is served once the cache is proven current (the
        // catch-up after another test's write takes a second or two, and a
        // cluster busier than that is left alone for 10 s): tries for 20 s,
        // each compared with the API server's output.
        let mut from_cache = false;
        for _ in 0..40 {
            let before = tables_served(&wm).await;
            let (via, dir) = kubectl_both(&cluster, &wm, &args);
            assert_eq!(via, dir, "kubectl {args:?}");
            if tables_served(&wm).await > before {
                from_cache = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        assert!(from_cache, "kubectl {args:?} was never answered from the cache");
    }
    // A named get has no version: a consistent GET, which passes through
    // (`consistent_get`) for every content type; the output is the same.
    for args in [vec!["get", "configmap", "two", "-n", &ns], vec!["get", "namespace", &ns]] {
        let (via, dir) = kubectl_both(&cluster, &wm, &args);
        assert_eq!(via, dir, "kubectl {args:?}");
    }
    for node in &nodes {
        direct_json(&direct, http::Method::DELETE, &format!("/api/v1/nodes/{node}"), serde_json::Value::Null).await;
    }
    // Let the held pod go.
    let release = json!({"metadata": {"finalizers": null}});
    direct_json(&direct, http::Method::PATCH, &format!("{base}/pods/terminating"), release).await;
}

/// Pods in the states `printPod` words differently, their statuses written
/// through the status subresource (no kubelet runs here); returns their names.
async fn create_pods(direct: &watchmux::upstream::Upstream, base: &str, labels: &serde_json::Value) -> Vec<String> {
    let finished = "2026-01-01T00:00:00Z";
    let restarted = json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished,
        "startedAt": finished}});
    let pods = [
        ("pending", json!({}), json!({"nominatedNodeName": "n2"})),
        (
            "running",
            json!({"readinessGates": [{"conditionType": "example.com/gate"}]}),
            json!({
            "phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/gate", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 3, "image": "x", "imageID": "", "started": true,
                 "state": {"running": {"startedAt": finished}}, "lastState": restarted},
                {"name": "b", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        ),
        (
            "init",
            json!({"initContainers": [{"name": "i0", "image": "x"}, {"name": "i1", "image": "x"}]}),
            json!({
            "phase": "Pending",
            "initContainerStatuses": [
                {"name": "i0", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"terminated": {"exitCode": 0, "startedAt": finished, "finishedAt": finished}}},
                {"name": "i1", "ready": false, "restartCount": 2, "image": "x", "imageID": "",
                 "state": {"waiting": {"reason": "ImagePullBackOff"}}, "lastState": restarted}]}),
        ),
        (
            "succeeded",
            json!({}),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": finished, "finishedAt": finished}}},
                {"name": "b", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": finished, "finishedAt": finished}}}]}),
        ),
        ("terminating", json!({}), json!({"phase": "Running"})),
    ];
    let mut names = Vec::new();
    for (name, extra, status) in pods {
        let mut spec =
            json!({"nodeName": "n1", "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]});
        if name == "pending" {
            spec = json!({"containers": [{"name": "a", "image": "x"}]});
        }
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let mut metadata = json!({"name": name, "labels": labels});
        if name == "terminating" {
            metadata["finalizers"] = json!(["example.com/hold"]);
        }
        direct_json(direct, http::Method::POST, &format!("{base}/pods"), json!({"metadata": metadata, "spec": spec}))
            .await;
        if !status.is_null() {
            let path = format!("{base}/pods/{name}/status");
            direct_json(direct, http::Method::PATCH, &path, json!({"status": status})).await;
        }
        names.push(name.to_owned());
    }
    direct_json(direct, http::Method::DELETE, &format!("{base}/pods/terminating"), serde_json::Value::Null).await;
    names
}

/// The apps/v1 workloads printed here, one named `w` of each in the namespace.
const WORKLOADS: [&str; 4] = ["deployments", "replicasets", "statefulsets", "daemonsets"];

/// One of each workload (no controllers run here: their statuses are
/// written through the status subresource), with selectors of every
/// operator, two containers and a node selector.
async fn create_workloads(direct: &watchmux::upstream::Upstream, ns: &str, labels: &serde_json::Value) {
    let selector = json!({"matchLabels": {"app": "w", "a-b": "1"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["b", "a"]},
        {"key": "zone", "operator": "NotIn", "values": ["z"]},
        {"key": "app", "operator": "Exists"},
        {"key": "old", "operator": "DoesNotExist"}]});
    let template = json!({"metadata": {"labels": {"app": "w", "a-b": "1", "tier": "a"}}, "spec": {
        "nodeSelector": {"disk": "ssd", "a-b": "x"},
        "containers": [{"name": "web", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]}});
    let statuses = [
        ("deployments", json!({"replicas": 3, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1})),
        ("replicasets", json!({"replicas": 2, "readyReplicas": 1})),
        ("statefulsets", json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2})),
        (
            "daemonsets",
            json!({"desiredNumberScheduled": 4, "currentNumberScheduled": 3, "numberReady": 2,
            "updatedNumberScheduled": 1, "numberAvailable": 1, "numberMisscheduled": 0}),
        ),
    ];
    for (resource, status) in statuses {
        let mut spec = json!({"selector": selector, "template": template});
        if resource != "daemonsets" {
            spec["replicas"] = json!(3);
        }
        if resource == "statefulsets" {
            spec["serviceName"] = json!("w");
        }
        let base = format!("/apis/apps/v1/namespaces/{ns}/{resource}");
        let body = json!({"metadata": {"name": "w", "labels": labels}, "spec": spec});
        direct_json(direct, http::Method::POST, &base, body).await;
        direct_json(direct, http::Method::PATCH, &format!("{base}/w/status"), json!({"status": status})).await;
    }
}

/// Jobs (one running with a start time, one never started) and Services of
/// each type, a load balancer with an address in its status.
async fn create_jobs_and_services(direct: &watchmux::upstream::Upstream, ns: &str) {
    let template = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    let jobs = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    let started =
        json!({"metadata": {"name": "started"}, "spec": {"completions": 2, "parallelism": 2, "template": template}});
    direct_json(direct, http::Method::POST, &jobs, started).await;
    let status = json!({"status": {"startTime": "2026-01-01T00:00:00Z", "active": 2}});
    direct_json(direct, http::Method::PATCH, &format!("{jobs}/started/status"), status).await;
    let waiting = json!({"metadata": {"name": "waiting"}, "spec": {"parallelism": 3, "template": template}});
    direct_json(direct, http::Method::POST, &jobs, waiting).await;

    let services = format!("/api/v1/namespaces/{ns}/services");
    let port = json!([{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}]);
    for (name, spec) in [
        ("cluster", json!({"selector": {"app": "w", "a-b": "1"}, "ports": port})),
        ("headless", json!({"clusterIP": "None", "ports": port})),
        ("node", json!({"type": "NodePort", "externalIPs": ["192.0.2.1"], "ports": port})),
        ("balancer", json!({"type": "LoadBalancer", "externalIPs": ["192.0.2.2"], "ports": port})),
        ("external", json!({"type": "ExternalName", "externalName": "db.example.com"})),
    ] {
        direct_json(direct, http::Method::POST, &services, json!({"metadata": {"name": name}, "spec": spec})).await;
    }
    let ingress =
        json!({"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "192.0.2.9"}]}}});
    direct_json(direct, http::Method::PATCH, &format!("{services}/balancer/status"), ingress).await;
}

/// Two nodes (cluster-scoped, so named after the test's namespace): a ready
/// control-plane node with addresses and node info, and a cordoned one that
/// never reported; returns their names.
async fn create_nodes(direct: &watchmux::upstream::Upstream, ns: &str, labels: &serde_json::Value) -> Vec<String> {
    let ready = format!("{ns}-ready");
    let cordoned = format!("{ns}-cordoned");
    let mut role_labels = labels.clone();
    role_labels["node-role.kubernetes.io/control-plane"] = json!("");
    role_labels["kubernetes.io/role"] = json!("infra");
    let body = json!({"metadata": {"name": ready, "labels": role_labels}});
    direct_json(direct, http::Method::POST, "/api/v1/nodes", body).await;
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "addresses": [{"type": "InternalIP", "address": "10.2.0.1"}, {"type": "ExternalIP", "address": "203.0.113.1"},
            {"type": "Hostname", "address": ready}],
        "nodeInfo": {"kubeletVersion": "v1.37.2", "osImage": "Debian GNU/Linux 13", "kernelVersion": "6.12.0",
            "architecture": "amd64", "containerRuntimeVersion": "containerd://2.1.0", "machineID": "", "systemUUID": "",
            "bootID": "", "kubeProxyVersion": "", "operatingSystem": "linux"}}});
    direct_json(direct, http::Method::PATCH, &format!("/api/v1/nodes/{ready}/status"), status).await;
    let body = json!({"metadata": {"name": cordoned, "labels": labels}, "spec": {"unschedulable": true}});
    direct_json(direct, http::Method::POST, "/api/v1/nodes", body).await;
    vec![ready, cordoned]
}
