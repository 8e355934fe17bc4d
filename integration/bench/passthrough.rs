//! Pass-through overhead, measured side by side in one run: the same GETs
//! and the same watch events, straight from kube-apiserver and through
//! watchmux.
//!
//! `make bench-passthrough` starts the test cluster and a release watchmux and
//! runs this with WATCHMUX_BENCH_KUBECONFIG (the API server's admin
//! kubeconfig) and WATCHMUX_BENCH_PROXY (watchmux's address) set. The output
//! is a Markdown table for docs/benchmarks.md.
//!
//! Both sides use the same client code: hyper over one kept-alive
//! connection. Direct means TLS (HTTP/2 by ALPN) to the API server with the
//! admin token; through watchmux means plain HTTP/1.1 to watchmux, which then
//! holds the TLS HTTP/2 connection upstream. The difference is therefore the
//! whole cost a client pays for going through watchmux on loopback.

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::Request;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use watchmux::upstream::{Upstream, UpstreamOptions};

const GETS: usize = 2000;
const WARMUP: usize = 200;
const WATCH_EVENTS: usize = 300;
const NS: &str = "watchmux-bench";

/// A request path on one side of the comparison.
#[derive(Clone)]
enum Side {
    Direct(Arc<Upstream>),
    Proxy(SocketAddr),
}

impl Side {
    async fn get(&self, path: &str) -> http::Response<Incoming> {
        match self {
            Side::Direct(up) => up.send(Request::get(path).body(watchmux::body::empty()).unwrap()).await.unwrap(),
            Side::Proxy(addr) => {
                let mut send = h1(*addr).await;
                send.send_request(get_req(*addr, path)).await.unwrap()
            }
        }
    }
}

fn get_req(addr: SocketAddr, path: &str) -> Request<Empty<Bytes>> {
    Request::get(path).header("host", addr.to_string()).body(Empty::new()).unwrap()
}

async fn h1(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    send
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// Sequential GETs of one small object over one kept-alive connection.
async fn measure_gets(side: &Side, path: &str) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(GETS);
    match side {
        Side::Direct(_) => {
            for i in 0..WARMUP + GETS {
                let start = Instant::now();
                let resp = side.get(path).await;
                assert!(resp.status().is_success());
                resp.into_body().collect().await.unwrap();
                if i >= WARMUP {
                    samples.push(start.elapsed());
                }
            }
        }
        Side::Proxy(addr) => {
            let mut send = h1(*addr).await;
            for i in 0..WARMUP + GETS {
                send.ready().await.unwrap();
                let start = Instant::now();
                let resp = send.send_request(get_req(*addr, path)).await.unwrap();
                assert!(resp.status().is_success());
                resp.into_body().collect().await.unwrap();
                if i >= WARMUP {
                    samples.push(start.elapsed());
                }
            }
        }
    }
    samples.sort();
    samples
}

/// Reads newline-delimited watch events and reports each one's arrival
/// time, by the `data.seq` the writer put into the object.
async fn collect_events(resp: http::Response<Incoming>, tx: tokio::sync::mpsc::UnboundedSender<(usize, Instant)>) {
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else { continue };
        let now = Instant::now();
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line = buf.split_to(end + 1);
            let v: serde_json::Value = serde_json::from_slice(&line[..end]).unwrap();
            if let Some(seq) = v["object"]["data"]["seq"].as_str().and_then(|s| s.parse().ok())
                && tx.send((seq, now)).is_err()
            {
                return;
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let kubeconfig = std::env::var("WATCHMUX_BENCH_KUBECONFIG").expect("WATCHMUX_BENCH_KUBECONFIG");
    let proxy: SocketAddr = std::env::var("WATCHMUX_BENCH_PROXY").expect("WATCHMUX_BENCH_PROXY").parse().unwrap();
    let cfg = watchmux::upstream::kubeconfig::resolve(Some(kubeconfig.as_ref()), None).unwrap();
    let direct = Arc::new(Upstream::new(&cfg, UpstreamOptions::default()).unwrap());
    let sides = [("direct", Side::Direct(direct.clone())), ("through watchmux", Side::Proxy(proxy))];

    // Setup through the direct client: a namespace and a ~1 KiB configmap.
    let send_json = |method: http::Method, path: String, body: serde_json::Value| {
        let direct = direct.clone();
        async move {
            let req = Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(watchmux::body::boxed(Full::new(Bytes::from(body.to_string()))))
                .unwrap();
            let resp = direct.send(req).await.unwrap();
            let status = resp.status();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, body)
        }
    };
    let _ = send_json(
        http::Method::POST,
        "/api/v1/namespaces".into(),
        serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":NS}}),
    )
    .await;
    let cm_path = format!("/api/v1/namespaces/{NS}/configmaps");
    let _ = send_json(
        http::Method::POST,
        cm_path.clone(),
        serde_json::json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench"},"data":{"pad":"x".repeat(1000),"seq":"0"}}),
    )
    .await;

    println!("| measurement | side | n | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|");
    let get_path = format!("{cm_path}/bench");
    for (name, side) in &sides {
        let s = measure_gets(side, &get_path).await;
        println!(
            "| GET configmap (1 KiB), sequential | {name} | {} | {} | {} | {} |",
            s.len(),
            ms(percentile(&s, 0.5)),
            ms(percentile(&s, 0.99)),
            ms(*s.last().unwrap())
        );
    }

    // Watch: both sides watch the same object; the writer updates it, one
    // write at a time, and timestamps each write as it is issued; latency is
    // write issued → event received. (Ack → received is mostly zero on
    // loopback: the event often arrives before the write's response.)
    let (_, body) = send_json(http::Method::GET, format!("{cm_path}/bench"), serde_json::Value::Null).await;
    let rv = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch_path = format!("{cm_path}?watch=1&fieldSelector=metadata.name%3Dbench&resourceVersion={rv}");
    let mut receivers = Vec::new();
    for (_, side) in &sides {
        let resp = side.get(&watch_path).await;
        assert!(resp.status().is_success());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(collect_events(resp, tx));
        receivers.push(rx);
    }
    let mut issued = Vec::with_capacity(WATCH_EVENTS);
    for seq in 1..=WATCH_EVENTS {
        let patch = serde_json::json!({"data": {"seq": seq.to_string()}});
        let req = Request::patch(format!("{cm_path}/bench"))
            .header("content-type", "application/merge-patch+json")
            .body(watchmux::body::boxed(Full::new(Bytes::from(patch.to_string()))))
            .unwrap();
        let at = Instant::now();
        let resp = direct.send(req).await.unwrap();
        assert!(resp.status().is_success());
        resp.into_body().collect().await.unwrap();
        issued.push(at);
    }
    for ((name, _), rx) in sides.iter().zip(receivers.iter_mut()) {
        let mut lat = Vec::with_capacity(WATCH_EVENTS);
        while lat.len() < WATCH_EVENTS {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((seq, at))) => lat.push(at.saturating_duration_since(issued[seq - 1])),
                other => {
                    let why = if other.is_ok() { "the stream ended" } else { "nothing for 30 s" };
                    eprintln!("passthrough: {name}: {why} after {} of {WATCH_EVENTS} events", lat.len());
                    break;
                }
            }
        }
        if lat.is_empty() {
            continue;
        }
        lat.sort();
        println!(
            "| watch event, write issued to receipt | {name} | {} | {} | {} | {} |",
            lat.len(),
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
            ms(*lat.last().unwrap())
        );
    }
}
