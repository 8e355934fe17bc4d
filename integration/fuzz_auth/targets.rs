//! The API server the environment names, and the watchmux processes put
//! in front of it, one per upstream-identity mode:
//!
//! - `impersonate`: delegated, watchmux with the admin's credentials
//!   impersonating each caller, caching every resource (`*`), so that every
//!   path of discovery can be answered from a cache;
//! - `client`: the node-local design, delegated with
//!   `--upstream-identity=client` and only the credentials of node `fz-n1`
//!   (a kubelet's certificate), caching what a node may list;
//! - `offline`: the `client` target as nodeLocal runs it with persistence
//!   (`--persist-dir`, `--serve-stale-when-upstream-unreachable`), first run
//!   against the API server until every cache is committed to disk, then
//!   killed and restarted from that directory with its upstream an address
//!   nothing listens on: the offline reboot, where only watchmux's own
//!   identity may be answered (`src/auth/own_identity_reads.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::fixtures::WATCHMUX_NODE;
use crate::generate::own_subject;
use crate::x509::{Issued, Issuer};

/// The caches of the `client` and `offline` targets: a kubelet's.
const NODE_CACHES: &[&str] = &["pods", "services", "nodes"];

pub(crate) struct World {
    pub(crate) api: SocketAddr,
    pub(crate) ca: PathBuf,
    pub(crate) admin_token: String,
    pub(crate) issuer: Issuer,
    /// Node `fz-n1`'s one certificate: the `client` and `offline` targets'
    /// upstream credentials, and the caller's when a case is sent as that
    /// node's exact subject, as the kubelet shares its certificate with the
    /// node-local watchmux (a SelfSubjectReview's credential-id is the
    /// certificate's hash).
    pub(crate) node: Issued,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    admin: SocketAddr,
    child: Child,
    log: PathBuf,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl World {
    pub(crate) fn from_env() -> Self {
        let kubeconfig = PathBuf::from(std::env::var("WATCHMUX_E2E_KUBECONFIG").expect(
            "WATCHMUX_E2E_KUBECONFIG is not set: run with `make fuzz-auth` or `make test-e2e`, which start the API server",
        ));
        let state = kubeconfig.parent().unwrap().join("cluster");
        let server = std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_owned))
            .expect("a server in the kubeconfig");
        let api =
            server.trim_start_matches("https://").trim_end_matches('/').parse().expect("server is https://IP:port");
        let admin_token =
            std::fs::read_to_string(state.join("tokens.csv")).unwrap().split(',').next().unwrap().to_owned();
        let issuer = Issuer::new(&state.join("ca.crt"), &state.join("ca.key"));
        let node = issuer.client(&own_subject());
        Self { api, ca: state.join("ca.crt"), admin_token, issuer, node, kubeconfig, dir: tempfile::tempdir().unwrap() }
    }

    pub(crate) async fn start_targets(&self, wanted: &[String]) -> Vec<Target> {
        let (crt, key) = self.issuer.server().write_pem(self.dir.path(), "serving");
        let ca = self.ca.display().to_string();
        let tls = [
            "--auth-mode".to_owned(),
            "delegated".to_owned(),
            "--tls-cert-file".to_owned(),
            crt.display().to_string(),
            "--tls-private-key-file".to_owned(),
            key.display().to_string(),
            "--client-ca-file".to_owned(),
            ca,
        ];
        let mut targets = Vec::new();
        for name in wanted {
            let mut args = tls.to_vec();
            let upstream = match name.as_str() {
                "impersonate" => {
                    args.extend(["--cache-resources", "*"].map(str::to_owned));
                    self.kubeconfig.clone()
                }
                "client" => {
                    args.extend(node_args());
                    self.node_kubeconfig(&self.api.to_string(), "node")
                }
                "offline" => {
                    targets.push(self.start_offline(&tls).await);
                    continue;
                }
                other => panic!("unknown target {other:?} (impersonate, client, offline)"),
            };
            targets.push(self.spawn(name, &upstream, &args).await);
        }
        targets
    }

    /// A kubeconfig with the node's certificate, for the API server at `server` (host:port).
    fn node_kubeconfig(&self, server: &str, name: &str) -> PathBuf {
        let (crt, key) = self.node.write_pem(self.dir.path(), name);
        let cfg = serde_json::json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": format!("https://{server}"), "certificate-authority": self.ca}}],
            "users": [{"name": "u", "user": {"client-certificate": crt, "client-key": key}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        });
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, cfg.to_string()).unwrap();
        path
    }

    /// The offline reboot: persist the node's caches, then restart from
    /// them with the API server out of reach.
    async fn start_offline(&self, tls: &[String]) -> Target {
        let persist = self.dir.path().join("persist");
        let mut args = tls.to_vec();
        args.extend(node_args());
        args.extend([
            "--persist-dir".to_owned(),
            persist.display().to_string(),
            "--persist-resources".to_owned(),
            "*".to_owned(),
            "--serve-stale-when-upstream-unreachable".to_owned(),
            // Caches at start, not at a first read: there is none before the restart.
            "--cache-warm".to_owned(),
        ]);
        let online = self
            .spawn("offline-first-run", &self.node_kubeconfig(&self.api.to_string(), "node-first-run"), &args)
            .await;
        let mut committed = Vec::new();
        for _ in 0..400 {
            committed = metric(online.admin, "watchmux_persist_commits_total").await;
            if every_cache(&committed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            every_cache(&committed),
            "the offline target's first run did not commit every cache in 20 s ({committed:?}); log:\n{}",
            online.log()
        );
        // Killed, as a node that loses power: a commit is crash-safe.
        drop(online);
        // An address nothing listens on: refused at once, as an API server that is gone.
        let gone = std::net::SocketAddr::from(([127, 0, 0, 1], crate::ports::free_port()));
        let offline = self.spawn("offline", &self.node_kubeconfig(&gone.to_string(), "node-offline"), &args).await;
        // Every cache loaded from disk and served (unproven) before any case is sent.
        for _ in 0..200 {
            if every_cache(&metric(offline.admin, "watchmux_cache_serving_unproven").await) {
                return offline;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the offline target does not serve its persisted caches; log:\n{}", offline.log());
    }

    async fn spawn(&self, name: &str, upstream: &std::path::Path, args: &[String]) -> Target {
        let port = |()| std::net::SocketAddr::from(([127, 0, 0, 1], crate::ports::free_port()));
        let (addr, admin) = (port(()), port(()));
        let log = self.dir.path().join(format!("watchmux-{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_watchmux"))
            .arg("--kubeconfig")
            .arg(upstream)
            .args(["--listen", &addr.to_string(), "--admin-listen", &admin.to_string()])
            .args(args)
            .env("RUST_LOG", "watchmux=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting watchmux");
        let target = Target { name: name.to_owned(), addr, admin, child, log };
        for _ in 0..200 {
            if ready(admin).await {
                return target;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("watchmux {name} did not become ready; log:\n{}", target.log());
    }
}

impl Target {
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The flags of a node-local watchmux holding node `fz-n1`'s credentials.
fn node_args() -> Vec<String> {
    [
        "--upstream-identity".to_owned(),
        "client".to_owned(),
        "--cache-resources".to_owned(),
        NODE_CACHES.join(","),
        "--cache-scope".to_owned(),
        format!("pods=fieldSelector=spec.nodeName={WATCHMUX_NODE}"),
        // A node may read its own Node object only, as the chart scopes it.
        "--cache-scope".to_owned(),
        format!("nodes=fieldSelector=metadata.name={WATCHMUX_NODE}"),
    ]
    .to_vec()
}

/// Whether every one of `NODE_CACHES` has a sample of at least 1.
fn every_cache(samples: &[(String, f64)]) -> bool {
    NODE_CACHES
        .iter()
        .all(|r| samples.iter().any(|(labels, n)| *n >= 1.0 && labels.contains(&format!("resource=\"{r}"))))
}

/// Each sample of metric `name` on the admin port: its labels and value.
async fn metric(admin: SocketAddr, name: &str) -> Vec<(String, f64)> {
    let Some(text) = admin_get(admin, "/metrics").await else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            (labels.is_empty() || labels.starts_with('{')).then(|| (labels.to_owned(), value.parse().unwrap_or(0.0)))
        })
        .collect()
}

async fn admin_get(admin: SocketAddr, path: &str) -> Option<String> {
    let stream =
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(admin)).await.ok()?.ok()?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", admin.to_string())
        .body(http_body_util::Full::<bytes::Bytes>::default())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), send.send_request(req)).await.ok()?.ok()?;
    let body = tokio::time::timeout(Duration::from_secs(5), http_body_util::BodyExt::collect(resp.into_body()))
        .await
        .ok()?
        .ok()?;
    String::from_utf8(body.to_bytes().to_vec()).ok()
}

async fn ready(admin: SocketAddr) -> bool {
    let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(admin)).await
    else {
        return false;
    };
    let Ok((mut send, conn)) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await else {
        return false;
    };
    tokio::spawn(conn);
    let req = http::Request::get("/readyz")
        .header("host", admin.to_string())
        .body(http_body_util::Full::<bytes::Bytes>::default())
        .unwrap();
    matches!(send.send_request(req).await, Ok(r) if r.status().is_success())
}
