//! watchmux as a child process in front of the synthetic upstream: its
//! kubeconfig, its start under `taskset`, its readiness with every pod
//! cached, its admin endpoints (`/readyz`, `/metrics`) and its stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http::StatusCode;
use http_body_util::BodyExt;

use crate::common::client::{Shape, Target};
use crate::common::prom;

/// How often readiness is polled while watchmux starts: fine enough for the
/// start-up times the benches report.
const READY_POLL: Duration = Duration::from_millis(20);

/// A kubeconfig in `dir` for the synthetic upstream at `upstream`.
pub fn write_kubeconfig(dir: &Path, upstream: SocketAddr) -> anyhow::Result<PathBuf> {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: bench\ncontexts:\n- name: bench\n  context: {{cluster: synthetic, user: bench}}\n\
             clusters:\n- name: synthetic\n  cluster: {{server: 'https://{upstream}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: bench\n  user: {{token: synthetic}}\n"
        ),
    )?;
    Ok(path)
}

/// A GET on watchmux's admin listener: status and body.
pub async fn admin_get(admin: SocketAddr, path: &str) -> anyhow::Result<(StatusCode, String)> {
    let target = Target::Proxy { addr: admin, tls: None };
    let sender = target.connect(Shape::H1).await?;
    let resp = sender.send(target.request(Shape::H1, path)).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

pub async fn metrics(admin: SocketAddr) -> anyhow::Result<String> {
    Ok(admin_get(admin, "/metrics").await?.1)
}

/// A metric of the Pods cache, summed over its other labels.
pub fn pods_metric(text: &str, name: &str) -> f64 {
    prom::sum(text, name, &[("resource", "pods")])
}

pub fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// A running watchmux.
pub struct Watchmux {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub admin: SocketAddr,
    pub listen: SocketAddr,
    /// When it was started.
    pub started: Instant,
    log: String,
}

/// How one start went: when `/readyz` first answered 200, and when the
/// cache held every pod.
pub struct Ready {
    pub readyz: Duration,
    pub synced: Duration,
}

impl Watchmux {
    /// Starts `bin` under `taskset -c cpus` with `--cache-resources pods
    /// --cache-warm` and `extra` flags, its output to `log`.
    pub fn spawn(
        bin: &str,
        cpus: &str,
        kubeconfig: &Path,
        listen: &str,
        admin: &str,
        extra: &[String],
        log: &str,
    ) -> anyhow::Result<Self> {
        let file = std::fs::File::create(log).with_context(|| log.to_owned())?;
        let started = Instant::now();
        let child = tokio::process::Command::new("taskset")
            .args(["-c", cpus, bin, "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--listen", listen, "--admin-listen", admin, "--cache-resources", "pods", "--cache-warm"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .context("starting watchmux under taskset")?;
        let pid = child.id().context("watchmux's pid")?;
        Ok(Self { child, pid, admin: admin.parse()?, listen: listen.parse()?, started, log: log.to_owned() })
    }

    /// Waits, at most `deadline`, until `/readyz` says 200 and the cache
    /// holds `pods` objects; the times from the start.
    pub async fn wait_ready(&mut self, pods: usize, deadline: Duration) -> anyhow::Result<Ready> {
        let give_up = self.started + deadline;
        let mut readyz = None;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("watchmux exited ({status}); see {}", self.log);
            }
            if readyz.is_none()
                && let Ok((StatusCode::OK, _)) = admin_get(self.admin, "/readyz").await
            {
                readyz = Some(self.started.elapsed());
            }
            if let Some(readyz) = readyz
                && let Ok(text) = metrics(self.admin).await
                && pods_metric(&text, "watchmux_watch_cache_objects") as usize == pods
            {
                return Ok(Ready { readyz, synced: self.started.elapsed() });
            }
            if Instant::now() > give_up {
                bail!("watchmux not ready with {pods} pods in {deadline:?}; see {}", self.log);
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// SIGTERM, then SIGKILL after 30 s; how long it took to exit.
    pub async fn stop(mut self) -> Duration {
        let asked = Instant::now();
        signal(self.pid, "-TERM");
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
        asked.elapsed()
    }
}
