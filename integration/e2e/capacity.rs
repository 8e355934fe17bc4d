//! Shared capacity under attack, against the real API server: whatever one
//! caller does with its own requests and connections, a legitimate new
//! token authenticates within a second, another caller's pass-through body
//! completes, and another user gets a connection.
//!
//! Plain HTTP with h2c and bearer tokens, as in `auth.rs`'s thousand
//! watches: many streams on few connections is what the attacks need.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::time::Instant;

use crate::auth::{reader_namespace, token_for};
use crate::env::*;

/// What a legitimate new token may take to authenticate under attack in
/// this suite: half the 10 s review timeout, after which a review that
/// waited for a slot fails closed (the 401 issue 23 found). A bound that
/// tells a fair queue from an unfair one on any machine, not the figure
/// claimed: that is measured with a release build (docs/auth.md, about
/// 0.45 s here), the suite runs a debug one on shared cores.
const NEW_TOKEN_BOUND: Duration = Duration::from_secs(5);

fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Request<Full<Bytes>> {
    let mut req = Request::get(path).header("host", addr.to_string());
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    req.body(Full::default()).unwrap()
}

/// A GET by a new token on a connection of its own, timed to its full body.
async fn timed_get(addr: SocketAddr, path: &str, token: &str) -> (u16, usize, Duration) {
    let started = Instant::now();
    let mut send = h2(addr).await;
    let resp = send.send_request(get(addr, path, Some(token))).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, body.len(), started.elapsed())
}

/// Row 4: a client opens streams with a zero receive window and never reads
/// 10 large lists. Before, their bodies filled the one shared upstream
/// connection's flow-control window: other bodies stalled, and new tokens
/// got 401 after 10 s because their TokenReviews waited behind them.
#[tokio::test]
async fn a_client_that_never_reads_holds_nothing_that_others_need() {
    // Alone: the attack loads the shared API server and the cores, and
    // would slow every test running beside it past its bounds.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "capacity-unread").await;
    // 8 ConfigMaps of 900 KB: a list of about 7 MiB, more than hyper's old
    // 5 MiB connection window by itself.
    for i in 0..8 {
        let data = json!({"d": "x".repeat(900_000)});
        let cm = json!({"metadata": {"name": format!("big{i}")}, "data": data});
        direct_json(&admin, http::Method::POST, &format!("/api/v1/namespaces/{ns}/configmaps"), cm).await;
    }
    // ConfigMaps not cached: their lists pass through.
    let wm = Watchmux::start(&cluster, &["--auth-mode", "delegated", "--cache-resources", "pods"]).await;
    let attacker = token_for(&cluster, &ns, &[]);
    let list = format!("/api/v1/namespaces/{ns}/configmaps");
    let (status, len, _) = timed_get(wm.addr, &list, &attacker).await;
    assert_eq!(status, 200, "the attacker may read the list");
    assert!(len > 7_000_000, "{len}");

    let stream = tokio::net::TcpStream::connect(wm.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(0)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut unread = Vec::new();
    for _ in 0..10 {
        send.ready().await.unwrap();
        let resp = send.send_request(get(wm.addr, &list, Some(&attacker))).await.unwrap();
        assert_eq!(resp.status(), 200);
        unread.push(resp);
    }
    // Time for the API server to send what the windows allow: not a
    // synchronisation, the attack's set-up.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A new token: one TokenReview and one pass-through GET.
    let newcomer = token_for(&cluster, &ns, &[]);
    let (status, _, took) = timed_get(wm.addr, &format!("{list}/cm1"), &newcomer).await;
    eprintln!("new token under 10 unread lists: {status} in {took:?}");
    assert_eq!(status, 200);
    assert!(took < NEW_TOKEN_BOUND, "a new token took {took:?} behind 10 unread bodies");
    // Another caller's 7 MiB pass-through body completes.
    let (status, len, took) = timed_get(wm.addr, &list, &newcomer).await;
    eprintln!("another caller's 7 MiB list under 10 unread lists: {status} in {took:?}");
    assert_eq!((status, len > 7_000_000), (200, true));
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(unread);
    // 7 MiB left behind would be in every later cluster-wide ConfigMap cache
    // of the suite (no namespace controller runs to delete them).
    for i in 0..8 {
        let path = format!("/api/v1/namespaces/{ns}/configmaps/big{i}");
        let req = http::Request::delete(path).body(watchmux::body::empty()).unwrap();
        let resp = admin.send(req).await.unwrap();
        assert_eq!(resp.status(), 200, "deleting big{i}");
    }
}

/// Row 5: thousands of anonymous watches with distinct selectors, each a
/// SubjectAccessReview, queue for the review slots. Before, first come
/// first served: a new token's TokenReview waited behind all of them.
/// Measured (release binary: `WATCHMUX_E2E_BIN=target/release/watchmux`,
/// quiet machine): 0.43 to 0.48 s; a debug binary 0.6 to 1.3 s, 3 s with
/// the cores busy with compiles (CPU, not queueing: the newcomer's
/// TokenReview itself took 7 to 24 ms).
#[tokio::test]
async fn anonymous_requests_with_distinct_selectors_do_not_delay_a_new_token() {
    // Alone: the attack loads the shared API server and the cores, and
    // would slow every test running beside it past its bounds.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "capacity-reviews").await;
    // Fairness off: with it, the anonymous flood would get 429 from its
    // priority level before any review (`fairness.rs`); the review slots
    // are what is tested here, as they stand for GETs and without it.
    let wm = Watchmux::start(&cluster, &["--auth-mode", "delegated", "--fairness-seats", "0"]).await;

    // The ConfigMap cache started (and discovery fetched) before the flood:
    // what is timed below is authentication and authorization.
    let cm1 = format!("/api/v1/namespaces/{ns}/configmaps/cm1");
    let (status, _, _) = timed_get(wm.addr, &cm1, &token_for(&cluster, &ns, &[])).await;
    assert_eq!(status, 200);

    // 100 streams a connection, as kube-apiserver allows; each connection
    // gets GOAWAY after its first answer (anonymous HTTP/2), as from the
    // API server, so its requests not yet sent fail: the flood is what the
    // streams already open carry.
    const CONNECTIONS: usize = 40;
    const PER_CONNECTION: usize = 100;
    let selector = "a".repeat(8_000);
    let mut flood = tokio::task::JoinSet::new();
    for c in 0..CONNECTIONS {
        let send = h2(wm.addr).await;
        for i in 0..PER_CONNECTION {
            let (mut send, addr) = (send.clone(), wm.addr);
            let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&labelSelector={selector}{c}x{i}%3Dv");
            flood.spawn(async move {
                send.ready().await?;
                send.send_request(get(addr, &path, None)).await.map(|r| r.status().as_u16())
            });
        }
    }
    // Ask once the anonymous reviews are queued for slots (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(10);
    while watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_waiting", &[]).await < 100.0 {
        assert!(Instant::now() < deadline, "the anonymous flood never queued for review slots");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let newcomer = token_for(&cluster, &ns, &[]);
    let (status, _, took) = timed_get(wm.addr, &cm1, &newcomer).await;
    let waiting = watchmux_metric_sum(wm.admin, "watchmux_auth_reviews_waiting", &[]).await;
    for review in ["token", "access"] {
        let label = format!("review=\"{review}\"");
        let sum = watchmux_metric_sum(wm.admin, "watchmux_auth_review_duration_seconds_sum", &[&label]).await;
        let count = watchmux_metric_sum(wm.admin, "watchmux_auth_review_duration_seconds_count", &[&label]).await;
        eprintln!("{review} reviews: {count} in {sum:.3} s");
    }
    eprintln!(
        "new token during {} anonymous reviews: {status} in {took:?}, {waiting} still waiting",
        CONNECTIONS * PER_CONNECTION
    );
    assert_eq!(status, 200);
    // Overtook the queue: behind it (first come, first served) the newcomer
    // would be answered only once the thousands of reviews ahead were done,
    // or fail closed after the review timeout (401). The time alone does not
    // tell on cores starved by compiles (17 s once in CI, with the API
    // server taking 3 s a TokenReview), so it bounds only with the queue
    // drained.
    assert!(
        waiting >= 100.0 || took < NEW_TOKEN_BOUND,
        "a new token took {took:?} and was answered only after the anonymous queue drained ({waiting} waiting)"
    );

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut forbidden = 0;
    while let Some(done) = tokio::time::timeout_at(deadline, flood.join_next()).await.expect("the flood ends") {
        if done.unwrap().is_ok_and(|s| s == 403) {
            forbidden += 1;
        }
    }
    assert!(forbidden > 0, "anonymous may not watch configmaps");
}

/// Row 6: anonymous 403s with 60 KB selectors. Before, each kept its
/// selector in the decision cache's key (RSS 12 to 228 MiB for 3,080).
#[tokio::test]
async fn denials_of_huge_selectors_cost_the_decision_cache_little_and_are_swept() {
    // Alone: the attack loads the shared API server and the cores, and
    // would slow every test running beside it past its bounds.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = namespace("capacity-selectors");
    create_namespace(&admin, &ns).await;
    let wm =
        Watchmux::start(&cluster, &["--auth-mode", "delegated", "--authorization-cache-unauthorized-ttl", "10s"]).await;
    const N: usize = 300;
    let selector = "b".repeat(60_000);
    for i in 0..N {
        let path = format!("/api/v1/namespaces/{ns}/configmaps?labelSelector={selector}{i}%3Dv");
        // A connection each: an anonymous HTTP/2 request ends its
        // connection with GOAWAY, as kube-apiserver's.
        let mut send = h2(wm.addr).await;
        send.ready().await.unwrap();
        let resp = send.send_request(get(wm.addr, &path, None)).await.unwrap();
        assert_eq!(resp.status(), 403);
    }
    let entries = watchmux_metric_sum(wm.admin, "watchmux_auth_cache_entries", &["cache=\"access\""]).await;
    let bytes = watchmux_metric_sum(wm.admin, "watchmux_auth_cache_bytes", &["cache=\"access\""]).await;
    eprintln!("{N} denials of 60 KB selectors: {entries} entries, {bytes} bytes");
    // Some may already be swept (the TTL is short, the requests are large).
    assert!(entries >= 1.0, "denials are cached ({entries})");
    assert!(bytes / entries < 1024.0, "{bytes} bytes for {entries} denials: selectors kept?");

    // After the TTL (and the sweep interval), the next lookup frees them.
    tokio::time::sleep(Duration::from_secs(16)).await;
    let path = format!("/api/v1/namespaces/{ns}/configmaps?labelSelector=after%3Dv");
    let resp = h2(wm.addr).await.send_request(get(wm.addr, &path, None)).await.unwrap();
    assert_eq!(resp.status(), 403);
    let entries = watchmux_metric_sum(wm.admin, "watchmux_auth_cache_entries", &["cache=\"access\""]).await;
    assert!(entries <= 2.0, "expired denials were kept: {entries}");
}

/// A connection to `addr` from the loopback address `from` (127.0.0.x):
/// another client as far as watchmux's per-address shares go.
async fn connect_from(from: [u8; 4], addr: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A legitimate client's GET from its own address, on a fresh connection:
/// its status and how long it took, body included.
async fn legitimate_get(addr: SocketAddr, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let io = TokioIo::new(connect_from([127, 0, 0, 2], addr).await);
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
    tokio::spawn(conn);
    let resp = send.send_request(get(addr, path, None)).await.unwrap();
    let status = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    (status, started.elapsed())
}

/// The security re-test's first attack: HTTP/2 connections with an initial
/// window of 0 and 900 `GET /openapi/v2` that are never read. Before,
/// watchmux grew by about 1 MiB per stream (243 MiB; kube-apiserver did not
/// move). Now an answer holds a 256 KiB window of the 64 MiB budget until
/// sent, one address a quarter of it, further requests get 429, and a stalled
/// answer is reset at the stall deadline: watchmux's growth stays under the
/// budget (bound asserted: 64 MiB, a quarter of the chart's node-local limit)
/// and another client is served within a second throughout.
#[tokio::test]
async fn streams_that_never_read_pin_bounded_memory() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let wm = Watchmux::start(&cluster, &["--passthrough-stall-timeout", "5s"]).await;
    let (status, elapsed) = legitimate_get(wm.addr, "/openapi/v2").await;
    assert_eq!(status, 200, "{elapsed:?}");
    let before = wm.rss_bytes();

    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut held = Vec::new();
    for _ in 0..9 {
        let io = tokio::net::TcpStream::connect(wm.addr).await.unwrap();
        let (send, conn) = h2::client::Builder::new().initial_window_size(0).handshake::<_, Bytes>(io).await.unwrap();
        tokio::spawn(conn);
        let mut send = send.ready().await.unwrap();
        let mut heads = Vec::new();
        for _ in 0..100 {
            send = send.ready().await.unwrap();
            let req = Request::get(format!("http://{}/openapi/v2", wm.addr)).body(()).unwrap();
            heads.push(send.send_request(req, true).unwrap().0);
        }
        for head in heads {
            let resp = tokio::time::timeout(Duration::from_secs(30), head).await.unwrap().unwrap();
            *statuses.entry(resp.status().as_u16()).or_default() += 1;
            held.push(resp); // never read
        }
    }
    let mut peak = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        peak = peak.max(wm.rss_bytes().saturating_sub(before));
        let (status, took) = legitimate_get(wm.addr, "/openapi/v2").await;
        assert_eq!(status, 200);
        slowest = slowest.max(took);
        tokio::time::sleep(Duration::from_millis(500)).await; // sampling while the attack holds
    }
    eprintln!("statuses {statuses:?}; RSS growth peak {} KiB; slowest legitimate GET {slowest:?}", peak >> 10);
    assert!(statuses.get(&429).is_some_and(|n| *n > 0), "{statuses:?}: the budget never answered");
    assert!(statuses.get(&200).is_some_and(|n| *n >= 64), "{statuses:?}");
    assert!(peak < 64 << 20, "RSS grew by {} MiB", peak >> 20);
    assert!(slowest < Duration::from_secs(1), "a legitimate client waited {slowest:?}");
    // Past the stall deadline the answers were reset and their windows given back.
    let reset = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let reserved = watchmux_metric_sum(wm.admin, "watchmux_passthrough_buffer_reserved_bytes", &[]).await;
            if reserved == 0.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await; // polling a metric: no event to await
        }
    })
    .await;
    assert!(reset.is_ok(), "windows still held after the stall deadline");
    assert!(watchmux_metric_sum(wm.admin, "watchmux_passthrough_stalled_total", &[]).await >= 64.0);
    drop(held);
}

/// The re-test's second attack: thousands of idle HTTP/2 connections from
/// one client, answering PINGs. Before, they held every slot of
/// `--max-connections` (and at 20,000 every descriptor) and new clients got
/// 429 or nothing. Now one address holds a quarter of the budget, the rest of
/// its connections get 429 or are closed at accept, idle connections are
/// closed at the idle timeout (kube-apiserver's 90 s, 30 s here) and another
/// client is served within a second throughout. 18,000 connections: the test
/// process's own descriptors (20,000 here) bound the attack, not watchmux.
#[tokio::test]
async fn many_idle_connections_from_one_client_leave_room_for_others() {
    const IDLE: usize = 18_000;
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    // The default --max-connections, 20,000, lowered to what watchmux's
    // open-file limit allows.
    let wm = Watchmux::start(&cluster, &["--idle-connection-timeout", "30s"]).await;
    let mut conns = Vec::new();
    let mut refused_at_accept = 0;
    let mut slowest = Duration::ZERO;
    for i in 0..IDLE {
        let Ok(io) = tokio::net::TcpStream::connect(wm.addr).await else {
            refused_at_accept += 1;
            continue;
        };
        match hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(1))
            .handshake::<_, Full<Bytes>>(TokioIo::new(io))
            .await
        {
            Ok((send, conn)) => conns.push((send, tokio::spawn(conn))),
            Err(_) => refused_at_accept += 1,
        }
        if i % 2000 == 1999 {
            let (status, took) = legitimate_get(wm.addr, "/version").await;
            assert_eq!(status, 200, "after {i} idle connections");
            slowest = slowest.max(took);
        }
    }
    let open = conns.iter().filter(|(_, c)| !c.is_finished()).count();
    eprintln!(
        "{open} of {IDLE} idle connections open, {refused_at_accept} refused; slowest legitimate GET {slowest:?}"
    );
    // A quarter of the budget, and the connections answered with a 429.
    assert!(open <= 20_000 / 4 + 20_000 / 16 + 16, "one address held {open} connections, more than its share");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    // The idle timeout closes the rest.
    let closed = tokio::time::timeout(Duration::from_secs(60), async {
        while conns.iter().any(|(_, c)| !c.is_finished()) {
            tokio::time::sleep(Duration::from_millis(200)).await; // polling many tasks' ends
        }
    })
    .await;
    assert!(closed.is_ok(), "idle connections stayed open past the idle timeout");
    let (status, took) = legitimate_get(wm.addr, "/version").await;
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// An HTTP/2 connection to `addr` from the loopback address `from`, with a
/// watch of `path` by `token` held open on it: the watch's status and the
/// connection's task (finished once watchmux closes it).
async fn held_watch(
    from: [u8; 4],
    addr: SocketAddr,
    path: &str,
    token: &str,
) -> (u16, hyper::Response<hyper::body::Incoming>, tokio::task::JoinHandle<()>) {
    let io = TokioIo::new(connect_from(from, addr).await);
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = send.send_request(get(addr, path, Some(token))).await.unwrap();
    (resp.status().as_u16(), resp, conn)
}

/// The re-test's per-identity share: one credential opens connections from
/// as many addresses as it likes (or from one, behind a load balancer that
/// rewrites addresses), each holding a watch. With delegated auth each
/// connection counts against its first named user's share
/// (`--max-connections-per-user`, 3 here): past it the request gets the
/// API server's 429 and the connection is closed (GOAWAY), while another
/// user is served and the share comes back as connections close.
/// kube-apiserver has no share of connections per user (API Priority and
/// Fairness bounds requests, not connections): it would serve all four.
#[tokio::test]
async fn one_user_holds_its_share_of_connections_and_no_more() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "capacity-user-share").await;
    let other_ns = reader_namespace(&admin, "capacity-user-other").await;
    let wm = Watchmux::start(&cluster, &["--auth-mode", "delegated", "--max-connections-per-user", "3"]).await;
    let (mallory, alice) = (token_for(&cluster, &ns, &[]), token_for(&cluster, &other_ns, &[]));
    let watch = format!("/api/v1/namespaces/{ns}/configmaps?watch=1");

    let mut held = Vec::new();
    for i in 0..3 {
        let (status, resp, conn) = held_watch([127, 0, 0, 10 + i], wm.addr, &watch, &mallory).await;
        assert_eq!(status, 200, "connection {i}");
        held.push((resp, conn));
    }
    // The fourth, from an address of its own: refused for the user's share.
    let (status, resp, conn) = held_watch([127, 0, 0, 20], wm.addr, &watch, &mallory).await;
    assert_eq!(status, 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    drop(resp);
    tokio::time::timeout(Duration::from_secs(10), conn).await.expect("the refused connection was not closed").unwrap();
    assert!(
        watchmux_metric_sum(wm.admin, "watchmux_requests_rejected_total", &["limit=\"user_connections\""]).await >= 1.0
    );

    // Another user, from the same address, is served.
    let other_watch = format!("/api/v1/namespaces/{other_ns}/configmaps?watch=1");
    let (status, _alice_watch, _alice_conn) = held_watch([127, 0, 0, 20], wm.addr, &other_watch, &alice).await;
    assert_eq!(status, 200);

    // One of the user's connections closes: its share comes back (the
    // close reaches watchmux asynchronously, hence the bounded retries).
    let (resp, conn) = held.pop().unwrap();
    drop(resp);
    conn.abort();
    let served_again = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, resp, conn) = held_watch([127, 0, 0, 21], wm.addr, &watch, &mallory).await;
            if status == 200 {
                return (resp, conn);
            }
            tokio::time::sleep(Duration::from_millis(100)).await; // the server's close has no event to await
        }
    })
    .await;
    assert!(served_again.is_ok(), "the closed connection's share never came back");
}
