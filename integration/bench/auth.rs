//! What delegated auth adds to a cached read, measured side by side in one
//! run: the same GETs answered from the cache by a trusted-local watchmux
//! (no auth) and by a delegated one (a service account's bearer token,
//! TokenReview and SubjectAccessReview against the real API server).
//!
//! - cached decision: 2,000 GETs of one ConfigMap by one identity; after the
//!   first, both reviews are answered from watchmux's caches;
//! - uncached decision: 500 GETs each naming a different ConfigMap (answered
//!   404 from the cache), so every one needs its own SubjectAccessReview
//!   (the token stays cached, as it would for a real client).
//!
//! `make bench-auth` (integration/scripts/bench-auth.sh) starts the cluster
//! and runs this with WATCHMUX_BENCH_KUBECONFIG (admin kubeconfig) and
//! WATCHMUX_BENCH_BIN (the release watchmux). Every GET goes over one
//! kept-alive HTTP/1.1 connection per side, sequentially. Output: Markdown.

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use watchmux::upstream::{Upstream, UpstreamOptions};

#[path = "common/mod.rs"]
mod common;
use common::prom;
use common::stats::{ms_f, percentile};

const SAME: usize = 2000;
const DISTINCT: usize = 500;
const WARMUP: usize = 200;
const NS: &str = "watchmux-bench-auth";

struct Proxy {
    addr: SocketAddr,
    admin: SocketAddr,
    child: Child,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

async fn start(bin: &str, kubeconfig: &str, extra: &[&str]) -> Proxy {
    let (addr, admin) = (free_addr(), free_addr());
    let child = Command::new(bin)
        .args(["--kubeconfig", kubeconfig, "--listen", &addr.to_string(), "--admin-listen", &admin.to_string()])
        .args(["--cache-resources", "configmaps", "--cache-warm"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("starting watchmux");
    let proxy = Proxy { addr, admin, child };
    for _ in 0..150 {
        if let Ok(mut send) = h1(admin).await {
            let req = Request::get("/readyz").header("host", admin.to_string()).body(Empty::new()).unwrap();
            if send.send_request(req).await.is_ok_and(|r| r.status() == 200) {
                return proxy;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("watchmux at {addr} not ready in 15 s");
}

async fn h1(addr: SocketAddr) -> std::io::Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (send, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(send)
}

async fn admin_json(up: &Upstream, method: http::Method, path: &str, body: Value) -> Value {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(watchmux::body::boxed(Full::new(Bytes::from(body.to_string()))))
        .unwrap();
    let resp = up.send(req).await.unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// Latencies of sequential GETs of `paths` on one connection.
async fn run(addr: SocketAddr, token: Option<&str>, paths: &[String], expect: u16) -> Vec<Duration> {
    let mut send = h1(addr).await.unwrap();
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        let mut req = Request::get(path.as_str()).header("host", addr.to_string());
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if send.ready().await.is_err() {
            send = h1(addr).await.unwrap();
        }
        let started = Instant::now();
        let resp = send.send_request(req.body(Empty::new()).unwrap()).await.unwrap();
        let status = resp.status().as_u16();
        resp.into_body().collect().await.unwrap();
        out.push(started.elapsed());
        assert_eq!(status, expect, "GET {path}");
    }
    out
}

/// n, p50, p99 and mean of latencies, in ms.
fn stats(mut v: Vec<Duration>) -> (usize, f64, f64, f64) {
    v.sort();
    let mean = v.iter().sum::<Duration>().as_secs_f64() * 1e3 / v.len() as f64;
    let ms = |p| ms_f(percentile(&v, p)).unwrap_or(f64::NAN);
    (v.len(), ms(0.5), ms(0.99), mean)
}

/// Sum and count of watchmux's auth check histogram for one lookup kind.
async fn check_histogram(admin: SocketAddr, review: &str, lookup: &str) -> (f64, f64) {
    let mut send = h1(admin).await.unwrap();
    let req = Request::get("/metrics").header("host", admin.to_string()).body(Empty::new()).unwrap();
    let body = send.send_request(req).await.unwrap().into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    let labels = [("review", review), ("lookup", lookup)];
    let name = "watchmux_auth_check_duration_seconds";
    (prom::sum(&text, &format!("{name}_sum"), &labels), prom::sum(&text, &format!("{name}_count"), &labels))
}

#[tokio::main]
async fn main() {
    let kubeconfig = std::env::var("WATCHMUX_BENCH_KUBECONFIG").expect("WATCHMUX_BENCH_KUBECONFIG");
    let bin = std::env::var("WATCHMUX_BENCH_BIN").expect("WATCHMUX_BENCH_BIN");
    let cfg = watchmux::upstream::kubeconfig::resolve(Some(std::path::Path::new(&kubeconfig)), None).unwrap();
    let admin = Upstream::new(&cfg, UpstreamOptions::default()).unwrap();

    // A service account that may read configmaps in one namespace.
    use http::Method;
    admin_json(&admin, Method::POST, "/api/v1/namespaces", json!({"metadata": {"name": NS}})).await;
    let base = format!("/api/v1/namespaces/{NS}");
    admin_json(&admin, Method::POST, &format!("{base}/serviceaccounts"), json!({"metadata": {"name": "reader"}})).await;
    let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}");
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]);
    admin_json(&admin, Method::POST, &format!("{rbac}/roles"), json!({"metadata": {"name": "r"}, "rules": rules}))
        .await;
    let binding = json!({"metadata": {"name": "r"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]});
    admin_json(&admin, Method::POST, &format!("{rbac}/rolebindings"), binding).await;
    let cm = json!({"metadata": {"name": "cm1"}, "data": {"v": "x".repeat(1000)}});
    admin_json(&admin, Method::POST, &format!("{base}/configmaps"), cm).await;
    let token = admin_json(
        &admin,
        Method::POST,
        &format!("{base}/serviceaccounts/reader/token"),
        json!({"spec": {"expirationSeconds": 3600}}),
    )
    .await["status"]["token"]
        .as_str()
        .expect("a token")
        .to_owned();
    // RBAC takes effect asynchronously in the API server's informers.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let open = start(&bin, &kubeconfig, &[]).await;
    let delegated = start(&bin, &kubeconfig, &["--auth-mode", "delegated"]).await;

    let same: Vec<String> = (0..SAME + WARMUP).map(|_| format!("{base}/configmaps/cm1?resourceVersion=0")).collect();
    let distinct = |side: &str| -> Vec<String> {
        (0..DISTINCT).map(|i| format!("{base}/configmaps/absent-{side}-{i}?resourceVersion=0")).collect()
    };
    // Warm both, then alternate sides in blocks so drift hits both alike.
    run(open.addr, None, &same[..WARMUP], 200).await;
    run(delegated.addr, Some(&token), &same[..WARMUP], 200).await;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for chunk in same[WARMUP..].chunks(250) {
        a.extend(run(open.addr, None, chunk, 200).await);
        b.extend(run(delegated.addr, Some(&token), chunk, 200).await);
    }
    let (mut c, mut d) = (Vec::new(), Vec::new());
    let (open_paths, deleg_paths) = (distinct("o"), distinct("d"));
    for (o, dl) in open_paths.chunks(100).zip(deleg_paths.chunks(100)) {
        c.extend(run(open.addr, None, o, 404).await);
        d.extend(run(delegated.addr, Some(&token), dl, 404).await);
    }

    println!("| request (answered from the cache) | watchmux | n | p50 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|---|");
    for (what, side, v) in [
        ("GET one ConfigMap, same identity", "trusted-local (no auth)", a),
        ("GET one ConfigMap, same identity", "delegated: cached decision", b),
        ("GET a different name each time (404)", "trusted-local (no auth)", c),
        ("GET a different name each time (404)", "delegated: uncached decision", d),
    ] {
        let (n, p50, p99, mean) = stats(v);
        println!("| {what} | {side} | {n} | {p50:.3} | {p99:.3} | {mean:.3} |");
    }
    println!();
    println!("Time inside the auth check itself (watchmux_auth_check_duration_seconds, mean):");
    println!();
    for (review, lookup) in [("token", "hit"), ("token", "miss"), ("access", "hit"), ("access", "miss")] {
        let (sum, count) = check_histogram(delegated.admin, review, lookup).await;
        if count > 0.0 {
            println!("- {review} review, {lookup}: {:.1} µs over {count} checks", sum / count * 1e6);
        }
    }
    admin_json(&admin, Method::DELETE, &format!("/api/v1/namespaces/{NS}"), Value::Null).await;
}
