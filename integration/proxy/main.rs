//! In-process tests of the pass-through proxy against a fake upstream:
//! streaming, upgrades, failure answers, bad input and shutdown. What real
//! clients see against a real kube-apiserver is tested in `integration/e2e`.

mod delegated;
mod h2_abuse;
mod harness;
mod protobuf_drift;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, channel::Channel};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use harness::*;
use watchmux::body::{self, BoxError};

const WAIT: Duration = Duration::from_secs(10);

type StreamSender = http_body_util::channel::Sender<Bytes, BoxError>;

/// A fake upstream whose every watch response is a stream the test feeds:
/// each request hands its sender to the returned receiver. Readiness probes
/// are answered apart, so they never take a test's stream.
async fn streaming_upstream() -> (std::net::SocketAddr, mpsc::Receiver<StreamSender>) {
    let (senders_tx, senders) = mpsc::channel::<StreamSender>(4);
    let upstream = fake_upstream(handler(move |req: Request<hyper::body::Incoming>| {
        let senders_tx = senders_tx.clone();
        async move {
            if req.uri().path() == "/readyz" {
                return Response::new(body::full("ok"));
            }
            let (tx, rx) = Channel::<Bytes, BoxError>::new(1);
            senders_tx.send(tx).await.unwrap();
            let mut resp = Response::new(body::boxed(rx));
            resp.headers_mut().insert("content-type", "application/json;stream=watch".parse().unwrap());
            resp
        }
    }))
    .await;
    (upstream, senders)
}

#[tokio::test]
async fn request_passes_through_with_body_query_and_end_to_end_headers_only() {
    let upstream = fake_upstream(handler(|req: Request<hyper::body::Incoming>| async move {
        let (parts, incoming) = req.into_parts();
        let body = incoming.collect().await.unwrap().to_bytes();
        let headers: serde_json::Map<String, serde_json::Value> =
            parts.headers.iter().map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap()))).collect();
        let echo = json!({
            "method": parts.method.as_str(),
            "uri": parts.uri.to_string(),
            "headers": headers,
            "body": String::from_utf8_lossy(&body),
        });
        let mut resp = Response::new(body::full(echo.to_string()));
        resp.headers_mut().insert("x-upstream", "yes".parse().unwrap());
        resp.headers_mut().insert("keep-alive", "timeout=5".parse().unwrap());
        resp
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;

    let mut send = h1(proxy.addr).await;
    let req = Request::post("/api/v1/namespaces/default/configmaps?dryRun=All&fieldManager=t")
        .header("host", "localhost")
        .header("authorization", "Bearer client-token")
        .header("connection", "x-hop")
        .header("x-hop", "must-not-pass")
        .header("impersonate-user", "alice")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"kind\":\"ConfigMap\"}")))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-upstream"], "yes");
    assert!(resp.headers().get("keep-alive").is_none(), "hop-by-hop response header forwarded");
    let echo = body_json(resp).await;
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["uri"], "/api/v1/namespaces/default/configmaps?dryRun=All&fieldManager=t");
    assert_eq!(echo["body"], "{\"kind\":\"ConfigMap\"}");
    let h = &echo["headers"];
    assert_eq!(h["authorization"], format!("Bearer {UPSTREAM_TOKEN}"), "client credentials must be replaced");
    assert_eq!(h["impersonate-user"], "alice");
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert!(h.get("x-hop").is_none(), "header named in Connection forwarded");
    assert_eq!(h["host"], upstream.to_string());
    proxy.shutdown().await;
}

/// A passed-through answer keeps the upstream's encoding: the client's
/// Accept-Encoding goes upstream as sent, and a gzip body comes back byte
/// for byte with its Content-Encoding and Vary, never compressed twice or
/// decoded on the way.
#[tokio::test]
async fn a_passed_through_gzip_answer_reaches_the_client_untouched() {
    const GZIP_BODY: &[u8] =
        &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff, 0xab, 0xae, 5, 0, 0x43, 0xbf, 0xa6, 0xa3, 2, 0, 0, 0];
    let upstream = fake_upstream(handler(|req: Request<hyper::body::Incoming>| async move {
        let asked =
            req.headers().get_all("accept-encoding").iter().map(|v| v.to_str().unwrap().to_owned()).collect::<Vec<_>>();
        let mut resp = Response::new(body::full(Bytes::from_static(GZIP_BODY)));
        resp.headers_mut().insert("content-type", "application/json".parse().unwrap());
        resp.headers_mut().insert("content-encoding", "gzip".parse().unwrap());
        resp.headers_mut().insert("vary", "Accept-Encoding".parse().unwrap());
        resp.headers_mut().insert("x-asked", asked.join("|").parse().unwrap());
        resp
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    let mut send = h1(proxy.addr).await;
    let req = Request::get("/api/v1/namespaces/default/secrets")
        .header("host", "localhost")
        .header("accept-encoding", "gzip;q=1, br")
        .header("accept-encoding", "identity")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-asked"], "gzip;q=1, br|identity", "every Accept-Encoding line, as sent");
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    assert_eq!(resp.headers().get_all("vary").iter().collect::<Vec<_>>(), ["Accept-Encoding"]);
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), GZIP_BODY);
    proxy.shutdown().await;
}

/// Events reach the client while the upstream still holds the stream open:
/// nothing is buffered until the body ends.
#[tokio::test]
async fn watch_events_are_flushed_as_they_arrive() {
    let (upstream, mut senders) = streaming_upstream().await;
    let proxy = start_proxy(upstream, &[]).await;

    let resp = get(proxy.addr, "/api/v1/namespaces/default/configmaps?watch=true").await;
    assert_eq!(resp.headers()["content-type"], "application/json;stream=watch");
    let mut body = resp.into_body();
    let mut tx = senders.recv().await.unwrap();
    for i in 0..3 {
        let event = format!("{{\"type\":\"ADDED\",\"object\":{{\"n\":{i}}}}}\n");
        tx.send_data(Bytes::from(event.clone())).await.unwrap();
        let got = tokio::time::timeout(WAIT, body.frame()).await.expect("event not flushed").unwrap().unwrap();
        assert_eq!(got.into_data().unwrap(), event);
    }
    drop(tx);
    assert!(body.frame().await.is_none());
    proxy.shutdown().await;
}

/// `kubectl exec` and friends: the 101 handshake goes through and bytes
/// flow both ways on the upgraded connection.
#[tokio::test]
async fn upgrade_is_tunnelled_both_ways() {
    let upstream = fake_upstream(handler(|mut req: Request<hyper::body::Incoming>| async move {
        assert_eq!(req.headers()["upgrade"], "SPDY/3.1");
        assert_eq!(req.headers()["x-stream-protocol-version"], "v4.channel.k8s.io");
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let mut io = TokioIo::new(on_upgrade.await.unwrap());
            let mut buf = [0u8; 64];
            loop {
                let n = io.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                io.write_all(&buf[..n].to_ascii_uppercase()).await.unwrap();
            }
        });
        Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("connection", "Upgrade")
            .header("upgrade", "SPDY/3.1")
            .header("x-stream-protocol-version", "v4.channel.k8s.io")
            .body(body::empty())
            .unwrap()
    }))
    .await;
    // kubectl proxy's default refuses exec (below): this proxy allows it.
    let proxy = start_proxy(upstream, &["--reject-paths", ""]).await;

    let mut send = h1(proxy.addr).await;
    let req = Request::post("/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true")
        .header("host", "localhost")
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(Full::default())
        .unwrap();
    let mut resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(resp.headers()["x-stream-protocol-version"], "v4.channel.k8s.io");
    let mut io = TokioIo::new(hyper::upgrade::on(&mut resp).await.unwrap());
    for msg in [&b"ping"[..], b"second frame"] {
        io.write_all(msg).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        tokio::time::timeout(WAIT, io.read_exact(&mut buf)).await.unwrap().unwrap();
        assert_eq!(buf, msg.to_ascii_uppercase());
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn upgrade_refused_upstream_is_passed_on() {
    let upstream = fake_upstream(handler(|_req| async move {
        Response::builder()
            .status(StatusCode::FORBIDDEN)
            .body(body::full("{\"kind\":\"Status\",\"code\":403}"))
            .unwrap()
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    let mut send = h1(proxy.addr).await;
    let req = Request::get("/api/v1/namespaces/default/pods/p/portforward")
        .header("host", "localhost")
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .body(Full::default())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(body_json(resp).await["code"], 403);
    proxy.shutdown().await;
}

#[tokio::test]
async fn unreachable_upstream_answers_at_once_with_a_503_naming_it_and_no_retry_after() {
    // A port that was just bound and released: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = start_proxy(closed, &[]).await;
    let resp = get(proxy.addr, "/api/v1/pods").await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["content-type"], "application/json");
    // client-go retries a 503 ten times when told when to: a refused
    // connection must fail as fast as it would straight at the API server.
    assert!(resp.headers().get("retry-after").is_none());
    let status = body_json(resp).await;
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert_eq!(status["code"], 503);
    assert!(status["details"].get("retryAfterSeconds").is_none(), "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(message.contains(&format!("upstream API server http://{closed}")), "{message}");
    assert!(message.contains("onnection refused"), "{message}");
    proxy.shutdown().await;
}

/// trusted-local refuses exec and attach by default, as `kubectl proxy`
/// does (issue 29): with watchmux's rights, any local client could run
/// commands in any pod. Escaped forms are the same path; logs still pass.
#[tokio::test]
async fn trusted_local_refuses_exec_and_attach_by_default() {
    let upstream = fake_upstream(handler(|req: Request<hyper::body::Incoming>| async move {
        Response::new(body::full(req.uri().path().to_owned()))
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    for path in [
        "/api/v1/namespaces/a/pods/p/exec?command=id",
        "/api/v1/namespaces/a/pods/p/attach",
        "/api/v1/namespaces/a/pods/p/ex%65c?command=id",
    ] {
        let mut send = h1(proxy.addr).await;
        let req = Request::post(path).header("host", "localhost").body(Full::default()).unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{path}");
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "Forbidden");
    }
    let resp = get(proxy.addr, "/api/v1/namespaces/a/pods/p/log").await;
    assert_eq!(resp.status(), StatusCode::OK);
    proxy.shutdown().await;
}

/// Accepts TCP connections on loopback and never answers anything (a hung
/// API server: the kernel completes the TCP handshake for it).
async fn black_hole() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// Issue 29: an upstream that accepts TCP and never answers TLS hung every
/// request through watchmux (250 s and counting); the dial is bounded now.
#[tokio::test]
async fn an_upstream_that_never_answers_tls_gets_a_503_within_the_handshake_timeout() {
    let hole = black_hole().await;
    let proxy = start_proxy_at(
        &format!("https://{hole}"),
        &["--upstream-connect-timeout", "1s", "--upstream-tls-handshake-timeout", "1s"],
    )
    .await;
    let started = std::time::Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(30), get(proxy.addr, "/api/v1/pods")).await.expect("an answer");
    let took = started.elapsed();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let status = body_json(resp).await;
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("TLS handshake"), "{message}");
    // Bounded by the flags (2 s), not by the test's own 30 s.
    assert!(took < Duration::from_secs(10), "{took:?}");
    proxy.shutdown().await;
}

/// A request sent on a connection that is up, to an upstream that never
/// answers: a gateway timeout after --upstream-response-header-timeout.
#[tokio::test]
async fn an_upstream_that_takes_the_request_and_never_answers_gets_a_504() {
    let hole = black_hole().await;
    let proxy = start_proxy(hole, &["--upstream-response-header-timeout", "1s"]).await;
    let resp = tokio::time::timeout(Duration::from_secs(30), get(proxy.addr, "/api/v1/pods")).await.expect("an answer");
    assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(resp.headers().get("retry-after").is_some());
    let status = body_json(resp).await;
    assert_eq!(status["reason"], "Timeout");
    assert!(status["message"].as_str().unwrap().contains("no response headers within 1s"), "{status}");
    proxy.shutdown().await;
}

/// Issue 26 item 4: once the readiness probe finds the upstream not
/// answering (a half-open path that swallows requests), a request that must
/// reach it fails after --upstream-timeout, not after the full header
/// timeout: an outage is told in seconds.
#[tokio::test]
async fn an_upstream_known_to_hang_fails_requests_after_the_upstream_timeout() {
    let hole = black_hole().await;
    let proxy = start_proxy(hole, &["--upstream-response-header-timeout", "60s", "--upstream-timeout", "1s"]).await;
    // The probe runs at start and every 5 s and gives up on an answer after
    // 3 s; never ready before, the first silent one makes it unresponsive.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let resp = get(proxy.admin, "/readyz/upstream?verbose").await;
        let text = String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
        if text.contains("does not answer in time") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = std::time::Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(30), get(proxy.addr, "/api/v1/pods")).await.expect("an answer");
    assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
    let status = body_json(resp).await;
    assert!(status["message"].as_str().unwrap().contains("within 1s"), "{status}");
    // Bounded by --upstream-timeout, far below the 60 s header timeout.
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    proxy.shutdown().await;
}

/// Issue 29: watchmux's own credentials refused. The client sent none, so
/// it must not be told to log in (a relayed 401); /readyz/upstream names the
/// cause instead of "not reachable or not ready".
#[tokio::test]
async fn refused_own_credentials_are_a_503_and_readyz_says_401() {
    let upstream = fake_upstream(handler(|_req: Request<hyper::body::Incoming>| async move {
        let mut resp = Response::new(body::full(r#"{"kind":"Status","code":401}"#));
        *resp.status_mut() = StatusCode::UNAUTHORIZED;
        resp
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    let resp = get(proxy.addr, "/api/v1/pods").await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let status = body_json(resp).await;
    assert!(status["message"].as_str().unwrap().contains("refused watchmux's own credentials (401)"), "{status}");
    // The readiness probe runs at start and every 5 s: wait for its verdict.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let resp = get(proxy.admin, "/readyz/upstream?verbose").await;
        let code = resp.status();
        let text = String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
        if text.contains("(401)") {
            assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn h2c_prior_knowledge_is_served() {
    let upstream = fake_upstream(handler(|req: Request<hyper::body::Incoming>| async move {
        Response::new(body::full(req.uri().path().to_owned()))
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    // Several requests multiplexed on one connection.
    let mut pending = Vec::new();
    for path in ["/api", "/apis", "/version"] {
        let req = Request::get(format!("http://localhost{path}")).body(Full::<Bytes>::default()).unwrap();
        pending.push((path, send.send_request(req)));
    }
    for (path, fut) in pending {
        let resp = fut.await.unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), path);
    }
    proxy.shutdown().await;
}

/// Malformed request lines and oversized heads get clean HTTP errors, and a
/// healthy connection opened alongside is unaffected.
#[tokio::test]
async fn malformed_and_oversized_requests_get_clean_errors() {
    let upstream = fake_upstream(handler(|_req| async move { Response::new(body::full("ok")) })).await;
    let proxy = start_proxy(upstream, &[]).await;
    let mut healthy = h1(proxy.addr).await;

    let raw = |bytes: Vec<u8>| async move {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await.unwrap().unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    let bad_line = raw(b"GET /api/v1/pods HTTP/1.1 extra\r\nHost: x\r\n\r\n".to_vec()).await;
    assert!(bad_line.starts_with("HTTP/1.1 400"), "{bad_line}");
    let bad_uri = raw(b"GET /api/\x01v1 HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()).await;
    assert!(bad_uri.starts_with("HTTP/1.1 400"), "{bad_uri}");
    let mut huge = b"GET /api HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 2 << 20));
    huge.extend(b"\r\n\r\n");
    let too_big = raw(huge).await;
    assert!(too_big.starts_with("HTTP/1.1 431"), "{}", &too_big[..too_big.len().min(200)]);
    let garbage = raw(vec![0x16, 0x03, 0x01, 0xff, 0xff, 0, 1, 2, 3, b'\r', b'\n', b'\r', b'\n']).await;
    assert!(garbage.is_empty() || garbage.starts_with("HTTP/1.1 400"), "{garbage}");

    let resp = healthy
        .send_request(Request::get("/api").header("host", "localhost").body(Full::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    proxy.shutdown().await;
}

/// A watcher that disconnects mid-stream releases its upstream stream and
/// leaves the other watchers streaming.
#[tokio::test]
async fn vanished_watcher_releases_upstream_and_others_continue() {
    let (upstream, mut senders) = streaming_upstream().await;
    let proxy = start_proxy(upstream, &[]).await;

    let leaving = get(proxy.addr, "/api/v1/pods?watch=1").await;
    let mut tx_leaving = senders.recv().await.unwrap();
    let staying = get(proxy.addr, "/api/v1/pods?watch=1").await;
    let mut tx_staying = senders.recv().await.unwrap();
    drop(leaving);

    // The upstream stream of the vanished client is closed: sends start to fail.
    let closed =
        tokio::time::timeout(WAIT, async { while tx_leaving.send_data(Bytes::from_static(b"x\n")).await.is_ok() {} })
            .await;
    assert!(closed.is_ok(), "upstream stream of a vanished client was never released");

    let mut body = staying.into_body();
    tx_staying.send_data(Bytes::from_static(b"still here\n")).await.unwrap();
    let frame = tokio::time::timeout(WAIT, body.frame()).await.unwrap().unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "still here\n");
    proxy.shutdown().await;
}

/// At shutdown a watch stream ends as a normal end of body (the client
/// reconnects as after a timeout), without waiting for the grace period.
#[tokio::test]
async fn shutdown_ends_watch_streams_cleanly_and_promptly() {
    let (upstream, mut senders) = streaming_upstream().await;
    // A grace far longer than the test's bounded wait in shutdown(): if watch
    // streams held the shutdown, the test would fail there.
    let proxy = start_proxy(upstream, &["--shutdown-grace", "120s"]).await;
    let resp = get(proxy.addr, "/api/v1/pods?watch=1").await;
    let mut tx = senders.recv().await.unwrap();
    tx.send_data(Bytes::from_static(b"e1\n")).await.unwrap();
    let mut body = resp.into_body();
    assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "e1\n");

    let (ended_tx, ended) = oneshot::channel();
    tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => rest.push(f),
                Err(e) => panic!("watch ended with an error: {e}"),
            }
        }
        let _ = ended_tx.send(rest.len());
    });
    proxy.shutdown().await;
    tokio::time::timeout(WAIT, ended).await.expect("stream did not end").unwrap();
    drop(tx);
}

/// At its maximum age an HTTP/2 client connection gets a graceful GOAWAY and
/// its pass-through watch ends as at a shutdown, a complete body, so the
/// client watches again on a new connection; the proxy serves it there.
#[tokio::test]
async fn at_the_maximum_connection_age_a_watch_ends_cleanly_and_the_client_reconnects() {
    let (upstream, mut senders) = streaming_upstream().await;
    let proxy = start_proxy(upstream, &["--max-connection-age", "1s"]).await;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let uri = format!("http://{}/api/v1/pods?watch=1", proxy.addr);
    let (watch, _) = client.send_request(Request::get(&uri).body(()).unwrap(), true).unwrap();
    let mut tx = senders.recv().await.unwrap();
    let watch = tokio::time::timeout(WAIT, watch).await.unwrap().unwrap();
    tx.send_data(Bytes::from_static(b"e1\n")).await.unwrap();
    let mut body = watch.into_body();
    let first = tokio::time::timeout(WAIT, body.data()).await.unwrap().unwrap().unwrap();
    assert_eq!(first, "e1\n");
    // At about a second the stream ends, not reset (an error here), and the
    // connection closes without an error once it has.
    // (An empty DATA frame carries the END_STREAM.)
    let end = tokio::time::timeout(WAIT, async {
        loop {
            match body.data().await {
                Some(Ok(data)) if data.is_empty() => continue,
                end => return end,
            }
        }
    });
    let end = end.await.expect("the watch outlived the connection's age");
    assert!(end.is_none(), "more than the end: {end:?}");
    let refused = std::future::poll_fn(|cx| client.poll_ready(cx)).await.unwrap_err();
    assert!(refused.is_go_away() && refused.reason() == Some(h2::Reason::NO_ERROR), "{refused}");
    tokio::time::timeout(WAIT, conn).await.expect("the aged connection stayed open").unwrap().unwrap();
    // The client's next watch, on a new connection, is served.
    let again = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let resp = h2_get(again, &uri).await;
    assert_eq!(resp.status(), StatusCode::OK);
    drop(tx);
}

#[tokio::test]
async fn admin_reports_ready_once_upstream_answers_readyz() {
    let (hit_tx, hit) = mpsc::channel::<()>(8);
    let upstream = fake_upstream(handler(move |req: Request<hyper::body::Incoming>| {
        let hit_tx = hit_tx.clone();
        async move {
            if req.uri().path() == "/readyz" {
                let _ = hit_tx.try_send(());
            }
            Response::new(body::full("ok"))
        }
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    let mut hit = hit;
    hit.recv().await.unwrap();
    // The flag is set right after the probe's response; poll briefly for it.
    let mut ready = false;
    for _ in 0..50 {
        if get(proxy.admin, "/readyz").await.status() == StatusCode::OK {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ready, "admin /readyz never turned ready");
    assert_eq!(get(proxy.admin, "/livez").await.status(), StatusCode::OK);
    assert_eq!(get(proxy.admin, "/nope").await.status(), StatusCode::NOT_FOUND);
    proxy.shutdown().await;
}

#[tokio::test]
async fn admin_is_not_ready_while_upstream_is_down() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = start_proxy(closed, &[]).await;
    let resp = get(proxy.admin, "/readyz").await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(proxy.admin, "/healthz").await.status(), StatusCode::OK);
    proxy.shutdown().await;
}

/// With TLS on the API listener: garbage instead of a client hello closes
/// that connection only; a real client negotiates HTTP/2 by ALPN.
#[tokio::test]
async fn tls_listener_rejects_garbage_and_serves_h2_by_alpn() {
    use rustls::pki_types::ServerName;
    use std::sync::Arc;

    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();

    let upstream = fake_upstream(handler(|_req| async move { Response::new(body::full("over tls")) })).await;
    let proxy = start_proxy(
        upstream,
        &["--tls-cert-file", cert_path.to_str().unwrap(), "--tls-private-key-file", key_path.to_str().unwrap()],
    )
    .await;

    let mut garbage = TcpStream::connect(proxy.addr).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\nHost: plain-text-on-a-tls-port\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(WAIT, garbage.read_to_end(&mut out)).await.expect("connection left open");
    assert!(read.is_err() || !String::from_utf8_lossy(&out).contains("over tls"), "plain text served on TLS port");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let resp =
        send.send_request(Request::get("https://localhost/api").body(Full::<Bytes>::default()).unwrap()).await.unwrap();
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "over tls");
    proxy.shutdown().await;
}

/// Limits answer as the API server does for the same limit: 413 Status for
/// an oversized write, 429 text with Retry-After for too many requests in
/// flight or too many connections (and then the connection closes).
#[tokio::test]
async fn limits_refuse_with_the_api_servers_answers() {
    let (release, released) = tokio::sync::watch::channel(false);
    let upstream = fake_upstream(handler(move |req: Request<hyper::body::Incoming>| {
        let mut released = released.clone();
        async move {
            if req.uri().path() == "/slow" {
                let _ = released.wait_for(|r| *r).await;
            }
            Response::new(body::full("ok"))
        }
    }))
    .await;
    let proxy = start_proxy(
        upstream,
        // Every client here is on 127.0.0.1: its share is the whole budget.
        &[
            "--max-requests-inflight",
            "1",
            "--max-connections",
            "2",
            "--max-connections-per-address",
            "2",
            "--max-request-body-bytes",
            "100",
        ],
    )
    .await;

    // 413: the Content-Length of a write over the limit, before any upstream work.
    let mut c1 = h1(proxy.addr).await;
    let big = Request::post("/api/v1/namespaces/a/configmaps")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(vec![b' '; 101])))
        .unwrap();
    let resp = c1.send_request(big).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let status = body_json(resp).await;
    assert_eq!(status["message"], "Request entity too large: limit is 100");
    assert_eq!(status["reason"], "RequestEntityTooLarge");

    // 429 in flight: one slow request holds the only slot (watches are exempt:
    // the unit tests of server::gates::limits check that).
    let mut c2 = h1(proxy.addr).await;
    let slow =
        tokio::spawn(c2.send_request(Request::get("/slow").header("host", "localhost").body(Full::default()).unwrap()));
    let deadline = tokio::time::Instant::now() + WAIT;
    let refused = loop {
        c1.ready().await.unwrap();
        let resp = c1
            .send_request(Request::get("/api").header("host", "localhost").body(Full::default()).unwrap())
            .await
            .unwrap();
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            break resp;
        }
        assert!(tokio::time::Instant::now() < deadline, "the slow request never took the slot");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(
        refused.into_body().collect().await.unwrap().to_bytes(),
        Bytes::from_static(b"Too many requests, please try again later.\n")
    );
    release.send(true).unwrap();
    assert_eq!(slow.await.unwrap().unwrap().status(), StatusCode::OK);

    // 429 for a third connection while two are open, then it is closed.
    let mut c3 = h1(proxy.addr).await;
    let resp =
        c3.send_request(Request::get("/api").header("host", "localhost").body(Full::default()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["connection"], "close");
    drop(c2);
    // With a connection gone, a new one is served.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut c4 = h1(proxy.addr).await;
        let resp = c4
            .send_request(Request::get("/api").header("host", "localhost").body(Full::default()).unwrap())
            .await
            .unwrap();
        if resp.status() == StatusCode::OK {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the freed connection slot was never reused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.shutdown().await;
}

/// Writes through to `io` but drops the first `skip` bytes, reporting them
/// written: lets a test send part of a protocol's opening itself.
struct SkipPrefix<IO> {
    io: IO,
    skip: usize,
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SkipPrefix<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for SkipPrefix<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.skip > 0 {
            let n = self.skip.min(buf.len());
            self.skip -= n;
            return std::task::Poll::Ready(Ok(n));
        }
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A client whose HTTP/2 preface arrives in two pieces is served: the
/// listener's read of the opening (which picks the write-behind for HTTP/2)
/// waits for the rest, within its deadline, and replays it all to hyper.
#[tokio::test]
async fn an_h2c_preface_sent_in_pieces_is_recognised() {
    let upstream = fake_upstream(handler(|req: Request<hyper::body::Incoming>| async move {
        Response::new(body::full(req.uri().path().to_owned()))
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream.write_all(b"PRI * HT").await.unwrap();
    // The rest of the preface comes later, after watchmux has seen the start.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let resp = h2_get(SkipPrefix { io: stream, skip: 8 }, "http://localhost/version").await;
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "/version");
    proxy.shutdown().await;
}

/// trusted-local answers only requests that name a loopback host, as
/// `kubectl proxy` does: a page that rebinds its DNS name to 127.0.0.1 gets
/// its own name in Host, and 403, before anything reaches the upstream.
#[tokio::test]
async fn trusted_local_refuses_hosts_that_are_not_loopback_names() {
    let (hits_tx, mut hits) = mpsc::unbounded_channel::<String>();
    let upstream = fake_upstream(handler(move |req: Request<hyper::body::Incoming>| {
        let _ = hits_tx.send(req.uri().path().to_owned());
        async { Response::new(body::full("{}")) }
    }))
    .await;
    let proxy = start_proxy(upstream, &[]).await;
    for host in ["evil.example", "evil.example:6443", "localhost.evil.example", "127.0.0.1.nip.io"] {
        let req = Request::get("/api/v1/secrets").header("host", host).body(Full::default()).unwrap();
        let resp = h1(proxy.addr).await.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{host}");
        assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "Forbidden");
    }
    while let Ok(path) = hits.try_recv() {
        assert_eq!(path, "/readyz", "a refused request reached the upstream");
    }
    for host in ["localhost", "127.0.0.1:6443", "[::1]:1"] {
        let req = Request::get("/api").header("host", host).body(Full::default()).unwrap();
        let resp = h1(proxy.addr).await.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{host}");
    }
    proxy.shutdown().await;

    let proxy = start_proxy(upstream, &["--accept-hosts", r"^watchmux\.svc$"]).await;
    let status = |host: &'static str| {
        let addr = proxy.addr;
        async move {
            let req = Request::get("/api").header("host", host).body(Full::default()).unwrap();
            h1(addr).await.send_request(req).await.unwrap().status()
        }
    };
    assert_eq!(status("watchmux.svc:443").await, StatusCode::OK);
    assert_eq!(status("localhost").await, StatusCode::FORBIDDEN, "the list replaces the default");
    proxy.shutdown().await;
}
