//! What the harness breaks, and how: the watchmux process it starts (and
//! may kill), stopping and continuing kube-apiserver or etcd, restarting
//! kube-apiserver, and compacting etcd through its HTTP gateway.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::common::api::Api;
use crate::common::env::{env, env_or};
use crate::common::procfs::{pid_from_file, rss_bytes};

/// The paths and addresses the script hands over (see integration/scripts/chaos.sh).
pub struct Setup {
    pub watchmux_bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub out_dir: PathBuf,
    pub apiserver_pidfile: String,
    pub etcd_pidfile: String,
    pub etcd: SocketAddr,
    /// Restarts kube-apiserver (bash -c, with APISERVER_STOP_SIGNAL set to TERM or KILL).
    pub restart_cmd: String,
}

impl Setup {
    pub fn from_env() -> anyhow::Result<Self> {
        let etcd = env("CHAOS_ETCD")?;
        Ok(Self {
            watchmux_bin: env("CHAOS_WATCHMUX_BIN")?.into(),
            kubeconfig: env("WATCHMUX_BENCH_KUBECONFIG")?.into(),
            listen: env("WATCHMUX_BENCH_PROXY")?.parse()?,
            admin: env("WATCHMUX_BENCH_ADMIN")?.parse()?,
            out_dir: env("CHAOS_OUT_DIR")?.into(),
            apiserver_pidfile: env("WATCHMUX_BENCH_APISERVER_PIDFILE")?,
            etcd_pidfile: env("CHAOS_ETCD_PIDFILE")?,
            etcd: etcd.trim_start_matches("http://").parse().with_context(|| format!("CHAOS_ETCD={etcd}"))?,
            restart_cmd: env_or(
                "CHAOS_RESTART_CMD",
                "bash integration/scripts/cluster-up.sh --restart-apiserver".to_owned(),
            )?,
        })
    }

    /// A copy of the kubeconfig whose server is `via` (a relay) instead of the API server.
    pub fn kubeconfig_via(&self, api: SocketAddr, via: SocketAddr, name: &str) -> anyhow::Result<PathBuf> {
        let text = std::fs::read_to_string(&self.kubeconfig)?;
        let from = format!("https://{api}");
        if !text.contains(&from) {
            bail!("{} does not name {from}", self.kubeconfig.display());
        }
        let path = self.out_dir.join(format!("kubeconfig-{name}"));
        std::fs::write(&path, text.replace(&from, &format!("https://{via}")))?;
        Ok(path)
    }
}

/// A watchmux process of the harness's own.
pub struct Watchmux {
    child: Option<Child>,
    bin: PathBuf,
    args: Vec<String>,
    /// Variables set for it besides RUST_LOG (the fault hook's).
    env: Vec<(String, String)>,
    log: PathBuf,
    pub admin: SocketAddr,
}

impl Watchmux {
    /// Starts watchmux on `listen` and `admin` (the setup's addresses, or a
    /// tier's other replica's) with `kubeconfig` and `flags`, its log in
    /// `log`; returns once /readyz answers.
    pub async fn start_on(
        setup: &Setup,
        (listen, admin): (SocketAddr, SocketAddr),
        kubeconfig: &Path,
        flags: &[&str],
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let mut args: Vec<String> = vec![
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--listen".into(),
            listen.to_string(),
            "--admin-listen".into(),
            admin.to_string(),
        ];
        args.extend(flags.iter().map(|s| (*s).to_owned()));
        // As the other benches: WATCHMUX_ARGS adds flags to every watchmux started.
        args.extend(std::env::var("WATCHMUX_ARGS").unwrap_or_default().split_whitespace().map(str::to_owned));
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let mut wm = Self { child: None, bin: setup.watchmux_bin.clone(), args, env, log, admin };
        wm.spawn().await?;
        Ok(wm)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .env("RUST_LOG", std::env::var("CHAOS_WATCHMUX_LOG").unwrap_or_else(|_| "info".into()))
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting watchmux")?;
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if admin_get(self.admin, "/readyz").await.is_ok_and(|(code, _)| code == 200) {
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().expect("spawned").try_wait()? {
                bail!("watchmux exited at start ({status}); see {}", self.log.display());
            }
            if Instant::now() > until {
                bail!("watchmux not ready in 30 s; see {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn rss(&self) -> Option<u64> {
        rss_bytes(self.pid()?).ok()
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new process with the same flags, after a kill; returns once ready.
    pub async fn respawn(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn().await
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub async fn stop(mut self) {
        self.terminate().await;
    }

    /// SIGTERM, then SIGKILL after 10 s; [`Self::respawn`] may follow.
    pub async fn terminate(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        signal(c.id(), "TERM");
        for _ in 0..100 {
            if c.try_wait().ok().flatten().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Lines at WARN or ERROR in its log.
    pub fn warnings(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).count())
            .unwrap_or(0)
    }
}

impl Drop for Watchmux {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `kill -<sig> <pid>`.
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status();
}

/// A process stopped with SIGSTOP; continued (SIGCONT) when dropped, so an
/// error in the harness cannot leave the cluster frozen.
pub struct Stopped {
    pid: u32,
    pub at: Instant,
}

impl Stopped {
    pub fn new(pidfile: &str) -> anyhow::Result<Self> {
        let pid = pid_from_file(pidfile)?;
        signal(pid, "STOP");
        Ok(Self { pid, at: Instant::now() })
    }

    /// SIGCONT; the instant it was sent.
    pub fn resume(self) -> Instant {
        drop(self);
        Instant::now()
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.pid, "CONT");
    }
}

/// Restarts kube-apiserver with `signal` (TERM: as an upgrade; KILL: a crash); returns once it is ready.
pub async fn restart_apiserver(setup: &Setup, signal: &str) -> anyhow::Result<()> {
    let cmd = setup.restart_cmd.clone();
    let sig = signal.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash").arg("-c").arg(cmd).env("APISERVER_STOP_SIGNAL", sig).stdin(Stdio::null()).output()
    })
    .await?
    .context("restart command")?;
    if !out.status.success() {
        bail!("restart command failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// One request straight at kube-apiserver without a body, within 30 s: status and body.
pub async fn direct(api: &Api, method: Method, path: &str) -> anyhow::Result<(StatusCode, Bytes)> {
    tokio::time::timeout(Duration::from_secs(30), api.send(method.clone(), path, None, Bytes::new()))
        .await
        .with_context(|| format!("{method} {path}: no answer from kube-apiserver in 30 s"))?
}

/// One POST to etcd's HTTP gateway; the JSON answer, within 20 s.
async fn etcd_post(etcd: SocketAddr, path: &str, body: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let post = async {
        let stream = TcpStream::connect(etcd).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = Request::post(path)
            .header("host", etcd.to_string())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))?;
        let resp = send.send_request(req).await?;
        let status = resp.status();
        anyhow::Ok((status, resp.into_body().collect().await?.to_bytes()))
    };
    let (status, bytes) =
        tokio::time::timeout(Duration::from_secs(20), post).await.context("etcd: no answer in 20 s")??;
    if !status.is_success() {
        bail!("etcd {path}: {status}: {}", String::from_utf8_lossy(&bytes));
    }
    Ok(serde_json::from_slice(&bytes)?)
}

/// Compacts etcd at its current revision (physically), as kube-apiserver's
/// compactor would after its interval; returns that revision.
pub async fn compact_etcd(etcd: SocketAddr) -> anyhow::Result<u64> {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode(b"compact_rev_key");
    let range = etcd_post(etcd, "/v3/kv/range", serde_json::json!({ "key": key })).await?;
    let rev: u64 = range["header"]["revision"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("etcd range without a revision: {range}"))?;
    etcd_post(etcd, "/v3/kv/compaction", serde_json::json!({ "revision": rev.to_string(), "physical": true })).await?;
    Ok(rev)
}

/// A GET to watchmux's admin listener: status and body.
pub async fn admin_get(admin: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let stream = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(admin)).await??;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get(path).header("host", admin.to_string()).body(http_body_util::Empty::<Bytes>::new())?;
    let resp = tokio::time::timeout(Duration::from_secs(5), send.send_request(req)).await??;
    let code = resp.status().as_u16();
    let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await??.to_bytes();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

/// watchmux's /metrics, or an empty text if it does not answer.
pub async fn metrics(admin: SocketAddr) -> String {
    admin_get(admin, "/metrics").await.map(|(_, b)| b).unwrap_or_default()
}
