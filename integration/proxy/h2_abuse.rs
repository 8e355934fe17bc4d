//! HTTP/2 clients that try to wear watchmux down without a request ever
//! being served: a CONTINUATION flood (CVE-2024-27316's kind) in raw frames,
//! bounded; watchmux must end the connection well within the bound and go on
//! serving other clients. (Rapid reset is tested on the listener itself, in
//! `server::connection::listener::tests`, where its handler can be made to stall.)

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::WAIT;
use crate::harness::*;
use watchmux::body;

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Bytes of one header block the CONTINUATION flood sends at most.
const FLOOD_BYTES: usize = 8 << 20;
/// The largest frame payload a peer may send before SETTINGS say otherwise.
const FRAME: usize = 16 << 10;

async fn ok_upstream() -> std::net::SocketAddr {
    fake_upstream(handler(|_req| async move { Response::new(body::full("ok")) })).await
}

/// How a CONTINUATION flood ended.
#[derive(Debug)]
struct Flood {
    /// Bytes of frames the client wrote before the server stopped it.
    written: usize,
    /// The server's GOAWAY error code and debug data, if it sent one
    /// before closing.
    goaway: Option<(u32, Bytes)>,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads frames until GOAWAY, end of file or an error (a reset).
async fn read_until_goaway<R: AsyncRead + Unpin>(mut r: R) -> Option<(u32, Bytes)> {
    let mut head = [0u8; 9];
    loop {
        r.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).await.ok()?;
        if head[3] == 0x7 && len >= 8 {
            let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
            return Some((code, Bytes::copy_from_slice(&payload[8..])));
        }
    }
}

/// Opens an h2c connection on `io` and sends one request's header block
/// that never ends: a HEADERS frame without END_HEADERS, then CONTINUATION
/// frames of [`FRAME`] bytes, all one header value that hpack cannot decode
/// before its end, up to [`FLOOD_BYTES`]. Stops when a write fails or the
/// server has answered.
async fn continuation_flood<IO: AsyncRead + AsyncWrite + Send + 'static>(io: IO) -> Flood {
    let (r, mut w) = tokio::io::split(io);
    let reader = tokio::spawn(read_until_goaway(r));

    // :method GET, :scheme http, :path / (static table), then a literal
    // "x-flood" whose value is announced as the whole flood long.
    let mut block = vec![0x82, 0x86, 0x84, 0x00, 7];
    block.extend_from_slice(b"x-flood");
    block.push(0x7f);
    let mut rest = FLOOD_BYTES - 127;
    while rest >= 0x80 {
        block.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    block.push(rest as u8);
    block.resize(FRAME, b'a');

    let mut opening = H2_PREFACE.to_vec();
    opening.extend(frame(0x4, 0, 0, &[]));
    opening.extend(frame(0x1, 0, 1, &block));
    let continuation = frame(0x9, 0, 1, &[b'a'; FRAME]);
    let mut written = 0;
    let mut next: &[u8] = &opening;
    while written < FLOOD_BYTES && !reader.is_finished() {
        match tokio::time::timeout(WAIT, w.write_all(next)).await {
            Ok(Ok(())) => written += next.len(),
            Ok(Err(_)) => break,
            Err(_) => panic!("the server neither read the flood nor closed, after {written} bytes"),
        }
        next = &continuation;
    }
    let goaway = tokio::time::timeout(WAIT, reader).await.expect("the flood was neither refused nor closed").unwrap();
    Flood { written, goaway }
}

/// The server ended the flood (the helper waits for that): if with a
/// GOAWAY, then ENHANCE_YOUR_CALM, or a compression error should hpack give
/// up first; without one, the connection was closed or reset.
fn assert_refused(flood: &Flood) {
    const ENHANCE_YOUR_CALM: u32 = 0xb;
    const COMPRESSION_ERROR: u32 = 0x9;
    if let Some((code, debug)) = &flood.goaway {
        assert!(matches!(*code, ENHANCE_YOUR_CALM | COMPRESSION_ERROR), "GOAWAY {code:#x} {debug:?}");
    }
}

/// Over TCP the kernel buffers on both sides take an unknown share of the
/// flood, so only the end is checked here; the unix-socket test bounds the
/// bytes.
#[tokio::test]
async fn continuation_flood_over_h2c_is_refused_and_others_are_still_served() {
    let proxy = start_proxy(ok_upstream().await, &[]).await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let flood = continuation_flood(tcp).await;
    eprintln!("CONTINUATION flood over TCP: {flood:?}");
    assert_refused(&flood);
    assert_eq!(get(proxy.addr, "/api").await.status(), StatusCode::OK);
    proxy.shutdown().await;
}

/// A unix socket holds at most its send buffer (about 200 KiB) between
/// writer and reader, so what the client got written is what the server
/// read, give or take that: it must be near the 1 MiB header limit, not the
/// 8 MiB sent.
#[tokio::test]
async fn continuation_flood_on_the_unix_socket_is_cut_off_near_the_header_limit() {
    let (proxy, sock, _dir) = proxy_with_unix_socket().await;
    let flood = continuation_flood(UnixStream::connect(&sock).await.unwrap()).await;
    eprintln!("CONTINUATION flood over a unix socket: {flood:?}");
    assert_refused(&flood);
    assert!(flood.written < 2 << 20, "the server read about {} bytes of one header block", flood.written);
    assert_eq!(unix_get(&sock).await, "ok");
    proxy.shutdown().await;
}

/// HTTP/1.1 and h2c by prior knowledge are both served on the unix socket.
#[tokio::test]
async fn unix_socket_serves_http1_and_h2c() {
    let (proxy, sock, _dir) = proxy_with_unix_socket().await;
    assert_eq!(unix_get(&sock).await, "ok");

    let resp = h2_get(UnixStream::connect(&sock).await.unwrap(), "http://watchmux/api").await;
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "ok");
    proxy.shutdown().await;
}

/// watchmux in front of an upstream that answers "ok", also serving on a
/// unix socket in a directory that lives as long as the returned guard.
async fn proxy_with_unix_socket() -> (Proxy, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    let proxy = start_proxy(ok_upstream().await, &["--listen-unix", sock.to_str().unwrap()]).await;
    (proxy, sock, dir)
}

/// A GET of /api over HTTP/1.1 on the unix socket; the body.
async fn unix_get(sock: &Path) -> String {
    let stream = UnixStream::connect(sock).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get("/api").header("host", "watchmux").body(Full::<Bytes>::default()).unwrap();
    let resp = tokio::time::timeout(WAIT, send.send_request(req)).await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}
