//! Protobuf from the cache against kube-apiserver's own protobuf: real
//! objects of many kinds, read with the kubelet's Accept header (and the
//! metadata client's) through watchmux and straight at the API server. GET
//! bodies and watch frames must be the same bytes; LIST bodies (at any
//! version) the same bytes but for the list's resourceVersion (each server's
//! own), whose items are compared byte for byte. Every answer must have come from the cache (its metrics), and
//! client-go's typed informer (protobuf by default) runs through it. Watch
//! events that cannot be byte-identical (a watch-list's bookmark, a 410's
//! message, each naming its server's own version) are decoded with client-go's
//! own decoder (`pbcheck decode`) and compared as objects; a client-go
//! metadata informer through the cache sees the API server's sequence
//! (`pbcheck metadata`). CSRs awaiting a certificate show why they have no
//! protobuf form here.

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;

use super::cache::wait_initialized;
use super::env::*;

/// The kubelet's and every typed clientset's Accept header.
const KUBELET: &str = "application/vnd.kubernetes.protobuf,application/json";
/// client-go's metadata client, LIST.
const METADATA_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                             application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const GROUP: &str = "pbe2e.example.com";

fn objects(ns: &str, node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: cm1, namespace: {ns}, labels: {{b: "2", a: "1"}}, annotations: {{note: "<x> & y"}}}}
data: {{"k": "v&<", empty: ""}}
binaryData: {{bin: AAEC}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: cm2, namespace: {ns}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: s1, namespace: {ns}}}
type: Opaque
data: {{a: aGVsbG8=, e: ""}}
immutable: false
---
apiVersion: v1
kind: Pod
metadata: {{name: p1, namespace: {ns}, labels: {{app: x}}}}
spec:
  priority: 0
  volumes:
  - {{name: v, configMap: {{name: cm1, defaultMode: 420}}}}
  - {{name: e, emptyDir: {{sizeLimit: 1Mi}}}}
  - {{name: pr, projected: {{sources: [{{configMap: {{name: cm1, items: [{{key: k, path: k, mode: 256}}]}}}}]}}}}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{{matchExpressions: [{{key: k, operator: In, values: [a, b]}}]}}]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        podAffinityTerm: {{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: x}}}}}}
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "sleep 1"]
    env: [{{name: A, value: "1"}}, {{name: B, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
    ports: [{{containerPort: 80, name: http}}]
    resources: {{limits: {{cpu: 500m, memory: 1Gi}}, requests: {{cpu: "0.5", memory: 100Mi}}}}
    livenessProbe: {{httpGet: {{path: /, port: http}}, periodSeconds: 10, initialDelaySeconds: 3}}
    readinessProbe: {{exec: {{command: ["true"]}}, failureThreshold: 5}}
    startupProbe: {{tcpSocket: {{port: 80}}}}
    securityContext: {{runAsUser: 1000, allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
  tolerations: [{{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}}]
  securityContext: {{supplementalGroups: [1, 2], fsGroup: 3}}
---
apiVersion: v1
kind: Service
metadata: {{name: svc1, namespace: {ns}}}
spec:
  selector: {{app: x}}
  ports: [{{name: http, port: 80, targetPort: http}}, {{name: "n", port: 81, targetPort: 8081}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: es1, namespace: {ns}, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: IPv4
endpoints:
- addresses: [10.0.0.1]
  conditions: {{ready: true, serving: true, terminating: false}}
  nodeName: n1
ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {{name: l1, namespace: {ns}}}
spec: {{holderIdentity: h, leaseDurationSeconds: 40, acquireTime: "2024-05-06T07:08:09.123456Z", renewTime: "2024-05-06T07:08:19.654321Z"}}
---
apiVersion: v1
kind: Node
metadata: {{name: {node}, labels: {{kubernetes.io/hostname: {node}}}}}
spec: {{podCIDR: 10.1.0.0/24, podCIDRs: [10.1.0.0/24], taints: [{{key: k, effect: NoSchedule}}]}}
---
apiVersion: {GROUP}/v1
kind: Gadget
metadata: {{name: g1, namespace: {ns}, labels: {{a: b}}}}
spec: {{size: 3}}
"#
    )
}

fn crd() -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: gadgets.{GROUP}}}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: gadgets, singular: gadget, kind: Gadget}}
  versions: [{{name: v1, served: true, storage: true, schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}]
"#
    )
}

fn apply(cluster: &Cluster, yaml: &str) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let out = cluster.kubectl_direct(&["apply", "-f", file.path().to_str().unwrap()]);
    assert!(out.ok, "{out:?}");
}

/// A GET to watchmux with this Accept header, on a connection of its own.
async fn send_via(wm: &Watchmux, path: &str, accept: &str) -> http::Response<hyper::body::Incoming> {
    get_accepting(wm.addr, path, accept).await
}

/// A GET with this Accept header: status, Content-Type, body.
async fn get_via(wm: &Watchmux, path: &str, accept: &str) -> Answer {
    let resp = send_via(wm, path, accept).await;
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (code, body) = read(resp).await;
    (code, ct, body)
}

async fn get_direct_as(client: &watchmux::upstream::Upstream, path: &str, accept: &str) -> Answer {
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    let resp = client.send(req).await.unwrap();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (code, body) = read(resp).await;
    (code, ct, body)
}

type Answer = (u16, String, Bytes);

/// The same GET straight at the API server and through watchmux.
async fn both(client: &watchmux::upstream::Upstream, wm: &Watchmux, path: &str, accept: &str) -> (Answer, Answer) {
    (get_direct_as(client, path, accept).await, get_via(wm, path, accept).await)
}

/// Two protobuf list bodies with the same typeMeta and byte-identical items;
/// returns how many items and the ListMetas (direct, cached).
fn same_list(direct: &[u8], cached: &[u8], what: &str) -> (usize, Vec<u8>, Vec<u8>) {
    let (d_type, d_meta, d_items) = list_parts(direct);
    let (c_type, c_meta, c_items) = list_parts(cached);
    assert_eq!(c_type, d_type, "LIST {what}: typeMeta");
    assert!(!c_items.is_empty() && c_items == d_items, "LIST {what}: items differ");
    (c_items.len(), d_meta, c_meta)
}

/// A varint at the start of `b`: (value, bytes used).
fn varint(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate() {
        v |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    panic!("truncated varint");
}

/// The length-delimited fields of a message, in order: (number, bytes).
fn fields(mut b: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (key, used) = varint(b);
        b = &b[used..];
        assert_eq!(key & 7, 2, "only length-delimited fields are expected here");
        let (len, used) = varint(b);
        let len = len as usize;
        out.push((key >> 3, &b[used..used + len]));
        b = &b[used + len..];
    }
    out
}

/// A list body taken apart: the envelope's typeMeta, the ListMeta, the items.
fn list_parts(body: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<Vec<u8>>) {
    let envelope = fields(body.strip_prefix(b"k8s\0").expect("magic"));
    let list = envelope.iter().find(|(n, _)| *n == 2).expect("raw").1;
    let list = fields(list);
    let meta = list.iter().find(|(n, _)| *n == 1).expect("ListMeta").1.to_vec();
    let items = list.iter().filter(|(n, _)| *n == 2).map(|(_, b)| b.to_vec()).collect();
    (envelope[0].1.to_vec(), meta, items)
}

/// resourceVersion (field 2) of a ListMeta.
fn list_rv(meta: &[u8]) -> u64 {
    let rv = fields(meta).into_iter().find(|(n, _)| *n == 2).expect("resourceVersion").1;
    std::str::from_utf8(rv).unwrap().parse().unwrap()
}

/// GET and LIST of many kinds in protobuf through the cache are the API
/// server's bytes; PartialObjectMetadataList too, for a custom resource.
#[tokio::test]
async fn protobuf_gets_and_lists_from_the_cache_are_the_api_servers_bytes() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("pb");
    let node = format!("{ns}-node");
    create_namespace(&client, &ns).await;
    apply(&cluster, &crd());
    let out = cluster.kubectl_direct(&["wait", "--for=condition=Established", &format!("crd/gadgets.{GROUP}")]);
    assert!(out.ok, "{out:?}");
    apply(&cluster, &objects(&ns, &node));

    let resources = "configmaps,secrets,pods,services,endpointslices.discovery.k8s.io,leases.coordination.k8s.io,\
                     nodes,gadgets.pbe2e.example.com";
    let wm = Watchmux::start(&cluster, &["--cache-resources", resources, "--cache-warm"]).await;

    let named = [
        ("/api/v1", "configmaps", "cm1"),
        ("/api/v1", "configmaps", "cm2"),
        ("/api/v1", "secrets", "s1"),
        ("/api/v1", "pods", "p1"),
        ("/api/v1", "services", "svc1"),
        ("/apis/discovery.k8s.io/v1", "endpointslices", "es1"),
        ("/apis/coordination.k8s.io/v1", "leases", "l1"),
    ];
    let mut identical = 0;
    for (prefix, resource, name) in named {
        // At any version: a GET without one is the API server's, not the cache's.
        let path = format!("{prefix}/namespaces/{ns}/{resource}/{name}?resourceVersion=0");
        let (direct, cached) = both(&client, &wm, &path, KUBELET).await;
        assert_eq!((direct.0, direct.1.as_str()), (200, PROTOBUF), "{path}");
        assert_eq!((cached.0, cached.1.as_str()), (200, PROTOBUF), "{path}");
        assert!(cached.2 == direct.2, "GET {path}: the cache's protobuf differs from the API server's");
        identical += 1;

        // At any version: a consistent LIST is the cache's only when it is
        // current at the API server's revision (other tests write meanwhile).
        let path = format!("{prefix}/namespaces/{ns}/{resource}");
        let (direct, cached) = both(&client, &wm, &format!("{path}?resourceVersion=0"), KUBELET).await;
        assert_eq!((cached.0, cached.1.as_str()), (200, PROTOBUF), "{path}");
        let (items, _, c_meta) = same_list(&direct.2, &cached.2, &path);
        // Never a version from the future: at most the API server's revision
        // read after it (a consistent LIST).
        let after = get_direct_as(&client, &path, KUBELET).await;
        let (_, after_meta, _) = list_parts(&after.2);
        assert!(list_rv(&c_meta) <= list_rv(&after_meta), "LIST {path}: the cache's version is ahead of etcd's");
        identical += items;
    }
    // A node, by name (other tests make nodes too: no cluster-wide LIST).
    let path = format!("/api/v1/nodes/{node}?resourceVersion=0");
    let (direct, cached) = both(&client, &wm, &path, KUBELET).await;
    assert_eq!((cached.0, cached.1.as_str()), (200, PROTOBUF));
    assert!(cached.2 == direct.2, "GET {path} differs");
    identical += 1;

    // A custom resource: no protobuf form; the API server and the cache answer JSON.
    let path = format!("/apis/{GROUP}/v1/namespaces/{ns}/gadgets/g1?resourceVersion=0");
    let (direct, cached) = both(&client, &wm, &path, KUBELET).await;
    assert_eq!((direct.0, direct.1.as_str()), (200, "application/json"));
    assert_eq!((cached.0, cached.1.as_str()), (200, "application/json"));
    assert_eq!(cached.2, direct.2);
    // ... and its PartialObjectMetadataList in protobuf.
    let path = format!("/apis/{GROUP}/v1/namespaces/{ns}/gadgets?resourceVersion=0");
    let (direct, cached) = both(&client, &wm, &path, METADATA_LIST).await;
    assert_eq!((direct.1.as_str(), cached.1.as_str()), (PROTOBUF, PROTOBUF));
    identical += same_list(&direct.2, &cached.2, "PartialObjectMetadataList").0;

    // A protobuf 404 is the API server's Status.
    let path = format!("/api/v1/namespaces/{ns}/configmaps/missing?resourceVersion=0");
    let (direct, cached) = both(&client, &wm, &path, KUBELET).await;
    assert_eq!((cached.0, cached.1.as_str()), (404, PROTOBUF));
    assert!(cached.2 == direct.2, "404 Status differs");

    let passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await;
    let served = watchmux_metric_sum(wm.admin, "watchmux_cache_get_total", &[]).await
        + watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
    let encodes = watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &["variant=\"protobuf\""]).await;
    assert_eq!(passed, 0.0, "nothing passes through; log:\n{}", wm.log());
    assert_eq!(served, 2.0 * named.len() as f64 + 4.0);
    // Each object version encoded once, though read twice (GET and LIST).
    assert_eq!(encodes, named.len() as f64 + 1.0, "one protobuf encode per object read");
    // Each cache checked its kind against the API server's /openapi/v3 when it listed: the
    // built-in kinds fit the table, the custom resource is not in it.
    let checks = |result: &'static str| {
        let filter = format!("result=\"{result}\"");
        async move { watchmux_metric_sum(wm.admin, "watchmux_cache_protobuf_schema_checks_total", &[&filter]).await }
    };
    assert_eq!(checks("fits").await, 7.0, "configmaps, secrets, pods, services, endpointslices, leases, nodes");
    assert_eq!(checks("not_in_table").await, 1.0);
    assert_eq!(checks("schema_drift").await + checks("unavailable").await, 0.0, "log:\n{}", wm.log());
    let disabled = watchmux_metric_sum(wm.admin, "watchmux_cache_protobuf_disabled", &["resource=\"pods\""]).await;
    assert_eq!(disabled, 0.0, "checked and on");
    let body = get(wm.admin, "/metrics").await;
    let text = String::from_utf8(read(body).await.1.to_vec()).unwrap();
    let gauges = text.lines().filter(|l| l.starts_with("watchmux_cache_protobuf_disabled{")).count();
    assert_eq!(gauges, 14, "both variants of each of the 7 built-in kinds are shown:\n{text}");
    println!("protobuf e2e: {identical} objects byte-identical (GET bodies and LIST items), {encodes} encodes");
    cluster.kubectl_direct(&["delete", "node", &node, "--wait=false"]);
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// One protobuf watch: frames as they arrive.
async fn frames(resp: http::Response<hyper::body::Incoming>, tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>) {
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else { continue };
        buf.extend_from_slice(&data);
        while buf.len() >= 4 {
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let frame: Vec<u8> = buf.drain(..4 + len).collect();
            if tx.send(frame).is_err() {
                return;
            }
        }
    }
}

/// Watch frames in protobuf from the cache are the API server's frames, byte
/// for byte; each change is encoded once for all watchers.
#[tokio::test]
async fn protobuf_watch_frames_from_the_cache_are_the_api_servers_bytes() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("pbwatch");
    create_namespace(&client, &ns).await;
    configmap(&client, "create", &ns, "first").await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    // Both watches start from the cache's version: the cache's history begins at its initial
    // list, and a version before it (other tests write meanwhile) would be too old for it.
    let (_, _, list) =
        get_via(&wm, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"), "application/json").await;
    let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
    let start = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();

    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={start}");
    let (direct_tx, mut direct_rx) = tokio::sync::mpsc::unbounded_channel();
    let req = Request::get(&path).header("accept", KUBELET).body(watchmux::body::empty()).unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    tokio::spawn(frames(resp, direct_tx));
    let mut cached_rx = Vec::new();
    for _ in 0..3 {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let resp = send_via(&wm, &path, KUBELET).await;
        assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
        tokio::spawn(frames(resp, tx));
        cached_rx.push(rx);
    }
    let before = watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &["variant=\"protobuf\""]).await;

    configmap(&client, "create", &ns, "a").await;
    configmap(&client, "update", &ns, "a").await;
    configmap(&client, "create", &ns, "b").await;
    configmap(&client, "delete", &ns, "a").await;
    let wait = Duration::from_secs(20);
    let mut direct = Vec::new();
    for _ in 0..4 {
        direct.push(tokio::time::timeout(wait, direct_rx.recv()).await.expect("direct event").unwrap());
    }
    for rx in &mut cached_rx {
        for (i, want) in direct.iter().enumerate() {
            let got = tokio::time::timeout(wait, rx.recv()).await.expect("cached event").unwrap();
            assert!(
                &got == want,
                "event {i}: the cache's frame differs from the API server's:\n{}\n{}",
                String::from_utf8_lossy(&got).escape_debug(),
                String::from_utf8_lossy(want).escape_debug()
            );
        }
    }
    let after = watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &["variant=\"protobuf\""]).await;
    assert_eq!(after - before, 4.0, "4 changes, 3 watchers: one protobuf encode per change");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await, 0.0);
    println!("protobuf watch e2e: 4 frames x 3 watchers byte-identical, {} encodes", after - before);
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// client-go's typed informer (protobuf first) lists and watches through the
/// cache, which answers it in protobuf.
#[tokio::test]
async fn a_client_go_typed_informer_is_served_protobuf_from_the_cache() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    let ns = namespace("pbinformer");
    for watch_list in ["true", "false"] {
        let out = Command::new(&cluster.watchcheck)
            .arg("--kubeconfig")
            .arg(&wm.kubeconfig)
            .args(["--namespace", &ns, "--count", "3"])
            .env("KUBE_FEATURE_WatchListClient", watch_list)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), wm.log());
    }
    let encodes = watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &["variant=\"protobuf\""]).await;
    assert!(encodes >= 6.0, "the informers' events were protobuf from the cache ({encodes} encodes)");
    for reason in ["protobuf", "no_protobuf_form", "not_ready"] {
        let filter = format!("reason=\"{reason}\"");
        let passed = watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[&filter]).await;
        assert_eq!(passed, 0.0, "{reason}; log:\n{}", wm.log());
    }
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// An object the encoder refuses (a webhook configuration without
/// `caBundle`: Go writes protobuf differently for "" and nil, which JSON does
/// not tell apart) is answered from the cache in the JSON the client accepts
/// next, and passed through when it accepts none.
#[tokio::test]
async fn an_object_with_no_protobuf_form_gets_json_from_the_cache_or_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let name = namespace("pbwebhook");
    apply(
        &cluster,
        &format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: {name}}}
webhooks:
- name: never.{GROUP}
  clientConfig: {{url: "https://127.0.0.1:1/never"}}
  rules: [{{apiGroups: ["{GROUP}"], apiVersions: [v1], operations: [CREATE], resources: [nonexistent]}}]
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: [v1]
"#
        ),
    );
    let wm = Watchmux::start(
        &cluster,
        &["--cache-resources", "validatingwebhookconfigurations.admissionregistration.k8s.io", "--cache-warm"],
    )
    .await;
    let path =
        format!("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}?resourceVersion=0");

    let direct_json = get_direct_as(&client, &path, "application/json").await;
    let cached = get_via(&wm, &path, KUBELET).await;
    assert_eq!((cached.0, cached.1.as_str()), (200, "application/json"));
    assert!(cached.2 == direct_json.2, "the cache's JSON is the API server's");
    let list = format!(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations?fieldSelector=metadata.name={name}\
         &resourceVersion=0"
    );
    let cached_list = get_via(&wm, &list, KUBELET).await;
    assert_eq!((cached_list.0, cached_list.1.as_str()), (200, "application/json"));
    let served = watchmux_metric_sum(wm.admin, "watchmux_cache_get_total", &[]).await
        + watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
    assert_eq!(served, 2.0);

    let (direct, cached) = both(&client, &wm, &path, PROTOBUF).await;
    assert_eq!((cached.0, cached.1.as_str()), (200, PROTOBUF), "passed through");
    assert!(cached.2 == direct.2);
    let passed =
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"no_protobuf_form\""]).await;
    assert_eq!(passed, 1.0);
    let refused =
        watchmux_metric_sum(wm.admin, "watchmux_cache_protobuf_refused_total", &["reason=\"ambiguous_empty_bytes\""])
            .await;
    assert_eq!(refused, 1.0, "refused once per object version, however often asked");
    cluster.kubectl_direct(&["delete", "validatingwebhookconfiguration", &name, "--wait=false"]);
}

/// Pages of a protobuf LIST from the cache hold the API server's items.
#[tokio::test]
async fn protobuf_list_pages_from_the_cache_hold_the_api_servers_items() {
    // Alone on the cluster: a consistent LIST is the cache's only when
    // nothing else was written since its own last event.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("pbpages");
    create_namespace(&client, &ns).await;
    for i in 0..5 {
        configmap(&client, "create", &ns, &format!("cm{i}")).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    // The last write is the cache's own: its probe finds it current.
    configmap(&client, "update", &ns, "cm0").await;
    let base = format!("/api/v1/namespaces/{ns}/configmaps");
    let (direct, _) = both(&client, &wm, &base, KUBELET).await;
    let (_, _, want) = list_parts(&direct.2);
    let mut got = Vec::new();
    let mut path = format!("{base}?limit=2");
    for page in 0.. {
        let (code, ct, body) = get_via(&wm, &path, KUBELET).await;
        assert_eq!((code, ct.as_str()), (200, PROTOBUF));
        let (_, meta, items) = list_parts(&body);
        got.extend(items);
        // ListMeta: 2 resourceVersion, 3 continue, 4 remainingItemCount (a varint: not a
        // length-delimited field, so read the continue token alone).
        let token = fields_until_varint(&meta);
        match token {
            Some(token) => path = format!("{base}?limit=2&continue={token}"),
            None => break,
        }
        assert!(page < 5);
    }
    assert_eq!(got, want, "the pages' items are the API server's, in order");
    let lists = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
    assert_eq!(lists, 4.0, "the whole list and its 3 pages, all from the cache");
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// The continue token (field 3) of a ListMeta, if not empty.
fn fields_until_varint(meta: &[u8]) -> Option<String> {
    let mut b = meta;
    while !b.is_empty() {
        let (key, used) = varint(b);
        b = &b[used..];
        if key & 7 == 0 {
            b = &b[varint(b).1..];
            continue;
        }
        let (len, used) = varint(b);
        let value = &b[used..used + len as usize];
        b = &b[used + len as usize..];
        if key >> 3 == 3 && !value.is_empty() {
            return Some(String::from_utf8(value.to_vec()).unwrap());
        }
    }
    None
}

/// client-go's metadata client, WATCH.
const METADATA_WATCH: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
                              application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// The type of a protobuf watch frame (WatchEvent field 1).
fn frame_type(frame: &[u8]) -> String {
    let event = fields(&frame[4..]);
    String::from_utf8(event.iter().find(|(n, _)| *n == 1).expect("type").1.to_vec()).unwrap()
}

/// Whether a frame is the bookmark that ends the initial events (its object
/// carries the `k8s.io/initial-events-end` annotation).
fn ends_initial_events(frame: &[u8]) -> bool {
    let marker = b"k8s.io/initial-events-end";
    frame_type(frame) == "BOOKMARK" && frame.windows(marker.len()).any(|w| w == marker)
}

/// Frames up to and including the initial-events-end bookmark.
async fn initial_events(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>, what: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: no initial-events-end bookmark"))
            .unwrap_or_else(|| panic!("{what}: the stream ended before its initial-events-end bookmark"));
        let end = ends_initial_events(&frame);
        out.push(frame);
        if end {
            return out;
        }
    }
}

/// The next frame that is not a plain (progress) bookmark.
async fn next_change(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>, what: &str) -> Vec<u8> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: no change"))
            .unwrap_or_else(|| panic!("{what}: the stream ended"));
        if frame_type(&frame) != "BOOKMARK" {
            return frame;
        }
    }
}

/// The events of a protobuf watch stream as client-go decodes them
/// (`pbcheck decode`: its framer, WatchEvent decoder and scheme), one JSON
/// value `{"type", "object"}` each.
pub(super) fn go_decode(cluster: &Cluster, stream: &[u8]) -> Vec<serde_json::Value> {
    use std::io::Write;
    let mut child = Command::new(cluster.pbcheck())
        .arg("decode")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stream).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "pbcheck decode: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A protobuf watch-list (sendInitialEvents, bookmarks) through the cache
/// decodes, with client-go's own decoder, to the API server's events: the
/// same objects as ADDED, the initial-events-end bookmark with its
/// annotation, then the same live change.
#[tokio::test]
async fn a_protobuf_watch_list_from_the_cache_decodes_as_the_api_servers() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("pbwatchlist");
    create_namespace(&client, &ns).await;
    for name in ["c", "a", "b"] {
        configmap(&client, "create", &ns, name).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    let path = format!(
        "/api/v1/namespaces/{ns}/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&timeoutSeconds=60"
    );
    let (direct_tx, mut direct_rx) = tokio::sync::mpsc::unbounded_channel();
    let req = Request::get(&path).header("accept", KUBELET).body(watchmux::body::empty()).unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    tokio::spawn(frames(resp, direct_tx));
    let (cached_tx, mut cached_rx) = tokio::sync::mpsc::unbounded_channel();
    let resp = send_via(&wm, &path, KUBELET).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    tokio::spawn(frames(resp, cached_tx));

    let mut direct = initial_events(&mut direct_rx, "direct").await;
    let mut cached = initial_events(&mut cached_rx, "watchmux").await;
    configmap(&client, "update", &ns, "a").await;
    direct.push(next_change(&mut direct_rx, "direct").await);
    cached.push(next_change(&mut cached_rx, "watchmux").await);

    let direct = go_decode(&cluster, &direct.concat());
    let cached = go_decode(&cluster, &cached.concat());
    let types: Vec<_> = direct.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "ADDED", "BOOKMARK", "MODIFIED"], "direct: {direct:?}");
    assert_eq!(cached.len(), direct.len(), "watchmux: {cached:?}");
    for (i, (c, d)) in cached.iter().zip(&direct).enumerate() {
        assert_eq!(c["type"], d["type"], "event {i}");
        if d["type"] == "BOOKMARK" {
            // The bookmark's version is each server's own current version.
            for (key, want) in [("kind", "ConfigMap"), ("apiVersion", "v1")] {
                assert_eq!((c["object"][key].as_str(), d["object"][key].as_str()), (Some(want), Some(want)));
            }
            let annotations = serde_json::json!({"k8s.io/initial-events-end": "true"});
            assert_eq!(d["object"]["metadata"]["annotations"], annotations);
            assert_eq!(c["object"]["metadata"], {
                let mut m = d["object"]["metadata"].clone();
                m["resourceVersion"] = c["object"]["metadata"]["resourceVersion"].clone();
                m
            });
            let rv =
                |e: &serde_json::Value| e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>();
            assert!(rv(c).unwrap() > 0 && rv(d).unwrap() > 0);
        } else {
            assert_eq!(c["object"], d["object"], "event {i}: the objects decode differently");
        }
    }
    let names: Vec<_> = cached[..3].iter().map(|e| e["object"]["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "c"], "initial events in key order");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_watch_total", &[]).await, 1.0, "served by the cache");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await, 0.0);
    println!("protobuf watch-list e2e: {} events decode equal with client-go", cached.len());
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// A protobuf watch from a version older than both histories: the same 200,
/// the same content type, one ERROR event whose Status has the API server's
/// code, reason and status (the message names each one's own current
/// version), for the kubelet's Accept and the metadata client's.
#[tokio::test]
async fn a_protobuf_watch_at_a_too_old_version_gets_the_api_servers_410() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    // On a fresh cluster the API server's watch cache began near version 1 and
    // serves a watch from there; after a restart it begins at etcd's newest.
    restart_apiserver();
    let client = cluster.direct_client();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    let path = "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1";
    for accept in [KUBELET, METADATA_WATCH] {
        let mut direct = get_direct_as(&client, path, accept).await;
        // The restarted API server's watch cache may still be starting (429).
        for _ in 0..50 {
            if direct.0 != 429 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            direct = get_direct_as(&client, path, accept).await;
        }
        let cached = get_via(&wm, path, accept).await;
        assert_eq!((cached.0, &cached.1), (direct.0, &direct.1), "{accept}: code and content type");
        assert_eq!(cached.0, 200);
        let (direct, cached) = (go_decode(&cluster, &direct.2), go_decode(&cluster, &cached.2));
        assert_eq!((direct.len(), cached.len()), (1, 1), "{accept}: one event each: {direct:?} {cached:?}");
        let (d, c) = (&direct[0], &cached[0]);
        for e in [d, c] {
            assert_eq!(e["type"], "ERROR");
            let status = &e["object"];
            assert_eq!((status["kind"].as_str(), status["apiVersion"].as_str()), (Some("Status"), Some("v1")));
            assert_eq!((status["code"].as_i64(), status["reason"].as_str()), (Some(410), Some("Expired")));
            assert_eq!(status["status"], "Failure");
            assert!(status["message"].as_str().unwrap().starts_with("too old resource version: 1 ("), "{status}");
        }
        let without_message = |e: &serde_json::Value| {
            let mut s = e["object"].clone();
            s.as_object_mut().unwrap().remove("message");
            s
        };
        assert_eq!(without_message(c), without_message(d), "{accept}: the Status differs beyond its message");
    }
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_watch_total", &[]).await, 2.0, "both from the cache");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await, 0.0);
}

/// client-go's metadata informer (PartialObjectMetadata in protobuf) sees
/// through the cache the same sequence of names and versions as straight
/// from the API server, and the cache served its list and watch.
#[tokio::test]
async fn a_client_go_metadata_informer_sees_the_api_servers_sequence_from_the_cache() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    let ns = namespace("pbmeta");
    let encodes = || {
        watchmux_metric_sum(wm.admin, "watchmux_cache_encodes_total", &["variant=\"partial_object_metadata_protobuf\""])
    };
    let before = encodes().await;
    let out = Command::new(cluster.pbcheck())
        .arg("metadata")
        .arg("--direct")
        .arg(&cluster.kubeconfig)
        .arg("--via")
        .arg(&wm.kubeconfig)
        .args(["--namespace", &ns, "--count", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}\n{}", String::from_utf8_lossy(&out.stderr), wm.log());
    let result: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(result["events"], 5, "3 adds, an update, a delete: {result}");
    let watches = watchmux_metric_sum(wm.admin, "watchmux_cache_watch_total", &["resource=\"configmaps\""]).await;
    if watches < 1.0 {
        let (_, metrics) = read(get(wm.admin, "/metrics").await).await;
        let metrics = String::from_utf8_lossy(&metrics);
        let reasons: Vec<_> = metrics.lines().filter(|l| l.starts_with("watchmux_cache_passthrough_total")).collect();
        panic!("the informer's watch was not served from the cache: {reasons:?}\n{result}\n{}", wm.log());
    }
    let encoded = encodes().await - before;
    assert!(encoded >= 5.0, "each change reached the informer as PartialObjectMetadata protobuf ({encoded} encodes)");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &[]).await, 0.0, "{}", wm.log());
    println!("metadata informer e2e: {result}");
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}

/// PEM from `openssl req` (a CSR, or with `-x509` a self-signed certificate), base64 as JSON has it.
fn openssl_pem(args: &[&str]) -> String {
    use base64::Engine as _;
    let out = Command::new("openssl")
        .args(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "/dev/null", "-subj", "/CN=watchmux-pb"])
        .args(args)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    base64::engine::general_purpose::STANDARD.encode(out.stdout)
}

/// CertificateSigningRequests: one awaiting its certificate, one whose
/// status was written with `"certificate": ""`, one issued. The API server's
/// JSON of the first two says the same (`"status":{}`) while its protobuf
/// does not (a nil `[]byte` is left out, an empty one written with length 0),
/// so no JSON-only encoder can know which to send: the cache answers those
/// in JSON (the kubelet's Accept) or passes through (protobuf alone), and
/// serves the issued one in protobuf, byte for byte the API server's.
#[tokio::test]
async fn certificate_signing_requests_are_protobuf_once_issued_and_json_while_their_certificate_is_ambiguous() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let prefix = namespace("pbcsr");
    let request = openssl_pem(&[]);
    let certificate = openssl_pem(&["-x509", "-days", "1"]);
    let base = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let (pending, empty, issued) = (format!("{prefix}-pending"), format!("{prefix}-empty"), format!("{prefix}-issued"));
    for (name, status) in [(&pending, None), (&empty, Some("")), (&issued, Some(certificate.as_str()))] {
        let csr = serde_json::json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": request, "signerName": "example.com/watchmux-pb", "usages": ["client auth"]},
        });
        let mut created = direct_json(&client, http::Method::POST, base, csr).await;
        if let Some(cert) = status {
            created["status"] = serde_json::json!({"certificate": cert});
            direct_json(&client, http::Method::PUT, &format!("{base}/{name}/status"), created).await;
        }
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "certificatesigningrequests", "--cache-warm"]).await;

    // What the API server itself says about the first two.
    // At any version: a GET without one is the API server's, not the cache's.
    let (p, e) = (format!("{base}/{pending}?resourceVersion=0"), format!("{base}/{empty}?resourceVersion=0"));
    for path in [&p, &e] {
        let json: serde_json::Value =
            serde_json::from_slice(&get_direct_as(&client, path, "application/json").await.2).unwrap();
        assert_eq!(json["status"], serde_json::json!({}), "{path}: JSON shows no certificate");
    }
    // The status (field 3) is the body's last field before the envelope's `1a 00 22 00`.
    let nil_status: &[u8] = &[0x1a, 0x00, 0x1a, 0x00, 0x22, 0x00];
    let empty_certificate: &[u8] = &[0x1a, 0x02, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00];
    assert!(get_direct_as(&client, &p, PROTOBUF).await.2.ends_with(nil_status), "awaiting: certificate nil");
    assert!(get_direct_as(&client, &e, PROTOBUF).await.2.ends_with(empty_certificate), "\"\": written, length 0");

    // Through the cache: JSON for the kubelet's Accept, the API server's bytes.
    for path in [&p, &e] {
        let direct = get_direct_as(&client, path, "application/json").await;
        let cached = get_via(&wm, path, KUBELET).await;
        assert_eq!((cached.0, cached.1.as_str()), (200, "application/json"), "{path}");
        assert!(cached.2 == direct.2, "{path}: the cache's JSON is the API server's");
    }
    // Protobuf alone: the API server answers, with its own form of each.
    for path in [&p, &e] {
        let (direct, cached) = both(&client, &wm, path, PROTOBUF).await;
        assert_eq!((cached.0, cached.1.as_str()), (200, PROTOBUF));
        assert!(cached.2 == direct.2, "{path}: passed through");
    }
    // Issued: protobuf from the cache, byte for byte.
    let (direct, cached) = both(&client, &wm, &format!("{base}/{issued}?resourceVersion=0"), KUBELET).await;
    assert_eq!((cached.0, cached.1.as_str()), (200, PROTOBUF));
    assert!(cached.2 == direct.2, "the issued CSR's protobuf differs from the API server's");

    let refused =
        watchmux_metric_sum(wm.admin, "watchmux_cache_protobuf_refused_total", &["reason=\"ambiguous_empty_bytes\""])
            .await;
    assert_eq!(refused, 2.0, "each ambiguous CSR refused once");
    let passed =
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"no_protobuf_form\""]).await;
    assert_eq!(passed, 2.0, "only the protobuf-only GETs of the ambiguous two passed through");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_get_total", &[]).await, 3.0);
    for name in [&pending, &empty, &issued] {
        cluster.kubectl_direct(&["delete", "csr", name, "--wait=false"]);
    }
}
