//! Fairness for cached reads, against the real API server: a seat bounds
//! building an answer, not its client's reading. LISTs and watches a user
//! never reads (a connection that grants no window) keep none of their
//! level's seats, so another user of that level is served at once, as
//! kube-apiserver serves it under the same attack; and the API server's
//! 429 for a flow over its watch-start rate.
//!
//! Plain HTTP with h2c and bearer tokens to watchmux, as in `capacity.rs`;
//! TLS (the cluster's CA) straight to kube-apiserver.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::Instant;

use crate::auth::{cluster_file, reader_namespace, token_for};
use crate::env::*;

fn get(addr: SocketAddr, path: &str, token: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut req =
        Request::get(path).header("host", addr.to_string()).header("authorization", format!("Bearer {token}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Full::default()).unwrap()
}

/// The head of the API server's 429 for a request Priority and Fairness
/// rejected.
fn assert_apf_429_head(resp: &http::Response<hyper::body::Incoming>) {
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
}

/// The whole 429 (on a connection that grants a window for its body).
async fn assert_apf_429(resp: http::Response<hyper::body::Incoming>) {
    assert_apf_429_head(&resp);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"Too many requests, please try again later.\n");
}

/// An HTTP/2 connection that grants no window: no byte of any answer's body
/// is ever sent on it, only heads. `tls`: to kube-apiserver, trusting
/// that CA.
async fn unread_h2(addr: SocketAddr, tls: Option<&std::path::Path>) -> SendRequest<Full<Bytes>> {
    connect_h2(addr, tls, Some(0)).await
}

/// An HTTP/2 connection, over TLS trusting `tls` if given, with `window`
/// as each stream's initial window (`None`: hyper's).
async fn connect_h2(addr: SocketAddr, tls: Option<&std::path::Path>, window: Option<u32>) -> SendRequest<Full<Bytes>> {
    let builder = || {
        let mut b = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
        if let Some(window) = window {
            b.initial_stream_window_size(window);
        }
        b
    };
    let Some(ca) = tls else {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = builder().handshake(TokioIo::new(tcp)).await.unwrap();
        tokio::spawn(conn);
        return send;
    };
    let tls = tls_connect(addr, ca, b"h2").await;
    let (send, conn) = builder().handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    send
}

/// Sends `n` GETs of `path` as `token` on `send` at once; the heads, in
/// the order they came, and how long the last took. Bodies unread.
async fn flood(
    send: &SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
    token: &str,
    n: usize,
) -> (Vec<http::Response<hyper::body::Incoming>>, Duration) {
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (mut send, req) = (send.clone(), get(addr, path, token, &[]));
        set.spawn(async move {
            send.ready().await.unwrap();
            send.send_request(req).await.unwrap()
        });
    }
    let mut heads = Vec::new();
    let deadline = started + Duration::from_secs(60);
    while let Some(done) = tokio::time::timeout_at(deadline, set.join_next()).await.expect("every head comes") {
        heads.push(done.unwrap());
    }
    (heads, started.elapsed())
}

/// One LIST as `token`, read whole: its status and how long it took.
async fn timed_list(send: &mut SendRequest<Full<Bytes>>, addr: SocketAddr, path: &str, token: &str) -> (u16, Duration) {
    let started = Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(60), send.send_request(get(addr, path, token, &[])))
        .await
        .expect("an answer within the request timeout")
        .unwrap();
    let status = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    (status, started.elapsed())
}

/// The victim's LIST, through watchmux, once its level's seats can be
/// held at all (a tenth of the 15 s queue wait, past which it would get 429).
const PROMPT: Duration = Duration::from_millis(1500);

#[tokio::test]
async fn unread_lists_and_watches_keep_no_seat_and_another_user_is_served_as_by_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "fairness-unread").await;
    let other_ns = reader_namespace(&admin, "fairness-victim").await;
    // 10 seats: 5 for workload-low, both service accounts' level; the
    // default 15 s queue wait.
    let wm = Watchmux::start(&cluster, &["--auth-mode", "delegated", "--fairness-seats", "10"]).await;
    let (noisy, victim) = (token_for(&cluster, &ns, &[]), token_for(&cluster, &other_ns, &[]));
    // At resourceVersion=0: served from the cache with no freshness proof.
    // One configmap: the answer is a few hundred bytes.
    let list = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
    let victim_list = format!("/api/v1/namespaces/{other_ns}/configmaps?resourceVersion=0");
    let mut victim_send = h2(wm.addr).await;
    // Warm: the cache started, both users' reviews cached.
    assert_eq!(timed_list(&mut victim_send, wm.addr, &victim_list, &victim).await.0, 200);
    let mut warm = h2(wm.addr).await;
    assert_eq!(timed_list(&mut warm, wm.addr, &list, &noisy).await.0, 200);

    // Ten times the level's seats in LISTs never read: every one answered
    // (a built LIST keeps no seat), none queued, none refused.
    const UNREAD: usize = 50;
    let unread = unread_h2(wm.addr, None).await;
    let (lists, took) = flood(&unread, wm.addr, &list, &noisy, UNREAD).await;
    let statuses: Vec<u16> = lists.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses, vec![200; UNREAD], "{UNREAD} unread LISTs answered in {took:?}");
    let (status, through_watchmux) = timed_list(&mut victim_send, wm.addr, &victim_list, &victim).await;
    assert_eq!(status, 200);
    assert!(through_watchmux < PROMPT, "the victim's LIST took {through_watchmux:?} behind {UNREAD} unread ones");
    let label = "priority_level=\"workload-low\"";
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_fairness_rejected_total", &[label]).await, 0.0);
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_fairness_waiting", &[label]).await, 0.0);

    // The same attack straight at kube-apiserver, whose APF seat ends with
    // its handler: the victim is served there too.
    let ca = cluster_file(&cluster, "ca.crt");
    let api = cluster.api_addr();
    let direct_unread = unread_h2(api, Some(&ca)).await;
    let (direct_lists, _) = flood(&direct_unread, api, &list, &noisy, UNREAD).await;
    assert!(direct_lists.iter().all(|r| r.status() == 200));
    let mut direct = connect_h2(api, Some(&ca), None).await;
    let (status, straight) = timed_list(&mut direct, api, &victim_list, &victim).await;
    assert_eq!(status, 200);
    eprintln!(
        "victim's LIST behind {UNREAD} unread ones: {through_watchmux:?} through watchmux, {straight:?} straight at kube-apiserver"
    );

    // Watches whose initial event (the configmap, ADDED) is never read:
    // each keeps its seat while its initial events wait to be written, for
    // 1 s of waiting on its client at most. Ten of them, twice the seats.
    let watch = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0");
    let (watches, _) = flood(&unread, wm.addr, &watch, &noisy, 10).await;
    assert!(watches.iter().all(|r| r.status() == 200), "unread watches are answered once seats come back");
    let (status, behind_watches) = timed_list(&mut victim_send, wm.addr, &victim_list, &victim).await;
    assert_eq!(status, 200);
    assert!(behind_watches < Duration::from_secs(5), "the victim's LIST took {behind_watches:?} behind unread watches");
    // Each counted once, the last within a budget of its head.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let taken_back = watchmux_metric_sum(wm.admin, "watchmux_fairness_unread_released_total", &[label]).await;
        if taken_back == 10.0 {
            break;
        }
        assert!(taken_back < 10.0 && Instant::now() < deadline, "unread watches' seats taken back: {taken_back}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_fairness_rejected_total", &[label]).await, 0.0);
    drop((lists, direct_lists, watches));
}

#[tokio::test]
async fn a_watch_over_its_users_start_rate_gets_the_api_servers_429() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "fairness-rate").await;
    let wm = Watchmux::start(
        &cluster,
        &[
            "--auth-mode",
            "delegated",
            "--fairness-watch-start-burst",
            "2",
            "--fairness-watch-starts-per-second",
            "0.01",
        ],
    )
    .await;
    let token = token_for(&cluster, &ns, &[]);
    let watch = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=30");
    let mut send = h2(wm.addr).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let resp = send.send_request(get(wm.addr, &watch, &token, &[])).await.unwrap();
        assert_eq!(resp.status(), 200);
        open.push(resp);
    }
    let resp = send.send_request(get(wm.addr, &watch, &token, &[])).await.unwrap();
    assert_apf_429(resp).await;
    let label = "priority_level=\"workload-low\"";
    let reason = "reason=\"watch_rate\"";
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_fairness_rejected_total", &[label, reason]).await, 1.0);
}
