//! Test support: an in-process HTTP/1.1 server on loopback standing in for
//! kube-apiserver, and a watchmux upstream client pointed at it. Each test's
//! fake decides what it answers; this only serves it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use super::kubeconfig::UpstreamConfig;
use super::{Upstream, UpstreamOptions};
use crate::body::ProxyBody;

/// Serves `answer` for every request on a loopback port, each connection on
/// a task of its own, until the runtime ends; returns the port's address.
pub(crate) async fn serve<F, Fut>(answer: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            let service = hyper::service::service_fn(move |req| {
                let answer = answer(req);
                async move { Ok::<_, std::convert::Infallible>(answer.await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
        }
    });
    addr
}

/// A request's query parameters, decoded, in order: what a fake answers by.
pub(crate) fn query<B>(req: &Request<B>) -> Vec<(String, String)> {
    form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect()
}

/// An upstream client for the fake at `addr`, with `options`.
pub(crate) fn upstream(addr: SocketAddr, options: UpstreamOptions) -> Arc<Upstream> {
    let cfg = UpstreamConfig::for_test(&format!("http://{addr}"));
    Arc::new(Upstream::new(&cfg, options).unwrap())
}
