//! The accept loops against clients that try to hold connections open
//! without sending a request. Real sockets, so the set-up deadline is a short
//! one of the test's (paused time would let the clock jump while the kernel
//! still carries a packet); every wait is bounded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::PrometheusHandle;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::*;
use crate::server::connection::early_resets::MIN_EARLY_RESETS;
use crate::server::gates::limits;

/// Far longer than any step here takes: a wait that reaches it is a failure.
const WAIT: Duration = Duration::from_secs(10);
/// The set-up deadline of these tests' listeners.
const SETUP: Duration = Duration::from_millis(300);

/// Answers "hello", or the 429 of a connection over the limit, as the API
/// handler does; never answers `/stall`, as a request waiting on the
/// upstream, and counts those. `/gate` is answered once the gate opens
/// (counted too); `/watch` is a stream of one event at once and another
/// once the gate opens, then its end, or its end as soon as the
/// connection's watch streams are to end.
#[derive(Clone, Default)]
struct Hello {
    stalled: Arc<AtomicUsize>,
    gate: CancellationToken,
    gated: Arc<AtomicUsize>,
}

impl Handler for Hello {
    async fn handle(&self, req: Request<RequestBody>, peer: Peer) -> Response<ProxyBody> {
        if peer.over_connection_limit {
            return limits::too_many_requests(limits::Limit::Connections, true);
        }
        match req.uri().path() {
            "/stall" => {
                self.stalled.fetch_add(1, Ordering::Relaxed);
                std::future::pending::<()>().await;
            }
            "/gate" => {
                self.gated.fetch_add(1, Ordering::Relaxed);
                self.gate.cancelled().await;
            }
            "/watch" => {
                let (mut events, body) = http_body_util::channel::Channel::<bytes::Bytes, Infallible>::new(1);
                let gate = self.gate.clone();
                tokio::spawn(async move {
                    let _ = events.send_data(bytes::Bytes::from_static(b"event-1\n")).await;
                    gate.cancelled().await;
                    let _ = events.send_data(bytes::Bytes::from_static(b"event-2\n")).await;
                });
                // Ended as the pass-through's and the cache's watches are, by
                // the connection's own end of watch streams when it has one.
                return match peer.streams_stop {
                    Some(stop) => Response::new(crate::body::boxed(crate::body::EndOnShutdown::new(body, stop))),
                    None => Response::new(crate::body::boxed(body)),
                };
            }
            _ => {}
        }
        Response::new(crate::body::full("hello"))
    }
}

/// Where a test listener is, its stop switch, and its handler's count of
/// requests that never got an answer, gate, and count of requests at it.
struct Listening {
    addr: SocketAddr,
    stop: CancellationToken,
    stalled: Arc<AtomicUsize>,
    gate: CancellationToken,
    gated: Arc<AtomicUsize>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves [`Hello`] on loopback; `name` labels its metrics, so each test
/// reads only its own.
async fn listen(
    name: &'static str,
    tls: Option<ApiTls>,
    budget: Option<Arc<ConnectionBudget>>,
    setup_timeout: Duration,
) -> Listening {
    listen_with(name, tls, budget, setup_timeout, http_builder(), GoawayChance::NEVER).await
}

async fn listen_with(
    name: &'static str,
    tls: Option<ApiTls>,
    budget: Option<Arc<ConnectionBudget>>,
    setup_timeout: Duration,
    builder: Arc<HttpBuilder>,
    goaway_chance: GoawayChance,
) -> Listening {
    metrics();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let serving_stop = stop.clone();
    let handler = Hello::default();
    let (stalled, gate, gated) = (handler.stalled.clone(), handler.gate.clone(), handler.gated.clone());
    tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        let serving = Serving {
            name,
            builder: &builder,
            graceful: &graceful,
            handler,
            budget,
            h2_write_batching: true,
            goaway_chance,
            max_age: None,
            streams_stop: CancellationToken::new(),
            setup_timeout,
            stop: serving_stop,
        };
        accept_tcp(listener, tls, serving).await;
    });
    Listening { addr, stop, stalled, gate, gated }
}

/// The process-wide recorder, installed by the first test that asks.
fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| crate::metrics::install().unwrap())
}

/// The connection errors counted for `listener` at `stage`.
fn connection_errors(listener: &str, stage: &str) -> u64 {
    counted(m::CONNECTION_ERRORS, listener, ("stage", stage))
}

/// The counter `metric` for `listener` with the label `(name, value)`.
fn counted(metric: &str, listener: &str, (name, value): (&str, &str)) -> u64 {
    let text = metrics().render();
    let labels = [format!("listener=\"{listener}\""), format!("{name}=\"{value}\"")];
    text.lines()
        .filter(|l| l.starts_with(metric) && labels.iter().all(|label| l.contains(label.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits, bounded, until `listener` has counted `n` connection errors at
/// `stage`: the server closes the socket a moment before it counts.
async fn count_reaches(listener: &str, stage: &str, n: u64) {
    let counted = tokio::time::timeout(WAIT, async {
        while connection_errors(listener, stage) < n {
            tokio::task::yield_now().await;
        }
    });
    counted.await.unwrap_or_else(|_| panic!("{listener}: {stage} errors never reached {n}"));
    assert_eq!(connection_errors(listener, stage), n);
}

/// Waits, bounded, for the server to close `io`; returns what it sent
/// before.
async fn closed_by_server<IO: AsyncRead + Unpin>(io: &mut IO) -> Vec<u8> {
    let mut got = Vec::new();
    // A reset or a TLS stream cut without close_notify is a close too.
    let _ = tokio::time::timeout(WAIT, io.read_to_end(&mut got)).await.expect("the server left the connection open");
    got
}

/// One HTTP/1.1 GET on a fresh connection; the whole answer.
async fn get(addr: SocketAddr) -> String {
    let mut stream = tokio::time::timeout(WAIT, TcpStream::connect(addr)).await.unwrap().unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// A self-signed serving certificate for localhost, and a client that
/// trusts it and offers `alpn`.
fn tls_pair(alpn: &[&[u8]]) -> (ApiTls, tokio_rustls::TlsConnector, tempfile::TempDir) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let files =
        crate::server::TlsFiles { cert: cert_path, key: key_path, client_ca: None, protocol: Default::default() };
    let acceptor = super::super::tls::api_tls(&files).unwrap();
    // The client is watchmux's own upstream TLS, trusting the test's CA.
    let upstream = crate::upstream::kubeconfig::UpstreamConfig {
        ca_pem: Some(cert.cert.pem().into_bytes()),
        ..crate::upstream::kubeconfig::UpstreamConfig::for_test("https://localhost")
    };
    let mut config = crate::upstream::tls::client_config(&upstream).unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    (acceptor, tokio_rustls::TlsConnector::from(Arc::new(config)), dir)
}

#[tokio::test]
async fn a_silent_tcp_client_is_closed_at_the_setup_deadline() {
    let server = listen("t-silent", None, None, SETUP).await;
    let start = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let sent = closed_by_server(&mut silent).await;
    assert!(start.elapsed() >= SETUP, "closed after {:?}, before the deadline", start.elapsed());
    assert!(sent.is_empty(), "{sent:?}");
    count_reaches("t-silent", "preface", 1).await;
    // The listener still serves.
    assert!(get(server.addr).await.ends_with("hello"));
}

#[tokio::test]
async fn a_partial_h2_preface_is_closed_at_the_setup_deadline() {
    let server = listen("t-partial", None, None, SETUP).await;
    let start = Instant::now();
    let mut partial = TcpStream::connect(server.addr).await.unwrap();
    partial.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let sent = closed_by_server(&mut partial).await;
    assert!(start.elapsed() >= SETUP, "closed after {:?}, before the deadline", start.elapsed());
    assert!(sent.is_empty(), "{sent:?}");
    count_reaches("t-partial", "preface", 1).await;
}

#[tokio::test]
async fn a_tls_client_silent_after_its_handshake_is_closed_at_the_setup_deadline() {
    let (acceptor, connector, _dir) = tls_pair(&[b"h2"]);
    let server = listen("t-tls-silent", Some(acceptor), None, SETUP).await;
    let start = Instant::now();
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut tls = tokio::time::timeout(WAIT, connector.connect(ServerName::try_from("localhost").unwrap(), tcp))
        .await
        .unwrap()
        .unwrap();
    let sent = closed_by_server(&mut tls).await;
    assert!(start.elapsed() >= SETUP, "closed after {:?}, before the deadline", start.elapsed());
    assert!(sent.is_empty(), "{sent:?}");
    count_reaches("t-tls-silent", "preface", 1).await;
    assert_eq!(connection_errors("t-tls-silent", "tls"), 0);
}

#[tokio::test]
async fn a_tls_handshake_never_started_is_closed_at_the_setup_deadline() {
    let (acceptor, _, _dir) = tls_pair(&[]);
    let server = listen("t-tls-none", Some(acceptor), None, SETUP).await;
    let start = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    closed_by_server(&mut silent).await;
    assert!(start.elapsed() >= SETUP, "closed after {:?}, before the deadline", start.elapsed());
    count_reaches("t-tls-none", "tls", 1).await;
}

/// A TLS client that offers no ALPN but opens with the HTTP/2 preface is
/// served HTTP/2 (and so gets the write-behind), as on plain text.
#[tokio::test]
async fn an_h2_preface_over_tls_without_alpn_is_served_h2() {
    let (acceptor, connector, _dir) = tls_pair(&[]);
    let server = listen("t-tls-no-alpn", Some(acceptor), None, SETUP).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), None);
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get("https://localhost/").body(http_body_util::Empty::<bytes::Bytes>::new()).unwrap();
    let resp = tokio::time::timeout(WAIT, send.send_request(req)).await.unwrap().unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
}

/// Silent connections fill `--max-connections`, then give their slots back
/// at the deadline: a client that comes later is served, not refused.
#[tokio::test]
async fn silent_connections_give_their_slots_back_at_the_deadline() {
    let budget = ConnectionBudget::new(2, 0, 0, None);
    let server = listen("t-budget", None, Some(budget), SETUP).await;
    let mut silent = [TcpStream::connect(server.addr).await.unwrap(), TcpStream::connect(server.addr).await.unwrap()];
    // While both are open, a third client is over the limit.
    assert!(get(server.addr).await.starts_with("HTTP/1.1 429"));
    for s in &mut silent {
        closed_by_server(s).await;
    }
    // The slots are released when the connection task ends, just after the
    // close the client saw; a refusal in that gap is retried, boundedly.
    let served = tokio::time::timeout(WAIT, async {
        loop {
            let answer = get(server.addr).await;
            if answer.starts_with("HTTP/1.1 200") {
                return answer;
            }
            assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the silent connections' slots were never released");
    assert!(served.ends_with("hello"));
}

/// At shutdown, connections that have not sent a request yet are closed at
/// once instead of holding the graceful phase until their deadline.
#[tokio::test]
async fn connections_still_setting_up_end_when_the_listener_stops() {
    let server = listen("t-stop", None, None, Duration::from_secs(3600)).await;
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    // The connection is accepted (and so has its task) once a request on
    // another connection is served: the accept loop takes them in order.
    assert!(get(server.addr).await.ends_with("hello"));
    server.stop.cancel();
    closed_by_server(&mut silent).await;
    assert_eq!(connection_errors("t-stop", "preface"), 0, "a shutdown is not the client's error");
}

#[tokio::test]
async fn a_silent_unix_client_is_closed_at_the_setup_deadline() {
    metrics();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let stop = CancellationToken::new();
    let serving_stop = stop.clone();
    tokio::spawn(async move {
        let (builder, graceful) = (http_builder(), GracefulShutdown::new());
        let serving = Serving {
            name: "t-unix",
            builder: &builder,
            graceful: &graceful,
            handler: Hello::default(),
            budget: None,
            h2_write_batching: false,
            goaway_chance: GoawayChance::NEVER,
            max_age: None,
            streams_stop: CancellationToken::new(),
            setup_timeout: SETUP,
            stop: serving_stop,
        };
        accept_unix(listener, serving).await;
    });
    let start = Instant::now();
    let mut silent = UnixStream::connect(&path).await.unwrap();
    closed_by_server(&mut silent).await;
    assert!(start.elapsed() >= SETUP, "closed after {:?}, before the deadline", start.elapsed());
    count_reaches("t-unix", "preface", 1).await;
    let mut client = UnixStream::connect(&path).await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await.unwrap();
    let answer = closed_by_server(&mut client).await;
    assert!(String::from_utf8_lossy(&answer).ends_with("hello"));
    stop.cancel();
}

/// Streams the rapid-reset client opens and resets at most.
const RESET_ATTEMPTS: usize = 10_000;

/// Rapid reset (CVE-2023-44487) with a real h2 client over h2c: each stream
/// asks for `/stall` and is reset as soon as it is opened (one HEADERS and
/// RST_STREAM per write), as fast as the h2 crate lets it, or, with
/// `paced`, each only once the server has started the last one's handler.
/// Returns how many streams it reset and the error the connection ended
/// with, if any (a plain close ends it without one).
async fn rapid_reset(server: &Listening, paced: bool) -> (usize, Option<h2::Error>) {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let (mut client, conn) = tokio::time::timeout(WAIT, h2::client::handshake(tcp)).await.unwrap().unwrap();
    let conn = tokio::spawn(conn);
    let attack = async {
        let mut reset = 0;
        while reset < RESET_ATTEMPTS && !conn.is_finished() {
            if std::future::poll_fn(|cx| client.poll_ready(cx)).await.is_err() {
                break;
            }
            let started = server.stalled.load(Ordering::Relaxed);
            let req = Request::get("http://t/stall").body(()).unwrap();
            let Ok((_response, mut stream)) = client.send_request(req, false) else { break };
            stream.send_reset(h2::Reason::CANCEL);
            reset += 1;
            while paced && server.stalled.load(Ordering::Relaxed) == started && !conn.is_finished() {
                tokio::task::yield_now().await;
            }
        }
        reset
    };
    let reset = tokio::time::timeout(6 * WAIT, attack).await.expect("the attack neither ran out nor was stopped");
    let ended = tokio::time::timeout(WAIT, conn).await.expect("the connection outlived the attack").unwrap();
    (reset, ended.err())
}

/// The attack is cut off long before its end: by h2's GOAWAY
/// ENHANCE_YOUR_CALM when resets outrun accepting, by the close of a
/// connection whose requests are cancelled before their answers, or by h2's
/// stream limit, since the h2 client sends new streams' HEADERS ahead of
/// older streams' RST_STREAM and so keeps up to a thousand open. Other
/// clients are served. Two worker threads, so client and server race as
/// over a network. What is bounded is the requests watchmux started: how
/// many the client got written depends on when it notices the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_is_cut_off_and_other_clients_are_still_served() {
    let server = listen("t-rapid-reset", None, None, SETUP).await;
    let (_, err) = rapid_reset(&server, false).await;
    if let Some(err) = err {
        let calm = err.is_go_away() && err.is_remote() && err.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM);
        // Without a GOAWAY, the server closed the socket under the client's writes.
        assert!(calm || err.is_io(), "not the server's doing: {err}");
    }
    let started = server.stalled.load(Ordering::Relaxed);
    assert!(started < RESET_ATTEMPTS, "{started} requests started for the attack");
    assert!(get(server.addr).await.ends_with("hello"));
}

/// h2's limit counts streams reset before the server takes them up, so a
/// client that waits for each to be taken up never trips it; it is still
/// disconnected, once [`MIN_EARLY_RESETS`] requests were all cancelled
/// before their answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_rapid_reset_is_cut_off_after_the_early_reset_minimum() {
    let server = listen("t-paced-reset", None, None, SETUP).await;
    let (reset, err) = rapid_reset(&server, true).await;
    assert!(!err.as_ref().is_some_and(h2::Error::is_go_away), "h2's own limit tripped: {err:?}");
    count_reaches("t-paced-reset", "rapid_reset", 1).await;
    // The client notices the close a few streams late at most.
    let min = MIN_EARLY_RESETS as usize;
    assert!((min..2 * min).contains(&reset), "cut off after {reset} streams reset");
}

/// The HTTP/2 connections finished (GOAWAY) by `listener` for `reason`.
fn finished(listener: &str, reason: &str) -> u64 {
    counted(m::CONNECTIONS_FINISHED, listener, ("reason", reason))
}

/// An h2c client connection: its sender, and its connection's end.
async fn h2c(
    addr: SocketAddr,
) -> (hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>, tokio::task::JoinHandle<()>) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    (
        send,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

fn h2_req(path: &str) -> Request<http_body_util::Empty<bytes::Bytes>> {
    Request::get(format!("http://t{path}")).body(http_body_util::Empty::new()).unwrap()
}

/// An HTTP/2 connection that answers PINGs but sends no request is sent
/// GOAWAY and closed once idle for the idle timeout, as kube-apiserver's
/// (Go's `IdleTimeout`); before, it held its connection slot for ever.
#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(400);
    let server = listen_with("t-idle", None, None, SETUP, http_builder_idle(idle), GoawayChance::NEVER).await;
    let (mut send, ended) = h2c(server.addr).await;
    let resp = send.send_request(h2_req("/")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let answered = Instant::now();
    drop(resp);
    tokio::time::timeout(WAIT, ended).await.expect("the idle connection was never closed").unwrap();
    assert!(answered.elapsed() >= idle - Duration::from_millis(50), "closed before the idle timeout");
    assert_eq!(finished("t-idle", "idle"), 1);
}

/// A request in progress is activity: its connection stays open however
/// long it takes, and serves other requests meanwhile.
#[tokio::test]
async fn a_stream_in_progress_keeps_its_http2_connection() {
    let idle = Duration::from_millis(200);
    let server = listen_with("t-busy", None, None, SETUP, http_builder_idle(idle), GoawayChance::NEVER).await;
    let (mut send, ended) = h2c(server.addr).await;
    let stalled = send.send_request(h2_req("/stall"));
    let stalled = tokio::spawn(stalled);
    tokio::time::sleep(idle * 4).await; // the idle timeout passing is what is tested
    assert!(!ended.is_finished(), "closed with a stream open");
    let resp = tokio::time::timeout(WAIT, send.send_request(h2_req("/"))).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(finished("t-busy", "idle"), 0);
    stalled.abort();
}

/// An HTTP/2 connection over the budget gets its 429 and then GOAWAY, as
/// HTTP/1.1 gets `Connection: close`: it does not stay open to hold a
/// descriptor.
#[tokio::test]
async fn an_http2_connection_over_the_budget_gets_goaway_after_its_429() {
    let budget = ConnectionBudget::new(1, 0, 0, None);
    let server = listen("t-over-h2", None, Some(budget), Duration::from_secs(30)).await;
    let (mut first, _first_ended) = h2c(server.addr).await;
    assert_eq!(first.send_request(h2_req("/")).await.unwrap().status(), 200);
    let (mut over, ended) = h2c(server.addr).await;
    let resp = over.send_request(h2_req("/")).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert!(!resp.headers().contains_key(http::header::CONNECTION), "not a header HTTP/2 allows");
    drop(resp);
    tokio::time::timeout(WAIT, ended).await.expect("the connection over the budget stayed open").unwrap();
    assert_eq!(finished("t-over-h2", "connection_close"), 1);
}

/// Waits, bounded, until `count` reaches `n`: requests the handler has
/// started, which the client cannot see.
async fn started(count: &AtomicUsize, n: usize) {
    let reached = tokio::time::timeout(WAIT, async {
        while count.load(Ordering::Relaxed) < n {
            tokio::task::yield_now().await;
        }
    });
    reached.await.unwrap_or_else(|_| panic!("the handler never started {n} requests"));
}

/// The next bytes of an h2 answer's body, its flow-control window given
/// back; `None` at its end. An empty DATA frame (an END_STREAM of its own)
/// is no piece.
async fn next_data(body: &mut h2::RecvStream) -> Option<bytes::Bytes> {
    loop {
        let data = tokio::time::timeout(WAIT, body.data()).await.expect("no data nor end")?.expect("the stream failed");
        if !data.is_empty() {
            body.flow_control().release_capacity(data.len()).unwrap();
            return Some(data);
        }
    }
}

/// With `--goaway-chance` drawing GOAWAY (here at every answer), an HTTP/2
/// client is told to go away gracefully, as kube-apiserver's clients are:
/// it may open no new stream on the connection, while a request in flight
/// and a watch answered on it run to their ends without an error; then the
/// connection closes. The watch's own answer is what drew the GOAWAY, as
/// kube-apiserver sets no exemption for watches.
#[tokio::test]
async fn the_goaway_chance_ends_an_http2_connection_without_cutting_its_streams() {
    let server = listen_with("t-goaway", None, None, SETUP, http_builder(), GoawayChance::ALWAYS).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let (mut client, conn) = tokio::time::timeout(WAIT, h2::client::handshake(tcp)).await.unwrap().unwrap();
    let conn = tokio::spawn(conn);
    // A request in flight before any answer: the handler holds it at the gate.
    let (in_flight, _) = client.send_request(Request::get("http://t/gate").body(()).unwrap(), true).unwrap();
    started(&server.gated, 1).await;
    // A watch, whose answer draws the GOAWAY.
    let (watch, _) = client.send_request(Request::get("http://t/watch").body(()).unwrap(), true).unwrap();
    let watch = tokio::time::timeout(WAIT, watch).await.unwrap().unwrap();
    assert_eq!(watch.status(), 200);
    assert!(!watch.headers().contains_key(http::header::CONNECTION));
    let mut events = watch.into_body();
    assert_eq!(next_data(&mut events).await.as_deref(), Some(&b"event-1\n"[..]));
    // The client learns of the GOAWAY (NO_ERROR: graceful) and opens no
    // new stream on this connection.
    let refused = tokio::time::timeout(WAIT, async {
        loop {
            match std::future::poll_fn(|cx| client.poll_ready(cx)).await {
                Err(err) => return err,
                Ok(()) => tokio::task::yield_now().await,
            }
        }
    })
    .await
    .expect("no GOAWAY reached the client");
    assert!(refused.is_go_away() && refused.is_remote(), "{refused}");
    assert_eq!(refused.reason(), Some(h2::Reason::NO_ERROR));
    assert_eq!(finished("t-goaway", "goaway_chance"), 1);
    // Both streams are still served: the request in flight is answered and
    // the watch goes on to its next event and its end.
    assert!(!conn.is_finished(), "the connection closed with streams open");
    server.gate.cancel();
    let answered = tokio::time::timeout(WAIT, in_flight).await.unwrap().expect("the request in flight failed");
    assert_eq!(answered.status(), 200);
    let mut body = answered.into_body();
    assert_eq!(next_data(&mut body).await.as_deref(), Some(&b"hello"[..]));
    assert_eq!(next_data(&mut events).await.as_deref(), Some(&b"event-2\n"[..]));
    assert_eq!(next_data(&mut events).await, None, "the watch ends at its own end");
    // Then the connection closes, gracefully.
    let ended = tokio::time::timeout(WAIT, conn).await.expect("the connection outlived its streams").unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(finished("t-goaway", "goaway_chance"), 1, "one GOAWAY for the connection");
    assert_eq!(finished("t-goaway", "connection_close"), 0);
}

/// The chance is HTTP/2's alone: an HTTP/1.1 keep-alive connection keeps
/// serving (kube-apiserver's filter looks at HTTP/2 requests only; an
/// HTTP/1.1 watch ends at its timeout and is made again on a new
/// connection anyway).
#[tokio::test]
async fn the_goaway_chance_leaves_http1_connections_alone() {
    let server = listen_with("t-goaway-h1", None, None, SETUP, http_builder(), GoawayChance::ALWAYS).await;
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    let conn = tokio::spawn(conn);
    for _ in 0..3 {
        let req = Request::get("/").header(http::header::HOST, "t").body(http_body_util::Empty::<bytes::Bytes>::new());
        let resp = tokio::time::timeout(WAIT, send.send_request(req.unwrap())).await.unwrap().unwrap();
        assert_eq!(resp.status(), 200);
        assert!(!resp.headers().contains_key(http::header::CONNECTION), "{:?}", resp.headers());
        let body = tokio::time::timeout(WAIT, http_body_util::BodyExt::collect(resp.into_body())).await.unwrap();
        assert_eq!(body.unwrap().to_bytes(), "hello");
    }
    assert!(!conn.is_finished());
    assert_eq!(finished("t-goaway-h1", "goaway_chance"), 0);
}

/// The maximum age of these tests' connections, and its grace.
const AGE: MaxConnectionAge = MaxConnectionAge { age: Duration::from_secs(600), grace: Duration::from_secs(60) };

/// An HTTP/2 client on a connection served in memory with [`AGE`] as the
/// listener `name` serves it, so that paused time passes only when every
/// task waits on a timer: the connection's sender, its end, and the handler.
async fn aged_h2_connection(
    name: &'static str,
) -> (h2::client::SendRequest<bytes::Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>, Hello, GracefulShutdown) {
    metrics();
    let (client, mut server) = tokio::io::duplex(1 << 20);
    let handler = Hello::default();
    let graceful = GracefulShutdown::new();
    let conn = Conn { name, max_age: Some(AGE), ..Conn::for_test(handler.clone(), graceful.watcher()) };
    tokio::spawn(async move {
        let opening = super::super::opening::read_opening(&mut server).await.unwrap();
        conn.serve(Rewind::new(server, opening)).await
    });
    let (send, conn) = h2::client::handshake(client).await.unwrap();
    (send, tokio::spawn(conn), handler, graceful)
}

/// Waits (in paused time, so for as long as the server takes) until the
/// client may open no more streams: the GOAWAY's error.
async fn goaway_received(client: &mut h2::client::SendRequest<bytes::Bytes>) -> h2::Error {
    loop {
        match std::future::poll_fn(|cx| client.poll_ready(cx)).await {
            Err(err) => return err,
            // Time passes only once every task waits.
            Ok(()) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// At its maximum age (within the jitter) an HTTP/2 connection is sent a
/// graceful GOAWAY, its watch ends as at a shutdown (its body complete, not
/// reset, so the client watches again elsewhere from its resourceVersion),
/// and a request in flight still gets its whole answer; then the connection
/// closes without an error.
#[tokio::test(start_paused = true)]
async fn at_its_maximum_age_an_http2_connection_gets_goaway_and_its_watch_ends_cleanly() {
    let (mut client, conn, handler, _graceful) = aged_h2_connection("t-age").await;
    let opened = Instant::now();
    let (in_flight, _) = client.send_request(Request::get("http://t/gate").body(()).unwrap(), true).unwrap();
    started(&handler.gated, 1).await;
    let (watch, _) = client.send_request(Request::get("http://t/watch").body(()).unwrap(), true).unwrap();
    let watch = watch.await.unwrap();
    assert_eq!(watch.status(), 200);
    let mut events = watch.into_body();
    assert_eq!(next_data(&mut events).await.as_deref(), Some(&b"event-1\n"[..]));
    assert_eq!(finished("t-age", "max_age"), 0);

    let refused = goaway_received(&mut client).await;
    let age = opened.elapsed();
    assert!(refused.is_go_away() && refused.is_remote(), "{refused}");
    assert_eq!(refused.reason(), Some(h2::Reason::NO_ERROR), "not graceful");
    let jitter = AGE.age.mul_f64(super::super::max_age::JITTER);
    assert!(age >= AGE.age - jitter && age <= AGE.age + jitter + Duration::from_secs(1), "GOAWAY after {age:?}");
    assert_eq!(finished("t-age", "max_age"), 1);
    // The watch ends without its second event (which waits on the gate) and
    // without an error: `next_data` fails on a reset.
    assert_eq!(next_data(&mut events).await, None, "the watch did not end at the age");
    // The request in flight is answered in full.
    assert!(!conn.is_finished(), "the connection closed under its request in flight");
    handler.gate.cancel();
    let answered = in_flight.await.expect("the request in flight failed");
    assert_eq!(answered.status(), 200);
    assert_eq!(next_data(&mut answered.into_body()).await.as_deref(), Some(&b"hello"[..]));
    conn.await.unwrap().expect("the connection ended with an error");
    assert!(opened.elapsed() < age + AGE.grace, "the grace was waited for though nothing ran");
    assert_eq!(finished("t-age", "max_age"), 1, "one GOAWAY for the connection");
}

/// A request that outlasts the grace does not hold its connection for
/// ever: at the age plus the grace the connection is closed.
#[tokio::test(start_paused = true)]
async fn past_the_grace_a_connection_at_its_maximum_age_is_closed() {
    let (mut client, conn, handler, _graceful) = aged_h2_connection("t-age-grace").await;
    let opened = Instant::now();
    let (stalled, _) = client.send_request(Request::get("http://t/stall").body(()).unwrap(), true).unwrap();
    started(&handler.stalled, 1).await;
    goaway_received(&mut client).await;
    let age = opened.elapsed();
    let cut = tokio::time::timeout(AGE.grace * 2, stalled).await.expect("the connection outlived its grace");
    assert!(cut.is_err(), "a request that never ends was answered: {cut:?}");
    let closed = opened.elapsed();
    assert!(
        closed >= age + AGE.grace - Duration::from_secs(1),
        "closed {:?} after the age, before the grace",
        closed - age
    );
    let _ = conn.await.unwrap();
}

/// HTTP/1.1 has no GOAWAY: a request in progress past the age and its
/// grace is not cut, and the connection serves on after it (HTTP/1.1
/// watches end at their own timeouts and are made again on new
/// connections).
#[tokio::test(start_paused = true)]
async fn the_maximum_age_leaves_http1_connections_alone() {
    metrics();
    let (client, mut server) = tokio::io::duplex(1 << 20);
    let (handler, graceful) = (Hello::default(), GracefulShutdown::new());
    let conn = Conn { name: "t-age-h1", max_age: Some(AGE), ..Conn::for_test(handler.clone(), graceful.watcher()) };
    tokio::spawn(async move {
        let opening = super::super::opening::read_opening(&mut server).await.unwrap();
        conn.serve(Rewind::new(server, opening)).await
    });
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client)).await.unwrap();
    let conn = tokio::spawn(conn);
    let get = |path: &str| {
        let req = Request::get(path).header(http::header::HOST, "t").body(http_body_util::Empty::<bytes::Bytes>::new());
        req.unwrap()
    };
    let gated = tokio::spawn(send.send_request(get("/gate")));
    started(&handler.gated, 1).await;
    tokio::time::sleep(AGE.age.mul_f64(1.2) + AGE.grace).await; // the age passing is what is tested
    assert!(!conn.is_finished(), "closed under its request");
    handler.gate.cancel();
    let resp = gated.await.unwrap().expect("the request past the age failed");
    assert_eq!(resp.status(), 200);
    http_body_util::BodyExt::collect(resp.into_body()).await.unwrap();
    let resp = send.send_request(get("/")).await.expect("the connection no longer serves");
    assert_eq!(resp.status(), 200);
    assert_eq!(finished("t-age-h1", "max_age"), 0);
}
