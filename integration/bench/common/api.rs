//! The bench's own requests: writes and metrics straight at kube-apiserver
//! (watchmux's `Upstream` client, on its own connection), watchmux's admin
//! `/metrics`, and the targets the watches of each side go to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::net::TcpStream;
use watchmux::upstream::kubeconfig::UpstreamAuth;
use watchmux::upstream::{Upstream, UpstreamOptions};

use super::client::{Sender, Shape, Target, advertised_max_streams, tls_connect};
use super::env::env;
use super::prom;

pub struct Api {
    pub direct: Arc<Upstream>,
    /// Watches straight at kube-apiserver.
    pub api_target: Target,
    /// watchmux's API and admin listeners (`WATCHMUX_BENCH_PROXY`, `WATCHMUX_BENCH_ADMIN`), if set.
    pub proxy: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    /// kube-apiserver's pid file (`WATCHMUX_BENCH_APISERVER_PIDFILE`).
    pub apiserver_pidfile: String,
    /// `WATCHMUX_BENCH_PROXY_TLS=1`: watchmux's API listener serves TLS with
    /// a certificate of the cluster's CA (the kubeconfig's); ALPN h2 or http/1.1.
    pub proxy_tls: Option<(Arc<rustls::ClientConfig>, Arc<rustls::ClientConfig>)>,
}

impl Api {
    /// From `WATCHMUX_BENCH_KUBECONFIG` (a bearer-token kubeconfig) and the other variables above.
    pub fn from_env() -> anyhow::Result<Self> {
        let kubeconfig = env("WATCHMUX_BENCH_KUBECONFIG")?;
        let up = watchmux::upstream::kubeconfig::resolve(Some(kubeconfig.as_ref()), None)?;
        let direct = Arc::new(Upstream::new(&up, UpstreamOptions::default())?);
        let auth = match &up.auth {
            UpstreamAuth::Token(t) => HeaderValue::from_str(&format!("Bearer {t}"))?,
            other => bail!("the bench needs a bearer-token kubeconfig, got {other:?}"),
        };
        // `WATCHMUX_BENCH_DIRECT_ADDR`: the direct side's watches go there
        // instead (a TCP load balancer in front of several API servers);
        // the bench's own requests still go to the kubeconfig's server.
        let api_addr: SocketAddr = match std::env::var("WATCHMUX_BENCH_DIRECT_ADDR") {
            Ok(addr) if !addr.is_empty() => addr.parse()?,
            _ => up.server.authority().ok_or_else(|| anyhow!("server without authority"))?.as_str().parse()?,
        };
        let base_tls = watchmux::upstream::tls::client_config(&up)?;
        let mut tls_h2 = base_tls.clone();
        tls_h2.alpn_protocols = vec![b"h2".to_vec()];
        let mut tls_h1 = base_tls;
        tls_h1.alpn_protocols = vec![b"http/1.1".to_vec()];
        let (tls_h2, tls_h1) = (Arc::new(tls_h2), Arc::new(tls_h1));
        let proxy_tls =
            (std::env::var("WATCHMUX_BENCH_PROXY_TLS").as_deref() == Ok("1")).then(|| (tls_h2.clone(), tls_h1.clone()));
        let api_target = Target::Direct { addr: api_addr, tls_h2, tls_h1, auth };
        let addr = |name: &str| -> anyhow::Result<Option<SocketAddr>> {
            std::env::var(name).ok().filter(|v| !v.is_empty()).map(|v| v.parse()).transpose().map_err(Into::into)
        };
        Ok(Self {
            direct,
            api_target,
            proxy: addr("WATCHMUX_BENCH_PROXY")?,
            admin: addr("WATCHMUX_BENCH_ADMIN")?,
            apiserver_pidfile: env("WATCHMUX_BENCH_APISERVER_PIDFILE")?,
            proxy_tls,
        })
    }

    pub fn proxy_target(&self) -> anyhow::Result<Target> {
        let addr = self.proxy.ok_or_else(|| anyhow!("WATCHMUX_BENCH_PROXY is not set"))?;
        Ok(Target::Proxy { addr, tls: self.proxy_tls.clone() })
    }

    pub fn apiserver_pid(&self) -> anyhow::Result<u32> {
        super::procfs::pid_from_file(&self.apiserver_pidfile)
    }

    /// One request straight at kube-apiserver; the status and the whole body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        ctype: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(ct) = ctype {
            b = b.header("content-type", ct);
        }
        let req = b.body(watchmux::body::boxed(Full::new(body)))?;
        let resp = self.direct.send(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// POST, with 409 (already there) taken as success.
    pub async fn create(&self, collection: &str, object: &serde_json::Value) -> anyhow::Result<()> {
        let (s, body) =
            self.send(Method::POST, collection, Some("application/json"), object.to_string().into()).await?;
        if !(s.is_success() || s == StatusCode::CONFLICT) {
            bail!("creating in {collection}: {s}: {}", String::from_utf8_lossy(&body[..body.len().min(300)]));
        }
        Ok(())
    }

    /// A merge patch; the status.
    pub async fn merge_patch(&self, path: &str, patch: String) -> anyhow::Result<StatusCode> {
        let (s, _) = self.send(Method::PATCH, path, Some("application/merge-patch+json"), patch.into()).await?;
        Ok(s)
    }

    pub async fn ensure_namespace(&self, ns: &str) -> anyhow::Result<()> {
        self.create(
            "/api/v1/namespaces",
            &serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}),
        )
        .await
        .with_context(|| format!("namespace {ns}"))
    }

    /// A LIST's resourceVersion.
    pub async fn list_rv(&self, path: &str) -> anyhow::Result<String> {
        let (status, list) = self.send(Method::GET, path, None, Bytes::new()).await?;
        if !status.is_success() {
            bail!("LIST {path}: {status}");
        }
        let list: serde_json::Value = serde_json::from_slice(&list)?;
        Ok(list["metadata"]["resourceVersion"].as_str().ok_or_else(|| anyhow!("LIST without RV"))?.to_owned())
    }

    pub async fn apiserver_metrics(&self) -> anyhow::Result<String> {
        let (status, body) =
            tokio::time::timeout(Duration::from_secs(20), self.send(Method::GET, "/metrics", None, Bytes::new()))
                .await
                .context("kube-apiserver /metrics timed out")??;
        if !status.is_success() {
            bail!("kube-apiserver /metrics: {status}");
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Waits until kube-apiserver answers /metrics again (after a restart), at most `limit`.
    pub async fn wait_apiserver(&self, limit: Duration) -> bool {
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            if self.apiserver_metrics().await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        false
    }

    pub async fn watchmux_metrics(&self) -> anyhow::Result<String> {
        let admin = self.admin.ok_or_else(|| anyhow!("WATCHMUX_BENCH_ADMIN is not set"))?;
        let send = Target::Proxy { addr: admin, tls: None }.connect(Shape::H1).await?;
        let Sender::H1(send) = send else { unreachable!() };
        let req = Request::get("/metrics").header("host", admin.to_string()).body(http_body_util::Empty::new())?;
        let resp = send.lock().await.send_request(req).await?;
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// The sum of kube-apiserver's `apiserver_longrunning_requests` for WATCH
    /// (all resources), and by resource.
    pub async fn apiserver_watches(&self) -> anyhow::Result<(f64, Vec<(String, f64)>)> {
        let text = self.apiserver_metrics().await?;
        let filter = [("verb", "WATCH")];
        Ok((
            prom::sum(&text, "apiserver_longrunning_requests", &filter),
            prom::by_label(&text, "apiserver_longrunning_requests", "resource", &filter),
        ))
    }

    /// SETTINGS_MAX_CONCURRENT_STREAMS of kube-apiserver and of watchmux (if set).
    pub async fn advertised_streams(&self) -> anyhow::Result<(Option<u32>, Option<u32>)> {
        let Target::Direct { addr, tls_h2, .. } = &self.api_target else { unreachable!() };
        let api = advertised_max_streams(tls_connect(tls_h2.clone(), TcpStream::connect(addr).await?).await?).await?;
        let proxy = match self.proxy {
            Some(p) => match &self.proxy_tls {
                Some((tls_h2, _)) => {
                    advertised_max_streams(tls_connect(tls_h2.clone(), TcpStream::connect(p).await?).await?).await?
                }
                None => advertised_max_streams(TcpStream::connect(p).await?).await?,
            },
            None => None,
        };
        Ok((api, proxy))
    }
}
