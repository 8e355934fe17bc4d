//! The front against hyper: the same bytes for the same responses, the same
//! handling of the connection around them, and every request it does not
//! serve handed to hyper whole.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, Request, StatusCode, header};
use http_body::Frame;
use http_body_util::StreamBody;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{DuplexStream, duplex};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::auth::Peer;
use crate::body::{self, Chunk, EndOnShutdown, RequestBody};
use crate::server::connection::opening::read_opening;
use crate::server::lifecycle::graceful::GracefulShutdown;

/// Far longer than any step here takes: a wait that reaches it is a failure.
const WAIT: Duration = Duration::from_secs(10);

/// Reads one whole response: its head, then a body by Content-Length or to
/// the chunked encoding's end (none for 204/304 or without either).
async fn read_response(client: &mut DuplexStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut piece = [0u8; 4096];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head_len) = parsed.parse(&got).unwrap() {
            let field = |name: &str| {
                parsed.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value.to_vec())
            };
            let complete = if let Some(len) = field("content-length") {
                let len: usize = String::from_utf8(len).unwrap().parse().unwrap();
                got.len() >= head_len + len
            } else if field("transfer-encoding").is_some() {
                got.ends_with(b"0\r\n\r\n")
            } else {
                true
            };
            if complete {
                return got;
            }
        }
        let n = tokio::time::timeout(WAIT, client.read(&mut piece)).await.expect("response incomplete").unwrap();
        assert!(n > 0, "closed inside a response: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&piece[..n]);
    }
}

/// The response with its Date value blanked: the two writers format the
/// same clock, but not necessarily in the same second.
fn without_date(mut response: Vec<u8>) -> String {
    let text = String::from_utf8(std::mem::take(&mut response)).unwrap();
    text.split("\r\n")
        .map(|line| if line.starts_with("date: ") { "date: <now>" } else { line })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// What hyper's HTTP/1.1 server writes for `resp` as the answer to `request`.
async fn hyper_writes(request: &'static [u8], resp: fn() -> Response<ProxyBody>) -> String {
    let (mut client, server) = duplex(1 << 16);
    let service = service_fn(move |_req| async move { Ok::<_, Infallible>(resp()) });
    tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(server), service));
    client.write_all(request).await.unwrap();
    without_date(read_response(&mut client).await)
}

/// What the front writes for `resp`, with the connection kept or not.
async fn front_writes(resp: fn() -> Response<ProxyBody>, keep_alive: bool) -> (String, Written) {
    let (mut client, mut server) = duplex(1 << 16);
    let written = tokio::spawn(async move { write_response(&mut server, resp(), keep_alive, &mut Vec::new()).await });
    let bytes = read_response(&mut client).await;
    (without_date(bytes), written.await.unwrap().unwrap())
}

fn frames(parts: &'static [&'static str]) -> ProxyBody {
    let frames = parts.iter().map(|p| Ok::<_, BoxError>(Frame::data(Chunk::from(Bytes::from_static(p.as_bytes())))));
    body::boxed_chunks(StreamBody::new(futures_util::stream::iter(frames)))
}

fn status(code: StatusCode, resp: Response<ProxyBody>) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    parts.status = code;
    Response::from_parts(parts, body)
}

/// The responses a watch can get: a stream of events, the API server's
/// Status errors, pass-through answers with the upstream's own fields.
/// A response made afresh for each writer.
type MakeResponse = fn() -> Response<ProxyBody>;

const RESPONSES: &[(&str, MakeResponse)] = &[
    ("a stream of events", || {
        let mut resp = Response::new(frames(&["{\"type\":\"ADDED\"}\n", "", "{\"type\":\"MODIFIED\"}\n"]));
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        resp.headers_mut().insert("audit-id", HeaderValue::from_static("abc"));
        resp
    }),
    ("an empty stream", || Response::new(frames(&[]))),
    ("a Status error with its length", || {
        let mut resp = status(StatusCode::FORBIDDEN, Response::new(body::full("{\"kind\":\"Status\"}")));
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        resp.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        resp
    }),
    ("a Content-Length field with a body that knows its length", || {
        let mut resp = status(StatusCode::GONE, Response::new(body::full("gone")));
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from_static("4"));
        resp
    }),
    ("a Content-Length field with a streamed body", || {
        let mut resp = Response::new(frames(&["ab", "cd"]));
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from_static("4"));
        resp
    }),
    ("an empty body", || status(StatusCode::NOT_FOUND, Response::new(body::empty()))),
    ("no content", || status(StatusCode::NO_CONTENT, Response::new(body::empty()))),
    ("a reason of the upstream's", || {
        let mut resp = status(StatusCode::TOO_MANY_REQUESTS, Response::new(body::full("slow down")));
        resp.extensions_mut().insert(hyper::ext::ReasonPhrase::from_static(b"Slow Down"));
        resp
    }),
    ("a status without a canonical reason", || {
        status(StatusCode::from_u16(599).unwrap(), Response::new(body::empty()))
    }),
    ("repeated fields, a Date of its own, a Connection close", || {
        let mut resp = Response::new(frames(&["x"]));
        let h = resp.headers_mut();
        h.append(header::WARNING, HeaderValue::from_static("299 - \"one\""));
        h.append(header::WARNING, HeaderValue::from_static("299 - \"two\""));
        h.insert(header::DATE, HeaderValue::from_static("Tue, 01 Dec 2026 00:00:00 GMT"));
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }),
    ("a Transfer-Encoding field", || {
        let mut resp = Response::new(frames(&["x"]));
        resp.headers_mut().insert(header::TRANSFER_ENCODING, HeaderValue::from_static("gzip"));
        resp
    }),
    ("a Connection option to keep", || {
        let mut resp = Response::new(body::full("x"));
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        resp
    }),
];

#[tokio::test]
async fn the_front_writes_every_response_as_hyper_does() {
    let request: &[u8] = b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n";
    for (what, resp) in RESPONSES {
        let hyper = hyper_writes(request, *resp).await;
        let (front, written) = front_writes(*resp, true).await;
        assert_eq!(front, hyper, "{what}");
        let closes = hyper.contains("\r\nconnection: close\r\n");
        assert_eq!(written, if closes { Written::Close } else { Written::KeepAlive }, "{what}");
    }
}

/// A connection that will not be kept (hyper's graceful shutdown, or a
/// client's `Connection: close`) says so in the answer.
#[tokio::test]
async fn an_answer_on_a_connection_not_kept_says_close_as_hyper_does() {
    let request: &[u8] = b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n";
    for (what, resp) in RESPONSES {
        if *what == "a Transfer-Encoding field" {
            // hyper writes `, chunked` after the next special field too
            // (`connection: close, chunked`): a slip of hyper's not copied.
            // No handler sets Transfer-Encoding (pass-through removes it).
            continue;
        }
        let hyper = hyper_writes(request, *resp).await;
        let (front, written) = front_writes(*resp, false).await;
        assert_eq!(front, hyper, "{what}");
        assert_eq!(written, Written::Close, "{what}");
    }
}

#[test]
fn chunk_sizes_are_upper_case_hex() {
    let size = |n| {
        let mut s = ChunkSize::new(n);
        s.copy_to_bytes(s.remaining())
    };
    assert_eq!(size(1), "1\r\n");
    assert_eq!(size(0x1a2f), "1A2F\r\n");
    assert_eq!(size(usize::MAX), format!("{:X}\r\n", usize::MAX));
}

/// How a handler saw its requests.
#[derive(Clone, Default)]
struct Seen {
    /// Requests whose head the front read.
    front: Arc<AtomicUsize>,
    /// Requests hyper read.
    hyper: Arc<AtomicUsize>,
    /// Watch bodies dropped.
    dropped: Arc<AtomicUsize>,
    /// Ends the watch streams, as the server's stop does at shutdown.
    streams_stop: CancellationToken,
}

/// Counts the body of a watch as dropped when it is.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Handler for Seen {
    /// A watch (`?watch=1`) streams one event and then waits, ended by
    /// `streams_stop`; `?watch=1&end=1` streams one event and ends;
    /// anything else is answered "other".
    async fn handle(&self, req: Request<RequestBody>, _peer: Peer) -> Response<ProxyBody> {
        match req.body() {
            RequestBody::Empty => self.front.fetch_add(1, Ordering::SeqCst),
            RequestBody::Hyper(_) => self.hyper.fetch_add(1, Ordering::SeqCst),
        };
        let query = req.uri().query().unwrap_or_default();
        if !query.contains("watch=1") {
            return Response::new(body::full("other"));
        }
        let event = Ok::<_, BoxError>(Frame::data(Chunk::from(Bytes::from_static(b"{\"type\":\"ADDED\"}\n"))));
        let guard = DropCount(self.dropped.clone());
        let rest = futures_util::stream::pending().map(move |f: Result<Frame<Chunk>, BoxError>| {
            let _ = &guard;
            f
        });
        if query.contains("end=1") {
            return Response::new(frames(&["{\"type\":\"ADDED\"}\n"]));
        }
        let stream = futures_util::stream::iter([event]).chain(rest);
        Response::new(body::boxed_chunks(EndOnShutdown::new(StreamBody::new(stream), self.streams_stop.clone())))
    }
}

/// A connection served from its first byte as the listener serves it, and
/// the client's end.
async fn connect(seen: &Seen, graceful: &GracefulShutdown) -> (DuplexStream, tokio::task::JoinHandle<()>) {
    let (client, mut server) = duplex(1 << 16);
    let conn = Conn::for_test(seen.clone(), graceful.watcher());
    let served = tokio::spawn(async move {
        let opening = read_opening(&mut server).await.unwrap();
        serve(conn, Rewind::new(server, opening)).await
    });
    (client, served)
}

/// Reads until `needle` has arrived; returns everything read.
async fn read_until(client: &mut DuplexStream, needle: &str) -> String {
    let mut got = Vec::new();
    let mut piece = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let n = tokio::time::timeout(WAIT, client.read(&mut piece)).await.expect("waited for ever").unwrap();
        assert!(n > 0, "closed before {needle:?}: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&piece[..n]);
    }
    String::from_utf8(got).unwrap()
}

async fn closed(client: &mut DuplexStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, client.read_to_end(&mut rest)).await.is_ok_and(|r| r.is_ok())
}

#[tokio::test]
async fn watches_are_served_by_the_front_and_rewatches_stay_there() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, _served) = connect(&seen, &graceful).await;
    for _ in 0..3 {
        client.write_all(b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
        let answer = without_date(read_response(&mut client).await);
        assert_eq!(
            answer,
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: <now>\r\n\r\n11\r\n{\"type\":\"ADDED\"}\n\r\n0\r\n\r\n"
        );
    }
    assert_eq!((seen.front.load(Ordering::SeqCst), seen.hyper.load(Ordering::SeqCst)), (3, 0));
}

/// The first request that is not a watch takes the connection to hyper,
/// its bytes and those pipelined behind it intact, for good.
#[tokio::test]
async fn the_first_other_request_goes_to_hyper_with_everything_behind_it() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, _served) = connect(&seen, &graceful).await;
    client.write_all(b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_response(&mut client).await;
    // Two requests in one write: a POST with a body, then a watch.
    client
        .write_all(
            b"POST /api/v1/pods HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{}\
              GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n",
        )
        .await
        .unwrap();
    let answers = read_until(&mut client, "0\r\n\r\n").await;
    assert!(answers.contains("\r\n\r\nother") && answers.contains("ADDED"), "{answers}");
    assert_eq!((seen.front.load(Ordering::SeqCst), seen.hyper.load(Ordering::SeqCst)), (1, 2));
}

/// Requests the front does not take, each as the connection's first: hyper
/// reads them (and answers what it cannot parse itself).
#[tokio::test]
async fn requests_the_front_does_not_take_reach_hyper_whole() {
    let cases: &[(&str, &[u8], &str)] = &[
        ("not a watch", b"GET /api/v1/pods HTTP/1.1\r\nhost: a\r\n\r\n", "other"),
        ("HTTP/1.0", b"GET /api/v1/pods?watch=1&end=1 HTTP/1.0\r\nhost: a\r\n\r\n", "ADDED"),
        ("a HEAD", b"HEAD /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n", "HTTP/1.1 200 OK"),
        ("a body", b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n", "ADDED"),
        (
            "chunked",
            b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            "ADDED",
        ),
        (
            "an upgrade",
            b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
            "ADDED",
        ),
        (
            "a close",
            b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\nConnection: Close\r\n\r\n",
            "connection: close",
        ),
        (
            "an expectation",
            b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\n\r\n",
            "ADDED",
        ),
        ("the absolute form", b"GET http://a/api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n", "ADDED"),
        ("a malformed head", b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nbad header\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        ("a bad version", b"GET /api/v1/pods?watch=1 HTTP/9.9\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ];
    for (what, request, expected) in cases {
        let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
        let (mut client, _served) = connect(&seen, &graceful).await;
        client.write_all(request).await.unwrap();
        let answer = read_until(&mut client, expected).await;
        assert_eq!(seen.front.load(Ordering::SeqCst), 0, "{what}: served by the front: {answer}");
    }
}

/// A head larger than the front reads goes to hyper, which takes up to
/// 1 MiB.
#[tokio::test]
async fn a_head_too_large_for_the_front_goes_to_hyper() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, _served) = connect(&seen, &graceful).await;
    let big = "x".repeat(MAX_HEAD_BYTES);
    let request = format!("GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\nx-big: {big}\r\n\r\n");
    let writer = tokio::spawn(async move {
        client.write_all(request.as_bytes()).await.unwrap();
        client
    });
    let mut client = writer.await.unwrap();
    read_until(&mut client, "ADDED").await;
    assert_eq!((seen.front.load(Ordering::SeqCst), seen.hyper.load(Ordering::SeqCst)), (0, 1));
}

/// A head sent a few bytes at a time is read whole.
#[tokio::test]
async fn a_head_in_pieces_is_read_whole() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, _served) = connect(&seen, &graceful).await;
    for piece in b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n".chunks(7) {
        client.write_all(piece).await.unwrap();
        tokio::task::yield_now().await;
    }
    read_until(&mut client, "0\r\n\r\n").await;
    assert_eq!(seen.front.load(Ordering::SeqCst), 1);
}

/// A client that closes its connection while its watch streams: the watch
/// is dropped and the connection's task ends.
#[tokio::test]
async fn a_client_closing_ends_its_watch() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, served) = connect(&seen, &graceful).await;
    client.write_all(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_until(&mut client, "ADDED").await;
    assert_eq!(seen.dropped.load(Ordering::SeqCst), 0);
    drop(client);
    tokio::time::timeout(WAIT, served).await.expect("the connection outlived its client").unwrap();
    assert_eq!(seen.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(graceful.count(), 0);
}

/// A request pipelined behind a streaming watch is answered once the watch
/// ends.
#[tokio::test]
async fn a_request_pipelined_behind_a_watch_is_answered_after_it() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, _served) = connect(&seen, &graceful).await;
    client.write_all(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_until(&mut client, "ADDED").await;
    client.write_all(b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    // Still streaming: the second is kept until the first ends.
    tokio::task::yield_now().await;
    assert_eq!(seen.front.load(Ordering::SeqCst), 1);
    seen.streams_stop.cancel();
    let rest = read_until(&mut client, "ADDED\"}\n\r\n0\r\n\r\n").await;
    assert!(rest.starts_with("0\r\n\r\nHTTP/1.1 200 OK\r\n"), "{rest}");
    assert_eq!(seen.front.load(Ordering::SeqCst), 2);
}

/// At shutdown a watch ends (its stream does), the connection closes after
/// it, and an idle connection closes at once.
#[tokio::test]
async fn shutdown_ends_streaming_and_idle_connections() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut streaming, _s) = connect(&seen, &graceful).await;
    let (mut idle, _i) = connect(&seen, &graceful).await;
    streaming.write_all(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_until(&mut streaming, "ADDED").await;
    idle.write_all(b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_response(&mut idle).await;

    seen.streams_stop.cancel();
    tokio::time::timeout(WAIT, graceful.shutdown()).await.expect("shutdown waited for ever");
    assert!(closed(&mut idle).await);
    let mut rest = Vec::new();
    streaming.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"0\r\n\r\n", "the watch did not end cleanly");
}

/// A watch pipelined behind one the shutdown ends is not served (its stream
/// would end at once, empty: a "very short watch" client-go lists again
/// after) but refused with the API server's 429 for a server shutting down,
/// and the connection closed.
#[tokio::test]
async fn a_watch_pipelined_behind_one_the_shutdown_ends_gets_the_shutdown_429() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, served) = connect(&seen, &graceful).await;
    client.write_all(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_until(&mut client, "ADDED").await;
    client.write_all(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    tokio::task::yield_now().await;

    seen.streams_stop.cancel();
    tokio::time::timeout(WAIT, graceful.shutdown()).await.expect("shutdown waited for ever");
    tokio::time::timeout(WAIT, served).await.expect("the connection stayed open").unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    let rest = String::from_utf8(rest).unwrap();
    let refused = rest.strip_prefix("0\r\n\r\n").expect("the first watch did not end cleanly");
    assert!(refused.starts_with("HTTP/1.1 429 Too Many Requests\r\n"), "{refused}");
    assert!(refused.contains("\r\nretry-after: 5\r\n") && refused.contains("\r\nconnection: close\r\n"), "{refused}");
    assert!(refused.ends_with("The apiserver is shutting down, please try again later.\n"), "{refused}");
    assert_eq!(seen.front.load(Ordering::SeqCst), 1, "the second watch reached the handler");
}

/// A connection that sends no head within hyper's header read timeout is
/// closed, idle between requests included.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_header_read_timeout() {
    let (seen, graceful) = (Seen::default(), GracefulShutdown::new());
    let (mut client, served) = connect(&seen, &graceful).await;
    client.write_all(b"GET /api/v1/pods?watch=1&end=1 HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    read_response(&mut client).await;
    client.write_all(b"GET /api/v1/pods?wat").await.unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(HEADER_READ_TIMEOUT - Duration::from_secs(1), client.read(&mut byte)).await;
    assert!(early.is_err(), "closed before the timeout");
    tokio::time::timeout(Duration::from_secs(2), served).await.expect("not closed at the timeout").unwrap();
}

#[tokio::test]
async fn the_head_buffer_is_freed_when_a_watch_starts() {
    let mut io: &[u8] = b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\n";
    let mut read = Vec::new();
    assert!(matches!(head::read_head(&mut io, &mut read).await.unwrap(), Head::Watch(_)));
    assert_eq!(read.capacity(), 0, "the head's buffer is kept while the watch streams");

    let mut io: &[u8] = b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nhost: a\r\n\r\nGET /next";
    assert!(matches!(head::read_head(&mut io, &mut read).await.unwrap(), Head::Watch(_)));
    assert_eq!(read, b"GET /next", "pipelined bytes were lost");
}
