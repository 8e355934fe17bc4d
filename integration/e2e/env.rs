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
pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub watchcheck: PathBuf,
}

impl Cluster {
    pub fn from_env() -> Self {
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

    /// kubectl against the API server directly.
    pub fn kubectl_direct(&self, args: &[&str]) -> Output {
        kubectl(&self.kubectl, &self.kubeconfig, args)
    }

    /// A client straight to the API server, with the admin credentials.
    pub fn direct_client(&self) -> Arc<Upstream> {
        let cfg = watchmux::config::kubeconfig::resolve(Some(&self.kubeconfig), None).unwrap();
        Arc::new(Upstream::new(&cfg, UpstreamOptions::default()).unwrap())
    }
}

#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

pub fn kubectl(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
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
pub struct Watchmux {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// A kubeconfig whose server is this watchmux.
    pub kubeconfig: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Watchmux {
    pub async fn start(cluster: &Cluster, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.path().join("watchmux.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_watchmux"))
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["--listen", &addr.to_string(), "--admin-listen", &admin.to_string()])
            .args(extra)
            .env("RUST_LOG", "watchmux=debug,info")
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
        let wm = Self { addr, admin, kubeconfig, child, _dir: dir };
        wm.wait_ready().await;
        wm
    }

    /// Waits (bounded) until the admin endpoint reports the upstream ready.
    async fn wait_ready(&self) {
        for _ in 0..200 {
            if let Ok(resp) = try_get(self.admin, "/readyz").await {
                if resp.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("watchmux did not become ready; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("watchmux.log")).unwrap_or_default()
    }

    pub fn kubectl(&self, cluster: &Cluster, args: &[&str]) -> Output {
        kubectl(&cluster.kubectl, &self.kubeconfig, args)
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
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
pub async fn get(addr: SocketAddr, path: &str) -> Response<Incoming> {
    try_get(addr, path).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Status code and body of a response.
pub async fn read(resp: Response<Incoming>) -> (u16, Bytes) {
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// The same GET straight at the API server.
pub async fn get_direct(client: &Upstream, path: &str) -> (u16, Bytes) {
    let req = Request::get(path).body(watchmux::body::empty()).unwrap();
    read(client.send(req).await.unwrap()).await
}

/// A unique namespace name for one test.
pub fn namespace(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("e2e-{test}-{nanos:x}")
}
