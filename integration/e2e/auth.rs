//! Delegated auth against the real API server: nobody reads through watchmux
//! what they could not read from kube-apiserver directly.
//!
//! Every identity here is a real one the API server knows: a service
//! account's token (RBAC decides), a kubelet's client certificate signed by
//! the cluster CA (the Node authorizer decides, selectors included). Each
//! answer through watchmux is compared with the same request made straight
//! to the API server with the same credentials, byte for byte where the
//! API server's answer is deterministic.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::env::*;
use watchmux::upstream::{Upstream, UpstreamOptions};

const WAIT: Duration = Duration::from_secs(20);

/// The cluster's CA and service-account signing key (cluster-up.sh).
pub(crate) fn cluster_file(cluster: &Cluster, name: &str) -> PathBuf {
    cluster.kubeconfig.parent().unwrap().join("cluster").join(name)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A certificate signed by the cluster CA: `client` for a client (CN user,
/// O groups), else a serving certificate for 127.0.0.1.
pub(crate) fn issue_cert(cluster: &Cluster, dir: &Path, stem: &str, subject: &str, client: bool) -> (PathBuf, PathBuf) {
    let (crt, key, ext) =
        (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")), dir.join(format!("{stem}.ext")));
    run(Command::new("openssl")
        .args(["genpkey", "-quiet", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&key));
    let usage = if client {
        "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n"
    } else {
        "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\nsubjectAltName=IP:127.0.0.1\n"
    };
    std::fs::write(&ext, format!("basicConstraints=critical,CA:FALSE\n{usage}")).unwrap();
    let csr = dir.join(format!("{stem}.csr"));
    // Names the API server's UID attribute, so subjects may say `/k8suid=...`.
    let config = dir.join("openssl-uid.cnf");
    std::fs::write(
        &config,
        "oid_section = oids\n[ oids ]\nk8suid = 1.3.6.1.4.1.57683.2\n[ req ]\ndistinguished_name = dn\n[ dn ]\n",
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["req", "-new", "-config"])
        .arg(&config)
        .args(["-subj", subject, "-key"])
        .arg(&key)
        .arg("-out")
        .arg(&csr));
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "1", "-set_serial", "0x1234", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(cluster_file(cluster, "ca.crt"))
        .arg("-CAkey")
        .arg(cluster_file(cluster, "ca.key"))
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&crt));
    (crt, key)
}

/// How a test client proves who it is.
pub(crate) enum Credential<'a> {
    Token(&'a str),
    Cert(&'a Path, &'a Path),
    None,
}

/// A client for `server` (the API server or a watchmux) with `cred`,
/// trusting the cluster CA; built from a kubeconfig like any client's.
pub(crate) fn client(cluster: &Cluster, dir: &Path, server: &str, cred: Credential) -> Arc<Upstream> {
    let user = match cred {
        Credential::Token(t) => json!({"token": t}),
        Credential::Cert(c, k) => json!({"client-certificate": c, "client-key": k}),
        Credential::None => json!({}),
    };
    let ca = cluster_file(cluster, "ca.crt");
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    });
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let path = dir.join(format!("kubeconfig-{nanos}"));
    std::fs::write(&path, cfg.to_string()).unwrap();
    let resolved = watchmux::upstream::kubeconfig::resolve(Some(&path), None).unwrap();
    Arc::new(Upstream::new(&resolved, UpstreamOptions::default()).unwrap())
}

/// A GET with extra headers; status, the headers that matter, and body.
async fn get_with(client: &Upstream, path: &str, headers: &[(&str, &str)]) -> (u16, Bytes) {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    read(client.send(req.body(watchmux::body::empty()).unwrap()).await.unwrap()).await
}

/// The same GET straight at the API server and through watchmux must get the
/// same status and body; returns them.
async fn same_answer(direct: &Upstream, via: &Upstream, path: &str, headers: &[(&str, &str)]) -> (u16, Bytes) {
    let d = get_with(direct, path, headers).await;
    let v = get_with(via, path, headers).await;
    assert_eq!(
        (v.0, String::from_utf8_lossy(&v.1)),
        (d.0, String::from_utf8_lossy(&d.1)),
        "GET {path}: through watchmux (left) differs from the API server (right)"
    );
    v
}

/// Polls the API server until `cond` holds for the answer to `path` (RBAC
/// and the Node authorizer's graph update asynchronously).
pub(crate) async fn until_direct(client: &Upstream, path: &str, cond: impl Fn(u16) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (code, _) = get_with(client, path, &[]).await;
        if cond(code) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "GET {path} still {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A namespace with a service account allowed to read configmaps there.
pub(crate) async fn reader_namespace(admin: &Upstream, test: &str) -> String {
    let ns = namespace(test);
    create_namespace(admin, &ns).await;
    let base = format!("/api/v1/namespaces/{ns}");
    direct_json(admin, http::Method::POST, &format!("{base}/serviceaccounts"), json!({"metadata": {"name": "reader"}}))
        .await;
    grant_configmap_reading(admin, &ns, &ns).await;
    configmap(admin, "create", &ns, "cm1").await;
    ns
}

/// Lets the `reader` service account of `reader_ns` read configmaps in `ns`.
async fn grant_configmap_reading(admin: &Upstream, ns: &str, reader_ns: &str) {
    let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}");
    let role = json!({"metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]});
    direct_json(admin, http::Method::POST, &format!("{rbac}/roles"), role).await;
    let binding = json!({"metadata": {"name": "cm-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": reader_ns}]});
    direct_json(admin, http::Method::POST, &format!("{rbac}/rolebindings"), binding).await;
}

pub(crate) fn token_for(cluster: &Cluster, ns: &str, extra: &[&str]) -> String {
    let mut args = vec!["create", "token", "reader", "-n", ns, "--duration", "1h"];
    args.extend_from_slice(extra);
    let out = cluster.kubectl_direct(&args);
    assert!(out.ok, "{out:?}");
    out.stdout.trim().to_owned()
}

pub(crate) async fn start_delegated(cluster: &Cluster, dir: &Path, extra: &[&str]) -> (Watchmux, String) {
    let (crt, key) = issue_cert(cluster, dir, "serving", "/CN=watchmux", false);
    let ca = cluster_file(cluster, "ca.crt");
    let mut args = vec![
        "--auth-mode".to_owned(),
        "delegated".to_owned(),
        "--tls-cert-file".to_owned(),
        crt.display().to_string(),
        "--tls-private-key-file".to_owned(),
        key.display().to_string(),
        "--client-ca-file".to_owned(),
        ca.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let wm = Watchmux::start(cluster, &argv).await;
    let server = format!("https://{}", wm.addr);
    (wm, server)
}

#[tokio::test]
async fn a_service_account_reads_its_namespace_through_the_cache_and_is_denied_elsewhere() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "authz").await;
    let other = namespace("authz-other");
    create_namespace(&admin, &other).await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let token = token_for(&cluster, &ns, &[]);
    let api = String::from_utf8_lossy(&std::fs::read(&cluster.kubeconfig).unwrap())
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_owned))
        .unwrap();
    let direct = client(&cluster, dir.path(), &api, Credential::Token(&token));
    let via = client(&cluster, dir.path(), &server, Credential::Token(&token));
    until_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps"), |c| c == 200).await;

    // Allowed: from the cache (the list counter moves), same object as direct.
    // At any version: a consistent LIST is the cache's only when it is
    // current at the API server's revision (other tests write meanwhile).
    let lists_before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &["configmaps"]).await;
    let (code, body) = get_with(&via, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"), &[]).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "cm1");
    assert!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &["configmaps"]).await > lists_before);
    let (code, _) =
        same_answer(&direct, &via, &format!("/api/v1/namespaces/{ns}/configmaps/cm1?resourceVersion=0"), &[]).await;
    assert_eq!(code, 200);

    // Denied in another namespace, cluster-wide, and for another resource:
    // the API server's own 403, byte for byte.
    for path in [
        format!("/api/v1/namespaces/{other}/configmaps"),
        format!("/api/v1/namespaces/{other}/configmaps?watch=1"),
        "/api/v1/configmaps?resourceVersion=0".to_owned(),
        format!("/api/v1/namespaces/{ns}/pods"),
        format!("/api/v1/namespaces/{other}/configmaps/cm1"),
    ] {
        let (code, _) = same_answer(&direct, &via, &path, &[]).await;
        assert_eq!(code, 403, "{path}");
    }
    let denied = watchmux_metric_sum(wm.admin, "watchmux_auth_authorization_decisions_total", &["denied"]).await;
    assert!(denied >= 3.0, "the cached reads were denied by watchmux's own review: {denied}");

    // A watch through the cache sees a change made afterwards.
    let resp = via
        .send(
            Request::get(format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0"))
                .body(watchmux::body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(resp, tx));
    configmap(&admin, "create", &ns, "cm2").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let seen = tokio::time::timeout_at(deadline, rx.recv()).await.expect("event in time").flatten().unwrap();
        if seen.name == "cm2" {
            break;
        }
    }

    // Writes pass through impersonating the caller: the API server refuses
    // what RBAC does not grant, in its own words.
    let d = read(create_configmap(&direct, &ns).await).await;
    let v = read(create_configmap(&via, &ns).await).await;
    assert_eq!((v.0, v.1.clone()), (d.0, d.1), "create through watchmux: {}", String::from_utf8_lossy(&v.1));
    assert_eq!(v.0, 403);
}

#[tokio::test]
async fn a_kubelet_certificate_reads_only_what_the_node_authorizer_allows() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = namespace("node");
    create_namespace(&admin, &ns).await;
    let base = format!("/api/v1/namespaces/{ns}");
    for s in ["used", "unused"] {
        direct_json(&admin, http::Method::POST, &format!("{base}/secrets"), json!({"metadata": {"name": s}})).await;
    }
    let pod = |name: &str, node: &str| {
        json!({"metadata": {"name": name}, "spec": {"nodeName": node,
            "containers": [{"name": "c", "image": "registry.invalid/none"}],
            "volumes": [{"name": "s", "secret": {"secretName": if node == "kn1" { "used" } else { "none" }}}]}})
    };
    direct_json(&admin, http::Method::POST, &format!("{base}/pods"), pod("on-kn1", "kn1")).await;
    direct_json(&admin, http::Method::POST, &format!("{base}/pods"), pod("on-kn2", "kn2")).await;

    let (wm, server) = start_delegated(&cluster, dir.path(), &["--cache-resources", "pods,secrets,configmaps"]).await;
    let (crt, key) = issue_cert(&cluster, dir.path(), "node-kn1", "/O=system:nodes/CN=system:node:kn1", true);
    let api = cluster_api(&cluster);
    let direct = client(&cluster, dir.path(), &api, Credential::Cert(&crt, &key));
    let via = client(&cluster, dir.path(), &server, Credential::Cert(&crt, &key));
    // The Node authorizer learns the pod-to-secret edge from its own informer.
    until_direct(&direct, &format!("{base}/secrets/used"), |c| c == 200).await;

    // Its own pods, by the spec.nodeName selector, from the cache.
    let served_before =
        watchmux_metric_sum(wm.admin, "watchmux_auth_authorization_decisions_total", &["allowed"]).await;
    let mine = "/api/v1/pods?fieldSelector=spec.nodeName%3Dkn1&resourceVersion=0".to_owned();
    let (code, body) = get_with(&via, &mine, &[]).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let names: Vec<String> = serde_json::from_slice::<Value>(&body).unwrap()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["namespace"] == ns.as_str())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["on-kn1"]);
    let (code, _) = get_with(&via, &format!("{mine}&watch=1&timeoutSeconds=1"), &[]).await;
    assert_eq!(code, 200);
    // The secret its pod uses, also by a metadata.name watch as kubelets make it.
    let (code, _) = same_answer(&direct, &via, &format!("{base}/secrets/used?resourceVersion=0"), &[]).await;
    assert_eq!(code, 200);
    let (code, _) =
        get_with(&via, &format!("{base}/secrets?fieldSelector=metadata.name%3Dused&watch=1&timeoutSeconds=1"), &[])
            .await;
    assert_eq!(code, 200);
    assert!(
        watchmux_metric_sum(wm.admin, "watchmux_auth_authorization_decisions_total", &["allowed"]).await
            >= served_before + 4.0
    );

    // Everything else is the API server's 403, word for word (the Node
    // authorizer's reasons included).
    for path in [
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dkn2".to_owned(),
        "/api/v1/pods?watch=1".to_owned(),
        format!("{base}/secrets/unused"),
        format!("{base}/secrets?fieldSelector=metadata.name%3Dunused&watch=1"),
        format!("{base}/secrets"),
        format!("{base}/configmaps"),
    ] {
        let (code, body) = same_answer(&direct, &via, &path, &[]).await;
        assert_eq!(code, 403, "{path}: {}", String::from_utf8_lossy(&body));
    }
    // A certificate from another CA is no identity at all.
    let other_dir = tempfile::tempdir().unwrap();
    let rogue_ca = other_dir.path().join("ca");
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=rogue",
            "-keyout",
        ])
        .arg(rogue_ca.with_extension("key"))
        .arg("-out")
        .arg(rogue_ca.with_extension("crt")));
    let rogue = Cluster { kubeconfig: other_dir.path().join("kubeconfig"), ..Cluster::from_env() };
    std::fs::create_dir_all(other_dir.path().join("cluster")).unwrap();
    std::fs::copy(rogue_ca.with_extension("crt"), other_dir.path().join("cluster/ca.crt")).unwrap();
    std::fs::copy(rogue_ca.with_extension("key"), other_dir.path().join("cluster/ca.key")).unwrap();
    let (rcrt, rkey) = issue_cert(&rogue, other_dir.path(), "rogue-kn1", "/O=system:nodes/CN=system:node:kn1", true);
    let rogue_client = client(&cluster, dir.path(), &server, Credential::Cert(&rcrt, &rkey));
    let refused = rogue_client.send(Request::get(mine).body(watchmux::body::empty()).unwrap()).await;
    assert!(refused.is_err(), "the TLS handshake refuses a certificate from another CA");
}

async fn create_configmap(c: &Upstream, ns: &str) -> http::Response<hyper::body::Incoming> {
    let body = json!({"metadata": {"name": "nope"}}).to_string();
    let req = Request::post(format!("/api/v1/namespaces/{ns}/configmaps"))
        .header("content-type", "application/json")
        .body(watchmux::body::boxed(Full::new(Bytes::from(body))))
        .unwrap();
    c.send(req).await.unwrap()
}

pub(crate) fn cluster_api(cluster: &Cluster) -> String {
    String::from_utf8_lossy(&std::fs::read(&cluster.kubeconfig).unwrap())
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_owned))
        .unwrap()
}

/// A service-account JWT signed with the cluster's key, claims of our choosing.
fn mint_token(cluster: &Cluster, dir: &Path, claims: &Value) -> String {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let signing_input = format!("{}.{}", b64(br#"{"alg":"RS256","typ":"JWT"}"#), b64(claims.to_string().as_bytes()));
    let input = dir.join("jwt-input");
    std::fs::write(&input, &signing_input).unwrap();
    let sig = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(cluster_file(cluster, "sa.key"))
        .arg(&input)
        .output()
        .unwrap();
    assert!(sig.status.success());
    format!("{signing_input}.{}", b64(&sig.stdout))
}

#[tokio::test]
async fn expired_forged_and_wrong_audience_tokens_get_the_api_servers_401() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "authn").await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &["--anonymous-auth=false"]).await;
    let api = cluster_api(&cluster);
    let path = format!("/api/v1/namespaces/{ns}/configmaps");

    // A token we sign ourselves is accepted while its claims are right
    // (the control), and refused once expired.
    let sa: Value =
        direct_json(&admin, http::Method::GET, &format!("/api/v1/namespaces/{ns}/serviceaccounts/reader"), Value::Null)
            .await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = |iat: u64, exp: u64| {
        json!({"iss": "https://kubernetes.default.svc", "aud": ["https://kubernetes.default.svc"],
            "sub": format!("system:serviceaccount:{ns}:reader"), "iat": iat, "nbf": iat, "exp": exp,
            "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": "reader", "uid": sa["metadata"]["uid"]}}})
    };
    let good = mint_token(&cluster, dir.path(), &claims(now - 60, now + 3600));
    let expired = mint_token(&cluster, dir.path(), &claims(now - 7200, now - 3600));
    let direct_good = client(&cluster, dir.path(), &api, Credential::Token(&good));
    until_direct(&direct_good, &path, |c| c == 200).await;
    let via_good = client(&cluster, dir.path(), &server, Credential::Token(&good));
    assert_eq!(get_with(&via_good, &path, &[]).await.0, 200, "the control token is accepted");

    // Forged: a valid token's claims swapped for someone else's, signature kept.
    let real = token_for(&cluster, &ns, &[]);
    let mut parts: Vec<String> = real.split('.').map(str::to_owned).collect();
    {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut payload: Value = serde_json::from_slice(&engine.decode(&parts[1]).unwrap()).unwrap();
        payload["sub"] = json!("system:serviceaccount:kube-system:admin");
        parts[1] = engine.encode(payload.to_string());
    }
    let forged = parts.join(".");
    let wrong_audience = token_for(&cluster, &ns, &["--audience", "https://elsewhere.example"]);

    let reviews_before = watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_total", &["token"]).await;
    for (what, token) in
        [("expired", expired.as_str()), ("forged", &forged), ("wrong audience", &wrong_audience), ("garbage", "x")]
    {
        let direct = client(&cluster, dir.path(), &api, Credential::Token(token));
        let via = client(&cluster, dir.path(), &server, Credential::Token(token));
        let (code, _) = same_answer(&direct, &via, &path, &[]).await;
        assert_eq!(code, 401, "{what}");
        // Asked again: answered from the negative cache, still 401.
        assert_eq!(get_with(&via, &path, &[]).await.0, 401, "{what}, again");
    }
    let reviews = watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_total", &["token"]).await - reviews_before;
    assert_eq!(reviews, 4.0, "one review per bad token; the repeats came from the negative cache");

    // No credentials at all, with --anonymous-auth=false: 401 as well.
    let anon = client(&cluster, dir.path(), &server, Credential::None);
    let (code, body) = get_with(&anon, &path, &[]).await;
    assert_eq!(code, 401);
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["reason"], "Unauthorized");
    assert!(!wm.log().contains(&good), "a token reached the log");
}

#[tokio::test]
async fn impersonation_headers_are_honoured_only_for_clients_allowed_to_impersonate() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "imp").await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let api = cluster_api(&cluster);
    let token = token_for(&cluster, &ns, &[]);
    let via = client(&cluster, dir.path(), &server, Credential::Token(&token));
    let direct = client(&cluster, dir.path(), &api, Credential::Token(&token));
    until_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps"), |c| c == 200).await;
    let secrets = format!("/api/v1/namespaces/{ns}/secrets");

    // The reader may not impersonate: refused before anything is read, from
    // the cache or upstream, whatever it asks to become.
    for headers in [
        vec![("Impersonate-User", "admin")],
        vec![("Impersonate-User", "someone"), ("Impersonate-Group", "system:masters")],
        vec![("Impersonate-User", "system:serviceaccount:kube-system:default")],
    ] {
        for path in [format!("/api/v1/namespaces/{ns}/configmaps"), secrets.clone(), "/api/v1/nodes".to_owned()] {
            let (code, body) = get_with(&via, &path, &headers).await;
            assert_eq!(code, 403, "{headers:?} {path}: {}", String::from_utf8_lossy(&body));
            assert_eq!(get_with(&direct, &path, &headers).await.0, 403, "the API server refuses it too");
        }
    }
    // Groups without a user: the API server's 400, same words.
    let (code, _) = same_answer(&direct, &via, &secrets, &[("Impersonate-Group", "system:masters")]).await;
    assert_eq!(code, 400);

    // An admin may impersonate the reader, and then gets the reader's rights:
    // its configmaps from the cache, no secrets.
    let admin_token = std::fs::read_to_string(cluster_file(&cluster, "tokens.csv")).unwrap();
    let admin_token = admin_token.split(',').next().unwrap().to_owned();
    let as_admin = client(&cluster, dir.path(), &server, Credential::Token(&admin_token));
    let admin_direct = client(&cluster, dir.path(), &api, Credential::Token(&admin_token));
    let reader = format!("system:serviceaccount:{ns}:reader");
    let imp = [("Impersonate-User", reader.as_str())];
    let (code, _) = get_with(&as_admin, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"), &imp).await;
    assert_eq!(code, 200);
    let (code, _) = same_answer(&admin_direct, &as_admin, &secrets, &imp).await;
    assert_eq!(code, 403);
    let _ = wm;
}

#[tokio::test]
async fn a_thousand_watches_of_one_identity_cost_one_review_of_each_kind() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "reviews").await;
    // Plain HTTP with h2c, bearer tokens only: 1,000 streams on ten
    // connections (100 streams each, as kube-apiserver allows).
    let wm = Watchmux::start(&cluster, &["--auth-mode", "delegated"]).await;
    let token = token_for(&cluster, &ns, &[]);
    let direct =
        client(&cluster, tempfile::tempdir().unwrap().path(), &cluster_api(&cluster), Credential::Token(&token));
    until_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps"), |c| c == 200).await;

    const N: usize = 1000;
    let mut conns = Vec::new();
    for _ in 0..N / 100 {
        conns.push(h2(wm.addr).await);
    }
    let auth = format!("Bearer {token}");
    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true");
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..N {
        let (mut send, auth, path, addr) = (conns[i % conns.len()].clone(), auth.clone(), path.clone(), wm.addr);
        opening.spawn(async move {
            let req = Request::get(path)
                .header("host", addr.to_string())
                .header("authorization", auth)
                .body(Full::<Bytes>::default())
                .unwrap();
            send.ready().await.unwrap();
            send.send_request(req).await.unwrap()
        });
    }
    let mut watchers = Vec::with_capacity(N);
    while let Some(resp) = opening.join_next().await {
        let resp = resp.unwrap();
        assert_eq!(resp.status(), 200);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(pump_watch(resp, tx));
        watchers.push(rx);
    }
    configmap(&admin, "create", &ns, "after").await;
    for rx in &mut watchers {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let seen = tokio::time::timeout_at(deadline, rx.recv()).await.expect("event in time").flatten().unwrap();
            if seen.name == "after" {
                break;
            }
        }
    }
    let token_reviews = watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_total", &["review=\"token\""]).await;
    let access_reviews = watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_total", &["review=\"access\""]).await;
    let lookups = watchmux_metric_sum(wm.admin, "watchmux_auth_cache_lookups_total", &["review=\"access\""]).await;
    assert_eq!(lookups, N as f64, "every watch was authorized");
    assert_eq!((token_reviews, access_reviews), (1.0, 1.0), "1,000 watches, one identity: one review of each kind");
}

#[tokio::test]
async fn cached_decisions_outlive_an_upstream_outage_and_new_identities_are_refused() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "failclosed").await;
    let api = cluster_api(&cluster);
    let target: std::net::SocketAddr = api.trim_start_matches("https://").parse().unwrap();
    let relay = crate::relay::Relay::start(target).await;
    // watchmux reaches the API server only through the relay.
    let upstream_cfg = dir.path().join("upstream");
    let admin_cfg =
        std::fs::read_to_string(&cluster.kubeconfig).unwrap().replace(&api, &format!("https://{}", relay.addr));
    std::fs::write(&upstream_cfg, admin_cfg).unwrap();
    let wm =
        Watchmux::start_with_kubeconfig(&cluster, &upstream_cfg, &["--auth-mode", "delegated", "--cache-warm"]).await;
    let known = token_for(&cluster, &ns, &[]);
    let newcomer = token_for(&cluster, &ns, &[]);
    let direct = client(&cluster, dir.path(), &api, Credential::Token(&known));
    let path = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    until_direct(&direct, &path, |c| c == 200).await;
    let known_client = client(&cluster, dir.path(), &format!("http://{}", wm.addr), Credential::Token(&known));
    assert_eq!(get_with(&known_client, &path, &[]).await.0, 200);

    relay.cut();
    // The known identity still reads from the cache; a new one is refused.
    assert_eq!(get_with(&known_client, &path, &[]).await.0, 200, "cached decisions serve during the outage");
    let new_client = client(&cluster, dir.path(), &format!("http://{}", wm.addr), Credential::Token(&newcomer));
    assert_eq!(get_with(&new_client, &path, &[]).await.0, 401, "a new identity fails closed");
    assert!(watchmux_metric_sum(wm.admin, "watchmux_auth_fail_closed_total", &["token"]).await >= 1.0);
    relay.restore();
    let deadline = tokio::time::Instant::now() + WAIT;
    while get_with(&new_client, &path, &[]).await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "the new identity is accepted once the upstream is back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A denial is remembered (`--authorization-cache-unauthorized-ttl`, 30 s)
/// so that retries do not each cost a review, but it is not repeated as a
/// 403 from the cache: rights granted in the meantime (RBAC here; the Node
/// authorizer when a pod is bound to a kubelet's node) count at once, as
/// they do directly.
#[tokio::test]
async fn a_right_granted_after_a_denial_counts_at_once() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let dir = tempfile::tempdir().unwrap();
    let ns = reader_namespace(&admin, "regrant").await;
    let later = namespace("regrant-later");
    create_namespace(&admin, &later).await;
    configmap(&admin, "create", &later, "cm1").await;
    let (wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
    let token = token_for(&cluster, &ns, &[]);
    let direct = client(&cluster, dir.path(), &cluster_api(&cluster), Credential::Token(&token));
    let via = client(&cluster, dir.path(), &server, Credential::Token(&token));
    let path = format!("/api/v1/namespaces/{later}/configmaps");

    // Denied by watchmux's own review, then by the API server itself while
    // the denial is remembered: the same 403 both times, one review.
    assert_eq!(same_answer(&direct, &via, &path, &[]).await.0, 403);
    assert_eq!(same_answer(&direct, &via, &path, &[]).await.0, 403);
    let reviews = watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_total", &["review=\"access\""]).await;
    assert_eq!(reviews, 1.0, "a repeated denied read is not reviewed again");

    // Granted: the next read through watchmux, well within the 30 s the
    // denial is kept, gets what the API server now allows.
    grant_configmap_reading(&admin, &later, &ns).await;
    until_direct(&direct, &path, |c| c == 200).await;
    let granted = tokio::time::Instant::now();
    let (code, body) = get_with(&via, &path, &[]).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert!(granted.elapsed() < Duration::from_secs(5), "not held back by the remembered denial");
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "cm1");
    let asked_upstream =
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"recently_denied\""]).await;
    assert_eq!(asked_upstream, 2.0, "the second denial and the granted read went to the API server");
}
