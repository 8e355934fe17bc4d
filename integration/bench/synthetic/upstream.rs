//! The synthetic upstream: a TLS server on loopback (ALPN `h2`, HTTP/1.1
//! beside it for the clients that ask for it) answering what watchmux's Pods
//! cache asks a kube-apiserver for at start (health, /version, discovery,
//! the OpenAPI v3 document of the core group, the kube-system namespace for
//! the cluster's identity), the LIST of every pod (in pages when `limit`
//! asks, with continue tokens, as kube-apiserver does: watchmux lists in
//! pages of 500 and reads at most 1 GiB a page) or of one node's
//! (`fieldSelector=spec.nodeName=`, what watchmux passes through before its
//! cache is ready), and WATCHes that replay the
//! bench's events phase by phase, with a bookmark a second when asked for
//! (also between phases: an idle watch is not taken for a dead one).
//!
//! Why TLS: watchmux's upstream client offers HTTP/2 only by ALPN (over
//! plain HTTP it speaks HTTP/1.1), and a kube-apiserver is always TLS, so
//! the cache pays for decryption as it would in a cluster.
//!
//! A watch's producer task makes each event's bytes and hands them to the
//! response body through a short channel; the body stamps every event with
//! the moment hyper takes it from the body to write it, which HTTP/2 does
//! only while watchmux's flow-control window has room: the replay runs as
//! fast as the connection takes it, or at the phase's rate if slower.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::pods::{Pods, RV_BASE, bookmark};

type BoxBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// Events waiting between a watch's producer and its body: few, so that an
/// event's stamp is close to when it was made available.
const HANDOFF: usize = 16;
/// How often a watch that asked for bookmarks gets one (kube-apiserver: about a minute;
/// sooner here so that a run of seconds sees them on the cache's path too).
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

/// One phase of the replay: events `first..=last`, at `rate` a second
/// (`None`: as fast as the connection takes them) from `start`.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub first: u64,
    pub last: u64,
    pub rate: Option<f64>,
    pub start: Instant,
}

/// What the watches replay, and when each event went out.
pub struct Replay {
    pods: Arc<Pods>,
    phase: watch::Sender<Option<Phase>>,
    epoch: Instant,
    /// Nanoseconds after `epoch` when event `seq` was taken to be written (index seq; 0: not yet).
    written: Vec<AtomicU64>,
    /// Pod WATCHes opened, and by HTTP version.
    pub watches: AtomicUsize,
    pub versions: Mutex<BTreeMap<String, usize>>,
    /// Requests answered 404, by path (the bench says so: an upstream it did not foresee).
    pub unknown: Mutex<BTreeMap<String, usize>>,
    pub lists: AtomicUsize,
    /// Pods served in LIST pages.
    pub listed_items: AtomicUsize,
}

impl Replay {
    pub fn new(pods: Arc<Pods>, events: u64, epoch: Instant) -> Arc<Self> {
        Arc::new(Self {
            pods,
            phase: watch::channel(None).0,
            epoch,
            written: (0..=events).map(|_| AtomicU64::new(0)).collect(),
            watches: AtomicUsize::new(0),
            versions: Mutex::default(),
            unknown: Mutex::default(),
            lists: AtomicUsize::new(0),
            listed_items: AtomicUsize::new(0),
        })
    }

    /// Starts a phase: every watch replays its events from now.
    pub fn start(&self, phase: Phase) {
        assert!(phase.last < self.written.len() as u64, "more events than the run planned");
        self.phase.send_replace(Some(phase));
    }

    /// When event `seq` was handed to the connection.
    pub fn written_at(&self, seq: u64) -> Option<Instant> {
        let nanos = self.written.get(seq as usize)?.load(Ordering::Relaxed);
        (nanos != 0).then(|| self.epoch + Duration::from_nanos(nanos))
    }

    fn stamp(&self, seq: u64, at: Instant) {
        if let Some(slot) = self.written.get(seq as usize) {
            slot.store(at.duration_since(self.epoch).as_nanos().max(1) as u64, Ordering::Relaxed);
        }
    }

    /// The replay of one watch from resourceVersion `from_rv` (events after it).
    fn watch(self: &Arc<Self>, from_rv: u64, bookmarks: bool) -> ReplayBody {
        let (tx, rx) = mpsc::channel(HANDOFF);
        let replay = self.clone();
        let mut phases = self.phase.subscribe();
        tokio::spawn(async move {
            let mut next = from_rv.saturating_sub(RV_BASE) + 1;
            let mut last_bookmark = Instant::now();
            loop {
                let phase = *phases.borrow_and_update();
                let mut buf = BytesMut::new();
                while let Some(phase) = phase
                    && next <= phase.last
                {
                    let seq = next.max(phase.first);
                    if let Some(rate) = phase.rate {
                        let due = phase.start + Duration::from_secs_f64((seq - phase.first) as f64 / rate);
                        if due > Instant::now() {
                            tokio::time::sleep_until(due.into()).await;
                        }
                    }
                    if bookmarks && last_bookmark.elapsed() >= BOOKMARK_EVERY {
                        last_bookmark = Instant::now();
                        if tx.send((0, bookmark(RV_BASE + seq - 1))).await.is_err() {
                            return;
                        }
                    }
                    buf.reserve(replay.pods.object_bytes + 64);
                    replay.pods.write_event(seq, &mut buf);
                    if tx.send((seq, buf.split().freeze())).await.is_err() {
                        return;
                    }
                    next = seq + 1;
                }
                // Idle until the (next) phase, with the bookmarks kube-apiserver
                // would send meanwhile.
                loop {
                    let changed = tokio::select! {
                        changed = phases.changed() => Some(changed),
                        () = tokio::time::sleep(BOOKMARK_EVERY), if bookmarks => None,
                    };
                    match changed {
                        Some(Ok(())) => break,
                        Some(Err(_)) => return,
                        None => {
                            last_bookmark = Instant::now();
                            if tx.send((0, bookmark(RV_BASE + next - 1))).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        ReplayBody { replay: self.clone(), rx }
    }
}

/// A watch's response body: the producer's events, each stamped as hyper takes it.
struct ReplayBody {
    replay: Arc<Replay>,
    rx: mpsc::Receiver<(u64, Bytes)>,
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((seq, bytes))) => {
                if seq != 0 {
                    self.replay.stamp(seq, Instant::now());
                }
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<BoxBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(body.into()).boxed_unsync())
        .expect("a valid response")
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect()
}

/// The answer to one request.
fn answer(replay: &Arc<Replay>, req: Request<Incoming>) -> Response<BoxBody> {
    let ok = |body: &str| json(StatusCode::OK, body.to_owned());
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/readyz" | "/livez" | "/healthz" => ok("ok"),
        "/version" => ok(
            r#"{"major":"1","minor":"34","gitVersion":"v1.34.0","gitCommit":"synthetic","gitTreeState":"clean","buildDate":"2026-01-01T00:00:00Z","goVersion":"go1.24","compiler":"gc","platform":"linux/amd64"}"#,
        ),
        "/api" => ok(
            r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1:6443"}]}"#,
        ),
        "/apis" => ok(r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#),
        "/api/v1" => ok(concat!(
            r#"{"kind":"APIResourceList","groupVersion":"v1","resources":["#,
            r#"{"name":"namespaces","singularName":"namespace","namespaced":false,"kind":"Namespace","verbs":["get","list","watch"],"shortNames":["ns"]},"#,
            r#"{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["po"],"categories":["all"]}]}"#
        )),
        "/openapi/v3" => ok(r#"{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=synthetic"}}}"#),
        "/openapi/v3/api/v1" => {
            ok(r#"{"openapi":"3.0.0","info":{"title":"Kubernetes","version":"v1.34.0"},"components":{"schemas":{}}}"#)
        }
        "/api/v1/namespaces/kube-system" => ok(
            r#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kube-system","uid":"11111111-2222-4333-8444-555555555555","resourceVersion":"1"}}"#,
        ),
        "/api/v1/pods" => {
            let q = query(&req);
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
                replay.watches.fetch_add(1, Ordering::Relaxed);
                *replay.versions.lock().entry(format!("{:?}", req.version())).or_default() += 1;
                let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(RV_BASE);
                let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
                let body = replay.watch(from, bookmarks);
                Response::builder()
                    .header("content-type", "application/json")
                    .body(BoxBody::new(body))
                    .expect("a valid response")
            } else {
                replay.lists.fetch_add(1, Ordering::Relaxed);
                // A kubelet's LIST passed through (no limit): its node's pods.
                if let Some(node) = q
                    .get("fieldSelector")
                    .and_then(|f| f.strip_prefix("spec.nodeName=node-"))
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    let body = replay.pods.node_list(node);
                    replay.listed_items.fetch_add(
                        replay.pods.count().saturating_sub(node).div_ceil(replay.pods.nodes),
                        Ordering::Relaxed,
                    );
                    return json(StatusCode::OK, body);
                }
                let limit = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
                let from = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
                let (page, _) = replay.pods.page(from, limit);
                let items =
                    if limit == 0 { replay.pods.count() } else { limit.min(replay.pods.count().saturating_sub(from)) };
                replay.listed_items.fetch_add(items, Ordering::Relaxed);
                json(StatusCode::OK, page)
            }
        }
        other => {
            *replay.unknown.lock().entry(other.to_owned()).or_default() += 1;
            json(
                StatusCode::NOT_FOUND,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}"#,
            )
        }
    }
}

/// Serves `replay` over TLS on a loopback port; returns the address.
pub async fn serve(replay: Arc<Replay>) -> anyhow::Result<SocketAddr> {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let (acceptor, replay) = (acceptor.clone(), replay.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |req| {
                    let resp = answer(&replay, req);
                    async move { Ok::<_, std::convert::Infallible>(resp) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok(addr)
}
