//! The accept loops against clients that try to hold connections open
//! without sending a request. Real sockets, so the set-up deadline is a short
//! one of the test's (paused time would let the clock jump while the kernel
//! still carries a packet); every wait is bounded.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::PrometheusHandle;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::*;
use crate::server::limits;

/// Far longer than any step here takes: a wait that reaches it is a failure.
const WAIT: Duration = Duration::from_secs(10);
/// The set-up deadline of these tests' listeners.
const SETUP: Duration = Duration::from_millis(300);

/// Answers "hello", or the 429 of a connection over the limit, as the API
/// handler does.
#[derive(Clone)]
struct Hello;

impl Handler for Hello {
    async fn handle(&self, _req: Request<Incoming>, peer: Peer) -> Response<ProxyBody> {
        if peer.over_connection_limit {
            return limits::too_many_requests("connections", true);
        }
        Response::new(crate::body::full("hello"))
    }
}

/// Where a test listener is, and its stop switch.
struct Listening {
    addr: SocketAddr,
    stop: CancellationToken,
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
    tls: Option<TlsAcceptor>,
    budget: Option<Arc<ConnectionBudget>>,
    setup_timeout: Duration,
) -> Listening {
    metrics();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let serving_stop = stop.clone();
    tokio::spawn(async move {
        let (builder, graceful) = (http_builder(), GracefulShutdown::new());
        let serving = Serving {
            name,
            builder: &builder,
            graceful: &graceful,
            handler: Hello,
            budget,
            h2_write_batching: true,
            setup_timeout,
            stop: serving_stop,
        };
        accept_tcp(listener, tls, serving).await;
    });
    Listening { addr, stop }
}

/// The process-wide recorder, installed by the first test that asks.
fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| crate::metrics::install().unwrap())
}

/// The connection errors counted for `listener` at `stage`.
fn connection_errors(listener: &str, stage: &str) -> u64 {
    let text = metrics().render();
    let labels = [format!("listener=\"{listener}\""), format!("stage=\"{stage}\"")];
    text.lines()
        .filter(|l| l.starts_with(m::CONNECTION_ERRORS) && labels.iter().all(|label| l.contains(label.as_str())))
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
fn tls_pair(alpn: &[&[u8]]) -> (TlsAcceptor, tokio_rustls::TlsConnector, tempfile::TempDir) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let acceptor = super::super::tls::acceptor(&cert_path, &key_path, None).unwrap();
    // The client is watchmux's own upstream TLS, trusting the test's CA.
    let upstream = crate::config::kubeconfig::UpstreamConfig {
        server: "https://localhost".parse().unwrap(),
        ca_pem: Some(cert.cert.pem().into_bytes()),
        insecure_skip_tls_verify: false,
        tls_server_name: None,
        client_cert_pem: None,
        client_key_pem: None,
        auth: crate::config::kubeconfig::UpstreamAuth::None,
        source: "test".into(),
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
    let budget = ConnectionBudget::new(2);
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
            name: "ignored",
            builder: &builder,
            graceful: &graceful,
            handler: Hello,
            budget: None,
            h2_write_batching: false,
            setup_timeout: SETUP,
            stop: serving_stop,
        };
        accept_unix(listener, serving).await;
    });
    let start = Instant::now();
    let mut silent = UnixStream::connect(&path).await.unwrap();
    closed_by_server(&mut silent).await;
    assert!(start.elapsed() >= SETUP, "closed after {:?}, before the deadline", start.elapsed());
    // No other test uses the unix listener's fixed name.
    count_reaches("unix", "preface", 1).await;
    let mut client = UnixStream::connect(&path).await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await.unwrap();
    let answer = closed_by_server(&mut client).await;
    assert!(String::from_utf8_lossy(&answer).ends_with("hello"));
    stop.cancel();
}
