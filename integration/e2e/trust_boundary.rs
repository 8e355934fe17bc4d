//! Security issue 23's rows against the real API server: what an
//! adversarial review read through watchmux and the API server refused.
//! Every row is sent straight and through watchmux with the same identity
//! and bytes (the adversarial suite's rows, [`crate::adversarial`]), and
//! must get the API server's answer:
//!
//! - service-account and node names whose labels pass 63 characters are
//!   still service accounts and nodes (impersonation, legacy and
//!   constrained), and an extra key reaches the API server as authorized;
//! - a cluster-scoped object is never served at a namespaced path;
//! - query pairs Go drops (`?watch=1;`) do not exist for watchmux either;
//! - `Host` headers get Go's 400s, and the admin listener answers no
//!   rebound host name.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::adversarial::{Expect, Probe, Row, Who, check_rows, send, socket};
use crate::auth::{cluster_api, cluster_file, reader_namespace, start_delegated, token_for};
use crate::env::*;

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// A token for the service account `sa` of `ns`, created if missing.
async fn service_account_token(cluster: &Cluster, admin: &watchmux::upstream::Upstream, ns: &str, sa: &str) -> String {
    direct_json(
        admin,
        http::Method::POST,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        json!({"metadata": {"name": sa}}),
    )
    .await;
    let out = cluster.kubectl_direct(&["create", "token", sa, "-n", ns, "--duration", "1h"]);
    assert!(out.ok, "{out:?}");
    out.stdout.trim().to_owned()
}

/// A ClusterRole with `rules`, bound to the service account `sa` of `ns`.
async fn cluster_grant(admin: &watchmux::upstream::Upstream, name: &str, ns: &str, sa: &str, rules: serde_json::Value) {
    direct_json(
        admin,
        http::Method::POST,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
    direct_json(
        admin,
        http::Method::POST,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}),
    )
    .await;
}

/// A Role in `ns` with `rules`, bound to `subject`.
async fn grant(
    admin: &watchmux::upstream::Upstream,
    ns: &str,
    name: &str,
    subject: serde_json::Value,
    rules: serde_json::Value,
) {
    let base = format!("{RBAC}/namespaces/{ns}");
    direct_json(
        admin,
        http::Method::POST,
        &format!("{base}/roles"),
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
    direct_json(
        admin,
        http::Method::POST,
        &format!("{base}/rolebindings"),
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject]}),
    )
    .await;
}

/// Rows 1, 2 and 9 (query) of issue 23, against a delegated watchmux caching
/// everything.
#[tokio::test]
async fn identities_scopes_and_queries_get_the_api_servers_answer() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "tb").await;
    let api = cluster_api(&cluster);

    // Row 1: a 70-character service account may read the namespace's
    // secrets; `imp` may impersonate users and groups (legacy), `cimp` users
    // and groups in the constrained user-info mode only.
    let long_sa = "s".repeat(70);
    let long_node = format!("n{}", "o".repeat(69));
    direct_json(
        &admin,
        http::Method::POST,
        &format!("/api/v1/namespaces/{ns}/secrets"),
        json!({"metadata": {"name": "s1"}}),
    )
    .await;
    let secret_reader = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]);
    grant(
        &admin,
        &ns,
        "long-sa-reads",
        json!({"kind": "ServiceAccount", "name": long_sa, "namespace": ns}),
        secret_reader,
    )
    .await;
    // The Node authorizer lets the long node read s1 once a pod on it uses it.
    let pod = json!({"metadata": {"name": "uses-s1"}, "spec": {"nodeName": long_node,
        "containers": [{"name": "c", "image": "registry.invalid/none"}],
        "volumes": [{"name": "v", "secret": {"secretName": "s1"}}]}});
    direct_json(&admin, http::Method::POST, &format!("/api/v1/namespaces/{ns}/pods"), pod).await;
    let imp = service_account_token(&cluster, &admin, &ns, "imp").await;
    cluster_grant(
        &admin,
        &format!("tb-imp-{ns}"),
        &ns,
        "imp",
        json!([{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]},
               {"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/A"], "verbs": ["impersonate"]}]),
    )
    .await;
    let cimp = service_account_token(&cluster, &admin, &ns, "cimp").await;
    cluster_grant(
        &admin,
        &format!("tb-cimp-{ns}"),
        &ns,
        "cimp",
        json!([{"apiGroups": ["authentication.k8s.io"], "resources": ["users", "groups"], "verbs": ["impersonate:user-info"]}]),
    )
    .await;
    grant(
        &admin,
        &ns,
        "cimp-on",
        json!({"kind": "ServiceAccount", "name": "cimp", "namespace": ns}),
        json!([{"apiGroups": [""], "resources": ["secrets"],
            "verbs": ["impersonate-on:user-info:get", "impersonate-on:user-info:list"]}]),
    )
    .await;

    // Row 2: the reader administers its namespace; cluster-scoped objects
    // carry the namespace's name.
    grant(
        &admin,
        &ns,
        "ns-admin",
        json!({"kind": "ServiceAccount", "name": "reader", "namespace": ns}),
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
    )
    .await;
    direct_json(&admin, http::Method::POST, "/api/v1/nodes", json!({"metadata": {"name": ns}})).await;
    direct_json(
        &admin,
        http::Method::POST,
        "/api/v1/persistentvolumes",
        json!({"metadata": {"name": ns}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/tmp/tb"}}}),
    )
    .await;
    direct_json(
        &admin,
        http::Method::POST,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": ns}, "rules": []}),
    )
    .await;

    let (wm, server) = start_delegated(&cluster, dir.path(), &["--cache-resources", "*"]).await;
    let reader = Who::Token(token_for(&cluster, &ns, &[]));
    let imp = Who::Token(imp);
    let cimp = Who::Token(cimp);
    let ca = cluster_file(&cluster, "ca.crt");
    // RBAC is asynchronous: wait until the last grant shows directly.
    let probe = Probe::get(format!("/api/v1/namespaces/{ns}/secrets/s1"))
        .header("impersonate-user", format!("system:serviceaccount:{ns}:{long_sa}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _) = send(&ca, socket(&api), &reader, &Probe::get(format!("/api/v1/namespaces/{ns}/secrets"))).await;
        if code == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "ns-admin not in force: {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let sa_user = format!("system:serviceaccount:{ns}:{long_sa}");
    let node_user = format!("system:node:{long_node}");
    let row = |name, who: &Who, probe, direct, expect| Row { name, who: who.clone(), probe, expect, direct };
    use Expect::*;
    let rows = vec![
        row("long SA: legacy users-only impersonator, consistent GET", &imp, probe, 403, Same),
        row(
            "long SA: legacy users-only impersonator, cached LIST",
            &imp,
            Probe::get(format!("/api/v1/namespaces/{ns}/secrets?resourceVersion=0"))
                .header("impersonate-user", sa_user.clone()),
            403,
            Same,
        ),
        row(
            "long SA: constrained user-info impersonator",
            &cimp,
            Probe::get(format!("/api/v1/namespaces/{ns}/secrets/s1?resourceVersion=0"))
                .header("impersonate-user", sa_user.clone()),
            403,
            Same,
        ),
        row(
            "long node: constrained user-info impersonator with system:nodes",
            &cimp,
            Probe::get(format!("/api/v1/namespaces/{ns}/secrets/s1"))
                .header("impersonate-user", node_user.clone())
                .header("impersonate-group", "system:nodes"),
            403,
            Same,
        ),
        row(
            "long node: the same from the cache",
            &cimp,
            Probe::get(format!("/api/v1/namespaces/{ns}/secrets/s1?resourceVersion=0"))
                .header("impersonate-user", node_user.clone())
                .header("impersonate-group", "system:nodes"),
            403,
            Same,
        ),
        row(
            "long node: a legacy impersonator gets the node's view, as directly",
            &imp,
            Probe::get(format!("/api/v1/namespaces/{ns}/secrets/s1?resourceVersion=0"))
                .header("impersonate-user", node_user.clone())
                .header("impersonate-group", "system:nodes"),
            200,
            SameStatus,
        ),
        // A sibling of row 1: a token that is not ASCII is a token (401), not
        // an absent one (anonymous's 403).
        row(
            "token: non-ASCII bearer token",
            &Who::Anonymous,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"))
                .header("authorization", "Bearer t\u{f6}k\u{e9}n"),
            401,
            Same,
        ),
        // Found by the fuzzer: on the legacy watch path the options are a
        // LIST's to the API server, and sendInitialEvents is its 422.
        row(
            "legacy watch path with sendInitialEvents",
            &reader,
            Probe::get(format!(
                "/api/v1/watch/namespaces/{ns}/configmaps?sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
            )),
            422,
            Same,
        ),
        // Row 2: cluster-scoped objects at namespaced paths.
        row(
            "scope: node at a namespaced path",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/nodes/{ns}")),
            404,
            Same,
        ),
        row(
            "scope: node at a namespaced path, any version",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/nodes/{ns}?resourceVersion=0")),
            404,
            Same,
        ),
        row(
            "scope: node on the legacy watch path",
            &reader,
            Probe::get(format!("/api/v1/watch/namespaces/{ns}/nodes/{ns}")),
            404,
            Same,
        ),
        row(
            "scope: nodes listed in a namespace",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/nodes")),
            404,
            Same,
        ),
        row(
            "scope: persistent volume at a namespaced path",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/persistentvolumes/{ns}?resourceVersion=0")),
            404,
            Same,
        ),
        row(
            "scope: cluster role at a namespaced path",
            &reader,
            Probe::get(format!("{RBAC}/namespaces/{ns}/clusterroles/{ns}?resourceVersion=0")),
            404,
            Same,
        ),
        row(
            "scope: namespaces inside a namespace",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/namespaces/{ns}?resourceVersion=0")),
            404,
            Same,
        ),
        row(
            "scope: the namespace object itself stays served",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}?resourceVersion=0")),
            200,
            SameStatus,
        ),
        row(
            "scope: the node at its own path is not the reader's",
            &reader,
            Probe::get(format!("/api/v1/nodes/{ns}?resourceVersion=0")),
            403,
            Same,
        ),
    ];
    check_rows(&ca, socket(&api), socket(&server), rows).await;

    // Row 1, extras: the key the API server authorized (`A`, from `%41`) is
    // the key it receives through watchmux, not a lower-cased `a`.
    let review = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
    let extra = Probe::post("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
        .header("impersonate-user", "tb-bob")
        .header("impersonate-extra-%41", "v");
    for addr in [socket(&api), socket(&server)] {
        let (code, body) = send(&ca, addr, &imp, &extra).await;
        assert_eq!(code, 201, "{addr}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"]["userInfo"]["extra"], json!({"A": ["v"]}), "{addr}: {body}");
    }

    // Row 9: a pair with `;` does not exist for Go; `?watch=1;` is a LIST.
    for path in [
        format!("/api/v1/namespaces/{ns}/configmaps?watch=1;"),
        format!("/api/v1/namespaces/{ns}/configmaps?watch=1;&resourceVersion=0"),
    ] {
        for addr in [socket(&api), socket(&server)] {
            let (code, body) = send(&ca, addr, &reader, &Probe::get(path.as_str())).await;
            assert_eq!(code, 200, "{addr} {path}: {body}");
            let v: serde_json::Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{addr} {path}: not one JSON list ({e}): {body}"));
            assert_eq!(v["kind"], "ConfigMapList", "{addr} {path}");
        }
    }
    drop(wm);
}

/// Sends `head` (a whole request head, bytes as they are) on a new
/// connection, over TLS trusting `ca` when given; the status code.
async fn raw_status(addr: std::net::SocketAddr, ca: Option<&Path>, head: &str) -> u16 {
    let mut response = Vec::new();
    let exchange = async {
        match ca {
            Some(ca) => {
                let mut tls = tls_connect(addr, ca, b"http/1.1").await;
                tls.write_all(head.as_bytes()).await.unwrap();
                let _ = tls.read_to_end(&mut response).await;
            }
            None => {
                let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.write_all(head.as_bytes()).await.unwrap();
                let _ = tcp.read_to_end(&mut response).await;
            }
        }
    };
    // Every case here closes the connection; a kept one is cut at 5 s.
    let _ = tokio::time::timeout(Duration::from_secs(5), exchange).await;
    let text = String::from_utf8_lossy(&response);
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{addr}: no status line: {text:?}"))
}

/// Row 9 (Host): Go's HTTP server answers a bad `Host` with 400 before any
/// handler, in every mode; watchmux does the same (trusted-local on plain
/// HTTP here, the API server over TLS). The admin listener answers only IP
/// literals and localhost.
#[tokio::test]
async fn bad_host_headers_get_gos_400_and_the_admin_port_refuses_rebound_names() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    let api = socket(&cluster_api(&cluster));
    let ca = cluster_file(&cluster, "ca.crt");
    let path = "/api/v1/namespaces/default/configmaps";
    for (case, hosts) in [
        ("two Host headers", "Host: localhost\r\nHost: localhost\r\n"),
        ("two different Host headers", "Host: localhost\r\nHost: evil.example\r\n"),
        ("userinfo in Host", "Host: localhost:80@evil.example\r\n"),
        ("a space in Host", "Host: local host\r\n"),
        ("no Host on HTTP/1.1", ""),
    ] {
        let head = format!("GET {path} HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n");
        let direct = raw_status(api, Some(&ca), &head).await;
        let via = raw_status(wm.addr, None, &head).await;
        assert_eq!((direct, via), (400, 400), "{case}");
    }
    // A loopback Host still works (the request itself is answered).
    let ok = raw_status(wm.addr, None, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"))
        .await;
    assert_eq!(ok, 200);

    for (host, want) in
        [("evil.example", 403), ("localhost.evil.example:9444", 403), ("127.0.0.1", 200), ("localhost:1", 200)]
    {
        let head = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        assert_eq!(raw_status(wm.admin, None, &head).await, want, "admin, Host {host}");
    }
}
