//! Fairness for cached reads (issue 26, item 3), against the real API
//! server: a service account holding every seat of its priority level
//! (LISTs it never reads) gets the API server's 429 once its queue is full,
//! another flow of that level gets it after the queue wait, and a kubelet
//! (another level) is served meanwhile.
//!
//! Plain HTTP with h2c and bearer tokens, as in `capacity.rs`; the kubelet is
//! the admin impersonating `system:node:<name>` in `system:nodes`, so that
//! the identity watchmux classifies is a node's (a client certificate would
//! need TLS on a connection whose window the test controls).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
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

#[tokio::test]
async fn a_service_account_holding_its_levels_seats_is_refused_and_a_kubelet_is_served() {
    // Alone: it holds a watchmux's seats and reads global metrics.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "fairness-seats").await;
    let other_ns = reader_namespace(&admin, "fairness-other").await;
    // 10 seats: 5 for workload-low (service accounts), 2 for node-high.
    let wm = Watchmux::start(
        &cluster,
        &["--auth-mode", "delegated", "--fairness-seats", "10", "--fairness-queue-wait", "10s"],
    )
    .await;
    let noisy = token_for(&cluster, &ns, &[]);
    // At resourceVersion=0: served from the cache with no freshness proof,
    // so each holds its seat. A consistent LIST the cache cannot prove at
    // once (a busy cluster: the suite's other tests) passes through and
    // gives its seat back, and more than five would be answered.
    let list = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");

    // Cached and allowed: one LIST read whole.
    let mut send = h2(wm.addr).await;
    let resp = send.send_request(get(wm.addr, &list, &noisy, &[])).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap();

    // The noisy service account: LISTs on a connection that grants no
    // window, so no answer is ever written and each keeps its seat.
    // Four connections: 100 streams each, as kube-apiserver allows.
    const FLOOD: usize = 5 + 300 + 20;
    let mut noisy_conns = Vec::new();
    for _ in 0..FLOOD.div_ceil(100) {
        let stream = tokio::net::TcpStream::connect(wm.addr).await.unwrap();
        let (noisy_send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        noisy_conns.push(noisy_send);
    }
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..FLOOD {
        let (mut send, req) = (noisy_conns[i % noisy_conns.len()].clone(), get(wm.addr, &list, &noisy, &[]));
        flood.spawn(async move {
            send.ready().await.unwrap();
            send.send_request(req).await.unwrap()
        });
    }
    // Five hold seats, 300 wait (APF's six queues of 50): the other twenty are refused at once
    // (the 300 only after the 10 s queue wait, long enough for the flood
    // to be sent on a busy machine).
    let mut statuses = std::collections::BTreeMap::new();
    // Answers kept: dropping one resets its stream, which frees its seat.
    let mut seated = Vec::new();
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while refused < FLOOD - 305 {
        let done = tokio::time::timeout_at(deadline, flood.join_next()).await.expect("the full queue refuses at once");
        let resp = done.unwrap_or_else(|| panic!("requests left waiting; answers so far: {statuses:?}")).unwrap();
        *statuses.entry(resp.status().as_u16()).or_insert(0) += 1;
        // No window: the head only.
        if resp.status() == 429 {
            assert_apf_429_head(&resp);
            refused += 1;
        } else {
            seated.push(resp);
        }
    }
    let label = "priority_level=\"workload-low\"";
    let waiting = watchmux_metric_sum(wm.admin, "watchmux_fairness_waiting", &[label]).await;
    assert_eq!(waiting, 300.0, "the noisy flow's queue");

    // A kubelet listing its own Node (as kubelets do): another level
    // (node-high), served at once.
    let admin_token = std::fs::read_to_string(cluster_file(&cluster, "tokens.csv")).unwrap();
    let admin_token = admin_token.split(',').next().unwrap().trim().to_owned();
    let node = [("impersonate-user", "system:node:fairness-n1"), ("impersonate-group", "system:nodes")];
    let mut kubelet = h2(wm.addr).await;
    let resp = kubelet
        .send_request(get(wm.addr, "/api/v1/nodes?fieldSelector=metadata.name%3Dfairness-n1", &admin_token, &node))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "a kubelet's LIST of nodes while service accounts are refused");
    resp.into_body().collect().await.unwrap();

    // Another service account: its own flow, but its level has no seat to
    // give until the noisy one's end; it waits out the queue wait.
    let other = token_for(&cluster, &other_ns, &[]);
    let started = Instant::now();
    let resp = send
        .send_request(get(wm.addr, &format!("/api/v1/namespaces/{other_ns}/configmaps?resourceVersion=0"), &other, &[]))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_apf_429(resp).await;
    assert!(waited >= Duration::from_secs(10), "refused after {waited:?}, before the 10 s queue wait");

    // The noisy flow's queue waited as long: 429 too; the five seated keep
    // their 200s (bodies never written).
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(done) = tokio::time::timeout_at(deadline, flood.join_next()).await.expect("the queue waits end") {
        let resp = done.unwrap();
        *statuses.entry(resp.status().as_u16()).or_insert(0) += 1;
        seated.push(resp);
    }
    assert_eq!(statuses, [(200, 5), (429, 320)].into(), "the noisy flow's answers");

    let rejected = |reason: &'static str| {
        let reason = format!("reason=\"{reason}\"");
        async move { watchmux_metric_sum(wm.admin, "watchmux_fairness_rejected_total", &[label, &reason]).await }
    };
    assert_eq!(rejected("queue_full").await, (FLOOD - 305) as f64);
    assert_eq!(rejected("queue_wait").await, 301.0);
    let node_high = watchmux_metric_sum(wm.admin, "watchmux_fairness_rejected_total", &["node-high"]).await;
    assert_eq!(node_high, 0.0);
}
