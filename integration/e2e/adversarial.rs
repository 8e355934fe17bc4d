//! The adversarial differential suite: identities × hostile requests, each
//! sent straight to the real API server and through watchmux with the same
//! credentials and the same bytes. Every row must get the API server's
//! status (and its body where the API server's is deterministic), or a
//! difference that is stricter and written down in the row and in
//! docs/auth.md. It covers every case of security issue 10 and grows with
//! every bug found.
//!
//! Requests go over raw HTTP/1.1 on TLS, so a row controls every header:
//! `Connection` and `Upgrade` tricks, repeated and mixed-case identity
//! headers, and paths with percent-encodings, empty and dot segments.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;

use crate::auth::{
    Credential, client, cluster_api, cluster_file, issue_cert, reader_namespace, start_delegated, token_for,
    until_direct,
};
use crate::env::*;

const WAIT: Duration = Duration::from_secs(20);

/// Who a row's request is from.
#[derive(Clone)]
pub(crate) enum Who {
    Anonymous,
    Token(String),
    Cert(PathBuf, PathBuf),
}

/// One request of a row: method, path (sent as is), headers (sent as is).
pub(crate) struct Probe<'a> {
    pub method: &'a str,
    pub path: String,
    pub headers: Vec<(&'a str, String)>,
    pub body: &'a str,
}

impl<'a> Probe<'a> {
    pub(crate) fn get(path: impl Into<String>) -> Self {
        Self { method: "GET", path: path.into(), headers: Vec::new(), body: "" }
    }

    pub(crate) fn post(path: impl Into<String>, body: &'a str) -> Self {
        Self { method: "POST", path: path.into(), headers: vec![("content-type", "application/json".into())], body }
    }

    pub(crate) fn header(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// A TLS client trusting `ca`, with `who`'s certificate if it has one,
/// offering `alpn`.
fn tls_config(ca: &Path, who: &Who, alpn: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match who {
        Who::Cert(crt, key) => {
            let chain = CertificateDer::pem_file_iter(crt).unwrap().map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap()).unwrap()
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// Sends one request over a fresh TLS connection (HTTP/1.1 by ALPN) to
/// `addr` as `who`; status and body, the body cut short for watches.
pub(crate) async fn send(ca: &Path, addr: SocketAddr, who: &Who, probe: &Probe<'_>) -> (u16, String) {
    let config = tls_config(ca, who, b"http/1.1");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn.with_upgrades());
    let mut req = Request::builder().method(probe.method).uri(probe.path.as_str()).header("host", addr.to_string());
    if let Who::Token(t) = who {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in &probe.headers {
        req = req.header(*k, v.as_str());
    }
    let req = req.body(Full::new(Bytes::copy_from_slice(probe.body.as_bytes()))).unwrap();
    let resp = tokio::time::timeout(WAIT, sender.send_request(req)).await.expect("an answer in time").unwrap();
    let status = resp.status().as_u16();
    // A watch that was allowed streams: its first bytes are enough.
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
        if let Ok(data) = frame.into_data() {
            bytes.extend_from_slice(&data);
        }
        if bytes.len() > 64 * 1024 {
            break;
        }
    }
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// How a row's answer through watchmux must compare with the direct one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Expect {
    /// The same status and the same body.
    Same,
    /// The same status; the bodies differ in what is not deterministic
    /// (a list's resourceVersion, a watch's timing).
    SameStatus,
    /// watchmux is stricter, on purpose and written down: this status
    /// through watchmux, whatever the API server answers.
    Stricter(u16),
}

pub(crate) struct Row<'a> {
    pub name: &'a str,
    pub who: Who,
    pub probe: Probe<'a>,
    pub expect: Expect,
    /// The status the API server is expected to give (proves the row tests
    /// what it means to test).
    pub direct: u16,
}

pub(crate) async fn check_rows(ca: &Path, api: SocketAddr, via: SocketAddr, rows: Vec<Row<'_>>) {
    let mut failures = Vec::new();
    for row in &rows {
        let d = send(ca, api, &row.who, &row.probe).await;
        let v = send(ca, via, &row.who, &row.probe).await;
        let ok = d.0 == row.direct
            && match row.expect {
                Expect::Same => d == v,
                Expect::SameStatus => d.0 == v.0,
                Expect::Stricter(code) => v.0 == code,
            };
        if !ok {
            failures.push(format!(
                "{}: {} {}\n  direct:  {} {:?}\n  watchmux: {} {:?}\n  expected {:?}, direct {}",
                row.name, row.probe.method, row.probe.path, d.0, d.1, v.0, v.1, row.expect, row.direct
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} rows differ:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

pub(crate) fn socket(server: &str) -> SocketAddr {
    server.trim_start_matches("https://").trim_end_matches('/').parse().unwrap()
}

/// Percent-encodes the first `-` of `s` (`e2e-x` → `e2e%2Dx`).
fn encode_dash(s: &str) -> String {
    s.replacen('-', "%2D", 1)
}

/// Identities × hostile requests against a delegated watchmux that caches
/// everything (`*`, as the chart allows): nobody reads or does through
/// watchmux what the API server would refuse them.
#[tokio::test]
async fn hostile_requests_get_the_api_servers_answer_through_delegated_watchmux() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let server_minor = cluster.server_minor();
    // ConstrainedImpersonation: beta and on by default from 1.36.
    let constrained_impersonation = server_minor >= 36;
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "adv").await;
    let other = namespace("adv-other");
    create_namespace(&admin, &other).await;
    configmap(&admin, "create", &other, "theirs").await;
    direct_json(
        &admin,
        http::Method::POST,
        &format!("/api/v1/namespaces/{other}/secrets"),
        json!({"metadata": {"name": "s"}}),
    )
    .await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &["--cache-resources", "*"]).await;
    let token = token_for(&cluster, &ns, &[]);
    let api = cluster_api(&cluster);
    let direct = client(&cluster, dir.path(), &api, Credential::Token(&token));
    until_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps"), |c| c == 200).await;

    let node = issue_cert(&cluster, dir.path(), "adv-node", "/O=system:nodes/CN=system:node:adv-n1", true);
    // The API server reads the last CN: this is "nobody" in group system:nodes.
    let two_cns =
        issue_cert(&cluster, dir.path(), "adv-two-cns", "/CN=system:node:adv-n1/O=system:nodes/CN=nobody", true);
    let two_uids = issue_cert(&cluster, dir.path(), "adv-two-uids", "/CN=system:admin/k8suid=u1/k8suid=u2", true);
    let one_uid = issue_cert(&cluster, dir.path(), "adv-one-uid", "/CN=adv-uid-user/k8suid=u1", true);

    // Constrained impersonation (kube-apiserver 1.36+): the reader may list
    // configmaps in its namespace as adv-bob, and nothing else as anyone.
    let bob = format!("adv-bob-{ns}");
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let sa = json!([{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]);
    direct_json(&admin, http::Method::POST, &format!("{rbac}/clusterroles"), json!({"metadata": {"name": bob},
        "rules": [{"apiGroups": ["authentication.k8s.io"], "resources": ["users"], "resourceNames": [bob], "verbs": ["impersonate:user-info"]}]})).await;
    direct_json(
        &admin,
        http::Method::POST,
        &format!("{rbac}/clusterrolebindings"),
        json!({"metadata": {"name": bob},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": bob}, "subjects": sa}),
    )
    .await;
    direct_json(
        &admin,
        http::Method::POST,
        &format!("{rbac}/namespaces/{ns}/roles"),
        json!({"metadata": {"name": "imp-on"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["impersonate-on:user-info:list"]}]}),
    )
    .await;
    direct_json(
        &admin,
        http::Method::POST,
        &format!("{rbac}/namespaces/{ns}/rolebindings"),
        json!({"metadata": {"name": "imp-on"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "imp-on"}, "subjects": sa}),
    )
    .await;
    direct_json(
        &admin,
        http::Method::POST,
        &format!("{rbac}/namespaces/{ns}/rolebindings"),
        json!({"metadata": {"name": "bob-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "User", "name": bob, "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .await;
    until_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps"), |c| c == 200).await;

    let reader = Who::Token(token.clone());
    let anon = Who::Anonymous;
    let node = Who::Cert(node.0, node.1);
    let two_cns = Who::Cert(two_cns.0, two_cns.1);
    let two_uids = Who::Cert(two_uids.0, two_uids.1);
    let one_uid = Who::Cert(one_uid.0, one_uid.1);
    let trick = "Impersonate-User, Impersonate-Group, Impersonate-Uid, Authorization";
    let sar = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
    let tr = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"x"}}"#;
    let row = |name, who: &Who, probe, direct, expect| Row { name, who: who.clone(), probe, expect, direct };
    use Expect::*;

    let rows = vec![
        // Connection naming the identity headers watchmux sets (issue 10's critical case).
        row(
            "conn: anonymous lists another namespace",
            &anon,
            Probe::get(format!("/api/v1/namespaces/{other}/configmaps?pretty=1")).header("connection", trick),
            403,
            Same,
        ),
        row(
            "conn: anonymous self review",
            &anon,
            Probe::post("/apis/authentication.k8s.io/v1/selfsubjectreviews", sar).header("connection", trick),
            403,
            Same,
        ),
        row(
            "conn: anonymous token review oracle",
            &anon,
            Probe::post("/apis/authentication.k8s.io/v1/tokenreviews", tr).header("connection", trick),
            403,
            Same,
        ),
        row(
            "conn: node lists every pod",
            &node,
            Probe::get("/api/v1/pods?pretty=1").header("connection", trick),
            403,
            Same,
        ),
        row(
            "conn: anonymous lists every secret, everything cached",
            &anon,
            Probe::get("/api/v1/secrets").header("connection", trick),
            403,
            Same,
        ),
        row(
            "conn: reader's writes elsewhere",
            &reader,
            Probe::post(format!("/api/v1/namespaces/{other}/configmaps"), r#"{"metadata":{"name":"x"}}"#)
                .header("connection", "impersonate-user,IMPERSONATE-GROUP"),
            403,
            Same,
        ),
        // Upgrade tricks: exec as anonymous, with identity headers named hop-by-hop.
        row(
            "upgrade: anonymous exec",
            &anon,
            Probe::post(format!("/api/v1/namespaces/{other}/pods/p/exec?command=id&stdout=1"), "")
                .header("connection", "Upgrade, Impersonate-User, Impersonate-Group")
                .header("upgrade", "SPDY/3.1")
                .header("x-stream-protocol-version", "v4.channel.k8s.io"),
            403,
            Same,
        ),
        // Front-proxy headers are nobody's word.
        row(
            "x-remote: anonymous claims system:admin",
            &anon,
            Probe::get("/api/v1/secrets")
                .header("x-remote-user", "system:admin")
                .header("x-remote-group", "system:masters"),
            403,
            Same,
        ),
        row(
            "x-remote: reader claims system:masters",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{other}/configmaps")).header("X-Remote-Group", "system:masters"),
            403,
            Same,
        ),
        // Impersonation variants, repeated and mixed-case headers included.
        row(
            "impersonate: reader as system:admin",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{other}/configmaps")).header("impersonate-user", "system:admin"),
            403,
            Same,
        ),
        row(
            "impersonate: repeated, mixed case",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps"))
                .header("Impersonate-User", "system:admin")
                .header("IMPERSONATE-USER", "system:anonymous"),
            403,
            Same,
        ),
        row(
            "impersonate: group without user",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps")).header("impersonate-group", "system:masters"),
            // 1.34's legacy filter: responsewriters.InternalError.
            if server_minor <= 34 { 500 } else { 400 },
            Same,
        ),
        row(
            "impersonate: malformed service account name",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps"))
                .header("impersonate-user", format!("system:serviceaccount:{ns}:Bad_Name")),
            403,
            Same,
        ),
        row(
            "impersonate: anonymous as a node",
            &anon,
            Probe::get("/api/v1/pods?fieldSelector=spec.nodeName%3Dadv-n1")
                .header("impersonate-user", "system:node:adv-n1"),
            403,
            Same,
        ),
        // Percent-encoded paths are the API server's decoded paths.
        row(
            "encoding: version as %31",
            &reader,
            Probe::get(format!("/api/v%31/namespaces/{ns}/configmaps")),
            200,
            SameStatus,
        ),
        row(
            "encoding: namespace with %2D",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{}/configmaps", encode_dash(&ns))),
            200,
            SameStatus,
        ),
        row(
            "encoding: another namespace with %2D",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{}/configmaps", encode_dash(&other))),
            403,
            Same,
        ),
        row("encoding: group as %61pps", &anon, Probe::get("/apis/%61pps/v1/deployments"), 403, Same),
        row(
            // %2F is a separator once decoded: this is the reader's own cm1.
            "encoding: escaped slash",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}%2Fconfigmaps/cm1")),
            200,
            Same,
        ),
        row(
            "encoding: malformed escape",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps/%zz")),
            400,
            Same,
        ),
        row("path: empty segment", &reader, Probe::get(format!("/api/v1/namespaces/{ns}//configmaps")), 403, Same),
        row(
            "path: dot segments",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{other}/../{ns}/configmaps")),
            403,
            Same,
        ),
        // Repeated parameters and selector tricks.
        row(
            "query: repeated watch and selector",
            &reader,
            Probe::get(format!(
                "/api/v1/namespaces/{other}/configmaps?watch=0&watch=1&labelSelector=a&labelSelector=b"
            )),
            403,
            Same,
        ),
        row(
            "selector: name of another namespace's object",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{other}/configmaps?fieldSelector=metadata.name%3Dtheirs")),
            403,
            Same,
        ),
        row(
            "selector: legacy watch path with a name selector",
            &node,
            Probe::get(format!("/api/v1/watch/namespaces/{other}/secrets?fieldSelector=metadata.name%3Ds")),
            403,
            Same,
        ),
        row(
            "selector: legacy watch by name with another name",
            &reader,
            Probe::get(format!("/api/v1/watch/namespaces/{ns}/configmaps/cm1?fieldSelector=metadata.name%3Dother")),
            400,
            Same,
        ),
        // Certificates with odd subjects.
        row("cert: last CN wins", &two_cns, Probe::get("/api/v1/pods?fieldSelector=spec.nodeName%3Dadv-n1"), 403, Same),
        row("cert: two UIDs", &two_uids, Probe::get("/api/v1/namespaces"), 401, Same),
        row("cert: a UID is the uid", &one_uid, Probe::get(format!("/api/v1/namespaces/{ns}/configmaps")), 403, Same),
        // Constrained impersonation, allowed and refused by its own verbs
        // (from 1.36; before, the legacy filter refuses what they allow).
        row(
            "constrained: list as bob, allowed by impersonate-on:user-info:list",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"))
                .header("impersonate-user", bob.clone()),
            if constrained_impersonation { 200 } else { 403 },
            SameStatus,
        ),
        row(
            "constrained: get as bob, not allowed for get",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps/cm1")).header("impersonate-user", bob.clone()),
            403,
            Same,
        ),
        row(
            "constrained: list elsewhere as bob",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{other}/configmaps")).header("impersonate-user", bob.clone()),
            403,
            Same,
        ),
        row(
            "constrained: bob with system:masters",
            &reader,
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps"))
                .header("impersonate-user", bob.clone())
                .header("impersonate-group", "system:masters"),
            403,
            Same,
        ),
        row(
            "constrained: a non-resource path as bob",
            &reader,
            Probe::get("/version").header("impersonate-user", bob.clone()),
            403,
            Same,
        ),
    ];
    check_rows(&cluster_file(&cluster, "ca.crt"), socket(&api), socket(&server), rows).await;
    drop(wm);
}

/// trusted-local behind a loopback listener: requests naming a host other
/// than a loopback name get `kubectl proxy`'s 403 before any work (the API
/// server has no such check; this is the stricter difference of issue 10's
/// DNS-rebinding case). Loopback names work as directly.
#[tokio::test]
async fn trusted_local_refuses_rebound_host_names() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &[]).await;
    for (host, want) in
        [("evil.example", 403), ("localhost.evil.example:80", 403), ("localhost", 200), ("127.0.0.1:1", 200)]
    {
        let stream = tokio::net::TcpStream::connect(wm.addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        let req =
            Request::get("/api/v1/namespaces/default/configmaps").header("host", host).body(Full::<Bytes>::default());
        let (code, body) = read(send.send_request(req.unwrap()).await.unwrap()).await;
        assert_eq!(code, want, "{host}: {}", String::from_utf8_lossy(&body));
        if want == 403 {
            assert_eq!(body, "Forbidden");
        }
    }
}

/// Writes a kubeconfig for `server` with a client certificate.
pub(crate) fn cert_kubeconfig(cluster: &Cluster, dir: &Path, server: &str, crt: &Path, key: &Path) -> PathBuf {
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": cluster_file(cluster, "ca.crt")}}],
        "users": [{"name": "u", "user": {"client-certificate": crt, "client-key": key}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    });
    let path = dir.join("node-upstream.kubeconfig");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

/// A node-local watchmux holding only the node's own credentials
/// (`--upstream-identity=client`): the node's kubelet gets what it would
/// directly, other clients pass through with their own credentials, and
/// nobody gains anything the node or they did not already have.
#[tokio::test]
async fn a_node_local_watchmux_with_node_credentials_grants_nothing_beyond_them() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "adv-node").await;
    let node_name = format!("adv-nl-{}", std::process::id());
    let pod = json!({"metadata": {"name": "mine"}, "spec": {"nodeName": node_name,
        "containers": [{"name": "c", "image": "registry.invalid/none"}]}});
    direct_json(&admin, http::Method::POST, &format!("/api/v1/namespaces/{ns}/pods"), pod).await;
    let (crt, key) =
        issue_cert(&cluster, dir.path(), "nl-node", &format!("/O=system:nodes/CN=system:node:{node_name}"), true);
    let api = cluster_api(&cluster);
    let upstream = cert_kubeconfig(&cluster, dir.path(), &api, &crt, &key);
    let (serving_crt, serving_key) = issue_cert(&cluster, dir.path(), "nl-serving", "/CN=watchmux", false);
    let scope = format!("pods=fieldSelector=spec.nodeName={node_name}");
    let client_ca = cluster_file(&cluster, "ca.crt");
    let args = [
        "--auth-mode",
        "delegated",
        "--upstream-identity",
        "client",
        "--tls-cert-file",
        serving_crt.to_str().unwrap(),
        "--tls-private-key-file",
        serving_key.to_str().unwrap(),
        "--client-ca-file",
        client_ca.to_str().unwrap(),
        "--cache-resources",
        "pods,services",
        "--cache-scope",
        &scope,
    ];
    let wm = Watchmux::start_with_kubeconfig(&cluster, &upstream, &args).await;
    let via = format!("https://{}", wm.addr);
    let token = token_for(&cluster, &ns, &[]);
    let kubelet = Who::Cert(crt.clone(), key.clone());
    let other_node = issue_cert(&cluster, dir.path(), "nl-other", "/O=system:nodes/CN=system:node:adv-nl-other", true);
    let other_node = Who::Cert(other_node.0, other_node.1);
    // Issue 23 row 3: the node's user name in another group is not the node.
    let tenant = issue_cert(&cluster, dir.path(), "nl-tenant", &format!("/O=tenants/CN=system:node:{node_name}"), true);
    let tenant = Who::Cert(tenant.0, tenant.1);
    use Expect::*;
    let row = |name, who: &Who, probe, direct, expect| Row { name, who: who.clone(), probe, expect, direct };
    let rows = vec![
        row(
            "kubelet: its own pods",
            &kubelet,
            Probe::get(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}&resourceVersion=0")),
            200,
            SameStatus,
        ),
        row("kubelet: every pod", &kubelet, Probe::get("/api/v1/pods"), 403, Same),
        row("kubelet: secrets", &kubelet, Probe::get("/api/v1/secrets"), 403, Same),
        row(
            "kubelet: its node (pass-through with the node's own credentials)",
            &kubelet,
            Probe::get(format!("/api/v1/nodes/{node_name}")),
            404,
            Same,
        ),
        row(
            "kubelet: services from the cache",
            &kubelet,
            Probe::get("/api/v1/services?resourceVersion=0"),
            200,
            SameStatus,
        ),
        row(
            "reader token: its namespace (its own token upstream)",
            &reader_who(&token),
            Probe::get(format!("/api/v1/namespaces/{ns}/configmaps")),
            200,
            SameStatus,
        ),
        row(
            "reader token: pods are not its to read",
            &reader_who(&token),
            Probe::get(format!("/api/v1/namespaces/{ns}/pods")),
            403,
            Same,
        ),
        row(
            "reader token: writes elsewhere",
            &reader_who(&token),
            Probe::post("/api/v1/namespaces/default/configmaps", r#"{"metadata":{"name":"x"}}"#),
            403,
            Same,
        ),
        row("anonymous: no node rights", &Who::Anonymous, Probe::get("/api/v1/namespaces/default/pods"), 403, Same),
        row(
            "anonymous: no node rights through a pass-through trick",
            &Who::Anonymous,
            Probe::get("/api/v1/nodes?pretty=1").header("connection", "Authorization, Impersonate-User"),
            403,
            Same,
        ),
        // Another node's certificate proves who it is to watchmux, which
        // cannot present it upstream: refused (stricter) rather than sent
        // with the first node's credentials.
        row(
            "other node: pass-through refused",
            &other_node,
            Probe::get("/api/v1/nodes/adv-nl-other"),
            404,
            Stricter(403),
        ),
        row(
            "other node: the first node's pods, from the cache",
            &other_node,
            Probe::get(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}")),
            403,
            Same,
        ),
        // The node's name in group `tenants`: neither the Node authorizer's
        // nor watchmux's own identity, so no pass-through with the node's
        // credentials (stricter: 403 for what the API server answers 404)...
        row(
            "node's name, other group: pass-through refused",
            &tenant,
            Probe::get(format!("/api/v1/nodes/{node_name}")),
            403,
            SameStatus,
        ),
        // ...and not through the remembered-denial path either: the second
        // ask is answered from the denial cache by passing through.
        row(
            "node's name, other group: the node's pods",
            &tenant,
            Probe::get(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}")),
            403,
            Same,
        ),
        row(
            "node's name, other group: the node's pods again (remembered denial)",
            &tenant,
            Probe::get(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}")),
            403,
            SameStatus,
        ),
    ];
    check_rows(&cluster_file(&cluster, "ca.crt"), socket(&api), socket(&via), rows).await;
    drop(wm);
}

fn reader_who(token: &str) -> Who {
    Who::Token(token.to_owned())
}

/// An HTTP/2 connection over TLS (h2 by ALPN) to `addr`, trusting `ca`: its
/// sender and its connection's end.
async fn h2_tls(
    ca: &Path,
    addr: SocketAddr,
) -> (hyper::client::conn::http2::SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
    let config = tls_config(ca, &Who::Anonymous, b"h2");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    (
        send,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

/// kube-apiserver's UnauthenticatedHTTP2DOSMitigation, side by side: an
/// anonymous HTTP/2 request, and one with a token that fails, are answered
/// and then their connection ends (GOAWAY), straight at the API server and
/// through delegated watchmux alike; a client with a valid token keeps its
/// connection for the next request at both.
#[tokio::test]
async fn anonymous_http2_connections_end_after_one_request_as_at_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "adv-h2").await;
    let (_wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let token = token_for(&cluster, &ns, &[]);
    let ca = cluster_file(&cluster, "ca.crt");
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let req = |token: Option<&str>| {
        let mut req = Request::get(path.as_str());
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        req.body(Full::<Bytes>::default()).unwrap()
    };
    for (name, addr) in [("api server", socket(&cluster_api(&cluster))), ("watchmux", socket(&server))] {
        for bad in [None, Some("not-a-token")] {
            let (mut send, ended) = h2_tls(&ca, addr).await;
            let resp = tokio::time::timeout(WAIT, send.send_request(req(bad))).await.unwrap().unwrap();
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            let closed = tokio::time::timeout(WAIT, ended).await;
            assert!(closed.is_ok(), "{name}: the connection of a {status} to {bad:?} stayed open");
        }
        let (mut send, ended) = h2_tls(&ca, addr).await;
        for _ in 0..3 {
            let resp = tokio::time::timeout(WAIT, send.send_request(req(Some(&token)))).await.unwrap().unwrap();
            // Allowed or not yet (RBAC may lag): authenticated either way.
            assert!(resp.status() != 401, "{name}");
            let _ = resp.into_body().collect().await;
        }
        assert!(!ended.is_finished(), "{name}: an authenticated client lost its connection");
    }
}
