//! The API server the environment names, and the watchmux processes put
//! in front of it, one per upstream-identity mode:
//!
//! - `impersonate`: delegated, watchmux with the admin's credentials
//!   impersonating each caller, caching every resource (`*`), so that every
//!   path of discovery can be answered from a cache;
//! - `client`: the node-local design, delegated with
//!   `--upstream-identity=client` and only the credentials of node `fz-n1`
//!   (a kubelet's certificate), caching what a node may list.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::fixtures::WATCHMUX_NODE;
use crate::x509::{Attr, Issuer};

pub(crate) struct World {
    pub(crate) api: SocketAddr,
    pub(crate) ca: PathBuf,
    pub(crate) admin_token: String,
    pub(crate) issuer: Issuer,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
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
        Self { api, ca: state.join("ca.crt"), admin_token, issuer, kubeconfig, dir: tempfile::tempdir().unwrap() }
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
                    let node = vec![
                        vec![Attr::utf8("O", "system:nodes")],
                        vec![Attr::utf8("CN", &format!("system:node:{WATCHMUX_NODE}"))],
                    ];
                    let (crt, key) = self.issuer.client(&node).write_pem(self.dir.path(), "node");
                    let cfg = serde_json::json!({
                        "apiVersion": "v1", "kind": "Config", "current-context": "c",
                        "clusters": [{"name": "c", "cluster": {"server": format!("https://{}", self.api), "certificate-authority": self.ca}}],
                        "users": [{"name": "u", "user": {"client-certificate": crt, "client-key": key}}],
                        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    });
                    let path = self.dir.path().join("node.kubeconfig");
                    std::fs::write(&path, cfg.to_string()).unwrap();
                    args.extend([
                        "--upstream-identity".to_owned(),
                        "client".to_owned(),
                        "--cache-resources".to_owned(),
                        "pods,services,nodes".to_owned(),
                        "--cache-scope".to_owned(),
                        format!("pods=fieldSelector=spec.nodeName={WATCHMUX_NODE}"),
                    ]);
                    path
                }
                other => panic!("unknown target {other:?} (impersonate, client)"),
            };
            targets.push(self.spawn(name, &upstream, &args).await);
        }
        targets
    }

    async fn spawn(&self, name: &str, upstream: &std::path::Path, args: &[String]) -> Target {
        let port = |()| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
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
        let target = Target { name: name.to_owned(), addr, child, log };
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
