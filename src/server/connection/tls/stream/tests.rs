//! The unbuffered TLS stream against rustls's own client (tokio-rustls),
//! and on hostile input against Go's HTTPS server's answers (written out) or
//! tokio-rustls's server: the same bytes back, the same kind of error.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ServerConfig, SupportedProtocolVersion};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

use super::{MAX_INCOMING, TlsServerStream};

const WAIT: Duration = Duration::from_secs(10);

struct Pki {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// A self-signed `localhost` certificate, a server that offers `h2` and
/// `http/1.1`, a client of `versions` that trusts it and offers `alpn`.
fn pki(versions: &[&'static SupportedProtocolVersion], alpn: &[&[u8]]) -> Pki {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let der = CertificateDer::from(cert.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).unwrap();
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Pki { server: Arc::new(server), client: Arc::new(client) }
}

type Client = tokio_rustls::client::TlsStream<DuplexStream>;

/// An IO that reads and writes at most `max` bytes a call: every read and
/// write of the stream partial, the handshake's included.
struct Trickle {
    io: DuplexStream,
    max: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let room = buf.remaining().min(this.max);
        let mut short = ReadBuf::new(&mut buf.initialize_unfilled()[..room]);
        ready!(Pin::new(&mut this.io).poll_read(cx, &mut short))?;
        let n = short.filled().len();
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = buf.len().min(this.max);
        Pin::new(&mut this.io).poll_write(cx, &buf[..n])
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A handshake over an in-memory pipe of `capacity` bytes each way, the
/// server's reads and writes at most `max` bytes each.
async fn connect_over(pki: &Pki, capacity: usize, max: usize) -> (TlsServerStream<Trickle>, Client) {
    let (server_io, client_io) = tokio::io::duplex(capacity);
    let connector = tokio_rustls::TlsConnector::from(pki.client.clone());
    let name = ServerName::try_from("localhost").unwrap();
    let (server, client) = tokio::time::timeout(
        WAIT,
        futures_util::future::join(
            TlsServerStream::accept(pki.server.clone(), Trickle { io: server_io, max }),
            connector.connect(name, client_io),
        ),
    )
    .await
    .unwrap();
    (server.unwrap(), client.unwrap())
}

/// A handshake over an in-memory pipe of `capacity` bytes each way.
async fn connect(pki: &Pki, capacity: usize) -> (TlsServerStream<Trickle>, Client) {
    connect_over(pki, capacity, usize::MAX).await
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// One poll of a read, with a waker that does nothing: `Pending` when the
/// stream has nothing to give now.
fn poll_read_once<S: AsyncRead + Unpin>(stream: &mut S) -> Poll<io::Result<Vec<u8>>> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut bytes = [0u8; 64];
    let mut buf = ReadBuf::new(&mut bytes);
    Pin::new(stream).poll_read(&mut cx, &mut buf).map_ok(|()| buf.filled().to_vec())
}

#[tokio::test]
async fn bytes_cross_both_ways_in_every_version_and_io_size() {
    for (versions, name) in [(&[&rustls::version::TLS13][..], "1.3"), (&[&rustls::version::TLS12][..], "1.2")] {
        let pki = pki(versions, &[]);
        for max in [1, 7, 1_000, 20_000, 1 << 20] {
            // Over 64 KiB, so a write is taken in chunks and the pipe fills;
            // small reads and writes make every one partial.
            let len = if max == 1 { 5_000 } else { 300_000 };
            let sent = payload(len);
            let (mut server, mut client) = connect_over(&pki, 64 << 10, max).await;
            let expected = sent.clone();
            let serving = tokio::spawn(async move {
                let mut got = Vec::new();
                server.read_to_end(&mut got).await.unwrap();
                assert_eq!(got.len(), expected.len(), "TLS {name}, {max} bytes an IO: request length");
                assert!(got == expected, "TLS {name}, {max} bytes an IO: request bytes");
                got.reverse();
                server.write_all(&got).await.unwrap();
                server.shutdown().await.unwrap();
            });
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            tokio::time::timeout(WAIT, client.read_to_end(&mut back)).await.unwrap().unwrap();
            serving.await.unwrap();
            let mut reversed = sent;
            reversed.reverse();
            assert!(back == reversed, "TLS {name}, {max} bytes an IO: answer bytes");
        }
    }
}

#[tokio::test]
async fn the_session_tells_alpn_and_version() {
    for (versions, version) in [
        (&[&rustls::version::TLS13][..], rustls::ProtocolVersion::TLSv1_3),
        (&[&rustls::version::TLS12][..], rustls::ProtocolVersion::TLSv1_2),
    ] {
        for (alpn, chosen) in
            [(&[&b"h2"[..]][..], Some(&b"h2"[..])), (&[&b"http/1.1"[..]][..], Some(&b"http/1.1"[..])), (&[][..], None)]
        {
            let (server, _client) = connect(&pki(versions, alpn), 4096).await;
            assert_eq!(server.session().alpn_protocol(), chosen);
            assert_eq!(server.session().protocol_version(), Some(version));
            assert!(server.session().peer_certificates().is_none());
        }
    }
}

#[tokio::test]
async fn an_idle_stream_holds_no_buffer() {
    for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
        let (mut server, mut client) = connect(&pki(versions, &[]), 64 << 10).await;
        // Right after the handshake (the TLS 1.3 tickets written), and after a
        // request read and an answer written.
        assert!(poll_read_once(&mut server).is_pending());
        assert_eq!(server.buffered_capacity(), 0, "after the handshake");
        client.write_all(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        client.flush().await.unwrap();
        let mut head = vec![0u8; 46];
        server.read_exact(&mut head).await.unwrap();
        assert!(head.starts_with(b"GET /api/v1/pods?watch=1"));
        server.write_all(&payload(3_000)).await.unwrap();
        server.flush().await.unwrap();
        assert!(poll_read_once(&mut server).is_pending());
        assert_eq!(server.buffered_capacity(), 0, "idle between events");
        let mut event = vec![0u8; 3_000];
        client.read_exact(&mut event).await.unwrap();
        assert_eq!(event, payload(3_000));
    }
}

#[tokio::test]
async fn reads_go_on_after_the_clients_key_update() {
    let (mut server, mut client) = connect(&pki(&[&rustls::version::TLS13], &[]), 64 << 10).await;
    for round in 0..3u8 {
        client.get_mut().1.refresh_traffic_keys().unwrap();
        client.write_all(&[round; 10_000]).await.unwrap();
        client.flush().await.unwrap();
        let mut got = vec![0u8; 10_000];
        tokio::time::timeout(WAIT, server.read_exact(&mut got)).await.unwrap().unwrap();
        assert!(got.iter().all(|b| *b == round), "round {round}");
        // The server answered the update with its own; the client reads on.
        server.write_all(&[round + 100; 5_000]).await.unwrap();
        server.flush().await.unwrap();
        let mut back = vec![0u8; 5_000];
        tokio::time::timeout(WAIT, client.read_exact(&mut back)).await.unwrap().unwrap();
        assert!(back.iter().all(|b| *b == round + 100), "round {round}");
    }
}

#[tokio::test]
async fn a_tcp_end_without_close_notify_is_an_unexpected_eof() {
    let (mut server, client) = connect(&pki(&[&rustls::version::TLS13], &[]), 4096).await;
    let (mut raw, _) = client.into_inner();
    raw.shutdown().await.unwrap();
    let err = server.read(&mut [0u8; 16]).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn close_notify_ends_reads_cleanly_both_ways() {
    let (mut server, mut client) = connect(&pki(&[&rustls::version::TLS12], &[]), 4096).await;
    client.write_all(b"last words").await.unwrap();
    client.shutdown().await.unwrap();
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"last words");
    // Reads stay at the end.
    assert_eq!(server.read(&mut [0u8; 4]).await.unwrap(), 0);
    server.shutdown().await.unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    // A write after the shutdown is refused, not sent in the clear or lost silently.
    assert_eq!(server.write(b"more").await.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
}

/// What a server answers to `input` sent as a client's opening (then the
/// client's write side closed): the bytes it wrote, and its error's kind.
async fn answer_to(input: &[u8], ours: bool) -> (Vec<u8>, Option<io::ErrorKind>) {
    let pki = pki(&[&rustls::version::TLS13], &[]);
    let (server_io, mut client_io) = tokio::io::duplex(256 << 10);
    let config = pki.server.clone();
    let serving = tokio::spawn(async move {
        if ours {
            match TlsServerStream::accept(config, server_io).await {
                Ok(mut stream) => stream.read(&mut [0u8; 1024]).await.err().map(|e| e.kind()),
                Err(err) => Some(err.kind()),
            }
        } else {
            match tokio_rustls::TlsAcceptor::from(config).accept(server_io).await {
                Ok(mut stream) => stream.read(&mut [0u8; 1024]).await.err().map(|e| e.kind()),
                Err(err) => Some(err.kind()),
            }
        }
    });
    client_io.write_all(input).await.unwrap();
    client_io.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, client_io.read_to_end(&mut answer)).await.unwrap().unwrap();
    (answer, serving.await.unwrap())
}

/// A ClientHello record header with `len` bytes announced.
fn handshake_header(len: u16) -> Vec<u8> {
    let mut header = vec![0x16, 0x03, 0x01];
    header.extend_from_slice(&len.to_be_bytes());
    header
}

/// What a server wrote before it closed, and the error it reported.
type Answer = (Vec<u8>, io::ErrorKind);

/// Openings Go's HTTPS server (kube-apiserver's) refuses on the first
/// record's header get Go's bytes (its answers, as a Go server gives them on
/// this machine; integration/e2e/tls_openings.rs checks them against the real
/// API server); the rest get rustls's answer, as tokio-rustls's server gives
/// it.
#[tokio::test]
async fn hostile_openings_get_gos_answer_or_rustls() {
    const GO_HTTP_400: &[u8] = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
    let mut plain_http = b"GET /api HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec();
    plain_http.extend_from_slice(&[b'x'; 100]);
    let mut truncated_hello = handshake_header(300);
    truncated_hello.extend_from_slice(&[0x01, 0x00, 0x01, 0x28, 0x03, 0x03]);
    let mut garbage_hello = handshake_header(64);
    garbage_hello.extend_from_slice(&[0xee; 64]);
    let mut oversized = handshake_header(0xffff);
    oversized.extend_from_slice(&[0u8; 100]);
    use io::ErrorKind::{InvalidData, UnexpectedEof};
    let refused = |answer: &[u8]| Some((answer.to_vec(), InvalidData));
    let go_alert = |description: u8| refused(&[0x15, 0x03, 0x01, 0x00, 0x02, 0x02, description]);
    // (case, opening, Go's answer and the error, where Go decides on the header)
    let cases: Vec<(&str, Vec<u8>, Option<Answer>)> = vec![
        ("plain HTTP", plain_http, refused(GO_HTTP_400)),
        ("PUT, plain", b"PUT /api HTTP/1.1\r\n\r\n".to_vec(), refused(GO_HTTP_400)),
        ("OPTIONS, plain", b"OPTIONS * HTTP/1.1\r\n\r\n".to_vec(), refused(GO_HTTP_400)),
        // Not one of net/http's five starts: Go closes without a word.
        ("DELETE, plain", b"DELETE /api HTTP/1.1\r\n\r\n".to_vec(), refused(&[])),
        ("GET without a slash", b"GET http://x/ HTTP/1.1\r\n\r\n".to_vec(), refused(&[])),
        ("a record over the limit", oversized, go_alert(22)),
        // Go's limit is 16 KiB of data and 2 KiB of expansion: 18,432.
        ("one byte over the limit", handshake_header(18_433), go_alert(22)),
        // Under it but over the plaintext limit: Go reads the record first.
        ("a record at the limit, cut short", handshake_header(18_432), Some((Vec::new(), UnexpectedEof))),
        ("a record at the limit, whole", [handshake_header(18_432), vec![0; 18_432]].concat(), go_alert(22)),
        ("a record of 16 KiB and one byte", [handshake_header(16_385), vec![0; 16_385]].concat(), go_alert(22)),
        (
            "application data first",
            vec![0x17, 0x03, 0x03, 0x00, 0x10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
            refused(&[]),
        ),
        ("an unknown content type", vec![0x63, 0x03, 0x03, 0x00, 0x01, 0x00], refused(&[])),
        ("a version from 16.0 up", vec![0x16, 0x10, 0x00, 0x00, 0x01, 0x00], refused(&[])),
        ("SSLv2", vec![0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15], go_alert(70)),
        // Go waits for a whole header, and an end before it is no error
        // worth an alert (rustls alone refuses a bad first byte at once).
        ("four bytes", b"GET ".to_vec(), Some((Vec::new(), UnexpectedEof))),
        ("a bad first byte alone", vec![0x47], Some((Vec::new(), UnexpectedEof))),
        ("nothing", Vec::new(), None),
        ("a truncated ClientHello", truncated_hello, None),
        ("a ClientHello of garbage", garbage_hello, None),
        ("an empty handshake record", handshake_header(0), None),
    ];
    for (name, input, go) in cases {
        let ours = answer_to(&input, true).await;
        match go {
            Some((answer, kind)) => assert_eq!(ours, (answer, Some(kind)), "{name}: Go's answer"),
            None => assert_eq!(ours, answer_to(&input, false).await, "{name}: rustls's answer"),
        }
        assert!(ours.1.is_some(), "{name}: the handshake must fail");
    }
}

#[tokio::test]
async fn a_record_over_the_limit_after_the_handshake_is_refused_unallocated() {
    for header_len in [0xffffu16, 0x4801] {
        let (mut server, client) = connect(&pki(&[&rustls::version::TLS13], &[]), 256 << 10).await;
        let (mut raw, _) = client.into_inner();
        let mut record = vec![0x17, 0x03, 0x03];
        record.extend_from_slice(&header_len.to_be_bytes());
        record.extend_from_slice(&[0u8; 1_000]);
        raw.write_all(&record).await.unwrap();
        let err = tokio::time::timeout(WAIT, server.read(&mut [0u8; 16])).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "record of {header_len}");
        assert!(server.buffered_capacity() <= MAX_INCOMING + 1_024);
        // Every later call reports the same failure.
        assert_eq!(server.read(&mut [0u8; 16]).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(server.write(b"x").await.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}

#[tokio::test]
async fn a_flipped_bit_is_a_bad_record_not_data() {
    let (mut server, client) = connect(&pki(&[&rustls::version::TLS13], &[]), 256 << 10).await;
    // The client's record encrypted by rustls, a bit of it flipped on the way.
    let (raw, mut session) = client.into_inner();
    let mut raw = raw;
    use std::io::Write as _;
    session.writer().write_all(b"a request").unwrap();
    let mut record = Vec::new();
    session.write_tls(&mut record).unwrap();
    let last = record.len() - 1;
    record[last] ^= 1;
    raw.write_all(&record).await.unwrap();
    let err = tokio::time::timeout(WAIT, server.read(&mut [0u8; 16])).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    // The alert went back: a record of the alert type (encrypted in TLS 1.3,
    // so its outer type is application data) arrived after the handshake's.
    let mut answer = Vec::new();
    drop(server);
    raw.read_to_end(&mut answer).await.unwrap();
    assert!(!answer.is_empty(), "an alert is sent for a record that fails to decrypt");
}

#[tokio::test]
async fn a_vectored_write_is_one_record() {
    let (mut server, client) = connect(&pki(&[&rustls::version::TLS13], &[]), 256 << 10).await;
    let (mut raw, _session) = client.into_inner();
    // Drain what the handshake left (the tickets) first.
    let mut drained = vec![0u8; 64 << 10];
    while let Poll::Ready(Ok(())) = {
        let mut cx = Context::from_waker(Waker::noop());
        let mut buf = ReadBuf::new(&mut drained);
        let polled = Pin::new(&mut raw).poll_read(&mut cx, &mut buf);
        if buf.filled().is_empty() { Poll::Pending } else { polled }
    } {}
    let slices = [io::IoSlice::new(b"3e8\r\n"), io::IoSlice::new(&[b'e'; 1000]), io::IoSlice::new(b"\r\n")];
    let n = server.write_vectored(&slices).await.unwrap();
    assert_eq!(n, 1_007);
    server.flush().await.unwrap();
    let mut header = [0u8; 5];
    raw.read_exact(&mut header).await.unwrap();
    // One application-data record: the 1,007 bytes, the content type, the tag.
    assert_eq!(header[0], 0x17);
    assert_eq!(usize::from(u16::from_be_bytes([header[3], header[4]])), 1_007 + 1 + 16);
}
