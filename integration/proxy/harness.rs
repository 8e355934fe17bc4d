//! An in-process fake upstream and a watchmux instance in front of it.
//!
//! The fake upstream stands in for kube-apiserver only where these tests need
//! control a real one does not give (when each chunk is sent, a 101 answer,
//! a closed port); the end-to-end suite runs against the real API server.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use watchmux::app::App;
use watchmux::body::ProxyBody;
use watchmux::config::Args;
use watchmux::upstream::Upstream;

pub(crate) type HandlerFn =
    Arc<dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send>> + Send + Sync>;

/// Wraps an async closure as an upstream handler.
pub(crate) fn handler<F, Fut>(f: F) -> HandlerFn
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

/// Starts a plain-HTTP fake upstream (HTTP/1.1 with upgrades) on loopback.
pub(crate) async fn fake_upstream(handle: HandlerFn) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let handle = handle.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let handle = handle.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(req).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A running watchmux and what a test needs to reach and stop it.
pub(crate) struct Proxy {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub stop: Option<oneshot::Sender<()>>,
    pub done: JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

pub(crate) const UPSTREAM_TOKEN: &str = "upstream-secret-token";

/// Starts watchmux in front of `upstream` with extra flags.
pub(crate) async fn start_proxy(upstream: SocketAddr, extra: &[&str]) -> Proxy {
    start_proxy_at(&format!("http://{upstream}"), extra).await
}

/// Starts watchmux in front of the upstream URL `server` (TLS not
/// verified for an `https://` one) with extra flags.
pub(crate) async fn start_proxy_at(server: &str, extra: &[&str]) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let skip_verify = if server.starts_with("https://") { ", insecure-skip-tls-verify: true" } else { "" };
    std::fs::write(
        &kubeconfig,
        format!(
            "current-context: t\ncontexts:\n- name: t\n  context: {{cluster: c, user: u}}\n\
             clusters:\n- name: c\n  cluster: {{server: '{server}'{skip_verify}}}\n\
             users:\n- name: u\n  user: {{token: {UPSTREAM_TOKEN}}}\n"
        ),
    )
    .unwrap();
    let mut argv = vec![
        "watchmux".to_owned(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--admin-listen".into(),
        "127.0.0.1:0".into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    let args = <Args as clap::Parser>::try_parse_from(argv).unwrap();
    let cfg = watchmux::upstream::kubeconfig::resolve(args.kubeconfig.as_deref(), None).unwrap();
    let up = Arc::new(Upstream::new(&cfg, args.upstream_options().unwrap()).unwrap());
    let mut opts = args.server_options().unwrap();
    // The pass-through tests run without the cache unless they ask for it.
    if !extra.iter().any(|a| a.starts_with("--cache-resources")) {
        opts.cache = None;
    }
    let server = App::build(up, opts).await.unwrap();
    let (addr, admin) = (server.api_addr(), server.admin_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    Proxy { addr, admin, stop: Some(stop), done, _dir: dir }
}

impl Proxy {
    /// Signals shutdown and waits (bounded) for serve() to return.
    pub(crate) async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.done).await.expect("shutdown in time").unwrap().unwrap();
    }
}

/// An HTTP/1.1 connection to `addr`.
pub(crate) async fn h1(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn.with_upgrades());
    send
}

/// Sends a GET over a fresh HTTP/2 connection on `io` (h2c by prior
/// knowledge, or TLS that chose h2) and checks it is answered over HTTP/2.
pub(crate) async fn h2_get<IO>(io: IO, uri: &str) -> Response<Incoming>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get(uri).body(Full::<Bytes>::default()).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req)).await.unwrap().unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    resp
}

/// Sends a GET over a fresh HTTP/1.1 connection.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Response<Incoming> {
    let mut send = h1(addr).await;
    send.send_request(Request::get(path).header("host", "localhost").body(Full::default()).unwrap()).await.unwrap()
}

pub(crate) async fn body_json(resp: Response<Incoming>) -> serde_json::Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
}
