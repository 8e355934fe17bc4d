//! The end-to-end environment: the real kube-apiserver started by
//! `integration/scripts/cluster-up.sh`, its kubectl, and a watchmux binary
//! started per test in front of it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use watchmux::upstream::{Upstream, UpstreamOptions};

/// Paths the suite needs, from the environment `make test` sets.
pub(crate) struct Cluster {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) kubectl: PathBuf,
    pub(crate) watchcheck: PathBuf,
}

impl Cluster {
    pub(crate) fn from_env() -> Self {
        let var = |name: &str| {
            PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run the end-to-end suite with `make test-e2e`, which starts the API server")
            }))
        };
        let c = Self {
            kubeconfig: var("WATCHMUX_E2E_KUBECONFIG"),
            kubectl: var("WATCHMUX_E2E_KUBECTL"),
            watchcheck: var("WATCHMUX_E2E_WATCHCHECK"),
        };
        for p in [&c.kubeconfig, &c.kubectl, &c.watchcheck] {
            assert!(p.exists(), "{} does not exist", p.display());
        }
        c
    }

    /// The API server's address, from the kubeconfig (cluster-up.sh's
    /// `APISERVER_PORT` may move it off the default).
    pub(crate) fn api_addr(&self) -> std::net::SocketAddr {
        let cfg = watchmux::upstream::kubeconfig::resolve(Some(&self.kubeconfig), None).unwrap();
        let authority = cfg.server.authority().expect("the kubeconfig's server has host:port").as_str();
        authority
            .parse()
            .unwrap_or_else(|_| panic!("the kubeconfig's server {authority} is not an IP address and port"))
    }

    /// `integration/cmd/pbcheck` (client-go's protobuf decoder and metadata
    /// informer): `WATCHMUX_E2E_PBCHECK`, else beside watchcheck.
    pub(crate) fn pbcheck(&self) -> PathBuf {
        let path = std::env::var("WATCHMUX_E2E_PBCHECK")
            .map(PathBuf::from)
            .unwrap_or_else(|_| self.watchcheck.with_file_name("pbcheck"));
        assert!(path.exists(), "{} does not exist (integration/scripts/build-k8s.sh builds it)", path.display());
        path
    }

    /// The API server's Kubernetes minor (`35` for v1.35.4), from `kubectl
    /// version`: a case whose direct answer depends on the minor (make
    /// test-matrix runs the suite against each supported one) asks it.
    pub(crate) fn server_minor(&self) -> u8 {
        let out = self.kubectl_direct(&["version", "-o", "json"]);
        assert!(out.ok, "kubectl version: {}", out.stderr);
        let version: serde_json::Value = serde_json::from_str(&out.stdout).expect("kubectl version's JSON");
        let minor = version["serverVersion"]["minor"].as_str().expect("serverVersion.minor");
        minor.trim_end_matches('+').parse().expect("a minor number")
    }

    /// kubectl against the API server directly.
    pub(crate) fn kubectl_direct(&self, args: &[&str]) -> Output {
        kubectl(&self.kubectl, &self.kubeconfig, args)
    }

    /// A client straight to the API server, with the admin credentials.
    pub(crate) fn direct_client(&self) -> Arc<Upstream> {
        let cfg = watchmux::upstream::kubeconfig::resolve(Some(&self.kubeconfig), None).unwrap();
        Arc::new(Upstream::new(&cfg, UpstreamOptions::default()).unwrap())
    }
}

#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn kubectl(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"));
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A watchmux process in front of the test cluster.
pub(crate) struct Watchmux {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    /// A kubeconfig whose server is this watchmux.
    pub(crate) kubeconfig: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

/// The watchmux binary the suite runs: this build's, or another named by
/// `WATCHMUX_E2E_BIN` (a release build, for rows that measure time on a
/// debug test binary).
pub(crate) fn watchmux_binary() -> PathBuf {
    std::env::var_os("WATCHMUX_E2E_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_watchmux")), PathBuf::from)
}

impl Watchmux {
    pub(crate) async fn start(cluster: &Cluster, extra: &[&str]) -> Self {
        Self::start_with_kubeconfig(cluster, &cluster.kubeconfig, extra).await
    }

    /// Starts watchmux with an upstream kubeconfig of the test's choosing.
    pub(crate) async fn start_with_kubeconfig(_cluster: &Cluster, upstream: &Path, extra: &[&str]) -> Self {
        let wm = Self::spawn_with_kubeconfig(upstream, extra);
        wm.wait_ready().await;
        wm
    }

    /// Starts watchmux with variables of the test's choosing in its
    /// environment (test-only switches such as `WATCHMUX_FAULT_INJECT`).
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    pub(crate) async fn start_with_env(cluster: &Cluster, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let wm = Self::spawn_with(&cluster.kubeconfig, extra, env);
        wm.wait_ready().await;
        wm
    }

    /// Starts watchmux without waiting for it to be ready.
    pub(crate) fn spawn_with_kubeconfig(upstream: &Path, extra: &[&str]) -> Self {
        Self::spawn_with(upstream, extra, &[])
    }

    fn spawn_with(upstream: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", crate::ports::free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", crate::ports::free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.path().join("watchmux.log")).unwrap();
        let child = Command::new(watchmux_binary())
            .arg("--kubeconfig")
            .arg(upstream)
            .args(["--listen", &addr.to_string(), "--admin-listen", &admin.to_string()])
            .args(extra)
            .env("RUST_LOG", "watchmux=debug,info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting watchmux");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: watchmux\n\
                 clusters:\n- name: watchmux\n  cluster: {{server: 'http://{addr}'}}\n\
                 contexts:\n- name: watchmux\n  context: {{cluster: watchmux, user: local}}\n\
                 users:\n- name: local\n  user: {{}}\n"
            ),
        )
        .unwrap();
        Self { addr, admin, kubeconfig, child, _dir: dir }
    }

    /// The watchmux process's resident memory, in bytes (Linux).
    pub(crate) fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kib * 1024
    }

    /// Waits (bounded) until the admin port answers `path`, whatever the status.
    pub(crate) async fn wait_for_admin(&self, path: &str) -> Response<Incoming> {
        for _ in 0..200 {
            if let Ok(resp) = try_get(self.admin, path).await {
                return resp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("watchmux's admin port never answered; log:\n{}", self.log());
    }

    /// Waits (bounded) until the admin endpoint reports the upstream ready.
    pub(crate) async fn wait_ready(&self) {
        for _ in 0..200 {
            if let Ok(resp) = try_get(self.admin, "/readyz").await
                && resp.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("watchmux did not become ready; log:\n{}", self.log());
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("watchmux.log")).unwrap_or_default()
    }

    pub(crate) fn kubectl(&self, cluster: &Cluster, args: &[&str]) -> Output {
        kubectl(&cluster.kubectl, &self.kubeconfig, args)
    }

    /// The exit status, if the process has exited.
    pub(crate) fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("watchmux did not exit after SIGTERM; log:\n{}", self.log());
    }
}

impl Drop for Watchmux {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn try_get(addr: SocketAddr, path: &str) -> Result<Response<Incoming>, Box<dyn std::error::Error>> {
    let stream = TcpStream::connect(addr).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(send.send_request(Request::get(path).header("host", addr.to_string()).body(Full::<Bytes>::default())?).await?)
}

/// A GET over plain HTTP/1.1 to watchmux.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Response<Incoming> {
    try_get(addr, path).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// A GET to watchmux at `addr` with this Accept header, over plain
/// HTTP/1.1 on a connection of its own.
pub(crate) async fn get_accepting(addr: SocketAddr, path: &str, accept: &str) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", addr.to_string())
        .header("accept", accept)
        .body(Full::<Bytes>::default())
        .unwrap();
    send.send_request(req).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Status code and body of a response.
pub(crate) async fn read(resp: Response<Incoming>) -> (u16, Bytes) {
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// The same GET straight at the API server.
pub(crate) async fn get_direct(client: &Upstream, path: &str) -> (u16, Bytes) {
    let req = Request::get(path).body(watchmux::body::empty()).unwrap();
    read(client.send(req).await.unwrap()).await
}

/// A unique namespace name for one test.
pub(crate) fn namespace(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("e2e-{test}-{nanos:x}")
}

/// Sends a JSON request straight to the API server; panics unless it succeeds.
pub(crate) async fn direct_json(client: &Upstream, method: http::Method, path: &str, body: serde_json::Value) -> Value {
    let content_type = if method == http::Method::PATCH { "application/merge-patch+json" } else { "application/json" };
    let req = Request::builder()
        .method(method.clone())
        .uri(path)
        .header("content-type", content_type)
        .body(watchmux::body::boxed(Full::new(Bytes::from(body.to_string()))))
        .unwrap();
    let (code, bytes) = read(client.send(req).await.unwrap()).await;
    assert!((200..300).contains(&code), "{method} {path}: {code} {}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

pub(crate) async fn create_namespace(client: &Upstream, ns: &str) {
    direct_json(client, http::Method::POST, "/api/v1/namespaces", serde_json::json!({"metadata": {"name": ns}})).await;
}

/// Creates, patches or deletes a configmap directly; returns the new resourceVersion.
pub(crate) async fn configmap(client: &Upstream, op: &str, ns: &str, name: &str) -> u64 {
    let base = format!("/api/v1/namespaces/{ns}/configmaps");
    let v = match op {
        "create" => {
            let body = serde_json::json!({"metadata": {"name": name, "labels": {"e2e": "yes"}}, "data": {"v": "0"}});
            direct_json(client, http::Method::POST, &base, body).await
        }
        "update" => {
            let body = serde_json::json!({"data": {"v": "1"}});
            direct_json(client, http::Method::PATCH, &format!("{base}/{name}"), body).await
        }
        "delete" => direct_json(client, http::Method::DELETE, &format!("{base}/{name}"), Value::Null).await,
        other => panic!("unknown op {other}"),
    };
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The API server's own metrics (admin can read them).
pub(crate) async fn apiserver_metric_sum(client: &Upstream, name: &str, label_filters: &[&str]) -> f64 {
    let (_, bytes) = get_direct(client, "/metrics").await;
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| label_filters.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// watchmux's own metric (summed over label sets matching the filters).
pub(crate) async fn watchmux_metric_sum(admin: SocketAddr, name: &str, label_filters: &[&str]) -> f64 {
    let (_, bytes) = read(get(admin, "/metrics").await).await;
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.starts_with(name) && (l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' ')))
        .filter(|l| label_filters.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

use serde_json::Value;

/// One event as a test compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) rv: String,
}

/// Reads a JSON watch stream into its events, whole, sent on `tx` as they
/// arrive; the stream's end is reported as `None`.
pub(crate) async fn pump_watch_values(resp: Response<Incoming>, tx: tokio::sync::mpsc::UnboundedSender<Option<Value>>) {
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else { continue };
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if tx.send(Some(serde_json::from_slice(&line[..end]).unwrap())).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(None);
}

/// Reads a JSON watch stream into events as a test compares them, sent on
/// `tx` as they arrive; the stream's end is reported as `None`.
pub(crate) async fn pump_watch(resp: Response<Incoming>, tx: tokio::sync::mpsc::UnboundedSender<Option<Seen>>) {
    let (values, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(pump_watch_values(resp, values));
    while let Some(v) = rx.recv().await {
        let seen = v.map(|v| Seen {
            kind: v["type"].as_str().unwrap_or("").to_owned(),
            name: v["object"]["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            rv: v["object"]["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned(),
        });
        if tx.send(seen).is_err() {
            return;
        }
    }
}

/// An HTTP/2 connection to watchmux, for many watches on one connection as client-go makes them.
pub(crate) async fn h2(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

/// A TLS connection to `addr` trusting the certificates of `ca`, offering
/// `alpn` (`h2`, `http/1.1`).
pub(crate) async fn tls_connect(
    addr: SocketAddr,
    ca: &Path,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
}

/// Tests that restart the API server or read its global metrics hold this
/// for writing; every other test holds it for reading, so they never overlap.
pub(crate) static CLUSTER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// etcd's HTTP gateway, for reading the current revision and compacting.
pub(crate) async fn etcd_post(path: &str, body: Value) -> Value {
    let addr: SocketAddr =
        std::env::var("WATCHMUX_E2E_ETCD").expect("WATCHMUX_E2E_ETCD").trim_start_matches("http://").parse().unwrap();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let (code, bytes) = read(send.send_request(req).await.unwrap()).await;
    assert_eq!(code, 200, "etcd {path}: {}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

/// Restarts kube-apiserver alone (etcd and its data stay).
pub(crate) fn restart_apiserver() {
    let script = std::env::var("WATCHMUX_E2E_CLUSTER_UP").expect("WATCHMUX_E2E_CLUSTER_UP");
    let out = Command::new("bash").arg(script).arg("--restart-apiserver").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
